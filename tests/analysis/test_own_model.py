"""A model the library did not build, with a metric of its own, through every general tool.

``TransformerBridge.boot_native`` (two layers, four heads, its own vocabulary of 7 and context of
8) and a per-row metric (the log-probability, at the last position, of the first token), the
convention of :mod:`perm_circuits.metric`: ablation tables, activation and path patching, the
circuit criteria and every discovery method (read from ``METHODS``), with the numbers each must
give (the full circuit's faithfulness 1, the fully ablated run's metric, the clean activation
patched in restoring exactly 1), and a wrong metric refused before any forward pass but the clean one.
"""

from __future__ import annotations

import pytest
import torch

from perm_circuits.analysis import ablation_table, circuit_metrics, patch_head
from perm_circuits.analysis.interventions.activation_patching import patch_activation
from perm_circuits.analysis.interventions.path_patching import path_patch
from perm_circuits.discovery import METHODS, discover, prepare_edges
from perm_circuits.metric import check_metric

ROWS = 32


def metric(logits, batch):
    """Per row: log-probability at the last position of the row's first token (``batch``: token ids)."""
    return logits[:, -1].log_softmax(-1).gather(-1, batch[:, :1].long())[:, 0]


@pytest.fixture(scope="module")
def own():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=16, d_head=4, n_heads=4, n_layers=2, n_ctx=8, d_vocab=7, d_mlp=16, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="own")).eval()
    clean = torch.randint(0, 7, (ROWS, 8), generator=torch.Generator().manual_seed(0))
    corrupted = torch.randint(0, 7, (ROWS, 8), generator=torch.Generator().manual_seed(1))
    return model, clean, corrupted


def _mean(model, tokens, scored, hooks=()):
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        return float(metric(model(tokens), scored).double().mean())


def test_ablation_table_takes_the_metric(own):
    model, clean, _ = own
    table = ablation_table(model, ["zero", "mean"], clean, metric=metric)
    assert table.metric_names == ("metric",) and table.n_samples == ROWS
    assert table.baseline.metrics["metric"] == pytest.approx(_mean(model, clean, clean), abs=1e-6)

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, 2] = 0.0
        return z

    zeroed = _mean(model, clean, clean, [("blocks.1.attn.hook_z", zero_head)])
    assert table.get("L1H2", "zero").metrics["metric"] == pytest.approx(zeroed, abs=1e-6)
    assert abs(zeroed - table.baseline.metrics["metric"]) > 1e-4  # the ablation moves the metric
    assert len(table.rows) == 1 + 2 * (8 + 2)  # baseline, then 8 heads and 2 MLPs under each mode


def test_activation_and_path_patching_take_the_metric(own):
    model, clean, corrupted = own
    full = patch_activation(model, clean, corrupted, metric, "blocks.1.hook_resid_post", n_boot=50)
    assert full.effect == pytest.approx(1.0, abs=1e-9)  # the whole clean residual stream restores exactly 1
    assert full.clean == pytest.approx(_mean(model, clean, clean), abs=1e-6)
    assert full.corrupted == pytest.approx(_mean(model, corrupted, clean), abs=1e-6)  # scored on the clean batch
    head = patch_head(model, clean, corrupted, metric, 1, 0, n_boot=50)
    assert (head.clean, head.corrupted) == (full.clean, full.corrupted)
    assert 0 < abs(head.effect) < 1
    path = path_patch(model, (0, 1), (1, 0), "v", (clean, corrupted), metric=metric, n_boot=50)
    assert path.clean_logit_diff == pytest.approx(full.clean, abs=1e-9)
    assert path.corrupted_logit_diff == pytest.approx(full.corrupted, abs=1e-9)
    assert torch.isfinite(path.per_sample).all() and float(path.per_sample.abs().sum()) > 0


def test_circuit_criteria_take_the_metric(own):
    model, clean, _ = own
    every = [f"L{layer}H{head}" for layer in range(2) for head in range(4)] + ["L0MLP", "L1MLP"]
    whole = circuit_metrics(model, every, clean, metric=metric, how="mean", max_exhaustive=0, n_subsets=1)
    group = whole.groups[0]
    assert group.f_model == pytest.approx(_mean(model, clean, clean), abs=1e-6)
    assert group.f_circuit == pytest.approx(group.f_model, abs=1e-9) and group.faithfulness == pytest.approx(1.0)
    some = circuit_metrics(model, ["L0H0", "L1H0"], clean, metric=metric, how="mean")
    assert some.groups[0].f_model == group.f_model and abs(some.groups[0].faithfulness - 1) > 1e-3


@pytest.fixture(scope="module")
def edges(own):
    model, clean, corrupted = own
    return prepare_edges(model, clean, how="resample", metric=metric, corrupted=corrupted)


def test_the_edge_intervention_reduces_the_metric_by_the_mean_over_rows(own, edges):
    model, clean, corrupted = own
    assert edges.full_metric == pytest.approx(_mean(model, clean, clean), abs=1e-5)
    # every edge ablated under resample is the corrupted run, scored on the clean batch
    assert edges.empty_metric == pytest.approx(_mean(model, corrupted, clean), abs=1e-5)
    faith = edges.faithfulness(edges.evaluate(torch.stack([edges.ones(), 0 * edges.ones()])))
    assert faith.tolist() == pytest.approx([1.0, 0.0], abs=1e-6)


