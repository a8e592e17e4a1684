"""Ablations on hand-built models whose exact answers are known."""

from __future__ import annotations

import math

import pytest
import torch
from jaxtyping import TypeCheckError

from perm_circuits import ModelConfig, TaskConfig, build_model, evaluate, make_test_set
from perm_circuits.hooks import hook_count, run_logits
from perm_circuits.analysis import (
    ablate,
    ablate_head,
    ablate_mlp,
    ablation_table,
    binding_free_reference,
    reference_activations,
    resample_rows,
)
from perm_circuits.evaluate import evaluate_logits
from perm_circuits.tasks.permutation_data import make_batch

CONFIG = ModelConfig(d_model=16, n_heads=2, seed=3)  # d_head 8, d_mlp 32
TASK = TaskConfig(repeat_ratio=0.3)
Z = "blocks.0.attn.hook_z"


@pytest.fixture(scope="module")
def model():
    m = build_model(CONFIG)
    m.task_config = TASK
    return m


@pytest.fixture(scope="module")
def batch():
    return make_test_set(TASK, n=300, seed=7)


def edited(**changes):
    """A copy of the fixture model with some state_dict entries edited in place by functions."""
    m = build_model(CONFIG)
    m.task_config = TASK
    sd = m.state_dict()
    for key, fn in changes.items():
        fn(sd[key.replace("__", ".")])
    m.load_state_dict(sd)
    return m


def capture(model, tokens, hooks, name=Z):
    store = {}

    def grab(activation, hook):
        store["act"] = activation.detach().clone()

    run_logits(model, tokens, list(hooks) + [(name, grab)])
    return store["act"]


# ----------------------------------------------------------------------------- zero


@pytest.mark.parametrize("head", [0, 1])
def test_zero_head_equals_deleting_its_W_O_columns(model, batch, head):
    d_head = CONFIG.resolved_d_head

    def cut(w):
        w[:, head * d_head : (head + 1) * d_head] = 0

    reference = edited(blocks__0__attn__o__weight=cut)
    ablated = run_logits(model, batch.tokens, ablate_head(model, 0, head))
    assert torch.allclose(ablated, run_logits(reference, batch.tokens), atol=1e-5)
    assert not torch.allclose(ablated, run_logits(model, batch.tokens), atol=1e-3)
    assert hook_count(model) == 0


def test_zero_head_at_one_position_only_changes_that_position(model, batch):
    d_head = CONFIG.resolved_d_head

    def cut(w):
        w[:, d_head : 2 * d_head] = 0

    plain = run_logits(model, batch.tokens)
    ablated = run_logits(model, batch.tokens, ablate_head(model, 0, 1, positions=[-1]))
    without_head = run_logits(edited(blocks__0__attn__o__weight=cut), batch.tokens)
    # 1 layer: the head's output at position p only reaches position p's logits.
    assert torch.equal(ablated[:, :-1], plain[:, :-1])
    assert torch.allclose(ablated[:, -1], without_head[:, -1], atol=1e-5)


def test_zero_mlp_equals_deleting_it(model, batch):
    def zero(w):
        w.zero_()

    no_mlp = edited(blocks__0__mlp__out__weight=zero, blocks__0__mlp__out__bias=zero)
    ablated = run_logits(model, batch.tokens, ablate_mlp(model, 0))
    assert torch.allclose(ablated, run_logits(no_mlp, batch.tokens), atol=1e-5)


def test_zero_neurons_equal_deleting_their_W_out_columns(model, batch):
    neurons = [0, 5, 31]

    def cut(w):
        w[:, neurons] = 0

    ablated = run_logits(model, batch.tokens, ablate_mlp(model, 0, neurons=neurons))
    assert torch.allclose(ablated, run_logits(edited(blocks__0__mlp__out__weight=cut), batch.tokens), atol=1e-5)


# ----------------------------------------------------------------------------- mean


