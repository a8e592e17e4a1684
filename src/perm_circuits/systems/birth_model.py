"""The models of Bietti et al. (2023), "Birth of a Transformer", as TransformerLens 4 configs.

* :func:`build_birth_model`: the paper's simplified two-layer model (section 4.2): attention-only,
  one head per layer with ``d_head = d_model``, no LayerNorm, no MLP; frozen random ``w_E``,
  ``p_t``, ``w_U``, ``W_V^1``, ``W_V^2``, ``W_O^1``; ``W_Q^1 = W_Q^2 = I``; trainable ``W_K^1``,
  ``W_K^2``, ``W_O^2``; zero frozen biases.  The frozen set is a config field
  (:attr:`BirthModelConfig.frozen`) applied by the builder.  Scores are divided by ``sqrt(d_head)``
  (as in the authors' code).  Init from ``torch.Generator().manual_seed(seed)``: ``w_E``, ``p_t``
  standard normal, every other matrix uniform in ``±1/sqrt(d_model)`` (``nn.Linear``'s default).
* :func:`build_full_model`: the ordinary pre-LN transformers (attention + ReLU MLP, all trainable)
  of the paper's 1-layer vs 2-layer comparison.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_int

__all__ = [
    "FROZEN_NAMES",
    "BirthModelConfig",
    "FullModelConfig",
    "build_birth_model",
    "build_full_model",
    "frozen_keys",
    "handbuilt_induction_model",
    "plain_forward",
    "trainable_keys",
]

FROZEN_NAMES = ("embed", "pos_embed", "unembed", "W_Q", "W_K", "W_V", "W_O", "biases")
"""Names a ``frozen`` entry may use; ``W_*`` may carry a layer suffix (``"W_O.0"``)."""

_MATRIX = {"W_Q": "q", "W_K": "k", "W_V": "v", "W_O": "o"}


@dataclass(frozen=True)
class BirthModelConfig:
    """The simplified two-layer model (module docstring): vocabulary ``N``, context ``T``, width
    ``d_model`` (= head width; the paper's 128), ``seed`` of the whole initialisation, and the
    ``frozen`` parameters (entries of :data:`FROZEN_NAMES`; ``"W_O.0"`` is layer 1's output matrix in
    the paper's 1-based count).  The default leaves exactly ``W_K.0``, ``W_K.1``, ``W_O.1`` trainable."""

    N: int = 65
    T: int = 256
    d_model: int = 128
    seed: int = 0
    frozen: tuple[str, ...] = ("embed", "pos_embed", "unembed", "W_Q", "W_V", "W_O.0", "biases")

    def __post_init__(self) -> None:
        for name, low in (("N", 2), ("T", 2), ("d_model", 1), ("seed", 0)):
            check_int(name, getattr(self, name), low)
        if isinstance(self.frozen, str) or not isinstance(self.frozen, (tuple, list)):
            raise TypeError(f"frozen must be a tuple of names, got {self.frozen!r}")
        object.__setattr__(self, "frozen", tuple(self.frozen))
        for entry in self.frozen:
            if not isinstance(entry, str):
                raise TypeError(f"frozen entries must be strings, got {entry!r}")
            base, _, layer = entry.partition(".")
            if base not in FROZEN_NAMES or (layer and (base not in _MATRIX or layer not in ("0", "1"))):
                raise ValueError(
                    f"unknown frozen entry {entry!r}: expected one of {FROZEN_NAMES}, W_* optionally "
                    f"with a layer suffix .0 or .1"
                )

    def to_tl_config(self):
        from transformer_lens.config import TransformerBridgeConfig

        return TransformerBridgeConfig(
            d_model=self.d_model, d_head=self.d_model, n_heads=1, n_layers=2, n_ctx=self.T,
            d_vocab=self.N, attn_only=True, normalization_type=None, positional_embedding_type="standard",
            seed=self.seed, tokenizer_prepends_bos=False, model_name=f"birth_d{self.d_model}",
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "frozen": list(self.frozen)}


@dataclass(frozen=True)
class FullModelConfig:
    """A plain pre-LN transformer (attention + ReLU MLP of width ``4 d_model``, all trainable)."""

    N: int = 65
    T: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("N", 2), ("T", 2), ("d_model", 1), ("n_layers", 1), ("n_heads", 1), ("seed", 0)):
            check_int(name, getattr(self, name), low)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    def to_tl_config(self):
        from transformer_lens.config import TransformerBridgeConfig

        return TransformerBridgeConfig(
            d_model=self.d_model, d_head=self.d_model // self.n_heads, n_heads=self.n_heads,
            n_layers=self.n_layers, n_ctx=self.T, d_vocab=self.N, d_mlp=4 * self.d_model, act_fn="relu",
            normalization_type="LN", positional_embedding_type="standard", seed=self.seed,
            tokenizer_prepends_bos=False, model_name=f"full_l{self.n_layers}_d{self.d_model}",
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def frozen_keys(config: BirthModelConfig) -> tuple[str, ...]:
    """The bridge ``state_dict`` keys that ``config.frozen`` names (sorted)."""
    if not isinstance(config, BirthModelConfig):
        raise TypeError(f"config must be a BirthModelConfig, got {type(config).__name__}")
    keys: set[str] = set()
    for entry in config.frozen:
        base, _, layer = entry.partition(".")
        if base in ("embed", "pos_embed", "unembed"):
            keys.add(f"{base}.weight")
        elif base == "biases":
            keys.update(f"blocks.{l}.attn.{m}.bias" for l in (0, 1) for m in "qkvo")
        else:
            layers = (int(layer),) if layer else (0, 1)
            keys.update(f"blocks.{l}.attn.{_MATRIX[base]}.weight" for l in layers)
    return tuple(sorted(keys))


def trainable_keys(model) -> tuple[str, ...]:
    """``state_dict`` keys of the parameters that require grad."""
    return tuple(sorted(k for k, v in model.state_dict(keep_vars=True).items() if v.requires_grad))


def _boot(config, kind: type):
    """The bridge of ``config`` (default ``kind()``) in eval mode, with the config as ``birth_config``."""
    from transformer_lens.model_bridge import TransformerBridge

    config = kind() if config is None else config
    if not isinstance(config, kind):
        raise TypeError(f"config must be a {kind.__name__}, got {type(config).__name__}")
    model = TransformerBridge.boot_native(config.to_tl_config()).eval()
    model.birth_config = config  # type: ignore[attr-defined]
    return model


def build_birth_model(config: BirthModelConfig | None = None):
    """Boot the simplified model from ``config`` (seeded init, frozen set applied, eval mode)."""
    model = _boot(config, BirthModelConfig)
    config = model.birth_config
    weights = model.state_dict(keep_vars=True)
    generator = torch.Generator().manual_seed(config.seed)
    d = config.d_model
    bound = 1.0 / math.sqrt(d)
    with torch.no_grad():
        weights["embed.weight"].copy_(torch.randn(config.N, d, generator=generator))
        weights["pos_embed.weight"].copy_(torch.randn(config.T, d, generator=generator))
        weights["unembed.weight"].copy_((torch.rand(config.N, d, generator=generator) * 2 - 1) * bound)
        for layer in (0, 1):
            for m in "kvo":
                weights[f"blocks.{layer}.attn.{m}.weight"].copy_((torch.rand(d, d, generator=generator) * 2 - 1) * bound)
            weights[f"blocks.{layer}.attn.q.weight"].copy_(torch.eye(d))
            for m in "qkvo":
                weights[f"blocks.{layer}.attn.{m}.bias"].zero_()
    frozen = set(frozen_keys(config))
    for key, value in weights.items():
        if isinstance(value, torch.nn.Parameter):
            value.requires_grad_(key not in frozen)
    return model


def build_full_model(config: FullModelConfig | None = None):
    """Boot a plain pre-LN transformer (TransformerLens' seeded native init, eval mode)."""
    return _boot(config, FullModelConfig)


def _dual(x: Tensor) -> Tensor:
    """Rows ``x_i / |x_i|^2`` (so that ``x_i . dual_i = 1``)."""
    return x / x.pow(2).sum(-1, keepdim=True)


def handbuilt_induction_model(config: BirthModelConfig | None = None, *, beta: float = 20.0, gamma: float = 20.0):
    """The simplified model with its trainable matrices set to the paper's eq. 8 memories.

    ``W_K^1 = beta sum_t p_{t-1} p_t^T`` (previous-token head), ``W_K^2 = beta sum_k w_1(k) w_E(k)^T``
    with ``w_1(k) = w_E(k) W_V^1 W_O^1`` (induction keys), ``W_O^2 = gamma sum_k (w_E(k) W_V^2)^T
    w_U(k)`` (copy), each from dual vectors ``x / |x|^2`` so a stored pair scores ``beta`` (``gamma``)
    after the ``sqrt(d)`` scaling.  When ``d > N + T`` the keys ``w_1(k)`` are first projected off
    the span of the token and positional embeddings (~3x longer than ``w_1(k)`` at this init), so
    cross-talk does not drown the induction head.  Frozen matrices as :func:`build_birth_model`'s
    (same seed).  A reference for the probes (each is 1 when ``d`` is large enough)."""
    model = build_birth_model(config)
    w = model.state_dict(keep_vars=True)
    d = model.cfg.d_model
    with torch.no_grad():
        E, P, U = w["embed.weight"], w["pos_embed.weight"], w["unembed.weight"]
        W_V = [w[f"blocks.{layer}.attn.v.weight"].T for layer in (0, 1)]  # row convention x @ W
        W_O1 = w["blocks.0.attn.o.weight"].T
        remapped = E @ W_V[0] @ W_O1
        if d > model.cfg.d_vocab + model.cfg.n_ctx:  # keys: the part of w_1(k) outside span(w_E, p) (no token/position cross-talk)
            basis = torch.linalg.qr(torch.cat([E, P]).T).Q  # [d, N + T]
            remapped = remapped - (remapped @ basis) @ basis.T
        k1 = beta * math.sqrt(d) * _dual(P[1:]).T @ _dual(P[:-1])  # query p_t -> key p_{t-1}
        k2 = beta * math.sqrt(d) * _dual(E).T @ _dual(remapped)    # query e_k -> key w_1(k)
        o2 = gamma * _dual(E @ W_V[1]).T @ _dual(U)                 # value e_k W_V^2 -> logit u_k
        w["blocks.0.attn.k.weight"].copy_(k1)  # nn.Linear weight: scores = x_t @ weight @ x_s^T / sqrt(d)
        w["blocks.1.attn.k.weight"].copy_(k2)
        w["blocks.1.attn.o.weight"].copy_(o2.T)
    return model


def plain_forward(model, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab"]:
    """``model(tokens)`` in plain PyTorch on the bridge's parameters (gradients flow to them), for
    the two architectures built here; anything else falls back to the bridge's own forward."""
    cfg = model.cfg
    if cfg.normalization_type not in (None, "LN") or cfg.positional_embedding_type != "standard":
        return model(tokens)
    w = model.state_dict(keep_vars=True)
    n_heads, d_head = cfg.n_heads, cfg.d_head
    batch, seq = tokens.shape

    def norm(x: Tensor, name: str) -> Tensor:
        if cfg.normalization_type is None:
            return x
        return torch.nn.functional.layer_norm(x, (cfg.d_model,), w[f"{name}.weight"], w[f"{name}.bias"], cfg.eps)

    def linear(x: Tensor, name: str) -> Tensor:
        return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))

    resid = w["embed.weight"][tokens] + w["pos_embed.weight"][:seq]
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}"
        h = norm(resid, f"{b}.ln1")
        q, k, v = (linear(h, f"{b}.attn.{n}").view(batch, seq, n_heads, d_head).transpose(1, 2) for n in "qkv")
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        resid = resid + linear(z.transpose(1, 2).reshape(batch, seq, n_heads * d_head), f"{b}.attn.o")
        if not cfg.attn_only:
            resid = resid + linear(torch.relu(linear(norm(resid, f"{b}.ln2"), f"{b}.mlp.in")), f"{b}.mlp.out")
    out = torch.nn.functional.linear(norm(resid, "ln_final"), w["unembed.weight"])
    return out + w["unembed.bias"] if "unembed.bias" in w else out

