"""Sweeps end to end (serial backend, in this process): rows, growing a spec, failures, SIGKILL + resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits import evaluate, make_test_set
from perm_circuits.models import load_model
from perm_circuits.analysis import HOWS
from perm_circuits.cli import main
from perm_circuits.sweep import SweepSpec, load_sweep, reanalyse_sweep, run_sweep
from perm_circuits.sweep import run as run_module

from .conftest import TINY, TINY_TOML

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """The tiny sweep run serially in two steps: seed 0 first, then the spec grown to seeds 0 and 1."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    small = {**TINY, "grid": {**TINY["grid"], "seed": [0]}}
    first = run_sweep(small, out, backend="serial", keep_models=True, progress=False)
    before = {p.name: p.read_bytes() for p in (out / "runs").iterdir()}
    second = run_sweep(TINY, out, backend="serial", keep_models=True, progress=False)
    third = run_sweep(TINY, out, backend="serial", keep_models=True, progress=False)
    return out, first, second, third, before


def test_rows_hold_the_schema_and_real_numbers(grown):
    out, first, *_ = grown
    frame = load_sweep(out)
    assert len(frame) == 4 and (frame["status"] == "done").all() and (frame["error"] == "").all()
    assert sorted(frame["run_id"]) == sorted(r.run_id for r in SweepSpec.from_dict(TINY).runs)
    assert frame[["d_model", "n_heads", "seed"]].values.tolist() == [[16, 1, 0], [16, 1, 1], [16, 2, 0], [16, 2, 1]]
    assert (frame["d_head"].tolist(), frame["dropout"].tolist(), frame["repeat_ratio"].unique().tolist()) == (
        [16, 16, 8, 8], [0.1] * 4, [0.3])
    assert (frame["epochs_run"] == 1).all() and (frame["samples"] == 2000).all() and frame["early_stop"].isna().all()
    # one epoch of 2,000 samples: above chance (0.2) at the first step's uniform guess, far from learned
    assert frame["step5_accuracy"].between(0.1, 0.9).all() and frame["test_loss"].between(0.5, 1.7).all()
    probe = frame[[f"probe_p{v}" for v in range(1, 6)]].sum(axis=1)
    assert ((probe > 0.9) & (probe <= 1.0 + 1e-6)).all()
    assert all(frame[f"recall_gen_x{k}"].between(0, 1).all() for k in range(1, 5))
    assert frame["epoch_recall_99"].isna().all() and frame["epoch_elimination_99"].isna().all()
    for how in HOWS:
        assert frame[f"verdict_{how}"].isin(["holds", "fails", "open"]).all()
        assert frame[f"role_{how}_L0H0"].notna().all() and frame[f"role_{how}_L0MLP"].notna().all()
        assert frame[f"claim_{how}_eliminates"].notna().all()
        # L0H1 exists only in the 2-head runs
        assert frame[f"role_{how}_L0H1"].isna().tolist() == [True, True, False, False]
    assert (frame["analysis_n"] == 300).all() and (frame["analysis_n_boot"] == 10).all()
    assert frame["version_torch"].str.len().gt(0).all() and (frame["wall_seconds"] > 0).all()


def test_a_kept_checkpoint_reproduces_its_row(grown):
    out, *_ = grown
    row = load_sweep(out).iloc[2]
    model = load_model(out / "models" / row["run_id"])
    result = evaluate(model, make_test_set(model.task_config, n=300, seed=1234))
    assert [s.accuracy for s in result.detail.steps] == [row[f"step{k}_accuracy"] for k in range(1, 6)]
    assert result.test_loss == pytest.approx(row["test_loss"], abs=1e-5)  # training evaluates with fast_forward
    assert result.metrics["recall_accuracy"] == row["recall_accuracy"]


def test_reanalysing_kept_models_reproduces_the_analysis_columns(grown, tmp_path):
    out, *_ = grown
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    original = load_sweep(out).set_index("run_id")
    # an analysis from an older library: stale mode columns, one missing, wrong values
    first = sorted((copy / "runs").glob("*.json"))[0]
    row = json.loads(first.read_text())
    row = {k: v for k, v in row.items() if not k.startswith("role_mean_")}
    row.update({"verdict_zero": "holds", "claim_old_mode_binding_head": "supported", "recall_gen_x1": 0.5})
    first.write_text(json.dumps(row))
    assert reanalyse_sweep(copy, progress=False) == sorted(original.index)
    again = load_sweep(copy).set_index("run_id")
    assert "claim_old_mode_binding_head" not in again.columns  # replaced, not merged
    analysed = [c for c in original.columns if c.startswith(("recall_gen_x", "verdict_", "role_", "claim_"))]
    kept = ["test_loss", "recall_accuracy", "step5_accuracy", "epochs_run", "wall_seconds"]
    # the analysis is a pure function of the kept weights: bit for bit the sweep's own columns
    pd.testing.assert_frame_equal(again.loc[original.index, analysed + kept], original[analysed + kept])
    assert (again["reanalysis_seconds"] > 0).all()


