"""The circuits :func:`head_roles` proposes per skill, judged by the IOI criteria (Wang et al. 2022).

On the hand-built model of ``tests/analysis/circuits/test_criteria.py`` (whose circuit is known exactly: H0 eliminates,
H1 + H2 + the MLP recall, H3 is dead, everything at the last position) the verdict proposes the
known circuits: {H0}@last for elimination, {H0, H1, H2, MLP}@last for recall, with faithfulness 1
and completeness 0 (exactly under zero ablation; under mean ablation the elimination circuit's
left-out MLP keeps its mean output, so 0.986 and 0.07 there).  On the shipped d32h2 (2,000 test
sequences, decisions under mean ablation) it proposes {L0H1, MLP}@last for elimination --
faithful under mean ablation only, its faithfulness error is 1.44 under zero ablation -- and all
three components at the last position for recall (faithful under every mode).
"""

from __future__ import annotations

import pytest

from perm_circuits import load_pretrained, make_test_set
from perm_circuits.hooks import hook_count
from perm_circuits.analysis import SkillCircuit, head_roles
from perm_circuits.analysis.study import skill_circuits as circuit_step
from ..circuits.test_criteria import CIRCUIT, TASK, known_circuit_model

FAST = dict(n_pair=100, n_boot=20, hows=("zero", "mean"))


@pytest.fixture(scope="module")
def known():
    model = known_circuit_model()
    return model, head_roles(model, make_test_set(TASK, n=400, seed=11), **FAST)


def test_known_model_gets_the_known_circuits(known):
    model, v = known
    assert [c.skill for c in v.circuits] == ["elimination", "recall"]
    elimination, recall = v.circuit("elimination"), v.circuit("recall")
    assert isinstance(elimination, SkillCircuit) and elimination.how == "mean" == v.how
    assert elimination.nodes == ("L0H0@last",)
    assert recall.nodes == CIRCUIT
    for item in (elimination, recall):
        assert item.metrics.completeness_method == "exhaustive" and item.metrics.n_samples == 400
        assert [r.how for r in item.by_mode.rows if r.subgroup == item.skill] == ["zero", "mean"]
        assert item.by_mode.get("zero", item.skill).faithfulness == pytest.approx(1.0, abs=1e-6)
        assert not item.mode_dependent
    # recall: the whole known circuit, exact under any ablation (nothing else reaches the last logits)
    r = recall.measured
    assert r.f_model == pytest.approx(11.0, abs=1e-4)  # -5 + 0.8 R
    assert r.faithfulness == pytest.approx(1.0, abs=1e-6) and r.completeness == pytest.approx(0.0, abs=1e-6)
    assert [m.minimality for m in r.minimality] == pytest.approx([5.0, 16.0, 16.0, 16.0], abs=0.02)
    # elimination: H0 alone.  Under mean ablation the left-out MLP keeps its mean output (it fires
    # for y1 on repeated rows), not uniform over the values on these 400 rows: F(C) = 4.93, not 5
    e = elimination.measured
    assert e.f_model == pytest.approx(5.0, abs=1e-4)  # H0 writes -E/4 = -5 on every seen y
    assert e.faithfulness == pytest.approx(0.98597, abs=1e-4) and e.faithfulness_error < 0.1
    assert e.completeness == pytest.approx(0.07013, abs=1e-4)
    assert e.node("L0H0@last").minimality == pytest.approx(5.0976, abs=1e-3)
    assert hook_count(model) == 0
    frame = v.circuits_dataframe()
    assert frame["skill"].tolist() == ["elimination", "recall"]
    assert frame["nodes"].tolist() == ["L0H0@last", "+".join(CIRCUIT)]
    assert frame["faithfulness_zero"].tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    assert frame["faithfulness_mean"].tolist() == pytest.approx([e.faithfulness, 1.0], abs=1e-9)
    summary = v.summary()
    assert "Proposed circuits (IOI criteria, 400 sequences):" in summary
    assert ("- elimination: {L0H0@last}: faithfulness 0.99 (error 0.01), completeness 0.07 (exhaustive), "
            "min minimality 5.10 under mean; faithful under every mode (zero, mean)." in summary)
    assert ("- recall: {L0H0@last, L0H1@last, L0H2@last, L0MLP@last}: faithfulness 1.00 (error 0.00), "
            "completeness 0.00 (exhaustive)" in summary)


def test_circuits_false_runs_no_circuit_step(monkeypatch, known):
    model, full = known

    def refuse(*args, **kwargs):
        raise AssertionError("the circuit step ran")

    for name in ("propose_circuit", "circuit_metrics", "faithfulness_by_mode", "skill_logit_diff"):
        monkeypatch.setattr(circuit_step, name, refuse)
    v = head_roles(model, make_test_set(TASK, n=400, seed=11), circuits=False, **FAST)
    assert v.circuits == () and v.circuits_dataframe().empty
    assert "Proposed circuits" not in v.summary()
    assert [(h.component, h.role) for h in v.heads] == [(h.component, h.role) for h in full.heads]
    with pytest.raises(KeyError, match=r"no proposed circuit for 'recall'"):
        v.circuit("recall")
    with pytest.raises(TypeError, match=r"circuits must be a bool, got 1|parameter 'circuits'"):
        head_roles(model, circuits=1)


@pytest.mark.slow
def test_d32h2_circuits_under_mean_and_their_mode_dependence():
    """d32h2, ``head_roles(n=2000)``: the whole test set is the circuit step's (CIRCUIT_MAX_N = 2000)."""
    model = load_pretrained("d32h2")
    v = head_roles(model, n=2000, n_pair=200, n_boot=20, hows=("zero", "mean"))
    elimination, recall = v.circuit("elimination"), v.circuit("recall")
    assert elimination.nodes == ("L0H1@last", "L0MLP@last")
    assert recall.nodes == ("L0H0@last", "L0H1@last", "L0MLP@last")
    e, r = elimination.measured, recall.measured
    assert elimination.metrics.n_samples == 2000
    assert e.f_model == pytest.approx(8.4719, abs=1e-3)
    assert e.faithfulness == pytest.approx(0.9002, abs=1e-3) and e.faithfulness_error < 0.1
    assert e.completeness == pytest.approx(1.4984, abs=1e-3)
    assert [m.minimality for m in e.minimality] == pytest.approx([11.7381, 10.4220], abs=1e-3)
    assert r.f_model == pytest.approx(9.3356, abs=1e-3)
    assert r.faithfulness == pytest.approx(1.0, abs=1e-9) and r.completeness == pytest.approx(0.0, abs=1e-9)
    # mode dependence: the elimination circuit is faithful under mean ablation only
    assert elimination.faithful_by_how == (("zero", False), ("mean", True))
    assert elimination.mode_dependent and not recall.mode_dependent
    assert elimination.by_mode.get("zero", "elimination").faithfulness_error > 1.0
    assert elimination.note().startswith("faithful under mean (0.90) but not under zero (error 1.4")
    assert "[mode-dependent]" in v.summary()
    assert hook_count(model) == 0
