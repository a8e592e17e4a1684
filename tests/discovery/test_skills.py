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


def test_a_reference_batch_of_ones_own_is_the_mean_and_the_resample_pool(pretrained):
    """``reference=<the test batch itself>`` draws the same rows as ``"test"`` (one seeded draw over
    the same rows), so the circuits are the same, recorded as ``"custom"``; a smaller batch of one's
    own is cycled through and gives its own scores; a batch of another length is refused first."""
    from perm_circuits.discovery.skills import discover_skills
    from perm_circuits.tasks.permutation import PermutationTask

    model = pretrained("d16h1")
    batch = PermutationTask(model.task_config).test_set(200, seed=3)
    options = dict(method="eap", max_rows=60)
    test = discover_skills(model, batch, **options)
    same = discover_skills(model, batch, reference=batch, **options)
    assert set(same) == set(test) == {"elimination", "recall"}
    for skill in test:
        assert same[skill].params["reference"] == "custom" and test[skill].params["reference"] == "test"
        assert same[skill].scores.equals(test[skill].scores)
    few = discover_skills(model, batch, reference=batch.tokens[:7], **options)  # fewer rows than a skill has
    assert few["elimination"].params["reference"] == "custom"
    assert not few["elimination"].scores.equals(test["elimination"].scores)
    with pytest.raises(ValueError, match=r"token ids \[rows >= 2, 9\]"):
        discover_skills(model, batch, reference=batch.tokens[:, :5], **options)
    with pytest.raises(TypeError, match="reference must be one of"):
        discover_skills(model, batch, reference=3, **options)
