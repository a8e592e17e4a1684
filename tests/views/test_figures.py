"""Tests of perm_circuits.views.figures: structure, exact values, input validation, offline HTML."""

from __future__ import annotations

import re

import math
import sys

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from jaxtyping import install_import_hook

from perm_circuits import ModelConfig, TaskConfig, TrainingHistory, build_model, evaluate, make_test_set, probe_sequence
from perm_circuits.evaluate import probe_probabilities
from perm_circuits.hooks import hook_count
from perm_circuits.views.html import remote_resource_refs
from perm_circuits.analysis import figure_data as D

if "perm_circuits.views.figures" not in sys.modules:  # check annotations at runtime, like conftest
    with install_import_hook("perm_circuits.views.figures", "beartype.beartype"):
        import perm_circuits.views.figures  # noqa: F401
from perm_circuits.views import figures as F  # noqa: E402

POSITIONS = ["0: x1", "1: y1", "2: x2", "3: y2", "4: x3", "5: y3", "6: x4", "7: y4", "8: x5"]


@pytest.fixture(scope="module")
def small():
    return build_model("d16h1")


@pytest.fixture(scope="module")
def wide():
    return build_model("d32h2", seed=3)


@pytest.fixture(scope="module")
def test_set(task):
    return make_test_set(task, n=200)


@pytest.fixture(scope="module")
def evaluations(small, wide, test_set, task):
    return evaluate(small, test_set, task=task), evaluate(wide, test_set, task=task)


def _z(trace) -> np.ndarray:
    return np.array(trace.z, dtype=float)


def _mean_pattern(model, tokens) -> torch.Tensor:
    _, cache = model.run_with_cache(tokens)
    return cache["blocks.0.attn.hook_pattern"].mean(0)  # [head, q, k]


# ----------------------------------------------------------------------------- attention


def test_attention_heatmaps_values_and_labels(wide, test_set):
    fig = F.attention_heatmaps(D.mean_attention(wide, test_set))
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 2 and [t.name for t in fig.data] == ["L0H0", "L0H1"]
    expected = _mean_pattern(wide, test_set.tokens)
    for head, trace in enumerate(fig.data):
        assert list(trace.x) == POSITIONS and list(trace.y) == POSITIONS
        z = _z(trace)
        lower = np.tril_indices(9)
        np.testing.assert_allclose(z[lower], expected[head].numpy()[lower], atol=1e-6)
        assert np.isnan(z[np.triu_indices(9, k=1)]).all()  # causal: blank, not 0
        np.testing.assert_allclose(np.nansum(z, axis=1), 1.0, atol=1e-5)
        assert "attention" in trace.hovertemplate
    assert fig.layout.xaxis.title.text == "key (attended) position"
    assert fig.layout.yaxis.title.text == "query position"
    assert "200 test sequences" in fig.layout.title.text
    assert hook_count(wide) == 0


def test_attention_heatmaps_repeated_split(wide, small, test_set):
    fig = F.attention_heatmaps(D.mean_attention(wide, test_set, repeated="split"))
    assert len(fig.data) == 4
    titles = [a.text for a in fig.layout.annotations]
    n_rep = int(test_set.extras["repeated"].sum())
    assert f"L0H1: repeated last query (n={n_rep})" in titles
    assert f"L0H0: new last query (n={200 - n_rep})" in titles
    expected = _mean_pattern(wide, test_set.tokens[test_set.extras["repeated"]])
    np.testing.assert_allclose(_z(fig.data[3])[8], expected[1, 8].numpy(), atol=1e-6)
    only = F.attention_heatmaps(D.mean_attention(small, test_set, repeated=True))
    assert len(only.data) == 1


def test_attention_heatmaps_bad_inputs(small, test_set):
    with pytest.raises(ValueError, match="repeated"):
        F.attention_heatmaps(D.mean_attention(small, test_set, repeated="both"))
    plain = make_test_set(TaskConfig(), n=50)
    with pytest.raises(ValueError, match="no sequences"):
        F.attention_heatmaps(D.mean_attention(small, plain, repeated=True))
    with pytest.raises(TypeError):
        F.attention_heatmaps(D.mean_attention(small, test_set.tokens))
    with pytest.raises(TypeError, match="TransformerBridge"):
        F.attention_heatmaps(D.mean_attention("d16h1", test_set))
    assert hook_count(small) == 0


