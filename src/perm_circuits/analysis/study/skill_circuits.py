"""The circuit :func:`~perm_circuits.analysis.study.verdict.head_roles` proposes per skill, judged by
the IOI criteria of Wang et al. 2022 ("Interpretability in the Wild", section 4): faithfulness,
completeness and minimality, defined in :mod:`perm_circuits.analysis.circuits.criteria`. A circuit
faithful under one ablation mode only is a claim about that mode, not about the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from perm_circuits.analysis.circuits.criteria import (
    CircuitMetrics, FaithfulnessByMode, Node, circuit_metrics, faithfulness_by_mode, propose_circuit, shared_ablations,
    skill_logit_diff,
)
from perm_circuits.hooks import HookList
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["CIRCUIT_MAX_N", "CIRCUIT_TOLERANCE", "SkillCircuit", "skill_circuits"]

CIRCUIT_MAX_N = 2000
"""Most test sequences the circuit step of :func:`~perm_circuits.analysis.study.verdict.head_roles`
uses (the first ones of its batch).

The circuit step (propose a circuit per skill, measure it, its faithfulness under every mode)
costs some 60 forwards and an optimal-ablation search per component, so it runs on at most
2,000 sequences (the report's ``ROLES_MAX_N``, and the default ``n`` of
:func:`~perm_circuits.analysis.circuits.criteria.circuit_metrics`).
Fewer would be cheaper but d32h2's elimination circuit sits on the proposal's tolerance
(faithfulness error 0.098 on these 2,000, 0.105 on the first 1,000, which then keeps L0H0)."""

CIRCUIT_TOLERANCE = 0.1
"""A circuit is *faithful* under a mode when its ``faithfulness_error`` is at most this (the
tolerance :func:`~perm_circuits.analysis.circuits.criteria.propose_circuit` grows the circuit to)."""


@dataclass(frozen=True)
class SkillCircuit:
    """The circuit :func:`~perm_circuits.analysis.study.verdict.head_roles` proposes for one skill, judged
    by the IOI criteria.

    ``nodes`` come from :func:`~perm_circuits.analysis.circuits.criteria.propose_circuit` under the
    verdict's decision mode; ``metrics`` is :func:`~perm_circuits.analysis.circuits.criteria.circuit_metrics`
    under that mode (read the ``skill`` subgroup: :attr:`measured`); ``by_mode`` is
    :func:`~perm_circuits.analysis.circuits.criteria.faithfulness_by_mode` under every mode the verdict
    judged.  Faithful under a mode = ``faithfulness_error <= tolerance``.
    """

    skill: str
    how: str
    nodes: tuple[str, ...]
    metrics: CircuitMetrics = field(repr=False)
    by_mode: FaithfulnessByMode = field(repr=False)
    tolerance: float = CIRCUIT_TOLERANCE

    @property
    def measured(self):
        """The :class:`~perm_circuits.analysis.circuits.criteria.SubgroupCircuitMetrics` of the skill."""
        return self.metrics.subgroup(self.skill)

    @property
    def mode_rows(self) -> tuple:
        """The skill's :class:`~perm_circuits.analysis.circuits.criteria.FaithfulnessRow` under every mode judged."""
        return tuple(row for row in self.by_mode.rows if row.subgroup == self.skill)

    @property
    def faithful_by_how(self) -> tuple[tuple[str, bool], ...]:
        """``(mode, faithful)`` for every mode judged (nan error counts as not faithful)."""
        return tuple((row.how, bool(row.faithfulness_error <= self.tolerance)) for row in self.mode_rows)

    @property
    def mode_dependent(self) -> bool:
        """True when the circuit is faithful under some modes and not under others."""
        return len({ok for _, ok in self.faithful_by_how}) > 1

    def note(self) -> str:
        """The mode sensitivity in words, e.g. ``"faithful under mean (0.90) but not under zero (error 1.44)"``."""
        rows = {row.how: row for row in self.mode_rows}
        good = [h for h, ok in self.faithful_by_how if ok]
        bad = [h for h, ok in self.faithful_by_how if not ok]
        if not bad:
            return f"faithful under every mode ({', '.join(good)})"
        if not good:
            return "not faithful under any mode (" + ", ".join(
                f"{h}: error {rows[h].faithfulness_error:.2f}" for h in bad) + ")"
        return ("faithful under " + ", ".join(f"{h} ({rows[h].faithfulness:.2f})" for h in good)
                + " but not under " + ", ".join(f"{h} (error {rows[h].faithfulness_error:.2f})" for h in bad))

    def summary(self) -> str:
        """One line: nodes, faithfulness, completeness, smallest minimality, mode sensitivity."""
        m = self.measured
        smallest = min((e.minimality for e in m.minimality), default=math.nan)
        return (f"{self.skill}: {{{', '.join(self.nodes)}}}: faithfulness {m.faithfulness:.2f} "
                f"(error {m.faithfulness_error:.2f}), completeness {m.completeness:.2f} "
                f"({self.metrics.completeness_method}), min minimality {smallest:.2f} under {self.how}; "
                f"{self.note()}{' [mode-dependent]' if self.mode_dependent else ''}.")


def skill_circuits(
    model, batch: TaskBatch, config: TaskConfig, how: str, hows: tuple[str, ...], hooks: HookList,
    ablation_seed: int, skills: Sequence[str], reference: str | TaskBatch = "test",
) -> tuple[SkillCircuit, ...]:
    """Step 5 of :func:`~perm_circuits.analysis.study.verdict.head_roles`: a circuit per skill in ``skills``.

    Proposed with :func:`propose_circuit` under ``how`` on the first :data:`CIRCUIT_MAX_N` rows of
    ``batch`` (tolerance :data:`CIRCUIT_TOLERANCE`), measured with :func:`circuit_metrics` under
    ``how`` and :func:`faithfulness_by_mode` under ``hows`` (skills with the same nodes share one
    measurement).  A skill without rows, or whose model F is exactly 0, gets no circuit.  ``reference``
    (``"test"``, ``"skill"`` or a batch) is the verdict's: every proposal and measurement draws its
    ablated values from it (:mod:`~perm_circuits.analysis.circuits.reference`).
    """
    first = torch.arange(CIRCUIT_MAX_N, device=batch.tokens.device)
    sub = batch if len(batch) <= CIRCUIT_MAX_N else batch.subset(first)
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks)):
        per_row = skill_logit_diff(model(sub.tokens), sub)
    f_model = {"elimination": per_row[~sub.extras["repeated"]], "recall": per_row[sub.extras["repeated"]]}
    options = dict(task=config, hooks=hooks, ablation_seed=ablation_seed, reference=reference)
    measured: dict[tuple[Node, ...], tuple[CircuitMetrics, FaithfulnessByMode]] = {}
    out = []
    with shared_ablations():  # each component's ablation is built once for every skill and measurement
        for skill in skills:
            values = f_model[skill]
            if len(values) == 0 or float(values.mean()) == 0:  # no rows, or nothing to explain
                continue
            nodes = propose_circuit(model, skill, sub, how=how, tolerance=CIRCUIT_TOLERANCE, **options)
            if nodes not in measured:
                measured[nodes] = (circuit_metrics(model, nodes, sub, how=how, **options),
                                   faithfulness_by_mode(model, nodes, sub, hows=hows, **options))
            metrics, by_mode = measured[nodes]
            out.append(SkillCircuit(skill=skill, how=how, nodes=tuple(v.name for v in nodes), metrics=metrics,
                                    by_mode=by_mode))
    return tuple(out)
