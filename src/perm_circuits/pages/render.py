"""A tiny template language for the results pages: every quoted number is a placeholder.

``{{ key | format }}`` is replaced by ``numbers[key]`` written with ``format`` (see
:data:`FORMATS`); ``{{> block }}`` is replaced by the text of a named block (a generated
section such as the capacity tables; an absent block renders as nothing, so a template can
carry a section whose table does not exist yet).  Nothing else is interpreted: prose stays
hand-written markdown.  No dependency (jinja is not needed for this).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping

from perm_circuits._util import replace_section
from perm_circuits.checks import check_number

__all__ = ["FORMATS", "PLACEHOLDER", "format_value", "render", "replace_section", "template_keys"]

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*(?:\|\s*([a-z0-9_]+)\s*)?\}\}")
"""``{{ key }}`` or ``{{ key | format }}``."""

BLOCK = re.compile(r"\{\{>\s*([A-Za-z0-9_.\-]+)\s*\}\}\n?")
"""``{{> name }}``: a generated block (its trailing newline is consumed when the block is absent)."""


def _number(value: object, key: str, fmt: str) -> float:
    return check_number(f"{key!r} (format {fmt!r})", value, finite=False)


def _decimals(name: str, digits: int, scale: int = 1, suffix: str = "") -> Callable[[object, str], str]:
    def fmt(value: object, key: str) -> str:
        x = _number(value, key, name)
        return "n/a" if math.isnan(x) else f"{scale * x:.{digits}f}{suffix}"

    return fmt


def _integer(value: object, key: str) -> str:
    x = _number(value, key, "int")
    if math.isnan(x):
        return "n/a"
    if x != int(x):
        raise ValueError(f"{key!r} is {value!r}; format 'int' needs a whole number")
    return str(int(x))


def _text(value: object, key: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return str(value)


FORMATS: dict[str, Callable[[object, str], str]] = {
    **{f"f{d}": _decimals(f"f{d}", d) for d in range(5)},
    **{f"pct{d}": _decimals(f"pct{d}", d, 100, "%") for d in range(3)},
    "int": _integer,
    "str": _text,
}
"""``f0``..``f4``: fixed decimals (0.94); ``pct0``..``pct2``: percent (93.9%); ``int``; ``str``
(the default when no format is given).  NaN renders as ``n/a``."""


def format_value(value: object, fmt: str = "str", key: str = "value") -> str:
    """``value`` written as the template's ``format`` writes it."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} for {key!r}; known: {sorted(FORMATS)}")
    return FORMATS[fmt](value, key)


def template_keys(template: str) -> list[str]:
    """The number keys a template quotes, in order of first use."""
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    return list(dict.fromkeys(m.group(1) for m in PLACEHOLDER.finditer(template)))


def render(template: str, numbers: Mapping[str, object], blocks: Mapping[str, str] | None = None) -> str:
    """``template`` with every placeholder filled from ``numbers`` and every block from ``blocks``.

    Raises:
        KeyError: a placeholder names a key that ``numbers`` lacks (the message suggests near keys).
        ValueError: an unknown format.
        TypeError: a number format applied to text.
    """
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    if not isinstance(numbers, Mapping):
        raise TypeError(f"numbers must be a mapping of key -> value, got {type(numbers).__name__}")
    blocks = dict(blocks or {})
    for name, text in blocks.items():
        if not isinstance(text, str):
            raise TypeError(f"block {name!r} must be a str, got {type(text).__name__}")
    # check every placeholder before writing anything
    for match in PLACEHOLDER.finditer(template):
        key, fmt = match.group(1), match.group(2) or "str"
        if key not in numbers:
            near = difflib.get_close_matches(key, list(numbers), n=3)
            raise KeyError(f"template quotes {key!r}, which the numbers table lacks" + (f"; near: {near}" if near else ""))
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r} for {key!r}; known: {sorted(FORMATS)}")

    def block(match: re.Match) -> str:
        text = blocks.get(match.group(1), "")
        return text if not text or text.endswith("\n") else text + "\n"

    text = BLOCK.sub(block, template)
    return PLACEHOLDER.sub(lambda m: format_value(numbers[m.group(1)], m.group(2) or "str", m.group(1)), text)

