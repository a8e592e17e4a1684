"""Discovery methods against the weight-built induction circuit, EAP against autograd, the oracle by brute force."""

from __future__ import annotations

import itertools

import pytest
import torch

from perm_circuits.discovery import (
    METHODS,
    acdc,
    discover,
    eap,
    eap_ig,
    exhaustive_oracle,
    greedy_edges,
    mask_pruning,
    node_attribution,
    prepare_edges,
    random_baseline,
)
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.models import ModelConfig, build_model, load_pretrained
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.tasks import PermutationTask, TaskBatch

# The induction circuit of build_induction_model, read off its construction (handbuilt.py):
# L0H0 (previous-token head) copies each token into the next position (its value reads TOK from
# the embedding; its query and key read only positions, which resampling leaves unchanged); the
# induction head L1H0 matches its query (the last token, from the embedding) against keys holding
# L0H0's copy, and its value copies the attended token (embedding) into the output, which only the
# logits read.  Every other edge either carries nothing (L0H1 and both MLPs are zero) or carries
# only positions (identical in the corrupted batch) or belongs to the elimination head L1H1.
INDUCTION_EDGES = frozenset({"embed->L0H0.v", "L0H0->L1H0.k", "embed->L1H0.q", "embed->L1H0.v", "L1H0->logits"})


def roc_auc(scores, truth) -> float:
    """Probability that a true edge outranks a false one by |score| (ties count half)."""
    values = scores.abs()
    positive = [float(values[e]) for e in values.index if e in truth]
    negative = [float(values[e]) for e in values.index if e not in truth]
    wins = sum((p > q) + 0.5 * (p == q) for p in positive for q in negative)
    return wins / (len(positive) * len(negative))


@pytest.fixture(scope="module")
def induction():
    """The induction model in float64 with every last query repeating an earlier x, scored at the last position."""
    model = build_induction_model().to(torch.float64)
    batch = PermutationTask(TaskConfig(V=5, repeat_ratio=1.0, repeat_sources=(1, 2, 3, 4))).test_set(32)
    last = torch.zeros_like(batch.mask)
    last[:, -1] = 1.0
    batch = TaskBatch(batch.tokens, batch.targets, last)
    return model, batch, prepare_edges(model, batch, how="resample")


@pytest.mark.parametrize("method", [eap, eap_ig, acdc, node_attribution, greedy_edges, mask_pruning, exhaustive_oracle])
@pytest.mark.slow
def test_every_method_recovers_the_induction_circuit(induction, method):
    _, _, ei = induction
    options = {"steps": 150} if method is mask_pruning else {}
    result = method(intervention=ei, **options)
    assert roc_auc(result.scores, INDUCTION_EDGES) > 0.9
    assert result.how == "resample" and result.method == method.__name__
    assert result.n_forward > 0 and result.wall_time > 0
    if method in (eap_ig, acdc, greedy_edges, mask_pruning, exhaustive_oracle):
        assert INDUCTION_EDGES <= result.circuit
        assert result.faithfulness > 0.9
    if method is exhaustive_oracle:  # the smallest faithful circuit is exactly the induction circuit
        assert result.circuit == INDUCTION_EDGES
        assert result.search.startswith("by size: every connected subset of up to 5 edges")


def test_the_induction_circuit_alone_is_faithful_and_each_edge_is_needed(induction):
    _, _, ei = induction
    assert ei.full_metric > -0.05 and ei.empty_metric < -3  # the model answers; the corrupted run does not
    mask = torch.tensor(ei.graph.mask_of(INDUCTION_EDGES), dtype=torch.float64)
    assert float(ei.faithfulness(ei.evaluate(mask[None]))[0]) > 0.99
    for edge in INDUCTION_EDGES:
        without = mask.clone()
        without[ei.graph.edge_index(edge)] = 0.0
        assert float(ei.faithfulness(ei.evaluate(without[None]))[0]) < 0.5, edge


def test_random_baseline_is_seeded(induction):
    _, _, ei = induction
    one, again, other = (random_baseline(intervention=ei, seed=s, n_edges=5) for s in (0, 0, 1))
    assert one.scores.equals(again.scores) and not one.scores.equals(other.scores)
    assert len(one.circuit) == 5 and one.n_forward == 1
    assert 0.0 <= one.scores.min() and one.scores.max() < 1.0


def _tiny():
    model = build_model(ModelConfig(d_model=16, n_heads=1, n_layers=2, seed=5)).eval().to(torch.float64)
    batch = PermutationTask(TaskConfig(repeat_ratio=0.3)).test_set(40)
    return model, batch


