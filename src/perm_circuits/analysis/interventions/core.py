"""The intervention core: ablation hooks on any hooked model, with no task behind them.

What every ablation and patch needs, whatever the task (Wang et al. 2022, "Interpretability in
the Wild", section 3; Chan et al. 2022 on resample ablation; Li & Janson 2024, "Optimal ablation
for interpretability"): the modes, the hook-point check (the TransformerLens 4 traps rejected:
``hook_attn_scores`` is post-softmax and edits to it are ignored; in native bridges
``blocks.L.hook_resid_mid`` is the MLP's input, so an edit there misses the residual stream), the
selection of entries, the hook closure, and :func:`ablate_tokens` (modes zero, mean, resample and
optimal on any model, with reference token ids or a :class:`~perm_circuits.tasks.base.TaskBatch`).

``"binding_free"`` needs the permutation-lookup task (its queries and answers) and raises here.
Positions and indices refer to the activation's own axes (the factual-recall model's attention
hooks have one position, its EOS): with a reference they are validated against the reference
activation before anything else runs; in zero mode, against the model's declared sizes where it
has them, else when the hook first runs (a ValueError inside the forward, after which the model
has no hooks left).  The permutation study's ablations
(:mod:`perm_circuits.analysis.interventions.hooks`) build on this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.ablation_modes import modes
from perm_circuits.analysis.interventions.checks import check_index_list, check_int, check_positions, check_seed
from perm_circuits.circuit import Node
from perm_circuits.devices import device_forward
from perm_circuits.hooks import HookList, check_hooks, check_token_ids, run_capture
from perm_circuits.metric import pooled_target_logprob, target_logprobs
from perm_circuits.model_shape import model_shape
from perm_circuits.optimal_solver import OPTIMAL_STEPS, lbfgs_constant
from perm_circuits.tasks.base import TaskBatch

__all__ = [
    "ANY_TASK_HOWS",
    "HOWS",
    "PAIRINGS",
    "TASK_HOWS",
    "ablate_tokens",
    "ablation_fn",
    "activation_axes",
    "check_hook_point",
    "check_how",
    "check_pairing",
    "component_hook",
    "component_sweep",
    "components_of",
    "lbfgs_constant",
    "minimise_constant",
    "next_token_loss",
    "reference_tokens",
    "resample_rows",
    "selection",
]

HOWS: tuple[str, ...] = modes("study")
"""Every ablation mode (``"binding_free"`` needs the permutation-lookup task); the lists come from
:mod:`perm_circuits.ablation_modes`."""

TASK_HOWS: tuple[str, ...] = modes("task", default=True)
"""The modes an any-task ablation table runs by default (cheap: no search)."""

ANY_TASK_HOWS: tuple[str, ...] = modes("task")
"""The modes that work on any task's model."""

PAIRINGS: tuple[str, ...] = ("random", "row")

_HEAD_SUFFIXES = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_pattern")
_MLP_SUFFIXES = ("mlp.hook_pre", "mlp.hook_post")
_RESID_SUFFIXES = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                   "hook_embed", "hook_pos_embed")


# ----------------------------------------------------------------------------- checks


def check_how(how: object, name: str = "how") -> str:
    """One of :data:`HOWS` (TypeError for a non-str, ValueError for an unknown mode)."""
    if not isinstance(how, str):
        raise TypeError(f"{name} must be a str, one of {HOWS}, got {type(how).__name__} {how!r}")
    if how not in HOWS:
        raise ValueError(f"{name} must be one of {HOWS}, got {how!r}")
    return how


def check_pairing(pairing: object) -> str:
    """``"random"`` or ``"row"``."""
    if not isinstance(pairing, str) or pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return pairing


def check_hook_point(model, hook_name: object) -> str:
    """A hook point of any hooked model that an edit reaches (TransformerLens 4 bridge traps rejected)."""
    from transformer_lens.model_bridge import TransformerBridge

    if not isinstance(hook_name, str):
        raise TypeError(f"hook_name must be a str, got {type(hook_name).__name__}")
    shape = model_shape(model)
    if hook_name not in model.hook_dict:
        raise ValueError(f"unknown hook point {hook_name!r} for {type(model).__name__}")
    if isinstance(model, TransformerBridge):
        if hook_name.endswith("hook_attn_scores"):
            raise ValueError(
                f"{hook_name!r}: in TransformerLens 4 hook_attn_scores is post-softmax and edits to it are "
                "ignored; ablate 'hook_pattern' instead"
            )
        point = model.hook_dict[hook_name]
        for layer in range(shape.n_layers):
            if point is model.hook_dict.get(f"blocks.{layer}.hook_resid_mid"):
                raise ValueError(
                    f"{hook_name!r}: in TransformerLens 4.3 native bridges blocks.{layer}.hook_resid_mid is the "
                    "MLP's input (ln2.hook_in); edits there do not reach the residual stream. Ablate "
                    f"'blocks.{layer}.hook_attn_out' (or, to edit only the MLP's input, "
                    f"'blocks.{layer}.ln2.hook_normalized')"
                )
    return hook_name