def test_reanalyse_refuses_runs_without_kept_models(grown, tmp_path):
    out, *_ = grown
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    victim = sorted((copy / "models").iterdir())[0]
    shutil.rmtree(victim)
    before = {p.name: p.read_bytes() for p in (copy / "runs").iterdir()}
    with pytest.raises(ValueError, match=r"have no kept model .*--keep-models"):
        reanalyse_sweep(copy, progress=False)
    with pytest.raises(ValueError, match=r"no rows for run ids \['nope'\]"):
        reanalyse_sweep(copy, run_ids=["nope"], progress=False)
    with pytest.raises(ValueError, match="holds no sweep rows"):
        reanalyse_sweep(tmp_path / "empty", progress=False)
    assert {p.name: p.read_bytes() for p in (copy / "runs").iterdir()} == before  # nothing rewritten


def test_growing_a_spec_runs_only_the_new_runs(grown):
    out, first, second, third, before = grown
    assert (first.n_runs, first.n_skipped, len(first.done)) == (2, 0, 2)
    assert (second.n_runs, second.n_skipped, len(second.done)) == (4, 2, 2)
    assert not set(first.done) & set(second.done)
    assert (third.n_skipped, third.done, third.failed) == (4, (), ())
    assert all((out / "runs" / name).read_bytes() == data for name, data in before.items())


def test_a_failing_run_is_recorded_and_retried(tmp_path, monkeypatch):
    spec = {**TINY, "grid": {"n_heads": [1], "seed": [0, 1]}}
    real = run_module._train

    def flaky(model_config, task_config, train_config):
        if train_config.seed == 1:
            raise RuntimeError("injected failure for seed 1")
        return real(model_config, task_config, train_config)

    monkeypatch.setattr(run_module, "_train", flaky)
    result = run_sweep(spec, tmp_path, backend="serial", trainer="single", progress=False)
    assert len(result.done) == 1 and len(result.failed) == 1
    frame = load_sweep(tmp_path).set_index("seed")
    assert frame.loc[1, "status"] == "failed" and frame.loc[0, "status"] == "done"
    assert "Traceback" in frame.loc[1, "error"] and "RuntimeError: injected failure for seed 1" in frame.loc[1, "error"]
    assert frame.loc[1, "d_model"] == 16 and pd_isnan(frame.loc[1, "recall_accuracy"])
    assert frame.loc[0, "recall_accuracy"] >= 0.0
    again = run_sweep(spec, tmp_path, backend="serial", trainer="single", progress=False)
    assert (again.n_skipped, again.done, again.failed) == (2, (), ())
    monkeypatch.setattr(run_module, "_train", real)
    retried = run_sweep(spec, tmp_path, backend="serial", retry_failed=True, trainer="single", progress=False)
    assert retried.n_skipped == 1 and len(retried.done) == 1 and not retried.failed
    frame = load_sweep(tmp_path)
    assert len(frame) == 2 and (frame["status"] == "done").all()


def pd_isnan(value) -> bool:
    return value != value


def _rows(out: Path) -> list[Path]:
    return [p for p in (out / "runs").glob("*.json") if not p.name.startswith(".")] if (out / "runs").is_dir() else []


def test_sigkill_mid_sweep_then_resume_gives_exactly_one_row_per_run(tmp_path, capsys):
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(TINY_TOML)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(run_module.__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "perm_circuits.cli", "sweep", str(spec_path), "--out", str(out), "--backend",
         "serial", "--quiet", "--keep-models"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _rows(out) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the sweep finished before it could be killed"
        assert _rows(out), "no row appeared within 120 s"
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # our own session: the sweep and anything it started
        process.wait()
    killed_rows = _rows(out)
    assert 1 <= len(killed_rows) < 4
    for path in killed_rows:  # every row on disk is whole
        assert json.loads(path.read_text())["status"] == "done"

    code = main(["sweep", str(spec_path), "--out", str(out), "--backend", "serial", "--quiet", "--keep-models"])
    assert code == 0
    text = capsys.readouterr().out
    assert f"4 runs in the spec: {len(killed_rows)} already stored, {4 - len(killed_rows)} done now, 0 failed" in text
    assert "learned_recall" in text
    frame = load_sweep(out)
    assert len(frame) == 4 and frame["run_id"].is_unique and (frame["status"] == "done").all()
    leftovers = [p for p in out.rglob("*") if (p.name.startswith(".") and p.name != ".perm-circuits-sweep.json")  # the CLI's marker
                 or p.name.endswith(".tmp")]
    assert leftovers == []
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(frame["run_id"])
