"""The general analyses on a model of each seed paper's task: ablation, circuit criteria, path patching.

Models: the weight-built systems (no training): the induction model of Bietti et al. 2023 ("Birth
of a Transformer") on the bigram-with-triggers task, the teacher of Forner et al. on the
permutation-chain task, and the hand-built associative memory of Nichani, Lee & Bietti 2024 on
the factual-recall task.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_model
from perm_circuits.analysis.interventions.ablation import ablate_head, ablation_table
from perm_circuits.analysis.probes.memory import ov_memory_probe
from perm_circuits.analysis.circuits.criteria import (
    Node,
    circuit_metrics,
    faithfulness_by_mode,
    propose_circuit,
    target_logprob_gain,
)
from perm_circuits.analysis.interventions.path_patching import path_patch, path_patching_table
from perm_circuits.analysis.report_data import task_report_data
from perm_circuits.analysis.interventions.ablation_table import AblationTable
from perm_circuits.analysis.interventions.permutation_table import ABLATION_METRICS
from perm_circuits.analysis.probes.task_attribution import target_logit_attribution
from perm_circuits.analysis.interventions.activation_patching import target_logprob
from perm_circuits.evaluate import evaluate
from perm_circuits.hooks import hook_count, run_logits
from perm_circuits.systems.forner_model import teacher_model
from perm_circuits.tasks import PermutationTask
from perm_circuits.views.html import remote_resource_refs
from perm_circuits.reports import task_report
from perm_circuits.views.task_page import render_task_report


@pytest.fixture(scope="module")
def birth():
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model
    from perm_circuits.tasks.bigram import BigramTriggerTask

    return handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0)), BigramTriggerTask(N=16, T=32)


@pytest.fixture(scope="module")
def forner():
    model = teacher_model()
    return model, model.task


@pytest.fixture(scope="module")
def factual():
    from systems.test_factual import TASK, hand_built

    return hand_built(TASK), TASK


# ----------------------------------------------------------------------------- circuit criteria


def test_circuit_metrics_on_the_chain_task(forner):
    """Zero-ablating the teacher's one head makes every logit 0: F is exactly the uniform guess, 0."""
    model, task = forner
    full = circuit_metrics(model, ["L0H0"], task=task, n=100, how="zero")
    group = full.subgroup("all")
    assert [g.subgroup for g in full.subgroups] == ["all"] and full.elimination is None
    assert group.faithfulness == 1.0 and group.completeness == 0.0
    assert group.f_model > 0.5  # nats above a uniform guess over the N states
    empty = circuit_metrics(model, [], task=task, n=100, how="zero").subgroup("all")
    assert empty.f_model == group.f_model
    assert empty.f_circuit == pytest.approx(0.0, abs=1e-9) and empty.faithfulness == pytest.approx(0.0, abs=1e-9)
    assert group.node("L0H0").minimality == pytest.approx(group.f_model, abs=1e-9)  # removing it loses everything
    assert hook_count(model) == 0


def test_circuit_metrics_on_the_factual_task(factual):
    """Head and MLP are both needed: either alone recalls nothing (F exactly 0 under zero ablation)."""
    model, task = factual
    both = circuit_metrics(model, ["L0H0", "L0MLP"], task=task, n=100, how="zero").subgroup("all")
    assert both.faithfulness == 1.0 and both.completeness == 0.0
    assert both.f_model > 2.0
    for alone in (["L0H0"], ["L0MLP"]):
        part = circuit_metrics(model, alone, task=task, n=100, how="zero").subgroup("all")
        assert part.f_circuit == pytest.approx(0.0, abs=1e-9)
    by_mode = faithfulness_by_mode(model, ["L0H0", "L0MLP"], task=task, n=100, hows=("zero", "mean", "resample"))
    assert [row.faithfulness for row in by_mode.rows] == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="needs the permutation-lookup task"):
        faithfulness_by_mode(model, ["L0H0"], task=task, n=10, hows=("zero", "binding_free"))
    default = faithfulness_by_mode(model, ["L0H0", "L0MLP"], task=task, n=100)  # it raised: binding_free is a default
    assert [row.how for row in default.rows] == ["zero", "mean", "resample", "optimal"]
    assert default.rows[:3] == by_mode.rows


