"""The generalisation section of the results page: does recall hold for *every* repeated x_k?

Rendered from a committed sweep table (``sweeps/generalisation.toml``; one row per run, the sweep's
row schema).  Each run's ``recall_gen_x{k}`` columns hold its recall accuracy when the last query
repeats ``x_k``, measured exhaustively over the test permutations and every x order
(:func:`perm_circuits.evaluate.recall_generalisation`).  A run *generalises* when every one of them
is at least :data:`GENERALISES`; it has the *x1 shortcut* when it recalls ``x1`` at that level but
every other ``x_k`` below :data:`SHORTCUT_OTHERS`.
"""

from __future__ import annotations

import math
import os

import pandas as pd

from perm_circuits.analysis import ablate_head
from perm_circuits.analysis.circuits.general_recall import any_circuit_numbers
from perm_circuits.analysis.circuits.induction_story import induction_story
from perm_circuits.dynamics import which_first
from perm_circuits.evaluate import recall_generalisation
from perm_circuits.models import task_config_of
from perm_circuits.pages.capacity import RECIPE, check_sweep_frame, column_values, format_number, read_sweep_table

__all__ = ["GENERALISATION_COLUMNS", "GENERALISES", "GROUP", "generalisation_markdown", "generalisation_numbers",
           "generalises", "load_generalisation_table", "parameters", "SHORTCUT_OTHERS"]

GROUP: tuple[str, ...] = ("n_layers", "d_model", "n_heads", "repeat_sources")
"""One summary row per architecture and training distribution."""

GENERALISATION_COLUMNS: tuple[str, ...] = (*GROUP, "status", "seed", "recall_accuracy", "elimination_accuracy")

GENERALISES = 0.99
"""A run generalises when its recall accuracy for every repeated ``x_k`` is at least this."""


def _recall_columns(frame: pd.DataFrame) -> list[str]:
    """The ``recall_gen_x<k>`` columns in ``k`` order (``frame`` checked by :func:`_check`)."""
    return sorted((c for c in frame.columns if c.startswith("recall_gen_x")), key=lambda c: int(c.removeprefix("recall_gen_x")))


def _check(frame: object) -> list[str]:
    """The one check of a generalisation table; returns its recall columns."""
    check_sweep_frame(frame, GENERALISATION_COLUMNS)
    columns = _recall_columns(frame)
    if not columns:
        raise ValueError(f"sweep table has no recall_gen_x<k> columns; it has {list(frame.columns)}")
    return columns


