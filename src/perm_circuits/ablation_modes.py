"""The registry of ablation modes: what replaces a component's output when it is ablated.

Every list of modes reads this registry: the study's head ablations and verdict
(:data:`perm_circuits.analysis.HOWS`), the any-task ablation tables
(:data:`~perm_circuits.analysis.TASK_HOWS`, :data:`~perm_circuits.analysis.ANY_TASK_HOWS`), the edge
interventions of discovery (:data:`perm_circuits.discovery.HOWS`), the discovery benchmark's modes
and the ``perm-circuits discover --how`` help.  Each mode is one :func:`register_mode` line below
naming the tools (scopes) that implement it; the mode lists are read once, when those tools' modules
are imported.

Scopes:

- ``"study"``: the permutation task's ablations (:mod:`perm_circuits.analysis.interventions.ablation`);
- ``"task"``: any task's ablation table (:mod:`perm_circuits.analysis.interventions.ablation_table`);
- ``"edges"``: edge interventions (:mod:`perm_circuits.discovery.interventions`).

This module imports only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["REFERENCES", "SCOPES", "AblationMode", "ablation_modes", "check_reference_name", "get_mode", "mode_help",
           "modes", "register_mode"]

SCOPES: tuple[str, ...] = ("study", "task", "edges")
"""The tools a mode can be implemented in (module docstring)."""

REFERENCES: tuple[str, ...] = ("test", "skill")
"""Where the ablated values of a mean / resample / optimal ablation come from, per skill (the permutation
task's elimination and recall): ``"test"``, the whole test set (both skills mixed, as the task presents them;
the library's default); ``"skill"``, the skill's own rows (each skill is ablated with its own mean, resampled
from its own rows).  The choice can change a component's role: a head that only tells the skills apart (a
repeat detector) carries nothing within one skill, so against the skill's own rows its ablation removes
nothing.  Roles, claims, circuit criteria, circuit proposals, discovery
(:func:`~perm_circuits.discovery.skills.discover_skills`) and the census fingerprints take it as ``reference=``
and record it (roles and circuit criteria also take a batch of one's own, recorded as ``"custom"``)."""


def check_reference_name(reference: object) -> str:
    """``reference`` if it is one of :data:`REFERENCES`, else a ValueError naming it."""
    if not isinstance(reference, str) or reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    return reference


@dataclass(frozen=True)
class AblationMode:
    """One ablation mode: its ``key`` (the ``how=`` value), a one-line ``description``, the ``scopes``
    implementing it and the scopes whose default mode list (``defaults``) includes it."""

    key: str
    description: str
    scopes: frozenset[str]
    defaults: frozenset[str]


_MODES: dict[str, AblationMode] = {}


def _check_scopes(name: str, scopes: object) -> frozenset[str]:
    if isinstance(scopes, str) or not isinstance(scopes, (tuple, list, set, frozenset)):
        raise TypeError(f"{name} must be a tuple of scopes from {SCOPES}, got {scopes!r}")
    bad = [scope for scope in scopes if scope not in SCOPES]
    if bad:
        raise ValueError(f"{name} entries must be in {SCOPES}, got {bad}")
    return frozenset(scopes)


def register_mode(key: str, description: str, scopes: tuple[str, ...], defaults: tuple[str, ...] = (), *,
                  replace: bool = False) -> AblationMode:
    """Register ablation mode ``key``, implemented in ``scopes`` and in the default lists of ``defaults``
    (a subset of ``scopes``).  Returns its :class:`AblationMode`.

    Raises:
        TypeError: a non-str key or description, scopes not a tuple.
        ValueError: ``key`` not a lowercase identifier or already registered (unless ``replace``), an
            unknown scope, or a default scope that does not implement the mode.
    """
    if not isinstance(key, str) or not key.isidentifier() or key != key.lower():
        raise ValueError(f"key must be a lowercase identifier (e.g. 'my_mode'), got {key!r}")
    if not isinstance(description, str) or not description.strip():
        raise TypeError(f"description must be a non-empty str, got {description!r}")
    scopes_set, defaults_set = _check_scopes("scopes", scopes), _check_scopes("defaults", defaults)
    if not defaults_set <= scopes_set:
        raise ValueError(f"defaults {sorted(defaults_set - scopes_set)} are not among the mode's scopes {scopes!r}")
    if key in _MODES and not replace:
        raise ValueError(f"ablation mode {key!r} is already registered; pass replace=True to replace it")
    mode = AblationMode(key, description.strip(), scopes_set, defaults_set)
    _MODES[key] = mode
    return mode


def ablation_modes() -> tuple[AblationMode, ...]:
    """Every registered mode, in registration order."""
    return tuple(_MODES.values())


def get_mode(key: str) -> AblationMode:
    """The registered mode ``key`` (ValueError naming the registered ones otherwise)."""
    if not isinstance(key, str) or key not in _MODES:
        raise ValueError(f"ablation mode must be one of {tuple(_MODES)}, got {key!r}")
    return _MODES[key]


def modes(scope: str, *, default: bool = False) -> tuple[str, ...]:
    """The keys of the modes ``scope`` implements (``default``: only those of its default list), in
    registration order."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    return tuple(m.key for m in _MODES.values() if scope in (m.defaults if default else m.scopes))


def mode_help(scope: str, default: str | None = None) -> str:
    """``"zero, mean, resample (default) or optimal"``: the modes of ``scope`` for a help line."""
    names = [f"{key} (default)" if key == default else key for key in modes(scope)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# The modes: one line each (Heimersheim & Nanda 2024, "How to use and interpret activation patching",
# compare zero, mean and resample ablation; Li & Janson 2024 define optimal ablation).
register_mode("zero", "the output set to zero", ("study", "task", "edges"), ("task", "edges"))
register_mode("mean", "the output's mean over the reference batch", ("study", "task", "edges"), ("task", "edges"))
register_mode("resample", "the output on another sequence of the reference batch", ("study", "task", "edges"),
              ("task", "edges"))
register_mode("binding_free", "the output on sequences of the same prefix whose query binds nothing (the study's)",
              ("study",))
register_mode("optimal", "the constant that best preserves the metric (optimal ablation, Li & Janson 2024)",
              ("study", "task", "edges"))