def test_circuit_metrics_and_proposal_on_the_induction_task(birth):
    model, task = birth
    full = circuit_metrics(model, ["L0H0", "L1H0"], task=task, n=80, how="zero").subgroup("all")
    assert full.faithfulness == 1.0 and full.completeness == 0.0 and full.f_model > 2.0
    induction_only = circuit_metrics(model, ["L1H0"], task=task, n=80, how="zero").subgroup("all")
    assert induction_only.faithfulness < 0.3  # without the previous-token head the induction head finds nothing
    assert full.node("L0H0").minimality > 1.0 and full.node("L1H0").minimality > 1.0
    assert propose_circuit(model, "all", task=task, where=("all",), n=60) == (Node(0, 0), Node(1, 0))
    with pytest.raises(ValueError, match="query/answer are the permutation task's"):
        circuit_metrics(model, ["L1H0@query"], task=task, n=10)
    with pytest.raises(ValueError, match="skill must be one of \\('all',\\)"):
        propose_circuit(model, "recall", task=task, n=10)


def test_circuit_metrics_on_tokens_with_a_metric_equals_the_task_default(forner):
    model, task = forner
    batch = task.test_set(60, 5)
    by_task = circuit_metrics(model, ["L0H0@last"], batch, task=task, how="mean").subgroup("all")
    by_tokens = circuit_metrics(model, ["L0H0@last"], batch.tokens, metric=target_logprob_gain(batch),
                                how="mean", reference=batch.tokens).subgroup("all")
    assert (by_task.f_model, by_task.f_circuit) == (by_tokens.f_model, by_tokens.f_circuit)
    assert by_task.f_circuit < by_task.f_model  # the head at the other positions carries the answers
    with pytest.raises(ValueError, match="pass metric="):
        circuit_metrics(model, ["L0H0"], batch.tokens)


def test_study_bridge_given_a_task_uses_the_task_path():
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=1, seed=0))
    task = PermutationTask(TaskConfig())
    nodes = ["L0H0", "L0H1", "L0MLP"]
    # on a study bridge a PermutationTask (or its TaskConfig) means the study's own problem ...
    study = circuit_metrics(model, nodes, task=task, n=50, how="zero")
    assert [g.subgroup for g in study.subgroups] == ["elimination", "recall"]
    assert study.elimination.f_model == circuit_metrics(model, nodes, n=50, how="zero").elimination.f_model
    # ... and metric= keeps forcing the general path
    batch = task.test_set(50, 1234)
    metrics = circuit_metrics(model, nodes, batch, task=task, metric=target_logprob_gain(batch), how="zero")
    assert [g.subgroup for g in metrics.subgroups] == ["all"] and metrics.subgroup("all").faithfulness == 1.0
    table = ablation_table(model, ("zero",), task=task, n=50)  # the study's own table, with task's settings
    assert isinstance(table, AblationTable) and [r.component for r in table.rows] == ["none", "L0H0", "L0H1", "L0MLP"]
    assert table.task == "permutation" and table.metric_names == ABLATION_METRICS


# ----------------------------------------------------------------------------- path patching


def _trigger_corruption(task, n: int = 150):
    """Each trigger's first occurrence replaced by another token: the key the induction head needs is gone."""
    clean = task.test_set(n, 3)
    clean = clean.subset(clean.mask.sum(1) > 0)
    corrupted = clean.tokens.clone()
    first = clean.extras["occurrence"] == 1
    corrupted[first] = (corrupted[first] + 1) % task.N
    return clean, corrupted


