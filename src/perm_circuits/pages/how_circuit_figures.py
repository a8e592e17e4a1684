"""Per shipped model, the circuit of its best hypothesis with each component's feature labels, as an SVG.

Computed from the committed scrubbing table ``results/hypotheses.csv`` alone (views never run a model):
a model's *best* hypothesis is the one with the highest mean whole recovery over the skills where
recovery means anything (the model beats the fully randomised run by at least ``min_gap`` in
accuracy, as :func:`~perm_circuits.pages.how_models_compute.informative` decides); its claims
(``component@position`` -> the features that component is said to carry, Chan et al. 2022, "Causal
Scrubbing") label the nodes of the model's circuit graph, drawn by
:func:`perm_circuits.views.circuit_graph.circuit_graph`. The edges drawn are every edge of the model's
graph between components the hypothesis names (with ``embed`` and ``logits``); components it does not
name are drawn faint (claimed irrelevant).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["best_hypothesis", "circuit_figure", "circuit_figures", "circuit_labels", "figure_path"]


def figure_path(model: str) -> Path:
    """Where the page builder writes ``model``'s circuit figure (under ``docs/``)."""
    return Path("docs/figures") / f"how_models_compute_circuit_{model}.svg"


def best_hypothesis(table: pd.DataFrame, model: str, min_gap: float) -> tuple[str, float]:
    """``(hypothesis, mean whole recovery over the informative skills)``, the highest (ties: table order);
    a skill is informative when ``model_metric - random_metric >= min_gap``."""
    rows = table[(table["model"] == model) & (table["component"] == "all")]
    rows = rows[(rows["model_metric"].astype(float) - rows["random_metric"].astype(float)) >= min_gap]
    if rows.empty:
        raise ValueError(f"no informative whole-hypothesis rows for model {model!r}")
    means = rows.groupby("hypothesis", sort=False)["recovery"].mean()
    return str(means.idxmax()), float(means.max())


def circuit_labels(table: pd.DataFrame, model: str, hypothesis: str) -> dict[str, str]:
    """``{node: features}``: each component the hypothesis names (position dropped: every claim sits at the
    last position) and the features it carries, joined over skills in the table's order."""
    rows = table[(table["model"] == model) & (table["hypothesis"] == hypothesis) & (table["component"] != "all")]
    labels: dict[str, list[str]] = {}
    for r in rows.to_dict("records"):
        node = str(r["component"]).split("@")[0]
        for feature in str(r["features"]).split(", ") if isinstance(r["features"], str) else []:
            if feature and feature not in labels.setdefault(node, []):
                labels[node].append(feature)
    return {node: ", ".join(features) for node, features in labels.items()}


def _shape(table: pd.DataFrame, model: str) -> tuple[int, int]:
    """(layers, heads per layer) of the components the table names for ``model``."""
    nodes = [str(c).split("@")[0] for c in table.loc[table["model"] == model, "component"] if c != "all"]
    layers = 1 + max(int(n[1:].split("H")[0].split("M")[0]) for n in nodes if n.startswith("L"))
    heads = 1 + max((int(n.split("H")[1]) for n in nodes if n.startswith("L") and "H" in n), default=0)
    return layers, heads


def circuit_figure(table: pd.DataFrame, model: str, min_gap: float):
    """The :class:`~perm_circuits.views.circuit_graph.CircuitPicture` of ``model``'s best hypothesis."""
    from perm_circuits.discovery.graph import graph_edges
    from perm_circuits.circuit import Edge
    from perm_circuits.views.circuit_graph import circuit_graph

    hypothesis, recovery = best_hypothesis(table, model, min_gap)
    labels = circuit_labels(table, model, hypothesis)
    n_layers, n_heads = _shape(table, model)
    named = set(labels) | {"embed", "logits"}
    edges = [e for e in graph_edges(n_layers, n_heads, mlp=True)
             if str(Edge.parse(e).sender) in named and Edge.parse(e).receiver.component in named]
    return circuit_graph(edges, labels=labels, n_layers=n_layers, n_heads=n_heads, mlp=True,
                         title=f"{model}: hypothesis '{hypothesis}'",
                         caption=f"each component labelled with the features it carries; mean recovery {recovery:.3f}")


def circuit_figures(table: pd.DataFrame, models, min_gap: float) -> dict[Path, str]:
    """``{figure path: SVG text}`` per model."""
    return {figure_path(model): circuit_figure(table, model, min_gap).svg + "\n" for model in models}
