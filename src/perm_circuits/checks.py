"""Argument checks shared by every part of the package (standard library only).

Each check raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of
range, with a message naming the argument, the bad value and what was expected, and returns the
checked value.  ``bool`` is never an int.  The analysis-specific checks (layer, head, position
indices against a model) live in :mod:`perm_circuits.analysis` beside the code that uses them.
"""

from __future__ import annotations

import math

__all__ = [
    "MAX_PARAMETERS", "MAX_SAMPLES", "MAX_SEQUENCES", "check_bool", "check_fraction", "check_int", "check_number",
    "check_positive_int", "check_seed", "check_size", "check_str",
]

MAX_PARAMETERS = 10**9
"""The most parameters a model may have (4 GB of float32): the tiny transformers here have thousands;
a config asking for more is a typo or a hostile file, refused before anything is allocated."""
MAX_SEQUENCES = 10**7
"""The most sequences drawn into memory at once (a batch, a test set)."""
MAX_SAMPLES = 10**10
"""The most training samples per epoch (drawn batch by batch: a bound on time, not memory)."""


def check_size(name: str, value: int, limit: int) -> int:
    """``value`` if it is at most ``limit``, else a ValueError naming the size and the limit (call it
    before allocating anything of that size)."""
    if value > limit:
        raise ValueError(f"{name} {value:,} is over the limit of {limit:,}")
    return value


def check_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if low is not None and high is not None:
        if not low <= value < high:
            raise ValueError(f"{name} must be in [{low}, {high - 1}], got {value}")
    elif low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    elif high is not None and value >= high:
        raise ValueError(f"{name} must be < {high}, got {value}")
    return value


def check_number(
    name: str, value: object, low: int | float | None = None, *, strict: bool = False, finite: bool = True,
) -> float:
    """``value`` (an int or a float) as a float, ``>= low`` (``> low`` when ``strict``) if ``low`` is
    given.  With ``finite`` (the default) NaN and infinities are rejected; without it NaN still fails
    any bound."""
    expected = ("a finite number" if finite else "a number") + (
        "" if low is None else f" {'>' if strict else '>='} {low}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")
    if (finite and not math.isfinite(value)) or (low is not None and not (value > low if strict else value >= low)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1."""
    return check_int(name, value, low=1)


def check_seed(seed: object, name: str = "seed") -> int:
    """A seed: an int (not a bool) that ``torch.Generator.manual_seed`` takes, in ``[-2**63, 2**64)``."""
    if not -(2**63) <= check_int(name, seed) < 2**64:
        raise ValueError(f"{name} must be in [-2**63, 2**64) (a torch generator seed), got {seed}")
    return seed


def check_fraction(value: object, name: str = "threshold") -> float:
    """``value`` as a float in ``(0, 1]`` (a threshold or a share of something)."""
    if not 0 < check_number(name, value, finite=False) <= 1:  # also rejects NaN
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def check_str(name: str, value: object) -> str:
    """``value`` if it is a str, else TypeError."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    return value


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool, else TypeError (``1`` or ``"yes"`` is not a flag)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value
