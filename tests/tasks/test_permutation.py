"""The study's task behind the Task interface (PermutationTask), train/evaluate/report on any task.

Real numbers come from the shipped d32h2 model (seed 0, no ablation) on the repeated task and from
a toy successor task (tests/tasks/test_base.py) with a tiny ``HookedRootModule``.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from perm_circuits import TaskConfig, TrainConfig, build_model, evaluate, make_test_set, train
from perm_circuits.models import fast_forward
from perm_circuits.posterior import bayes_posterior
from perm_circuits.tasks.permutation_data import PERMUTATION_EXTRAS, PROBE_SEQUENCE, make_batch, permutation_batch
from perm_circuits.tasks.evaluation import Evaluation, reference_agreement
from perm_circuits.tasks.runner import measure_task
from perm_circuits.tasks import TASKS, FitConfig, PermutationTask, Task, TaskBatch, task_from_dict
from perm_circuits.views.html import local_script_refs, remote_resource_refs
from perm_circuits.analysis.probes.task_attribution import attention_patterns
from perm_circuits.reports import task_report
from .test_base import Successor, Tiny

REPEATED = TaskConfig(repeat_ratio=0.3)


class TinyAttention(HookedRootModule):
    """One attention layer of two heads with hook points; W_Q is frozen at 0, so every query
    attends uniformly to the positions up to it (pattern[q, k] = 1 / (q + 1))."""

    def __init__(self, K: int = 7, d: int = 8, n_heads: int = 2, d_head: int = 4):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        torch.manual_seed(0)  # nn.Embedding / nn.Linear draw their init from the global RNG
        self.embed = nn.Embedding(K, d)
        self.W_Q = nn.Parameter(torch.zeros(n_heads, d, d_head), requires_grad=False)
        self.W_K = nn.Parameter(torch.randn(n_heads, d, d_head, generator=generator))
        self.W_V = nn.Parameter(torch.randn(n_heads, d, d_head, generator=generator) / d**0.5)
        self.W_O = nn.Parameter(torch.randn(n_heads, d_head, d, generator=generator) / d_head**0.5)
        self.unembed = nn.Linear(d, K)
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        q = torch.einsum("bpd,hde->bhpe", x, self.W_Q)
        k = torch.einsum("bpd,hde->bhpe", x, self.W_K)
        v = torch.einsum("bpd,hde->bhpe", x, self.W_V)
        seq = tokens.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf"))
        pattern = self.hook_pattern(scores.softmax(dim=-1))
        z = self.hook_z(pattern @ v)
        return self.unembed(x + torch.einsum("bhpe,hed->bpd", z, self.W_O))


# ----------------------------------------------------------------------------- PermutationTask


def test_permutation_task_samples_exactly_make_batch():
    config = TaskConfig(repeat_ratio=0.5, repeat_sources=[1, 2])
    task = PermutationTask(config)
    assert isinstance(task, Task) and TASKS["permutation"] is PermutationTask
    assert (task.d_vocab, task.n_ctx, task.name) == (6, 9, "permutation")
    for split in ("train", "test"):
        ours = task.sample(64, torch.Generator().manual_seed(7), split)
        theirs = make_batch(config, 64, split=split, generator=torch.Generator().manual_seed(7))
        assert isinstance(ours, TaskBatch)
        assert torch.equal(ours.tokens, theirs.tokens) and torch.equal(ours.targets, theirs.targets)
        assert torch.equal(ours.mask, theirs.mask)
        for name in ("xs", "ys", "perms", "repeated", "repeat_source"):
            assert torch.equal(ours.extras[name], theirs.extras[name]), name
    # one generator, consecutive batches: the same stream as make_batch's
    generator_a, generator_b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    task.sample(8, generator_a)
    make_batch(config, 8, generator=generator_b)
    assert torch.equal(task.sample(8, generator_a).tokens, make_batch(config, 8, generator=generator_b).tokens)
    test = task.test_set(300, seed=5)
    assert torch.equal(test.tokens, make_test_set(config, n=300, seed=5).tokens)
    with pytest.raises(TypeError, match="generator must be a torch.Generator, got int|parameter 'generator'"):
        task.sample(4, 0)


def test_permutation_batch_rebuilds_every_extra_from_tokens():
    batch = make_batch(REPEATED, 200, seed=3)
    assert tuple(batch.extras) == PERMUTATION_EXTRAS
    bare = TaskBatch(batch.tokens, batch.targets, batch.mask)
    rebuilt = permutation_batch(bare)
    for name in PERMUTATION_EXTRAS:
        assert torch.equal(rebuilt.extras[name], batch.extras[name]), name
    assert int(batch.extras["repeated"].sum()) == 57  # the repeated ones' unrevealed value is filled in too
    assert permutation_batch(batch) is batch
    with pytest.raises(ValueError, match="odd length 2V-1"):
        permutation_batch(TaskBatch(batch.tokens[:, :8], batch.targets[:, :8], batch.mask[:, :8]))


def test_permutation_task_dict_round_trip_and_errors():
    task = PermutationTask(TaskConfig(V=4, repeat_ratio=0.25, repeat_sources=(1, 3), split_seed=2))
    data = task.to_dict()
    assert data == {"task": "permutation", "V": 4, "repeat_ratio": 0.25, "train_fraction": 0.8, "split_seed": 2,
                    "repeat_sources": [1, 3]}
    assert task_from_dict(data) == task == PermutationTask.from_dict(data)
    assert PermutationTask.from_dict({"V": 4}) == PermutationTask(TaskConfig(V=4))
    with pytest.raises(ValueError, match="not a 'permutation' task dict: 'task' is 'bigram'"):
        PermutationTask.from_dict({"task": "bigram", "V": 4})
    with pytest.raises(ValueError, match="unknown"):
        PermutationTask.from_dict({"V": 4, "bogus": 1})
    with pytest.raises(TypeError, match="config must be a perm_circuits.TaskConfig, got dict|parameter 'config'"):
        PermutationTask({"V": 5})


def test_permutation_metrics_and_reference(pretrained):
    model = pretrained("d32h2")
    task = PermutationTask(REPEATED)
    test = task.test_set(500)
    with torch.no_grad():
        logits = model(test.tokens)
    metrics = task.metrics(logits, test)
    assert list(metrics) == list(task.metric_names) == [
        "elimination_accuracy", "recall_accuracy", *(f"step{k}_accuracy" for k in range(1, 6)), "test_loss"]
    reference = evaluate(model, make_test_set(REPEATED, n=500), task=REPEATED)
    assert metrics == {name: value for name, value in reference.summary().items() if name in metrics}
    assert metrics["elimination_accuracy"] == metrics["recall_accuracy"] == metrics["step5_accuracy"] == 1.0
    assert metrics["test_loss"] == pytest.approx(1.0154, abs=1e-4)

    posterior = task.reference(test)
    assert posterior.shape == (500, 9, 6)
    assert torch.equal(posterior[:, 0::2, 1:], bayes_posterior(test.tokens, REPEATED).probs)
    assert torch.allclose(posterior.sum(-1), torch.ones(500, 9)) and posterior[..., 0].max() == 0
    probe = torch.tensor([PROBE_SEQUENCE])
    probe_batch = TaskBatch(probe, probe, torch.ones(1, 9))
    ref = task.reference(probe_batch)[0]
    assert ref[0, 1:].tolist() == pytest.approx([0.2] * 5)  # step 1: nothing revealed
    assert ref[8].tolist() == [0, 0, 0, 0, 1, 0]  # x5 = x1 = 2: the posterior recalls y1 = 4


# ----------------------------------------------------------------------------- train / evaluate / fit on a task


def test_train_accepts_a_permutation_task_bit_identically():
    recipe = TrainConfig(epochs=1, samples_per_epoch=256, batch_size=64, test_size=100)
    config = TaskConfig(repeat_ratio=0.3)
    ours = train("d16h1", PermutationTask(config), recipe, progress=False)
    theirs = train("d16h1", config, recipe, progress=False)
    assert ours.task_config == config and ours.history.rows == theirs.history.rows
    for (name, a), b in zip(ours.model.state_dict().items(), theirs.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_evaluate_task_on_the_study(pretrained):
    model = pretrained("d32h2")
    task = PermutationTask(REPEATED)
    result = evaluate(model, task=task, n=500)
    assert isinstance(result, Evaluation)
    assert (result.task, result.model_name, result.n_samples) == ("permutation", "d32h2", 500)
    study = evaluate(model, make_test_set(REPEATED, n=500), task=REPEATED)
    assert result == study  # the task, its TaskConfig: the study's evaluation (probe included)
    # the generic runner on the same batch: the same metrics, reference and per-step detail (no probe),
    # and the masked cross-entropy as its loss
    generic = measure_task(model, task, task.test_set(500))
    assert generic.metrics == result.metrics and generic.reference == result.reference
    assert generic.detail.steps == result.detail.steps and generic.detail.probe is None
    assert generic.test_loss == pytest.approx(result.test_loss, abs=1e-6)
    # the study's evaluate accepts the task and its TaskBatch too: the same evaluation
    assert evaluate(model, task.test_set(500), task=task).summary() == study.summary()
    assert result.metrics["step1_accuracy"] == study.detail.steps[0].accuracy == pytest.approx(0.136)
    # total variation vs the exact posterior: half the summed absolute errors over the 5 values
    # (evaluate's MAE is their mean) plus the mass on the unused token 0
    tv_values = 2.5 * sum(step.mae_uniform for step in study.detail.steps) / 5
    assert tv_values <= result.reference["reference_tv"] < tv_values + 1e-3
    assert result.reference["reference_tv"] == pytest.approx(0.0421, abs=1e-4)
    assert result.reference["reference_loss"] == pytest.approx(0.9575, abs=1e-4)
    assert result.reference["reference_loss"] < result.test_loss
    assert result.reference["reference_agreement"] == 1.0  # its top token is always a posterior mode
    frame = result.to_dataframe()
    assert frame.loc["test_loss", "kind"] == "loss" and frame.loc["reference_tv", "kind"] == "reference"
    assert frame.loc["elimination_accuracy", "value"] == 1.0 and list(frame.index).count("test_loss") == 1
    assert frame.loc["step1_mae_train", "kind"] == "detail" and list(frame.columns) == ["value", "kind"]
    assert set(task.metric_names) <= set(result.summary()) and "probe_p4" in result.summary()
    assert "## d32h2: 500 test samples" in str(result)


def test_train_and_evaluate_any_task_on_a_hooked_root_module():
    task = Successor()
    model = TinyAttention()
    frozen = model.W_Q.clone()
    before = evaluate(model, task=task, n=400)
    assert before.reference["reference_agreement"] == before.metrics["accuracy"] < 0.5
    assert before.reference["reference_accuracy"] == 1.0  # the reference is the targets themselves
    result = train(model, task, FitConfig(steps=80, batch_size=32, lr=0.05, seed=0), progress=False)
    assert result.losses[-1] < 0.1 * result.losses[0]
    assert torch.equal(model.W_Q, frozen)
    after = evaluate(model, task=task, n=400)
    assert after.metrics["accuracy"] == after.reference["reference_agreement"] == 1.0
    assert after.test_loss == pytest.approx(result.losses[-1], rel=0.5)
    again = train(TinyAttention(), task, FitConfig(steps=80, batch_size=32, lr=0.05, seed=0), progress=False)
    assert again.losses == result.losses


def test_train_task_on_a_bridge_with_fast_forward():
    task = PermutationTask(TaskConfig())
    model = build_model("d16h1", seed=0)
    result = train(model, task, FitConfig(steps=25, batch_size=64, lr=3e-3, seed=0), progress=False)
    assert result.losses[-1] < result.losses[0] - 0.1
    # the default for a build_model bridge is fast_forward: the same run as passing it
    calls = []

    def counted(m, tokens):
        calls.append(1)
        return fast_forward(m, tokens)

    same = train(build_model("d16h1", seed=0), task, FitConfig(steps=25, batch_size=64, lr=3e-3, seed=0), progress=False,
                 forward=counted)
    assert same.losses == result.losses and len(calls) == 25
    assert evaluate(model, task=task, n=200).metrics["step1_accuracy"] > 0


def test_a_bridge_whose_output_vocabulary_differs_from_its_input_fits_the_task():
    """perm_chain reads 16 tokens (actions and states) and predicts its N = 8 states: a bridge with
    d_vocab=16 and d_vocab_out=8 is its shape, and the fit check compares the input vocabulary."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    from perm_circuits.tasks.perm_chain import PermutationChainTask

    task = PermutationChainTask()

    def bridge(d_vocab: int):
        return TransformerBridge.boot_native(TransformerBridgeConfig(
            d_model=8, d_head=4, n_heads=2, n_layers=1, n_ctx=task.n_ctx, d_vocab=d_vocab, d_vocab_out=task.N,
            d_mlp=16, act_fn="relu", normalization_type="LN", positional_embedding_type="standard", seed=0,
            tokenizer_prepends_bos=False, model_name="chain")).eval()

    model = bridge(task.d_vocab)
    test = task.test_set(20)
    result = evaluate(model, test, task=task)
    assert result.metrics == pytest.approx(task.metrics(model(test.tokens), test))
    assert 1.5 < result.metrics["loss"] < 3.0  # about log 8 for a fresh model
    with pytest.raises(ValueError, match=r"the model's vocabulary \(17\) does not match task 'perm_chain'"):
        evaluate(bridge(17), test, task=task)


