"""docs/discovery.md is generated from results/discovery.csv, and its claim words follow from the numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.discovery.benchmark import ORACLE_BEST
from perm_circuits.discovery.scoring import faithfulness_area
from perm_circuits.pages.discovery_page import (
    DESCRIBED,
    DISCOVERY_CURVES,
    DISCOVERY_FULL,
    DISCOVERY_RECALL,
    DISCOVERY_PAGE,
    DISCOVERY_STRUCTURAL,
    DISCOVERY_TABLE,
    coverage_word,
    discovery_numbers,
    discovery_pages,
    flip_word,
    full_numbers,
    lean_vs_full,
    recall_numbers,
    recovers,
    regret_by_size,
    truth_moved,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table():
    return pd.read_csv(ROOT / DISCOVERY_TABLE)


def test_committed_page_and_figures_equal_a_fresh_rendering():
    pages = discovery_pages(ROOT)
    assert DISCOVERY_PAGE in pages
    figures = [p for p in pages if p.suffix == ".svg"]
    curves = [p for p in figures if p.name.startswith("discovery_curves_")]
    assert len(figures) - len(curves) == 4  # one circuit picture per shipped model
    assert len(curves) == 7  # one curve chart per benchmark model
    for path, text in pages.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, f"{path} is stale: run python scripts/build_results.py"
    page = pages[DISCOVERY_PAGE]
    assert "{{" not in page and "}}" not in page
    for figure in figures:
        assert f"figures/{figure.name}" in page
        if figure in curves:  # one line per method, the oracle's ranking and its best-possible line (not on reverse)
            assert pages[figure].count('class="series"') == (7 if "reverse" in figure.name else 9)
        else:
            assert pages[figure].count("class='edge'") >= 1


def test_claim_rules():
    assert recovers(0.5, math.nan) == "recovers" and recovers(1.0, 0.2) == "recovers"
    assert recovers(0.0, 0.95) == "ranks the true edges first but does not choose exactly"
    assert recovers(0.4, 0.89) == "does not recover" and recovers(0.0, math.nan) == "does not recover"
    assert flip_word("does not recover", "recovers") == "reproduced"
    assert flip_word("recovers", "recovers") == "not reproduced"
    assert flip_word("does not recover", "ranks the true edges first but does not choose exactly") == "not reproduced"
    assert coverage_word(1.0, 0) == "matches" and coverage_word(1.0, 2) == "covers"
    assert coverage_word(0.5, 0) == "misses part of"


def test_every_claim_word_follows_from_the_table(table):
    numbers = discovery_numbers(table)
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    checked = 0
    for (model, how, method), rows in table.groupby(["model", "how", "method"]):
        exact = rows.exact.astype(bool).mean()
        auc = rows.roc_auc.astype(float).mean()
        if exact >= 0.5:
            word = "recovers"
        elif auc >= 0.9:
            word = "ranks the true edges first but does not choose exactly"
        else:
            word = "does not recover"
        assert numbers[f"{model.replace(':', '_')}.{how}.{method}.claim"] == word, (model, how, method)
        checked += 1
    assert checked == table.groupby(["model", "how", "method"]).ngroups
    # the Miller et al. row: a flip is claimed reproduced only when the table shows it
    for method in ("acdc", "mask_pruning"):
        rows = table[(table.model == "tracr:frac_prevs") & (table.method == method)]
        if rows.empty:
            continue
        zero, resample = (rows[rows.how == h].exact.astype(bool).mean() >= 0.5 for h in ("zero", "resample"))
        expected = "reproduced" if (not zero and resample) else "not reproduced"
        assert numbers[f"miller.{method}"] == expected
        assert f"{expected}: " in page
    # described circuits: 'matches' / 'covers' only when every described component is in every seed's circuit
    for model, (described, _, _) in DESCRIBED.items():
        rows = table[(table.model == model) & (table.how == "resample") & (table.method == "exhaustive_oracle")]
        if rows.empty:
            continue
        found = [{part.split(".")[0] for e in str(c).split() for part in e.split("->")} - {"embed", "logits"}
                 for c in rows.circuit.fillna("")]
        complete = all(described <= f for f in found)
        claim = numbers[f"{model}.resample.described.claim"]
        assert (claim in ("matches", "covers")) == complete, (model, claim, found)
        assert f"| {model} |" in page and claim in page


def test_induction_misses_are_the_elimination_head(table):
    """EAP-IG and the greedy proposer, when not exact on the induction model, leave out only the
    elimination head's edges (on the batches where they are not idle) and choose nothing false; the
    page says a faithfulness target leaves that part of the truth out."""
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    assert "it is a part of\nthe truth that a faithfulness target leaves out" in page
    rows = table[(table.model == "induction") & (table.how == "resample") & table.method.isin(["eap_ig", "greedy_edges"])]
    assert not rows.empty
    for row in rows.itertuples():
        chosen, truth = set(row.circuit.split()), set(row.true_edges.split())
        assert chosen <= truth
        assert truth - chosen <= {"embed->L1H1.v", "L1H1->logits"}


def test_curves_are_the_tables_runs(table):
    """Each committed faithfulness curve (results/discovery_curves.csv) integrates to the benchmark
    table's faith_area for the same model, mode, seed and method: the same runs, not a second sample."""
    curves = pd.read_csv(ROOT / DISCOVERY_CURVES)
    checked = 0
    for (model, how, seed, method), curve in curves[curves.method != ORACLE_BEST].groupby(["model", "how", "seed",
                                                                                           "method"]):
        row = table[(table.model == model) & (table.how == how) & (table.seed == seed) & (table.method == method)]
        assert len(row) == 1, (model, how, seed, method)
        n_edges = int(curve.n_edges_graph.iloc[0])
        assert sorted(curve.k) == list(range(n_edges + 1))
        area = faithfulness_area(list(zip(curve.k, curve.faithfulness)), max_edges=n_edges)
        assert area == pytest.approx(float(row.faith_area.iloc[0]), abs=1e-4), (model, how, seed, method)
        checked += 1
    assert checked == 7 * 8 - 1  # every method on every model; tracr reverse has no oracle


