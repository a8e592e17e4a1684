"""Every analysis on two-layer models, with exact answers.

Two kinds of model:

- the hand-built induction circuit :func:`perm_circuits.build_induction_model` (no LayerNorm, MLPs
  zero): L0H0 writes the previous token into its own subspace, L1H0 (the induction head) matches
  the last query against it and copies the y after the earlier x into ``OUT`` (gain 10), L1H1
  attends uniformly to the earlier ys and writes ``-5/8`` of each into ``OUT``; the unembedding
  reads ``OUT`` only.  So at the last position a repeated query ``x5 = x_k`` gets ``10`` from L1H0
  on ``y_k`` and ``-6.25`` from L1H1 on each of ``y1..y4`` (``y5``, the elimination answer, gets
  0): every ablation, patch and attribution below has a value known in closed form;
- a random two-layer LayerNorm model, where the answers are identities (zero ablation = deleting
  the weights; the attribution adds up to the logits).
"""

from __future__ import annotations

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_induction_model, build_model, make_test_set
from perm_circuits.hooks import hook_count
from perm_circuits.analysis import (
    HOWS,
    ablate_head,
    ablate_mlp,
    ablation_table,
    decompose_logit_diff,
    direct_logit_attribution,
    ffn_key_value_probe,
    find_recall_head,
    head_roles,
    head_scores,
    memory_probe_tracker,
    mlp_prediction_flips,
    model_memory_probes,
    patch_head_outputs,
    patch_head_sources,
    patch_mlp,
    patching_pair,
)
from perm_circuits.analysis.probes.dla import elimination_answers
from perm_circuits.analysis.study.claims import single_head
from perm_circuits.analysis.study.scores import repeat_source_of
from perm_circuits.models import save_model, task_config_of

from .handbuilt import without

V = 5
COMPONENTS = ["L0H0", "L0H1", "L0MLP", "L1H0", "L1H1", "L1MLP"]


@pytest.fixture(scope="module")
def induction():
    return build_induction_model()


@pytest.fixture(scope="module")
def batch(induction):
    return make_test_set(task_config_of(induction), n=300)


@pytest.fixture(scope="module")
def deep():
    torch.manual_seed(0)
    return build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2))


def _logits(model, tokens, hooks=()):
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        return model(tokens)


# ----------------------------------------------------------------------------- ablation


def test_zero_ablation_deletes_the_weights_of_any_head_or_mlp_in_any_layer(deep):
    tokens = make_test_set(TaskConfig(repeat_ratio=0.3), n=64).tokens
    for layer in (0, 1):
        for head in (0, 1):
            hooks = ablate_head(deep, layer, head, "zero")
            assert hooks[0][0] == f"blocks.{layer}.attn.hook_z"
            torch.testing.assert_close(_logits(deep, tokens, hooks), _logits(without(deep, layer, head), tokens),
                                       atol=1e-5, rtol=1e-5)
        hooks = ablate_mlp(deep, layer, "zero")
        torch.testing.assert_close(_logits(deep, tokens, hooks), _logits(without(deep, layer), tokens),
                                   atol=1e-5, rtol=1e-5)
    assert ablate_head(deep, -1, -1)[0][0] == "blocks.1.attn.hook_z"  # layer=-1 is the last layer
    assert hook_count(deep) == 0


