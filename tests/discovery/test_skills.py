"""The recall skill's oracle circuit: the committed table reproduces, and bad arguments are refused first."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.discovery.skills import skill_oracle_table

ROOT = Path(__file__).resolve().parents[2]


def test_skill_oracle_table_reproduces_a_committed_row():
    fresh = skill_oracle_table(["d16h1"], ["resample"], [0], progress=False).iloc[0]
    committed = pd.read_csv(ROOT / "results" / "discovery_recall.csv")
    row = committed[(committed.model == "d16h1") & (committed.how == "resample") & (committed.seed == 0)].iloc[0]
    assert fresh.skill == "recall" and fresh.n_rows == row.n_rows == 103 and fresh.n_edges_graph == 8
    assert fresh.circuit == row.circuit and fresh.search == "exhaustive: all 256 subsets of 8 edges"
    assert fresh.faithfulness == pytest.approx(row.faithfulness, abs=1e-5) and fresh.faithfulness >= 0.9


def test_skill_oracle_table_refuses_bad_arguments():
    with pytest.raises(ValueError, match="shipped study models"):
        skill_oracle_table(["induction"], progress=False)
    with pytest.raises(ValueError, match="skill must be"):
        skill_oracle_table(["d16h1"], skill="copy", progress=False)
    with pytest.raises(ValueError, match="n must be"):
        skill_oracle_table(["d16h1"], n=1, progress=False)