def test_mean_ablation_of_a_position_constant_activation_is_a_no_op(batch):
    # W_V = 0: every value vector is b_V, so z = sum_s A[d, s] b_V = b_V at every position and sample.
    m = edited(blocks__0__attn__v__weight=lambda w: w.zero_())
    plain = run_logits(m, batch.tokens)
    for head in (0, 1):
        hooks = ablate_head(m, 0, head, "mean", reference=batch)
        assert torch.allclose(run_logits(m, batch.tokens, hooks), plain, atol=1e-6)


def test_mean_ablation_writes_the_reference_mean_per_position_and_head(model, batch):
    reference = make_batch(TASK, 200, split="test", seed=11)
    ref_z = reference_activations(model, reference, [Z])[Z]
    plain_z = capture(model, batch.tokens, [])
    z = capture(model, batch.tokens, ablate_head(model, 0, 1, "mean", reference=reference, positions=[6, 8]))
    assert torch.allclose(z[:, [6, 8], 1], ref_z[:, [6, 8], 1].mean(0).expand(len(batch), -1, -1), atol=1e-6)
    assert torch.equal(z[:, :, 0], plain_z[:, :, 0])  # other head untouched
    assert torch.equal(z[:, :6, 1], plain_z[:, :6, 1])  # other positions untouched
    assert torch.equal(z[:, 7, 1], plain_z[:, 7, 1])


def test_default_reference_is_the_models_test_set(model):
    default = ablate_head(model, 0, 0, "mean")
    explicit = ablate_head(model, 0, 0, "mean", reference=make_test_set(TASK))
    tokens = make_batch(TASK, 50, seed=2).tokens
    assert torch.equal(run_logits(model, tokens, default), run_logits(model, tokens, explicit))


# ----------------------------------------------------------------------------- resample


def test_resample_is_deterministic_per_seed(model, batch):
    reference = make_batch(TASK, 100, split="test", seed=5)
    def run(seed):
        return run_logits(model, batch.tokens, ablate_head(model, 0, 0, "resample", reference=reference, seed=seed))

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_resample_copies_a_real_reference_samples_activation(model, batch):
    one = make_batch(TASK, 1, split="test", seed=9)
    ref_z = reference_activations(model, one, [Z])[Z]
    z = capture(model, batch.tokens, ablate_head(model, 0, 1, "resample", reference=one))
    assert torch.allclose(z[:, :, 1], ref_z[:, :, 1].expand(len(batch), -1, -1), atol=0)

    reference = make_batch(TASK, 40, split="test", seed=5)
    ref_z = reference_activations(model, reference, [Z])[Z]
    z = capture(model, batch.tokens, ablate_head(model, 0, 0, "resample", reference=reference, seed=3))
    # every sample's head-0 output is exactly one reference row's, at all positions at once
    match = (z[:, None, :, 0] == ref_z[None, :, :, 0]).flatten(2).all(-1)  # [batch, ref]
    assert bool(match.any(1).all())


def test_row_paired_resample_with_the_batch_itself_is_a_no_op(model, batch):
    hooks = ablate_head(model, 0, 0, "resample", reference=batch, pairing="row")
    assert torch.equal(run_logits(model, batch.tokens, hooks), run_logits(model, batch.tokens))


def test_binding_free_reference_keeps_queries_and_breaks_answers(batch):
    ref = binding_free_reference(TASK, queries=batch, seed=0)
    assert torch.equal(ref.extras["xs"], batch.extras["xs"])
    assert torch.equal(ref.tokens[:, 0::2], batch.tokens[:, 0::2])  # the same query tokens
    assert torch.equal(ref.extras["repeated"], batch.extras["repeated"]) and torch.equal(ref.extras["repeat_source"], batch.extras["repeat_source"])
    assert torch.equal(ref.extras["ys"], ref.extras["perms"].gather(1, ref.extras["xs"] - 1))  # a valid sequence of its permutation
    assert torch.equal(ref.targets[:, 0::2], ref.extras["ys"])
    same = (ref.extras["perms"] == batch.extras["perms"]).all(1).float().mean()
    assert same < 0.15  # independent permutations: 1/24 expected on the test split
    # default: the queries of the fixed test set, row for row
    default = binding_free_reference(TASK)
    assert torch.equal(default.extras["xs"], make_test_set(TASK).extras["xs"])