def test_ablation_table_covers_every_head_and_mlp_of_both_layers_under_every_mode(induction, batch):
    table = ablation_table(induction, test_set=batch)
    assert [r.component for r in table.rows] == ["none"] + [c for c in COMPONENTS for _ in HOWS]
    assert {(r.layer, r.head) for r in table.rows if r.component == "L1H1"} == {(1, 1)}
    base = table.baseline
    assert base["elimination_accuracy"] == 1.0 and base["recall_accuracy"] == 1.0
    # the induction head carries recall: without it every repeated query gets the elimination answer
    for how in ("zero", "mean", "optimal"):
        row = table.get("L1H0", how)
        assert (row["recall_accuracy"], row["elimination_accuracy"]) == (0.0, 1.0), how
    # so does the previous-token head it reads ...
    for how in ("zero", "mean", "optimal"):
        assert table.get("L0H0", how)["recall_accuracy"] == 0.0, how
    # ... but it only carries the queries' tokens, which the binding-free reference keeps: no change at all
    assert table.get("L0H0", "binding_free").test_loss == pytest.approx(base.test_loss, abs=1e-6)
    assert table.get("L0H0", "binding_free")["recall_accuracy"] == 1.0
    # the elimination head in layer 1: elimination goes, recall stays
    for how in ("zero", "mean", "optimal"):
        row = table.get("L1H1", how)
        assert (row["elimination_accuracy"], row["recall_accuracy"]) == (0.0, 1.0), how
    # L0H1 has no weights: every mode leaves the model exactly as it is
    for how in HOWS:
        row = table.get("L0H1", how)
        assert row.test_loss == pytest.approx(base.test_loss, abs=1e-6), how
    # without the induction head, x5 = x_k gets the elimination answer for every k, not only k = 1
    predictions = _logits(induction, batch.tokens, ablate_head(induction, 1, 0))[:, -1].argmax(-1)
    sources = repeat_source_of(batch.tokens)
    assert set(sources[batch.extras["repeated"]].tolist()) == {0, 1, 2, 3}
    expected = elimination_answers(batch.tokens, V)[:, -1]
    assert torch.equal(predictions[batch.extras["repeated"]], expected[batch.extras["repeated"]])
    assert hook_count(induction) == 0


# ----------------------------------------------------------------------------- attribution


def test_dla_splits_the_logits_over_both_layers_exactly(induction, batch, deep):
    dla = direct_logit_attribution(induction, batch)
    for name in COMPONENTS[:2] + COMPONENTS[3:5] + ["L0mlp", "L1mlp", "L0attn_bias", "L1attn_bias"]:
        assert name in dla.components
    # recall (baseline: the elimination answer y5): L1H0 adds 10 to y_k, L1H1 -6.25 to y1..y4
    assert dla.component("L1H0", "last-step recall") == pytest.approx(10.0, abs=1e-4)
    assert dla.component("L1H1", "last-step recall") == pytest.approx(-6.25, abs=1e-4)
    # elimination (against the mean of the other values): the unmatched induction head spreads 10/4 over y1..y4
    assert dla.component("L1H0", "last-step elimination") == pytest.approx(-2.5, abs=1e-4)
    assert dla.component("L1H1", "last-step elimination") == pytest.approx(6.25, abs=1e-4)
    for name in ("L0H0", "L0H1", "L0mlp", "L1mlp", "embed", "pos_embed"):  # no direct path to OUT
        assert dla.component(name, "last-step recall") == 0.0, name
    # on a random LayerNorm model too, the components add up to the logits (both layers, ln_final scale)
    decomposition = decompose_logit_diff(deep, make_test_set(TaskConfig(repeat_ratio=0.3), n=200))
    assert decomposition.max_residual_error < 1e-5
    assert {"L1H0", "L1H1", "L1mlp", "L1mlp_bias"} <= set(decomposition.components)


# ----------------------------------------------------------------------------- patching


