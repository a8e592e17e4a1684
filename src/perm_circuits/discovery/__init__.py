"""Edge-level circuit discovery on TransformerLens 4 models.

The graph (:mod:`~perm_circuits.discovery.graph`), edge interventions in every ablation mode
(:mod:`~perm_circuits.discovery.interventions`), the methods (each returning a :class:`DiscoveryResult`;
by name in :data:`METHODS`, run by :func:`discover`), ground truths known by construction
(:mod:`~perm_circuits.discovery.ground_truth`, :mod:`~perm_circuits.discovery.tracr_models`), scoring
(:mod:`~perm_circuits.discovery.scoring`) and the benchmark behind the discovery docs page
(:mod:`~perm_circuits.discovery.benchmark`).
"""

from __future__ import annotations

from perm_circuits.discovery.benchmark import METHODS, benchmark_curves, run_benchmark
from perm_circuits.discovery.edge_hooks import edge_hooks
from perm_circuits.discovery.graph import (
    CircuitGraph,
    circuit_graph_of,
    edge_name,
    head_of,
    promote_edge,
    promote_edges,
    split_edge,
)
from perm_circuits.discovery.interventions import HOWS, EdgeIntervention, prepare_edges, target_logprob_metric
from perm_circuits.discovery.methods import acdc, eap, eap_ig, edge_attribution, node_attribution, random_baseline
from perm_circuits.discovery.oracle import exhaustive_oracle
from perm_circuits.discovery.result import DiscoveryResult
from perm_circuits.discovery.search import greedy_edges, mask_pruning

__all__ = [
    "HOWS",
    "METHODS",
    "CircuitGraph",
    "DiscoveryResult",
    "EdgeIntervention",
    "acdc",
    "benchmark_curves",
    "circuit_graph_of",
    "discover",
    "eap",
    "eap_ig",
    "edge_attribution",
    "edge_hooks",
    "edge_name",
    "exhaustive_oracle",
    "greedy_edges",
    "head_of",
    "mask_pruning",
    "node_attribution",
    "prepare_edges",
    "promote_edge",
    "promote_edges",
    "random_baseline",
    "run_benchmark",
    "split_edge",
    "target_logprob_metric",
]


def discover(model, method: str = "eap", how: str = "resample", task=None, *, n: int = 500, seed: int = 0,
             batch=None, **kwargs) -> DiscoveryResult:
    """Run one discovery method (a key of :data:`METHODS`) under ablation mode ``how`` on ``batch`` (a
    :class:`~perm_circuits.tasks.TaskBatch` or tokens), else on ``task.test_set(n, seed=seed + 1234)``
    (default task: ``PermutationTask(task_config_of(model))``); ``seed`` also seeds the method, ``kwargs``
    are its options."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    if batch is None:
        if task is None:
            from perm_circuits.models import task_config_of
            from perm_circuits.tasks import PermutationTask

            task = PermutationTask(task_config_of(model))
        if not hasattr(task, "test_set"):
            raise TypeError("task must have a test_set(n, seed) method (the Task interface), got "
                            f"{type(task).__name__}")
        batch = task.test_set(n, seed=seed + 1234)
    return METHODS[method](model, batch, how=how, seed=seed, **kwargs)
