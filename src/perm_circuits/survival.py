"""Time to recall across seeds: a survival curve per configuration, censored at the training budget.

A sweep row's ``epoch_recall_99`` is the first epoch whose test recall accuracy reaches 0.99 (NaN if
none), with ``samples`` sequences per epoch.  A run's *event* is learning recall, at
``epoch_recall_99 x samples`` sequences; a run that never learns it is *censored* at its budget
``epochs_run x samples`` (a learned run never is, even when early stopping ended it: it stops only
after recall).  :func:`time_to_recall` gives per configuration the Kaplan-Meier estimate (Kaplan &
Meier 1958, "Nonparametric estimation from incomplete observations") of the fraction of seeds that
have learned recall by ``N`` sequences: with one budget for all runs (a sweep grid), simply the share
of seeds whose event came by ``N``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

__all__ = ["SURVIVAL_KEYS", "recall_by", "time_to_recall"]

SURVIVAL_KEYS: tuple[str, ...] = ("d_model", "n_heads", "dropout")
"""One curve per (d_model, n_heads, dropout); any other config axis that varies splits the curves too."""

_OTHER_AXES = ("n_layers", "repeat_ratio", "epochs", "samples", "batch_size", "lr")
_REQUIRED = ("status", "epoch_recall_99", "samples", "epochs_run")


def _check(frame: object) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas DataFrame (a sweep table), got {type(frame).__name__}")
    missing = [c for c in (*_REQUIRED, *SURVIVAL_KEYS) if c not in frame.columns]
    if missing:
        raise ValueError(f"the sweep table lacks column(s) {missing} needed for time to recall")
    done = frame[frame["status"] == "done"]
    if done.empty:
        raise ValueError("the sweep table has no finished run (status == 'done')")
    return done


def time_to_recall(frame: pd.DataFrame) -> pd.DataFrame:
    """Kaplan-Meier curves of "has learned recall (>= 0.99) by N training sequences", per configuration.

    One row per configuration and step of its curve: the configuration columns, ``samples_seen``
    (N, from 0), ``learned`` (estimated fraction of seeds that learned recall by N), ``events`` (runs
    learning at N), ``at_risk`` (runs neither learned nor censored just before N), ``censored`` (runs
    whose budget ends at N without recall), ``seeds`` (finished runs) and ``budget`` (how far the
    curve is known: the largest N a run without recall saw, else the planned ``epochs x samples``).
    Failed runs are left out.
    """
    done = _check(frame).copy()
    grouped = done.groupby(list(SURVIVAL_KEYS), dropna=False)  # any other axis that varies splits the curves
    others = [c for c in _OTHER_AXES if c in done.columns]
    keys = [*SURVIVAL_KEYS, *(c for c in others if (grouped[c].nunique(dropna=False) > 1).any())]
    done["_event"] = done["epoch_recall_99"].astype(float) * done["samples"].astype(float)
    done["_end"] = done["epochs_run"].astype(float) * done["samples"].astype(float)
    done["_planned"] = done["epochs"].astype(float) * done["samples"].astype(float) if "epochs" in done else done["_end"]
    rows = []
    for key, runs in done.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        config = dict(zip(keys, key))
        learned = runs["_event"].notna()
        times = sorted(set(runs.loc[learned, "_event"]) | set(runs.loc[~learned, "_end"]))
        # the curve is known up to the last run still without recall; a run that learned and then
        # stopped early is no censoring, so where every seed learned it holds up to the planned budget
        budget = float(runs.loc[~learned, "_end"].max() if (~learned).any() else runs["_planned"].max())
        base = {**config, "seeds": len(runs), "budget": budget}
        rows.append({**base, "samples_seen": 0.0, "learned": 0.0, "events": 0, "at_risk": len(runs), "censored": 0})
        surviving = 1.0
        for t in times:
            at_risk = int(((runs["_event"].fillna(math.inf) >= t) & ((runs["_end"] >= t) | learned)).sum())
            events = int((runs["_event"] == t).sum())
            censored = int(((~learned) & (runs["_end"] == t)).sum())
            if at_risk and events:
                surviving *= 1.0 - events / at_risk
            rows.append({**base, "samples_seen": float(t), "learned": 1.0 - surviving, "events": events,
                         "at_risk": at_risk, "censored": censored})
    columns = [*keys, "samples_seen", "learned", "events", "at_risk", "censored", "seeds", "budget"]
    return pd.DataFrame(rows, columns=columns)


def recall_by(curves: pd.DataFrame, samples: Sequence[float]) -> pd.DataFrame:
    """The curves of :func:`time_to_recall` read at each of ``samples`` (one column ``by_<N>`` each;
    NaN where a configuration's budget is below N)."""
    if not isinstance(curves, pd.DataFrame) or "samples_seen" not in curves or "learned" not in curves:
        raise TypeError("curves must be the table time_to_recall returns")
    points = [float(n) for n in samples]
    if not points or any(not (n > 0) for n in points):
        raise ValueError(f"samples must be positive sample counts, got {list(samples)!r}")
    keys = [c for c in curves.columns if c not in ("samples_seen", "learned", "events", "at_risk", "censored", "budget")]
    rows = []
    for key, curve in curves.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        budget = float(curve["budget"].max())
        for n in points:
            seen = curve[curve["samples_seen"] <= n]
            row[f"by_{int(n)}"] = float(seen["learned"].iloc[-1]) if n <= budget else math.nan
        rows.append(row)
    return pd.DataFrame(rows)
