"""The solvable one-block model of Forner et al. 2026 (section 3.2), as a TransformerLens ``HookedRootModule``.

Exactly the paper's parameterisation:

* embeddings fixed to 1: every token embeds to ``u = 1`` in ``R^1`` (``embed.W_E``, all ones);
* one attention head with RoPE on queries and keys, ``q_i = RoPE_i(W_Q u_i)``,
  ``k_j = RoPE_j(W_K u_j)`` in ``R^{d_h}`` (eq. 3), so ``W_Q`` and ``W_K`` are vectors; RoPE
  frequencies ``omega_n = 2 pi theta^{-2(n-1)/d_h}`` (appendix A; ``rope_two_pi=False`` drops the
  ``2 pi`` as in appendix J); scores ``q_i . k_j / sqrt(d_h)``, softmax over ``j <= min(i, L)``
  (eq. 4; 0-based: ``j <= i`` and ``j < L``);
* fixed one-hot values: ``Val(g) = e_g`` in ``R^{d_g}`` for an action token, ``0`` for a state
  token (``blocks.0.attn.W_V``); the head output is ``o_i = sum_j pi_ij v_j`` (eq. 4);
* the logic module: learnable ``M_a`` in ``R^{N x N}`` (``blocks.0.logic.M``),
  ``z_{i+1} = (sum_a (o_i)_a M_a) e_{s}`` (eq. 6) for the current state ``s`` (one-hot; zero at an
  action token).  The logits ``z`` have ``N`` entries: the model predicts states only.

Which parts train is declared by :class:`FornerConfig` (``train_embed``, ``train_values``,
``train_qk``, ``train_logic``; the paper's model trains ``W_Q``, ``W_K`` and ``M``), never patched
in afterwards.  Initialisation from ``seed``: ``W_Q``, ``W_K`` ~ U(-1, 1), PyTorch's default for
an ``nn.Linear(1, d_h)`` (variance 1/3, the paper's ``sigma^2``), and ``M`` ~
U(-logic_init, logic_init) (default 1, which gives the paper's initial logit variance of about
0.044 at N = d_g = 32; appendix B says only "uniformly").

Hook points (names follow TransformerLens; head axis of size 1 where TL has one):

=============================  ===========================  ========================================
hook                           shape                        what
=============================  ===========================  ========================================
``hook_embed``                 [batch, pos, 1]              the fixed embedding ``u_i``
``blocks.0.attn.hook_q``       [batch, pos, 1, d_h]         query after RoPE
``blocks.0.attn.hook_k``       [batch, pos, 1, d_h]         key after RoPE
``blocks.0.attn.hook_v``       [batch, pos, 1, d_g]         one-hot value
``blocks.0.attn.hook_attn_scores``  [batch, 1, dest, src]   masked pre-softmax scores (edits apply)
``blocks.0.attn.hook_pattern`` [batch, 1, dest, src]        ``pi_ij``
``blocks.0.attn.hook_z``       [batch, pos, 1, d_g]         head output ``o_i``
``blocks.0.logic.hook_pre``    [batch, pos, d_g + N]        logic input ``(o_i, e_s)`` (appendix C)
``blocks.0.logic.hook_post``   [batch, pos, N]              logits ``z_{i+1}``
=============================  ===========================  ========================================
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

from perm_circuits.checks import check_int, check_number
from perm_circuits.systems.forner_theory import rope_omegas
from perm_circuits.tasks.perm_chain import PermutationChainTask

__all__ = ["FornerConfig", "FornerModel", "fast_forward", "rope_frequencies", "teacher_model"]


@dataclass(frozen=True)
class FornerConfig:
    """Settings of the solvable model and its task (defaults: a CPU size; the paper's, appendix A
    table 1, is ``N = d_g = 32, L = 10, d_h = 128``); ``train_*`` declare which parts train."""

    N: int = 8
    d_g: int = 8
    L: int = 10
    d_h: int = 32
    rope_theta: float = 10000.0
    rope_two_pi: bool = True
    logic_init: float = 1.0
    perm_seed: int = 0
    seed: int = 0
    train_embed: bool = False
    train_values: bool = False
    train_qk: bool = True
    train_logic: bool = True

    def __post_init__(self) -> None:
        for name in ("N", "d_g", "L", "d_h", "perm_seed", "seed"):
            check_int(name, getattr(self, name), low=0 if "seed" in name else 1)
        if self.d_h % 2:
            raise ValueError(f"d_h must be even (RoPE rotates pairs of dimensions), got {self.d_h}")
        check_number("rope_theta", self.rope_theta, low=0, strict=True, finite=False)
        check_number("logic_init", self.logic_init, low=0, finite=False)
        for name in ("rope_two_pi", "train_embed", "train_values", "train_qk", "train_logic"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def task(self) -> PermutationChainTask:
        return PermutationChainTask(N=self.N, d_g=self.d_g, L=self.L, perm_seed=self.perm_seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # what TransformerLens' own patching helpers read from ``model.cfg`` (``transformer_lens.patching``);
    # class attributes, not fields (no annotation)
    n_layers = 1
    n_heads = 1
    device = "cpu"

    @property
    def d_head(self) -> int:
        """Width of the head output ``o_i`` (``hook_z``): one weight per action."""
        return self.d_g

    @property
    def n_ctx(self) -> int:
        return 2 * self.L + 1


def rope_frequencies(d_h: int, theta: float = 10000.0, two_pi: bool = True) -> Float[Tensor, " half"]:
    """:func:`~perm_circuits.systems.forner_theory.rope_omegas` as a float32 tensor (the model's)."""
    return torch.from_numpy(rope_omegas(d_h, theta, two_pi)).float()


def _rotate(x: Float[Tensor, "batch pos d_h"], angles: Float[Tensor, "pos half"]) -> Float[Tensor, "batch pos d_h"]:
    """``RoPE_i(x) = Omega(i) x``: rotate dimension pairs ``(2n, 2n+1)`` by ``angles[i, n]``."""
    cos, sin = angles.cos(), angles.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class _Embed(nn.Module):
    def __init__(self, d_vocab: int, trainable: bool) -> None:
        super().__init__()
        self.W_E = nn.Parameter(torch.ones(d_vocab, 1), requires_grad=trainable)


class _ActionHead(nn.Module):
    def __init__(self, cfg: FornerConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.cfg = cfg
        d_vocab = cfg.d_g + cfg.N
        self.W_Q = nn.Parameter(torch.rand(1, cfg.d_h, generator=generator) * 2 - 1, requires_grad=cfg.train_qk)
        self.W_K = nn.Parameter(torch.rand(1, cfg.d_h, generator=generator) * 2 - 1, requires_grad=cfg.train_qk)
        values = torch.zeros(d_vocab, cfg.d_g)
        values[torch.arange(cfg.d_g), torch.arange(cfg.d_g)] = 1.0
        self.W_V = nn.Parameter(values, requires_grad=cfg.train_values)
        self.register_buffer("omega", rope_frequencies(cfg.d_h, cfg.rope_theta, cfg.rope_two_pi), persistent=False)
        for name in ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z"):
            setattr(self, name, HookPoint())

    def forward(self, u: Float[Tensor, "batch pos 1"], tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos 1 d_g"]:
        seq = tokens.shape[1]
        angles = torch.arange(seq, dtype=torch.float32, device=u.device)[:, None] * self.omega[None, :]
        q = self.hook_q(_rotate(u @ self.W_Q, angles)[:, :, None])
        k = self.hook_k(_rotate(u @ self.W_K, angles)[:, :, None])
        v = self.hook_v(self.W_V[tokens][:, :, None])
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.cfg.d_h)
        i = torch.arange(seq, device=u.device)
        allowed = (i[None, :] <= i[:, None]) & (i[None, :] < self.cfg.L)
        scores = self.hook_attn_scores(scores.masked_fill(~allowed, float("-inf")))
        pattern = self.hook_pattern(scores.softmax(-1))
        return self.hook_z(torch.einsum("bhij,bjhd->bihd", pattern, v))


class _LogicModule(nn.Module):
    def __init__(self, cfg: FornerConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.cfg = cfg
        M = (torch.rand(cfg.d_g, cfg.N, cfg.N, generator=generator) * 2 - 1) * cfg.logic_init
        self.M = nn.Parameter(M, requires_grad=cfg.train_logic)
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, o: Float[Tensor, "batch pos d_g"], state: Float[Tensor, "batch pos N"]) -> Float[Tensor, "batch pos N"]:
        pre = self.hook_pre(torch.cat([o, state], dim=-1))
        o, state = pre[..., : self.cfg.d_g], pre[..., self.cfg.d_g:]
        outer = torch.einsum("bpa,bpn->bpan", o, state).flatten(-2)  # (o_a s_n) blocks of appendix C
        weight = self.M.permute(0, 2, 1).reshape(self.cfg.d_g * self.cfg.N, self.cfg.N)  # W_d = (M_1 .. M_dg)
        return self.hook_post(outer @ weight)


class _Block(nn.Module):
    def __init__(self, cfg: FornerConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.attn = _ActionHead(cfg, generator)
        self.logic = _LogicModule(cfg, generator)


class FornerModel(HookedRootModule):
    """The solvable one-block model (module docstring); ``model(tokens)`` gives state logits ``[batch, pos, N]``."""

    def __init__(self, cfg: FornerConfig | None = None) -> None:
        super().__init__()
        cfg = cfg if cfg is not None else FornerConfig()
        if not isinstance(cfg, FornerConfig):
            raise TypeError(f"cfg must be a FornerConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.task = cfg.task
        generator = torch.Generator().manual_seed(cfg.seed)
        self.embed = _Embed(cfg.d_g + cfg.N, cfg.train_embed)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([_Block(cfg, generator)])
        self.setup()
        self.eval()

    @property
    def M(self) -> Tensor:
        """The logic module's matrices ``{M_a}`` ``[d_g, N, N]``."""
        return self.blocks[0].logic.M

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos N"]:
        cfg = self.cfg
        if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"tokens must be an integer tensor [batch, pos], got {tokens!r:.80}")
        if tokens.shape[1] > 2 * cfg.L + 1 or tokens.shape[1] < 1:
            raise ValueError(f"sequence length must be in 1..{2 * cfg.L + 1}, got {tokens.shape[1]}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= cfg.d_g + cfg.N):
            raise ValueError(f"token ids must lie in [0, {cfg.d_g + cfg.N}), got {int(tokens.min())}..{int(tokens.max())}")
        u = self.hook_embed(self.embed.W_E[tokens])
        block = self.blocks[0]
        o = block.attn(u, tokens)[:, :, 0]
        is_state = tokens >= cfg.d_g
        state = torch.nn.functional.one_hot((tokens - cfg.d_g).clamp(min=0), cfg.N).to(o.dtype) * is_state[..., None]
        return block.logic(o, state)


def fast_forward(model: FornerModel, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos N"]:
    """``model(tokens)`` up to float rounding, without hook points, for training (``fit(forward=...)``):
    the pattern does not depend on the tokens while the embeddings are fixed (with ``train_embed``
    it falls back to ``model(tokens)``) and the logits are 0 at action tokens (state vector 0)."""
    cfg = model.cfg
    if cfg.train_embed or tokens.shape[1] <= cfg.L:
        return model(tokens)
    head = model.blocks[0].attn
    seq = tokens.shape[1]
    angles = torch.arange(seq, dtype=torch.float32, device=tokens.device)[:, None] * head.omega[None, :]
    u = model.embed.W_E[:1]  # every embedding is the same fixed vector
    q = _rotate((u @ head.W_Q)[None].expand(1, seq, -1), angles)[0]
    k = _rotate((u @ head.W_K)[None].expand(1, seq, -1), angles)[0]
    scores = (q[cfg.L:] @ k[: cfg.L].T) / math.sqrt(cfg.d_h)  # state positions attend to the L actions
    later = torch.arange(cfg.L, device=tokens.device)[None, :] > torch.arange(cfg.L, seq, device=tokens.device)[:, None]
    scores = scores.masked_fill(later, float("-inf"))
    pattern = scores.softmax(-1)  # [seq - L, L]
    o = torch.einsum("ij,bja->bia", pattern, head.W_V[tokens[:, : cfg.L]])  # [batch, seq - L, d_g]
    states = tokens[:, cfg.L:] - cfg.d_g
    is_state = states >= 0
    columns = model.M.permute(2, 0, 1)[states.clamp(min=0)]  # [batch, seq - L, d_g, N]: column s of every M_a
    z = (o[..., None] * columns).sum(2) * is_state[..., None]
    return torch.cat([torch.zeros(tokens.shape[0], cfg.L, cfg.N, dtype=z.dtype, device=z.device), z], dim=1)


def teacher_model(cfg: FornerConfig | None = None, margin: float = 30.0) -> FornerModel:
    """The teacher of section 3.3 in the student's architecture: ``M_a = O(sigma_a)`` and RoPE
    keys/queries that attend from ``s_{t-1}`` to ``g_t`` (offset ``-L``) with attention logit gap
    at least ``margin`` (so ``pi_{i,i-L} >= 1 - (L-1) e^{-margin}``): ``W_K = Omega(L) W_Q`` makes
    ``q_i . k_j = W_Q^T Omega(j - i + L) W_Q``, largest at ``j = i - L``; ``W_Q`` has equal weight
    on every frequency with ``omega_n`` not a multiple of ``2 pi``, scaled to the margin."""
    cfg = cfg if cfg is not None else FornerConfig()
    model = FornerModel(cfg)
    omega = rope_frequencies(cfg.d_h, cfg.rope_theta, cfg.rope_two_pi).double()
    useful = (torch.remainder(omega, 2 * math.pi).abs() > 1e-6) & ((2 * math.pi - torch.remainder(omega, 2 * math.pi)) > 1e-6)
    if not useful.any():
        raise ValueError("every RoPE frequency is a multiple of 2 pi: no query/key can tell positions apart")
    offsets = torch.arange(1, cfg.L, dtype=torch.float64)
    gaps = ((1 - torch.cos(offsets[:, None] * omega[None, :])) * useful).sum(-1) / math.sqrt(cfg.d_h)
    if cfg.L > 1 and gaps.min() <= 1e-9:
        raise ValueError(f"the RoPE frequencies cannot separate offset -L from the others (gaps {gaps.tolist()})")
    scale = math.sqrt(margin / float(gaps.min())) if cfg.L > 1 else 1.0
    w_q = torch.zeros(cfg.d_h, dtype=torch.float64)
    w_q[0::2] = useful.double() * scale
    angles = cfg.L * omega
    w_k = _rotate(w_q[None, None].float(), angles[None].float())[0, 0]
    with torch.no_grad():
        head = model.blocks[0].attn
        head.W_Q.copy_(w_q.float()[None])
        head.W_K.copy_(w_k[None])
        model.M.copy_(cfg.task.teacher_matrices)
    return model
