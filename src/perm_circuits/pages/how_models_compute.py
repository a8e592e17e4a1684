"""The page ``docs/how_models_compute.md``: each shipped model's algorithm, tested by causal scrubbing.

Rendered by :func:`how_pages` from ``results/hypotheses.csv`` (``scripts/hypotheses.py``: every
hypothesis of :func:`perm_circuits.analysis.study.hypotheses.shipped_hypotheses` scrubbed per shipped
model and skill with :func:`perm_circuits.analysis.hypothesis.causal_scrub`, Chan et al. 2022,
"Causal Scrubbing: a method for rigorously testing interpretability hypotheses").  The prose about
each model is fixed text; every number on the page is computed here from the table, and
``tests/pages/test_how_models_compute.py`` re-derives them.

Recovery is ``(scrubbed - fully randomised) / (model - fully randomised)`` of the last-step accuracy,
with a bootstrap interval over rows; a claim's loss is ``1 - recovery`` with that claim alone scrubbed.
Which explanation "recovers more" is decided by :func:`verdict` from the intervals, never written by hand.
"""

from __future__ import annotations

import math
import os
from html import escape
from pathlib import Path

import pandas as pd

__all__ = ["GOAL", "HOW_FIGURE", "HOW_PAGE", "HOW_TABLE", "MIN_GAP", "MODELS", "OURS", "SKILLS", "best_ours", "claim_losses",
           "how_pages", "informative", "load_hypotheses", "recovery_svg", "verdict", "whole"]

HOW_TABLE = Path("results/hypotheses.csv")
HOW_PAGE = Path("docs/how_models_compute.md")
HOW_FIGURE = Path("docs/figures/how_models_compute_recovery.svg")
MODELS = ("d16h1", "d32h1", "d32h2", "d16h1l2-any")
SKILLS = ("elimination", "recall", "recall_any")
OURS = ("shortcut", "gate", "query")
GOAL = 0.95
MIN_GAP = 0.1  # model accuracy minus fully randomised accuracy below this: recovery is a ratio of noise
LOSS_SHOWN = 0.005  # claims losing less than this are summarised as "none"

_SKILL_TEXT = {
    "elimination": "elimination (no repeat; the answer is the one unused y)",
    "recall": "recall of x1 (x5 repeats x1, the study's repeat)",
    "recall_any": "recall of any x_k (x5 repeats x_k, k uniform in 1..4)",
}

_ALGORITHM = {
    "d16h1": (
        "One layer, one attention head, d_model 16, trained on the study's full recipe. At the last position the "
        "head reads the earlier pairs and the MLP writes the answer. Its recall is a position-1 shortcut: it "
        "answers y1 when x5 repeats x1 and does not recall a repeated x2, x3 or x4 ([results](results.md))."),
    "d32h1": (
        "One layer, one attention head, d_model 32, the study's full recipe. The same division of labour as "
        "d16h1: the head gathers the pairs, the MLP produces the answer, and recall is the position-1 shortcut."),
    "d32h2": (
        "One layer, two heads, d_model 32. L0H0 is a duplicate-token head (it detects that x5 repeats x1) and the "
        "MLP produces the answer. Our reading: L0H0 carries only whether x5 repeats x1, L0H1 the used y values "
        "and y1, and the duplicate-token head gates the MLP lookup between elimination and the y1 answer."),
    "d16h1l2-any": (
        "Two layers, one head each, d_model 16, trained with repeats of any x_k; its recall generalises to every "
        "k ([general recall](general_recall.md)). Our reading: layer 0 at the last position finds which earlier "
        "slot k holds x5 (a positional query), the layer-1 head reads the bound y_k and the used values, and the "
        "layer-1 MLP writes the answer."),
}


def load_hypotheses(root: str | os.PathLike) -> pd.DataFrame:
    """The committed scrubbing table, one row per (model, skill, hypothesis, component); ``component ==
    "all"`` is the whole hypothesis (with ``ci_low``/``ci_high``), the other rows one claim scrubbed alone."""
    return pd.read_csv(Path(root) / HOW_TABLE, keep_default_na=False, na_values=[""])


def whole(table: pd.DataFrame, model: str, skill: str) -> pd.DataFrame:
    """The whole-hypothesis rows of one model and skill, in the table's order."""
    return table[(table["model"] == model) & (table["skill"] == skill) & (table["component"] == "all")]


