"""The induction story (previous-token head -> induction head through K-composition): it holds on
the hand-built circuit, names the missing pieces when a piece is removed, and stays out of 1-layer
verdicts."""

from __future__ import annotations

import pytest
import torch

from perm_circuits import ModelConfig, build_induction_model, build_model
from perm_circuits.hooks import hook_count
from perm_circuits.analysis import (
    composition_scores,
    head_roles,
    induction_scores,
    induction_story,
    judge_induction_story,
    path_patching_table,
)

SMALL = {"n": 300, "n_pair": 300, "n_boot": 100}


@pytest.fixture(scope="module")
def model():
    return build_induction_model()


def without_previous_token_head():
    """The hand-built model with L0H0 zeroed (q, k, v rows and o columns of head 0)."""
    model = build_induction_model()
    sd = model.state_dict()
    d_head = model.cfg.d_head
    for name in ("q", "k", "v"):
        sd[f"blocks.0.attn.{name}.weight"][:d_head] = 0.0
    sd["blocks.0.attn.o.weight"][:, :d_head] = 0.0
    model.load_state_dict(sd)
    return model


def test_story_holds_on_the_hand_built_circuit(model):
    story = induction_story(model, **SMALL)
    assert story.holds and story.missing == ()
    assert (story.previous_head, story.induction_head) == ("L0H0", "L1H0")
    assert story.previous_token == pytest.approx(1.0, abs=1e-6) and story.induction == pytest.approx(1.0, abs=1e-6)
    assert story.k_composition == pytest.approx(1 / 3, abs=1e-9)
    assert story.q_composition == 0.0 and story.v_composition == 0.0
    assert story.path_k == pytest.approx(1.0, abs=1e-6) and story.path_k_ci_low > 0.99
    assert story.path_q == pytest.approx(0.0, abs=1e-9) and story.path_v == pytest.approx(0.0, abs=1e-9)
    assert story.summary().startswith(
        "induction circuit: previous-token head L0H0 feeds induction head L1H0 through K-composition ("
    )
    assert hook_count(model) == 0


def test_story_does_not_hold_without_the_previous_token_head():
    story = induction_story(without_previous_token_head(), **SMALL)
    assert not story.holds and len(story.missing) == 4
    assert story.previous_token == pytest.approx(0.2286, abs=1e-3)  # uniform causal attention: (H_9 - 1) / 8
    assert story.induction == pytest.approx(0.25, abs=1e-6)  # L1H0 now spreads over y1..y4
    assert story.missing[0].startswith("a previous-token head (best: L0H0, score 0.23 < 0.5)")
    assert story.missing[1].startswith("an induction head (best: L1H0, score 0.25 < 0.5)")
    assert story.missing[2].startswith("K-composition L0H0->L1H0 dominating (K nan")
    assert "path patching is undefined" in story.missing[3]  # both runs are now answered alike
    assert story.summary().startswith("no induction circuit (L0H0 -> L1H0 is the best candidate): missing ")


def test_only_the_causal_piece_is_missing_when_the_corruption_never_reaches_the_key(model):
    """With the "query" corruption no layer-0 output changes, so path patching cannot show the
    edge (0, CI [0, 0]): scores and weights alone do not make the story."""
    scores = induction_scores(model, n=300)
    composition = {kind: composition_scores(model, kind) for kind in "QKV"}
    paths = path_patching_table(model, n=300, n_boot=100, corruption="query")
    story = judge_induction_story(scores, composition, paths)
    assert not story.holds and len(story.missing) == 1
    assert story.missing[0].startswith("a causal L0H0->L1H0 key path (path patching restores 0.00")
    with pytest.raises(ValueError, match="composition must map each of"):
        judge_induction_story(scores, {"K": composition["K"]}, paths)
    one_layer = build_model(ModelConfig(d_model=16, n_heads=1))
    with pytest.raises(ValueError, match="needs n_layers >= 2"):
        judge_induction_story(induction_scores(one_layer, n=50), composition, paths)
    with pytest.raises(ValueError, match="needs n_layers >= 2"):
        induction_story(one_layer)


def test_head_roles_reports_the_story_for_two_layers_only(model, pretrained):
    options = {"hows": ("mean",), "circuits": False, "probe": False, "n": 400, "n_pair": 300, "n_boot": 100}
    verdict = head_roles(model, **options)
    assert verdict.induction is not None and verdict.induction.holds
    assert "\nInduction: induction circuit: previous-token head L0H0 feeds induction head L1H0" in verdict.summary()
    assert head_roles(model, induction=False, **options).induction is None
    with pytest.raises(TypeError, match="induction"):
        head_roles(model, induction="yes", **options)
    one_layer = head_roles(pretrained("d32h2"), **options)
    assert one_layer.induction is None and "Induction" not in one_layer.summary()
    assert hook_count(model) == 0
    assert torch.equal(model.W_Q, build_induction_model().W_Q)  # nothing was changed on the model
