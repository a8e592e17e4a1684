"""Birth of a Transformer: A Memory Viewpoint (Bietti et al. 2023), reproduced at CPU scale.

``perm-circuits reproduce birth [--quick]`` calls :func:`run`, which, for each seed, trains the
simplified two-layer model (:func:`~perm_circuits.systems.birth_model.build_birth_model`: only
``W_K^1``, ``W_K^2``, ``W_O^2`` train) on :class:`~perm_circuits.tasks.bigram.BigramTriggerTask`
with SGD + momentum, logging the eq. 9 memory-recall probes (:mod:`~perm_circuits.systems.birth_probes`)
at log-spaced steps, and trains full pre-LN 1- and 2-layer transformers on the same task.  It
checks three claims: the learning order ``W_O^2``, ``W_K^2``, ``W_K^1`` (each probe's first logged
step past half its rise, :meth:`SeedResult.crossing`), early positions stored before late ones
(``W_K^1`` probe on the first vs second half of the context), and in-context accuracy of 2 layers
(~99%) vs 1 layer (~55%).  The paper's scale costs about 1.7 s per step on this CPU, so
:data:`QUICK` shrinks ``T``, ``d``, the batch and the steps; :data:`FULL` is the paper's size.
The bigrams are synthetic (a seeded Zipf-marginal Markov chain; the paper's are tiny Shakespeare's).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from perm_circuits.checks import check_int, check_number
from perm_circuits.devices import resolve_device, to_device
from perm_circuits.reproduce import Comparison, Reproduction, comparison_table
from perm_circuits.systems.birth_model import (
    BirthModelConfig,
    FullModelConfig,
    build_birth_model,
    build_full_model,
    plain_forward,
)
from perm_circuits.systems.birth_probes import (
    PROBE_NAMES,
    BirthProbeTracker,
    half_crossing,
)
from perm_circuits.tasks.base import fit, log_spaced_steps
from perm_circuits.tasks.bigram import BigramTriggerTask

__all__ = [
    "FULL",
    "FULL_COMMAND",
    "QUICK",
    "QUICK_RESULTS",
    "BirthSettings",
    "SeedResult",
    "compare",
    "describe_settings",
    "describe_time",
    "figures",
    "load_results",
    "markdown_table",
    "run",
    "run_seed",
    "seed_results",
]


@dataclass(frozen=True)
class BirthSettings:
    """Everything one reproduction run uses (sizes, optimisers, seeds)."""

    N: int = 65
    T: int = 256
    K: int = 5
    d_model: int = 128
    full_d_model: int = 128
    batch_size: int = 512
    steps: int = 5000
    lr: float = 0.2
    momentum: float = 0.9
    weight_decay: float = 1e-4
    full_steps: int = 5000
    full_lr: float = 1e-3
    seeds: tuple[int, ...] = (0, 1, 2)
    n_logged: int = 30
    eval_size: int = 512

    def __post_init__(self) -> None:
        for name in ("N", "T", "K", "d_model", "full_d_model", "batch_size", "steps", "full_steps", "n_logged",
                     "eval_size"):
            check_int(f"BirthSettings.{name}", getattr(self, name), low=1)
        for name in ("lr", "full_lr"):
            check_number(f"BirthSettings.{name}", getattr(self, name), low=0, strict=True, finite=False)
        if isinstance(self.seeds, (str, bytes)) or not self.seeds:
            raise ValueError(f"BirthSettings.seeds must be a non-empty tuple of ints >= 0, got {self.seeds!r}")
        for s in self.seeds:
            check_int("BirthSettings.seeds entry", s, low=0)
        object.__setattr__(self, "seeds", tuple(self.seeds))

    def task(self) -> BigramTriggerTask:
        return BigramTriggerTask(N=self.N, T=self.T, K=self.K)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seeds": list(self.seeds)}


FULL = BirthSettings()
"""The paper's sizes (N = 65, T = 256, d = 128, batch 512, SGD lr 0.2, momentum 0.9, wd 1e-4)."""

QUICK = BirthSettings(T=64, d_model=64, full_d_model=32, batch_size=32, steps=1000, lr=0.3,
                      full_steps=800, full_lr=3e-3, n_logged=24, eval_size=256)
