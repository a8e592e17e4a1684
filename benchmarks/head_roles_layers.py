"""Time ``head_roles`` (all five ablation modes, circuits included) on 1- and 2-layer models, side by side.

    python benchmarks/head_roles_layers.py [d_model n_heads]

The baseline is the same call on the 1-layer model of the same width and heads (untrained,
``torch.manual_seed(0)``); the 2-layer cost is reported as a ratio to it.  A second layer doubles
every forward and the number of components to ablate, so about 4x is the natural ratio.  Times are
process CPU seconds (the machine is shared: wall-clock time says more about the other jobs), on
one thread.  Measured (2026-11-23, d32h2, busy 2-core CPU): 1 layer 4.2 s; 2 layers 23.1 s before
the multi-layer work, 16.6 s with the optimal-ablation search on distinct rows and x positions
only, 15.1 s with the circuit step's shared ablations (ratio about 3.6).
"""

from __future__ import annotations

import sys
import time

import torch

from perm_circuits import ModelConfig, build_model
from perm_circuits.analysis import head_roles


def cpu_seconds(n_layers: int, d_model: int, n_heads: int) -> float:
    torch.manual_seed(0)
    model = build_model(ModelConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers))
    start = time.process_time()
    head_roles(model)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    d_model, n_heads = (int(argv[0]), int(argv[1])) if len(argv) >= 2 else (32, 2)
    one = cpu_seconds(1, d_model, n_heads)
    two = cpu_seconds(2, d_model, n_heads)
    print(f"head_roles, d{d_model}h{n_heads}: 1 layer {one:.1f} s CPU, 2 layers {two:.1f} s CPU "
          f"(ratio {two / one:.2f})")


if __name__ == "__main__":
    main()
