"""Tiny transformers as TransformerLens 4 configs, and their checkpoints.

Models are ``TransformerBridge.boot_native(TransformerBridgeConfig(...))`` bridges (hook names as
``HookedTransformer``'s: ``blocks.0.attn.hook_pattern``, ``hook_z``, ``mlp.hook_post``...): token +
learned positional embedding, ``n_layers`` pre-LayerNorm blocks of causal multi-head attention and
a ReLU MLP of width ``2 d_model``, a final LayerNorm and an unembedding to ``V + 1`` logits.
Dropout (``ModelConfig.dropout``, default 0.0; the study's PyTorch model had torch's 0.1, with which
recall has been reported not to form) acts only in :func:`fast_forward` in train mode, where
``torch.nn.TransformerEncoderLayer`` puts it; the bridge itself, evaluation and every analysis run
without it.

Checkpoints are a folder with ``model.safetensors`` (the bridge's ``state_dict`` keys, with the model
and task config and the training metadata in its header: one atomic, hashed record) and
``config.json`` (the same record and the weights' SHA-256), see :mod:`perm_circuits.checkpoint_io`.
Loading checks the record, every hash, key and shape, and never unpickles.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits._util import dataclass_from_dict
from perm_circuits.checkpoint_io import (CONFIG_FILE, FORMAT_VERSION, WEIGHTS_FILE, CheckpointError,  # noqa: F401
                                         read_checkpoint_files, write_checkpoint_files)
from perm_circuits.checks import MAX_PARAMETERS, check_int, check_number, check_seed, check_size
from perm_circuits.devices import resolve_device, to_device
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = [
    "ACTIVATIONS",
    "PRESETS",
    "Checkpoint",
    "ModelConfig",
    "bridge_task",
    "build_model",
    "check_permutation_fit",
    "fast_forward",
    "list_pretrained",
    "load_any",
    "load_checkpoint",
    "load_model",
    "load_pretrained",
    "load_weights",
    "model_config_of",
    "save_model",
    "task_config_of",
    "write_checkpoint_files",
]

PRETRAINED_DIR = Path(__file__).parent / "pretrained"
TASK_RECORD = "trained_on"
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_new": partial(torch.nn.functional.gelu, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}
"""The MLP activation of each ``ModelConfig.act_fn``, as the bridge computes it."""
"""The config.json key of a checkpoint of a model trained on any registered task (in place of
``model`` and ``task``): ``{"task": task.to_dict(), "model": fields, "seed": seed}``, what
:func:`perm_circuits.tasks.checkpoint.load_task_checkpoint` rebuilds the task and its model from."""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a tiny transformer for a task over ``V`` values.

    ``d_mlp`` defaults to ``2 * d_model``, ``d_head`` to ``d_model // n_heads`` and ``n_ctx`` to
    ``2V - 1`` (the permutation task's length).  The config is checked against the task it is
    trained on where it meets it (any task: ``tasks.runner.check_fit``; the permutation task:
    :func:`check_permutation_fit`), not here: ``ModelConfig(V=6, n_ctx=8)`` fits a task of 8 tokens.  ``seed`` seeds the initialization (TransformerLens' scoped, RNG-forking init).
    ``dropout`` is the drop probability in [0, 1) of training (:func:`fast_forward`); it needs
    LayerNorm or no normalization.
    """

    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 1
    V: int = 5
    d_mlp: int | None = None
    d_head: int | None = None
    n_ctx: int | None = None
    act_fn: str = "relu"
    normalization_type: str | None = "LN"
    seed: int = 0
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers", "V"):
            check_int(name, getattr(self, name))
        check_seed(self.seed)  # the init seed: one torch.manual_seed takes
        for name in ("d_model", "n_heads", "n_layers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        TaskConfig(V=self.V)  # validates V
        for name in ("d_mlp", "d_head", "n_ctx"):
            value = getattr(self, name)
            if value is not None and check_int(name, value) <= 0:
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; pass d_head"
            )
        check_size(f"{self.name}'s parameter count", self.n_parameters, MAX_PARAMETERS)  # before any allocation
        if self.act_fn not in ACTIVATIONS:
            raise ValueError(f"act_fn must be relu/gelu/gelu_new/silu, got {self.act_fn!r}")
        if self.normalization_type not in ("LN", "LNPre", "RMS", "RMSPre", None):
            raise ValueError(f"normalization_type must be LN/LNPre/RMS/RMSPre/None, got {self.normalization_type!r}")
        if not 0 <= check_number("dropout", self.dropout, finite=False) < 1:  # also rejects NaN
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "dropout", float(self.dropout))  # 0 and 0.0 are the same config
        if self.dropout > 0 and self.normalization_type not in ("LN", None):
            raise ValueError(
                f"dropout > 0 needs normalization_type 'LN' or None (the ones fast_forward trains), "
                f"got {self.normalization_type!r}"
            )

    @property
    def n_parameters(self) -> int:
        """The parameter count of the model this config builds, computed without allocating (exact with
        LayerNorm; a few hundred over with RMS or no normalization): what the size limit checks."""
        d, attn = self.d_model, self.n_heads * self.resolved_d_head
        block = 4 * d * attn + 3 * attn + d + 2 * d * self.resolved_d_mlp + self.resolved_d_mlp + d + 4 * d
        return (self.V + 1) * d + self.resolved_n_ctx * d + self.n_layers * block + 2 * d + d * (self.V + 1)

    @property
    def resolved_d_mlp(self) -> int:
        return self.d_mlp if self.d_mlp is not None else 2 * self.d_model

    @property
    def resolved_d_head(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def resolved_n_ctx(self) -> int:
        return self.n_ctx if self.n_ctx is not None else 2 * self.V - 1

    @property
    def name(self) -> str:
        layers = f"l{self.n_layers}" if self.n_layers != 1 else ""
        return f"d{self.d_model}h{self.n_heads}{layers}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, complete: bool = False) -> ModelConfig:
        """From :meth:`to_dict` output; unknown fields (and missing ones if ``complete``) are errors,
        except :data:`ADDED_FIELDS` (a missing ``dropout`` reads as 0.0: older checkpoints load)."""
        return dataclass_from_dict(cls, data, complete=complete, added=ADDED_FIELDS)

    def to_tl_config(self):
        """The ``TransformerBridgeConfig`` this architecture boots from."""
        from transformer_lens.config import TransformerBridgeConfig

        return TransformerBridgeConfig(
            d_model=self.d_model,
            d_head=self.resolved_d_head,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            n_ctx=self.resolved_n_ctx,
            d_vocab=self.V + 1,
            d_mlp=self.resolved_d_mlp,
            act_fn=self.act_fn,
            normalization_type=self.normalization_type,
            positional_embedding_type="standard",
            seed=self.seed,
            tokenizer_prepends_bos=False,
            model_name=self.name,
        )


ADDED_FIELDS: dict[str, Any] = {"dropout": 0.0}
"""ModelConfig fields newer than the checkpoint format, with the value an older checkpoint implies."""

PRESETS: dict[str, ModelConfig] = {
    "d16h1": ModelConfig(d_model=16, n_heads=1),
    "d32h1": ModelConfig(d_model=32, n_heads=1),
    "d32h2": ModelConfig(d_model=32, n_heads=2),
}


def resolve_config(config: ModelConfig | str, seed: int | None = None) -> ModelConfig:
    """A ``ModelConfig`` from a config or a preset name, optionally with another seed."""
    if isinstance(config, str):
        if config not in PRESETS:
            raise ValueError(f"unknown preset {config!r}; expected one of {sorted(PRESETS)}")
        config = PRESETS[config]
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig or preset name, got {type(config).__name__}")
    if seed is not None:
        config = ModelConfig.from_dict({**config.to_dict(), "seed": seed})
    return config


def build_model(config: ModelConfig | str = "d32h2", *, seed: int | None = None,
                device: str | torch.device | None = None):
    """Boot a freshly initialized bridge (seeded, in eval mode) from a config or preset name; the
    weights are initialised on the CPU (the same numbers on every machine), then moved to ``device``."""
    from transformer_lens.model_bridge import TransformerBridge

    target = resolve_device(device)
    config = resolve_config(config, seed)
    model = TransformerBridge.boot_native(config.to_tl_config())
    if target.type != "cpu":
        model.to(target)
    model.eval()
    model.perm_config = config  # type: ignore[attr-defined]
    return model


def check_permutation_fit(config: ModelConfig) -> ModelConfig:
    """``config`` if it fits the permutation task over its ``V`` values (a context of at least
    ``2V - 1`` tokens); ValueError otherwise.  Where a model meets the permutation task (the study's
    training loop, a bridge read as a permutation-lookup model), not in :class:`ModelConfig`."""
    if config.resolved_n_ctx < 2 * config.V - 1:
        raise ValueError(f"n_ctx={config.n_ctx} is shorter than the permutation task's 2V-1={2 * config.V - 1}")
    return config


def _config_from_cfg(model) -> ModelConfig:
    """The ``ModelConfig`` of a bridge's TL config (no task rule checked); TypeError / ValueError when
    its cfg is not one a ``ModelConfig`` describes."""
    cfg = getattr(model, "cfg", None)
    missing = [name for name in ("d_model", "n_heads", "n_layers", "d_vocab") if not hasattr(cfg, name)]
    if missing:
        raise TypeError(f"its cfg lacks {missing}")
    # a bridge without perm_config has no dropout setting: 0.0
    return ModelConfig(d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers, V=cfg.d_vocab - 1,
                       d_mlp=cfg.d_mlp, d_head=cfg.d_head, n_ctx=cfg.n_ctx, act_fn=cfg.act_fn,
                       normalization_type=cfg.normalization_type, seed=cfg.seed or 0)


def model_config_of(model) -> ModelConfig:
    """The ``ModelConfig`` a bridge was built from (rebuilt from its TL config if needed)."""
    config = getattr(model, "perm_config", None)
    if isinstance(config, ModelConfig):
        return config
    hint = ("on any other model use the task-agnostic analyses (ablate/ablate_head with reference=TaskBatch, "
            "patch_head, ablation_table(..., task=task), evaluate(model, task=task); docs/tasks.md 'Analyses on any task')")
    try:
        return check_permutation_fit(_config_from_cfg(model))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{type(model).__name__} is not a permutation-lookup model ({error}); {hint}") from error


def weight_ops(
    config: ModelConfig, w: dict[str, Tensor],
) -> tuple[Callable[[Tensor, str], Tensor], Callable[[Tensor, str], Tensor]]:
    """``norm(x, name)`` and ``linear(x, name)`` on a bridge's ``state_dict`` tensors ``w`` (keys such
    as ``blocks.0.ln1`` / ``blocks.0.attn.q``), as the bridge computes them: LayerNorm (eps 1e-5) or
    none, ``x @ W^T + b``.  The weights of :func:`fast_forward` and of the optimal-ablation search
    (:mod:`perm_circuits.analysis.interventions.optimal`)."""

    def norm(x: Tensor, name: str) -> Tensor:
        if config.normalization_type is None:
            return x
        return torch.nn.functional.layer_norm(x, (config.d_model,), w[f"{name}.weight"], w[f"{name}.bias"], 1e-5)

    def linear(x: Tensor, name: str) -> Tensor:
        return torch.nn.functional.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

    return norm, linear


def unembed(
    w: dict[str, Tensor], resid: Float[Tensor, "*batch pos d_model"], norm: Callable[[Tensor, str], Tensor],
) -> Float[Tensor, "*batch pos vocab"]:
    """The logits of the final residual stream: ``ln_final``, then the unembedding (and its bias
    when the weights have one), as the bridge computes them."""
    out = torch.nn.functional.linear(norm(resid, "ln_final"), w["unembed.weight"])
    if "unembed.bias" in w:
        out = out + w["unembed.bias"]
    return out


def run_blocks(
    config: ModelConfig,
    resid: Float[Tensor, "*batch seq d_model"],
    norm: Callable[[Tensor, str], Tensor],
    linear: Callable[[Tensor, str], Tensor],
    drop: Callable[[Tensor], Tensor] | None = None,
    act: Callable[[Tensor], Tensor] | None = None,
    *,
    layers: range | None = None,
    queries: Int[Tensor, " query"] | None = None,
) -> Float[Tensor, "*batch out_seq d_model"]:
    """The residual stream after every block of ``config`` (leading axes: batch): the one body of
    the study's plain-PyTorch forwards, :func:`fast_forward` (training),
    :func:`perm_circuits.stacked.stacked_forward` (stacked training) and the optimal-ablation
    search (:mod:`perm_circuits.analysis.interventions.optimal`), which pass their own
    ``norm(x, name)``, ``linear(x, name)`` (the weights under ``name``, e.g. ``blocks.0.attn.q``)
    and, for dropout, ``drop`` (where :func:`fast_forward` says; attention is then explicit); ``act``
    replaces the MLP activation ``ACTIVATIONS[config.act_fn]`` (the stacked forward applies it per member).

    ``layers``: the blocks to run (default all; the optimal-ablation search starts after the
    ablated one).  ``queries`` (no dropout; batch axes ``[batch]`` only): positions at which the
    last block of ``layers`` computes its queries, attention output and MLP; the result then has
    ``len(queries)`` positions (``out_seq``; every earlier position's keys and values are still read,
    causally), else ``seq``."""
    n_heads, d_head, seq = config.n_heads, config.resolved_d_head, resid.shape[-2]
    act = act or ACTIVATIONS[config.act_fn]
    dropped = drop or (lambda x: x)
    layers = range(config.n_layers) if layers is None else layers
    for layer in layers:
        b = f"blocks.{layer}"
        h = norm(resid, f"{b}.ln1")
        if queries is not None and layer == layers[-1]:  # the last block at the query positions only
            k, v = (linear(h, f"{b}.attn.{n}").view(-1, seq, n_heads, d_head).transpose(1, 2) for n in "kv")
            resid, h = resid[..., queries, :], h[..., queries, :]
            q = linear(h, f"{b}.attn.q").view(-1, len(queries), n_heads, d_head).transpose(1, 2)
            causal = queries[:, None] >= torch.arange(seq, device=queries.device)[None, :]
            z = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        else:  # q, k, v made in this order: the backward's sums round as they always have (same seed, same bits)
            q, k, v = (linear(h, f"{b}.attn.{n}").view(-1, seq, n_heads, d_head).transpose(1, 2) for n in "qkv")
            if drop is None:
                z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-1, -2)) / math.sqrt(d_head)
                causal = torch.ones(seq, seq, dtype=torch.bool, device=resid.device).tril()
                z = drop(torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)) @ v
        resid = resid + dropped(linear(z.transpose(1, 2).reshape(*resid.shape[:-1], n_heads * d_head), f"{b}.attn.o"))
        resid = resid + dropped(linear(dropped(act(linear(norm(resid, f"{b}.ln2"), f"{b}.mlp.in"))), f"{b}.mlp.out"))
    return resid


