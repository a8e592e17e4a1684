"""The figures of the seed-paper pages (``docs/birth.md``, ``docs/forner.md``, ``docs/factual.md``),
rendered as static SVG from their committed result tables.

``scripts/build_results.py`` writes them into ``docs/figures/`` with the other docs figures (and
``--check`` fails when one is out of date); nothing is trained or measured here, every point is a
value of a committed table:

* ``birth_probes.svg`` / ``birth_positions.svg`` (``results/birth_quick/numbers.json``): the
  memory-recall probes R(W, W*) of eq. 9 and the in-context accuracy of the simplified model over
  training, and W_K1's probe on the early vs the late half of the positions, one line per seed
  (Bietti, Cabannes, Bouchacourt, Jegou and Bottou, *Birth of a Transformer: A Memory Viewpoint*,
  NeurIPS 2023, Fig. 3);
* ``forner_quick.svg`` / ``forner_full.svg`` (``results/forner_{quick,full}_ode.csv``): the
  attention order parameter A and the rollout accuracy against alpha, the simulation's seed mean
  beside the mean-field ODE (Forner et al. 2026, eq. 15 and eq. 18);
* ``factual_capacity.svg`` (``results/factual_full_capacity.csv``): facts stored at 99% against
  trainable parameters on log-log axes, per seed, with the least-squares log-log fit and a slope-1
  line (Nichani, Lee and Bietti, *Understanding Factual Recall in Transformers via Associative
  Memories*, 2024, figure 3 left); ``factual_trajectory.svg``
  (``results/factual_full_trajectory.csv``): the hallucination experiment's losses over training.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from perm_circuits.pages.figures import FIGURES_DIR
from perm_circuits.systems.factual import log_log_fit
from perm_circuits.views.svg_charts import PALETTE, Series, svg_line_chart

__all__ = [
    "BIRTH_NUMBERS",
    "BIRTH_PROBES",
    "FACTUAL_CAPACITY",
    "FACTUAL_TRAJECTORY",
    "FORNER_KINDS",
    "birth_positions_svg",
    "birth_probes_svg",
    "factual_capacity_svg",
    "factual_trajectory_svg",
    "forner_svg",
    "paper_figures",
]

BIRTH_NUMBERS = Path("results/birth_quick/numbers.json")
FACTUAL_CAPACITY = Path("results/factual_full_capacity.csv")
FACTUAL_TRAJECTORY = Path("results/factual_full_trajectory.csv")
FORNER_KINDS = ("quick", "full")
BIRTH_PROBES: tuple[str, ...] = ("W_O2", "W_K2", "W_K1", "in_context_acc")
"""The quantities of ``birth_probes.svg`` (the three trained matrices' probes and the accuracy, dashed)."""
_ZERO_STEP = 0.5  # where step 0 is drawn on the log step axis


def _seed_series(numbers: Mapping[str, Any], names: tuple[str, ...], dashed: tuple[str, ...] = ()) -> list[Series]:
    seeds = numbers.get("seeds")
    if not seeds:
        raise ValueError("the birth numbers table has no 'seeds' entries")
    series = []
    for index, name in enumerate(names):
        for seed in seeds:
            probes = seed["probes"]
            if name not in probes[0]:
                raise KeyError(f"the birth numbers table has no probe {name!r} (has {sorted(probes[0])})")
            series.append(Series(f"{name}, seed {seed['seed']}", [max(float(p["step"]), _ZERO_STEP) for p in probes],
                                 [float(p[name]) for p in probes], color=PALETTE[index % len(PALETTE)],
                                 dash=name in dashed))
    return series


def birth_probes_svg(numbers: Mapping[str, Any]) -> str:
    """The eq. 9 probes of W_O2, W_K2 and W_K1 and the simplified model's in-context accuracy over SGD
    steps, one line per seed (``numbers``: a birth run's ``numbers.json``)."""
    return svg_line_chart(_seed_series(numbers, BIRTH_PROBES, dashed=("in_context_acc",)),
                          title="Birth (--quick): memory-recall probes (eq. 9) and in-context accuracy",
                          x_label="SGD step (log; step 0 drawn at 0.5)", y_label="probe R / accuracy",
                          x_log=True, y_range=(0.0, 1.0), width=820, height=420)


def birth_positions_svg(numbers: Mapping[str, Any]) -> str:
    """W_K1's probe on the first vs the second half of the query positions over SGD steps, per seed."""
    return svg_line_chart(_seed_series(numbers, ("W_K1_early", "W_K1_late")),
                          title="Birth (--quick): W_K1 stores early positions first",
                          x_label="SGD step (log; step 0 drawn at 0.5)", y_label="W_K1 probe R",
                          x_log=True, y_range=(0.0, 1.0), width=820)


def forner_svg(ode: pd.DataFrame, n_seeds: int, kind: str) -> str:
    """A and the rollout accuracy against alpha: the simulation's mean over ``n_seeds`` seeds (solid)
    and the mean-field ODE (dashed), from a committed ``forner_<kind>_ode.csv``."""
    missing = {"alpha", "A_sim", "A_ode", "rollout", "rollout_ode"} - set(ode.columns)
    if missing:
        raise ValueError(f"the Forner ODE table lacks columns {sorted(missing)}")
    if kind not in FORNER_KINDS:
        raise ValueError(f"kind must be one of {FORNER_KINDS}, got {kind!r}")
    alpha = ode["alpha"].astype(float).tolist()
    series = []
    for index, (label, sim, theory) in enumerate((("A", "A_sim", "A_ode"), ("rollout acc.", "rollout", "rollout_ode"))):
        color = PALETTE[index]
        series.append(Series(f"{label}: simulation ({n_seeds} seed{'s' if n_seeds > 1 else ''})", alpha,
                             ode[sim].astype(float).tolist(), color=color))
        series.append(Series(f"{label}: ODE (eq. 15)", alpha, ode[theory].astype(float).tolist(), color=color, dash=True))
    return svg_line_chart(series, title=f"Forner ({kind} run): attention order parameter A and rollout accuracy",
                          x_label="alpha = steps / (d_g N)", y_label="A / rollout accuracy",
                          y_range=(0.0, 1.0), width=820)


def factual_capacity_svg(capacity: pd.DataFrame) -> str:
    """Facts stored at 99% against trainable parameters (log-log), one line per seed, with the
    least-squares log-log fit over every row (dashed, its slope in the legend) and a slope-1 line
    through the same centre (the paper's linear scaling)."""
    missing = {"seed", "params", "facts_stored"} - set(capacity.columns)
    if missing:
        raise ValueError(f"the factual capacity table lacks columns {sorted(missing)}")
    slope, intercept = log_log_fit(capacity["params"], capacity["facts_stored"])
    series = []
    for index, (seed, rows) in enumerate(capacity.sort_values(["seed", "params"]).groupby("seed", sort=True)):
        series.append(Series(f"seed {int(seed)}", rows["params"].astype(float).tolist(),
                             rows["facts_stored"].astype(float).tolist(), color=PALETTE[index % len(PALETTE)]))
    ends = [float(capacity["params"].min()), float(capacity["params"].max())]
    centre_x = sum(math.log(v) for v in capacity["params"]) / len(capacity)
    centre_y = intercept + slope * centre_x
    series.append(Series(f"fit: slope {slope:.2f}", ends, [math.exp(intercept + slope * math.log(v)) for v in ends],
                         color="#212529", dash=True))
    series.append(Series("slope 1 (paper)", ends, [math.exp(centre_y + math.log(v) - centre_x) for v in ends],
                         color="#adb5bd", dash=True))
    return svg_line_chart(series, title="Factual recall (full run): facts stored at 99% vs trainable parameters",
                          x_label="trainable parameters (log)", y_label="facts stored (log)",
                          x_log=True, y_log=True, width=820)


def factual_trajectory_svg(trajectory: pd.DataFrame) -> str:
    """The hallucination experiment's loss, relation-only loss and subject-only loss over training steps."""
    columns = ("loss", "relation_only_loss", "subject_only_loss")
    missing = {"step", *columns} - set(trajectory.columns)
    if missing:
        raise ValueError(f"the factual trajectory table lacks columns {sorted(missing)}")
    steps = trajectory["step"].astype(float).tolist()
    series = [Series(name.replace("_", " "), steps, trajectory[name].astype(float).tolist()) for name in columns]
    return svg_line_chart(series, title="Factual recall (full run): losses of the hallucination experiment",
                          x_label="training step (log)", y_label="loss (nats)", x_log=True, width=820)


def paper_figures(root: str | os.PathLike) -> dict[Path, str]:
    """The seed-paper pages' figures as ``{path under the repository: SVG text}``, from the committed
    tables under ``root`` (a table that is absent gives no figure)."""
    root = Path(root)
    out: dict[Path, str] = {}
    if (root / BIRTH_NUMBERS).is_file():
        numbers = json.loads((root / BIRTH_NUMBERS).read_text(encoding="utf-8"))
        out[FIGURES_DIR / "birth_probes.svg"] = birth_probes_svg(numbers)
        out[FIGURES_DIR / "birth_positions.svg"] = birth_positions_svg(numbers)
    for kind in FORNER_KINDS:
        log, ode = root / f"results/forner_{kind}.csv", root / f"results/forner_{kind}_ode.csv"
        if log.is_file() and ode.is_file():
            out[FIGURES_DIR / f"forner_{kind}.svg"] = forner_svg(pd.read_csv(ode), int(pd.read_csv(log)["seed"].nunique()), kind)
    if (root / FACTUAL_CAPACITY).is_file():
        out[FIGURES_DIR / "factual_capacity.svg"] = factual_capacity_svg(pd.read_csv(root / FACTUAL_CAPACITY))
    if (root / FACTUAL_TRAJECTORY).is_file():
        out[FIGURES_DIR / "factual_trajectory.svg"] = factual_trajectory_svg(pd.read_csv(root / FACTUAL_TRAJECTORY))
    return out