def informative(row) -> bool:
    """Whether a row's recovery means anything: the model beats the fully randomised run by at least
    :data:`MIN_GAP` in accuracy (otherwise the ratio divides by noise and may leave [0, 1])."""
    return float(row["model_metric"]) - float(row["random_metric"]) >= MIN_GAP


def claim_losses(table: pd.DataFrame, model: str, skill: str, hypothesis: str) -> list[tuple[str, str, float]]:
    """``(component, features, loss)`` per claim of one hypothesis, loss ``= 1 - recovery`` with that claim
    alone scrubbed, largest loss first (ties in the table's order)."""
    rows = table[(table["model"] == model) & (table["skill"] == skill) & (table["hypothesis"] == hypothesis)
                 & (table["component"] != "all")]
    out = [(str(r["component"]), str(r["features"]), 1.0 - float(r["recovery"])) for r in rows.to_dict("records")]
    return sorted(out, key=lambda c: -c[2])


def best_ours(table: pd.DataFrame, model: str, skill: str) -> dict | None:
    """Our best hypothesis (of :data:`OURS`) on one model and skill: the row with the highest recovery."""
    rows = whole(table, model, skill)
    rows = rows[rows["hypothesis"].isin(OURS)]
    if rows.empty:
        return None
    return rows.sort_values("recovery", ascending=False, kind="stable").iloc[0].to_dict()


def verdict(ours: dict, study: dict) -> str:
    """Which explanation recovers more: ``"ours recovers more"`` when our interval lies wholly above the
    study's, ``"the study's recovers more"`` when below, else ``"no clear difference"`` (the intervals overlap)."""
    if float(ours["ci_low"]) > float(study["ci_high"]):
        return "ours recovers more"
    if float(study["ci_low"]) > float(ours["ci_high"]):
        return "the study's recovers more"
    return "no clear difference"


def _r(x: float) -> str:
    return "n/a" if math.isnan(float(x)) else f"{float(x):.3f}"


def _interval(row) -> str:
    return f"[{_r(row['ci_low'])}, {_r(row['ci_high'])}]"


def _goal(row) -> str:
    if not informative(row):
        return "not meaningful (model near chance)"
    return "meets the goal" if float(row["recovery"]) >= GOAL else f"**below the goal** ({_r(row['recovery'])})"


def _recovery_block(table: pd.DataFrame, model: str) -> str:
    lines = ["| skill | hypothesis | recovery | 95% interval | model accuracy | randomised accuracy | scrubbed accuracy "
             f"| goal {GOAL:g} |", "|---|---|---|---|---|---|---|---|"]
    for skill in SKILLS:
        for r in whole(table, model, skill).to_dict("records"):
            lines.append(f"| {skill} | {r['hypothesis']} | {_r(r['recovery'])} | {_interval(r)} | {_r(r['model_metric'])} "
                         f"| {_r(r['random_metric'])} | {_r(r['metric'])} | {_goal(r)} |")
    return "\n".join(lines)


def _claims_block(table: pd.DataFrame, model: str) -> str:
    lines = ["| skill | hypothesis | claims that lose (component: features, 1 - recovery alone) | sum of the claims' losses "
             "| whole hypothesis's loss |", "|---|---|---|---|---|"]
    for skill in SKILLS:
        for r in whole(table, model, skill).to_dict("records"):
            every = claim_losses(table, model, skill, r["hypothesis"])
            losses = [c for c in every if abs(c[2]) >= LOSS_SHOWN]
            cell = "; ".join(f"`{c}` ({f}): {_r(loss)}" for c, f, loss in losses) or "none"
            note = "" if informative(r) else " _(model near chance: not meaningful)_"
            lines.append(f"| {skill} | {r['hypothesis']} | {cell}{note} | {_r(sum(c[2] for c in every))} "
                         f"| {_r(1 - float(r['recovery']))} |")
    return "\n".join(lines)


def _side_block(table: pd.DataFrame, model: str) -> str:
    lines = ["| skill | the study's story | ours | which recovers more |", "|---|---|---|---|"]
    for skill in SKILLS:
        rows = whole(table, model, skill)
        study = rows[rows["hypothesis"] == "study"]
        ours = best_ours(table, model, skill)
        if study.empty or ours is None:
            continue
        study = study.iloc[0].to_dict()
        word = verdict(ours, study) if informative(study) else "not meaningful (model near chance)"
        lines.append(f"| {skill} | {_r(study['recovery'])} {_interval(study)} | {ours['hypothesis']}: "
                     f"{_r(ours['recovery'])} {_interval(ours)} | {word} |")
    return "\n".join(lines)


