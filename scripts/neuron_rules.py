"""Explain every MLP neuron of the shipped models by a named rule; write results/neuron_rules.csv and the retention table.

    python scripts/neuron_rules.py [--force] [--out results/neuron_rules.csv] [--retention results/neuron_retention.csv]

For every shipped model (d16h1, d32h1, d32h2, d16h1l2-any), every MLP neuron's activation at every
step's query position (and, below the last layer, at every y position, which later layers read)
is fitted as a lookup table over at most three features chosen greedily from the position's feature library (``perm_circuits.analysis.study.neuron_rules``), on the exhaustive train set
(every order of every training permutation, with and without the model's repeats); in a model of
several layers, the last layer's neurons at the last step read the answer set first and two features
chosen greedily. A rule explains
its neuron when R^2 >= 0.9 on those rows; the held-out R^2 on the exhaustive test set is recorded
beside it. The replacement MLP (each neuron's activation its rule's table value, through the model's
own W_out and b_out) is scored on the exhaustive test set in three variants: unexplained neurons
kept, mean-ablated, or on their rule too (the rules alone).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

MODELS = ("d16h1", "d32h1", "d32h2", "d16h1l2-any")


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from perm_circuits import load_pretrained
    from perm_circuits.analysis.hypothesis.spec import batch_tokens
    from perm_circuits.analysis.study.neuron_rules import (
        THRESHOLD, exhaustive_sets, fit_model_rules, held_out_r2, replacement_retention,
    )
    from perm_circuits.outputs import refuse_outputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/neuron_rules.csv")
    parser.add_argument("--retention", default="results/neuron_retention.csv")
    parser.add_argument("--force", action="store_true", help="overwrite existing tables")
    args = parser.parse_args(argv)
    outs = [Path(args.out), Path(args.retention)]
    if refuse_outputs(dict(zip(("--out", "--retention"), outs)), force=args.force):  # before any work
        return 2
    torch.set_num_threads(1)
    neurons, kept = [], []
    for name in MODELS:
        model = load_pretrained(name)
        start = time.perf_counter()
        rules = fit_model_rules(model, threshold=THRESHOLD)
        fit_s = time.perf_counter() - start
        sets = exhaustive_sets(model, "test")
        tested = held_out_r2(model, rules, torch.cat([batch_tokens(sets["elimination"]), batch_tokens(sets["recall"])]))
        frame = rules.to_dataframe()
        frame.insert(0, "model", name)
        frame.insert(4, "step", frame["position"] // 2 + 1)  # step k: query at 2(k - 1), its answer y_k at 2k - 1
        frame.insert(5, "token", ["query" if p % 2 == 0 else "y" for p in frame["position"]])
        frame["r2_test"] = [tested[(r.layer, r.neuron, r.position)] for r in frame.itertuples()]
        frame["threshold"] = THRESHOLD
        neurons.append(frame)
        for row in replacement_retention(model, rules, sets):
            kept.append({"model": name, **row, "threshold": THRESHOLD, "fit_seconds": round(fit_s, 1)})
        print(f"{name}: fitted in {fit_s:.1f} s, {int(frame.explained.sum())}/{len(frame)} rules explained", flush=True)
    table = pd.concat(neurons, ignore_index=True)
    retention = pd.DataFrame(kept)
    for path in outs:
        path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(outs[0], index=False, float_format="%.6g")
    retention.drop(columns="fit_seconds").to_csv(outs[1], index=False, float_format="%.6g")
    print(retention.pivot_table(index=["model", "metric"], columns="variant", values="retention").round(4).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
