"""Running a model under a TransformerLens hook list, with validation and no leaks.

A hook list is ``[(hook_name, fn), ...]`` exactly as ``model.hooks(fwd_hooks=...)`` and
``model.run_with_hooks`` take it, so interventions compose with ``+``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial

import torch

from perm_circuits.devices import model_device
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import model_task

__all__ = ["HookList", "check_hooks", "check_token_ids", "hook_count", "run_capture", "run_logits"]

HookList = list[tuple[str, Callable]]


def check_hooks(model, hooks: Sequence[tuple[str, Callable]] | None) -> HookList:
    """Validate a hook list against ``model`` before anything runs; returns it as a list."""
    if hooks is None:
        return []
    if not isinstance(hooks, (list, tuple)):
        raise TypeError(f"hooks must be a list of (hook_name, fn) pairs, got {type(hooks).__name__}")
    names = model.hook_dict
    for index, item in enumerate(hooks):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"hooks[{index}] must be a (hook_name, fn) tuple, got {item!r}")
        name, fn = item
        if not isinstance(name, str):
            raise TypeError(f"hooks[{index}] name must be a str, got {type(name).__name__}")
        if name not in names:
            raise ValueError(f"hooks[{index}] names unknown hook point {name!r}")
        if not callable(fn):
            raise TypeError(f"hooks[{index}] fn for {name!r} is not callable")
    return list(hooks)


def check_token_ids(tokens: object, d_vocab: int | None = None) -> Tensor:
    """``tokens`` as an integer ``[batch >= 1, seq >= 1]`` tensor of ids in ``[0, d_vocab)`` (any task's
    tokens; ``d_vocab=None``: only non-negative)."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be an integer torch.Tensor [batch, seq], got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids, got dtype {tokens.dtype}")
    if tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 1:
        raise ValueError(f"tokens must have shape [batch >= 1, seq >= 1], got {tuple(tokens.shape)}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or (d_vocab is not None and high >= d_vocab):
        bound = f"[0, {d_vocab})" if d_vocab is not None else ">= 0"
        raise ValueError(f"token ids must be {bound}, got values {low}..{high}")
    return tokens


def hook_count(model) -> int:
    """Number of forward/backward hooks attached anywhere on ``model`` (0 when clean)."""
    hook_points = {id(h): h for h in model.hook_dict.values()}.values()
    return sum(len(h._forward_hooks) + len(h._backward_hooks) for h in hook_points)


def run_logits(
    model, tokens: Int[Tensor, "batch seq"], hooks: Sequence[tuple[str, Callable]] | None = None
) -> Float[Tensor, "batch seq vocab"]:
    """Logits of ``model`` on validated ``tokens`` under ``hooks`` (removed afterwards, always).

    The forward runs on the model's device; the logits come back on the tokens' device.  The
    tokens are checked by the model's task (:func:`~perm_circuits.tasks.base.model_task`) where it
    has a ``check_tokens`` (the permutation task's: ids ``1..V``, length ``2V - 1``), else against
    the model's vocabulary (:func:`~perm_circuits.model_shape.model_shape`), where it declares one.
    """
    check_tokens = getattr(model_task(model), "check_tokens", None)
    tokens = check_tokens(tokens) if check_tokens is not None else check_token_ids(tokens, model_shape(model).d_vocab)
    hooks = check_hooks(model, hooks)
    with torch.no_grad(), model.hooks(fwd_hooks=hooks) if hooks else nullcontext():
        return model(tokens.to(model_device(model))).to(tokens.device)


def run_capture(
    model, tokens: Int[Tensor, "batch seq"], names: Sequence[str], hooks: Sequence[tuple[str, Callable]] | None = None
) -> tuple[Float[Tensor, "batch seq vocab"], dict[str, Tensor]]:
    """Logits and the activations at ``names`` as they are after ``hooks`` (which run first), from one
    no-grad forward (all hooks removed afterwards, always).  Callers validate the arguments."""
    store: dict[str, Tensor] = {}

    def capture(activation: Tensor, hook, name: str) -> None:
        store[name] = activation.detach().clone()

    fwd = list(hooks or []) + [(name, partial(capture, name=name)) for name in dict.fromkeys(names)]
    with torch.no_grad(), model.hooks(fwd_hooks=fwd):
        logits = model(tokens.to(model_device(model)))
    if logits.device != tokens.device:  # back to where the caller's batch lives (see run_logits)
        logits, store = logits.to(tokens.device), {k: v.to(tokens.device) for k, v in store.items()}
    return logits, store
