"""Stacked training: K members of one architecture at once against K single runs one after another.

    python benchmarks/stacked_training.py [--k 5 10 20] [--threads 1 2] [--samples 25600]
                                          [--rounds 3] [--preset d32h2] [--device cpu] [--no-exact]

Both sides train the same K models on the same samples (K seeds, one epoch of ``--samples``
samples each, batch 128, the fixed test set cut to ``--test-size`` so that training dominates):

* stacked: one :func:`perm_circuits.stacked.train_stacked` call over the K seeds;
* singles: :func:`perm_circuits.train.train` once per seed, one after another (on a device other
  than the CPU, where ``train`` may not take a device, one-member ``train_stacked`` calls).

Rounds are interleaved (stacked, singles, one member alone, stacked, ...) and the median is reported, so a load
change on a shared machine hits both sides alike.  Printed per thread count and K: samples/s of
each side (K x samples / seconds), the ratio stacked/singles, and the stacked rate over one member
alone (the GPU target: K = 100 at >= 20x).  Model building (a TransformerBridge per member) and
the per-epoch evaluation are inside both timings, as in a sweep.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch

from perm_circuits import TaskConfig, TrainConfig, train
from perm_circuits.models import PRESETS, resolve_config
from perm_circuits.stacked import train_stacked


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _singles(preset: str, task: TaskConfig, recipe: TrainConfig, k: int, device: torch.device, exact: bool | None) -> None:
    device_kw = "device" in inspect.signature(train).parameters
    for seed in range(k):
        config = TrainConfig.from_dict({**recipe.to_dict(), "seed": seed})
        if device.type == "cpu":
            train(resolve_config(preset, seed), task, config, progress=False)
        elif device_kw:
            train(resolve_config(preset, seed), task, config, device=device, progress=False)
        else:
            train_stacked([seed], task, recipe, architecture=preset, device=device, exact=exact, progress=False)


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def measure(preset: str, ks: list[int], samples: int, rounds: int, test_size: int, device: torch.device,
            exact: bool | None) -> list[dict[str, float]]:
    task = TaskConfig(repeat_ratio=0.3)
    recipe = TrainConfig(epochs=1, samples_per_epoch=samples, test_size=test_size)
    warm = TrainConfig(epochs=1, samples_per_epoch=1280, test_size=test_size)
    train_stacked([0, 1], task, warm, architecture=preset, device=device, exact=exact, progress=False)  # imports, kernels
    _singles(preset, task, warm, 1, device, exact)
    out = []
    for k in ks:
        stacked, singles, one = [], [], []
        for _ in range(rounds):
            stacked.append(_timed(lambda: train_stacked(list(range(k)), task, recipe, architecture=preset, device=device,
                                                        exact=exact, progress=False), device))
            singles.append(_timed(lambda: _singles(preset, task, recipe, k, device, exact), device))
            one.append(_timed(lambda: train_stacked([0], task, recipe, architecture=preset, device=device, exact=exact,
                                                    progress=False), device))
        s_rate = k * samples / statistics.median(stacked)
        k_rate = k * samples / statistics.median(singles)
        one_rate = samples / statistics.median(one)
        out.append({"k": k, "stacked": s_rate, "singles": k_rate, "ratio": s_rate / k_rate, "over_one": s_rate / one_rate})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="d32h2", choices=sorted(PRESETS))
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--samples", type=int, default=25_600, help="samples per member (one epoch)")
    parser.add_argument("--test-size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-exact", action="store_true", help="the faster, not bit-for-bit stacked arithmetic")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    exact = False if args.no_exact else None
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"{args.preset}, {args.samples} samples per member, device {device}, {threads} thread(s), "
              f"median of {args.rounds} interleaved rounds:")
        for row in measure(args.preset, args.k, args.samples, args.rounds, args.test_size, device, exact):
            print(f"  K={row['k']:>3}: stacked {row['stacked']:>9.0f} samples/s, K singles {row['singles']:>9.0f} samples/s, "
                  f"ratio {row['ratio']:.2f}x; stacked over one member alone {row['over_one']:.1f}x")


if __name__ == "__main__":
    main()
