"""The fingerprint's per-reference roles and hypothesis recoveries on the weight-built induction
model, whose mechanism reads content (the previous-token and induction heads), never the skill label."""

from __future__ import annotations

import pytest

from perm_circuits.census import mechanism_fingerprint

HOWS = ("zero", "mean")
COMPONENTS = ("L0H0", "L0H1", "L1H0", "L1H1", "L0MLP", "L1MLP")


@pytest.fixture(scope="module")
def record(induction):
    return induction[1].to_dict()


def test_roles_per_mode_and_reference(record):
    for how in HOWS:
        for component in COMPONENTS:
            # nothing in this model tells the skills apart, so the reference changes no role
            assert record[f"skill_role_{how}_{component}"] == record[f"role_{how}_{component}"]
        assert record[f"role_{how}_L1H1"] == "eliminator"
        assert record[f"skill_role_{how}_L1MLP"] == "unused"  # its MLPs have zero weights
    assert record["skill_role_mean_L1H0"] == "other"
    assert record["skill_claim_mean_ffn_completes_recall"] == "contradicted"
    assert record["skill_claim_mean_no_attention_lookup"] == "supported"
    assert {record["skill_story_mean"], record["story_mean"]} == {"fails"}


def test_written_hypotheses_recover_the_built_mechanism(record):
    # the induction head reads the y bound to x5 (the study's "binding" hypothesis), exactly
    for skill in ("elimination", "recall"):
        assert record[f"hyp_{skill}_study"] == pytest.approx(1.0)
        assert record[f"hyp_{skill}_study_ci_low"] == pytest.approx(1.0)
    assert "hyp_recall_gate" not in record  # the gate hypothesis is written for one layer of two heads


def test_hypothesis_sizes_are_checked():
    from perm_circuits.handbuilt import build_induction_model

    with pytest.raises(ValueError, match="n_hyp"):
        mechanism_fingerprint(build_induction_model(), n_hyp=1)
