"""The "task model" report: one offline HTML page for any :class:`~perm_circuits.tasks.base.Task` and model.

:func:`task_report` (the generic counterpart of :func:`~perm_circuits.views.report.write_report`,
which stays the study's permutation-lookup report) writes ``OUT/<task name>.html`` with

* the task's settings (:meth:`Task.to_dict`) and the model's size (parameters, trainable ones);
* the task's metrics on its test set, the test loss and the agreement with the task's exact
  reference where it has one (:func:`~perm_circuits.task_eval.evaluate_task`);
* a few test sequences, position by position: token, target, loss weight, the model's top token
  and its probability of the target;
* the attention pattern of every layer and head on each of those sequences (plotly heatmaps, and
  one circuitsvis view per layer for the first sequence).

Attention is read from every hook point whose name ends in ``hook_pattern`` (``[batch, head, q,
k]``, or ``[batch, q, k]`` for one head), so a TransformerLens bridge and a ``HookedRootModule``
with ``HookPoint``\\ s both work; a model without such hook points gets a note instead.  Token
labels come from the task's optional ``token_labels(tokens) -> list[str]`` method, else
``"pos: token"``.  The page loads plotly.js from a copy saved beside it and inlines the
circuitsvis bundle: it renders with no network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from perm_circuits._util import atomic_write_text
from perm_circuits.task_eval import TaskEvaluation, _check_fit, evaluate_task, task_logits
from perm_circuits.tasks.base import Task, TaskBatch
from perm_circuits.views.attention_figures import _attention_layout, _attention_trace
from perm_circuits.views.circuits import OfflineView, attention_view
from perm_circuits.views.figure_style import _style
from perm_circuits.views.html import Section, html_page, write_plotly_js
from perm_circuits.views.report import _check_out, _check_overwrite, _write_marker
from perm_circuits.views.report_html import _CSS, _Figures, _kv_table, _note, _table

__all__ = ["attention_patterns", "task_report"]

_LAYER_RE = re.compile(r"blocks\.(\d+)\.")


def _pattern_hooks(model: Any) -> list[str]:
    """The model's attention-pattern hook points, in layer order (one per module)."""
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(hook_dict, dict):
        return []
    names, seen = [], set()
    for name, point in hook_dict.items():
        if name.endswith("hook_pattern") and id(point) not in seen:
            seen.add(id(point))
            names.append(name)
    layer = {name: int(m.group(1)) if (m := _LAYER_RE.search(name)) else index for index, name in enumerate(names)}
    return sorted(names, key=lambda name: layer[name])


def attention_patterns(
    model: Any, tokens: Tensor, forward: Callable[[Any, Tensor], Tensor] | None = None
) -> dict[str, Tensor]:
    """``{hook name: pattern [batch, head, q, k]}`` of every ``*hook_pattern`` hook point, one forward pass.

    Works for any model with TransformerLens hook points (a bridge, a ``HookedRootModule``); the
    capturing hooks are removed afterwards, always.  Empty when the model has no such hook point.
    """
    names = _pattern_hooks(model)
    if not names:
        return {}
    store: dict[str, Tensor] = {}

    def make(name: str) -> Callable:
        def capture(pattern: Tensor, hook: Any) -> None:
            store[name] = pattern.detach().float().cpu()

        return capture

    with model.hooks(fwd_hooks=[(name, make(name)) for name in names]):
        task_logits(model, tokens, forward)
    out = {}
    for name in names:
        if name not in store:
            raise RuntimeError(f"attention hook point {name!r} did not run in the forward pass")
        pattern = store[name]
        out[name] = pattern[:, None] if pattern.ndim == 3 else pattern
    return out


def _labels(task: Task, tokens: list[int]) -> list[str]:
    custom = getattr(task, "token_labels", None)
    if callable(custom):
        labels = list(custom(tokens))
        if len(labels) == len(tokens) and all(isinstance(label, str) for label in labels):
            return [f"{pos}: {label}" if not label.startswith(f"{pos}:") else label for pos, label in enumerate(labels)]
    return [f"{pos}: {tok}" for pos, tok in enumerate(tokens)]


def _sequence_table(logits: Tensor, batch: TaskBatch, row: int) -> pd.DataFrame:
    probs = logits[row].softmax(dim=-1)
    targets = batch.targets[row]
    return pd.DataFrame({
        "token": batch.tokens[row].tolist(),
        "target": targets.tolist(),
        "loss weight": batch.mask[row].tolist(),
        "model's top token": probs.argmax(dim=-1).tolist(),
        "P(target)": probs.gather(1, targets[:, None])[:, 0].tolist(),
    }).rename_axis("position")


