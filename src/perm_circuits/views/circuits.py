"""Offline circuitsvis views built from plain tensors and token lists.

Each view function validates its inputs, then calls the matching circuitsvis
function with circuitsvis' ``render`` swapped for a recorder, so we keep
circuitsvis' own argument handling but never build its HTML: its
``RenderedHTML._repr_html_`` probes ``http://google.com`` and ``str()`` gives
CDN (unpkg) HTML. The recorded component name and props become an
``OfflineView``, rendered against the bundle shipped in the circuitsvis wheel
(see ``perm_circuits.views.html``).
"""

from __future__ import annotations

import numbers
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, no_type_check

import circuitsvis.activations
import circuitsvis.attention
import circuitsvis.tokens
import torch
from circuitsvis.utils.convert_props import convert_prop_type
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_number, check_str
from perm_circuits.views.html import circuitsvis_bundle_js, html_page, mount_html, script_json

__all__ = [
    "OfflineView",
    "attention_view",
    "colored_tokens_view",
    "neuron_activations_view",
    "token_labels",
]


@dataclass(frozen=True)
class OfflineView:
    """A circuitsvis view that renders with no internet.

    Attributes:
        title: Human-readable title (page heading, ``save`` page title).
        component: circuitsvis React component, e.g. ``"AttentionHeads"``.
        props_json: Script-safe JSON of the component's props.
    """

    title: str
    component: str
    props_json: str = field(repr=False)

    def mount_html(self, div_id: str) -> str:
        """Container div + render script; needs the bundle already on the page."""
        return mount_html(div_id, self.component, self.props_json, title=self.title)

    def _repr_html_(self) -> str:
        """Notebook HTML: bundle inlined, no network probe, no CDN."""
        div_id = f"pc-view-{uuid.uuid4().hex[:12]}"
        return f"<script>{circuitsvis_bundle_js()}</script>\n{self.mount_html(div_id)}"

    def to_html(self) -> str:
        """This view as a standalone offline HTML document."""
        return html_page(self.title, [self])

    def save(self, path: str | Path) -> Path:
        """Write a standalone offline HTML page to ``path`` and return it."""
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def __str__(self) -> str:
        """Short description (never CDN HTML; use ``to_html`` for the page)."""
        return f"OfflineView({self.component}: {self.title!r})"


def _check_tokens(tokens: object, name: str = "tokens") -> list[str]:
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, got {type(tokens).__name__}")
    bad = [i for i, t in enumerate(tokens) if not isinstance(t, str)]
    if bad:
        raise TypeError(
            f"{name} must contain only str; {name}[{bad[0]}] is "
            f"{type(tokens[bad[0]]).__name__} (convert ids with token_labels)"
        )
    if not tokens:
        raise ValueError(f"{name} must not be empty")
    return list(tokens)


def _check_labels(labels: object, name: str, expected: int, what: str) -> list[str] | None:
    """Optional list of str whose length must equal ``expected``."""
    if labels is None:
        return None
    labels = _check_tokens(labels, name)
    if len(labels) != expected:
        raise ValueError(f"len({name})={len(labels)} but {what}={expected}")
    return labels


def _check_real_tensor(x: object, name: str, dims: str) -> Tensor:
    """Require a finite real tensor with ``len(dims.split())`` dims; return float32 CPU."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor [{dims}], got {type(x).__name__} (wrap with torch.as_tensor)")
    if x.dtype == torch.bool or x.is_complex():
        raise TypeError(f"{name} must be real-valued, got dtype {x.dtype}")
    ndim = len(dims.split())
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape [{dims}] ({ndim} dims), got {tuple(x.shape)}")
    x = x.detach().to("cpu", torch.float32)
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


_CAPTURE_LOCK = threading.Lock()


def _capture_view(module: ModuleType, fn: Callable[..., Any], title: str, **kwargs: Any) -> OfflineView:
    """Run a circuitsvis view function with ``module.render`` (its HTML builder) replaced by a recorder,
    and return what it would render."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def record(react_element_name: str, **props: Any) -> None:
        calls.append((react_element_name, props))

    with _CAPTURE_LOCK:
        original = module.render
        module.render = record
        try:
            fn(**kwargs)
        finally:
            module.render = original
    if len(calls) != 1:
        raise RuntimeError(f"{fn.__name__} rendered {len(calls)} times, expected once")
    component, props = calls[0]
    clean = {k: convert_prop_type(v) for k, v in props.items() if v is not None}
    return OfflineView(title=title, component=component, props_json=script_json(clean))