def test_path_patching_finds_the_k_composition_edge(birth):
    """Previous-token head -> induction head's key carries the effect; its query and value carry none."""
    model, task = birth
    clean, corrupted = _trigger_corruption(task)
    table = path_patching_table(model, (clean, corrupted), n_boot=200)
    assert [e.label for e in table] == ["L0H0->L1H0.q", "L0H0->L1H0.k", "L0H0->L1H0.v"]
    assert table.clean_logit_diff - table.corrupted_logit_diff > 3.0  # mean log-prob of the targets, clean vs corrupted
    key = table.get((0, 0), (1, 0), "k")
    assert key.mean > 0.6 and key.ci_low > 0.5 and key.significant
    assert abs(table.get("L0H0", "L1H0", "q").mean) < 0.05 and abs(table.get("L0H0", "L1H0", "v").mean) < 0.05
    # token ids with an explicit metric give the same numbers as the TaskBatch default
    one = path_patch(model, (0, 0), (1, 0), "k", (clean.tokens, corrupted), metric=target_logprob(clean), n_boot=200)
    assert one.effects[0].mean == key.mean and (one.effects[0].ci_low, one.effects[0].ci_high) == (key.ci_low, key.ci_high)
    assert hook_count(model) == 0


def test_path_patching_validation_on_any_model(birth, forner):
    model, task = birth
    clean, corrupted = _trigger_corruption(task, 20)
    with pytest.raises(ValueError, match="pass pair=\\(clean, corrupted\\)"):
        path_patching_table(model)
    with pytest.raises(ValueError, match="pass metric="):
        path_patch(model, (0, 0), (1, 0), "k", (clean.tokens, corrupted))
    with pytest.raises(ValueError, match="same shape"):
        path_patch(model, (0, 0), (1, 0), "k", (clean, corrupted[:, :5]))
    with pytest.raises(ValueError, match="needs n_layers >= 2"):
        path_patching_table(forner[0], (forner[1].test_set(10), forner[1].test_set(10, 2)))
    assert hook_count(model) == 0


# ----------------------------------------------------------------------------- ablation


def test_optimal_ablation_on_a_task_model_beats_mean_ablation_on_its_reference(forner):
    """Li & Janson 2024: the L-BFGS search starts at the mean and only accepts steps that lower the loss."""
    model, task = forner
    reference = task.test_set(200, 4)
    mean = evaluate(model, reference, task=task, hooks=ablate_head(model, 0, 0, "mean", reference=reference))
    optimal = evaluate(model, reference, task=task, hooks=ablate_head(model, 0, 0, "optimal", reference=reference))
    base = evaluate(model, reference, task=task)
    assert base.test_loss < optimal.test_loss < mean.test_loss - 0.05
    table = ablation_table(model, ("mean", "optimal"), task=task, test_set=reference)
    assert table.get("L0H0", "optimal").test_loss == pytest.approx(optimal.test_loss, abs=1e-6)
    assert table.get("L0H0", "mean").metrics == mean.metrics
    assert hook_count(model) == 0


def test_the_task_table_needs_a_task_and_zero_ablation_silences_the_head(forner):
    model, task = forner
    with pytest.raises(TypeError, match="needs task="):
        ablation_table(model)
    zero = run_logits(model, task.test_set(5).tokens, ablate_head(model, 0, 0, "zero"))
    assert torch.equal(zero, torch.zeros_like(zero))  # o_i = 0: every state logit 0


