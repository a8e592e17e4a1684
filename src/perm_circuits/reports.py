"""The report commands: compute every analysis of a model, then render its pages (views run no model).

- :func:`write_report` (``perm-circuits report NAME... --out DIR``): the permutation study's page per
  model (:func:`~perm_circuits.analysis.report_data.study_report_data`, rendered by
  :func:`~perm_circuits.views.report.model_page_html`) and, for several models, the comparison page
  (:func:`~perm_circuits.views.comparison_page.comparison_html`);
- :func:`task_report`: the page of any task's model
  (:func:`~perm_circuits.analysis.report_data.task_report_data`, rendered by
  :func:`~perm_circuits.views.task_page.render_task_report`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from perm_circuits.analysis import head_roles
from perm_circuits.analysis.interventions.core import TASK_HOWS
from perm_circuits.analysis.report_data import StudyReportData, study_report_data, task_report_data
from perm_circuits.checks import check_int
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import Task
from perm_circuits.views.comparison_page import comparison_html
from perm_circuits.views.figure_style import is_model
from perm_circuits.views.model_page import (
    MIN_SECTION_N,
    N_BOOT,
    STUDY_REPEAT_RATIO,
    ModelEntry,
    page_sizes,
)
from perm_circuits.views.report import (
    INDEX_PAGE,
    MODEL_STEPS,
    check_out,
    file_stem,
    model_page_html,
    start_folder,
)
from perm_circuits.views.task_page import check_title_page, render_task_report

__all__ = ["task_report", "write_report"]


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


def _model_data(entry: ModelEntry, n: int, step: Callable[[str], None]) -> StudyReportData:
    """Every analysis of one model's page (``step(label)`` reports progress)."""
    n_roles, n_patch, n_recall = page_sizes(n)
    return study_report_data(entry.model, n, n_roles=n_roles, n_patch=n_patch, n_recall=n_recall, n_boot=N_BOOT,
                             repeat_ratio=STUDY_REPEAT_RATIO, step=step, roles=head_roles, name=entry.name,
                             min_attention_n=MIN_SECTION_N)


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
    total = len(models) * (1 + len(MODEL_STEPS)) + (1 if several else 0)
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
            entry.page = out / f"{file_stem(entry.name, taken)}.html"
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

            data = _model_data(entry, n, step)
            step("write")
            entry.page.write_text(model_page_html(entry, data, n, plotly_js), encoding="utf-8")
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


def task_report(
    model: Any,
    task: Task,
    out: str | os.PathLike[str],
    *,
    n: int = 500,
    n_sequences: int = 3,
    seed: int = 1234,
    forward: Callable[[Any, Tensor], Tensor] | None = None,
    title: str | None = None,
    force: bool = False,
    ablation_hows: tuple[str, ...] | list[str] = TASK_HOWS,
    analyses: bool = True,
    page: str | None = None,
) -> Path:
    """:func:`~perm_circuits.analysis.report_data.task_report_data` then :func:`~perm_circuits.views.task_page.render_task_report`.

    Args:
        model: any ``tokens -> logits`` module with TransformerLens hook points.
        task: any :class:`~perm_circuits.tasks.base.Task`.
        out: output folder (created); a non-empty folder that no report wrote is refused unless
            ``force`` (as :func:`write_report`), before any work.
        n: test sequences for the metrics (``task.test_set(n, seed)``).
        n_sequences: how many of them are shown position by position with their attention.
        forward: ``forward(model, tokens) -> logits``; default ``model(tokens)``.
        title: page title; default ``"<model> on <task>"``.
        ablation_hows: ablation modes of the "Ablation" section (from ``("zero", "mean",
            "resample", "optimal")``); empty: no ablation section.  Ablation runs the model's own forward.
        analyses: the attention scores, patching, attribution and circuit sections.
        page: the page's file name stem (default the task's name): ``out/<page>.html``.

    Returns:
        The page's path (``plotly-<version>.min.js`` is written beside it).
    """
    n = check_int("n", n, 1)
    n_sequences = check_int("n_sequences", n_sequences, 1)
    check_title_page(title, page)
    check_out(out, force)
    data = task_report_data(model, task, n=n, n_sequences=n_sequences, seed=seed, forward=forward,
                            ablation_hows=ablation_hows, analyses=analyses)
    return render_task_report(data, out, title=title, force=force, page=page)