def test_sequence_attention(wide):
    fig = F.sequence_attention(D.sequence_attention_patterns(wide, [2, 4, 5, 3, 4, 5, 3, 2, 2]))
    assert len(fig.data) == 2
    labels = list(fig.data[0].x)
    assert labels[0] == "0: x=2" and labels[1] == "1: y=4" and labels[8] == "8: x=2"
    expected = _mean_pattern(wide, probe_sequence())
    np.testing.assert_allclose(_z(fig.data[1])[8], expected[1, 8].numpy(), atol=1e-6)
    assert "[2,4, 5,3, 4,5, 3,2, 2]" in fig.layout.title.text
    same = F.sequence_attention(D.sequence_attention_patterns(wide, probe_sequence()[0]))
    np.testing.assert_allclose(_z(same.data[0])[5, :6], _z(fig.data[0])[5, :6])


def test_sequence_attention_bad_inputs(small):
    with pytest.raises(ValueError, match="one sequence"):
        F.sequence_attention(D.sequence_attention_patterns(small, probe_sequence().repeat(2, 1)))
    with pytest.raises(ValueError, match="length"):
        F.sequence_attention(D.sequence_attention_patterns(small, [2, 4, 5]))
    with pytest.raises(ValueError, match="1..5"):
        F.sequence_attention(D.sequence_attention_patterns(small, [2, 4, 5, 3, 4, 5, 3, 2, 7]))
    with pytest.raises(TypeError):
        F.sequence_attention(D.sequence_attention_patterns(small, torch.ones(9)))
    assert hook_count(small) == 0


# ----------------------------------------------------------------------------- step accuracy


def test_step_accuracy_one_model(evaluations):
    evaluation = evaluations[0]
    fig = F.step_accuracy(evaluation)
    assert len(fig.data) == 4
    bars, mae, bayes, bayes_train = fig.data
    assert isinstance(bars, go.Bar) and bars.name == "d16h1 accuracy"
    steps = evaluation.detail.steps
    assert list(bars.y) == [s.accuracy for s in steps]
    assert list(mae.y) == [s.mae_uniform for s in steps]
    assert mae.yaxis == "y2"  # secondary axis
    assert list(bayes.y) == [s.bayes_accuracy for s in steps]
    assert list(bayes_train.y) == [s.bayes_accuracy_train for s in steps]
    assert bayes.y[-1] == pytest.approx(1.0) and bayes.y[0] == pytest.approx(0.2, abs=1e-6)
    assert "recall" in bars.customdata[-1] and "elimination" in bars.customdata[-1]
    assert fig.layout.yaxis.title.text == "accuracy"
    assert fig.layout.yaxis2.title.text == "MAE vs uniform-prior posterior"
    assert fig.layout.xaxis.title.text == "y-prediction step"
    train = F.step_accuracy(evaluation, prior="train")
    assert list(train.data[1].y) == [s.mae_train for s in steps]


def test_step_accuracy_compares_models(evaluations):
    fig = F.step_accuracy(*evaluations)
    assert len(fig.data) == 6  # 2 x (bars + MAE) + the shared Bayesian targets
    names = [t.name for t in fig.data]
    assert "d32h2 accuracy" in names and "Bayesian target, uniform prior" in names
    twice = F.step_accuracy(evaluations[0], evaluations[0])
    assert [t.name for t in twice.data][:3] == [
        "d16h1 accuracy",
        "d16h1 MAE vs uniform-prior posterior",
        "d16h1 (2) accuracy",
    ]


def test_step_accuracy_bad_inputs(evaluations):
    with pytest.raises(ValueError, match="at least one"):
        F.step_accuracy()
    with pytest.raises(TypeError):
        F.step_accuracy({"accuracy": 1.0})
    with pytest.raises(ValueError, match="prior"):
        F.step_accuracy(evaluations[0], prior="flat")


