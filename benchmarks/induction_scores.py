"""Time the multi-layer circuit tools on a 2-layer d32 model over 2,000 sequences (target < 10 s).

    python benchmarks/induction_scores.py [repeats] [n]

``n`` (default 2,000) shrinks the sequences and pairs for a quick check; the target is for 2,000.

One measurement = ``induction_scores`` (one forward over ``induction_test_set(5, 2000)``),
Q/K/V ``composition_scores`` (weights only, with their 100-sample random baselines) and the full
``path_patching_table`` (2 cached forwards + one patched forward per edge: 2 senders x 2
receivers x q/k/v = 12 on d32h2l2, 1,000 bootstrap resamples) on 2,000 ``"swap"`` induction
pairs.  The model is a freshly initialised ``ModelConfig(d_model=32, n_heads=2, n_layers=2)``
with LayerNorm (seed 0): every edge carries something, so no forward is skipped (the worst case;
the hand-built circuit skips 11 of 12).  The baseline, timed side by side, is the same number of
forwards (15) in plain PyTorch (``models.fast_forward``, what training uses), so the cost is
also given as a ratio that stays comparable on a loaded machine.
"""

from __future__ import annotations

import sys
import time

import torch

from perm_circuits import ModelConfig, build_model
from perm_circuits.models import fast_forward
from perm_circuits.analysis import (
    composition_scores,
    induction_scores,
    induction_test_set,
    path_patching_table,
)

N = 2000
FORWARDS = 1 + 2 + 12  # scores; clean + corrupted caches; one per edge


def measure(model, test_set, n: int = N) -> float:
    start = time.perf_counter()
    induction_scores(model, test_set)
    for kind in "QKV":
        composition_scores(model, kind)
    table = path_patching_table(model, n=n, seed=0, n_boot=1000)
    elapsed = time.perf_counter() - start
    assert len(table) == 12
    return elapsed


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    repeats = int(argv[0]) if len(argv) > 0 else 3
    n = int(argv[1]) if len(argv) > 1 else N
    model = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2))
    test_set = induction_test_set(5, n=n, seed=1234)
    measure(model, test_set, n)  # warm-up
    weights = model.state_dict(keep_vars=True)
    for _ in range(repeats):
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(FORWARDS):
                fast_forward(model, test_set.tokens, weights)
            baseline = time.perf_counter() - start
        elapsed = measure(model, test_set, n)
        print(
            f"induction scores + composition + path_patching_table (12 edges), d32h2l2, n={n}: {elapsed:.2f} s "
            f"(target < 10 s); {FORWARDS} plain-PyTorch forwards: {baseline:.2f} s; ratio {elapsed / baseline:.1f}"
        )


if __name__ == "__main__":
    main()