def _attention_figure(patterns: dict[str, Tensor], row: int, labels: list[str], title: str):
    layers = list(patterns)
    n_heads = max(p.shape[1] for p in patterns.values())
    names = [f"L{index}H{head}" for index in range(len(layers)) for head in range(n_heads)]
    fig = make_subplots(rows=len(layers), cols=n_heads, subplot_titles=names,
                        horizontal_spacing=0.12, vertical_spacing=max(0.18 / len(layers), 0.04))
    for index, layer in enumerate(layers):
        for head in range(patterns[layer].shape[1]):
            trace = _attention_trace(patterns[layer][row, head], labels, f"L{index}H{head}",
                                     cell_text=len(labels) <= 12)
            fig.add_trace(trace, row=index + 1, col=head + 1)
    _attention_layout(fig, len(layers), n_heads)
    return _style(fig, title, height=150 + 420 * len(layers), width=max(620, 520 * n_heads))


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


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
) -> Path:
    """Write the offline "task model" page ``out/<task name>.html`` (see the module docstring).

    Args:
        model: any ``tokens -> logits`` module with TransformerLens hook points.
        task: any :class:`~perm_circuits.tasks.base.Task`.
        out: output folder (created); a non-empty folder that no report wrote is refused unless
            ``force`` (as :func:`~perm_circuits.views.report.write_report`).
        n: test sequences for the metrics (``task.test_set(n, seed)``).
        n_sequences: how many of them are shown position by position with their attention.
        forward: ``forward(model, tokens) -> logits``; default ``model(tokens)``.
        title: page title; default ``"<model> on <task>"``.

    Returns:
        The page's path (``plotly-<version>.min.js`` is written beside it).
    """
    _check_fit(model, task)
    n = _check_int("n", n, 1)
    n_sequences = _check_int("n_sequences", n_sequences, 1)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    path = _check_out(out)
    _check_overwrite(path, force)

    test_set = task.test_set(n, seed)
    evaluation: TaskEvaluation = evaluate_task(model, task, test_set, forward=forward)
    title = title or f"{evaluation.model_name} on {task.name}"
    shown = test_set.subset(torch.arange(min(n_sequences, len(test_set))))
    logits = task_logits(model, shown.tokens, forward)
    patterns = attention_patterns(model, shown.tokens, forward)

    fig = _Figures(re.sub(r"[^A-Za-z0-9_-]+", "-", task.name))
    params = list(model.parameters())
    about = {
        "task": task.name,
        **{f"task.{k}": v for k, v in task.to_dict().items() if k != "task"},
        "model": f"{evaluation.model_name} ({type(model).__name__})",
        "parameters": sum(p.numel() for p in params),
        "trainable parameters": sum(p.numel() for p in params if p.requires_grad),
    }
    sections: list[Section | OfflineView | str] = [f"<style>{_CSS}</style>", Section("Task and model", _kv_table(about))]
    sections.append(Section("Metrics", _note(
        f"{evaluation.n_samples} test sequences (task.test_set(n={n}, seed={seed})); 'reference' rows compare the "
        "model with the task's exact or analytic reference over the loss positions."
    ) + _table(evaluation.to_dataframe(), digits=4)))
    for row in range(len(shown)):
        tokens = shown.tokens[row].tolist()
        labels = _labels(task, tokens)
        body = _table(_sequence_table(logits, shown, row), digits=3)
        if patterns:
            body += fig(_attention_figure(patterns, row, labels, f"{title}: attention on test sequence {row}"))
        else:
            body += _note("The model exposes no attention-pattern hook point (*hook_pattern): no attention to show.")
        sections.append(Section(f"Test sequence {row}", body))
    if patterns:
        labels = _labels(task, shown.tokens[0].tolist())
        for index, (name, pattern) in enumerate(patterns.items()):
            heads = [f"L{index}H{head}" for head in range(pattern.shape[1])]
            sections.append(attention_view(pattern[0], labels, heads, f"Layer {index} ({name}), test sequence 0"))

    path.mkdir(parents=True, exist_ok=True)
    plotly_js = write_plotly_js(path).name
    page = path / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', task.name)}.html"
    _write_marker(path, [path / plotly_js, page])
    atomic_write_text(page, html_page(title, sections, include_plotlyjs=plotly_js))
    return page
