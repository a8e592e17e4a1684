"""The hand-built induction circuit (perm_circuits.handbuilt): exact recall for every k over every
sequence, the designed attention patterns, and the scores that read them."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from perm_circuits import build_induction_model, recall_generalisation
from perm_circuits.hooks import hook_count
from perm_circuits.models import fast_forward
from perm_circuits.analysis import composition_scores, induction_scores
from perm_circuits.handbuilt import elimination_weight, induction_layout
from perm_circuits.hooks import run_capture

V = 5
SEQ = 2 * V - 1


def all_sequences(V: int, repeated: bool):
    """Every input of the task: every permutation x every x order (x5 = x_k for each k, or x5 the
    one x not yet shown).  Returns inputs, answers and the 0-based source (-1 when not repeated)."""
    perms = torch.tensor(list(itertools.permutations(range(1, V + 1))))
    orders, sources = [], []
    for first in itertools.permutations(range(1, V + 1), V - 1):
        if repeated:
            for k in range(V - 1):
                orders.append([*first, first[k]])
                sources.append(k)
        else:
            orders.append([*first, next(x for x in range(1, V + 1) if x not in first)])
            sources.append(-1)
    xs = torch.tensor(orders).repeat(len(perms), 1)
    perm = perms.repeat_interleave(len(orders), dim=0)
    ys = perm.gather(1, xs - 1)
    inputs = torch.stack([xs, ys], dim=2).flatten(1)[:, :-1]
    return inputs, ys[:, -1], torch.tensor(sources).repeat(len(perms))


@pytest.fixture(scope="module")
def model():
    return build_induction_model()


def test_recall_is_exact_for_every_k_over_every_sequence(model):
    inputs, answers, source = all_sequences(V, repeated=True)
    assert inputs.shape == (120 * 120 * 4, SEQ)  # 120 permutations x 120 orders of x1..x4 x 4 sources
    sample = torch.arange(0, len(inputs), 97)
    with torch.no_grad():  # fast_forward is the bridge's forward in plain PyTorch, checked on a sample:
        logits = torch.cat([fast_forward(model, chunk)[:, -1] for chunk in inputs.split(2048)])
        bridge = model(inputs[sample])[:, -1]
    assert torch.allclose(logits[sample], bridge, atol=1e-4)
    correct = logits.argmax(-1) == answers
    for k in range(V - 1):
        assert bool(correct[source == k].all()), f"x5 = x{k + 1}"
    # the designed logits (units of logit_scale = 10): y_k 1 - 5/8, other revealed ys -5/8, y5 0, token 0 -1
    answer_logit = logits.gather(1, answers[:, None])[:, 0]
    assert torch.allclose(answer_logit, torch.tensor(10 * (1 - 5 / 8)), atol=1e-4)
    assert torch.allclose(logits[:, 0], torch.tensor(-10.0), atol=1e-4)
    ranked = logits.sort(dim=-1, descending=True).values
    assert torch.allclose(ranked[:, 1], torch.tensor(0.0), atol=1e-4)  # runner-up: the unrevealed y


def test_non_repeated_queries_are_answered_by_elimination(model):
    inputs, answers, _ = all_sequences(V, repeated=False)
    with torch.no_grad():
        logits = torch.cat([fast_forward(model, chunk)[:, -1] for chunk in inputs.split(2048)])
    assert bool((logits.argmax(-1) == answers).all())
    revealed = inputs[:, 1::2]  # y1..y4: 1/4 - 5/8 each
    assert torch.allclose(logits.gather(1, revealed), torch.tensor(-3.75), atol=1e-4)
    assert elimination_weight(V) == 2.5


def test_recall_generalisation_reports_one_everywhere(model):
    result = recall_generalisation(model, n=200)
    assert result.recall == (1.0, 1.0, 1.0, 1.0) and result.elimination == 1.0
    assert result.trained_sources == (1, 2, 3, 4)


def test_without_elimination_non_repeated_queries_tie(model):
    bare = build_induction_model(eliminate=False)
    inputs, answers, _ = all_sequences(V, repeated=False)
    inputs, answers = inputs[:500], answers[:500]
    with torch.no_grad():
        logits = bare(inputs)[:, -1]
    assert torch.allclose(logits.gather(1, inputs[:, 1::2]), torch.tensor(2.5), atol=1e-4)
    assert torch.allclose(logits.gather(1, answers[:, None]), torch.tensor(0.0), atol=1e-4)
    rep, rep_answers, _ = all_sequences(V, repeated=True)
    with torch.no_grad():
        assert bool((bare(rep[:2000])[:, -1].argmax(-1) == rep_answers[:2000]).all())


def test_designed_attention_patterns(model):
    inputs, _, source = all_sequences(V, repeated=True)
    inputs, source = inputs[:400], source[:400]
    names = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    _, store = run_capture(model, inputs, names)
    assert hook_count(model) == 0
    previous = torch.zeros(SEQ, SEQ)
    previous[0, 0] = 1.0
    previous[torch.arange(1, SEQ), torch.arange(SEQ - 1)] = 1.0
    l0h0 = store[names[0]][:, 0]
    assert (l0h0 - previous).abs().max() < 1e-6  # leak <= 8 e^-20
    assert float(store[names[0]][:, 1, -1].std()) == pytest.approx(0.0, abs=1e-7)  # zero head: uniform
    last = store[names[1]][:, :, -1]  # [batch, head, key]
    induction_target = torch.zeros(400, SEQ)
    induction_target[torch.arange(400), 2 * source + 1] = 1.0
    assert (last[:, 0] - induction_target).abs().max() < 1e-6
    y_slots = torch.zeros(SEQ)
    y_slots[1::2] = 1 / (V - 1)
    assert (last[:, 1] - y_slots).abs().max() < 1e-6  # the elimination head reads y1..y4 evenly


def test_induction_scores_and_composition(model):
    scores = induction_scores(model, n=400)
    assert scores.get(0, 0).previous_token == pytest.approx(1.0, abs=1e-6)
    assert scores.get(1, 0).induction == pytest.approx(1.0, abs=1e-6)
    assert scores.get(1, 0).induction_by_source == pytest.approx((1.0,) * 4, abs=1e-6)
    assert scores.get(1, 0).duplicate_token == pytest.approx(0.0, abs=1e-6)
    assert scores.get(1, 1).induction < 0.3 and scores.get(0, 1).previous_token < 0.3
    k, q, v = (composition_scores(model, kind).scores[0, 0, 1, 0] for kind in "KQV")
    assert float(k) == pytest.approx(1 / 3, abs=1e-9)  # module docstring: 1 / sqrt(V + 4)
    assert float(q) == 0.0 and float(v) == 0.0
    k_baseline = composition_scores(model, "K").baseline
    assert k_baseline == pytest.approx(0.177, abs=1e-3) and float(k) > 1.8 * k_baseline
    # L0H0 -> L1H1 (the positional elimination head) composes in no way; L0H1 is zero: NaN (0/0)
    for kind in "QKV":
        scores_kind = composition_scores(model, kind).scores
        assert float(scores_kind[0, 0, 1, 1]) == 0.0
        assert math.isnan(float(scores_kind[0, 1, 1, 0]))


def test_layout_and_arguments():
    layout = induction_layout(5)
    assert [len(r) for r in layout.values()] == [6, 9, 1, 6, 6] and layout["OUT"].stop == 28
    wide = build_induction_model(4, d_model=40, sharpness=30.0, logit_scale=1.0)
    assert wide.cfg.d_model == 40 and wide.cfg.n_layers == 2 and wide.cfg.normalization_type is None
    assert recall_generalisation(wide, n=100).recall == (1.0, 1.0, 1.0)
    assert build_induction_model(8).cfg.d_model == 44  # 5V+3 = 43, rounded up to even
    with pytest.raises(ValueError, match="d_model must be an even int >= 5V\\+3 = 28 for V=5, got 26"):
        build_induction_model(d_model=26)
    with pytest.raises(ValueError, match="got 33"):
        build_induction_model(d_model=33)
    with pytest.raises(ValueError, match="sharpness must be a finite number > 0"):
        build_induction_model(sharpness=-1.0)
    with pytest.raises(ValueError, match="V must be in"):
        build_induction_model(9)
    with pytest.raises(TypeError, match="eliminate"):
        build_induction_model(eliminate=1)