@no_type_check  # validates its own inputs (lists, numpy, tensors) with precise messages
def attention_view(
    pattern: Float[Tensor, "head q k"],
    tokens: list[str],
    head_names: list[str] | None = None,
    title: str = "Attention patterns",
    *,
    mask_upper_tri: bool | None = None,
) -> OfflineView:
    """Attention patterns of several heads over one sequence.

    Wraps ``circuitsvis.attention.attention_heads``.

    Args:
        pattern: Attention probabilities, ``pattern[h, q, k]`` = weight query
            position ``q`` puts on key position ``k`` in head ``h``.
        tokens: One label per position (``len(tokens) == q == k``).
        head_names: Optional label per head (``len == head``).
        mask_upper_tri: Grey out the upper triangle (causal); circuitsvis'
            default when ``None``.
    """
    title = check_str("title", title)
    tokens = _check_tokens(tokens)
    pattern = _check_real_tensor(pattern, "pattern", "head q k")
    n_head, n_q, n_k = pattern.shape
    if n_q != n_k:
        raise ValueError(f"pattern must be square in q and k, got q={n_q}, k={n_k}")
    if n_q != len(tokens):
        raise ValueError(f"len(tokens)={len(tokens)} but pattern has q=k={n_q} positions")
    head_names = _check_labels(head_names, "head_names", n_head, "pattern head dim")
    if mask_upper_tri is not None and not isinstance(mask_upper_tri, bool):
        raise TypeError(f"mask_upper_tri must be a bool, got {type(mask_upper_tri).__name__}")
    return _capture_view(circuitsvis.attention, circuitsvis.attention.attention_heads, title, attention=pattern,
        tokens=tokens, attention_head_names=head_names, mask_upper_tri=mask_upper_tri)


@no_type_check  # validates its own inputs (lists, numpy, tensors) with precise messages
def colored_tokens_view(
    tokens: list[str],
    values: Float[Tensor, "pos"],
    title: str = "Token values",
    *,
    min_value: float | None = None,
    max_value: float | None = None,
) -> OfflineView:
    """Tokens coloured by one value each.

    Wraps ``circuitsvis.tokens.colored_tokens``.

    Args:
        tokens: One label per position.
        values: One value per position (``len(values) == len(tokens)``).
        min_value: lower colour-scale bound (circuitsvis picks if None).
        max_value: upper colour-scale bound (circuitsvis picks if None).
    """
    title = check_str("title", title)
    tokens = _check_tokens(tokens)
    values = _check_real_tensor(values, "values", "pos")
    if values.shape[0] != len(tokens):
        raise ValueError(f"len(tokens)={len(tokens)} but values has pos={values.shape[0]}")
    bounds = {"min_value": min_value, "max_value": max_value}
    for name, bound in bounds.items():
        if bound is not None:
            check_number(name, bound)
    return _capture_view(circuitsvis.tokens, circuitsvis.tokens.colored_tokens, title, tokens=tokens, values=values,
        **bounds)


@no_type_check  # validates its own inputs (lists, numpy, tensors) with precise messages
def neuron_activations_view(
    tokens: list[str],
    activations: Float[Tensor, "pos neurons"],
    title: str = "Neuron activations",
    *,
    neuron_labels: list[str] | None = None,
    layer_label: str = "layer",
) -> OfflineView:
    """Per-token activations of a set of neurons, with a neuron picker.

    Wraps ``circuitsvis.activations.text_neuron_activations`` (one "layer").

    Args:
        tokens: One label per position.
        activations: ``activations[pos, n]`` for neuron ``n``.
        neuron_labels: Optional label per neuron (``len == neurons``).
        layer_label: Label of the single layer entry in the picker.
    """
    title = check_str("title", title)
    tokens = _check_tokens(tokens)
    activations = _check_real_tensor(activations, "activations", "pos neurons")
    n_pos, n_neurons = activations.shape
    if n_pos != len(tokens):
        raise ValueError(f"len(tokens)={len(tokens)} but activations has pos={n_pos}")
    neuron_labels = _check_labels(neuron_labels, "neuron_labels", n_neurons, "neurons")
    if not isinstance(layer_label, str):
        raise TypeError(f"layer_label must be a str, got {type(layer_label).__name__}")
    return _capture_view(circuitsvis.activations, circuitsvis.activations.text_neuron_activations, title,
        tokens=tokens, activations=activations.unsqueeze(1),  # [tokens x layers x neurons]
        first_dimension_name="Layer", second_dimension_name="Neuron", first_dimension_labels=[layer_label],
        second_dimension_labels=neuron_labels)


@no_type_check  # validates its own inputs (lists, numpy, tensors) with precise messages
def token_labels(tokens: Sequence[int] | Int[Tensor, "pos"]) -> list[str]:
    """Readable labels for a permutation-lookup sequence ``x1 y1 x2 y2 ...``.

    Even positions are queries (``"0: x=2"``), odd positions answers (``"1: y=5"``).

    Args:
        tokens: Token ids as a list of int or a 1-D integer tensor.
    """
    if isinstance(tokens, Tensor):
        if tokens.dtype.is_floating_point or tokens.is_complex() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens tensor must have an integer dtype, got {tokens.dtype}")
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D [pos], got shape {tuple(tokens.shape)}")
        ids = tokens.tolist()
    elif isinstance(tokens, (list, tuple)):
        bad = [i for i, t in enumerate(tokens) if isinstance(t, bool) or not isinstance(t, numbers.Integral)]
        if bad:
            raise TypeError(f"tokens must be ints; tokens[{bad[0]}] is {type(tokens[bad[0]]).__name__}")
        ids = [int(t) for t in tokens]
    else:
        raise TypeError(f"tokens must be a list of int or a 1-D tensor, got {type(tokens).__name__}")
    return [f"{pos}: {'x' if pos % 2 == 0 else 'y'}={tok}" for pos, tok in enumerate(ids)]
