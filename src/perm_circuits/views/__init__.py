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
