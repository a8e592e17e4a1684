"""Faithfulness against edges kept, per discovery method: writes results/discovery_curves.csv.

The curves behind the benchmark's ``faith_area`` column for its first seed under resample
ablation, from the same runs (same models, batches, seeds and lean settings as the committed
``results/discovery.csv``), so each curve's area equals that table's cell (a test checks it):

    python scripts/discovery_curves.py

Then ``python scripts/build_results.py`` draws them into docs/figures/discovery_curves_*.svg.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from perm_circuits.discovery.benchmark import benchmark_curves

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["induction", "tracr:frac_prevs", "tracr:reverse", "d32h2",
                                                         "d16h1l2-any", "d16h1", "d32h1"])
    parser.add_argument("--hows", nargs="*", default=["resample"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "discovery_curves.csv")
    args = parser.parse_args()
    table = benchmark_curves(args.models, hows=args.hows, seeds=args.seeds, n=args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.6g")
    print(f"{len(table)} rows in {args.out}")


if __name__ == "__main__":
    main()
