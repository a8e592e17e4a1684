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
from functools import partial
from html import escape
from pathlib import Path

import pandas as pd

from perm_circuits.pages.how_circuit_figures import best_hypothesis, circuit_figures, circuit_labels, figure_path

__all__ = ["GOAL", "HOW_FIGURE", "HOW_PAGE", "HOW_TABLE", "MIN_GAP", "MODELS", "NEURON_TABLE", "OURS", "RETAIN",
           "RETENTION_TABLE", "SKILLS", "STEPS_TABLE", "best_ours", "claim_losses", "how_pages", "informative",
           "load_hypotheses", "load_neurons", "load_steps", "neuron_summary", "recovery_svg", "verdict", "whole"]

HOW_TABLE = Path("results/hypotheses.csv")
HOW_PAGE = Path("docs/how_models_compute.md")
HOW_FIGURE = Path("docs/figures/how_models_compute_recovery.svg")
STEPS_TABLE = Path("results/hypotheses_steps.csv")
NEURON_TABLE = Path("results/neuron_rules.csv")
RETENTION_TABLE = Path("results/neuron_retention.csv")
RETAIN = 0.99  # the replacement MLP must keep this share of elimination and recall accuracy
MODELS = ("d16h1", "d32h1", "d32h2", "d16h1l2-any")
SKILLS = ("elimination", "recall", "recall_any")
OURS = ("shortcut", "gate", "query", "shortcut_x5", "query_slot")
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


def load_steps(root: str | os.PathLike) -> pd.DataFrame:
    """The committed per-step elimination table: like :func:`load_hypotheses`'s, with ``step`` (2..5)."""
    return pd.read_csv(Path(root) / STEPS_TABLE, keep_default_na=False, na_values=[""])


