"""Write results/generalisation_sweep.csv from a generalisation sweep folder (issue 9, item 5).

    perm-circuits sweep sweeps/generalisation.toml --out runs/generalisation --keep-models
    python scripts/generalisation_table.py runs/generalisation [--out results/generalisation_sweep.csv]

The sweep rows measure recall per repeated x_k on a sample (``recall_n`` sequences per k).  This
script re-measures it EXHAUSTIVELY from each kept model (every test permutation x every order of
the queries, ``recall_generalisation(n=None)``), replacing the ``recall_gen_x{k}`` columns and
adding ``recall_gen_n`` (the sequences per k), and adds the induction-circuit columns for
multi-layer models (previous-token / induction scores of every head).  The results page
(``python scripts/build_results.py``) renders its generalisation section from the CSV.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from perm_circuits import load_checkpoint, recall_generalisation
from perm_circuits.sweep import load_sweep
from perm_circuits.sweep.store import MODELS_DIR

KEEP = ("run_id", "status", "n_layers", "d_model", "n_heads", "d_head", "d_mlp", "repeat_sources", "seed", "V",
        "repeat_ratio", "epochs", "samples", "batch_size", "lr", "early_stop", "epochs_run", "test_loss",
        "elimination_accuracy", "recall_accuracy", "epoch_recall_99", "epoch_elimination_99")


def induction_columns(model, task_config) -> dict[str, float]:
    """Previous-token and induction scores of every head (``prev_L{l}H{h}``, ``ind_L{l}H{h}``)."""
    from perm_circuits.analysis.induction import induction_scores

    scores = induction_scores(model)
    frame = scores.to_dataframe()
    out = {}
    for _, row in frame.iterrows():
        out[f"prev_{row['component']}"] = float(row["previous_token"])
        out[f"ind_{row['component']}"] = float(row["induction"])
    return out


def table(sweep_dir: Path, progress: bool = True) -> pd.DataFrame:
    frame = load_sweep(sweep_dir)
    frame["repeat_sources"] = frame["repeat_sources"].astype(str)
    rows = []
    for row in tqdm(frame.to_dict("records"), disable=not progress, desc="exhaustive recall"):
        out = {k: row.get(k) for k in KEEP}
        folder = sweep_dir / MODELS_DIR / str(row["run_id"])
        if row["status"] == "done":
            if not folder.is_dir():
                raise FileNotFoundError(f"run {row['run_id']} has no kept model at {folder}: run the sweep with --keep-models")
            checkpoint = load_checkpoint(folder)
            model = checkpoint.model
            general = recall_generalisation(model, task_config=checkpoint.task_config, n=None)
            out.update({f"recall_gen_x{k}": acc for k, acc in enumerate(general.recall, start=1)})
            out["recall_gen_n"] = general.n_per_source
            out["elimination_exhaustive"] = general.elimination
            out.update(induction_columns(model, checkpoint.task_config))
        rows.append(out)
    return pd.DataFrame(rows).sort_values(["n_layers", "d_model", "n_heads", "repeat_sources", "seed"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/generalisation_sweep.csv"))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = table(args.sweep_dir, progress=not args.quiet)
    result.to_csv(args.out, index=False)
    print(f"wrote {args.out}: {len(result)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
