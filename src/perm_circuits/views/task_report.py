"""The "task model" report: one offline HTML page for any :class:`~perm_circuits.tasks.base.Task` and model.

:func:`task_report` (the generic counterpart of :func:`~perm_circuits.views.report.write_report`,
which stays the study's permutation-lookup report) writes ``OUT/<task name>.html`` with

* the task's settings (:meth:`Task.to_dict`) and the model's size (parameters, trainable ones);
* the task's metrics on its test set, the test loss and the agreement with the task's exact
  reference where it has one (:func:`~perm_circuits.task_eval.evaluate_task`);
* a few test sequences, position by position: token, target, loss weight, the model's top token
  and its probability of the target;
* the attention pattern of every layer and head on each of those sequences (plotly heatmaps, and
  one circuitsvis view per layer for the first sequence);
* an "Ablation" section: every head (``blocks.L.attn.hook_z``) and MLP (``blocks.L.hook_mlp_out``)
  ablated under each of ``ablation_hows`` and the task's metrics measured
  (:func:`~perm_circuits.analysis.task_ablation.task_ablation_table`), as a table and a plotly
  heatmap of the change in the primary metric (``ablation_hows=()`` leaves it out).

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
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from perm_circuits._util import atomic_write_text
from perm_circuits.analysis.task_ablation import TASK_HOWS, TaskAblationTable, components_of, task_ablation_table
from perm_circuits.task_eval import TaskEvaluation, _check_fit, evaluate_task, task_logits
from perm_circuits.tasks.base import Task, TaskBatch
from perm_circuits.views.attention_figures import _attention_layout, _attention_trace
from perm_circuits.views.circuits import OfflineView, attention_view
from perm_circuits.views.figure_style import _style
from perm_circuits.views.html import Section, html_page, write_plotly_js
from perm_circuits.views.report import _check_out, _check_overwrite, _write_marker
from perm_circuits.views.report_html import _CSS, _Figures, _kv_table, _note, _table

__all__ = ["attention_patterns", "task_ablation_figure", "task_report"]

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


def task_ablation_figure(table: TaskAblationTable, metric: str | None = None):
    """Heatmap: component x ablation mode, coloured by the change in ``metric`` vs the unablated model.

    ``metric`` defaults to the table's :attr:`~TaskAblationTable.primary_metric`.
    """
    if not isinstance(table, TaskAblationTable):
        raise TypeError(f"table must be a TaskAblationTable, got {type(table).__name__}")
    metric = table.primary_metric if metric is None else metric
    if metric not in table.metric_names:
        raise ValueError(f"metric must be one of {table.metric_names}, got {metric!r}")
    frame = table.to_dataframe()
    frame = frame[frame["component"] != "none"]
    grid = frame.pivot(index="component", columns="how", values=f"delta_{metric}")
    grid = grid.reindex(index=list(dict.fromkeys(frame["component"])), columns=list(dict.fromkeys(frame["how"])))
    values = grid.to_numpy()
    bound = float(abs(values).max()) if values.size else 1.0
    heatmap = go.Heatmap(
        z=values, x=list(grid.columns), y=list(grid.index), colorscale="RdBu", zmid=0.0,
        zmin=-bound or -1.0, zmax=bound or 1.0, colorbar={"title": f"Δ {metric}"},
        text=[[f"{v:+.3f}" for v in row] for row in values], texttemplate="%{text}",
        hovertemplate="%{y} under %{x} ablation: Δ " + metric + " = %{z:.4f}<extra></extra>",
    )
    fig = go.Figure(heatmap)
    fig.update_yaxes(autorange="reversed")
    base = table.baseline.metrics[metric]
    return _style(fig, f"{table.model_name} on {table.task}: change in {metric} (unablated {base:.4f})",
                  x_title="ablation", y_title="component", height=220 + 40 * len(grid.index), width=620)


def _ablation_section(model: Any, task: Task, hows: tuple[str, ...], n: int, seed: int, fig: _Figures) -> Section:
    if not isinstance(getattr(model, "hook_dict", None), dict) or not components_of(model):
        return Section("Ablation", _note(
            "The model has no blocks.L.attn.hook_z or blocks.L.hook_mlp_out hook point: nothing to ablate."))
    table = task_ablation_table(model, task, hows, n=n, seed=seed, n_reference=n)
    body = _note(
        f"Each head (blocks.L.attn.hook_z) and MLP (blocks.L.hook_mlp_out) ablated under {', '.join(hows)} "
        f"(Wang et al. 2022), measured on the same {n} test sequences; mean and resample use task.test_set({n}, "
        f"seed={seed + 1}) as the reference. 'delta' columns: change from the unablated model (row 'none')."
    )
    body += fig(task_ablation_figure(table))
    body += _table(table.to_dataframe().set_index(["component", "how"]), digits=4, wide=True)
    return Section("Ablation", body)


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
    ablation_hows: tuple[str, ...] | list[str] = TASK_HOWS,
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
        ablation_hows: ablation modes of the "Ablation" section (from ``("zero", "mean",
            "resample")``); empty: no ablation section.  Ablation runs the model's own forward.

    Returns:
        The page's path (``plotly-<version>.min.js`` is written beside it).
    """
    _check_fit(model, task)
    n = _check_int("n", n, 1)
    n_sequences = _check_int("n_sequences", n_sequences, 1)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    if isinstance(ablation_hows, str) or not isinstance(ablation_hows, (tuple, list)):
        raise TypeError(f"ablation_hows must be a tuple or list of modes from {TASK_HOWS}, got {ablation_hows!r}")
    bad = [how for how in ablation_hows if how not in TASK_HOWS]
    if bad:
        raise ValueError(f"ablation_hows entries must be in {TASK_HOWS}, got {bad}")
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
            if pattern.shape[-2] != pattern.shape[-1]:  # e.g. a query at the last position only
                sections.append(Section(f"Layer {index} ({name})", _note(
                    f"{pattern.shape[-2]} query position(s) over {pattern.shape[-1]} keys: no circuitsvis view "
                    "(it needs a square pattern); the heatmaps above show it.")))
                continue
            sections.append(attention_view(pattern[0], labels, heads, f"Layer {index} ({name}), test sequence 0"))

    if ablation_hows:
        sections.append(_ablation_section(model, task, tuple(ablation_hows), n, seed, fig))

    path.mkdir(parents=True, exist_ok=True)
    plotly_js = write_plotly_js(path).name
    page = path / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', task.name)}.html"
    _write_marker(path, [path / plotly_js, page])
    atomic_write_text(page, html_page(title, sections, include_plotlyjs=plotly_js))
    return page
