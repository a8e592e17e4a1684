"""Verdicts of :func:`head_roles` on the shipped pretrained models (facts measured on them).

Measured with ``head_roles(model, hows=("mean", "zero"), n_pair=1000, n_boot=200)`` on the fixed
test set (5000 sequences, 1534 repeated); decisions under mean ablation.  What the shipped
checkpoints (seed 0, the study's recipe with repeat ratio 0.3) show against the study's story:

- d32h2 recalls, but not the study's way: L0H0 is a duplicate-token head (x5 -> x1 0.66 on
  repeated sequences, 0.12 otherwise) that recall needs (ablated: recall 0%, patching its clean
  output restores 0.94); no head binds (x -> preceding y 0.14); the eliminator-pattern head L0H1
  (0.72 on prior ys, entropy 0.99) is needed for elimination and recall alike (its ablation
  removes the recall signal too), so the heads do not divide the labour; the MLP is needed for
  both, recall included.
- d16h1 recalls (100%, probe P(4) = 0.998): the study's "d16h1 cannot recall" is contradicted;
  its single head is a uniform accumulator (0.92 on prior ys, entropy 0.97) that recall needs too.
- d32h1 recalls as well: one head is enough.
"""

from __future__ import annotations

import pytest

from perm_circuits.analysis.study.verdict import head_roles

SETTINGS = dict(hows=("mean", "zero"), n_pair=1000, n_boot=200, circuits=False)


@pytest.fixture(scope="module")
def verdicts(pretrained):
    return {name: head_roles(pretrained(name), **SETTINGS) for name in ("d32h2", "d32h1", "d16h1")}


def _statuses(verdict) -> dict[str, str]:
    return {claim.claim: claim.status for claim in verdict.claims}


def test_d32h2_recalls_through_a_duplicate_token_head_not_a_binder(verdicts):
    v = verdicts["d32h2"]
    assert v.elimination_accuracy == pytest.approx(1.0, abs=0.002)
    assert v.recall_accuracy == pytest.approx(1.0, abs=0.002)
    assert v.probe[3] > 0.99 and v.recall_signal == pytest.approx(7.44, abs=0.5)
    h0, h1 = v.heads
    assert (h0.role, h0.causal_role) == ("duplicate/recall", "recall")
    assert (h1.role, h1.causal_role) == ("mixed", "both")
    assert v.role("L0MLP") == "needed for both"
    s0, s1 = v.scores.get(0, 0), v.scores.get(0, 1)
    assert s0.dup_repeated == pytest.approx(0.66, abs=0.05) and s0.dup_baseline == pytest.approx(0.12, abs=0.05)
    assert s0.x_prev_y == pytest.approx(0.14, abs=0.05) and s0.y_self == pytest.approx(0.78, abs=0.05)
    assert s1.elim_y_mass == pytest.approx(0.72, abs=0.03) and s1.elim_entropy == pytest.approx(0.99, abs=0.02)
    assert max(s.binding_score for s in v.scores) < 0.5
    # ablating the duplicate head kills recall only; ablating the accumulator kills both
    assert h0.elimination_accuracy > 0.99 and h0.recall_accuracy < 0.02
    assert h0.patch_effect == pytest.approx(0.94, abs=0.05)
    assert h1.elimination_accuracy < 0.3 and h1.recall_accuracy < 0.3 and h1.recall_signal_retention < 0.1
    assert abs(h1.patch_effect) < 0.05  # its output is the same in clean and corrupted runs
    assert v.mlps[0].recall_signal_retention < 0.1 and v.mlps[0].patch_effect == pytest.approx(0.88, abs=0.05)
    assert _statuses(v) == {
        "eliminates": "supported", "recalls": "supported", "eliminator_head": "supported",
        "binding_head": "contradicted", "division_of_labour": "contradicted",
        "ffn_completes_recall": "supported", "no_attention_lookup": "contradicted",
    }
    assert all(status == claim.status for claim in v.claims for _, status in claim.status_by_how)
    assert v.story_holds is False
    text = v.summary()
    assert "the study's story does NOT hold for d32h2" in text
    assert "No binding head" in text and "L0H0 is a duplicate-token head" in text


@pytest.mark.parametrize("name, y_mass, entropy", [("d16h1", 0.92, 0.97), ("d32h1", 0.89, 0.95)])
def test_one_head_models_recall(verdicts, name, y_mass, entropy):
    v = verdicts[name]
    assert v.elimination_accuracy == pytest.approx(1.0, abs=0.002)
    assert v.recall_accuracy == pytest.approx(1.0, abs=0.002) and v.probe[3] > 0.99
    assert _statuses(v) == {"eliminates": "supported", "no_recall": "contradicted", "single_head_accumulates": "supported"}
    assert v.claims.get("no_recall").evidence == f"{name} recalls: recall accuracy 100.0%."
    head = v.heads[0]
    score = v.scores.get(0, 0)
    assert score.elim_y_mass == pytest.approx(y_mass, abs=0.03) and score.elim_entropy == pytest.approx(entropy, abs=0.03)
    assert head.attention_role == "eliminator" and head.role == "mixed"
    assert head.elimination_accuracy < 0.3 and head.recall_accuracy < 0.3 and head.recall_signal_retention < 0.1
    assert 0.2 < head.patch_effect < 0.5  # the head's output carries part of the recall difference
    assert v.role("L0MLP") == "needed for both" and v.mlps[0].patch_effect > 0.85
    assert v.story_holds is False and f"{name} recalls" in v.summary()
