"""The HTML report's pages: one self-contained, offline page per model, and a comparison page.

:func:`perm_circuits.reports.write_report` (``perm-circuits report NAME... --out DIR``) has each
model's analyses computed by :func:`perm_circuits.analysis.report_data.study_report_data`, and
:func:`model_page_html` here renders them into ``DIR/NAME.html`` (views render; they run no model):
the head-role verdict (its claims, roles under every ablation mode and the
circuit proposed per skill with its IOI numbers), the evaluation against the exact Bayesian
posteriors, the study's figures, the memory-probe (Bietti et al. 2023), MLP-flip and
direct-logit-attribution tables, circuitsvis views of one forward pass over the study's probe and
walkthrough sequences, and the training provenance (the sections of :data:`MODEL_SECTIONS`).  With
several models it also writes ``DIR/index.html`` side by side (:data:`COMPARISON_SECTIONS`).
Pages inline the circuitsvis bundle and share one plotly.js saved beside them
(:func:`perm_circuits.views.html.write_plotly_js`): they work with no network.

Sample sizes (``write_report``'s ``n``, capped for the head-role verdict and the patching
sweeps) keep the whole report a few seconds per model.  The sections are rendered by
:mod:`perm_circuits.views.model_page` and :mod:`perm_circuits.views.comparison_page` with the
helpers of :mod:`perm_circuits.views.report_html`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from perm_circuits._util import atomic_write_text
from perm_circuits.analysis.report_data import StudyReportData
from perm_circuits.models import model_config_of
from perm_circuits.views import figures as F
from perm_circuits.views.comparison_page import COMPARISON_SECTIONS
from perm_circuits.views.circuit_hero import HERO_CSS, collapsible_section, circuit_hero
from perm_circuits.views.html import Section, foreign_plotly_js, html_page, write_plotly_js
from perm_circuits.views.model_page import (
    MIN_SECTION_N,
    MODEL_SECTIONS,
    N_BOOT,
    PATCH_MAX_N,
    RECALL_MAX_N,
    ROLES_MAX_N,
    ModelEntry,
    circuits_table,
    claims_table,
    evaluation_html,
    generalisation_html,
    history_frame,
    model_views,
    modes_table,
    page_sizes,
    provenance_html,
    roles_table,
    summary_html,
)
from perm_circuits.views.report_html import (
    REPORT_CSS,
    FigureHTML,
    cell,
    esc,
    h2_html,
    html_note,
    html_table,
    html_toc,
    slug,
    verdict_html,
)

__all__ = [
    "COMPARISON_SECTIONS",
    "INDEX_PAGE",
    "MODEL_SECTIONS",
    "N_BOOT",
    "PATCH_MAX_N",
    "RECALL_MAX_N",
    "ROLES_MAX_N",
    "check_out",
    "file_stem",
    "model_page_html",
    "start_folder",
]

INDEX_PAGE = "index.html"
"""File name of the comparison page (written when several models are given)."""

MODEL_STEPS = ("evaluate", "head roles", "patching", "FFN and memory", "circuits", "figures", "views", "write")
"""The stages of one model's page (the progress bar's steps)."""
NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")


REPORT_MARKER = ".perm-circuits-report.json"
"""The file ``write_report`` leaves in its folder (the pages it wrote): such a folder may be rewritten."""


def check_out(out: object, force: object) -> Path:
    """``out`` as a folder path; a non-empty folder that no report wrote (no :data:`REPORT_MARKER`) is
    refused unless ``force``."""
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a folder path (str or Path), got {type(out).__name__}")
    path = Path(out)
    if str(path) == "":
        raise ValueError("out must be a folder path, got an empty string")
    if path.exists() and not path.is_dir():
        raise ValueError(f"out {str(path)!r} exists and is not a folder")
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    if force or not path.is_dir():
        return path
    foreign = foreign_plotly_js(path)
    if foreign is not None:
        raise ValueError(f"{str(foreign)!r} exists and perm_circuits did not write it; move it away, or pass "
                         "force=True (CLI: --force) to overwrite it")
    if (path / REPORT_MARKER).is_file() or not any(path.iterdir()):
        return path
    raise ValueError(
        f"out {str(path)!r} is a non-empty folder that perm-circuits report did not write (no {REPORT_MARKER}); "
        "choose another folder, or pass force=True (CLI: --force) to write the report into it anyway"
    )


def start_folder(out: Path, pages: list[Path], *, force: bool = False) -> str:
    """Create ``out`` with the pages' shared plotly.js, record it and ``pages`` (and the pages of earlier
    reports still there) in the marker, and return plotly.js's file name."""
    out.mkdir(parents=True, exist_ok=True)
    plotly_js = write_plotly_js(out, force=force).name
    files = {plotly_js} | {page.name for page in pages}
    try:
        previous = json.loads((out / REPORT_MARKER).read_text(encoding="utf-8")).get("files", [])
        files |= {name for name in previous if isinstance(name, str) and (out / name).is_file()}
    except (OSError, ValueError, AttributeError):
        pass
    text = json.dumps({"format": "perm_circuits.report", "files": sorted(files)}, indent=2)
    atomic_write_text(out / REPORT_MARKER, text + "\n")
    return plotly_js