# ----------------------------------------------------------------------------- walkthrough / probe


def test_walkthrough_study_sequence(small):
    fig = F.walkthrough(D.walkthrough_distributions(small))
    assert len(fig.data) == 15  # 5 steps x (model, Bayes uniform, Bayes train)
    titles = [a.text for a in fig.layout.annotations]
    assert [t.split("target y=")[1] for t in titles] == ["3", "5", "4", "2", "1"]
    assert titles[1].startswith("<b>Step 2</b>: [2,3, 1] → ?<br>used y: 3 ·")
    logits = small(torch.tensor([list(F.STUDY_SEQUENCE)]))
    expected = logits[0, 0::2].softmax(-1)[:, 1:].detach()
    for step in range(5):
        model, uniform, train = fig.data[3 * step : 3 * step + 3]
        assert model.name == "model" and uniform.name == "Bayes, uniform prior"
        np.testing.assert_allclose(model.y, expected[step].numpy(), atol=1e-6)
    step2 = fig.data[4]  # Bayes uniform at step 2: y=3 used, 1/4 on the rest
    np.testing.assert_allclose(step2.y, [0.25, 0.25, 0.0, 0.25, 0.25], atol=1e-6)
    assert list(step2.x) == ["y=1", "y=2", "y=3<br>✕ used", "y=4", "y=5<br>✓ target"]
    np.testing.assert_allclose(fig.data[13].y, [1, 0, 0, 0, 0], atol=1e-6)
    assert fig.layout.yaxis.title.text == "P(y = v)"
    assert fig.layout.xaxis.title.text == "value v"
    assert sum(t.showlegend for t in fig.data) == 3


def test_walkthrough_probe_marks_recall_and_trap(small):
    fig = F.walkthrough(D.walkthrough_distributions(small, probe_sequence()))
    last = fig.data[12]
    assert list(last.x) == ["y=1<br>trap", "y=2<br>✕ used", "y=3<br>✕ used", "y=4<br>✓ recall", "y=5<br>✕ used"]
    np.testing.assert_allclose(fig.data[13].y, [0, 0, 0, 1, 0], atol=1e-6)  # uniform prior: recall
    assert "target y=4" in fig.layout.annotations[4].text


def test_walkthrough_bad_inputs(small):
    with pytest.raises(ValueError, match="not consistent"):
        F.walkthrough(D.walkthrough_distributions(small, [2, 3, 2, 4, 1, 5, 3, 2, 5]))
    with pytest.raises(ValueError, match="length"):
        F.walkthrough(D.walkthrough_distributions(small, [2, 3, 1]))
    with pytest.raises(ValueError, match="one sequence"):
        F.walkthrough(D.walkthrough_distributions(small, probe_sequence().repeat(2, 1)))
    with pytest.raises(TypeError):
        F.walkthrough(D.walkthrough_distributions(small, [2.0, 3, 1, 5, 4, 4, 3, 2, 5]))


def test_probe_distribution(small, wide):
    fig = F.probe_distribution(D.probe_distributions({"d16h1": small, "d32h2": wide}))
    assert len(fig.data) == 5
    assert [t.name for t in fig.data][0] == "y=1 (elimination trap)"
    assert fig.data[3].name == "y=4 (recall answer)"
    assert fig.data[0].marker.color == F.ELIMINATION_COLOR and fig.data[3].marker.color == F.RECALL_COLOR
    assert list(fig.data[0].x) == ["d16h1", "d32h2"]
    for index, model in enumerate((small, wide)):
        probs = probe_probabilities(model)
        assert [t.y[index] for t in fig.data] == pytest.approx(probs.tolist(), abs=1e-7)
    assert fig.layout.yaxis.title.text == "P(y = v) at the last query"
    assert "recall answer 4" in fig.layout.title.text


