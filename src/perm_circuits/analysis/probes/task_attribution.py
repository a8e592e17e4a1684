"""Direct logit attribution and attention scores on any task's model.

Direct logit attribution (Elhage et al. 2021, "A Mathematical Framework for Transformer
Circuits"; Wang et al. 2022, the IOI paper, section 3.1) reads each component ``c`` of the
residual stream (:func:`residual_components`) through the unembedding:

    DLA(c) = mask-weighted mean over loss positions of  (c / s) @ (W_U[:, target] - mean_v W_U[:, v]),

its direct push on the target's logit over the mean logit, with ``c`` centred, divided by the
run's ``ln_final.hook_scale`` ``s`` (the norm frozen at its clean-run value, the usual convention)
and times ``ln_final.weight`` under a final LayerNorm (``s = 1`` without one).  ``remainder`` (the
output biases, the norm's bias, ``b_U``) makes the sum exactly ``logit(target) - mean logit``.

:func:`attention_scores`: the share of attention each query position ``>= 1`` gives to itself, to
the previous position and to position 0, averaged (Olsson et al. 2022, "In-context Learning and
Induction Heads": a previous-token head has a previous score near 1).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.devices import device_forward, model_device
from perm_circuits.hooks import check_hooks, check_token_ids, run_capture
from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import TaskBatch, check_target_classes

__all__ = [
    "AttentionScores",
    "TargetAttribution",
    "attention_patterns",
    "attention_scores",
    "component_hooks",
    "next_token_batch",
    "residual_components",
    "target_logit_attribution",
]

_LAYER = re.compile(r"blocks\.(\d+)\.")


@dataclass(frozen=True)
class TargetAttribution:
    """Per component, the mean direct contribution to ``logit(target) - mean logit`` at the loss positions;
    ``sum(values) + remainder == total``, the model's own mean ``logit(target) - mean logit``."""

    model_name: str
    components: tuple[str, ...]
    values: tuple[float, ...]
    remainder: float
    total: float
    n: int

    def get(self, component: str) -> float:
        return self.values[self.components.index(component)]

    def to_dataframe(self) -> pd.DataFrame:
        rows = list(zip(self.components, self.values)) + [("remainder", self.remainder), ("total", self.total)]
        return pd.DataFrame(rows, columns=["component", "direct_logit_attribution"])


def model_label(model) -> str:
    """The model's name: its ``ModelConfig``'s (``"d32h2"``), else ``cfg.model_name``, else its class name."""
    config = getattr(model, "perm_config", None)
    name = getattr(config, "name", None) or getattr(getattr(model, "cfg", None), "model_name", None)
    return name if isinstance(name, str) and name else type(model).__name__


def component_hooks(model) -> list[tuple[str, str]]:
    """``(label, hook point)`` per direct component of the residual stream, in layer order: ``embed``
    / ``pos_embed``, per layer ``L{l}`` at ``attn.hook_z`` (its heads; ``L{l}ATTN`` at
    ``hook_attn_out`` where the model has no ``W_O [layer, head, d_head, d_model]``), ``L{l}MLP``."""
    shape = model_shape(model)
    W_O = getattr(model, "W_O", None)
    per_head = isinstance(W_O, Tensor) and W_O.ndim == 4 and bool(shape.n_heads)
    names = [(label, hook) for label, hook in (("embed", "hook_embed"), ("pos_embed", "hook_pos_embed"))
             if shape.has_hook(hook)]
    for layer in range(shape.n_layers):
        if per_head and shape.heads(layer):
            names.append((f"L{layer}", f"blocks.{layer}.attn.hook_z"))
        elif shape.has_hook(f"blocks.{layer}.hook_attn_out"):
            names.append((f"L{layer}ATTN", f"blocks.{layer}.hook_attn_out"))
        if shape.mlp(layer):
            names.append((f"L{layer}MLP", f"blocks.{layer}.hook_mlp_out"))
    return names


def residual_components(model, names: list[tuple[str, str]], acts: dict[str, Tensor]) -> dict[str, Tensor]:
    """``{label: [batch, pos, d_model]}``: each component's direct write into the residual stream, from the
    activations ``acts`` at :func:`component_hooks`' points; head ``L{l}H{h}`` is ``z_h @ W_O[l, h]``
    (TransformerLens 4 native models have no per-head ``hook_result``)."""
    out = {}
    for label, hook in names:
        if hook.endswith("attn.hook_z"):
            layer = int(_LAYER.match(hook).group(1))
            for head in range(acts[hook].shape[2]):
                out[f"{label}H{head}"] = acts[hook][:, :, head] @ model.W_O[layer, head].detach()
        else:
            out[label] = acts[hook]
    return out


def next_token_batch(tokens: Tensor) -> TaskBatch:
    """Token ids as a :class:`TaskBatch` of a language model's convention: the target at position
    ``t`` is token ``t + 1``, scored at every position but the last."""
    if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.shape[1] < 2:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"token ids must be [batch, seq] with seq >= 2 (a next token to score), got {shape}")
    mask = torch.ones(tokens.shape, dtype=torch.float32, device=tokens.device)
    mask[:, -1] = 0.0
    return TaskBatch(tokens, tokens.roll(-1, dims=1), mask)


