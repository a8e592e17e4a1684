"""Edge-level circuit discovery on TransformerLens 4 models.

- :mod:`~perm_circuits.discovery.graph`: the computational graph (edges ``"SENDER->RECEIVER"``
  between heads, MLPs, embeddings and logits), with the choice of nodes documented there.
- :mod:`~perm_circuits.discovery.interventions`: runs with any (soft) edge mask, in the ablation
  modes zero, mean, resample and optimal, exact with LayerNorm; the metric and faithfulness.
  :func:`edge_hooks` runs the same intervention as TL hooks on the bridge.
  :mod:`~perm_circuits.discovery.padding`: a batch of mixed input lengths (right-padded, each row's
  length in ``TaskBatch.extras["lengths"]``) runs in every mode, attention masked per row.
- Methods, each returning a :class:`DiscoveryResult`: :func:`acdc`, :func:`eap`, :func:`eap_ig`,
  :func:`node_attribution`, :func:`greedy_edges`, :func:`mask_pruning`, :func:`random_baseline`
  and :func:`exhaustive_oracle`.
- :func:`discover`: one entry point by method name (what a command line calls); the names are
  those of :mod:`~perm_circuits.discovery.registry` (:func:`register_method` adds one).
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

from typing import TYPE_CHECKING

from perm_circuits._lazy import attach

# Re-exports, loaded on first use (perm_circuits._lazy): importing the method registry loads no torch.
if TYPE_CHECKING:
    from perm_circuits.circuit import Edge, Node
    from perm_circuits.discovery.benchmark import benchmark_curves, run_benchmark
    from perm_circuits.discovery.edge_hooks import edge_hooks
    from perm_circuits.discovery.graph import (
        EdgeGraph,
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
    from perm_circuits.discovery.registry import (
        DEFAULT_METHOD,
        METHODS,
        Method,
        discover,
        get_method,
        method_names,
        register_method,
        unregister_method,
    )
    from perm_circuits.discovery.result import DiscoveryResult
    from perm_circuits.discovery.search import greedy_edges, mask_pruning

__all__ = [
    "HOWS",
    "METHODS",
    "DEFAULT_METHOD",
    "DiscoveryResult",
    "Edge",
    "EdgeGraph",
    "EdgeIntervention",
    "Method",
    "Node",
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
    "get_method",
    "greedy_edges",
    "head_of",
    "mask_pruning",
    "method_names",
    "node_attribution",
    "prepare_edges",
    "promote_edge",
    "promote_edges",
    "random_baseline",
    "register_method",
    "run_benchmark",
    "split_edge",
    "target_logprob_metric",
    "unregister_method",
]

attach(__name__, __file__)
