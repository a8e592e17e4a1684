"""Activation patching on hand-built models: identities that must hold exactly."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch
import transformer_lens.patching as tl_patching
from jaxtyping import TypeCheckError

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.hooks import hook_count, run_logits
from perm_circuits.analysis import (
    ablate_head,
    find_recall_head,
    generic_patch,
    logit_diff,
    patch_attn_out,
    patch_head_outputs,
    patch_head_patterns,
    patch_head_sources,
    patch_mlp,
    patch_residual,
    patching_pair,
    recall_patching,
)
from perm_circuits.analysis.study.recall_patching import set_head

CONFIG = ModelConfig(d_model=16, n_heads=2, seed=5)
TASK = TaskConfig(repeat_ratio=0.3)
LAST = 2 * TASK.V - 2


@pytest.fixture(scope="module")
def model():
    m = build_model(CONFIG)
    m.task_config = TASK
    return m


@pytest.fixture(scope="module")
def pair():
    return patching_pair(TASK, n=300, seed=0)


def test_patching_pair_differs_only_in_the_last_query(pair):
    clean, corrupted, answer, wrong = pair
    assert torch.equal(clean.tokens[:, :-1], corrupted.tokens[:, :-1])
    assert torch.equal(clean.extras["xs"][:, -1], clean.extras["xs"][:, 0]) and bool(clean.extras["repeated"].all())
    used = (corrupted.extras["xs"][:, :-1, None] == corrupted.extras["xs"][:, -1, None, None]).any(1)[:, 0]
    assert not used.any()  # the corrupted last query is the unused x
    assert torch.equal(answer, clean.extras["ys"][:, 0]) and torch.equal(answer, clean.targets[:, -1])
    assert torch.equal(wrong, corrupted.targets[:, -1])
    assert not (corrupted.extras["ys"][:, :-1] == wrong[:, None]).any()  # the unused y: what elimination answers
    assert not (answer == wrong).any()
    assert torch.equal(corrupted.extras["ys"], corrupted.extras["perms"].gather(1, corrupted.extras["xs"] - 1))


def test_logit_diff(pair):
    clean, _, answer, wrong = pair
    logits = torch.zeros(len(clean), LAST + 1, TASK.d_vocab)
    logits[torch.arange(len(clean)), -1, answer] = 2.0
    logits[torch.arange(len(clean)), -1, wrong] = -0.5
    assert torch.equal(logit_diff(logits, answer, wrong), torch.full((len(clean),), 2.5))


def test_clean_into_clean_is_one_and_corrupted_into_corrupted_is_zero(model, pair):
    same = patch_head_outputs(model, pair, source="clean", target="clean")
    none = patch_head_outputs(model, pair, source="corrupted", target="corrupted")
    for cell in same.cells:
        assert cell.mean == pytest.approx(1.0, abs=1e-5)
        assert cell.ci_low == pytest.approx(1.0, abs=1e-5) and cell.ci_high == pytest.approx(1.0, abs=1e-5)
    for cell in none.cells:
        assert cell.mean == pytest.approx(0.0, abs=1e-5)
    assert same.clean_logit_diff != pytest.approx(same.corrupted_logit_diff)


@pytest.mark.parametrize("site", ["resid_pre", "resid_mid", "resid_post"])
def test_residual_stream_at_the_last_position_restores_everything(model, pair, site):
    sweep = patch_residual(model, pair, site=site)
    assert sweep.get(position=LAST).mean == pytest.approx(1.0, abs=1e-4)
    assert torch.allclose(sweep.per_sample[LAST].mean(), torch.tensor(1.0), atol=1e-4)
    for position in range(LAST):  # both runs share every earlier token
        assert sweep.get(position=position).mean == 0.0


def test_noising_the_whole_last_position_gives_the_corrupted_answer(model, pair):
    sweep = patch_residual(model, pair, site="resid_pre", positions=[LAST], source="corrupted", target="clean")
    assert sweep.cells[0].mean == pytest.approx(0.0, abs=1e-4)


def test_values_before_the_last_position_are_shared_so_their_patches_are_zero(model, pair):
    sweep = patch_head_sources(model, pair, component="value")
    for cell in sweep.cells:
        if cell.source_position < LAST:
            assert cell.mean == 0.0
    assert any(cell.mean != 0.0 for cell in sweep.cells if cell.source_position == LAST)


def test_pattern_edits_change_z_exactly_and_per_source_edits_add_up(model, pair):
    clean, corrupted, _, _ = pair
    store = {}

    def grab(name):
        def fn(activation, hook):
            store[name] = activation.detach().clone()

        return fn

    names = ["blocks.0.attn.hook_pattern", "blocks.0.attn.hook_v", "blocks.0.attn.hook_z"]
    run_logits(model, clean.tokens, [(n, grab("clean " + n)) for n in names])
    clean_pattern = store["clean blocks.0.attn.hook_pattern"]

    def patched_z(sources):
        def patch(activation, hook):
            out = activation.clone()
            out[:, 0, LAST, sources] = clean_pattern[:, 0, LAST, sources]
            return out

        hooks = [("blocks.0.attn.hook_pattern", patch)] + [(n, grab(n)) for n in names]
        run_logits(model, corrupted.tokens, hooks)
        return store["blocks.0.attn.hook_z"], store["blocks.0.attn.hook_pattern"], store["blocks.0.attn.hook_v"]

    z, pattern, v = patched_z(list(range(LAST + 1)))
    # TL4 bridges do apply hook_pattern edits: z is the edited pattern times the values
    expected = torch.einsum("bqk,bkd->bqd", pattern[:, 0], v[:, :, 0])
    assert torch.allclose(z[:, :, 0], expected, atol=1e-5)
    assert torch.allclose(pattern[:, 0, LAST], clean_pattern[:, 0, LAST])
    base, _, _ = patched_z([])
    per_source = sum(patched_z([s])[0][:, LAST, 0] - base[:, LAST, 0] for s in range(LAST + 1))
    assert torch.allclose(per_source, z[:, LAST, 0] - base[:, LAST, 0], atol=1e-5)


def _transformer_lens_sweep(model, pair, tl_function):
    """TransformerLens' own patching of the same pair: ``[layer, head]`` mean logit differences."""
    clean, corrupted, answer, wrong = pair
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(clean.tokens)
        return tl_function(
            model, corrupted.tokens, cache, lambda logits: logit_diff(logits, answer, wrong).mean()
        ).double()


