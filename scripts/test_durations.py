"""Write tests/durations.json, the seconds each test file takes, from a JUnit report of the suite.

The root conftest orders test files by these weights, heaviest first, so that the two workers of
the README's ``python -m pytest -q -n 2 --dist loadfile`` finish together (longest-processing-time
first). Regenerate after adding a slow test file::

    python -m pytest -q -n 2 --dist loadfile --junitxml=/tmp/junit.xml
    python scripts/test_durations.py /tmp/junit.xml

A file missing from the table weighs ``DEFAULT_SECONDS`` in tests/conftest.py; nothing fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "durations.json"


def file_of(classname: str) -> str | None:
    """The test file a JUnit ``classname`` (``tests.views.test_report[.TestClass]``) comes from."""
    parts = classname.split(".")
    while parts:
        candidate = Path(*parts).with_suffix(".py")
        if (ROOT / candidate).is_file():
            return candidate.as_posix()
        parts = parts[:-1]
    return None


def durations(report: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of each of its tests), largest first."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        path = file_of(case.get("classname", ""))
        if path is not None:
            totals[path] += float(case.get("time", 0.0))
    return dict(sorted(((k, round(v, 1)) for k, v in totals.items()), key=lambda kv: (-kv[1], kv[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="a JUnit XML report of the whole suite")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        print(f"error: no JUnit report at {args.junit}", file=sys.stderr)
        return 2
    table = durations(args.junit)
    if not table:
        print(f"error: {args.junit} names no test file under {ROOT}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