def test_binding_free_row_resample_replaces_by_the_same_queries_activation(model, batch):
    ref = binding_free_reference(TASK, queries=batch, seed=0)
    ref_z = reference_activations(model, ref, [Z])[Z]
    z = capture(model, batch.tokens, ablate_head(model, 0, 1, "resample", reference=ref, pairing="row"))
    assert torch.equal(z[:, :, 1], ref_z[:, :, 1])


# ----------------------------------------------------------------------------- table


def test_ablation_table_matches_evaluate(model, batch):
    table = ablation_table(model, test_set=batch)
    frame = table.to_dataframe()
    assert len(frame) == 1 + 3 * 5  # every head and MLP under the five modes
    assert not frame.duplicated(["component", "how"]).any()
    assert set(frame.component) == {"none", "L0H0", "L0H1", "L0MLP"}
    base, plain = table.baseline, evaluate(model, batch)
    assert base["recall_accuracy"] == plain.metrics["recall_accuracy"]
    assert base["elimination_accuracy"] == plain.metrics["elimination_accuracy"]
    assert base["early_mae_train"] == plain.detail.early_mae_train
    assert base.test_loss == plain.test_loss
    row = table.get("L0H1", "zero")
    ablated = evaluate(model, batch, hooks=ablate_head(model, 0, 1))
    assert (row["recall_accuracy"], row.test_loss, row["early_mae_train"]) == (
        ablated.metrics["recall_accuracy"],
        ablated.test_loss,
        ablated.detail.early_mae_train,
    )
    row = table.get("L0MLP", "mean")
    ablated = evaluate(model, batch, hooks=ablate_mlp(model, 0, "mean", reference=batch))
    assert row.test_loss == pytest.approx(ablated.test_loss, abs=1e-6)
    assert table.n_recall == int(batch.extras["repeated"].sum())


def test_follows_reference_counts_answers_taken_from_the_resampled_row(model, batch):
    reference = make_batch(TASK, 80, split="test", seed=4)
    table = ablation_table(model, hows=("zero", "resample"), test_set=batch, reference=reference, seed=2)
    hooks = ablate_head(model, 0, 1, "resample", reference=reference, seed=2)
    predictions = run_logits(model, batch.tokens, hooks)[:, -1].argmax(-1)
    rows = resample_rows(len(reference), len(batch), 2)
    expected = (predictions == reference.extras["ys"][rows, -1]).float().mean()
    assert table.get("L0H1", "resample")["follows_reference"] == pytest.approx(float(expected))
    assert math.isnan(table.get("L0H1", "zero")["follows_reference"])


def test_ablation_table_at_the_last_position_leaves_earlier_steps_alone(model, batch):
    table = ablation_table(model, hows=("zero",), test_set=batch, positions=[-1])
    assert table.positions == (8,)
    for row in table.rows:
        assert row["early_mae_train"] == table.baseline["early_mae_train"]
    ablated = evaluate(model, batch, hooks=ablate_head(model, 0, 0, positions=[8]))
    assert table.get("L0H0", "zero")["recall_accuracy"] == ablated.metrics["recall_accuracy"]


def test_ablation_table_binding_free_reference(model, batch):
    table = ablation_table(model, hows=("resample",), test_set=batch, reference="binding_free")
    ref = binding_free_reference(TASK, queries=batch, seed=0)
    row = table.get("L0H0", "resample")
    # row-paired hooks only fit a batch of the reference's size, so not evaluate()'s 1-row probe
    hooks = ablate_head(model, 0, 0, "resample", reference=ref, pairing="row")
    ablated = evaluate_logits(run_logits(model, batch.tokens, hooks), batch, TASK)
    assert row.test_loss == pytest.approx(ablated.test_loss, abs=1e-6)
    assert "binding-free" in table.reference


# ----------------------------------------------------------------------------- validation