def reference_tokens(model, reference: object, positions: int | None = None) -> Tensor | None:
    """The token ids of a ``reference`` (a :class:`TaskBatch`, a token tensor, or ``None``), validated;
    with ``positions`` (the test set's), they must have as many (ablations replace position by position)."""
    if reference is None:
        return None
    if isinstance(reference, TaskBatch):
        reference = reference.tokens
    if not isinstance(reference, Tensor):
        raise TypeError(
            f"reference must be a TaskBatch (task.test_set(...)), an integer token tensor [batch, seq] or None, "
            f"got {type(reference).__name__}"
        )
    check_token_ids(reference, model_shape(model).d_vocab)
    if positions is not None and reference.shape[1] != positions:
        raise ValueError(f"reference sequences must have the test set's {positions} positions (the ablations "
                         f"replace activations position by position), got {reference.shape[1]}")
    return reference


def declared_size(model, hook_name: str) -> int | None:
    """Size of the axis ``index`` selects at ``hook_name``, where the model declares it."""
    shape = model_shape(model)
    sizes = ((_HEAD_SUFFIXES, shape.n_heads), (_MLP_SUFFIXES, shape.d_mlp), (_RESID_SUFFIXES, shape.d_model))
    return next((size for suffixes, size in sizes if hook_name.endswith(suffixes)), None)


def activation_axes(activation_shape: Sequence[int], layout: str) -> tuple[int, int]:
    """(positions, index) axis sizes of an activation (layout ``"pos"`` or ``"pattern"``)."""
    if layout == "pattern":
        return activation_shape[2], activation_shape[1]
    return activation_shape[1], (activation_shape[2] if len(activation_shape) > 2 else 0)


def layout_of(hook_name: str) -> str:
    """``"pattern"`` for ``[batch, head, dest, src]`` attention patterns, else ``"pos"``."""
    return "pattern" if hook_name.endswith("hook_pattern") else "pos"


def components_of(model) -> list[tuple[str, int, int | None]]:
    """Every head (``L{l}H{h}``, where ``blocks.L.attn.hook_z`` exists) and MLP (``L{l}MLP``) of ``model``:
    ``(label, layer, head or None)``."""
    shape = model_shape(model)
    out: list[tuple[str, int, int | None]] = []
    for layer in range(shape.n_layers):
        if shape.heads(layer) and shape.n_heads:
            out += [(str(Node(layer, head)), layer, head) for head in range(shape.n_heads)]
        if shape.mlp(layer):
            out.append((str(Node(layer)), layer, None))
    return out


def component_hook(layer: int, head: int | None) -> str:
    """The hook a component is ablated on: ``blocks.L.attn.hook_z`` (a head) or ``blocks.L.hook_mlp_out``."""
    return f"blocks.{layer}.attn.hook_z" if head is not None else f"blocks.{layer}.hook_mlp_out"


def component_sweep(
    components: Sequence[tuple[str, int, int | None]],
    hows: Sequence[str],
    build: Callable[[str, int | None, str], HookList],
    measure: Callable[[HookList], Any],
    *,
    by_mode: bool = False,
    progress: bool = False,
    desc: str = "ablation",
) -> list[tuple[str, str, int | None, int | None, HookList, Any]]:
    """The ablation table's loop on any model: ``measure(hooks)`` unablated, then with each of ``components``
    (:func:`components_of`) ablated under each of ``hows`` by the hooks ``build(hook_name, head, how)``.

    Returns ``(component, how, layer, head, hooks, result)`` per run: the baseline (``"none"``,
    ``"none"``, no hooks) first, then component by component, or mode by mode with ``by_mode``.
    """
    cells = list(product(hows, components)) if by_mode else [(how, c) for c, how in product(components, hows)]
    runs = [("none", "none", None, None, [], measure([]))]
    for how, (component, layer, head) in tqdm(cells, disable=not progress, desc=desc, leave=False):
        extra = build(component_hook(layer, head), head, how)
        runs.append((component, how, layer, head, extra, measure(extra)))
    return runs


# ----------------------------------------------------------------------------- the hook closure


