"""A 2-layer induction circuit with weights set by hand: the reference model for the multi-layer tools.

:func:`build_induction_model` returns a TransformerLens 4 bridge (no normalization, MLP weights
zero, so attention-only in effect) that answers every repeated last query ``x5 = x_k`` with
``y_k``, for every ``k``, through the two-head circuit of Elhage et al. 2021 ("A Mathematical
Framework for Transformer Circuits", section "Induction heads"), Olsson et al. 2022 ("In-context
Learning and Induction Heads") and Bietti et al. 2023 ("Birth of a Transformer: A Memory
Viewpoint", section 3 on the induction mechanism): a previous-token head in layer 0, then an
induction head in layer 1 whose *key* reads what the previous-token head wrote (K-composition).

Residual stream layout (``n = 2V - 1`` positions; ``d_model`` at least ``5V + 3``, default 32 for
V = 5; every other dimension stays 0):

| subspace | dimensions | written by |
|---|---|---|
| ``TOK`` | ``0 .. V`` (token ``t`` -> ``t``) | token embedding (one-hot) |
| ``POS`` | ``V+1 .. V+n`` | positional embedding (one-hot) |
| ``IS_X`` | ``V+1+n`` | positional embedding: 1 at x slots (even positions) |
| ``PREV`` | the next ``V + 1`` | L0H0: one-hot of the *previous* token |
| ``OUT`` | the next ``V + 1`` | layer 1; the unembedding reads only this |

The heads (``s = sharpness``; the attention scores quoted are after TransformerLens' division by
``sqrt(d_head)``, which the key weights undo):

- **L0H0, previous-token head.**  Query ``POS_p -> e_p``, key ``POS_j -> s e_{j+1}``: the score of
  key ``j`` for query ``p`` is ``s [j = p - 1]``, so every position ``p >= 1`` attends to ``p - 1``
  with weight ``>= 1 - p e^-s`` (position 0 can only attend to itself).  Its OV circuit copies
  ``TOK_t`` into ``PREV_t`` (``t = 1..V``; token 0 never occurs): after layer 0, position ``j``
  holds its own token in ``TOK`` and the token before it in ``PREV``.
- **L1H0, induction head.**  Query ``TOK_t -> e_t`` (``t = 1..V``) and ``IS_X -> e_{V+1}``; key ``PREV_t -> s e_t``
  and ``IS_X -> -2s e_{V+1}``.  For the last query (token ``x5``, an x slot) the score of key ``j``
  is ``s [prev(j) = x5] - 2s [j is an x slot]``: it is ``s`` exactly at ``y_k`` (the position
  whose previous token is the earlier ``x_k = x5``), 0 at the other y slots and ``<= -s`` at the x
  slots, so the head attends to ``y_k`` with weight ``>= 1 - 8 e^-s`` (and, when nothing matches,
  evenly to the earlier y slots).  The ``IS_X`` term is needed because x and y share the
  vocabulary ``1..V``: an x slot ``x_{j+1}`` follows ``y_j``, and ``y_j`` may equal ``x5`` as a
  token, which would be a false match.  The match itself uses only ``PREV``, i.e. only what L0H0
  wrote: this is K-composition.  The K-composition score L0H0 -> L1H0 is ``1 / sqrt(V + 4)``
  (1/3 at V = 5, against about 0.18 for random heads of these shapes; Q and V composition are
  exactly 0): the score of Elhage et al. is ``1 / sqrt(rank)`` for a perfect rank-V copy, and the
  ``IS_X`` term adds 4 to the squared norm of ``W_QK``.  Its OV circuit copies ``TOK`` (the attended
  ``y_k``) into ``OUT`` with weight 1.
- **L1H1, elimination head** (``eliminate=True``, the default).  Query ``IS_X -> e_0``, key
  ``IS_X -> -s e_0``: an x-slot query attends uniformly to the y slots before it (a fixed
  positional pattern, independent of every token), and its OV writes ``-V/2`` times ``TOK`` into
  ``OUT`` (:func:`elimination_weight`): from the last position, ``-V/(2(V-1))`` on each of
  ``y1..y_{V-1}`` (``-5/8`` at V = 5).
- L0H1 and both MLPs are zero; the unembedding is ``logit_scale`` times ``OUT`` plus a bias of
  ``-logit_scale`` on the unused token 0.

Logits at the last position (in units of ``logit_scale``, V = 5, ignoring the ``e^-s`` leaks):

- repeated ``x5 = x_k``: ``y_k`` gets ``1 - 5/8``, the other revealed ys ``-5/8``, the unrevealed
  ``y5`` 0 and token 0 ``-1``: the answer is ``y_k`` for every ``k`` (recall generalises), with a
  logit difference of ``logit_scale`` against any other revealed y;
- not repeated: the induction head finds no match and spreads uniformly over ``y1..y4`` (``+1/4``
  each), the elimination head removes ``5/8`` each: ``y1..y4`` get ``-3/8``, ``y5`` 0, token 0
  ``-1``, so the answer is the unrevealed ``y5`` (elimination is right too, for V >= 3).

With ``eliminate=False`` the non-repeated last query gets ``1/4`` on each of ``y1..y4`` (a four-way
tie, the elimination answer ``y5`` loses) and the model is the bare induction circuit.  Positions
other than the last are not designed (an x slot before the last finds no match and averages the
earlier ys).  Nothing is trained: the weights are a closed-form function of ``V``, ``d_model``,
``sharpness`` and ``logit_scale`` (no random numbers are used).
"""

