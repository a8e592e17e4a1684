"""The shipped study models' mean attention patterns: a committed table and the docs' heatmaps.

:func:`attention_table` measures, for every head of each shipped study model, the attention weight
each query position puts on each key position, averaged over the results pages' test set
(``make_test_set(task, n=5000, seed=1234)``, the ``settings.test_*`` of
:mod:`perm_circuits.pages.numbers`), once over all sequences and once per last-query group (the
last query repeats an earlier ``x``, or is new).  ``scripts/build_results.py --recompute`` writes
it to ``results/attention_patterns.csv``; the plain command renders one SVG heatmap per head from
that table (:func:`attention_figures`) into ``docs/figures/``, with no model run.  The study
(section 08) reads these maps to name its heads: the elimination head spreads attention over the
earlier ``y`` tokens, the recall head binds ``(x, y)`` pairs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from perm_circuits._util import atomic_write_text
from perm_circuits.hooks import run_capture
from perm_circuits.models import load_pretrained, model_config_of
from perm_circuits.pages.figures import FIGURES_DIR
from perm_circuits.pages.numbers import MODELS, SETTINGS
from perm_circuits.tasks.permutation_data import make_test_set
from perm_circuits.views.figure_style import position_label
from perm_circuits.views.svg_charts import svg_heatmaps

__all__ = [
    "ATTENTION_COLUMNS",
    "ATTENTION_GROUPS",
    "ATTENTION_TABLE",
    "attention_csv",
    "attention_figure_path",
    "attention_figures",
    "attention_svg",
    "attention_table",
    "read_attention_table",
    "write_attention_table",
]

ATTENTION_TABLE = Path("results/attention_patterns.csv")
ATTENTION_GROUPS: tuple[str, ...] = ("all", "new", "repeated")
"""Sequences averaged over: all of them; those whose last query is new; those whose last query repeats an earlier x."""
ATTENTION_COLUMNS: tuple[str, ...] = ("model", "layer", "head", "group", "n", "query", "key", "weight")
DIGITS = 4
"""Decimals stored in the table (the figures print two)."""


def attention_table(models: Sequence[str] = MODELS) -> pd.DataFrame:
    """Mean attention pattern of every head of each shipped study model, one row per (head, group, query, key).

    ``weight`` is the mean over the group's test sequences of ``blocks.L.attn.hook_pattern[b, h,
    query, key]`` (post-softmax), rounded to :data:`DIGITS` decimals; causal cells (``key >
    query``) are omitted, so each (model, head, group, query) row sums to 1 up to rounding.
    ``n`` is the number of sequences averaged.  Deterministic on CPU.
    """
    if isinstance(models, str) or not models:
        raise TypeError(f"models must be a non-empty sequence of shipped model names, got {models!r}")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; the study's shipped models: {list(MODELS)}")
    rows = []
    for name in models:
        model = load_pretrained(name)
        config = model_config_of(model)
        test_set = make_test_set(model.task_config, n=SETTINGS["test_n"], seed=SETTINGS["test_seed"])
        hooks = [f"blocks.{layer}.attn.hook_pattern" for layer in range(config.n_layers)]
        _, acts = run_capture(model, test_set.tokens, hooks)
        masks = {"all": torch.ones(len(test_set), dtype=torch.bool), "new": ~test_set.extras["repeated"],
                 "repeated": test_set.extras["repeated"]}
        for layer, hook in enumerate(hooks):
            pattern = acts[hook].detach().double()  # [batch, head, query, key]
            for group in ATTENTION_GROUPS:
                mask = masks[group]
                mean = pattern[mask].mean(dim=0)
                for head in range(config.n_heads):
                    for query in range(mean.shape[-2]):
                        for key in range(query + 1):
                            rows.append((name, layer, head, group, int(mask.sum()), query, key,
                                         round(float(mean[head, query, key]), DIGITS)))
    return pd.DataFrame(rows, columns=list(ATTENTION_COLUMNS))


def attention_csv(frame: pd.DataFrame) -> str:
    """``frame`` (:func:`attention_table`) as the committed CSV text, weights with :data:`DIGITS` decimals."""
    _check(frame)
    return frame.to_csv(index=False, float_format=f"%.{DIGITS}f", lineterminator="\n")


def write_attention_table(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Write :func:`attention_csv` of ``frame`` to ``path`` (atomically)."""
    return atomic_write_text(Path(path), attention_csv(frame))


