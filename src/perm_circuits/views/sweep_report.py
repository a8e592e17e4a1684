"""The sweep report: one offline HTML page summarising a sweep table across seeds.

:func:`write_sweep_report` (``perm-circuits sweep-report DIR --out PAGE.html``) takes a sweep table
(a DataFrame, or a sweep folder read with ``perm_circuits.sweep.load_sweep``) and writes one page
with the phase diagram, the epoch-to-recall spread and the roles/claims frequencies of
:mod:`perm_circuits.views.sweep_figures`, the mechanism classes and their formation when the rows carry
fingerprints (computed by :mod:`perm_circuits.census.summary`, drawn by
:mod:`perm_circuits.views.census_figures`), a summary table per configuration (:func:`sweep_summary`)
and the failed runs' errors.  plotly.js is saved once beside the page
(``plotly-<version>.min.js``, shared with any other page written into the same folder) and the page
works with no network.
"""

from __future__ import annotations

import html as _html
import os
from pathlib import Path

import pandas as pd

from perm_circuits._util import atomic_write_text
from perm_circuits.checks import check_fraction
from perm_circuits.views.html import TOPOJSON_LOCAL, Section, foreign_plotly_js, html_page, write_plotly_js
from perm_circuits.views.sweep_figures import (
    PHASE_KEYS,
    check_frame,
    config_axes,
    config_label,
    epoch_to_recall,
    phase_cells,
    phase_diagram,
    roles_frequency,
    sweep_modes,
)

__all__ = ["SWEEP_SECTIONS", "sweep_summary", "write_sweep_report"]

SWEEP_SECTIONS: tuple[str, ...] = (
    "Summary per configuration",
    "Phase diagram: who learns recall",
    "Epoch to recall",
    "Time to recall (survival across seeds)",
    "Head roles and claims across seeds",
    "Mechanism classes (census)",
    "Failed runs",
)
"""The page's section headings, in order."""

_PLOTLY_CONFIG = {"displaylogo": False, "topojsonURL": TOPOJSON_LOCAL}
_CSS = """
table.pc-table { border-collapse: collapse; font-size: 0.9em; }
table.pc-table th, table.pc-table td { border: 1px solid #dee2e6; padding: 3px 8px; text-align: right; }
table.pc-table th { background: #f1f3f5; }
pre.pc-error { background: #fff5f5; border-left: 3px solid #e03131; padding: 6px 10px; overflow-x: auto; }
"""


def sweep_summary(frame: pd.DataFrame, threshold: float = 0.99) -> pd.DataFrame:
    """One row per configuration (d_model, n_heads, dropout and other varying axes) of a sweep.

    Columns: the configuration, ``done`` / ``failed`` runs, ``learned`` (done seeds with
    ``recall_accuracy >= threshold``), ``share_learned`` (learned / done, NaN when none finished),
    ``median_epoch_recall`` (median ``epoch_recall_99`` over the seeds that reached it, NaN when
    none did) and, for every ablation mode found in the columns, ``verdict_<how>``: counts of the
    verdicts over finished seeds, e.g. ``"fails 2, holds 1"``.
    """
    check_frame(frame, ["status", "recall_accuracy", "epoch_recall_99", *PHASE_KEYS])
    cells = phase_cells(frame, threshold).rename(columns={"share": "share_learned"})  # phase_cells checks threshold
    keys = [*PHASE_KEYS, *config_axes(frame)]
    done = frame[frame["status"] == "done"]
    medians = done.groupby(keys, dropna=False)["epoch_recall_99"].median().rename("median_epoch_recall")
    summary = cells.merge(medians.reset_index(), on=keys, how="left")
    for how in sweep_modes(frame):
        column = f"verdict_{how}"
        counts = (
            done.groupby(keys, dropna=False)[column]
            .agg(lambda s: ", ".join(f"{v} {n}" for v, n in sorted(s.dropna().astype(str).value_counts().items())))
            .rename(column)
        )
        summary = summary.merge(counts.reset_index(), on=keys, how="left")
        summary[column] = summary[column].fillna("")
    return summary.sort_values(keys, na_position="last", kind="stable").reset_index(drop=True)


def _table_html(summary: pd.DataFrame) -> str:
    shown = summary.copy()
    shown["share_learned"] = [
        "" if pd.isna(s) else f"{s:.0%} ({k}/{n})" for s, k, n in zip(shown["share_learned"], shown["learned"], shown["done"])
    ]
    shown["median_epoch_recall"] = ["" if pd.isna(v) else f"{v:g}" for v in shown["median_epoch_recall"]]
    shown = shown.drop(columns="learned")
    return shown.to_html(index=False, classes="pc-table", border=0, na_rep="", escape=True)


def _errors_html(frame: pd.DataFrame) -> str:
    failed = frame[frame["status"] == "failed"]
    if failed.empty:
        return "<p>No run failed.</p>"
    others = config_axes(frame)
    out = [f"<p>{len(failed)} of {len(frame)} runs failed.</p>"]
    for _, row in failed.iterrows():
        error = row.get("error", "")
        error = "" if not isinstance(error, str) else error
        run_id = row.get("run_id", "")
        out.append(
            f"<h3>{_html.escape(config_label(row, others, dropout=True))}, seed {_html.escape(str(row['seed']))}"
            + (f" (run {_html.escape(str(run_id))})" if isinstance(run_id, str) and run_id else "")
            + f'</h3>\n<pre class="pc-error">{_html.escape(error.strip() or "no error text recorded")}</pre>'
        )
    return "\n".join(out)


