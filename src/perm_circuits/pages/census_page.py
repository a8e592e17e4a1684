"""The census page, ``docs/census.md``: how often each mechanism appears across seeds, and when it forms.

Rendered by :func:`census_pages` from ``results/census_fingerprints.csv`` (``scripts/census_fingerprints.py``
over the runs of ``scripts/census_train.py``), with one formation figure per configuration in
``docs/figures/``, and its section on the ablation reference from ``results/claims_by_reference.csv``
(``scripts/claims_by_reference.py``).  Every number on the page is computed here from the tables;
``tests/census`` re-derives them.  Classes follow the stated rule of :mod:`perm_circuits.census.classes`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from perm_circuits.analysis.interventions.core import HOWS
from perm_circuits.census.classes import CLASS_ORDER, classify, mechanism_class, wilson_interval
from perm_circuits.census.fingerprint import CIRCUIT_HOWS, REFERENCES
from perm_circuits.views.svg_charts import Series, svg_line_chart

__all__ = ["CENSUS_FIGURES", "CENSUS_PAGE", "CENSUS_TABLE", "CLAIMS_TABLE", "PLANNED_SEEDS", "ROLE_REFERENCES",
           "census_pages", "class_counts", "epoch_spread", "final_rows", "formation", "l0h0_by_reference",
           "load_census"]

CENSUS_TABLE = Path("results/census_fingerprints.csv")
CLAIMS_TABLE = Path("results/claims_by_reference.csv")
ROLE_REFERENCES = {"test": "", "skill": "skill_"}
"""The fingerprint's column prefix of the roles, claims and story against each reference."""
CENSUS_PAGE = Path("docs/census.md")
CENSUS_FIGURES = Path("docs/figures")
PLANNED_SEEDS = 20
FINAL_EPOCH = 50


def load_census(root: str | os.PathLike) -> pd.DataFrame:
    """The committed census table with the default class columns (:func:`~perm_circuits.census.classes.classify`)."""
    return classify(pd.read_csv(Path(root) / CENSUS_TABLE, keep_default_na=False, na_values=[""]))


