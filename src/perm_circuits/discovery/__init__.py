"""Edge-level circuit discovery on TransformerLens 4 models.

- :mod:`~perm_circuits.discovery.graph`: the computational graph (edges ``"SENDER->RECEIVER"``
  between heads, MLPs, embeddings and logits), with the choice of nodes documented there.
- :mod:`~perm_circuits.discovery.interventions`: runs with any (soft) edge mask, in the ablation
  modes zero, mean, resample and optimal, exact with LayerNorm; the metric and faithfulness.
  :func:`edge_hooks` runs the same intervention as TL hooks on the bridge.
- Methods, each returning a :class:`DiscoveryResult`: :func:`acdc`, :func:`eap`, :func:`eap_ig`,
  :func:`node_attribution`, :func:`greedy_edges`, :func:`mask_pruning`, :func:`random_baseline`
  and :func:`exhaustive_oracle`.
- :func:`discover`: one entry point by method name (what a command line calls).
- Ground truth and scoring: :mod:`~perm_circuits.discovery.ground_truth` (circuits known by
  construction, per ablation mode: weight-built and tracr-compiled models),
  :mod:`~perm_circuits.discovery.tracr_models` (RASP programs compiled with tracr and converted
  with TransformerLens's own converter; needs the ``[tracr]`` extra) and
  :mod:`~perm_circuits.discovery.scoring` (ROC / PR AUC, precision and recall at a circuit,
  faithfulness-curve area, oracle regret).
- :func:`~perm_circuits.discovery.benchmark.run_benchmark`: every method on every model with a
  known circuit, under each ablation mode, scored (the table behind the discovery docs page);
  :func:`~perm_circuits.discovery.benchmark.benchmark_curves`: the faithfulness curves behind its areas.
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
    "DEFAULT_METHOD",
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


DEFAULT_METHOD = "greedy_edges"
"""What :func:`discover` (and ``perm-circuits discover``) runs unless told: the greedy edge proposer under resample
ablation, keeping a circuit within 0.1 of faithfulness 1 (threshold 0.1, tolerance 0.1).  Chosen from the benchmark
(``results/discovery.csv``, resample ablation, 5 seeds per shipped model): it chose 4.8-6.0 of 8-13 edges on d16h1,
d32h1, d32h2 (exact oracle circuit 80-100%) and 14.2 of d16h1l2-any's 23, faithfulness 0.92-0.96; EAP at
faithfulness 0.9, the old default, kept all 13 edges of d32h2."""


def discover(model, method: str = DEFAULT_METHOD, how: str = "resample", task=None, *, n: int = 500, seed: int = 0,
             batch=None, **kwargs) -> DiscoveryResult:
    """Run one discovery method by name on a model and a task's test set.

    Args:
        model: a TransformerLens 4 model.
        method: a key of :data:`METHODS`; default :data:`DEFAULT_METHOD` (``"greedy_edges"``).
        how: the ablation mode (``"zero"``, ``"mean"``, ``"resample"``, ``"optimal"``).
        task: any :class:`~perm_circuits.tasks.Task`; default the model's permutation task
            (``PermutationTask(task_config_of(model))``).
        n, seed: the test set (``task.test_set(n, seed=seed + 1234)``) when ``batch`` is not given;
            ``seed`` also seeds the method.
        batch: a :class:`~perm_circuits.tasks.TaskBatch` or tokens to use instead of the test set.
        kwargs: the method's options (``metric``, ``corrupted``, ``n_edges``, ``tau``, ...).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    if batch is None:
        if task is None:
            from perm_circuits.model_shape import is_permutation_model
            from perm_circuits.models import task_config_of
            from perm_circuits.tasks import PermutationTask

            if not is_permutation_model(model):
                raise ValueError(f"{type(model).__name__} is not a permutation-lookup model: pass task= (its test set "
                                 "and target log-probability are the default) or batch= (a TaskBatch, or token ids "
                                 "with metric=)")
            task = PermutationTask(task_config_of(model))
        if not hasattr(task, "test_set"):
            raise TypeError("task must have a test_set(n, seed) method (the Task interface), got "
                            f"{type(task).__name__}")
        batch = task.test_set(n, seed=seed + 1234)
    return METHODS[method](model, batch, how=how, seed=seed, **kwargs)
