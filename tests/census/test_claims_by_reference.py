"""The census page's section on the ablation reference follows from results/claims_by_reference.csv, and the
table's test-set reference reproduces the findings' numbers (results/shipped_numbers.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perm_circuits.analysis.study.reference_table import CLAIM_COLUMNS
from perm_circuits.pages.census_page import CENSUS_PAGE, l0h0_by_reference, load_claims

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def claims():
    return load_claims(ROOT)


def _page_rows() -> dict[tuple[str, str], tuple[str, ...]]:
    text = (ROOT / CENSUS_PAGE).read_text(encoding="utf-8")
    section = text.split("### d32h2's L0H0 in recall", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (test|skill) \| (\w+) \| (.+) \|$", section, re.M)
    return {(ref, how): tuple(c.strip() for c in rest.split("|")) for ref, how, rest in rows}


def test_table_shape(claims):
    assert list(claims.columns) == list(CLAIM_COLUMNS)
    assert set(claims["reference"]) == {"test", "skill"}
    assert set(claims["how"]) == {"zero", "mean", "resample", "binding_free", "optimal"}
    assert set(claims["model"]) == {"d16h1", "d32h1", "d32h2"}


def test_page_numbers_are_the_tables(claims):
    page = _page_rows()
    rows = l0h0_by_reference(claims)
    assert len(page) == len(rows) == 10
    for r in rows.itertuples(index=False):
        elim, recall, retention, patch, role = page[(r.reference, r.how)]
        assert elim == f"{100 * r.elimination_accuracy:.1f}%" and recall == f"{100 * r.recall_accuracy:.1f}%"
        assert retention == f"{r.recall_retention:.2f}" and patch == f"{r.patch_effect:.2f}" and role == r.value


def test_the_disagreement_is_settled_by_the_reference(claims):
    rows = l0h0_by_reference(claims).set_index(["reference", "how"])
    for how in ("mean", "resample"):
        assert rows.loc[("test", how), "recall_accuracy"] < 0.35   # against the test set recall needs L0H0
        assert rows.loc[("skill", how), "recall_accuracy"] == 1.0  # against the recall rows it does not
    # zero ablation does not read the reference
    assert rows.loc[("test", "zero"), "recall_accuracy"] == rows.loc[("skill", "zero"), "recall_accuracy"]


def test_the_test_reference_is_the_findings(claims):
    numbers = json.loads((ROOT / "results" / "shipped_numbers.json").read_text())
    rows = l0h0_by_reference(claims).set_index(["reference", "how"])
    for how in ("zero", "mean", "resample", "binding_free", "optimal"):
        for skill in ("elimination", "recall"):
            assert rows.loc[("test", how), f"{skill}_accuracy"] == pytest.approx(
                numbers[f"d32h2.{how}.L0H0.{skill}_accuracy"], abs=1e-5)
