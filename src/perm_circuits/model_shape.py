"""The shape of any model with TransformerLens hook points: layers, heads, widths, hook names.

The permutation-lookup analyses read a :class:`~perm_circuits.models.ModelConfig`; the
task-agnostic ones read :func:`model_shape`: a :func:`~perm_circuits.models.build_model` bridge's
``ModelConfig`` numbers, else ``model.cfg``'s ``n_layers``, ``n_heads``, ``d_head``, ``d_model``,
``d_mlp``, ``d_vocab`` and ``n_ctx`` where present (duck-typed: a missing one is ``None``; the
layers otherwise counted from the ``blocks.L.`` hook names), and the hook names of ``model.hook_dict``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perm_circuits.models import ModelConfig

__all__ = ["ModelShape", "model_shape", "normalization_of"]

_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.")


def normalization_of(model: object) -> str | None:
    """The model's normalization type (``"LN"``, ``"LNPre"``, ``"RMS"``, ``"RMSPre"``; None without one):
    its ``ModelConfig``'s for a study bridge, else ``model.cfg.normalization_type`` where present."""
    config = getattr(model, "perm_config", None)
    if isinstance(config, ModelConfig):
        return config.normalization_type
    return getattr(getattr(model, "cfg", None), "normalization_type", None)


@dataclass(frozen=True)
class ModelShape:
    """What the task-agnostic analyses need to know about a hooked model: ``None`` marks a size it does
    not declare (e.g. ``d_mlp`` of an attention-only model).  It says nothing of the task: that is
    :func:`~perm_circuits.tasks.base.model_task`'s."""

    n_layers: int
    n_heads: int | None
    d_head: int | None
    d_model: int | None
    d_mlp: int | None
    d_vocab: int | None
    n_ctx: int | None
    hook_names: tuple[str, ...]

    def has_hook(self, name: str) -> bool:
        return name in self.hook_names

    def heads(self, layer: int) -> bool:
        """Whether layer ``layer`` has per-head outputs to intervene on (``blocks.L.attn.hook_z``)."""
        return self.has_hook(f"blocks.{layer}.attn.hook_z")

    def mlp(self, layer: int) -> bool:
        """Whether layer ``layer`` has an MLP output hook (``blocks.L.hook_mlp_out``)."""
        return self.has_hook(f"blocks.{layer}.hook_mlp_out")


def _positive(cfg: object, name: str) -> int | None:
    value = getattr(cfg, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def model_shape(model: object) -> ModelShape:
    """The :class:`ModelShape` of a bridge or ``HookedRootModule`` (module docstring); TypeError
    for an object without TransformerLens hook points (``hook_dict``)."""
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(hook_dict, dict):
        raise TypeError(
            f"model must expose TransformerLens hook points (a bridge or a HookedRootModule with a hook_dict), "
            f"got {type(model).__name__}"
        )
    names = tuple(hook_dict)
    config = getattr(model, "perm_config", None)
    if isinstance(config, ModelConfig):
        return ModelShape(n_layers=config.n_layers, n_heads=config.n_heads, d_head=config.resolved_d_head,
            d_model=config.d_model, d_mlp=config.resolved_d_mlp, d_vocab=config.V + 1, n_ctx=config.n_ctx,
            hook_names=names)
    cfg = getattr(model, "cfg", None)
    n_layers = _positive(cfg, "n_layers")
    if n_layers is None:
        layers = {int(m.group(1)) for name in names if (m := _BLOCK_RE.match(name))}
        n_layers = max(layers) + 1 if layers else 0
    d_mlp = None if getattr(cfg, "attn_only", False) else _positive(cfg, "d_mlp")
    return ModelShape(n_layers=n_layers, n_heads=_positive(cfg, "n_heads"), d_head=_positive(cfg, "d_head"),
        d_model=_positive(cfg, "d_model"), d_mlp=d_mlp, d_vocab=_positive(cfg, "d_vocab"),
        n_ctx=_positive(cfg, "n_ctx"), hook_names=names)
