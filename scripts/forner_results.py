"""Run the Forner et al. 2026 reproduction and write its committed result tables.

    python scripts/forner_results.py          # --quick run (1 seed, ~3 min on one core)
    python scripts/forner_results.py --full   # 5 seeds (~15-25 min on one shared core)
    python scripts/forner_results.py --rerender [--full]   # recompute tables + docs from the committed log

Writes, for NAME = forner_quick or forner_full:

* ``results/NAME.csv``: the training log (one row per seed and logged step: alpha, A, R, S,
  zeta, loss, rho, measured and eq. 18 rollout accuracy, logit means and variances);
* ``results/NAME_ode.csv``: the seed mean beside the mean-field ODE (eq. 15) at each logged alpha;
* ``results/NAME_comparison.csv``: the "paper vs ours" rows;
* ``results/NAME_numbers.json``: the measured headline numbers and the run's settings.

Each run also rewrites its generated block of docs/forner.md from the comparison table and its
figure docs/figures/NAME.svg from ``results/NAME_ode.csv`` (the same figure ``scripts/build_results.py``
renders; tests/systems/test_forner_results.py checks the page and the figure against the committed
tables) and notebooks/06_forner.ipynb plots them.
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
    parser.add_argument("--rerender", action="store_true",
                        help="train nothing: recompute the ODE table, comparison rows, numbers and docs block "
                             "from the committed training log results/NAME.csv")
    args = parser.parse_args(argv)
    if args.rerender:
        rerender("forner_full" if args.full else "forner_quick")
        write_docs(quick=not args.full)
        return 0
    torch.set_num_threads(1)
    from perm_circuits._util import atomic_write_text
    from perm_circuits.reproduce import reproduce

    result = reproduce("forner", quick=not args.full, progress=args.progress)
    name = "forner_full" if args.full else "forner_quick"
    out = ROOT / "results"
    numbers = dict(result.numbers)
    log, ode = pd.DataFrame(numbers.pop("log")), pd.DataFrame(numbers.pop("ode"))
    numbers["seconds"] = round(result.seconds, 1)
    atomic_write_text(out / f"{name}.csv", log.to_csv(index=False))
    atomic_write_text(out / f"{name}_ode.csv", ode.to_csv(index=False))
    atomic_write_text(out / f"{name}_comparison.csv", result.to_dataframe().to_csv(index=False))
    atomic_write_text(out / f"{name}_numbers.json", json.dumps(numbers, indent=2, default=float) + "\n")
    write_docs(quick=not args.full)
    print(result.to_text())
    return 0


def rerender(name: str) -> None:
    """Recompute everything after the training log from ``results/NAME.csv`` (deterministic)."""
    from perm_circuits._util import atomic_write_text
    from perm_circuits.systems.forner import (
        FornerConfig,
        compare_with_ode,
        comparison_rows,
    )

    out = ROOT / "results"
    log = pd.read_csv(out / f"{name}.csv")
    old = json.loads((out / f"{name}_numbers.json").read_text())
    cfg = FornerConfig(**old["config"])
    ode = compare_with_ode(log, cfg, old["settings"]["lr"])
    rows, measured = comparison_rows(log, ode, cfg, log["seed"].nunique())
    numbers = {**measured, **{k: old[k] for k in ("settings", "config", "seconds")}}
    table = pd.DataFrame([vars(r) for r in rows], columns=["claim", "paper", "ours", "holds", "note"])
    atomic_write_text(out / f"{name}_ode.csv", ode.to_csv(index=False))
    atomic_write_text(out / f"{name}_comparison.csv", table.to_csv(index=False))
    atomic_write_text(out / f"{name}_numbers.json", json.dumps(numbers, indent=2, default=float) + "\n")


def write_docs(quick: bool = True) -> None:
    """Rewrite docs/forner.md's generated block for the run kind from results/forner_KIND_comparison.csv,
    and its figure docs/figures/forner_KIND.svg from results/forner_KIND{,_ode}.csv."""
    from perm_circuits._util import atomic_write_text
    from perm_circuits.pages.figures import FIGURES_DIR
    from perm_circuits.pages.paper_figures import forner_svg
    from perm_circuits.systems.forner import comparison_markdown, docs_markers

    name = "forner_quick" if quick else "forner_full"
    table = pd.read_csv(ROOT / "results" / f"{name}_comparison.csv", keep_default_na=False)
    seconds = json.loads((ROOT / "results" / f"{name}_numbers.json").read_text())["seconds"]
    page = ROOT / "docs" / "forner.md"
    text = page.read_text()
    begin, end = docs_markers(quick)
    start, stop = text.index(begin), text.index(end) + len(end)
    atomic_write_text(page, text[:start] + comparison_markdown(table, seconds, quick=quick) + text[stop:])
    seeds = int(pd.read_csv(ROOT / "results" / f"{name}.csv")["seed"].nunique())
    ode = pd.read_csv(ROOT / "results" / f"{name}_ode.csv")
    atomic_write_text(ROOT / FIGURES_DIR / f"{name}.svg", forner_svg(ode, seeds, "quick" if quick else "full"))


if __name__ == "__main__":
    raise SystemExit(main())
