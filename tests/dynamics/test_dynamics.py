"""perm_circuits.dynamics: step-level recording during training, the record, which_first, the
emergence figure, the LLC, the CLI flag and the study's generated docs section."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from perm_circuits import TaskConfig, TrainConfig, load_pretrained, train
from perm_circuits.analysis import head_scores, model_memory_probes
from perm_circuits.analysis.probes.induction import induction_scores, induction_test_set
from perm_circuits.cli import main
from perm_circuits.dynamics import (
    DYNAMICS_FILE,
    DynamicsRecord,
    DynamicsRecorder,
    LLCConfig,
    default_steps,
    load_dynamics,
    local_learning_coefficient,
    save_dynamics,
    which_first,
)
from perm_circuits.dynamics.study import (
    DOCS_BEGIN,
    DOCS_END,
    STUDY_CSV,
    STUDY_EPOCHS_CSV,
    read_record_csv,
    study_dynamics,
    write_record_csv,
)
from perm_circuits.tasks.permutation_data import make_test_set
from perm_circuits.train import StepInfo
from perm_circuits.views.dynamics_figures import emergence_figure

ROOT = Path(__file__).resolve().parents[2]
TASK = TaskConfig(repeat_ratio=0.3)
TINY = TrainConfig(epochs=2, samples_per_epoch=1280, batch_size=128, test_size=200)  # 10 steps per epoch
STEPS = (1, 4, 20)


def _run(recorders=(), steps_seen=None):
    callbacks = list(recorders)
    if steps_seen is not None:
        callbacks.append(lambda info: steps_seen.append((info.step, info.epoch, float(info.loss))))
    return train("d16h1", TASK, TINY, step_callbacks=callbacks, progress=False)


@pytest.fixture(scope="module")
def runs():
    """Two recorded runs and one without a recorder, same seeds."""
    first, second = (DynamicsRecorder(TASK, STEPS, test_n=64) for _ in range(2))
    seen: list = []
    with_a = _run([first], seen)
    with_b = _run([second])
    without = _run()
    return first, second, with_a, with_b, without, seen


# ----------------------------------------------------------------------------- recording


def test_step_callbacks_see_every_global_step(runs):
    *_, seen = runs
    assert [s for s, _, _ in seen] == list(range(1, 21))
    assert [e for _, e, _ in seen] == [1] * 10 + [2] * 10
    assert all(0 < loss < 3 for _, _, loss in seen)


def test_recording_does_not_change_the_trained_weights(runs):
    _, _, with_a, _, without, _ = runs
    for (name, a), (_, b) in zip(with_a.model.state_dict().items(), without.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert with_a.history.rows == without.history.rows


def test_records_are_deterministic_for_a_fixed_seed(runs):
    first, second, *_ = runs
    a, b = first.result(), second.result()
    assert a.steps == STEPS
    pd.testing.assert_frame_equal(a.to_dataframe(), b.to_dataframe())
    assert len(a.signals) == 31  # 2 losses, 6 accuracies, 8 memory probes, 3 + 12 head scores (d16h1: one head)


def test_recorded_values_are_the_analyses_values(pretrained):
    """One measurement of the shipped d32h2 equals the analyses run directly (same test sets)."""
    model = pretrained("d32h2")
    recorder = DynamicsRecorder(TASK, (1,), test_n=256, seed=7)
    values = recorder.measure(model, 1)
    assert not model.training
    probes = model_memory_probes(model)
    for probe in probes.probes:
        assert values[f"{probe.component}.{probe.circuit}.{probe.map}"] == probe.recall
    scores = head_scores(model, make_test_set(TASK, n=256, seed=7))
    assert values["L0H0.duplicate_score"] == scores.get(0, 0).duplicate_score
    induction = induction_scores(model, induction_test_set(5, n=256, seed=7))
    assert values["L0H1.previous_token"] == induction.get(0, 1).previous_token
    # the study's shortcut: recall of x1 only
    assert values["recall_accuracy"] == 1.0 and values["recall_x1_accuracy"] == 1.0
    assert values["recall_x2_accuracy"] < 0.05 and values["elimination_accuracy"] > 0.99
    assert values["L0H0.duplicate_score"] > 0.3  # L0H0 is the duplicate-token head
    with pytest.raises(ValueError, match="not after the last recorded step 1"):
        recorder.measure(model, 1)


def test_default_steps_are_log_spaced():
    steps = default_steps(4692, 32)
    assert steps[0] == 1 and steps[-1] == 4692 and 28 <= len(steps) <= 32  # small steps round together
    assert all(b > a for a, b in zip(steps, steps[1:]))
    ratios = [b / a for a, b in zip(steps[10:], steps[11:])]  # past the integer-rounding region
    assert max(ratios) / min(ratios) < 1.05


def test_recorder_rejects_bad_inputs():
    with pytest.raises(ValueError, match="non-empty sequence of positive ints"):
        DynamicsRecorder(TASK, [])
    with pytest.raises(ValueError, match="strictly increasing"):
        DynamicsRecorder(TASK, (1, 5, 5))
    with pytest.raises(ValueError, match="every step must be >= 1, got 0"):
        DynamicsRecorder(TASK, (0, 5))
    with pytest.raises(ValueError, match=r"unknown signal groups \['attention'\]"):
        DynamicsRecorder(TASK, (1,), signals=("accuracy", "attention"))
    with pytest.raises(ValueError, match="test_n must be >= 1, got 0"):
        DynamicsRecorder(TASK, (1,), test_n=0)
    with pytest.raises(TypeError, match="task"):  # beartype's check at test time, ours otherwise
        DynamicsRecorder({"V": 5}, (1,))
    with pytest.raises(TypeError, match="step_callbacks"):
        train("d16h1", TASK, TINY, step_callbacks=[3], progress=False)


# ----------------------------------------------------------------------------- record, which_first, figure

NAN = math.nan
HAND = DynamicsRecord(
    steps=(1, 10, 100, 1000),
    signals=("loss", "probe", "acc", "early", "flat", "empty"),
    values=(
        (2.0, 0.0, 0.20, 0.0, 0.5, NAN),
        (1.9, 0.6, 0.20, 0.9, 0.5, NAN),
        (1.2, 0.8, 0.25, 1.0, 0.5, 3.0),
        (1.0, 1.0, 1.00, 1.0, 0.5, NAN),
    ),
    settings={"model": "hand"},
)


def test_which_first_orders_hand_built_signals():
    order = which_first(HAND)
    frame = order.to_dataframe()
    assert list(frame["signal"]) == ["early", "probe", "loss", "acc", "flat", "empty"]
    assert list(frame["step"].astype(object).where(frame["step"].notna(), None)) == [10, 10, 100, 1000, None, None]
    assert list(frame["rank"].astype(object).where(frame["rank"].notna(), None)) == [1, 1, 3, 4, None, None]
    assert list(frame["tied"]) == [True, True, False, False, False, False]
    assert list(frame["status"]) == ["crossed"] * 4 + ["flat", "no data"]
    assert order.order == ("early", "probe", "loss", "acc")
    assert order.before("probe", "acc") is True and order.before("acc", "loss") is False
    assert order.before("early", "probe") is None and order.before("flat", "acc") is None
    # the falling loss crosses half its change (2.0 -> 1.0) at 1.2 (step 100), not at 1.9
    assert order.step_of("loss") == 100
    assert which_first(HAND, ["acc", "probe"], threshold=0.7).order == ("probe", "acc")
    assert which_first(HAND, ["acc", "probe"], threshold=0.9).order == ("acc", "probe")  # tie at 1000: by name


def test_which_first_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\], got 0.0"):
        which_first(HAND, threshold=0.0)
    with pytest.raises(ValueError, match=r"unknown signals \['nope'\]"):
        which_first(HAND, ["nope"])
    with pytest.raises(TypeError, match="record"):
        which_first(HAND.to_dataframe())


def test_emergence_figure_has_one_line_per_signal_and_markers_at_the_crossings():
    fig = emergence_figure(HAND, ["loss", "probe", "acc", "flat"])
    lines = [t for t in fig.data if t.mode == "lines"]
    markers = {t.name: (t.x[0], t.y[0]) for t in fig.data if t.mode == "markers"}
    assert [t.name for t in lines] == ["loss", "probe", "acc", "flat"]
    assert markers == {"probe crosses": (10, 0.6), "loss crosses": (100, pytest.approx(0.8)), "acc crosses": (1000, 1.0)}
    assert list(lines[0].y) == pytest.approx([0.0, 0.1, 0.8, 1.0])
    assert fig.layout.xaxis.type == "log"
    with pytest.raises(ValueError, match=r"unknown signals \['x'\]"):
        emergence_figure(HAND, ["x"])


def test_record_round_trips_through_the_checkpoint_folder(tmp_path):
    path = save_dynamics(HAND, tmp_path)
    assert path == tmp_path / DYNAMICS_FILE
    back = load_dynamics(tmp_path)
    assert back == HAND and back.settings == {"model": "hand"}
    assert math.isnan(back.series("empty")[1])
    assert load_dynamics(path) == HAND


def test_record_csv_round_trip(tmp_path):
    back = read_record_csv(write_record_csv(HAND, tmp_path / "r.csv"))
    assert back.steps == HAND.steps and back.signals == HAND.signals
    assert back.wide().equals(HAND.wide())


def test_record_rejects_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="values has 1 rows but there are 2 steps"):
        DynamicsRecord((1, 2), ("a",), ((1.0,),))
    with pytest.raises(ValueError, match="strictly increasing"):
        DynamicsRecord((2, 1), ("a",), ((1.0,), (2.0,)))
    with pytest.raises(ValueError, match=r"duplicates \['a'\]"):
        DynamicsRecord((1,), ("a", "a"), ((1.0, 2.0),))
    with pytest.raises(FileNotFoundError, match="no dynamics record"):
        load_dynamics(tmp_path)
    (tmp_path / DYNAMICS_FILE).write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a dynamics record"):
        load_dynamics(tmp_path)
    with pytest.raises(KeyError, match="no signal 'x'"):
        HAND.series("x")


# ----------------------------------------------------------------------------- LLC

TINY_LLC = LLCConfig(chains=2, draws=8, batch_size=32, n=128, seed=3)


def test_llc_is_deterministic_for_a_fixed_seed(pretrained):
    pytest.importorskip("devinterp")  # installed by the dev extra, so this runs
    model = pretrained("d32h2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = local_learning_coefficient(model, TASK, TINY_LLC)
    b = local_learning_coefficient(model, TASK, TINY_LLC)
    other = local_learning_coefficient(model, TASK, LLCConfig(chains=2, draws=8, batch_size=32, n=128, seed=4))
    assert a == b and a.llc != other.llc
    assert len(a.per_chain) == 2 and a.llc > 0  # a trained model sits near a minimum: sampled loss > its own
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="LLCConfig.draws must be >= 1, got 0"):
        LLCConfig(draws=0)
    with pytest.raises(ValueError, match=r"LLCConfig.seed must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\)"):
        LLCConfig(seed=2**64)


def test_llc_without_devinterp_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "devinterp.optim", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[dynamics\]"'):
        DynamicsRecorder(TASK, (1,), llc=True)


def test_recorder_records_the_llc(pretrained):
    pytest.importorskip("devinterp")
    recorder = DynamicsRecorder(TASK, (1,), signals=("loss",), test_n=64, llc=True, llc_config=TINY_LLC)
    values = recorder.measure(pretrained("d32h2"), 1)
    assert values["llc"] == local_learning_coefficient(pretrained("d32h2"), TASK, TINY_LLC).llc
    assert recorder.result().settings["llc"]["draws"] == 8


# ----------------------------------------------------------------------------- CLI and the study


def test_cli_records_dynamics_into_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "d16h1", "--epochs", "1", "--samples", "1280", "--out", str(out), "--quiet"]
    assert main(args + ["--record-dynamics", "4"]) == 0
    record = load_dynamics(out)
    assert record.steps == (1, 2, 5, 10) and "recall_accuracy" in record.signals
    assert main(["train", "--resume", str(out), "--record-dynamics", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "--record-dynamics cannot be combined with --resume" in capsys.readouterr().err


def test_study_docs_section_is_generated_from_the_committed_csv():
    answer = study_dynamics(read_record_csv(ROOT / STUDY_CSV), pd.read_csv(ROOT / STUDY_EPOCHS_CSV))
    page = (ROOT / "docs" / "dynamics.md").read_text()
    section = page.split(DOCS_BEGIN, 1)[1].split(DOCS_END, 1)[0]
    assert section.strip() == answer.to_markdown().strip()
