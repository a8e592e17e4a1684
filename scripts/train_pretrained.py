"""Regenerate the shipped pretrained models with the project's own training command.

    python scripts/train_pretrained.py [d32h2 d16h1 d32h1]
    python scripts/train_pretrained.py d16h1l2-any      # the general-recall model

Each model is trained by ``perm-circuits train`` on the study's full recipe (50 epochs x 100,000
samples, batch 128, Adam 1e-3, repeat_ratio 0.3) with seed 0 — the same seed for every preset, not
one picked to match the study.  The command, seed and final metrics land in the model's
config.json next to its weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

from perm_circuits.cli import main

SEED = 0
OUT = Path(__file__).resolve().parent.parent / "src" / "perm_circuits" / "pretrained"


def command(preset: str) -> list[str]:
    out = OUT / preset
    return [
        "train", "--preset", preset, "--seed", str(SEED), "--repeat-ratio", "0.3",
        "--epochs", "50", "--samples", "100000", "--batch-size", "128",
        "--out", str(out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out), "--quiet",
        "--force",  # regenerating replaces the shipped folder on purpose
    ]


ANY_ARGS = {  # the smallest configuration whose recall generalises to every repeated x_k (sweeps/generalisation.toml)
    "d16h1l2-any": ["--d-model", "16", "--heads", "1", "--layers", "2", "--repeat-sources", "1,2,3,4",
                    "--epochs", "15", "--samples", "40000", "--early-stop", "3", "--record-dynamics"],
}


def command_any(name: str) -> list[str]:
    """The -any model's command: the generalisation sweep's recipe for its configuration, seed 0."""
    out = OUT / name
    return [
        "train", *ANY_ARGS[name], "--seed", str(SEED), "--repeat-ratio", "0.3", "--batch-size", "128",
        "--out", str(out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out), "--quiet", "--force",
    ]


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1] in ANY_ARGS:
        sys.exit(main(command_any(sys.argv[1])))
    presets = sys.argv[1:] or ["d32h2", "d16h1", "d32h1"]
    if len(presets) == 1:
        sys.exit(main(command(presets[0])))
    # one single-threaded process per preset, in parallel
    import subprocess

    procs = [subprocess.Popen([sys.executable, __file__, preset]) for preset in presets]
    sys.exit(max(p.wait() for p in procs))
