"""The ablation reference of the circuit criteria: ``reference="test"`` / ``"skill"`` (the vocabulary of
:data:`~perm_circuits.ablation_modes.REFERENCES`) or a batch of one's own.

On the permutation task, ``"skill"`` measures each subgroup (elimination, recall) with the mean over, and the
resample source drawn from, its own rows: :func:`~perm_circuits.analysis.circuits.criteria.circuit_metrics`
runs once per skill and :func:`merge_skill_metrics` joins the two results.  On any other task the one skill is
the task itself, so ``"skill"`` is the test set.
"""

from __future__ import annotations

from dataclasses import replace

from perm_circuits.ablation_modes import check_reference_name
from perm_circuits.analysis.circuits.results import CircuitMetrics

__all__ = ["merge_skill_metrics", "reference_label", "skill_parts", "skill_split"]


def reference_label(reference: object) -> str:
    """``"test"`` for None or ``"test"``, ``"skill"`` for ``"skill"``, ``"custom"`` for a batch; a string
    outside :data:`~perm_circuits.ablation_modes.REFERENCES` is refused (ValueError naming it)."""
    if reference is None:
        return "test"
    if isinstance(reference, str):
        return check_reference_name(reference)
    return "custom"


def skill_parts(test_set):
    """``(elimination rows, recall rows)`` of a permutation batch (ValueError when a skill has no row)."""
    from perm_circuits.tasks.permutation_data import permutation_batch

    test_set = permutation_batch(test_set)  # the repeat flag, rebuilt from the tokens where it is missing
    repeated = test_set.extras["repeated"].bool()
    if not bool(repeated.any()) or bool(repeated.all()):
        raise ValueError("reference='skill' needs both skills in the test set (rows whose last query repeats and "
                         f"rows whose last query is new); got {int(repeated.sum())} repeated of {len(test_set)}")
    return test_set.subset(~repeated), test_set.subset(repeated)


def merge_skill_metrics(elimination: CircuitMetrics, recall: CircuitMetrics) -> CircuitMetrics:
    """One result from a per-skill pair: the elimination subgroup of the first, the recall subgroup of the
    second, ``reference = "skill"``."""
    return replace(elimination, n_samples=elimination.n_samples + recall.n_samples, recall=recall.recall,
                   reference="skill")


def skill_split(model, label: str, test_set, *, task, metric, config, n: int, seed: int):
    """``(elimination rows, recall rows)`` of the test set when ``label`` is ``"skill"`` and the model's
    own task measures each skill (the permutation task, with no ``task=`` / ``metric=`` / token ids
    overriding it; ``config``: the study's settings, default the model's); ``None`` otherwise (the reference is then the test set or the given batch)."""
    from torch import Tensor

    from perm_circuits.analysis.interventions.checks import check_int, check_task_config
    from perm_circuits.tasks.base import own_analysis
    from perm_circuits.tasks.permutation_data import make_test_set

    if label != "skill" or task is not None or metric is not None or isinstance(test_set, Tensor):
        return None
    if own_analysis(model, "circuit_problem") is None:
        return None
    check_int("n", n, 1)
    if test_set is None:
        test_set = make_test_set(check_task_config(model, config, "task"), n=n, seed=seed)
    return skill_parts(test_set)