def test_best_possible_line_and_regret_at_each_size(table):
    """The oracle's best-by-size line starts at the empty circuit, never falls, reaches the oracle's own
    faithfulness at its circuit's size, and lies on or above every method's curve (regret >= 0)."""
    curves = pd.read_csv(ROOT / DISCOVERY_CURVES)
    best = curves[curves.method == ORACLE_BEST]
    assert set(best.model) == set(curves.model) - {"tracr:reverse"}  # reverse (77 edges) has no oracle
    for (model, how, seed), line in best.groupby(["model", "how", "seed"]):
        values = line.sort_values("k").faithfulness.tolist()
        assert values == sorted(values)
        oracle = table[(table.model == model) & (table.how == how) & (table.seed == seed)
                       & (table.method == "exhaustive_oracle")].iloc[0]
        if "target not reached" not in oracle.oracle_search:
            assert values[int(oracle.n_chosen)] == pytest.approx(oracle.faithfulness, abs=1e-5)
            assert all(v < 0.9 for v in values[: int(oracle.n_chosen)])
        # every method's top-k edges are one circuit of k edges: never above the best possible
        part = curves[(curves.model == model) & (curves.how == how) & (curves.seed == seed)]
        for method, curve in part[part.method != ORACLE_BEST].groupby("method"):
            ranked = curve.set_index("k").faithfulness
            for k, v in enumerate(values):
                assert ranked[k] <= v + 1e-5, (model, method, k)
    regret = regret_by_size(curves)
    assert (regret.regret >= -1e-5).all() and len(regret) == 6 * 8
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    assert "| random_baseline |" in page.split("oracle regret at every size")[1]


def test_induction_oracle_is_the_truth_without_the_elimination_head(table):
    """The page says the oracle reaches 0.9 on the induction model under resample and mean ablation with
    the constructed truth minus the elimination head's two edges, which is the functional truth on the
    batches where those edges are idle, and does not reach it under zero."""
    numbers = discovery_numbers(table)
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    for how in ("resample", "mean"):
        rows = table[(table.model == "induction") & (table.how == how) & (table.method == "exhaustive_oracle")]
        assert len(rows) == 5 and not rows.oracle_search.str.contains("not reached").any()
        share = sum(set(r.circuit.split()) == set(r.true_edges.split()) - {"embed->L1H1.v", "L1H1->logits"}
                    for r in rows.itertuples()) / len(rows)
        assert numbers[f"induction.{how}.oracle.minus_elimination"] == share == 1.0
        idle = [bool(str(r.idle_edges).strip()) and r.idle_edges == r.idle_edges for r in rows.itertuples()]
        assert numbers[f"induction.{how}.idle_runs"] == sum(idle)
        is_truth = sum(set(r.circuit.split()) == set(r.true_edges.split()) for r in rows.itertuples()) / len(rows)
        assert numbers[f"induction.{how}.oracle.is_truth"] == is_truth
        # where the elimination head's edges are idle, the oracle's circuit is the functional truth
        assert all(set(r.circuit.split()) == set(r.true_edges.split()) for r, i in zip(rows.itertuples(), idle) if i)
    assert numbers["induction.resample.idle_runs"] >= 3 and numbers["induction.mean.idle_runs"] == 0
    assert numbers["induction.resample.oracle.reached"] == "reached" and "The oracle\nreached faithfulness" in page
    zero = table[(table.model == "induction") & (table.how == "zero") & (table.method == "exhaustive_oracle")]
    assert zero.oracle_search.str.contains("not reached").all() and (zero.n_true > 6).all()


