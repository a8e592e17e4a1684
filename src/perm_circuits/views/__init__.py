"""Offline circuitsvis views and self-contained HTML pages."""

from perm_circuits.views.circuits import (
    OfflineView,
    attention_view,
    colored_tokens_view,
    neuron_activations_view,
    token_labels,
)
from perm_circuits.views.html import Section, html_page, plotly_js_inline, remote_resource_refs

__all__ = [
    "OfflineView",
    "Section",
    "attention_view",
    "colored_tokens_view",
    "html_page",
    "neuron_activations_view",
    "plotly_js_inline",
    "remote_resource_refs",
    "token_labels",
]

# --- the HTML report (views.report); imported lazily: it pulls in the analyses and plotly
__all__ += ["write_report"]


def __getattr__(name: str):
    if name == "write_report":
        from perm_circuits.views.report import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