from __future__ import annotations

import math

import torch

from perm_circuits.checks import check_int, check_number
from perm_circuits.models import ModelConfig, build_model
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["build_induction_model", "elimination_weight", "induction_layout"]

def elimination_weight(V: int) -> float:
    """Gain ``c = V / 2`` of L1H1's OV circuit: it removes ``c / (V - 1)`` from each earlier y.

    The repeated answer ``y_k`` keeps ``1 - c/(V-1)`` (must stay above 0, the unrevealed y's
    logit) and a non-repeated query's ys get ``1/(V-1) - c/(V-1)`` (must fall below 0): any
    ``1 < c < V - 1`` works, and ``V / 2`` gives both the same margin ``(V-2) / (2(V-1))``.  At
    V = 2 no ``c`` works (the one earlier y is attended to fully whether it matches or not), so
    elimination is right only for V >= 3.
    """
    return V / 2


def induction_layout(V: int = 5) -> dict[str, range]:
    """The residual subspaces of :func:`build_induction_model` (module docstring) as index ranges."""
    TaskConfig(V=V)  # validates V
    layout, start = {}, 0
    for name, width in (("TOK", V + 1), ("POS", 2 * V - 1), ("IS_X", 1), ("PREV", V + 1), ("OUT", V + 1)):
        layout[name] = range(start, start + width)
        start += width
    return layout