def _summary(table: pd.DataFrame, model: str) -> str:
    parts = []
    for skill in SKILLS:
        rows = whole(table, model, skill)
        if rows.empty:
            continue
        best = rows.sort_values("recovery", ascending=False, kind="stable").iloc[0]
        names = " and ".join(rows[rows["recovery"] == best["recovery"]]["hypothesis"])
        if not informative(best):
            parts.append(f"on {skill} the model is near chance ({_r(best['model_metric'])} against "
                         f"{_r(best['random_metric'])} randomised), so no recovery is meaningful")
        elif float(best["recovery"]) >= GOAL:
            parts.append(f"on {skill} the best hypothesis ({names}) recovers {_r(best['recovery'])} "
                         f"{_interval(best)}, meeting the {GOAL:g} goal")
        else:
            parts.append(f"on {skill} the best hypothesis ({names}) recovers only {_r(best['recovery'])} "
                         f"{_interval(best)}, **below the {GOAL:g} goal**")
    return "In short: " + "; ".join(parts) + "."


def _hypotheses_list(table: pd.DataFrame, model: str) -> str:
    rows = table[table["model"] == model].drop_duplicates("hypothesis")
    owner = {"study": "the seed study's story"}
    return "\n".join(f"- **{r['hypothesis']}** ({owner.get(r['hypothesis'], 'ours')}): {r['description']}"
                     for r in rows.to_dict("records"))


def _near_chance(table: pd.DataFrame) -> str:
    rows = table[table["component"] == "all"].drop_duplicates(["model", "skill"])
    cases = [f"{r['model']} on {r['skill']}" for r in rows.to_dict("records") if not informative(r)]
    return ", ".join(cases) or "no model and skill here"