def fast_forward(
    model,
    tokens: Int[Tensor, "batch seq"],
    weights: dict[str, Tensor] | None = None,
    *,
    generator: torch.Generator | None = None,
) -> Float[Tensor, "batch seq vocab"]:
    """The bridge's forward pass in plain PyTorch, on the bridge's own parameters (gradients reach
    the same ``Parameter`` objects; the logits equal ``model(tokens)``).

    Training uses it: the bridge's per-call hook machinery costs several times the arithmetic of a
    model this small.  Computes LayerNorm or no normalization (other configurations run the
    bridge).  ``weights=model.state_dict(keep_vars=True)`` skips re-collecting them on every call.

    Dropout: in train mode with ``ModelConfig.dropout > 0``, masks are drawn from ``generator``
    (required then; never the global RNG) at the attention pattern (after the softmax), attention
    output (after ``W_O``, before the residual add), MLP hidden activation and MLP output (before the
    residual add) of each layer, in that order, with explicit attention.  In eval mode, or with
    ``dropout == 0``, the result is the bridge's and ``generator`` is unused.

    Any bridge :func:`build_model` builds, whatever task it is trained on, and any ``boot_native``
    bridge a ``ModelConfig`` describes (its ``cfg``); any other model runs its own forward.
    """
    config = getattr(model, "perm_config", None)
    if not isinstance(config, ModelConfig):
        try:
            config = _config_from_cfg(model)
        except (TypeError, ValueError):
            return model(tokens)
        cfg = model.cfg
        if (getattr(cfg, "attn_only", False) or getattr(cfg, "positional_embedding_type", "standard") != "standard"
                or not getattr(cfg, "use_attn_scale", True) or getattr(cfg, "attention_dir", "causal") != "causal"):
            return model(tokens)
    p = config.dropout if model.training else 0.0
    if p > 0 and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"fast_forward in train mode with dropout={p} needs generator=torch.Generator(...) for the "
            f"dropout masks (got {generator!r}); call model.eval() for a forward pass without dropout"
        )
    if config.normalization_type not in ("LN", None):
        return model(tokens)
    w = model.state_dict(keep_vars=True) if weights is None else weights
    norm, linear = weight_ops(config, w)

    def drop(x: Tensor) -> Tensor:  # inverted dropout, as torch.nn.Dropout, masks from `generator`
        keep = torch.empty_like(x).bernoulli_(1 - p, generator=generator)
        return x * keep / (1 - p)

    resid = w["embed.weight"][tokens] + w["pos_embed.weight"][: tokens.shape[1]]
    return unembed(w, run_blocks(config, resid, norm, linear, drop if p > 0 else None), norm)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the model plus everything stored beside its weights."""

    model: Any
    model_config: ModelConfig
    task_config: TaskConfig
    metadata: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def save_model(
    model,
    path: str | os.PathLike,
    task: TaskConfig | None = None,
    metadata: dict[str, Any] | None = None,
    extra_tensors: dict[str, Tensor] | None = None,
) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into folder ``path`` (:func:`write_checkpoint_files`).

    ``task`` (the permutation task's TaskConfig) defaults to the one the model carries (:func:`task_config_of`); ``metadata`` is e.g.
    training config, command, metrics; ``extra_tensors`` (optimizer state, RNG state) are stored in
    the same safetensors file under an ``extra.`` prefix.
    """
    path = Path(path)
    config = model_config_of(model)
    if task is not None and not isinstance(task, TaskConfig):
        raise TypeError(f"task must be a TaskConfig or None, got {type(task).__name__}")
    if task is not None and task.V != config.V:  # load_checkpoint would refuse the folder
        raise ValueError(f"task has V={task.V} but the model has V={config.V}")
    if extra_tensors is not None and not isinstance(extra_tensors, dict):
        raise TypeError(f"extra_tensors must be a dict of name -> Tensor, got {type(extra_tensors).__name__}")
    for key, value in (extra_tensors or {}).items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise TypeError(f"extra_tensors must map str names to Tensors, got {key!r}: {type(value).__name__}")
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}  # stored from the CPU
    for key, value in (extra_tensors or {}).items():
        tensors[f"extra.{key}"] = value.detach().cpu().contiguous().clone()
    fields = {"model": config.to_dict(), "task": (task or task_config_of(model)).to_dict()}
    return write_checkpoint_files(path, tensors, fields, metadata)