OPTIONS = {"acdc": {"criterion": "metric"}, "mask_pruning": {"steps": 10}, "exhaustive_oracle": {"max_size": 1},
           "greedy_edges": {"threshold": 0.5}}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_discovery_method_runs_on_the_metric(edges, method):
    result = METHODS[method](intervention=edges, **OPTIONS.get(method, {}))
    assert len(result.scores) == edges.n_edges and result.scores.notna().all()
    mask = torch.tensor([float(e in result.circuit) for e in result.scores.index], dtype=edges.ones().dtype)
    expected = float(edges.faithfulness(edges.evaluate(mask[None]))[0])
    assert result.faithfulness == pytest.approx(expected, abs=1e-6)  # the metric's mean over rows, normalised


def test_discover_takes_the_metric_end_to_end(own, edges):
    model, clean, corrupted = own
    direct = discover(model, "eap", batch=clean, metric=metric, corrupted=corrupted)
    shared = METHODS["eap"](intervention=edges)
    assert direct.scores.tolist() == pytest.approx(shared.scores.tolist(), abs=1e-9)
    assert float(direct.scores.abs().max()) > 1e-3


def _counted(model):
    calls = []
    handle = model.embed.register_forward_hook(lambda *args: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("bad, error, message", [
    (lambda logits, batch: metric(logits, batch).mean(), ValueError, r"shape \(32,\) \(batch,\), got \(\) \(a scalar"),
    (lambda logits, batch: metric(logits, batch)[:, None], ValueError, r"shape \(32,\) \(batch,\), got \(32, 1\)"),
    (lambda logits, batch: 1.0, TypeError, r"must return a tensor of shape \(32,\) \(batch,\)"),
    (lambda logits, batch: metric(logits, batch) * float("nan"), ValueError, r"NaN in 32 of 32 rows"),
])
def test_a_wrong_metric_is_refused_before_any_run_but_the_clean_one(own, bad, error, message):
    model, clean, corrupted = own
    tools = {
        "discover": lambda: discover(model, "eap", batch=clean, metric=bad, corrupted=corrupted),
        "ablation_table": lambda: ablation_table(model, ["mean"], clean, metric=bad),
        "patch_head": lambda: patch_head(model, clean, corrupted, bad, 1, 0, n_boot=10),
        "path_patch": lambda: path_patch(model, (0, 1), (1, 0), "v", (clean, corrupted), metric=bad, n_boot=10),
        "circuit_metrics": lambda: circuit_metrics(model, ["L0H0"], clean, metric=bad, how="mean"),
    }
    for name, run in tools.items():
        calls, handle = _counted(model)
        try:
            with pytest.raises(error, match=message):
                run()
        finally:
            handle.remove()
        assert len(calls) <= 1, name  # the clean run (the edge forward of discovery runs none)
    with pytest.raises(TypeError, match=r"metric must be a callable metric\(logits, batch\) -> tensor of shape "
                                        r"\(batch,\) \(one number per row\), got str"):
        check_metric("logprob")  # what every tool calls first (the test run's type checker refuses it even earlier)


def test_head_scores_and_direct_logit_attribution_take_token_ids_a_task_batch_or_a_task(own):
    from perm_circuits.analysis import direct_logit_attribution, head_scores
    from perm_circuits.analysis.probes.task_attribution import next_token_batch
    from perm_circuits.analysis.study.scores import RoleThresholds
    from perm_circuits.tasks import TaskBatch

    model, clean, _ = own
    with torch.no_grad():
        logits, cache = model.run_with_cache(clean)
    scores = head_scores(model, clean)
    assert scores.heads == tuple(f"L{layer}H{head}" for layer in range(2) for head in range(4))
    rows = torch.arange(1, 8)
    pattern = cache["blocks.1.attn.hook_pattern"][:, 2].double()
    assert scores.previous_score[6] == pytest.approx(float(pattern[:, rows, rows - 1].mean()), abs=1e-6)
    batch = next_token_batch(clean)
    assert head_scores(model, batch) == scores
    dla = direct_logit_attribution(model, clean)
    assert sum(dla.values) + dla.remainder == pytest.approx(dla.total, abs=1e-9)
    out = logits.double()
    diff = out[:, :-1].gather(-1, clean[:, 1:, None])[..., 0] - out[:, :-1].mean(-1)  # the next token's logit
    assert dla.total == pytest.approx(float(diff.mean()), abs=1e-5) and dla.n == ROWS
    last = TaskBatch(clean, clean.roll(-1, 1), torch.zeros(clean.shape).index_fill_(1, torch.tensor([6]), 1.0))
    assert direct_logit_attribution(model, last).total == pytest.approx(float(diff[:, 6].mean()), abs=1e-5)

    class Copy:  # the smallest Task: its test set is what direct_logit_attribution(task=) measures
        name, d_vocab, n_ctx, metric_names = "copy", 7, 8, ("accuracy",)

        def sample(self, n, generator, split="train"):
            return next_token_batch(torch.randint(0, 7, (n, 8), generator=generator))

        def test_set(self, n=2000, seed=1234):
            return self.sample(n, torch.Generator().manual_seed(seed))

        def metrics(self, logits, batch):
            return {"accuracy": 0.0}

        def reference(self, batch):
            return None

        def to_dict(self):
            return {"task": self.name}

    task = Copy()
    by_task = direct_logit_attribution(model, task=task, n=16, seed=3)
    assert by_task == direct_logit_attribution(model, task.test_set(16, seed=3))
    assert head_scores(model, task=task, n=16, seed=3) == head_scores(model, task.test_set(16, seed=3))
    with pytest.raises(ValueError, match=r"\['thresholds'\] are the permutation study's options"):
        head_scores(model, clean, thresholds=RoleThresholds())
