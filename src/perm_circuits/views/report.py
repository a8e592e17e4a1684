"""The HTML report: one self-contained, offline page per model, and a comparison page.

:func:`write_report` (``perm-circuits report NAME... --out DIR``) has each model's analyses
computed by :func:`perm_circuits.analysis.report_data.study_report_data` and writes
``DIR/NAME.html``: the head-role verdict (its claims, roles under every ablation mode and the
circuit proposed per skill with its IOI numbers), the evaluation against the exact Bayesian
posteriors, the study's figures, the memory-probe (Bietti et al. 2023), MLP-flip and
direct-logit-attribution tables, circuitsvis views of one forward pass over the study's probe and
walkthrough sequences, and the training provenance (the sections of :data:`MODEL_SECTIONS`).  With
several models it also writes ``DIR/index.html`` side by side (:data:`COMPARISON_SECTIONS`).
Pages inline the circuitsvis bundle and share one plotly.js saved beside them
(:func:`perm_circuits.views.html.write_plotly_js`): they work with no network.

Sample sizes (:func:`write_report`'s ``n``, capped for the head-role verdict and the patching
sweeps) keep the whole report a few seconds per model.  The sections are rendered by
:mod:`perm_circuits.views.model_page` and :mod:`perm_circuits.views.comparison_page` with the
helpers of :mod:`perm_circuits.views.report_html`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from perm_circuits._util import atomic_write_text
from perm_circuits.analysis import head_roles
from perm_circuits.analysis.report_data import study_report_data
from perm_circuits.checks import check_int
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.permutation_data import make_test_set
from perm_circuits.views import figures as F
from perm_circuits.views.comparison_page import COMPARISON_SECTIONS, comparison_html
from perm_circuits.views.circuit_hero import HERO_CSS, collapsible_section, circuit_hero
from perm_circuits.views.figure_style import is_model
from perm_circuits.views.html import Section, foreign_plotly_js, html_page, write_plotly_js
from perm_circuits.views.model_page import (
    MIN_SECTION_N,
    MODEL_SECTIONS,
    N_BOOT,
    PATCH_MAX_N,
    RECALL_MAX_N,
    ROLES_MAX_N,
    STUDY_REPEAT_RATIO,
    ModelEntry,
    circuits_table,
    claims_table,
    evaluation_html,
    example_sequences,
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
    "write_report",
]

INDEX_PAGE = "index.html"
"""File name of the comparison page (written when several models are given)."""

_MODEL_STEPS = ("evaluate", "head roles", "patching", "FFN and memory", "figures", "views", "write")
NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")


REPORT_MARKER = ".perm-circuits-report.json"
"""The file :func:`write_report` leaves in its folder (the pages it wrote): such a folder may be rewritten."""


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


def _resolve(item: object, index: int, device=None) -> tuple[str, str, Any]:
    """(name, where it came from, model) of one ``models`` entry; raises before any writing."""
    from perm_circuits.models import CONFIG_FILE, list_pretrained, load_any

    if isinstance(item, (str, os.PathLike)):
        text = os.fspath(item)
        if not isinstance(text, str) or not text:
            raise ValueError(f"models[{index}] must be a pretrained name or a checkpoint folder, got {item!r}")
        model = load_any(text, device=device)  # a checkpoint folder wins over a pretrained name
        folder = Path(text)
        if text in list_pretrained() and not (folder.is_dir() and (folder / CONFIG_FILE).is_file()):
            return text, f"pretrained model {text!r} (shipped with perm_circuits)", model
        folder = folder.resolve()
        return folder.name, f"checkpoint folder {str(folder)!r}", model
    if is_model(item):
        return model_config_of(item).name, "model object passed to write_report", item
    raise TypeError(
        f"models[{index}] must be a pretrained name, a checkpoint folder or a model, got {type(item).__name__}"
    )


def _file_stem(name: str, taken: set[str]) -> str:
    stem = NAME_RE.sub("_", name).strip("._") or "model"
    candidate, k = stem, 2
    while candidate.lower() in taken:
        candidate, k = f"{stem}-{k}", k + 1
    taken.add(candidate.lower())
    return candidate


def _model_page(entry: ModelEntry, n: int, step: Any, plotly_js: bool | str = True) -> str:
    """Run every analysis of one model and assemble its page (``step(label)`` reports progress).

    ``plotly_js``: ``html_page``'s ``include_plotlyjs`` (True inlines; a file name loads the shared copy).
    """
    model = entry.model
    config = model_config_of(model)
    task = task_config_of(model)
    n_roles, n_patch, n_recall = page_sizes(n)
    fig = FigureHTML(NAME_RE.sub("-", entry.name))
    body: dict[str, list[Section]] = {title: [] for title in MODEL_SECTIONS}

    def add(title: str, html: str) -> None:
        body[title].append(Section("", html))

    # 1-4. every analysis, computed once (analysis.report_data): evaluation, head roles, patching,
    # FFN / memory probes, MLP flips, direct logit attribution
    data = study_report_data(model, n, n_roles=n_roles, n_patch=n_patch, n_recall=n_recall, n_boot=N_BOOT,
                             repeat_ratio=STUDY_REPEAT_RATIO, step=step, roles=head_roles)
    test_set, evaluation, generalisation, verdict = data.test_set, data.evaluation, data.generalisation, data.verdict
    entry.evaluation, entry.generalisation, entry.verdict = evaluation, generalisation, verdict
    ffn = data.ffns[0]

    entry.sizes = {
        "evaluation, MLP flips, DLA": f"{n} test sequences ({int(test_set.repeated.sum())} repeated)",
        "attention maps": f"{max(n, MIN_SECTION_N)} test sequences",
        "head-role verdict and its ablation table": f"{verdict.n_samples} test sequences ({verdict.n_repeated} repeated)",
        **({"proposed circuits (IOI criteria)": f"{verdict.circuits[0].metrics.n_samples} test sequences"}
           if verdict.circuits else {}),
        "recall patching (per head, per head x source)": f"{n_patch} clean/corrupted pairs, {N_BOOT} bootstrap resamples",
        "recall generalisation": f"{generalisation.n_per_source} sequences per repeated position",
        "FFN key-value probe": f"{ffn.n_sequences} enumerated sequences ({len(ffn.triggers)} distinct prefixes)"
                               + (f", the MLP of each of the {config.n_layers} layers" if config.n_layers > 1 else ""),
    }

    # 5. figures
    step("figures")
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
    if config.V == 5:
        add("Walkthrough", fig(F.walkthrough(model)))
        add("Probe distribution", fig(F.probe_distribution({entry.name: model})))
    else:
        example = example_sequences(task, test_set)
        if example:
            add("Walkthrough", fig(F.walkthrough(model, example[0][1])))
        add("Probe distribution", html_note(f"The study's probe is defined for V = 5; this model has V = {config.V}."))
    attention_set = test_set if n >= MIN_SECTION_N else make_test_set(data.analysis_task, n=MIN_SECTION_N)
    both = bool(attention_set.repeated.any()) and bool((~attention_set.repeated).any())
    add("Attention patterns", fig(F.attention_heatmaps(model, attention_set, repeated="split" if both else None)))
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

    # 6. circuitsvis views (one forward over the example sequences)
    step("views")
    views = model_views(model, task, test_set)
    entry.probe_views = views[: config.n_layers]  # attention of every layer on the first example
    add("Interactive views", html_note(
        "circuitsvis views of one forward pass (inlined bundle, offline): hover a head's thumbnail to see its "
        "pattern; tokens are labelled position: role=token."
    ))
    for title, view in views:
        body["Interactive views"].append(Section("", f"<h3>{esc(title)}</h3>"))
        body["Interactive views"].append(Section("", view))
    add("Training provenance", provenance_html(entry, getattr(model, "metadata", None) or {}, task))

    step("write")
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


def write_report(
    models: Sequence[Any] | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    n: int = 5000,
    progress: bool = True,
    force: bool = False,
    device=None,
) -> list[Path]:
    """Write one self-contained offline HTML report per model, and a comparison page for several.

    ``device`` (default the CPU) is where named models are loaded and run.

    Args:
        models: pretrained names (``"d16h1"``, ``"d32h1"``, ``"d32h2"``), checkpoint folders
            (loaded with :func:`perm_circuits.models.load_any`) or model objects; a single name is
            accepted too.
        out: output folder (created; existing pages are overwritten).  A non-empty folder is
            refused unless an earlier report wrote it (it holds :data:`REPORT_MARKER`, which
            lists the pages written there) or ``force`` is true.
        n: test sequences of the evaluation (and of the attention maps, MLP flips and DLA); the
            head-role verdict and the patching sweeps use at most :data:`ROLES_MAX_N` /
            :data:`PATCH_MAX_N` (each page says which sizes it used).
        progress: show a tqdm progress bar (on stderr) over models and sections.
        force: write into a non-empty folder that no report wrote.

    Returns:
        The written pages: ``out/NAME.html`` per model, in the given order, then
        ``out/index.html`` (the comparison) when several models are given.  The shared
        ``out/plotly-<version>.min.js`` they load is written too (not listed).

    Raises:
        ValueError: an unknown model name or missing/invalid checkpoint, no models, ``n <= 0``,
            ``out`` an existing file, or a non-empty folder no report wrote (without ``force``):
            all before anything is written.
        TypeError: arguments of the wrong type.
    """
    if check_int("n", n) <= 0:
        raise ValueError(f"n must be a positive int (test sequences), got {n}")
    out = check_out(out, force)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    if isinstance(models, (str, os.PathLike)):
        models = [models]
    if not isinstance(models, Sequence):
        raise TypeError(
            f"models must be a list of pretrained names, checkpoint folders or models, got {type(models).__name__}"
        )
    if len(models) == 0:
        raise ValueError("models is empty: give at least one pretrained name, checkpoint folder or model")
    several = len(models) > 1
    total = len(models) * (1 + len(_MODEL_STEPS)) + (1 if several else 0)
    bar = tqdm(total=total, desc="report", unit="step", disable=not progress, dynamic_ncols=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these models are tiny: one thread is fastest, and steady on a busy CPU
    try:
        entries: list[ModelEntry] = []
        taken = {INDEX_PAGE.removesuffix(".html")} if several else set()
        for index, item in enumerate(models):
            bar.set_postfix_str(f"load {item if isinstance(item, (str, os.PathLike)) else 'model'}")
            name, source, model = _resolve(item, index, device)
            entries.append(ModelEntry(name=name, source=source, model=model))
            bar.update(1)
        for entry in entries:
            entry.page = out / f"{_file_stem(entry.name, taken)}.html"
        pages = [entry.page for entry in entries] + ([out / INDEX_PAGE] if several else [])
        plotly_js = start_folder(out, pages, force=force)
        for entry in entries:
            state: dict[str, Any] = {"started": False}

            def step(label: str, entry: ModelEntry = entry, state: dict = state) -> None:
                now = time.perf_counter()
                if state["started"]:
                    entry.timings[state["label"]] = now - state["since"]
                    bar.update(1)
                state.update(started=True, label=label, since=now)
                bar.set_postfix_str(f"{entry.name}: {label}")

            entry.page.write_text(_model_page(entry, n, step, plotly_js), encoding="utf-8")
            bar.update(1)
        if several:
            bar.set_postfix_str("comparison page")
            (out / INDEX_PAGE).write_text(comparison_html(entries, plotly_js), encoding="utf-8")
            bar.update(1)
        bar.set_postfix_str("done")
        return pages
    finally:
        torch.set_num_threads(threads)
        bar.close()