"""CPU scale: under 5 minutes on one core for three seeds (measured in docs/birth.md)."""

FULL_COMMAND = (
    "perm-circuits reproduce birth --out results/birth_full --device cuda   "
    "# paper sizes (N=65, T=256, d=128, batch 512, 5000 SGD steps, 3 seeds): about 1.7 s per step "
    "for the simplified model alone on this CPU, i.e. days for all three models; run it on a GPU"
)


@dataclass(frozen=True)
class SeedResult:
    """One seed: the probe trajectory of the simplified model and the three in-context accuracies."""

    seed: int
    probes: tuple[dict[str, float], ...]
    acc_simplified: float
    acc_full_1layer: float
    acc_full_2layer: float
    seconds: float
    cpu_seconds: float = float("nan")

    def crossing(self, name: str) -> float:
        """First logged step at which probe ``name`` has made half its rise (:func:`half_crossing`)."""
        return half_crossing([p["step"] for p in self.probes], [p[name] for p in self.probes])

    def final(self, name: str) -> float:
        return float(self.probes[-1][name])


def _accuracy(model, task: BigramTriggerTask, batch) -> float:
    with torch.no_grad():
        return task.metrics(plain_forward(model, batch.tokens), batch)["in_context_acc"]


def run_seed(settings: BirthSettings, seed: int, *, progress: bool = False,
             device: str | torch.device | None = None) -> SeedResult:
    """Train the three models of one seed (module docstring) and measure them, on ``device`` (default
    the CPU; models are initialised there and moved, batches drawn there and moved)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    task = settings.task()
    target = resolve_device(device)
    eval_batch = task.test_set(settings.eval_size, seed=10_000 + seed).to(target)
    model = to_device(build_birth_model(BirthModelConfig(N=settings.N, T=settings.T, d_model=settings.d_model,
                                                         seed=seed)), target)
    tracker = BirthProbeTracker(log_spaced_steps(settings.steps, settings.n_logged), eval_batch=eval_batch,
                                forward=plain_forward)
    tracker.record(model, 0, task=task)
    fit(model, task, steps=settings.steps, batch_size=settings.batch_size, lr=settings.lr, optimizer="sgd",
        momentum=settings.momentum, weight_decay=settings.weight_decay, seed=seed, forward=plain_forward,
        callbacks=[tracker], progress=progress)
    accuracies = []
    for n_layers in (1, 2):
        full = to_device(build_full_model(FullModelConfig(N=settings.N, T=settings.T, d_model=settings.full_d_model,
                                                          n_layers=n_layers, seed=seed)), target)
        fit(full, task, steps=settings.full_steps, batch_size=settings.batch_size, lr=settings.full_lr,
            optimizer="adam", seed=seed, forward=plain_forward, progress=progress)
        accuracies.append(_accuracy(full, task, eval_batch))
    rows = tuple({k: float(v) for k, v in row.items()} for row in tracker.to_dataframe().to_dict("records"))
    return SeedResult(seed, rows, _accuracy(model, task, eval_batch), accuracies[0], accuracies[1],
                      time.perf_counter() - start, time.process_time() - cpu_start)


QUICK_RESULTS = Path(__file__).resolve().parents[3] / "results" / "birth_quick"
"""The committed ``--quick`` run (``comparison.csv``, ``numbers.json``) in a source checkout."""


def load_results(folder: str | Path = QUICK_RESULTS) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The comparison table and numbers a run wrote with ``Reproduction.write(folder)``."""
    folder = Path(folder)
    for name in ("comparison.csv", "numbers.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} does not exist; write it with "
                                    f"`perm-circuits reproduce birth --quick --out {folder}`")
    table = pd.read_csv(folder / "comparison.csv", keep_default_na=False)
    return table, json.loads((folder / "numbers.json").read_text(encoding="utf-8"))


def markdown_table(table: pd.DataFrame) -> str:
    """The paper-vs-ours table as the Markdown of ``docs/birth.md`` (one row per claim)."""
    return "\n".join(comparison_table(table))


