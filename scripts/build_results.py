"""Regenerate docs/results.md, docs/discovery.md, the README's results section and docs/figures/ from the committed result tables.

    python scripts/build_results.py               # render from results/*.json (+ capacity_sweep.csv)
    python scripts/build_results.py --recompute   # first re-measure results/shipped_numbers.json and
                                                  # results/attention_patterns.csv (~30-40 s)
    python scripts/build_results.py --check       # exit 1 if a generated file is out of date

See docs/dev/results_pages.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recompute", action="store_true", help="re-measure results/shipped_numbers.json and results/attention_patterns.csv first")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file differs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from perm_circuits.pages import build_pages, shipped_numbers, write_numbers, write_pages
    from perm_circuits.pages.attention import ATTENTION_TABLE, attention_csv, attention_table, write_attention_table
    from perm_circuits.pages.build import NUMBERS
    from perm_circuits.pages.census_page import census_pages
    from perm_circuits.pages.discovery_page import discovery_pages
    from perm_circuits.pages.how_models_compute import how_pages

    stale_tables = []
    if args.recompute:
        numbers = shipped_numbers(progress=True)
        attention = attention_table()
        if args.check:
            pages = build_pages(ROOT, numbers)
            committed = (ROOT / ATTENTION_TABLE).read_text(encoding="utf-8") if (ROOT / ATTENTION_TABLE).is_file() else None
            stale_tables = [str(ATTENTION_TABLE)] if committed != attention_csv(attention) else []
        else:
            write_numbers(ROOT / NUMBERS, numbers)
            print(f"wrote {NUMBERS} ({len(numbers)} numbers)")
            write_attention_table(ROOT / ATTENTION_TABLE, attention)
            print(f"wrote {ATTENTION_TABLE} ({len(attention)} rows)")
    if args.check:
        pages = pages if args.recompute else build_pages(ROOT)
        pages = {**pages, **discovery_pages(ROOT), **census_pages(ROOT), **how_pages(ROOT)}
        stale = stale_tables + [str(p) for p, text in pages.items()
                                if not (ROOT / p).is_file() or (ROOT / p).read_text(encoding="utf-8") != text]
        if stale:
            print("out of date: " + ", ".join(stale) + " (run python scripts/build_results.py)")
            return 1
        print("up to date")
        return 0
    changed = []
    for path, text in {**discovery_pages(ROOT), **census_pages(ROOT), **how_pages(ROOT)}.items():  # docs/discovery.md, docs/census.md, docs/how_models_compute.md, figures
        target = ROOT / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    changed += write_pages(ROOT)
    print("wrote " + ", ".join(map(str, changed)) if changed else "docs already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