@pytest.mark.parametrize("path", [DISCOVERY_TABLE, DISCOVERY_FULL])
def test_functional_truths_are_the_structural_ones_less_their_idle_edges(path):
    """Every run with a constructed truth: its true edges and idle edges split the structural truth it was
    scored against before (``results/*_structural.csv``); where they moved, the page's table says so."""
    new, old = pd.read_csv(ROOT / path), pd.read_csv(ROOT / DISCOVERY_STRUCTURAL[path])
    keys = ["model", "how", "seed", "method"]
    both = new[new.truth == "constructed"].merge(old, on=keys, suffixes=("", "_old"))
    assert len(both) == int((new.truth == "constructed").sum()) > 0
    edges = lambda value: set(value.split()) if isinstance(value, str) else set()  # noqa: E731
    for r in both.itertuples():
        truth, idle = edges(r.true_edges), edges(r.idle_edges)
        assert not truth & idle and truth | idle == edges(r.true_edges_old), (r.model, r.how, r.seed)
    moved = truth_moved(old, new)
    reverse = moved[(moved.model == "tracr:reverse") & (moved.how == "zero")]
    assert len(reverse) and (reverse.n_true_old == 13).all() and (reverse.n_true_new == 8).all()
    assert set(zip(moved.model, moved.how)) <= {("tracr:reverse", "zero"), ("induction", "resample")}
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    assert "| tracr:reverse | zero | 5 of 5 | 13.0 -> 8.0 |" in page


def test_recall_circuits_and_their_verdicts_follow_from_the_table():
    """The recall skill's oracle circuits: every verdict re-derived from the table; the one-head models'
    recall circuit is the head and the MLP in every mode and seed; d32h2's leaves out L0H0, as the page says."""
    recall = pd.read_csv(ROOT / DISCOVERY_RECALL)
    assert set(recall.how) == {"zero", "mean", "resample"} and set(recall.seed) == set(range(5))
    assert len(recall) == 4 * 3 * 5 and (recall.skill == "recall").all()
    numbers = recall_numbers(recall)
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    for (model, how), rows in recall.groupby(["model", "how"]):
        described = DESCRIBED[model][0]
        found = [{part.split(".")[0] for e in c.split() for part in e.split("->")} - {"embed", "logits"}
                 for c in rows.circuit.fillna("")]  # an empty best circuit is stored as an empty cell
        complete = all(described <= f for f in found)
        exact = all(described == f for f in found)
        claim = numbers[f"{model}.{how}.recall.claim"]
        assert claim == ("matches" if exact else "covers" if complete else "misses part of"), (model, how)
        assert f"{how}: {claim}" in page
    for model in ("d16h1", "d32h1"):
        rows = recall[recall.model == model]
        assert not rows.search.str.contains("not reached").any() and (rows.faithfulness >= 0.9).all()
        assert {numbers[f"{model}.{how}.recall.claim"] for how in ("zero", "mean", "resample")} == {"matches"}
    d32h2 = recall[recall.model == "d32h2"]
    reached = d32h2[~d32h2.search.str.contains("not reached")]
    assert len(reached) >= 10 and not any("L0H0" in c for c in reached.circuit)
    assert all("L0H1" in c for c in reached.circuit)
    assert "For `d32h2` the two disagree" in page


def test_full_size_run_against_the_lean_one(table):
    """The full-size table covers the one-layer shipped models and the tracr models at 1,000 sequences,
    5 seeds, every mode; the page's lean-vs-full numbers are re-derived from the two tables."""
    full = pd.read_csv(ROOT / DISCOVERY_FULL)
    models = {"d16h1", "d32h1", "d32h2", "tracr:frac_prevs", "tracr:reverse"}
    assert set(full.model) == models and (full.n == 1000).all() and set(full.seed) == set(range(5))
    assert len(full) == (4 * 8 + 7) * 3 * 5  # tracr reverse (77 edges) has no oracle row
    trained = full[full.truth == "oracle"]
    assert trained.oracle_search[trained.method == "exhaustive_oracle"].str.startswith("exhaustive").all()
    changes = []
    for truth, names in (("oracle", ["d16h1", "d32h1", "d32h2"]), ("constructed", ["tracr:frac_prevs",
                                                                                 "tracr:reverse"])):
        compare = lean_vs_full(table, full, truth).set_index("method")
        for method, rows in full[full.truth == truth].groupby("method"):
            lean = table[table.model.isin(names) & (table.method == method)]
            assert compare.loc[method, "full_auc"] == pytest.approx(rows.roc_auc.mean())
            assert compare.loc[method, "lean_auc"] == pytest.approx(lean.roc_auc.mean())
            changes.append(abs(rows.roc_auc.mean() - lean.roc_auc.mean()))
    numbers = full_numbers(table, full)
    assert numbers["full.max_change"] == pytest.approx(max(changes))
    page = (ROOT / DISCOVERY_PAGE).read_text(encoding="utf-8")
    assert f"is\n{numbers['full.max_change']:.2f} ({numbers['full.max_change_method']}, against the" in page
