"""The one-layer models of Nichani, Lee & Bietti (2024, arXiv:2412.06538) for factual recall.

* :class:`FactualTransformer` (section 4): frozen random token embeddings and answer unembedding,
  one layer of multi-head softmax attention whose only query is the last (EOS) token, then a ReLU
  MLP (residual around both, no LayerNorm, no positional embedding).
* :class:`LinearAttentionModel` (section 5, eq. 7): one-hot embeddings, one linear head
  ``logit(a) = sum_t W_OV(z_t, a) w_KQ(z_t)`` initialised at a constant ``alpha`` (Theorem 6's setting).

Both are ``HookedRootModule`` s, not bridges: the readout is at EOS only (a bridge would compute
every position), the unembedding covers the answers only (eq. 7 normalises over ``A``), and TL has
no linear attention.  Their ``HookPoint`` s carry TL's names (``hook_embed``,
``blocks.0.attn.hook_q/k/v/pattern/z``, ``blocks.0.hook_attn_out/resid_mid/mlp_out/resid_post``,
``blocks.0.mlp.hook_pre/post``); after the keys and values the position axis has length 1 (the
EOS).  Logits are ``[batch, seq, n_out]``: the EOS readout in the last position, zeros elsewhere
(the task's loss mask is the EOS).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from perm_circuits._util import dataclass_from_dict
from perm_circuits.checks import check_int, check_number

__all__ = [
    "FactualConfig",
    "FactualTransformer",
    "LinearAttentionConfig",
    "LinearAttentionModel",
    "build_factual_model",
    "n_trainable",
]

PARAMS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_in", "b_in", "W_out", "W_U")


@dataclass(frozen=True)
class FactualConfig:
    """Architecture of :class:`FactualTransformer`: ``d_vocab`` input tokens, ``n_out`` readout classes
    (``task.n_answers``: answer ids ``0..n_out-1``), ``n_ctx`` positions, residual width ``d_model``
    (random embeddings are nearly orthogonal when it is large), ``n_heads`` heads of width ``d_head``,
    MLP width ``d_mlp`` (0: attention only); ``frozen`` parameters never train (default the
    embeddings and the unembedding); ``seed`` seeds every initial value, embeddings included."""

    d_vocab: int
    n_out: int
    n_ctx: int
    d_model: int = 32
    n_heads: int = 1
    d_head: int = 32
    d_mlp: int = 64
    frozen: tuple[str, ...] = ("W_E", "W_U")
    seed: int = 0
    n_layers = 1  # what TransformerLens' patching helpers read (a class attribute, not a field)

    def __post_init__(self) -> None:
        for name, low in (("d_vocab", 2), ("n_out", 2), ("n_ctx", 1), ("d_model", 1), ("n_heads", 1),
                          ("d_head", 1), ("d_mlp", 0), ("seed", 0)):
            check_int(name, getattr(self, name), low)
        if isinstance(self.frozen, list):
            object.__setattr__(self, "frozen", tuple(self.frozen))
        if not isinstance(self.frozen, tuple) or any(name not in PARAMS for name in self.frozen):
            raise ValueError(f"frozen must be a tuple of parameter names from {PARAMS}, got {self.frozen!r}")
        if self.d_mlp == 0 and any(name in self.frozen for name in ("W_in", "b_in", "W_out")):
            raise ValueError("frozen names an MLP parameter but d_mlp=0 (no MLP)")

    @classmethod
    def for_task(cls, task, **kwargs: Any) -> FactualConfig:
        """The config matching a :class:`~perm_circuits.tasks.factual.FactualRecallTask`."""
        return cls(d_vocab=task.d_vocab, n_out=task.n_answers, n_ctx=task.seq_len, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "frozen": list(self.frozen)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FactualConfig:
        return dataclass_from_dict(cls, dict(data))


def n_trainable(model: nn.Module) -> int:
    """Number of trainable scalars (the paper's parameter count: the embeddings are frozen)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _eos_logits(last: Float[Tensor, "batch out"], seq: int) -> Float[Tensor, "batch seq out"]:
    """Zeros at every position but the last, which carries the EOS readout."""
    pad = last.new_zeros(last.shape[0], seq - 1, last.shape[1])
    return torch.cat([pad, last[:, None]], dim=1)


class FactualTransformer(HookedRootModule):
    """One-layer transformer of section 4: attention with the EOS token as the only query, then a
    ReLU MLP, over frozen random embeddings (see the module docstring)."""

    def __init__(self, config: FactualConfig):
        super().__init__()
        if not isinstance(config, FactualConfig):
            raise TypeError(f"config must be a FactualConfig, got {type(config).__name__}")
        self.cfg = config
        c = config
        g = torch.Generator().manual_seed(c.seed)

        def normal(*shape: int, std: float) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=g) * std)

        self.W_E = normal(c.d_vocab, c.d_model, std=1 / math.sqrt(c.d_model))
        self.W_Q = normal(c.n_heads, c.d_model, c.d_head, std=1 / math.sqrt(c.d_model))
        self.W_K = normal(c.n_heads, c.d_model, c.d_head, std=1 / math.sqrt(c.d_model))
        self.W_V = normal(c.n_heads, c.d_model, c.d_head, std=1 / math.sqrt(c.d_model))
        self.W_O = normal(c.n_heads, c.d_head, c.d_model, std=1 / math.sqrt(c.n_heads * c.d_head))
        if c.d_mlp:
            self.W_in = normal(c.d_model, c.d_mlp, std=1 / math.sqrt(c.d_model))
            self.b_in = nn.Parameter(torch.zeros(c.d_mlp))
            self.W_out = normal(c.d_mlp, c.d_model, std=1 / math.sqrt(c.d_mlp))
        self.W_U = normal(c.d_model, c.n_out, std=1 / math.sqrt(c.d_model))
        for name, param in self.named_parameters():
            param.requires_grad_(name not in c.frozen)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([_BlockHooks(bool(c.d_mlp))])
        self.setup()
        self.eval()

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq out"]:
        c, block = self.cfg, self.blocks[0]
        x = self.hook_embed(self.W_E[tokens])  # [b, T, d]
        b, T, h, e = x.shape[0], x.shape[1], c.n_heads, c.d_head
        q = block.attn.hook_q((x[:, -1] @ self.W_Q.transpose(0, 1).reshape(c.d_model, h * e)).view(b, 1, h, e))
        k = block.attn.hook_k((x @ self.W_K.transpose(0, 1).reshape(c.d_model, h * e)).view(b, T, h, e))
        v = block.attn.hook_v((x @ self.W_V.transpose(0, 1).reshape(c.d_model, h * e)).view(b, T, h, e))
        scores = (k * q).sum(-1).transpose(1, 2)[:, :, None, :] / math.sqrt(e)  # [b, h, 1, T]
        pattern = block.attn.hook_pattern(scores.softmax(dim=-1))
        z = block.attn.hook_z((pattern[:, :, 0, :, None] * v.transpose(1, 2)).sum(2)[:, None])  # [b, 1, h, e]
        attn_out = block.hook_attn_out(z.reshape(b, 1, h * e) @ self.W_O.reshape(h * e, c.d_model))
        resid = block.hook_resid_mid(x[:, -1:] + attn_out)
        if c.d_mlp:
            pre = block.mlp.hook_pre(resid @ self.W_in + self.b_in)
            post = block.mlp.hook_post(torch.relu(pre))
            resid = resid + block.hook_mlp_out(post @ self.W_out)
        resid = block.hook_resid_post(resid)
        return _eos_logits(resid[:, 0] @ self.W_U, tokens.shape[1])

    @property
    def W_OV(self) -> Float[Tensor, "heads d_model d_model"]:
        return self.W_V @ self.W_O