def _normalised(sweep, raw):
    return (raw - sweep.corrupted_logit_diff) / (sweep.clean_logit_diff - sweep.corrupted_logit_diff)


def test_whole_pattern_patches_match_transformer_lens_patching(model, pair):
    theirs = _transformer_lens_sweep(model, pair, tl_patching.get_act_patch_attn_head_pattern_all_pos)
    ours = patch_head_patterns(model, pair)
    assert [(c.layer, c.head) for c in ours.cells] == [(0, 0), (0, 1)]
    ours_raw = torch.tensor([c.logit_diff for c in ours.cells], dtype=torch.float64)
    assert torch.allclose(ours_raw, theirs[0], atol=1e-5)
    ours_mean = torch.tensor([c.mean for c in ours.cells], dtype=torch.float64)
    assert torch.allclose(ours_mean, _normalised(ours, theirs[0]), atol=1e-4)
    # the two heads' pattern patches differ: the comparison is not between two constant sweeps
    assert abs(ours.cells[0].mean - ours.cells[1].mean) > 0.1


def test_a_silent_heads_pattern_patch_is_exactly_zero(pair):
    """Head 0 writes nothing: patching its pattern cannot change the logits (exactly 0), head 1's can."""
    m = only_head_1_reaches_the_logits()
    sweep = patch_head_patterns(m, pair, n_boot=50)
    silent = sweep.get(head=0)
    assert silent.mean == 0.0 and silent.logit_diff == sweep.corrupted_logit_diff
    assert silent.ci_low == pytest.approx(0.0, abs=1e-9) and silent.ci_high == pytest.approx(0.0, abs=1e-9)
    assert sweep.get(head=1).mean != 0.0
    theirs = _transformer_lens_sweep(m, pair, tl_patching.get_act_patch_attn_head_pattern_all_pos)
    assert float(theirs[0, 0]) == pytest.approx(sweep.corrupted_logit_diff, abs=1e-5)
    assert float(theirs[0, 1]) == pytest.approx(sweep.get(head=1).logit_diff, abs=1e-5)


