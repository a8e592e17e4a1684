"""EAP against an independent reference: first-order attribution by TransformerLens hooks and autograd.

Edge attribution patching (Syed, Rager & Conmy 2023, "Attribution Patching Outperforms Automated
Circuit Discovery") scores an edge ``S -> R`` by ``(abl_S - out_S) . dMetric/dInput_R`` on the
clean run: the sender's ablated output minus its clean output, dotted with the gradient of the
metric with respect to the receiver's own copy of the residual stream (before its LayerNorm).

The reference below computes that from the bridge alone, without the discovery package's edge
machinery (only its graph's edge names and ``eap`` itself, the thing under test, are imported):

- sender outputs, from ``run_with_cache`` on the clean and the corrupted tokens: the embedding
  ``hook_embed + hook_pos_embed``; each head ``attn.hook_z[:, :, h] @ W_O[l, h]`` (TL 4 native
  bridges have no per-head ``hook_result``); each MLP ``hook_mlp_out - b_out`` (the graph's nodes
  carry no output biases);
- receiver gradients, from one clean forward in which every receiver ``R`` gets a zero tensor
  ``delta_R`` (requires grad) added to its own input only: a head's query (key, value) becomes
  ``ln1(resid_pre + delta) @ W_Q[l, h] + b_Q`` through ``attn.hook_q`` (``hook_k``, ``hook_v``) of
  that head alone, an MLP's input ``ln2(resid_mid + delta)`` through ``mlp.hook_in``, the logits'
  ``ln_final(resid_post + delta)`` through ``unembed.hook_in`` (each norm is the bridge's own
  module, so the LayerNorm is recomputed on the receiver's input, never frozen); the values do not
  change (delta is 0) and ``delta_R.grad`` is dMetric/dInput_R;
- the metric written out here: mean log-probability of the target token over the loss positions.
"""

from __future__ import annotations

import pytest
import torch

from perm_circuits.discovery import eap
from perm_circuits.discovery.graph import circuit_graph_of, split_edge
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.models import ModelConfig, build_model
from perm_circuits.tasks import PermutationTask, TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig


def logprob_metric(logits, batch: TaskBatch):
    """Mean log-probability of the targets, weighted by the loss mask."""
    logp = logits.log_softmax(-1).gather(-1, batch.targets[..., None].long())[..., 0]
    weights = batch.mask.to(logp.dtype)
    return (logp * weights).sum() / weights.sum()


def sender_outputs(model, tokens) -> dict[str, torch.Tensor]:
    """Every sender's contribution to the residual stream ``[batch, seq, d_model]``, from the hook cache."""
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    out = {"embed": cache["hook_embed"] + cache["hook_pos_embed"]}
    for layer in range(model.cfg.n_layers):
        z = cache[f"blocks.{layer}.attn.hook_z"]
        for h in range(model.cfg.n_heads):
            out[f"L{layer}H{h}"] = z[:, :, h] @ model.W_O[layer, h]
        if not model.cfg.attn_only:
            out[f"L{layer}MLP"] = cache[f"blocks.{layer}.hook_mlp_out"] - model.b_out[layer]
    return {name: value.detach() for name, value in out.items()}


def receiver_gradients(model, batch: TaskBatch) -> dict[str, torch.Tensor]:
    """dMetric/dInput_R for every receiver, on the clean run (module docstring)."""
    cfg, tokens = model.cfg, batch.tokens
    shape = (*tokens.shape, cfg.d_model)
    deltas: dict[str, torch.Tensor] = {}
    resid: dict[str, torch.Tensor] = {}

    def delta(receiver: str) -> torch.Tensor:
        return deltas.setdefault(receiver, torch.zeros(shape, dtype=model.W_E.dtype, requires_grad=True))

    def keep(key: str):
        def hook(activation, hook):
            resid[key] = activation

        return hook

    def head_input(layer: int, inp: str):
        weight = {"q": model.W_Q, "k": model.W_K, "v": model.W_V}[inp][layer]
        ln1 = model.blocks[layer].ln1

        def hook(activation, hook):
            r = resid[f"pre{layer}"]
            out = activation.clone()
            for h in range(cfg.n_heads):
                out[:, :, h] = out[:, :, h] + (ln1(r + delta(f"L{layer}H{h}.{inp}")) - ln1(r)) @ weight[h]
            return out

        return hook

    def whole_input(key: str, receiver: str, norm):
        def hook(activation, hook):
            r = resid[key]
            return activation + norm(r + delta(receiver)) - norm(r)

        return hook

    hooks = []
    for layer in range(cfg.n_layers):
        b = f"blocks.{layer}"
        hooks.append((f"{b}.hook_resid_pre", keep(f"pre{layer}")))
        hooks += [(f"{b}.attn.hook_{inp}", head_input(layer, inp)) for inp in "qkv"]
        if not cfg.attn_only:
            hooks.append((f"{b}.hook_resid_mid", keep(f"mid{layer}")))
            hooks.append((f"{b}.mlp.hook_in", whole_input(f"mid{layer}", f"L{layer}MLP", model.blocks[layer].ln2)))
    hooks.append((f"blocks.{cfg.n_layers - 1}.hook_resid_post", keep("post")))
    hooks.append(("unembed.hook_in", whole_input("post", "logits", model.ln_final)))
    with torch.enable_grad(), model.hooks(fwd_hooks=hooks):
        logits = model(tokens)
        logprob_metric(logits, batch).backward()
    with torch.no_grad():  # the zero deltas leave the run as it is
        assert torch.allclose(logits, model(tokens), atol=1e-12, rtol=0)
    return {receiver: d.grad for receiver, d in deltas.items()}


