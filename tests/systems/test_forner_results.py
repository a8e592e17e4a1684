"""docs/forner.md and the committed Forner tables agree with each other and with the code that made them.

``scripts/forner_results.py`` writes ``results/forner_quick*.csv`` from one ``--quick`` run; here
the comparison rows are recomputed from the committed training log (the ODE integrated again), and
the docs page's generated block must equal the rendering of the committed comparison table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perm_circuits.systems.forner import (
    DOCS_BEGIN,
    DOCS_END,
    FornerConfig,
    compare_with_ode,
    comparison_markdown,
    comparison_rows,
    rollout_accuracy,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


@pytest.fixture(scope="module")
def committed():
    log = pd.read_csv(RESULTS / "forner_quick.csv")
    ode = pd.read_csv(RESULTS / "forner_quick_ode.csv")
    table = pd.read_csv(RESULTS / "forner_quick_comparison.csv", keep_default_na=False)
    numbers = json.loads((RESULTS / "forner_quick_numbers.json").read_text())
    return log, ode, table, numbers


def test_docs_page_quotes_the_committed_table(committed):
    _, _, table, numbers = committed
    text = (ROOT / "docs" / "forner.md").read_text()
    block = text[text.index(DOCS_BEGIN): text.index(DOCS_END) + len(DOCS_END)]
    assert block == comparison_markdown(table, numbers["seconds"], quick=True)
    assert "| yes |" in block


def test_comparison_rows_and_ode_table_follow_from_the_training_log(committed):
    log, ode, table, numbers = committed
    cfg = FornerConfig(**numbers["config"])
    lr = numbers["settings"]["lr"]
    again = compare_with_ode(log, cfg, lr)
    pd.testing.assert_frame_equal(again, ode, check_exact=False, rtol=1e-6, atol=1e-9)
    rows, measured = comparison_rows(log, ode, cfg, n_seeds=log["seed"].nunique())
    recomputed = pd.DataFrame([vars(r) for r in rows])
    assert recomputed["ours"].tolist() == table["ours"].tolist()
    assert recomputed["holds"].tolist() == table["holds"].tolist()
    for key in ("A_final", "rollout_accuracy_final", "eq18_max_gap", "A_half_alpha_ode"):
        assert measured[key] == pytest.approx(numbers[key], rel=1e-9)
    np.testing.assert_allclose(log["rollout_eq18"], rollout_accuracy(log["rho"].to_numpy(), cfg.N, cfg.L))
    assert numbers["settings"]["seeds"] == [0] and log["seed"].unique().tolist() == [0]
