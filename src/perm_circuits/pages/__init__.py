"""The results pages, generated: numbers measured on the shipped models, docs rendered from templates.

``python scripts/build_results.py`` renders ``docs/results.md`` and the README's results section
from the committed tables in ``results/``; ``--recompute`` first refreshes
``results/shipped_numbers.json`` from the shipped models.  ``tests/test_results_docs.py`` checks
both steps.  See ``docs/dev/results_pages.md``.
"""

from perm_circuits.pages.build import build_pages, read_numbers, write_numbers, write_pages
from perm_circuits.pages.capacity import capacity_markdown, capacity_numbers, load_capacity_table, verdict_modes
from perm_circuits.pages.numbers import MODELS, MODES, SETTINGS, shipped_numbers
from perm_circuits.pages.render import FORMATS, format_value, render, replace_section, template_keys

__all__ = [
    "FORMATS",
    "MODELS",
    "MODES",
    "SETTINGS",
    "build_pages",
    "capacity_markdown",
    "capacity_numbers",
    "format_value",
    "load_capacity_table",
    "read_numbers",
    "render",
    "replace_section",
    "shipped_numbers",
    "template_keys",
    "verdict_modes",
    "write_numbers",
    "write_pages",
]
