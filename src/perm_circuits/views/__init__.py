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

# --- the HTML report (views.report); imported lazily: it pulls in the analyses and plotly
__all__ += ["write_report"]
# --- sweep figures and the sweep report (views.sweep_figures, views.sweep_report); lazily too
_SWEEP_NAMES = {
    "phase_diagram": "sweep_figures",
    "epoch_to_recall": "sweep_figures",
    "roles_frequency": "sweep_figures",
    "sweep_summary": "sweep_report",
    "write_sweep_report": "sweep_report",
    "task_report": "task_report",  # the generic "task model" page (views.task_report)
    "render_task_report": "task_report",  # the same page from computed analysis.report_data.TaskReportData
}
__all__ += list(_SWEEP_NAMES)


def __getattr__(name: str):
    if name == "write_report":
        from perm_circuits.views.report import write_report

        return write_report
    if name in _SWEEP_NAMES:
        from importlib import import_module

        return getattr(import_module(f"perm_circuits.views.{_SWEEP_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
