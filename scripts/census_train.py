"""Train the census of mechanisms: >= 20 seeds per configuration at
the study's full recipe (50 x 100,000 samples, batch 128, lr 1e-3, repeat ratio 0.3), the full 50
epochs with no early stopping, keeping resumable checkpoints at log-spaced epochs.

    python scripts/census_train.py --out /path/census [--configs d16h1,d32h2] [--seeds 0-19] [--quiet]

Layout: ``OUT/<config>_s<seed>/checkpoints/epoch_NNNN`` (training checkpoints, loadable with
``perm_circuits.models.load_checkpoint``) for NNNN in :data:`KEEP` and ``OUT/<config>_s<seed>/done.json``
(final metrics, history, wall time) once the run is complete.  Resumable at any moment: a killed run
resumes from its newest checkpoint (bit for bit the uninterrupted run), finished runs are skipped.
Runs are interleaved over configurations so that a partial census covers every configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

KEEP = (1, 2, 4, 8, 16, 32, 50)
"""The epochs whose checkpoints are kept (the newest is kept too, to resume from)."""


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(part) for part in text.split(",")]


def _epochs(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name.split("_")[1]) for p in folder.iterdir() if p.name.startswith("epoch_") and p.is_dir())


def _claim(lock: Path) -> bool:
    """Own a run folder: a lock file with this pid; a lock whose pid is gone (a killed driver) is taken over."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text() or 0)
                os.kill(pid, 0)
                return pid == os.getpid()
            except (ValueError, ProcessLookupError):
                lock.unlink(missing_ok=True)  # stale: its owner died
                continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def run(config: str, seed: int, out: Path, progress: bool, epochs: int = 50, samples: int = 100_000) -> None:
    import torch

    from perm_circuits import TaskConfig, TrainConfig, train
    from perm_circuits.models import CheckpointError, resolve_config

    folder = out / f"{config}_s{seed}"
    done = folder / "done.json"
    if done.exists():
        return
    ckpts = folder / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)
    if not _claim(folder / "owner.lock"):
        print(f"{folder.name}: another process trains it; skipped", flush=True)
        return
    recipe = TrainConfig(epochs=epochs, samples_per_epoch=samples, seed=seed, checkpoint_every=1, checkpoint_dir=str(ckpts))

    def prune(state) -> None:  # keep KEEP and the newest
        for epoch in _epochs(ckpts):
            if epoch not in KEEP and epoch < state.epoch:
                shutil.rmtree(ckpts / f"epoch_{epoch:04d}", ignore_errors=True)

    torch.manual_seed(seed)
    start = time.time()
    result = None
    for epoch in reversed(_epochs(ckpts)):
        try:
            result = train(None, None, recipe, resume_from=ckpts / f"epoch_{epoch:04d}", callbacks=[prune],
                           progress=progress)
            break
        except CheckpointError as error:  # a checkpoint cut by a kill: drop it, try the one before
            print(f"{folder.name}: epoch {epoch} unreadable ({error}); dropped", file=sys.stderr)
            shutil.rmtree(ckpts / f"epoch_{epoch:04d}", ignore_errors=True)
    if result is None:
        model_config = resolve_config(config, seed=seed)
        result = train(model_config, TaskConfig(repeat_ratio=0.3), recipe, callbacks=[prune], progress=progress)
    record = {"config": config, "seed": seed, "epochs_run": result.epochs_run, "seconds_this_process": time.time() - start,
              "metrics": result.evaluation.summary(), "history": list(result.history.rows), "kept_epochs": _epochs(ckpts)}
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float))
    os.replace(tmp, done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--configs", default="d16h1,d32h2")
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--epochs", type=int, default=50, help="the study: 50 (smaller only to smoke-test)")
    parser.add_argument("--samples", type=int, default=100_000, help="per epoch; the study: 100000")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    configs, seeds = args.configs.split(","), _seeds(args.seeds)
    for seed in seeds:
        for config in configs:
            t0 = time.time()
            run(config, seed, args.out, progress=not args.quiet, epochs=args.epochs, samples=args.samples)
            print(f"{config} seed {seed}: {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
