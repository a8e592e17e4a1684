"""Test set-up: runtime shape/type checking of perm_circuits with jaxtyping + beartype.

The import hook must be installed before anything imports perm_circuits: ``pytest_configure``
installs it before any test module is collected, in every process that runs tests (a plain run,
or each xdist worker).  The xdist controller runs no test, so it skips the hook and its imports
(seconds of the suite's start).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
# Two workers share two cores: one thread each, and the same for what they start (notebook kernels,
# CLI subprocesses, pool and Ray workers), so no process oversubscribes the cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# Cache bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE): every worker,
# notebook kernel and CLI subprocess imports the package, and compiling its sources (and the type
# checker's rewritten modules) each time costs seconds per process.  __pycache__ is git-ignored.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

import ast  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


SHAPE_ANNOTATION = re.compile(r"\b(Float|Int|Bool|Shaped|Num|Real|Integer|UInt|Inexact|Complex)\[")
"""An annotation that is a jaxtyping array type."""
typechecker = None
"""The hook's checker, ``conftest.typechecker`` (beartype): named through this module so that the
instrumented bytecode cache (tagged by the checker's name) is not shared with a plain jaxtyping hook."""


def _checked_closures_only_with_shapes() -> None:
    """Let jaxtyping's import hook leave alone functions defined inside other functions (hooks,
    callbacks) unless one of their annotations is an array shape.  The hook decorates every
    ``def``; a closure is then decorated again each time its enclosing function runs (beartype
    compiles a new wrapper each time), which made compute-heavy tests about twice as slow as
    unchecked.  Every module-level function and method stays checked, and so do the closures that
    carry shapes (two in src/)."""
    from jaxtyping import _import_hook

    transformer = _import_hook.JaxtypingTransformer
    if getattr(transformer, "_perm_circuits_closures", False):
        return
    decorate = transformer.visit_FunctionDef

    def visit_FunctionDef(self, node):
        nested = any(isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) for parent in self._parents)
        annotations = [a.annotation for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                                              node.args.vararg, node.args.kwarg) if a is not None and a.annotation]
        if node.returns is not None:
            annotations.append(node.returns)
        if nested and not any(SHAPE_ANNOTATION.search(ast.unparse(a)) for a in annotations):
            self._parents.append(node)
            self.generic_visit(node)
            self._parents.pop()
            return node
        return decorate(self, node)

    transformer.visit_FunctionDef = visit_FunctionDef
    transformer._perm_circuits_closures = True


def _install_type_checks() -> None:
    """Import perm_circuits (every module the tests reach) under jaxtyping's beartype import hook."""
    global typechecker
    import beartype
    from jaxtyping import install_import_hook

    typechecker = beartype.beartype
    _checked_closures_only_with_shapes()
    with install_import_hook("perm_circuits", "conftest.typechecker"):
        import perm_circuits
        import perm_circuits.analysis  # noqa: F401
        import perm_circuits.discovery
        import perm_circuits.discovery.ground_truth  # noqa: F401
        import perm_circuits.discovery.scoring  # noqa: F401
        import perm_circuits.evaluate  # noqa: F401
        import perm_circuits.posterior  # noqa: F401
        import perm_circuits.reports  # noqa: F401
        import perm_circuits.tasks.permutation_data  # noqa: F401
        import perm_circuits.train  # noqa: F401
        import perm_circuits.views  # noqa: F401
        import perm_circuits.views.circuit_graph  # noqa: F401
        import perm_circuits.views.figures  # noqa: F401

        for name in perm_circuits.discovery.__all__:  # lazy too: load them under the hook
            getattr(perm_circuits.discovery, name)
        # The package's top-level names load on first use; load them all under the hook so every
        # module they come from is checked, as when `import perm_circuits` loaded them eagerly.
        for name in perm_circuits.__all__:
            getattr(perm_circuits, name)


