"""Notebook outputs that a static documentation site can show offline.

``scripts/build_notebooks.py`` executes the notebooks with :func:`use_site_display` on, so their
committed outputs render on the docs site (mkdocs-jupyter) with no internet and no library inlined
per notebook: a plotly figure is stored as the plotly mimetype (JupyterLab and VS Code draw it) plus
an HTML ``<div>`` with **no** plotly.js; a circuitsvis view as its ``<div>`` and mount script only
(the site loads plotly.js and the circuitsvis bundle once per page).  Element ids count up from 1 in
each kernel, so a notebook executed twice stores the same HTML.
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
    """Store plotly figures and circuitsvis views in the current IPython kernel as the docs site shows
    them (:class:`SitePlotlyRenderer` as plotly's default renderer, an HTML formatter for
    :class:`~perm_circuits.views.circuits.OfflineView` without the bundle); RuntimeError outside a kernel.
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
