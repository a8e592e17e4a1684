"""Output paths checked before any work: "can I write here", "is this mine to overwrite".

Every command that writes (``train``, ``report``, ``discover``, ``sweep``, ``sweep-report``,
``reproduce --out``) calls :func:`check_writable` on its target first, so an unwritable,
impossible (under a regular file, in ``/proc``) or full target fails in well under a second,
before hours of training or discovery are spent and lost.  A folder a command owns carries a
marker file the command wrote (:func:`mark_folder`); any other non-empty folder, and any existing
file, is the user's and is refused unless ``force`` (``--force``): :func:`check_folder`,
:func:`check_new_file`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["MIN_FREE_BYTES", "check_folder", "check_new_file", "check_writable", "folder_marker", "free_bytes",
           "is_marked", "mark_folder", "nearest_existing", "refuse_outputs"]

MIN_FREE_BYTES = 1 << 20
"""A target whose file system has less free space than this (1 MiB) counts as full."""


def _as_path(path: object, label: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{label} must be a path (str or Path), got {type(path).__name__} {path!r}")
    if str(path) == "":
        raise ValueError(f"{label} must be a path, got an empty string")
    return Path(path)


def nearest_existing(path: str | os.PathLike) -> Path:
    """``path`` itself when it exists, else its nearest existing ancestor (``.`` for a relative path
    with no existing part)."""
    current = Path(path)
    while not os.path.lexists(current):
        parent = current.parent
        if parent == current:
            break
        current = parent
    return current


def free_bytes(folder: str | os.PathLike) -> int:
    """Bytes an unprivileged user may still write on ``folder``'s file system (``statvfs``)."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def check_writable(path: object, *, label: str = "--out", folder: bool = False) -> Path:
    """``path`` as a Path once it is known that it can be created or written; else a one-line ValueError
    naming it.

    Checks, touching nothing of the user's: an existing ``path`` is a folder when ``folder`` (else not a
    folder); its nearest existing ancestor is a folder (not a regular file); a probe file can be
    created, written and removed there; and that file system has :data:`MIN_FREE_BYTES` free.
    """
    target = _as_path(path, label)
    if target.exists():
        if folder and not target.is_dir():
            raise ValueError(f"{label} {str(target)!r} exists and is not a folder")
        if not folder and target.is_dir():
            raise ValueError(f"{label} {str(target)!r} is a folder; give a file path")
    where = target if folder and target.is_dir() else nearest_existing(target.parent)
    if not where.is_dir():
        raise ValueError(f"{label} {str(target)!r} cannot be created: {str(where)!r} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".perm-circuits-probe-", suffix=".tmp")
        try:
            os.write(fd, b"\0" * 512)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{label} {str(target)!r} cannot be written: {error.strerror or error} in "
                         f"{str(where)!r}") from None
    try:
        free = free_bytes(where)
    except OSError:  # pragma: no cover - no statvfs there: the probe passed, go on
        return target
    if free < MIN_FREE_BYTES:
        raise ValueError(f"{label} {str(target)!r} cannot be written: no space left on the device of "
                         f"{str(where)!r} ({free} bytes free)")
    return target


def check_new_file(path: object, *, force: bool, label: str = "--out") -> Path:
    """:func:`check_writable` of a file ``path`` that is refused when it exists, unless ``force``."""
    target = check_writable(path, label=label)
    if target.exists() and not force:
        raise ValueError(f"{label} {str(target)!r} exists; pass --force to overwrite it, or choose another path")
    return target


def refuse_outputs(outputs: Mapping[str, object], *, force: bool) -> bool:
    """A script's check of its output files before any work: :func:`check_new_file` of each
    ``{label: path}``; the first refusal is printed as one ``error:`` line on stderr and gives
    ``True`` (the script then exits 2), else ``False``."""
    try:
        for label, path in outputs.items():
            check_new_file(path, force=force, label=label)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return True
    return False


def folder_marker(kind: str) -> str:
    """The marker file's name in a folder written by command ``kind`` (e.g. ``.perm-circuits-sweep.json``)."""
    return f".perm-circuits-{kind}.json"


def is_marked(folder: str | os.PathLike, kind: str) -> bool:
    """Whether ``folder`` holds the marker of ``kind`` that :func:`mark_folder` writes."""
    marker = Path(folder) / folder_marker(kind)
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("format") == f"perm_circuits.{kind}"
    except (OSError, ValueError, AttributeError):
        return False


def mark_folder(folder: str | os.PathLike, kind: str) -> Path:
    """Create ``folder`` (if needed) and record in it that command ``kind`` owns it; returns the marker."""
    from perm_circuits._util import atomic_write_text

    Path(folder).mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": f"perm_circuits.{kind}", "written_by": f"perm-circuits {kind}"})
    return atomic_write_text(Path(folder) / folder_marker(kind), text + "\n")


def check_folder(path: object, kind: str, *, force: bool, label: str = "--out",
                 owned: Callable[[Path], bool] | None = None) -> Path:
    """:func:`check_writable` of a folder that command ``kind`` may write into: a new or empty folder,
    one holding its marker (or, for folders of earlier versions, one ``owned(folder)`` recognises by
    content), or any folder with ``force``; else a ValueError naming it."""
    target = check_writable(path, label=label, folder=True)
    if force or not target.is_dir() or is_marked(target, kind) or not any(target.iterdir()):
        return target
    if owned is not None and owned(target):
        return target
    how = "pass --force" if label.startswith("-") else "pass force=True (CLI: --force)"
    raise ValueError(f"{label} {str(target)!r} is a non-empty folder that perm-circuits {kind} did not write "
                     f"(no {folder_marker(kind)}); choose another folder, or {how} to write into it anyway")
