"""Offline circuitsvis views and self-contained HTML pages."""

import sys
import types

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
    "circuit_graph": "circuit_graph",  # the function the README names, not its module (below)
}
__all__ += list(_LAZY)


class _Views(types.ModuleType):
    """This package, keeping ``circuit_graph`` the function: importing the submodule
    ``perm_circuits.views.circuit_graph`` would otherwise bind the module over the name (the import
    system sets ``package.sub``).  The submodule stays importable (``import
    perm_circuits.views.circuit_graph``, ``from perm_circuits.views.circuit_graph import CircuitPicture``),
    as :mod:`perm_circuits._lazy` keeps ``perm_circuits.train`` the function."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FUNCTIONS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


_FUNCTIONS = frozenset({"circuit_graph"})
sys.modules[__name__].__class__ = _Views


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"perm_circuits.views.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
