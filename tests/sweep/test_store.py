"""Sweep storage: atomic rows, stale temp files, load_sweep's tidy table, Parquet export."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from perm_circuits.sweep import clean_stale, export_parquet, load_sweep, summary_table
from perm_circuits.sweep.store import finished_runs, write_checkpoint, write_row


def _row(run_id, status="done", recall=1.0, seed=0, d_model=16):
    return {"run_id": run_id, "status": status, "error": "" if status == "done" else "Traceback...\nBoom",
            "d_model": d_model, "n_heads": 1, "seed": seed, "early_stop": None,
            "recall_accuracy": recall if status == "done" else float("nan"),
            "epoch_recall_99": 3 if status == "done" and recall >= 0.99 else float("nan"),
            "verdict_mean": "holds" if status == "done" else None}


def test_rows_round_trip_with_nan_as_null(tmp_path):
    path = write_row(tmp_path, _row("b" * 16, status="failed"))
    assert path == tmp_path / "runs" / f"{'b' * 16}.json"
    stored = json.loads(path.read_text())
    assert stored["recall_accuracy"] is None and stored["error"].endswith("Boom")
    write_row(tmp_path, _row("a" * 16, recall=0.5, seed=1))
    write_row(tmp_path, _row("c" * 16, recall=0.995, seed=0))
    frame = load_sweep(tmp_path)
    assert list(frame["run_id"]) == ["b" * 16, "c" * 16, "a" * 16]  # sorted by config (seed), then id
    assert list(frame.columns[:2]) == ["run_id", "status"]
    assert frame["recall_accuracy"].dtype == float and math.isnan(frame.loc[0, "recall_accuracy"])
    assert frame.loc[1, "recall_accuracy"] == 0.995 and frame["d_model"].dtype.kind == "i"
    assert frame["error"].tolist() == ["Traceback...\nBoom", "", ""]
    assert finished_runs(tmp_path) == {"a" * 16: "done", "b" * 16: "failed", "c" * 16: "done"}


def test_rewriting_a_row_replaces_it_and_stale_temp_files_are_cleaned(tmp_path):
    write_row(tmp_path, _row("a" * 16, status="failed"))
    write_row(tmp_path, _row("a" * 16, recall=1.0))
    (tmp_path / "runs" / f".{'b' * 16}.json.x1.tmp").write_text('{"run_id": "bbbb", "partial')
    write_checkpoint(tmp_path, "a" * 16, {"model.safetensors": b"123", "config.json": b"{}"})
    (tmp_path / "models" / ("a" * 16) / ".model.safetensors.y.tmp").write_bytes(b"12")
    assert len(load_sweep(tmp_path)) == 1 and load_sweep(tmp_path).loc[0, "status"] == "done"
    removed = clean_stale(tmp_path)
    assert sorted(p.name for p in removed) == [".bbbbbbbbbbbbbbbb.json.x1.tmp", ".model.safetensors.y.tmp"]
    assert sorted(p.name for p in (tmp_path / "models" / ("a" * 16)).iterdir()) == ["config.json", "model.safetensors"]
    assert (tmp_path / "models" / ("a" * 16) / "model.safetensors").read_bytes() == b"123"


def test_parquet_export_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    write_row(tmp_path, _row("a" * 16, recall=0.5))
    write_row(tmp_path, _row("b" * 16, status="failed", seed=1))
    path = export_parquet(tmp_path)
    assert path == tmp_path / "sweep.parquet"
    pd.testing.assert_frame_equal(pd.read_parquet(path), load_sweep(tmp_path))


def test_load_sweep_refuses_a_folder_without_runs(tmp_path):
    with pytest.raises(ValueError, match="is not a sweep folder"):
        load_sweep(tmp_path)


def test_summary_table_shares_learning_recall(tmp_path):
    rows = [_row("a1", recall=1.0, seed=0), _row("a2", recall=0.5, seed=1), _row("a3", status="failed", seed=2),
            _row("b1", recall=0.999, seed=0, d_model=32), _row("b2", recall=0.99, seed=1, d_model=32)]
    table = summary_table(pd.DataFrame(rows)).set_index("d_model")
    assert table.loc[16, "runs"] == 3 and table.loc[16, "done"] == 2 and table.loc[16, "failed"] == 1
    assert table.loc[16, "learned_recall"] == 0.5 and table.loc[32, "learned_recall"] == 1.0
    assert table.loc[32, "median_epoch_recall_99"] == 3.0


def test_summary_table_refuses_what_is_not_a_frame():
    import inspect

    with pytest.raises(TypeError, match="frame must be a pandas DataFrame \\(load_sweep\\), got list"):
        inspect.unwrap(summary_table)([{"d_model": 16}])  # as a user calls it, without the suite's type checker


@pytest.mark.parametrize("text", ['{"run_id": "abc", "sta', "[1, 2]", '{"status": "done"}'])
def test_a_corrupt_row_is_a_value_error_naming_its_file(tmp_path, text):
    write_row(tmp_path, _row("a" * 16))
    (tmp_path / "runs" / "bad.json").write_text(text)
    with pytest.raises(ValueError, match=r"bad\.json.*delete it"):
        finished_runs(tmp_path)
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_sweep(tmp_path)
