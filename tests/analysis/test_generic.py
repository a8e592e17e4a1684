"""The core analyses on any hooked model and any task: ablation, patching, report."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tasks.test_base import Successor
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.analysis import ablate, ablate_head, ablate_mlp, ablation_table
from perm_circuits.analysis.probes.memory import memory_recall
from perm_circuits.analysis.interventions.ablation_table import (
    ablate_tokens,
    reference_tokens,
)
from perm_circuits.analysis.interventions.activation_patching import (
    patch_activation,
    patch_head,
    target_logprob,
)
from perm_circuits.evaluate import evaluate
from perm_circuits.hooks import hook_count, run_capture, run_logits
from perm_circuits.model_shape import model_shape
from perm_circuits.systems.forner_model import FornerConfig, FornerModel, teacher_model
from perm_circuits.tasks import PermutationTask, TaskBatch
from perm_circuits.tasks.base import model_task
from perm_circuits.views.html import remote_resource_refs
from perm_circuits.reports import task_report


class _Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_post = HookPoint()


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _Attn()
        self.mlp = _MLP()
        self.hook_mlp_out = HookPoint()


class ToyModel(HookedRootModule):
    """One causal attention layer (2 heads) and a ReLU MLP, TransformerLens hook names, a duck-typed cfg."""

    def __init__(self, K: int = 7, d: int = 8, n_heads: int = 2, d_head: int = 4, d_mlp: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.cfg = SimpleNamespace(n_layers=1, n_heads=n_heads, d_head=d_head, d_model=d, d_mlp=d_mlp, d_vocab=K, n_ctx=6)
        self.W_E = nn.Parameter(torch.randn(K, d, generator=g))
        self.W_Q, self.W_K, self.W_V = (nn.Parameter(torch.randn(n_heads, d, d_head, generator=g) / d**0.5) for _ in range(3))
        self.W_O = nn.Parameter(torch.randn(n_heads, d_head, d, generator=g) / d_head**0.5)
        self.W_in = nn.Parameter(torch.randn(d, d_mlp, generator=g) / d**0.5)
        self.W_out = nn.Parameter(torch.randn(d_mlp, d, generator=g) / d_mlp**0.5)
        self.W_U = nn.Parameter(torch.randn(d, K, generator=g))
        self.blocks = nn.ModuleList([_Block()])
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        block = self.blocks[0]
        x = self.W_E[tokens]
        q, k, v = (torch.einsum("bpd,hde->bhpe", x, w) for w in (self.W_Q, self.W_K, self.W_V))
        causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()
        pattern = block.attn.hook_pattern((q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf")).softmax(-1))
        z = block.attn.hook_z((pattern @ v).transpose(1, 2))  # [batch, pos, head, d_head]
        x = x + torch.einsum("bphe,hed->bpd", z, self.W_O)
        x = x + block.hook_mlp_out(block.mlp.hook_post(torch.relu(x @ self.W_in)) @ self.W_out)
        return x @ self.W_U


TOY_TASK = Successor()


# ----------------------------------------------------------------------------- a toy HookedRootModule


def test_model_shape_reads_any_hooked_model():
    shape = model_shape(ToyModel())
    assert (shape.n_layers, shape.n_heads, shape.d_head, shape.d_model, shape.d_mlp, shape.d_vocab) == (1, 2, 4, 8, 16, 7)
    assert shape.heads(0) and shape.mlp(0) and model_task(ToyModel()) is None  # no task of its own
    forner = model_shape(teacher_model())
    assert (forner.n_layers, forner.n_heads, forner.d_head, forner.d_model) == (1, 1, 8, None)
    with pytest.raises(TypeError, match="must expose TransformerLens hook points"):
        model_shape(nn.Linear(2, 2))


def test_zero_head_ablation_equals_deleting_its_output_weights():
    model, tokens = ToyModel(), TOY_TASK.test_set(20).tokens
    ablated = run_logits(model, tokens, ablate_head(model, 0, 1, "zero"))
    with torch.no_grad():
        model.W_O[1] = 0.0
        expected = model(tokens)
    assert torch.allclose(ablated, expected, atol=1e-6)
    assert not torch.allclose(ablated, run_logits(ToyModel(), tokens), atol=1e-3)


def test_mean_and_resample_use_the_reference_tokens():
    model, tokens = ToyModel(), TOY_TASK.test_set(30).tokens
    reference = TOY_TASK.test_set(50, seed=7)
    _, clean = run_capture(model, reference.tokens, ["blocks.0.attn.hook_z"])
    mean = clean["blocks.0.attn.hook_z"].mean(0)
    hooks = ablate_head(model, 0, 0, "mean", reference=reference)
    _, store = run_capture(model, tokens, ["blocks.0.attn.hook_z"], hooks)
    z = store["blocks.0.attn.hook_z"]
    assert torch.allclose(z[:, :, 0], mean[None, :, 0].expand(30, -1, -1))  # head 0: the reference mean
    _, plain = run_capture(model, tokens, ["blocks.0.attn.hook_z"])
    assert torch.equal(z[:, :, 1], plain["blocks.0.attn.hook_z"][:, :, 1])  # head 1 untouched
    # resample: same seed -> same logits; ablate_tokens takes a token tensor as well as a TaskBatch
    a = run_logits(model, tokens, ablate_tokens(model, "blocks.0.hook_mlp_out", "resample", reference=reference.tokens, seed=3))
    b = run_logits(model, tokens, ablate_mlp(model, 0, "resample", reference=reference, seed=3))
    assert torch.equal(a, b)
    # and so do ablate / ablate_head / ablate_mlp on any other model (their annotation refused a tensor)
    for through_ids, through_batch in (
        (ablate_head(model, 0, 0, "mean", reference=reference.tokens), hooks),
        (ablate_mlp(model, 0, "resample", reference=reference.tokens, seed=3),
         ablate_mlp(model, 0, "resample", reference=reference, seed=3)),
        (ablate(model, "blocks.0.hook_mlp_out", "optimal", reference=reference.tokens),
         ablate_tokens(model, "blocks.0.hook_mlp_out", "optimal", reference=reference.tokens)),
    ):
        assert torch.equal(run_logits(model, tokens, through_ids), run_logits(model, tokens, through_batch))
    assert hook_count(model) == 0


def test_task_ablation_table_of_a_toy_model():
    model = ToyModel()
    table = ablation_table(model, task=TOY_TASK, n=100)
    frame = table.to_dataframe()
    assert list(frame["component"]) == ["none"] + ["L0H0", "L0H1", "L0MLP"] * 3
    assert table.primary_metric == "accuracy"
    zero = table.get("L0H1", "zero")
    with torch.no_grad():
        model.W_O[1] = 0.0
    expected = evaluate(model, TOY_TASK.test_set(100), task=TOY_TASK)
    assert zero.metrics["accuracy"] == expected.metrics["accuracy"]
    assert zero.test_loss == pytest.approx(expected.test_loss, abs=1e-5)
    assert frame.loc[0, "delta_accuracy"] == 0.0
    again = ablation_table(ToyModel(), task=TOY_TASK, n=100)
    assert again.to_dataframe().equals(frame)  # same arguments, same numbers


def test_bad_inputs_raise_clear_errors_before_any_work():
    model = ToyModel()
    with pytest.raises(ValueError, match="needs reference="):
        ablate_head(model, 0, 0, "mean")
    with pytest.raises(ValueError, match="needs the permutation-lookup task"):  # optimal works here (test_any_task)
        ablate_head(model, 0, 0, "binding_free", reference=TOY_TASK.test_set(10))
    with pytest.raises(ValueError, match="layer 1 out of range"):
        ablate_head(model, 1, 0)
    with pytest.raises(ValueError, match="head 2 out of range"):
        ablate_head(model, 0, 2)
    with pytest.raises(TypeError, match="reference must be a TaskBatch"):
        reference_tokens(model, [[1, 2]])  # (ablate_* annotate it: beartype rejects it at the call in tests)
    with pytest.raises(ValueError, match=r"token ids must be \[0, 7\)"):
        ablate_tokens(model, "blocks.0.attn.hook_z", "mean", reference=torch.tensor([[1, 9]]))
    with pytest.raises(ValueError, match="unknown hook point 'blocks.0.nope'"):
        ablate(model, "blocks.0.nope")
    with pytest.raises(ValueError, match="position 9 out of range"):
        ablate_head(model, 0, 0, "mean", reference=TOY_TASK.test_set(10), positions=9)
    with pytest.raises(ValueError, match="hooks= need the model's own forward"):
        evaluate(model, task=TOY_TASK, hooks=ablate_head(model, 0, 0), forward=lambda m, t: m(t))
    with pytest.raises(TypeError, match="carries no task: evaluate\\(model, task=task\\)"):
        evaluate(model)  # neither a study bridge nor a model carrying its task (the Forner teacher does)
    clean = TOY_TASK.test_set(10)
    with pytest.raises(ValueError, match="same shape"):
        patch_head(model, clean, clean.tokens[:, :4], target_logprob(clean), 0, 0)
    with pytest.raises(ValueError, match=r"one number per row, shape \(10,\) \(batch,\)"):
        patch_head(model, clean, clean, lambda logits: logits.sum(), 0, 0)
    with pytest.raises(ValueError, match="hows entries must be in"):
        ablation_table(model, ("zero", "binding_free"), task=TOY_TASK)
    with pytest.raises(TypeError, match=r"hows must be a non-empty list or tuple of modes .*, got 'zero'"):
        ablation_table(model, "zero", task=TOY_TASK)  # it was split into letters: "got 'z'"
    full = TOY_TASK.test_set(10)
    short = type(full)(full.tokens[:, :4], full.targets[:, :4], full.mask[:, :4])
    with pytest.raises(ValueError, match=r"reference sequences must have the test set's 6 positions .*, got 4"):
        ablation_table(model, ("mean",), task=TOY_TASK, n=10, reference=short)  # it failed inside the first run
    from perm_circuits.analysis import circuit_metrics

    with pytest.raises(ValueError, match=r"reference sequences must have the test set's 6 positions .*, got 4"):
        circuit_metrics(model, ["L0H0"], task=TOY_TASK, n=10, reference=short)
    with pytest.raises(TypeError, match="layer must be an int, got bool True"):  # the reported layer
        patch_activation(model, clean, clean, target_logprob(clean), "blocks.0.attn.hook_z", layer=True)
    assert hook_count(model) == 0


def test_hooks_never_leak_after_an_exception():
    model = ToyModel()
    zero_far = ablate_head(model, 0, 0, "zero", positions=[40])  # range known only when the hook runs
    with pytest.raises(ValueError, match="position 40 out of range"):
        evaluate(model, task=TOY_TASK, n=10, hooks=zero_far)
    assert hook_count(model) == 0
    clean = TOY_TASK.test_set(10)

    def failing(logits):
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        patch_head(model, clean, clean, failing, 0, 0)
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- Forner et al. 2026


@pytest.fixture(scope="module")
def forner():
    model = teacher_model()
    return model, model.task, model.task.test_set(400, 11)


def test_forner_zero_ablation_drops_accuracy_to_the_share_of_state_zero(forner):
    model, task, test_set = forner
    assert evaluate(model, test_set, task=task).metrics["teacher_forced_accuracy"] == 1.0
    zero = evaluate(model, test_set, task=task, hooks=ablate_head(model, 0, 0, "zero"))
    # o_i = 0 makes every logit 0: the argmax is state 0, right exactly where the target is state 0
    share = float((test_set.targets[test_set.mask > 0] == 0).float().mean())
    assert zero.metrics["teacher_forced_accuracy"] == pytest.approx(share, abs=1e-7)
    assert 0.08 < share < 0.17
    assert zero.test_loss == pytest.approx(math.log(task.N), abs=1e-6)  # uniform over the N states
    assert hook_count(model) == 0


def test_forner_mean_ablation_uses_the_reference(forner):
    model, task, test_set = forner
    reference = task.test_set(300, 2)
    hooks = ablate_head(model, 0, 0, "mean", reference=reference)
    _, ref = run_capture(model, reference.tokens, ["blocks.0.attn.hook_z"])
    _, store = run_capture(model, test_set.tokens, ["blocks.0.attn.hook_z"], hooks)
    assert torch.allclose(store["blocks.0.attn.hook_z"], ref["blocks.0.attn.hook_z"].mean(0, keepdim=True).expand(400, -1, -1, -1))
    mean = evaluate(model, test_set, task=task, hooks=hooks).metrics["teacher_forced_accuracy"]
    assert 0.2 < mean < 0.5  # the mean output still names a likely action at each position
    table = ablation_table(model, task=task, n=400, test_seed=11, reference=reference)
    assert table.get("L0H0", "mean").metrics["teacher_forced_accuracy"] == mean
    assert [row.component for row in table.rows] == ["none", "L0H0", "L0H0", "L0H0"]


def test_forner_patching_the_head_restores_the_clean_metric_exactly(forner):
    model, task, clean = forner
    L = task.L
    corrupted = clean.tokens.clone()  # other actions, the same teacher-forced state tokens
    corrupted[:, :L] = torch.randint(task.d_g, (len(clean), L), generator=torch.Generator().manual_seed(5))
    metric = target_logprob(clean)
    result = patch_head(model, clean, corrupted, metric, 0, 0, n_boot=200)
    assert result.corrupted < result.clean - 0.3
    assert result.patched == result.clean and result.effect == 1.0
    assert (result.ci_low, result.ci_high) == (1.0, 1.0)
    # o_i at action positions feeds no logit (their state vector is 0): patching there restores nothing
    actions_only = patch_activation(model, clean, corrupted, metric, "blocks.0.attn.hook_z", positions=list(range(L)))
    assert actions_only.effect == 0.0 and actions_only.patched == actions_only.corrupted
    assert hook_count(model) == 0


def test_task_report_renders_an_ablation_section_offline(forner, tmp_path):
    model, task, _ = forner
    page = task_report(model, task, tmp_path, n=100, n_sequences=1)
    html = page.read_text()
    assert "<h2>Ablation</h2>" in html and "delta teacher forced accuracy" in html
    assert "change in teacher_forced_accuracy" in html
    assert remote_resource_refs(html) == []
    none = task_report(model, task, tmp_path / "none", n=50, n_sequences=1, ablation_hows=())
    assert "<h2>Ablation</h2>" not in none.read_text()


# ----------------------------------------------------------------------------- the study's bridges


def test_study_bridge_with_a_task_batch_reference_matches_the_batch_reference():
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=1, seed=0))
    task = PermutationTask(TaskConfig())
    reference = task.test_set(200, 5)
    tokens = task.test_set(50, 6).tokens
    via_task = run_logits(model, tokens, ablate_head(model, 0, 1, "mean", reference=reference))
    via_batch = run_logits(model, tokens, ablate_head(model, 0, 1, "mean", reference=TaskBatch(reference.tokens, reference.targets,
                                                                                     reference.mask)))
    assert torch.equal(via_task, via_batch)
    table = ablation_table(model, ("zero",), task=task, n=100)
    assert [row.component for row in table.rows] == ["none", "L0H0", "L0H1", "L0MLP"]


def test_memory_recall_reads_the_forner_logic_module():
    """R(W_hat, W*) of Bietti et al. (2023) on each M_a: the teacher stores sigma_a, a random init does not."""
    teacher = teacher_model()
    task = teacher.task
    identity = torch.eye(task.N)
    for a in range(task.d_g):
        targets = [(s, int(task.perms[a, s])) for s in range(task.N)]
        # z = M_a e_s (column convention) is e_s @ M_a^T in the row convention of memory_recall
        assert memory_recall(teacher.M[a].T, identity, identity, targets) == 1.0
    student = FornerModel(FornerConfig(seed=3))
    rates = [memory_recall(student.M[a].detach().T, identity, identity,
                           [(s, int(task.perms[a, s])) for s in range(task.N)]) for a in range(task.d_g)]
    assert sum(rates) / len(rates) < 0.4


# ----------------------------------------------------------------------------- Bietti et al. 2023 (birth)


@pytest.fixture(scope="module")
def birth():
    from perm_circuits.systems.birth_model import (
        BirthModelConfig,
        handbuilt_induction_model,
    )
    from perm_circuits.tasks.bigram import BigramTriggerTask

    return handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0)), BigramTriggerTask(N=16, T=32)


def test_birth_ablation_table_finds_the_induction_head(birth):
    model, task = birth
    shape = model_shape(model)
    assert (shape.n_layers, shape.n_heads, shape.d_mlp, shape.mlp(0)) == (2, 1, None, False)
    table = ablation_table(model, ("zero", "mean"), task=task, n=200, reference=task.test_set(500, 1235))
    assert [row.component for row in table.rows] == ["none", "L0H0", "L1H0", "L0H0", "L1H0"]
    assert table.primary_metric == "in_context_acc"
    base = table.baseline.metrics["in_context_acc"]
    assert base > 0.9  # the eq. 8 memories solve the in-context task
    # removing the induction head (layer 2) or the previous-token head (layer 1) breaks it
    assert table.get("L1H0", "zero").metrics["in_context_acc"] < 0.15
    assert table.get("L1H0", "mean").metrics["in_context_acc"] < 0.15
    assert table.get("L0H0", "zero").metrics["in_context_acc"] < 0.6
    assert hook_count(model) == 0


def test_birth_task_report_renders_offline(birth, tmp_path):
    model, task = birth
    html = task_report(model, task, tmp_path, n=40, n_sequences=1, ablation_hows=("zero",)).read_text()
    assert "<h2>Ablation</h2>" in html and "delta in context acc" in html and html.count(".AttentionHeads, {") == 2
    assert remote_resource_refs(html) == []


def test_birth_patching_the_induction_head_restores_the_in_context_answers(birth):
    model, task = birth
    clean = task.test_set(200, 3)
    clean = clean.subset(clean.mask.sum(1) > 0)
    corrupted = clean.tokens.clone()  # each trigger's first output replaced: the memory to recall is wrong
    first_output = torch.zeros_like(corrupted, dtype=torch.bool)
    first_output[:, 1:] = clean.extras["occurrence"][:, :-1] == 1
    corrupted[first_output] = (corrupted[first_output] + 1) % task.N
    metric = target_logprob(clean)
    induction = patch_head(model, clean, corrupted, metric, 1, 0, n_boot=100)
    assert induction.clean - induction.corrupted > 5.0
    assert induction.effect == pytest.approx(1.0, abs=1e-3) and induction.ci_low > 0.99
    previous = patch_head(model, clean, corrupted, metric, 0, 0, n_boot=100)
    assert previous.effect < 0.05  # the previous-token head reads the trigger, which is unchanged
    with pytest.raises(ValueError, match="needs a position with mask > 0"):
        target_logprob(task.test_set(50, 3))


# ----------------------------------------------------------------------------- Nichani, Lee & Bietti 2024 (factual)


@pytest.fixture(scope="module")
def factual():
    from systems.test_factual import (  # the hand-built associative memory (accuracy 1)
        TASK,
        hand_built,
    )

    return hand_built(TASK), TASK


def test_factual_ablations_remove_every_fact(factual):
    model, task = factual
    assert model_shape(model).mlp(0) and model_shape(model).n_heads == 1
    table = ablation_table(model, ("zero", "mean"), task=task, n=300, reference=task.test_set(500, 1235))
    assert [row.component for row in table.rows] == ["none", "L0H0", "L0MLP", "L0H0", "L0MLP"]
    assert table.baseline.metrics["fact_accuracy"] == 1.0
    answers = task.test_set(300).extras["answer"]
    share = float((answers == 0).float().mean())  # every logit 0: the argmax is answer 0
    for component in ("L0H0", "L0MLP"):  # without the head the EOS reads nothing; without the MLP nothing is recalled
        row = table.get(component, "zero")
        assert row.metrics["fact_accuracy"] == pytest.approx(share, abs=1e-7)
        assert row.metrics["loss"] == pytest.approx(math.log(task.n_answers), abs=1e-6)
    assert table.get("L0H0", "mean").metrics["fact_accuracy"] < 0.2


def test_factual_patching_and_memory_recall(factual):
    model, task = factual
    clean = task.test_set(200, 3)
    corrupted = clean.tokens.clone()  # another subject at the subject's slot
    rows = torch.arange(len(clean))
    corrupted[rows, clean.extras["subject_position"]] = task.subject_offset + (clean.extras["subject"] + 1) % task.S
    metric = target_logprob(clean)
    head = patch_head(model, clean, corrupted, metric, 0, 0, n_boot=100)
    assert head.clean - head.corrupted > 5.0 and head.effect == 1.0  # hook_z has one position: the EOS query
    mlp = patch_activation(model, clean, corrupted, metric, "blocks.0.hook_mlp_out", n_boot=100)
    assert mlp.effect == 1.0
    # the MLP's output matrix stores fact n -> answer a*(s, r) (R of Bietti et al. 2023 on W_out)
    targets = [(s * task.R + r, int(task.facts()[s, r])) for s in range(task.S) for r in range(task.R)]
    assert memory_recall(model.W_out.detach(), torch.eye(task.n_facts), model.W_U.detach().T, targets) == 1.0


def test_factual_task_report_renders_offline(factual, tmp_path):
    model, task = factual
    html = task_report(model, task, tmp_path, n=60, n_sequences=1, ablation_hows=("zero",)).read_text()
    assert "<h2>Ablation</h2>" in html and "delta fact accuracy" in html and "reference_tv" in html
    assert remote_resource_refs(html) == []


# ----------------------------------------------------------------------------- docs/tasks.md


def test_docs_section_runs_and_states_its_numbers():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text(encoding="utf-8")
    section = doc.split("## Analyses on any task", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    namespace: dict = {}
    exec(compile(block, "docs/tasks.md", "exec"), namespace)
    zero, mean, table, patch = (namespace[k] for k in ("zero", "mean", "table", "patch"))
    assert round(zero.metrics["teacher_forced_accuracy"], 4) == 0.1338 and "0.1338" in section
    assert round(zero.test_loss, 4) == 2.0794 and "2.0794" in section
    assert round(mean.metrics["teacher_forced_accuracy"], 4) == 0.3354 and "0.3354" in section
    assert table.get("L0H0", "mean").metrics == mean.metrics  # the table's reference is task.test_set(500, 1235)
    assert round(table.get("L0H0", "resample").metrics["teacher_forced_accuracy"], 4) == 0.2448 and "0.2448" in section
    assert (patch.effect, patch.ci_low, patch.ci_high) == (1.0, 1.0, 1.0) and "CI [1.0, 1.0]" in section