# ----------------------------------------------------------------------------- scheduling
# The README's command runs two workers with --dist loadfile.  xdist would hand files out by their
# number of tests; a few slow files (notebooks, browsers, Ray) then start last and one worker idles
# while the other finishes them.  Instead the work units go out heaviest first (longest processing
# time first), weighed by tests/durations.json (regenerate with scripts/test_durations.py).
#
# A work unit is one test file, except for the files of a SHARED group: they use one per-process
# cache (a session fixture, an lru_cache) and go to one worker together, so the cached work is
# done once per run instead of once per worker that happens to get one of the files.

DURATIONS = Path(__file__).with_name("durations.json")
DEFAULT_SECONDS = 1.0
"""Weight of a test file the durations table does not list yet (a new file)."""
SHARED = {
    # test_report's session fixture `report_pages` (two models' report pages), imported by the browser test
    "report pages": ("tests/views/test_report.py", "tests/views/test_report_browser.py"),
    # perm_circuits.discovery.tracr_models.cached_tracr_model: the compiled tracr programs (seconds each),
    # and the first conversion's imports (about 5 s once per process: transformer_lens.utilities.tracr)
    "tracr programs": ("tests/discovery/test_tracr.py", "tests/discovery/test_ground_truth.py",
                       "tests/analysis/test_hypothesis_tracr.py", "tests/discovery/test_tracr_programs.py"),
}
_UNIT_OF = {path: group for group, paths in SHARED.items() for path in paths}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or its file's :data:`SHARED` group."""
    path = nodeid.split("::", 1)[0]
    return _UNIT_OF.get(path, path)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with :func:`work_unit` as the unit (other modes: xdist's own scheduler)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedCacheScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SharedCacheScheduling(config, log)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems gives
    xdist_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not xdist_controller:
        _install_type_checks()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Heaviest work unit first (its files heaviest first), each unit's tests contiguous."""
    try:
        weights = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    file_weight, unit_weight, first_seen = {}, {}, {}
    for index, item in enumerate(items):
        path = item.nodeid.split("::", 1)[0]
        if path not in file_weight:
            file_weight[path] = float(weights.get(path, DEFAULT_SECONDS))
            unit = work_unit(item.nodeid)
            unit_weight[unit] = unit_weight.get(unit, 0.0) + file_weight[path]
            first_seen.setdefault(unit, index)
            first_seen[path] = index

    def key(pair):
        index, item = pair
        path = item.nodeid.split("::", 1)[0]
        unit = work_unit(item.nodeid)
        return (-unit_weight[unit], first_seen[unit], -file_weight[path], first_seen[path], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


# ----------------------------------------------------------------------------- the project's text files

PROJECT_FOLDERS = ("src", "docs", "notebooks", "scripts", "tests")


def project_files(*skip: str, suffixes=(".py", ".md", ".ipynb")):
    """Every source, doc, notebook, script and test file of the project (and the README), sorted, but
    the files named in ``skip``: what a scan for a retired name reads (it skips itself, and
    tests/test_benchmarks.py, which names the retired spellings to look for them in benchmarks/)."""
    root = Path(__file__).resolve().parent.parent
    for folder in PROJECT_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in suffixes and path.is_file() and path.name not in skip:
                yield path
    yield root / "README.md"


@pytest.fixture(scope="session")
def task():
    from perm_circuits import TaskConfig

    return TaskConfig(repeat_ratio=0.3)


@pytest.fixture(scope="session")
def pretrained():
    """Loader for shipped models, cached per session (skips nothing: they ship with the package)."""
    from perm_circuits import load_pretrained

    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_pretrained(name)
        return cache[name]

    return get


# ----------------------------------------------------------------------------- shared expensive results
# Session-scoped: computed once per xdist worker, by whichever test file asks first.  Keep the
# files that use one of these in one file, or one folder, so --dist loadfile can share it.


@pytest.fixture(scope="session")
def d32h2_roles(pretrained):
    """``head_roles`` of the shipped d32h2 under every ablation mode (n_pair=1000, n_boot=200, no
    circuit step): the verdict the study's tests judge (tests/analysis/study/test_pretrained_roles.py)."""
    from perm_circuits.analysis import head_roles

    return head_roles(pretrained("d32h2"), n_pair=1000, n_boot=200, circuits=False)