@pytest.mark.parametrize("how", ["resample", "mean", "zero"])
def test_eap_equals_first_order_attribution_by_autograd_on_the_mask(how):
    """EAP (gradients at the receivers' inputs) equals -dMetric/dMask at the full model (autograd on the mask)."""
    model, batch = _tiny()
    ei = prepare_edges(model, batch, how=how)
    mask = ei.ones().clone().requires_grad_(True)
    ei.metric_of(ei.run(mask[None]))[0].backward()
    first_order = -mask.grad
    scores = torch.tensor(eap(intervention=ei, n_edges=3).scores.values)
    assert torch.allclose(scores, first_order, atol=1e-10, rtol=1e-8)
    assert first_order.abs().max() > 1e-3


def test_eap_is_exact_where_the_metric_is_linear_in_the_edge(induction):
    """No normalisation and a metric linear in the logits: ablating an edge into the logits changes the
    metric by exactly its EAP score (first order is everything)."""
    model, batch, _ = induction
    target = batch.targets[:, -1:]
    metric = lambda logits: logits[:, -1].gather(-1, target)[:, 0]  # per row: the library's metric convention
    ei = prepare_edges(model, batch.tokens, how="resample", metric=metric)
    scores = eap(intervention=ei, n_edges=5).scores
    for e in ei.graph.incoming("logits"):
        single = ei.ones().clone()
        single[e] = 0.0
        actual = float(ei.evaluate(single[None])[0]) - ei.full_metric
        assert abs(float(scores.iloc[e]) - actual) < 1e-9
    assert abs(float(scores["L1H0->logits"])) > 1.0  # the induction head's direct effect is large


def test_eap_ig_is_complete():
    """Integrated gradients along the mask: the scores sum to metric(none) - metric(all)."""
    model, batch = _tiny()
    ei = prepare_edges(model, batch, how="resample")
    result = eap_ig(intervention=ei, steps=64, n_edges=3)
    total = ei.empty_metric - ei.full_metric
    assert abs(float(result.scores.sum()) - total) < 0.01 * abs(total)
    assert result.params == {"steps": 64} and result.n_forward == 2 * 64 + 1


@pytest.mark.slow
def test_oracle_is_the_smallest_faithful_circuit_by_brute_force():
    """13 edges (one layer, two heads): the oracle's circuit reaches the target and no smaller subset does."""
    model = load_pretrained("d32h2")
    batch = PermutationTask(TaskConfig(repeat_ratio=0.3)).test_set(48)
    ei = prepare_edges(model, batch, how="resample")
    result = exhaustive_oracle(intervention=ei, target=0.9)
    assert result.search == "exhaustive: all 8192 subsets of 13 edges"
    size = len(result.circuit)
    assert 0 < size < 13 and result.faithfulness >= 0.9
    mask = torch.tensor(ei.graph.mask_of(result.circuit))
    assert abs(float(ei.faithfulness(ei.evaluate(mask[None]))[0]) - result.faithfulness) < 1e-6
    smaller = [c for k in range(size) for c in itertools.combinations(range(13), k)]
    masks = torch.zeros(len(smaller), 13)
    for row, subset in enumerate(smaller):
        masks[row, list(subset)] = 1.0
    with torch.no_grad():  # plain runs, one mask at a time through the metric: no memoisation involved
        faith = ei.faithfulness(torch.cat([ei.metric_of(ei.run(masks[i : i + 32])) for i in range(0, len(masks), 32)]))
    assert float(faith.max()) < 0.9
    by_size = exhaustive_oracle(intervention=ei, target=0.9, max_exhaustive=0, max_size=size)
    assert len(by_size.circuit) == size and abs(by_size.faithfulness - result.faithfulness) < 1e-6
    # the best faithfulness with at most k edges, k < size, by brute force; both searches agree with it
    sizes = torch.tensor([len(c) for c in smaller])
    brute = [float(faith[sizes <= k].max()) for k in range(size)]
    assert len(result.best_by_size) == 14 and len(by_size.best_by_size) == size + 1
    assert result.best_by_size[:size] == pytest.approx(brute, abs=1e-6)
    assert by_size.best_by_size[:size] == pytest.approx(brute, abs=1e-6)
    assert result.best_by_size[size] == pytest.approx(result.faithfulness, abs=1e-6) and result.faithfulness >= 0.9
    assert list(result.best_by_size) == sorted(result.best_by_size) and brute[0] < brute[-1]


def test_result_table_and_discover_by_name(induction):
    model, batch, ei = induction
    result = discover(model, "eap", "resample", batch=batch, n_edges=5)
    frame = result.to_dataframe()
    assert len(frame) == 46 and list(frame.columns) == ["method", "how", "edge", "sender", "receiver", "score",
                                                        "in_circuit"]
    assert frame["in_circuit"].sum() == 5 and set(frame.loc[frame.in_circuit, "edge"]) == result.circuit
    assert result.ranking()[:5] == list(frame.assign(a=frame.score.abs()).sort_values("a", ascending=False,
                                                                                    kind="stable").edge[:5])
    assert set(METHODS) == {"acdc", "eap", "eap_ig", "node_attribution", "greedy_edges", "mask_pruning",
                            "random_baseline", "exhaustive_oracle"}
    with pytest.raises(ValueError, match="method must be one of"):
        discover(model, "sae", batch=batch)
    from perm_circuits.tasks.factual import FactualRecallTask
    from perm_circuits.tasks.runner import default_model

    other = default_model(FactualRecallTask(), d_model=8, n_heads=1)  # no permutation task to default to
    with pytest.raises(ValueError, match="TransformerBridge carries no task of its own: pass task= "):
        discover(other, "eap")
    with pytest.raises(ValueError, match=r"n_edges must be in \[0, 46\], got 99"):
        eap(intervention=ei, n_edges=99)


