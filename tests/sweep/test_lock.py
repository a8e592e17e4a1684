"""One owner per sweep folder (perm_circuits.sweep.lock): a second driver is refused
naming the owner, a killed driver's lock is taken over.  (The end-to-end takeover after SIGKILL is
tests/sweep/test_sweep.py::test_sigkill_mid_sweep_then_resume_gives_exactly_one_row_per_run.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perm_circuits.sweep import SweepLockedError, run_sweep
from perm_circuits.sweep import lock as lock_module
from perm_circuits.sweep.lock import LOCK_FILE, sweep_lock

HOLDER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("lock", sys.argv[1])
lock = importlib.util.module_from_spec(spec); spec.loader.exec_module(lock)  # stdlib only: starts fast
with lock.sweep_lock(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _hold(folder: Path) -> subprocess.Popen:
    """Another driver (a separate process) that owns ``folder`` until its stdin closes."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, lock_module.__file__, str(folder)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_driver_is_refused_naming_the_owner_and_writes_nothing(tmp_path, tiny):
    holder = _hold(tmp_path)
    try:
        with pytest.raises(SweepLockedError, match=rf"in use by another sweep: pid {holder.pid} on host "
                                                   rf"'{socket.gethostname()}'"):
            run_sweep(tiny, tmp_path, backend="serial", progress=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]  # no spec.json, no runs/
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # still the owner's
    finally:
        holder.stdin.close()
        holder.wait()
    assert not (tmp_path / LOCK_FILE).exists()  # released when the owner ends


def test_a_killed_drivers_lock_is_taken_over(tmp_path):
    holder = _hold(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # left behind
    with sweep_lock(tmp_path) as me:
        assert json.loads((tmp_path / LOCK_FILE).read_text()) == me and me["pid"] == os.getpid()
    assert sorted(tmp_path.iterdir()) == []  # released, no temp file left


def test_a_reused_pid_an_unreadable_lock_and_another_host(tmp_path):
    lock = tmp_path / LOCK_FILE
    host = socket.gethostname()
    lock.write_text(json.dumps({"pid": os.getppid(), "host": host, "started": "1"}))  # alive, but not since tick 1
    with sweep_lock(tmp_path):
        pass
    lock.write_text("")  # a lock file cut short (never written by sweep_lock, which links it whole)
    with sweep_lock(tmp_path):
        pass
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "x"}))
    with pytest.raises(SweepLockedError, match=r"locked by a sweep on another host: pid 1 on host 'elsewhere'"):
        with sweep_lock(tmp_path):
            pass
    assert json.loads(lock.read_text())["host"] == "elsewhere"  # not ours: left alone


def test_the_lock_is_released_after_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with sweep_lock(tmp_path):
            raise RuntimeError("boom")
    assert not (tmp_path / LOCK_FILE).exists()
    with sweep_lock(tmp_path):
        with pytest.raises(SweepLockedError, match="already being written by this process"):
            with sweep_lock(tmp_path):
                pass
