"""A worker that dies breaks the local process pool: only the runs that were running fail, the runs
not yet started go to a fresh pool and finish."""

from __future__ import annotations

import os

from perm_circuits.sweep.backends import run_pool
from perm_circuits.sweep.spec import RunConfig


def _job(runs, keep_models):
    """Rows of fake runs; the run ``"b"`` kills its worker (as the kernel's OOM killer would)."""
    if any(run_id == "b" for run_id, _ in runs):
        os._exit(1)
    return [({"run_id": run_id, "status": "done", "value": config["value"]}, None) for run_id, config in runs]


def test_a_dead_worker_fails_its_run_only_and_the_rest_still_run():
    groups = [(RunConfig(run_id, {"value": i}),) for i, run_id in enumerate("abcd")]
    rows = []
    run_pool(groups, _job, lambda row, files: rows.append(row), lambda count: None, workers=1, keep_models=False)
    status = {row["run_id"]: row["status"] for row in rows}
    assert status == {"a": "done", "b": "failed", "c": "done", "d": "done"}
    assert [row["value"] for row in rows if row["status"] == "done"] == [0, 2, 3]
    failed = next(row for row in rows if row["run_id"] == "b")
    assert "BrokenProcessPool" in failed["error"] and len(rows) == 4
