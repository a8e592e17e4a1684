"""The discovery page, ``docs/discovery.md``: which circuit-discovery method to trust on tiny transformers.

Built from ``results/discovery.csv`` (:func:`perm_circuits.discovery.benchmark.run_benchmark`,
written by ``scripts/discovery_benchmark.py``) and ``docs/templates/discovery.md`` by
:func:`discovery_pages`, with one circuit picture per shipped model in ``docs/figures/``
(:func:`perm_circuits.views.circuit_graph.circuit_graph`).  Every number is a placeholder or a
generated table cell; every claim word (``recovers`` / ``does not recover``, ``reproduced`` / ``not
reproduced``, ``matches`` / ``covers`` / ``misses``) is computed here by the rules :func:`recovers`,
:func:`flip_word` and :func:`coverage_word`, which the page's test re-derives from the table.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from perm_circuits.discovery.benchmark import DEFAULT_HOWS, DEFAULT_METHODS, ORACLE_BEST, TRAINED
from perm_circuits.discovery.scoring import edge_components
from perm_circuits.pages.render import format_value, render
from perm_circuits.views.circuit_graph import circuit_graph
from perm_circuits.views.svg_charts import PALETTE, Series, svg_line_chart

__all__ = [
    "DESCRIBED",
    "DISCOVERY_CURVES",
    "DISCOVERY_FIGURES",
    "DISCOVERY_FULL",
    "DISCOVERY_PAGE",
    "DISCOVERY_RECALL",
    "DISCOVERY_STRUCTURAL",
    "DISCOVERY_TABLE",
    "DISCOVERY_TEMPLATE",
    "PAPER",
    "coverage_word",
    "curve_figure_path",
    "curves_svg",
    "discovery_numbers",
    "discovery_pages",
    "flip_word",
    "full_numbers",
    "lean_vs_full",
    "recall_numbers",
    "recovers",
    "regret_by_size",
    "truth_moved",
]

DISCOVERY_TABLE = Path("results/discovery.csv")
DISCOVERY_TEMPLATE = Path("docs/templates/discovery.md")
DISCOVERY_PAGE = Path("docs/discovery.md")
DISCOVERY_FIGURES = Path("docs/figures")
DISCOVERY_CURVES = Path("results/discovery_curves.csv")
DISCOVERY_RECALL = Path("results/discovery_recall.csv")
DISCOVERY_FULL = Path("results/discovery_full.csv")
DISCOVERY_STRUCTURAL = {DISCOVERY_TABLE: Path("results/discovery_structural.csv"),
                        DISCOVERY_FULL: Path("results/discovery_full_structural.csv")}
"""Each table as it was when scored against the structural truths (before ``scripts/discovery_benchmark.py
--rescore`` and ``--refresh``): what moved is computed against it."""

METHOD_ORDER = DEFAULT_METHODS
SHIPPED = TRAINED

DESCRIBED = {
    "d16h1": ({"L0H0", "L0MLP"}, frozenset(), "results page, section 5: the head and the MLP at the last position"),
    "d32h1": ({"L0H0", "L0MLP"}, frozenset(), "results page, section 5: the head and the MLP at the last position"),
    "d32h2": ({"L0H0", "L0H1", "L0MLP"}, frozenset(),
              "results page, section 5: recall circuit L0H0, L0H1, L0MLP (elimination: L0H1, L0MLP)"),
    "d16h1l2-any": ({"L0H0", "L0MLP", "L1H0", "L1MLP"},
                    frozenset({"L0H0->L0MLP", "L0MLP->L1H0.q", "L0H0->L1H0.v", "L1H0->L1MLP", "L1MLP->logits"}),
                    "general recall page, steps 1-4: L0H0 matches, MLP0 feeds L1H0's query, L0H0 feeds its value, "
                    "MLP1 reads L1H0 and writes the answer; no K-composition"),
}
"""Per shipped model: the components and the edges the docs describe for its circuit, and where."""

ELIMINATION_EDGES = frozenset({"embed->L1H1.v", "L1H1->logits"})
"""The weight-built induction model's elimination-head edges (its head ``L1H1``)."""