def resample_rows(n_reference: int, batch: int, seed: int) -> Tensor:
    """The reference row that replaces each sample's activation under random-pairing resample, drawn
    with ``torch.Generator().manual_seed(seed)`` (the resample seed)."""
    check_int("n_reference", n_reference, 1)
    check_int("batch", batch, 0)
    check_seed(seed)
    return torch.randint(n_reference, (batch,), generator=torch.Generator().manual_seed(seed))


def selection(shape: torch.Size, layout: str, index: list[int] | None, positions: list[int] | None,
              device: torch.device) -> Tensor:
    """Boolean mask over ``shape[1:]`` (no batch axis) of the entries an intervention replaces."""
    pos_dim, index_dim = (1, 2) if layout == "pos" else (2, 1)
    mask = torch.ones(shape[1:], dtype=torch.bool, device=device)
    for dim, chosen in ((pos_dim, positions), (index_dim, index)):
        if chosen is None:
            continue
        if dim >= len(shape):
            raise ValueError(f"activation of shape {tuple(shape)} has no axis {dim} to index")
        keep = torch.zeros(shape[dim], dtype=torch.bool, device=device)
        keep[chosen] = True
        view = [1] * (len(shape) - 1)
        view[dim - 1] = shape[dim]
        mask = mask & keep.view(view)
    return mask


def ablation_fn(
    how: str,
    layout: str,
    index: list[int] | None,
    positions: list[int] | None,
    reference_activation: Tensor | None,
    seed: int,
    pairing: str,
    constant: Tensor | None = None,
) -> Callable:
    """The hook closure: replace the selected entries of the activation.

    ``reference_activation``: the activation on the reference batch (``"mean"``, ``"resample"``;
    on the binding-free batch for ``"binding_free"``, always row-paired); ``constant``: the
    optimal constant ``[*activation.shape[1:]]`` for ``"optimal"``.
    """
    fixed = None  # the replacement shared by every sample: the mean or the optimal constant
    pairing = "row" if how == "binding_free" else pairing
    if how == "mean":
        assert reference_activation is not None
        fixed = reference_activation.mean(dim=0, keepdim=True)
    elif how == "optimal":
        assert constant is not None
        fixed = constant[None]

    def hook_fn(activation: Tensor, hook) -> Tensor:
        mask = selection(activation.shape, layout, index, positions, activation.device)
        if how == "zero":
            return torch.where(mask, torch.zeros((), dtype=activation.dtype, device=activation.device), activation)
        replacement = fixed if fixed is not None else reference_activation
        assert replacement is not None
        if activation.shape[1:] != replacement.shape[1:]:
            raise ValueError(
                f"activation shape {tuple(activation.shape)} does not match the reference activation "
                f"shape {tuple(replacement.shape)} beyond the batch axis"
            )
        batch, n_reference = activation.shape[0], replacement.shape[0]
        if fixed is None and pairing == "row" and n_reference != batch:
            if how == "binding_free":
                raise ValueError(f"binding_free ablation pairs by row and needs a batch of the reference's size "
                                 f"{n_reference}, got a batch of {batch}")
            raise ValueError(f"pairing='row' needs a reference of the batch's size {batch}, "
                             f"got {n_reference} reference samples")
        if fixed is None and pairing != "row":
            replacement = replacement[resample_rows(n_reference, batch, seed).to(replacement.device)]
        return torch.where(mask, replacement.to(activation.device, activation.dtype), activation)

    return hook_fn


# ----------------------------------------------------------------------------- optimal ablation on any model


def next_token_loss(reference: TaskBatch | Tensor) -> Callable[[Tensor], Tensor]:
    """``loss(logits)``: the mask-weighted mean cross-entropy of a TaskBatch's targets (the training
    loss of any task: minus :func:`perm_circuits.metric.pooled_target_logprob`), or for bare token
    ids the mean next-token cross-entropy (position ``p`` predicts token ``p + 1``), both from the
    library's one target log-probability (:func:`perm_circuits.metric.target_logprobs`)."""
    if isinstance(reference, TaskBatch):
        if float(reference.mask.float().sum()) <= 0:
            raise ValueError("the reference batch has no position with mask > 0: no loss to minimise")
        pooled = pooled_target_logprob(reference)  # the library's one target log-prob (perm_circuits.metric)

        def masked(logits: Tensor) -> Tensor:
            return -pooled(logits)

        return masked
    tokens = reference  # checked token ids: every next token is a class of the logits

    def shifted(logits: Tensor) -> Tensor:
        return -target_logprobs(logits[:, :-1].float(), tokens[:, 1:]).mean()

    return shifted