def test_patching_a_layer_one_head_restores_exactly_the_clean_run(induction):
    pair = patching_pair(task_config_of(induction), 200, 0)
    heads = patch_head_outputs(induction, pair, n_boot=20)
    assert heads.get(layer=1, head=0).mean == pytest.approx(1.0, abs=1e-5)
    for layer, head in ((0, 0), (0, 1), (1, 1)):  # their last-position outputs do not depend on x5
        assert heads.get(layer=layer, head=head).mean == pytest.approx(0.0, abs=1e-6)
    # the restored logits are the clean ones: the unembedding reads only what layer 1's heads write
    clean, corrupted = pair[0].tokens, pair[1].tokens
    z = {}

    def keep(act, hook):
        z["clean"] = act.clone()

    def put(act, hook):
        act[:, -1, 0] = z["clean"][:, -1, 0]
        return act

    clean_logits = _logits(induction, clean, [("blocks.1.attn.hook_z", keep)])
    patched = _logits(induction, corrupted, [("blocks.1.attn.hook_z", put)])
    torch.testing.assert_close(patched[:, -1], clean_logits[:, -1], atol=1e-5, rtol=0)
    # per source position: the induction head's weight on y1 (position 1) is all of recall
    sources = patch_head_sources(induction, pair, n_boot=20)
    for s in range(2 * V - 1):
        expected = 1.0 if s == 1 else 0.0
        assert sources.get(layer=1, head=0, position=2 * V - 2, source_position=s).mean == pytest.approx(expected, abs=1e-5)
    best = find_recall_head(induction, pair, n_boot=20)
    assert (best.layer, best.head) == (1, 0)
    mlps = patch_mlp(induction, pair, n_boot=20)
    assert [cell.layer for cell in mlps.cells] == [0, 1]
    assert all(cell.mean == 0.0 for cell in mlps.cells)
    assert hook_count(induction) == 0


# ----------------------------------------------------------------------------- scores and probes


def test_head_scores_and_memory_probes_name_and_read_layer_one(induction, batch):
    scores = head_scores(induction, batch)
    assert [s.component for s in scores.heads] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    prev = scores.get(0, 0)  # previous-token head: x -> the y before it, y -> the x before it
    assert prev.x_prev_y == pytest.approx(1.0, abs=1e-6) and prev.y_self == pytest.approx(0.0, abs=1e-6)
    elim = scores.get(1, 1)  # uniform over the earlier ys
    assert elim.elim_y_mass == pytest.approx(1.0, abs=1e-6) and elim.elim_entropy == pytest.approx(1.0, abs=1e-6)
    assert "eliminator" in elim.patterns
    induction_head = scores.get(1, 0)  # the last query attends to the y after the x it repeats
    assert induction_head.source_y_repeated == pytest.approx(1.0, abs=1e-6)
    assert induction_head.source_y_baseline == pytest.approx(0.25, abs=1e-6)

    probes = model_memory_probes(induction)  # every layer by default
    assert list(dict.fromkeys(probes.to_dataframe()["component"])) == COMPONENTS
    assert probes.get("L1H0", "copy") == 1.0  # OV copies the attended token into OUT
    assert probes.get("L1H1", "suppress") == 1.0  # OV removes it
    assert probes.get("L0H0", "copy") == 0.0  # writes PREV, which the unembedding never reads
    assert probes.get("L0H0", "prev_y") == 1.0
    # layer >= 1 probes read the embeddings alone: the induction head's key reads PREV (what L0H0
    # wrote), which no embedding holds, so its direct-path x_match memory is empty (module docstring)
    assert probes.get("L1H0", "x_match") == 0.0
    only = model_memory_probes(induction, layer=-1).to_dataframe()
    assert set(only["component"]) == {"L1H0", "L1H1", "L1MLP"}
    tracker = memory_probe_tracker()  # every layer by default
    tracker.record(induction, epoch=0)
    assert list(dict.fromkeys(tracker.to_dataframe()["component"])) == COMPONENTS


def test_ffn_probes_and_flips_of_each_layer(induction, batch, deep):
    # both MLPs of the induction model are zero: resid_mid == resid_post, no prediction ever flips
    for layer in (0, 1):
        flips = mlp_prediction_flips(induction, batch, layer=layer)
        assert flips.layer == layer
        assert all(stats.flip_rate == 0.0 for stats in flips.subgroups if stats.n)
    probe = ffn_key_value_probe(deep, layer=-1)
    assert probe.layer == 1 and {row.layer for row in probe.neurons} == {1}


# ----------------------------------------------------------------------------- roles, claims, report


