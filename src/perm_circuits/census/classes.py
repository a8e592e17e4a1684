"""Mechanism classes: models grouped by a stated rule on their fingerprints, not by clustering.

The rule (one ablation mode and one reference at a time; the census page reports every pair, so a
class frequency that changes with the mode or the reference is seen, not hidden):

1. A skill whose accuracy is below :data:`~perm_circuits.census.fingerprint.SKILL_CAPABLE` has no
   circuit: ``no recall`` (the model eliminates only) or ``no skill`` (neither skill).
2. Otherwise the class is read from the two oracle circuits (the smallest component sets keeping
   faithfulness 0.9 on each skill) and from which head carries the duplicate-token pattern:

   * **duplicate-gated**: a duplicate-token head (the last query attends to the x it repeats,
     :data:`~perm_circuits.analysis.study.scores.RoleThresholds.duplicate_score`) is in the recall
     circuit: it flags "this query repeats" for the MLP (``dup:R`` in the key; ``dup:RE`` when the
     elimination circuit needs it too, as it does when its ablated value is drawn from repeated rows);
   * **shared-head**: the recall circuit's heads are all in the elimination circuit (one attention
     read serves both skills; the MLP tells them apart);
   * **separate-heads**: the recall circuit has a head the elimination circuit lacks, and it is not a
     duplicate-token head;
   * **attention-free recall**: the recall circuit has no head.

The default mode and reference are the library's own defaults, not chosen for the story they tell:
mean ablation is the mode :func:`~perm_circuits.analysis.study.verdict.head_roles` decides under, and the
test set (both skills, as the task presents them) is its reference.  Against the skill's own rows, a
component that only tells the skills apart (a repeat detector) carries nothing within one skill and
drops out of the circuits; against the test set, ablating it feeds the other skill's signal in.  The
census page shows the classes under every (mode, reference) pair.

The class *key* spells the circuits without head labels (heads of one layer are interchangeable
between seeds: seed 3's L0H1 may be seed 4's L0H0): per layer the number of heads and whether its MLP
is in, e.g. ``E[L0:2H+MLP] R[L0:2H+MLP] dup:R``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perm_circuits.circuit import Node, is_component

__all__ = ["CLASS_DESCRIPTIONS", "CLASS_ORDER", "MechanismClass", "canonical_circuit", "classify", "mechanism_class",
           "wilson_interval"]

CLASS_ORDER = ("duplicate-gated", "shared-head", "separate-heads", "attention-free recall", "no recall", "no skill")

CLASS_DESCRIPTIONS = {
    "duplicate-gated": "a duplicate-token head (the repeated query attends to its earlier x) is in the recall "
                       "circuit only: it flags the repeat and the MLP looks the answer up",
    "shared-head": "the same heads serve elimination and recall: one attention read, the MLP tells the skills apart",
    "separate-heads": "recall uses a head that elimination does not, without the duplicate-token pattern",
    "attention-free recall": "the recall circuit holds no head",
    "no recall": "the model eliminates but does not recall (recall accuracy below the capability bar)",
    "no skill": "neither skill reaches the capability bar",
}

def _components(circuit: str) -> list[tuple[int, int | None]]:
    """``"L0H1+L0MLP"`` -> ``[(0, 1), (0, None)]``; ``"-"`` -> ``[]``."""
    if circuit in ("-", ""):
        return []
    out = []
    for part in circuit.split("+"):
        if not is_component(part):
            raise ValueError(f"not a component: {part!r} in circuit {circuit!r}")
        node = Node.parse(part)
        out.append((node.layer, node.head))
    return out


def canonical_circuit(circuit: str) -> str:
    """A circuit without head labels: per layer, the number of heads and ``+MLP`` when its MLP is in,
    e.g. ``"L0H1+L0MLP"`` -> ``"L0:1H+MLP"``, ``"L0H0+L1H0+L1MLP"`` -> ``"L0:1H L1:1H+MLP"``, ``"-"`` -> ``"-"``."""
    layers: dict[int, list] = {}
    for layer, head in _components(circuit):
        layers.setdefault(layer, [0, False])
        if head is None:
            layers[layer][1] = True
        else:
            layers[layer][0] += 1
    if not layers:
        return "-"
    return " ".join(f"L{layer}:{heads}H" + ("+MLP" if mlp else "") for layer, (heads, mlp) in sorted(layers.items()))


@dataclass(frozen=True)
class MechanismClass:
    """A model's class under one mode and reference: ``name`` (of :data:`CLASS_ORDER`), ``key`` (the
    label-free circuits) and a one-line ``description`` generated from the fingerprint."""

    name: str
    key: str
    description: str


def mechanism_class(record: Mapping[str, Any], *, how: str = "mean", reference: str = "test") -> MechanismClass:
    """The class of one fingerprint record (:meth:`Fingerprint.to_dict` or a census table row) by the
    module's rule, from its circuits under ``how`` against ``reference``."""
    try:
        elim = str(record[f"circuit_elimination_{how}_{reference}"])
        recall = str(record[f"circuit_recall_{how}_{reference}"])
        duplicate = str(record["duplicate_heads"])
    except KeyError as error:
        raise ValueError(f"the record has no {error.args[0]!r} column: a mechanism_fingerprint row with "
                         f"circuits under how={how!r}, reference={reference!r} is needed") from None
    if elim in ("absent", "none") and recall in ("absent", "none"):
        return MechanismClass("no skill", "E[-] R[-]", f"{CLASS_DESCRIPTIONS['no skill']} (E[-] R[-])")
    if recall in ("absent", "none"):
        key = f"E[{canonical_circuit(elim) if elim not in ('absent', 'none') else '-'}] R[-]"
        return MechanismClass("no recall", key, f"{CLASS_DESCRIPTIONS['no recall']} ({key})")
    elim_parts = set() if elim in ("absent", "none") else set(_components(elim))
    recall_parts = set(_components(recall))
    dup_heads = {c for c in _components(duplicate)} if duplicate not in ("-", "") else set()
    recall_heads = {c for c in recall_parts if c[1] is not None}
    elim_heads = {c for c in elim_parts if c[1] is not None}
    dup_where = "R" if dup_heads & recall_heads else ("E" if dup_heads & elim_heads else "-")
    if dup_heads & recall_heads and dup_heads & elim_heads:
        dup_where = "RE"
    key = (f"E[{canonical_circuit(elim) if elim_parts else '-'}] R[{canonical_circuit(recall)}]"
           + (f" dup:{dup_where}" if dup_heads else ""))
    if not recall_heads:
        name = "attention-free recall"
    elif dup_heads & recall_heads:
        name = "duplicate-gated"
    elif recall_heads <= elim_heads:
        name = "shared-head"
    else:
        name = "separate-heads"
    return MechanismClass(name, key, f"{CLASS_DESCRIPTIONS[name]} ({key})")


def classify(frame: pd.DataFrame, *, how: str = "mean", reference: str = "test") -> pd.DataFrame:
    """``frame`` (one fingerprint per row) with ``class``, ``class_key`` and ``class_description`` columns."""
    classes = [mechanism_class(row, how=how, reference=reference) for row in frame.to_dict("records")]
    out = frame.copy()
    out["class"] = [c.name for c in classes]
    out["class_key"] = [c.key for c in classes]
    out["class_description"] = [c.description for c in classes]
    return out


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (95% by default; Wilson 1927); ``(nan, nan)`` for n = 0."""
    if not (isinstance(k, int) and isinstance(n, int)) or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n, got k={k!r}, n={n!r}")
    if n == 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
