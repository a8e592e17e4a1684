"""What the "task model" report shows, computed: every general analysis of one model on one task.

:func:`task_report_data` runs the analyses that need nothing but a
:class:`~perm_circuits.tasks.base.Task` and a model with TransformerLens hook points, and returns
them in a :class:`TaskReportData`; :func:`perm_circuits.views.task_page.render_task_report`
renders it (views render, they do not compute).  The sections:

- the task's metrics on ``task.test_set(n, seed)`` (:func:`~perm_circuits.evaluate` with ``task=``)
  and a few test sequences position by position;
- attention patterns of every layer and head, and where each head looks
  (:func:`~perm_circuits.analysis.probes.task_attribution.attention_scores`);
- the ablation table of every head and MLP (:func:`~perm_circuits.analysis.interventions.ablation.ablation_table`);
- activation patching of every head and MLP (Wang et al. 2022; Meng et al. 2022): clean = the
  test sequences with a loss position, corrupted = the same batch shifted by one row (each
  sequence paired with another sequence of the task), metric = the clean targets' log-probability
  (:func:`~perm_circuits.analysis.interventions.activation_patching.target_logprob`), with bootstrap CIs;
- direct logit attribution to the targets
  (:func:`~perm_circuits.analysis.probes.task_attribution.target_logit_attribution`);
- a proposed circuit and its IOI criteria (:func:`~perm_circuits.analysis.circuits.criteria.propose_circuit`,
  :func:`~perm_circuits.analysis.circuits.criteria.circuit_metrics`, mean ablation, F the targets'
  log-probability above a uniform guess);
- the discovered circuit (ACDC under resample ablation) and three to five one-line findings from
  all of the above (:func:`~perm_circuits.analysis.task_findings.task_findings`).

:func:`study_report_data` computes the permutation study's page (the head-role verdict, recall
patching, FFN and memory probes, the study's attribution), which
:mod:`perm_circuits.views.report` renders.

A section that does not apply to the model (no hook points to ablate, no ``W_U``, a custom
``forward``) holds ``None`` and a note saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.analysis.interventions.ablation import ablation_table
from perm_circuits.analysis.circuits.criteria import circuit_metrics, propose_circuit
from perm_circuits.analysis.circuits.results import CircuitMetrics
from perm_circuits.analysis.figure_data import (
    example_activations,
    example_sequences,
    mean_attention,
    probe_distributions,
    walkthrough_distributions,
)
from perm_circuits.analysis.figure_results import ExampleActivations, MeanAttention, ProbeDistribution, Walkthrough
from perm_circuits.analysis.interventions.core import ANY_TASK_HOWS, TASK_HOWS
from perm_circuits.analysis.interventions.ablation_table import AblationTable, components_of
from perm_circuits.analysis.probes.task_attribution import (
    AttentionScores, TargetAttribution, attention_patterns, attention_scores, target_logit_attribution,
)
from perm_circuits.analysis.interventions.activation_patching import TaskPatch, patch_activation, patch_head, target_logprob
from perm_circuits.analysis.task_findings import discovered_sentence, task_findings
from perm_circuits.checks import check_int
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.tasks.evaluation import Evaluation
from perm_circuits.tasks.runner import measure_task, task_logits
from perm_circuits.tasks.base import Task, TaskBatch

__all__ = ["StudyReportData", "TaskReportData", "sequence_table", "study_report_data", "task_report_data", "token_labels"]


@dataclass(frozen=True)
class TaskReportData:
    """Everything the task report renders (module docstring); ``notes[section]`` says why a section is empty."""

    task_name: str
    about: dict[str, Any]
    evaluation: Evaluation
    n: int
    seed: int
    sequences: tuple[pd.DataFrame, ...]
    labels: tuple[tuple[str, ...], ...]
    patterns: dict[str, Tensor]
    attention: AttentionScores | None
    ablation: AblationTable | None
    ablation_hows: tuple[str, ...]
    patching: tuple[TaskPatch, ...] | None
    attribution: TargetAttribution | None
    circuit: CircuitMetrics | None
    notes: dict[str, str] = field(default_factory=dict)
    skills: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[str, ...] = ()


def token_labels(task: Task, tokens: Sequence[int]) -> list[str]:
    """``"pos: label"`` per token: the task's optional ``token_labels(tokens)``, else the token id."""
    custom = getattr(task, "token_labels", None)
    if callable(custom):
        labels = list(custom(list(tokens)))
        if len(labels) == len(tokens) and all(isinstance(label, str) for label in labels):
            return [f"{pos}: {label}" if not label.startswith(f"{pos}:") else label for pos, label in enumerate(labels)]
    return [f"{pos}: {tok}" for pos, tok in enumerate(tokens)]


