"""Write results/capacity_full_sweep.csv from the full-recipe capacity sweep folder.

    perm-circuits sweep sweeps/capacity_full.toml --out runs/capacity_full --workers 2
    python scripts/capacity_full_table.py runs/capacity_full [--out results/capacity_full_sweep.csv]
    python scripts/build_results.py

One row per run (the sweep's row, every column but the traceback of a failed run, which stays in
the sweep folder), sorted by configuration and seed; ``recall_curve`` / ``elimination_curve`` hold
each run's per-epoch accuracies (``perm_circuits.sweep.run.parse_curve`` reads them back).  The
sweep is resumable: the same command continues a folder where it stopped, and this script can be
re-run on a partial folder (the results page says how many runs of the grid are in the table).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perm_circuits._util import atomic_write_text
from perm_circuits.sweep import load_sweep

ORDER = ["d_model", "n_heads", "dropout", "seed"]


def table(sweep_dir: Path):
    """The sweep folder's rows as the committed table (no ``error`` text; sorted by configuration and seed)."""
    frame = load_sweep(sweep_dir)
    frame = frame.drop(columns=[c for c in ("error",) if c in frame.columns])
    return frame.sort_values(ORDER, kind="stable").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="the full-recipe capacity sweep folder")
    parser.add_argument("--out", type=Path, default=Path("results/capacity_full_sweep.csv"))
    args = parser.parse_args(argv)
    frame = table(args.sweep_dir)
    atomic_write_text(args.out, frame.to_csv(index=False))
    print(f"wrote {args.out}: {len(frame)} runs ({int((frame['status'] == 'done').sum())} done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
