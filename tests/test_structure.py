"""The package's structure, measured from the source: import cycles, layering, file sizes, private
imports, and no machine paths or work-tracking references in tracked files.

Everything here reads files with :mod:`ast` and :mod:`re`; nothing is imported, so the checks take
well under a second.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "perm_circuits"
MAX_LINES = 600

# General tools: everything on the data path up to and including the analyses (task, models,
# training, evaluation, hooks, the interventions, circuits, attribution and probes), except the
# study's modules above.  Views, the results builder, sweeps, dynamics, the seed papers' systems,
# the CLI and the package ``__init__`` files are consumers and may import the study.
CORE_MODULES = frozenset({
    "perm_circuits._lazy",
    "perm_circuits._util",
    "perm_circuits.checks",
    "perm_circuits.evaluate",
    "perm_circuits.handbuilt",
    "perm_circuits.hooks",
    "perm_circuits.model_shape",
    "perm_circuits.models",
    "perm_circuits.posterior",
    "perm_circuits.tasks.permutation_data",
    "perm_circuits.tasks.permutation_posterior",
    "perm_circuits.tasks.runner",
    "perm_circuits.train",
})

# ----------------------------------------------------------------------------- the import graph


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
# The study's story: everything in analysis/study/.
STUDY_MODULES = frozenset(name for name in MODULES if name.startswith("perm_circuits.analysis.study."))
TREES = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, nodes) -> list[tuple[str, list[str]]]:
    """``(imported module, names)`` for each import among ``nodes``."""
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            found.append((_absolute(module, node), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def _module_level(tree: ast.Module):
    """Statements run at import time: the body, and the bodies of module-level ``if``/``try``/``with``
    (``if TYPE_CHECKING:`` blocks excluded: they never run)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If):
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                stack.extend(node.orelse)
            else:
                stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        elif isinstance(node, ast.With):
            stack.extend(node.body)


def _targets(base: str, names: list[str]) -> set[str]:
    """Modules an import loads: ``from pkg import sub`` names module ``pkg.sub``, else ``pkg``."""
    if not base.startswith("perm_circuits"):
        return set()
    subs = {f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES}
    rest = [n for n in names if f"{base}.{n}" not in MODULES]
    return subs | ({base} if (rest or not names) and base in MODULES else set())


def _with_packages(module: str, targets: set[str]) -> set[str]:
    """``targets`` and the packages whose ``__init__`` importing them runs first: importing ``pkg.sub``
    runs ``pkg/__init__.py`` unless the importer sits inside ``pkg`` (then ``pkg`` is already loading)."""
    packages = {".".join(t.split(".")[:i]) for t in targets for i in range(1, t.count(".") + 1)}
    return targets | {p for p in packages if p in MODULES and module != p and not module.startswith(p + ".")}


def import_graph(everywhere: bool) -> dict[str, set[str]]:
    """Module -> perm_circuits modules it imports: at import time only, or ``everywhere`` (functions too),
    with the package ``__init__`` files an import runs on the way."""
    graph = {}
    for module, tree in TREES.items():
        nodes = ast.walk(tree) if everywhere else _module_level(tree)
        targets = set().union(*(_targets(b, n) for b, n in _imports(module, nodes)))
        graph[module] = _with_packages(module, targets) - {module}
    return graph