def sequence_table(logits: Tensor, batch: TaskBatch, row: int) -> pd.DataFrame:
    """One test sequence position by position: token, target, loss weight, the model's top token, P(target)."""
    probs = logits[row].softmax(dim=-1)
    targets = batch.targets[row].clamp(0, probs.shape[-1] - 1)
    return pd.DataFrame({
        "token": batch.tokens[row].tolist(),
        "target": batch.targets[row].tolist(),
        "loss weight": batch.mask[row].tolist(),
        "model's top token": probs.argmax(dim=-1).tolist(),
        "P(target)": probs.gather(1, targets[:, None])[:, 0].tolist(),
    }).rename_axis("position")


def _first(batch: TaskBatch, n: int) -> TaskBatch:
    """The first ``n`` sequences of ``batch`` (all of them when fewer)."""
    return batch.subset(torch.arange(min(n, len(batch)), device=batch.tokens.device))


def _patching(model, test_set: TaskBatch, n_boot: int) -> tuple[TaskPatch, ...]:
    clean = test_set.subset(test_set.mask.sum(1) > 0)
    if len(clean) < 2:
        raise ValueError("fewer than two test sequences with a loss position: nothing to pair")
    corrupted = clean.tokens.roll(1, dims=0)
    metric = target_logprob(clean)
    return tuple(
        patch_head(model, clean, corrupted, metric, layer, head, n_boot=n_boot) if head is not None
        else patch_activation(model, clean, corrupted, metric, f"blocks.{layer}.hook_mlp_out", layer=layer,
                              n_boot=n_boot)
        for _, layer, head in components_of(model)
    )


def task_report_data(
    model: Any,
    task: Task,
    *,
    n: int = 500,
    n_sequences: int = 3,
    seed: int = 1234,
    forward: Callable[[Any, Tensor], Tensor] | None = None,
    ablation_hows: Sequence[str] = TASK_HOWS,
    analyses: bool = True,
    n_analysis: int = 200,
    n_boot: int = 200,
) -> TaskReportData:
    """Compute every section of the task report (module docstring).

    ``n`` test sequences (``task.test_set(n, seed)``) for the metrics and the ablation table
    (mean and resample draw from ``task.test_set(n, seed + 1)``), ``n_sequences`` of them shown;
    ``analyses``: also patching, attribution, attention scores and the proposed circuit, on the
    first ``n_analysis`` test sequences (``n_boot`` bootstrap resamples).  The hook-based sections
    need the model's own forward: with ``forward`` given they run ``model(tokens)`` where its logits
    agree with ``forward``'s within 1e-4 (a plain-PyTorch training forward of the same model), and
    are left out (noted) where they do not.
    """
    if not isinstance(task, Task):
        raise TypeError(f"task must implement perm_circuits.tasks.Task (e.g. a registered task's instance), "
                        f"got {type(task).__name__}")
    if forward is not None and not callable(forward):
        raise TypeError(f"forward must be a callable (model, tokens) -> logits or None, got {type(forward).__name__}")
    for name, value, low in (("n", n, 1), ("n_sequences", n_sequences, 1), ("n_analysis", n_analysis, 2),
                             ("n_boot", n_boot, 10)):
        check_int(name, value, low=low)
    if isinstance(ablation_hows, str) or not isinstance(ablation_hows, (tuple, list)):
        raise TypeError(f"ablation_hows must be a tuple or list of modes from {ANY_TASK_HOWS}, got {ablation_hows!r}")
    bad = [how for how in ablation_hows if how not in ANY_TASK_HOWS]
    if bad:
        raise ValueError(f"ablation_hows entries must be in {ANY_TASK_HOWS}, got {bad}")
    test_set = task.test_set(n, seed)
    evaluation = measure_task(model, task, test_set, forward=forward)
    shown = _first(test_set, n_sequences)
    logits = task_logits(model, shown.tokens, forward)
    hooked = None if forward is None or _same_function(model, shown.tokens, logits) else forward
    params = list(model.parameters())
    about = {
        "task": task.name,
        **{f"task.{k}": v for k, v in task.to_dict().items() if k != "task"},
        "model": f"{evaluation.model_name} ({type(model).__name__})",
        "parameters": sum(p.numel() for p in params),
        "trainable parameters": sum(p.numel() for p in params if p.requires_grad),
        **({"forward": "a custom forward; the hook-based sections run model(tokens), whose logits agree with it"}
           if forward is not None and hooked is None else {}),
    }
    notes: dict[str, str] = {}
    try:
        patterns = attention_patterns(model, shown.tokens, hooked)
    except RuntimeError:
        if hooked is None:
            raise
        patterns = {}  # e.g. a plain-PyTorch training forward that runs no hook point
        notes["attention"] = "The custom forward given runs no attention hook point: no attention patterns or scores."
    hookable = isinstance(getattr(model, "hook_dict", None), dict) and bool(components_of(model))
    ablation = patching = attribution = circuit = attention = None
    skills: Mapping[str, Any] = {}
    subset = _first(test_set, n_analysis)
    if not hookable:
        notes["ablation"] = notes["patching"] = notes["circuit"] = (
            "The model has no blocks.L.attn.hook_z or blocks.L.hook_mlp_out hook point: nothing to intervene on.")
    elif hooked is not None:
        notes["ablation"] = notes["patching"] = notes["circuit"] = (
            "A custom forward was given; interventions run the model's own forward, so they are left out.")
    else:
        if ablation_hows:
            reference = task.test_set(n, seed + 1) if any(h != "zero" for h in ablation_hows) else "test"
            ablation = ablation_table(model, tuple(ablation_hows), test_set, task=task, reference=reference,
                                      test_seed=seed)
        if analyses:
            try:
                patching = _patching(model, subset, n_boot)
            except ValueError as error:
                notes["patching"] = str(error)
            try:
                proposed = propose_circuit(model, "all", subset, task=task, where=("all",))
                circuit = circuit_metrics(model, proposed, subset, task=task, max_exhaustive=6)
            except ValueError as error:
                notes["circuit"] = str(error)
            try:
                skills = _skills(model, subset)
            except (TypeError, ValueError) as error:  # e.g. a model the edge graph does not cover
                notes["skills"] = str(error)
    if analyses:
        scores = attention_scores(patterns)
        attention = scores if scores.heads else None
        if hooked is None:
            try:
                attribution = target_logit_attribution(model, subset)
            except (TypeError, ValueError) as error:
                notes["attribution"] = str(error)
    data = TaskReportData(task_name=task.name, about=about, evaluation=evaluation, n=n, seed=seed,
        sequences=tuple(sequence_table(logits, shown, row) for row in range(len(shown))),
        labels=tuple(tuple(token_labels(task, shown.tokens[row].tolist())) for row in range(len(shown))),
        patterns=patterns, attention=attention, ablation=ablation, ablation_hows=tuple(ablation_hows),
        patching=patching, attribution=attribution, circuit=circuit, notes=notes, skills=skills)
    return replace(data, findings=task_findings(data))


