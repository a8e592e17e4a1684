"""Offline circuitsvis views and self-contained HTML pages."""

from perm_circuits.views.circuits import (
    OfflineView,
    attention_view,
    colored_tokens_view,
    neuron_activations_view,
    token_labels,
)
from perm_circuits.views.html import (
    Section,
    html_page,
    local_script_refs,
    plotly_js_file_name,
    plotly_js_inline,
    remote_resource_refs,
    write_plotly_js,
)

__all__ = [
    "OfflineView",
    "Section",
    "attention_view",
    "colored_tokens_view",
    "html_page",
    "local_script_refs",
    "neuron_activations_view",
    "plotly_js_file_name",
    "plotly_js_inline",
    "remote_resource_refs",
    "token_labels",
    "write_plotly_js",
]

# --- imported lazily (they pull in the analyses and plotly): name -> module of perm_circuits.views
_LAZY = {
    "phase_diagram": "sweep_figures",
    "epoch_to_recall": "sweep_figures",
    "roles_frequency": "sweep_figures",
    "sweep_summary": "sweep_report",
    "write_sweep_report": "sweep_report",
    "render_task_report": "task_page",  # the "task model" page of computed analysis.report_data.TaskReportData
}
__all__ += list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"perm_circuits.views.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
