"""The report's comparison page (``index.html``): several models side by side.

:func:`~perm_circuits.reports.write_report` writes it when given several models; its sections
are :data:`COMPARISON_SECTIONS`.
"""

from __future__ import annotations

import html as _html
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perm_circuits.analysis.figure_results import ProbeDistribution
from perm_circuits.models import describe
from perm_circuits.views import figures as F
from perm_circuits.views.html import Section, html_page
from perm_circuits.views.model_page import ModelEntry
from perm_circuits.views.report_html import (
    REPORT_CSS,
    FigureHTML,
    cell,
    esc,
    h2_html,
    html_note,
    html_table,
    html_toc,
    status_cells,
    verdict_html,
)

COMPARISON_SECTIONS: tuple[str, ...] = (
    "Models",
    "Summary table",
    "Step accuracy",
    "Probe distribution",
    "Recall generalisation",
    "Verdicts",
    "Attention on the probe",
)
"""The ``<h2>`` headings of the comparison page, in order."""


def comparison_html(entries: Sequence[ModelEntry], plotly_js: bool | str = True) -> str:
    fig = FigureHTML("cmp")
    sections: list[Section] = [Section("", f"<style>{REPORT_CSS}</style>\n" + html_toc(COMPARISON_SECTIONS))]

    def add(html: str | Any) -> None:
        sections.append(Section("", html))

    add(h2_html("Models"))
    links = "".join(
        f'<li><a href="{_html.escape(e.page.name)}">{esc(e.name)}</a>: {esc(describe(e.model))} '
        f"({esc(e.source)})</li>" for e in entries if e.page is not None
    )
    add(f"<ul>{links}</ul>\n")

    add(h2_html("Summary table"))
    columns: dict[str, dict[str, object]] = {}
    for e in entries:
        ev, verdict, gen = e.evaluation, e.verdict, e.generalisation
        recall, probe = ev.metrics["recall_accuracy"], ev.detail.probe
        columns[e.name] = {
            "parameters": str(sum(p.numel() for p in e.model.parameters())),
            "test loss": cell(ev.test_loss),
            "elimination accuracy": f"{100 * ev.metrics['elimination_accuracy']:.2f}%",
            "recall accuracy": "–" if math.isnan(recall) else f"{100 * recall:.2f}%",
            "probe P(4) recall / P(1) trap": f"{probe[3]:.4f} / {probe[0]:.4f}" if probe else "–",
            "recall when the last query repeats x1 / x2 / ...": " / ".join(f"{100 * a:.0f}%" for a in gen.recall),
            "study's story holds": {True: "yes", False: "no", None: "undecided"}[verdict.story_holds],
            **{f"role of {item.component}": item.role for item in (*verdict.heads, *verdict.mlps)},
            **{f"claim: {claim.claim}": claim.status for claim in verdict.claims},
        }
    frame = pd.DataFrame(columns)  # rows: metrics, then roles, then claims; one column per model
    frame = frame.loc[sorted(frame.index, key=lambda row: (row.startswith("claim:"), row.startswith("role of")))]
    frame.index.name = "model"
    add(html_note("Evaluation on each model's test set; roles and claims of the head-role verdict under its decision "
              "mode (mean ablation); '–': not measured or not a claim for this architecture (1-head models are "
              "judged on the study's d16h1 claims, multi-head models on the d32h2 ones).")
        + status_cells(html_table(frame.fillna("–"), wide=True)))

    add(h2_html("Step accuracy"))
    evaluations = [e.evaluation for e in entries]
    if len({len(ev.detail.steps) for ev in evaluations}) == 1:
        add(fig(F.step_accuracy(*evaluations)))
    else:
        for ev in evaluations:
            add(fig(F.step_accuracy(ev)))

    add(h2_html("Probe distribution"))
    probes = {name: probs for e in entries if e.probe is not None for name, probs in e.probe.probs.items()}
    if probes:
        add(fig(F.probe_distribution(ProbeDistribution(probes))))
    else:
        add(html_note("No model has V = 5, for which the study's probe is defined."))

    add(h2_html("Recall generalisation"))
    recall = pd.DataFrame(
        {e.name: {**{f"x{k}": f"{100 * a:.1f}%" for k, a in enumerate(e.generalisation.recall, start=1)},
                  "new query (elimination)": f"{100 * e.generalisation.elimination:.1f}%"} for e in entries}
    ).T
    add(html_note("Last-step accuracy when the last query repeats x_k (training repeats only x1).") + html_table(recall))

    add(h2_html("Verdicts"))
    cells = "".join(
        f'<div><h3><a href="{_html.escape(e.page.name)}">{esc(e.name)}</a></h3>\n{verdict_html(e.verdict.summary())}</div>'
        for e in entries
    )
    add(f'<div class="pc-grid">{cells}</div>\n')

    add(h2_html("Attention on the probe"))
    for e in entries:
        for title, view in e.probe_views:
            add(f"<h3>{esc(e.name)}: {esc(title)}</h3>")
            add(view)
    names = ", ".join(e.name for e in entries)
    return html_page(f"perm_circuits report: {names} compared", sections, include_plotlyjs=plotly_js)
