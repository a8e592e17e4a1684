"""Score every circuit-discovery method on every model with a known circuit: writes results/discovery.csv.

The committed table is the lean default (60 sequences, seeds 0 to 4, zero, mean and resample
ablation; mask pruning 60 steps; the size-limited oracle up to 8 edges within 300,000 connected
subsets, which is every circuit of up to 6 edges on a 46-edge graph and up to 8 on a 23-edge one):

    python scripts/discovery_benchmark.py

run as two processes on a 2-core CPU with one thread each (``OMP_NUM_THREADS=1``; about 45
minutes), each over part of the models, and concatenated in this order:

    python scripts/discovery_benchmark.py --models induction tracr:frac_prevs tracr:reverse --out a.csv
    python scripts/discovery_benchmark.py --models d32h2 d16h1l2-any d16h1 d32h1 --out b.csv

The full-size run (1,000 sequences, mask pruning 300 steps, the oracle within 3,000,000 subsets;
hours on a CPU):

    python scripts/discovery_benchmark.py --n 1000 --full

The table is written after every model, so an interrupted run keeps what it finished. Then
``python scripts/build_results.py`` renders docs/discovery.md from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from perm_circuits.discovery.benchmark import (
    DEFAULT_HOWS,
    DEFAULT_METHODS,
    benchmark_models,
    run_benchmark,
    write_by_model,
)

ORDER = ("induction", "tracr:frac_prevs", "tracr:reverse", "d32h2", "d16h1l2-any", "d16h1", "d32h1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None,
                        help=f"default: {' '.join(ORDER)}; also induction_bare, tracr:sort")
    parser.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS))
    parser.add_argument("--hows", nargs="*", default=list(DEFAULT_HOWS), help=f"among {DEFAULT_HOWS}")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--full", action="store_true", help="full-size method settings (not lean)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "discovery.csv")
    args = parser.parse_args()
    available = benchmark_models()
    models = args.models or [m for m in ORDER if m in available]  # the committed run; others by --models
    write_by_model(models, lambda model: run_benchmark([model], args.methods, args.hows, args.seeds, args.n,
                                                       lean=not args.full), args.out)


if __name__ == "__main__":
    main()