def test_acdc_metric_criterion_and_mode_mismatch(induction):
    _, _, ei = induction
    result = acdc(intervention=ei, criterion="metric", tau=0.02)
    assert result.circuit == INDUCTION_EDGES  # the elimination head's small effect falls below tau
    assert result.params == {"tau": 0.02, "criterion": "metric"}
    kept = result.scores[list(result.circuit)]
    assert (kept >= 0.02).all()
    with pytest.raises(ValueError, match="prepared with how='resample'"):
        eap(intervention=ei, how="zero")
    with pytest.raises(ValueError, match="criterion must be one of"):
        acdc(intervention=ei, criterion="l2")


def test_discover_on_the_models_own_task_in_optimal_mode():
    """discover() builds the model's permutation test set itself; the optimal constants beat the mean."""
    model = load_pretrained("d32h2")
    result = discover(model, "eap", "optimal", n=40, n_edges=4, optimal_steps=3)
    assert result.how == "optimal" and len(result.circuit) == 4 and len(result.scores) == 13
    batch = PermutationTask(model.task_config).test_set(40, seed=1234)
    optimal, mean = (prepare_edges(model, batch, how=h, optimal_steps=3) for h in ("optimal", "mean"))
    mask = torch.ones(13)
    mask[list(optimal.graph.outgoing("L0H0"))] = 0.0
    assert float(optimal.evaluate(mask[None])[0]) >= float(mean.evaluate(mask[None])[0]) - 1e-6
    assert result.scores.equals(eap(intervention=optimal, n_edges=4).scores)


def test_oracle_subset_numbers_do_not_overflow_past_63_edges():
    from perm_circuits.discovery.oracle import _masks_of

    n = 77  # tracr reverse's graph
    mask = _masks_of([(1 << 76) | 1], n)[0]
    assert mask.shape == (77,) and mask[0] == 1 and mask[-1] == 1 and mask.sum() == 2


def test_selection_arguments_are_refused_before_the_method_runs(induction, monkeypatch):
    import perm_circuits.discovery.result as result

    model, batch, ei = induction

    def no_work(*args, **kwargs):
        raise AssertionError("prepare_edges ran before the arguments were checked")

    monkeypatch.setattr(result, "prepare_edges", no_work)
    for method in (eap, eap_ig, node_attribution, random_baseline):
        with pytest.raises(ValueError, match="n_edges must be >= 0, got -1"):
            method(model, batch, n_edges=-1)
        with pytest.raises(ValueError, match="target must be a number, got nan"):
            method(model, batch, target=float("nan"))
        with pytest.raises(ValueError, match="threshold must be a number, got nan"):
            method(model, batch, threshold=float("nan"))
    with pytest.raises(ValueError, match="chunk must be >= 1, got 0"):
        greedy_edges(model, batch, chunk=0)
    with pytest.raises(ValueError, match="target must be a number, got nan"):  # else the whole subset search ran
        exhaustive_oracle(model, batch, target=float("nan"))
    with pytest.raises(ValueError, match=r"n_edges must be in \[0, 46\], got 47"):  # the graph's bound, once known
        eap(intervention=ei, n_edges=47)


def test_exhaustive_oracle_picks_the_most_faithful_of_the_smallest_size_even_past_faithfulness_4(monkeypatch):
    """Faithfulness can overshoot 1 by far; among the smallest faithful subsets the most faithful wins."""
    from perm_circuits.discovery import oracle

    model = load_pretrained("d32h2")  # 13 edges
    ei = prepare_edges(model, PermutationTask(TaskConfig()).test_set(4), how="resample")
    weights = torch.zeros(13, dtype=torch.float64)  # faithfulness = sum of the kept edges' weights
    weights[[12, 11, 10]] = torch.tensor([5.0, 6.0, 0.1], dtype=torch.float64)  # 12 and 11: one batch of subsets
    monkeypatch.setattr(oracle, "_evaluate", lambda ei, masks, chunk: masks.double() @ weights)
    edges = ei.graph.edges
    result = exhaustive_oracle(intervention=ei, target=0.9)
    assert result.circuit == {edges[11]} and result.faithfulness == 6.0  # was edges[12] (5): both clamped to 4
    result = exhaustive_oracle(intervention=ei, target=6.05)  # no single edge; of size 2 {11, 12} (11) beats {10, 11}
    assert result.circuit == {edges[11], edges[12]} and result.faithfulness == 11.0