def test_head_patches_match_transformer_lens_patching(model, pair):
    theirs = _transformer_lens_sweep(model, pair, tl_patching.get_act_patch_attn_head_out_all_pos)
    ours = patch_head_outputs(model, pair)
    ours_raw = torch.tensor([c.logit_diff for c in ours.cells], dtype=torch.float64)
    assert torch.allclose(ours_raw, theirs[0], atol=1e-5)
    ours_mean = torch.tensor([c.mean for c in ours.cells], dtype=torch.float64)
    assert torch.allclose(ours_mean, _normalised(ours, theirs[0]), atol=1e-4)


def only_head_1_reaches_the_logits():
    """No LayerNorm, no MLP; tokens and positions live in dims 0-7, head 1 writes dims 8-15, the
    unembedding reads dims 8-15 only and head 0 writes nothing: logits = W_U (head 1's output)."""
    m = build_model(ModelConfig(d_model=16, n_heads=2, normalization_type=None, seed=5))
    sd = m.state_dict()
    sd["embed.weight"][:, 8:] = 0
    sd["pos_embed.weight"][:, 8:] = 0
    sd["blocks.0.attn.o.weight"][:, :8] = 0  # head 0 (d_head 8) silent
    sd["blocks.0.attn.o.weight"][:8] = 0
    sd["blocks.0.attn.o.bias"].zero_()
    sd["blocks.0.mlp.out.weight"].zero_()
    sd["blocks.0.mlp.out.bias"].zero_()
    sd["unembed.weight"][:, :8] = 0
    sd["unembed.weight"] *= 1000  # random-init logit differences are ~1e-3: make the two runs differ clearly
    m.load_state_dict(sd)
    return m


def test_find_recall_head_names_the_only_head_that_reaches_the_logits(pair):
    m = only_head_1_reaches_the_logits()
    found = find_recall_head(m, pair)
    assert (found.layer, found.head) == (0, 1)
    assert found.effect == pytest.approx(1.0, abs=1e-5)
    assert found.ci_low == pytest.approx(1.0, abs=1e-4) and found.ci_high == pytest.approx(1.0, abs=1e-4)
    assert found.runner_up == found.sweep.get(head=0).mean == 0.0
    assert abs(found.sweep.clean_logit_diff - found.sweep.corrupted_logit_diff) > 0.05
    # the MLP writes nothing and the residual at the last position restores everything
    assert patch_mlp(m, pair).cells[0].mean == 0.0
    assert patch_residual(m, pair, positions=[LAST]).cells[0].mean == pytest.approx(1.0, abs=1e-5)


def test_extra_hooks_apply_in_both_runs(model, pair):
    clean, corrupted, answer, wrong = pair
    hooks = ablate_head(model, 0, 1)
    sweep = patch_head_outputs(model, pair, hooks=hooks)
    expected = logit_diff(run_logits(model, clean.tokens, hooks), answer, wrong).double().mean()
    assert sweep.clean_logit_diff == pytest.approx(float(expected), abs=1e-6)
    assert sweep.get(head=1).mean == 0.0  # head 1 is zero in the clean run too
    assert hook_count(model) == 0


