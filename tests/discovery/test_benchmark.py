"""The discovery benchmark on a tiny setting, and the committed table's shape."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.discovery.benchmark import BENCHMARK_COLUMNS, benchmark_curves, benchmark_models, run_benchmark
from perm_circuits.discovery.scoring import faithfulness_area

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny():
    return run_benchmark(["induction"], ["eap", "random_baseline"], ["resample"], seeds=(0,), n=32, lean=False,
                         progress=False)


def test_tiny_benchmark_rows_and_scores(tiny):
    assert list(tiny.columns) == list(BENCHMARK_COLUMNS)
    assert len(tiny) == 2 and set(tiny.method) == {"eap", "random_baseline"}
    eap = tiny[tiny.method == "eap"].iloc[0]
    # the functional truth: the elimination head's two edges are idle under resample ablation on this batch
    assert eap.truth == "constructed" and eap.truth_modes == "mean/resample" and eap.n_true == 5
    assert set(eap.idle_edges.split()) == {"embed->L1H1.v", "L1H1->logits"}
    assert eap.n_edges_graph == 46
    assert eap.roc_auc > 0.9 and eap.pr_auc > 0.8
    random = tiny[tiny.method == "random_baseline"].iloc[0]
    assert random.roc_auc < eap.roc_auc and random.faith_area < eap.faith_area
    # the oracle (by size on 46 edges) reaches 0.9 with the 5-edge induction circuit; the regret is
    # the oracle's faithfulness minus the method's top-5 edges', never much below 0
    assert "by size" in eap.oracle_search and eap.oracle_size == 5
    assert eap.oracle_regret > -0.05 and random.oracle_regret > eap.oracle_regret
    assert eap.n_forward > 0 and eap.wall_time > 0
    assert 0 <= eap.precision <= 1 and 0 <= eap.recall_heads <= 1
    assert set(eap.circuit.split()) and set(eap.true_edges.split()) >= {"L0H0->L1H0.k", "L1H0->logits"}


@pytest.mark.slow
def test_curves_integrate_to_the_tables_areas(tiny):
    curves = benchmark_curves(["induction"], ["eap", "random_baseline"], ["resample"], seeds=(0,), n=32, lean=False,
                              progress=False)
    assert set(curves.method) == {"eap", "random_baseline"} and len(curves) == 2 * 47
    for method, curve in curves.groupby("method"):
        row = tiny[tiny.method == method].iloc[0]
        assert faithfulness_area(list(zip(curve.k, curve.faithfulness)), max_edges=46) == pytest.approx(row.faith_area)
        assert curve.faithfulness.iloc[-1] == pytest.approx(1.0, abs=1e-5)  # every edge kept: the full model
    # the regret is the oracle's faithfulness minus the curve's at the oracle's size (5 edges)
    eap, row = curves[curves.method == "eap"].set_index("k").faithfulness, tiny[tiny.method == "eap"].iloc[0]
    assert row.oracle_size == 5 and eap[5] == pytest.approx(row.oracle_faithfulness - row.oracle_regret)


@pytest.mark.slow
def test_the_bare_induction_model_is_benchmarked_against_its_own_truth():
    """induction_bare (no elimination head): its truth is the induction truth without the elimination
    head's edges, and EAP ranks it first."""
    bare = run_benchmark(["induction_bare"], ["eap"], ["resample"], seeds=(0,), n=32, progress=False).iloc[0]
    full = benchmark_models(include_tracr=False)["induction"].truths()["resample"]
    assert set(bare.true_edges.split()) == set(full) - {"embed->L1H1.v", "L1H1->logits"}
    assert bare.n_true == 5 and bare.roc_auc > 0.9 and bare.truth == "constructed"


def test_modes_without_a_claimed_truth_are_skipped():
    registry = benchmark_models(include_tracr=False)
    assert {"induction", "induction_bare", "d16h1", "d32h1", "d32h2", "d16h1l2-any"} <= set(registry)
    assert "tracr:sort" in benchmark_models(include_tracr=True)
    assert set(registry["induction"].truths()) == {"zero", "mean", "resample"}
    assert registry["d32h2"].truths() == {}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown models"):
        run_benchmark(["nope"], progress=False)
    with pytest.raises(ValueError, match="unknown methods"):
        run_benchmark(["induction"], ["sae"], progress=False)
    with pytest.raises(ValueError, match="hows"):
        run_benchmark(["induction"], ["eap"], ["optimal"], progress=False)
    with pytest.raises(ValueError, match="n must be"):
        run_benchmark(["induction"], ["eap"], n=1, progress=False)
    # one name as a bare str (its letters were looked up: "unknown methods ['e', 'a', 'p']")
    with pytest.raises(TypeError, match=r"methods must be a sequence \(list or tuple\), got str 'eap'; wrap one in a list"):
        run_benchmark(["induction"], "eap", progress=False)
    with pytest.raises(TypeError, match="models must be a sequence .*got str 'induction'"):
        run_benchmark("induction", ["eap"], progress=False)


def test_committed_table_has_the_columns_the_page_reads():
    table = pd.read_csv(ROOT / "results" / "discovery.csv")
    assert list(table.columns) == list(BENCHMARK_COLUMNS)
    assert len(table) == len(table.drop_duplicates(["model", "method", "how", "seed"]))
    constructed = table[table.truth == "constructed"]
    assert not constructed.empty and set(table[table.truth == "oracle"].model) <= {"d16h1", "d32h1", "d32h2",
                                                                                   "d16h1l2-any"}
    for row in table.itertuples():
        assert math.isnan(row.roc_auc) or 0.0 <= row.roc_auc <= 1.0


def test_benchmark_knows_every_method():
    from perm_circuits.discovery import METHODS
    from perm_circuits.discovery.benchmark import DEFAULT_METHODS
    from perm_circuits.discovery.benchmark import METHODS as BENCH_METHODS

    assert BENCH_METHODS == METHODS and set(DEFAULT_METHODS) == set(METHODS)
