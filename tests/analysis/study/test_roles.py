"""Head roles on hand-built models whose attention and circuits are known exactly.

The models have no LayerNorm (``normalization_type=None``), one-hot token and position
embeddings and attention scores set through the positional embedding, so every pattern is known
in closed form: zero Q/K gives uniform causal attention; a key ``C * is_y(s)`` gives uniform
attention over the prior y positions (a perfect eliminator); ``C * is_y(s) + D * s`` attends to
the most recent y (x -> preceding y, y -> itself: a perfect binder).  With ``C, D = 40, 20`` the
leaked attention is below ``e^-20``.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from jaxtyping import install_import_hook

from perm_circuits import ModelConfig, TaskConfig, build_model, make_test_set
from perm_circuits.hooks import hook_count
from perm_circuits.tasks.permutation_data import make_batch

with install_import_hook("perm_circuits.analysis.study.scores", "beartype.beartype"):
    from perm_circuits.analysis.study import scores as scores_module  # noqa: E402

from perm_circuits.analysis.interventions.ablation import AblationRow, AblationTable  # noqa: E402
from perm_circuits.analysis.interventions.permutation_table import study_table  # noqa: E402

from perm_circuits.analysis.study.scores import (  # noqa: E402
    AttentionBySource,
    HeadScore,
    HeadScores,
    RoleThresholds,
    attention_by_source,
    head_scores,
    repeat_source_of,
)
from perm_circuits.analysis.study.verdict import head_roles, judge_roles  # noqa: E402
from ..handbuilt import blank_model

V = 5
C, D, M = 40.0, 20.0, 30.0
E, R = 20.0, 20.0
ELIM, FLAG, COPY, RECALL = 16, 21, 22, 27  # residual dims of the full hand-built circuit
FAST = dict(n=600, n_pair=300, n_boot=50)


# ----------------------------------------------------------------------------- hand-built models


def _is_y(p: int) -> float:
    return float(p % 2 == 1)


def _eliminator(sd, head: int, d_head: int, out: int | None = None, layer: int = 0) -> None:
    """Key C * is_y: uniform attention over prior ys; copies y tokens to dims out..out+4.

    In ``layer`` 1 it reads the same embedding dims (nothing in layer 0 writes there)."""
    s, o, b = math.sqrt(d_head), head * d_head, f"blocks.{layer}.attn"
    sd[f"{b}.q.bias"][o] = 1.0
    for p in range(2 * V - 1):
        sd[f"{b}.k.weight"][o, V + 1 + p] = C * _is_y(p) * s
    if out is not None:
        for t in range(1, V + 1):
            sd[f"{b}.v.weight"][o + t - 1, t] = 1.0
            sd[f"{b}.o.weight"][out + t - 1, o + t - 1] = 1.0


def _last_y(sd, head: int, d_head: int) -> None:
    """Key C * is_y + D * s: attend to the most recent y (binding pattern)."""
    s, o = math.sqrt(d_head), head * d_head
    sd["blocks.0.attn.q.bias"][o] = 1.0
    for p in range(2 * V - 1):
        sd["blocks.0.attn.k.weight"][o, V + 1 + p] = (C * _is_y(p) + D * p) * s


def _duplicate(sd, head: int, d_head: int, out: int | None = None) -> None:
    """Score M*[same token] - M*is_y - 2M*[s is the last position]: x5 -> the earlier identical x."""
    s, o = math.sqrt(d_head), head * d_head
    for t in range(V + 1):
        sd["blocks.0.attn.q.weight"][o + t, t] = M
        sd["blocks.0.attn.k.weight"][o + t, t] = s
    sd["blocks.0.attn.q.bias"][o + V + 1] = M
    for p in range(2 * V - 1):
        sd["blocks.0.attn.k.weight"][o + V + 1, V + 1 + p] = (-_is_y(p) - 2.0 * (p == 2 * V - 2)) * s
    if out is not None:  # value: "the source is position 0" -> a repeat flag
        sd["blocks.0.attn.v.weight"][o, V + 1] = 1.0
        sd["blocks.0.attn.o.weight"][out, o] = 1.0


def _y1_copier(sd, head: int, d_head: int, out: int) -> None:
    """Binding pattern everywhere except the last query, which reads y1 (position 1)."""
    s, o, last = math.sqrt(d_head), head * d_head, 2 * V - 2
    for p in range(2 * V - 1):
        sd["blocks.0.attn.q.weight"][o + (1 if p == last else 0), V + 1 + p] = 1.0
        sd["blocks.0.attn.k.weight"][o, V + 1 + p] = (C * _is_y(p) + D * p) * s
    sd["blocks.0.attn.k.weight"][o + 1, V + 2] = M * s
    for t in range(1, V + 1):
        sd["blocks.0.attn.v.weight"][o + t - 1, t] = 1.0
        sd["blocks.0.attn.o.weight"][out + t - 1, o + t - 1] = 1.0


def _unembed_elimination(sd) -> None:
    for v in range(1, V + 1):
        sd["unembed.weight"][v, ELIM + v - 1] = -E
    sd["unembed.weight"][0, 3 * V] = -100.0


def full_circuit_model():
    """Eliminator (H0), duplicate-token head (H1) and y1 copier with the binding pattern (H2).

    The MLP fires for value v only at the last position, when the repeat flag (H1) is on and y1 = v
    (H2): it completes recall.  Elimination is attention (H0) straight into the unembedding.
    """
    d_head = 8
    model, sd = blank_model(ModelConfig(d_model=32, n_heads=3, d_head=d_head, normalization_type=None))
    _eliminator(sd, 0, d_head, out=ELIM)
    _duplicate(sd, 1, d_head, out=FLAG)
    _y1_copier(sd, 2, d_head, out=COPY)
    for v in range(1, V + 1):
        sd["blocks.0.mlp.in.weight"][v - 1, FLAG] = 2.0
        sd["blocks.0.mlp.in.weight"][v - 1, COPY + v - 1] = 1.0
        sd["blocks.0.mlp.in.weight"][v - 1, V + 1 + 2 * V - 2] = 1.0  # only at the last position
        sd["blocks.0.mlp.in.bias"][v - 1] = -3.2
        sd["blocks.0.mlp.out.weight"][RECALL + v - 1, v - 1] = 1.0
        sd["unembed.weight"][v, RECALL + v - 1] = R
    _unembed_elimination(sd)
    model.load_state_dict(sd)
    return model


def accumulator_model(n_heads: int, n_layers: int = 1):
    """Every head (of every layer) is a perfect eliminator writing the full signal; nothing recalls."""
    d_head = 8
    model, sd = blank_model(ModelConfig(d_model=32, n_heads=n_heads, n_layers=n_layers, d_head=d_head,
                                        normalization_type=None))
    for layer in range(n_layers):
        for head in range(n_heads):
            _eliminator(sd, head, d_head, out=ELIM, layer=layer)
    _unembed_elimination(sd)
    model.load_state_dict(sd)
    return model


@pytest.fixture(scope="module")
def full_verdict():
    return head_roles(full_circuit_model(), hows=("mean", "zero"), **FAST)


# ----------------------------------------------------------------------------- exact scores

UNIFORM = {
    "elim_y_mass": sum((j - 1) / (2 * j - 1) for j in range(2, V + 1)) / (V - 1),
    "elim_entropy": 1.0,
    "x_prev_y": sum(1 / (2 * j - 1) for j in range(2, V + 1)) / (V - 1),
    "y_self": sum(1 / (2 * j) for j in range(1, V)) / (V - 1),
    "dup_repeated": 1 / 9,
    "dup_baseline": 1 / 9,
    "duplicate_score": 0.0,
    "source_y_shift": 0.0,
}


def _assert_scores(score: HeadScore, expected: dict[str, float], atol: float = 1e-6) -> None:
    for name, value in expected.items():
        assert getattr(score, name) == pytest.approx(value, abs=atol), name


def test_zero_qk_head_is_exactly_uniform_in_a_layernorm_model():
    model = build_model(ModelConfig(d_model=16, n_heads=2))
    sd = model.state_dict()
    for kind in "qk":
        sd[f"blocks.0.attn.{kind}.weight"][:8] = 0.0
        sd[f"blocks.0.attn.{kind}.bias"][:8] = 0.0
    model.load_state_dict(sd)
    scores = head_scores(model, n=500)
    expected = dict(UNIFORM)
    expected["elimination_score"] = UNIFORM["elim_y_mass"]
    expected["binding_score"] = (UNIFORM["x_prev_y"] + UNIFORM["y_self"]) / 2
    _assert_scores(scores.get(0, 0), expected)
    assert scores.get(0, 0).attention_role == "other"  # 0.40 on prior ys: no eliminator
    assert scores.get(0, 1).elim_y_mass != pytest.approx(UNIFORM["elim_y_mass"], abs=1e-3)  # head 1 untouched
    frame = scores.to_dataframe()
    assert list(frame["component"]) == ["L0H0", "L0H1"] and frame.loc[0, "elim_entropy"] == pytest.approx(1.0)


def test_positional_eliminator_and_binder_heads_exact():
    d_head = 8
    model, sd = blank_model(ModelConfig(d_model=16, n_heads=2, d_head=d_head, normalization_type=None))
    _eliminator(sd, 0, d_head)
    _last_y(sd, 1, d_head)
    model.load_state_dict(sd)
    scores = head_scores(model, n=500)
    harmonic = sum(1 / k for k in range(1, V)) / (V - 1)  # 25/48: x_j -> y_{j-1} and y_j -> y_j at 1/(j-1), 1/j
    _assert_scores(scores.get(0, 0), {
        "elim_y_mass": 1.0, "elim_entropy": 1.0, "elimination_score": 1.0, "x_prev_y": harmonic,
        "y_self": harmonic, "binding_score": harmonic, "dup_repeated": 0.0, "duplicate_score": 0.0,
        "source_y_repeated": 0.25, "source_y_baseline": 0.25, "source_y_shift": 0.0,
    })
    _assert_scores(scores.get(0, 1), {
        "elim_y_mass": 1.0, "elim_entropy": 0.0, "elimination_score": 0.0, "x_prev_y": 1.0, "y_self": 1.0,
        "binding_score": 1.0, "duplicate_score": 0.0,
    })
    assert scores.get(0, 0).patterns == ("eliminator",) and scores.get(0, 1).patterns == ("binder",)
    attention = attention_by_source(model, n=500)
    pattern = attention.pattern(0, 1, "not_repeated")
    for q in range(1, 2 * V - 1):  # every query after x1 puts all its weight on the latest y
        latest_y = q if q % 2 else q - 1
        assert pattern[q, latest_y] == pytest.approx(1.0, abs=1e-6)


def test_duplicate_token_head_score_against_token_count():
    d_head = 8
    model, sd = blank_model(ModelConfig(d_model=16, n_heads=2, d_head=d_head, normalization_type=None))
    _duplicate(sd, 0, d_head)
    model.load_state_dict(sd)
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=800)
    score = head_scores(model, batch).get(0, 0)
    # new last query: ties (score 0) at x1..x4 and at the y equal to its token, if any
    new = batch.tokens[~batch.extras["repeated"]]
    ties = 4 + (new[:, 1:8:2] == new[:, -1:]).any(dim=1).double()
    assert score.dup_repeated == pytest.approx(1.0, abs=1e-6)
    assert score.dup_baseline == pytest.approx(float((1 / ties).mean()), abs=1e-6)
    assert score.duplicate_score > 0.7 and "duplicate" in score.patterns


def test_attention_by_source_groups_and_dataframe():
    model = build_model("d32h2")
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=400)
    attention = attention_by_source(model, batch)
    assert isinstance(attention, AttentionBySource)
    assert attention.n_repeated == int(batch.extras["repeated"].sum()) and attention.n_samples == 400
    assert torch.equal(attention.source, batch.extras["repeat_source"])
    assert torch.equal(repeat_source_of(batch.tokens), batch.extras["repeat_source"])
    torch.testing.assert_close(attention.mean_repeated, attention.patterns[batch.extras["repeated"]].mean(0))
    torch.testing.assert_close(attention.mean_not_repeated, attention.patterns[~batch.extras["repeated"]].mean(0))
    frame = attention.to_dataframe()
    assert len(frame) == 2 * 2 * 45  # two groups, two heads, 45 causal (q, k) pairs
    sums = frame.groupby(["group", "head", "query_pos"])["attention"].sum()
    assert sums.to_numpy() == pytest.approx(1.0, abs=1e-5)
    # same numbers from a raw token tensor (repeats read from the tokens)
    raw = attention_by_source(model, batch.tokens)
    torch.testing.assert_close(raw.mean_repeated, attention.mean_repeated)


def test_scores_see_interventions_and_leave_no_hooks():
    model = build_model("d32h2")

    def attend_first(pattern, hook):
        pattern = pattern.clone()
        pattern[:, 0] = 0.0
        pattern[:, 0, :, 0] = 1.0  # head 0: every query on x1
        return pattern

    scores = head_scores(model, n=300, hooks=[("blocks.0.attn.hook_pattern", attend_first)])
    assert scores.get(0, 0).elim_y_mass == 0.0 and scores.get(0, 0).dup_repeated == pytest.approx(1.0)
    assert hook_count(model) == 0

    def boom(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        attention_by_source(model, n=50, hooks=[("blocks.0.hook_resid_pre", boom)])
    assert hook_count(model) == 0
    with pytest.raises(RuntimeError, match="boom"):
        head_roles(model, n=50, hooks=[("blocks.0.hook_mlp_out", boom)])
    assert hook_count(model) == 0


def test_validation_before_any_forward():
    model = build_model("d32h2")
    calls = []
    counter = [("blocks.0.hook_resid_pre", lambda act, hook: calls.append(1))]
    batch = make_batch(TaskConfig(repeat_ratio=0.3), 20)
    with pytest.raises(TypeError, match="integer dtype"):
        attention_by_source(model, batch.tokens.float(), hooks=counter)
    with pytest.raises(ValueError, match="tokens must be in 1..5"):
        attention_by_source(model, batch.tokens * 0, hooks=counter)
    with pytest.raises(TypeError, match="test_set"):
        head_roles(model, batch.tokens, hooks=counter)
    with pytest.raises(ValueError, match="how must be one of"):
        head_roles(model, how="median", hooks=counter)
    with pytest.raises(ValueError, match="must be one of hows"):
        head_roles(model, how="zero", hows=("mean",), hooks=counter)
    with pytest.raises(ValueError, match="n must be >= 1"):
        head_roles(model, n=0, hooks=counter)
    with pytest.raises(ValueError, match="unknown hook point"):
        head_scores(model, hooks=[("blocks.7.hook_resid_pre", lambda a, h: None)])
    with pytest.raises(ValueError, match="no sequence whose last query is new"):
        head_scores(model, make_batch(TaskConfig(), 10, repeat_ratio=1.0))
    with pytest.raises(ValueError, match="destroyed < survives"):
        RoleThresholds(destroyed=0.8)
    attention = attention_by_source(model, batch)
    with pytest.raises(ValueError, match="layer must be in"):
        attention.pattern(1, 0)
    with pytest.raises(ValueError, match="head must be in"):
        attention.pattern(0, 2)
    with pytest.raises(ValueError, match="group"):
        attention.pattern(0, 0, "both")
    with pytest.raises(ValueError, match="heads"):
        head_scores(build_model("d32h1"), attention=attention)
    assert calls == [] and hook_count(model) == 0


# ----------------------------------------------------------------------------- verdicts of real runs


def test_verdict_on_the_full_hand_built_circuit(full_verdict):
    v = full_verdict
    assert v.elimination_accuracy == 1.0 and v.recall_accuracy == 1.0
    assert [h.role for h in v.heads] == ["eliminator", "duplicate/recall", "binder"]
    assert [h.causal_role for h in v.heads] == ["elimination", "recall", "recall"]
    assert v.role("L0MLP") == "completes recall"
    h0, h1, h2 = v.heads
    assert h0.elimination_retention < 0.25 and h0.recall_retention == pytest.approx(1.0)
    assert h1.recall_accuracy == 0.0 and h1.patch_effect == pytest.approx(1.0, abs=1e-4)
    assert h2.recall_accuracy == 0.0 and abs(h2.patch_effect) < 1e-4  # same y1 in clean and corrupted runs
    assert v.mlps[0].patch_effect == pytest.approx(1.0, abs=1e-4)
    status = {c.claim: c.status for c in v.claims}
    assert status == {
        "eliminates": "supported", "recalls": "supported", "eliminator_head": "supported",
        "binding_head": "supported", "division_of_labour": "supported", "ffn_completes_recall": "supported",
        "no_attention_lookup": "contradicted",
    }
    assert v.story_holds is False
    text = v.summary()
    assert "does NOT hold" in text and "L0H1 is a duplicate-token head" in text
    frame = v.claims.to_dataframe()
    assert set(frame.columns) >= {"claim", "status", "evidence", "numbers", "status_mean", "status_zero"}
    assert frame.set_index("claim").loc["no_attention_lookup", "numbers"]["dup_repeated"] == pytest.approx(1.0)
    roles_frame = v.to_dataframe()
    assert list(roles_frame["component"]) == ["L0H0", "L0H1", "L0H2", "L0MLP"]
    assert v.probe is not None and v.probe[3] == pytest.approx(1.0, abs=1e-4)  # the probe answers 4


def test_verdict_accumulators_in_two_layers_are_ablated_jointly_across_layers():
    model = accumulator_model(1, n_layers=2)
    v = head_roles(model, hows=("mean", "optimal"), circuits=False, **FAST)
    assert [h.component for h in v.heads] == ["L0H0", "L1H0"]
    assert v.elimination_accuracy == 1.0
    assert [(row.component, row.how, row.layer) for row in v.joint] == [("L0H0+L1H0", "mean", None),
                                                                        ("L0H0+L1H0", "optimal", None)]
    # one layer's accumulator suffices; ablating both layers' (the optimal constants searched layer by
    # layer, layer 1's with layer 0's in place) destroys elimination
    for how in ("mean", "optimal"):
        assert next(row for row in v.joint if row.how == how)["elimination_accuracy"] < 0.3, how
    assert all(h.causal_role == "elimination (redundant)" and h.role == "eliminator" for h in v.heads)
    assert all(role == "eliminator" for h in v.heads for _, role in h.role_by_how)
    assert hook_count(model) == 0


def test_verdict_both_heads_accumulate():
    v = head_roles(accumulator_model(2), hows=("mean",), **FAST)
    assert v.recall_accuracy == 0.0 and v.elimination_accuracy == 1.0
    # each head alone is redundant; ablating both together destroys elimination
    assert all(h.causal_role == "elimination (redundant)" and h.role == "eliminator" for h in v.heads)
    assert all(h.elimination_retention > 0.9 and h.joint_elimination_retention < 0.05 for h in v.heads)
    assert v.claims.status("recalls") == "contradicted"
    assert v.claims.status("eliminator_head") == "inconclusive"
    assert "shared by L0H0+L0H1" in v.claims.get("eliminator_head").evidence
    binding = v.claims.get("binding_head")
    assert binding.status == "contradicted" and binding.evidence.startswith("No binding head: all heads accumulate")
    assert v.claims.status("division_of_labour") == "contradicted"
    assert v.claims.status("ffn_completes_recall") == "inconclusive"
    assert v.head_patching is None  # no recall: nothing to patch
    assert v.story_holds is False and "No binding head" in v.summary()


def test_verdict_one_head_accumulator_supports_the_d16h1_story():
    v = head_roles(accumulator_model(1), hows=("mean",), **FAST)
    assert [c.claim for c in v.claims] == ["eliminates", "no_recall", "single_head_accumulates"]
    assert all(c.status == "supported" for c in v.claims)
    assert v.heads[0].role == "eliminator" and v.mlps[0].role == "unused"
    assert v.story_holds is True and "story holds" in v.summary()
    assert hook_count(accumulator_model(1)) == 0


# ----------------------------------------------------------------------------- the decision rules


def _score(layer: int, head: int, patterns: tuple[str, ...], **values: float) -> HeadScore:
    base = dict(elim_y_mass=0.4, elim_entropy=0.9, elimination_score=0.36, x_prev_y=0.2, y_self=0.3,
                binding_score=0.25, dup_repeated=0.1, dup_baseline=0.1, duplicate_score=0.0,
                source_y_repeated=0.1, source_y_baseline=0.1, source_y_shift=0.0)
    if "eliminator" in patterns:
        base.update(elim_y_mass=0.98, elim_entropy=0.97)
    if "binder" in patterns:
        base.update(x_prev_y=0.8, y_self=0.95)
    base.update(values)
    return HeadScore(layer=layer, head=head, component=f"L{layer}H{head}", **base, patterns=patterns,
                     attention_role="+".join(patterns) or "other")


def _row(component: str, elim: float, recall: float, how: str = "mean", mae: float = 0.01, loss: float = 0.96) -> AblationRow:
    layer = None if component == "none" else 0
    head = int(component[-1]) if component.startswith("L0H") else None
    metrics = {"elimination_accuracy": elim, "recall_accuracy": recall, "early_mae_train": mae,
               "elimination_loss": 0.0, "recall_loss": 0.0, "follows_reference": math.nan}
    return AblationRow(component=component, how=how, layer=layer, head=head, metrics=metrics, test_loss=loss)


def _table(rows: list[AblationRow]) -> AblationTable:
    return study_table("synthetic", rows, reference="test set", positions=None, n_samples=1000, n_recall=300, seed=0)


def head_score_rows(*heads: HeadScore) -> HeadScores:
    return HeadScores(model_name="synthetic", n_samples=1000, n_repeated=300, thresholds=RoleThresholds(), heads=heads)


def test_judge_says_d16h1_recalls():
    scores = head_score_rows(_score(0, 0, ("eliminator",)))
    table = _table([_row("none", 1.0, 0.95, how="none"), _row("L0H0", 0.2, 0.9, mae=0.2), _row("L0MLP", 1.0, 0.0)])
    v = judge_roles(scores, table, model_config=ModelConfig(d_model=16, n_heads=1))
    claim = v.claims.get("no_recall")
    assert claim.status == "contradicted" and claim.evidence == "d16h1 recalls: recall accuracy 95.0%."
    assert dict(claim.numbers)["recall_accuracy"] == pytest.approx(0.95)
    assert v.role("L0MLP") == "completes recall" and v.story_holds is False
    assert "d16h1 recalls" in v.summary()


def test_judge_says_the_ffn_does_not_decode():
    scores = head_score_rows(_score(0, 0, ("eliminator",)), _score(0, 1, ("binder",)))
    table = _table([
        _row("none", 1.0, 1.0, how="none"),
        _row("L0H0", 0.2, 1.0, mae=0.2), _row("L0H1", 1.0, 0.0),
        _row("L0MLP", 1.0, 0.98),  # recall survives MLP ablation
    ])
    v = judge_roles(scores, table, model_config=ModelConfig(d_model=32, n_heads=2))
    assert [h.role for h in v.heads] == ["eliminator", "binder"] and v.role("L0MLP") == "unused"
    claim = v.claims.get("ffn_completes_recall")
    assert claim.status == "contradicted"
    assert claim.evidence.startswith("Recall survives MLP ablation: the FFN does not decode")
    assert v.claims.status("binding_head") == "supported" and v.claims.status("eliminator_head") == "supported"
    assert v.story_holds is False


def test_judge_whole_story_holds_and_mode_sensitivity():
    scores = head_score_rows(_score(0, 0, ("eliminator",)), _score(0, 1, ("binder",)))
    rows = [_row("none", 1.0, 1.0, how="none")]
    rows += [_row("L0H0", 0.21, 0.99, mae=0.2), _row("L0H1", 1.0, 0.02), _row("L0MLP", 0.99, 0.01)]
    # under zero ablation the MLP also kills elimination: the FFN claim becomes inconclusive
    rows += [_row("L0H0", 0.2, 0.9, how="zero", mae=0.2), _row("L0H1", 1.0, 0.0, how="zero"),
             _row("L0MLP", 0.3, 0.0, how="zero")]
    v = judge_roles(scores, _table(rows), model_config=ModelConfig(d_model=32, n_heads=2))
    assert all(c.status == "supported" for c in v.claims) and v.story_holds is True
    ffn = v.claims.get("ffn_completes_recall")
    assert dict(ffn.status_by_how) == {"mean": "supported", "zero": "inconclusive"}
    assert "other ablation modes disagree: zero: inconclusive" in v.summary()
    loose = judge_roles(scores, _table(rows), model_config=ModelConfig(d_model=32, n_heads=2), how="zero")
    assert loose.role("L0MLP") == "needed for both" and loose.story_holds is None


def test_judge_validates_its_evidence():
    scores = head_score_rows(_score(0, 0, ("eliminator",)))
    table = _table([_row("none", 1.0, 0.0, how="none"), _row("L0H0", 0.2, 0.0)])
    with pytest.raises(ValueError, match="lacks a row"):
        judge_roles(scores, table, model_config=ModelConfig(d_model=16, n_heads=1))
    with pytest.raises(ValueError, match="scores cover heads"):
        judge_roles(scores, table, model_config=ModelConfig(d_model=32, n_heads=2))
    with pytest.raises(ValueError, match="how must be one of"):
        judge_roles(scores, table, model_config=ModelConfig(d_model=16, n_heads=1), how="max")


def test_recall_signal_exact():
    batch = make_test_set(TaskConfig(repeat_ratio=0.3), n=300)
    ys, source = batch.tokens[:, 1::2], repeat_source_of(batch.tokens)
    rows = torch.arange(len(batch))
    recall_answer = ys[rows, source.clamp_min(0)]
    # +10 on the recall answer, only when the last query repeats: signal 10 (margin 10 vs 0)
    logits = torch.zeros(len(batch), 2 * V - 1, V + 1)
    logits[rows, -1, recall_answer] = 10.0 * (source >= 0).float()
    assert scores_module.recall_signal(logits, batch.tokens) == pytest.approx(10.0)
    # favouring y1 on every sequence is a position bias, not recall: signal 0
    logits = torch.zeros(len(batch), 2 * V - 1, V + 1)
    logits[rows, -1, ys[:, 0]] = 10.0
    assert scores_module.recall_signal(logits, batch.tokens) == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(scores_module.recall_signal(logits[~batch.extras["repeated"]], batch.tokens[~batch.extras["repeated"]]))


@pytest.mark.parametrize("kept, role, division", [(0.9, "eliminator", "supported"), (0.0, "mixed", "contradicted")])
def test_judge_uses_the_recall_signal_when_both_capabilities_fall(kept, role, division):
    """Ablating L0H0 breaks elimination and recall; whether recall itself needed it is the signal's call."""
    scores = head_score_rows(_score(0, 0, ("eliminator",)), _score(0, 1, ("duplicate",), duplicate_score=0.6))
    table = _table([
        _row("none", 1.0, 1.0, how="none"),
        _row("L0H0", 0.2, 0.2, mae=0.2), _row("L0H1", 1.0, 0.0), _row("L0MLP", 0.2, 0.2, mae=0.1),
    ])
    signals = {("none", "none"): 7.0, ("L0H0", "mean"): 7.0 * kept, ("L0H1", "mean"): 0.0, ("L0MLP", "mean"): 0.0}
    v = judge_roles(scores, table, model_config=ModelConfig(d_model=32, n_heads=2), recall_signals=signals)
    assert v.role("L0H0") == role and v.role("L0H1") == "duplicate/recall"
    assert v.heads[0].recall_signal_retention == pytest.approx(kept)
    assert v.claims.status("division_of_labour") == division
    assert v.claims.status("eliminator_head") == "supported"
    # the MLP breaks both and its recall signal is gone: recall needs the FFN (elimination too)
    assert v.role("L0MLP") == "needed for both" and v.claims.status("ffn_completes_recall") == "supported"
    assert v.claims.status("no_attention_lookup") == "contradicted" and v.recall_signal == 7.0


