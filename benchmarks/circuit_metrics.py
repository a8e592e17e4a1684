"""Time circuit_metrics on d32h2: a 6-node circuit, all 64 subsets, 2,000 sequences (target < 10 s).

    python benchmarks/circuit_metrics.py [repeats] [n]

``n`` (default 2,000) shrinks the test set for a quick check; the target is for 2,000.

The circuit is every component of d32h2 (L0H0, L0H1, L0MLP) at the last position and at the y
positions, so the x positions before the last stay outside it and ``C \\ K`` and ``M \\ K``
are different runs for every K: 64 + 64 runs (one is shared: none), one forward each.  The
baseline, timed side by side, is the same number of plain bridge forwards of the same 2,000
sequences without hooks, so the cost is also given in "plain forwards" (the floor for
one-forward-per-run), which stays comparable on a loaded machine.
"""

from __future__ import annotations

import sys
import time

import torch

from perm_circuits import load_pretrained, make_test_set
from perm_circuits.analysis import circuit_metrics

CIRCUIT = ["L0H0@last", "L0H1@last", "L0MLP@last", "L0H0@answer", "L0H1@answer", "L0MLP@answer"]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    repeats = int(argv[0]) if len(argv) > 0 else 3
    n = int(argv[1]) if len(argv) > 1 else 2000
    model = load_pretrained("d32h2")
    test_set = make_test_set(model.task_config, n=n, seed=1234)
    circuit_metrics(model, CIRCUIT, test_set, n_subsets=8, max_exhaustive=0)  # warm-up
    runs = 2 * 2 ** len(CIRCUIT) - 1
    for _ in range(repeats):
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(runs):
                model(test_set.tokens)
            baseline = time.perf_counter() - start
        start = time.perf_counter()
        metrics = circuit_metrics(model, CIRCUIT, test_set)
        elapsed = time.perf_counter() - start
        assert metrics.completeness_method == "exhaustive" and metrics.n_subsets_checked == 64
        print(
            f"circuit_metrics d32h2, 6 nodes, 64 subsets, n={n}: {elapsed:.2f} s "
            f"(target < 10 s); {runs} plain forwards: {baseline:.2f} s; ratio {elapsed / baseline:.2f}"
        )


if __name__ == "__main__":
    main()
