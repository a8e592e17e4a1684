"""A census of mechanisms: a fingerprint per model (:mod:`.fingerprint`), classes by a stated rule
(:mod:`.classes`), and the census table across seeds and training epochs (``scripts/census_train.py``,
``scripts/census_fingerprints.py``, ``docs/census.md``)."""

from perm_circuits.census.classes import (
    CLASS_DESCRIPTIONS,
    CLASS_ORDER,
    MechanismClass,
    canonical_circuit,
    classify,
    mechanism_class,
    wilson_interval,
)
from perm_circuits.census.fingerprint import (
    CIRCUIT_HOWS,
    REFERENCES,
    SKILL_CAPABLE,
    Fingerprint,
    circuit_components,
    fingerprint_frame,
    mechanism_fingerprint,
    node_oracle,
)
from perm_circuits.census.summary import CensusSummary, census_summary, has_fingerprints

__all__ = [
    "CIRCUIT_HOWS",
    "CLASS_DESCRIPTIONS",
    "CLASS_ORDER",
    "CensusSummary",
    "REFERENCES",
    "SKILL_CAPABLE",
    "Fingerprint",
    "MechanismClass",
    "canonical_circuit",
    "census_summary",
    "circuit_components",
    "classify",
    "fingerprint_frame",
    "has_fingerprints",
    "mechanism_class",
    "mechanism_fingerprint",
    "node_oracle",
    "wilson_interval",
]
