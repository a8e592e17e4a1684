"""The study's training dynamics: retrain the shipped d32h2 recipe with a DynamicsRecorder.

    python scripts/study_dynamics.py            # train (about 5 minutes on one core), write the CSV and the docs section
    python scripts/study_dynamics.py --from-csv # only re-render docs/dynamics.md from results/study_dynamics.csv

The run is the shipped d32h2's own recipe (``src/perm_circuits/pretrained/d32h2/config.json``:
seed 0, repeat ratio 0.3, 100,000 samples per epoch, batch 128, Adam 1e-3) cut to its first
``--epochs`` epochs (default 6 of 50: recall forms at epoch 4).  Its per-epoch history is written
next to the shipped checkpoint's (``results/study_dynamics_epochs.csv``) so the page can say how
closely the run follows the shipped one.  Recording: 40 log-spaced steps plus every 250th step (to
resolve the recall transition), every signal group, and the LLC when devinterp is installed.
Writes ``results/study_dynamics.csv`` (tidy: step, signal, value) and the generated section of
``docs/dynamics.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from perm_circuits._util import atomic_write_text

from perm_circuits import TaskConfig, TrainConfig, load_checkpoint, train
from perm_circuits.dynamics import DynamicsRecorder
from perm_circuits.dynamics.study import (
    EPOCH_KEYS,
    STUDY_CSV,
    STUDY_EPOCHS_CSV,
    render_docs,
    study_dynamics,
    write_record_csv,
    read_record_csv,
)
from perm_circuits.models import PRETRAINED_DIR, ModelConfig, PRESETS
from perm_circuits.tasks.base import log_spaced_steps

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "dynamics.md"


def _llc_available() -> bool:
    try:
        from perm_circuits.dynamics.llc import require_devinterp

        require_devinterp()
        return True
    except ImportError:
        return False


def run(epochs: int, progress: bool) -> Path:
    shipped = load_checkpoint(PRETRAINED_DIR / "d32h2")
    recipe = shipped.metadata["train_config"]
    model_config = shipped.model_config
    assert model_config == ModelConfig.from_dict({**PRESETS["d32h2"].to_dict(), "seed": 0}), model_config
    task_config = shipped.task_config
    train_config = TrainConfig.from_dict({**recipe, "epochs": epochs})
    total = epochs * train_config.steps_per_epoch
    steps = sorted(set(log_spaced_steps(total, n=40)) | set(range(250, total + 1, 250)))
    llc = _llc_available()
    recorder = DynamicsRecorder(task_config, steps, llc=llc)
    start = time.perf_counter()
    result = train(model_config, task_config, train_config, step_callbacks=[recorder], progress=progress)
    seconds = time.perf_counter() - start
    rows = []
    for ours, theirs in zip(result.history.rows, shipped.metadata["history"]):
        row = {"epoch": ours["epoch"], "step": ours["epoch"] * train_config.steps_per_epoch}
        for key in EPOCH_KEYS:
            row[f"run_{key}"], row[f"shipped_{key}"] = ours[key], theirs[key]
        rows.append(row)
    atomic_write_text(ROOT / STUDY_EPOCHS_CSV, pd.DataFrame(rows).to_csv(index=False))
    print(f"trained {epochs} epochs ({total} steps, {len(steps)} recorded, LLC {'on' if llc else 'off'}) in {seconds:.0f} s")
    return write_record_csv(recorder.result(), ROOT / STUDY_CSV)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--from-csv", action="store_true", help="do not train; re-render the docs section from the CSV")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.from_csv:
        print(f"wrote {run(args.epochs, not args.quiet)}")
    answer = study_dynamics(read_record_csv(ROOT / STUDY_CSV), pd.read_csv(ROOT / STUDY_EPOCHS_CSV))
    print(answer.to_markdown())
    render_docs(DOCS, answer)
    print(f"updated {DOCS}")


if __name__ == "__main__":
    main()
