"""Write results/generalisation_sweep.csv from a generalisation sweep folder (the table
behind the results page's generalisation section).

    perm-circuits sweep sweeps/generalisation.toml --out runs/generalisation --keep-models
    python scripts/generalisation_table.py runs/generalisation [--out results/generalisation_sweep.csv]

The sweep rows measure recall per repeated x_k on a sample (``recall_n`` sequences per k).  This
script re-measures it EXHAUSTIVELY from each kept model (every test permutation x every order of
the queries, ``recall_generalisation(n=None)``), replacing the ``recall_gen_x{k}`` columns and
adding ``recall_gen_n`` (the sequences per k); adds every head's previous-token / induction
scores, the induction story of multi-layer models (scores + composition + path patching), and
the exhaustive recall / elimination with each head and MLP ablated under zero, mean and resample
ablation (``abl_<how>_<component>_recall`` / ``_elim``), and where each head attends from the
last position on repeated queries (``att_L{l}H{h}_{xk,yk,other_x,other_y}``).  The results page
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
    from perm_circuits.analysis.probes.induction import induction_scores

    scores = induction_scores(model)
    frame = scores.to_dataframe()
    out = {}
    for _, row in frame.iterrows():
        out[f"prev_{row['component']}"] = float(row["previous_token"])
        out[f"ind_{row['component']}"] = float(row["induction"])
    return out


def story_columns(model, task_config) -> dict[str, object]:
    """The induction story of a multi-layer model (scores + K-composition + path patching, with CI)."""
    from perm_circuits.analysis.circuits.induction_story import induction_story

    story = induction_story(model, task=task_config, n=2000, n_pair=2000, n_boot=200)
    return {
        "story_holds": bool(story.holds), "story_previous_head": story.previous_head,
        "story_induction_head": story.induction_head, "story_previous_token": story.previous_token,
        "story_induction": story.induction, "story_k_composition": story.k_composition,
        "story_q_composition": story.q_composition, "story_v_composition": story.v_composition,
        "story_k_baseline": story.k_baseline, "story_path_k": story.path_k,
        "story_path_k_ci_low": story.path_k_ci_low, "story_path_k_ci_high": story.path_k_ci_high,
        "story_path_q": story.path_q, "story_path_v": story.path_v, "story_missing": "; ".join(story.missing),
    }


ABLATION_HOWS = ("zero", "mean", "resample")


def ablation_columns(model, task_config) -> dict[str, float]:
    """Exhaustive recall (mean over x_k) and elimination with each head / MLP ablated, per mode:
    ``abl_<how>_<component>_recall`` and ``abl_<how>_<component>_elim`` (components L{l}H{h}, L{l}MLP)."""
    from perm_circuits.analysis import ablate_head, ablate_mlp

    config = model.perm_config
    out = {}
    for how in ABLATION_HOWS:
        for layer in range(config.n_layers):
            parts = [(f"L{layer}H{h}", ablate_head(model, layer, h, how)) for h in range(config.n_heads)]
            parts.append((f"L{layer}MLP", ablate_mlp(model, layer, how)))
            for name, hooks in parts:
                result = recall_generalisation(model, task=task_config, n=None, hooks=hooks)
                out[f"abl_{how}_{name}_recall"] = sum(result.recall) / len(result.recall)
                out[f"abl_{how}_{name}_elim"] = result.elimination
    return out


def attention_columns(model, task_config) -> dict[str, float]:
    """Where each head attends from the last position when it repeats ``x_k`` (exhaustive, mean over k):
    ``att_L{l}H{h}_xk`` (the matching earlier query), ``_yk`` (its answer), ``_other_x`` (every other
    earlier query, summed) and ``_other_y`` (every other answer, summed)."""
    from perm_circuits.hooks import run_capture
    from perm_circuits.tasks.permutation_data import exhaustive_batch

    config = model.perm_config
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(config.n_layers)]
    V = task_config.V
    sums: dict[str, float] = {}
    for source in range(V - 1):
        batch = exhaustive_batch(task_config, repeat_source=source)
        _, acts = run_capture(model, batch.tokens, names)
        x_pos, y_pos = list(range(0, 2 * V - 2, 2)), list(range(1, 2 * V - 2, 2))
        for layer, name in enumerate(names):
            last = acts[name][:, :, -1, :].mean(0)  # [head, key]
            for head in range(config.n_heads):
                row = last[head]
                parts = {"xk": float(row[x_pos[source]]), "yk": float(row[y_pos[source]]),
                         "other_x": float(sum(row[p] for p in x_pos if p != x_pos[source])),
                         "other_y": float(sum(row[p] for p in y_pos if p != y_pos[source]))}
                for part, value in parts.items():
                    key = f"att_L{layer}H{head}_{part}"
                    sums[key] = sums.get(key, 0.0) + value / (V - 1)
    return sums


def table(sweep_dir: Path, progress: bool = True) -> pd.DataFrame:
    frame = load_sweep(sweep_dir)
    frame["repeat_sources"] = frame["repeat_sources"].astype(str)
    rows = []
    if "recall_gen_n" in frame:
        frame = frame.drop(columns="recall_gen_n")
    for row in tqdm(frame.to_dict("records"), disable=not progress, desc="exhaustive recall"):
        out = {k: row.get(k) for k in KEEP}
        folder = sweep_dir / MODELS_DIR / str(row["run_id"])
        if row["status"] == "done":
            if not folder.is_dir():
                raise FileNotFoundError(f"run {row['run_id']} has no kept model at {folder}: run the sweep with --keep-models")
            checkpoint = load_checkpoint(folder)
            model = checkpoint.model
            general = recall_generalisation(model, task=checkpoint.task_config, n=None)
            out.update({f"recall_gen_x{k}": acc for k, acc in enumerate(general.recall, start=1)})
            out["recall_gen_n"] = general.n_per_source
            out["elimination_exhaustive"] = general.elimination
            out.update(induction_columns(model, checkpoint.task_config))
            out.update(ablation_columns(model, checkpoint.task_config))
            out.update(attention_columns(model, checkpoint.task_config))
            if checkpoint.model_config.n_layers >= 2:
                out.update(story_columns(model, checkpoint.task_config))
        rows.append(out)
    return pd.DataFrame(rows).sort_values(["n_layers", "d_model", "n_heads", "repeat_sources", "seed"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, nargs="+", help="sweep folder(s); rows are concatenated")
    parser.add_argument("--out", type=Path, default=Path("results/generalisation_sweep.csv"))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = pd.concat([table(d, progress=not args.quiet) for d in args.sweep_dir], ignore_index=True)
    result = result.sort_values(["n_layers", "d_model", "n_heads", "repeat_sources", "seed"]).reset_index(drop=True)
    result.to_csv(args.out, index=False)
    print(f"wrote {args.out}: {len(result)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