def test_mlp_sweeps_and_report(model, pair):
    whole = patch_mlp(model, pair)
    by_position = patch_mlp(model, pair, by_position=True)
    assert whole.cells[0].mean == pytest.approx(by_position.get(position=LAST).mean, abs=1e-6)
    groups = patch_mlp(model, pair, neuron_groups=8)
    assert [c.neurons for c in groups.cells] == [tuple(range(i, i + 8)) for i in range(0, 32, 8)]
    attn = patch_attn_out(model, pair)
    assert attn.get(position=0).mean == 0.0

    report = recall_patching(model, pair)
    frame = report.to_dataframe()
    assert set(frame.activation) == {
        "z", "pattern_source", "pattern", "mlp_out", "mlp_neurons", "resid_pre", "resid_mid", "resid_post"
    }
    assert len(frame) == 2 + 2 * 9 + 2 + 1 + 4 + 3 * 9
    assert report.sweep("z").cells[1].mean == pytest.approx(patch_head_outputs(model, pair).cells[1].mean)
    assert ((frame.ci_low <= frame["mean"] + 1e-9) & (frame["mean"] <= frame.ci_high + 1e-9)).all()
    again = recall_patching(model, pair)
    assert again.to_dataframe().equals(frame)  # seeded bootstrap


# ----------------------------------------------------------------------------- validation


@pytest.fixture
def no_forward(model, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a forward pass ran before validation")

    monkeypatch.setattr(model, "forward", forbidden)
    return model


def heads(model, pair, **kwargs):
    return generic_patch(model, pair, patch_setter=set_head, activation_name="z", **kwargs)


def with_answer(pair, answer):
    return (pair[0], pair[1], answer, pair[3])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, p: patch_head_outputs(m, with_answer(p, p[2].float())), TypeError,
         "pair's answer must be an integer tensor of token ids"),
        (lambda m, p: patch_head_outputs(m, with_answer(p, p[2] * 0)), ValueError,
         r"pair's answer tokens must be in 1\.\.5"),
        (lambda m, p: patch_head_outputs(m, with_answer(p, p[2][:5])), ValueError,
         r"pair's answer must have shape \(300,\), got \(5,\)"),
        (lambda m, p: patch_head_outputs(m, (p[0], p[1].subset(torch.arange(5)), p[2], p[3])), ValueError,
         r"clean \(300, 9\) and corrupted \(5, 9\) shapes differ"),
        (lambda m, p: patch_head_outputs(m, p, source="dirty"), ValueError,
         r"source must be one of \('clean', 'corrupted'\), got 'dirty'"),
        (lambda m, p: patch_head_outputs(m, p, n_boot=0), ValueError, "n_boot must be >= 10, got 0"),
        (lambda m, p: patch_head_sources(m, p, dest_position=9), ValueError,
         r"dest_position 9 out of range: dest_position must be in \[-9, 8\]"),
        (lambda m, p: patch_head_sources(m, p, component="key"), ValueError,
         "component must be 'pattern' or 'value', got 'key'"),
        (lambda m, p: patch_mlp(m, p, neuron_groups=[[0, 40]]), ValueError,
         r"neuron group entry 40 out of range: neuron group entry must be in \[-32, 31\]"),
        (lambda m, p: patch_mlp(m, p, neuron_groups=[[1, 1]]), ValueError,
         r"neuron group has repeated entries: \[1, 1\]"),
        (lambda m, p: patch_residual(m, p, site="resid_elsewhere"), ValueError,
         "site must be resid_pre, resid_mid or resid_post, got 'resid_elsewhere'"),
        (lambda m, p: patch_residual(m, p, positions=[-10]), ValueError,
         r"position -10 out of range: position must be in \[-9, 8\]"),
        (lambda m, p: heads(m, p, index_rows=[{"layer": 1, "head": 0}]), ValueError,
         r"layer 1 out of range: layer must be in \[-1, 0\]"),
        (lambda m, p: heads(m, p, index_rows=[{"layer": 0, "head": 2}]), ValueError,
         r"head 2 out of range: head must be in \[-2, 1\]"),
        (lambda m, p: heads(m, p, index_rows=[{"layer": 0, "head": 0, "neuron": 3}]), ValueError,
         r"unknown index keys \['neuron'\]"),
        (lambda m, p: heads(m, p, index_axes=("head",)), ValueError,
         r"index_axes must start with 'layer' .* got \('head',\)"),
        (lambda m, p: heads(m, p, index_axes=("layer",), index_rows=[{"layer": 0}]), ValueError,
         "pass exactly one of index_axes and index_rows"),
        (lambda m, p: generic_patch(m, p, patch_setter=set_head, activation_name="q", index_axes=("layer",)),
         ValueError, r"activation_name must be one of \[.*\], got 'q'"),
        (lambda m, p: recall_patching(m, p, neuron_groups=0), ValueError,
         r"neuron_groups must be in \[1, 32\], got 0"),
        # a str is truthy: by_position="no" patched per position; the raw functions (no test-suite type checker)
        (lambda m, p: inspect.unwrap(patch_head_outputs)(m, p, by_position="no"), TypeError,
         "by_position must be a bool, got str 'no'"),
        (lambda m, p: inspect.unwrap(patch_mlp)(m, p, by_position="no"), TypeError,
         "by_position must be a bool, got str 'no'"),
    ],
)
def test_validation_errors_come_before_any_forward(no_forward, pair, call, error, match):
    with pytest.raises(error, match=match) as info:
        call(no_forward, pair)
    assert type(info.value) is error


