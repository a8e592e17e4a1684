"""The recall skill's own circuit in each shipped model: writes results/discovery_recall.csv.

For every shipped study model, zero and resample ablation and seeds 0 to 4, the exhaustive
oracle's smallest circuit keeping faithfulness 0.9 on the recall sequences alone (the last query
repeats an earlier one), scored at the last position
(:func:`perm_circuits.discovery.skills.skill_oracle_table`; about 15 minutes on one CPU core):

    python scripts/discovery_recall.py

Then ``python scripts/build_results.py`` compares it with the recall circuit the docs describe
(docs/discovery.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from perm_circuits.discovery.benchmark import write_by_model
from perm_circuits.discovery.skills import skill_oracle_table

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["d16h1", "d32h1", "d32h2", "d16h1l2-any"])
    parser.add_argument("--hows", nargs="*", default=["zero", "resample"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=300, help="test sequences per seed (about 30%% are recall)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "discovery_recall.csv")
    args = parser.parse_args()
    write_by_model(args.models, lambda model: skill_oracle_table([model], args.hows, args.seeds, args.n), args.out)


if __name__ == "__main__":
    main()
