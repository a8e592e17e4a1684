"""Ablations on any task and any hooked model: hooks and the task ablation table.

The permutation-lookup ablations of :mod:`perm_circuits.analysis.ablation` read the permutation
task (its test set, its binding-free reference, its loss).  On any other model (a TransformerLens
bridge without ``perm_config``, or a ``HookedRootModule`` with ``HookPoint``\\ s such as the seed
papers' systems) :func:`~perm_circuits.analysis.ablation.ablate`,
:func:`~perm_circuits.analysis.ablation.ablate_head` and
:func:`~perm_circuits.analysis.ablation.ablate_mlp` come here (also for a study model when the
``reference`` is a :class:`~perm_circuits.tasks.base.TaskBatch` or a token tensor), with the same
hook closures and the same three task-free modes (Wang et al. 2022, the IOI paper, section 3;
Chan et al. 2022 on resample ablation):

- ``"zero"``: the activation is set to 0; needs no reference;
- ``"mean"``: set to its mean over the ``reference`` tokens, per position (and head / neuron);
- ``"resample"``: replaced by its value on a reference sequence (a seeded random one, or row
  ``i`` with ``pairing="row"``).

``"binding_free"`` and ``"optimal"`` need the permutation task and raise a ValueError here.
Positions and indices refer to the activation's own axes (the factual-recall model's
attention hooks have one position, its EOS): with a reference they are validated against the
reference activation before anything else runs; in zero mode, against the model's declared
sizes where it has them (``n_heads``), else when the hook first runs (a ValueError inside the
forward, after which the model has no hooks left).

:func:`task_ablation_table` ablates every head (``blocks.L.attn.hook_z``) and every MLP
(``blocks.L.hook_mlp_out``, where the model has one) under each mode and measures the task's own
metrics with :func:`~perm_circuits.task_eval.evaluate_task` (``hooks=``), next to the unablated
baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.analysis._checks import (
    check_index_list,
    check_int,
    check_positions,
    check_seed,
)
from perm_circuits.hooks import HookList, check_hooks, check_token_ids, run_capture
from perm_circuits.model_shape import model_shape
from perm_circuits.tasks.base import Task, TaskBatch

__all__ = ["TASK_HOWS", "TaskAblationRow", "TaskAblationTable", "ablate_tokens", "reference_tokens", "task_ablation_table"]

TASK_HOWS: tuple[str, ...] = ("zero", "mean", "resample")
"""The ablation modes that need no permutation task."""

_HEAD_SUFFIXES = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_pattern")
_MLP_SUFFIXES = ("mlp.hook_pre", "mlp.hook_post")
_RESID_SUFFIXES = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                   "hook_embed", "hook_pos_embed")


def reference_tokens(model, reference: object) -> Tensor | None:
    """The token ids of a ``reference`` (a :class:`TaskBatch`, a token tensor, or ``None``), validated."""
    if reference is None:
        return None
    if isinstance(reference, TaskBatch):
        reference = reference.tokens
    if not isinstance(reference, Tensor):
        raise TypeError(
            f"reference must be a TaskBatch (task.test_set(...)), an integer token tensor [batch, seq] or None, "
            f"got {type(reference).__name__}"
        )
    return check_token_ids(reference, model_shape(model).d_vocab)


def _is_bridge(model) -> bool:
    try:
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:  # pragma: no cover - TL4 always has it
        return False
    return isinstance(model, TransformerBridge)


def check_hook_point(model, hook_name: object) -> str:
    """A hook point of any hooked model that an edit reaches (TL4 bridge traps rejected)."""
    if not isinstance(hook_name, str):
        raise TypeError(f"hook_name must be a str, got {type(hook_name).__name__}")
    shape = model_shape(model)
    if hook_name not in model.hook_dict:
        raise ValueError(f"unknown hook point {hook_name!r} for {type(model).__name__}")
    if _is_bridge(model):
        if hook_name.endswith("hook_attn_scores"):
            raise ValueError(
                f"{hook_name!r}: in TransformerLens 4 hook_attn_scores is post-softmax and edits to it are "
                "ignored; ablate 'hook_pattern' instead"
            )
        point = model.hook_dict[hook_name]
        for layer in range(shape.n_layers):
            if point is model.hook_dict.get(f"blocks.{layer}.hook_resid_mid"):
                raise ValueError(
                    f"{hook_name!r}: in TransformerLens 4 bridges blocks.{layer}.hook_resid_mid is the MLP's "
                    f"input; edits there do not reach the residual stream. Ablate 'blocks.{layer}.hook_attn_out'"
                )
    return hook_name


def _declared_size(model, hook_name: str) -> int | None:
    """Size of the axis ``index`` selects, where the model declares it."""
    shape = model_shape(model)
    if hook_name.endswith(_HEAD_SUFFIXES):
        return shape.n_heads
    if hook_name.endswith(_MLP_SUFFIXES):
        return shape.d_mlp
    if hook_name.endswith(_RESID_SUFFIXES):
        return shape.d_model
    return None


def _axes(activation_shape: Sequence[int], layout: str) -> tuple[int, int]:
    """(positions, index) axis sizes of an activation."""
    if layout == "pattern":
        return activation_shape[2], activation_shape[1]
    return activation_shape[1], (activation_shape[2] if len(activation_shape) > 2 else 0)


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
) -> HookList:
    """A one-hook list ablating ``hook_name`` of any hooked model, with a reference of task tokens.

    What :func:`~perm_circuits.analysis.ablation.ablate` does for models that are not the study's
    (see the module docstring); ``how`` is one of :data:`TASK_HOWS`, ``reference`` a
    :class:`TaskBatch` or token ids ``[batch, seq]`` (required for ``"mean"`` and ``"resample"``).
    """
    from perm_circuits.analysis.ablation import _ablation_fn, _check_how, _check_pairing

    hook_name = check_hook_point(model, hook_name)
    how = _check_how(how)
    if how not in TASK_HOWS:
        raise ValueError(
            f"how={how!r} needs the permutation-lookup task (its loss and binding-free reference); on any task "
            f"use one of {TASK_HOWS}"
        )
    pairing = _check_pairing(pairing)
    check_seed(seed)
    tokens = reference_tokens(model, reference)
    if how != "zero" and tokens is None:
        raise ValueError(
            f"how={how!r} on {type(model).__name__} needs reference=: a TaskBatch (e.g. task.test_set(...)) or "
            "token ids whose activations give the mean / the resample pool"
        )
    hooks = check_hooks(model, hooks)
    layout = "pattern" if hook_name.endswith("hook_pattern") else "pos"
    size = _declared_size(model, hook_name)
    if index is not None and size is not None:
        index = check_index_list("index", index, size)
    activation = None
    if tokens is not None and how != "zero":
        activation = run_capture(model, tokens, [hook_name], hooks)[1].get(hook_name)
        if activation is None:
            raise ValueError(f"hook point {hook_name!r} did not run in {type(model).__name__}'s forward pass")
        n_pos, n_index = _axes(activation.shape, layout)
        index = check_index_list("index", index, n_index) if index is not None else None
        positions = check_positions(positions, n_pos)
        return [(hook_name, _ablation_fn(how, layout, index, positions, activation, seed, pairing))]
    raw_index, raw_positions = index, positions
    if raw_positions is not None:
        check_positions(raw_positions, 1 << 30)  # type and repeats now; the range when the hook runs

    def zero_hook(act: Tensor, hook) -> Tensor:
        n_pos, n_index = _axes(act.shape, layout)
        chosen = check_index_list("index", raw_index, n_index) if raw_index is not None else None
        where = check_positions(raw_positions, n_pos)
        return _ablation_fn("zero", layout, chosen, where, None, seed, pairing)(act, hook)

    return [(hook_name, zero_hook)]


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class TaskAblationRow:
    """The task's metrics with one component ablated (``component="none"``: the baseline).

    ``component`` is ``"none"``, ``"L{layer}H{head}"`` or ``"L{layer}MLP"``; ``metrics`` are the
    task's own (:attr:`Task.metric_names`) and ``test_loss`` the masked next-token loss.
    """

    component: str
    how: str
    layer: int | None
    head: int | None
    metrics: Mapping[str, float]
    test_loss: float


@dataclass(frozen=True)
class TaskAblationTable:
    """Every component ablated under every mode, measured on one test set of ``task``."""

    task: str
    model_name: str
    metric_names: tuple[str, ...]
    rows: tuple[TaskAblationRow, ...]
    n: int
    seed: int

    @property
    def baseline(self) -> TaskAblationRow:
        return self.rows[0]

    @property
    def primary_metric(self) -> str:
        """The metric the report plots: the first whose name has ``"acc"``, else the first one."""
        return next((m for m in self.metric_names if "acc" in m), self.metric_names[0])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (component, mode): the metrics, ``test_loss`` and ``delta_<metric>`` vs the baseline."""
        base = self.baseline
        records = []
        for row in self.rows:
            record = {"component": row.component, "how": row.how, "layer": row.layer, "head": row.head}
            record.update(row.metrics)
            record["test_loss"] = row.test_loss
            for name in self.metric_names:
                record[f"delta_{name}"] = row.metrics[name] - base.metrics[name]
            records.append(record)
        return pd.DataFrame(records)

    def get(self, component: str, how: str) -> TaskAblationRow:
        for row in self.rows:
            if row.component == component and row.how == how:
                return row
        raise KeyError(f"no row for component {component!r} under how={how!r}")