PAPER = {
    "acdc_zero_auc": 1.0,
}
"""Published numbers quoted on the page: ACDC's edge-level ROC AUC on both tracr tasks under zero
ablation (Conmy et al. 2023, appendix Table 3, loss metric)."""


def key(name: str) -> str:
    """A placeholder-safe key part: ``tracr:frac_prevs`` -> ``tracr_frac_prevs``."""
    return name.replace(":", "_")


def recovers(exact_rate: float, auc: float) -> str:
    """The claim word for a method on a model: ``recovers`` when its chosen circuit equals the truth in at
    least half the seeds; ``ranks the true edges first but does not choose exactly`` when it does not
    but its mean ROC AUC is at least 0.9; else ``does not recover``."""
    if exact_rate >= 0.5:
        return "recovers"
    if not math.isnan(auc) and auc >= 0.9:
        return "ranks the true edges first but does not choose exactly"
    return "does not recover"


def flip_word(zero_claim: str, resample_claim: str) -> str:
    """Miller et al.'s mode flip is ``reproduced`` when a method does not recover the zero-ablation truth
    under zero ablation but recovers the resample truth under resample ablation; ``not reproduced``
    otherwise."""
    return "reproduced" if zero_claim != "recovers" and resample_claim == "recovers" else "not reproduced"


def coverage_word(covered: float, extra: int) -> str:
    """``matches`` (every described part found, nothing else), ``covers`` (every described part and more),
    else ``misses part of``."""
    if covered >= 1.0:
        return "matches" if extra == 0 else "covers"
    return "misses part of"


def _found(circuits: pd.Series) -> str:
    """Every component in any of ``circuits`` (space-separated edge lists), sorted, or ``none``."""
    return ", ".join(sorted(set().union(*[edge_components(str(c).split()) for c in circuits.fillna("")]))) or "none"


def _coverage(described: set[str], circuits: pd.Series) -> dict[str, object]:
    """``circuits`` against the ``described`` components: ``found`` (:func:`_found`), ``covered`` (mean share
    of the described components in a circuit), ``extra`` (most components beyond them) and ``claim``."""
    parts = [edge_components(str(c).split()) for c in circuits.fillna("")]
    covered = sum(len(described & f) / len(described) for f in parts) / len(parts)
    extra = max(len(f - described) for f in parts)
    return {"found": _found(circuits), "covered": covered, "extra": extra, "claim": coverage_word(covered, extra)}


def _stat(values: pd.Series) -> tuple[float, float, float]:
    values = values.astype(float).dropna()
    if values.empty:
        return math.nan, math.nan, math.nan
    return float(values.mean()), float(values.min()), float(values.max())


def _cell(values: pd.Series, fmt: str = "f2") -> str:
    mean, low, high = _stat(values)
    if math.isnan(mean):
        return "n/a"
    if low == high:
        return format_value(mean, fmt)
    return f"{format_value(mean, fmt)} ({format_value(low, fmt)}-{format_value(high, fmt)})"


def _summary_block(table: pd.DataFrame, truth: str) -> str:
    part = table[table.truth == truth]
    hows = [h for h in DEFAULT_HOWS if h in set(part.how)]
    lines = ["| method | " + " | ".join(f"{h}: ROC AUC / PR AUC" for h in hows)
             + " | recall / precision (edges) | exact (edges / heads) | faithfulness area | oracle regret "
             "| wall time (s) | forward passes |",
             "|---|" + "---|" * len(hows) + "---|---|---|---|---|---|"]
    for method in [m for m in METHOD_ORDER if m in set(part.method)]:
        rows = part[part.method == method]
        cells = [f"{_cell(rows[rows.how == h].roc_auc)} / {_cell(rows[rows.how == h].pr_auc)}" for h in hows]
        lines.append(
            f"| {method} | " + " | ".join(cells)
            + f" | {_cell(rows.recall)} / {_cell(rows.precision)}"
            + f" | {format_value(rows.exact.astype(float).mean(), 'pct0')} / "
              f"{format_value(rows.exact_heads.astype(float).mean(), 'pct0')}"
            + f" | {_cell(rows.faith_area)} | {_cell(rows.oracle_regret)} | {_cell(rows.wall_time, 'f1')}"
            + f" | {format_value(float(rows.n_forward.mean()), 'f0')} |"
        )
    return "\n".join(lines) + "\n"