def load_checkpoint(path: str | os.PathLike, *, device: str | torch.device | None = None) -> Checkpoint:
    """Load and validate a checkpoint folder written by :func:`save_model` (the model on ``device``, default CPU)."""
    document, tensors = read_checkpoint_files(path)
    if TASK_RECORD in document and "model" not in document:
        record = document[TASK_RECORD]
        name = record.get("task", {}).get("task") if isinstance(record, dict) and isinstance(record.get("task"), dict) else None
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds a model trained on task {name!r}, not a permutation-lookup model: "
            "load it with perm_circuits.tasks.checkpoint.load_task_checkpoint (CLI: perm-circuits report PATH --import MODULE)"
        )
    try:
        config = ModelConfig.from_dict(document["model"], complete=True)
        task_config = TaskConfig.from_dict(document["task"], complete=True)
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"invalid model/task config in {path}: {error}") from None
    if task_config.V != config.V:
        raise CheckpointError(f"task V={task_config.V} does not match model V={config.V}")
    if not isinstance(document.get("metadata", {}), dict):
        raise CheckpointError(f"metadata in {path / CONFIG_FILE} must be a JSON object")
    # cheap shape checks before building anything (a wrong d_model could allocate a huge model)
    for key, shape in {
        "embed.weight": (config.V + 1, config.d_model),
        "pos_embed.weight": (config.resolved_n_ctx, config.d_model),
        "blocks.0.mlp.in.weight": (config.resolved_d_mlp, config.d_model),
    }.items():
        if key not in tensors:
            raise CheckpointError(f"checkpoint {str(path)!r} has no weight {key} (a {config.name} has one)")
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(
                f"{key} has shape {tuple(tensors[key].shape)} but {config.name} expects {shape}"
            )
    model = build_model(config)
    load_weights(model, tensors, config.name)
    to_device(model, device)
    model.eval()
    metadata = document.get("metadata", {})
    model.task_config = task_config  # type: ignore[attr-defined]
    model.metadata = metadata  # type: ignore[attr-defined]
    return Checkpoint(model, config, task_config, metadata, Path(path))