def test_probe_distribution_bad_inputs(small):
    with pytest.raises(ValueError, match="empty"):
        F.probe_distribution(D.probe_distributions({}))
    with pytest.raises(TypeError):
        F.probe_distribution(D.probe_distributions([small]))
    with pytest.raises(ValueError, match="V=5"):
        F.probe_distribution(D.probe_distributions({"v4": build_model(ModelConfig(d_model=8, n_heads=1, V=4))}))


# ----------------------------------------------------------------------------- heatmaps


def test_heatmap_values_equal_frame():
    frame = pd.DataFrame(
        {
            "component": ["L0H0", "L0H0", "L0H1", "L0MLP", "L0H1"],
            "how": ["zero", "mean", "zero", "zero", "mean"],
            "recall_accuracy": [0.1, 0.2, 0.95, 0.5, 0.9],
        }
    )
    fig = F.heatmap(frame, "how", "component", "recall_accuracy", "Recall under ablation")
    (trace,) = fig.data
    assert list(trace.x) == ["zero", "mean"] and list(trace.y) == ["L0H0", "L0H1", "L0MLP"]
    z = _z(trace)
    for row in frame.itertuples():
        assert z[list(trace.y).index(row.component), list(trace.x).index(row.how)] == row.recall_accuracy
    assert math.isnan(z[2, 1])  # L0MLP has no "mean" row: blank cell
    assert fig.layout.title.text == "Recall under ablation"
    assert fig.layout.xaxis.title.text == "how" and fig.layout.yaxis.title.text == "component"
    assert "recall_accuracy" in trace.hovertemplate


def test_heatmap_sorts_numeric_axes_and_hover_columns():
    frame = pd.DataFrame({"pos": [3, 1, 2], "head": ["a", "a", "a"], "v": [3.0, 1.0, 2.0], "ci": [0.3, 0.1, 0.2]})
    fig = F.heatmap(frame, "pos", "head", "v", "t", hover_columns=["ci"])
    assert list(fig.data[0].x) == ["1", "2", "3"]
    assert list(_z(fig.data[0])[0]) == [1.0, 2.0, 3.0]
    assert fig.data[0].customdata[0][2][0] == 0.3 and "ci" in fig.data[0].hovertemplate


def test_heatmap_bad_inputs():
    frame = pd.DataFrame({"a": ["x", "x"], "b": ["y", "y"], "v": [1.0, 2.0], "s": ["p", "q"]})
    with pytest.raises(ValueError, match="sharing"):
        F.heatmap(frame, "a", "b", "v", "t")
    with pytest.raises(ValueError, match="no column"):
        F.heatmap(frame, "a", "c", "v", "t")
    with pytest.raises(TypeError, match="numeric"):
        F.heatmap(frame.iloc[:1], "a", "b", "s", "t")
    with pytest.raises(ValueError, match="no rows"):
        F.heatmap(frame.iloc[:0], "a", "b", "v", "t")
    with pytest.raises(TypeError):
        F.heatmap(frame.to_dict(), "a", "b", "v", "t")
    with pytest.raises(ValueError, match="different"):
        F.heatmap(frame, "a", "a", "v", "t")


def test_ablation_heatmap_from_frame():
    frame = pd.DataFrame(
        {
            "component": ["none", "L0H0", "L0H0", "L0H1", "L0H1"],
            "how": ["none", "zero", "mean", "zero", "mean"],
            "elimination_accuracy": [1.0, 0.3, 0.4, 0.99, 0.98],
            "recall_accuracy": [1.0, 0.97, 0.96, 0.01, 0.02],
        }
    )
    fig = F.ablation_heatmap(frame)
    assert len(fig.data) == 2
    elimination, recall = fig.data
    assert list(recall.y) == ["L0H0", "L0H1"] and list(recall.x) == ["zero", "mean"]
    np.testing.assert_array_equal(_z(recall), [[0.97, 0.96], [0.01, 0.02]])
    np.testing.assert_array_equal(_z(elimination), [[0.3, 0.4], [0.99, 0.98]])
    assert [a.text for a in fig.layout.annotations] == [
        "elimination_accuracy (baseline 1.000)",
        "recall_accuracy (baseline 1.000)",
    ]
    one = F.ablation_heatmap(frame, "recall_accuracy")
    assert len(one.data) == 1
    with pytest.raises(ValueError, match="no column"):
        F.ablation_heatmap(frame, "recall")
    with pytest.raises(TypeError):
        F.ablation_heatmap([1, 2])


