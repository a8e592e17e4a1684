"""The study's ablations against a per-skill reference: each skill ablated with values from its own rows.

:func:`~perm_circuits.analysis.study.verdict.head_roles` measures every component's ablation on the test set
with ``reference`` (:data:`~perm_circuits.ablation_modes.REFERENCES`) saying where the ablated values come
from.  ``"test"`` is :func:`~perm_circuits.analysis.interventions.permutation_table.ablation_runs` on the whole
test set (the mean over, and the resample source drawn from, both skills mixed).  ``"skill"`` runs it twice,
once on the elimination rows (the last query is new) and once on the recall rows (it repeats), each its own
reference, and merges the two tables: elimination accuracy and loss from the first, recall accuracy and loss
from the second, the steps 1..V-1 MAE, the loss and ``follows_reference`` as the row-weighted mean of both.
The logits are concatenated (elimination rows first), so the recall signals read both kinds of row as before.

Why it matters (Heimersheim & Nanda 2024 on the choice of the ablation distribution): a component that only
tells the skills apart, such as a duplicate-token head, has one mean output per skill.  Against the test set,
mean-ablating it gives each repeated row a blend that mostly looks like "new query", so recall falls; against
the recall rows themselves, its mean output still says "repeated", and recall survives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from perm_circuits.analysis.interventions.ablation_table import AblationRow, AblationTable
from perm_circuits.analysis.interventions.permutation_table import ablation_runs, study_table
from perm_circuits.analysis.study.joint_ablation import joint_eliminator_rows
from perm_circuits.analysis.study.scores import HeadScores
from perm_circuits.hooks import HookList
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["REFERENCE_LABELS", "skill_reference_runs", "verdict_reference"]

REFERENCE_LABELS = {"test": "the test set", "skill": "each skill's own rows", "custom": "a batch of one's own"}
"""How each reference is named in sentences and in ``AblationTable.reference``."""


def verdict_reference(reference: object, *, batch_allowed: bool = True) -> tuple[str, TaskBatch | None]:
    """``(label, batch)`` of a roles ``reference``: a name of :data:`~perm_circuits.ablation_modes.REFERENCES`
    (``batch`` None) or, with ``batch_allowed``, a TaskBatch of one's own (label ``"custom"``); ``"custom"`` is
    accepted as a label where a result is judged (``batch_allowed=False``).  Anything else: ValueError/TypeError
    naming it."""
    from perm_circuits.ablation_modes import check_reference_name

    if isinstance(reference, TaskBatch) and batch_allowed:
        return "custom", reference
    if reference == "custom" and not batch_allowed:
        return "custom", None
    if not isinstance(reference, str):
        raise TypeError(f"reference must be a name from REFERENCES or a TaskBatch, got {type(reference).__name__}")
    return check_reference_name(reference), None


def _weighted(a: float, b: float, na: int, nb: int) -> float:
    values = [(v, n) for v, n in ((a, na), (b, nb)) if n and not math.isnan(v)]
    total = sum(n for _, n in values)
    return sum(v * n for v, n in values) / total if total else math.nan


def _merge_row(elim: AblationRow, recall: AblationRow, n_elim: int, n_recall: int) -> AblationRow:
    metrics = {**elim.metrics, "recall_accuracy": recall["recall_accuracy"], "recall_loss": recall["recall_loss"],
               **{name: _weighted(elim[name], recall[name], n_elim, n_recall)
                  for name in ("early_mae_train", "follows_reference")}}
    return replace(elim, metrics=metrics, test_loss=_weighted(elim.test_loss, recall.test_loss, n_elim, n_recall))


def skill_reference_runs(
    model, hows: Sequence[str], batch: TaskBatch, config: TaskConfig, hooks: HookList, seed: int, scores: HeadScores,
) -> tuple[AblationTable, dict[tuple[str, str], Tensor], TaskBatch, tuple[AblationRow, ...]]:
    """Every component's ablation under each mode of ``hows`` with each skill's own rows as the reference.

    Returns the merged :class:`AblationTable` (``reference`` = ``"each skill's own rows"``), the logits of
    every (component, how) on ``ordered`` (the elimination rows of ``batch`` then its recall rows), ``ordered``
    itself, and the joint ablation rows of the heads sharing the eliminator pattern (each skill's own
    hooks; their recall signals are not measured under this reference).  Needs both skills in ``batch``.
    """
    repeated = batch.extras["repeated"].bool()
    if not bool(repeated.any()) or bool(repeated.all()):
        raise ValueError("reference='skill' needs both skills in the test set (rows whose last query repeats and "
                         f"rows whose last query is new); got {int(repeated.sum())} repeated of {len(batch)}")
    parts = (batch.subset(~repeated), batch.subset(repeated))
    runs = [ablation_runs(model, tuple(hows), part, config=config, hooks=hooks, seed=seed) for part in parts]
    joints = [joint_eliminator_rows(model, scores, part, config, hows, hooks, single)[0]
              for part, (_, single, _) in zip(parts, runs)]
    (t_elim, _, l_elim), (t_recall, _, l_recall) = runs
    n_elim, n_recall = len(parts[0]), len(parts[1])
    rows = tuple(_merge_row(a, t_recall.get(a.component, a.how), n_elim, n_recall) for a in t_elim.rows)
    table = study_table(t_elim.model_name, rows, reference=REFERENCE_LABELS["skill"], positions=t_elim.positions,
                        n_samples=len(batch), n_recall=n_recall, seed=seed)
    logits = {key: torch.cat([value, l_recall[key]]) for key, value in l_elim.items()}
    ordered = batch.subset(torch.cat([(~repeated).nonzero()[:, 0], repeated.nonzero()[:, 0]]))
    joint = tuple(_merge_row(a, b, n_elim, n_recall) for a, b in zip(*joints)) if all(joints) else ()
    return table, logits, ordered, joint

