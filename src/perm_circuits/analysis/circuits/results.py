"""The results of the IOI-style circuit evaluation (faithfulness, completeness, minimality; Wang et
al. 2022), defined in :mod:`perm_circuits.analysis.circuits.criteria`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from perm_circuits.analysis.circuits.nodes import SUBGROUPS, Node

__all__ = [
    "CircuitMetrics", "FaithfulnessByMode", "FaithfulnessRow", "NodeMinimality", "ProposedCircuit",
    "SubgroupCircuitMetrics",
]


@dataclass(frozen=True)
class NodeMinimality:
    """Minimality of one node on one subgroup: ``max_K |F(C \\ (K + v)) - F(C \\ K)|`` and its K."""

    node: str
    subgroup: str
    minimality: float
    relative: float
    subset: tuple[str, ...]


@dataclass(frozen=True)
class SubgroupCircuitMetrics:
    """The three IOI numbers on one subgroup (see the module docstring for each definition)."""

    subgroup: str
    n: int
    f_model: float
    f_circuit: float
    faithfulness: float
    faithfulness_error: float
    completeness: float
    completeness_relative: float
    completeness_subset: tuple[str, ...]
    minimality: tuple[NodeMinimality, ...]

    def node(self, node: str | Node) -> NodeMinimality:
        """The minimality entry of ``node`` (a Node or its name, e.g. ``"L0H1@last"``)."""
        name = node.name if isinstance(node, Node) else Node.parse(node).name
        for entry in self.minimality:
            if entry.node == name:
                return entry
        raise KeyError(f"{name} is not in the circuit; nodes: {[m.node for m in self.minimality]}")


@dataclass(frozen=True)
class CircuitMetrics:
    """Result of :func:`circuit_metrics`: faithfulness, completeness and minimality per subgroup."""

    model_name: str
    how: str
    circuit: tuple[str, ...]
    n_samples: int
    completeness_method: str
    n_subsets_checked: int
    elimination: SubgroupCircuitMetrics | None = None
    recall: SubgroupCircuitMetrics | None = None
    groups: tuple[SubgroupCircuitMetrics, ...] = ()
    reference: str = "test"  # where the ablated values came from: "test", "skill" or "custom" (a batch)

    @property
    def subgroups(self) -> tuple[SubgroupCircuitMetrics, ...]:
        """Every subgroup measured: elimination and recall on the permutation task, ``"all"`` on any task."""
        if self.groups:
            return self.groups
        return tuple(g for g in (self.elimination, self.recall) if g is not None)

    def subgroup(self, name: str) -> SubgroupCircuitMetrics:
        names = tuple(g.subgroup for g in self.subgroups)
        if name not in names:
            raise ValueError(f"subgroup must be one of {names or SUBGROUPS}, got {name!r}")
        return next(g for g in self.subgroups if g.subgroup == name)

    def to_dataframe(self) -> pd.DataFrame:
        """Tidy: one row per (subgroup, metric[, node]); columns ``model, how, subgroup, metric,
        node, value, relative, subset`` (``subset``: the worst K, nodes joined by ``+``)."""
        rows = []
        for group in self.subgroups:
            base = dict(model=self.model_name, how=self.how, subgroup=group.subgroup)
            for metric, value, relative, subset in (
                ("F_model", group.f_model, math.nan, ()),
                ("F_circuit", group.f_circuit, math.nan, ()),
                ("faithfulness", group.faithfulness, math.nan, ()),
                ("faithfulness_error", group.faithfulness_error, math.nan, ()),
                ("completeness", group.completeness, group.completeness_relative, group.completeness_subset),
            ):
                rows.append({**base, "metric": metric, "node": "", "value": value, "relative": relative,
                             "subset": "+".join(subset)})
            for entry in group.minimality:
                rows.append({**base, "metric": "minimality", "node": entry.node, "value": entry.minimality,
                             "relative": entry.relative, "subset": "+".join(entry.subset)})
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class FaithfulnessRow:
    """Faithfulness of the circuit under one ablation mode on one subgroup."""

    how: str
    subgroup: str
    f_model: float
    f_circuit: float
    faithfulness: float
    faithfulness_error: float


@dataclass(frozen=True)
class FaithfulnessByMode:
    """Result of :func:`faithfulness_by_mode`: one row per (mode, subgroup)."""

    model_name: str
    circuit: tuple[str, ...]
    rows: tuple[FaithfulnessRow, ...]
    reference: str = "test"  # where the ablated values came from: "test", "skill" or "custom" (a batch)

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([{"model": self.model_name, **asdict(row)} for row in self.rows])

    def get(self, how: str, subgroup: str) -> FaithfulnessRow:
        for row in self.rows:
            if row.how == how and row.subgroup == subgroup:
                return row
        raise KeyError(f"no row for how={how!r}, subgroup={subgroup!r}")


class ProposedCircuit(tuple):
    """Result of :func:`propose_circuit`: its nodes (a tuple of :class:`Node`, canonical order, equal to the
    plain tuple of the same nodes) and ``reference``, where the ablated values came from while proposing:
    ``"test"``, ``"skill"`` or ``"custom"`` (a batch)."""

    reference: str

    def __new__(cls, nodes=(), reference: str = "test") -> ProposedCircuit:
        self = super().__new__(cls, nodes)
        self.reference = reference
        return self

    def __repr__(self) -> str:
        return f"ProposedCircuit({tuple(self)!r}, reference={self.reference!r})"

    def __reduce__(self):
        return (ProposedCircuit, (tuple(self), self.reference))
