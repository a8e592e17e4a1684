"""Permutation-chain state tracking (Forner, Kühn, Thamm, Rosenow 2026): ``perm-circuits reproduce forner``.

Re-exports :mod:`~perm_circuits.systems.forner_model` (the solvable model, its teacher and training
forward), :mod:`~perm_circuits.systems.forner_dynamics` (order parameters A, R, S and logged
training) and :mod:`~perm_circuits.systems.forner_theory` (eqs. 11-18).  :func:`run` reproduces at
``N = d_g = 8, L = 10, d_h = 32`` with SGD at the paper's learning rate 0.5 on fresh batches of 2048
chains per step (the paper: one fixed full batch of 32,768), 1600 steps (alpha = 25); ``quick=True``
trains seed 0 and compares the ODE with it, the full run seeds 0-4 and their mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from perm_circuits.reproduce import Comparison, Reproduction, comparison_table
from perm_circuits.systems.forner_dynamics import (
    ChainRun,
    OrderParameters,
    chain_snapshot,
    crossing,
    order_parameters,
    overlaps,
    train_chain,
)
from perm_circuits.systems.forner_model import (
    FornerConfig,
    FornerModel,
    fast_forward,
    rope_frequencies,
    teacher_model,
)
from perm_circuits.systems.forner_theory import (
    OdeSolution,
    c_omega,
    integrate_order_parameters,
    mean_logits,
    order_parameter_rhs,
    rollout_accuracy,
    rollout_recursion,
    step_accuracy_gaussian,
)

__all__ = [
    "FULL",
    "QUICK",
    "ChainRun",
    "FornerConfig",
    "FornerModel",
    "OdeSolution",
    "OrderParameters",
    "c_omega",
    "chain_snapshot",
    "compare_with_ode",
    "comparison_markdown",
    "comparison_rows",
    "crossing",
    "docs_markers",
    "fast_forward",
    "figures",
    "integrate_order_parameters",
    "mean_logits",
    "order_parameter_rhs",
    "order_parameters",
    "overlaps",
    "rollout_accuracy",
    "rollout_recursion",
    "rope_frequencies",
    "run",
    "seed_stats",
    "step_accuracy_gaussian",
    "teacher_model",
    "train_chain",
]

QUICK = {"seeds": (0,), "steps": 1600, "batch_size": 2048, "lr": 0.5, "n_test": 4096}
FULL = {**QUICK, "seeds": (0, 1, 2, 3, 4)}
EQ18_TOLERANCE = 0.02
FULL_COMMAND = (
    "python -c \"from perm_circuits.systems.forner import *; "
    "[train_chain(FornerConfig(N=32, d_g=32, L=10, d_h=128, seed=s), steps=20000, batch_size=32768, lr=0.5, "
    "device='cuda')"
    ".log.to_csv(f'forner_paper_seed{s}.csv') for s in range(100)]\""
)


def compare_with_ode(log: pd.DataFrame, cfg: FornerConfig, lr: float) -> pd.DataFrame:
    """The seed-mean of ``A, R, S`` at each logged ``alpha`` beside the ODE (eq. 15) integrated from the
    measured mean initial values ``A(0), R(0), S(0)`` and ``zeta``; columns ``*_sim``, ``*_sd``, ``*_ode``;
    the measured ``rho``, rollout accuracy and eq. 18 from ``rho``; and the paper's fig. 3 theory
    (``rho_ode``: eq. 17 with the ODE's mean logits and the measured initial logit variances held
    fixed; ``rollout_ode``: eq. 18 of it)."""
    mean = log.groupby("alpha")[["A", "R", "S", "zeta", "rho", "rollout", "rollout_eq18"]].mean()
    sd = log.groupby("alpha")[["A", "R", "S"]].std(ddof=0)
    start = mean.iloc[0]
    alpha = mean.index.to_numpy(dtype=float)
    ode = integrate_order_parameters(alpha, eta=lr, N=cfg.N, d_g=cfg.d_g, L=cfg.L, d_h=cfg.d_h,
                                     A0=float(start["A"]), R0=float(start["R"]), S0=float(start["S"]),
                                     zeta=float(start["zeta"]),
                                     omegas=rope_frequencies(cfg.d_h, cfg.rope_theta, cfg.rope_two_pi).double().numpy())
    table = pd.DataFrame({"alpha": alpha})
    for name in ("A", "R", "S"):
        table[f"{name}_sim"] = mean[name].to_numpy()
        table[f"{name}_sd"] = sd[name].to_numpy()
        table[f"{name}_ode"] = getattr(ode, name)
    for name in ("rho", "rollout", "rollout_eq18"):
        table[name] = mean[name].to_numpy()
    # the paper's fig. 3 theory: eq. 17 with the ODE's mean logits and the initial logit variances, then eq. 18
    variances = log[log["step"] == 0][["var_correct", "var_other"]].mean()
    table["rho_ode"] = step_accuracy_gaussian(ode.mu_correct, ode.mu_other, float(variances["var_correct"]),
                                              float(variances["var_other"]), cfg.N)
    table["rollout_ode"] = rollout_accuracy(np.clip(table["rho_ode"].to_numpy(), 0, 1), cfg.N, cfg.L)
    return table


def figures(log: pd.DataFrame, ode: pd.DataFrame) -> dict:
    """Plotly figures: A, R, S (every seed, their mean and the ODE) and rollout accuracy vs eq. 18."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("A (attention)", "R (teacher alignment)", "S (off-target)"))
    for col, name in enumerate(("A", "R", "S"), start=1):
        for seed, rows in log.groupby("seed"):
            fig.add_trace(go.Scatter(x=rows["alpha"], y=rows[name], mode="lines", line={"width": 1, "color": "#9ab"},
                                     name=f"seed {seed}", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=ode["alpha"], y=ode[f"{name}_sim"], mode="markers", marker={"color": "#246"},
                                 name="simulation (seed mean)", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=ode["alpha"], y=ode[f"{name}_ode"], mode="lines", line={"color": "#c33", "dash": "dash"},
                                 name="mean-field ODE (eq. 15)", showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(title_text="alpha = steps / (d_g N)", row=1, col=col)
    fig.update_layout(title="Order parameters: simulation vs mean-field ODE (Forner et al. 2026, fig. 2)", height=380)
    roll = go.Figure()
    roll.add_trace(go.Scatter(x=ode["alpha"], y=ode["rho"], mode="lines+markers", name="one-step accuracy rho"))
    roll.add_trace(go.Scatter(x=ode["alpha"], y=ode["rollout"], mode="lines+markers", name="final rollout accuracy (measured)"))
    roll.add_trace(go.Scatter(x=ode["alpha"], y=ode["rollout_eq18"], mode="lines", line={"dash": "dash"},
                              name="eq. 18 from measured rho"))
    if "rollout_ode" in ode:
        roll.add_trace(go.Scatter(x=ode["alpha"], y=ode["rollout_ode"], mode="lines", line={"dash": "dot"},
                                  name="ODE + eqs. 17-18 (initial variances)"))
    roll.update_layout(title="Final rollout accuracy vs eq. 18 (Forner et al. 2026, fig. 3)",
                       xaxis_title="alpha = steps / (d_g N)", yaxis_title="accuracy", height=380)
    return {"order_parameters": fig, "rollout": roll}


def seed_stats(rows: pd.DataFrame, L: int) -> dict:
    """One seed's plateau, lock-in, S peak and final accuracies from its training log rows.

    ``plateau_end``: the first ``alpha`` where ``A`` reaches ``1.5/L``; ``A_090``: where it reaches 0.9;
    ``plateau``: ``A <= 1.5/L`` for at least a quarter of the time to 0.9, and final ``A > 0.9``;
    ``S_first``: ``S``'s maximum comes before ``A_090``; ``perfect``: final accuracies >= 0.999."""
    rows = rows.sort_values("alpha")
    alpha, A, S = rows["alpha"].to_numpy(), rows["A"].to_numpy(), rows["S"].to_numpy()
    plateau_end, a_sat = crossing(alpha, A, 1.5 / L), crossing(alpha, A, 0.9)
    early = A[alpha <= plateau_end] if np.isfinite(plateau_end) else A
    last = rows.iloc[-1]
    s_peak = float(alpha[int(np.argmax(S))])
    return {
        "seed": int(rows["seed"].iloc[0]), "A_initial": float(A[0]), "A_plateau_max": float(early.max()),
        "A_plateau_end_alpha": plateau_end, "A_090_alpha": a_sat, "A_final": float(last["A"]),
        "S_peak_alpha": s_peak, "S_peak": float(S.max()), "S_final": float(last["S"]), "R_final": float(last["R"]),
        "teacher_forced_accuracy_final": float(last["rho"]), "rollout_accuracy_final": float(last["rollout"]),
        "steps": int(last["step"]), "logged": len(rows) - 1,
        "plateau": bool(early.max() <= 1.5 / L and last["A"] > 0.9 and plateau_end >= 0.25 * a_sat),
        "S_first": bool(s_peak < a_sat), "perfect": bool(last["rho"] >= 0.999 and last["rollout"] >= 0.999),
    }


def comparison_rows(log: pd.DataFrame, ode: pd.DataFrame, cfg: FornerConfig, n_seeds: int) -> tuple[list[Comparison], dict]:
    """The "paper vs ours" rows and the headline numbers from a training log (all seeds) and its
    :func:`compare_with_ode` table.  Claims (a)-(c) hold when they hold for every seed; the text
    quotes the lowest seed (and, with several seeds, how many satisfy the claim)."""
    L = cfg.L
    runs = [rows.sort_values("alpha") for _, rows in log.groupby("seed")]
    per_seed = [seed_stats(rows, L) for rows in runs]
    first = per_seed[0]
    eq18_gap = np.abs(log["rollout"] - log["rollout_eq18"]).to_numpy()
    worst = log.iloc[int(np.argmax(eq18_gap))]
    half_sim = [crossing(rows["alpha"].to_numpy(), rows["A"].to_numpy(), 0.5) for rows in runs]
    half_ode = crossing(ode["alpha"].to_numpy(), ode["A_ode"].to_numpy(), 0.5)

    def max_gap(table: pd.DataFrame) -> dict[str, float]:
        return {name: float(np.max(np.abs(table[f"{name}_sim"] - table[f"{name}_ode"]))) for name in "ARS"}

    gap = max_gap(ode)
    plateau_end = min(s["A_plateau_end_alpha"] for s in per_seed)
    plateau_gap = max_gap(ode[ode["alpha"] <= plateau_end] if np.isfinite(plateau_end) else ode)
    finite = [value for value in half_sim if np.isfinite(value)]
    half_mean = float(np.mean(finite)) if finite else float("nan")
    numbers = {
        **{k: v for k, v in first.items() if k not in ("plateau", "S_first", "perfect", "logged", "steps")},
        "n_seeds": n_seeds, "one_over_L": 1 / L, "per_seed": per_seed,
        "eq18_max_gap": float(eq18_gap.max()), "eq18_worst_alpha": float(worst["alpha"]),
        "eq18_worst_rho": float(worst["rho"]), "eq18_worst_seed": int(worst["seed"]),
        "A_half_alpha_sim": half_sim, "A_half_alpha_sim_mean": half_mean,
        "A_half_alpha_ode": half_ode, **{f"ode_max_gap_{name}": value for name, value in gap.items()},
        "ode_plateau_alpha": plateau_end, **{f"ode_plateau_gap_{name}": value for name, value in plateau_gap.items()},
        "c_omega": c_omega(cfg.N, cfg.d_g, L, cfg.d_h), "c_omega_paper_size": c_omega(32, 32, 10, 128),
    }
    seeds_text = f"{n_seeds} seed{'s' if n_seeds > 1 else ''}"

    def tally(key: str, what: str) -> str:
        return f"; {what} in {sum(s[key] for s in per_seed)}/{n_seeds} seeds" if n_seeds > 1 else ""

    lowest_tf = min(s["teacher_forced_accuracy_final"] for s in per_seed)
    lowest_roll = min(s["rollout_accuracy_final"] for s in per_seed)
    f = first
    rows = [
        Comparison("A plateaus near 1/L, then locks in", "A stays at A(0) ~ 1/L for alpha <~ 1, then rises to ~1 (fig. 2a)",
                   f"seed {f['seed']}: A = {f['A_initial']:.3f} at init (1/L = {1 / L:.2f}), <= {f['A_plateau_max']:.3f} "
                   f"until alpha = {f['A_plateau_end_alpha']:.1f}; A >= 0.9 at alpha = {f['A_090_alpha']:.1f}; "
                   f"final A = {f['A_final']:.4f}" + tally("plateau", "holds"),
                   all(s["plateau"] for s in per_seed),
                   "plateau: A <= 1.5/L for at least a quarter of the time A takes to reach 0.9; then final A > 0.9"),
        Comparison("S peaks before A saturates", "S rises fast early and saturates once attention is nearly perfect (fig. 2c)",
                   f"seed {f['seed']}: max S = {f['S_peak']:.3f} at alpha = {f['S_peak_alpha']:.1f}; A >= 0.9 from "
                   f"alpha = {f['A_090_alpha']:.1f}; final S = {f['S_final']:.3f}" + tally("S_first", "holds"),
                   all(s["S_first"] for s in per_seed), "S's maximum over the logged steps comes before A first reaches 0.9"),
        Comparison("final accuracies are 1", "teacher-forced and final rollout accuracy reach 1 (figs. 3, 9)",
                   f"lowest over {seeds_text}: teacher-forced {lowest_tf:.4f}, rollout {lowest_roll:.4f} "
                   f"({f['steps']} steps)", all(s["perfect"] for s in per_seed),
                   "on a fixed test set of 4096 fresh chains per seed; 'is 1' means >= 0.999"),
        Comparison("eq. 18 predicts rollout accuracy from rho", "qualitative: sharp rise, P = 1/N -> 1 (fig. 3)",
                   f"max |measured - eq. 18| = {eq18_gap.max():.3f} over {len(log)} logged points ({seeds_text}); "
                   f"worst at alpha = {worst['alpha']:.2f} (seed {int(worst['seed'])}, rho = {worst['rho']:.3f})",
                   bool(eq18_gap.max() <= EQ18_TOLERANCE), f"our tolerance: within {EQ18_TOLERANCE} at every logged point"),
        Comparison("mean-field ODE (eq. 15) matches the order parameters",
                   "agreement very good at N = d_g = 32, d_h = 128 (100 seeds, fig. 2)",
                   f"A = 0.5 at alpha = {half_mean:.1f} (sim, {seeds_text}) vs {half_ode:.1f} (ODE); "
                   f"max |sim - ODE| on the plateau (alpha <= {plateau_end:.1f}): A {plateau_gap['A']:.3f}, "
                   f"R {plateau_gap['R']:.3f}, S {plateau_gap['S']:.3f}; over the whole run: A {gap['A']:.2f}, "
                   f"R {gap['R']:.2f}, S {gap['S']:.2f}",
                   bool(abs(half_mean - half_ode) <= 0.25 * half_ode),
                   "ODE from the measured mean A(0), R(0), S(0), zeta; holds if the time A reaches 0.5 agrees within 25%"),
    ]
    return rows, numbers


def docs_markers(quick: bool = True) -> tuple[str, str]:
    """The comment lines around the generated comparison block of docs/forner.md (one per run kind)."""
    kind = "quick" if quick else "full"
    return (f"<!-- forner-{kind}-comparison:begin (generated by scripts/forner_results.py; do not edit) -->",
            f"<!-- forner-{kind}-comparison:end -->")


def comparison_markdown(table: pd.DataFrame, seconds: float | None = None, quick: bool = True) -> str:
    """The "paper vs ours" rows of a comparison table (``Reproduction.to_dataframe()``) as a Markdown
    table, with the run's kind and time; docs/forner.md holds this block between the
    :func:`docs_markers` of its kind."""
    begin, end = docs_markers(quick)
    took = f", {seconds:.0f} s on one shared CPU core" if seconds else ""
    lines = [begin, "", f"{'`--quick`' if quick else 'full'} run{took}:", "", *comparison_table(table)]
    notes = [f"* *{row.claim}*: {row.note}".replace("|", "\\|") for row in table.itertuples(index=False)
             if isinstance(row.note, str) and row.note]
    if notes:
        lines += ["", *notes]
    return "\n".join([*lines, "", end])


def run(quick: bool = False, progress: bool = True, device: str | torch.device | None = None) -> Reproduction:
    """The reproduction (module docstring); ``numbers`` holds the measured values, the training log
    (``"log"``, one dict per logged step and seed) and the simulation-vs-ODE table (``"ode"``);
    the models train on ``device`` (default the CPU)."""
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {quick!r}")
    torch.set_num_threads(1)
    settings = QUICK if quick else FULL
    runs = [train_chain(FornerConfig(seed=seed), steps=settings["steps"], batch_size=settings["batch_size"],
                        lr=settings["lr"], n_test=settings["n_test"], progress=progress, device=device)
            for seed in settings["seeds"]]
    cfg = runs[0].config
    log = pd.concat([r.log for r in runs], ignore_index=True)
    ode = compare_with_ode(log, cfg, settings["lr"])
    rows, numbers = comparison_rows(log, ode, cfg, len(runs))
    numbers = {**numbers, "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
               "config": cfg.to_dict(), "log": log.to_dict("records"), "ode": ode.to_dict("records")}
    return Reproduction(name="forner", title="Permutation-chain state tracking (Forner et al. 2026)", quick=quick,
                        rows=tuple(rows), numbers=numbers, figures=figures(log, ode), full_command=FULL_COMMAND)
