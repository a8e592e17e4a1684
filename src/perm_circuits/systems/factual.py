"""Factual recall with associative memories (Nichani, Lee & Bietti 2024, arXiv:2412.06538).

``perm-circuits reproduce factual [--quick]`` runs the paper's two headline experiments at CPU
scale on :class:`~perm_circuits.tasks.factual.FactualRecallTask`: :func:`hallucination_phase`
(section 5, Theorem 6, figure 5: the loss plateaus at ``log D`` while the model outputs ``p(a | r)``,
then falls to 0) and :func:`storage_capacity` (section 4.4, figure 3 left: facts stored grow
linearly with trainable parameters).

Sources: seed 003 (the paper's sections 4-5 excerpted: task, constructions, figure captions,
``S = 16, R = 4, D = 8`` for figure 5, ``S = R = 32, D = 8`` for figure 3 right), seed 002
("for random embeddings, capacity ~ number of parameters"), and the paper's abstract.  The
seeds do not give the figure's guide-line constant, so the capacity claim is checked on its
exponent (linear: log-log slope 1); the facts-per-parameter constant is reported, no verdict.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from perm_circuits._util import atomic_write_text, replace_section
from perm_circuits.devices import model_device, to_device
from perm_circuits.reproduce import Comparison, Reproduction, comparison_table
from perm_circuits.systems.factual_model import (
    FactualConfig,
    FactualTransformer,
    LinearAttentionConfig,
    LinearAttentionModel,
    build_factual_model,
    n_trainable,
)
from perm_circuits.tasks.base import StepState, fit, log_spaced_steps
from perm_circuits.tasks.factual import FactualRecallTask

__all__ = ["FactualConfig", "FactualTransformer", "HallucinationResult", "LinearAttentionConfig",
           "LinearAttentionModel", "StorageResult", "build_factual_model", "hallucination_phase",
           "log_log_fit", "n_trainable", "run", "storage_capacity", "storage_run"]

FULL_COMMAND = ('python -c "from perm_circuits.systems.factual import storage_capacity as c; '
                'print(c(sizes=[(32, 64), (64, 128), (64, 512), (128, 512), (128, 2048)], R=32, D=8, '
                'subjects=(8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024), '
                'steps=20000, seeds=(0, 1, 2), device=\'cuda\').capacity)"  # paper-scale figure 3 (left): hours on this CPU')


@dataclass(frozen=True)
class HallucinationResult:
    """The hallucination experiment's ``trajectory`` (one row per logged step: ``step`` and the task's
    metrics on every fact, each in ``repeats`` fresh contexts), ``log_answers = log |A|`` (the uniform
    prediction's loss), ``log_D`` (the relation-only predictor ``p(a | r)``'s loss), the ``stage``
    rows (relation known: relation-only loss < :data:`RELATION_KNOWN`; subject unknown: subject-only
    loss > :data:`SUBJECT_UNKNOWN` ``* log D``; empty if no such stage) and the ``final`` row."""

    trajectory: pd.DataFrame
    log_answers: float
    log_D: float
    stage: pd.DataFrame
    final: dict[str, float]

    @property
    def has_stage(self) -> bool:
        return len(self.stage) > 0

    def summary(self) -> dict[str, float]:
        """First and last logged step of the stage, its mean and range of loss, its largest KL."""
        if not self.has_stage:
            keys = ("first_step", "last_step", "loss_mean", "loss_min", "loss_max", "kl_max")
            return dict.fromkeys(keys, float("nan"))
        stage = self.stage
        return {"first_step": int(stage["step"].iloc[0]), "last_step": int(stage["step"].iloc[-1]),
                "loss_mean": float(stage["loss"].mean()), "loss_min": float(stage["loss"].min()),
                "loss_max": float(stage["loss"].max()), "kl_max": float(stage["kl_to_relation_prior"].max())}

    def to_dataframe(self) -> pd.DataFrame:
        return self.trajectory.copy()


def hallucination_phase(
    task: FactualRecallTask | None = None,
    *,
    model: str = "linear",
    steps: int = 1500,
    lr: float = 0.2,
    batch_size: int = 256,
    alpha: float = 0.01,
    seed: int = 0,
    n_log: int = 40,
    repeats: int = 4,
    progress: bool = True,
    device: str | torch.device | None = None,
    **model_kwargs: Any,
) -> HallucinationResult:
    """Train from a small constant init and log the loss against ``log D`` (section 5).

    ``model="linear"``: the paper's linear attention with one-hot embeddings (eq. 7, SGD: Theorem 6's
    gradient flow); ``"softmax"``: the one-layer transformer (Adam, ``model_kwargs`` to
    :class:`FactualConfig`), figure 5 right.  Metrics on every fact in ``repeats`` fresh contexts at
    ``n_log`` log-spaced steps.  The model is initialised and the batches drawn on the CPU, then
    moved to ``device`` (default the CPU)."""
    task = FactualRecallTask(S=16, R=4, D=8) if task is None else task
    if not isinstance(task, FactualRecallTask):
        raise TypeError(f"task must be a FactualRecallTask, got {type(task).__name__}")
    if model not in ("linear", "softmax"):
        raise ValueError(f"model must be 'linear' or 'softmax', got {model!r}")
    if model == "linear":
        net: torch.nn.Module = LinearAttentionModel(LinearAttentionConfig.for_task(task, alpha=alpha))
        optimizer = "sgd"
    else:
        net = build_factual_model(task, seed=seed, **model_kwargs)
        optimizer = "adam"
    net = to_device(net, device)
    test = task.all_facts(seed=seed + 1234, repeats=repeats).to(model_device(net))
    at = set(log_spaced_steps(steps, n_log))

    def log(state: StepState) -> dict[str, float] | None:
        if state.step not in at:
            return None
        return {"step": state.step, **state.task.metrics(state.model(test.tokens), test)}

    result = fit(net, task, steps=steps, batch_size=batch_size, lr=lr, optimizer=optimizer, seed=seed,
                 callbacks=[log], progress=progress)
    table = pd.DataFrame(list(result.records))
    log_D = math.log(task.D)
    known = table["relation_only_loss"] < RELATION_KNOWN
    stage = table[known & (table["subject_only_loss"] > SUBJECT_UNKNOWN * log_D)]
    return HallucinationResult(table, math.log(task.n_answers), log_D, stage.reset_index(drop=True),
                               table.iloc[-1].to_dict())


RELATION_KNOWN = 0.1
"""The relation is known when the relation-only loss ``-log p(A_r)`` is below this (nats)."""
SUBJECT_UNKNOWN = 0.9
"""The subject is unknown while the subject-only loss is above this fraction of ``log D``."""


LADDER = (4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
"""Subject counts tried (about x1.2 apart); with ``R = 4`` a rung stores ``4 S`` facts."""


class _Stored(Exception):
    """Raised by the early-stop callback: the target accuracy is reached (fit trains in place)."""


def storage_run(
    task: FactualRecallTask,
    *,
    d_model: int,
    d_mlp: int,
    n_heads: int = 1,
    d_head: int | None = None,
    steps: int = 1500,
    lr: float = 0.02,
    batch_size: int = 512,
    target: float = 0.99,
    check_every: int = 50,
    seed: int = 0,
    progress: bool = False,
    device: str | torch.device | None = None,
) -> dict[str, Any]:
    """Train one :class:`FactualTransformer` on ``task`` until fact accuracy on every fact (one
    fresh context each) reaches ``target`` or ``steps`` run out; returns a row of results (trained on
    ``device``, default the CPU)."""
    model = to_device(build_factual_model(task, d_model=d_model, d_mlp=d_mlp, n_heads=n_heads,
                                          d_head=d_head or d_model, seed=seed), device)
    test = task.all_facts(seed=seed + 1234).to(model_device(model))
    best = {"accuracy": 0.0, "steps": steps}

    def check(state: StepState) -> None:
        if state.step % check_every and state.step != steps:
            return
        accuracy = state.task.metrics(state.model(test.tokens), test)["fact_accuracy"]
        best["accuracy"] = max(best["accuracy"], accuracy)
        if accuracy >= target:
            best["steps"] = state.step
            raise _Stored

    with contextlib.suppress(_Stored):
        fit(model, task, steps=steps, batch_size=batch_size, lr=lr, seed=seed, callbacks=[check], progress=progress)
    return {"d_model": d_model, "d_mlp": d_mlp, "n_heads": n_heads, "params": n_trainable(model),
            "S": task.S, "R": task.R, "facts": task.n_facts, "accuracy": best["accuracy"],
            "stored": best["accuracy"] >= target, "steps": best["steps"]}


@dataclass(frozen=True)
class StorageResult:
    """Facts stored at the target accuracy per model size, and the fitted scaling.

    Attributes:
        runs: every training run (one row per model size and table size tried).
        capacity: one row per seed and model size: ``params`` and ``facts_stored`` (the largest
            ``S R`` stored at >= ``target``; 0 if none on the ladder) and the number of ``runs``.
        exponent: slope of ``log facts_stored`` on ``log params`` (linear scaling: 1).
        facts_per_param: least-squares slope of ``facts_stored = c * params`` through the origin.
        bits_per_param: ``facts_per_param * log2 D``.
        target: the accuracy at which a fact table counts as stored.
        settings: the :func:`storage_capacity` arguments it was computed with (``R``, ``D``,
            ``n_noise``, ``seq_len``, ``steps``, ``lr``, ``batch_size``, ``subjects``, ``seeds``).
    """

    runs: pd.DataFrame
    capacity: pd.DataFrame
    exponent: float
    facts_per_param: float
    bits_per_param: float
    target: float = 0.99
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dataframe(self) -> pd.DataFrame:
        return self.capacity.copy()


def log_log_fit(x: pd.Series, y: pd.Series) -> tuple[float, float]:
    """``(slope, intercept)`` of the least-squares line of ``log y`` on ``log x`` (natural logs)."""
    if len(x) != len(y) or not ((x > 0).all() and (y > 0).all()) or x.nunique() < 2:
        raise ValueError(f"a log-log fit needs paired positive points at two or more distinct x, got x={list(x)}, "
                         f"y={list(y)}")
    lx, ly = x.astype(float).map(math.log), y.astype(float).map(math.log)
    slope = float(((lx - lx.mean()) * (ly - ly.mean())).sum() / ((lx - lx.mean()) ** 2).sum())
    return slope, float(ly.mean() - slope * lx.mean())


def storage_capacity(
    sizes: Sequence[tuple[int, int]] = ((16, 16), (16, 32), (16, 64), (16, 128)),
    *,
    subjects: Sequence[int] = LADDER[:-1],
    R: int = 4,
    D: int = 8,
    n_noise: int = 8,
    seq_len: int = 5,
    steps: int = 1500,
    lr: float = 0.02,
    batch_size: int = 512,
    target: float = 0.99,
    seeds: Sequence[int] = (0,),
    progress: bool = True,
    device: str | torch.device | None = None,
) -> StorageResult:
    """For each ``(d_model, d_mlp)`` in ``sizes`` (one head of width ``d_model``), the largest rung
    of the ``subjects`` ladder (``S R`` facts) that the model stores at >= ``target`` accuracy
    while the next rung fails (each run: :func:`storage_run`).

    The first size climbs from the bottom rung.  Each later size starts at the rung nearest its
    predecessor's capacity scaled by the parameter ratio, then climbs while it stores or descends
    while it fails, so every capacity is bracketed by a stored rung and a failed one (or the
    ladder's end): the start only saves runs, it does not decide the answer (stored tables are
    assumed monotone in ``S``).  Each seed (fact table, initialisation, batches) repeats the whole
    search.  Fits the log-log exponent of facts stored vs parameters over every (seed, size) point."""
    if not sizes or not subjects:
        raise ValueError("sizes and subjects must be non-empty")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and non-empty, got {list(seeds)}")
    if list(subjects) != sorted(set(subjects)):
        raise ValueError(f"subjects must be strictly increasing, got {list(subjects)}")
    from tqdm.auto import tqdm

    runs: list[dict[str, Any]] = []
    capacity = []
    plan = [(seed, size) for seed in seeds for size in sizes]
    previous: tuple[int, int] | None = None  # (params, facts stored) of the last size
    measured: dict[tuple[int, int], int] = {}
    for seed, (d_model, d_mlp) in tqdm(plan, disable=not progress, desc="storage capacity"):
        if (d_model, d_mlp) == tuple(sizes[0]):
            previous = None
        outcome: dict[int, dict[str, Any]] = {}

        def tried(index: int) -> bool:  # called in this iteration only: the loop variables are current
            if index not in outcome:
                task = FactualRecallTask(S=subjects[index], R=R, D=D, n_noise=n_noise, seq_len=seq_len,
                                         fact_seed=seed)
                outcome[index] = {"seed": seed, **storage_run(task, d_model=d_model, d_mlp=d_mlp, steps=steps,
                                                              lr=lr, batch_size=batch_size, target=target,
                                                              seed=seed, device=device)}
                runs.append(outcome[index])
            return outcome[index]["stored"]

        index = 0
        if (d_model, d_mlp) in measured:  # another seed measured this size: start at its capacity
            index = max(0, min(range(len(subjects)), key=lambda i: abs(subjects[i] * R - measured[(d_model, d_mlp)])))
        elif previous is not None and previous[1] > 0:
            params = n_trainable(build_factual_model(FactualRecallTask(S=1, R=R, D=D, n_noise=n_noise,
                                                                       seq_len=seq_len), d_model=d_model,
                                                     d_mlp=d_mlp, d_head=d_model))
            guess = previous[1] * params / previous[0] / R  # a starting rung only: both sides are verified
            index = min(range(len(subjects)), key=lambda i: abs(math.log(subjects[i] / guess)))
        if tried(index):
            while index + 1 < len(subjects) and tried(index + 1):
                index += 1
        else:
            while index > 0 and not tried(index - 1):
                index -= 1
            index -= 1
        stored = subjects[index] * R if index >= 0 else 0
        params = next(iter(outcome.values()))["params"]
        capacity.append({"seed": seed, "d_model": d_model, "d_mlp": d_mlp, "params": params,
                         "facts_stored": stored, "runs": len(outcome)})
        previous = (params, stored)
        measured.setdefault((d_model, d_mlp), stored)
    runs_df, cap = pd.DataFrame(runs), pd.DataFrame(capacity)
    ok = cap[cap["facts_stored"] > 0]
    exponent = log_log_fit(ok["params"], ok["facts_stored"])[0] if ok["params"].nunique() >= 2 else float("nan")
    per_param = float((cap["params"] * cap["facts_stored"]).sum() / (cap["params"] ** 2).sum())
    settings = {"R": R, "D": D, "n_noise": n_noise, "seq_len": seq_len, "steps": steps, "lr": lr,
                "batch_size": batch_size, "subjects": list(subjects), "seeds": list(seeds)}
    return StorageResult(runs_df, cap, exponent, per_param, per_param * math.log2(D), target, settings)


QUICK = {"hallucination": {"steps": 1500, "alpha": 0.01}, "sizes": ((16, 32), (16, 128)),
         "subjects": LADDER[3:], "steps": 1500, "seeds": (0,)}
FULL = {"hallucination": {"steps": 2500, "alpha": 0.001},
        "sizes": ((16, 16), (16, 32), (16, 64), (16, 128), (16, 256)), "subjects": LADDER, "steps": 1500,
        "seeds": (0, 1)}
"""The two run sizes: ``--quick`` keeps two of the full run's five MLP widths (2.5x apart in parameters,
against 6x) and one seed of two, and its larger hallucination init ``alpha`` gives a shorter plateau."""

KL_PLATEAU = 0.1
"""Largest ``KL(p(.|r) || p_model)`` (nats) on the stage for "the model outputs p(a|r)"."""


def hallucination_rows(result: HallucinationResult) -> list[Comparison]:
    """The hallucination claims of section 5 as comparison rows."""
    first, final, stage = result.trajectory.iloc[0], result.final, result.summary()
    where = (f"steps {stage['first_step']}-{stage['last_step']}" if result.has_stage else "no stage found")
    near = result.has_stage and max(abs(stage["loss_min"] - result.log_D), abs(stage["loss_max"] - result.log_D)) \
        <= 0.05 * result.log_D
    return [
        Comparison("initial loss = log|A| (uniform answer)", f"log|A| = {result.log_answers:.3f}",
                   f"{first['loss']:.3f}", bool(abs(first["loss"] - result.log_answers) < 0.05)),
        Comparison("loss plateaus at log D (hallucination stage)", f"log D = {result.log_D:.3f}",
                   f"{stage['loss_min']:.3f}-{stage['loss_max']:.3f} over {where}", bool(near),
                   f"stage = logged steps with relation-only loss < {RELATION_KNOWN} and subject-only loss > "
                   f"{SUBJECT_UNKNOWN} log D; holds if the loss stays within 5% of log D there"),
        Comparison("on the plateau the model outputs p(a|r)", "p_model = p(a|r)",
                   f"max KL(p(a|r)||p_model) = {stage['kl_max']:.3f} nats (log R = {first['kl_to_relation_prior']:.3f}"
                   " at init)", bool(result.has_stage and stage["kl_max"] < KL_PLATEAU),
                   f"holds if KL < {KL_PLATEAU} nats at every logged step of the stage"),
        Comparison("then the facts are stored (loss -> 0)", "accuracy 1, loss 0",
                   f"accuracy {final['fact_accuracy']:.3f}, loss {final['loss']:.3f}",
                   bool(final["fact_accuracy"] >= 0.99)),
    ]


SOFTMAX = {"model": "softmax", "steps": 600, "lr": 0.003, "d_model": 64, "d_head": 64, "d_mlp": 0}
"""Figure 5 (right) at CPU scale: one softmax head over random embeddings (d = 64, no MLP), Adam."""


def softmax_row(result: HallucinationResult) -> Comparison:
    """The softmax model's hallucination stage (the paper's figure 5 right) as a comparison row."""
    stage = result.summary()
    if result.has_stage:
        row = result.stage.loc[result.stage["relation_only_loss"].idxmin()]
        ours = (f"relation-only loss {row['relation_only_loss']:.3f}, subject-only loss {row['subject_only_loss']:.3f} "
                f"at steps {stage['first_step']}-{stage['last_step']} (log D = {result.log_D:.3f})")
    else:
        ours = "no step with the relation known and the subject unknown"
    return Comparison("softmax attention, random embeddings: the same stage (figure 5 right)",
                      "relation-only loss ~ 0 while subject-only loss is still high", ours, result.has_stage,
                      f"one head, d = 64, no MLP, Adam; stage rule as above; final accuracy "
                      f"{result.final['fact_accuracy']:.3f}")


def storage_rows(result: StorageResult) -> list[Comparison]:
    """The storage-capacity claims of section 4.4 as comparison rows."""
    cap = result.capacity
    pairs = ", ".join(f"{int(p)}->{int(f)}" for p, f in zip(cap["params"], cap["facts_stored"]))
    seeds = cap["seed"].nunique() if "seed" in cap else 1
    return [
        Comparison("facts stored at 99% grow linearly with parameters",
                   "linear: log-log slope 1 (figure 3 left)",
                   f"slope {result.exponent:.2f} (params->facts: {pairs}; {seeds} seed{'s' if seeds > 1 else ''})",
                   bool(0.75 <= result.exponent <= 1.25) if math.isfinite(result.exponent) else False,
                   "holds if the fitted log-log slope is in [0.75, 1.25]"),
        Comparison("storage constant (guide line)", "facts ~ params up to log factors; 'capacity ~ #params' (seed 002)",
                   f"{result.facts_per_param:.3f} facts/param = {result.bits_per_param:.2f} bits/param",
                   None, "the seeds give no numeric constant for the paper's guide line: reported, no verdict"),
    ]


def run(quick: bool = False, progress: bool = True, device: str | torch.device | None = None) -> Reproduction:
    """Both experiments at CPU scale; ``quick`` uses :data:`QUICK`, else :data:`FULL`; every model trains
    on ``device`` (default the CPU: the committed numbers)."""
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {quick!r}")
    torch.set_num_threads(1)
    plan = QUICK if quick else FULL
    start = time.perf_counter()
    halluc = hallucination_phase(progress=progress, device=device, **plan["hallucination"])
    softmax = hallucination_phase(progress=progress, device=device, **SOFTMAX)
    t_halluc = time.perf_counter() - start
    storage = storage_capacity(plan["sizes"], subjects=plan["subjects"], steps=plan["steps"], seeds=plan["seeds"],
                               progress=progress, device=device)
    t_storage = time.perf_counter() - start - t_halluc
    numbers = {
        "log_answers": halluc.log_answers, "log_D": halluc.log_D,
        **{f"stage_{key}": value for key, value in halluc.summary().items()},
        **{f"softmax_stage_{key}": value for key, value in softmax.summary().items()},
        "final_accuracy": halluc.final["fact_accuracy"], "exponent": storage.exponent,
        "facts_per_param": storage.facts_per_param, "bits_per_param": storage.bits_per_param,
        "seconds_hallucination": t_halluc, "seconds_storage": t_storage,
        "trajectory": halluc.trajectory.to_dict(orient="records"),
        "capacity": storage.capacity.to_dict(orient="records"),
        "runs": storage.runs.to_dict(orient="records"),
    }
    return Reproduction(
        name="factual", title="Factual recall and storage capacity (Nichani, Lee, Bietti 2024)", quick=quick,
        rows=(*hallucination_rows(halluc), softmax_row(softmax), *storage_rows(storage)), numbers=numbers,
        figures=_figures(halluc, softmax, storage), full_command=FULL_COMMAND,
    )


def _loss_figure(result: HallucinationResult, title: str):
    import plotly.graph_objects as go

    traj = result.trajectory
    figure = go.Figure()
    for column in ("loss", "relation_only_loss", "subject_only_loss", "kl_to_relation_prior"):
        figure.add_trace(go.Scatter(x=traj["step"], y=traj[column], mode="lines+markers", name=column))
    for value, label in ((result.log_answers, "log |A|"), (result.log_D, "log D")):
        figure.add_hline(y=value, line_dash="dot", annotation_text=label)
    figure.update_layout(title=title, xaxis_type="log", xaxis_title="step", yaxis_title="nats")
    return figure


def _figures(halluc: HallucinationResult, softmax: HallucinationResult, storage: StorageResult) -> dict[str, Any]:
    import plotly.graph_objects as go

    loss = _loss_figure(halluc, "Hallucination stage (linear attention, S=16, R=4, D=8)")
    soft = _loss_figure(softmax, "The same task, one softmax head over random embeddings (figure 5 right)")
    cap = storage.capacity
    scale = go.Figure(go.Scatter(x=cap["params"], y=cap["facts_stored"], mode="markers", name="ours"))
    xs = [float(cap["params"].min()), float(cap["params"].max())]
    scale.add_trace(go.Scatter(x=xs, y=[storage.facts_per_param * x for x in xs], mode="lines",
                               name=f"linear fit: {storage.facts_per_param:.3f} facts/param"))
    scale.update_layout(title="Facts stored at 99% accuracy vs trainable parameters", xaxis_type="log",
                        yaxis_type="log", xaxis_title="trainable parameters", yaxis_title="facts stored")
    return {"hallucination": loss, "hallucination (softmax)": soft, "storage capacity": scale}


def write_tables(result: Reproduction, out: str | Path, prefix: str = "factual_quick") -> list[Path]:
    """Write ``{prefix}.csv`` (the comparison), ``{prefix}_capacity.csv``, ``{prefix}_runs.csv`` and
    ``{prefix}_trajectory.csv`` into ``out`` (the tables behind the notebook and docs/factual.md)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frames = {"": result.to_dataframe().assign(seconds=round(result.seconds, 1)),
              "_capacity": pd.DataFrame(result.numbers["capacity"]),
              "_runs": pd.DataFrame(result.numbers["runs"]),
              "_trajectory": pd.DataFrame(result.numbers["trajectory"])}
    return [atomic_write_text(out / f"{prefix}{suffix}.csv", frame.to_csv(index=False))
            for suffix, frame in frames.items()]


