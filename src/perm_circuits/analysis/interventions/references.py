"""Reference data for ablations: the binding-free reference batch and the resample draw.

The binding-free reference is the permutation task's; the resample draw lives in the task-free
intervention core (:mod:`perm_circuits.analysis.interventions.core`) and is re-exported here.
"""

from __future__ import annotations

import torch

from perm_circuits.analysis.interventions.checks import check_seed
from perm_circuits.analysis.interventions.core import resample_rows
from perm_circuits.tasks.permutation_data import Batch, TaskConfig, make_batch

__all__ = ["binding_free_reference", "resample_rows"]


def binding_free_reference(
    task_config: TaskConfig,
    n: int = 5000,
    seed: int = 1234,
    *,
    queries: Batch | None = None,
    split: str = "test",
) -> Batch:
    """Reference sequences with the queries of one sample and the answers of an independent permutation.

    ``seed`` seeds the reference batch (the test-set seed by default, 1234) and, plus one, the draw
    of the independent permutations.

    The IOI paper (Wang et al. 2022, section 3) ablates with the mean over the "ABC" distribution,
    which keeps a prompt's template but destroys the information the circuit uses.  The analogue
    here keeps every query and the repeat structure and destroys the (x, y) binding:

    - queries: ``xs`` (the query order, including ``x_V = x_1`` on repeated rows) and
      ``repeated`` / ``repeat_source`` are copied from ``queries``; by default from
      ``make_batch(task_config, n, split=split, seed=seed)``, which for the default ``n`` and
      ``seed`` is exactly the fixed test set ``make_test_set(task_config)``, row for row;
    - answers: an independent permutation ``q`` is drawn per row from the same split (generator
      seeded with ``seed + 1``) and each answer is ``y_k = q(x_k)``; ``perms`` holds ``q``.

    So row ``i`` shows the same queries at the same positions as ``queries`` row ``i`` (tokens,
    positions and repeat structure are unchanged, and every row is still a valid sequence of
    the task), but which y is bound to which x is independent of the original sample: with
    ``pairing="row"`` resample ablation replaces a component's activation on sample ``i`` by its
    activation on the same queries with other answers.  As a distribution (for mean ablation)
    the batch equals the task's; only the row-to-row pairing differs.  With a pool of ``m``
    permutations a row keeps its own answers with probability ``1/m`` (1/24 on the test split).
    ``n`` is ignored when ``queries`` is given.

    Why not a reference without any binding: every sequence of distinct (x, y) pairs is
    consistent with some permutation, so a token-level reference cannot lack a binding of its
    own; what it can lack is the *sample's* binding, which is what this construction removes.
    """
    if not isinstance(task_config, TaskConfig):
        raise TypeError(f"task_config must be a TaskConfig, got {type(task_config).__name__}")
    check_seed(seed)
    if queries is None:
        queries = make_batch(task_config, n, split=split, seed=seed)
    elif not isinstance(queries, Batch):
        raise TypeError(f"queries must be a Batch or None, got {type(queries).__name__}")
    elif queries.V != task_config.V:
        raise ValueError(f"queries have V={queries.V}, task_config has V={task_config.V}")
    answers = make_batch(task_config, len(queries), split=split, seed=seed + 1, repeat_ratio=0.0)
    perms = answers.perms.to(queries.xs.device)  # beside the queries
    xs = queries.xs
    ys = perms.gather(1, xs - 1)  # y_k = q(x_k)
    seq = torch.stack([xs, ys], dim=2).flatten(1)
    return Batch(inputs=seq[:, :-1].contiguous(), targets=seq[:, 1:].contiguous(), mask=queries.mask.clone(),
        xs=xs.clone(), ys=ys, perms=perms.clone(), repeated=queries.repeated.clone(),
        repeat_source=queries.repeat_source.clone())
