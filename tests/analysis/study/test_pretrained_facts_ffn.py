"""Measured facts about the shipped models: FFN key-value probing, MLP prediction flips, direct
logit attribution and memory-recall probes (src/perm_circuits/pretrained/{d32h2,d32h1,d16h1}).

All three models reach 100% last-step accuracy on both subgroups.  What these numbers say about the
study's section 09 claim ("the FFN does the recall lookup"):

* The MLP carries nearly all of the direct logit difference in every subgroup (>= 95%); no head's
  direct effect exceeds 1 logit.  Before the MLP (logit lens on resid_mid) the last step is right
  only 9-48% of the time; after it 100%: the MLP flips the top-1 in 52-91% of last-step cases.
* Neurons whose top triggers are repeated last queries exist (8-25 per model), and the five
  neurons with the largest recall-vs-trap attribution all have the *elimination answer* as their
  value's most negative token (``trap_suppressed`` = 1): they veto the trap.  Their value's top
  token agrees with the recalled y only near chance (mean ``recall_agreement`` 0.14-0.36, chance
  0.2).  Together the repeated-x neurons carry > 90% of the MLP's recall-vs-trap attribution but
  only 13-29% of its recall-vs-mean attribution: the FFN "lookup" is mostly a veto of the
  elimination answer keyed on (repeated query, used set), not a key -> y1 memory.
"""

from __future__ import annotations

import pytest
from jaxtyping import install_import_hook

with install_import_hook(
    ["perm_circuits.analysis.probes.memory", "perm_circuits.analysis.probes.dla", "perm_circuits.analysis.study.ffn"],
    "beartype.beartype",
):
    from perm_circuits.analysis.probes import dla as attribution
    from perm_circuits.analysis.probes import memory
    from perm_circuits.analysis.study import ffn

MODELS = ("d32h2", "d32h1", "d16h1")
SUB = ("steps 1-4", "last-step elimination", "last-step recall")

FACTS = {
    "d32h2": {
        "mean_agreement": 0.232,
        "fraction_above_chance": 0.406,
        "n_repeated": 20,
        "repeated_recall_agreement": 0.273,
        "repeated_trap_suppressed": 0.70,
        "repeated_share_vs_trap": 1.256,
        "repeated_share_vs_mean": 0.128,
        "flip_rate": (0.602, 0.697, 0.847),
        "accuracy_mid": (0.209, 0.303, 0.153),
        "trap_mid": 0.254,
        "dla": {"L0H0": (-0.001, 0.046, 0.005), "L0H1": (0.024, 0.183, -0.252), "L0mlp": (3.158, 11.184, 9.811)},
        "actual": (3.159, 11.354, 9.403),
        "elimination_head": "L0H1",
        "probes": {
            ("L0H0", "copy"): 0.2, ("L0H0", "suppress"): 0.2, ("L0H0", "x_match"): 1.0, ("L0H0", "prev_y"): 0.0,
            ("L0H0", "self_y"): 0.75, ("L0H0", "last_to_y1"): 0.0, ("L0H1", "copy"): 0.2, ("L0H1", "suppress"): 0.6,
            ("L0H1", "x_match"): 0.0, ("L0H1", "prev_y"): 0.5, ("L0H1", "self_y"): 0.0, ("L0H1", "last_to_y1"): 0.0,
            ("L0MLP", "copy"): 0.4, ("L0MLP", "suppress"): 0.0,
        },
    },
    "d32h1": {
        "mean_agreement": 0.189,
        "fraction_above_chance": 0.375,
        "n_repeated": 25,
        "repeated_recall_agreement": 0.139,
        "repeated_trap_suppressed": 0.402,
        "repeated_share_vs_trap": 1.094,
        "repeated_share_vs_mean": 0.129,
        "flip_rate": (0.597, 0.522, 0.909),
        "accuracy_mid": (0.252, 0.478, 0.091),
        "trap_mid": 0.613,
        "dla": {"L0H0": (0.099, 0.502, -0.848), "L0mlp": (3.159, 11.402, 10.787)},
        "actual": (3.227, 11.766, 9.657),
        "elimination_head": "L0H0",
        "probes": {
            ("L0H0", "copy"): 0.0, ("L0H0", "suppress"): 1.0, ("L0H0", "x_match"): 0.8, ("L0H0", "prev_y"): 0.5,
            ("L0H0", "self_y"): 0.25, ("L0H0", "last_to_y1"): 0.0, ("L0MLP", "copy"): 0.6, ("L0MLP", "suppress"): 0.2,
        },
    },
    "d16h1": {
        "mean_agreement": 0.326,
        "fraction_above_chance": 0.531,
        "n_repeated": 8,
        "repeated_recall_agreement": 0.359,
        "repeated_trap_suppressed": 0.875,
        "repeated_share_vs_trap": 1.451,
        "repeated_share_vs_mean": 0.285,
        "flip_rate": (0.526, 0.626, 0.879),
        "accuracy_mid": (0.195, 0.374, 0.121),
        "trap_mid": 0.508,
        "dla": {"L0H0": (0.111, 0.280, -0.854), "L0mlp": (3.446, 10.074, 10.700)},
        "actual": (3.525, 10.272, 9.646),
        "elimination_head": "L0H0",
        "probes": {
            ("L0H0", "copy"): 0.0, ("L0H0", "suppress"): 0.8, ("L0H0", "x_match"): 1.0, ("L0H0", "prev_y"): 0.75,
            ("L0H0", "self_y"): 0.5, ("L0H0", "last_to_y1"): 0.0, ("L0MLP", "copy"): 1.0, ("L0MLP", "suppress"): 0.0,
        },
    },
}