def load_weights(model: torch.nn.Module, tensors: dict[str, Tensor], name: str) -> None:
    """Load a checkpoint's ``tensors`` (less the ``extra.`` ones) into freshly built ``model``
    (called ``name`` in errors), after checking every key, shape and dtype and that all values are
    finite (:class:`CheckpointError` otherwise)."""
    expected = model.state_dict()
    weights = {k: v for k, v in tensors.items() if not k.startswith("extra.")}
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"checkpoint keys do not match {name}: missing {missing}, unexpected {unexpected}")
    for key, value in weights.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(f"{key} has shape {tuple(value.shape)} but {name} expects {tuple(expected[key].shape)}")
        if value.dtype != expected[key].dtype:
            raise CheckpointError(f"{key} has dtype {value.dtype}, expected {expected[key].dtype}")
        if not torch.isfinite(value).all():
            raise CheckpointError(f"{key} has non-finite values")
    model.load_state_dict(weights, strict=True)


def load_model(path: str | os.PathLike, *, device: str | torch.device | None = None):
    """Load the model of a checkpoint folder (validated, eval mode, on ``device``; default CPU),
    carrying ``perm_config``, ``task_config`` and ``metadata`` attributes (analyses read its task)."""
    return load_checkpoint(path, device=device).model


def task_config_of(model) -> TaskConfig:
    """The task a model was trained on (stored on loaded models), else the plain task for its V."""
    config = getattr(model, "task_config", None)
    return config if isinstance(config, TaskConfig) else TaskConfig(V=model_config_of(model).V)


