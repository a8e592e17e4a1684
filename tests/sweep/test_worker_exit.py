"""Pool workers exit when their driver dies: SIGKILL the driver of a local pool
whose workers are mid-run; within a few seconds no worker is left computing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perm_circuits.sweep.lock import _start_time

pytestmark = pytest.mark.slow  # a real pool: its forkserver preloads torch and TransformerLens

JOB = """
import os, time
from pathlib import Path

def job(runs, keep_models):  # a run that would take minutes: its worker reports its pid, then works
    Path(os.environ["PIDS"], str(os.getpid())).write_text("")
    time.sleep(300)
    return []
"""

DRIVER = """
from perm_circuits.sweep.backends import run_pool
from perm_circuits.sweep.spec import RunConfig
from slow_job import job
run_pool([(RunConfig("a", {}),), (RunConfig("b", {}),)], job, lambda row, files: None, lambda n: None,
         workers=2, keep_models=False)
"""


def test_workers_exit_when_their_driver_is_killed(tmp_path):
    (tmp_path / "slow_job.py").write_text(JOB)
    pids = tmp_path / "pids"
    pids.mkdir()
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PIDS": str(pids),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), src, os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, cwd=tmp_path, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while len(workers) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2, f"the workers did not start (driver exit {driver.poll()})"
        os.kill(driver.pid, signal.SIGKILL)  # the driver only: its workers are on their own now
        driver.wait()
        deadline = time.monotonic() + 8
        while any(_start_time(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in workers if _start_time(pid)] == []
    finally:
        for pid in workers:  # never leave one behind, whatever failed
            if _start_time(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
            driver.wait()