def test_ablation_heatmap_from_analysis(small, test_set, task):
    from perm_circuits.analysis.interventions.ablation import ablation_table

    table = ablation_table(small, ["zero"], test_set, task=task)
    fig = F.ablation_heatmap(table)
    frame = table.to_dataframe()
    row = frame[(frame.component == "L0H0") & (frame.how == "zero")].iloc[0]
    trace = fig.data[1]
    assert _z(trace)[list(trace.y).index("L0H0"), 0] == pytest.approx(row["recall_accuracy"])
    assert fig.layout.title.text.startswith("d16h1")


PATCH_FRAME = pd.DataFrame(
    {
        "model": "d32h2",
        "activation": "pattern_source",
        "layer": [0, 0, 0, 0],
        "head": [0, 0, 1, 1],
        "position": [8, 8, 8, 8],
        "source_position": [1, 0, 0, 1],
        "neurons": None,
        "mean": [0.05, 0.01, 0.9, -0.1],
        "ci_low": [0.0, -0.02, 0.8, -0.2],
        "ci_high": [0.1, 0.04, 1.0, 0.0],
        "logit_diff": [0.1, 0.0, 2.0, -0.3],
    }
)


def test_patching_heatmap_from_frame():
    fig = F.patching_heatmap(PATCH_FRAME)
    (trace,) = fig.data
    assert list(trace.x) == ["0: x1", "1: y1"] and list(trace.y) == ["L0H0", "L0H1"]
    np.testing.assert_array_equal(_z(trace), [[0.01, 0.05], [0.9, -0.1]])
    assert fig.layout.xaxis.title.text == "source position"
    assert "ci_low" in trace.hovertemplate and trace.zmid == 0
    assert fig.layout.title.text.startswith("d32h2: activation patching (pattern_source)")
    by_position = F.patching_heatmap(PATCH_FRAME.iloc[[1, 2]], x="position")
    assert list(by_position.data[0].x) == ["8: x5"]


def test_patching_heatmap_from_analysis(small):
    from perm_circuits.analysis.study.recall_patching import patch_head_sources

    sweep = patch_head_sources(small, n=60, n_boot=20)
    fig = F.patching_heatmap(sweep)
    frame = sweep.to_dataframe()
    assert list(fig.data[0].x) == F.position_labels(9)
    assert sorted(frame.source_position) == list(range(9))
    np.testing.assert_allclose(_z(fig.data[0])[0], frame.sort_values("source_position")["mean"], equal_nan=True)


def test_patching_heatmap_bad_inputs():
    with pytest.raises(ValueError, match="no column"):
        F.patching_heatmap(PATCH_FRAME.drop(columns="layer"))
    with pytest.raises(ValueError, match="no column"):
        F.patching_heatmap(PATCH_FRAME, x="dest")
    with pytest.raises(ValueError, match="no rows"):
        F.patching_heatmap(PATCH_FRAME.iloc[:0])
    with pytest.raises(TypeError):
        F.patching_heatmap("sweep")


# ----------------------------------------------------------------------------- tables and curves