def _is_init(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def cycles(graph: dict[str, set[str]], is_init=_is_init) -> list[set[str]]:
    """Strongly connected components with two or more modules other than package ``__init__`` files,
    each given by those modules (a cycle only through re-exporting ``__init__`` files is no cycle)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            leaves = {m for m in component if not is_init(m)}
            if len(leaves) >= 2:
                found.append(leaves)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


# ----------------------------------------------------------------------------- the graph itself


def test_cycle_finder_on_a_hand_built_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set(), "f": {"f"},
             "pkg": {"g"}, "g": {"pkg"}}  # g <-> its package's __init__ only: no cycle
    assert cycles(graph, is_init=lambda m: m == "pkg") == [{"a", "b", "c"}]


def test_import_graph_sees_known_edges():
    graph = import_graph(everywhere=False)
    assert "perm_circuits.models" in graph["perm_circuits.handbuilt"]
    assert "perm_circuits.checks" in graph["perm_circuits.tasks.perm_chain"]
    # the top-level package resolves its names lazily: it imports no submodule at import time
    assert graph["perm_circuits"] == {"perm_circuits._lazy"}


def test_import_graph_counts_the_package_init_an_import_runs():
    """Importing ``pkg.sub`` from outside ``pkg`` runs ``pkg/__init__`` first, so an eager ``__init__``
    can close a cycle; from inside ``pkg`` it does not (``pkg`` is already loading)."""
    data = "perm_circuits.tasks.permutation_data"
    assert _with_packages("perm_circuits.posterior", {data}) == {data, "perm_circuits.tasks"}
    assert _with_packages("perm_circuits.tasks.permutation", {data}) == {data}
    assert "perm_circuits.tasks" in import_graph(everywhere=False)["perm_circuits.evaluate"]


# ----------------------------------------------------------------------------- the contracts


def test_no_import_time_cycles():
    """No cycle among the imports that run when a module is imported."""
    found = cycles(import_graph(everywhere=False))
    assert not found, f"import-time cycles: {[sorted(c) for c in found]}"


def test_no_import_cycles():
    """No cycle at all, imports inside functions included."""
    found = cycles(import_graph(everywhere=True))
    assert not found, f"import cycles: {[sorted(c) for c in found]}"


def _is_general_tool(module: str) -> bool:
    if module in STUDY_MODULES or MODULES[module].name == "__init__.py":
        return False
    return module in CORE_MODULES or module.startswith(("perm_circuits.analysis.", "perm_circuits.tasks."))


def test_study_modules_exist():
    assert STUDY_MODULES <= set(MODULES), sorted(STUDY_MODULES - set(MODULES))
    assert CORE_MODULES <= set(MODULES), sorted(CORE_MODULES - set(MODULES))


def test_general_tools_do_not_import_the_study():
    """The study's story (roles, claims, verdict, scores, recall patching, FFN) imports the general
    tools, never the reverse (imports inside functions count too)."""
    graph = import_graph(everywhere=True)
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items() if _is_general_tool(module)
        for target in targets if target in STUDY_MODULES
    )
    assert not bad, bad


def test_no_source_file_over_600_lines():
    big = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := p.read_text().count("\n")) > MAX_LINES}
    assert not big, f"files over {MAX_LINES} lines: {big}"


def private_imports_across_packages(trees: dict[str, ast.Module]) -> list[str]:
    """``"importer imports module._name"`` for each ``_name`` imported from another module of the
    package: a helper that another module needs is public where it lives, so no module reaches
    into another's private names, not even a sibling's.  Stricter than ``structure.py``, which lets
    the modules of one top-level package share private names."""
    bad = []
    for module, tree in trees.items():
        for base, names in _imports(module, ast.walk(tree)):
            if not base.startswith("perm_circuits"):
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    bad.append(f"{module} imports {base}.{name}")
    return bad


def test_private_import_finder_on_hand_written_imports():
    trees = {
        "perm_circuits.views.page": ast.parse("from perm_circuits.analysis.interventions.ablation import _selection, ablate\n"
                                              "from perm_circuits.views.figure_style import _style"),
        "perm_circuits.cli": ast.parse("def f():\n    from perm_circuits.train import _optimizer"),
        "perm_circuits.views.report": ast.parse("from perm_circuits.views.report_html import html_table\n"
                                                "from perm_circuits.views import __all__"),
    }
    assert private_imports_across_packages(trees) == [
        "perm_circuits.views.page imports perm_circuits.analysis.interventions.ablation._selection",
        "perm_circuits.views.page imports perm_circuits.views.figure_style._style",
        "perm_circuits.cli imports perm_circuits.train._optimizer",
    ]


def test_no_private_name_imported_across_packages():
    bad = private_imports_across_packages(TREES)
    assert not bad, bad


# ----------------------------------------------------------------------------- tracked text

CHECKED = ("src", "docs", "tests", "scripts", "benchmarks", "notebooks", "README.md")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|root)/")
TRACKING = re.compile(r"\b(?:issue|item)s?\s*#?\d+|\(issue\b|\bissue\s*#", re.IGNORECASE)


def _tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "--", *CHECKED], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
        files = [ROOT / name for name in listed]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file under the folders
        files = [p for name in CHECKED for p in ([ROOT / name] if (ROOT / name).is_file() else (ROOT / name).rglob("*"))]
    return [p for p in files if p.is_file() and p.resolve() != Path(__file__).resolve()]


def test_patterns_catch_what_they_should():
    for text in ("see /work/main/src", "at /root/x", "(issue 12)", "issue 10 item 4", "Issue #3", "item 3"):
        assert MACHINE_PATH.search(text) or TRACKING.search(text), text
    for text in ("src/perm_circuits/work/x.py", "an item of the list", "the issue with zero ablation", "items"):
        assert not (MACHINE_PATH.search(text) or TRACKING.search(text)), text


def test_no_machine_paths_or_work_tracking_references():
    """Tracked sources, docs, tests, scripts, benchmarks, notebooks and the README say what the code
    does: no absolute paths of the machine they were written on, no "issue 12" / "item 3"."""
    files = _tracked_files()
    assert any(p.name == "README.md" for p in files) and len(files) > 50
    bad = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line) or TRACKING.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not bad, "\n".join(bad)


# ----------------------------------------------------------------------------- import time


def _fresh_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_perm_circuits_loads_no_heavy_dependency():
    """``import perm_circuits`` is cheap: torch, pandas, TransformerLens, plotly load on first use."""
    loaded = _fresh_python(
        "import sys, perm_circuits\n"
        "heavy = ('torch', 'pandas', 'transformer_lens', 'plotly', 'circuitsvis')\n"
        "print(sorted(m for m in heavy if m in sys.modules), sorted(m for m in sys.modules if m.startswith('perm_circuits')))"
    )
    assert loaded == "[] ['perm_circuits', 'perm_circuits._lazy']"


def test_posterior_module_imports_first():
    """The documented ``perm_circuits.posterior`` imports in a fresh process (it once closed a cycle
    through ``perm_circuits.tasks``' eager ``__init__``)."""
    assert _fresh_python("from perm_circuits.posterior import bayes_posterior; print(bayes_posterior.__module__)") == \
        "perm_circuits.tasks.permutation_posterior"


def test_lazy_names_match_eager_imports():
    """Each top-level name is the object its module defines, also after the submodule of the same
    name is imported (``perm_circuits.train`` stays the function)."""
    out = _fresh_python(
        "import perm_circuits, perm_circuits.train, perm_circuits.evaluate, perm_circuits.model_shape\n"
        "import perm_circuits.train as tr\n"
        "from perm_circuits.models import load_pretrained\n"
        "print(perm_circuits.train.__module__, perm_circuits.evaluate.__module__, perm_circuits.model_shape.__name__,\n"
        "      tr.__name__, perm_circuits.load_pretrained is load_pretrained, perm_circuits.tasks.__name__,\n"
        "      all(hasattr(perm_circuits, n) for n in perm_circuits.__all__))"
    )
    assert out == ("perm_circuits.train perm_circuits.evaluate perm_circuits.model_shape train True "
                   "perm_circuits.tasks True")
    with pytest.raises(subprocess.CalledProcessError):
        _fresh_python("import perm_circuits; perm_circuits.no_such_name")


# The tests mirror the package (tests/README.md): a test folder is the subpackage it tests
# (tests/analysis/circuits/ tests src/perm_circuits/analysis/circuits/), and a test file at the top
# of tests/ is named after the top-level module it tests (test_<module>.py or
# test_<module>_<aspect>.py, a leading underscore dropped: test_util.py tests _util.py).  What
# tests no single package or module is listed here, with why.
TESTS = ROOT / "tests"
CROSS_CUTTING_FOLDERS = {
    "data": "committed tables the tests read (no code)",
}
CROSS_CUTTING_FILES = {
    "test_benchmarks.py": "the scripts in benchmarks/ still import, run and use the current API (no package)",
    "test_device_plumbing.py": "every analysis keeps its tensors on the model's device (all packages)",
    "test_docs.py": "the documentation site builds",
    "test_entry_moves.py": "every analysis moves its batch to the model's device once (all packages)",
    "test_notebooks.py": "the notebooks' stored outputs",
    "test_pretrained.py": "the shipped checkpoints (package data, no module)",
    "test_readme.py": "the README's example",
    "test_results_docs.py": "the generated results pages and the README's results section",
    "test_scheduling.py": "the suite's own scheduling (tests/conftest.py)",
    "test_structure.py": "this file: the package's and the tests' layout",
    "test_task_argument.py": "task= is the one way to say which task (every public signature, all packages)",
    "test_type_checks.py": "the suite's run-time type checks (tests/conftest.py)",
    "test_validation_boundary.py": "checks at the public boundary only, private helpers trust their callers (many packages)",
}


def layout_problems(tests: Path, src: Path, folders=CROSS_CUTTING_FOLDERS, files=CROSS_CUTTING_FILES) -> list[str]:
    """Test folders without a subpackage and top-level test files without a module, as messages."""
    problems = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(tests)
        if relative.parts[0] in folders or "__pycache__" in relative.parts or not any(folder.rglob("*.py")):
            continue  # a cross-cutting folder, or no test code (a cache, a tool's output)
        if not (src / relative / "__init__.py").is_file():
            problems.append(f"tests/{relative.as_posix()}/ has no package src/perm_circuits/{relative.as_posix()}/")
        elif not (folder / "__init__.py").is_file():
            problems.append(f"tests/{relative.as_posix()}/ has no __init__.py (two test files of one name would clash)")
    modules = {p.stem.lstrip("_") for p in src.glob("*.py") if p.name != "__init__.py"}
    for path in sorted(tests.glob("test_*.py")):
        stem = path.stem.removeprefix("test_")
        if path.name in files:
            continue
        if not any(stem == m or stem.startswith(m + "_") for m in modules):
            problems.append(f"tests/{path.name} is named after no top-level module: move it to the folder "
                            f"of the package it tests, or name it test_<module>.py")
    return problems


def test_layout_checker_on_a_hand_built_tree(tmp_path):
    src, tests = tmp_path / "src", tmp_path / "tests"
    for package in ("", "analysis", "analysis/probes"):
        (src / package).mkdir(parents=True, exist_ok=True)
        (src / package / "__init__.py").write_text("")
    (src / "models.py").write_text("")
    (src / "_util.py").write_text("")
    (tests / ".cache" / "x").mkdir(parents=True)
    for folder in ("analysis", "analysis/probes", "analysis/flat", "data", "nopackage"):
        (tests / folder).mkdir(parents=True, exist_ok=True)
        (tests / folder / ("test_x.py" if folder == "nopackage" else "__init__.py")).write_text("")
    (tests / "analysis" / "probes" / "__init__.py").rename(tests / "analysis" / "probes" / "test_dla.py")
    for name in ("test_models.py", "test_models_io.py", "test_util.py", "test_docs.py", "test_modelsx.py"):
        (tests / name).write_text("")
    assert layout_problems(tests, src, folders={"data": ""}, files={"test_docs.py": ""}) == [
        "tests/analysis/flat/ has no package src/perm_circuits/analysis/flat/",
        "tests/analysis/probes/ has no __init__.py (two test files of one name would clash)",
        "tests/nopackage/ has no package src/perm_circuits/nopackage/",
        "tests/test_modelsx.py is named after no top-level module: move it to the folder of the package "
        "it tests, or name it test_<module>.py",
    ]


def test_tests_mirror_the_package():
    assert layout_problems(TESTS, SRC) == []
    assert all((TESTS / name).is_file() for name in CROSS_CUTTING_FILES), "a listed cross-cutting file is gone"
    assert all((TESTS / name).is_dir() for name in CROSS_CUTTING_FOLDERS), "a listed cross-cutting folder is gone"
