"""One owner per sweep folder: ``DIR/sweep.lock`` names the driver (pid, host, its process start time)
while :func:`~perm_circuits.sweep.run_sweep` writes there.

A second driver on the same folder is refused with the owner's pid and host (two drivers would both
run every run).  A lock whose owner is gone (a driver killed with SIGKILL on this host: no such pid,
or the pid now belongs to a process started at another time) is stale and taken over.  A lock held
from another host cannot be checked from here and is refused; remove the file if that driver is gone.
The lock file is created with its whole content in one step (``os.link`` of a written temp file),
so no reader sees it half written.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["LOCK_FILE", "SweepLockedError", "sweep_lock"]

LOCK_FILE = "sweep.lock"


class SweepLockedError(ValueError):
    """Another live driver owns the sweep folder."""


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time (clock ticks since boot, from ``/proc``), ``None`` if unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie (killed, not reaped) is gone


def _alive(pid: int, started: str | None) -> bool:
    """Whether the process that wrote a lock (``pid``, started at ``started``) still runs on this host."""
    if Path("/proc/self/stat").exists():
        now = _start_time(pid)
        return now is not None and (started is None or now == started)
    try:  # no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid()),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    return f"pid {owner.get('pid')!r} on host {owner.get('host')!r} (since {owner.get('since')!r})"


def _acquire(folder: Path) -> dict[str, Any]:
    path = folder / LOCK_FILE
    me = _owner()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{LOCK_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(me, handle)
        for _ in range(3):
            try:
                os.link(tmp, path)  # atomic: fails if a lock exists, else the lock appears whole
                return me
            except FileExistsError:
                pass
            owner = _read(path)
            if owner is None:  # released meanwhile
                continue
            pid, host = owner.get("pid"), owner.get("host")
            if isinstance(pid, int) and host == me["host"] and pid == me["pid"]:
                raise SweepLockedError(f"sweep folder {str(folder)!r} is already being written by this process")
            if isinstance(pid, int) and host == me["host"] and _alive(pid, owner.get("started")):
                raise SweepLockedError(f"sweep folder {str(folder)!r} is in use by another sweep: {_describe(owner)}. "
                                       f"Wait for it to end (or stop it); a second driver would run every run again")
            if owner and host != me["host"]:
                raise SweepLockedError(f"sweep folder {str(folder)!r} is locked by a sweep on another host: "
                                       f"{_describe(owner)}. If that sweep is gone, remove {str(path)!r}")
            stale = folder / f".{LOCK_FILE}.stale.{os.getpid()}.tmp"  # a dead owner's lock (or an unreadable one)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, stale)
                if _read(stale) != owner:  # another driver took the stale lock between our read and the move
                    with contextlib.suppress(FileExistsError):
                        os.link(stale, path)  # give it back
                stale.unlink()
        raise SweepLockedError(f"could not take the lock {str(path)!r}: other drivers keep taking it")
    finally:
        os.unlink(tmp)


@contextlib.contextmanager
def sweep_lock(folder: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Own sweep folder ``folder`` (which must exist) for the ``with`` block: take ``sweep.lock``
    (taking over a stale one), yield the owner record, remove the lock afterwards if still ours.
    :class:`SweepLockedError` (a ValueError naming the owner) when a live driver owns it."""
    folder = Path(folder)
    me = _acquire(folder)
    try:
        yield me
    finally:
        owner = _read(folder / LOCK_FILE)
        if owner and owner.get("pid") == me["pid"] and owner.get("host") == me["host"]:
            with contextlib.suppress(FileNotFoundError):
                (folder / LOCK_FILE).unlink()