@pytest.fixture
def no_forward(model, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a forward pass ran before validation")

    monkeypatch.setattr(model, "forward", forbidden)
    return model


def float_batch(batch):
    bad = make_batch(TASK, 4, seed=0)
    object.__setattr__(bad, "tokens", bad.tokens.float())
    return bad


LAYER_RANGE = r"must be in \[-1, 0\] \(the model has 1 layer\(s\)\)"
HEAD_RANGE = r"must be in \[-2, 1\] \(the model has 2 head\(s\) per layer\)"
FLOAT_TOKENS = "tokens must have an integer dtype, got torch.float32"


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, b: ablate_head(m, 1, 0), ValueError, "layer 1 out of range: layer " + LAYER_RANGE),
        # -1 is the last layer; -2 is out of range
        (lambda m, b: ablate_head(m, -2, 0), ValueError, "layer -2 out of range: layer " + LAYER_RANGE),
        (lambda m, b: ablate_head(m, 0, -3), ValueError, "head -3 out of range: head " + HEAD_RANGE),
        (lambda m, b: ablate_head(m, True, 0), TypeError, "layer must be an int, got bool True"),
        (lambda m, b: ablate_mlp(m, 1, "zero"), ValueError, "layer 1 out of range: layer " + LAYER_RANGE),
        (lambda m, b: ablate_head(m, 0, 2), ValueError, "head 2 out of range: head " + HEAD_RANGE),
        (lambda m, b: ablate_head(m, 0, 0, "bogus"), ValueError,
         r"how must be one of \('zero', 'mean', 'resample', 'binding_free', 'optimal'\), got 'bogus'"),
        (lambda m, b: ablate_head(m, 0, 0, "mean", positions=[9]), ValueError,
         r"position 9 out of range: position must be in \[-9, 8\]"),
        (lambda m, b: ablate_head(m, 0, 0, "mean", positions=[1, 1]), ValueError,
         r"positions has repeated entries: \[1, 1\]"),
        (lambda m, b: ablate_head(m, 0, 0, "mean", pairing="sideways"), ValueError,
         r"pairing must be one of \('random', 'row'\), got 'sideways'"),
        (lambda m, b: ablate_mlp(m, 0, "mean", neurons=[32]), ValueError,
         r"neurons entry 32 out of range: neurons entry must be in \[-32, 31\]"),
        (lambda m, b: ablate_mlp(m, 0, "mean", neurons=[3, 3]), ValueError,
         r"neurons has repeated entries: \[3, 3\]"),
        (lambda m, b: ablate_mlp(m, 0, "mean", neurons=[]), ValueError, "neurons must not be empty"),
        # a float tensor is not ``int | Sequence[int] | None``: the runtime type check stops it
        (lambda m, b: ablate_mlp(m, 0, "mean", neurons=torch.tensor([1.0])), TypeCheckError, "parameter 'neurons'"),
        # a bool passes the annotation and reaches the package's own check
        (lambda m, b: ablate_mlp(m, 0, "mean", neurons=[True]), TypeError, "neurons entry must be an int, got bool True"),
        (lambda m, b: ablate(m, "blocks.0.attn.hook_nope"), ValueError, "unknown hook point 'blocks.0.attn.hook_nope'"),
        (lambda m, b: ablate(m, "blocks.0.attn.hook_attn_scores"), ValueError,
         "hook_attn_scores is post-softmax and edits to it are ignored; ablate 'hook_pattern' instead"),
        (lambda m, b: ablate(m, "blocks.0.hook_resid_mid", "mean"), ValueError,
         r"blocks.0.hook_resid_mid is the MLP's input \(ln2.hook_in\); edits there do not reach the residual"),
        (lambda m, b: ablate(m, "ln_final.hook_scale", index=0), ValueError,
         "index is not supported for hook 'ln_final.hook_scale'"),
        (lambda m, b: ablate(m, Z, "mean", reference=float_batch(b)), TypeError, FLOAT_TOKENS),
        (lambda m, b: ablate(m, Z, "mean", reference=b.tokens), TypeError,  # token ids: for any other model
         "reference must be a TaskBatch or None, got Tensor"),
        (lambda m, b: ablation_table(m, hows=("zero", "bogus"), test_set=b), ValueError,
         r"how must be one of \('zero', 'mean', 'resample', 'binding_free', 'optimal'\), got 'bogus'"),
        (lambda m, b: ablation_table(m, hows=[], test_set=b), TypeError,  # it gave the baseline row alone
         r"hows must be a non-empty list or tuple of modes from \('zero', 'mean'"),
        (lambda m, b: ablation_table(m, test_set=b, reference="elsewhere"), ValueError,
         "reference must be 'test', 'binding_free' or a TaskBatch, got 'elsewhere'"),
        (lambda m, b: ablation_table(m, test_set=float_batch(b)), TypeError, FLOAT_TOKENS),
        (lambda m, b: ablation_table(m, test_set=b, positions=[12]), ValueError,
         r"position 12 out of range: position must be in \[-9, 8\]"),
        (lambda m, b: reference_activations(m, b, Z), TypeError,  # one name: read as its letters before
         "hook_names must be a list or tuple of hook point names, got str 'blocks.0.attn.hook_z'"),
        (lambda m, b: resample_rows(0, 4, 0), ValueError, "n_reference must be >= 1, got 0"),
        (lambda m, b: resample_rows(5, -1, 0), ValueError, "batch must be >= 0, got -1"),
        (lambda m, b: ablation_table(m, hows=("resample",), test_set=b, seed=2**64), ValueError,
         r"seed must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\), got 18446744073709551616"),
    ],
)
def test_validation_errors_come_before_any_forward(no_forward, batch, call, error, match):
    with pytest.raises(error, match=match) as info:
        call(no_forward, batch)
    assert type(info.value) is error


