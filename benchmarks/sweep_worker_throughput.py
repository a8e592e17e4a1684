"""A sweep worker's training throughput against the single-model step rate, side by side in one process.

    PYTHONPATH=src python benchmarks/sweep_worker_throughput.py [--preset d32h2] [--epochs 2] [--samples 100000]

Target: a worker's training throughput (samples per second of training, analyses excluded) is at
least 0.8x the step rate of ``benchmarks/train_throughput.py``'s project pipeline (one thread, as a
worker runs).  The row's time is split into where it goes:

* ``steps``:      the training steps themselves (batch drawing, forward, backward, Adam);
* ``epoch eval``: the per-epoch evaluation on the fixed test set (the history the row keeps);
* ``start``:      building the model, the test set and its posteriors, once per run;
* ``analyses``:   the row's analyses after training (recall generalisation, head roles in every mode).

Both pipelines are timed interleaved over ``--rounds`` rounds (median).  The machine's load average
is printed: other processes on the cores distort the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_throughput import pipelines  # noqa: E402  (the single-model step, as that benchmark times it)

from perm_circuits import TaskConfig, TrainConfig, train  # noqa: E402
from perm_circuits.sweep.run import analysis_columns  # noqa: E402
from perm_circuits.train import TrainResult  # noqa: E402


def worker_round(preset: str, task: TaskConfig, config: TrainConfig) -> tuple[float, TrainResult]:
    """One sweep row's training as a worker runs it (``train`` with its per-epoch evaluation): ``(seconds, result)``."""
    start = time.perf_counter()
    result = train(preset, task, config, progress=False)
    return time.perf_counter() - start, result


def eval_seconds(result: TrainResult, task: TaskConfig, repeats: int = 3) -> float:
    """Seconds of one per-epoch evaluation (the test set through the model, scored)."""
    from perm_circuits import evaluate

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        evaluate(result.model, task=task)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="d32h2")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a sweep worker runs one torch thread
    print(f"load average before: {os.getloadavg()[0]:.2f}")

    task = TaskConfig(repeat_ratio=0.3)
    config = TrainConfig(epochs=args.epochs, samples_per_epoch=args.samples, batch_size=args.batch_size)
    step = pipelines(args.preset, args.batch_size, task)["project"]
    steps = args.epochs * -(-args.samples // args.batch_size)
    for _ in range(20):
        step()  # warm-up
    step_times, worker_times = [], []
    result = None
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        step_times.append(time.perf_counter() - start)
        seconds, result = worker_round(args.preset, task, config)
        worker_times.append(seconds)
    samples = steps * args.batch_size
    step_rate = samples / statistics.median(step_times)
    worker_rate = samples / statistics.median(worker_times)
    evaluation = eval_seconds(result, task)
    start = time.perf_counter()
    analysis_columns(result.model.eval(), task, {"n": 2000, "n_pair": 1000, "n_boot": 200, "recall_n": 2000})
    analyses = time.perf_counter() - start

    worker = statistics.median(worker_times)
    in_steps = samples / step_rate
    epoch_eval = evaluation * args.epochs
    print(f"{args.preset}, {args.epochs} epochs x {args.samples} samples, batch {args.batch_size}, 1 thread:")
    print(f"  single-model step rate (train_throughput project): {step_rate:>9.0f} samples/s")
    print(f"  sweep worker training (train(), per-epoch eval):   {worker_rate:>9.0f} samples/s")
    print(f"  worker / step rate: {worker_rate / step_rate:.2f}  (target >= 0.8)")
    print("  where a row's training time goes:")
    print(f"    steps       {in_steps:7.2f} s  ({in_steps / worker:5.1%})")
    print(f"    epoch eval  {epoch_eval:7.2f} s  ({epoch_eval / worker:5.1%})  one evaluation: {evaluation:.3f} s")
    rest = worker - in_steps - epoch_eval
    print(f"    start, rest {rest:7.2f} s  ({rest / worker:5.1%})")
    print(f"  analyses after training (not in the ratio): {analyses:.1f} s per row")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