def reference_eap(model, batch: TaskBatch, how: str, corrupted=None) -> dict[str, float]:
    """``sum over batch and positions of (abl_S - out_S) * dMetric/dInput_R`` per edge."""
    clean = sender_outputs(model, batch.tokens)
    if how == "zero":
        ablated = {s: torch.zeros_like(v) for s, v in clean.items()}
    elif how == "mean":
        ablated = {s: v.mean(0, keepdim=True).expand_as(v) for s, v in clean.items()}
    elif how == "resample":
        ablated = sender_outputs(model, corrupted)
    else:
        raise ValueError(f"the reference knows how='zero', 'mean' or 'resample', got {how!r}")
    grads = receiver_gradients(model, batch)
    scores = {}
    for edge in circuit_graph_of(model).edges:
        sender, receiver = split_edge(edge)
        scores[edge] = float(((ablated[sender] - clean[sender]) * grads[receiver]).sum())
    return scores


def induction_case():
    """The hand-built induction model (no normalisation, zero MLPs), scored at the last position.

    Its attention is made soft (``sharpness=4``, attention margins of 4 instead of 20) so that the
    query and key edges carry a gradient: with saturated patterns only the value/output paths
    would have nonzero first-order scores.
    """
    model = build_induction_model(5, sharpness=4.0).to(torch.float64)
    batch = PermutationTask(TaskConfig(V=5, repeat_ratio=1.0, repeat_sources=(1, 2, 3, 4))).test_set(24)
    last = torch.zeros_like(batch.mask)
    last[:, -1] = 1.0
    return model, TaskBatch(batch.tokens, batch.targets, last)


def layernorm_case():
    """A seeded 2-layer, 2-head model with LayerNorm and ReLU MLPs, scored on the task's loss positions."""
    model = build_model(ModelConfig(d_model=16, n_heads=2, n_layers=2, seed=5)).eval().to(torch.float64)
    return model, PermutationTask(TaskConfig(repeat_ratio=0.3)).test_set(24)


CASES = {"induction": induction_case, "layernorm": layernorm_case}


@pytest.mark.parametrize("how", ["resample", "zero", "mean"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_eap_equals_the_hook_and_autograd_reference_on_every_edge(case, how):
    model, batch = CASES[case]()
    assert model.cfg.normalization_type == (None if case == "induction" else "LN")
    corrupted = batch.tokens.roll(1, dims=0)  # each row paired with the previous sample
    options = {"corrupted": corrupted} if how == "resample" else {}
    expected = reference_eap(model, batch, how, corrupted)
    want = torch.tensor(list(expected.values()), dtype=torch.float64)
    scale = float(want.abs().max())
    assert len(expected) == 46 and scale > 0.05  # the scores are not all ~0: the comparison can fail
    assert int((want.abs() > 1e-3 * scale).sum()) >= 7  # and several edges carry a score

    # The same float64 metric given to eap, per row (the metric convention), its mean over rows
    # the scalar above: equal to rounding.
    def metric(logits, batch):
        logp = logits.log_softmax(-1).gather(-1, batch.targets[..., None].long())[..., 0]
        weights = batch.mask.to(logp.dtype)
        return (logp * weights).sum(-1) * len(weights) / weights.sum()

    exact = eap(model, batch, how=how, metric=metric, n_edges=3, **options).scores
    assert list(exact.index) == list(expected)  # the graph's edges, in its order
    got = torch.tensor(exact.values, dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12 * scale), float((got - want).abs().max())

    # eap's default metric (the same mean log-probability; its position weights are rounded to
    # float32, a relative error below 1e-7 even on a float64 model).
    default = eap(model, batch, how=how, n_edges=3, **options).scores
    got = torch.tensor(default.values, dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-9 * scale), float((got - want).abs().max())


def test_reference_on_the_induction_circuit():
    """Resampling on the hand-built induction model (positions unchanged, only tokens resampled): exactly
    the designed induction circuit and the elimination head's two edges have a first-order effect; each
    induction edge helps the metric (negative score), the elimination head's edges hurt it at the
    repeated queries (positive)."""
    model, batch = induction_case()
    expected = reference_eap(model, batch, "resample", batch.tokens.roll(1, dims=0))
    induction = {"embed->L0H0.v", "L0H0->L1H0.k", "embed->L1H0.q", "embed->L1H0.v", "L1H0->logits"}
    elimination = {"embed->L1H1.v", "L1H1->logits"}
    assert {e for e, v in expected.items() if abs(v) > 1e-6} == induction | elimination
    assert all(expected[e] < -0.05 for e in induction)
    assert all(expected[e] > 0.05 for e in elimination)