def test_no_hooks_left_after_an_exception_inside_a_hook(model, batch):
    def boom(activation, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        ablation_table(model, test_set=batch, hooks=[("blocks.0.hook_resid_pre", boom)])
    assert hook_count(model) == 0
    with pytest.raises(RuntimeError, match="boom"):
        ablate_head(model, 0, 0, "mean", reference=batch, hooks=[("hook_embed", boom)])
    assert hook_count(model) == 0
    short = make_batch(TASK, 10, seed=1)
    hooks = ablate_head(model, 0, 0, "resample", reference=short, pairing="row")
    with pytest.raises(ValueError, match="pairing='row'"):
        run_logits(model, batch.tokens, hooks)
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- regressions


def test_negative_layers_heads_and_neurons_count_from_the_end(model, batch):
    """Regression: memory/ffn functions accepted negative layers (mlp_prediction_flips defaults to
    layer=-1) but ablate_head / ablate_mlp rejected them.  One rule now: Python-style indices."""
    plain = run_logits(model, batch.tokens, ablate_head(model, 0, 1))
    assert torch.equal(run_logits(model, batch.tokens, ablate_head(model, -1, -1)), plain)
    hooks = ablate_head(model, -1, 1, "mean", reference=batch)
    assert hooks[0][0] == "blocks.0.attn.hook_z"
    assert torch.equal(run_logits(model, batch.tokens, hooks),
                       run_logits(model, batch.tokens, ablate_head(model, 0, 1, "mean", reference=batch)))
    assert ablate_mlp(model, -1)[0][0] == "blocks.0.hook_mlp_out"
    assert torch.equal(run_logits(model, batch.tokens, ablate_mlp(model, -1, neurons=[-1, 0])),
                       run_logits(model, batch.tokens, ablate_mlp(model, 0, neurons=[31, 0])))
    with pytest.raises(ValueError, match="repeated"):
        ablate_mlp(model, 0, neurons=[31, -1])  # the same neuron twice
    assert hook_count(model) == 0


def test_seed_is_only_the_resample_seed(model, batch):
    """ablation_table's seed seeds the resample draw; it does not change the zero / mean rows."""
    a = ablation_table(model, hows=("zero", "mean", "resample"), test_set=batch, seed=0).to_dataframe()
    b = ablation_table(model, hows=("zero", "mean", "resample"), test_set=batch, seed=1).to_dataframe()
    fixed = a["how"] != "resample"
    assert a[fixed].equals(b[fixed])
    assert not a[~fixed].equals(b[~fixed])