def build_induction_model(
    V: int = 5,
    *,
    d_model: int | None = None,
    sharpness: float = 20.0,
    logit_scale: float = 10.0,
    eliminate: bool = True,
):
    """A 2-layer bridge whose hand-set weights implement previous-token head L0H0 -> induction head L1H0.

    ``d_model`` defaults to ``max(32, 5V + 3)`` rounded up to even; it must be even and at least
    ``5V + 3`` (``d_head = d_model / 2``).  ``sharpness`` is the attention-score margin of the two
    designed patterns (attention leaking off the designed key is below ``2V e^-sharpness``),
    ``logit_scale`` the logit of a fully attended copy, ``eliminate`` adds the elimination head L1H1
    (module docstring; ``False`` leaves it zero).

    Returns an eval-mode bridge of ``ModelConfig(d_model, n_heads=2, n_layers=2, V,
    normalization_type=None, d_head=d_model // 2)`` whose ``task_config`` repeats every earlier
    query (``repeat_sources=(1, ..., V-1)``).
    """
    TaskConfig(V=V)  # validates V
    need = 5 * V + 3  # the layout's width (induction_layout)
    if d_model is None:
        d_model = max(32, need + need % 2)
    if check_int("d_model", d_model) < need or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 5V+3 = {need} for V={V}, got {d_model}")
    for name, value in (("sharpness", sharpness), ("logit_scale", logit_scale)):
        check_number(name, value, low=0, strict=True)
    if not isinstance(eliminate, bool):
        raise TypeError(f"eliminate must be a bool, got {type(eliminate).__name__}")

    n, d_head = 2 * V - 1, d_model // 2
    config = ModelConfig(d_model=d_model, n_heads=2, n_layers=2, V=V, d_head=d_head, normalization_type=None, seed=0)
    model = build_model(config)
    TOK, POS, IS_X, PREV, OUT = induction_layout(V).values()
    sd = {key: torch.zeros_like(value) for key, value in model.state_dict().items()}
    key_gain = float(sharpness) * math.sqrt(d_head)  # undoes the 1/sqrt(d_head) attention scale
    head = lambda h, i: h * d_head + i  # row of head h's i-th dimension in the q/k/v weights

    for t in range(V + 1):
        sd["embed.weight"][t, TOK[t]] = 1.0
    for p in range(n):
        sd["pos_embed.weight"][p, POS[p]] = 1.0
        sd["pos_embed.weight"][p, IS_X[0]] = float(p % 2 == 0)

    # L0H0: previous-token head (query p matches key p - 1); OV copies TOK -> PREV
    b = "blocks.0.attn"
    for p in range(n):
        sd[f"{b}.q.weight"][head(0, p), POS[p]] = 1.0
    for j in range(n - 1):
        sd[f"{b}.k.weight"][head(0, j + 1), POS[j]] = key_gain
    for t in range(1, V + 1):  # token 0 never occurs: copying 1..V keeps the OV circuit rank V
        sd[f"{b}.v.weight"][head(0, t), TOK[t]] = 1.0
        sd[f"{b}.o.weight"][PREV[t], head(0, t)] = 1.0

    # L1H0: induction head (query TOK matches key PREV, x-slot keys excluded); OV copies TOK -> OUT
    b = "blocks.1.attn"
    for t in range(1, V + 1):
        sd[f"{b}.q.weight"][head(0, t), TOK[t]] = 1.0
        sd[f"{b}.k.weight"][head(0, t), PREV[t]] = key_gain
        sd[f"{b}.v.weight"][head(0, t), TOK[t]] = 1.0
        sd[f"{b}.o.weight"][OUT[t], head(0, t)] = 1.0
    sd[f"{b}.q.weight"][head(0, V + 1), IS_X[0]] = 1.0
    sd[f"{b}.k.weight"][head(0, V + 1), IS_X[0]] = -2 * key_gain

    # L1H1: elimination head (x-slot queries attend to the y slots); OV subtracts TOK from OUT
    if eliminate:
        sd[f"{b}.q.weight"][head(1, 0), IS_X[0]] = 1.0
        sd[f"{b}.k.weight"][head(1, 0), IS_X[0]] = -key_gain
        for t in range(1, V + 1):
            sd[f"{b}.v.weight"][head(1, t), TOK[t]] = 1.0
            sd[f"{b}.o.weight"][OUT[t], head(1, t)] = -elimination_weight(V)

    for t in range(V + 1):
        sd["unembed.weight"][t, OUT[t]] = float(logit_scale)
    sd["unembed.bias"][0] = -float(logit_scale)
    model.load_state_dict(sd)
    model.eval()
    model.task_config = TaskConfig(V=V, repeat_ratio=0.5, repeat_sources=tuple(range(1, V)))  # type: ignore[attr-defined]
    return model
