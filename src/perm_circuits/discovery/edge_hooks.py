"""The same edge intervention as TransformerLens hooks on the bridge itself (one mask, one run).

:meth:`EdgeIntervention.run <perm_circuits.discovery.interventions.EdgeIntervention.run>` computes
masked runs in plain PyTorch, batched over masks.  :func:`edge_hooks` builds the TL hook list
that makes ``model(tokens)`` compute the same run, so the intervention composes with any other
hooks and can be checked against the bridge for any mask:

- captures, in the run itself: each layer's ``hook_resid_pre`` and ``hook_resid_mid``, the last
  ``hook_resid_post``, each head's output (``attn.hook_z`` times its ``W_O``) and each MLP's
  (``hook_mlp_out`` minus ``b_out``);
- edits each receiver's input as path patching does
  (:mod:`perm_circuits.analysis.interventions.path_patching`), its LayerNorm recomputed on the modified residual
  ``r - D`` with ``D = sum over senders S of (1 - m_SR) (out_S - abl_S)``:
  ``attn.hook_q``/``hook_k``/``hook_v`` of the head (``+ norm(r - D) @ W - norm(r) @ W``; TL 4
  native bridges cannot enable split q/k/v inputs),
  ``blocks.{l}.mlp.hook_in`` (the ``ln2`` output, read only by the MLP) and ``unembed.hook_in``
  (the ``ln_final`` output).
"""

from __future__ import annotations

from functools import partial

from jaxtyping import Float
from torch import Tensor

from perm_circuits.discovery.interventions import EdgeIntervention
from perm_circuits.hooks import HookList

__all__ = ["edge_hooks"]


def edge_hooks(ei: EdgeIntervention, mask: Float[Tensor, " edge"]) -> HookList:
    """TL hooks that run ``model(ei.tokens)`` with edges weighted by ``mask`` (module docstring).

    Use inside ``model.hooks(fwd_hooks=edge_hooks(ei, mask))`` on the prepared tokens; the logits
    equal ``ei.run(mask)``.
    """
    if not isinstance(ei, EdgeIntervention):
        raise TypeError(f"ei must be an EdgeIntervention, got {type(ei).__name__}")
    if not isinstance(mask, Tensor) or mask.shape != (ei.n_edges,):
        raise ValueError(f"mask must be a tensor of {ei.n_edges} edge weights, got {getattr(mask, 'shape', mask)}")
    w, graph = ei.weights, ei.graph
    mask = mask.detach().to(w.W_E.dtype)
    current: dict[str, Tensor] = {s: ei.clean[s] for s in graph.senders if s.endswith("embed")}
    resid: dict[str, Tensor] = {}
    incoming = graph.senders_into()

    def removed(receiver: str) -> Tensor:
        return sum((1 - mask[e]) * (current[sender] - ei.ablated[sender]) for sender, e in incoming[receiver])

    def store(activation: Tensor, hook, *, key: str) -> None:
        resid[key] = activation

    def heads_out(z: Tensor, hook, *, layer: int) -> None:
        for h in range(w.n_heads):
            current[f"L{layer}H{h}"] = z[:, :, h] @ w.W_O[layer, h]

    def mlp_out(out: Tensor, hook, *, layer: int) -> None:
        current[f"L{layer}MLP"] = out - w.b_out[layer]

    def head_input(activation: Tensor, hook, *, layer: int, head: int, inp: str) -> Tensor:
        r, norm = resid[f"pre{layer}"], partial(w.norm, name=f"blocks.{layer}.ln1")
        weight = {"q": w.W_Q, "k": w.W_K, "v": w.W_V}[inp][layer, head]
        out = activation.clone()
        out[:, :, head] = out[:, :, head] + (norm(r - removed(f"L{layer}H{head}.{inp}")) - norm(r)) @ weight
        return out

    def replace_input(activation: Tensor, hook, *, key: str, receiver: str, norm_name: str) -> Tensor:
        r = resid[key]
        return activation + w.norm(r - removed(receiver), norm_name) - w.norm(r, norm_name)

    hooks: HookList = []
    last = w.n_layers - 1
    for layer in range(w.n_layers):
        b = f"blocks.{layer}"
        hooks.append((f"{b}.hook_resid_pre", partial(store, key=f"pre{layer}")))
        hooks += [(f"{b}.attn.hook_{inp}", partial(head_input, layer=layer, head=h, inp=inp))
                  for h in range(w.n_heads) for inp in "qkv"]
        hooks.append((f"{b}.attn.hook_z", partial(heads_out, layer=layer)))
        if w.has_mlp:
            hooks.append((f"{b}.hook_resid_mid", partial(store, key=f"mid{layer}")))
            hooks.append((f"{b}.mlp.hook_in", partial(replace_input, key=f"mid{layer}", receiver=f"L{layer}MLP",
                                                      norm_name=f"{b}.ln2")))
            hooks.append((f"{b}.hook_mlp_out", partial(mlp_out, layer=layer)))
    hooks.append((f"blocks.{last}.hook_resid_post", partial(store, key="post")))
    hooks.append(("unembed.hook_in", partial(replace_input, key="post", receiver="logits", norm_name="ln_final")))
    return hooks
