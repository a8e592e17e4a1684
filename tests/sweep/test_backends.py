"""The same tiny grid (2 configs x 2 seeds) on the serial, local-pool and Ray backends: identical rows.

Ray starts slowly (seconds), so the file's Ray tests share one Ray session (the ``ray_session`` fixture)."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from perm_circuits import evaluate
from perm_circuits.sweep import load_sweep, run_sweep
from perm_circuits.tasks import TASKS
from perm_circuits.tasks.base import file_module_name, import_module_or_file
from perm_circuits.tasks.checkpoint import load_task_checkpoint

from tasks.test_user_task import _task_file  # tests/ is on the path (pytest rootdir, no __init__)
from .conftest import TINY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    run_sweep(TINY, out, backend="serial", progress=False)
    return load_sweep(out).drop(columns="wall_seconds")


def _check_same(frame: pd.DataFrame, serial: pd.DataFrame) -> None:
    assert len(frame) == 4 and (frame["status"] == "done").all()
    # ids and every metric bit for bit (wall time aside)
    pd.testing.assert_frame_equal(frame.drop(columns="wall_seconds"), serial, check_exact=True)


def test_local_pool_gives_the_serial_rows(tmp_path, serial):
    result = run_sweep(TINY, tmp_path, backend="local", workers=2, keep_models=True, progress=False)
    assert len(result.done) == 4 and not result.failed
    _check_same(load_sweep(tmp_path), serial)
    assert len(list((tmp_path / "models").glob("*/model.safetensors"))) == 4


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_serial_rows(tmp_path, serial, ray_session):
    result = run_sweep(TINY, tmp_path, backend="ray", workers=2, keep_models=True, progress=False)
    assert len(result.done) == 4 and not result.failed
    _check_same(load_sweep(tmp_path), serial)
    # checkpoints came back to the driver as bytes and were written here
    assert len(list((tmp_path / "models").glob("*/config.json"))) == 4


def test_ray_runs_a_users_task_from_its_file(tmp_path, ray_session):
    """A task from the user's own file (``--import FILE.py``): Ray's workers import it from the file
    (its folder is not on their path) and give the serial backend's rows; a kept model records its
    task and loads back to its row's numbers."""
    name = "modular_addition_ray"
    path = _task_file(tmp_path, "user_sum_ray", name)
    try:
        import_module_or_file(str(path))
        spec = {"fixed": {"task": name, "d_model": 16, "steps": 60, "lr": 0.01}, "grid": {"seed": [0, 1]}}
        columns = ["run_id", "task", "seed", "p", "d_model", "accuracy", "test_loss", "reference_agreement",
                   "final_train_loss"]
        run_sweep(spec, tmp_path / "serial", backend="serial", progress=False)
        expected = load_sweep(tmp_path / "serial")[columns].sort_values("run_id").reset_index(drop=True)
        assert len(expected) == 2 and (expected["accuracy"] > 0.3).all()  # chance is 1/7
        remote = run_sweep(spec, tmp_path / "ray", backend="ray", workers=2, keep_models=True, progress=False)
        assert remote.done and not remote.failed
        again = load_sweep(tmp_path / "ray")
        assert again[columns].sort_values("run_id").reset_index(drop=True).equals(expected)
        one = again.iloc[0]
        kept = load_task_checkpoint(tmp_path / "ray" / "models" / one["run_id"])
        assert kept.task.name == name and kept.seed == one["seed"]
        assert evaluate(kept.model, task=kept.task).metrics["accuracy"] == one["accuracy"]
    finally:
        sys.modules.pop(file_module_name(path), None)
        TASKS.pop(name, None)
