"""Cost of recording the training dynamics: training with a DynamicsRecorder at its default
cadence vs the same training without, side by side in one process.

    python benchmarks/dynamics.py [--epochs 2] [--rounds 2] [--llc]

Both arms train the study's d32h2 recipe (seed 0, repeat ratio 0.3, 100,000 samples per epoch,
batch 128, Adam 1e-3, the 5,000-sequence per-epoch evaluation) for ``--epochs`` epochs; the
recorded arm adds ``DynamicsRecorder(task, default_steps(total))`` (DEFAULT_POINTS log-spaced
steps, every signal group, LLC off).  Arms alternate for ``--rounds`` rounds; the median times and
their ratio are printed (target: recorded / plain <= 1.25), in process CPU time (the steadier
measure on a shared machine; one torch thread) and in wall time.  The recording cost is a fixed number
of measurements, so the ratio falls as runs get longer: the full 50-epoch recipe is 25x longer
than the default 2 epochs here.  ``--llc`` also times one run with the LLC recorded at every step
of the cadence (devinterp's SGLD, default LLCConfig), reported separately.  The script also
checks that both arms end with bit-identical weights.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from perm_circuits import TaskConfig, TrainConfig, train
from perm_circuits.dynamics import DEFAULT_POINTS, DynamicsRecorder, default_steps


def _time(task, config, llc: bool | None):
    recorders = []
    if llc is not None:
        recorders.append(DynamicsRecorder(task, default_steps(config.epochs * config.steps_per_epoch), llc=llc))
    start, cpu = time.perf_counter(), time.process_time()
    result = train("d32h2", task, config, step_callbacks=recorders, progress=False)
    return (time.perf_counter() - start, time.process_time() - cpu), result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--llc", action="store_true", help="also time a run with the LLC on")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    task = TaskConfig(repeat_ratio=0.3)
    config = TrainConfig(epochs=args.epochs)
    total = args.epochs * config.steps_per_epoch
    print(f"d32h2, {args.epochs} epochs = {total} steps; recorder: {len(default_steps(total))} steps "
          f"(DEFAULT_POINTS={DEFAULT_POINTS}), every signal group, LLC off")
    _time(task, TrainConfig(epochs=1, samples_per_epoch=1280, test_size=200), llc=False)  # warm-up
    plain, recorded = [], []
    for _ in range(args.rounds):
        seconds, a = _time(task, config, None)
        plain.append(seconds)
        seconds, b = _time(task, config, False)
        recorded.append(seconds)
        same = all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
        assert same, "recording changed the trained weights"
    # on a shared machine the process CPU time (one thread) is the steadier measure; wall time is shown too
    for index, kind in ((1, "CPU"), (0, "wall")):
        p = statistics.median(s[index] for s in plain)
        r = statistics.median(s[index] for s in recorded)
        print(f"{kind:4s} plain {p:6.1f} s, recorded {r:6.1f} s (runs: {', '.join(f'{s[index]:.1f}' for s in plain)} | "
              f"{', '.join(f'{s[index]:.1f}' for s in recorded)}): ratio recorded / plain = {r / p:.3f} (target <= 1.25)")
    print("weights bit-identical with and without the recorder")
    if args.llc:
        seconds, _ = _time(task, config, True)
        p = statistics.median(s[1] for s in plain)
        print(f"recorded + LLC: CPU {seconds[1]:.1f} s, ratio {seconds[1] / p:.3f} vs plain (the LLC is opt-in)")


if __name__ == "__main__":
    main()