def minimise_constant(
    model,
    hook_name: str,
    mask: Tensor,
    tokens: Tensor,
    loss: Callable[[Tensor], Tensor],
    hooks: HookList,
    activation: Tensor,
    *,
    steps: int = OPTIMAL_STEPS,
) -> Tensor:
    """The constant ``c`` (shape ``activation.shape[1:]``) minimising ``loss(model(tokens))`` with
    ``where(mask, c, activation)`` at ``hook_name`` (Li & Janson 2024): ``steps`` full-batch L-BFGS
    iterations (strong-Wolfe line search) from the mean of ``activation`` over the batch, the model
    frozen (:func:`perm_circuits.optimal_solver.lbfgs_constant`, the one solver; this is its
    objective on the hooked model).  Deterministic on CPU; any model whose forward is differentiable.
    """

    def loss_of(constant: Tensor) -> Tensor:
        def replace(act: Tensor, hook) -> Tensor:
            return torch.where(mask.to(act.device), constant.to(act.device, act.dtype), act)

        with model.hooks(fwd_hooks=list(hooks) + [(hook_name, replace)]):
            return loss(device_forward(model, tokens))

    return lbfgs_constant(model, loss_of, activation.detach().float().mean(dim=0), steps)


def pair_tokens(model, clean: object, corrupted: object) -> tuple[Tensor, Tensor]:
    """The token ids of a clean/corrupted pair (TaskBatches or token tensors), checked to have one shape."""
    clean, corrupted = reference_tokens(model, clean), reference_tokens(model, corrupted)
    if clean is None or corrupted is None:
        raise TypeError("clean and corrupted must be TaskBatches or token tensors, got None")
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean and corrupted tokens must have the same shape, got {tuple(clean.shape)} and "
                         f"{tuple(corrupted.shape)}")
    return clean, corrupted


# ----------------------------------------------------------------------------- the any-model ablation


def ablate_tokens(
    model,
    hook_name: str,
    how: str = "zero",
    *,
    reference: TaskBatch | Tensor | None = None,
    index: int | Sequence[int] | None = None,
    positions: int | Sequence[int] | None = None,
    seed: int = 0,
    pairing: str = "random",
    hooks: Sequence[tuple[str, Callable]] | None = None,
    steps: int = OPTIMAL_STEPS,
) -> HookList:
    """A one-hook list ablating ``hook_name`` of any hooked model, with a reference of task tokens.

    ``how`` is one of :data:`ANY_TASK_HOWS`, ``reference`` a :class:`TaskBatch` or token ids
    ``[batch, seq]`` (required for ``"mean"``, ``"resample"`` and ``"optimal"``; the optimal
    constant minimises :func:`next_token_loss` of the reference, ``steps`` L-BFGS iterations).
    See the module docstring for positions and indices.
    """
    hook_name = check_hook_point(model, hook_name)
    how = check_how(how)
    if how not in ANY_TASK_HOWS:
        raise ValueError(
            f"how={how!r} needs the permutation-lookup task (its binding-free reference); on any task "
            f"use one of {ANY_TASK_HOWS}"
        )
    pairing = check_pairing(pairing)
    check_seed(seed)
    check_int("steps", steps, 0)
    tokens = reference_tokens(model, reference)
    if how != "zero" and tokens is None:
        raise ValueError(
            f"how={how!r} on {type(model).__name__} needs reference=: a TaskBatch (e.g. task.test_set(...)) or "
            "token ids whose activations give the mean / the resample pool / the optimal constant's loss"
        )
    hooks = check_hooks(model, hooks)
    layout = layout_of(hook_name)
    size = declared_size(model, hook_name)
    if size is not None:
        index = check_index_list("index", index, size)
    if tokens is not None and how != "zero":
        activation = run_capture(model, tokens, [hook_name], hooks)[1].get(hook_name)
        if activation is None:
            raise ValueError(f"hook point {hook_name!r} did not run in {type(model).__name__}'s forward pass")
        n_pos, n_index = activation_axes(activation.shape, layout)
        index = check_index_list("index", index, n_index)
        positions = check_positions(positions, n_pos)
        constant = None
        if how == "optimal":
            mask = selection(activation.shape, layout, index, positions, activation.device)
            loss = next_token_loss(reference if isinstance(reference, TaskBatch) else tokens)
            constant = minimise_constant(model, hook_name, mask, tokens, loss, hooks, activation, steps=steps)
        return [(hook_name, ablation_fn(how, layout, index, positions, activation, seed, pairing, constant))]
    check_positions(positions, 1 << 30)  # type and repeats now; the range when the hook runs

    def zero_hook(act: Tensor, hook) -> Tensor:
        n_pos, n_index = activation_axes(act.shape, layout)
        chosen = check_index_list("index", index, n_index)
        where = check_positions(positions, n_pos)
        return ablation_fn("zero", layout, chosen, where, None, seed, pairing)(act, hook)

    return [(hook_name, zero_hook)]