class _Hooks(nn.Module):
    """One ``HookPoint`` per name (a block's ``attn`` or ``mlp``: the weights live on the root)."""

    def __init__(self, *names: str) -> None:
        super().__init__()
        for name in names:
            setattr(self, name, HookPoint())


class _BlockHooks(nn.Module):
    """The hook points of block 0 under TransformerLens' names (the weights live on the root)."""

    def __init__(self, mlp: bool) -> None:
        super().__init__()
        self.attn = _Hooks("hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z")
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        if mlp:
            self.mlp = _Hooks("hook_pre", "hook_post")
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()


def build_factual_model(task, **kwargs: Any) -> FactualTransformer:
    """``FactualTransformer(FactualConfig.for_task(task, **kwargs))``."""
    return FactualTransformer(FactualConfig.for_task(task, **kwargs))


@dataclass(frozen=True)
class LinearAttentionConfig:
    """Section 5's model: ``d = |V|`` one-hot embeddings, one linear head, init ``alpha``."""

    d_vocab: int
    n_out: int
    n_ctx: int
    alpha: float = 0.01

    def __post_init__(self) -> None:
        for name, low in (("d_vocab", 2), ("n_out", 2), ("n_ctx", 1)):
            check_int(name, getattr(self, name), low)
        check_number("alpha", self.alpha, low=0, strict=True, finite=False)

    @classmethod
    def for_task(cls, task, **kwargs: Any) -> LinearAttentionConfig:
        return cls(d_vocab=task.d_vocab, n_out=task.n_answers, n_ctx=task.seq_len, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LinearAttentionModel(HookedRootModule):
    """``logit(a) = sum_t W_OV(z_t, a) w_KQ(z_t)`` (eq. 7 with orthogonal embeddings): the parameters are
    ``W_OV(z, a) = e_a^T W_O W_V e_z`` and ``w_KQ(z) = e_z^T W_K^T W_Q e_EOS`` (nothing else to freeze);
    ``hook_pattern`` is the unnormalised linear attention ``w_KQ(z_t)`` of the EOS query."""

    def __init__(self, config: LinearAttentionConfig):
        super().__init__()
        if not isinstance(config, LinearAttentionConfig):
            raise TypeError(f"config must be a LinearAttentionConfig, got {type(config).__name__}")
        self.cfg = config
        self.W_OV = nn.Parameter(torch.full((config.d_vocab, config.n_out), float(config.alpha)))
        self.w_KQ = nn.Parameter(torch.full((config.d_vocab,), float(config.alpha)))
        self.blocks = nn.ModuleList([_BlockHooks(False)])
        self.setup()
        self.eval()

    def forward(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq out"]:
        block = self.blocks[0]
        pattern = block.attn.hook_pattern(self.w_KQ[tokens][:, None, None, :])  # [b, 1, 1, T]
        values = block.attn.hook_v(self.W_OV[tokens][:, :, None, :])  # [b, T, 1, out]
        z = block.attn.hook_z(torch.einsum("bhqt,bthe->bqhe", pattern, values))  # [b, 1, 1, out]
        out = block.hook_attn_out(z[:, :, 0])
        return _eos_logits(out[:, 0], tokens.shape[1])