DOCS_MARKERS = {"quick": ("<!-- factual-table:begin (generated by `python -m perm_circuits.systems.factual`) -->",
                          "<!-- factual-table:end -->"),
                "full": ("<!-- factual-full-table:begin (generated by `python -m perm_circuits.systems.factual --full`) -->",
                         "<!-- factual-full-table:end -->")}
"""The docs page's generated blocks: the quick run's tables and the full run's."""


def results_markdown(comparison: pd.DataFrame, capacity: pd.DataFrame, run: str = "quick") -> str:
    """The "paper vs ours" table and the capacity table as Markdown (what docs/factual.md shows)."""
    seconds = comparison["seconds"].iloc[0] if "seconds" in comparison else float("nan")
    command = "perm-circuits reproduce factual" + (" --quick" if run == "quick" else "")
    lines = [f"{run.capitalize()} run (`{command}`), {seconds:.0f} s on one CPU core.", "", *comparison_table(comparison)]
    lines += ["", "| seed | d_model | d_mlp | trainable params | facts stored at 99% | runs |", "|---|---|---|---|---|---|"]
    for row in capacity.itertuples(index=False):
        lines.append(f"| {row.seed} | {row.d_model} | {row.d_mlp} | {row.params} | {row.facts_stored} | {row.runs} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perm_circuits.systems.factual [--full] [--out results] [--docs docs/factual.md]``:
    run the reproduction, write its tables, and regenerate the docs page's table from them."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--full", action="store_true", help="the full run (default: --quick)")
    parser.add_argument("--out", default="results")
    parser.add_argument("--docs", default=None, help="a page with the factual-table markers to regenerate")
    args = parser.parse_args(argv)
    from perm_circuits.reproduce import reproduce

    result = reproduce("factual", quick=not args.full)
    print(result.to_text())
    run = "full" if args.full else "quick"
    paths = write_tables(result, args.out, f"factual_{run}")
    if args.docs:
        frames = [pd.read_csv(paths[0]), pd.read_csv(paths[1])]
        page = Path(args.docs).read_text()
        atomic_write_text(args.docs, replace_section(page, results_markdown(*frames, run=run), *DOCS_MARKERS[run]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
