"""Q-, K- and V-composition scores (Elhage et al. 2021) on a hand-built 2-layer model with exact
answers, against a direct formula and TransformerLens' own ``all_composition_scores``.

Hand-built model (d_model = 8, 2 heads of d_head = 4 per layer, every head rank 1, so a score is
the |cosine| between the direction the sender writes and the direction the receiver reads):

- L0H0 reads e0, writes e1; L0H1 reads e2, writes e3 (``W_OV = e_in e_out^T``).
- L1H0: query reads e1, key reads e3, value reads e1, writes e5.  So L0H0 -> L1H0 composes fully
  through Q and V and not at all through K; L0H1 -> L1H0 fully through K only.
- L1H1: query reads (e1 + e6)/sqrt2, key reads e6, value reads (e3 + e7)/sqrt2, writes e4.  So
  Q(L0H0 -> L1H1) = V(L0H1 -> L1H1) = 1/sqrt2 and every other pair is 0.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from perm_circuits import ModelConfig, build_model
from perm_circuits.analysis import (
    CompositionScores,
    all_composition_scores,
    composition_baseline,
    composition_scores,
)

D_MODEL, N_HEADS, D_HEAD = 8, 2, 4
R2 = 1 / math.sqrt(2)


def _e(*dims: int, scale: float = 1.0) -> torch.Tensor:
    v = torch.zeros(D_MODEL)
    for d in dims:
        v[d] = scale
    return v


def _rank1(read: torch.Tensor) -> torch.Tensor:
    """``[d_model, d_head]``: reads ``read`` into the head's first dimension."""
    w = torch.zeros(D_MODEL, D_HEAD)
    w[:, 0] = read
    return w


def _out(write: torch.Tensor) -> torch.Tensor:
    """``[d_head, d_model]``: writes the head's first dimension to ``write``."""
    w = torch.zeros(D_HEAD, D_MODEL)
    w[0] = write
    return w


HEADS = {  # (layer, head): (q read, k read, v read, o write)
    (0, 0): (_e(7), _e(6), _e(0), _e(1)),
    (0, 1): (_e(5), _e(4), _e(2), _e(3)),
    (1, 0): (_e(1), _e(3), _e(1), _e(5)),
    (1, 1): (_e(1, 6, scale=R2), _e(6), _e(3, 7, scale=R2), _e(4)),
}

# expected[kind][(sender head, receiver head)] for sender layer 0 -> receiver layer 1
EXPECTED = {
    "Q": {(0, 0): 1.0, (0, 1): R2, (1, 0): 0.0, (1, 1): 0.0},
    "K": {(0, 0): 0.0, (0, 1): 0.0, (1, 0): 1.0, (1, 1): 0.0},
    "V": {(0, 0): 1.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): R2},
}


def _hand_built():
    model = build_model(
        ModelConfig(d_model=D_MODEL, n_heads=N_HEADS, n_layers=2, d_head=D_HEAD, normalization_type=None)
    )
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for (layer, head), (q, k, v, o) in HEADS.items():
        rows = slice(head * D_HEAD, (head + 1) * D_HEAD)
        sd[f"blocks.{layer}.attn.q.weight"][rows] = _rank1(q).T
        sd[f"blocks.{layer}.attn.k.weight"][rows] = _rank1(k).T
        sd[f"blocks.{layer}.attn.v.weight"][rows] = _rank1(v).T
        sd[f"blocks.{layer}.attn.o.weight"][:, rows] = _out(o).T
    model.load_state_dict(sd)
    # the state-dict layout lands where W_Q / W_K / W_V / W_O say it does
    for (layer, head), (q, k, v, o) in HEADS.items():
        assert torch.equal(model.W_Q[layer, head].detach(), _rank1(q))
        assert torch.equal(model.W_K[layer, head].detach(), _rank1(k))
        assert torch.equal(model.W_V[layer, head].detach(), _rank1(v))
        assert torch.equal(model.W_O[layer, head].detach(), _out(o))
    return model


@pytest.fixture(scope="module")
def hand_built():
    return _hand_built()


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_hand_built_exact_scores(hand_built, kind):
    result = composition_scores(hand_built, kind)
    assert isinstance(result, CompositionScores) and result.kind == kind
    s = result.scores
    assert s.shape == (2, N_HEADS, 2, N_HEADS)
    for (h1, h2), want in EXPECTED[kind].items():
        assert s[0, h1, 1, h2].item() == pytest.approx(want, abs=1e-6), (kind, h1, h2)
    # receivers in the same or an earlier layer: NaN
    assert torch.isnan(s[0, :, 0, :]).all()
    assert torch.isnan(s[1, :, 1, :]).all()
    assert torch.isnan(s[1, :, 0, :]).all()
    assert torch.isfinite(s[0, :, 1, :]).all()

    df = result.to_dataframe()
    assert len(df) == N_HEADS * N_HEADS
    assert set(df["kind"]) == {kind}
    got = {(r.sender, r.receiver): r.score for r in df.itertuples()}
    want = {(f"L0H{h1}", f"L1H{h2}"): v for (h1, h2), v in EXPECTED[kind].items()}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