def test_ablation_modules_have_no_cycle_and_the_core_needs_no_task():
    root = Path(__file__).resolve().parents[2] / "src" / "perm_circuits" / "analysis" / "interventions"

    def imports(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text())
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    core = imports("core")
    assert not core & {"perm_circuits.tasks.permutation_data", "perm_circuits.models", "perm_circuits.evaluate", "perm_circuits.posterior",
                     "perm_circuits.tasks.permutation_posterior"}
    assert not any(m.startswith("perm_circuits.analysis.") and m != "perm_circuits.analysis.interventions.checks" for m in core)
    # the one ablation table is defined task-free; the study's fills it
    assert not any("permutation" in m for m in imports("ablation_table"))
    layers = ["core", "hooks", "ablation_table", "permutation_table", "ablation"]
    for i, name in enumerate(layers):  # each imports only the layers before it
        later = {f"perm_circuits.analysis.interventions.{m}" for m in layers[i:]}
        assert not imports(name) & later, name


# ----------------------------------------------------------------------------- attribution and the report


def test_direct_logit_attribution_sums_to_the_target_logit(birth, factual):
    """No norm and no biases in the weight-built models: the components account for everything."""
    model, task = birth
    batch = task.test_set(60, 2)
    batch = batch.subset(batch.mask.sum(1) > 0)
    dla = target_logit_attribution(model, batch)
    assert dla.components == ("embed", "pos_embed", "L0H0", "L1H0")
    assert abs(dla.remainder) < 1e-5 and dla.get("L1H0") > 0.9 * dla.total > 10.0  # the induction head writes the answer
    model, task = factual
    dla = target_logit_attribution(model, task.test_set(60))
    assert dla.get("L0MLP") == pytest.approx(dla.total, abs=1e-9) and dla.get("L0ATTN") == 0.0  # the MLP recalls the fact


def test_the_task_report_has_every_general_section(birth, factual, tmp_path):
    model, task = birth
    data = task_report_data(model, task, n=60, n_sequences=1, ablation_hows=("zero",), n_analysis=60)
    assert data.circuit is not None and data.circuit.circuit == ("L0H0@all", "L1H0@all")
    induction = next(p for p in data.patching if (p.layer, p.head) == (1, 0))
    assert induction.effect == pytest.approx(1.0, abs=0.01)  # another sequence's induction output: its answers
    assert data.attention.to_dataframe().set_index("head").loc["L0H0", "previous"] > 0.99  # the previous-token head
    html = render_task_report(data, tmp_path / "birth").read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", html)
    for section in ("Metrics", "Ablation", "Attention scores", "Activation patching", "Direct logit attribution", "Circuit"):
        assert section in headings, section
    assert remote_resource_refs(html) == []
    # the page opens with the discovered circuit (ACDC, resample ablation) and the findings
    assert html.index('<div class="pc-hero">') < html.index("<h2>Task and model</h2>")
    assert set(data.skills) == {"task"} and data.skills["task"].how == "resample"
    assert data.skills["task"].faithfulness > 0.9 and "L0H0->L1H0.k" in data.skills["task"].circuit  # K-composition
    assert 3 <= len(data.findings) <= 5 and all("ablation" in line for line in data.findings)
    model, task = factual
    html = task_report(model, task, tmp_path / "factual", n=40, n_sequences=1, ablation_hows=("zero",)).read_text()
    assert "<h2>Circuit</h2>" in html and "L0H0@all, L0MLP@all" in html and "<h2>Direct logit attribution</h2>" in html


def test_ov_memory_probe_reads_the_induction_heads_copy_memory(birth):
    """Bietti et al. 2023: the induction head's OV stores the identity over tokens; the previous-token head's does not."""
    model, _ = birth
    induction, previous = ov_memory_probe(model, 0, layer=1), ov_memory_probe(model, 0, layer=0)
    assert (induction.recall, induction.n_pairs) == (1.0, 16)
    assert previous.recall == pytest.approx(previous.chance)


