"""The scripts in ``benchmarks/`` keep working against the current API.

Nothing else runs them, so a refactor that renames or removes a public name (``Batch`` ->
``TaskBatch``, ``batch.inputs`` -> ``.tokens``, ``task_config=`` -> ``task=``) used to leave them
broken unnoticed.  Three checks, cheap enough for the suite:

* every script compiles and imports (as a module, so its ``main()`` does not run): a name
  removed from ``perm_circuits`` fails here;
* no script spells the removed API (an ``ast`` scan: attribute ``.inputs``, keyword
  ``task_config=``, ``TaskEvaluation``, ``TaskAblation*``, ``as_batch``, a call ``Batch(...)``);
* the cheapest scripts run end to end in-process with tiny arguments and print finite, positive
  timings.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
REMOVED_NAMES = {"TaskEvaluation": "Evaluation", "as_batch": "a TaskBatch (make_batch / task.test_set)",
                 "Batch": "TaskBatch"}


def removed_api(source: str, filename: str = "<benchmark>") -> list[str]:
    """Every use of a removed API spelling in ``source``, as ``"file:line: what (use instead)"``."""
    problems = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr == "inputs":
            problems.append(f"{where}: .inputs on a batch (TaskBatch has .tokens)")
        if isinstance(node, ast.keyword) and node.arg == "task_config":
            problems.append(f"{where}: task_config= passed to a call (task= everywhere now)")
        names = []
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.alias):
            names.append(node.name.rsplit(".", 1)[-1])
        for name in names:
            if name.startswith("TaskAblation"):
                problems.append(f"{where}: {name} (one AblationTable of AblationRows now)")
            elif name in REMOVED_NAMES and (name != "Batch" or isinstance(node, ast.alias)):
                problems.append(f"{where}: {name} (use {REMOVED_NAMES[name]})")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called == "Batch":
                problems.append(f"{where}: Batch(...) (use TaskBatch)")
    return sorted(problems, key=lambda problem: int(problem.split(":")[1]) if problem.split(":")[1].isdigit() else 0)


def _import(path: Path):
    """``path`` imported as a module (``__name__`` is not ``"__main__"``, so ``main()`` does not run)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_folder_has_the_scripts():
    assert len(SCRIPTS) >= 14, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_imports_and_has_a_main(path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # a script may put benchmarks/ on sys.path
    module = _import(path)
    assert callable(getattr(module, "main", None)), f"benchmarks/{path.name} has no main()"
    assert module.__doc__ and re.search(r"target|ratio", module.__doc__), (
        f"benchmarks/{path.name}'s docstring says neither its target nor the ratio it measures")


def test_no_benchmark_uses_the_removed_api():
    problems = [p for path in SCRIPTS for p in removed_api(path.read_text(encoding="utf-8"), f"benchmarks/{path.name}")]
    assert not problems, "benchmarks use the removed API:\n" + "\n".join(problems)


def test_the_removed_api_check_finds_each_spelling():
    source = """
from perm_circuits.evaluate import TaskEvaluation
from perm_circuits.tasks import Batch, as_batch
x = batch.inputs
evaluate(model, task_config=task)
table: TaskAblationTable = ablation_table(model)
b = data.Batch(tokens, targets, mask)
inputs = model.task_config  # a variable called inputs and the model's task_config attribute are fine
"""
    found = removed_api(source, "x.py")
    assert [p.split(": ", 1)[1].split(" ")[0] for p in found] == [
        "TaskEvaluation", "Batch", "as_batch", ".inputs", "task_config=", "TaskAblationTable", "Batch(...)"]
    assert found[3].startswith("x.py:4:")


def _run(name: str, argv: list[str], capsys) -> str:
    capsys.readouterr()
    _import(BENCHMARKS / f"{name}.py").main(argv)
    out = capsys.readouterr().out
    assert out.strip(), f"benchmarks/{name}.py printed nothing"
    return out


@pytest.fixture
def d32h2_loaded(pretrained):
    """The shipped d32h2 loaded once per session (TransformerLens' lazy imports paid in the shared fixture)."""
    return pretrained("d32h2")


def test_load_pretrained_runs(d32h2_loaded, capsys):
    out = _run("load_pretrained", ["d32h2"], capsys)
    milliseconds = re.search(r"load_pretrained\('d32h2'\): (\d+) ms", out)
    assert milliseconds, out
    assert 0 <= int(milliseconds.group(1)) < 60_000


def test_causal_scrub_runs(d32h2_loaded, capsys):
    out = _run("causal_scrub", ["1", "60"], capsys)
    line = re.search(r"causal_scrub (\S+) s \(target < 10 s\) = (\S+) forwards; recovery (\S+) \[(\S+), (\S+)\], "
                     r"(\d+) tree forwards", out)
    assert line, out
    seconds, forwards, recovery, low, high, trees = map(float, line.groups())
    assert all(math.isfinite(v) for v in (seconds, forwards, recovery, low, high))
    assert seconds > 0 and forwards > 0 and trees > 0
    assert low <= recovery <= high


def test_induction_scores_runs(capsys):
    out = _run("induction_scores", ["1", "60"], capsys)
    line = re.search(r"n=60: (\S+) s \(target < 10 s\); 15 plain-PyTorch forwards: (\S+) s; ratio (\S+)", out)
    assert line, out
    assert all(math.isfinite(v) and v > 0 for v in map(float, line.groups()))
