"""Time ``causal_scrub`` of a 3-claim hypothesis on d32h2, 2,000 rows, 200 bootstrap resamples (target < 10 s).

    python benchmarks/causal_scrub.py [repeats] [rows]

``rows`` (default 2,000) shrinks the batch for a quick check; the target is for 2,000.

The hypothesis is the "gate" story's three head/MLP claims at the last position (L0H0 <- x5
repeats x1; L0H1 <- used ys, y1; L0MLP <- answer), the batch 2,000 test sequences with repeats,
the metric the last-step accuracy. One measurement includes the per-claim breakdown (the full
result). The baseline timed beside it is one plain forward of the same batch, so the cost is also
given in forwards, which stays comparable on a loaded machine.
"""

from __future__ import annotations

import sys
import time

import torch

from perm_circuits import TaskConfig, load_pretrained
from perm_circuits.analysis.hypothesis import Hypothesis, causal_scrub
from perm_circuits.analysis.study.hypotheses import FEATURES
from perm_circuits.tasks.permutation_data import make_batch


def accuracy(logits, batch):
    return (logits[:, -1].argmax(-1) == batch.targets[:, -1]).float()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    repeats = int(argv[0]) if len(argv) > 0 else 3
    rows = int(argv[1]) if len(argv) > 1 else 2000
    model = load_pretrained("d32h2")
    batch = make_batch(TaskConfig(repeat_ratio=0.3), rows, split="test", seed=0)
    f = FEATURES
    hypothesis = Hypothesis.of({"L0H0@8": f["repeat1"], "L0H1@8": (f["used"], f["y1"]), "L0MLP@8": f["answer"]})
    causal_scrub(model, hypothesis, batch, accuracy, n_boot=200)  # warm-up
    for _ in range(repeats):
        with torch.no_grad():
            start = time.perf_counter()
            model(batch.tokens)
            forward = time.perf_counter() - start
        start = time.perf_counter()
        result = causal_scrub(model, hypothesis, batch, accuracy, n_boot=200)
        elapsed = time.perf_counter() - start
        print(f"causal_scrub {elapsed:.2f} s (target < 10 s) = {elapsed / forward:.0f} forwards; "
              f"recovery {result.recovery:.3f} [{result.ci_low:.3f}, {result.ci_high:.3f}], {result.forwards} tree forwards")


if __name__ == "__main__":
    main()