def target_logit_attribution(model, batch: TaskBatch | Tensor, hooks: Any = None) -> TargetAttribution:
    """Direct logit attribution of every component to the targets of ``batch`` (module docstring);
    needs an unembedding ``W_U`` ``[d_model, n_out]`` and LayerNorm or no normalization.  Token ids
    are scored on their next token (:func:`next_token_batch`); ``hooks`` run in the forward pass."""
    if isinstance(batch, Tensor):
        batch = next_token_batch(batch)
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch or token ids [batch, seq], got {type(batch).__name__}")
    check_token_ids(batch.tokens, model_shape(model).d_vocab)  # non-empty, ids the model embeds
    batch = batch.to(model_device(model))  # the forward and the attribution run on the model's device
    names = component_hooks(model)
    W_U = getattr(model, "W_U", None)
    if not isinstance(W_U, Tensor) or W_U.ndim != 2:
        raise TypeError(f"{type(model).__name__} has no unembedding W_U [d_model, n_out]: no direct logit attribution")
    norm = getattr(getattr(model, "cfg", None), "normalization_type", None)
    if norm not in (None, "LN", "LNPre"):
        raise ValueError(f"direct logit attribution handles LayerNorm or no normalization, got {norm!r}")
    extra = ["ln_final.hook_scale"] if norm is not None else []
    logits, cache = run_capture(model, batch.tokens, [hook for _, hook in names] + extra, check_hooks(model, hooks))
    weights = batch.mask.double()
    check_target_classes(batch.top_target(), W_U.shape[1], classes="unembedding's")
    targets = batch.targets.clamp(0, W_U.shape[1] - 1) * (batch.mask > 0)
    W = W_U.detach().double()
    direction = W[:, targets] - W.mean(1)[:, None, None]  # [d_model, batch, seq]
    scale = cache["ln_final.hook_scale"].double() if norm is not None else None
    ln_weight = model.state_dict().get("ln_final.weight") if norm == "LN" else None

    def read(vector: Tensor) -> float:
        x = vector.double()
        if scale is not None:
            x = (x - x.mean(-1, keepdim=True)) / scale
            if ln_weight is not None:
                x = x * ln_weight.double()
        value = torch.einsum("bsd,dbs->bs", x, direction)
        return float((value * weights).sum() / weights.sum())

    values = {label: read(x) for label, x in residual_components(model, names, cache).items()}
    out = logits.double()
    diff = out.gather(-1, targets[..., None])[..., 0] - out.mean(-1)
    total = float((diff * weights).sum() / weights.sum())
    return TargetAttribution(model_label(model), tuple(values), tuple(values.values()), total - sum(values.values()),
                             total, len(batch))


def attention_patterns(
    model, tokens: Tensor, forward: Callable[[Any, Tensor], Tensor] | None = None
) -> dict[str, Tensor]:
    """``{hook name: pattern [batch, head, q, k]}`` of every ``*hook_pattern`` hook point (in layer
    order; one forward, ``forward(model, tokens)``, default ``model(tokens)``) of any model with
    TransformerLens hook points; a pattern captured as ``[batch, q, k]`` (one head) gets a head
    axis.  Empty when the model has no such hook point."""
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(hook_dict, dict):
        return {}
    first: dict[int, str] = {}  # a hook point reachable under several names counts once, by its first name
    for name, point in hook_dict.items():
        if name.endswith("hook_pattern"):
            first.setdefault(id(point), name)
    names = list(first.values())
    layer = {name: int(m.group(1)) if (m := _LAYER.search(name)) else index for index, name in enumerate(names)}
    names.sort(key=lambda name: layer[name])
    if not names:
        return {}
    store: dict[str, Tensor] = {}

    def capture(pattern: Tensor, hook: Any, name: str) -> None:
        store[name] = pattern.detach().float().to(tokens.device)

    with torch.no_grad(), model.hooks(fwd_hooks=[(name, partial(capture, name=name)) for name in names]):
        device_forward(model, tokens) if forward is None else forward(model, tokens.to(model_device(model)))
    out = {}
    for name in names:
        if name not in store:
            raise RuntimeError(f"attention hook point {name!r} did not run in the forward pass")
        pattern = store[name]
        out[name] = pattern[:, None] if pattern.ndim == 3 else pattern
    return out


@dataclass(frozen=True)
class AttentionScores:
    """Per head (``L{l}H{h}``): the mean attention to itself, the previous position and position 0."""

    heads: tuple[str, ...]
    self_score: tuple[float, ...]
    previous_score: tuple[float, ...]
    first_score: tuple[float, ...]

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame({"head": self.heads, "self": self.self_score, "previous": self.previous_score,
                             "first": self.first_score})


def attention_scores(patterns: dict[str, Tensor]) -> AttentionScores:
    """Where each head looks, from :func:`attention_patterns` (square patterns only; module docstring)."""
    if not isinstance(patterns, dict):
        raise TypeError(f"patterns must be a dict of per-layer patterns (attention_patterns), got {type(patterns).__name__}")
    for name, pattern in patterns.items():
        if not isinstance(pattern, Tensor) or pattern.ndim != 4:
            shape = tuple(pattern.shape) if isinstance(pattern, Tensor) else type(pattern).__name__
            raise ValueError(f"patterns[{name!r}] must be a [batch, head, query, key] tensor, got {shape}")
    heads, self_s, prev_s, first_s = [], [], [], []
    for index, pattern in enumerate(patterns.values()):
        if pattern.shape[-1] != pattern.shape[-2] or pattern.shape[-1] < 2:
            continue
        rows = torch.arange(1, pattern.shape[-1], device=pattern.device)
        for head in range(pattern.shape[1]):
            p = pattern[:, head].double()
            heads.append(f"L{index}H{head}")
            self_s.append(float(p[:, rows, rows].mean()))
            prev_s.append(float(p[:, rows, rows - 1].mean()))
            first_s.append(float(p[:, rows, 0].mean()))
    return AttentionScores(tuple(heads), tuple(self_s), tuple(prev_s), tuple(first_s))
