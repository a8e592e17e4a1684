"""Every notebook in notebooks/ is stored with its outputs, and those outputs are what it computes now.

``scripts/build_notebooks.py`` executes each notebook once and stores it normalised.  Here each
notebook is executed once more, the same way (nbclient, the same setup cell, the same
normalisation) except that the notebooks share one kernel, reset before each (an empty namespace,
a fresh working folder, torch's default seed), and:

* no cell raises (the notebooks carry their own ``assert`` cells on the numbers they show);
* every fresh text output (``text/plain`` results and stdout) equals the committed one, except in
  cells tagged ``nondeterministic``, so a committed output cannot go stale;
* the committed file is normalised (sequential execution counts, no stderr, no timing, no
  absolute path) and small (plotly.js and the circuitsvis bundle are not inlined: the docs site
  loads one local copy of each).
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import nbformat
import pytest
import torch

from perm_circuits.views.html import remote_resource_refs

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BUILD = runpy.run_path(str(ROOT / "scripts" / "build_notebooks.py"))
SCRIPT_SRC = re.compile(r"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)
MAX_BYTES = 400_000
"""Largest committed notebook (the biggest, 03_dynamics, is about 220 kB; plotly.js alone is 4.8 MB)."""


def test_the_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_reproduce.ipynb", "02_dissect_recall.ipynb", "03_dynamics.ipynb",
                                           "04_general_recall.ipynb", "05_birth.ipynb", "06_forner.ipynb",
                                           "07_factual.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_executed_and_normalised(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), f"{path.name} is not executed in order"
    assert sum(1 for cell in code if cell.outputs) >= len(code) // 2, f"{path.name} is stored without outputs"
    assert BUILD["normalise"](notebook) == notebook, f"{path.name} is not normalised: run python scripts/build_notebooks.py"
    assert path.stat().st_size < MAX_BYTES
    text = path.read_text(encoding="utf-8")
    assert str(ROOT) not in text and "site-packages" not in text
    for cell in code:
        for output in cell.outputs:
            assert output.output_type != "error"
            assert not (output.output_type == "stream" and output.name == "stderr")
            html = output.get("data", {}).get("text/html", "")
            assert not remote_resource_refs(html), f"{path.name} has an output that loads from a remote host"
            assert not SCRIPT_SRC.search(html), f"{path.name} has an output that loads a script file"
            assert len(html) < 200_000  # no inlined library (plotly.js: 4.8 MB, circuitsvis: 1.3 MB)


def test_a_plotly_output_holds_no_plotly_js_and_both_formats():
    notebook = nbformat.read(ROOT / "notebooks" / "07_factual.ipynb", as_version=4)
    figures = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs
               if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 2
    for index, output in enumerate(figures, start=1):
        html = output.data["text/html"]
        assert f'id="pc-figure-{index}"' in html and "Plotly.newPlot" in html and "<script src" not in html
        assert len(html) < 50_000  # the figure's data, not the 4.8 MB library
        traces = output.data["application/vnd.plotly.v1+json"]["data"]
        assert isinstance(traces, list) and traces and all(t["type"] == "scatter" for t in traces)


@pytest.fixture(scope="module")
def kernel():
    """One kernel for every notebook of this module (each starts from an empty namespace, its own
    folder and a fresh process's torch seed: ``build_notebooks.RESET``): a kernel's start and the
    library's import cost about 7 s each time."""
    with BUILD["shared_kernel"]() as manager:
        yield manager


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
@pytest.mark.slow
def test_notebook_executes_and_its_committed_text_outputs_are_current(path, kernel):
    fresh = BUILD["execute"](path, timeout=180, kernel=kernel)  # raises CellExecutionError (with the traceback) if a cell fails
    committed = nbformat.read(path, as_version=4)
    assert [c.source for c in fresh.cells] == [c.source for c in committed.cells]
    errors = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    now, stored = BUILD["text_outputs"](fresh), BUILD["text_outputs"](committed)
    assert len(stored) >= 2, f"{path.name} has hardly any text output to compare"
    for mine, theirs in zip(now, stored):
        assert mine == theirs, f"{path.name}, code cell {mine[0]}: the committed output is stale (run python scripts/build_notebooks.py)"
    assert len(now) == len(stored)


def test_text_outputs_skip_cells_tagged_nondeterministic():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n")]),
        nbformat.v4.new_code_cell("time.time()", metadata={"tags": ["nondeterministic"]},
                                  outputs=[nbformat.v4.new_output("execute_result", data={"text/plain": "1.7e9"})]),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("execute_result", data={"text/plain": "2"}),
                                                nbformat.v4.new_output("stream", name="stderr", text="warn\n")]),
        nbformat.v4.new_code_cell("print(3); print(4)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="3\n"),
            nbformat.v4.new_output("stream", name="stderr", text="warn\n"),
            nbformat.v4.new_output("stream", name="stdout", text="4\n")]),
    ])
    assert BUILD["text_outputs"](notebook) == [(0, "stdout", "1\n"), (2, "text/plain", "2"), (3, "stdout", "3\n"),
                                               (3, "stdout", "4\n")]
    normal = BUILD["normalise"](notebook)
    assert [c.execution_count for c in normal.cells] == [1, 2, 3, 4]
    assert [o.output_type for o in normal.cells[2].outputs] == ["execute_result"]  # stderr dropped
    assert normal.cells[2].outputs[0].execution_count == 3
    # stdout chunks are merged however the kernel flushed them
    assert BUILD["text_outputs"](normal)[2:] == [(3, "stdout", "3\n4\n")]


def test_a_shared_kernel_starts_each_notebook_afresh(kernel, tmp_path):
    """What one notebook leaves behind (a name, a working folder, torch's generator state) is gone
    for the next, as in a fresh kernel."""
    first, second = tmp_path / "first.ipynb", tmp_path / "second.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, torch\nleft_behind = 1\nopen('x.txt', 'w').close()\ntorch.manual_seed(5)\nprint(os.listdir('.'))")]),
        first)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, torch\nprint('left_behind' in globals(), os.listdir('.'), torch.randint(10**6, (1,)).item())")]),
        second)
    assert BUILD["text_outputs"](BUILD["execute"](first, timeout=60, kernel=kernel)) == [(0, "stdout", "['x.txt']\n")]
    fresh = BUILD["text_outputs"](BUILD["execute"](second, timeout=60, kernel=kernel))
    value = torch.randint(10**6, (1,), generator=torch.Generator().manual_seed(67280421310721)).item()
    assert fresh == [(0, "stdout", f"False [] {value}\n")]
