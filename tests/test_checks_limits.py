"""Resources bounded before allocation, nested JSON refused by depth:
perm_circuits.checks.check_size and its limits, perm_circuits._util.loads_json."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
from checkpoint_edit import edit_record

from perm_circuits import ModelConfig, TaskConfig, build_model, save_model
from perm_circuits._util import json_depth, loads_json
from perm_circuits.checks import MAX_PARAMETERS, check_size
from perm_circuits.cli import main
from perm_circuits.models import CheckpointError, load_model
from perm_circuits.sweep import load_sweep
from perm_circuits.sweep.spec import SweepSpec
from perm_circuits.tasks.factual import FactualRecallTask
from perm_circuits.tasks.permutation_data import make_batch
from perm_circuits.tasks.runner import default_model, measure_task
from perm_circuits.train import TrainConfig


def test_check_size_names_the_size_and_the_limit():
    assert check_size("n", 10, 10) == 10
    with pytest.raises(ValueError, match=r"^n 11 is over the limit of 10$"):
        check_size("n", 11, 10)


def test_absurd_model_widths_are_refused_before_allocating(tmp_path):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"d10000000h1's parameter count 800,000,340,000,000 is over the limit of "
                                         r"1,000,000,000"):
        ModelConfig(d_model=10**7, n_heads=1)
    assert time.perf_counter() - start < 1.0  # nothing was allocated
    assert ModelConfig(d_model=32, n_heads=2).n_parameters == sum(p.numel() for p in build_model("d32h2").parameters())
    assert main(["train", "--d-model", "10000000", "--heads", "1", "--out", str(tmp_path / "big"), "--quiet"]) == 2
    assert not (tmp_path / "big" / "model.safetensors").exists()


def test_a_checkpoint_asking_for_a_huge_model_is_refused_from_its_record(tmp_path):
    save_model(build_model("d16h1"), tmp_path / "ck")
    edit_record(tmp_path / "ck", lambda record: record["model"].update(d_model=10**6))
    with pytest.raises(CheckpointError, match=r"invalid model/task config .*parameter count .* is over the limit of "
                                              + f"{MAX_PARAMETERS:,}"):
        load_model(tmp_path / "ck")
    shutil.copytree(tmp_path / "ck", tmp_path / "noweights")
    (tmp_path / "noweights" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="has no model.safetensors"):
        load_model(tmp_path / "noweights")


def test_absurd_sample_counts_are_refused_before_drawing():
    with pytest.raises(ValueError, match=r"samples_per_epoch 100,000,000,000 is over the limit of 10,000,000,000"):
        TrainConfig(samples_per_epoch=10**11)
    with pytest.raises(ValueError, match=r"batch_size 100,000,000,000 is over the limit of 10,000,000"):
        TrainConfig(batch_size=10**11)
    with pytest.raises(ValueError, match=r"n \(sequences drawn at once\) 100,000,000,000 is over the limit"):
        make_batch(TaskConfig(), 10**11, seed=0)
    task = FactualRecallTask()
    with pytest.raises(ValueError, match=r"n \(sequences drawn at once\) 100,000,000,000 is over the limit"):
        task.sample(10**11, torch.Generator())
    with pytest.raises(ValueError, match=r"n \(test sequences\) 100,000,000,000 is over the limit"):
        measure_task(default_model(task, d_model=16, n_heads=1), task, n=10**11)


def test_a_grid_of_absurd_size_is_refused_before_it_is_expanded():
    axes = {"seed": list(range(100)), "lr": [1e-3 * (i + 1) for i in range(100)], "epochs": list(range(1, 101))}
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"the grid's number of runs 1,000,000 is over the limit of 100,000"):
        SweepSpec.from_dict({"grid": axes})
    assert time.perf_counter() - start < 2.0


def test_nested_json_is_refused_by_depth_not_by_recursion(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    assert json_depth('{"a": ["[[[", {"b": 1}]}') == 3  # brackets inside strings do not count
    with pytest.raises(ValueError, match=r"^x.json nests JSON 100000 levels deep; at most 64 are read$"):
        loads_json(deep, "x.json")
    assert loads_json(json.dumps({"a": [[1]]}), "y") == {"a": [[1]]}
    save_model(build_model("d16h1"), tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text('{"format": ' + deep + "}")
    with pytest.raises(CheckpointError, match=r"config.json nests JSON 100001 levels deep"):
        load_model(tmp_path / "ck")
    (tmp_path / "sweep" / "runs").mkdir(parents=True)
    (tmp_path / "sweep" / "runs" / "r1.json").write_text('{"run_id": "r1", "x": ' + deep + "}")
    with pytest.raises(ValueError, match=r"sweep row '.*r1.json' nests JSON 100001 levels deep"):
        load_sweep(tmp_path / "sweep")
