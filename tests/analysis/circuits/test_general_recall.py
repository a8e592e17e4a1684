"""The general-recall circuit of d16h1l2-any: the through-MLP path patching on hand-built
models with exact answers, the value-swap pair, and the key numbers on the shipped checkpoint."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import install_import_hook

from perm_circuits import build_induction_model, list_pretrained, load_pretrained
from perm_circuits.hooks import hook_count
from perm_circuits.analysis.interventions.path_patching import induction_patching_pair, path_patch
from perm_circuits.handbuilt import induction_layout

with install_import_hook("perm_circuits.analysis.circuits.general_recall", "beartype.beartype"):
    from perm_circuits.analysis.circuits import general_recall as ac

N = 200


@pytest.fixture(scope="module")
def induction():
    return build_induction_model(d_model=40)


@pytest.fixture(scope="module")
def rerouted():
    """The hand-built induction model with its previous-token feature routed *through* MLP0.

    L0H0 writes the previous token into scratch dimensions S (28..33) instead of PREV; MLP0 copies
    S to PREV with one ReLU neuron per token (the copy is non-negative, so relu is the identity).
    L1H0's key reads only PREV: the direct L0H0 -> L1H0.k edge carries nothing, the edge through
    MLP0 carries everything.
    """
    model = build_induction_model(d_model=40)
    V, lay = 5, induction_layout(5)
    scratch = range(28, 34)
    sd = {key: value.clone() for key, value in model.state_dict().items()}
    o = sd["blocks.0.attn.o.weight"]
    for t in range(V + 1):
        o[scratch[t]] = o[lay["PREV"][t]]
        o[lay["PREV"][t]] = 0.0
        sd["blocks.0.mlp.in.weight"][t, scratch[t]] = 1.0
        sd["blocks.0.mlp.out.weight"][lay["PREV"][t], t] = 1.0
    model.load_state_dict(sd)
    return model


@pytest.fixture(scope="module")
def pair(induction):
    return induction_patching_pair(induction.task_config, n=N, seed=0)


def test_direct_route_model_has_nothing_through_its_zero_mlp(induction, pair):
    """MLP0's weights are zero, so the path through it is exactly 0; with ``direct=True`` it is the
    library's direct K-composition edge (which restores the clean run: 1)."""
    assert ac.path_patch_through_mlp(induction, (0, 0), 0, (1, 0), "k", pair) == 0.0
    both = ac.path_patch_through_mlp(induction, (0, 0), 0, (1, 0), "k", pair, direct=True)
    direct = path_patch(induction, (0, 0), (1, 0), "k", pair, n_boot=50).effects[0].mean
    assert both == pytest.approx(direct, abs=1e-6)
    assert both == pytest.approx(1.0, abs=0.01)
    assert hook_count(induction) == 0


def test_rerouted_model_carries_everything_through_mlp0(rerouted, pair):
    assert path_patch(rerouted, (0, 0), (1, 0), "k", pair, n_boot=50).effects[0].mean == pytest.approx(0.0, abs=1e-6)
    assert ac.path_patch_through_mlp(rerouted, (0, 0), 0, (1, 0), "k", pair) == pytest.approx(1.0, abs=0.01)
    assert ac.path_patch_through_mlp(rerouted, (0, 0), 0, (1, 0), "q", pair) == pytest.approx(0.0, abs=1e-6)
    # activation patching MLP0's output at the y slots restores the run; at the x slots nothing
    assert ac.patch_positions(rerouted, "blocks.0.hook_mlp_out", [1, 3, 5, 7], pair) == pytest.approx(1.0, abs=0.01)
    assert ac.patch_positions(rerouted, "blocks.0.hook_mlp_out", [0, 2, 4, 6], pair) == pytest.approx(0.0, abs=1e-6)
    assert hook_count(rerouted) == 0


def test_path_patch_through_mlp_validates_before_work(induction, pair):
    with pytest.raises(ValueError, match="sender layer <= mlp_layer < receiver layer"):
        ac.path_patch_through_mlp(induction, (0, 0), 1, (1, 0), "k", pair)
    with pytest.raises(ValueError, match="input must be one of"):
        ac.path_patch_through_mlp(induction, (0, 0), 0, (1, 0), "o", pair)
    with pytest.raises(TypeError, match="direct"):
        ac.path_patch_through_mlp(induction, (0, 0), 0, (1, 0), "k", pair, direct=1)


