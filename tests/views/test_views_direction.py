"""Views render computed results; they never run a model (docs/dev/architecture.md, "Where new code goes").

Read from the source with :mod:`ast` (nothing imported for the rule itself):

- a module of ``perm_circuits/views/`` imports nothing from the packages that run models (the
  analyses, discovery, evaluation, training, models, hooks, sweeps, ...), anywhere in the file,
  except the names of :data:`ALLOWED`: result types, constants and readers of a model's
  description or of a stored table, none of which runs a forward pass;
- no view calls a forward: ``run_with_cache``, ``run_with_hooks``, ``.forward``, ``model(...)``,
  ``run_capture``, ``run_logits``, ``device_forward``, ``task_logits``, ``evaluate``, ``head_roles``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "perm_circuits"
VIEWS = sorted((SRC / "views").glob("*.py"))

RUNNERS = ("analysis", "discovery", "evaluate", "train", "models", "hooks", "stacked", "tasks.runner", "devices",
           "handbuilt", "dynamics", "systems", "sweep", "reproduce", "reports", "cli", "survival")
"""Packages and modules (under ``perm_circuits.``) whose functions run models or drive those that do."""

ALLOWED: dict[str, frozenset[str] | None] = {
    "perm_circuits.analysis.figure_results": None,  # results only: every name
    "perm_circuits.analysis.report_data": frozenset({"StudyReportData", "TaskReportData"}),
    "perm_circuits.analysis.interventions.ablation_table": frozenset({"AblationTable"}),
    "perm_circuits.evaluate": frozenset({"Evaluation", "PermutationDetail", "RecallGeneralisation"}),
    "perm_circuits.train": frozenset({"TrainingHistory"}),
    "perm_circuits.models": frozenset({"describe", "model_config_of"}),  # read the config, run nothing
    "perm_circuits.discovery.graph": frozenset({"graph_edges", "sender_nodes"}),  # edge names
    "perm_circuits.dynamics.record": frozenset({"DynamicsRecord"}),
    "perm_circuits.dynamics.emergence": frozenset({"check_record", "check_signals", "normalised", "which_first"}),
    "perm_circuits.sweep": frozenset({"load_sweep"}),  # reads a sweep folder's table
    "perm_circuits.survival": frozenset({"time_to_recall"}),  # a function of that table
}
"""Module -> the names a view may import from it (``None``: any)."""

FORWARD_METHODS = frozenset({"run_with_cache", "run_with_hooks", "forward"})
FORWARD_FUNCTIONS = frozenset({"model", "run_capture", "run_logits", "device_forward", "task_logits", "evaluate",
                               "head_roles"})


def _runner(module: str) -> bool:
    return any(module == f"perm_circuits.{r}" or module.startswith(f"perm_circuits.{r}.") for r in RUNNERS)


def _imports(tree: ast.Module, path: Path):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = "perm_circuits.views" if node.level == 1 else "perm_circuits"
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []


def violations(path: Path) -> list[str]:
    """Each forbidden import or forward call in one view module, ``file:line: what``."""
    tree = ast.parse(path.read_text())
    found = []
    for line, module, names in _imports(tree, path):
        if not _runner(module):
            continue
        allowed = ALLOWED.get(module, frozenset())
        bad = names or [module] if allowed is not None else []
        bad = [name for name in bad if allowed is not None and name not in allowed]
        if bad or (not names and allowed is not None):
            found.append(f"{path.name}:{line}: imports {', '.join(bad) or module} from {module}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORWARD_METHODS:
                found.append(f"{path.name}:{node.lineno}: calls .{func.attr}(...)")
            elif isinstance(func, ast.Name) and func.id in FORWARD_FUNCTIONS:
                found.append(f"{path.name}:{node.lineno}: calls {func.id}(...)")
    return found


@pytest.mark.parametrize("path", VIEWS, ids=lambda p: p.name)
def test_views_import_no_runner_and_call_no_forward(path):
    assert violations(path) == []


def test_the_check_catches_a_runner_import_and_a_forward(tmp_path):
    bad = tmp_path / "bad_view.py"
    bad.write_text(
        "from perm_circuits.evaluate import Evaluation, evaluate\n"
        "from perm_circuits.hooks import run_logits\n"
        "import perm_circuits.analysis\n"
        "from .figure_style import house_style\n"
        "def draw(model, tokens):\n"
        "    from perm_circuits.analysis.report_data import task_report_data\n"
        "    logits, cache = model.run_with_cache(tokens)\n"
        "    return model(tokens), run_logits(model, tokens)\n"
    )
    assert violations(bad) == [
        "bad_view.py:1: imports evaluate from perm_circuits.evaluate",
        "bad_view.py:2: imports run_logits from perm_circuits.hooks",
        "bad_view.py:3: imports perm_circuits.analysis from perm_circuits.analysis",
        "bad_view.py:6: imports task_report_data from perm_circuits.analysis.report_data",
        "bad_view.py:7: calls .run_with_cache(...)",
        "bad_view.py:8: calls model(...)",
        "bad_view.py:8: calls run_logits(...)",
    ]


def test_figures_refuse_a_model_and_name_the_analysis_that_computes_their_data():
    import inspect

    from perm_circuits import build_model
    from perm_circuits.views import figures as F

    model = build_model("d16h1")
    for figure, analysis in ((F.attention_heatmaps, "mean_attention"), (F.sequence_attention,
                             "sequence_attention_patterns"), (F.walkthrough, "walkthrough_distributions"),
                             (F.probe_distribution, "probe_distributions")):
        with pytest.raises(TypeError, match=rf"data must be a \w+ \(computed by analysis\.figure_data\.{analysis}\(.*"
                                            r"got TransformerBridge"):
            inspect.unwrap(figure)(model)  # as a user calls it, without the suite's runtime type checker