def _overview_block(table: pd.DataFrame) -> str:
    lines = ["| model | " + " | ".join(SKILLS) + " |", "|---|" + "---|" * len(SKILLS)]
    for model in MODELS:
        cells = []
        for skill in SKILLS:
            rows = whole(table, model, skill)
            study = rows[rows["hypothesis"] == "study"]
            ours = best_ours(table, model, skill)
            if study.empty or ours is None:
                cells.append("-")
            elif not informative(study.iloc[0]):
                cells.append("model near chance")
            else:
                cells.append(f"study {_r(study.iloc[0]['recovery'])}, {ours['hypothesis']} {_r(ours['recovery'])}: "
                             f"{verdict(ours, study.iloc[0].to_dict())}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _model_section(table: pd.DataFrame, model: str) -> str:
    n = int(table[table["model"] == model]["n_rows"].iloc[0])
    return f"""## {model}

{_ALGORITHM[model]}

Hypotheses scored on {n:,} test sequences per skill:

{_hypotheses_list(table, model)}

{_summary(table, model)}

### Scrubbing recovery per skill and hypothesis

{_recovery_block(table, model)}

### Which claim loses how much

Each claim scrubbed alone; where the whole hypothesis loses more than the claims' losses add up to, the claims
interact: a claim that holds on the model's own upstream activations fails once its inputs are scrubbed too.

{_claims_block(table, model)}

### The study's story against ours

{_side_block(table, model)}
"""


_COLORS = {"study": "#868e96", "shortcut": "#1c7ed6", "gate": "#e8590c", "query": "#2f9e44"}
_FONT = 'font-family="Helvetica, Arial, sans-serif"'


def recovery_svg(table: pd.DataFrame) -> str:
    """Horizontal bars: each hypothesis's whole recovery per model and skill (near-chance rows left out), with
    its 95% interval and the goal line; bars are clipped to [0, 1], the printed value is the table's."""
    rows = [r for model in MODELS for skill in SKILLS for r in whole(table, model, skill).to_dict("records")
            if informative(r)]
    left, bar_w, right, top, step = 250, 420, 70, 40, 18
    height = top + step * len(rows) + 40
    width = left + bar_w + right

    def px(x: float) -> float:
        return left + bar_w * min(max(float(x), 0.0), 1.0)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'role="img" aria-label="causal-scrubbing recovery per model, skill and hypothesis">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="22" font-size="15" {_FONT} fill="#212529">Causal-scrubbing recovery (last-step accuracy)</text>']
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{px(t):.1f}" y1="{top - 4}" x2="{px(t):.1f}" y2="{top + step * len(rows)}" stroke="#e9ecef"/>')
        out.append(f'<text x="{px(t):.1f}" y="{top + step * len(rows) + 16}" font-size="11" text-anchor="middle" {_FONT} '
                   f'fill="#495057">{t:g}</text>')
    for i, r in enumerate(rows):
        y = top + step * i
        color = _COLORS.get(r["hypothesis"], "#495057")
        label = escape(f"{r['model']} {r['skill']} {r['hypothesis']}")
        out.append(f'<text x="{left - 8}" y="{y + 12}" font-size="11" text-anchor="end" {_FONT} fill="#212529">{label}</text>')
        out.append(f'<rect x="{left}" y="{y + 3}" width="{px(r["recovery"]) - left:.1f}" height="{step - 6}" '
                   f'fill="{color}"><title>{label}: {_r(r["recovery"])}</title></rect>')
        out.append(f'<line x1="{px(r["ci_low"]):.1f}" y1="{y + step / 2}" x2="{px(r["ci_high"]):.1f}" '
                   f'y2="{y + step / 2}" stroke="#212529"/>')
        out.append(f'<text x="{left + bar_w + 6}" y="{y + 12}" font-size="11" {_FONT} fill="#212529">{_r(r["recovery"])}</text>')
    out.append(f'<line x1="{px(GOAL):.1f}" y1="{top - 4}" x2="{px(GOAL):.1f}" y2="{top + step * len(rows)}" '
               'stroke="#c92a2a" stroke-dasharray="5,3"><title>goal</title></line>')
    out.append(f'<text x="{px(GOAL):.1f}" y="{top - 8}" font-size="11" text-anchor="middle" {_FONT} fill="#c92a2a">'
               f'goal {GOAL:g}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def how_pages(root: str | os.PathLike) -> dict[Path, str]:
    """``{path: text}``: ``docs/how_models_compute.md`` and its figure from the committed ``results/hypotheses.csv``."""
    table = load_hypotheses(root)
    missing = sorted(set(MODELS) - set(table["model"]))
    if missing:
        raise ValueError(f"{HOW_TABLE} has no rows for model(s) {missing}; run python scripts/hypotheses.py --force")
    sections = "\n".join(_model_section(table, model) for model in MODELS)
    text = f"""# How the models compute

<!-- generated by python scripts/build_results.py from {HOW_TABLE}; do not edit -->

Each shipped model's algorithm, written as a hypothesis that can fail and tested by **causal scrubbing**
(Chan et al. 2022): every component a hypothesis names is fed its activation from another test sequence that
agrees on the features the hypothesis says it reads, every component it does not name is claimed irrelevant and
resampled from a random sequence, and the score is the fraction of last-step accuracy kept,
(scrubbed - fully randomised) / (model - fully randomised), with a 95% bootstrap interval over rows
(`scripts/hypotheses.py`, `perm_circuits.analysis.study.hypotheses`). The goal is {GOAL:g} for every skill of every
model; where a hypothesis falls short, the page says which claim loses how much (that claim alone scrubbed, every
other activation the model's own; loss = 1 - its recovery). The table was scored with `unnamed="source"`, the
library's default approximation of Chan et al.'s resampling (see `causal_scrub`); the stricter `unnamed="random"`
is not tabulated yet.

Which explanation "recovers more" is computed: one recovers more when its interval lies wholly above the other's;
overlapping intervals read "no clear difference". "Ours" is our best hypothesis on that skill. Where the model
itself is within {MIN_GAP:g} accuracy of the fully randomised run ({_near_chance(table)}), recovery divides by noise
and is marked not meaningful.

## Overview: the study's story against ours

{_overview_block(table)}

![causal-scrubbing recovery per model, skill and hypothesis](figures/{HOW_FIGURE.name})

{sections}
## Not measured yet

Neuron rule tables (every MLP neuron assigned to a named rule) and the replacement MLP built from those rules do
not exist yet: no neuron rule or retention number is reported here.

## Paper vs ours

Chan et al. 2022 score their hypotheses on other models and tasks (among them an induction model and a
parenthesis balancer) under their own metrics; no number of theirs is quoted here, since none is measured on a
comparable metric, task and model. The seed study makes no causal-scrubbing claim; its story is scored above as the
hypothesis **study**.
"""
    return {HOW_PAGE: text, HOW_FIGURE: recovery_svg(table)}
