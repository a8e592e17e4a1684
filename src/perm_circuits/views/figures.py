"""Plotly figures for the study's plots ("Can a Tiny Transformer Learn to Remember?"), offline.

Re-exports every figure of :mod:`~perm_circuits.views.attention_figures`,
:mod:`~perm_circuits.views.evaluation_figures`, :mod:`~perm_circuits.views.table_figures` and
:mod:`~perm_circuits.views.training_figures` with the house colors of
:mod:`~perm_circuits.views.figure_style`, and holds :func:`write_html` (plotly.js inlined: no CDN).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import plotly.graph_objects as go

from perm_circuits._util import atomic_write_text
from perm_circuits.views.attention_figures import attention_heatmaps, sequence_attention
from perm_circuits.views.evaluation_figures import STUDY_SEQUENCE, probe_distribution, step_accuracy, walkthrough
from perm_circuits.views.figure_style import (
    BAYES_COLOR,
    BAYES_TRAIN_COLOR,
    ELIMINATION_COLOR,
    MODEL_COLOR,
    MODEL_PALETTE,
    NEUTRAL_COLORS,
    RECALL_COLOR,
    Tabular,
    position_labels,
)
from perm_circuits.views.html import TOPOJSON_LOCAL, html_page, offline_plotly, write_plotly_js
from perm_circuits.views.table_figures import FFN_COLUMNS, ablation_heatmap, ffn_table, heatmap, patching_heatmap
from perm_circuits.views.training_figures import DEFAULT_CURVES, probe_curves, training_curves

__all__ = [
    "BAYES_COLOR",
    "BAYES_TRAIN_COLOR",
    "DEFAULT_CURVES",
    "ELIMINATION_COLOR",
    "FFN_COLUMNS",
    "MODEL_COLOR",
    "MODEL_PALETTE",
    "NEUTRAL_COLORS",
    "RECALL_COLOR",
    "STUDY_SEQUENCE",
    "Tabular",
    "ablation_heatmap",
    "attention_heatmaps",
    "ffn_table",
    "heatmap",
    "patching_heatmap",
    "position_labels",
    "probe_curves",
    "probe_distribution",
    "sequence_attention",
    "step_accuracy",
    "training_curves",
    "walkthrough",
    "write_html",
]


def write_html(fig: go.Figure, path: str | os.PathLike, *, plotly_js: str = "inline") -> Path:
    """Write ``fig`` as a full HTML page that works offline (written atomically, built by
    :func:`~perm_circuits.views.html.html_page`, titled by the figure's title); returns the path.

    ``plotly_js="inline"`` (the default: one standalone file you can mail or move) inlines plotly.js
    (``include_plotlyjs=True``, never ``"cdn"``) and the page has no ``<script src=...>``.
    ``plotly_js="beside"`` saves plotly.js once into the page's folder
    (``plotly-<version>.min.js``, :func:`perm_circuits.views.html.write_plotly_js`, kept if already
    there) and loads it by a relative ``<script src>``: use it when writing several pages into one
    folder, so they share one 3.5 MB copy.  Either way the CDN addresses inside plotly.js (the
    default ``topojsonURL``, used only by geo traces, which these figures never draw) point at a
    local folder so nothing refers to plotly's CDN.
    """
    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or path, got {type(path).__name__}")
    if plotly_js not in ("inline", "beside"):
        raise ValueError(f"plotly_js must be 'inline' or 'beside', got {plotly_js!r}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a directory; give a file name ending in .html")
    if not path.parent.is_dir():
        raise ValueError(f"folder {str(path.parent)!r} does not exist")
    include: bool | str = True if plotly_js == "inline" else write_plotly_js(path.parent).name
    div = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False,
                                                                      "topojsonURL": TOPOJSON_LOCAL})
    title = fig.layout.title.text or path.stem  # the figure draws its own title: no page heading
    page = html_page(re.sub(r"<[^>]+>", " ", title), [div], include_plotlyjs=include, heading=False,
                     css="body { margin: 0; }")
    return atomic_write_text(path, offline_plotly(page))