def test_head_roles_judge_the_heads_of_layer_one(induction):
    verdict = head_roles(induction, n=600, n_pair=300, n_boot=50, hows=("zero", "mean"), circuits=False)
    assert [h.component for h in verdict.heads] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    assert [m.component for m in verdict.mlps] == ["L0MLP", "L1MLP"]
    assert verdict.role("L1H1") == "eliminator"
    assert verdict.role("L0H1") == "unused" and verdict.role("L1MLP") == "unused"
    assert verdict.heads[0].causal_role == "recall"  # L0H0: recall needs the previous token
    induction_head = verdict.heads[2]
    assert induction_head.patch_effect == pytest.approx(1.0, abs=1e-5)  # L1H0's output is all of recall
    # L1H0 shares the eliminator pattern with L1H1 (unmatched x queries spread over the ys), and
    # ablating both breaks elimination; but L1H1 alone does that, so L1H0 is not a redundant eliminator
    assert induction_head.elimination_retention == pytest.approx(1.0)
    assert induction_head.joint_elimination_retention < 0.25
    assert induction_head.causal_role == "recall" and induction_head.role == "other"
    assert "which L1H1 alone already breaks" in induction_head.reason
    assert verdict.claims.status("recalls") == "supported"
    eliminator = verdict.claims.get("eliminator_head")
    assert eliminator.status == "supported" and eliminator.evidence.startswith("L1H1:")
    assert "- L1H0 = " in verdict.summary() and "- L1MLP = " in verdict.summary()
    assert hook_count(induction) == 0


def test_one_head_per_layer_in_two_layers_gets_the_multi_head_claims():
    assert single_head(ModelConfig(d_model=16, n_heads=1))
    assert not single_head(ModelConfig(d_model=16, n_heads=1, n_layers=2))
    model = build_model(ModelConfig(d_model=16, n_heads=1, n_layers=2))
    verdict = head_roles(model, n=300, n_pair=50, n_boot=20, how="zero", hows=("zero",), circuits=False, probe=False)
    claims = [c.claim for c in verdict.claims]
    assert "recalls" in claims and "binding_head" in claims
    assert "no_recall" not in claims and "single_head_accumulates" not in claims
    assert [h.component for h in verdict.heads] == ["L0H0", "L1H0"]


def test_figures_have_a_panel_or_row_per_head_of_every_layer(induction, batch):
    from perm_circuits.views import figures as F
    from perm_circuits.analysis import figure_data as D

    attention = F.attention_heatmaps(D.mean_attention(induction, batch))
    titles = [a.text for a in attention.layout.annotations]
    assert all(any(name in t for t in titles) for name in ("L0H0", "L0H1", "L1H0", "L1H1"))
    table = ablation_table(induction, hows=("zero",), test_set=batch)
    ablation = F.ablation_heatmap(table)
    assert set(COMPONENTS) <= {str(y) for trace in ablation.data for y in trace.y}
    sweep = patch_head_outputs(induction, patching_pair(task_config_of(induction), 100, 0), n_boot=20)
    patching = F.patching_heatmap(sweep)
    assert {"L1H0", "L1H1"} <= {str(y) for trace in patching.data for y in trace.y}


@pytest.mark.slow
def test_report_of_a_two_layer_checkpoint_renders_offline(induction, tmp_path):
    from perm_circuits.views.html import remote_resource_refs
    from perm_circuits.reports import write_report

    folder = save_model(induction, tmp_path / "induction", task_config_of(induction))
    (page,) = write_report([folder], tmp_path / "report", n=200, progress=False)
    html = page.read_text(encoding="utf-8")
    for text in ("L1H0", "L1H1", "L1MLP", "Attention of every head of layer 1",
                 "key-value view of the MLP of layer 1", "before vs after the MLP of layer 1"):
        assert text in html, text
    assert remote_resource_refs(html) == []
    assert hook_count(induction) == 0
