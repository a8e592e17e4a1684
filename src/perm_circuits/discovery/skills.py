"""One discovered circuit per skill: the picture every report opens with.

A *skill* is a slice of the test set and the position where it is scored.  For the permutation
study's models there are two, at the last position (the fifth answer): *elimination* (sequences
whose last query is new: the answer is the one value not yet used) and *recall* (sequences whose
last query repeats an earlier one: the answer is that query's earlier answer).  For any other
task there is one skill, ``"task"``: its test set with its own loss mask.  Each skill's circuit
is found by one edge-level method (:mod:`perm_circuits.discovery`; ACDC under resample ablation by
default) with the mean target log-probability at the skill's positions as the metric.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from perm_circuits.checks import check_int
from perm_circuits.discovery.result import DiscoveryResult
from perm_circuits.tasks.base import TaskBatch

__all__ = ["discover_skills", "skill_batches"]


def _last_position_only(batch: TaskBatch) -> TaskBatch:
    mask = torch.zeros_like(batch.mask)
    mask[:, -1] = batch.mask[:, -1]
    return TaskBatch(batch.tokens, batch.targets, mask, dict(batch.extras))


def skill_batches(batch: TaskBatch) -> dict[str, TaskBatch]:
    """``{skill: batch}``: elimination and recall for a permutation batch (``extras["repeated"]``), else ``task``.

    A skill with no sequence in ``batch`` is left out.
    """
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch (task.test_set(...)), got {type(batch).__name__}")
    repeated = batch.extras.get("repeated")
    if repeated is None:
        return {"task": batch}
    last = _last_position_only(batch)
    out = {}
    for skill, rows in (("elimination", ~repeated.bool()), ("recall", repeated.bool())):
        if bool(rows.any()):
            out[skill] = last.subset(rows)
    return out


def discover_skills(
    model,
    batch: TaskBatch,
    *,
    method: str = "acdc",
    how: str = "resample",
    seed: int = 0,
    max_rows: int = 500,
) -> Mapping[str, DiscoveryResult]:
    """The circuit of each skill of ``batch`` (:func:`skill_batches`) found by ``method`` under ``how``.

    Each skill uses at most ``max_rows`` of its sequences; the resample source is the same slice,
    rows shifted by one (another sequence of the same skill).
    """
    from perm_circuits.discovery import METHODS

    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    check_int("max_rows", max_rows, low=2)
    out = {}
    for skill, rows in skill_batches(batch).items():
        rows = rows.subset(torch.arange(min(len(rows), max_rows), device=rows.tokens.device))
        if len(rows) < 2:
            continue
        corrupted = rows.tokens.roll(1, dims=0)
        out[skill] = METHODS[method](model, rows, how=how, seed=seed, corrupted=corrupted)
    return out