def read_attention_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a table written by :func:`write_attention_table` (checked for its columns)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no attention table at {path} (python scripts/build_results.py --recompute writes it)")
    frame = pd.read_csv(path)
    _check(frame)
    return frame


def _check(frame: pd.DataFrame) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"the attention table must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in ATTENTION_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"the attention table lacks column(s) {missing}; expected {list(ATTENTION_COLUMNS)}")
    if frame.empty:
        raise ValueError("the attention table has no rows")
    groups = sorted(set(frame["group"]) - set(ATTENTION_GROUPS))
    if groups:
        raise ValueError(f"unknown group(s) {groups} in the attention table; expected {list(ATTENTION_GROUPS)}")


def attention_figure_path(model: str, layer: int, head: int) -> Path:
    """Where the heatmap of ``model``'s head ``L{layer}H{head}`` goes: ``docs/figures/attention_<model>_L<l>H<h>.svg``."""
    return FIGURES_DIR / f"attention_{model}_L{layer}H{head}.svg"


def attention_svg(frame: pd.DataFrame, model: str, layer: int, head: int) -> str:
    """One head's mean attention as an SVG: a panel per group (all, new, repeated last query).

    Rows are query positions, columns key positions (labelled by the token they hold, ``x1``,
    ``y1``, ...); each cell is
    coloured by the weight (white 0 to blue 1) and prints it with two decimals; causal cells
    (``key > query``) are grey.
    """
    _check(frame)
    rows = _head_rows(frame, model, layer, head)
    if rows.empty:
        raise ValueError(f"the attention table has no rows for {model} L{layer}H{head}")
    return _svg(rows, model, layer, head)


def _head_rows(frame: pd.DataFrame, model: str, layer: int, head: int) -> pd.DataFrame:
    return frame[(frame["model"] == model) & (frame["layer"] == layer) & (frame["head"] == head)]


def _svg(rows: pd.DataFrame, model: str, layer: int, head: int) -> str:
    """:func:`attention_svg` of one head's rows of a checked table (at least one row)."""
    positions = int(rows["query"].max()) + 1
    labels = [position_label(p).split(": ")[1] for p in range(positions)]  # "x1", "y1", ...
    panels = []
    for group in ATTENTION_GROUPS:
        part = rows[rows["group"] == group]
        if part.empty:
            continue
        weights = {(int(q), int(k)): float(w) for q, k, w in zip(part["query"], part["key"], part["weight"])}
        cells = [[(weights[(q, k)], f"{weights[(q, k)]:.2f}") if (q, k) in weights else (math.nan, "")
                  for k in range(positions)] for q in range(positions)]
        title = {"all": "all sequences", "new": "new last query", "repeated": "repeated last query"}[group]
        panels.append((f"{title} (n={int(part['n'].iloc[0])})", labels, labels, cells))
    return svg_heatmaps(panels, title=f"{model} L{layer}H{head}: mean attention over the test set",
                        x_label="key (attended) position", y_label="query position", cell=28, note_size=9)


def attention_figures(frame: pd.DataFrame) -> dict[Path, str]:
    """Every head's heatmap of the table, ``{path under the repository: SVG text}``."""
    _check(frame)
    heads = frame[["model", "layer", "head"]].drop_duplicates().itertuples(index=False)
    return {attention_figure_path(m, int(l), int(h)): _svg(_head_rows(frame, m, int(l), int(h)), m, int(l), int(h))
            for m, l, h in heads}  # the table checked once, each head's rows taken from it