def _detail_block(table: pd.DataFrame) -> str:
    lines = ["| model | mode | truth (modes) | true edges | method | ROC AUC | PR AUC | recall | precision | exact "
             "| recall / precision (heads) | edges chosen | faithfulness | faithfulness area | oracle regret "
             "| oracle search |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, how), rows in table.groupby(["model", "how"], sort=False):
        for method in [m for m in METHOD_ORDER if m in set(rows.method)]:
            r = rows[rows.method == method]
            search = str(r.oracle_search.fillna("").iloc[0]) or "no oracle (graph too large)"
            lines.append(
                f"| {model} | {how} | {r.truth.iloc[0]} ({r.truth_modes.iloc[0]}) | {_cell(r.n_true, 'f0')} "
                f"| {method} | {_cell(r.roc_auc)} | {_cell(r.pr_auc)} | {_cell(r.recall)} | {_cell(r.precision)} "
                f"| {format_value(r.exact.astype(float).mean(), 'pct0')} "
                f"| {_cell(r.recall_heads)} / {_cell(r.precision_heads)} | {_cell(r.n_chosen, 'f1')} "
                f"| {_cell(r.faithfulness)} | {_cell(r.faith_area)} | {_cell(r.oracle_regret)} | {search} |"
            )
    return "\n".join(lines) + "\n"


def discovery_numbers(table: pd.DataFrame) -> dict[str, object]:
    """The page's numbers and claim words from the benchmark table (keys in the template)."""
    numbers: dict[str, object] = {
        "settings.n": int(table.n.iloc[0]),
        "settings.seeds": len(set(table.seed)),
        "settings.rows": len(table),
        "settings.models": ", ".join(dict.fromkeys(table.model)),
        "paper.acdc_zero_auc": PAPER["acdc_zero_auc"],
    }
    for (model, how, method), rows in table.groupby(["model", "how", "method"]):
        p = f"{key(model)}.{how}.{method}."
        for column in ("roc_auc", "pr_auc", "recall", "precision", "faith_area", "oracle_regret", "wall_time"):
            mean, low, high = _stat(rows[column])
            numbers.update({p + column: mean, p + column + "_min": low, p + column + "_max": high})
        numbers[p + "exact"] = float(rows.exact.astype(float).mean())
        numbers[p + "n_forward"] = float(rows.n_forward.mean())
        numbers[p + "claim"] = recovers(numbers[p + "exact"], numbers[p + "roc_auc"])
        numbers[p + "n_true"] = float(rows.n_true.mean())
    for (model, how), rows in table[table.truth == "constructed"].groupby(["model", "how"]):
        seeds = rows.drop_duplicates("seed")
        numbers[f"{key(model)}.{how}.idle_runs"] = sum(bool(_edge_set(x)) for x in seeds.get("idle_edges", []))
        oracle = rows[rows.method == "exhaustive_oracle"]
        if len(oracle):
            numbers[f"{key(model)}.{how}.oracle.is_truth"] = sum(
                _edge_set(c) == _edge_set(t) for c, t in zip(oracle.circuit, oracle.true_edges)) / len(oracle)
    for method in ("acdc", "mask_pruning"):
        zero = numbers.get(f"tracr_frac_prevs.zero.{method}.claim")
        resample = numbers.get(f"tracr_frac_prevs.resample.{method}.claim")
        if zero is not None and resample is not None:
            numbers[f"miller.{method}"] = flip_word(str(zero), str(resample))
    for (model, how), rows in table[table.method == "exhaustive_oracle"].groupby(["model", "how"]):
        searches = rows.oracle_search.fillna("").astype(str)
        reached = not any("target not reached" in x for x in searches)
        numbers[f"{key(model)}.{how}.oracle.reached"] = "reached" if reached else "did not reach"
        numbers[f"{key(model)}.{how}.oracle.search"] = searches.iloc[0].split(";")[0]
        numbers[f"{key(model)}.{how}.oracle.faithfulness"] = float(rows.faithfulness.mean())
        numbers[f"{key(model)}.{how}.oracle.size"] = float(rows.n_chosen.mean())
        truths = [set(str(t).split()) - ELIMINATION_EDGES for t in rows.true_edges]
        numbers[f"{key(model)}.{how}.oracle.minus_elimination"] = sum(
            set(str(c).split()) == t for c, t in zip(rows.circuit.fillna(""), truths)) / len(rows)
    for model in SHIPPED:
        described, edges, _ = DESCRIBED[model]
        for how in DEFAULT_HOWS:
            rows = table[(table.model == model) & (table.how == how) & (table.method == "exhaustive_oracle")]
            if rows.empty:
                continue
            p = f"{key(model)}.{how}.described."
            numbers.update({p + name: value for name, value in _coverage(described, rows.circuit).items()})
            if edges:
                circuits = [set(str(c).split()) for c in rows.circuit.fillna("")]
                numbers[p + "edges_covered"] = sum(len(edges & c) / len(edges) for c in circuits) / len(circuits)
                numbers[p + "k_composition"] = sum("L0H0->L1H0.k" in c for c in circuits) / len(circuits)
    return numbers


def _edge_set(value) -> frozenset:
    return frozenset(value.split()) if isinstance(value, str) else frozenset()


def truth_moved(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per model and mode whose true edges changed in some seed between ``old`` (scored against the
    structural truths) and ``new`` (the functional ones), per method: the runs that changed, the mean
    number of true edges, ROC AUC and exact recovery before and now (means over every seed)."""
    keys = ["model", "how", "seed", "method"]
    both = old.merge(new, on=keys, suffixes=("_old", "_new"))
    rows = []
    for (model, how), part in both.groupby(["model", "how"], sort=False):
        changed = part[[_edge_set(a) != _edge_set(b) for a, b in zip(part.true_edges_old, part.true_edges_new)]]
        if changed.empty:
            continue
        column = next((c for c in ("idle_edges_new", "idle_edges") if c in part), None)  # absent before rescoring
        idle = sorted(set().union(*[_edge_set(x) for x in ([] if column is None else part[column])]))
        for method in [m for m in METHOD_ORDER if m in set(part.method)]:
            r = part[part.method == method]
            rows.append({"model": model, "how": how, "method": method, "runs": len(set(changed.seed)),
                         "seeds": len(r), "n_true_old": float(r.n_true_old.mean()),
                         "n_true_new": float(r.n_true_new.mean()), "idle": " ".join(idle),
                         "auc_old": float(r.roc_auc_old.mean()), "auc_new": float(r.roc_auc_new.mean()),
                         "exact_old": float(r.exact_old.astype(float).mean()),
                         "exact_new": float(r.exact_new.astype(float).mean())})
    return pd.DataFrame(rows, columns=["model", "how", "method", "runs", "seeds", "n_true_old", "n_true_new", "idle",
                                       "auc_old", "auc_new", "exact_old", "exact_new"])


def _moved_block(old: pd.DataFrame, new: pd.DataFrame) -> str:
    moved = truth_moved(old, new)
    lines = ["| model | mode | runs whose truth moved | true edges: structural -> functional | idle edges | method "
             "| ROC AUC: before -> now | exact: before -> now |", "|---|---|---|---|---|---|---|---|"]
    previous = None
    for r in moved.itertuples():
        idle = r.idle.replace(" ", ", ") if (r.model, r.how) != previous else "(as above)"
        previous = (r.model, r.how)
        lines.append(f"| {r.model} | {r.how} | {r.runs} of {r.seeds} | {format_value(r.n_true_old, 'f1')} -> "
                     f"{format_value(r.n_true_new, 'f1')} | {idle} | {r.method} "
                     f"| {format_value(r.auc_old, 'f2')} -> {format_value(r.auc_new, 'f2')} "
                     f"| {format_value(r.exact_old, 'pct0')} -> {format_value(r.exact_new, 'pct0')} |")
    return "\n".join(lines) + "\n"


def _methods_moved_block(old: pd.DataFrame, new: pd.DataFrame) -> str:
    """Per method, pooled over every row: ROC AUC, exact recovery, faithfulness and edges chosen, before -> now."""
    lines = ["| method | ROC AUC: before -> now | exact: before -> now | faithfulness: before -> now "
             "| edges chosen: before -> now |", "|---|---|---|---|---|"]
    for method in [m for m in METHOD_ORDER if m in set(new.method)]:
        a, b = old[old.method == method], new[new.method == method]
        cells = [f"{format_value(float(x.mean()), fmt)} -> {format_value(float(y.mean()), fmt)}"
                 for x, y, fmt in ((a.roc_auc, b.roc_auc, "f2"), (a.exact.astype(float), b.exact.astype(float), "pct0"),
                                   (a.faithfulness, b.faithfulness, "f2"), (a.n_chosen, b.n_chosen, "f1"))]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def moved_numbers(old: pd.DataFrame, new: pd.DataFrame, prefix: str = "moved") -> dict[str, object]:
    """How many runs (model x mode x seed with a constructed truth) had their truth moved, of how many."""
    keys = ["model", "how", "seed"]
    first = lambda t: t[t.truth == "constructed"].drop_duplicates(keys).set_index(keys).true_edges  # noqa: E731
    a, b = first(old), first(new)
    shared = a.index.intersection(b.index)
    changed = sum(_edge_set(a[k]) != _edge_set(b[k]) for k in shared)
    out: dict[str, object] = {f"{prefix}.runs": changed, f"{prefix}.total": len(shared)}
    for r in truth_moved(old, new).itertuples():
        p = f"{prefix}.{key(r.model)}.{r.how}.{r.method}."
        out.update({p + "auc_old": r.auc_old, p + "exact_old": r.exact_old})
    return out


def _figure(table: pd.DataFrame, model: str) -> tuple[Path, str] | None:
    rows = table[(table.model == model) & (table.how == "resample") & (table.method == "exhaustive_oracle")]
    if rows.empty:
        return None
    row = rows.sort_values("seed").iloc[0]
    n_layers, n_heads = {"d16h1": (1, 1), "d32h1": (1, 1), "d32h2": (1, 2), "d16h1l2-any": (2, 1)}[model]
    edges = str(row.circuit).split() if isinstance(row.circuit, str) else []
    drawn = circuit_graph(edges, n_layers=n_layers, n_heads=n_heads, mlp=True,
                          title=f"{model}: oracle circuit, resample ablation (seed {int(row.seed)})")
    return DISCOVERY_FIGURES / f"discovery_{model}.svg", "<?xml version='1.0' encoding='UTF-8'?>\n" + drawn.svg


def regret_by_size(curves: pd.DataFrame) -> pd.DataFrame:
    """The oracle regret at every size the oracle searched: per model, mode, seed and method, the mean
    over ``k = 1 .. K`` of (best faithfulness of any circuit of at most ``k`` edges) minus (the
    method's top-``k`` faithfulness), ``K`` the largest size searched (column ``max_k``)."""
    best = curves[curves.method == ORACLE_BEST]
    rows = []
    for (model, how, seed), oracle in best.groupby(["model", "how", "seed"], sort=False):
        envelope = oracle.set_index("k").faithfulness
        envelope = envelope[(envelope.index >= 1) & (envelope > -math.inf)]
        part = curves[(curves.model == model) & (curves.how == how) & (curves.seed == seed)]
        for method in [m for m in METHOD_ORDER if m in set(part.method)]:
            curve = part[part.method == method].set_index("k").faithfulness.reindex(envelope.index)
            rows.append({"model": model, "how": how, "seed": seed, "method": method, "max_k": int(envelope.index.max()),
                         "regret": float((envelope - curve).mean())})
    return pd.DataFrame(rows, columns=["model", "how", "seed", "method", "max_k", "regret"])


def _regret_block(curves: pd.DataFrame) -> str:
    regret = regret_by_size(curves)
    models = list(dict.fromkeys(regret.model))
    lines = ["| method | " + " | ".join(f"{m} (k = 1-{int(regret[regret.model == m].max_k.iloc[0])})" for m in models)
             + " |", "|---|" + "---|" * len(models)]
    for method in [m for m in METHOD_ORDER if m in set(regret.method)]:
        cells = []
        for model in models:
            value = regret[(regret.model == model) & (regret.method == method)].regret
            cells.append(format_value(float(value.mean()), "f2") if len(value) else "n/a")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def recall_numbers(recall: pd.DataFrame) -> dict[str, object]:
    """Per shipped model and mode, the recall skill's oracle circuit (``results/discovery_recall.csv``)
    against the components the docs describe (:data:`DESCRIBED`): ``found`` (every component in any
    seed's circuit), ``covered`` (mean share of the described components in a seed's circuit),
    ``extra``, ``claim`` (:func:`coverage_word`), ``reached`` (share of seeds reaching faithfulness 0.9)
    and ``size`` (mean edges)."""
    numbers: dict[str, object] = {}
    for (model, how), rows in recall.groupby(["model", "how"], sort=False):
        p = f"{key(model)}.{how}.recall."
        numbers.update({p + name: value for name, value in _coverage(DESCRIBED[model][0], rows.circuit).items()})
        numbers.update({p + "reached": float((~rows.search.str.contains("target not reached")).mean()),
                        p + "size": float(rows.n_chosen.mean()), p + "rows": float(rows.n_rows.mean())})
    return numbers


def _recall_block(recall: pd.DataFrame, numbers: dict[str, object]) -> str:
    hows = [h for h in DEFAULT_HOWS if h in set(recall.how)]
    lines = ["| model | described components | " + " | ".join(f"recall circuit, {h}: components (seeds reaching 0.9, "
                                                              f"mean edges)" for h in hows) + " | verdict |",
             "|---|---|" + "---|" * len(hows) + "---|"]
    for model in [m for m in SHIPPED if m in set(recall.model)]:
        cells = []
        for how in hows:
            p = f"{key(model)}.{how}.recall."
            cells.append(f"{numbers[p + 'found']} ({format_value(numbers[p + 'reached'], 'pct0')}, "
                         f"{format_value(numbers[p + 'size'], 'f1')})")
        verdicts = "; ".join(f"{how}: {numbers[f'{key(model)}.{how}.recall.claim']}" for how in hows)
        lines.append(f"| {model} | {', '.join(sorted(DESCRIBED[model][0]))} | " + " | ".join(cells) + f" | {verdicts} |")
    return "\n".join(lines) + "\n"


def lean_vs_full(table: pd.DataFrame, full: pd.DataFrame, truth: str | None = None) -> pd.DataFrame:
    """Per method, pooled over the models, modes and seeds of the full-size table (those scored against
    ``truth``, ``constructed`` or ``oracle``, when given): mean ROC AUC and exact recovery in the lean
    table (the same models and modes) and in the full-size one, and the change."""
    if truth is not None:
        full = full[full.truth == truth]
    keys = set(zip(full.model, full.how))
    lean = table[[(m, h) in keys for m, h in zip(table.model, table.how)]]
    rows = []
    for method in [m for m in METHOD_ORDER if m in set(full.method)]:
        a, b = lean[lean.method == method], full[full.method == method]
        rows.append({"method": method, "lean_auc": float(a.roc_auc.mean()), "full_auc": float(b.roc_auc.mean()),
                     "lean_exact": float(a.exact.astype(float).mean()), "full_exact": float(b.exact.astype(float).mean())})
    out = pd.DataFrame(rows, columns=["method", "lean_auc", "full_auc", "lean_exact", "full_exact"])
    return out.assign(auc_change=out.full_auc - out.lean_auc)


def _full_block(table: pd.DataFrame, full: pd.DataFrame) -> str:
    lines = []
    for truth, label in (("constructed", "against the constructed truths"), ("oracle", "against the oracle's circuit")):
        part = full[full.truth == truth]
        if part.empty:
            continue
        lines += [f"Scored {label} ({', '.join(dict.fromkeys(part.model))}):", "",
                  "| method | ROC AUC: lean | ROC AUC: full size | exact: lean | exact: full size |",
                  "|---|---|---|---|---|"]
        for r in lean_vs_full(table, full, truth).itertuples():
            lines.append(f"| {r.method} | {format_value(r.lean_auc, 'f2')} | {format_value(r.full_auc, 'f2')} "
                         f"| {format_value(r.lean_exact, 'pct0')} | {format_value(r.full_exact, 'pct0')} |")
        lines.append("")
    lines += ["| model | mode | oracle's circuit size: lean | full size | its components: lean | full size |",
              "|---|---|---|---|---|---|"]
    for (model, how), rows in full[full.method == "exhaustive_oracle"].groupby(["model", "how"], sort=False):
        lean = table[(table.model == model) & (table.how == how) & (table.method == "exhaustive_oracle")]
        lines.append(f"| {model} | {how} | {_cell(lean.n_chosen, 'f1')} | {_cell(rows.n_chosen, 'f1')} "
                     f"| {_found(lean.circuit)} | {_found(rows.circuit)} |")
    return "\n".join(lines) + "\n"


def full_numbers(table: pd.DataFrame, full: pd.DataFrame) -> dict[str, object]:
    """The page's numbers about the full-size run: its size and the largest change of a method's pooled
    ROC AUC, against either kind of truth."""
    compare = pd.concat([lean_vs_full(table, full, t).assign(truth=t) for t in dict.fromkeys(full.truth)],
                        ignore_index=True)
    top = compare.loc[compare.auc_change.abs().idxmax()]
    return {"full.n": int(full.n.iloc[0]), "full.seeds": len(set(full.seed)), "full.rows": len(full),
            "full.models": ", ".join(dict.fromkeys(full.model)), "full.max_change": float(abs(top.auc_change)),
            "full.max_change_method": str(top.method), "full.max_change_truth": str(top.truth)}


def curve_figure_path(model: str) -> Path:
    """Where ``model``'s faithfulness curves go: ``docs/figures/discovery_curves_<model>.svg``."""
    return DISCOVERY_FIGURES / f"discovery_curves_{key(model)}.svg"


def curves_svg(curves: pd.DataFrame, model: str) -> str:
    """``model``'s faithfulness-against-edges-kept curves (``results/discovery_curves.csv``), one line per
    method in the method order (the oracle's ranking dashed) and, in black, the best faithfulness any
    circuit of at most ``k`` edges reaches, where the oracle searched; for the table's first mode and
    seed of that model."""
    rows = curves[curves.model == model]
    if rows.empty:
        raise ValueError(f"no curves for model {model!r}; the table has {sorted(set(curves.model))}")
    how, seed = rows.how.iloc[0], int(rows.seed.iloc[0])
    rows = rows[(rows.how == how) & (rows.seed == seed)]
    series = []
    for index, method in enumerate(m for m in METHOD_ORDER if m in set(rows.method)):
        curve = rows[rows.method == method].sort_values("k")
        series.append(Series(method, curve.k.tolist(), curve.faithfulness.tolist(), color=PALETTE[index % len(PALETTE)],
                             dash=method == "exhaustive_oracle"))
    best = rows[(rows.method == ORACLE_BEST) & (rows.faithfulness > -math.inf)].sort_values("k")
    if not best.empty:
        series.append(Series("best possible (oracle)", best.k.tolist(), best.faithfulness.tolist(), color="#000000",
                             dash=True))
    values = rows.faithfulness[rows.faithfulness > -math.inf]
    low = min(0.0, math.floor(float(values.min()) * 10) / 10)
    span = math.ceil((max(1.0, float(values.max())) - low) / 0.4 - 1e-9) * 0.4  # ticks at one-decimal steps
    high = round(low + span, 6)
    n_edges = int(rows.n_edges_graph.iloc[0])
    step = next(s for s in (1, 2, 5, 10, 20) if n_edges / s <= 10)
    return svg_line_chart(series, title=f"{model}: faithfulness of each method's top k edges ({how}, seed {seed})",
                          x_label=f"edges kept, k (of {n_edges})", y_label="faithfulness", y_range=(low, high),
                          width=760, x_ticks=list(range(0, n_edges + 1, step)))


def discovery_pages(root: str | os.PathLike) -> dict[Path, str]:
    """``{relative path: text}`` of the discovery page and its figures; empty when the table is absent."""
    root = Path(root)
    if not (root / DISCOVERY_TABLE).is_file() or not (root / DISCOVERY_TEMPLATE).is_file():
        return {}
    table = pd.read_csv(root / DISCOVERY_TABLE)
    numbers = discovery_numbers(table)
    curves = pd.read_csv(root / DISCOVERY_CURVES) if (root / DISCOVERY_CURVES).is_file() else None
    recall = pd.read_csv(root / DISCOVERY_RECALL) if (root / DISCOVERY_RECALL).is_file() else None
    if recall is not None:
        numbers.update(recall_numbers(recall))
    full = pd.read_csv(root / DISCOVERY_FULL) if (root / DISCOVERY_FULL).is_file() else None
    if full is not None:
        numbers.update(full_numbers(table, full))
    before = {path: pd.read_csv(root / old) for path, old in DISCOVERY_STRUCTURAL.items() if (root / old).is_file()}
    moved_blocks = {"truth_moved": "", "truth_moved_full": "", "methods_moved": ""}
    if DISCOVERY_TABLE in before:
        numbers.update(moved_numbers(before[DISCOVERY_TABLE], table))
        moved_blocks["truth_moved"] = _moved_block(before[DISCOVERY_TABLE], table)
        moved_blocks["methods_moved"] = _methods_moved_block(before[DISCOVERY_TABLE], table)
    if full is not None and DISCOVERY_FULL in before:
        numbers.update(moved_numbers(before[DISCOVERY_FULL], full, "moved_full"))
        moved_blocks["truth_moved_full"] = _moved_block(before[DISCOVERY_FULL], full)
    blocks = {
        "summary_constructed": _summary_block(table, "constructed"),
        "summary_oracle": _summary_block(table, "oracle"),
        "detail": _detail_block(table),
        "regret_by_size": "" if curves is None else _regret_block(curves),
        "recall_circuits": "" if recall is None else _recall_block(recall, numbers),
        "lean_vs_full": "" if full is None else _full_block(table, full),
        **moved_blocks,
    }
    out = {DISCOVERY_PAGE: render((root / DISCOVERY_TEMPLATE).read_text(encoding="utf-8"), numbers, blocks)}
    for model in SHIPPED:
        figure = _figure(table, model)
        if figure is not None:
            out[figure[0]] = figure[1]
    if curves is not None:
        for model in dict.fromkeys(curves.model):
            out[curve_figure_path(model)] = curves_svg(curves, model)
    return out
