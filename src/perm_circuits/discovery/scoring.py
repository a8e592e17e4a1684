"""Scoring a discovery method against a ground-truth circuit: pure functions on edge scores and edge sets.

- :func:`roc_auc` and :func:`average_precision` rank edges by score against the true edge set
  (Conmy et al., "Towards Automated Circuit Discovery for Mechanistic Interpretability", NeurIPS
  2023, score ACDC, SP and HISP by ROC AUC on tracr and IOI; the classes are very unbalanced, about
  6 true edges of 46, hence also the precision-recall area).
- :func:`circuit_metrics`: precision, recall and exact recovery of the circuit a method chose, on
  edges or with edges promoted to components as InterpBench does (Gupta, Arcuschin, Kwa,
  Garriga-Alonso, "InterpBench: Semi-Synthetic Transformers for Evaluating Mechanistic
  Interpretability Techniques", NeurIPS 2024 Datasets and Benchmarks): a head (or MLP) is in a
  circuit when any of its q/k/v inputs or its output edges is.
- :func:`faithfulness_area` and :func:`oracle_regret`: faithfulness against the number of edges kept
  (Hanna, Pezzelle, Belinkov, "Have Faith in Faithfulness", COLM 2024, compare EAP and EAP-IG this
  way), and the gap to the best faithfulness any circuit of that size reaches.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import SupportsFloat

from perm_circuits.checks import check_int
from perm_circuits.circuit import Edge
from perm_circuits.discovery.graph import check_edges

__all__ = [
    "CircuitScore",
    "average_precision",
    "circuit_metrics",
    "edge_components",
    "faithfulness_area",
    "oracle_regret",
    "roc_auc",
    "top_edges",
]


def _ranked(scores: Mapping[str, SupportsFloat], truth: Iterable[str], edges, absolute: bool):
    """(score, is_true) per edge of the universe, after validation."""
    if not isinstance(scores, Mapping) or not scores:
        raise ValueError(f"scores must be a non-empty mapping edge -> score, got {type(scores).__name__}")
    truth = set(check_edges("truth", truth))
    universe = list(scores) if edges is None else list(check_edges("edges", edges))
    missing = [e for e in universe if e not in scores]
    if missing:
        raise ValueError(f"scores lack edges {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    outside = sorted(truth - set(universe))
    if outside:
        raise ValueError(f"true edges {outside[:5]} are not among the scored edges")
    values = []
    for e in universe:
        value = float(scores[e])
        if math.isnan(value):
            raise ValueError(f"score of {e!r} is NaN")
        values.append((abs(value) if absolute else value, e in truth))
    n_true = sum(label for _, label in values)
    if n_true == 0 or n_true == len(values):
        raise ValueError(f"need both true and false edges, got {n_true} true of {len(values)}")
    return values


def _tied(values: list[tuple[float, bool]], *, descending: bool) -> Iterator[list[bool]]:
    """The labels of each group of tied scores, groups in score order."""
    order = sorted(values, key=lambda item: -item[0] if descending else item[0])
    for _, group in itertools.groupby(order, key=lambda item: item[0]):
        yield [label for _, label in group]


def roc_auc(scores: Mapping[str, SupportsFloat], truth: Iterable[str], *, edges=None, absolute: bool = True) -> float:
    """Area under the ROC curve of ranking edges by score (ties count one half).

    Equals the probability that a random true edge outscores a random false one, plus half the
    probability of a tie (Mann-Whitney): a perfect ranking gives 1, the reversed one 0, all scores
    equal 0.5. ``edges`` is the universe (default: the keys of ``scores``); ``absolute`` ranks by
    ``|score|`` (effects of either sign count).
    """
    values = _ranked(scores, truth, edges, absolute)
    # midranks for ties, then the Mann-Whitney U of the true edges
    rank_sum, i = 0.0, 0
    for labels in _tied(values, descending=False):
        j = i + len(labels)
        rank_sum += (i + 1 + j) / 2 * sum(labels)
        i = j
    n_pos = sum(label for _, label in values)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * (len(values) - n_pos))


def average_precision(scores: Mapping[str, SupportsFloat], truth: Iterable[str], *, edges=None,
                      absolute: bool = True) -> float:
    """Area under the precision-recall curve as average precision, ties grouped.

    ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct score thresholds from high to low, all
    edges tied at a threshold entering together (scikit-learn's ``average_precision_score``). A
    perfect ranking gives 1; a constant score gives the fraction of true edges.
    """
    values = _ranked(scores, truth, edges, absolute)
    n_pos = sum(label for _, label in values)
    ap, tp, seen, last_recall = 0.0, 0, 0, 0.0
    for labels in _tied(values, descending=True):
        tp += sum(labels)
        seen += len(labels)
        recall = tp / n_pos
        ap += (recall - last_recall) * (tp / seen)
        last_recall = recall
    return ap


def top_edges(scores: Mapping[str, SupportsFloat], k: int, *, absolute: bool = True) -> frozenset:
    """The ``k`` highest-scoring edges (ties broken by edge name, so the choice is deterministic)."""
    check_int("k", k, 0, len(scores) + 1)
    nan = [e for e in scores if math.isnan(float(scores[e]))]
    if nan:  # NaN compares false both ways and would scramble the order
        raise ValueError(f"scores of {nan[:5]} are NaN")
    key = (lambda e: (-abs(float(scores[e])), e)) if absolute else (lambda e: (-float(scores[e]), e))
    return frozenset(sorted(scores, key=key)[:k])


def edge_components(edges: Iterable[str]) -> frozenset:
    """Heads and MLPs an edge set touches (InterpBench's node view): a head is in when any of its
    q/k/v inputs or its output edges is. ``embed`` and ``logits`` are left out (every circuit has
    them)."""
    return _components(check_edges("edges", edges))


def _components(edges: Iterable[str]) -> frozenset:
    """:func:`edge_components` of checked edges."""
    out = set()
    for edge in map(Edge.parse, edges):
        out.update({edge.sender, edge.receiver.owner()})
    return frozenset(str(node) for node in out if node.kind is None)


@dataclass(frozen=True)
class CircuitScore:
    """Precision, recall and exact recovery of a chosen circuit against the true one."""

    precision: float
    recall: float
    exact: bool
    n_chosen: int
    n_true: int
    n_correct: int
    level: str

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall (0 when both are 0)."""
        total = self.precision + self.recall
        return 0.0 if total == 0 else 2 * self.precision * self.recall / total


def circuit_metrics(chosen: Iterable[str], truth: Iterable[str], *, promote_heads: bool = False) -> CircuitScore:
    """Precision, recall, exact recovery of ``chosen`` against ``truth``.

    With ``promote_heads`` both edge sets become component sets first (:func:`edge_components`).
    An empty choice has precision 0 (nothing right was chosen); an empty truth is refused.
    """
    chosen, truth = set(check_edges("chosen", chosen)), set(check_edges("truth", truth))
    if promote_heads:
        chosen, truth = set(_components(chosen)), set(_components(truth))  # checked above
    if not truth:
        raise ValueError("the true circuit is empty")
    correct = len(chosen & truth)
    return CircuitScore(
        precision=correct / len(chosen) if chosen else 0.0,
        recall=correct / len(truth),
        exact=chosen == truth,
        n_chosen=len(chosen),
        n_true=len(truth),
        n_correct=correct,
        level="component" if promote_heads else "edge",
    )


def _points(points, name: str) -> list[tuple[int, float]]:
    pairs = []
    for item in points:
        try:
            n, f = item
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be (n_edges, faithfulness) pairs, got {item!r}") from None
        if isinstance(n, bool) or int(n) != n or n < 0 or not math.isfinite(float(f)):
            raise ValueError(f"{name}: n_edges must be an int >= 0 and faithfulness finite, got {item!r}")
        pairs.append((int(n), float(f)))
    if not pairs:
        raise ValueError(f"{name} is empty")
    sizes = [n for n, _ in pairs]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{name} repeats an edge count: {sorted(sizes)}")
    return sorted(pairs)


def faithfulness_area(points, *, max_edges: int | None = None) -> float:
    """Area under faithfulness against edges kept, by trapezoids, divided by ``max_edges``.

    ``points`` are ``(n_edges, faithfulness)`` pairs (any order); ``max_edges`` defaults to the
    largest ``n_edges``. The curve is integrated over the sizes given (nothing is extrapolated), so
    a curve that is 1 from 0 to ``max_edges`` has area 1.
    """
    pairs = _points(points, "points")
    top = pairs[-1][0] if max_edges is None else max_edges
    if check_int("max_edges", top) < pairs[-1][0] or top <= 0:
        raise ValueError(f"max_edges must be an int >= the largest n_edges ({pairs[-1][0]}) and > 0, got {max_edges!r}")
    area = sum((n1 - n0) * (f0 + f1) / 2 for (n0, f0), (n1, f1) in zip(pairs, pairs[1:]))
    return area / top


def oracle_regret(method_points, oracle_points) -> dict[int, float]:
    """Per circuit size, the best faithfulness any circuit reaches minus the method's (>= 0 if the
    oracle is exact). Sizes the method has and the oracle lacks are refused."""
    method, oracle = dict(_points(method_points, "method_points")), dict(_points(oracle_points, "oracle_points"))
    missing = sorted(set(method) - set(oracle))
    if missing:
        raise ValueError(f"the oracle has no value at sizes {missing}")
    return {n: oracle[n] - f for n, f in sorted(method.items())}