def load_generalisation_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a sweep table (``.csv`` or ``.parquet``) with the generalisation columns; ``repeat_sources`` stays text."""
    frame = read_sweep_table(path, dtype={"repeat_sources": str})
    _check(frame)
    return frame


def generalises(frame: pd.DataFrame) -> pd.Series:
    """Per row: True when every ``recall_gen_x{k}`` is >= :data:`GENERALISES` (failed runs: False)."""
    columns = _check(frame)
    return (frame[columns] >= GENERALISES).all(axis=1) & (frame["status"] == "done")


SHORTCUT_OTHERS = 0.5
"""A run has the x1 shortcut when it recalls x1 (>= :data:`GENERALISES`) and every other x_k below this."""


def _shortcut(frame: pd.DataFrame) -> pd.Series:
    columns = _recall_columns(frame)
    others = (frame[columns[1:]] < SHORTCUT_OTHERS).all(axis=1)
    return (frame["status"] == "done") & (frame[columns[0]] >= GENERALISES) & others


def _label(n_layers, d_model, n_heads) -> str:
    return f"d{int(d_model)}h{int(n_heads)}l{int(n_layers)}"


def _sources_key(sources: str) -> str:
    return "x" + str(sources).replace(",", "")


def generalisation_markdown(frame: pd.DataFrame) -> str:
    """One row per (n_layers, d_model, n_heads, repeat_sources): runs, seeds, how many seeds
    generalise (``k/n``), how many have only the x1 shortcut, the mean recall accuracy per repeated
    ``x_k`` over the done runs with its range, and the mean elimination accuracy."""
    ok, short = generalises(frame), _shortcut(frame)  # generalises checks the table
    columns = _recall_columns(frame)
    header = ["layers", "d_model", "heads", "trained on repeats of", "runs done", "seeds",
              f"generalise (every x_k >= {GENERALISES:g})", f"x1 shortcut (others < {SHORTCUT_OTHERS:g})",
              *[f"recall x{c.removeprefix('recall_gen_x')}: mean [min, max]" for c in columns], "elimination (mean)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, runs in frame.groupby(list(GROUP), sort=True):
        done = runs[runs["status"] == "done"]
        cells = [format_number(float(key[0])), format_number(float(key[1])), format_number(float(key[2])),
                 ", ".join(f"x{k}" for k in str(key[3]).split(","))]
        failed = len(runs) - len(done)
        cells.append(f"{len(done)}" + (f" ({failed} failed)" if failed else ""))
        cells.append(",".join(str(int(s)) for s in sorted(runs["seed"].unique())))
        cells.append(f"{int(ok[runs.index].sum())}/{len(done)}")
        cells.append(f"{int(short[runs.index].sum())}/{len(done)}")
        for column in columns:
            values = done[column]
            cells.append(f"{values.mean():.3f} [{values.min():.3f}, {values.max():.3f}]" if len(done) else "–")
        cells.append(f"{done['elimination_accuracy'].mean():.3f}" if len(done) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    n_done = int((frame["status"] == "done").sum())
    recipe = "; ".join(f"{c} {column_values(frame, c)}" for c in RECIPE if c in frame.columns)
    intro = (f"{len(frame)} runs ({n_done} done, {len(frame) - n_done} failed); recipe: {recipe}. "
             f"Recall per repeated x_k is measured exhaustively over the test permutations and every x order.")
    return intro + "\n\n" + "\n".join(lines) + "\n"


def generalisation_numbers(frame: pd.DataFrame) -> dict[str, object]:
    """The numbers the results page quotes, as flat ``generalisation.*`` keys.

    Per configuration (``generalisation.d{d}h{h}l{L}.{x1|x1234}.*``): ``done``, ``generalise``
    (seeds whose recall holds for every x_k), ``shortcut`` (x1 only) and the mean recall per x_k.
    Totals per layer count and training distribution (``generalisation.l{L}.{x1|x1234}.*``), and
    the smallest generalising configuration by non-embedding parameters (:func:`parameters`):
    ``generalisation.smallest`` (e.g. ``"d16h1l2"``) with its share of seeds, or ``"none"``.  When
    the table has them: how many multi-layer runs the induction story holds in
    (``generalisation.story.*``), and for every generalising configuration, per ablation mode and
    component, in how many generalising seeds ablating it drops mean recall below one half
    (``generalisation.<config>.<sources>.necessary.<how>.<component>``).
    """
    ok, short = generalises(frame), _shortcut(frame)  # generalises checks the table
    columns = _recall_columns(frame)
    done_all = frame[frame["status"] == "done"]
    out: dict[str, object] = {"generalisation.runs": len(frame), "generalisation.done": len(done_all),
                              "generalisation.seeds": int(frame["seed"].nunique()),
                              "generalisation.generalise": int(ok.sum())}
    for column in RECIPE:
        if column in frame.columns and frame[column].nunique() == 1:
            value = frame[column].iloc[0]
            out[f"generalisation.recipe.{column}"] = value.item() if hasattr(value, "item") else value
    candidates = []
    for (n_layers, d_model, n_heads, sources), runs in frame.groupby(list(GROUP), sort=True):
        done = runs[runs["status"] == "done"]
        key = f"generalisation.{_label(n_layers, d_model, n_heads)}.{_sources_key(sources)}"
        out[f"{key}.done"] = len(done)
        out[f"{key}.generalise"] = int(ok[runs.index].sum())
        out[f"{key}.shortcut"] = int(short[runs.index].sum())
        for column in columns:
            out[f"{key}.{column.removeprefix('recall_gen_')}"] = float(done[column].mean()) if len(done) else math.nan
        if len(done) and ok[runs.index].sum() > 0:
            candidates.append(((int(n_layers), int(d_model), int(n_heads)), key, int(ok[runs.index].sum()), len(done)))
    for (n_layers, sources), runs in frame.groupby(["n_layers", "repeat_sources"], sort=True):
        key = f"generalisation.l{int(n_layers)}.{_sources_key(sources)}"
        out[f"{key}.done"] = int((runs["status"] == "done").sum())
        out[f"{key}.generalise"] = int(ok[runs.index].sum())
        out[f"{key}.shortcut"] = int(short[runs.index].sum())
    if candidates:
        size, key, hit, n = min(candidates, key=lambda c: (parameters(*c[0]), c[0], -c[2]))
        out["generalisation.smallest"] = _label(*size)
        out["generalisation.smallest.parameters"] = parameters(*size)
        out["generalisation.smallest.generalise"] = hit
        out["generalisation.smallest.done"] = n
    else:
        out["generalisation.smallest"] = "none"
    general = frame[ok]
    if "story_holds" in frame.columns:
        multi = done_all[done_all["n_layers"] >= 2]
        out["generalisation.story.runs"] = len(multi)
        out["generalisation.story.holds"] = int(multi["story_holds"].astype(str).str.lower().eq("true").sum())
        out["generalisation.story.general_runs"] = int((general["n_layers"] >= 2).sum())
    for (n_layers, d_model, n_heads, sources), runs in general.groupby(list(GROUP), sort=True):
        if int(n_layers) == 1 and int(n_heads) == 2 and "att_L0H0_xk" in runs.columns:
            out.update(_split_heads(runs, f"generalisation.{_label(n_layers, d_model, n_heads)}.{_sources_key(sources)}"))
        key = f"generalisation.{_label(n_layers, d_model, n_heads)}.{_sources_key(sources)}.necessary"
        for column in [c for c in runs.columns if c.startswith("abl_") and c.endswith("_recall") and runs[c].notna().any()]:
            how, component = column.removeprefix("abl_").removesuffix("_recall").split("_", 1)
            out[f"{key}.{how}.{component}"] = int((runs[column] < 0.5).sum())
    return out


def _split_heads(runs: pd.DataFrame, key: str) -> dict[str, object]:
    """One-layer, two-head generalisers: does one head match (attend to ``x_k`` from the last
    position) while the other reads the answers (attention on the y's)?  Per run the *match head*
    is the head with more attention on ``x_k``; counted, with the extremes over the runs."""
    match, y_mass, y_k = [], [], []
    for _, row in runs.iterrows():
        heads = sorted(range(2), key=lambda h: -row[f"att_L0H{h}_xk"])
        m, o = heads
        match.append(float(row[f"att_L0H{m}_xk"]))
        y_mass.append(float(row[f"att_L0H{o}_yk"] + row[f"att_L0H{o}_other_y"]))
        y_k.append(float(row[f"att_L0H{o}_yk"]))
    split = sum(a >= 0.5 and b >= 0.9 for a, b in zip(match, y_mass))
    return {f"{key}.split_heads": int(split), f"{key}.match_xk.min": min(match), f"{key}.match_xk.max": max(match),
            f"{key}.y_mass.min": min(y_mass), f"{key}.y_head_yk.min": min(y_k), f"{key}.y_head_yk.max": max(y_k)}


def parameters(n_layers: int, d_model: int, n_heads: int, d_head: int | None = None, d_mlp: int | None = None) -> int:
    """Non-embedding parameters (weights only): per layer 4 d_model n_heads d_head (Q, K, V, O) plus
    2 d_model d_mlp (the MLP); defaults d_head = d_model / n_heads, d_mlp = 2 d_model (the study's)."""
    d_head = d_model // n_heads if d_head is None else d_head
    d_mlp = 2 * d_model if d_mlp is None else d_mlp
    return int(n_layers * (4 * d_model * n_heads * d_head + 2 * d_model * d_mlp))


ANY_HOWS: tuple[str, ...] = ("zero", "mean", "resample")
"""Ablation modes under which the generalising model's circuit is checked (every one is reported)."""


def any_model_numbers(model, *, prefix: str = "any", n_pair: int = 2000, n_boot: int = 200,
                      hows: tuple[str, ...] = ANY_HOWS) -> dict[str, object]:
    """The numbers the docs quote about a model with general recall, as flat ``<prefix>.*`` keys.

    * ``recall.x{k}`` / ``elimination``: exhaustive recall per repeated ``x_k`` and elimination
      (:func:`~perm_circuits.evaluate.recall_generalisation` with ``n=None``);
    * ``story.*``: the induction story (:func:`~perm_circuits.analysis.circuits.induction_story.induction_story`:
      scores, Q/K/V composition, path patching A -> B with its CI, ``holds`` and what is missing);
    * ``ablate.<how>.<role>.x{k}`` / ``.recall.max`` / ``.elimination``: exhaustive recall per ``x_k``
      with the story's ``previous`` or ``induction`` head ablated, under every mode of ``hows``
      (default :data:`ANY_HOWS`).
    """
    task = task_config_of(model)
    out: dict[str, object] = {}
    general = recall_generalisation(model, task=task, n=None)
    for k, value in enumerate(general.recall, start=1):
        out[f"{prefix}.recall.x{k}"] = value
    out[f"{prefix}.recall.min"] = min(general.recall)
    out[f"{prefix}.elimination"] = general.elimination
    out[f"{prefix}.recall.n_per_source"] = general.n_per_source
    story = induction_story(model, task=task, n_pair=n_pair, n_boot=n_boot)
    out[f"{prefix}.story.holds"] = "holds" if story.holds else "does not hold"
    out[f"{prefix}.story.missing"] = "; ".join(story.missing) or "nothing"
    for name in ("previous_head", "induction_head", "previous_token", "induction", "k_composition", "q_composition",
                 "v_composition", "k_baseline", "path_k", "path_k_ci_low", "path_k_ci_high", "path_q", "path_v"):
        value = getattr(story, name)
        out[f"{prefix}.story.{name}"] = value if isinstance(value, str) else float(value)
    for how in hows:
        for role, component in (("previous", story.previous_head), ("induction", story.induction_head)):
            layer, head = int(component[1]), int(component[3:])
            hooks = ablate_head(model, layer, head, how)
            ablated = recall_generalisation(model, task=task, n=None, hooks=hooks)
            key = f"{prefix}.ablate.{how}.{role}"
            for k, value in enumerate(ablated.recall, start=1):
                out[f"{key}.x{k}"] = value
            out[f"{key}.recall.max"] = max(ablated.recall)
            out[f"{key}.elimination"] = ablated.elimination
    return out


def dynamics_numbers(records: dict[int, object], signals: dict[str, str], *, target: str = "recall_x2_accuracy",
                     prefix: str = "any.dynamics", threshold: float = 0.5) -> dict[str, object]:
    """When the parts form, per seed and across seeds.

    For each seed's record and each ``label -> signal`` of ``signals`` (plus ``target``, recall of a
    repeated x2 by default): the step at which the signal crosses ``threshold`` of its change
    (:func:`~perm_circuits.dynamics.which_first`; ``<prefix>.seed{s}.{label}``, NaN if it never
    does), and over the seeds how many cross no later than the target
    (``<prefix>.{label}.before_target``) out of ``<prefix>.seeds``.
    """
    if not records:
        raise ValueError("records is empty: give {seed: DynamicsRecord}")
    out: dict[str, object] = {f"{prefix}.seeds": len(records), f"{prefix}.seed_list": ",".join(map(str, sorted(records)))}
    before = dict.fromkeys(signals, 0)
    for seed, record in sorted(records.items()):
        order = which_first(record, [*signals.values(), target], threshold=threshold)
        target_step = order.step_of(target)
        out[f"{prefix}.seed{seed}.target"] = math.nan if target_step is None else int(target_step)
        out[f"{prefix}.seed{seed}.last_step"] = int(record.steps[-1])
        for label, signal in signals.items():
            step = order.step_of(signal)
            out[f"{prefix}.seed{seed}.{label}"] = math.nan if step is None else int(step)
            if step is not None and target_step is not None and step <= target_step:
                before[label] += 1
    for label, count in before.items():
        out[f"{prefix}.{label}.before_target"] = count
    return out


ANY_MODEL = "d16h1l2-any"
"""The shipped model whose recall generalises (the smallest configuration of the sweep that does)."""

DYNAMICS_SIGNALS: dict[str, str] = {
    "elimination": "elimination_accuracy",
    "dup_L0H0": "L0H0.duplicate_token",
    "dup_L1H0": "L1H0.duplicate_token",
    "xmatch_L0H0": "L0H0.QK.x_match",
    "xmatch_L1H0": "L1H0.QK.x_match",
    "prev_L0H0": "L0H0.previous_token",
    "ind_L1H0": "L1H0.induction",
}
"""The recorded signals whose timing the general-recall page reports (label -> signal name)."""


def general_recall_numbers(model, records: dict[int, object], *, circuit: bool = True) -> dict[str, object]:
    """Every number of ``docs/general_recall.md`` about the shipped model: :func:`any_model_numbers`,
    the circuit numbers (``any.circuit.*`` of
    :func:`~perm_circuits.analysis.circuits.general_recall.any_circuit_numbers`, when ``circuit``), and
    :func:`dynamics_numbers` over the generalising seeds' records."""
    out = any_model_numbers(model)
    if circuit:
        out.update(any_circuit_numbers(model))
    out.update(dynamics_numbers(records, DYNAMICS_SIGNALS))
    return out
