"""Causal scrubbing against ground truth nobody here tuned: a tracr-compiled RASP program's own
hypothesis (Lindner et al. 2023) recovers the metric; one wrong claim does not."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.analysis.hypothesis import Feature, Hypothesis, causal_scrub
from perm_circuits.discovery.tracr_models import tracr_available
from perm_circuits.tasks.base import TaskBatch

pytestmark = pytest.mark.skipif(
    not tracr_available(), reason="tracr is not installed (optional extra: pip install 'perm_circuits[tracr]')"
)


def accuracy(logits, batch):
    return ((logits.argmax(-1) == batch.targets).float() * batch.mask).sum(1) / batch.mask.sum(1)


@pytest.fixture(scope="module")
def frac_prevs():
    from perm_circuits.discovery.tracr_models import cached_tracr_model

    model = cached_tracr_model("frac_prevs")  # compiled once per session, shared with the discovery tests
    inputs = model.domain(4)
    encode = model.assembled.output_encoder.encoding_map
    targets = torch.tensor([[0] + [encode[v] for v in row] for row in model.tracr_outputs(inputs)])
    mask = torch.ones(targets.shape)
    mask[:, 0] = 0  # BOS has no output
    return model, TaskBatch(model.encode(inputs), targets, mask)


def test_the_compiled_programs_hypothesis_recovers_and_a_position_only_selector_does_not(frac_prevs):
    model, batch = frac_prevs
    x = model.assembled.input_encoder.encoding_map["x"]
    # the program: is_x = Map(tokens == "x") (MLP 0); frac = mean of is_x over Select(indices, indices, LEQ)
    # (layer-1 head); frac >= 1/2 (MLP 1). With one length per batch, frac is the running count of x.
    is_x = Feature("is_x per position", lambda t: (t == x).long(), batched=True)
    count = Feature("running count of x", lambda t: (t == x).long().cumsum(1), batched=True)
    half = Feature("frac >= 1/2", lambda t: (2 * (t == x).long().cumsum(1)[:, 1:] >= torch.arange(1, t.shape[1])).long(),
                   batched=True)
    own = causal_scrub(model.bridge, Hypothesis.of({"L0MLP": is_x, "L1H0": count, "L1MLP": half}), batch, accuracy,
                       n_boot=100)
    assert own.model_metric == 1.0 and own.random_metric < 0.7
    assert own.recovery >= 0.99 and own.ci_low >= 0.99
    wrong = causal_scrub(model.bridge, Hypothesis.of({"L0MLP": is_x, "L1H0": Feature.constant(), "L1MLP": half}),
                         batch, accuracy, n_boot=100)
    assert wrong.recovery < 0.5 and wrong.ci_high < 0.5  # the selector said to read position only
    per_claim = wrong.to_dataframe().set_index("component")["recovery"]
    assert per_claim["L1H0"] < 0.5 and per_claim["L0MLP"] == per_claim["L1MLP"] == 1.0
