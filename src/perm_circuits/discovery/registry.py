"""The registry of edge-level discovery methods: each method is registered once, here.

Every list of methods reads this registry: :func:`perm_circuits.discovery.discover` (a method by
name), the ``perm-circuits discover --method`` choices and help, the benchmark
(:data:`~perm_circuits.discovery.benchmark.METHODS`, :func:`~perm_circuits.discovery.benchmark.run_benchmark`)
and the method lists of the docs (a test checks that the README and ``docs/discovery.md`` name
exactly :func:`method_names`).

A new method is one file holding its function (``fn(model=None, batch=None, *, how=None,
intervention=None, seed=0, **options) -> DiscoveryResult``, see :mod:`~perm_circuits.discovery.methods`)
and one :func:`register_method` line: at the end of this module for a method shipped with the library
(the function named ``"module:function"``, imported on first use, so the command line reads the
names without loading torch), or in the user's own module with the function itself
(``perm-circuits discover --method NAME --import my_method.py`` runs that line first).

This module imports only the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DEFAULT_METHOD", "METHODS", "Method", "discover", "get_method", "method_help", "method_names", "register_method",
           "unregister_method"]


@dataclass(frozen=True)
class Method:
    """One discovery method.

    Attributes:
        key: its name (``discover(method=key)``, ``--method key``, the benchmark's ``method`` column).
        description: one line for the CLI help and the docs.
        target: the function (model, batch, how=, intervention=, seed=, options) -> ``DiscoveryResult``,
            or its ``"module:function"`` path (imported by :attr:`fn` on first use).
        lean, full: options the benchmark passes in its lean (default) and full runs.
    """

    key: str
    description: str
    target: Callable | str
    lean: Mapping = field(default_factory=dict)
    full: Mapping = field(default_factory=dict)

    @property
    def fn(self) -> Callable:
        """The method's function (imported from its ``"module:function"`` path on first use)."""
        if callable(self.target):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def benchmark_options(self, lean: bool) -> dict:
        """The options the benchmark runs this method with."""
        return dict(self.lean if lean else self.full)


_REGISTRY: dict[str, Method] = {}


class _Functions(Mapping):
    """Discovery functions by key, in registration order: a live, read-only view of the registry."""

    def __getitem__(self, key: str) -> Callable:
        return _REGISTRY[key].fn

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return f"METHODS({', '.join(_REGISTRY)})"


METHODS: Mapping[str, Callable] = _Functions()
"""Discovery functions by key, in registration order (a live, read-only view of the registry)."""


def register_method(key: str, fn: Callable | str, description: str, *, lean: Mapping | None = None,
                    full: Mapping | None = None, replace: bool = False) -> Method:
    """Register ``fn`` (the function, or its ``"module:function"`` path) as discovery method ``key`` (a
    lowercase identifier); ``lean`` / ``full``: the benchmark's options for it.  Returns its :class:`Method`.

    Raises:
        TypeError: ``fn`` neither callable nor a ``"module:function"`` str, ``description`` not a str,
            options not mappings.
        ValueError: ``key`` not an identifier, or already registered (unless ``replace``).
    """
    if not isinstance(key, str) or not key.isidentifier() or key != key.lower():
        raise ValueError(f"key must be a lowercase identifier (e.g. 'my_method'), got {key!r}")
    if not callable(fn) and not (isinstance(fn, str) and fn.count(":") == 1 and all(fn.split(":"))):
        raise TypeError(f"fn must be the discovery function or its 'module:function' path, got {fn!r}")
    if not isinstance(description, str) or not description.strip():
        raise TypeError(f"description must be a non-empty str, got {description!r}")
    for name, options in (("lean", lean), ("full", full)):
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"{name} must be a dict of the method's options, got {type(options).__name__}")
    if key in _REGISTRY and not replace:
        raise ValueError(f"discovery method {key!r} is already registered; pass replace=True to replace it")
    lean = dict(lean or {})
    method = Method(key, description.strip(), fn, MappingProxyType(lean),
                    MappingProxyType(dict(lean if full is None else full)))
    _REGISTRY[key] = method
    return method


def unregister_method(key: str) -> None:
    """Remove method ``key`` (ValueError if it is not registered)."""
    if key not in _REGISTRY:
        raise ValueError(f"no discovery method {key!r}; registered: {method_names()}")
    del _REGISTRY[key]


def method_names() -> tuple[str, ...]:
    """Every registered method's key, in registration order."""
    return tuple(_REGISTRY)