def file_stem(name: str, taken: set[str]) -> str:
    stem = NAME_RE.sub("_", name).strip("._") or "model"
    candidate, k = stem, 2
    while candidate.lower() in taken:
        candidate, k = f"{stem}-{k}", k + 1
    taken.add(candidate.lower())
    return candidate


def model_page_html(entry: ModelEntry, data: StudyReportData, n: int, plotly_js: bool | str = True) -> str:
    """One model's page from its computed analyses (:func:`~perm_circuits.analysis.report_data.study_report_data`
    on ``n`` test sequences); records on ``entry`` what the comparison page shows.

    ``plotly_js``: ``html_page``'s ``include_plotlyjs`` (True inlines; a file name loads the shared copy).
    """
    model = entry.model
    config = model_config_of(model)
    task = data.task
    n_roles, n_patch, n_recall = page_sizes(n)
    fig = FigureHTML(NAME_RE.sub("-", entry.name))
    body: dict[str, list[Section]] = {title: [] for title in MODEL_SECTIONS}

    def add(title: str, html: str) -> None:
        body[title].append(Section("", html))

    test_set, evaluation, generalisation, verdict = data.test_set, data.evaluation, data.generalisation, data.verdict
    entry.evaluation, entry.generalisation, entry.verdict, entry.probe = evaluation, generalisation, verdict, data.probe
    ffn = data.ffns[0]

    entry.sizes = {
        "evaluation, MLP flips, DLA": f"{n} test sequences ({int(test_set.extras['repeated'].sum())} repeated)",
        "attention maps": f"{max(n, MIN_SECTION_N)} test sequences",
        "head-role verdict and its ablation table": f"{verdict.n_samples} test sequences ({verdict.n_repeated} repeated)",
        **({"proposed circuits (IOI criteria)": f"{verdict.circuits[0].metrics.n_samples} test sequences"}
           if verdict.circuits else {}),
        "recall patching (per head, per head x source)": f"{n_patch} clean/corrupted pairs, {N_BOOT} bootstrap resamples",
        "recall generalisation": f"{generalisation.n_per_source} sequences per repeated position",
        "FFN key-value probe": f"{ffn.n_sequences} enumerated sequences ({len(ffn.triggers)} distinct prefixes)"
                               + (f", the MLP of each of the {config.n_layers} layers" if config.n_layers > 1 else ""),
    }

    # figures
    history = history_frame(getattr(model, "metadata", None) or {})
    smaller = n_roles != n or n_patch != n
    body["Head-role verdict"] += [Section("", html) for html in (
        verdict_html(verdict.summary()),
        "<h3>Claims of the study, judged on this model</h3>\n" + claims_table(verdict),
        f"<h3>Roles of the heads and MLPs (decision mode: {esc(verdict.how)} ablation)</h3>\n" + roles_table(verdict),
        "<h3>Roles under every ablation mode (mode-dependent roles flagged)</h3>\n" + modes_table(verdict),
        "<h3>Proposed circuits (IOI criteria)</h3>\n" + circuits_table(verdict),
    )]
    add("Evaluation", evaluation_html(evaluation))
    add("Recall generalisation", generalisation_html(generalisation))
    add("Step accuracy", fig(F.step_accuracy(evaluation)))
    if data.walkthrough is not None:
        add("Walkthrough", fig(F.walkthrough(data.walkthrough)))
    if data.probe is not None:
        add("Probe distribution", fig(F.probe_distribution(data.probe)))
    else:
        add("Probe distribution", html_note(f"The study's probe is defined for V = 5; this model has V = {config.V}."))
    add("Attention patterns", fig(F.attention_heatmaps(data.attention)))
    add("Ablation", html_note(
        f"Last-step accuracies with each head / MLP ablated (zero, mean, resample, binding-free, optimal; "
        f"references: the test set), "
        f"on the verdict's {verdict.n_samples} test sequences."
    ) + fig(F.ablation_heatmap(verdict.ablation)))
    add("Activation patching", html_note(
        "Denoising recall patching (clean x5 = x1 run into the corrupted run with x5 replaced by the unused x): "
        "normalised logit difference restored, 1 = all of recall; "
        f"{n_patch} pairs, {N_BOOT} bootstrap resamples for the CIs (hover)."
    ))
    add("Activation patching", fig(F.patching_heatmap(data.head_sweep, x="activation",
        title=f"{config.name}: patching each head's whole output (hook_z)")))
    add("Activation patching", fig(F.patching_heatmap(data.source_sweep,
        title=f"{config.name}: patching one attention weight of the last query, per head x source position")))
    for probe in data.ffns:  # the MLP of every layer
        live = [row.neuron for row in probe.neurons if row.live]
        summary = probe.summary()
        add("FFN neurons as key-value memories", html_note(
            f"Geva et al. (2021) key-value view of the MLP of layer {probe.layer} (L{probe.layer}MLP): {len(live)} of "
            f"{len(probe.neurons)} neurons fire on some enumerated input; mean agreement "
            f"{cell(summary['mean_agreement'])} (chance {1 / config.V:.2f}), {int(summary['n_repeated_neurons'])} "
            "neurons fire mostly on repeated queries (tinted)."
            + (" Values are read through the unembedding directly (the neuron's direct effect on the logits); "
               "later layers can still transform them." if probe.layer < config.n_layers - 1 else "")
        ) + fig(F.ffn_table(probe, live_only=bool(live))))
    add("Memory probes", html_note(
        "Bietti et al. (2023) recall R of the associative memories stored in the weights (no forward pass): per head "
        "OV copy / suppress and QK maps, and the MLP, of every layer; chance in the last column."
        + (" In layers after the first the probes feed the token embeddings alone (the direct path), not what "
           "earlier layers write into the residual stream." if config.n_layers > 1 else "")
    ) + html_table(data.memory.to_dataframe(), index=False, digits=3))
    flip_html = "".join(
        f"<h3>Logit lens before vs after the MLP of layer {item.layer} (L{item.layer}MLP; top-1 over values)</h3>\n"
        + html_table(item.to_dataframe(), digits=3)
        for item in data.flips
    )
    add("MLP prediction flips and direct logit attribution", flip_html
        + "<h3>Direct logit attribution (mean logit difference per component and subgroup)</h3>\n"
        + html_note(f"Recall subgroup baseline: the {data.dla.recall_baseline} answer; rows sum to 'total' = 'actual'.")
        + html_table(data.dla.to_dataframe(), digits=3))
    if history is not None:
        columns = [c for c in ("train_loss", *F.DEFAULT_CURVES) if c in history.columns]
        add("Training curves", fig(F.training_curves(history, columns, title=f"{config.name}: training curves "
                                                                              f"({len(history)} epochs)")))
    else:
        add("Training curves", html_note("No per-epoch training history is stored with this model."))

    # circuitsvis views (one forward over the example sequences)
    views = model_views(data.examples)
    entry.probe_views = views[: config.n_layers]  # attention of every layer on the first example
    add("Interactive views", html_note(
        "circuitsvis views of one forward pass (inlined bundle, offline): hover a head's thumbnail to see its "
        "pattern; tokens are labelled position: role=token."
    ))
    for title, view in views:
        body["Interactive views"].append(Section("", f"<h3>{esc(title)}</h3>"))
        body["Interactive views"].append(Section("", view))
    add("Training provenance", provenance_html(entry, getattr(model, "metadata", None) or {}, task))

    add("Summary", summary_html(entry, n, smaller))
    roles = {item.component: item.role for item in (*verdict.heads, *verdict.mlps)}
    hero = circuit_hero(data.skills, data.findings, n_layers=config.n_layers, n_heads=config.n_heads, labels=roles)
    sections: list[Section] = [Section("", f"<style>{REPORT_CSS}{HERO_CSS}</style>\n" + hero + html_toc(MODEL_SECTIONS))]
    for title in MODEL_SECTIONS:
        items = body[title]
        if title in COLLAPSED and all(isinstance(item.body, str) for item in items):
            inner = "\n".join(item.body for item in items)  # long tables: one click away, first screen stays short
            sections.append(collapsible_section(title, inner, heading_id=slug(title)))
            continue
        sections.append(Section("", h2_html(title)))
        sections.extend(items)
    return html_page(f"perm_circuits report: {entry.name}", sections, include_plotlyjs=plotly_js)


COLLAPSED = frozenset({"Head-role verdict", "Evaluation", "Recall generalisation", "Memory probes",
                       "MLP prediction flips and direct logit attribution", "Training provenance"})
"""Sections of tables and long sentences, shown collapsed (``<details>``) below the opening circuits."""
