"""Re-run sweep rows from scratch and check them bit for bit against a committed table.

    python scripts/rerun_rows.py sweeps/capacity_full.toml results/capacity_full_sweep.csv RUN_ID [RUN_ID ...]
    python scripts/rerun_rows.py sweeps/capacity_full.toml results/capacity_full_sweep.csv --pick 2

Each run id is looked up in the spec's grid, trained, evaluated and analysed again with
``perm_circuits.sweep.run_one`` (the sweep's own function, one torch thread), and every column of
the fresh row is compared with the committed one as the CSV stores it.  Only the wall time and the
package versions may differ.  ``--pick N`` re-runs the N cheapest finished runs of the table.
Exit status 1 if any value differs.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from perm_circuits.sweep import load_spec, run_one

IGNORED = ("wall_seconds", "version_perm_circuits", "version_torch", "version_transformer_lens", "error")


def _same(fresh: object, stored: object) -> bool:
    if isinstance(stored, float) and math.isnan(stored):
        return fresh is None or (isinstance(fresh, float) and math.isnan(fresh)) or fresh == ""
    if isinstance(fresh, bool) or isinstance(stored, bool):
        return str(fresh) == str(stored)
    if isinstance(fresh, (int, float)) and isinstance(stored, (int, float)):
        return float(fresh) == float(stored)
    return str(fresh) == str(stored)


def compare(spec_path: Path, table: pd.DataFrame, run_ids: list[str]) -> list[str]:
    """Re-run ``run_ids``; the list of differences (empty when every row matches bit for bit)."""
    runs = {run.run_id: run for run in load_spec(spec_path).runs}
    problems = []
    for run_id in run_ids:
        if run_id not in runs:
            raise ValueError(f"run {run_id!r} is not in the grid of {spec_path}")
        stored = table[table["run_id"] == run_id]
        if stored.empty:
            raise ValueError(f"run {run_id!r} is not in the table")
        stored_row = stored.iloc[0].to_dict()
        fresh, _ = run_one(run_id, runs[run_id].config)
        if fresh["status"] != "done":
            problems.append(f"{run_id}: failed\n{fresh['error']}")
            continue
        for column, value in stored_row.items():
            if column in IGNORED:
                continue
            if column not in fresh:
                if not (isinstance(value, float) and math.isnan(value)):
                    problems.append(f"{run_id}: {column} missing from the fresh row (stored {value!r})")
                continue
            if not _same(fresh[column], value):
                problems.append(f"{run_id}: {column} fresh {fresh[column]!r} != stored {value!r}")
        print(f"{run_id}: {'ok' if not any(p.startswith(run_id) for p in problems) else 'DIFFERS'} "
              f"({fresh['wall_seconds']:.0f} s)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path)
    parser.add_argument("table", type=Path)
    parser.add_argument("run_ids", nargs="*")
    parser.add_argument("--pick", type=int, default=0, help="re-run the N cheapest finished runs")
    args = parser.parse_args(argv)
    table = pd.read_csv(args.table, dtype={"run_id": str})
    run_ids = list(args.run_ids)
    if args.pick:
        done = table[table["status"] == "done"].sort_values(["wall_seconds", "run_id"])
        run_ids += done["run_id"].head(args.pick).tolist()
    if not run_ids:
        parser.error("name run ids or --pick N")
    problems = compare(args.spec, table, run_ids)
    print("\n".join(problems) if problems else f"{len(run_ids)} rows identical bit for bit (wall time and versions aside)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