def final_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The census runs at their final epoch (:data:`FINAL_EPOCH`), one row per (config, seed)."""
    return table[(table["source"] == "census") & (table["epoch"] == FINAL_EPOCH)]


def class_counts(rows: pd.DataFrame, column: str = "class") -> pd.DataFrame:
    """Per config and class: ``k`` seeds of ``n``, the share and its 95% Wilson interval."""
    out = []
    for config, group in rows.groupby("config", sort=True):
        n = len(group)
        for name, k in group[column].value_counts().items():
            low, high = wilson_interval(int(k), n)
            out.append({"config": config, column: name, "k": int(k), "n": n, "share": k / n, "low": low, "high": high})
    frame = pd.DataFrame(out, columns=["config", column, "k", "n", "share", "low", "high"])
    order = {name: i for i, name in enumerate(CLASS_ORDER)}
    return frame.sort_values(["config", "k", column], ascending=[True, False, True],
                             key=lambda s: s.map(order) if s.name == column and column == "class" else s).reset_index(drop=True)


def formation(table: pd.DataFrame, config: str) -> pd.DataFrame:
    """Share of the census seeds of ``config`` in each class at each kept epoch (rows: epoch; columns: class;
    plus ``n``, the seeds with that epoch)."""
    rows = table[(table["source"] == "census") & (table["config"] == config)]
    share = pd.crosstab(rows["epoch"], rows["class"], normalize="index")
    share["n"] = rows.groupby("epoch").size()
    return share


def epoch_spread(table: pd.DataFrame, config: str) -> dict[str, float]:
    """The spread of the first epoch at 99% recall over the complete census runs of ``config``:
    ``n`` runs, ``never`` (did not reach it), ``median``, ``q1``, ``q3``, ``min``, ``max``."""
    runs = final_rows(table)
    runs = runs[runs["config"] == config]["epoch_recall_99"].astype(float)
    reached = runs.dropna()
    if reached.empty:
        return {"n": len(runs), "never": len(runs), "median": math.nan, "q1": math.nan, "q3": math.nan,
                "min": math.nan, "max": math.nan}
    return {"n": len(runs), "never": int(runs.isna().sum()), "median": float(reached.median()),
            "q1": float(reached.quantile(0.25)), "q3": float(reached.quantile(0.75)),
            "min": float(reached.min()), "max": float(reached.max())}


def _pct(x: float) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{100 * x:.0f}%"


def _num(x: float) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:g}"


def _status_block(table: pd.DataFrame) -> str:
    census = table[table["source"] == "census"]
    lines = ["| config | runs started | runs complete (50 epochs) | planned |", "|---|---|---|---|"]
    for config, group in census.groupby("config", sort=True):
        started = group["seed"].nunique()
        complete = final_rows(table)
        complete = int((complete["config"] == config).sum())
        lines.append(f"| {config} | {started} | {complete} | {PLANNED_SEEDS} |")
    return "\n".join(lines)


def _counts_block(rows: pd.DataFrame) -> str:
    counts = class_counts(rows)
    if counts.empty:
        return "_No census run has finished its 50 epochs yet._"
    lines = ["| config | class | seeds | share | 95% Wilson interval |", "|---|---|---|---|---|"]
    for r in counts.itertuples(index=False):
        lines.append(f"| {r.config} | {r[1]} | {r.k} / {r.n} | {_pct(r.share)} | [{_pct(r.low)}, {_pct(r.high)}] |")
    return "\n".join(lines)


def _pairs_block(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "_No complete run yet._"
    lines = ["| config | mode | reference | classes (seeds) |", "|---|---|---|---|"]
    records = rows.to_dict("records")
    for config in sorted(rows["config"].unique()):
        group = [r for r in records if r["config"] == config]
        for how in CIRCUIT_HOWS:
            for ref in REFERENCES:
                names = pd.Series([mechanism_class(r, how=how, reference=ref).name for r in group]).value_counts()
                cell = ", ".join(f"{name} {k}" for name, k in sorted(names.items(), key=lambda kv: (-kv[1], kv[0])))
                lines.append(f"| {config} | {how} | {ref} | {cell} |")
    return "\n".join(lines)


def _shipped_block(table: pd.DataFrame) -> str:
    shipped = table[table["source"] == "shipped"]
    finals = final_rows(table)
    lines = ["| model | class (mean, test set) | key | census seeds of that config in that class | duplicate-token head |",
             "|---|---|---|---|---|"]
    for r in shipped.to_dict("records"):
        same = finals[finals["config"] == r["config"]]
        k = int((same["class"] == r["class"]).sum())
        census_cell = f"{k} / {len(same)}" if len(same) else "no complete census run"
        lines.append(f"| {r['config']} | {r['class']} | `{r['class_key']}` | {census_cell} | {r['duplicate_heads']} |")
    return "\n".join(lines)


def _duplicate_block(table: pd.DataFrame) -> str:
    census = table[(table["source"] == "census") & (table["config"].str.contains("h2"))]
    if census.empty:
        return "_No two-head census run yet._"
    lines = ["| config | seed | epochs kept | first kept epoch with a duplicate-token head | at its last kept epoch |",
             "|---|---|---|---|---|"]
    for (config, seed), group in census.groupby(["config", "seed"], sort=True):
        group = group.sort_values("epoch")
        has = group[group["duplicate_heads"] != "-"]
        first = int(has["epoch"].iloc[0]) if len(has) else "never"
        last = group.iloc[-1]
        lines.append(f"| {config} | {seed} | {int(last['epoch'])} | {first} | {last['duplicate_heads']} |")
    return "\n".join(lines)


def _claims_block(rows: pd.DataFrame) -> str:
    claims = sorted(c for c in rows.columns if c.startswith("claim_mean_"))
    if rows.empty or not claims:
        return "_No complete run yet._"
    lines = ["| config | class | claim | reference | status under each mode (seeds) |", "|---|---|---|---|---|"]
    for (config, name), group in rows.groupby(["config", "class"], sort=True):
        for claim in claims:
            claim_name = claim[len("claim_mean_"):]
            for ref, prefix in ROLE_REFERENCES.items():
                cells = []
                for how in HOWS:
                    column = f"{prefix}claim_{how}_{claim_name}"
                    statuses = group[column].dropna().value_counts() if column in group else pd.Series(dtype=int)
                    if len(statuses):
                        cells.append(f"{how}: " + ", ".join(f"{s} {k}" for s, k in sorted(statuses.items())))
                if cells:  # a claim the configuration does not make (d16h1's claims differ from d32h2's) is left out
                    lines.append(f"| {config} | {name} | {claim_name} | {ref} | {'; '.join(cells)} |")
    return "\n".join(lines)


def _carried(rows: pd.DataFrame, column: str) -> str:
    """``"k of n"`` complete runs whose fingerprint has ``column`` (taken after the column was added)."""
    k = int(rows[column].notna().sum()) if column in rows.columns else 0
    return f"{k} of {len(rows)}"


def _hypotheses_block(rows: pd.DataFrame) -> str:
    columns = sorted(c for c in rows.columns if c.startswith("hyp_") and not c.endswith(("_ci_low", "_ci_high")))
    if rows.empty or not columns:
        return "_The committed fingerprints do not carry the hypotheses' recoveries yet._"
    lines = ["| config | class | hypothesis | skill | seeds | median recovery | range |", "|---|---|---|---|---|---|---|"]
    for (config, name), group in rows.groupby(["config", "class"], sort=True):
        for column in columns:
            values = group[column].dropna().astype(float)
            if values.empty:
                continue
            skill, hypothesis = column[len("hyp_"):].split("_", 1)
            lines.append(f"| {config} | {name} | {hypothesis} | {skill} | {len(values)} | {values.median():.2f} | "
                         f"{values.min():.2f}-{values.max():.2f} |")
    return "\n".join(lines)


def load_claims(root: str | os.PathLike) -> pd.DataFrame | None:
    """``results/claims_by_reference.csv`` (:data:`CLAIMS_TABLE`), or None when it is not there."""
    path = Path(root) / CLAIMS_TABLE
    return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.is_file() else None


def l0h0_by_reference(claims: pd.DataFrame, model: str = "d32h2", component: str = "L0H0") -> pd.DataFrame:
    """``component``'s rows of the claims table for ``model``: per reference and mode, its ablated accuracies,
    recall retention and role (the numbers that settle whether recall needs it)."""
    rows = claims[(claims["model"] == model) & (claims["kind"] == "role") & (claims["name"] == component)]
    return rows[["reference", "how", "elimination_accuracy", "recall_accuracy", "recall_retention", "patch_effect",
                 "value"]].reset_index(drop=True)


def _reference_claims_block(claims: pd.DataFrame) -> str:
    rows = claims[claims["kind"] == "claim"]
    hows = list(dict.fromkeys(rows["how"]))
    lines = ["| model | claim | reference | " + " | ".join(hows) + " |", "|---|---|---|" + "---|" * len(hows)]
    changed = []
    for (model, claim), group in rows.groupby(["model", "name"], sort=True):
        by_ref = {}
        for ref in ROLE_REFERENCES:
            cells = group[group["reference"] == ref].set_index("how")["value"]
            by_ref[ref] = [cells.get(h, "-") for h in hows]
            lines.append(f"| {model} | {claim} | {ref} | " + " | ".join(by_ref[ref]) + " |")
        changed += [f"{model} {claim} under {h} ({a} -> {b})" for h, a, b in zip(hows, by_ref["test"], by_ref["skill"])
                    if a != b]
    note = ("Claims whose status changes with the reference (test set -> each skill's own rows): "
            + "; ".join(changed) + ".") if changed else "No claim's status changes with the reference."
    return "\n".join(lines) + "\n\n" + note


def _roles_changed(claims: pd.DataFrame) -> str:
    rows = claims[claims["kind"] == "role"]
    out = []
    for (model, component, how), group in rows.groupby(["model", "name", "how"], sort=True):
        roles = group.set_index("reference")["value"]
        if roles.get("test") != roles.get("skill"):
            out.append(f"{model} {component} under {how} ({roles.get('test')} -> {roles.get('skill')})")
    return ("Roles that change with the reference: " + "; ".join(out) + ".") if out else \
        "No component's role changes with the reference."


def _l0h0_block(claims: pd.DataFrame, table: pd.DataFrame) -> str:
    rows = l0h0_by_reference(claims)
    if rows.empty:
        return "_d32h2 is not in the claims table._"
    lines = ["| reference | mode | elimination | recall | recall retention | patching restores | role |",
             "|---|---|---|---|---|---|---|"]
    for r in rows.itertuples(index=False):
        lines.append(f"| {r.reference} | {r.how} | {100 * r.elimination_accuracy:.1f}% | {100 * r.recall_accuracy:.1f}% | "
                     f"{r.recall_retention:.2f} | {r.patch_effect:.2f} | {r.value} |")
    shipped = table[(table["source"] == "shipped") & (table["config"] == "d32h2")]
    circuits = ""
    if len(shipped):
        record = shipped.iloc[0]
        circuits = ("\n\nThe oracle's recall circuit of the shipped d32h2 (smallest component set keeping "
                    "faithfulness 0.9; census fingerprint): " + "; ".join(
                        f"{how} / {ref}: `{record[f'circuit_recall_{how}_{ref}']}`"
                        for how in CIRCUIT_HOWS for ref in ("test", "skill")) + ".")
    cell = {(r.reference, r.how): r for r in rows.itertuples(index=False)}
    sentence = ""
    if ("test", "mean") in cell and ("skill", "mean") in cell:
        t, k = cell[("test", "mean")], cell[("skill", "mean")]
        sentence = (f"\n\nMean-ablating L0H0 with its mean over the test set leaves recall at "
                    f"{100 * t.recall_accuracy:.1f}%; with its mean over the recall rows themselves, at "
                    f"{100 * k.recall_accuracy:.1f}%.  L0H0 carries \"this query repeats\": the two skills' rows differ in it, "
                    "the rows of one skill do not.  So recall needs L0H0's *difference from the elimination rows*; "
                    "within the recall rows it is constant, and a constant can be ablated away.  Both readings are "
                    "measurements of the same model: against the test set (the findings' convention) L0H0 is "
                    f"needed for recall; against the skill's own rows it is not (recall retention "
                    f"{k.recall_retention:.2f}), and its role stays {k.value!r} only because patching its clean output "
                    f"into a new-query run restores {k.patch_effect:.2f} of recall.")
    return "\n".join(lines) + sentence + circuits


def _spread_block(table: pd.DataFrame) -> str:
    lines = ["| config | complete runs | never at 99% | median epoch | IQR | range | shipped model |", "|---|---|---|---|---|---|---|"]
    shipped = table[table["source"] == "shipped"].set_index("config")
    for config in sorted(table[table["source"] == "census"]["config"].unique()):
        s = epoch_spread(table, config)
        ship = _num(float(shipped.loc[config, "epoch_recall_99"])) if config in shipped.index else "-"
        lines.append(f"| {config} | {s['n']} | {s['never']} | {_num(s['median'])} | {_num(s['q1'])}-{_num(s['q3'])} | "
                     f"{_num(s['min'])}-{_num(s['max'])} | {ship} |")
    twins = []
    for config in sorted(shipped.index):
        twin = table[(table["source"] == "census") & (table["config"] == config) & (table["seed"] == 0)]
        if len(twin):
            twins.append(f"{config}: shipped {_num(float(shipped.loc[config, 'epoch_recall_99']))}, "
                         f"census seed 0 {_num(float(twin['epoch_recall_99'].iloc[-1]))}")
    note = ("\n\nThe same seed and recipe, trained again on this machine (census seed 0) against the shipped "
            "model (seed 0, trained elsewhere), first epoch at 99% recall: " + "; ".join(twins) + ".") if twins else ""
    return "\n".join(lines) + note


def formation_svg(table: pd.DataFrame, config: str) -> str:
    """The formation figure of one configuration: the share of seeds in each class at each kept epoch."""
    share = formation(table, config)
    classes = [c for c in CLASS_ORDER if c in share.columns]
    series = [Series(name, list(map(float, share.index)), [float(v) for v in share[name]]) for name in classes]
    return svg_line_chart(series, title=f"{config}: share of seeds in each mechanism class", x_label="epoch (log)",
                          y_label="share of seeds", x_log=True, y_range=(0.0, 1.0), y_percent=True,
                          x_ticks=[1, 2, 4, 8, 16, 32, 50])


def census_pages(root: str | os.PathLike) -> dict[Path, str]:
    """``{path: text}``: ``docs/census.md`` and its formation figures, from the committed census table."""
    table = load_census(root)
    finals = final_rows(table)
    configs = sorted(table[table["source"] == "census"]["config"].unique())
    pages: dict[Path, str] = {}
    figures = []
    for config in configs:
        path = CENSUS_FIGURES / f"census_formation_{config}.svg"
        pages[path] = formation_svg(table, config)
        counts = formation(table, config)["n"]
        figures.append(f"![formation of {config}](figures/{path.name})\n\n{config}, seeds at each kept epoch: "
                       + ", ".join(f"epoch {int(e)}: {int(k)}" for e, k in counts.items()) + ".\n")
    claims = load_claims(root)
    if claims is None:
        reference_section = f"_No {CLAIMS_TABLE} yet (python scripts/claims_by_reference.py)._"
    else:
        reference_section = f"""A mean, resample or optimal ablation replaces a component's output with values drawn from a reference
