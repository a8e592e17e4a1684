"""Memory-recall probes of the simplified Birth model (Bietti et al. 2023, eq. 9), logged over training.

Each probe is :func:`~perm_circuits.analysis.probes.memory.memory_recall` ``R(W_hat, W*)`` (the
fraction of target pairs whose input scores highest on its output through ``W_hat``, row-vector
convention ``u @ W_hat @ v``) on one matrix of :func:`~perm_circuits.systems.birth_model.build_birth_model`,
against the paper's eq. 8 memories:

* ``W_O2``: ``W_O^2``, inputs ``w_E(k) W_V^2``, outputs ``w_U(k)``, target ``k -> k`` (copy);
* ``W_K2``: ``W_Q^2 W_K^2ᵀ``, queries ``w_E(k)``, keys ``w_1(k) = w_E(k) W_V^1 W_O^1``, target
  ``k -> k`` over all ``N`` tokens (random triggers: ``pi_q = pi_u``); ``W_K2_frequent`` scores only
  the frequent half of the queries (rare tokens are rarely triggers, so their memories form last);
* ``W_K1``: ``W_Q^1 W_K^1ᵀ``, queries ``p_t``, keys every ``p_s`` of the window (no causal mask, as
  in the paper), target ``t -> t-1``; ``W_K1_window`` keeps the first positions (the paper's "t < 64"
  of 256), ``W_K1_early``/``W_K1_late`` score the two halves of the queries against the same keys.

Chance level is ``1/N`` for the token probes and ``1/(number of keys)`` for the positional ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.analysis.probes.memory import identity_map, memory_recall
from perm_circuits.checks import check_int
from perm_circuits.devices import model_device
from perm_circuits.tasks.base import StepState, TaskBatch

__all__ = [
    "PROBE_NAMES",
    "BirthProbeTracker",
    "BirthProbes",
    "birth_probes",
    "half_crossing",
    "wk1_recall",
    "wk2_recall",
    "wo2_recall",
]

PROBE_NAMES = ("W_O2", "W_K2", "W_K2_frequent", "W_K1", "W_K1_window", "W_K1_early", "W_K1_late")


def _matrices(model) -> dict[str, Tensor]:
    cfg = model.cfg
    if cfg.n_layers != 2 or cfg.n_heads != 1 or cfg.d_head != cfg.d_model:
        raise ValueError(
            f"the Birth probes need the simplified model (2 layers, 1 head, d_head = d_model), got "
            f"n_layers={cfg.n_layers}, n_heads={cfg.n_heads}, d_head={cfg.d_head}, d_model={cfg.d_model}"
        )
    return {
        "W_E": model.W_E.detach(), "W_pos": model.W_pos.detach(), "W_U": model.W_U.detach(),
        "W_Q": model.W_Q.detach()[:, 0], "W_K": model.W_K.detach()[:, 0],
        "W_V": model.W_V.detach()[:, 0], "W_O": model.W_O.detach()[:, 0],
    }


def wo2_recall(model) -> float:
    """R of ``W_O^2`` for ``w_E(k) W_V^2 -> w_U(k)`` (module docstring)."""
    return _wo2(_matrices(model))


def _wo2(m: dict[str, Tensor]) -> float:
    inputs = m["W_E"] @ m["W_V"][1]
    pairs = identity_map(inputs.shape[0], device=inputs.device)
    return memory_recall(m["W_O"][1], inputs, m["W_U"].T.contiguous(), pairs)


def wk2_recall(model, tokens: Sequence[int] | None = None) -> float:
    """R of ``W_Q^2 W_K^2ᵀ`` for query ``w_E(k)`` -> key ``w_E(k) W_V^1 W_O^1`` (module docstring),
    over all tokens or only the queries ``tokens`` (every token stays a candidate key)."""
    return _wk2(_matrices(model), tokens)


def _wk2(m: dict[str, Tensor], tokens: Sequence[int] | None) -> float:
    keys = m["W_E"] @ m["W_V"][0] @ m["W_O"][0]
    pairs = identity_map(keys.shape[0], device=keys.device)
    if tokens is not None:  # the user's query tokens (wk2_recall's or birth_probes' frequent=): checked here, once
        index = torch.as_tensor(list(tokens), dtype=torch.long, device=keys.device)
        if index.numel() == 0 or index.min() < 0 or index.max() >= keys.shape[0]:
            raise ValueError(f"tokens must be a non-empty list of token ids in [0, {keys.shape[0] - 1}], got {tokens!r}")
        pairs = pairs[index]
    return memory_recall(m["W_Q"][1] @ m["W_K"][1].T, m["W_E"], keys, pairs)


def wk1_recall(model, *, window: int | None = None, queries: tuple[int, int] | None = None) -> float:
    """R of ``W_Q^1 W_K^1ᵀ`` for query ``p_t`` -> key ``p_{t-1}``.

    ``window``: positions ``0 .. window-1`` serve as queries and keys (default all ``T``);
    ``queries=(a, b)``: score only the queries ``max(a, 1) <= t < b`` of the window (default all).
    """
    m = _matrices(model)
    c = _check_window(m, window)
    return _wk1(m, c, *_check_queries(c, queries))


def _check_window(m: dict[str, Tensor], window: int | None) -> int:
    """The window's size: ``window``, default the context ``T``; ValueError outside ``[2, T]``."""
    T = m["W_pos"].shape[0]
    c = T if window is None else window
    if not 2 <= check_int("window", c) <= T:
        raise ValueError(f"window must be an int in [2, T={T}], got {window!r}")
    return c