def test_ffn_table(small):
    from perm_circuits.analysis.study.ffn import ffn_key_value_probe

    probe = ffn_key_value_probe(small)
    fig = F.ffn_table(probe)
    (table,) = fig.data
    assert isinstance(table, go.Table)
    frame = probe.to_dataframe().reset_index()
    headers = list(table.header.values)
    assert "<b>value top token</b>" in headers and "<b>agreement</b>" in headers
    columns = [c for c in F.FFN_COLUMNS if c in frame.columns]
    assert len(table.cells.values) == len(columns) and len(table.cells.values[0]) == len(frame)
    agreement = table.cells.values[columns.index("agreement")]
    shown = [float(a) for a in agreement if a != "–"]
    assert shown == sorted(shown, reverse=True)
    neurons = [int(n) for n in table.cells.values[0]]
    assert sorted(neurons) == frame.neuron.tolist()
    top = frame.sort_values("agreement", ascending=False, kind="stable").iloc[0]
    assert neurons[0] == top.neuron and table.cells.values[columns.index("value_top")][0] == str(top.value_top)
    small_table = F.ffn_table(probe, ["neuron", "value_top"], sort_by=None)
    assert list(small_table.data[0].cells.values[0]) == [str(n) for n in frame.neuron]
    with pytest.raises(ValueError, match="no column"):
        F.ffn_table(probe, ["neuron", "nope"])
    with pytest.raises(TypeError):
        F.ffn_table(probe, "neuron")


def _history() -> TrainingHistory:
    rows = tuple(
        {
            "epoch": epoch,
            "train_loss": 1.5 - 0.1 * epoch,
            "test_loss": 1.6 - 0.1 * epoch,
            "elimination_accuracy": 0.2 * epoch,
            "recall_accuracy": 0.1 * epoch,
            "probe_p1": 1.0 - 0.2 * epoch,
            "probe_p4": 0.2 * epoch,
        }
        for epoch in range(1, 5)
    )
    return TrainingHistory(rows)


def test_training_curves():
    history = _history()
    fig = F.training_curves(history)
    assert [t.name for t in fig.data] == list(F.DEFAULT_CURVES)
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    np.testing.assert_allclose(fig.data[2].y, history.to_dataframe()["recall_accuracy"])
    colors = {t.name: t.line.color for t in fig.data}
    assert colors["recall_accuracy"] == colors["probe_p4"] == F.RECALL_COLOR
    assert colors["elimination_accuracy"] == colors["probe_p1"] == F.ELIMINATION_COLOR
    assert fig.layout.yaxis.title.text == "cross-entropy (nats)"
    assert fig.layout.yaxis2.title.text == "accuracy" and fig.layout.yaxis3.title.text == "probe P(y=v)"
    assert fig.layout.xaxis3.title.text == "epoch"
    loss_only = F.training_curves(history.to_dataframe(), columns=["train_loss", "test_loss"])
    assert len(loss_only.data) == 2 and loss_only.data[1].yaxis == "y"


def test_training_curves_bad_inputs():
    with pytest.raises(ValueError, match="no epochs"):
        F.training_curves(TrainingHistory())
    with pytest.raises(ValueError, match="no column"):
        F.training_curves(_history(), columns=["test_loss", "recall"])
    with pytest.raises(TypeError):
        F.training_curves(_history(), columns="test_loss")
    with pytest.raises(ValueError, match="epoch"):
        F.training_curves(pd.DataFrame({"test_loss": [1.0]}), columns=["test_loss"])


def test_probe_curves_wide_and_tidy():
    wide = pd.DataFrame({"epoch": [0, 1, 2], "L0H1 OV copy": [0.2, 0.6, 1.0], "L0MLP copy": [0.2, 0.2, 0.4]})
    fig = F.probe_curves(wide)
    assert [t.name for t in fig.data] == ["L0H1 OV copy", "L0MLP copy"]
    assert list(fig.data[0].y) == [0.2, 0.6, 1.0]
    assert fig.layout.xaxis.title.text == "epoch"
    tidy = pd.DataFrame(
        {
            "epoch": [0, 0, 1, 1],
            "component": ["L0H1", "L0MLP", "L0H1", "L0MLP"],
            "circuit": ["OV", "MLP", "OV", "MLP"],
            "map": ["copy"] * 4,
            "mode": ["argmax"] * 4,
            "recall": [0.2, 0.3, 0.9, 0.4],
        }
    )
    fig = F.probe_curves(tidy)
    assert [t.name for t in fig.data] == ["L0H1 OV copy", "L0MLP MLP copy"]
    assert list(fig.data[0].y) == [0.2, 0.9] and fig.layout.yaxis.title.text == "recall R"
    with pytest.raises(ValueError, match="epoch"):
        F.probe_curves(wide.drop(columns="epoch"))
    with pytest.raises(TypeError, match="numeric"):
        F.probe_curves(wide.assign(note="a"))
    with pytest.raises(ValueError, match="several rows"):
        F.probe_curves(pd.concat([tidy, tidy]))


