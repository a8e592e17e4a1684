"""The shipped models' hypotheses: results/hypotheses.csv regenerates from the code, and says what it says."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.analysis.hypothesis import causal_scrub
from perm_circuits.analysis.study.hypotheses import (
    FEATURES, last_step_accuracy, shipped_hypotheses, skill_batch,
)

TABLE = Path(__file__).resolve().parents[2] / "results" / "hypotheses.csv"


@pytest.fixture(scope="module")
def table():
    return pd.read_csv(TABLE)


def test_features_read_the_sequence():
    row = (1, 5, 3, 2, 4, 4, 2, 1, 3)  # x1 y1 ... x4 y4 x5 = x2: recall y2 = 2
    assert FEATURES["bound"].fn(row) == 2 and FEATURES["answer"].fn(row) == 2 and FEATURES["slot"].fn(row) == 1
    assert FEATURES["used"].fn(row) == frozenset({5, 2, 4, 1}) and not FEATURES["repeat1"].fn(row)
    fresh = (1, 5, 3, 2, 4, 4, 2, 1, 5)
    assert FEATURES["answer"].fn(fresh) == 3 and FEATURES["bound"].fn(fresh) == 0
    assert set(shipped_hypotheses(1, 2)) == {"study", "shortcut", "shortcut_x5", "gate"}
    assert set(shipped_hypotheses(2, 1)) == {"study", "shortcut", "query", "query_slot"}


def test_a_committed_row_regenerates(pretrained, table):
    result = causal_scrub(pretrained("d32h2"), shipped_hypotheses(1, 2)["gate"], skill_batch("recall", 2000, 0),
                          last_step_accuracy, n_boot=200, seed=0)
    rows = table[(table.model == "d32h2") & (table.skill == "recall") & (table.hypothesis == "gate")]
    fresh = result.to_dataframe()
    assert list(rows.component) == list(fresh.component)
    assert rows.recovery.tolist() == pytest.approx(fresh.recovery.tolist(), rel=1e-5)
    assert rows.ci_low.iloc[0] == pytest.approx(result.ci_low, rel=1e-5)


def test_the_table_scores_the_stories_side_by_side(table):
    whole = table[table.component == "all"].set_index(["model", "skill", "hypothesis"])
    # d32h2: the gate explains elimination fully and recall to >= 0.95
    assert whole.loc[("d32h2", "elimination", "gate"), "recovery"] == 1.0
    assert whole.loc[("d32h2", "recall", "gate"), "recovery"] >= 0.95
    # on x5 = x_k for every k, the study's binding story predicts recall the model does not do: the
    # scrubbed accuracy falls far below the shortcut's
    assert whole.loc[("d32h2", "recall_any", "study"), "metric"] < 0.5 * whole.loc[
        ("d32h2", "recall_any", "shortcut"), "metric"]
    # the generalising d16h1l2-any: the positional-query story explains elimination, not all of recall
    assert whole.loc[("d16h1l2-any", "elimination", "query"), "recovery"] == 1.0
    assert whole.loc[("d16h1l2-any", "recall_any", "query"), "recovery"] < 0.5


def test_a_committed_step_row_regenerates_and_steps_use_their_own_features(pretrained):
    """Elimination at step 4 (query at position 6): the gate hypothesis written there, scored by the answer
    being a value not yet used, equals the committed results/hypotheses_steps.csv row."""
    from perm_circuits.analysis.study.hypotheses import features_at, unused_answer

    row = (1, 5, 3, 2, 4, 4, 2, 1, 5)
    at6 = features_at(6)
    assert at6["used"].fn(row) == frozenset({5, 2, 4}) and at6["x5"].fn(row) == 2
    assert at6["answer"].fn(row) == frozenset({1, 3}) and at6["bound"].fn(row) == 0
    assert features_at(8) is FEATURES
    steps = pd.read_csv(TABLE.parent / "hypotheses_steps.csv")
    committed = steps[(steps.model == "d32h2") & (steps.step == 4) & (steps.hypothesis == "gate")]
    result = causal_scrub(pretrained("d32h2"), shipped_hypotheses(1, 2, 6)["gate"], skill_batch("elimination", 2000, 0),
                          unused_answer(6), n_boot=200, seed=0)
    assert list(committed.component) == list(result.to_dataframe().component)
    assert committed.recovery.tolist() == pytest.approx(result.to_dataframe().recovery.tolist(), rel=1e-5)
    assert committed.random_metric.iloc[0] == pytest.approx(result.random_metric, rel=1e-5)
