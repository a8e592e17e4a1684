"""The binding-free reference batch of the permutation task (the resample draw, from
:mod:`perm_circuits.analysis.interventions.core`, is re-exported here)."""

from __future__ import annotations

import torch

from perm_circuits.analysis.interventions.checks import check_seed, study_config
from perm_circuits.analysis.interventions.core import resample_rows
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch, permutation_batch

__all__ = ["binding_free_reference", "resample_rows"]


def binding_free_reference(
    task: PermutationTask | TaskConfig,
    n: int = 5000,
    seed: int = 1234,
    *,
    queries: TaskBatch | None = None,
    split: str = "test",
) -> TaskBatch:
    """Reference sequences with the queries of one sample and the answers of an independent permutation.

    ``task``: the permutation task (a :class:`~perm_circuits.tasks.PermutationTask` or its bare
    ``TaskConfig``, the same either way).

    ``seed`` seeds the reference batch (the test-set seed by default, 1234) and, plus one, the
    independent permutations.  The analogue of the IOI paper's "ABC" reference (Wang et al. 2022,
    section 3), which keeps a prompt's template but destroys the information the circuit uses:
    here every query and the repeat structure are kept and the (x, y) binding is destroyed.

    - queries: ``xs`` (including ``x_V = x_1`` on repeated rows), ``repeated`` and
      ``repeat_source`` are copied from ``queries``, by default
      ``make_batch(task, n, split=split, seed=seed)`` (for the default ``n`` and ``seed``
      exactly the fixed test set ``make_test_set(task)``, row for row; ``n`` is ignored
      when ``queries`` is given);
    - answers: an independent permutation ``q`` per row from the same split, ``y_k = q(x_k)``;
      ``perms`` holds ``q``.

    Row ``i`` is a valid sequence with ``queries`` row ``i``'s queries at the same positions, but
    which y is bound to which x is independent of the original sample (it keeps its own answers
    with probability ``1/m`` for a pool of ``m`` permutations, 1/24 on the test split).  As a
    distribution (for mean ablation) the batch equals the task's; only the row pairing differs.
    No token-level reference can lack a binding of its own (every sequence of distinct (x, y)
    pairs fits some permutation); what it lacks is the *sample's* binding.
    """
    task_config = study_config(task)
    check_seed(seed)
    if queries is None:
        queries = make_batch(task_config, n, split=split, seed=seed)
    elif not isinstance(queries, TaskBatch):
        raise TypeError(f"queries must be a TaskBatch or None, got {type(queries).__name__}")
    elif queries.tokens.shape[1] != task_config.seq_len:
        raise ValueError(f"queries have V={(queries.tokens.shape[1] + 1) // 2}, task has V={task_config.V}")
    else:
        queries = permutation_batch(queries)
    answers = make_batch(task_config, len(queries), split=split, seed=seed + 1, repeat_ratio=0.0)
    perms = answers.extras["perms"].to(queries.extras["xs"].device)  # beside the queries
    xs = queries.extras["xs"]
    ys = perms.gather(1, xs - 1)  # y_k = q(x_k)
    seq = torch.stack([xs, ys], dim=2).flatten(1)
    extras = {"xs": xs.clone(), "ys": ys, "perms": perms.clone(), "repeated": queries.extras["repeated"].clone(),
              "repeat_source": queries.extras["repeat_source"].clone()}
    return TaskBatch(seq[:, :-1].contiguous(), seq[:, 1:].contiguous(), queries.mask.clone(), extras)