def _same_function(model, tokens: Tensor, logits: Tensor) -> bool:
    """Whether ``model(tokens)`` gives ``logits`` (within 1e-4), the custom forward's logits for ``tokens``."""
    try:
        own = task_logits(model, tokens)
    except (RuntimeError, TypeError, ValueError):  # the model's own call is not a logits forward
        return False
    return own.shape == logits.shape and torch.allclose(own, logits, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- the study's report


@dataclass(frozen=True)
class StudyReportData:
    """What the permutation study's model page shows, computed (:func:`study_report_data`)."""

    task: TaskConfig
    analysis_task: TaskConfig
    test_set: TaskBatch
    evaluation: Evaluation
    generalisation: Any
    verdict: Any
    head_sweep: Any
    source_sweep: Any
    ffns: tuple[Any, ...]
    memory: Any
    flips: tuple[Any, ...]
    dla: Any
    skills: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    walkthrough: Walkthrough | None = None
    probe: ProbeDistribution | None = None
    attention: MeanAttention | None = None
    examples: ExampleActivations | None = None


SKILL_METHOD, SKILL_HOW, SKILL_ROWS = "acdc", "resample", 300
"""How the report's opening circuits are found: ACDC (Conmy et al. 2023) under resample ablation, on
at most 300 test sequences per skill."""


def _skills(model: Any, batch: TaskBatch, **options: Any) -> Mapping[str, Any]:
    """The opening circuit of each skill, found as :data:`SKILL_METHOD` says."""
    from perm_circuits.discovery.skills import discover_skills

    return discover_skills(model, batch, method=SKILL_METHOD, how=SKILL_HOW, **options)


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{100 * value:.1f}%"


def study_findings(evaluation: Any, verdict: Any, skills: Mapping[str, Any]) -> tuple[str, ...]:
    """Three to five one-line findings from the numbers, each naming its ablation mode (or none)."""
    lines = [f"Accuracy at the last step (no ablation): elimination {_pct(evaluation.metrics['elimination_accuracy'])}, "
             f"recall {_pct(evaluation.metrics['recall_accuracy'])}."]
    lines += [f"{skill.capitalize()} {discovered_sentence(result)}" for skill, result in skills.items()]
    roles = [f"{item.component} {item.role}" for item in (*verdict.heads, *verdict.mlps)]
    changing = [item.component for item in (*verdict.heads, *verdict.mlps) if not item.robust]
    lines.append(f"Roles ({verdict.how} ablation): " + ", ".join(roles) + "; "
                 + (f"mode-dependent: {', '.join(changing)}." if changing else "the same under every mode."))
    story = {True: "holds", False: "fails", None: "is open"}[verdict.story_holds]
    lines.append(f"The study's story {story} under {verdict.how} ablation"
                 + ("" if verdict.verdict_robust else " (not under every mode: see the verdict section)") + ".")
    return tuple(lines[:5])


def study_report_data(
    model: Any,
    n: int,
    *,
    n_roles: int,
    n_patch: int,
    n_recall: int,
    n_boot: int,
    repeat_ratio: float,
    step: Callable[[str], None] | None = None,
    roles: Callable[..., Any] | None = None,
    name: str | None = None,
    min_attention_n: int = 100,
) -> StudyReportData:
    """Every analysis of a study model's report page, computed once.

    The evaluation on ``n`` test sequences (with ``repeat_ratio`` when the model trained without
    repeats, so the recall subgroup exists) and the recall generalisation (``n_recall`` per
    position); the head-role verdict on ``n_roles`` sequences (``n_patch`` patching pairs,
    ``n_boot`` resamples); recall patching per head and per head x source position; the FFN
    probes, MLP flips, memory probes and direct logit attribution; the figures' data
    (:mod:`~perm_circuits.analysis.figure_data`: the walkthrough, the probe distribution under
    ``name`` (default the model's name; V = 5 models), the mean attention on at least
    ``min_attention_n`` test sequences, split by last query where both subgroups exist) and one
    forward pass over the example sequences for the interactive views.  ``step(label)`` is called
    before each stage; ``roles`` replaces :func:`~perm_circuits.analysis.study.verdict.head_roles`
    (same arguments).
    """
    from perm_circuits.analysis import (
        direct_logit_attribution,
        ffn_key_value_probe,
        head_roles,
        mlp_prediction_flips,
        model_memory_probes,
        patch_head_outputs,
        patch_head_sources,
    )
    from perm_circuits.evaluate import evaluate, recall_generalisation
    from perm_circuits.models import model_config_of, task_config_of
    from perm_circuits.tasks.permutation_data import make_test_set

    step = step or (lambda label: None)
    config = model_config_of(model)
    task = task_config_of(model)
    analysis_task = task if task.repeat_ratio > 0 else replace(task, repeat_ratio=repeat_ratio)
    step("evaluate")
    test_set = make_test_set(analysis_task, n=n)
    evaluation = evaluate(model, test_set, task=analysis_task)
    generalisation = recall_generalisation(model, task=task, n=n_recall)
    step("head roles")
    verdict = (roles or head_roles)(model, task=task, n=n_roles, n_pair=n_patch, n_boot=n_boot)
    step("patching")
    head_sweep = verdict.head_patching
    if head_sweep is None:
        head_sweep = patch_head_outputs(model, n=n_patch, n_boot=n_boot)
    source_sweep = patch_head_sources(model, n=n_patch, n_boot=n_boot)
    step("FFN and memory")
    layers = range(config.n_layers)
    ffns = tuple(ffn_key_value_probe(model, layer=layer, task=task) for layer in layers)
    memory = model_memory_probes(model)
    flips = tuple(mlp_prediction_flips(model, test_set, layer=layer) for layer in layers)
    dla = direct_logit_attribution(model, test_set)
    step("circuits")
    skills = _skills(model, test_set, max_rows=SKILL_ROWS)
    step("figures")
    walkthrough, probe = None, None
    if config.V == 5:
        walkthrough = walkthrough_distributions(model)
        probe = probe_distributions({name or config.name: model})
    else:
        example = example_sequences(task, test_set)
        if example:
            walkthrough = walkthrough_distributions(model, example[0][1])
    attention_set = test_set if n >= min_attention_n else make_test_set(analysis_task, n=min_attention_n)
    both = bool(attention_set.extras["repeated"].any()) and bool((~attention_set.extras["repeated"]).any())
    attention = mean_attention(model, attention_set, repeated="split" if both else None)
    step("views")
    examples = example_activations(model, task, example_sequences(task, test_set))
    return StudyReportData(task, analysis_task, test_set, evaluation, generalisation, verdict, head_sweep,
                           source_sweep, ffns, memory, flips, dla, skills, study_findings(evaluation, verdict, skills),
                           walkthrough, probe, attention, examples)
