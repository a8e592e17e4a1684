"""Score the shipped models' algorithms as hypotheses (causal scrubbing) and write results/hypotheses.csv.

    python scripts/hypotheses.py [--n 2000] [--out results/hypotheses.csv] [--steps-out results/hypotheses_steps.csv]

For every shipped model (d16h1, d32h1, d32h2, d16h1l2-any) and skill (elimination at the last
step, recall of x1, recall of any x_k), each hypothesis of
``perm_circuits.analysis.study.hypotheses.shipped_hypotheses`` (the study's "attention binds, the
FFN looks up", our "position-1 shortcut" and, for d32h2, "a duplicate-token head gates an MLP
lookup") is scrubbed on 2,000 test sequences of that skill (seed 0, 200 bootstrap resamples):
one row for the whole hypothesis with its interval, one per claim scrubbed alone. The same
hypotheses written at steps 2-5 of elimination (``score_steps``: the answer is a value not yet used)
go to results/hypotheses_steps.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

MODELS = ("d16h1", "d32h1", "d32h2", "d16h1l2-any")


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from perm_circuits import load_pretrained
    from perm_circuits.analysis.study.hypotheses import SKILLS, score_hypotheses, score_steps
    from perm_circuits.outputs import refuse_outputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--out", default="results/hypotheses.csv")
    parser.add_argument("--steps-out", default="results/hypotheses_steps.csv")
    parser.add_argument("--force", action="store_true", help="overwrite an existing table")
    args = parser.parse_args(argv)
    out, steps_out = Path(args.out), Path(args.steps_out)
    if refuse_outputs({"--out": out, "--steps-out": steps_out}, force=args.force):  # before any work
        return 2
    torch.set_num_threads(1)
    rows, steps = [], []
    for name in MODELS:
        model = load_pretrained(name)
        for skill in SKILLS:
            rows += [{"model": name, **row} for row in score_hypotheses(model, skill, n=args.n)]
            print(name, skill, "done", flush=True)
        steps += [{"model": name, **row} for row in score_steps(model, n=args.n)]
        print(name, "steps done", flush=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False, float_format="%.6g")
    pd.DataFrame(steps).to_csv(steps_out, index=False, float_format="%.6g")
    summary = frame[frame.component == "all"].pivot_table(index=["model", "skill"], columns="hypothesis",
                                                          values="recovery")
    print(summary.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
