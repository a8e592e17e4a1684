"""Activation patching of recall: which activations carry "x_V repeats x_1, so answer y_1".

Set-up (the IOI paper's denoising patching, Wang et al. 2022 section 3; Meng et al. 2022, ROME):

- clean run: a repeated sequence ``x1 y1 ... x4 y4 x5`` with ``x5 = x1``; the answer is ``y1``;
- corrupted run: the same sequence with ``x5`` replaced by the one unused x; its answer is the
  unused y, which is exactly what elimination answers on the clean run.  The two runs differ in
  one token (the last), so every activation at positions ``0..2V-3`` is identical in them;
- metric: the logit difference ``LD = logit(y1) - logit(unused y)`` at the last position.
  Recall makes it large and positive on the clean run, elimination makes it negative on both.

A patch copies one activation of the clean run into the corrupted run (all samples at once, one
forward per patch).  Its effect is normalised per batch, ``(LD_i - mean LD_corrupted) /
(mean LD_clean - mean LD_corrupted)``: 1 restores the clean logit difference, 0 does nothing.
``per_sample`` keeps these values for every sample; the reported mean equals the normalised
mean logit difference.  Confidence intervals are percentile bootstraps over samples (paired:
one resample of sample indices recomputes the clean, corrupted and patched means together, so
the uncertainty of the normalising constants is included); ``n_boot`` resamples, seeded.  Where
``|mean LD_clean - mean LD_corrupted| < 1e-6`` (a model that answers both runs the same way)
the normalised values are nan: the per-sample values, the confidence interval *and* the cell's
``mean`` (and :func:`find_recall_head` raises a ValueError).  ``source`` / ``target`` choose the
runs: the default clean -> corrupted is "denoising" (what a patch restores; large = important),
corrupted -> clean is "noising" (what the clean run loses; *small* = important, 0 = all of the
recall lost); :meth:`PatchingSweep.best` follows that direction.

Pairs and seeds: every function builds its default pair with ``patching_pair(task, n,
seed)``, where ``task`` (a PermutationTask or its bare TaskConfig, the same either way) defaults to
the model's training task (``task_config_of(model)``)
and is ignored when ``pair`` is given; ``seed`` seeds both that pair and the bootstrap resamples.
Layer, head and position indices follow the package's rule (negative values count from the end,
see :mod:`perm_circuits.analysis.interventions.checks`).

Sweeps cover the heads and MLPs of every layer (an early layer's patch also acts through the later
ones: the total effect). TransformerLens' ``transformer_lens.patching`` gives the same numbers on TL 4.3
bridges (tested) but cannot apply extra hooks in both runs, hence :func:`generic_patch`, on
:mod:`perm_circuits.analysis.interventions.patching` (whose names are re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import (
    check_index_list, check_int, check_position, check_positions, check_task_config, seq_len, study_config,
)
from perm_circuits.analysis.interventions.patching import (  # the setters are re-exported for callers of generic_patch
    ACTIVATIONS, MIN_DENOMINATOR, PatchCell, PatchingCache, PatchingPair, PatchingSweep, check_pair,
    check_patch_options, logit_diff, patching_cache, run_patch_sweep, set_all, set_head, set_head_pos, set_neurons,
    set_pattern, set_pattern_entry, set_pos, sweep_cells,
)
from perm_circuits.hooks import check_hooks
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, batch_from_queries, make_batch, unused_query

__all__ = [
    "ACTIVATIONS", "PatchCell", "PatchingCache", "PatchingReport", "PatchingSweep", "RecallHead", "find_recall_head",
    "generic_patch", "logit_diff", "patch_attn_out", "patch_head_outputs", "patch_head_patterns", "patch_head_sources",
    "patch_mlp", "patch_residual", "patching_cache", "patching_pair", "recall_patching",
]


def _layers(model) -> range:
    return range(model_config_of(model).n_layers)


def _heads(model) -> range:
    return range(model_config_of(model).n_heads)


def _check_neuron_groups(groups: int | Sequence[Sequence[int]], d_mlp: int) -> list[tuple[int, ...]]:
    if isinstance(groups, int) and not isinstance(groups, bool):
        size = check_int("neuron_groups", groups, 1, d_mlp + 1)
        return [tuple(range(start, min(start + size, d_mlp))) for start in range(0, d_mlp, size)]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise TypeError("neuron_groups must be a group size (int) or a non-empty sequence of neuron lists")
    out = []
    for group in groups:
        if not isinstance(group, (list, tuple, range)) or len(group) == 0:
            raise ValueError(f"each neuron group must be a non-empty sequence of ints, got {group!r}")
        out.append(tuple(check_index_list("neuron group", group, d_mlp)))
    return out


def patching_pair(
    task: PermutationTask | TaskConfig, n: int = 2000, seed: int = 0, *, split: str = "test"
) -> tuple[TaskBatch, TaskBatch, Int[Tensor, " batch"], Int[Tensor, " batch"]]:
    """``(clean, corrupted, answer, wrong)`` for patching recall on ``task`` (a PermutationTask or its
    TaskConfig). ``clean``: ``make_batch(task,
    n, split=split, seed=seed, repeat_ratio=1.0, repeat_source=0)``, every last query repeating ``x1``;
    ``corrupted``: the same rows with the last query replaced by the unused x (``repeated`` False);
    ``answer`` = ``y1`` (recall) and ``wrong`` = the unused y (elimination) always differ. ``seed``
    seeds the clean batch; the corrupted one is derived from it, with no randomness.
    """
    config = study_config(task)
    clean = make_batch(config, n, split=split, seed=seed, repeat_ratio=1.0, repeat_source=0)
    xs = clean.extras["xs"].clone()
    xs[:, -1] = unused_query(clean.extras["xs"])
    no_source = torch.full((len(clean),), -1, dtype=torch.long, device=xs.device)
    corrupted = batch_from_queries(xs, clean.extras["perms"].clone(), no_source)
    return clean, corrupted, clean.extras["ys"][:, -1].clone(), corrupted.extras["ys"][:, -1].clone()


def _unpatched_runs(
    model, pair: PatchingPair | None, hooks: Sequence[tuple[str, Callable]] | None, names: Sequence[str], n: int,
    seed: int, config: TaskConfig,
) -> PatchingCache:
    """:func:`patching_cache` of the checked ``pair`` (default ``patching_pair(config, n, seed)``) and ``hooks``."""
    pair = patching_pair(config, n=n, seed=seed) if pair is None else check_pair(model, pair)
    return patching_cache(model, pair, check_hooks(model, hooks), names)


@dataclass(frozen=True)
class PatchingReport:
    """Several sweeps sharing one clean/corrupted pair (:func:`recall_patching`)."""

    model_name: str
    sweeps: tuple[PatchingSweep, ...]
    clean_logit_diff: float
    corrupted_logit_diff: float
    n: int

    def to_dataframe(self) -> pd.DataFrame:
        return pd.concat([sweep.to_dataframe() for sweep in self.sweeps], ignore_index=True)

    def sweep(self, activation: str) -> PatchingSweep:
        for sweep in self.sweeps:
            if sweep.activation == activation:
                return sweep
        raise KeyError(f"no sweep {activation!r}; have {[s.activation for s in self.sweeps]}")


@dataclass(frozen=True)
class RecallHead:
    """The head whose clean ``hook_z`` restores the most of the clean logit difference."""

    layer: int
    head: int
    effect: float
    ci_low: float
    ci_high: float
    runner_up: float
    sweep: PatchingSweep = field(repr=False)


def generic_patch(
    model,
    pair: PatchingPair | None = None,
    *,
    patch_setter: Callable[[Tensor, Mapping, Tensor], Tensor],
    activation_name: str,
    index_axes: Sequence[str] | None = None,
    index_rows: Sequence[Mapping[str, int | tuple[int, ...]]] | None = None,
    label: str | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task: PermutationTask | TaskConfig | None = None,
    cache: PatchingCache | None = None,
) -> PatchingSweep:
    """Patch ``activation_name`` from the ``source`` run into the ``target`` run, once per cell.

    Like TransformerLens' ``generic_activation_patch``: ``patch_setter(target_activation, index,
    source_activation)`` writes the patched part of the source activation into (a clone of) the
    target activation and returns it. Cells: every combination of ``index_axes`` (``layer``,
    ``head``, ``position``, ``source_position``) over the model's ranges, or explicit ``index_rows``
    (dicts with ``layer`` and any of those or ``neurons``; cells report normalised indices). ``hooks``
    run in every forward, before the patch. ``seed`` seeds the default pair and the ``n_boot``
    bootstrap resamples (CIs at level ``confidence``). A cell whose patched activation equals the
    target's own (any position before the last) reuses the unpatched target run exactly;
    ``"resid_mid"`` is patched through ``hook_attn_out``. ``cache`` (from :func:`patching_cache`)
    reuses the unpatched runs of an earlier sweep of the same model, and its ``pair``, ``hooks``,
    ``n`` and ``task``.
    """
    if cache is not None and not isinstance(cache, PatchingCache):
        raise TypeError(f"cache must be a PatchingCache from patching_cache(...), got {type(cache).__name__}")
    if cache is not None and cache.model is not model:
        raise ValueError("cache was built on a different model than the one being patched")
    if activation_name not in ACTIVATIONS:
        raise ValueError(f"activation_name must be one of {sorted(ACTIVATIONS)}, got {activation_name!r}")
    check_patch_options(source, target, n_boot, seed, confidence)
    config = check_task_config(model, task, "task")
    index_rows = sweep_cells(model, index_axes, index_rows)
    names = sorted({ACTIVATIONS[activation_name].format(layer=row["layer"]) for row in index_rows})
    if cache is None:
        cache = _unpatched_runs(model, pair, hooks, names, n, seed, config)
    else:
        cache.add(names)
    return run_patch_sweep(model, cache, patch_setter=patch_setter, activation_name=activation_name, index_rows=index_rows,
        label=label, source=source, target=target, n_boot=n_boot, seed=seed, confidence=confidence)


def patch_head_outputs(
    model, pair: PatchingPair | None = None, *, by_position: bool = False,
    hooks: Sequence[tuple[str, Callable]] | None = None, source: str = "clean", target: str = "corrupted",
    n: int = 2000, seed: int = 0, n_boot: int = 1000, confidence: float = 0.95, task: PermutationTask | TaskConfig | None = None,
    cache: PatchingCache | None = None,
) -> PatchingSweep:
    """Patch each head's ``hook_z`` (its whole output), at all positions or per position; other
    arguments as in :func:`generic_patch` (``seed`` seeds the default pair and the bootstrap)."""
    options = dict(hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot, confidence=confidence,
                   task=task, cache=cache)
    if not isinstance(by_position, bool):
        raise TypeError(f"by_position must be a bool, got {type(by_position).__name__} {by_position!r}")
    layers, heads = _layers(model), _heads(model)
    if by_position:
        rows = [{"layer": l, "head": h, "position": p} for l in layers for h in heads for p in range(seq_len(model))]
        return generic_patch(model, pair, patch_setter=set_head_pos, activation_name="z", index_rows=rows,
                             label="z_by_pos", **options)
    rows = [{"layer": l, "head": h} for l in layers for h in heads]
    return generic_patch(model, pair, patch_setter=set_head, activation_name="z", index_rows=rows, label="z", **options)


def patch_head_sources(
    model, pair: PatchingPair | None = None, *, component: str = "pattern", dest_position: int = -1,
    hooks: Sequence[tuple[str, Callable]] | None = None, source: str = "clean", target: str = "corrupted",
    n: int = 2000, seed: int = 0, n_boot: int = 1000, confidence: float = 0.95, task: PermutationTask | TaskConfig | None = None,
    cache: PatchingCache | None = None,
) -> PatchingSweep:
    """Per head and source position: one attention weight (``"pattern"``) or one value vector (``"value"``).

    ``"pattern"`` sets the weight from ``dest_position`` (default the last) to each causal source
    ``s <= dest`` to its source-run value, the row not renormalised. As ``z_dest = sum_s A[dest, s]
    v_s`` and ``v_s`` is the same in both runs for every ``s`` before the last position (causality),
    this patches the per-source term ``A[dest, s] v_s``, and the per-source edits add up to the
    whole-row patch (TL4 native bridges apply ``hook_pattern`` edits: tested). ``"value"`` patches
    ``hook_v`` at each source (all destinations); before the last position it is exactly 0 there, a
    check rather than a finding. Other arguments as in :func:`generic_patch` (``seed`` seeds the
    default pair and the bootstrap).
    """
    options = dict(hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot, confidence=confidence,
                   task=task, cache=cache)
    if component not in ("pattern", "value"):
        raise ValueError(f"component must be 'pattern' or 'value', got {component!r}")
    dest = check_position(dest_position, seq_len(model), "dest_position")
    cells = [(l, h) for l in _layers(model) for h in _heads(model)]
    if component == "pattern":
        rows = [{"layer": l, "head": h, "position": dest, "source_position": s} for l, h in cells for s in range(dest + 1)]
        return generic_patch(model, pair, patch_setter=set_pattern_entry, activation_name="pattern",
                             index_rows=rows, label="pattern_source", **options)
    rows = [{"layer": l, "head": h, "source_position": s} for l, h in cells for s in range(seq_len(model))]
    return generic_patch(model, pair, patch_setter=set_head_pos, activation_name="v", index_rows=rows,
                         label="value_source", **options)


patch_head_patterns = partial(generic_patch, patch_setter=set_pattern, activation_name="pattern",
    index_axes=("layer", "head"))
patch_head_patterns.__doc__ = """Patch each head's whole attention pattern (``hook_pattern``, all destinations):
``patch_head_patterns(model, pair=None, **kwargs)``, keyword arguments as :func:`generic_patch`."""

patch_attn_out = partial(generic_patch, patch_setter=set_pos, activation_name="attn_out",
    index_axes=("layer", "position"))
patch_attn_out.__doc__ = """Patch the attention layer's output (``hook_attn_out``) per layer and position:
``patch_attn_out(model, pair=None, **kwargs)``, keyword arguments as :func:`generic_patch`."""


def patch_mlp(
    model,
    pair: PatchingPair | None = None,
    *,
    neuron_groups: int | Sequence[Sequence[int]] | None = None,
    by_position: bool = False,
    hooks: Sequence[tuple[str, Callable]] | None = None, source: str = "clean", target: str = "corrupted",
    n: int = 2000, seed: int = 0, n_boot: int = 1000, confidence: float = 0.95, task: PermutationTask | TaskConfig | None = None,
    cache: PatchingCache | None = None,
) -> PatchingSweep:
    """Patch the MLP output (``hook_mlp_out``, all positions or per position), or neuron groups.

    With ``neuron_groups`` (a group size, or explicit lists of neurons) the sweep patches
    ``mlp.hook_post`` for each group at every position instead. Other arguments as in
    :func:`generic_patch` (``seed`` seeds the default pair and the bootstrap).
    """
    if not isinstance(by_position, bool):
        raise TypeError(f"by_position must be a bool, got {type(by_position).__name__} {by_position!r}")
    options = dict(hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot, confidence=confidence,
                   task=task, cache=cache)
    if neuron_groups is not None:
        groups = _check_neuron_groups(neuron_groups, model_config_of(model).resolved_d_mlp)
        rows = [{"layer": l, "neurons": g} for l in _layers(model) for g in groups]
        return generic_patch(model, pair, patch_setter=set_neurons, activation_name="post", index_rows=rows,
                             label="mlp_neurons", **options)
    if by_position:
        rows = [{"layer": l, "position": p} for l in _layers(model) for p in range(seq_len(model))]
        return generic_patch(model, pair, patch_setter=set_pos, activation_name="mlp_out", index_rows=rows,
                             label="mlp_out_by_pos", **options)
    rows = [{"layer": l} for l in _layers(model)]
    return generic_patch(model, pair, patch_setter=set_all, activation_name="mlp_out", index_rows=rows, **options)


def patch_residual(
    model, pair: PatchingPair | None = None, *, site: str = "resid_pre", positions: int | Sequence[int] | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None, source: str = "clean", target: str = "corrupted",
    n: int = 2000, seed: int = 0, n_boot: int = 1000, confidence: float = 0.95, task: PermutationTask | TaskConfig | None = None,
    cache: PatchingCache | None = None,
) -> PatchingSweep:
    """Patch the residual stream (``site`` = resid_pre / resid_mid / resid_post) per layer and position.

    ``positions`` (default all) restricts the cells. Other arguments as in :func:`generic_patch`
    (``seed`` seeds the default pair and the bootstrap).
    """
    options = dict(hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot, confidence=confidence,
                   task=task, cache=cache)
    if site not in ("resid_pre", "resid_mid", "resid_post"):
        raise ValueError(f"site must be resid_pre, resid_mid or resid_post, got {site!r}")
    chosen = check_positions(positions, seq_len(model)) or list(range(seq_len(model)))
    rows = [{"layer": l, "position": p} for l in _layers(model) for p in chosen]
    return generic_patch(model, pair, patch_setter=set_pos, activation_name=site, index_rows=rows, **options)


def find_recall_head(
    model,
    pair: PatchingPair | None = None,
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task: PermutationTask | TaskConfig | None = None,
) -> RecallHead:
    """The head whose clean output (``hook_z``, all positions) restores the most recall.

    Runs :func:`patch_head_outputs` (clean -> corrupted, denoising) and names the head with the
    largest normalised effect, with its bootstrap CI and the runner-up's effect.  Arguments as in
    :func:`generic_patch` (``seed`` seeds the default pair and the bootstrap).

    Raises:
        ValueError: when the clean and corrupted runs (under ``hooks``) have mean logit
            differences closer than 1e-6: nothing is recalled that a head could restore, so no
            head can be named (checked after the two unpatched runs, before any patch).
    """
    check_patch_options("clean", "corrupted", n_boot, seed, confidence)
    names = [ACTIVATIONS["z"].format(layer=layer) for layer in _layers(model)]
    ctx = _unpatched_runs(model, pair, hooks, names, n, seed, check_task_config(model, task, "task"))
    clean, corrupted = float(ctx.logit_diffs["clean"].mean()), float(ctx.logit_diffs["corrupted"].mean())
    if not abs(clean - corrupted) >= MIN_DENOMINATOR:
        raise ValueError(
            "find_recall_head: the clean and corrupted runs do not differ (mean logit differences "
            f"{clean:.6g} and {corrupted:.6g}, |difference| < {MIN_DENOMINATOR:g}), so no head's patch can "
            "restore recall; check the model recalls at all and that hooks do not erase the logits"
        )
    sweep = patch_head_outputs(model, seed=seed, n_boot=n_boot, confidence=confidence, cache=ctx)  # ctx's pair, hooks
    best = sweep.best()
    others = [cell.mean for cell in sweep.cells if cell is not best and not math.isnan(cell.mean)]
    assert best.head is not None
    return RecallHead(layer=best.layer, head=best.head, effect=best.mean, ci_low=best.ci_low, ci_high=best.ci_high,
        runner_up=max(others) if others else math.nan, sweep=sweep)


def recall_patching(
    model,
    pair: PatchingPair | None = None,
    *,
    neuron_groups: int | Sequence[Sequence[int]] | None = 8,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task: PermutationTask | TaskConfig | None = None,
) -> PatchingReport:
    """Every sweep on one pair, sharing the two cached runs.

    Heads (``hook_z`` all positions), heads x source position (attention weight from the last
    position), whole attention patterns per head, MLP output, MLP neuron groups (skipped when
    ``neuron_groups`` is None) and the residual stream per position at resid_pre, resid_mid and
    resid_post. Arguments as in :func:`generic_patch` (``seed`` seeds the default pair and the bootstrap).
    """
    check_patch_options(source, target, n_boot, seed, confidence)
    config = check_task_config(model, task, "task")
    d_mlp = model_config_of(model).resolved_d_mlp
    groups = None if neuron_groups is None else _check_neuron_groups(neuron_groups, d_mlp)
    names = [
        ACTIVATIONS[kind].format(layer=layer)
        for layer in _layers(model)
        for kind in ("z", "pattern", "mlp_out", "post", "resid_pre", "resid_mid", "resid_post")
    ]
    ctx = _unpatched_runs(model, pair, hooks, names, n, seed, config)
    kwargs = dict(source=source, target=target, seed=seed, n_boot=n_boot, confidence=confidence, cache=ctx)
    sweeps = [
        patch_head_outputs(model, **kwargs),
        patch_head_sources(model, **kwargs),
        patch_head_patterns(model, **kwargs),
        patch_mlp(model, **kwargs),
    ]
    if groups is not None:
        sweeps.append(patch_mlp(model, neuron_groups=[list(g) for g in groups], **kwargs))
    sweeps += [patch_residual(model, site=site, **kwargs) for site in ("resid_pre", "resid_mid", "resid_post")]
    return PatchingReport(model_name=model_config_of(model).name, sweeps=tuple(sweeps),
        clean_logit_diff=float(ctx.logit_diffs["clean"].mean()),
        corrupted_logit_diff=float(ctx.logit_diffs["corrupted"].mean()), n=len(ctx.pair[0]))
