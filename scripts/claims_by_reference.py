"""The study's claims and the shipped models' roles per ablation mode and per reference -> results/claims_by_reference.csv.

    python scripts/claims_by_reference.py [--out results/claims_by_reference.csv] [--models d16h1 d32h1 d32h2]

One ``head_roles`` call per model and reference (``"test"``: the ablated values from the whole test set, the
findings' convention; ``"skill"``: from each skill's own rows), every ablation mode, the findings' test set
(5,000 sequences, seed 1234), 2,000 patching pairs, 200 bootstrap resamples
(:func:`perm_circuits.analysis.study.reference_table.claims_by_reference`).  The census page
(``docs/census.md``, ``python scripts/build_results.py``) renders its section "The claims per reference"
from this table.  Nothing is overwritten without ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "results" / "claims_by_reference.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TABLE)
    parser.add_argument("--models", nargs="+", default=["d16h1", "d32h1", "d32h2"])
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    args = parser.parse_args(argv)
    from perm_circuits.outputs import refuse_outputs

    if refuse_outputs({"--out": args.out}, force=args.force):  # before any work
        return 2
    import torch

    from perm_circuits.analysis.study.reference_table import claims_by_reference
    from perm_circuits.models import load_pretrained

    torch.set_num_threads(1)
    table = claims_by_reference({name: load_pretrained(name) for name in args.models})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {args.out} ({len(table)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
