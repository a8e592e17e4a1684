"""docs/census.md's per-reference claims follow from the committed census table."""

from __future__ import annotations

import re
from pathlib import Path

from perm_circuits.pages.census_page import CENSUS_PAGE, ROLE_REFERENCES, final_rows, load_census

ROOT = Path(__file__).resolve().parents[2]


def test_claim_counts_per_class_mode_and_reference():
    finals = final_rows(load_census(ROOT))
    text = (ROOT / CENSUS_PAGE).read_text(encoding="utf-8")
    section = text.split("## The study's claims per class, mode and reference", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^\| (\w+) \| ([\w -]+) \| (\w+) \| (test|skill) \| (.+) \|$", section, re.M)
    assert lines
    checked = 0
    for config, name, claim, ref, cells in lines:
        group = finals[(finals["config"] == config) & (finals["class"] == name)]
        for cell in cells.split("; "):
            how, statuses = cell.split(": ", 1)
            column = f"{ROLE_REFERENCES[ref]}claim_{how}_{claim}"
            expected = group[column].dropna().value_counts().to_dict()
            shown = {s: int(k) for s, k in (part.rsplit(" ", 1) for part in statuses.split(", "))}
            assert shown == expected, (config, name, claim, ref, how)
            checked += 1
    assert checked >= len(lines)
    carried = int(finals["skill_story_mean"].notna().sum()) if "skill_story_mean" in finals else 0
    assert f"{carried} of {len(finals)} complete runs carry them" in section
