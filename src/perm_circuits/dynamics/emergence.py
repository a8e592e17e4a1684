"""Which signal moves first: crossing steps of normalised signals.

Each signal of a :class:`~perm_circuits.dynamics.DynamicsRecord` is normalised to its own change,
``n(t) = (v(t) - v_0) / (v_final - v_0)`` (``v_0``, ``v_final``: its first and last finite values),
so every signal goes from 0 to 1, rising (an accuracy, a probe) or falling (a loss).  Its crossing
step is the first recorded step with ``n(t) >= threshold`` (at 0.5: half its final change), as
Hoogland et al. (2024, "The developmental landscape of in-context learning") and Olsson et al.
(2022) date a circuit piece against the loss curve.  The resolution is the recording grid (the true
crossing lies between the previous recorded step and the reported one).  A signal with ``|v_final - v_0| <= 1e-12``
never crosses (``"flat"``), nor does one with fewer than two finite values (``"no data"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from perm_circuits.checks import check_fraction
from perm_circuits.dynamics.record import DynamicsRecord

__all__ = ["Crossing", "WhichFirst", "half_crossing", "normalised", "which_first"]

FLAT_TOLERANCE = 1e-12


def check_record(record: object) -> DynamicsRecord:
    """``record`` if it is a non-empty :class:`DynamicsRecord`, else TypeError/ValueError."""
    if not isinstance(record, DynamicsRecord):
        raise TypeError(f"record must be a DynamicsRecord, got {type(record).__name__}")
    if len(record) == 0:
        raise ValueError("record has no recorded step")
    return record


def check_signals(record: DynamicsRecord, signals: object) -> tuple[str, ...]:
    """``signals`` as a tuple of names ``record`` holds (all of them for ``None``)."""
    if signals is None:
        return record.signals
    if isinstance(signals, str) or not isinstance(signals, Sequence):
        raise TypeError(f"signals must be a sequence of signal names or None, got {signals!r}")
    unknown = [s for s in signals if s not in record.signals]
    if unknown:
        raise ValueError(f"unknown signals {unknown}; the record has {list(record.signals)}")
    if not signals:
        raise ValueError("signals is empty")
    return tuple(signals)


def normalised(values: Sequence[float]) -> tuple[list[float], float, float, str]:
    """``(n(t), v_0, v_final, status)``: the values rescaled to their change (module docstring);
    ``status`` is ``"ok"``, ``"flat"`` (n is all 0) or ``"no data"`` (n is all nan)."""
    finite = [v for v in values if not math.isnan(v)]
    if len(finite) < 2:
        return [math.nan] * len(values), math.nan, math.nan, "no data"
    first, last = finite[0], finite[-1]
    if abs(last - first) <= FLAT_TOLERANCE:
        return [0.0 if not math.isnan(v) else math.nan for v in values], first, last, "flat"
    return [(v - first) / (last - first) for v in values], first, last, "ok"


def half_crossing(steps: Sequence[int], values: Sequence[float], threshold: float = 0.5) -> int | None:
    """The first step where the normalised value reaches ``threshold`` (None if flat or no data)."""
    threshold = check_fraction(threshold)
    if len(steps) != len(values):
        raise ValueError(f"steps ({len(steps)}) and values ({len(values)}) differ in length")
    norm, _, _, status = normalised(values)
    return _first_at(steps, norm, threshold) if status == "ok" else None


def _first_at(steps: Sequence[int], norm: Sequence[float], threshold: float) -> int:
    """The first step whose normalised value reaches ``threshold`` (one exists: the last finite is 1)."""
    return next(step for step, n in zip(steps, norm) if n >= threshold)  # nan >= threshold is False


@dataclass(frozen=True)
class Crossing:
    """One signal's place in the order: its crossing ``step`` and ``rank`` (1 for the earliest, ties
    share the smallest; both None when it never crosses), whether another signal crosses at the
    same step (``tied``), ``status`` (``"crossed"``, ``"flat"``, ``"no data"``), and ``initial``,
    ``final``: ``v_0`` and ``v_final``."""

    signal: str
    step: int | None
    rank: int | None
    tied: bool
    status: str
    initial: float
    final: float


@dataclass(frozen=True)
class WhichFirst:
    """Signals ordered by their crossing step (:func:`which_first`): crossed ones by step, ties
    alphabetically, then those that never cross."""

    threshold: float
    crossings: tuple[Crossing, ...]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per signal, in order."""
        columns = ["signal", "step", "rank", "tied", "status", "initial", "final"]
        frame = pd.DataFrame([asdict(c) for c in self.crossings], columns=columns)
        return frame.astype({"step": "Int64", "rank": "Int64"})

    @property
    def order(self) -> tuple[str, ...]:
        """The signals that cross, earliest first."""
        return tuple(c.signal for c in self.crossings if c.step is not None)

    def get(self, signal: str) -> Crossing:
        for crossing in self.crossings:
            if crossing.signal == signal:
                return crossing
        raise KeyError(f"no signal {signal!r}; signals: {[c.signal for c in self.crossings]}")

    def step_of(self, signal: str) -> int | None:
        """The crossing step of ``signal`` (None when it never crosses)."""
        return self.get(signal).step

    def before(self, first: str, second: str) -> bool | None:
        """Whether ``first`` crosses strictly before ``second``: None when they tie or either
        never crosses (the record cannot tell)."""
        a, b = self.step_of(first), self.step_of(second)
        if a is None or b is None or a == b:
            return None
        return a < b


def which_first(record: DynamicsRecord, signals: Sequence[str] | None = None, threshold: float = 0.5) -> WhichFirst:
    """Order ``signals`` (default all) of ``record`` by the step each crosses ``threshold`` of its
    normalised change (module docstring)."""
    record = check_record(record)
    threshold = check_fraction(threshold)
    return crossing_order(record, check_signals(record, signals), threshold)


def crossing_order(record: DynamicsRecord, names: Sequence[str], threshold: float) -> WhichFirst:
    """:func:`which_first` of arguments its caller checked (``check_record``, ``check_signals``,
    ``check_fraction``): for a caller that orders one record at several thresholds."""
    found = []
    for name in names:
        norm, first, last, status = normalised(record.series(name).tolist())
        step = _first_at(record.steps, norm, threshold) if status == "ok" else None
        found.append((name, step, "crossed" if step is not None else status, first, last))
    crossed = sorted((f for f in found if f[1] is not None), key=lambda f: (f[1], f[0]))
    never = sorted((f for f in found if f[1] is None), key=lambda f: (f[2] != "flat", f[0]))
    steps = [f[1] for f in crossed]
    rows = [Crossing(name, step, steps.index(step) + 1, steps.count(step) > 1, status, first, last)
            for name, step, status, first, last in crossed]
    rows += [Crossing(name, None, None, False, status, first, last) for name, _, status, first, last in never]
    return WhichFirst(threshold, tuple(rows))
