"""Execute the notebooks in notebooks/ once and store them with their outputs, as the docs site shows them.

    python scripts/build_notebooks.py                    # every notebook (a few minutes on one core)
    python scripts/build_notebooks.py 03_dynamics.ipynb  # only these

Each notebook runs top to bottom in a fresh kernel (nbclient), in a temporary working folder,
with :func:`perm_circuits.views.notebook_display.use_site_display` switched on by a setup cell
that is removed afterwards (plotly figures and circuitsvis views are stored without their
multi-MB libraries; the site loads one local copy of each).  The stored notebook is then
normalised (:func:`normalise`) so that executing it again gives the same file:

* execution counts run 1, 2, 3, ... over the code cells;
* stderr streams (warnings, progress bars) and nbclient's timing metadata are dropped, and
  consecutive stdout chunks are merged (the kernel splits a stream wherever it happens to flush);
* the kernel's version details are dropped from the notebook metadata (only the language name stays);
* the repository's absolute path in any output is written as ``<repo>``.

``tests/test_notebooks.py`` executes each notebook the same way (once) and checks that its fresh
text outputs (``text/plain`` and stdout) equal the committed ones, except in cells tagged
``nondeterministic``, so committed outputs cannot go stale.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NONDETERMINISTIC = "nondeterministic"
"""Cell tag: the cell's text outputs are not compared with a fresh execution."""
SETUP = ("from perm_circuits.views.notebook_display import use_site_display\n"
         "use_site_display()")
REPO = "<repo>"
TIMEOUT = 600
"""Seconds one cell may run."""


RESET = ("import os\n"
         "os.chdir({folder!r})\n"
         "%reset -f\n"
         "import torch as _torch\n"
         "_torch.manual_seed(67280421310721)  # a fresh process's default seed\n"
         "del _torch")
"""First cell on a shared kernel: an empty namespace, the notebook's own working folder, and torch's
global generator as a fresh process has it (so a notebook runs as it would in a fresh kernel)."""


def execute(path: str | os.PathLike, *, timeout: int = TIMEOUT, kernel=None) -> nbformat.NotebookNode:
    """``path`` executed top to bottom with the site display on, then :func:`normalise`d.

    By default in a fresh kernel.  ``kernel`` (a started ``jupyter_client.KernelManager``, see
    :func:`shared_kernel`) runs it on that kernel instead, after a :data:`RESET` cell: the tests
    execute every notebook on one kernel so that each does not pay the kernel's start and the
    library's import again.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised (its traceback is in the message).
    """
    notebook = nbformat.read(path, as_version=4)
    run = copy.deepcopy(notebook)
    with tempfile.TemporaryDirectory(prefix="notebook-") as folder:
        setup = [SETUP] if kernel is None else [RESET.format(folder=folder), SETUP]
        for index, source in enumerate(setup):
            run.cells.insert(index, nbformat.v4.new_code_cell(source))
        client = NotebookClient(run, timeout=timeout, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": folder}}, km=kernel)
        try:
            client.execute()
        finally:
            if kernel is not None and client.kc is not None:
                client.kc.stop_channels()
    del run.cells[: len(setup)]
    return normalise(run)


@contextlib.contextmanager
def shared_kernel():
    """A started python3 kernel for :func:`execute`'s ``kernel``, shut down on exit."""
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    try:
        yield manager
    finally:
        manager.shutdown_kernel(now=True)


def _clean_text(text: str) -> str:
    return text.replace(str(ROOT), REPO)


def normalise(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``notebook`` with sequential execution counts, no stderr, one stdout output per run of prints,
    no timing and no absolute repository path."""
    notebook = copy.deepcopy(notebook)
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)
        count += 1
        cell.execution_count = count
        outputs = []
        for output in cell.outputs:
            if output.output_type == "stream":
                if output.name == "stderr":
                    continue
                output.text = _clean_text(output.text)
                if outputs and outputs[-1].output_type == "stream":  # the kernel splits a stream where it flushes
                    outputs[-1].text += output.text
                    continue
            elif output.output_type in ("display_data", "execute_result"):
                output.data = {mime: _clean_text(value) if isinstance(value, str) else value
                               for mime, value in output.data.items()}
                output.metadata = {}
                if output.output_type == "execute_result":
                    output.execution_count = count
            outputs.append(output)
        cell.outputs = outputs
    language = notebook.metadata.get("language_info", {}).get("name", "python")
    notebook.metadata["language_info"] = {"name": language}
    return notebook


def text_outputs(notebook: nbformat.NotebookNode) -> list[tuple[int, str, str]]:
    """The deterministic text outputs: ``(code cell index, kind, text)`` for each stdout stream and
    ``text/plain`` result, skipping cells tagged :data:`NONDETERMINISTIC`."""
    found = []
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for index, cell in enumerate(code):
        if NONDETERMINISTIC in cell.metadata.get("tags", []):
            continue
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stdout":
                found.append((index, "stdout", output.text))
            elif output.output_type in ("display_data", "execute_result") and "text/plain" in output.data:
                found.append((index, "text/plain", output.data["text/plain"]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook file names in notebooks/ (default: all)")
    args = parser.parse_args(argv)
    paths = [NOTEBOOKS / name for name in args.names] if args.names else sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p.name) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook(s) in notebooks/: {missing}")
    for path in paths:
        print(f"executing {path.name}", flush=True)
        notebook = execute(path)
        nbformat.write(notebook, path)
        print(f"  wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1e3:.0f} kB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
