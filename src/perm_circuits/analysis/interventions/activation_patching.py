"""Activation patching on any task and any hooked model.

Denoising activation patching (Wang et al. 2022, the IOI paper, section 3; Meng et al. 2022) on a
clean/corrupted pair of token sequences of any task: the corrupted tokens are run with one
activation replaced by its value on the clean tokens, and

    effect = (mean metric(patched) - mean metric(corrupted)) / (mean metric(clean) - mean metric(corrupted)),

1 when the patched activation carries everything the pair differs by, 0 when it carries nothing,
with the paired percentile bootstrap of :mod:`perm_circuits.analysis.interventions.patching`.
``metric(logits, batch) -> [batch]`` is any per-sequence number (the convention of
:mod:`perm_circuits.metric`; ``batch`` is the clean batch in all three runs), usually
:func:`perm_circuits.metric.target_logprob` (bound to its batch: ``metric(logits)``; re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial

import pandas as pd
import torch
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_head, check_index_list, check_int, check_layer, check_positions
from perm_circuits.analysis.interventions.core import (
    activation_axes,
    check_hook_point,
    layout_of,
    pair_tokens,
    selection,
)
from perm_circuits.analysis.interventions.patching import (
    bootstrap_weights,
    check_patch_options,
    metric_values,
    normalised_effects,
    patched_values,
)
from perm_circuits.devices import model_device
from perm_circuits.hooks import check_hooks, run_capture
from perm_circuits.metric import Metric, bind_metric, target_logprob
from perm_circuits.tasks.base import TaskBatch

__all__ = ["TaskPatch", "patch_activation", "patch_head", "target_logprob"]


@dataclass(frozen=True)
class TaskPatch:
    """One denoising patch: where, the three runs' mean metric, the normalised effect and its CI.

    ``effect`` is nan when the clean and corrupted means differ by less than ``MIN_DENOMINATOR``.
    """

    hook_name: str
    layer: int | None
    head: int | None
    positions: tuple[int, ...] | None
    clean: float
    corrupted: float
    patched: float
    effect: float
    ci_low: float
    ci_high: float
    n: int
    confidence: float
    n_boot: int

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(self)])


def patch_activation(
    model,
    clean: TaskBatch | Tensor,
    corrupted: TaskBatch | Tensor,
    metric: Metric,
    hook_name: str,
    *,
    index: int | Sequence[int] | None = None,
    positions: int | Sequence[int] | None = None,
    layer: int | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> TaskPatch:
    """Patch ``hook_name`` from the clean run into the corrupted one and measure ``metric`` (module docstring).

    ``clean`` and ``corrupted``: token ids ``[batch, seq]`` of one shape (or :class:`TaskBatch` es),
    row ``i`` paired with row ``i``.  ``index`` selects entries of the axis after ``pos`` (heads for
    ``attn.hook_*`` and ``hook_pattern``), ``positions`` the activation's own positions (destination
    positions for ``hook_pattern``); ``None`` patches everything.  ``layer`` is reported only;
    ``n_boot`` bootstrap resamples seeded with ``seed``; ``hooks`` are active in all three runs.
    """
    hook_name = check_hook_point(model, hook_name)
    if layer is not None:
        check_int("layer", layer)
    pair_tokens(model, clean, corrupted)  # checked once as given, then moved once: the three runs stay on the model
    device = model_device(model)
    clean, corrupted = clean.to(device), corrupted.to(device)
    clean_tokens, corrupted_tokens = (part.tokens if isinstance(part, TaskBatch) else part
                                      for part in (clean, corrupted))
    metric = bind_metric(metric, clean)  # scored against the clean batch in every run
    check_patch_options("clean", "corrupted", n_boot, seed, confidence)
    hooks = check_hooks(model, hooks)
    batch = clean_tokens.shape[0]
    clean_logits, clean_store = run_capture(model, clean_tokens, [hook_name], hooks)
    if hook_name not in clean_store:
        raise ValueError(f"hook point {hook_name!r} did not run in {type(model).__name__}'s forward pass")
    source = clean_store[hook_name]
    layout = layout_of(hook_name)
    n_pos, n_index = activation_axes(source.shape, layout)
    chosen = check_index_list("index", index, n_index)
    where = check_positions(positions, n_pos)
    clean_values = metric_values(metric, clean_logits, batch)
    mask = selection(source.shape, layout, chosen, where, source.device)

    def patch(activation: Tensor, hook) -> Tensor:
        if activation.shape != source.shape:
            raise ValueError(f"activation {tuple(activation.shape)} does not match the clean one {tuple(source.shape)}")
        return torch.where(mask.to(activation.device), source.to(activation.device, activation.dtype), activation)

    # the corrupted run unpatched, then with the clean activation patched in
    corrupted_values, patched = patched_values(model, corrupted_tokens, hooks, [[], [(hook_name, patch)]],
                                               partial(metric_values, metric, batch=batch), None)
    _, means, low, high = normalised_effects(patched[None], clean_values, corrupted_values,
                                             lambda: bootstrap_weights(batch, n_boot, seed), confidence)
    one_head = chosen is not None and len(chosen) == 1 and hook_name.endswith(("attn.hook_z", "hook_pattern"))
    return TaskPatch(hook_name=hook_name, layer=layer, head=chosen[0] if one_head else None,
                     positions=tuple(where) if where is not None else None, clean=float(clean_values.mean()),
                     corrupted=float(corrupted_values.mean()), patched=float(patched.mean()), effect=float(means[0]),
                     ci_low=float(low[0]), ci_high=float(high[0]), n=batch, confidence=confidence, n_boot=n_boot)


def patch_head(
    model,
    clean: TaskBatch | Tensor,
    corrupted: TaskBatch | Tensor,
    metric: Metric,
    layer: int,
    head: int,
    *,
    positions: int | Sequence[int] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> TaskPatch:
    """Patch head ``head`` of layer ``layer`` on its ``blocks.L.attn.hook_z`` (TL4's native bridges have no
    per-head ``hook_result``) from clean into corrupted; the other arguments as in :func:`patch_activation`.
    """
    layer, head = check_layer(model, layer), check_head(model, head)
    return patch_activation(model, clean, corrupted, metric, f"blocks.{layer}.attn.hook_z", index=head,
        positions=positions, layer=layer, n_boot=n_boot, seed=seed, confidence=confidence, hooks=hooks)