_CACHE: dict[str, dict] = {}


@pytest.fixture(params=MODELS)
def measured(request, pretrained):
    name = request.param
    if name not in _CACHE:
        model = pretrained(name)
        _CACHE[name] = {
            "model": model,
            "kv": ffn.ffn_key_value_probe(model),
            "flips": ffn.mlp_prediction_flips(model),
            "dla": attribution.direct_logit_attribution(model),
            "dla_mean": attribution.direct_logit_attribution(model, recall_baseline="mean"),
            "probes": memory.model_memory_probes(model),
        }
    return name, FACTS[name], _CACHE[name]


def test_ffn_key_value_agreement(measured):
    name, facts, m = measured
    kv = m["kv"]
    assert len(kv.live) == len(kv.neurons)  # no dead neuron on the enumerated test inputs
    assert kv.n_sequences == 5760
    assert kv.mean_agreement == pytest.approx(facts["mean_agreement"], abs=0.02)
    assert kv.fraction_above_chance == pytest.approx(facts["fraction_above_chance"], abs=0.05)
    assert len(kv.repeated_neurons) == pytest.approx(facts["n_repeated"], abs=2)
    summary = kv.summary()
    assert summary["repeated_recall_agreement"] == pytest.approx(facts["repeated_recall_agreement"], abs=0.05)
    assert summary["repeated_trap_suppressed"] == pytest.approx(facts["repeated_trap_suppressed"], abs=0.05)
    for neuron in kv.neurons:
        if neuron.fires_on_repeated:
            assert neuron.top_position == 8


def test_repeated_neurons_veto_the_elimination_answer(measured):
    name, facts, m = measured
    kv, vs_trap, vs_mean = m["kv"], m["dla"].neuron_dataframe(), m["dla_mean"].neuron_dataframe()
    recall_trap, recall_mean = vs_trap["last-step recall"], vs_mean["last-step recall"]
    for label in recall_trap.sort_values(ascending=False).index[:5]:
        neuron = kv.neurons[int(label.split("N")[1])]
        assert neuron.fires_on_repeated, label
        assert neuron.trap_suppressed == 1.0, label
    repeated = [f"L0N{n}" for n in kv.repeated_neurons]
    share_trap = recall_trap[repeated].sum() / recall_trap.sum()
    share_mean = recall_mean[repeated].sum() / recall_mean.sum()
    assert share_trap == pytest.approx(facts["repeated_share_vs_trap"], abs=0.1)
    assert share_trap > 0.9
    assert share_mean == pytest.approx(facts["repeated_share_vs_mean"], abs=0.05)
    assert share_mean < 0.35


def test_mlp_flips_the_prediction(measured):
    name, facts, m = measured
    flips = m["flips"]
    for k, sub in enumerate(SUB):
        stats = flips.get(sub)
        assert stats.flip_rate == pytest.approx(facts["flip_rate"][k], abs=0.02), sub
        assert stats.accuracy_mid == pytest.approx(facts["accuracy_mid"][k], abs=0.02), sub
        assert stats.consistent_post == 1.0, sub
        assert stats.broken_rate == 0.0 or k == 0, sub
    for sub in SUB[1:]:
        assert flips.get(sub).accuracy_post == 1.0
    recall = flips.get("last-step recall")
    assert recall.trap_mid == pytest.approx(facts["trap_mid"], abs=0.02)
    assert recall.trap_post == 0.0


def test_direct_logit_attribution(measured):
    name, facts, m = measured
    dla = m["dla"]
    for k, sub in enumerate(SUB):
        assert float(dla.actual[k]) == pytest.approx(facts["actual"][k], abs=0.05), sub
        assert dla.component("L0mlp", sub) > 0.95 * float(dla.actual[k]), sub
        for component, values in facts["dla"].items():
            assert dla.component(component, sub) == pytest.approx(values[k], abs=0.05), (component, sub)
        for component in dla.components:
            if component.startswith("L0H"):
                assert abs(dla.component(component, sub)) < 1.0
    assert dla.component(facts["elimination_head"], "last-step recall") < 0  # it pushes the trap


def test_memory_probes(measured):
    name, facts, m = measured
    probes = m["probes"]
    measured_values = {(p.component, p.map): p.recall for p in probes.probes}
    assert measured_values == pytest.approx(facts["probes"])
