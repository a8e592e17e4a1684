"""What every discovery method returns, and the steps they share (set-up, choosing a circuit from scores)."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_int, check_number
from perm_circuits.discovery.graph import EdgeGraph, split_edge
from perm_circuits.discovery.interventions import EdgeIntervention, prepare_edges

__all__ = ["ROUNDING_LEVEL", "DiscoveryResult", "check_selection", "choose_circuit", "explains", "flip_each",
           "metric_name", "prefix_masks", "rounding_level", "setup"]

ROUNDING_LEVEL = 1e-4
"""An attribution score (an estimated change of the metric) with ``|score| < ROUNDING_LEVEL * |metric(all) -
metric(none)|`` is at rounding level: float32 noise or a structurally zero path, not evidence (on a
tracr program 5 of 6 true edges had EAP scores between 1e-5 and 2e-12 of the largest)."""


@dataclass(frozen=True)
class DiscoveryResult:
    """One discovery method's answer on one model, batch and ablation mode.

    Attributes:
        method: the method's function name (``"eap"``, ``"acdc"``, ...).
        how: the ablation mode of the edge interventions.
        scores: one float per edge (indexed by edge name, in the graph's order).  Larger
            ``abs(score)`` means more important; attribution methods keep the sign (the estimated
            change of the metric when the edge alone is ablated).
        circuit: the chosen edge set (method docstrings say how it is chosen).
        faithfulness: the chosen circuit's faithfulness (1 = full model, 0 = every edge ablated).
        wall_time: seconds spent by the method (the shared set-up excluded unless it ran inside).
        n_forward: forward passes of the edge model over the batch made by the method: a batched
            run of ``k`` masks counts ``k``, a backward pass counts as one more forward.
        search: how the exhaustive oracle searched (``""`` for the other methods).
        params: the method's settings.
        best_by_size: the exhaustive oracle only: entry ``k`` is the best faithfulness of any circuit
            of at most ``k`` edges, for every size the search covered (``()`` for the other methods).
            The oracle regret at size ``k`` is this minus a method's top-``k`` faithfulness.
        graph: the model's edge graph the method searched (its shape: layers, heads, MLPs), so a
            view draws the result without being told the model (``None`` only for a result built by hand).
        metric: the name of the metric the faithfulness is measured with (:func:`metric_name`).
        nothing_to_explain: the full and the fully ablated model have the same metric under this
            mode and batch: the result is then the empty circuit, every score 0 and faithfulness
            1.0 (the empty circuit's metric is the full model's), from every method (:func:`explains`).
        rounding_level: attribution methods (EAP, EAP-IG, node attribution): the edges whose
            ``|score|`` is below :data:`ROUNDING_LEVEL` times ``|metric(all) - metric(none)|``; their
            ranking among themselves is float noise (empty for the other methods).
    """

    method: str
    how: str
    scores: pd.Series
    circuit: frozenset[str]
    faithfulness: float
    wall_time: float
    n_forward: int
    search: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    best_by_size: tuple[float, ...] = ()
    graph: EdgeGraph | None = None
    metric: str = ""
    nothing_to_explain: bool = False
    rounding_level: frozenset[str] = frozenset()

    @property
    def n_edges(self) -> int:
        return len(self.circuit)

    def ranking(self) -> list[str]:
        """Edges by decreasing ``abs(score)`` (ties kept in graph order)."""
        order = self.scores.abs().sort_values(ascending=False, kind="stable")
        return list(order.index)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per edge: method, how, edge, sender, receiver, score, in_circuit."""
        rows = [(self.method, self.how, edge, *split_edge(str(edge)), float(score), edge in self.circuit)
                for edge, score in self.scores.items()]
        return pd.DataFrame(rows, columns=["method", "how", "edge", "sender", "receiver", "score", "in_circuit"])


def metric_name(metric: object) -> str:
    """A metric's name for captions: ``"target log-prob"`` for the default
    (:func:`~perm_circuits.metric.pooled_target_logprob`) and the per-row one, else the callable's
    ``name`` attribute or ``__name__`` (``"custom metric"`` for a lambda or a nameless callable)."""
    name = getattr(metric, "name", None)
    if isinstance(name, str) and name:
        return name
    if "target_logprob" in getattr(metric, "__qualname__", ""):  # perm_circuits.metric's, the default included
        return "target log-prob"
    name = getattr(metric, "__name__", "")
    return name if name and name != "<lambda>" else "custom metric"


def setup(model, batch, intervention: EdgeIntervention | None, *, how: str | None = None,
          **options) -> tuple[EdgeIntervention, float]:
    """The prepared intervention and the time the method's own work starts (``time.perf_counter()``).

    ``intervention`` when given (then ``model``/``batch`` may be None and ``how``, if given, must be
    its mode), else :func:`~perm_circuits.discovery.interventions.prepare_edges` with ``how``
    (default ``"resample"``) and ``options``.
    """
    if intervention is not None:
        if not isinstance(intervention, EdgeIntervention):
            raise TypeError(f"intervention must be an EdgeIntervention, got {type(intervention).__name__}")
        if how is not None and how != intervention.how:
            raise ValueError(f"how={how!r} but the intervention was prepared with how={intervention.how!r}")
        ei = intervention
    else:
        if model is None or batch is None:
            raise ValueError("give model and batch, or a prepared intervention")
        ei = prepare_edges(  # checks batch (and the rest) before any forward pass
            model, batch, how="resample" if how is None else how, **options)
    start = time.perf_counter()
    if ei.nothing_to_explain:
        raise _NothingToExplain(ei, start)
    return ei, start


class _NothingToExplain(Exception):
    """Raised by :func:`setup` when the intervention has nothing to explain; caught by :func:`explains`."""

    def __init__(self, ei: EdgeIntervention, start: float) -> None:
        super().__init__("nothing to explain")
        self.ei, self.start = ei, start


def explains(method: Callable[..., DiscoveryResult]) -> Callable[..., DiscoveryResult]:
    """Decorate a discovery method: when its intervention has nothing to explain (the full and the fully
    ablated metric are equal, :attr:`EdgeIntervention.nothing_to_explain`), return the one documented
    result (the empty circuit, every score 0, faithfulness 1.0, ``nothing_to_explain=True``) instead of
    the method's NaN scores or errors.  The method's own argument checks still run first (before
    :func:`setup`)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs) -> DiscoveryResult:
        try:
            return method(*args, **kwargs)
        except _NothingToExplain as empty:
            ei = empty.ei
            series = pd.Series(0.0, index=list(ei.graph.edges), name=method.__name__, dtype="float64")
            return DiscoveryResult(method.__name__, ei.how, series, frozenset(), 1.0, time.perf_counter() - empty.start,
                                   0, "nothing to explain: full and fully ablated metric are equal", {},
                                   nothing_to_explain=True)

    return wrapper


def rounding_level(ei: EdgeIntervention, scores: Tensor) -> frozenset[str]:
    """The edges whose attribution ``|score|`` is below :data:`ROUNDING_LEVEL` times the metric's total
    change ``|metric(all) - metric(none)|`` (:class:`DiscoveryResult`'s ``rounding_level``)."""
    floor = ROUNDING_LEVEL * abs(ei.full_metric - ei.empty_metric)
    return ei.graph.edges_of((scores.abs() < floor).double().tolist())


def flip_each(mask: Float[Tensor, " edge"]) -> Float[Tensor, "edge edge"]:
    """One row per edge: ``mask`` with that edge flipped (kept <-> ablated)."""
    rows = mask[None].repeat(len(mask), 1)
    diagonal = torch.arange(len(mask), device=mask.device)
    rows[diagonal, diagonal] = 1 - mask
    return rows


def prefix_masks(order: Int[Tensor, " edge"] | list[int],
                 device: torch.device | None = None) -> Float[Tensor, "k edge"]:
    """Row ``k`` (``0 .. E``) keeps the first ``k`` edges of ``order`` (edge indices, most important first)."""
    n = len(order)
    masks = torch.zeros(n + 1, n, device=device)
    masks[:, order] = torch.ones(n + 1, n, device=device).tril(-1)
    return masks


def check_selection(n_edges: object, threshold: object, target: object) -> None:
    """The circuit-selection arguments of :func:`choose_circuit`, checked before a method's work
    starts (``n_edges``' upper bound, the graph's edge count, is checked once the graph is known)."""
    if n_edges is not None:
        check_int("n_edges", n_edges, 0)
    for name, value in (("threshold", threshold), ("target", target)):
        if value is not None and math.isnan(check_number(name, value, finite=False)):
            raise ValueError(f"{name} must be a number, got nan")


def choose_circuit(
    ei: EdgeIntervention, scores: Tensor, *, n_edges: int | None, threshold: float | None, target: float
) -> tuple[frozenset[str], float, int]:
    """The circuit from scores: the top ``n_edges`` by ``abs(score)``, else every edge with
    ``abs(score) >= threshold``, else the smallest top-``k`` prefix whose faithfulness reaches
    ``target`` (every prefix is evaluated in one batched run; the full graph when none does).

    Returns ``(circuit, faithfulness, forward passes used)``.
    """
    if n_edges is not None:
        check_int("n_edges", n_edges, 0, ei.n_edges + 1)
    if threshold is not None:
        check_number("threshold", threshold, finite=False)
    check_number("target", target, finite=False)
    order = torch.argsort(-scores.abs(), stable=True)
    edges = ei.graph.edges
    if n_edges is not None or threshold is not None:
        keep = order[:n_edges] if n_edges is not None else torch.nonzero(scores.abs() >= threshold)[:, 0]
        mask = torch.zeros(ei.n_edges, device=ei.device)
        mask[keep] = 1.0
        faith = float(ei.faithfulness(ei.evaluate(mask[None]))[0])
        return frozenset(edges[i] for i in keep.tolist()), faith, 1
    faith = ei.faithfulness(ei.evaluate(prefix_masks(order, ei.device), chunk=8))
    reached = torch.nonzero(faith >= target)[:, 0]
    k = int(reached[0]) if len(reached) else ei.n_edges
    return frozenset(edges[i] for i in order[:k].tolist()), float(faith[k]), ei.n_edges + 1


def finish(method: str, ei: EdgeIntervention, scores: Tensor, start: float, n_forward: int, params: dict[str, Any],
           *, n_edges: int | None = None, threshold: float | None = None, target: float = 0.9,
           keep: Tensor | None = None, faithfulness: float | None = None, search: str = "",
           best_by_size: tuple[float, ...] = (), attribution: bool = False) -> DiscoveryResult:
    """Time the method and package its result.

    The circuit is the edges of the 0/1 mask ``keep`` when given (its faithfulness measured here,
    one more forward, unless given), else :func:`choose_circuit` from the scores.  ``attribution``: the
    scores estimate metric changes, so the result names those at :func:`rounding_level`.
    """
    if keep is None:
        circuit, faithfulness, used = choose_circuit(ei, scores, n_edges=n_edges, threshold=threshold, target=target)
        n_forward += used
    else:
        circuit = ei.graph.edges_of(keep.tolist())
        if faithfulness is None:
            faithfulness = float(ei.faithfulness(ei.evaluate(keep[None]))[0])
            n_forward += 1
    series = pd.Series(scores.detach().double().cpu().numpy(), index=list(ei.graph.edges), name=method)
    return DiscoveryResult(method, ei.how, series, circuit, float(faithfulness), time.perf_counter() - start,
                           int(n_forward), search, params, tuple(best_by_size), ei.graph, metric_name(ei.metric),
                           rounding_level=rounding_level(ei, scores) if attribution else frozenset())
