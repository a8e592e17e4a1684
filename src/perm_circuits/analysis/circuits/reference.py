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

__all__ = ["merge_skill_metrics", "reference_label", "skill_parts"]


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