def test_probe_curves_from_memory_tracker(small):
    from perm_circuits.analysis.probes.memory import memory_probe_tracker

    tracker = memory_probe_tracker()
    tracker.record(small, 0)
    tracker.record(build_model("d16h1", seed=1), 1)  # another d16h1 as "epoch 1": other recall values
    frame = tracker.to_dataframe()
    fig = F.probe_curves(frame)
    first = frame[frame["epoch"] == 0]
    names = (first["component"] + " " + first["circuit"] + " " + first["map"]).tolist()
    assert [t.name for t in fig.data] == names and len(names) == 8
    for trace, (_, row) in zip(fig.data, first.iterrows()):
        probe = frame[(frame["component"] == row["component"]) & (frame["map"] == row["map"])]
        assert list(trace.x) == [0, 1]
        assert list(trace.y) == probe.sort_values("epoch")["recall"].tolist(), trace.name
    assert first["recall"].tolist() != frame[frame["epoch"] == 1]["recall"].tolist()  # the two epochs differ


# ----------------------------------------------------------------------------- HTML


def test_write_html_is_offline(tmp_path, small):
    fig = F.walkthrough(D.walkthrough_distributions(small))
    path = F.write_html(fig, tmp_path / "walkthrough.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<html>") or page.lstrip().lower().startswith(("<html", "<!doctype"))
    assert not re.search(r"https?://[^\s\"'`<>]*cdn", page)
    assert '<script src="http' not in page
    assert remote_resource_refs(page) == []
    assert len(page) > 1_000_000  # plotly.js inlined
    assert "Plotly.newPlot" in page


def test_write_html_beside_shares_one_plotly_js(tmp_path):
    from perm_circuits.views.html import local_script_refs, plotly_js_file_name

    first = F.write_html(go.Figure(go.Bar(x=[1, 2], y=[2, 1])), tmp_path / "a.html", plotly_js="beside")
    second = F.write_html(go.Figure(go.Scatter(x=[1, 2], y=[2, 1])), tmp_path / "b.html", plotly_js="beside")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html", plotly_js_file_name()]
    for path in (first, second):
        page = path.read_text(encoding="utf-8")
        assert len(page) < 100_000 and "Plotly.newPlot" in page  # plotly.js not inlined
        assert local_script_refs(page, tmp_path) == [plotly_js_file_name()]
        assert remote_resource_refs(page) == []
    shared = (tmp_path / plotly_js_file_name()).read_text(encoding="utf-8")
    assert not re.search(r"https?://[^\s\"'`<>]*cdn", shared)
    with pytest.raises(ValueError, match="plotly_js must be 'inline' or 'beside', got 'cdn'"):
        F.write_html(go.Figure(), tmp_path / "c.html", plotly_js="cdn")


def test_write_html_bad_inputs(tmp_path):
    with pytest.raises(TypeError):
        F.write_html({"data": []}, tmp_path / "x.html")
    with pytest.raises(ValueError, match="does not exist"):
        F.write_html(go.Figure(), tmp_path / "missing" / "x.html")
    with pytest.raises(ValueError, match="directory"):
        F.write_html(go.Figure(), tmp_path)


@pytest.mark.browser
@pytest.mark.slow
def test_pages_render_in_chromium(tmp_path, wide, test_set):
    from tests.views.browser import open_page, require_chromium

    require_chromium()
    fig = F.attention_heatmaps(D.mean_attention(wide, test_set))
    report = open_page(F.write_html(fig, tmp_path / "attention.html"))
    assert report.ok, report
    assert report.plotly_total == 1
    beside = open_page(F.write_html(fig, tmp_path / "beside.html", plotly_js="beside"))  # shared file over file://
    assert beside.ok, beside
    assert (beside.plotly_total, beside.plotly_rendered) == (1, 1)