def test_targets_outside_the_logits_are_an_error_not_a_clamped_score():
    """perm_chain's targets are its 8 states; a bridge with 4 output classes cannot score 4..7.  Every
    target-based metric says so (they clamped the targets to the last class and returned numbers)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    from perm_circuits.analysis.interventions.activation_patching import patch_head
    from perm_circuits.discovery import discover
    from perm_circuits.tasks.perm_chain import PermutationChainTask

    task = PermutationChainTask()
    model = TransformerBridge.boot_native(TransformerBridgeConfig(
        d_model=8, d_head=4, n_heads=2, n_layers=2, n_ctx=task.n_ctx, d_vocab=task.d_vocab, d_vocab_out=4, d_mlp=16,
        act_fn="relu", normalization_type="LN", positional_embedding_type="standard", seed=0,
        tokenizer_prepends_bos=False, model_name="narrow")).eval()
    test, corrupted = task.test_set(20), task.test_set(20, seed=3)
    message = r"targets under the loss mask reach 7, outside the (logits'|unembedding's) 4 classes"
    for call in (
        lambda: patch_head(model, test, corrupted, target_logprob(test), 0, 0, n_boot=10),
        lambda: path_patch(model, (0, 0), (1, 0), "k", (test, corrupted), n_boot=10),
        lambda: circuit_metrics(model, ["L0H0"], test),
        lambda: target_logit_attribution(model, test),
        lambda: ablate_head(model, 0, 0, "optimal", reference=test),
        lambda: discover(model, "eap", "mean", batch=test),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert hook_count(model) == 0 and all(p.requires_grad for p in model.parameters())


def test_task_batches_a_model_cannot_run_are_refused_before_any_forward(birth):
    """An empty batch or ids outside the vocabulary are named, not left to the embedding or a reshape."""
    from perm_circuits.analysis.probes.task_attribution import attention_scores
    from perm_circuits.tasks import TaskBatch

    model, task = birth  # vocabulary: 16 ids
    good = task.test_set(4, 0)
    empty = TaskBatch(good.tokens[:0], good.targets[:0], good.mask[:0])
    past = TaskBatch(good.tokens + 16, good.targets, good.mask)
    with pytest.raises(ValueError, match=r"tokens must have shape \[batch >= 1, seq >= 1\], got \(0, 32\)"):
        evaluate(model, empty, task=task)
    with pytest.raises(ValueError, match=r"token ids must be \[0, 16\), got values 16\.\."):
        evaluate(model, past, task=task)
    with pytest.raises(ValueError, match=r"tokens must have shape \[batch >= 1, seq >= 1\], got \(0, 32\)"):
        ablation_table(model, ("zero",), test_set=empty, task=task)
    with pytest.raises(ValueError, match=r"token ids must be \[0, 16\)"):
        ablation_table(model, ("mean",), test_set=good, task=task, reference=past)
    with pytest.raises(ValueError, match=r"tokens must have shape \[batch >= 1, seq >= 1\], got \(0, 32\)"):
        target_logit_attribution(model, empty)
    with pytest.raises(ValueError, match=r"patterns\['blocks.0'\] must be a \[batch, head, query, key\] tensor, got \(3,\)"):
        attention_scores({"blocks.0": torch.zeros(3)})
    assert hook_count(model) == 0


def test_task_report_data_refuses_a_task_name_and_a_bad_forward():
    import inspect

    from perm_circuits.tasks.runner import measure_task

    model = build_model(ModelConfig(d_model=16, n_heads=1, n_layers=1, seed=0))
    raw = inspect.unwrap(task_report_data)  # as a user calls it, without the suite's runtime type checker
    with pytest.raises(TypeError, match="task must implement perm_circuits.tasks.Task .*got str"):
        raw(model, "permutation", n=4)
    with pytest.raises(TypeError, match=r"forward must be a callable \(model, tokens\) -> logits or None, got int"):
        raw(model, PermutationTask(TaskConfig()), n=4, forward=3)
    with pytest.raises(TypeError, match=r"forward must be a callable \(model, tokens\) -> logits or None, got int"):
        inspect.unwrap(measure_task)(model, PermutationTask(TaskConfig()), n=4, forward=3)  # evaluate(task=)'s
