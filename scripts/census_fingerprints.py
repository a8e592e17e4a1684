"""Fingerprint the census: every kept checkpoint of every census run, and the shipped models, into one table.

    python scripts/census_fingerprints.py --census DIR [--out results/census_fingerprints.csv] [--quiet]

``DIR`` is the folder ``scripts/census_train.py`` writes (``<config>_s<seed>/checkpoints/epoch_NNNN``).
One row per (source, config, seed, epoch): ``source`` is ``census`` or ``shipped``; ``epochs_run`` and
``complete`` say whether the run had finished its 50 epochs when the table was made; ``epoch_recall_99`` /
``epoch_elimination_99`` are the run's first epochs at 0.99 (from its history, as far as it ran).
Resumable: rows already in ``--out`` are kept and not recomputed; the table is written atomically after
every row.  ``--reverse`` takes the missing rows from the end, for a second worker writing its own ``--out``.
Cost: one fingerprint takes 1-5 s on an idle core (``seconds``; the roles twice, once per reference, dominate),
about 10-40 s on this shared 2-core machine under load.  The census page (``docs/census.md``) is rendered from it by ``python scripts/build_results.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "results" / "census_fingerprints.csv"
KEYS = ["source", "config", "seed", "epoch"]
KEEP = (1, 2, 4, 8, 16, 32, 50)  # census_train.KEEP


def _first_epoch(history: list[dict], column: str) -> float:
    for row in history:
        if row.get(column, 0.0) >= 0.99:
            return float(row["epoch"])
    return float("nan")


def _jobs(census: Path) -> list[tuple[dict, Path | str]]:
    from perm_circuits.models import list_pretrained

    jobs: list[tuple[dict, Path | str]] = []
    for name in sorted(n for n in list_pretrained() if n in ("d16h1", "d32h1", "d32h2")):
        jobs.append(({"source": "shipped", "config": name, "seed": 0, "epoch": -1}, name))
    runs = sorted(p for p in census.iterdir() if p.is_dir() and "_s" in p.name) if census.is_dir() else []
    for run in runs:
        config, seed = run.name.rsplit("_s", 1)
        # the kept epochs only: a run still training also holds its newest checkpoint, pruned later
        epochs = sorted(e for e in (int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("epoch_*")) if e in KEEP)
        for epoch in epochs:
            jobs.append(({"source": "census", "config": config, "seed": int(seed), "epoch": epoch},
                         run / "checkpoints" / f"epoch_{epoch:04d}"))
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--census", type=Path, required=True, help="the folder census_train.py writes")
    parser.add_argument("--out", type=Path, default=TABLE)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="stop after this many new rows (0: all)")
    parser.add_argument("--reverse", action="store_true",
                        help="take the missing rows from the last (a second worker writing another --out)")
    args = parser.parse_args(argv)
    import pandas as pd
    import torch
    from tqdm.auto import tqdm

    from perm_circuits.census import mechanism_fingerprint
    from perm_circuits.models import PRETRAINED_DIR, load_checkpoint, load_pretrained

    torch.set_num_threads(1)
    table = pd.read_csv(args.out) if args.out.is_file() else pd.DataFrame(columns=KEYS)
    have = {tuple(row) for row in table[KEYS].astype(str).itertuples(index=False)}
    jobs = [(key, src) for key, src in _jobs(args.census) if tuple(str(key[k]) for k in KEYS) not in have]
    if args.reverse:
        jobs = jobs[::-1]
    rows = table.to_dict("records")
    done = 0
    for key, source in tqdm(jobs, disable=args.quiet, desc="fingerprints"):
        if args.limit and done >= args.limit:
            break
        start = time.perf_counter()
        if isinstance(source, str):
            model = load_pretrained(source)
            history = json.loads((PRETRAINED_DIR / source / "config.json").read_text())["metadata"]["history"]
            epochs_run, complete = len(history), True
        else:
            checkpoint = load_checkpoint(source)
            model = checkpoint.model
            run = source.parent.parent
            done_file = run / "done.json"
            history = (json.loads(done_file.read_text())["history"] if done_file.is_file()
                       else list(checkpoint.metadata.get("history", [])))
            epochs_run = len(history)
            complete = done_file.is_file()
        torch.manual_seed(0)
        fingerprint = mechanism_fingerprint(model, name=f"{key['config']}_s{key['seed']}")
        row = {**key, "epochs_run": epochs_run, "complete": complete,
               "epoch_recall_99": _first_epoch(history, "recall_accuracy"),
               "epoch_elimination_99": _first_epoch(history, "elimination_accuracy"),
               **fingerprint.to_dict(), "seconds": round(time.perf_counter() - start, 2)}
        rows.append(row)
        out = pd.DataFrame(rows).sort_values(KEYS, kind="stable")
        tmp = args.out.with_suffix(".csv.tmp")
        out.to_csv(tmp, index=False)
        os.replace(tmp, args.out)
        done += 1
    print(f"{args.out}: {len(rows)} rows ({done} new)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
