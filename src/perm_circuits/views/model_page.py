"""The per-model report page's content: sample sizes, what a page computed, and its sections as HTML.

:func:`perm_circuits.views.report.model_page_html` assembles one model's page from the renderers here
(the analyses computed by :func:`perm_circuits.reports.write_report`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from perm_circuits.analysis.figure_results import ExampleActivations, ProbeDistribution
from perm_circuits.evaluate import Evaluation, RecallGeneralisation
from perm_circuits.models import describe, model_config_of
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.views.circuits import (
    OfflineView,
    attention_view,
    colored_tokens_view,
    neuron_activations_view,
    token_labels,
)
from perm_circuits.views.report_html import esc, html_note, html_table, kv_table, status_cells

ROLES_MAX_N = 2000
"""Largest test set :func:`~perm_circuits.analysis.head_roles` runs on in a report."""
PATCH_MAX_N = 1000
"""Largest number of clean/corrupted pairs for the recall-patching sweeps."""
N_BOOT = 200
"""Bootstrap resamples of the patching confidence intervals."""
RECALL_MAX_N = 2000
"""Largest number of sequences per repeated position in the recall generalisation."""
MIN_SECTION_N = 100
"""Smallest test set the verdict, patching and attention sections use (they need both the new and
the repeated last-query subgroups), even when ``n`` is smaller."""
STUDY_REPEAT_RATIO = 0.3
"""Repeat ratio of the report's test sets when the model's own task has none."""

MODEL_SECTIONS: tuple[str, ...] = (
    "Summary",
    "Head-role verdict",
    "Evaluation",
    "Recall generalisation",
    "Step accuracy",
    "Walkthrough",
    "Probe distribution",
    "Attention patterns",
    "Ablation",
    "Activation patching",
    "FFN neurons as key-value memories",
    "Memory probes",
    "MLP prediction flips and direct logit attribution",
    "Training curves",
    "Interactive views",
    "Training provenance",
)
"""The ``<h2>`` headings of a per-model page, in order."""


@dataclass
class ModelEntry:
    """One model of the report and what its page computed (kept for the comparison page)."""

    name: str
    source: str
    model: Any
    page: Path | None = None
    evaluation: Evaluation | None = None
    generalisation: RecallGeneralisation | None = None
    verdict: Any = None
    sizes: dict[str, str] = field(default_factory=dict)
    probe_views: list[tuple[str, OfflineView]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    probe: ProbeDistribution | None = None


def evaluation_html(evaluation: Evaluation) -> str:
    """``Evaluation.to_markdown()`` of the study's evaluation as HTML tables (its ``detail``, a
    :class:`~perm_circuits.tasks.permutation.PermutationDetail`)."""
    detail = evaluation.detail
    steps = detail.step_dataframe()
    pct = ["accuracy", "bayes_accuracy", "bayes_accuracy_train"]
    steps[pct] = steps[pct].map(lambda v: f"{100 * v:.2f}%")
    groups = detail.subgroup_dataframe()
    groups["accuracy"] = groups["accuracy"].map(lambda v: "–" if math.isnan(v) else f"{100 * v:.2f}%")
    out = [
        f"<p><b>{esc(evaluation.model_name)}: {evaluation.n_samples} test samples, "
        f"test loss {evaluation.test_loss:.4f}</b></p>",
        "<h3>Per step (MAE / max AE vs the exact Bayesian posterior, uniform and train prior)</h3>",
        html_table(steps, digits=6),
        "<h3>Last step by subgroup (errors vs the uniform-prior posterior)</h3>",
        html_table(groups, digits=6),
    ]
    if detail.probe is not None:
        probs = ", ".join(f"p({v})={p:.4f}" for v, p in enumerate(detail.probe, start=1))
        out.append(f"<p>Probe [2,4,5,3,4,5,3,2,2] (recall 4, elimination 1): {esc(probs)}</p>")
    return "\n".join(out) + "\n"


def generalisation_html(result: RecallGeneralisation) -> str:
    frame = result.to_dataframe()
    frame["recall_accuracy"] = frame["recall_accuracy"].map(lambda v: f"{100 * v:.1f}%")
    frame = frame.T
    frame["new last query (elimination)"] = [f"{100 * result.elimination:.1f}%"]
    return (
        html_note(
            "Last-step accuracy when the last query repeats x_k (training repeats only x1: a model "
            "with general in-context recall answers every k, a position-1 shortcut only k = 1); "
            f"{result.n_per_source} test-permutation sequences per k."
        )
        + html_table(frame)
    )


_ROLE_COLUMNS = (
    "component", "role", "attention_role", "causal_role", "elimination_accuracy", "recall_accuracy",
    "elimination_retention", "recall_retention", "early_mae_increase", "loss_increase", "patch_effect",
    "elim_y_mass", "elim_entropy", "x_prev_y", "y_self", "duplicate_score",
)


def roles_table(verdict: Any) -> str:
    frame = verdict.to_dataframe()
    frame = frame[[c for c in _ROLE_COLUMNS if c in frame.columns]].set_index("component")
    return html_table(frame, digits=3)


def modes_table(verdict: Any) -> str:
    """Role of every component under every ablation mode; mode-dependent roles flagged."""
    hows = list(verdict.hows)
    rows = []
    for item in (*verdict.heads, *verdict.mlps):
        row = {"component": item.component, **{how: role for how, role in item.role_by_how}}
        row["robust?"] = "robust" if item.robust else "MODE-DEPENDENT (differs under " + ", ".join(item.disagreeing) + ")"
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["component", *hows, "robust?"]).set_index("component")
    words = {True: "holds", False: "does not hold", None: "undecided"}
    outcome = ", ".join(f"{how}: {words[holds]}" for how, holds in verdict.verdict_by_how)
    return html_note(
        f"Decisions use {verdict.how} ablation. Why: {verdict.how_reason} The study's story per mode: {outcome}"
        + (" (the same in every mode)." if verdict.verdict_robust else " (it DEPENDS on the mode).")
    ) + html_table(frame)


def circuits_table(verdict: Any) -> str:
    """The circuit proposed per skill with its IOI numbers (Wang et al. 2022) under the decision
    mode, and its faithfulness under every mode (mode-dependent faithfulness flagged)."""
    circuits = getattr(verdict, "circuits", ())
    if not circuits:
        return html_note("No circuit was proposed (the verdict ran without its circuit step).")
    hows = list(verdict.hows)
    rows = []
    for item in circuits:
        m = item.measured
        row = {
            "skill": item.skill,
            "nodes": ", ".join(item.nodes),
            "faithfulness": f"{m.faithfulness:.3f}",
            "faithfulness error": f"{m.faithfulness_error:.3f}",
            "completeness": f"{m.completeness:.3f} ({item.metrics.completeness_method})",
            "minimality per node": ", ".join(f"{e.node}: {e.minimality:.3f}" for e in m.minimality),
        }
        faithful = dict(item.faithful_by_how)
        for r in item.by_mode.rows:
            if r.subgroup == item.skill:
                flag = "" if faithful[r.how] else f" (NOT faithful: error {r.faithfulness_error:.3f})"
                row[f"faithfulness ({r.how})"] = f"{r.faithfulness:.3f}{flag}"
        row["mode-dependent?"] = "MODE-DEPENDENT: " + item.note() if item.mode_dependent else "robust: " + item.note()
        rows.append(row)
    frame = pd.DataFrame(rows).set_index("skill")
    first = circuits[0]
    return html_note(
        f"Per skill, the circuit proposed by propose_circuit under {first.how} ablation (nodes: a head or MLP at a "
        f"position class), judged on {first.metrics.n_samples} test sequences by the IOI criteria (Wang et al. 2022): "
        "faithfulness F(C)/F(M) (1 is perfect) and its error |F(M) - F(C)|/|F(M)| (0 is perfect), completeness "
        "max_K |F(C\\K) - F(M\\K)| (0 is perfect, logit units), minimality per node (larger: the node matters). "
        "F is the skill's logit difference at the last position; everything outside the circuit is ablated. "
        f"Faithful under a mode = error <= {first.tolerance}; the faithfulness under every ablation mode "
        f"({', '.join(hows)}) says whether the circuit is a claim about the model or about one mode."
    ) + html_table(frame, wide=True)


def claims_table(verdict: Any) -> str:
    frame = verdict.claims.to_dataframe()
    frame = frame.drop(columns=[c for c in ("model", "numbers") if c in frame.columns]).set_index("claim")
    return status_cells(html_table(frame, wide=True))


def model_views(acts: ExampleActivations | None) -> list[tuple[str, OfflineView]]:
    """circuitsvis views of one forward pass over the example sequences
    (:func:`~perm_circuits.analysis.figure_data.example_activations`): every layer's attention and
    P(correct y) per step on each example, the MLP neurons that fire on the first."""
    if acts is None:
        return []
    views: list[tuple[str, OfflineView]] = []
    for label, ids, targets, pattern, correct in zip(acts.labels, acts.tokens, acts.targets, acts.patterns,
                                                     acts.correct):
        labels = token_labels(list(ids))
        for layer in range(pattern.shape[0]):
            names = [f"L{layer}H{h}" for h in range(pattern.shape[1])]
            title = f"Attention of every head of layer {layer} on the {label}"
            views.append((title, attention_view(pattern[layer], labels, names, title=title)))
        step_labels = [f"\u00a0{2 * k}: x={ids[2 * k]} → y={t}\u00a0" for k, t in enumerate(targets)]
        title = f"P(correct y) at each prediction position of the {label}"
        views.append((title, colored_tokens_view(step_labels, correct, title=title, min_value=0.0, max_value=1.0)))
    label = acts.labels[0]
    labels = token_labels(list(acts.tokens[0]))
    for layer, post in enumerate(acts.mlp_post):
        # neurons that fire somewhere on the sequence, most active first (circuitsvis shows the
        # first one; an all-zero neuron would render as blank tokens)
        peak = post.max(dim=0).values
        order = [j for j in torch.argsort(peak, descending=True, stable=True).tolist() if peak[j] > 0]
        silent = post.shape[1] - len(order)
        title = (
            f"MLP neuron activations (blocks.{layer}.mlp.hook_post) on the {label}: the {len(order)} neurons that "
            f"fire on it, most active first ({silent} silent neurons left out)"
        )
        if order:
            views.append((title, neuron_activations_view([f"\u00a0{t}\u00a0" for t in labels], post[:, order],
                title=title, neuron_labels=[f"n{j} (max {peak[j]:.2f})" for j in order],
                layer_label=f"L{layer} mlp.hook_post")))
    return views


def page_sizes(n: int) -> tuple[int, int, int]:
    """(verdict test set, patching pairs, recall generalisation per position) for a requested ``n``."""
    roles = max(min(n, ROLES_MAX_N), MIN_SECTION_N)
    patch = max(min(n, PATCH_MAX_N), MIN_SECTION_N)
    recall = min(n, RECALL_MAX_N)
    return roles, patch, recall


def history_frame(metadata: dict) -> pd.DataFrame | None:
    history = metadata.get("history") if isinstance(metadata, dict) else None
    if not isinstance(history, list) or not history:
        return None
    frame = pd.DataFrame(history)
    return frame if "epoch" in frame.columns else None


def provenance_html(entry: ModelEntry, metadata: dict, task: TaskConfig) -> str:
    config = model_config_of(entry.model)
    out = [f"<p>{esc(describe(entry.model))}. Loaded from the {esc(entry.source)}.</p>",
           "<h3>Model and task configuration</h3>"]
    out.append(kv_table({**{f"model.{k}": v for k, v in config.to_dict().items()},
                          **{f"task.{k}": v for k, v in task.to_dict().items()}}))
    if not metadata:
        out.append(html_note("No training metadata is stored with this model (command, seed and metrics unknown)."))
        return "\n".join(out) + "\n"
    command = metadata.get("command")
    out += ["<h3>Command</h3>", f'<pre class="pc-command">{esc(command) if command else "not stored"}</pre>']
    facts = {k: metadata[k] for k in ("seed", "epochs_run", "stopped_early", "train_seconds") if k in metadata}
    versions = metadata.get("versions")
    if isinstance(versions, dict):
        facts.update({f"version {k}": v for k, v in versions.items()})
    for heading, items in (("Seed and run", facts), ("Training configuration", metadata.get("train_config")),
                           ("Final metrics recorded at the end of training", metadata.get("metrics"))):
        if isinstance(items, dict) and items:
            out += [f"<h3>{heading}</h3>", kv_table(items)]
    return "\n".join(out) + "\n"


def summary_html(entry: ModelEntry, n: int, smaller: bool) -> str:
    evaluation, verdict = entry.evaluation, entry.verdict
    assert evaluation is not None and verdict is not None
    probe = evaluation.detail.probe
    facts = {
        "model": describe(entry.model),
        "source": entry.source,
        "test loss": evaluation.test_loss,
        "elimination accuracy (last step, new query)": evaluation.metrics["elimination_accuracy"],
        "recall accuracy (last step, repeated query)": evaluation.metrics["recall_accuracy"],
    }
    if probe is not None:
        facts["probe P(4) recall / P(1) trap"] = f"{probe[3]:.4f} / {probe[0]:.4f}"
    facts["study's story holds"] = {True: "yes", False: "no", None: "undecided"}[verdict.story_holds]
    facts["roles"] = ", ".join(f"{c.component} = {c.role}" for c in (*verdict.heads, *verdict.mlps))
    out = [kv_table(facts), "<h3>Sample sizes</h3>", kv_table(entry.sizes)]
    if entry.timings:
        steps = ", ".join(f"{label} {seconds:.1f} s" for label, seconds in entry.timings.items())
        out.append(html_note(f"Computed in {sum(entry.timings.values()):.1f} s ({steps})."))
    if smaller:
        out.append(html_note(
            f"The head-role verdict uses at most {ROLES_MAX_N} test sequences and the patching sweeps at most "
            f"{PATCH_MAX_N} pairs ({N_BOOT} bootstrap resamples), fewer than the n = {n} requested, so that "
            "the report takes seconds (each runs some 40 forward passes); see the sample sizes above."
            if n > min(ROLES_MAX_N, PATCH_MAX_N) else
            f"The verdict, patching and attention sections use at least {MIN_SECTION_N} sequences "
            "(they need both the new and the repeated last-query subgroups)."
        ))
    return "\n".join(out) + "\n"
