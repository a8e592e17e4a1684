"""Notebook outputs that a static documentation site can show offline.

``scripts/build_notebooks.py`` executes the notebooks with :func:`use_site_display` switched on, so
their committed outputs render on the docs site (mkdocs-jupyter) with no internet and no multi-MB
library inlined into every notebook:

* a plotly figure is stored as two outputs of one display: the plotly mimetype
  (``application/vnd.plotly.v1+json``, which JupyterLab and VS Code draw with their own plotly.js)
  and an HTML ``<div>`` with a ``Plotly.newPlot`` call and **no** plotly.js (the site loads one
  local copy in each notebook page's ``<head>``);
* a circuitsvis view (:class:`~perm_circuits.views.circuits.OfflineView`) is stored as its
  container ``<div>`` and mount script only (the site loads the circuitsvis bundle the same way).

Element ids count up from 1 in each kernel, so a notebook executed twice stores the same HTML.
Without this switch (an interactive session) figures and views keep their usual, self-contained
display.
"""

from __future__ import annotations

import itertools

import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer, PlotlyRenderer

from perm_circuits.views.circuits import OfflineView

__all__ = ["SITE_RENDERER", "SitePlotlyRenderer", "use_site_display"]

SITE_RENDERER = "perm_circuits_site"
"""Name of :class:`SitePlotlyRenderer` in ``plotly.io.renderers``."""

_PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


class SitePlotlyRenderer(MimetypeRenderer):
    """A plotly renderer whose output holds the figure twice: plotly mimetype JSON and HTML without plotly.js.

    The HTML's script expects a global ``Plotly`` (loaded by the page); it never names a CDN.
    """

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def to_mimebundle(self, fig_dict: dict) -> dict:
        html = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                           div_id=f"pc-figure-{next(self._ids)}", config=_PLOTLY_CONFIG, validate=False)
        return {**PlotlyRenderer().to_mimebundle(dict(fig_dict)), "text/html": html}


def use_site_display() -> None:
    """Store plotly figures and circuitsvis views in the current IPython kernel as the docs site shows them.

    Registers :class:`SitePlotlyRenderer` as plotly's default renderer and an HTML formatter for
    :class:`~perm_circuits.views.circuits.OfflineView` that writes the mount ``<div>`` and script
    without the circuitsvis bundle.

    Raises:
        RuntimeError: not inside an IPython kernel.
    """
    try:
        from IPython import get_ipython
    except ImportError as error:  # pragma: no cover - IPython ships with ipykernel
        raise RuntimeError("use_site_display needs IPython (run it inside a notebook kernel)") from error
    shell = get_ipython()
    if shell is None:
        raise RuntimeError("use_site_display must run inside an IPython kernel (a notebook), not plain Python")
    pio.renderers[SITE_RENDERER] = SitePlotlyRenderer()
    pio.renderers.default = SITE_RENDERER
    views = itertools.count(1)
    shell.display_formatter.formatters["text/html"].for_type(
        OfflineView, lambda view: view.mount_html(f"pc-view-{next(views)}")
    )