def _figure_html(fig, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOTLY_CONFIG)


def _survival_html(frame: pd.DataFrame) -> str:
    """The time-to-recall figure (Kaplan-Meier share of seeds with recall by N samples), or why it is absent."""
    from perm_circuits.survival import time_to_recall  # the table's analysis; this module only draws
    from perm_circuits.views.survival_figures import time_to_recall_figure

    needed = ("epoch_recall_99", "samples", "epochs_run")
    if any(c not in frame.columns for c in needed):
        return "<p>The table lacks " + _html.escape(", ".join(needed)) + ": no time-to-recall curve.</p>"
    return _figure_html(time_to_recall_figure(time_to_recall(frame)), "pc-sweep-survival")


def _census_html(frame: pd.DataFrame) -> str:
    """The class frequencies and formation figure when the rows carry mechanism fingerprints, or why not."""
    from perm_circuits.census.summary import census_summary  # the rows' analysis; this module only draws
    from perm_circuits.views.census_figures import census_counts_html, formation_figure

    summary = census_summary(frame)
    if summary is None:
        return ("<p>The rows carry no mechanism fingerprints (the circuit columns of "
                "<code>perm_circuits.census.mechanism_fingerprint</code>): no mechanism classes.</p>")
    body = census_counts_html(summary)
    if summary.formation.empty:
        return body + "<p>The rows hold one epoch per run: no formation figure.</p>"
    return body + _figure_html(formation_figure(summary), "pc-sweep-census")


def _check_out(out: object, force: object) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a page path (str or Path), got {type(out).__name__}")
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    path = Path(out)
    if str(out) == "" or path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"out must be a page path ending in .html, got {str(out)!r}")
    if path.is_dir():
        raise ValueError(f"out {str(path)!r} is a folder; give a page path ending in .html")
    if path.exists() and not force:
        raise ValueError(f"out {str(path)!r} exists; pass force=True (--force) to overwrite it")
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"out's folder {str(path.parent)!r} exists and is not a folder")
    foreign = None if force else foreign_plotly_js(path.parent)
    if foreign is not None:
        raise ValueError(f"{str(foreign)!r} exists beside the page and perm_circuits did not write it; move it "
                         "away, or pass force=True (--force) to overwrite it")
    return path


def write_sweep_report(
    source: pd.DataFrame | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    title: str | None = None,
    threshold: float = 0.99,
) -> Path:
    """Write the sweep report page ``out`` (and ``plotly-<version>.min.js`` beside it); returns ``out``.

    Args:
        source: a sweep table (DataFrame, one row per run) or a sweep folder, read with
            ``perm_circuits.sweep.load_sweep``.
        out: the page path (``.html``); its folder is created.
        force: overwrite an existing page (otherwise refused).
        title: page title (default: "perm_circuits sweep: <folder name or N runs>").
        threshold: recall accuracy that counts as learned (the study's 0.99).

    Raises:
        ValueError: bad ``out`` (not .html, a folder, existing without ``force``), a missing
            sweep folder, a table missing required columns or with no finished run: all before
            anything is written.
        TypeError: arguments of the wrong type.
    """
    path = _check_out(out, force)
    threshold = check_fraction(threshold)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    if isinstance(source, pd.DataFrame):
        frame, origin = source, f"{len(source)} runs"
    elif isinstance(source, (str, os.PathLike)):
        folder = Path(source)
        if not folder.is_dir():
            raise ValueError(f"source {str(folder)!r} is not a sweep folder (no such folder)")
        from perm_circuits.sweep import load_sweep  # lazily: the sweep engine is optional here

        frame, origin = load_sweep(folder), folder.name or str(folder)
    else:
        raise TypeError(f"source must be a sweep DataFrame or a sweep folder path, got {type(source).__name__}")
    if "task" in frame.columns:
        tasks = sorted(set(frame["task"].dropna().astype(str)) - {"permutation"})
        if tasks:
            raise ValueError(
                f"the sweep page draws the permutation study's figures; this sweep is of task(s) {tasks}: "
                "read its rows with perm_circuits.sweep.load_sweep (one row per run, the task's metrics as columns)"
            )
    # build everything (validating the table) before writing anything
    bodies = [
        _table_html(sweep_summary(frame, threshold)),
        _figure_html(phase_diagram(frame, threshold), "pc-sweep-phase"),
        _figure_html(epoch_to_recall(frame), "pc-sweep-epochs"),
        _survival_html(frame),
        _figure_html(roles_frequency(frame), "pc-sweep-roles") if sweep_modes(frame) else
        "<p>The table has no head-role columns (role_&lt;how&gt;_&lt;component&gt;).</p>",
        _census_html(frame),
        _errors_html(frame),
    ]
    n_done, n_failed = int((frame["status"] == "done").sum()), int((frame["status"] == "failed").sum())
    intro = (
        f"<style>{_CSS}</style>\n<p>{len(frame)} runs: {n_done} finished, {n_failed} failed. A seed "
        f"<em>learns recall</em> when its final recall accuracy is at least {threshold:g}; failed runs "
        "count as no seed. Other varying axes: "
        + (_html.escape(", ".join(config_axes(frame))) or "none")
        + ".</p>"
    )
    sections = [Section("", intro), *(Section(heading, body) for heading, body in zip(SWEEP_SECTIONS, bodies))]
    path.parent.mkdir(parents=True, exist_ok=True)
    shared = write_plotly_js(path.parent, force=force).name
    page = html_page(title if title is not None else f"perm_circuits sweep: {origin}", sections, include_plotlyjs=shared)
    return atomic_write_text(path, page)