def model_components(model) -> list[tuple[str, int, int | None]]:
    """``(label, layer, head)`` of every head (``head`` an int) and every MLP (``head`` None) of ``model``, layer by layer."""
    shape = model_shape(model)
    out: list[tuple[str, int, int | None]] = []
    for layer in range(shape.n_layers):
        if shape.heads(layer) and shape.n_heads:
            out += [(f"L{layer}H{head}", layer, head) for head in range(shape.n_heads)]
        if shape.mlp(layer):
            out.append((f"L{layer}MLP", layer, None))
    return out


def task_ablation_table(
    model,
    task: Task,
    hows: Sequence[str] = TASK_HOWS,
    *,
    n: int = 500,
    seed: int = 1234,
    reference: TaskBatch | None = None,
    n_reference: int = 500,
    resample_seed: int = 0,
    progress: bool = False,
) -> TaskAblationTable:
    """Ablate every head and MLP of ``model`` under each of ``hows`` and measure ``task``'s metrics.

    Each cell is :func:`~perm_circuits.task_eval.evaluate_task` on ``task.test_set(n, seed)`` with
    one component ablated (heads on ``blocks.L.attn.hook_z``, MLPs on ``blocks.L.hook_mlp_out``;
    Wang et al. 2022, section 3).  ``reference`` (default ``task.test_set(n_reference, seed + 1)``,
    sequences other than the evaluated ones) gives the mean and the resample pool
    (``resample_seed`` seeds the draw).  Same arguments, same numbers.
    """
    from perm_circuits.analysis.ablation import ablate_head, ablate_mlp
    from perm_circuits.task_eval import check_fit, evaluate_task, model_name

    check_fit(model, task)
    shape = model_shape(model)
    if isinstance(hows, str) or not isinstance(hows, (list, tuple)) or not hows:
        raise TypeError(f"hows must be a non-empty list or tuple of modes from {TASK_HOWS}, got {hows!r}")
    for how in hows:
        if how not in TASK_HOWS:
            raise ValueError(f"hows entries must be in {TASK_HOWS}, got {how!r}")
    check_int("n", n, 1)
    check_int("n_reference", n_reference, 1)
    check_seed(seed)
    check_seed(resample_seed, "resample_seed")
    if reference is not None and not isinstance(reference, TaskBatch):
        raise TypeError(f"reference must be a TaskBatch or None, got {type(reference).__name__}")
    components = model_components(model)
    if not components:
        raise ValueError(
            f"{type(model).__name__} has no blocks.L.attn.hook_z or blocks.L.hook_mlp_out hook point "
            f"({shape.n_layers} layer(s)): nothing to ablate"
        )
    test_set = task.test_set(n, seed)
    if reference is None and any(how != "zero" for how in hows):
        reference = task.test_set(n_reference, seed + 1)
    base = evaluate_task(model, task, test_set)
    rows = [TaskAblationRow("none", "none", None, None, dict(base.metrics), base.test_loss)]
    cells = [(how, c) for how in hows for c in components]
    for how, (label, layer, head) in tqdm(cells, disable=not progress, desc="task ablation", leave=False):
        ref = None if how == "zero" else reference
        if head is None:
            hooks = ablate_mlp(model, layer, how, reference=ref, seed=resample_seed)
        else:
            hooks = ablate_head(model, layer, head, how, reference=ref, seed=resample_seed)
        result = evaluate_task(model, task, test_set, hooks=hooks)
        rows.append(TaskAblationRow(label, how, layer, head, dict(result.metrics), result.test_loss))
    return TaskAblationTable(task.name, model_name(model), tuple(task.metric_names), tuple(rows), n, seed)


# former private names, kept as aliases for callers not yet renamed
_components = model_components
