"""The shipped models' neuron rules: the step features, the committed tables regenerate, and what they say."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from perm_circuits.analysis.hypothesis.spec import batch_tokens
from perm_circuits.analysis.study.neuron_rules import (
    QUERY_POSITIONS, Y_POSITIONS, exhaustive_sets, fit_model_rules, pair_features, replacement_retention,
    step_features,
)

RESULTS = Path(__file__).resolve().parents[3] / "results"


@pytest.fixture(scope="module")
def tables():
    return pd.read_csv(RESULTS / "neuron_rules.csv"), pd.read_csv(RESULTS / "neuron_retention.csv")


@pytest.fixture(scope="module")
def d16h1(pretrained):
    model = pretrained("d16h1")
    return model, fit_model_rules(model)


def test_step_features_read_the_sequence():
    row = torch.tensor([[1, 5, 3, 2, 4, 4, 2, 1, 3]])  # x5 = x2: y bound 2, slot 1, used {5, 2, 4, 1}
    values = {f.name: f.values(row)[0] for f in step_features(8)}
    assert values["query x"] == (3,) and values["y bound to the query"] == (2,) and values["matched slot"] == (1,)
    assert values["used y values"] == (0b11011,) and values["value 3 unused"] == (True,)
    assert values["value 5 unused"] == (False,) and values["query repeats x1"] == (False,)
    assert values["answer set"] == (2,) and values["previous pair"] == (2 * 8 + 1,)
    assert values["y before the matched x"] == (5,) and values["y after the matched pair"] == (4,)
    fresh = {f.name: f.values(torch.tensor([[1, 5, 3, 2, 4, 4, 2, 1, 5]]))[0] for f in step_features(8)}
    assert fresh["answer set"] == (32 + 31 - 0b11011,) and fresh["matched slot"] == (-1,)
    assert [f.name for f in step_features(0)] == ["query x"]
    with pytest.raises(ValueError, match="query position"):
        step_features(3)
    at5 = {f.name: f.values(row)[0] for f in pair_features(5)}  # y3 = 4, its x3 = 4, used before {5, 2}
    assert at5["this y"] == (4,) and at5["its x"] == (4,) and at5["used y values"] == (0b10010,)
    assert at5["previous pair"] == (3 * 8 + 2,) and [f.name for f in pair_features(1)] == ["this y", "its x"]
    with pytest.raises(ValueError, match="y position"):
        pair_features(4)


def test_the_committed_rules_of_d16h1_regenerate(d16h1, tables):
    _, rules = d16h1
    fresh = rules.to_dataframe()
    committed = tables[0][tables[0]["model"] == "d16h1"].reset_index(drop=True)
    assert len(fresh) == len(committed) == 32 * len(QUERY_POSITIONS)
    assert fresh["rule"].tolist() == committed["rule"].tolist()
    assert fresh["r2"].tolist() == pytest.approx(committed["r2"].tolist(), abs=1e-5)
    assert fresh["share"].tolist() == pytest.approx(committed["share"].tolist(), abs=1e-5)
    assert fresh["explained"].tolist() == committed["explained"].tolist()


def test_the_committed_retention_of_d16h1_regenerates(d16h1, tables):
    model, rules = d16h1
    sets = exhaustive_sets(model, "test")
    assert [len(batch_tokens(sets[k])) for k in ("elimination", "recall")] == [24 * 120, 24 * 120]
    fresh = pd.DataFrame(replacement_retention(model, rules, sets))
    committed = tables[1][tables[1]["model"] == "d16h1"].reset_index(drop=True)
    assert fresh[["variant", "metric"]].values.tolist() == committed[["variant", "metric"]].values.tolist()
    assert fresh["retention"].tolist() == pytest.approx(committed["retention"].tolist(), abs=1e-5)


def test_what_the_committed_tables_say(tables):
    neurons, kept = tables
    retention = kept.set_index(["model", "variant", "metric"])["retention"]
    for model in ("d16h1", "d32h1", "d32h2", "d16h1l2-any"):
        # with the unexplained neurons kept, the rules keep >= 99% of both skills on the exhaustive test set
        for metric in ("elimination_accuracy", "recall_accuracy"):
            assert retention[(model, "keep", metric)] >= 0.99, (model, metric)
        # the rules alone (every neuron on its best rule) suffice too
        assert retention[(model, "rule", metric)] >= 0.99, (model, metric)
    # the two-layer model's layer-1 neurons at the last step all read the answer set; most stay below the R^2
    # threshold (unexplained, most of the output norm), yet their rules alone keep recall
    last = neurons[(neurons["model"] == "d16h1l2-any") & (neurons["layer"] == 1) & (neurons["position"] == 8)]
    assert last["features"].str.split("; ").apply(lambda f: "answer set" in f).all() and len(last) == 32
    assert last.loc[~last["explained"], "share"].sum() > 0.5
    assert retention[("d16h1l2-any", "rule", "recall_accuracy")] > 0.997
    # the two-layer model's layer-0 neurons are fitted at the y positions too (layer 1 reads them), all explained;
    # no one-layer model and no last layer has a rule there
    odd = neurons[neurons["position"] % 2 == 1]
    assert set(odd["model"]) == {"d16h1l2-any"} and set(odd["layer"]) == {0} and set(odd["position"]) == set(Y_POSITIONS)
    assert odd["explained"].all() and len(odd) == 32 * len(Y_POSITIONS)
    # every rule reads at most three features, and a rule is explained exactly when R^2 >= the threshold
    assert neurons["n_features"].max() == 3
    assert ((neurons["r2"] >= neurons["threshold"]) == neurons["explained"]).all()
