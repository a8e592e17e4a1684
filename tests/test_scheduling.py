"""The suite's scheduling (tests/conftest.py): work units for ``--dist loadfile``, heaviest first."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DURATIONS, SHARED, work_unit

ROOT = Path(__file__).resolve().parent.parent


def test_every_shared_group_names_existing_files_once():
    paths = [path for group in SHARED.values() for path in group]
    assert len(paths) == len(set(paths))
    assert all((ROOT / path).is_file() for path in paths), "a SHARED file was renamed: update tests/conftest.py"
    assert all(len(group) >= 2 for group in SHARED.values())


def test_a_shared_file_is_one_unit_with_its_group_and_other_files_are_their_own():
    report, browser = SHARED["report pages"]
    assert work_unit(f"{report}::test_a") == work_unit(f"{browser}::test_b[x]") == "report pages"
    assert work_unit("tests/test_cli.py::test_x") == "tests/test_cli.py"


def test_the_durations_table_lists_existing_files():
    weights = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert len(weights) > 100 and all(seconds >= 0 for seconds in weights.values())
    missing = [path for path in weights if not (ROOT / path).is_file()]
    assert len(missing) <= 5, f"stale entries in tests/durations.json: {missing} (scripts/test_durations.py)"
