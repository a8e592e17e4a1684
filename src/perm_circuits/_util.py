"""Small shared helpers: strict dataclass construction from dicts, JSON-safe values, atomic writes, generated
sections of text files."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def dataclass_from_dict(cls: type[T], data: Any, *, complete: bool = False, added: dict[str, Any] | None = None) -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown fields (and missing ones if ``complete``,
    except those in ``added``: fields newer than the stored format, mapped to the value their
    absence implies, e.g. ``dropout`` 0.0)."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} data must be a dict, got {type(data).__name__}")
    if complete and added:
        data = {**added, **data}
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}")
    missing = sorted(fields - set(data))
    if complete and missing:
        raise ValueError(f"{cls.__name__} fields missing: {missing}")
    return cls(**data)


def json_safe(value: Any) -> Any:
    """``value`` with NaN/inf floats replaced by ``None``, so ``json.dumps(allow_nan=False)`` works."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def without_added_defaults(document: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the ``added`` fields that hold the value their absence implies: hashing it
    keeps identifiers (sweep run ids) stable when a field is added later."""

    def plain(value: Any) -> Any:  # a list and a tuple of the same items are the same value
        return list(value) if isinstance(value, (list, tuple)) else value

    return {k: v for k, v in document.items() if not (k in added and plain(v) == plain(added[k]))}


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Write ``path`` atomically: ``write(tmp)`` fills a temp file in the same folder, which is
    fsynced and renamed over ``path``; on any error (or interrupt) the temp file is removed and
    ``path`` is untouched.  Readers never see a partial file, and a killed process leaves at most a
    ``.<name>.*.tmp`` file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mask = os.umask(0)  # read the process umask (and restore it)
    os.umask(mask)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600 (and some writers, e.g. safetensors, recreate the
        # file 0600): a written file gets the mode open(path, "w") gives
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects :func:`loads_json` reads (a checkpoint's config and a sweep
row nest at most a few levels; deeper input is hostile or broken and would hit Python's recursion limit)."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays/objects in JSON ``text`` (brackets inside strings do not count;
    no parsing, so no recursion)."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def loads_json(text: str, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing input nested deeper than ``max_depth`` with a ValueError naming
    ``what`` (e.g. the file), before parsing.  Invalid JSON raises ``json.JSONDecodeError`` as usual."""
    depth = json_depth(text)
    if depth > max_depth:
        raise ValueError(f"{what} nests JSON {depth} levels deep; at most {max_depth} are read")
    return json.loads(text)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of UTF-8 ``text``; returns the path."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return Path(path)


def replace_section(text: str, body: str, begin: str, end: str) -> str:
    """``text`` with everything between the marker lines ``begin`` and ``end`` replaced by ``body``."""
    for marker in (begin, end):
        if text.count(marker) != 1:
            raise ValueError(f"expected the marker {marker!r} exactly once, found it {text.count(marker)} times")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"