def test_float_tokens_raise_type_error(no_forward, pair):
    bad = pair[1].subset(torch.arange(len(pair[1])))
    object.__setattr__(bad, "tokens", bad.tokens.float())
    with pytest.raises(TypeError, match="tokens must have an integer dtype, got torch.float32"):
        patch_head_outputs(no_forward, (pair[0], bad, pair[2], pair[3]))


def test_no_hooks_left_after_an_exception_inside_a_hook(model, pair):
    calls = {"n": 0}

    def boom_later(activation, hook):
        calls["n"] += 1
        if calls["n"] == 4:  # inside a patched forward, after the two cached runs
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        recall_patching(model, pair, hooks=[("hook_embed", boom_later)])
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- regressions


def test_runs_that_do_not_differ_give_nan_means_and_no_recall_head(model, pair):
    """Regression: with |mean clean LD - mean corrupted LD| < 1e-6 the per-sample values and CIs were nan
    but cell.mean was still computed (dividing by ~0) and find_recall_head named a head."""
    flat = [("ln_final.hook_normalized", lambda x, hook: x * 1e-8)]
    sweep = patch_head_outputs(model, pair, hooks=flat, n_boot=20)
    assert abs(sweep.clean_logit_diff - sweep.corrupted_logit_diff) < 1e-6 and not sweep.runs_differ
    for cell in sweep.cells:
        assert math.isnan(cell.mean) and math.isnan(cell.ci_low) and math.isnan(cell.ci_high)
        assert not math.isnan(cell.logit_diff)  # the raw logit difference is still reported
    assert sweep.per_sample.isnan().all()
    with pytest.raises(ValueError, match="no cell .* finite"):
        sweep.best()
    with pytest.raises(ValueError, match="do not differ"):
        find_recall_head(model, pair, hooks=flat, n_boot=20)
    assert hook_count(model) == 0
    assert patch_head_outputs(model, pair, n_boot=20).runs_differ


def test_best_is_direction_aware(pair):
    """Regression: best() took the largest normalised value even for noising sweeps, where a *low*
    value means the patch destroys recall; it named the least important head."""
    m = only_head_1_reaches_the_logits()
    denoising = patch_head_outputs(m, pair, n_boot=20)
    noising = patch_head_outputs(m, pair, source="corrupted", target="clean", n_boot=20)
    assert not denoising.noising and noising.noising
    assert noising.get(head=1).mean == pytest.approx(0.0, abs=1e-5)  # head 1's corrupted output: all lost
    assert noising.get(head=0).mean == pytest.approx(1.0, abs=1e-5)  # head 0's: nothing lost
    assert noising.best().head == 1 and denoising.best().head == 1
    # nan cells are skipped
    nan_cell = dataclasses.replace(noising.cells[1], mean=math.nan)
    assert dataclasses.replace(noising, cells=(noising.cells[0], nan_cell)).best().head == 0


