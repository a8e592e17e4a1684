"""``perm-circuits reproduce NAME [--quick]``: a seed paper's headline experiment, "paper vs ours".

Each reproduction is a function ``run(quick: bool, progress: bool) -> Reproduction`` that lives with
its system (``perm_circuits.systems.<name>``); its task's registry entry names it
(``register_task(..., reproduction=(name, module, title))``), and it is imported only when asked
for.  A :class:`Reproduction` holds one :class:`Comparison` row per claim (the paper's number or
statement beside ours, and whether ours supports it), the figures, and the command for the
paper-size run that this CPU cannot afford.
"""

from __future__ import annotations

import importlib
import math
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from perm_circuits.tasks.base import task_entries

__all__ = ["OUT_KIND", "REPRODUCTIONS", "Comparison", "Reproduction", "check_out", "registered_reproductions", "reproduce"]

def registered_reproductions() -> dict[str, tuple[str, str]]:
    """``name -> (module, title)`` of every registered task's reproduction (its registry entry's
    ``reproduction``, :func:`perm_circuits.tasks.register_task`)."""
    return {entry.reproduction[0]: (entry.reproduction[1], entry.reproduction[2])
            for entry in task_entries() if entry.reproduction is not None}


REPRODUCTIONS: dict[str, tuple[str, str]] = registered_reproductions()
"""name -> (module defining ``run(quick, progress) -> Reproduction``, title): the registered tasks'
reproductions (tasks registered later are looked up when asked for)."""


@dataclass(frozen=True)
class Comparison:
    """One claim: the paper's value beside ours, and whether ours supports it (None: no verdict)."""

    claim: str
    paper: str
    ours: str
    holds: bool | None
    note: str = ""


def comparison_table(table: pd.DataFrame) -> list[str]:
    """The "paper vs ours" rows of ``table`` (:meth:`Reproduction.to_dataframe`, or its CSV read back) as
    Markdown table lines: ``holds`` as ``yes`` / ``**no**`` / ``-`` (no verdict), ``|`` escaped, NaN as ``-``."""
    mark = {"True": "yes", "False": "**no**"}  # a bool, or its text read back from a CSV

    def cell(value: object) -> str:
        return "-" if isinstance(value, float) and math.isnan(value) else str(value).replace("|", "\\|")

    rows = [f"| {cell(r.claim)} | {cell(r.paper)} | {cell(r.ours)} | {mark.get(str(r.holds), '-')} |"
            for r in table.itertuples(index=False)]
    return ["| claim | paper | ours | holds |", "|---|---|---|---|", *rows]