def describe_settings(settings: Mapping[str, Any]) -> str:
    """One sentence naming a run's settings (``numbers["settings"]``), as docs/birth.md shows them."""
    s = settings
    return (f"N = {s['N']}, T = {s['T']}, K = {s['K']} triggers, batch {s['batch_size']}; simplified model "
            f"d = {s['d_model']}, {s['steps']} SGD steps (lr {s['lr']}, momentum {s['momentum']}, weight decay "
            f"{s['weight_decay']}); full transformers d = {s['full_d_model']}, {s['full_steps']} Adam steps "
            f"(lr {s['full_lr']}); seeds {', '.join(str(x) for x in s['seeds'])}")


def describe_time(numbers: Mapping[str, Any]) -> str:
    """The run's CPU time, as docs/birth.md shows it."""
    per_seed = ", ".join(f"{s['cpu_seconds']:.0f}" for s in numbers["seeds"])
    return f"{numbers['cpu_seconds_total']:.0f} s of CPU time on one core ({per_seed} s per seed)"


def seed_results(numbers: Mapping[str, Any]) -> list[SeedResult]:
    """The per-seed results back from a run's ``numbers`` (e.g. a written ``numbers.json``)."""
    if not isinstance(numbers, Mapping) or "seeds" not in numbers:
        raise ValueError("numbers must be a birth Reproduction's numbers (a mapping with a 'seeds' list)")
    return [SeedResult(int(s["seed"]), tuple(s["probes"]), float(s["acc_simplified"]), float(s["acc_full_1layer"]),
                       float(s["acc_full_2layer"]), float(s["seconds"]), float(s.get("cpu_seconds", float("nan"))))
            for s in numbers["seeds"]]


def _fmt_steps(values: list[float]) -> str:
    return "/".join("-" if math.isnan(v) else f"{v:.0f}" for v in values)


def compare(results: list[SeedResult], settings: BirthSettings) -> tuple[Comparison, ...]:
    """The paper-vs-ours rows from per-seed results."""
    n = len(results)
    cross = {name: [r.crossing(name) for r in results] for name in PROBE_NAMES}
    o2, k2, k1 = cross["W_O2"], cross["W_K2"], cross["W_K1"]

    def in_order(middle: list[float]) -> list[bool]:
        return [o2[i] <= middle[i] <= k1[i] and o2[i] < k1[i] for i in range(n)]

    order_ok, order_frequent_ok = in_order(k2), in_order(cross["W_K2_frequent"])
    wo_first = [o2[i] <= min(k2[i], k1[i]) for i in range(n)]
    early, late = cross["W_K1_early"], cross["W_K1_late"]
    early_final, late_final = ([r.final(name) for r in results] for name in ("W_K1_early", "W_K1_late"))
    early_ok = [ef > lf for ef, lf in zip(early_final, late_final)]
    acc1, acc2, accs = ([getattr(r, name) for r in results]
                        for name in ("acc_full_1layer", "acc_full_2layer", "acc_simplified"))
    pct = lambda xs: "/".join(f"{100 * x:.0f}%" for x in xs)
    seeds = f"seeds {'/'.join(str(r.seed) for r in results)}"
    return (
        Comparison(
            "learning order: W_O2 first", "W_O2 is learned first (Fig. 3)",
            f"half-rise step W_O2 {_fmt_steps(o2)} vs W_K2 {_fmt_steps(k2)}, W_K1 {_fmt_steps(k1)} ({seeds})",
            all(wo_first), "first logged step at which each eq. 9 probe has made half its rise (initial to final)",
        ),
        Comparison(
            "learning order: W_O2, then W_K2, then W_K1", "W_O2 first, W_K2 next, W_K1 last",
            f"order holds in {sum(order_ok)}/{n} seeds", all(order_ok),
            "W_K2 probe over all N tokens (random triggers, pi_q = pi_u)",
        ),
        Comparison(
            "learning order, W_K2 on the frequent half of tokens", "W_O2 first, W_K2 next, W_K1 last",
            f"half-rise step W_K2 (frequent) {_fmt_steps(cross['W_K2_frequent'])}; "
            f"order holds in {sum(order_frequent_ok)}/{n} seeds", all(order_frequent_ok),
            "our diagnostic, not the paper's probe: rare tokens are rarely triggers",
        ),
        Comparison(
            "early positions stored before late ones",
            "W_K1 stores t < 64 much faster than later positions (Fig. 3)",
            f"final W_K1 probe, first half {pct(early_final)} vs second half {pct(late_final)}; "
            f"half-rise step {_fmt_steps(early)} vs {_fmt_steps(late)}",
            all(early_ok), f"halves of T = {settings.T} (the paper's window is t < 64 of 256)",
        ),
        Comparison(
            "in-context accuracy, 2-layer transformer", "~99%", pct(acc2),
            bool(np.mean(acc2) >= 0.9),
            f"{settings.full_steps} Adam steps at d = {settings.full_d_model}; holds if the mean is >= 90%",
        ),
        Comparison(
            "in-context accuracy, 1-layer transformer", "~55%", pct(acc1),
            bool(np.mean(acc1) < 0.7 and np.mean(acc1) < np.mean(acc2)),
            "holds if the mean is below 70% and below the 2-layer mean",
        ),
        Comparison(
            "in-context accuracy, simplified 2-layer model", "near 100% (Fig. 3)", pct(accs),
            bool(np.mean(accs) >= 0.9), f"{settings.steps} SGD steps at d = {settings.d_model}",
        ),
    )


