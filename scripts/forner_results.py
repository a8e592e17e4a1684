"""Run the Forner et al. 2026 reproduction and write its committed result tables.

    python scripts/forner_results.py          # --quick run (1 seed, ~3 min on one core)
    python scripts/forner_results.py --full   # 5 seeds (~15 min on one core)

Writes, for NAME = forner_quick or forner_full:

* ``results/NAME.csv``: the training log (one row per seed and logged step: alpha, A, R, S,
  zeta, loss, rho, measured and eq. 18 rollout accuracy, logit means and variances);
* ``results/NAME_ode.csv``: the seed mean beside the mean-field ODE (eq. 15) at each logged alpha;
* ``results/NAME_comparison.csv``: the "paper vs ours" rows;
* ``results/NAME_numbers.json``: the measured headline numbers and the run's settings.

docs/forner.md quotes the quick tables (tests/systems/test_forner_docs.py checks it) and
notebooks/06_forner.ipynb plots them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the 5-seed run instead of --quick")
    parser.add_argument("--progress", action="store_true", help="show tqdm bars")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from perm_circuits._util import atomic_write_text
    from perm_circuits.reproduce import reproduce

    result = reproduce("forner", quick=not args.full, progress=args.progress)
    name = "forner_full" if args.full else "forner_quick"
    out = ROOT / "results"
    numbers = dict(result.numbers)
    log, ode = pd.DataFrame(numbers.pop("log")), pd.DataFrame(numbers.pop("ode"))
    numbers["seconds"] = round(result.seconds, 1)
    atomic_write_text(out / f"{name}.csv", log.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / f"{name}_ode.csv", ode.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(out / f"{name}_comparison.csv", result.to_dataframe().to_csv(index=False))
    atomic_write_text(out / f"{name}_numbers.json", json.dumps(numbers, indent=2, default=float) + "\n")
    print(result.to_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