@dataclass(frozen=True)
class Reproduction:
    """A reproduction's outcome: the comparison rows, figures, measured numbers and commands."""

    name: str
    title: str
    quick: bool
    rows: tuple[Comparison, ...]
    numbers: Mapping[str, Any] = field(default_factory=dict)
    figures: Mapping[str, Any] = field(default_factory=dict)  # name -> plotly Figure
    full_command: str = ""
    seconds: float = 0.0

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([vars(row) for row in self.rows], columns=["claim", "paper", "ours", "holds", "note"])

    def to_text(self) -> str:
        """The side-by-side table printed by the CLI."""
        mark = {True: "yes", False: "NO", None: "-"}
        header = ("claim", "paper", "ours", "holds")
        body = [(r.claim, r.paper, r.ours, mark[r.holds]) for r in self.rows]
        widths = [max(len(str(line[i])) for line in (header, *body)) for i in range(4)]
        lines = [f"{self.title}  ({'--quick' if self.quick else 'full'} run, {self.seconds:.0f} s)", ""]
        for line in (header, tuple("-" * w for w in widths), *body):
            lines.append("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())
        notes = [f"* {r.claim}: {r.note}" for r in self.rows if r.note]
        if notes:
            lines += ["", *notes]
        if self.full_command:
            lines += ["", f"paper-size run: {self.full_command}"]
        return "\n".join(lines)

    def write(self, out: str | Path, *, force: bool = False) -> list[Path]:
        """Write ``comparison.csv``, ``numbers.json`` and ``index.html`` (the table and every figure,
        offline: plotly.js saved beside the page) into ``out``; returns the paths written.

        ``out`` must be new, empty or an earlier reproduction's folder (:func:`check_out`), unless
        ``force``; it is checked before anything is written."""
        import html
        import json

        from perm_circuits._util import atomic_write_text
        from perm_circuits.outputs import mark_folder
        from perm_circuits.views.html import Section, html_page, plotly_js_file_name, write_plotly_js

        out = check_out(out, force=force)
        mark_folder(out, OUT_KIND)
        table = self.to_dataframe().to_html(index=False, escape=True, classes="pc-table")
        sections = [Section("Paper vs ours", table)]
        sections += [Section(name, figure.to_html(full_html=False, include_plotlyjs=False))
                     for name, figure in self.figures.items()]
        if self.full_command:
            sections.append(Section("Paper-size run", f"<pre>{html.escape(self.full_command)}</pre>"))
        written = [out / "comparison.csv", out / "numbers.json", out / "index.html"]
        atomic_write_text(written[0], self.to_dataframe().to_csv(index=False))
        atomic_write_text(written[1], json.dumps(dict(self.numbers), indent=2, default=float))
        atomic_write_text(written[2], html_page(self.title, sections, include_plotlyjs=plotly_js_file_name()))
        written.append(write_plotly_js(out, force=force))
        return written


OUT_KIND = "reproduce"
"""The marker kind of a reproduction's ``--out`` folder (:func:`perm_circuits.outputs.mark_folder`)."""


def check_out(out: str | Path, *, force: bool = False) -> Path:
    """``out`` as a Path once it is known that :meth:`Reproduction.write` may write there: writable
    (:func:`perm_circuits.outputs.check_writable`), and new, empty or holding the marker of an earlier
    reproduction, or ``force``; a plotly.js copy perm_circuits did not write is refused unless ``force``.
    ValueError naming ``out`` otherwise, before any work."""
    from perm_circuits.outputs import check_folder
    from perm_circuits.views.html import foreign_plotly_js

    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    path = check_folder(out, OUT_KIND, force=force)
    foreign = None if force or not path.is_dir() else foreign_plotly_js(path)
    if foreign is not None:
        raise ValueError(f"--out {str(foreign)!r} exists and perm_circuits did not write it; move it away, or pass "
                         "--force to overwrite it")
    return path


def reproduce(name: str, *, quick: bool = False, progress: bool = True, device=None) -> Reproduction:
    """Run reproduction ``name`` (one of :data:`REPRODUCTIONS`); ``quick`` is the CPU-sized run.

    ``device`` (default the CPU) goes to ``run`` when it takes one; for a reproduction that does
    not, asking for another device is a ValueError.
    """
    if name not in REPRODUCTIONS:
        REPRODUCTIONS.update({k: v for k, v in registered_reproductions().items() if k not in REPRODUCTIONS})
    if name not in REPRODUCTIONS:
        raise ValueError(f"unknown reproduction {name!r}; choose one of {sorted(REPRODUCTIONS)}")
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {quick!r}")
    module_name, _ = REPRODUCTIONS[name]
    run: Callable[..., Reproduction] = importlib.import_module(module_name).run
    options = {}
    if device is not None:
        from perm_circuits.devices import resolve_device

        target = resolve_device(device)
        if "device" in inspect.signature(run).parameters:
            options["device"] = target
        elif target.type != "cpu":
            raise ValueError(f"reproduction {name!r} runs on the CPU only ({module_name}.run takes no device)")
    start = time.perf_counter()
    result = run(quick=quick, progress=progress, **options)
    if not isinstance(result, Reproduction):
        raise TypeError(f"{module_name}.run returned {type(result).__name__}, expected a Reproduction")
    return replace(result, seconds=time.perf_counter() - start)