distribution, and the reference is part of the claim (`perm_circuits.ablation_modes.REFERENCES`): `test`, the whole
test set (both skills mixed, as the task presents them; the findings' convention), or `skill`, each skill's own
rows.  `head_roles(model, reference=...)` on the findings' test set (5,000 sequences, seed 1234), every mode
(`{CLAIMS_TABLE}`, `scripts/claims_by_reference.py`); zero and binding-free ablation do not read the reference.

{_reference_claims_block(claims)}

{_roles_changed(claims)}

### d32h2's L0H0 in recall: settled per reference

The findings keep L0H0 in d32h2's recall circuit; its recall circuit against the recall rows themselves drops it.
Both are right, for different references.  L0H0 ablated, per reference and mode:

{_l0h0_block(claims, table)}"""
    text = f"""# A census of mechanisms

<!-- generated by python scripts/build_results.py from {CENSUS_TABLE}; do not edit -->

One seed is an anecdote.  The census trains {PLANNED_SEEDS} seeds of each configuration at the study's full
recipe (50 epochs x 100,000 samples, batch 128, lr 1e-3, repeat ratio 0.3) for all 50 epochs, **without early
stopping**, keeps checkpoints at epochs 1, 2, 4, 8, 16, 32 and 50 (`scripts/census_train.py`), and takes a
mechanism fingerprint of each (`perm_circuits.census.mechanism_fingerprint`, `scripts/census_fingerprints.py`):
attention scores per head, roles and the study's claims under every ablation mode against both references
(the whole test set, and each skill's own rows), per skill the oracle's smallest component set keeping
faithfulness 0.9 under mean and resample ablation against both references, and each written hypothesis's
causal-scrubbing recovery per skill (`perm_circuits.analysis.study.hypotheses`; a census-sized measurement:
300 rows and 20 bootstrap resamples per skill, where `docs/how_models_compute.md` uses 2,000 and 200).

## Status of the census

{_status_block(table)}

Runs still training contribute the epochs they have kept; the class frequencies below use complete runs only.

## The class rule

A model's class is read from its fingerprint by a stated rule (`perm_circuits.census.classes`), not by
clustering: **duplicate-gated** (a duplicate-token head is in the recall circuit), **shared-head** (the recall
circuit's heads are all in the elimination circuit), **separate-heads**, **attention-free recall**, **no recall**
(recall accuracy below 90%), **no skill**.  The default reads the circuits under mean ablation against the test
set, the library's decision mode and reference; the table after the next shows every mode and reference.

## Class frequencies at epoch 50 (mean ablation, test-set reference)

{_counts_block(finals)}

## Where the classes change with the mode and the reference

{_pairs_block(finals)}

## When each class forms

The share of seeds in each class at each kept epoch (every census run, complete or not, at the epochs it has).

{chr(10).join(figures) if figures else "_No census run yet._"}

## Where the shipped models sit

{_shipped_block(table)}

Is d32h2's duplicate-token head typical, rare or late?  Per two-head census seed, the first kept epoch at which a
head passes the duplicate-token threshold:

{_duplicate_block(table)}

## The study's claims per class, mode and reference

Against the test set (`reference="test"`, the default) and against each skill's own rows (`reference="skill"`):
the seeds of each class per claim status.  The per-reference columns were added to the fingerprint after the
first pass of the census: {_carried(finals, "skill_story_mean")} complete runs carry them (the rows without are
counted under `test` only).

{_claims_block(finals)}

## The written hypotheses per class

Causal-scrubbing recovery (Chan et al. 2022) of each hypothesis of `docs/how_models_compute.md`, per skill, over
the seeds of each class (census-sized: 300 rows, 20 resamples); {_carried(finals, "hyp_recall_study")} complete runs
carry them.  The hypotheses name heads by label, as written for the shipped models: the gate hypothesis says L0H0 is
the duplicate-token head, so a seed whose duplicate-token head is L0H1 (heads of one layer are interchangeable
between seeds) scores low on it for that reason alone.

{_hypotheses_block(finals)}

## The ablation reference: the shipped models' claims per mode and per reference

{reference_section}

## Epoch to 99% recall across seeds

{_spread_block(table)}
"""
    pages[CENSUS_PAGE] = text
    return pages