def test_task_config_builds_the_default_pair(model):
    """Regression: the patching functions had no task_config, so callers (head_roles) silently got pairs
    from the model's stored task."""
    other = TaskConfig(repeat_ratio=0.3, split_seed=7)
    explicit = patch_head_outputs(model, patching_pair(other, n=200, seed=3), seed=3, n_boot=20)
    via_config = patch_head_outputs(model, n=200, seed=3, n_boot=20, task=other)
    stored = patch_head_outputs(model, n=200, seed=3, n_boot=20)
    assert [c.logit_diff for c in via_config.cells] == [c.logit_diff for c in explicit.cells]
    assert [c.mean for c in via_config.cells] == [c.mean for c in explicit.cells]
    assert via_config.clean_logit_diff != stored.clean_logit_diff  # another split: other pairs
    for fn in (patch_head_patterns, patch_attn_out, patch_mlp, patch_residual, patch_head_sources):
        sweep = fn(model, n=200, seed=3, n_boot=20, task=other)
        assert sweep.clean_logit_diff == explicit.clean_logit_diff, fn
    report = recall_patching(model, n=200, seed=3, n_boot=20, neuron_groups=None, task=other)
    assert report.clean_logit_diff == explicit.clean_logit_diff
    found = find_recall_head(model, n=200, seed=3, n_boot=20, task=other)
    assert found.sweep.clean_logit_diff == explicit.clean_logit_diff


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m: patch_head_outputs(m, task=TaskConfig(V=4)), ValueError,
         "task has V=4 but the model has V=5"),
        # a str is not a TaskConfig | None: the runtime type check (conftest's import hook) stops it
        (lambda m: patch_mlp(m, task="task"), TypeCheckError, "parameter 'task'"),
        (lambda m: find_recall_head(m, task=TaskConfig(V=6)), ValueError,
         "task has V=6 but the model has V=5"),
        (lambda m: recall_patching(m, task=TaskConfig(V=4)), ValueError,
         "task has V=4 but the model has V=5"),
        (lambda m: patch_attn_out(m, task=TaskConfig(V=4)), ValueError,
         "task has V=4 but the model has V=5"),
        (lambda m: find_recall_head(m, seed=1.5), TypeCheckError, "parameter 'seed'"),
        # a bool passes the ``int`` annotation and reaches the package's own seed check
        (lambda m: find_recall_head(m, seed=True), TypeError, "seed must be an int, got bool True"),
    ],
)
def test_task_config_is_validated_before_any_forward(no_forward, call, error, match):
    with pytest.raises(error, match=match) as info:
        call(no_forward)
    assert type(info.value) is error


def test_negative_indices_count_from_the_end(model, pair):
    """One index rule for the package: negative layers, heads, positions and neurons are normalised."""
    rows = [{"layer": -1, "head": -1}, {"layer": 0, "head": 1}]
    sweep = heads(model, pair, index_rows=rows, n_boot=20)
    assert [(c.layer, c.head) for c in sweep.cells] == [(0, 1), (0, 1)]
    assert sweep.cells[0].mean == sweep.cells[1].mean
    a = patch_residual(model, pair, positions=[-1], n_boot=20)
    b = patch_residual(model, pair, positions=[LAST], n_boot=20)
    assert a.cells[0].position == LAST and a.cells[0].mean == b.cells[0].mean
    g = patch_mlp(model, pair, neuron_groups=[[-1, -2]], n_boot=20)
    assert g.cells[0].neurons == (31, 30)
    assert patch_head_sources(model, pair, dest_position=-1, n_boot=20).cells[-1].position == LAST


def test_logit_diff_checks_its_indices():
    logits = torch.zeros(2, 9, 6)
    ids = torch.tensor([1, 2])
    with pytest.raises(ValueError, match=r"position 9 out of range: position must be in \[-9, 8\]"):
        logit_diff(logits, ids, ids, position=9)
    with pytest.raises(ValueError, match=r"answer ids must be in \[0, 6\) \(the logits' vocabulary\), got values 1\.\.9"):
        logit_diff(logits, torch.tensor([1, 9]), ids)
    with pytest.raises(ValueError, match=r"wrong ids must be in \[0, 6\)"):
        logit_diff(logits, ids, torch.tensor([-1, 2]))
    logits[:, 3, 1], logits[:, 3, 2] = 4.0, 1.5
    assert torch.equal(logit_diff(logits, torch.tensor([1, 1]), torch.tensor([2, 2]), position=3), torch.tensor([2.5, 2.5]))
