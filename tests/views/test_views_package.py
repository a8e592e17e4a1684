"""perm_circuits.views: ``circuit_graph`` is the function the README names, whichever is imported first,
and the submodule ``perm_circuits.views.circuit_graph`` stays importable for its other names."""

from __future__ import annotations

import subprocess
import sys
import types


def test_circuit_graph_is_the_function_after_the_submodule_is_imported():
    import perm_circuits.views.circuit_graph  # noqa: F401 (tests/conftest.py imports it first, too)
    from perm_circuits.views import circuit_graph
    from perm_circuits.views.circuit_graph import CircuitPicture

    module = sys.modules["perm_circuits.views.circuit_graph"]
    assert isinstance(module, types.ModuleType) and not isinstance(circuit_graph, types.ModuleType)
    assert circuit_graph is module.circuit_graph and CircuitPicture is module.CircuitPicture
    figure = circuit_graph({"embed->L0H0.q": 1.0, "L0H0->logits": -0.5})
    assert isinstance(figure, CircuitPicture) and figure.n_edges == 2 and "<svg" in figure.svg


def test_circuit_graph_is_the_function_when_it_is_imported_first():
    code = ("import sys, types\n"
            "from perm_circuits.views import circuit_graph as first\n"
            "import perm_circuits.views.circuit_graph\n"
            "import perm_circuits.views as views\n"
            "module = sys.modules['perm_circuits.views.circuit_graph']\n"
            "assert first is views.circuit_graph is module.circuit_graph, (first, views.circuit_graph)\n"
            "assert isinstance(module, types.ModuleType) and callable(first)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