def load_neurons(root: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The committed neuron rule table (one row per model, layer, neuron, query position) and the
    replacement's retention table (one row per model, variant, metric)."""
    read = partial(pd.read_csv, keep_default_na=False, na_values=[""])
    return read(Path(root) / NEURON_TABLE), read(Path(root) / RETENTION_TABLE)


def neuron_summary(neurons: pd.DataFrame, model: str) -> dict:
    """Counts behind a model's neuron paragraph: rules in all, explained, the last step's unexplained
    output-norm share per layer, and the median held-out R^2 of the last step's explained rules."""
    rows = neurons[neurons["model"] == model]
    last = rows[rows["position"] == rows["position"].max()]
    explained = rows[rows["explained"]]
    return {
        "neurons": int(last.shape[0]),
        "rules": int(rows.shape[0]),
        "y_rules": int((rows["position"] % 2 == 1).sum()),
        "explained": int(explained.shape[0]),
        "last_explained": int(last["explained"].sum()),
        "unexplained_share": {int(layer): float(g.loc[~g["explained"], "share"].sum())
                              for layer, g in last.groupby("layer")},
        "median_r2_test": float(last.loc[last["explained"], "r2_test"].median()),
        "threshold": float(rows["threshold"].iloc[0]),
    }


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


_VARIANT_TEXT = {
    "rule": "rules alone (every neuron on its best rule)",
    "keep": "rules, unexplained neurons kept",
    "mean": "rules, unexplained neurons mean-ablated",
}
_METRICS = ("elimination_accuracy", "recall_accuracy", "steps_1_4_agreement")


def _pct(x: float) -> str:
    return f"{100 * float(x):.1f}%"


def _steps_block(steps: pd.DataFrame, model: str) -> str:
    lines = ["| step | hypothesis | recovery | 95% interval | randomised | claims that lose (1 - recovery alone) |",
             "|---|---|---|---|---|---|"]
    rows = steps[(steps["model"] == model) & (steps["component"] == "all")]
    for r in rows.sort_values(["step"], kind="stable").to_dict("records"):
        alone = steps[(steps["model"] == model) & (steps["step"] == r["step"]) & (steps["hypothesis"] == r["hypothesis"])
                      & (steps["component"] != "all")]
        losses = sorted(((str(c["component"]), 1.0 - float(c["recovery"])) for c in alone.to_dict("records")),
                        key=lambda c: -c[1])
        cell = "; ".join(f"`{c}`: {_r(loss)}" for c, loss in losses if abs(loss) >= LOSS_SHOWN) or "none"
        recovery = _r(r["recovery"]) if informative(r) else f"{_r(r['recovery'])} (not meaningful)"
        lines.append(f"| {int(r['step'])} | {r['hypothesis']} | {recovery} | {_interval(r)} | {_r(r['random_metric'])} "
                     f"| {cell} |")
    return "\n".join(lines)


def _retention_cells(retention: pd.DataFrame, model: str, variant: str) -> list[str]:
    rows = retention[(retention["model"] == model) & (retention["variant"] == variant)].set_index("metric")
    return [f"{_r(rows.loc[m, 'replaced_metric'])} / {_r(rows.loc[m, 'model_metric'])} = {_pct(rows.loc[m, 'retention'])}"
            if m in rows.index else "-" for m in _METRICS]


def keeps(retention: pd.DataFrame, model: str, variant: str) -> bool:
    """Whether a replacement keeps at least :data:`RETAIN` of both elimination and recall accuracy."""
    rows = retention[(retention["model"] == model) & (retention["variant"] == variant)].set_index("metric")
    return all(float(rows.loc[m, "retention"]) >= RETAIN for m in _METRICS[:2])


def _neurons_block(neurons: pd.DataFrame, retention: pd.DataFrame, model: str) -> str:
    info = neuron_summary(neurons, model)
    shares = ", ".join(f"layer {layer}: {_pct(share)}" for layer, share in info["unexplained_share"].items())
    where = " and, below the last layer, at each y position" if info["y_rules"] else ""
    lines = [f"Each of the {info['neurons']} MLP neurons is fitted at each step's query position{where} ({info['rules']} rules); "
             f"{info['explained']} rules explain their neuron (R^2 >= {info['threshold']:g} on the exhaustive train set), "
             f"{info['last_explained']} of {info['neurons']} at the last step. The unexplained neurons carry this much of "
             f"the MLP's output norm at the last step: {shares}. The last step's explained rules have a median R^2 of "
             f"{_r(info['median_r2_test'])} on the exhaustive test set (permutations they were not fitted on).", "",
             "| replacement | elimination accuracy | recall accuracy | agreement with the model at steps 1-4 "
             f"| keeps >= {RETAIN:.0%} |", "|---|---|---|---|---|"]
    for variant in ("rule", "keep", "mean"):
        word = "yes" if keeps(retention, model, variant) else "**no**"
        lines.append(f"| {_VARIANT_TEXT[variant]} | " + " | ".join(_retention_cells(retention, model, variant)) + f" | {word} |")
    rows = neurons[neurons["model"] == model]
    last = rows[rows["position"] == rows["position"].max()].sort_values(["layer", "share"], ascending=[True, False],
                                                                         kind="stable")
    lines += ["", "| step | position | rules explained | unexplained share of the output norm (per layer) |",
              "|---|---|---|---|"]
    for position, g in rows.groupby("position"):
        where = "query" if position % 2 == 0 else "y"
        per_layer = ", ".join(f"layer {layer}: {_pct(h.loc[~h['explained'], 'share'].sum())}" for layer, h in g.groupby("layer"))
        lines.append(f"| {int(g['step'].iloc[0])} | {int(position)} ({where}) | {int(g['explained'].sum())} / {len(g)} "
                     f"| {per_layer} |")
    lines += ["", f"<details markdown=\"1\"><summary>Neuron rules at the last step ({model}, {len(last)} neurons)</summary>", "",
              "| layer | neuron | rule | table cells | R^2 fit | R^2 held out | output share | explained |",
              "|---|---|---|---|---|---|---|---|"]
    for r in last.to_dict("records"):
        lines.append(f"| {int(r['layer'])} | {int(r['neuron'])} | {r['rule']} | {int(r['cells'])} | {_r(r['r2'])} "
                     f"| {_r(r['r2_test'])} | {_pct(r['share'])} | {'yes' if r['explained'] else 'no'} |")
    lines += ["", "</details>"]
    return "\n".join(lines)


def _retention_overview(retention: pd.DataFrame) -> str:
    lines = ["| model | rules alone: elimination, recall | unexplained kept: elimination, recall "
             "| unexplained mean-ablated: elimination, recall |", "|---|---|---|---|"]
    for model in MODELS:
        cells = []
        for variant in ("rule", "keep", "mean"):
            rows = retention[(retention["model"] == model) & (retention["variant"] == variant)].set_index("metric")
            cells.append(", ".join(_pct(rows.loc[m, "retention"]) for m in _METRICS[:2]))
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _reads(neurons: pd.DataFrame, model: str, feature: str) -> tuple[int, int]:
    """(neurons at the last step whose rule reads ``feature``, neurons at the last step) of one model."""
    rows = neurons[neurons["model"] == model]
    last = rows[rows["position"] == rows["position"].max()]
    return int(last["features"].fillna("").str.split("; ").apply(lambda f: feature in f).sum()), int(len(last))


def _paper_block(neurons: pd.DataFrame, retention: pd.DataFrame) -> str:
    d32h2, d16h1 = neuron_summary(neurons, "d32h2"), neuron_summary(neurons, "d16h1")
    rule = retention[retention["variant"] == "rule"].set_index(["model", "metric"])["retention"]
    y1, total = _reads(neurons, "d32h2", "y1")
    return f"""**Chan et al. 2022** score their hypotheses on other models and tasks (among them an induction model and a
parenthesis balancer) under their own metrics: nothing of theirs is comparable to a number here (different task,
model and metric), and none is quoted.

**The seed study** makes no causal-scrubbing or replacement claim with a number; its story is scored above as the
hypothesis **study**. Three of its qualitative claims can be set against our numbers:

| the seed study says | ours |
|---|---|
| at V = 5 the 120 permutations outnumber d_ff = 64, so neurons cannot hardcode each rule and the model learns a compact in-context algorithm | in d32h2 (the study's d = 32, 2 heads, d_ff = 64) every neuron's rule reads at most three features of the context, no feature of the library names a permutation, and the last step's explained rules, fitted on the training permutations, keep a median R^2 of {_r(d32h2["median_r2_test"])} on the test permutations; the rules alone keep {_pct(rule[("d32h2", "elimination_accuracy")])} of elimination and {_pct(rule[("d32h2", "recall_accuracy")])} of recall accuracy |
| the FFN completes recall, "strongly implied" but not certain: it recognises the repeated x1 and returns y1 | at d32h2's last step {y1} of its {total} neurons read y1 in their rule; with the MLP replaced by the rules alone, recall accuracy is kept at {_pct(rule[("d32h2", "recall_accuracy")])} |
| d16h1 fails at recall: d_model 16 lacks the dimensions to store the bindings | the shipped d16h1 recalls (see [results](results.md)); {d16h1["last_explained"]} of its {d16h1["neurons"]} neurons are explained at the last step and its rules alone keep {_pct(rule[("d16h1", "recall_accuracy")])} of recall accuracy |
"""


def _model_section(table: pd.DataFrame, model: str, steps: pd.DataFrame, neurons: pd.DataFrame,
                   retention: pd.DataFrame) -> str:
    n = int(table[table["model"] == model]["n_rows"].iloc[0])
    return f"""## {model}

{_ALGORITHM[model]}

{_circuit_block(table, model)}

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

### Elimination step by step

The same hypotheses written at step k's query position (position 2(k - 1)), scrubbed on {n:,} sequences without a
repeat. The metric is elimination itself: the model's answer is a value not yet used (at step 5 this is the
accuracy above; step 1 is not scored, since every value is unused there).

{_steps_block(steps, model)}

### Neurons explained

{_neurons_block(neurons, retention, model)}
"""


def _circuit_block(table: pd.DataFrame, model: str) -> str:
    hypothesis, recovery = best_hypothesis(table, model, MIN_GAP)
    labels = "; ".join(f"{node}: {features}" for node, features in circuit_labels(table, model, hypothesis).items())
    return (f"The circuit under the best hypothesis, *{hypothesis}* (mean recovery {_r(recovery)} over the skills "
            f"where recovery means anything), each component labelled with the features it carries ({labels}); "
            f"components it does not name are drawn faint:\n\n"
            f"![{model}: the circuit of hypothesis {hypothesis} with feature labels](figures/{figure_path(model).name})")


_COLORS = {"study": "#868e96", "shortcut": "#1c7ed6", "gate": "#e8590c", "query": "#2f9e44", "shortcut_x5": "#7048e8",
           "query_slot": "#0c8599"}
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
    steps = load_steps(root)
    neurons, retention = load_neurons(root)
    sections = "\n".join(_model_section(table, model, steps, neurons, retention) for model in MODELS)
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

## Neurons explained: the replacement MLP

Every MLP neuron's activation (after the ReLU) at every step's query position (and, in the two-layer model, each
layer-0 neuron at every y position, which layer 1 reads) is fitted as a lookup table over at most three features,
chosen greedily from a named library of the position (the query x, the used y values, "value v is
unused", whether the query repeats x1, the y bound to the query, the matched slot, the answer set, the previous
pair, each earlier x_j and y_j; at a y position: the y itself, its x, the y values used before it;
`perm_circuits.analysis.study.neuron_rules`, `scripts/neuron_rules.py`). In the two-layer model each layer-1
neuron at the last step reads the answer set (the recalled y, else the set of unused values) first and two more
features greedily: left to the greedy choice, those neurons read the matched slot, y1 and y2 (the most variance),
which name the recalled y only when the match is in the first two pairs, and the rules alone kept 68.5% of recall.
The rules are fitted on the
exhaustive train set: every order of every training permutation, with and without the model's repeats. A rule
explains its neuron when its R^2 there is at least {neuron_summary(neurons, MODELS[0])["threshold"]:g}; the rule's
name lists the features it reads. The replacement MLP sets each neuron to its rule's table value and sends it through
the model's own W_out and b_out; it is scored on the exhaustive test set (every order of every test permutation,
without a repeat for elimination, with each repeat the model was trained on for recall), as the share of the model's
own accuracy kept. Three variants show what the rules alone do: every neuron on its best rule; unexplained neurons
kept at their true activation; unexplained neurons mean-ablated. Per model, the rules and the step-by-step numbers
are in each model's section below (the rule table collapsed).

{_retention_overview(retention)}

{sections}
## Not measured yet

The stricter resampling of causal scrubbing (`unnamed="random"`) is not tabulated. The last layer's neurons at the
y positions are not fitted (no scored output reads them).

## Paper vs ours

{_paper_block(neurons, retention)}
"""
    return {HOW_PAGE: text, HOW_FIGURE: recovery_svg(table), **circuit_figures(table, MODELS, MIN_GAP)}