def figures(results: list[SeedResult]) -> dict[str, Any]:
    """Plotly figures: the probes over training (one line per seed) and early vs late W_K1."""
    import plotly.graph_objects as go

    colors = {"W_O2": "#1f77b4", "W_K2": "#ff7f0e", "W_K2_frequent": "#bcbd22", "W_K1": "#2ca02c",
              "W_K1_early": "#2ca02c", "W_K1_late": "#d62728", "in_context_acc": "#7f7f7f"}
    out = {}
    for title, names in (("Memory-recall probes over training (eq. 9)", ("W_O2", "W_K2", "W_K2_frequent", "W_K1", "in_context_acc")),
                         ("W_K1 probe: early vs late positions", ("W_K1_early", "W_K1_late"))):
        fig = go.Figure()
        for name in names:
            for k, r in enumerate(results):
                fig.add_trace(go.Scatter(
                    x=[max(p["step"], 0.5) for p in r.probes], y=[p[name] for p in r.probes], mode="lines+markers",
                    name=f"{name}", legendgroup=name, showlegend=k == 0, line={"color": colors[name]},
                    opacity=0.9 if k == 0 else 0.5, hovertext=f"seed {r.seed}",
                ))
        fig.update_layout(title=title, xaxis={"title": "step (log; 0 shown at 0.5)", "type": "log"},
                          yaxis={"title": "recall R / accuracy", "range": [0, 1.05]}, template="plotly_white")
        out[title] = fig
    return out


def run(quick: bool = False, progress: bool = True, settings: BirthSettings | None = None,
        device: str | torch.device | None = None) -> Reproduction:
    """The reproduction (module docstring): :data:`QUICK` or :data:`FULL` settings unless given, every
    model trained on ``device`` (default the CPU: the committed numbers)."""
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {quick!r}")
    settings = (QUICK if quick else FULL) if settings is None else settings
    if not isinstance(settings, BirthSettings):
        raise TypeError(f"settings must be a BirthSettings, got {type(settings).__name__}")
    results = [run_seed(settings, seed, progress=progress, device=device) for seed in settings.seeds]
    numbers = {
        "settings": settings.to_dict(),
        "cpu_seconds_total": sum(r.cpu_seconds for r in results),
        "seeds": [
            {"seed": r.seed, "acc_simplified": r.acc_simplified, "acc_full_1layer": r.acc_full_1layer,
             "acc_full_2layer": r.acc_full_2layer, "seconds": r.seconds, "cpu_seconds": r.cpu_seconds,
             "half_rise_step": {name: r.crossing(name) for name in PROBE_NAMES},
             "final": {name: r.final(name) for name in PROBE_NAMES},
             "probes": list(r.probes)}
            for r in results
        ],
    }
    return Reproduction(
        name="birth", title="Birth of a Transformer: a memory viewpoint (Bietti et al. 2023)", quick=quick,
        rows=compare(results, settings), numbers=numbers, figures=figures(results), full_command=FULL_COMMAND,
    )