def test_a_full_vocabulary_bridge_is_measured_against_factual_recalls_answer_distribution():
    """Factual recall's reference is a distribution over its 32 answers (ids 0..31) at EOS; a bridge
    reading out all 69 tokens is compared with it padded by zeros (it raised a shape error before)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    from perm_circuits.tasks.factual import FactualRecallTask

    task = FactualRecallTask()
    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=8, d_head=4, n_heads=2, n_layers=1, n_ctx=task.n_ctx, d_vocab=task.d_vocab, d_mlp=16, act_fn="relu",
        normalization_type="LN", positional_embedding_type="standard", seed=0, tokenizer_prepends_bos=False,
        model_name="factual")).eval()
    test = task.test_set(20)
    result = evaluate(model, test, task=task)
    probs = model(test.tokens)[:, -1].softmax(-1).detach()
    answer = task.reference(test)
    assert answer.shape == (20, 32) and probs.shape == (20, 69)
    tv = 0.5 * ((probs[:, :32] - answer).abs().sum(-1) + probs[:, 32:].sum(-1))
    assert result.reference["reference_tv"] == pytest.approx(float(tv.mean()), abs=1e-6)
    assert result.reference["reference_loss"] == pytest.approx(0.0, abs=1e-6)  # the fact table itself
    assert str(result.reference["reference_loss"]) != "-0.0"  # printed by evaluate: no negative zero


def test_task_eval_errors(pretrained):
    model = pretrained("d32h2")
    with pytest.raises(ValueError, match=r"task has V=4 but the model has V=5"):
        evaluate(model, task=PermutationTask(TaskConfig(V=4)))
    with pytest.raises(ValueError, match=r"the model's vocabulary \(6\) does not match task 'permutation' \(d_vocab=5\)"):
        measure_task(model, PermutationTask(TaskConfig(V=4)))
    with pytest.raises(ValueError, match="vocabulary"):
        train(model, PermutationTask(TaskConfig(V=4)), FitConfig(steps=1))
    with pytest.raises(TypeError, match="task must implement perm_circuits.tasks.Task, got TaskConfig|parameter 'task'"):
        measure_task(model, REPEATED)
    with pytest.raises(TypeError, match="test_set must be a TaskBatch|parameter 'test_set'"):
        measure_task(model, PermutationTask(REPEATED), make_test_set(REPEATED, n=10).tokens)
    with pytest.raises(ValueError, match=r"n must be >= 1, got 0"):
        evaluate(model, task=PermutationTask(REPEATED), n=0)
    batch = Successor().test_set(4)
    logits = torch.zeros(4, 6, 7)
    with pytest.raises(ValueError, match=r"a task reference must be a distribution \(4, 6, 7\) or token ids \(4, 6\), got shape \(4, 6\, 3\)"):
        reference_agreement(logits, batch, torch.zeros(4, 6, 3))
    with pytest.raises(TypeError, match="a reference answer must be an integer tensor"):
        reference_agreement(logits, batch, torch.zeros(4, 6))


def test_a_task_config_means_its_permutation_task(pretrained):
    task = Successor()
    # the study's evaluation is unchanged by task=: a TaskConfig means its PermutationTask
    model = pretrained("d16h1")
    study = evaluate(model, task=REPEATED, n=200)
    assert isinstance(study, Evaluation) and study.summary() == evaluate(model, task=PermutationTask(REPEATED), n=200).summary()
    with pytest.raises(TypeError, match="train task 'test_successor' with a FitConfig"):
        train("d16h1", task, TrainConfig(epochs=1))
    with pytest.raises(TypeError, match="the study's loop builds its model from a ModelConfig"):
        train(TinyAttention(), REPEATED, TrainConfig(epochs=1))
    with pytest.raises(TypeError, match="resume_from resumes the study's epoch loop"):
        train(resume_from="nowhere", recipe=FitConfig(steps=1))
    with pytest.raises(ValueError, match="forward= belongs to the step loop"):
        train("d16h1", REPEATED, TrainConfig(epochs=1), forward=fast_forward)
    with pytest.raises(TypeError, match="the step loop needs a task"):
        train(TinyAttention(), None, FitConfig(steps=1))


# ----------------------------------------------------------------------------- the task report


def test_attention_patterns_any_model():
    model = TinyAttention()
    tokens = torch.tensor([[1, 2, 3, 4]])
    patterns = attention_patterns(model, tokens)
    assert list(patterns) == ["hook_pattern"]
    expected = torch.tensor([[1 / (q + 1) if k <= q else 0.0 for k in range(4)] for q in range(4)])
    assert torch.allclose(patterns["hook_pattern"][0, 1], expected)
    assert attention_patterns(Tiny(), tokens) == {}
    assert sum(len(h._forward_hooks) for h in model.hook_dict.values()) == 0


def test_task_report_study_model(pretrained, tmp_path):
    page = task_report(pretrained("d32h2"), PermutationTask(REPEATED), tmp_path / "r", n=100, n_sequences=2)
    assert page == tmp_path / "r" / "permutation.html"
    html = page.read_text()
    assert remote_resource_refs(html) == [] and len(local_script_refs(html, page.parent)) == 1
    assert "<h1>d32h2 on permutation</h1>" in html
    assert html.count("Test sequence ") >= 2 and "Test sequence 2<" not in html
    assert "elimination_accuracy" in html and "reference_tv" in html and "task.repeat_ratio" in html
    assert html.count(".AttentionHeads, {") == 1  # one circuitsvis view per layer
    assert html.count('class="plotly-graph-div"') == 3  # one figure per shown sequence, one ablation heatmap
    first = PermutationTask(REPEATED).test_set(100).tokens[0].tolist()
    assert f"0: x={first[0]}" in html and f"1: y={first[1]}" in html
    # a second report may rewrite the folder (it holds the report marker); a foreign folder is refused
    task_report(pretrained("d32h2"), PermutationTask(REPEATED), tmp_path / "r", n=50, n_sequences=1)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="non-empty folder that perm-circuits report did not write"):
        task_report(pretrained("d32h2"), PermutationTask(REPEATED), tmp_path / "foreign")
    with pytest.raises(ValueError, match="n_sequences must be >= 1, got 0"):
        task_report(pretrained("d32h2"), PermutationTask(REPEATED), tmp_path / "x", n_sequences=0)
    assert not (tmp_path / "x").exists()


def test_task_report_any_task(tmp_path):
    page = task_report(TinyAttention(), Successor(), tmp_path, n=100, n_sequences=1, title="toy")
    html = page.read_text()
    assert page.name == "test_successor.html" and "<h1>toy</h1>" in html
    first = Successor().test_set(100).tokens[0].tolist()
    assert html.count(".AttentionHeads, {") == 1 and '"L0H1"' in html and f'"0: {first[0]}", "1: {first[1]}"' in html
    assert remote_resource_refs(html) == []
    plain = task_report(Tiny(), Successor(), tmp_path / "plain", n=50, n_sequences=1)
    text = plain.read_text()
    assert "exposes no attention-pattern hook point" in text and ".AttentionHeads, {" not in text
    assert re.search(r"trainable parameters</th>\s*<td>\d+", text)


def test_evaluate_refuses_a_taskbatch_of_another_task_clearly():
    from perm_circuits import load_pretrained
    from perm_circuits.tasks import BigramTriggerTask

    other = BigramTriggerTask().sample(4, generator=torch.Generator().manual_seed(0))  # even length, ids up to 64
    with pytest.raises(ValueError, match="odd length 2V-1, got length"):
        evaluate(load_pretrained("d16h1"), other)
    odd = TaskBatch(torch.full((2, 9), 7), torch.full((2, 9), 7), torch.ones(2, 9))  # ids past V = 5
    with pytest.raises(ValueError, match=r"tokens must be in 1\.\.5"):
        evaluate(load_pretrained("d16h1"), odd)