def test_value_swap_pair_moves_the_answer_by_changing_two_ys_only(induction):
    clean, corrupted, answer, wrong = ac.value_swap_pair(induction.task_config, n=N, seed=0)
    diff = clean.tokens != corrupted.tokens
    assert (diff.sum(1) == 2).all() and not diff[:, 0::2].any()  # two y slots, never an x
    assert torch.equal(answer, clean.extras["ys"][:, -1]) and torch.equal(wrong, corrupted.extras["ys"][:, -1])
    assert (answer != wrong).all()
    # the hand-built induction head follows the value: the corrupted run answers wrong
    logits = induction(corrupted.tokens)[:, -1]
    assert torch.equal(logits.argmax(-1), wrong)


def test_any_circuit_numbers_rejects_one_layer_models():
    from perm_circuits import ModelConfig, build_model

    with pytest.raises(ValueError, match="2-layer, 1-head"):
        ac.any_circuit_numbers(build_model(ModelConfig(d_model=16, n_heads=1, n_layers=1, V=5, seed=0)))


# ----------------------------------------------------------------------------- the shipped model


@pytest.fixture(scope="module")
def numbers():
    if "d16h1l2-any" not in list_pretrained():
        pytest.skip("d16h1l2-any is not shipped in this checkout")
    return ac.any_circuit_numbers(load_pretrained("d16h1l2-any"), n=100, n_pair=300)


@pytest.mark.slow
def test_shipped_any_model_circuit(numbers):
    p = "any.circuit"
    for k in range(1, 5):
        assert numbers[f"{p}.recall.k{k}"] >= 0.99
        # L0H0 at the last position: a duplicate-token match on x_k, over twice the other x's
        assert numbers[f"{p}.attn.L0H0_last_to_match.k{k}"] > 2 * numbers[f"{p}.attn.L0H0_last_to_other_x.k{k}"]
        # MLP1 writes the answer
        assert numbers[f"{p}.dla.L1mlp.k{k}"] > 4.0
    assert numbers[f"{p}.attn.L0H0_x2_to_prev_y"] > 0.9
    # which slot: decided at the last position only (the context's x slots carry nothing) ...
    assert numbers[f"{p}.patch.swap.resid1_last"] > 0.95
    assert abs(numbers[f"{p}.patch.swap.resid1_x"]) < 0.05 and abs(numbers[f"{p}.patch.swap.resid1_y"]) < 0.05
    # ... and reaches L1H0's query mostly through MLP0, not directly; no K-composition
    assert numbers[f"{p}.path.swap.via_mlp0_q"] > 0.3
    assert numbers[f"{p}.path.swap.direct_q"] < 0.15
    assert abs(numbers[f"{p}.path.swap.both_k"]) < 0.05
    # which value: L0H0 copies y's forward, read by L1H0's value (direct path mostly)
    assert numbers[f"{p}.path.yswap.both_v"] > 0.9
    assert numbers[f"{p}.path.yswap.direct_v"] > 0.6
    assert numbers[f"{p}.patch.yswap.L1H0_last"] > 0.95
    assert numbers[f"{p}.patch.yswap.L0H0_x.k1"] > 0.9 and numbers[f"{p}.patch.yswap.L0H0_y.k4"] > 0.5
    # MLP1 reads the match both from L1H0 and, bypassing it, from L0H0 + MLP0
    assert numbers[f"{p}.path.swap.into_MLP1_L1H0"] > 0.5 and numbers[f"{p}.path.swap.into_MLP1_L0H0_MLP0"] > 0.25
    assert numbers[f"{p}.path.swap.into_MLP1_all"] > 0.8
    # ablations: L0H0 at the last position alone destroys recall in every mode
    for how in ac.ABLATION_MODES:
        assert numbers[f"{p}.abl.{how}.L0H0_last.mean"] < 0.2
        assert numbers[f"{p}.abl.{how}.MLP0_all.mean"] < 0.3


@pytest.mark.slow
def test_template_names_only_measured_keys(numbers):
    from pathlib import Path

    from perm_circuits.pages import render, template_keys

    template = (Path(__file__).resolve().parents[3] / "docs" / "templates" / "general_recall_circuit.md").read_text()
    keys = set(template_keys(template))
    assert keys and keys <= set(numbers), sorted(keys - set(numbers))
    assert "{{" not in render(template, numbers)


def test_template_prose_quotes_no_hand_typed_result():
    """As tests/test_results_docs.py checks the results templates: no decimal or percent outside
    placeholders and code."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "templates" / "general_recall_circuit.md").read_text()
    prose = re.sub(r"`[^`]*`", " ", re.sub(r"\{\{.*?\}\}", " ", text))
    assert re.findall(r"(?<![\w.])(?:x?\d+(?:[.-]\d+)+|\d+%)", prose) == []
    assert text.startswith("## The circuit of d16h1l2-any\n")
