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

import dataclasses
from collections.abc import Mapping

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.ablation_modes import REFERENCES
from perm_circuits.checks import check_int
from perm_circuits.discovery.benchmark import METHODS, TRAINED, benchmark_models
from perm_circuits.discovery.oracle import exhaustive_oracle
from perm_circuits.discovery.result import DiscoveryResult
from perm_circuits.tasks.base import TaskBatch

__all__ = ["SKILL_REFERENCES", "discover_skills", "skill_batches", "skill_oracle_table"]


def skill_batches(batch: TaskBatch) -> dict[str, TaskBatch]:
    """``{skill: batch}``: elimination and recall for a permutation batch (``extras["repeated"]``), else
    ``task``; a skill with no sequence in ``batch`` is left out."""
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch (task.test_set(...)), got {type(batch).__name__}")
    repeated = batch.extras.get("repeated")
    if repeated is None:
        return {"task": batch}
    mask = torch.zeros_like(batch.mask)
    mask[:, -1] = batch.mask[:, -1]
    last = TaskBatch(batch.tokens, batch.targets, mask, dict(batch.extras))  # scored at the last position only
    out = {}
    for skill, rows in (("elimination", ~repeated.bool()), ("recall", repeated.bool())):
        if bool(rows.any()):
            out[skill] = last.subset(rows)
    return out


SKILL_REFERENCES = REFERENCES
"""Where a skill's ablated values come from: ``"test"``, the whole test batch (both skills mixed, as the
task presents them, and as the report's findings ablate); ``"skill"``, the skill's own rows."""


def discover_skills(
    model,
    batch: TaskBatch,
    *,
    method: str = "acdc",
    how: str = "resample",
    seed: int = 0,
    max_rows: int = 500,
    reference: str | TaskBatch | Tensor = "test",
) -> Mapping[str, DiscoveryResult]:
    """The circuit of each skill of ``batch`` (:func:`skill_batches`) found by ``method`` under ``how``.

    Each skill uses at most ``max_rows`` of its sequences.  ``reference`` says where the ablated
    values come from: with ``"test"`` (default) the resample source is a seeded draw of rows of the
    whole ``batch`` and the mean is taken over the whole ``batch``; with ``"skill"`` both come from the
    skill's own rows (the resample source: its rows shifted by one); a batch of one's own (a
    :class:`TaskBatch` or token ids ``[rows, seq]`` of ``batch``'s length, at least two rows) is the
    mean and the resample pool (a seeded draw of its rows, cycled when a skill has more rows), for
    every skill.  The choice changes circuits: a head that only tells the skills apart (d32h2's
    duplicate-token L0H0) carries nothing within one skill, so it drops out of the recall circuit
    against the skill's own rows and is kept against the test set.  Each result records it in
    ``params["reference"]`` (``"test"``, ``"skill"`` or ``"custom"``).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    pool = _reference_pool(reference, batch) if not isinstance(reference, str) else None
    if pool is None and reference not in SKILL_REFERENCES:
        raise ValueError(f"reference must be one of {SKILL_REFERENCES} or a batch, got {reference!r}")
    check_int("max_rows", max_rows, low=2)
    if pool is None:
        pool, label = batch.tokens, "test"
    else:
        pool, label = pool.to(batch.tokens.device), "custom"
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed)).to(batch.tokens.device)
    out = {}
    for skill, rows in skill_batches(batch).items():
        rows = rows.subset(torch.arange(min(len(rows), max_rows), device=rows.tokens.device))
        if len(rows) < 2:
            continue
        own = label != "custom" and (reference == "skill" or skill == "task")
        drawn = order[torch.arange(len(rows), device=order.device) % len(order)]  # the first rows of the draw
        options = ({"corrupted": rows.tokens.roll(1, dims=0)} if own else
                   {"corrupted": pool[drawn], "reference": pool})
        result = METHODS[method](model, rows, how=how, seed=seed, **options)
        out[skill] = dataclasses.replace(result, params={**result.params, "reference": "skill" if own else label})
    return out


def _reference_pool(reference: TaskBatch | Tensor, batch: TaskBatch) -> Tensor:
    """The token ids of a batch given as ``reference``, checked against ``batch``."""
    tokens = reference.tokens if isinstance(reference, TaskBatch) else reference
    if not isinstance(tokens, Tensor):
        raise TypeError(f"reference must be one of {SKILL_REFERENCES}, a TaskBatch or token ids, got "
                        f"{type(reference).__name__}")
    if tokens.dim() != 2 or tokens.shape[1] != batch.tokens.shape[1] or len(tokens) < 2 or tokens.is_floating_point():
        raise ValueError(f"a reference batch needs integer token ids [rows >= 2, {batch.tokens.shape[1]}] (the "
                         f"batch's length), got {tuple(tokens.shape)} {tokens.dtype}")
    return tokens


def skill_oracle_table(models=TRAINED, hows=("zero", "resample"),
                       seeds=(0, 1, 2, 3, 4), n: int = 300, *, skill: str = "recall", max_size: int = 8,
                       max_subsets: int = 300_000, progress: bool = True):
    """The exhaustive oracle's circuit of one skill alone (default: recall), per shipped model, mode and seed.

    Each seed draws a test batch of ``n`` sequences (seed ``1000 + seed``, as the discovery
    benchmark), keeps the skill's rows scored at the last position (:func:`skill_batches`), and
    searches the smallest circuit keeping faithfulness 0.9 on them (exhaustive up to 16 edges, else
    by size up to ``max_size`` edges within ``max_subsets`` subsets; column ``search``).  Returns a
    table with columns ``model``, ``skill``, ``how``, ``seed``, ``n_rows``, ``n_edges_graph``,
    ``circuit`` (space-separated edges), ``n_chosen``, ``faithfulness``, ``search``.
    """
    registry = benchmark_models(include_tracr=False)
    unknown = [m for m in models if m not in TRAINED]
    if unknown:
        raise ValueError(f"models must be shipped study models {TRAINED}, got {unknown}")
    if skill not in ("elimination", "recall"):
        raise ValueError(f"skill must be 'elimination' or 'recall', got {skill!r}")
    check_int("n", n, low=2)
    rows = []
    jobs = [(m, h, s) for m in models for h in hows for s in seeds]
    built: dict = {}
    for name, how, seed in tqdm(jobs, disable=not progress, desc=f"{skill} oracle"):
        if name not in built:  # load each model once
            built[name] = registry[name].build()
        model = built[name]
        part = skill_batches(registry[name].batch(model, n, 1000 + seed))[skill]
        result = exhaustive_oracle(model, part, how=how, seed=seed, corrupted=part.tokens.roll(1, dims=0),
                                   max_size=max_size, max_subsets=max_subsets)
        rows.append({"model": name, "skill": skill, "how": how, "seed": seed, "n_rows": len(part),
                     "n_edges_graph": len(result.scores), "circuit": " ".join(sorted(result.circuit)),
                     "n_chosen": len(result.circuit), "faithfulness": result.faithfulness, "search": result.search})
    return pd.DataFrame(rows, columns=["model", "skill", "how", "seed", "n_rows", "n_edges_graph", "circuit",
                                       "n_chosen", "faithfulness", "search"])
