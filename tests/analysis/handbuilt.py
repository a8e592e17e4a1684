"""Shared start for hand-built test models over V = 5 (used by test_roles, test_ablation_modes and
test_multilayer), for any number of layers."""

from __future__ import annotations

import copy

import torch

from perm_circuits import ModelConfig, build_model
from perm_circuits.models import model_config_of

V = 5


def blank_model(config: ModelConfig):
    """A model of ``config`` and a zeroed copy of its weights: token t -> dim t, position p -> dim
    6 + p, a constant 1 in dim 15 (the caller fills in the rest and loads the state dict).

    Every layer's weights are zeroed (``blocks.1.*`` too when ``config.n_layers >= 2``)."""
    model = build_model(config)
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for t in range(V + 1):
        sd["embed.weight"][t, t] = 1.0
    for p in range(2 * V - 1):
        sd["pos_embed.weight"][p, V + 1 + p] = 1.0
        sd["pos_embed.weight"][p, 3 * V] = 1.0
    return model, sd


def without(model, layer: int, head: int | None = None):
    """A copy of ``model`` with one component's output weights deleted: head ``head`` of ``layer``
    (its columns of ``blocks.{layer}.attn.o.weight``) or, with ``head=None``, the layer's MLP
    (``mlp.out.weight`` and ``mlp.out.bias``).  What zero ablation should equal, in any layer."""
    twin = copy.deepcopy(model)
    config = model_config_of(model)
    sd = twin.state_dict()
    if head is None:
        sd[f"blocks.{layer}.mlp.out.weight"].zero_()
        sd[f"blocks.{layer}.mlp.out.bias"].zero_()
    else:
        d_head = config.resolved_d_head
        sd[f"blocks.{layer}.attn.o.weight"][:, head * d_head : (head + 1) * d_head] = 0.0
    twin.load_state_dict(sd)
    twin.eval()
    return twin
