"""Evaluation figures of the study: per-step accuracy vs the Bayesian target (section 06), the
five-step walkthrough (section 06) and the memorization probe (section 07)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perm_circuits.analysis.figure_results import STUDY_SEQUENCE, ProbeDistribution, Walkthrough
from perm_circuits.evaluate import Evaluation, PermutationDetail
from perm_circuits.tasks.permutation_data import PROBE_SEQUENCE
from perm_circuits.views.figure_style import (
    BAYES_COLOR,
    BAYES_TRAIN_COLOR,
    ELIMINATION_COLOR,
    MODEL_COLOR,
    MODEL_PALETTE,
    NEUTRAL_COLORS,
    RECALL_COLOR,
    check_result,
    format_sequence,
    house_style,
)

__all__ = ["STUDY_SEQUENCE", "probe_distribution", "step_accuracy", "walkthrough"]

def _unique_names(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def step_accuracy(*evaluations: Evaluation, prior: str = "uniform") -> go.Figure:
    """Per-step accuracy vs the Bayesian target accuracy, with MAE vs the posterior (section 06).

    Bars: each model's categorical accuracy at steps ``1..V``.  Lines: the accuracy the exact
    Bayesian predictor reaches (its mean probability on the target), with the uniform prior
    (``StepMetrics.bayes_accuracy``) and the train-split prior (``bayes_accuracy_train``).
    Dotted lines on the right axis: each model's mean absolute error against the posterior of
    ``prior``; hover shows the max error too, and at the last step the elimination and recall
    (memorization-subgroup) accuracies.

    Args:
        evaluations: one or more :class:`~perm_circuits.evaluate.Evaluation` of the permutation task
            (their ``detail`` a :class:`~perm_circuits.evaluate.PermutationDetail`; several: compared).
        prior: which posterior the MAE line measures against: ``"uniform"`` or ``"train"``.
    """
    if not evaluations:
        raise ValueError("step_accuracy needs at least one Evaluation")
    for index, evaluation in enumerate(evaluations):
        if not isinstance(evaluation, Evaluation):
            raise TypeError(f"evaluations[{index}] must be a perm_circuits.evaluate.Evaluation, "
                            f"got {type(evaluation).__name__}")
        if not isinstance(evaluation.detail, PermutationDetail):
            raise ValueError(f"evaluations[{index}] is an evaluation on task {evaluation.task!r}: step_accuracy draws "
                             "the permutation task's per-step breakdown")
    if prior not in ("uniform", "train"):
        raise ValueError(f"prior must be 'uniform' or 'train', got {prior!r}")
    n_steps = {len(e.detail.steps) for e in evaluations}
    if len(n_steps) != 1:
        raise ValueError(f"evaluations have different numbers of steps {sorted(n_steps)}")
    names = _unique_names([e.model_name for e in evaluations])
    steps = [s.step for s in evaluations[0].detail.steps]
    x = [f"step {k}<br>({k - 1} pairs seen)" for k in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for index, (name, evaluation) in enumerate(zip(names, evaluations)):
        color = MODEL_PALETTE[index % len(MODEL_PALETTE)] if len(evaluations) > 1 else MODEL_COLOR
        detail = evaluation.detail
        accuracy = [s.accuracy for s in detail.steps]
        last = f"<br>last step: elimination {detail.elimination_accuracy:.2%}"
        if detail.memorization is not None:
            last += f", recall {detail.recall_accuracy:.2%}"
        extra = [""] * (len(steps) - 1) + [last]
        fig.add_trace(
            go.Bar(x=x, y=accuracy, name=f"{name} accuracy", marker_color=color, text=[f"{a:.1%}" for a in accuracy],
                textposition="outside", textfont={"size": 10}, textangle=0, customdata=extra, legendgroup=name,
                hovertemplate=f"{name}<br>%{{x}}<br>accuracy %{{y:.2%}}%{{customdata}}<extra></extra>"),
            secondary_y=False,
        )
        mae = [s.mae_uniform if prior == "uniform" else s.mae_train for s in detail.steps]
        max_ae = [s.max_ae_uniform if prior == "uniform" else s.max_ae_train for s in detail.steps]
        fig.add_trace(
            go.Scatter(x=x, y=mae, name=f"{name} MAE vs {prior}-prior posterior", mode="lines+markers",
                line={"color": color, "dash": "dot"}, marker={"symbol": "diamond", "size": 9}, customdata=max_ae,
                legendgroup=name, hovertemplate=f"{name}<br>%{{x}}<br>MAE vs {prior} posterior %{{y:.6f}}"
                                                "<br>max AE %{customdata:.6f}<extra></extra>"),
            secondary_y=True,
        )
    # the Bayesian targets depend on the test set only: draw each distinct one once
    keys = [_bayes_key(e) for e in evaluations]
    for index, (name, evaluation) in enumerate(zip(names, evaluations)):
        if keys[index] in keys[:index]:
            continue
        suffix = "" if len(set(keys)) == 1 else f" ({name} test set)"
        for values, label, color, dash in (
            ([s.bayes_accuracy for s in evaluation.detail.steps], "uniform prior", BAYES_COLOR, "dash"),
            ([s.bayes_accuracy_train for s in evaluation.detail.steps], "train prior", BAYES_TRAIN_COLOR, "dashdot"),
        ):
            fig.add_trace(
                go.Scatter(x=x, y=values, name=f"Bayesian target, {label}{suffix}", mode="lines+markers",
                    line={"color": color, "dash": dash, "width": 2}, marker={"symbol": "line-ew-open", "size": 14},
                    hovertemplate=f"Bayesian target ({label}){suffix}<br>%{{x}}<br>accuracy %{{y:.2%}}<extra></extra>"),
                secondary_y=False,
            )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="accuracy", tickformat=".0%", range=[0, 1.12], secondary_y=False)
    fig.update_yaxes(title_text=f"MAE vs {prior}-prior posterior", showgrid=False, rangemode="tozero", tickformat=".3f",
        secondary_y=True)
    n = evaluations[0].n_samples
    title = f"Per-step accuracy vs the Bayesian target ({', '.join(names)}; {n} test sequences)"
    return house_style(fig, title, x_title="y-prediction step", height=520, width=max(760, 260 + 160 * len(steps)))


def _bayes_key(evaluation: Evaluation) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return (
        tuple(round(s.bayes_accuracy, 9) for s in evaluation.detail.steps),
        tuple(round(s.bayes_accuracy_train, 9) for s in evaluation.detail.steps),
    )


def walkthrough(data: Walkthrough) -> go.Figure:
    """The study's five-step walkthrough (section 06): predicted distribution vs the posterior, from
    :func:`~perm_circuits.analysis.figure_data.walkthrough_distributions`.

    One subplot per y-prediction step ``k``: the model's P(y = v) for ``v = 1..V`` next to the
    exact Bayesian posterior with the uniform prior and with the train-split prior
    (:func:`~perm_circuits.posterior.bayes_posterior`).  Tick labels mark the target (``✓``),
    the values already used (``✕``), and at a repeated last query the recall answer and the
    elimination trap.  The last step's target is the uniform posterior's point mass (the
    unused value, or the earlier ``y`` of a repeated query).
    """
    check_result("data", data, Walkthrough, "analysis.figure_data.walkthrough_distributions(model, tokens)")
    V = data.V
    model_probs = data.model_probs
    ids = list(data.tokens)
    xs, ys = ids[0::2], ids[1::2]
    targets = ys + [int(data.uniform[-1].argmax()) + 1]
    values = list(range(1, V + 1))

    titles = []
    for k in range(V):
        used = ",".join(str(y) for y in ys[:k]) or "none"
        seen = format_sequence(ids[: 2 * k + 1])
        titles.append(f"<b>Step {k + 1}</b>: {seen} → ?<br>used y: {used} · target y={targets[k]}")
    fig = make_subplots(rows=1, cols=V, subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.025)
    for k in range(V):
        used = set(ys[:k])
        repeated = xs[k] in xs[:k]
        trap = next(iter(set(values) - used)) if repeated and len(used) == V - 1 else None
        notes = {v: "<br>✕ used" for v in used} | ({} if trap is None else {trap: "<br>trap"})
        notes[targets[k]] = f"<br>✓ {'recall' if repeated else 'target'}"  # the target's note wins
        ticks = [f"y={v}{notes.get(v, '')}" for v in values]
        fallback = data.train_fallback[k]
        series = (
            ("model", model_probs[k], MODEL_COLOR, True),
            ("Bayes, uniform prior", data.uniform[k], BAYES_COLOR, False),
            ("Bayes, train prior" + (" (= uniform: no train permutation fits)" if fallback else ""),
             data.train[k], BAYES_TRAIN_COLOR, False),
        )
        for name, probs, color, labelled in series:
            group = name.split(" (")[0]
            outline = [RECALL_COLOR if repeated and v == targets[k] else ELIMINATION_COLOR if v == trap else color
                       for v in values]
            fig.add_trace(
                go.Bar(x=ticks, y=probs.tolist(), name=group, legendgroup=group, showlegend=k == 0, marker_color=color,
                    marker_line={"color": outline, "width": 2},
                    text=[f"{p:.3f}" for p in probs.tolist()] if labelled else None, textposition="outside",
                    textfont={"size": 10, "color": MODEL_COLOR}, textangle=0, cliponaxis=False,
                    hovertemplate=f"step {k + 1}, {name}<br>P(%{{x}}) = %{{y:.4f}}<extra></extra>"),
                row=1, col=k + 1,
            )
        fig.update_xaxes(type="category", tickfont={"size": 10}, row=1, col=k + 1)
    fig.update_layout(barmode="group", bargap=0.15, bargroupgap=0.0, uniformtext={"minsize": 8, "mode": "show"})
    fig.update_annotations(font_size=12)
    fig.update_yaxes(range=[0, 1.1], title_text="P(y = v)", row=1, col=1)
    fig.update_xaxes(title_text="value v")
    title = (
        f"{data.model_name}: predicted distribution vs exact Bayesian posterior, "
        f"step by step on {format_sequence(ids)}"
    )
    return house_style(fig, title, height=560, width=max(900, 320 * V))


def probe_distribution(data: ProbeDistribution) -> go.Figure:
    """P(y = v) at the last position of the probe ``[2,4, 5,3, 4,5, 3,2, 2]`` per model (section 07),
    from :func:`~perm_circuits.analysis.figure_data.probe_distributions`.

    ``x5 = x1 = 2``: recall answers 4 (orange), elimination's trap is 1, the only unused value
    (blue).  One bar group per model, in the given order; the other values are grey.
    """
    check_result("data", data, ProbeDistribution, "analysis.figure_data.probe_distributions({name: model})")
    probs = data.probs
    names = list(probs)
    fig = go.Figure()
    neutral = iter(NEUTRAL_COLORS)
    for v in range(1, 6):
        role = {1: " (elimination trap)", 4: " (recall answer)"}.get(v, "")
        color = {1: ELIMINATION_COLOR, 4: RECALL_COLOR}.get(v) or next(neutral)
        y = [probs[name][v - 1] for name in names]
        fig.add_trace(
            go.Bar(x=names, y=y, name=f"y={v}{role}", marker_color=color,
                text=[f"{p:.4f}" for p in y] if role else None, textposition="outside",
                hovertemplate=f"%{{x}}<br>P(y={v}){role} = %{{y:.4f}}<extra></extra>")
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.12])
    title = f"Probe {format_sequence(list(PROBE_SEQUENCE))} → ?: recall answer 4 vs elimination trap 1"
    return house_style(fig, title, x_title="model", y_title="P(y = v) at the last query", height=480,
                  width=max(640, 300 + 200 * len(names)))