def bridge_task(model: object):
    """The :class:`~perm_circuits.tasks.PermutationTask` of one of the study's bridges (a model carrying
    its ``ModelConfig``): the task it was trained on where stored, else the plain task of its V;
    ``None`` for any other model.  The permutation task's ``recognise`` (``tasks.base.model_task``)."""
    if not isinstance(getattr(model, "perm_config", None), ModelConfig):
        return None
    from perm_circuits.tasks.permutation import PermutationTask  # on first use: it loads pandas

    return PermutationTask(task_config_of(model))


def list_pretrained() -> list[str]:
    """Names of the pretrained models shipped inside the package."""
    if not PRETRAINED_DIR.is_dir():
        return []
    return sorted(p.name for p in PRETRAINED_DIR.iterdir() if (p / CONFIG_FILE).is_file())


def load_pretrained(name: str = "d32h2", *, device: str | torch.device | None = None):
    """A shipped pretrained model, offline, in eval mode, on ``device`` (default CPU), trained by
    ``scripts/train_pretrained.py`` on the study's recipe (repeat_ratio 0.3); the command, seed and
    final metrics are in ``model.metadata``, the task in ``model.task_config``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    available = list_pretrained()
    if name not in available:
        raise ValueError(f"unknown pretrained model {name!r}; available: {available}")
    return load_model(PRETRAINED_DIR / name, device=device)


def load_any(name: str | os.PathLike[str], *, device: str | torch.device | None = None):
    """A model from a checkpoint folder or, when no such folder exists, a pretrained name (a folder
    holding ``config.json`` wins; one without it is loaded as a checkpoint, whose error says why)."""
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a pretrained name or checkpoint folder (str or Path), got {type(name).__name__}")
    path = Path(name)
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        return load_model(path, device=device)
    if isinstance(name, str) and name in list_pretrained():
        return load_pretrained(name, device=device)
    if path.is_dir():
        return load_model(path, device=device)
    raise ValueError(f"{str(name)!r} is neither a pretrained model {list_pretrained()} nor a checkpoint folder")


def describe(model) -> str:
    """One line: the architecture and the parameter count (and its float32 size)."""
    config, n_params = model_config_of(model), sum(p.numel() for p in model.parameters())
    return (
        f"{config.name}: d_model={config.d_model} n_heads={config.n_heads} d_head={config.resolved_d_head} "
        f"n_layers={config.n_layers} d_mlp={config.resolved_d_mlp} V={config.V} "
        f"params={n_params} ({math.ceil(n_params * 4 / 1024)} KiB)"
    )