def _check_queries(c: int, queries: tuple[int, int] | None) -> tuple[int, int]:
    """``queries`` (default ``(1, c)``) if they hold a query position ``1 <= t < c``; ValueError otherwise."""
    a, b = (1, c) if queries is None else queries
    if not (isinstance(a, int) and isinstance(b, int)) or not 0 <= a < b <= c:
        raise ValueError(f"queries must be (a, b) ints with 0 <= a < b <= {c}, got {queries!r}")
    if max(a, 1) >= b:
        raise ValueError(f"queries {queries!r} contain no position >= 1 (position 0 has no previous token)")
    return a, b


def _wk1(m: dict[str, Tensor], c: int, a: int, b: int) -> float:
    """:func:`wk1_recall` over the window ``0 .. c-1`` and the queries ``max(a, 1) <= t < b`` (checked)."""
    P = m["W_pos"][:c]
    positions = torch.arange(max(a, 1), b, device=P.device)
    targets = torch.stack([torch.arange(len(positions), device=P.device), positions - 1], dim=1)
    return memory_recall(m["W_Q"][0] @ m["W_K"][0].T, P[positions], P, targets)


@dataclass(frozen=True)
class BirthProbes:
    """The probes of one model at one training step (``nan`` where not measured)."""

    step: int
    W_O2: float
    W_K2: float
    W_K2_frequent: float
    W_K1: float
    W_K1_window: float
    W_K1_early: float
    W_K1_late: float
    loss: float = float("nan")
    in_context_acc: float = float("nan")

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(self)])


def birth_probes(model, *, step: int = 0, window: int | None = None,
                 frequent: Sequence[int] | None = None) -> BirthProbes:
    """Every probe of :data:`PROBE_NAMES` for ``model``; ``window`` defaults to ``T // 2`` (the
    paper's 64 of 256 is a quarter; at CPU scale ``T`` is short, so we take half), early/late
    are the first and second half of the context, and ``W_K2_frequent`` scores only the query
    tokens ``frequent`` (default: the first half of the vocabulary, the frequent half under the
    task's Zipf marginal)."""
    T, N = model.cfg.n_ctx, model.cfg.d_vocab
    window = T // 2 if window is None else window
    frequent = range(max(1, N // 2)) if frequent is None else frequent
    m = _matrices(model)  # the model checked (and its matrices read) once for the seven probes
    full = m["W_pos"].shape[0]
    return BirthProbes(  # each probe as its public function computes it, in the same order
        step=step,
        W_O2=_wo2(m),
        W_K2=_wk2(m, None),
        W_K2_frequent=_wk2(m, frequent),
        W_K1=_wk1(m, full, 1, full),
        W_K1_window=_wk1(m, (c := _check_window(m, window)), *_check_queries(c, None)),
        W_K1_early=_wk1(m, full, *_check_queries(full, (1, T // 2))),
        W_K1_late=_wk1(m, full, *_check_queries(full, (T // 2, T))),
    )


class BirthProbeTracker:
    """A :func:`perm_circuits.tasks.fit` callback: :func:`birth_probes` (plus the step's loss and,
    with an ``eval_batch``, its in-context accuracy) at each step in ``steps``, kept in ``fit``'s
    ``FitResult.records`` and in ``tracker.to_dataframe()``; ``tracker.record(model, 0)`` adds the
    state at initialisation."""

    def __init__(self, steps: Sequence[int], *, eval_batch: TaskBatch | None = None, window: int | None = None,
                 forward: Any = None):
        steps = tuple(steps)
        if not steps:
            raise ValueError(f"steps must be a non-empty sequence of ints >= 0, got {steps!r}")
        for s in steps:
            check_int("steps entry", s, low=0)
        if eval_batch is not None and not isinstance(eval_batch, TaskBatch):
            raise TypeError(f"eval_batch must be a TaskBatch, got {type(eval_batch).__name__}")
        self.steps = frozenset(steps)
        self.eval_batch = eval_batch
        self.window = window
        self.forward = forward
        self.rows: list[BirthProbes] = []

    def record(self, model, step: int, loss: float = float("nan"), task: Any = None) -> BirthProbes:
        probes = birth_probes(model, step=step, window=self.window)
        acc = float("nan")
        if self.eval_batch is not None and task is not None:
            self.eval_batch = batch = self.eval_batch.to(model_device(model))  # a no-op once it lives there
            with torch.no_grad():
                logits = (self.forward or (lambda m, t: m(t)))(model, batch.tokens)
            acc = task.metrics(logits, batch)["in_context_acc"]
        probes = replace(probes, loss=loss, in_context_acc=acc)
        self.rows.append(probes)
        return probes

    def __call__(self, state: StepState) -> BirthProbes | None:
        if state.step not in self.steps:
            return None
        return self.record(state.model, state.step, state.loss, state.task)

    def to_dataframe(self) -> pd.DataFrame:
        columns = ["step", *PROBE_NAMES, "loss", "in_context_acc"]
        return pd.DataFrame([asdict(r) for r in self.rows], columns=columns)


def half_crossing(steps: Sequence[float], values: Sequence[float]) -> float:
    """First logged step at which ``values`` has made half its rise: ``v >= v_0 + (v_final - v_0)/2``
    (with ``v_0 = 0``, the step at which it reaches half its final value); ``nan`` if it never
    rises (``v_final <= v_0``)."""
    steps, values = list(steps), list(values)
    if len(steps) != len(values) or not steps:
        raise ValueError(f"steps and values must be non-empty and of one length, got {len(steps)} and {len(values)}")
    first, final = values[0], values[-1]
    if not final > first:
        return float("nan")
    for step, value in zip(steps, values):
        if value >= first + 0.5 * (final - first):
            return float(step)
    return float(steps[-1])
