"""The benchmark's constructed truths checked by intervention on its own batches.

Every functional-truth edge changes the metric (>= 1e-3 of its total change) and the truth alone keeps
faithfulness >= 0.99; structural edges that do not are reported idle."""

from __future__ import annotations

import pytest

from perm_circuits.discovery import prepare_edges
from perm_circuits.discovery.benchmark import benchmark_models
from perm_circuits.discovery.ground_truth import functional_truth
from perm_circuits.discovery.tracr_models import tracr_available

IDLE = {
    ("induction", "zero"): set(),
    ("induction", "mean"): set(),  # under mean ablation the elimination head still moves the metric
    ("induction", "resample"): {"L1H1->logits", "embed->L1H1.v"},  # the elimination head, as the oracle finds
    ("induction_bare", "zero"): set(),
    ("induction_bare", "mean"): set(),
    ("induction_bare", "resample"): set(),
    ("tracr:reverse", "mean"): set(),
    ("tracr:frac_prevs", "mean"): set(),
    ("tracr:reverse", "zero"): {"L0H0->L0MLP", "embed->L0H0.k", "embed->L0H0.q", "embed->L0H0.v", "embed->L3H0.q"},
    ("tracr:reverse", "resample"): set(),
    ("tracr:frac_prevs", "zero"): set(),
    ("tracr:frac_prevs", "resample"): set(),
    ("tracr:sort", "zero"): {"embed->L1H0.k"},
}


@pytest.mark.parametrize(("name", "how"), sorted(IDLE))
def test_benchmark_truths_checked_by_intervention(name, how):
    if name.startswith("tracr:") and not tracr_available():
        pytest.skip("tracr is not installed")
    bench = benchmark_models()[name]
    model, structural = bench.build(), bench.truths()[how]
    ei = prepare_edges(model, bench.batch(model, 200, 1000), how=how, seed=0)
    truth = functional_truth(ei, structural)
    assert truth.idle == IDLE[(name, how)]
    assert truth.edges == structural - truth.idle and truth.checked
    assert min(truth.effects.values()) >= 1e-3 and truth.faithfulness >= 0.99


@pytest.mark.parametrize("how", ["mean", "resample"])
def test_sort_has_nothing_to_explain_under_resample_and_mean(how):
    """Every input of tracr sort's domain is a permutation of the same 4 tokens: the output never changes."""
    if not tracr_available():
        pytest.skip("tracr is not installed")
    bench = benchmark_models()["tracr:sort"]
    model, structural = bench.build(), bench.truths()[how]
    ei = prepare_edges(model, bench.batch(model, 200, 1000), how=how, seed=0)
    truth = functional_truth(ei, structural)
    assert ei.nothing_to_explain and truth.edges == frozenset() and truth.idle == structural and len(structural) == 6


def test_arguments_checked():
    bench = benchmark_models(include_tracr=False)["induction"]
    model = bench.build()
    ei = prepare_edges(model, bench.batch(model, 16, 0), how="resample")
    with pytest.raises(TypeError, match="EdgeIntervention"):
        functional_truth(model, set())
    with pytest.raises(ValueError, match="not edges"):
        functional_truth(ei, {"embed->L9H9.q"})
