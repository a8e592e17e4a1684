"""The one-line findings that open a task report, generated from the report's computed numbers.

:func:`task_findings` reads a :class:`~perm_circuits.analysis.report_data.TaskReportData` and
returns three to five sentences, each stating numbers that the report computed (nothing is
estimated here) and each naming its ablation mode, or "no ablation" for a plain forward pass.
Candidates, in order of priority (the first five that apply are kept):

1. the task's metrics on the test set;
2. each discovered circuit (its method, ablation mode, size, faithfulness and strongest edge;
   ACDC, Conmy et al. 2023);
3. the component whose ablation lowers the primary metric most, under the first ablation mode
   (Wang et al. 2022);
4. the proposed circuit's size, faithfulness and completeness under mean ablation (Wang et al. 2022);
5. the strongest attention pattern (previous token, self or first position; Olsson et al. 2022);
6. the component whose activation patching restores the most (Meng et al. 2022);
7. the largest direct logit attribution (Elhage et al. 2021);
8. the same as 3 under the second ablation mode;
9. always-available fallbacks: the top-token match on the shown sequences, the agreement with the
   task's reference, the test loss and the model's parameter count.
"""

from __future__ import annotations

import math
from typing import Any

from perm_circuits.circuit import Node

__all__ = ["task_findings"]


def _metrics(data: Any) -> list[str]:
    shown = list(data.evaluation.metrics.items())[:3]
    if not shown:
        return []
    return [f"Task metrics on {data.evaluation.n_samples} test sequences (no ablation): "
            + ", ".join(f"{k} {v:.3f}" for k, v in shown) + "."]


def discovered_sentence(result: Any) -> str:
    """``"circuit (ACDC, resample ablation): 5 of 40 edges, faithfulness 0.93; strongest edge X."``"""
    strongest = max(result.circuit, key=lambda edge: abs(float(result.scores[edge]))) if result.circuit else "none"
    return (f"circuit ({result.method.upper()}, {result.how} ablation): {result.n_edges} of {len(result.scores)} "
            f"edges, faithfulness {result.faithfulness:.2f}; strongest edge {strongest}.")


def _ablation(data: Any, index: int) -> list[str]:
    table = data.ablation
    if table is None or not table.metric_names:
        return []
    metric = table.primary_metric
    frame = table.to_dataframe()
    frame = frame[frame["component"] != "none"]
    hows = list(dict.fromkeys(frame["how"]))
    if index >= len(hows):
        return []
    rows = frame[frame["how"] == hows[index]]
    worst = rows.loc[rows[f"delta_{metric}"].idxmin()]
    base = table.baseline.metrics[metric]
    return [f"Most important component under {hows[index]} ablation: {worst['component']} "
            f"({metric} {base:.3f} -> {base + worst[f'delta_{metric}']:.3f}, change {worst[f'delta_{metric}']:+.3f})."]


def _circuit(data: Any) -> list[str]:
    if data.circuit is None or not data.circuit.subgroups:
        return []
    group = data.circuit.subgroups[0]
    nodes = data.circuit.circuit
    return [f"Proposed circuit ({data.circuit.how} ablation): {len(nodes)} component(s) "
            f"({', '.join(nodes) or 'none'}), faithfulness {group.faithfulness:.3f}, "
            f"completeness {group.completeness:.3f}."]


def _attention(data: Any) -> list[str]:
    scores = data.attention
    if scores is None or not scores.heads:
        return []
    kinds = (("the previous position", scores.previous_score), ("itself", scores.self_score),
             ("position 0", scores.first_score))
    value, where, head = max((v, where, h) for where, values in kinds for h, v in zip(scores.heads, values))
    return [f"Top attention pattern (no ablation): {head} attends to {where} with mean weight {value:.2f} "
            "over query positions >= 1."]


def _patching(data: Any) -> list[str]:
    patches = [p for p in data.patching or () if not math.isnan(p.effect)]
    if not patches:
        return []
    top = max(patches, key=lambda p: p.effect)
    name = str(Node(top.layer, top.head))
    return [f"Activation patching (no ablation; activations from another test sequence): {name} restores "
            f"{top.effect:.2f} of the targets' log-probability ({top.confidence:.0%} CI {top.ci_low:.2f} to "
            f"{top.ci_high:.2f}, {top.n} sequences)."]


def _attribution(data: Any) -> list[str]:
    dla = data.attribution
    if dla is None or not dla.components:
        return []
    value, component = max((abs(v), c) for c, v in zip(dla.components, dla.values))
    return [f"Direct logit attribution (no ablation): {component} pushes logit(target) - mean logit by "
            f"{dla.get(component):+.2f} of the model's {dla.total:+.2f}, over {dla.n} test sequences."]


def _fallbacks(data: Any) -> list[str]:
    lines = []
    hits = total = 0
    for frame in data.sequences:
        loss = frame["loss weight"] > 0
        hits += int((frame["model's top token"][loss] == frame["target"][loss]).sum())
        total += int(loss.sum())
    if total:
        lines.append(f"On the {len(data.sequences)} shown test sequence(s) (no ablation), the model's top token is "
                     f"the target at {hits} of {total} loss positions.")
    reference = list(data.evaluation.reference.items())[:2]
    if reference:
        lines.append("Agreement with the task's reference (no ablation): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in reference) + ".")
    lines.append(f"Test loss (no ablation): {data.evaluation.test_loss:.3f} nats of masked next-token "
                 f"cross-entropy over {data.evaluation.n_samples} test sequences.")
    lines.append(f"Model size: {data.about['parameters']} parameters, {data.about['trainable parameters']} "
                 "trainable (no ablation).")
    return lines


def task_findings(data: Any) -> tuple[str, ...]:
    """Three to five one-line findings of a task report (module docstring), each naming its ablation mode.

    ``data``: a :class:`~perm_circuits.analysis.report_data.TaskReportData` (its ``findings`` are ignored).
    """
    skills = [f"Discovered {skill} {discovered_sentence(result)}" for skill, result in data.skills.items()]
    lines = (_metrics(data) + skills + _ablation(data, 0) + _circuit(data) + _attention(data)
             + _patching(data) + _attribution(data) + _ablation(data, 1) + _fallbacks(data))
    return tuple(lines[:5])