# ----------------------------------------------------------------------------- regressions


def test_head_roles_builds_patching_pairs_from_its_task_config(monkeypatch):
    """Regression: head_roles(task=...) built its patching pairs from the model's stored task,
    because the patching functions had no task_config; it is now passed through."""
    from perm_circuits.analysis.study import recall_patching as patching

    seen = []
    original = patching.patching_pair

    def spy(task_config, *args, **kwargs):
        seen.append(task_config)
        return original(task_config, *args, **kwargs)

    monkeypatch.setattr(patching, "patching_pair", spy)
    model = full_circuit_model()
    model.task_config = TaskConfig(repeat_ratio=0.3)  # the stored task: split_seed 0
    task = TaskConfig(repeat_ratio=0.3, split_seed=7, train_fraction=0.5)
    small = dict(n=200, n_pair=100, n_boot=20)
    verdict = head_roles(model, how="zero", hows=("zero",), task=task, probe=False, **small)
    assert verdict.head_patching is not None and verdict.mlp_patching is not None  # the model recalls
    assert len(seen) == 2 and all(t == task for t in seen)
    expected = patching.patch_head_outputs(model, n=small["n_pair"], n_boot=small["n_boot"], task=task)
    assert [c.logit_diff for c in verdict.head_patching.cells] == [c.logit_diff for c in expected.cells]


def test_attention_pattern_accepts_negative_indices_and_seed_is_the_test_set_seed():
    model = accumulator_model(2)
    batch = make_batch(TaskConfig(repeat_ratio=0.3), 40, seed=2)
    attention = attention_by_source(model, batch)
    assert torch.equal(attention.pattern(-1, -1), attention.pattern(0, 1))
    with pytest.raises(ValueError, match="head -3 out of range"):
        attention.pattern(0, -3)
    # seed seeds the default test set only: with a test_set it changes nothing
    assert torch.equal(attention_by_source(model, batch, seed=5).patterns, attention.patterns)
    default = attention_by_source(model, n=40, seed=5)
    assert torch.equal(default.patterns, attention_by_source(model, make_test_set(
        dataclasses.replace(TaskConfig(), repeat_ratio=0.3), n=40, seed=5)).patterns)
