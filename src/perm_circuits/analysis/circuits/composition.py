"""Q-, K- and V-composition scores between attention heads (Elhage et al. 2021, "A Mathematical
Framework for Transformer Circuits", section "Virtual weights and composition").

A head ``h1`` in layer ``l1`` (the *sender*) writes ``x @ W_OV^{h1}`` into the residual stream,
with ``W_OV = W_V @ W_O`` (``[d_model, d_model]``, TransformerLens' row-vector convention
``x @ W``).  A head ``h2`` in a later layer ``l2 > l1`` (the *receiver*) can read that output in
three places, and the composition score measures how much of the sender's output space the
receiver's matrix reads:

    score = ||W_OV^{h1} @ W_A^{h2}||_F / (||W_OV^{h1}||_F ||W_A^{h2}||_F)

* **Q-composition**: ``W_A = W_QK^{h2} = W_Q^{h2} @ W_K^{h2}^T`` (query side on the left: the
  attention logit is ``q_resid @ W_QK @ k_resid^T``, so the sender's output feeds the *query*);
* **K-composition**: ``W_A = (W_QK^{h2})^T = W_K^{h2} @ W_Q^{h2}^T`` (the sender's output feeds
  the *key*: ``q W_QK k^T = k W_QK^T q^T``);
* **V-composition**: ``W_A = W_OV^{h2}`` (the sender's output is moved on by the receiver).

This is exactly TransformerLens' convention (``TransformerBridge.all_composition_scores(mode)``
with ``left = FactoredMatrix(W_V, W_O)`` and ``right = W_Q W_K^T``, its transpose, or ``W_OV``,
scored by ``transformer_lens.utilities.composition_scores``); the paper writes the same products
in the column-vector convention (``W_QK^T W_OV``, ``W_QK W_OV``, ``W_OV^{h2} W_OV^{h1}``).  The
score is in ``[0, 1]`` (sub-multiplicativity of the Frobenius norm): 0 when the receiver reads
nothing the sender writes (orthogonal subspaces), 1 only for perfectly aligned rank-1 matrices.

Simplifications, as in the paper: LayerNorm (its centring and scaling between the two heads) and
all biases are ignored; only the weight matrices ``model.W_Q``, ``model.W_K``, ``model.W_V``,
``model.W_O`` (``[n_layers, n_heads, d_model, d_head]`` / ``[n_layers, n_heads, d_head,
d_model]``) are read.  No forward pass, no hooks.  A sender or receiver whose matrix is exactly
zero has an undefined (0/0) score: NaN, as in TransformerLens.

Baseline: the paper reads scores against what random matrices of the same shapes give (random
heads compose a little by chance, more so when ``d_head`` is large relative to ``d_model``).
:func:`composition_baseline` estimates it as the mean score of ``n_samples`` pairs of heads whose
factors (``W_V``, ``W_O`` for the sender; ``W_Q``, ``W_K`` or ``W_V``, ``W_O`` for the receiver)
are independent standard Gaussian matrices of the model's shapes, drawn from a private
``torch.Generator`` seeded with ``seed`` (so it is deterministic and leaves the global RNG
untouched).  The score is scale invariant, so the Gaussian's variance does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_positive_int, check_seed
from perm_circuits.circuit import Node
from perm_circuits.models import model_config_of

__all__ = [
    "KINDS",
    "CompositionScores",
    "all_composition_scores",
    "composition_baseline",
    "composition_score",
    "composition_scores",
]

KINDS = ("Q", "K", "V")
COLUMNS = ["sender", "sender_layer", "sender_head", "receiver", "receiver_layer", "receiver_head", "kind", "score",
           "baseline"]


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str):
        raise TypeError(f"kind must be one of {KINDS} (a str), got {type(kind).__name__} {kind!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


@dataclass(frozen=True)
class CompositionScores:
    """Composition scores of one kind between every (sender head, receiver head) pair.

    Attributes:
        kind: ``"Q"``, ``"K"`` or ``"V"``.
        scores: ``[sender_layer, sender_head, receiver_layer, receiver_head]``; NaN where the
            receiver is not in a later layer than the sender (and where a matrix is all zero).
        baseline: mean score of random Gaussian heads of the same shapes
            (:func:`composition_baseline`).
    """

    kind: str
    scores: Float[Tensor, "sender_layer sender_head receiver_layer receiver_head"]
    baseline: float

    def to_dataframe(self) -> pd.DataFrame:
        """One row per pair with a later-layer receiver: ``sender`` / ``receiver`` (``L{l}H{h}``)
        with their layer and head, ``kind``, ``score`` and ``baseline``.  Empty (with these
        columns) for a 1-layer model."""
        n_layers, n_heads = self.scores.shape[:2]
        rows = [
            (str(Node(l1, h1)), l1, h1, str(Node(l2, h2)), l2, h2, self.kind, float(self.scores[l1, h1, l2, h2]), self.baseline)
            for l1 in range(n_layers)
            for h1 in range(n_heads)
            for l2 in range(l1 + 1, n_layers)
            for h2 in range(n_heads)
        ]
        return pd.DataFrame(rows, columns=COLUMNS)


def composition_score(
    left: Float[Tensor, "*#batch d_model d_mid"], right: Float[Tensor, "*#batch d_mid d_out"]
) -> Float[Tensor, "*pairs"]:
    """``||left @ right||_F / (||left||_F ||right||_F)`` over the last two axes (leading axes
    broadcast)."""
    product = torch.linalg.matrix_norm(left @ right)
    return product / (torch.linalg.matrix_norm(left) * torch.linalg.matrix_norm(right))


def _receiver_matrix(
    kind: str,
    W_Q: Float[Tensor, "*batch d_model d_head"],
    W_K: Float[Tensor, "*batch d_model d_head"],
    W_V: Float[Tensor, "*batch d_model d_head"],
    W_O: Float[Tensor, "*batch d_head d_model"],
) -> Float[Tensor, "*batch d_model d_model"]:
    """The receiver's ``[d_model, d_model]`` matrix that right-multiplies the sender's ``W_OV``."""
    if kind == "Q":
        return W_Q @ W_K.transpose(-2, -1)
    if kind == "K":
        return W_K @ W_Q.transpose(-2, -1)
    return W_V @ W_O


def composition_baseline(
    d_model: int, d_head: int, kind: str, n_samples: int = 100, seed: int = 0
) -> float:
    """Mean ``kind``-composition score of ``n_samples`` random head pairs of these shapes: standard
    Gaussian factors, float64 on the CPU, from a private generator seeded with ``seed`` (module docstring)."""
    kind = _check_kind(kind)
    d_model = check_positive_int("d_model", d_model)
    d_head = check_positive_int("d_head", d_head)
    n_samples = check_positive_int("n_samples", n_samples)
    seed = check_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    def draw(rows: int, cols: int) -> Tensor:
        return torch.randn(n_samples, rows, cols, generator=gen, dtype=torch.float64)

    sender = draw(d_model, d_head) @ draw(d_head, d_model)
    W_Q, W_K, W_V, W_O = draw(d_model, d_head), draw(d_model, d_head), draw(d_model, d_head), draw(d_head, d_model)
    receiver = _receiver_matrix(kind, W_Q, W_K, W_V, W_O)
    return float(composition_score(sender, receiver).mean())


def composition_scores(
    model, kind: str, *, baseline_samples: int = 100, seed: int = 0
) -> CompositionScores:
    """``kind``-composition scores (``"Q"``, ``"K"`` or ``"V"``) from every head to every head of
    a later layer (Elhage et al. 2021; definitions and conventions in the module docstring).

    Reads ``model.W_Q``/``W_K``/``W_V``/``W_O`` (LayerNorm and biases ignored, as in the paper);
    computes in float64.  ``baseline_samples`` and ``seed`` set :func:`composition_baseline`.
    A 1-layer model has no pairs: all NaN.
    """
    kind = _check_kind(kind)
    baseline_samples = check_positive_int("baseline_samples", baseline_samples)
    seed = check_seed(seed)
    config = model_config_of(model)
    n_layers, n_heads = config.n_layers, config.n_heads
    W_Q, W_K, W_V, W_O = (w.detach().to(torch.float64) for w in (model.W_Q, model.W_K, model.W_V, model.W_O))
    d_model, d_head = W_Q.shape[-2], W_Q.shape[-1]
    reads, writes = (n_layers, n_heads, d_model, d_head), (n_layers, n_heads, d_head, d_model)
    for name, w, shape in (("W_Q", W_Q, reads), ("W_K", W_K, reads), ("W_V", W_V, reads), ("W_O", W_O, writes)):
        if tuple(w.shape) != shape:
            raise ValueError(f"model.{name} has shape {tuple(w.shape)}, expected {shape}")
    sender = W_V @ W_O  # [layer, head, d_model, d_model]
    receiver = _receiver_matrix(kind, W_Q, W_K, W_V, W_O)
    scores = torch.full((n_layers, n_heads, n_layers, n_heads), float("nan"), dtype=torch.float64, device=W_Q.device)
    for l1 in range(n_layers):
        for l2 in range(l1 + 1, n_layers):
            # [h1, 1, d, d] @ [1, h2, d, d] -> [h1, h2]
            scores[l1, :, l2, :] = composition_score(sender[l1][:, None], receiver[l2][None, :])
    baseline = composition_baseline(d_model, d_head, kind, n_samples=baseline_samples, seed=seed)
    return CompositionScores(kind=kind, scores=scores, baseline=baseline)


def all_composition_scores(model, *, baseline_samples: int = 100, seed: int = 0) -> pd.DataFrame:
    """Q-, K- and V-composition scores of every (sender, later-layer receiver) pair in one tidy
    table (rows of :meth:`CompositionScores.to_dataframe`, kinds in the order Q, K, V)."""
    frames = [composition_scores(model, kind, baseline_samples=baseline_samples, seed=seed) for kind in KINDS]
    return pd.concat([frame.to_dataframe() for frame in frames], ignore_index=True)
