"""No import cycles between modules: every module-level and function-level ``import`` of
``perm_circuits`` counts (a lazy import inside a function is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "perm_circuits"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [(a.name, []) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [(base, [a.name for a in node.names])]
            else:
                continue
            for base, names in targets:
                subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in files]
                edges[module].update(subs)
                if base in files and len(subs) < len(names) or (base in files and not names):
                    edges[module].add(base)
    return {m: {t for t in ts if t != m} for m, ts in edges.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring package __init__ re-exports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    leaves = {m for m in edges if (SRC.parent / Path(*m.split("."))).with_suffix(".py").is_file()}
    return [c for c in out if len(set(c) & leaves) >= 2]


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == []  # neither is a module file here
    edges = _graph()
    edges["perm_circuits.tasks.base"].add("perm_circuits.train")  # train imports tasks.base: a cycle
    assert any({"perm_circuits.tasks.base", "perm_circuits.train"} <= set(c) for c in _cycles(edges))


def test_no_import_cycle_outside_the_analysis_package():
    """The tasks, training, evaluation and sweeps take part in no cycle (a task's model module is
    named by a string in its registry entry, never imported by the task)."""
    cycles = [c for c in _cycles(_graph()) if any(not m.startswith("perm_circuits.analysis.") for m in c)]
    assert cycles == []