def test_all_composition_scores_table(hand_built):
    df = all_composition_scores(hand_built, baseline_samples=20)
    assert list(df["kind"].unique()) == ["Q", "K", "V"]
    assert len(df) == 3 * N_HEADS * N_HEADS
    assert (df["receiver_layer"] > df["sender_layer"]).all()
    for kind, pairs in EXPECTED.items():
        for (h1, h2), value in pairs.items():
            row = df[(df.kind == kind) & (df.sender == f"L0H{h1}") & (df.receiver == f"L1H{h2}")]
            assert len(row) == 1
            assert row["score"].item() == pytest.approx(value, abs=1e-6)
            assert row["sender_head"].item() == h1 and row["receiver_head"].item() == h2


def _direct(model, kind: str) -> torch.Tensor:
    """Plain-torch formula, pair by pair: ||W_OV1 @ A2|| / (||W_OV1|| ||A2||)."""
    W_Q, W_K, W_V, W_O = (w.detach().double() for w in (model.W_Q, model.W_K, model.W_V, model.W_O))
    L, H = W_Q.shape[:2]
    out = torch.full((L, H, L, H), float("nan"), dtype=torch.float64)
    for l1 in range(L):
        for h1 in range(H):
            ov1 = W_V[l1, h1] @ W_O[l1, h1]
            for l2 in range(l1 + 1, L):
                for h2 in range(H):
                    qk2 = W_Q[l2, h2] @ W_K[l2, h2].T
                    a2 = {"Q": qk2, "K": qk2.T, "V": W_V[l2, h2] @ W_O[l2, h2]}[kind]
                    out[l1, h1, l2, h2] = torch.linalg.norm(ov1 @ a2) / (torch.linalg.norm(ov1) * torch.linalg.norm(a2))
    return out


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_random_model_matches_direct_formula_and_transformer_lens(kind):
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=3, seed=3))
    got = composition_scores(model, kind).scores
    want = _direct(model, kind)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    finite = ~torch.isnan(want)
    assert finite.sum() == 3 * 2 * 2  # layer pairs (0,1), (0,2), (1,2) x 2 sender x 2 receiver heads
    torch.testing.assert_close(got[finite], want[finite], rtol=0, atol=1e-10)
    # TransformerLens' own scores (same convention; zero instead of NaN below the diagonal)
    tl = model.all_composition_scores(kind).scores.detach().double()
    torch.testing.assert_close(got[finite], tl[finite], rtol=0, atol=1e-5)
    # Q and K genuinely differ on a random model (the sides are not interchangeable)
    if kind == "Q":
        assert (got[finite] - _direct(model, "K")[finite]).abs().max() > 1e-2


def test_one_layer_model_has_no_pairs():
    model = build_model(ModelConfig(d_model=8, n_heads=2))
    result = composition_scores(model, "K")
    assert result.scores.shape == (1, 2, 1, 2) and torch.isnan(result.scores).all()
    df = result.to_dataframe()
    assert df.empty and "score" in df.columns
    assert all_composition_scores(model, baseline_samples=5).empty


def test_baseline_is_deterministic_and_plausible():
    a = composition_baseline(32, 16, "Q", n_samples=50, seed=0)
    assert a == composition_baseline(32, 16, "Q", n_samples=50, seed=0)
    assert a != composition_baseline(32, 16, "Q", n_samples=50, seed=1)
    # random heads compose partly: strictly between 0 and 1, and more with wider heads
    assert 0.05 < composition_baseline(32, 2, "V", n_samples=50) < a < 1.0
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2))
    state = torch.random.get_rng_state()
    result = composition_scores(model, "V", baseline_samples=50, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    assert result.baseline == composition_baseline(16, 8, "V", n_samples=50, seed=0)
    assert (result.to_dataframe()["baseline"] == result.baseline).all()


def test_bad_arguments(hand_built):
    with pytest.raises(ValueError, match=r"kind must be one of \('Q', 'K', 'V'\), got 'q'"):
        composition_scores(hand_built, "q")
    with pytest.raises(ValueError, match="kind must be one of .* got 'OV'"):
        composition_baseline(8, 4, "OV")
    with pytest.raises(ValueError, match="baseline_samples must be >= 1, got 0"):
        all_composition_scores(hand_built, baseline_samples=0)
    assert isinstance(all_composition_scores(hand_built, baseline_samples=3), pd.DataFrame)
