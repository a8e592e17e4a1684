"""The census side of a sweep report: mechanism-class frequencies and their formation across training,
computed from sweep rows that carry mechanism fingerprints (:func:`~perm_circuits.census.mechanism_fingerprint`
columns, as ``scripts/census_fingerprints.py`` writes them: one row per run, or per run and kept epoch).

Rows carry fingerprints when they have the circuit columns the class rule reads
(``circuit_elimination_<how>_<reference>``, ``circuit_recall_<how>_<reference>``, ``duplicate_heads``;
:mod:`perm_circuits.census.classes`).  Each row is classed under one mode and reference (default: mean
ablation against the test set, the census page's default).  When the rows hold two or more epochs (an
``epoch`` column) and a ``seed`` column, a run is a (config, seed[, source]) and is counted once, at its last
epoch; otherwise every row is a run.  The formation table is the share of runs in each class at
each epoch, when the rows hold two or more epochs.  Computed here, drawn by
:mod:`perm_circuits.views.census_figures` in the sweep report (views never classify or run a model).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perm_circuits.census.classes import CLASS_ORDER, classify, wilson_interval

__all__ = ["CensusSummary", "census_summary", "has_fingerprints"]


@dataclass(frozen=True)
class CensusSummary:
    """``counts``: per config and class, ``k`` runs of ``n``, ``share`` and its 95% Wilson interval
    (``low``, ``high``); ``formation``: per config, epoch and class, the ``share`` of that epoch's runs
    (empty without an ``epoch`` column holding two or more epochs); ``how`` / ``reference``: the class rule's."""

    counts: pd.DataFrame
    formation: pd.DataFrame
    how: str
    reference: str


def _needed(how: str, reference: str) -> list[str]:
    return [f"circuit_elimination_{how}_{reference}", f"circuit_recall_{how}_{reference}", "duplicate_heads"]


def has_fingerprints(frame: pd.DataFrame, *, how: str = "mean", reference: str = "test") -> bool:
    """True when ``frame``'s rows carry the fingerprint columns the class rule reads under ``how`` / ``reference``
    and at least one row has them filled."""
    needed = _needed(how, reference)
    return all(c in frame.columns for c in needed) and bool(frame[needed].notna().all(axis=1).any())


def _config(frame: pd.DataFrame) -> pd.Series:
    if "config" in frame.columns:
        return frame["config"].astype(str)
    if {"d_model", "n_heads"} <= set(frame.columns):
        return "d" + frame["d_model"].astype(int).astype(str) + "h" + frame["n_heads"].astype(int).astype(str)
    return pd.Series("all", index=frame.index)


def census_summary(frame: pd.DataFrame, *, how: str = "mean", reference: str = "test") -> CensusSummary | None:
    """The class frequencies and formation of a sweep table's fingerprinted rows; None when no row carries a
    fingerprint (:func:`has_fingerprints`).  Failed runs (``status == "failed"``) are left out."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame (a sweep table), got {type(frame).__name__}")
    if not has_fingerprints(frame, how=how, reference=reference):
        return None
    rows = frame[frame[_needed(how, reference)].notna().all(axis=1)]
    if "status" in rows.columns:
        rows = rows[rows["status"].astype(str) != "failed"]
    rows = classify(rows.assign(config=_config(rows)), how=how, reference=reference)
    epochs = "epoch" in rows.columns and rows["epoch"].nunique() >= 2
    final = rows
    if epochs and "seed" in rows.columns:  # rows per run and epoch: a run is (config, seed[, source])
        run_keys = ["config", "seed"] + (["source"] if "source" in rows.columns else [])
        final = rows.sort_values("epoch", kind="stable").groupby(run_keys, sort=False, dropna=False).tail(1)
    order = {name: i for i, name in enumerate(CLASS_ORDER)}
    counts = []
    for config, group in final.groupby("config", sort=True):
        n = len(group)
        for name, k in sorted(group["class"].value_counts().items(), key=lambda kv: (-kv[1], order.get(kv[0], 99))):
            low, high = wilson_interval(int(k), n)
            counts.append({"config": config, "class": name, "k": int(k), "n": n, "share": k / n, "low": low,
                           "high": high})
    formation = []
    if epochs:
        for (config, epoch), group in rows.groupby(["config", "epoch"], sort=True):
            for name, k in group["class"].value_counts().items():
                formation.append({"config": config, "epoch": float(epoch), "class": name, "share": k / len(group),
                                  "n": len(group)})
    return CensusSummary(pd.DataFrame(counts, columns=["config", "class", "k", "n", "share", "low", "high"]),
                         pd.DataFrame(formation, columns=["config", "epoch", "class", "share", "n"]), how, reference)
