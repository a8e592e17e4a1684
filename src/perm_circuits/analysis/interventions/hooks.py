"""Ablations as TransformerLens hook lists: modes zero, mean, resample, binding_free and optimal.

An ablation replaces one activation by a value that carries no information about the current
sample and measures what the model loses (Wang et al. 2022, "Interpretability in the Wild", the IOI
paper, sections 3 and A; Chan et al. 2022 on resample ablation).  The modes answer different
questions and can disagree:

- ``"zero"``: the activation is set to 0 (far off distribution for a component whose mean output
  is large).  On ``blocks.L.attn.hook_z`` this removes the head's ``z_h W_O^h`` (``b_O`` stays).
- ``"mean"``: its mean over a *reference* batch, per position and per entry (the IOI paper's
  convention): the usual range kept, everything that varies from sample to sample removed.
- ``"resample"``: the same component's activation on one reference sample, the same sample at
  every ablated position (a coherent real activation): a random one (drawn per forward from a
  generator seeded with ``seed``) or, with ``pairing="row"``, reference row ``i`` for sample ``i``.
- ``"binding_free"``: row-paired resample from :func:`binding_free_reference` on the reference's
  own queries: same queries, answers of an independent permutation, so only the sample's (x, y)
  binding is destroyed (the analogue of the IOI paper's "ABC" reference).
- ``"optimal"``: the constant minimising the task loss on the reference (Li & Janson 2024,
  "Optimal ablation for interpretability"; :mod:`perm_circuits.analysis.interventions.optimal`):
  what is lost is only the information the component's input-dependent output carries.

Heads are ablated on ``blocks.L.attn.hook_z`` (TL4's native bridges have no per-head
``hook_result``), MLPs on ``hook_mlp_out`` or neurons on ``mlp.hook_post`` (:func:`ablate_mlp`).
Hooks are closures: inside a TL4 hook ``hook.name`` may be an internal alias such as
``blocks.0.attn.o.hook_in``, so nothing keys on it.  Row-paired hooks fit only batches of the
reference's size; ``evaluate(hooks=...)`` also runs a 1-row probe, so evaluate them with
``evaluate_logits(run_logits(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from perm_circuits.analysis.interventions.checks import (
    check_head,
    check_index_list,
    check_int,
    check_layer,
    check_positions,
    check_seed,
    seq_len,
)
from perm_circuits.analysis.interventions.core import (
    HOWS,
    OPTIMAL_STEPS,
    PAIRINGS,
    ablate_tokens,
    ablation_fn,
    check_hook_point,
    check_how,
    check_pairing,
    declared_size,
    layout_of,
    resample_rows,
    selection,
)
from perm_circuits.analysis.interventions.optimal import optimise_constant
from perm_circuits.analysis.interventions.references import binding_free_reference
from perm_circuits.hooks import HookList, check_hooks, run_capture
from perm_circuits.model_shape import model_shape
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.base import TaskBatch, own_analysis
from perm_circuits.tasks.permutation_data import make_test_set, permutation_batch, validate_tokens

__all__ = [
    "HOWS",
    "PAIRINGS",
    "ablate",
    "ablate_head",
    "ablate_mlp",
    "binding_free_reference",
    "check_reference",
    "optimal_constant",
    "reference_activations",
    "resample_rows",
    "study_ablate",
]


def check_reference(reference: object, V: int) -> TaskBatch | None:
    """A permutation-lookup :class:`TaskBatch` (or ``None``) with tokens valid for ``V``, its extras
    filled in (:func:`~perm_circuits.tasks.permutation_data.permutation_batch`)."""
    if reference is None:
        return None
    if not isinstance(reference, TaskBatch):
        raise TypeError(f"reference must be a TaskBatch or None, "
                        f"got {type(reference).__name__}")
    validate_tokens(reference.tokens, V)
    return permutation_batch(reference)


def reference_activations(
    model,
    reference: TaskBatch | None,
    hook_names: Sequence[str],
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> dict[str, Tensor]:
    """Activations at ``hook_names`` on ``reference`` (default: the model's fixed test set).

    One forward under ``hooks``; the dict is keyed by the names asked for (aliases included).
    """
    reference = check_reference(reference, model_config_of(model).V)
    if isinstance(hook_names, str) or not isinstance(hook_names, (list, tuple)):  # a str would be its letters
        raise TypeError(f"hook_names must be a list or tuple of hook point names, got {type(hook_names).__name__} "
                        f"{hook_names!r}")
    names = [check_hook_point(model, name) for name in hook_names]
    hooks = check_hooks(model, hooks)
    reference = make_test_set(task_config_of(model)) if reference is None else reference
    return run_capture(model, reference.tokens, names, hooks)[1]


def _check_selection(model, hook_name: object, index: object,
                     positions: object) -> tuple[str, str, list[int] | None, list[int] | None]:
    """``(hook_name, layout, index_list, position_list)`` validated against a permutation model."""
    n_positions = seq_len(model)
    hook_name = check_hook_point(model, hook_name)
    size = declared_size(model, hook_name)
    if index is not None and size is None:
        raise ValueError(f"index is not supported for hook {hook_name!r}; ablate it whole or pick another hook")
    index_list = None if size is None else check_index_list("index", index, size)
    return hook_name, layout_of(hook_name), index_list, check_positions(positions, n_positions)


def ablate(
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
) -> HookList:
    """A one-hook list ablating ``hook_name`` under mode ``how`` (one of :data:`HOWS`).

    A model whose task has an ``ablate`` of its own (:func:`~perm_circuits.tasks.base.own_analysis`:
    a study bridge's permutation task, :func:`study_ablate`, every mode of :data:`HOWS`, whose
    reference is a ``TaskBatch``) gets that; any other hooked model goes to
    :func:`~perm_circuits.analysis.interventions.core.ablate_tokens` (which also takes a token tensor):
    modes ``"zero"``, ``"mean"``, ``"resample"`` and ``"optimal"`` (the constant minimising the
    reference batch's masked next-token loss), with the reference required for all but zero.

    Args:
        reference: batch for every mode but ``"zero"`` (default: the model's fixed test set
            ``make_test_set(task_config_of(model))``): the mean, the resample pool, the queries of
            the binding-free reference (whose hooks then fit only this batch, row for row), or the
            batch on which the optimal constant minimises the loss.
        index: entries of the axis after ``pos`` to ablate (heads for ``hook_q/k/v/z``, neurons
            for ``mlp.hook_pre/post``, residual dimensions for d_model-wide hooks; heads for
            ``hook_pattern``); ``None`` ablates the whole activation.  Negative entries count
            from the end.
        positions: sequence positions to ablate (destination positions for ``hook_pattern``);
            ``None`` = all.  Negative positions count from the end.
        seed: seeds the choice of reference samples for ``"resample"`` with
            ``pairing="random"`` (each forward redraws from the same seed, so repeated runs are
            identical) and the binding-free answers for ``"binding_free"``
            (``binding_free_reference(task, seed=seed, queries=reference)``); unused by
            ``"zero"``, ``"mean"``, ``"optimal"`` (deterministic) and ``pairing="row"``.
        pairing: ``"random"`` (a seeded random reference sample per sample) or ``"row"``
            (reference row ``i`` for sample ``i``; the batch must be as long as the reference),
            for ``"resample"``; ``"binding_free"`` always pairs by row.
        hooks: interventions applied while the reference activations (and the optimal constant)
            are computed.
    """
    own = own_analysis(model, "ablate")  # the model's task's own ablation, if it has one
    run = ablate_tokens if own is None else own
    return run(model, hook_name, how, reference=reference, index=index, positions=positions, seed=seed,
               pairing=pairing, hooks=hooks)


def study_ablate(
    model,
    hook_name: str,
    how: str,
    *,
    reference: object,
    index: object,
    positions: object,
    seed: object,
    pairing: object,
    hooks: object,
) -> HookList:
    """The permutation task's own :func:`ablate` (``own_analysis(model, "ablate")``): every mode of
    :data:`HOWS`, the reference default the model's fixed test set; the arguments are :func:`ablate`'s,
    checked here (the annotations are loose so that the checks below name them)."""
    hook_name, layout, index_list, position_list = _check_selection(model, hook_name, index, positions)
    how = check_how(how)
    pairing = check_pairing(pairing)
    check_seed(seed)
    reference = check_reference(reference, model_config_of(model).V)
    hooks = check_hooks(model, hooks)
    activation = constant = None
    if how != "zero":
        task = task_config_of(model)
        reference = make_test_set(task) if reference is None else reference
        if how == "binding_free":
            reference = binding_free_reference(task, seed=seed, queries=reference)
        activation = run_capture(model, reference.tokens, [hook_name], hooks)[1][hook_name]
        if how == "optimal":  # arguments validated above: the search runs directly
            mask = selection(activation.shape, layout, index_list, position_list, activation.device)
            constant = optimise_constant(model, hook_name, mask, reference, hooks, activation)
            activation = None  # the hook uses only the constant
    return [(hook_name, ablation_fn(how, layout, index_list, position_list, activation, seed, pairing, constant))]


def optimal_constant(
    model,
    hook_name: str,
    *,
    reference: TaskBatch | None = None,
    index: int | Sequence[int] | None = None,
    positions: int | Sequence[int] | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    steps: int = OPTIMAL_STEPS,
) -> Tensor:
    """The optimal-ablation constant of ``hook_name`` (Li & Janson 2024), shape ``activation.shape[1:]``.

    The ``c`` minimising the task loss (mean cross-entropy of the V answers) on ``reference``
    (default: the model's fixed test set) with the selected entries (``index``, ``positions`` as in
    :func:`ablate`) set to ``c``: ``steps`` full-batch L-BFGS iterations from the mean activation,
    the model frozen (:mod:`perm_circuits.analysis.interventions.optimal`).  Deterministic; entries
    outside the selection hold the mean activation.  ``ablate(..., how="optimal")`` uses the default
    ``steps``.
    """
    hook_name, layout, index_list, position_list = _check_selection(model, hook_name, index, positions)
    check_int("steps", steps, 0)
    reference = check_reference(reference, model_config_of(model).V)
    hooks = check_hooks(model, hooks)
    reference = make_test_set(task_config_of(model)) if reference is None else reference
    activation = run_capture(model, reference.tokens, [hook_name], hooks)[1][hook_name]
    mask = selection(activation.shape, layout, index_list, position_list, activation.device)
    return optimise_constant(model, hook_name, mask, reference, hooks, activation, steps=steps)


def ablate_head(
    model,
    layer: int,
    head: int,
    how: str = "zero",
    *,
    reference: TaskBatch | Tensor | None = None,
    positions: int | Sequence[int] | None = None,
    seed: int = 0,
    pairing: str = "random",
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> HookList:
    """Ablate head ``head`` of layer ``layer`` on ``blocks.{layer}.attn.hook_z``.

    Zero ablation equals deleting the head's columns of ``W_O``
    (``blocks.L.attn.o.weight[:, head*d_head:(head+1)*d_head] = 0``).  Negative ``layer`` and
    ``head`` count from the end; the other arguments as in :func:`ablate` (``seed`` seeds the
    resample draw).
    """
    layer, head = check_layer(model, layer), check_head(model, head)
    return ablate(model, f"blocks.{layer}.attn.hook_z", how, reference=reference, index=head, positions=positions,
                  seed=seed, pairing=pairing, hooks=hooks)


def ablate_mlp(
    model,
    layer: int,
    how: str = "zero",
    *,
    neurons: int | Sequence[int] | None = None,
    reference: TaskBatch | Tensor | None = None,
    positions: int | Sequence[int] | None = None,
    seed: int = 0,
    pairing: str = "random",
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> HookList:
    """Ablate the MLP of layer ``layer``: whole on ``hook_mlp_out``, or ``neurons`` on ``mlp.hook_post``.

    Zero-ablating the whole MLP removes its output including ``b_out``; zero-ablating all
    neurons would leave ``b_out``.  Negative ``layer`` (and ``neurons``) count from the end; the
    other arguments as in :func:`ablate` (``seed`` seeds the resample draw).
    """
    layer = check_layer(model, layer)
    if neurons is None:
        hook_name, index = f"blocks.{layer}.hook_mlp_out", None
    else:
        hook_name = f"blocks.{layer}.mlp.hook_post"
        d_mlp = model_shape(model).d_mlp
        index = check_index_list("neurons", neurons, d_mlp) if d_mlp is not None else neurons
    return ablate(model, hook_name, how, reference=reference, index=index, positions=positions, seed=seed,
                  pairing=pairing, hooks=hooks)
