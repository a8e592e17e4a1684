"""Sweeps over the seed papers' tasks, driven by the task registry: spec keys, run ids, rows, backends."""

from __future__ import annotations

import math

import pytest

from perm_circuits.sweep import SweepSpec, load_sweep, run_sweep
from perm_circuits.sweep.task_sweep import run_task, task_keys
from perm_circuits.tasks import task_entries

FACTUAL = {"fixed": {"task": "factual_recall", "S": 8, "d_model": 16, "d_mlp": 32, "steps": 40, "batch_size": 32},
           "grid": {"seed": [0, 1], "lr": [0.003, 0.01]}}


def test_a_task_spec_takes_the_task_and_model_keys():
    spec = SweepSpec.from_dict(FACTUAL)
    assert len(spec) == 4 and len({run.run_id for run in spec.runs}) == 4
    config = spec.runs[0].config
    assert config["task"]["task"] == "factual_recall" and config["task"]["S"] == 8
    assert config["model"] == {"d_model": 16, "d_mlp": 32} and config["fit"]["steps"] == 40
    assert {"S", "R", "D", "d_model", "d_mlp", "steps", "lr", "optimizer", "seed", "task"} <= set(task_keys("factual_recall"))
    # the seed papers' tasks sweep their own models (their registry entries name a builder)
    assert sorted(entry.name for entry in task_entries() if entry.model is not None) == ["bigram_triggers", "factual_recall", "perm_chain"]
    # the study's spec is unchanged by naming its task
    plain = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3}})
    named = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3, "task": "permutation"}})
    assert plain.runs[0].run_id == named.runs[0].run_id


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"fixed": {"task": "factual_recall", "repeat_ratio": 0.3}}, r"unknown key\(s\) \['repeat_ratio'\] in \[fixed\]"),
        ({"fixed": {"task": "nope"}}, r"\[fixed\] task: task 'nope' cannot be swept; sweepable tasks"),
        ({"grid": {"task": ["factual_recall"]}}, r"'task' must be in \[fixed\]"),
        ({"fixed": {"task": "factual_recall"}, "analysis": {"n": 100}}, r"\[analysis\] applies to the permutation task only"),
        ({"fixed": {"task": "factual_recall", "S": 0}}, r"invalid run \(the fixed values\): .*S"),
        ({"fixed": {"task": "perm_chain", "d_h": -1}}, r"invalid run \(the fixed values\)"),
    ],
)
def test_bad_task_specs_are_refused_before_anything_runs(tmp_path, spec, message):
    with pytest.raises(ValueError, match=message):
        run_sweep(spec, tmp_path / "out", backend="serial", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_task_sweep_rows_are_the_same_on_the_serial_and_local_backends(tmp_path):
    spec = {"fixed": {**FACTUAL["fixed"]}, "grid": {"seed": [0, 1]}}
    run_sweep(spec, tmp_path / "serial", backend="serial", progress=False)
    run_sweep(spec, tmp_path / "local", backend="local", workers=2, progress=False)
    serial, local = load_sweep(tmp_path / "serial"), load_sweep(tmp_path / "local")
    assert len(serial) == 2 and (serial["status"] == "done").all()
    columns = ["run_id", "task", "seed", "S", "d_model", "fact_accuracy", "loss", "final_train_loss"]
    assert serial[columns].sort_values("run_id").reset_index(drop=True).equals(
        local[columns].sort_values("run_id").reset_index(drop=True))
    # the factual task's loss starts at log |answers| and training moves it down
    assert (serial["final_train_loss"] < math.log(32)).all()


@pytest.mark.parametrize("task, extra", [("perm_chain", {"d_h": 8}), ("bigram_triggers", {"N": 16, "T": 32, "d_model": 32})])
def test_every_sweepable_system_runs(task, extra):
    spec = SweepSpec.from_dict({"fixed": {"task": task, "steps": 3, "batch_size": 8, **extra}})
    row = run_task(spec.runs[0].run_id, spec.runs[0].config)
    assert row["status"] == "done", row["error"]
    assert row["task"] == task and row["steps"] == 3 and row["final_train_loss"] > 0


def test_a_failing_task_run_is_a_row():
    spec = SweepSpec.from_dict({"fixed": {"task": "factual_recall", "steps": 2}})
    config = {**spec.runs[0].config, "model": {"d_model": "sixteen"}}
    row = run_task("bad", config)
    assert row["status"] == "failed" and "d_model" in row["error"]


def test_the_docs_example_is_a_valid_spec():
    import re
    import tomllib
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text(encoding="utf-8")
    section = page[page.index("## Sweeps over any task"):]
    example = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    spec = SweepSpec.from_dict(tomllib.loads(example))
    assert len(spec) == 15 and {run.config["model"]["d_mlp"] for run in spec.runs} == {16, 32, 64}


def test_the_sweep_page_refuses_a_task_sweep_clearly(tmp_path):
    from perm_circuits.views.sweep_report import write_sweep_report

    run_sweep({"fixed": {"task": "factual_recall", "S": 8, "d_model": 16, "d_mlp": 32, "steps": 2}}, tmp_path / "s",
              backend="serial", progress=False)
    with pytest.raises(ValueError, match=r"this sweep is of task\(s\) \['factual_recall'\]: read its rows with"):
        write_sweep_report(tmp_path / "s", tmp_path / "page.html")
    assert not (tmp_path / "page.html").exists()
