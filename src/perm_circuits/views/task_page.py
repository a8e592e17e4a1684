"""The "task model" report: one offline HTML page for any :class:`~perm_circuits.tasks.base.Task` and model.

:func:`render_task_report` renders a :class:`~perm_circuits.analysis.report_data.TaskReportData`
(computed by :func:`~perm_circuits.analysis.report_data.task_report_data`; this module computes
nothing) into ``OUT/<task name>.html``; :func:`perm_circuits.reports.task_report` does both in one call.  The page opens
with the discovered circuit and three to five findings (:func:`~perm_circuits.views.circuit_hero.circuit_hero`);
every section below is collapsed (``<details>``): the task's settings and the model's size, then the
data's sections, the test sequences with the attention of every head (plotly heatmaps, and circuitsvis
views of the first) and the ablation as a table and a heatmap of the change in the primary metric.

Attention comes from every hook point whose name ends in ``hook_pattern``, so a TransformerLens
bridge and a ``HookedRootModule`` both work; a model without one gets a note instead.  The page
loads plotly.js from a copy saved beside it and inlines the circuitsvis bundle: it renders with no
network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from torch import Tensor

from perm_circuits._util import atomic_write_text
from perm_circuits.analysis.interventions.ablation_table import AblationTable
from perm_circuits.analysis.report_data import TaskReportData
from perm_circuits.circuit import Node
from perm_circuits.views.attention_figures import head_grid
from perm_circuits.views.circuit_hero import HERO_CSS, CollapsedViews, collapsible_section, circuit_hero
from perm_circuits.views.circuits import attention_view
from perm_circuits.views.figure_style import house_style
from perm_circuits.views.html import Section, html_page
from perm_circuits.views.report import NAME_RE, check_out, start_folder
from perm_circuits.views.report_html import REPORT_CSS, FigureHTML, html_note, html_table, kv_table

__all__ = ["check_title_page", "render_task_report", "task_ablation_figure"]


def task_ablation_figure(table: AblationTable, metric: str | None = None):
    """Heatmap: component x ablation mode, coloured by the change in ``metric`` vs the unablated model.

    ``metric`` defaults to the table's :attr:`~AblationTable.primary_metric`.
    """
    if not isinstance(table, AblationTable):
        raise TypeError(f"table must be an AblationTable, got {type(table).__name__}")
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
    return house_style(fig, f"{table.model_name} on {table.task}: change in {metric} (unablated {base:.4f})",
                  x_title="ablation", y_title="component", height=220 + 40 * len(grid.index), width=620)


def _views_section(patterns: dict[str, Tensor], labels: list[str]) -> Section:
    """One circuitsvis view per layer on test sequence 0, collapsed (a note for a non-square pattern)."""
    views, notes = [], ""
    for index, (name, pattern) in enumerate(patterns.items()):
        heads = [f"L{index}H{head}" for head in range(pattern.shape[1])]
        if pattern.shape[-2] != pattern.shape[-1]:  # e.g. a query at the last position only
            notes += html_note(f"Layer {index} ({name}): {pattern.shape[-2]} query position(s) over {pattern.shape[-1]} "
                           "keys: no circuitsvis view (it needs a square pattern); the heatmaps above show it.")
            continue
        views.append(attention_view(pattern[0], labels, heads, f"Layer {index} ({name}), test sequence 0"))
    title = "Attention views (test sequence 0)"
    if not views:
        return collapsible_section(title, notes)
    notes += html_note("circuitsvis views, one per layer: " + "; ".join(view.title for view in views) + ".")
    return Section("", CollapsedViews(title, tuple(views), notes))


def _ablation_section(data: TaskReportData, fig: FigureHTML) -> Section:
    table = data.ablation
    if table is None:
        return collapsible_section("Ablation", html_note(data.notes.get("ablation", "No ablation was computed.")))
    hows = data.ablation_hows
    body = html_note(
        f"Each head (blocks.L.attn.hook_z) and MLP (blocks.L.hook_mlp_out) ablated under {', '.join(hows)} "
        f"(Wang et al. 2022), measured on the same {data.n} test sequences; mean and resample use task.test_set({data.n}, "
        f"seed={data.seed + 1}) as the reference. 'delta' columns: change from the unablated model (row 'none')."
    )
    body += fig(task_ablation_figure(table))
    body += html_table(table.to_dataframe().set_index(["component", "how"]), digits=4, wide=True)
    return collapsible_section("Ablation", body)


def _analysis_sections(data: TaskReportData) -> list[Section]:
    """Attention scores, activation patching, direct logit attribution and the proposed circuit, as collapsed
    tables (a computed section, else the note saying why it is empty)."""
    bodies: dict[str, str] = {}
    if data.attention is not None:
        bodies["attention"] = html_note(
            "Mean attention of each query position (>= 1) to itself, to the previous position and to position 0, "
            "over the shown test sequences (Olsson et al. 2022: a previous-token head has 'previous' near 1)."
        ) + html_table(data.attention.to_dataframe().set_index("head"), digits=3)
    if data.patching is not None:
        frame = pd.DataFrame([{"component": str(Node(p.layer, p.head)),
                               "effect": p.effect, "ci_low": p.ci_low, "ci_high": p.ci_high, "clean": p.clean,
                               "corrupted": p.corrupted, "patched": p.patched} for p in data.patching])
        first = data.patching[0] if data.patching else None
        bodies["patching"] = html_note(
            "Denoising activation patching (Wang et al. 2022; Meng et al. 2022): each component's activation on a "
            "test sequence patched into the run on another test sequence (the batch shifted by one row); metric: "
            "the clean targets' mean log-probability over the loss positions. effect = (patched - corrupted) / "
            f"(clean - corrupted), 1 = the component carries everything; {first.confidence:.0%} bootstrap CIs over "
            f"{first.n} sequences." if first else "No component to patch."
        ) + html_table(frame.set_index("component"), digits=4)
    if data.attribution is not None:
        bodies["attribution"] = html_note(
            "Each component's direct push on logit(target) - mean logit at the loss positions (Elhage et al. 2021), "
            f"through the final norm frozen at its clean value; {data.attribution.n} test sequences; 'remainder' is "
            "what no component accounts for (biases)."
        ) + html_table(data.attribution.to_dataframe().set_index("component"), digits=4)
    if data.circuit is not None:
        group = data.circuit.subgroups[0]
        rows = [("circuit", ", ".join(data.circuit.circuit) or "(empty)"), ("ablation", data.circuit.how),
                ("F(model)", group.f_model), ("F(circuit)", group.f_circuit), ("faithfulness", group.faithfulness),
                ("completeness", group.completeness)]
        rows += [(f"minimality {m.node}", m.minimality) for m in group.minimality]
        frame = pd.DataFrame(rows, columns=["criterion", "value"]).set_index("criterion")
        bodies["circuit"] = html_note(
            "A circuit proposed by single-component mean ablation, grown and pruned to faithfulness error <= 0.1, "
            "and its IOI criteria (Wang et al. 2022, section 4); F: the targets' log-probability in nats above a "
            f"uniform guess, over {data.circuit.n_samples} test sequences."
        ) + html_table(frame, digits=4)
    titles = {"attention": "Attention scores", "patching": "Activation patching",
              "attribution": "Direct logit attribution", "circuit": "Circuit"}
    return [collapsible_section(title, bodies[key] if key in bodies else html_note(data.notes[key]))
            for key, title in titles.items() if key in bodies or key in data.notes]


def model_shape_of_skills(skills) -> tuple[int, int] | None:
    """(layers, heads) of the graph the discovered circuits live on, from their edge names."""
    names = [edge for result in skills.values() for edge in result.scores.index]
    layers = [int(m.group(1)) for e in names for m in re.finditer(r"L(\d+)(?:H\d+|MLP)", e)]
    heads = [int(m.group(1)) for e in names for m in re.finditer(r"L\d+H(\d+)", e)]
    if not layers or not heads:
        return None
    return max(layers) + 1, max(heads) + 1


def check_title_page(title: object, page: object) -> None:
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    if page is not None and (not isinstance(page, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", page)):
        raise ValueError(f"page must be None or a file name stem of letters, digits, '_', '.', '-', got {page!r}")


def render_task_report(
    data: TaskReportData, out: str | os.PathLike[str], *, title: str | None = None, force: bool = False,
    page: str | None = None,
) -> Path:
    """Write the offline page ``out/<page>.html`` (default ``out/<task name>.html``) of computed ``data``
    and return its path (``plotly-<version>.min.js`` is written beside it).

    ``out`` is created; a non-empty folder that no report wrote is refused unless ``force``.
    ``title`` defaults to ``"<model> on <task>"``.
    """
    if not isinstance(data, TaskReportData):
        raise TypeError(f"data must be a TaskReportData (analysis.report_data.task_report_data), got {type(data).__name__}")
    check_title_page(title, page)
    path = check_out(out, force)
    evaluation = data.evaluation
    title = title or f"{evaluation.model_name} on {data.task_name}"
    fig = FigureHTML(re.sub(r"[^A-Za-z0-9_-]+", "-", data.task_name))
    # the first screen: the discovered circuit (or a line saying there is none), then the findings
    shape = model_shape_of_skills(data.skills)
    skills, (n_layers, n_heads) = (data.skills, shape) if shape else ({}, (1, 1))
    hero = circuit_hero(skills, data.findings, n_layers=n_layers, n_heads=n_heads)
    sections: list[Section | str] = [Section("", f"<style>{REPORT_CSS}{HERO_CSS}</style>" + hero),
                                     collapsible_section("Task and model", kv_table(data.about))]
    sections.append(collapsible_section("Metrics", html_note(
        f"{evaluation.n_samples} test sequences (task.test_set(n={data.n}, seed={data.seed})); 'reference' rows compare "
        "the model with the task's exact or analytic reference over the loss positions."
    ) + html_table(evaluation.to_dataframe(), digits=4)))
    patterns = data.patterns
    for row, table in enumerate(data.sequences):
        labels = list(data.labels[row])
        body = html_table(table, digits=3)
        if patterns:
            body += fig(head_grid([pattern[row] for pattern in patterns.values()], labels,
                                  f"{title}: attention on test sequence {row}", cell_text=len(labels) <= 12,
                                  vertical_spacing=max(0.18 / len(patterns), 0.04)))
        else:
            body += html_note(data.notes.get("attention",
                "The model exposes no attention-pattern hook point (*hook_pattern): no attention to show."))
        sections.append(collapsible_section(f"Test sequence {row}", body))
    if patterns:
        sections.append(_views_section(patterns, list(data.labels[0])))
    if data.ablation_hows:
        sections.append(_ablation_section(data, fig))
    sections += _analysis_sections(data)

    stem = NAME_RE.sub("_", data.task_name if page is None else page)
    target = path / f"{stem}.html"
    plotly_js = start_folder(path, [target], force=force)
    atomic_write_text(target, html_page(title, sections, include_plotlyjs=plotly_js))
    return target
