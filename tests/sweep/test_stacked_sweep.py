"""trainer="stacked": runs differing only in their seed train as one group, and the rows are the single trainer's."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from perm_circuits.sweep import SweepSpec, load_sweep, run_sweep
from perm_circuits.sweep.stacked_runs import choose_trainer, group_runs, stacked_reproduces_single

from .conftest import TINY

pytestmark = pytest.mark.slow

SPEC = copy.deepcopy(TINY)  # 2 configs x 2 seeds, dropout 0.1, head_roles under every mode
SPEC["fixed"]["samples"] = 1000
SPEC["analysis"] = {"n": 100, "n_pair": 20, "n_boot": 10, "recall_n": 50}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    run_sweep(SPEC, out, backend="serial", trainer="single", progress=False)
    return load_sweep(out)


def _check_same(frame: pd.DataFrame, single: pd.DataFrame) -> None:
    assert len(frame) == 4 and (frame["status"] == "done").all()
    assert (frame["wall_seconds"] > 0).all()
    # the same run ids and every metric bit for bit: head roles, probes, curves (wall time aside)
    pd.testing.assert_frame_equal(frame.drop(columns="wall_seconds"), single.drop(columns="wall_seconds"), check_exact=True)


def test_stacked_serial_sweep_gives_the_single_rows(tmp_path, single):
    assert stacked_reproduces_single()
    result = run_sweep(SPEC, tmp_path, backend="serial", trainer="stacked", progress=False)
    assert len(result.done) == 4 and not result.failed
    frame = load_sweep(tmp_path)
    _check_same(frame, single)
    assert sorted(frame["run_id"]) == sorted(run.run_id for run in SweepSpec.from_dict(SPEC).runs)
    assert frame["step1_accuracy"].nunique() > 1  # seeds and configs really differ
    # a grown spec resumes across trainers: the stored rows are skipped
    again = run_sweep(SPEC, tmp_path, backend="serial", progress=False)
    assert again.n_skipped == 4 and not again.done


def test_stacked_local_pool_gives_the_single_rows(tmp_path, single):
    result = run_sweep(SPEC, tmp_path, backend="local", workers=2, trainer="stacked", keep_models=True, progress=False)
    assert len(result.done) == 4 and not result.failed
    _check_same(load_sweep(tmp_path), single)
    assert len(list((tmp_path / "models").iterdir())) == 4


def test_group_runs_groups_by_everything_but_the_seed():
    runs = SweepSpec.from_dict(SPEC).runs
    groups = group_runs(runs)
    assert [[r.config["model"]["n_heads"] for r in g] for g in groups] == [[1, 1], [2, 2]]
    assert [[r.config["model"]["seed"] for r in g] for g in groups] == [[0, 1], [0, 1]]
    assert [[r.config["train"]["seed"] for r in g] for g in groups] == [[0, 1], [0, 1]]
    assert [len(g) for g in group_runs(runs, max_size=1)] == [1, 1, 1, 1]
    other = copy.deepcopy(SPEC)
    other["analysis"]["n"] = 200  # analysis sizes differ: never one group
    mixed = group_runs([*runs[:1], *SweepSpec.from_dict(other).runs[1:2]])
    assert len(mixed) == 2
    with pytest.raises(ValueError, match="max_size"):
        group_runs(runs, max_size=0)


def test_bad_trainer_is_refused(tmp_path):
    with pytest.raises(ValueError, match="trainer must be one of"):
        run_sweep(SPEC, tmp_path, backend="serial", trainer="vmap", progress=False)
    with pytest.raises(ValueError, match="not on ray"):
        run_sweep(SPEC, tmp_path, backend="ray", trainer="stacked", progress=False)


def test_auto_stacks_where_an_architecture_has_several_runs():
    runs = SweepSpec.from_dict(SPEC).runs  # 2 architectures x 2 seeds
    assert choose_trainer("auto", "local", runs) == "stacked"
    assert choose_trainer("auto", "serial", runs) == "stacked"
    assert choose_trainer("auto", "ray", runs) == "single"  # ray trains one run per task
    one_each = [runs[0], runs[-1]]  # one seed of each architecture: nothing to stack
    assert len(group_runs(one_each)) == 2
    assert choose_trainer("auto", "local", one_each) == "single"
    assert choose_trainer("single", "local", runs) == "single" and choose_trainer("stacked", "serial", runs) == "stacked"
    with pytest.raises(ValueError, match="trainer must be one of"):
        choose_trainer("fast", "local", runs)
