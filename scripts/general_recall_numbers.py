"""Write results/general_recall_numbers.json: the numbers docs/general_recall.md quotes
(does a small model recall every repeated x_k, and with what circuit).

    python scripts/general_recall_numbers.py

Measures the shipped ``d16h1l2-any`` (exhaustive recall per x_k, the induction story, ablations
under zero/mean/resample, its circuit) and reads the training dynamics of the generalising seeds:
seed 0 from the shipped model's ``dynamics.json``, the others from
``results/general_recall_dynamics/seed{s}.json`` (each written by ``perm-circuits train ...
--record-dynamics`` with the generalisation sweep's recipe and that seed; see the page).  Then run
``python scripts/build_results.py`` to render the page.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from perm_circuits import load_pretrained
from perm_circuits.dynamics import load_dynamics
from perm_circuits.models import PRETRAINED_DIR
from perm_circuits.pages.build import GENERAL_NUMBERS, write_numbers
from perm_circuits.pages.generalisation import ANY_MODEL, general_recall_numbers

ROOT = Path(__file__).resolve().parent.parent
DYNAMICS_DIR = ROOT / "results" / "general_recall_dynamics"


def records() -> dict[int, object]:
    out = {0: load_dynamics(PRETRAINED_DIR / ANY_MODEL)}
    for path in sorted(DYNAMICS_DIR.glob("seed*.json")):
        out[int(path.stem.removeprefix("seed"))] = load_dynamics(path)
    return out


def main() -> int:
    torch.set_num_threads(1)
    numbers = general_recall_numbers(load_pretrained(ANY_MODEL), records())
    print(f"wrote {write_numbers(ROOT / GENERAL_NUMBERS, numbers)} ({len(numbers)} numbers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
