"""Time edge-level circuit discovery (targets: EAP < 1 s, EAP-IG < 10 s, ACDC < 60 s, oracle < 60 s).

    python benchmarks/discovery.py [n_oracle] [n]

EAP (one forward and one backward), EAP-IG (10 steps) and ACDC (KL criterion, tau 0.01) run over
every edge (46) of a two-layer, two-head d_model-32 model on 2,000 permutation-task sequences,
resample ablation; the exhaustive oracle runs over every subset of the 13 edges of the shipped
one-layer two-head d32h2 on ``n_oracle`` sequences (default 500).  The shared set-up (the clean
and corrupted runs, the full and empty metrics, the check against the bridge) is timed apart:
each method reuses it via ``intervention=``.  One thread, as the tests run.
``n`` (default 2,000) shrinks those sequences for a quick check; the targets are for the defaults.
"""

from __future__ import annotations

import sys
import time

import torch

from perm_circuits.discovery import acdc, eap, eap_ig, exhaustive_oracle, prepare_edges
from perm_circuits.models import ModelConfig, build_model, load_pretrained
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.tasks import PermutationTask


def _time(label: str, target: float, run) -> None:
    start = time.perf_counter()
    result = run()
    took = time.perf_counter() - start
    extra = f"; {len(result.circuit)} edges, {result.n_forward} forward passes" if result is not None else ""
    print(f"{label:<44} {took:7.2f} s  (target < {target:g} s){extra}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    n_oracle = int(argv[0]) if len(argv) > 0 else 500
    n = int(argv[1]) if len(argv) > 1 else 2000
    task = PermutationTask(TaskConfig(repeat_ratio=0.3))
    batch = task.test_set(n)
    model = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2, seed=0)).eval()
    prepare_edges(model, batch.subset(torch.arange(min(50, n))), how="resample")  # warm-up
    start = time.perf_counter()
    ei = prepare_edges(model, batch, how="resample")
    print(f"{f'set-up (46 edges, {n} sequences)':<44} {time.perf_counter() - start:7.2f} s")
    _time(f"EAP (46 edges, {n} sequences)", 1, lambda: eap(intervention=ei, n_edges=10))
    _time("EAP-IG, 10 steps", 10, lambda: eap_ig(intervention=ei, steps=10, n_edges=10))
    _time("ACDC (kl, tau 0.01)", 60, lambda: acdc(intervention=ei))
    small = load_pretrained("d32h2")
    oracle_batch = task.test_set(n_oracle)
    start = time.perf_counter()
    ei_small = prepare_edges(small, oracle_batch, how="resample")
    print(f"{f'set-up (13 edges, {n_oracle} sequences)':<44} {time.perf_counter() - start:7.2f} s")
    _time(f"exhaustive oracle (8192 subsets, {n_oracle} seqs)", 60, lambda: exhaustive_oracle(intervention=ei_small))


if __name__ == "__main__":
    main()
