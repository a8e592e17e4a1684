"""Scoring discovery against ground truth: every value below is computed by hand in the comment."""

from __future__ import annotations

import random

import pytest

from perm_circuits.discovery.scoring import (
    average_precision,
    circuit_metrics,
    edge_components,
    faithfulness_area,
    oracle_regret,
    roc_auc,
    top_edges,
)

SCORES = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}


def test_roc_auc_hand_values():
    assert roc_auc(SCORES, {"a", "b"}) == 1.0  # perfect ranking
    assert roc_auc(SCORES, {"c", "d"}) == 0.0  # reversed ranking
    assert roc_auc({e: 1.0 for e in SCORES}, {"a"}) == 0.5  # all tied
    # true {a, c}: (a,b) win, (a,d) win, (c,b) loss, (c,d) win -> 3/4
    assert roc_auc(SCORES, {"a", "c"}) == 0.75
    # a ties b (1/2), beats c (1) -> 3/4
    assert roc_auc({"a": 1, "b": 1, "c": 0}, {"a"}) == 0.75


def test_sign_handling():
    scores = {"a": -5.0, "b": 1.0, "c": 0.5}
    assert roc_auc(scores, {"a"}) == 1.0  # |score| ranks a first
    assert roc_auc(scores, {"a"}, absolute=False) == 0.0
    assert average_precision(scores, {"a"}, absolute=False) == pytest.approx(1 / 3)  # a found last: P = 1/3


def test_average_precision_hand_values():
    assert average_precision(SCORES, {"a", "b"}) == 1.0
    # true {a, c}: a -> (R 1/2, P 1), b -> (1/2, 1/2), c -> (1, 2/3): 1/2 * 1 + 1/2 * 2/3 = 5/6
    assert average_precision(SCORES, {"a", "c"}) == pytest.approx(5 / 6)
    # tie a = b at the top, true {a}: one threshold, R = 1, P = 1/2
    assert average_precision({"a": 1, "b": 1, "c": 0}, {"a"}) == 0.5
    # constant scores: the fraction of true edges
    assert average_precision({e: 0.0 for e in SCORES}, {"a"}) == 0.25


def test_universe_and_bad_input():
    # an unscored edge of the universe is refused; a universe restricts the ranking
    with pytest.raises(ValueError, match="lack"):
        roc_auc(SCORES, {"a"}, edges=["a", "b", "z"])
    assert roc_auc(SCORES, {"c"}, edges=["c", "d"]) == 1.0
    with pytest.raises(ValueError, match="both true and false"):
        roc_auc(SCORES, set(SCORES))
    with pytest.raises(ValueError, match="not among"):
        average_precision(SCORES, {"zz"})
    with pytest.raises(ValueError, match="NaN"):
        roc_auc({"a": float("nan"), "b": 1.0}, {"a"})


def test_matches_sklearn_on_random_cases():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(0)
    for _ in range(20):
        edges = [f"e{i}" for i in range(46)]
        scores = {e: float(rng.randint(0, 6)) for e in edges}  # many ties
        truth = set(rng.sample(edges, 6))
        y = [e in truth for e in edges]
        s = [scores[e] for e in edges]
        assert roc_auc(scores, truth) == pytest.approx(metrics.roc_auc_score(y, s))
        assert average_precision(scores, truth) == pytest.approx(metrics.average_precision_score(y, s))


def test_top_edges_is_deterministic():
    assert top_edges({"b": 1.0, "a": -1.0, "c": 0.5}, 1) == {"a"}  # |a| = |b|: name breaks the tie
    assert top_edges({"b": 1.0, "a": -1.0, "c": 0.5}, 2, absolute=False) == {"b", "c"}
    with pytest.raises(ValueError, match="k must be"):
        top_edges(SCORES, 5)


def test_circuit_metrics_edges_and_promoted():
    truth = {"embed->L0H0.q", "L0H0->logits", "embed->L0H0.k"}
    chosen = {"embed->L0H0.q", "L0H0->logits", "embed->L0H1.v"}
    edge = circuit_metrics(chosen, truth)
    assert (edge.precision, edge.recall, edge.exact, edge.n_correct) == (2 / 3, 2 / 3, False, 2)
    assert edge.f1 == pytest.approx(2 / 3)
    node = circuit_metrics(chosen, truth, promote_heads=True)  # {L0H0, L0H1} vs {L0H0}
    assert (node.precision, node.recall, node.exact, node.level) == (0.5, 1.0, False, "component")
    # a different port of the same head: wrong as edges, exact as components
    other = {"embed->L0H0.k", "L0H0->logits"}
    assert not circuit_metrics(other, {"embed->L0H0.q", "L0H0->logits"}).exact
    assert circuit_metrics(other, {"embed->L0H0.q", "L0H0->logits"}, promote_heads=True).exact
    empty = circuit_metrics(set(), truth)
    assert (empty.precision, empty.recall) == (0.0, 0.0)
    with pytest.raises(ValueError, match="empty"):
        circuit_metrics(chosen, set())


def test_edge_components():
    assert edge_components(["embed->L1H0.k", "L0H0->L1H0.k", "L0MLP->logits"]) == {"L1H0", "L0H0", "L0MLP"}
    with pytest.raises(ValueError, match="SENDER->RECEIVER"):
        edge_components(["L0H0"])


def test_faithfulness_area_and_regret():
    # trapezoids 10 * (0 + 1)/2 + 10 * 1 = 15, over 20 edges
    assert faithfulness_area([(20, 1.0), (0, 0.0), (10, 1.0)]) == 0.75
    assert faithfulness_area([(0, 0.0), (10, 1.0), (20, 1.0)], max_edges=30) == 0.5
    assert faithfulness_area([(0, 1.0), (46, 1.0)]) == 1.0
    with pytest.raises(ValueError, match="repeats"):
        faithfulness_area([(1, 0.0), (1, 1.0)])
    with pytest.raises(ValueError, match="max_edges"):
        faithfulness_area([(0, 0.0), (10, 1.0)], max_edges=5)
    regret = oracle_regret([(1, 0.2), (2, 0.5)], [(1, 0.6), (2, 0.5), (3, 1.0)])
    assert regret == pytest.approx({1: 0.4, 2: 0.0})
    with pytest.raises(ValueError, match="no value at sizes"):
        oracle_regret([(4, 0.2)], [(1, 0.6)])


def test_a_bare_string_is_refused_not_read_as_letters():
    edge = "L0H0->logits"
    with pytest.raises(TypeError, match="chosen.*wrap it in a list"):
        circuit_metrics(edge, [edge])  # was precision 0: the string's letters were the chosen edges
    with pytest.raises(TypeError, match="truth"):
        circuit_metrics([edge], edge)
    with pytest.raises(TypeError, match="truth"):
        roc_auc({edge: 1.0, "embed->logits": 0.0}, edge)
    with pytest.raises(TypeError, match="edges"):
        average_precision({edge: 1.0, "embed->logits": 0.0}, [edge], edges=edge)
    assert circuit_metrics([edge], [edge]).exact
    with pytest.raises(TypeError, match="edges"):
        edge_components(edge)  # was "an edge is 'SENDER->RECEIVER', got 'L'"


def test_top_edges_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        top_edges({"a": 1.0, "b": float("nan"), "c": 2.0}, 2)  # was {a, b}: NaN scrambled the sort
    assert top_edges({"a": 1.0, "b": 0.5, "c": 2.0}, 2) == {"a", "c"}