def get_method(key: str) -> Method:
    """The registered :class:`Method` ``key`` (ValueError naming the registered ones otherwise)."""
    if not isinstance(key, str) or key not in _REGISTRY:
        raise ValueError(f"method must be one of {sorted(_REGISTRY)}, got {key!r}")
    return _REGISTRY[key]


DEFAULT_METHOD = "greedy_edges"
"""What :func:`discover` (and ``perm-circuits discover``) runs unless told: the greedy edge proposer under resample
ablation, keeping a circuit within 0.1 of faithfulness 1 (threshold 0.1, tolerance 0.1).  Chosen from the benchmark
(``results/discovery.csv``, resample ablation, 5 seeds per shipped model): it chose 4.8-6.0 of 8-13 edges on d16h1,
d32h1, d32h2 (exact oracle circuit 80-100%) and 14.2 of d16h1l2-any's 23, faithfulness 0.92-0.96; EAP at
faithfulness 0.9, the old default, kept all 13 edges of d32h2."""


def method_help(default: str | None = None) -> str:
    """``"eap (default), eap_ig, ... or exhaustive_oracle"``: the registered keys for a help line."""
    names = [f"{key} (default)" if key == default else key for key in _REGISTRY]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def discover(model, method: str = DEFAULT_METHOD, how: str = "resample", task=None, *, n: int = 500, seed: int = 0,
             batch=None, **kwargs):
    """Run one registered discovery method by name on a model and a task's test set; returns its
    :class:`~perm_circuits.discovery.result.DiscoveryResult`.

    Args:
        model: a TransformerLens 4 model.
        method: a registered method's key (:func:`method_names`; :func:`register_method` adds one); default
            :data:`DEFAULT_METHOD`.
        how: the ablation mode of the edges (:data:`perm_circuits.discovery.HOWS`).
        task: any :class:`~perm_circuits.tasks.Task`; default the model's permutation task
            (``PermutationTask(task_config_of(model))``).
        n, seed: the test set (``task.test_set(n, seed=seed + 1234)``) when ``batch`` is not given;
            ``seed`` also seeds the method.
        batch: a :class:`~perm_circuits.tasks.TaskBatch` or tokens to use instead of the test set.
        kwargs: the method's options (``metric``, ``corrupted``, ``n_edges``, ``tau``, ...);
            ``metric`` follows the library's convention, ``metric(logits, batch) -> [batch]``
            (:mod:`perm_circuits.metric`), reduced by the mean over rows.
    """
    from perm_circuits.discovery.interventions import HOWS

    fn = get_method(method).fn
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    if batch is None:
        if task is None:
            from perm_circuits.tasks.base import model_task

            task = model_task(model)  # the task the model was built for, if it says
            if task is None:
                raise ValueError(f"{type(model).__name__} carries no task of its own: pass task= (its test set "
                                 "and target log-probability are the default) or batch= (a TaskBatch, or token ids "
                                 "with metric=)")
        if not hasattr(task, "test_set"):
            raise TypeError("task must have a test_set(n, seed) method (the Task interface), got "
                            f"{type(task).__name__}")
        batch = task.test_set(n, seed=seed + 1234)
    return fn(model, batch, how=how, seed=seed, **kwargs)


# The methods shipped with the library: one line each.
register_method("acdc", "perm_circuits.discovery.methods:acdc",
                "ACDC: prune edges greedily from the logits back (Conmy et al. 2023)")
register_method("eap", "perm_circuits.discovery.methods:eap",
                "edge attribution patching: one forward and one backward (Syed et al. 2023)")
register_method("eap_ig", "perm_circuits.discovery.methods:eap_ig",
                "EAP with integrated gradients along the edge mask (after Hanna et al. 2024)")
register_method("node_attribution", "perm_circuits.discovery.methods:node_attribution",
                "attribution patching on nodes, spread to edges (Nanda 2023; Kramar et al. 2024)")
register_method("greedy_edges", "perm_circuits.discovery.search:greedy_edges",
                "greedy edge search: single-ablation candidates, grown then pruned to faithfulness")
register_method("mask_pruning", "perm_circuits.discovery.search:mask_pruning",
                "a sparse edge mask learned with hard-concrete gates", lean={"steps": 60}, full={"steps": 300})
register_method("random_baseline", "perm_circuits.discovery.methods:random_baseline",
                "uniform random scores: the chance line")
register_method("exhaustive_oracle", "perm_circuits.discovery.oracle:exhaustive_oracle",
                "the smallest circuit reaching the target faithfulness, by search: the reference",
                lean={"max_size": 8, "max_subsets": 300_000}, full={"max_size": 8, "max_subsets": 3_000_000})
