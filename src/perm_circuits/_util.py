"""Small shared helpers: strict dataclass construction from dicts, JSON-safe values."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

T = TypeVar("T")


def dataclass_from_dict(cls: type[T], data: Any, *, complete: bool = False) -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown fields (and missing ones if ``complete``)."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} data must be a dict, got {type(data).__name__}")
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
