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

Pairs and seeds: every function builds its default pair with ``patching_pair(task_config, n,
seed)``, where ``task_config`` defaults to the model's training task (``task_config_of(model)``)
and is ignored when ``pair`` is given; ``seed`` seeds both that pair and the bootstrap resamples.
Layer, head and position indices follow the package's rule (negative values count from the end,
see :mod:`perm_circuits.analysis._checks`).

"Per head and source position" patches (:func:`patch_head_sources`):

- ``component="pattern"`` (default): the head's attention weight from the destination (the last
  position by default) to one source position ``s`` is set to its clean value, other weights
  unchanged (the row is not renormalised).  As ``z_dest = sum_s A[dest, s] v_s``, this patches
  the head's per-source term ``A[dest, s] v_s`` whenever ``v_s`` is the same in both runs (every
  ``s`` before the last position in a 1-layer model), and the per-source edits of ``z`` add up
  to the whole-row patch.  TL4 native bridges do apply ``hook_pattern`` edits to the output
  (checked in the tests: the patched ``hook_z`` equals the edited pattern times ``hook_v``).
- ``component="value"``: the head's value vector ``hook_v`` at source ``s`` (all destinations).
  In a 1-layer model values before the last position are the same in both runs, so these
  patches are exactly 0 there: a check, not a finding.

TransformerLens' own ``transformer_lens.patching`` functions run on TL 4.3 bridges (in eval
mode) and give the same numbers (a test compares them), but they cannot apply extra hooks in
both runs, so this module has its own :func:`generic_patch` in the style of
``generic_activation_patch``, specialised with :func:`functools.partial`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis._checks import (
    check_head,
    check_index_list,
    check_int,
    check_layer,
    check_position,
    check_positions,
    check_seed,
    check_task_config,
    seq_len,
)
from perm_circuits.hooks import HookList, check_hooks, run_capture
from perm_circuits.models import model_config_of
from perm_circuits.task import Batch, TaskConfig, make_batch, validate_tokens

__all__ = [
    "ACTIVATIONS",
    "PatchCell",
    "PatchingReport",
    "PatchingSweep",
    "RecallHead",
    "find_recall_head",
    "generic_patch",
    "logit_diff",
    "patch_attn_out",
    "patch_head_outputs",
    "patch_head_patterns",
    "patch_head_sources",
    "patch_mlp",
    "patch_residual",
    "patching_pair",
    "recall_patching",
]

PatchingPair = tuple[Batch, Batch, Tensor, Tensor]

ACTIVATIONS: dict[str, str] = {
    "z": "blocks.{layer}.attn.hook_z",
    "v": "blocks.{layer}.attn.hook_v",
    "pattern": "blocks.{layer}.attn.hook_pattern",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "mlp_out": "blocks.{layer}.hook_mlp_out",
    "post": "blocks.{layer}.mlp.hook_post",
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "resid_mid": "blocks.{layer}.hook_resid_mid",
    "resid_post": "blocks.{layer}.hook_resid_post",
}
"""Short activation names -> hook name templates."""

RUNS = ("clean", "corrupted")
MIN_DENOMINATOR = 1e-6


# ----------------------------------------------------------------------------- data


def patching_pair(
    task_config: TaskConfig, n: int = 2000, seed: int = 0, *, split: str = "test"
) -> tuple[Batch, Batch, Int[Tensor, " batch"], Int[Tensor, " batch"]]:
    """Clean and corrupted batches for patching recall, with the answer and wrong tokens.

    ``clean``: ``make_batch(task_config, n, split=split, seed=seed, repeat_ratio=1.0,
    repeat_source=0)``, every last query repeats ``x1`` (target ``y1``).  ``corrupted``: the same
    rows with the last query replaced by the unused x (target: the unused y, ``repeated`` False).
    ``answer`` = ``y1`` (recall), ``wrong`` = the unused y (elimination); they always differ.
    ``seed`` seeds the clean batch (the corrupted one is derived from it, with no randomness).
    """
    if not isinstance(task_config, TaskConfig):
        raise TypeError(f"task_config must be a TaskConfig, got {type(task_config).__name__}")
    clean = make_batch(task_config, n, split=split, seed=seed, repeat_ratio=1.0, repeat_source=0)
    V = task_config.V
    values = torch.arange(1, V + 1)
    seen = (clean.xs[:, : V - 1, None] == values).any(dim=1)  # [batch, V]
    unused_x = values.expand(len(clean), V)[~seen]
    xs = clean.xs.clone()
    xs[:, -1] = unused_x
    ys = clean.perms.gather(1, xs - 1)
    seq = torch.stack([xs, ys], dim=2).flatten(1)
    corrupted = Batch(
        inputs=seq[:, :-1].contiguous(),
        targets=seq[:, 1:].contiguous(),
        mask=clean.mask.clone(),
        xs=xs,
        ys=ys,
        perms=clean.perms.clone(),
        repeated=torch.zeros(len(clean), dtype=torch.bool),
        repeat_source=torch.full((len(clean),), -1, dtype=torch.long),
    )
    return clean, corrupted, clean.ys[:, -1].clone(), ys[:, -1].clone()


def logit_diff(
    logits: Float[Tensor, "batch seq vocab"],
    answer: Int[Tensor, " batch"],
    wrong: Int[Tensor, " batch"],
    position: int = -1,
) -> Float[Tensor, " batch"]:
    """``logit(answer) - logit(wrong)`` at ``position``, per sample."""
    last = logits[:, position]
    return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]


def _check_pair(model, pair: object) -> PatchingPair:
    V = model_config_of(model).V
    if not (isinstance(pair, tuple) and len(pair) == 4):
        raise TypeError("pair must be the (clean, corrupted, answer, wrong) tuple of patching_pair")
    clean, corrupted, answer, wrong = pair
    for name, batch in (("clean", clean), ("corrupted", corrupted)):
        if not isinstance(batch, Batch):
            raise TypeError(f"pair's {name} must be a Batch, got {type(batch).__name__}")
        validate_tokens(batch.inputs, V)
    if clean.inputs.shape != corrupted.inputs.shape:
        raise ValueError(
            f"clean {tuple(clean.inputs.shape)} and corrupted {tuple(corrupted.inputs.shape)} shapes differ"
        )
    for name, tokens in (("answer", answer), ("wrong", wrong)):
        if not isinstance(tokens, Tensor) or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise TypeError(f"pair's {name} must be an integer tensor of token ids")
        if tokens.shape != (len(clean),):
            raise ValueError(f"pair's {name} must have shape ({len(clean)},), got {tuple(tokens.shape)}")
        if ((tokens < 1) | (tokens > V)).any():
            raise ValueError(f"pair's {name} tokens must be in 1..{V}")
    return clean, corrupted, answer.long(), wrong.long()


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PatchCell:
    """One patch: where, and its normalised effect (mean, CI) and raw mean logit difference."""

    activation: str
    hook_name: str
    layer: int
    head: int | None
    position: int | None
    source_position: int | None
    neurons: tuple[int, ...] | None
    mean: float
    ci_low: float
    ci_high: float
    logit_diff: float

    @property
    def label(self) -> str:
        parts = [f"L{self.layer}"]
        if self.head is not None:
            parts.append(f"H{self.head}")
        if self.position is not None:
            parts.append(f"p{self.position}")
        if self.source_position is not None:
            parts.append(f"s{self.source_position}")
        if self.neurons is not None:
            parts.append(f"n{self.neurons[0]}-{self.neurons[-1]}" if len(self.neurons) > 1 else f"n{self.neurons[0]}")
        return f"{self.activation}:{''.join(parts)}"


@dataclass(frozen=True)
class PatchingSweep:
    """Result of one patching sweep (one activation kind, many cells).

    ``per_sample[c, i]`` is the normalised logit difference of sample ``i`` under cell ``c``;
    ``clean_logit_diff`` / ``corrupted_logit_diff`` are the unpatched means (the normalisation).
    """

    model_name: str
    activation: str
    source: str
    target: str
    cells: tuple[PatchCell, ...]
    per_sample: Float[Tensor, "cell batch"]
    clean_logit_diff: float
    corrupted_logit_diff: float
    n: int
    confidence: float
    n_boot: int

    def to_dataframe(self) -> pd.DataFrame:
        """One row per cell."""
        frame = pd.DataFrame([asdict(cell) for cell in self.cells])
        frame.insert(0, "model", self.model_name)
        frame["label"] = [cell.label for cell in self.cells]
        return frame

    @property
    def runs_differ(self) -> bool:
        """Whether the unpatched clean and corrupted mean logit differences differ by at least
        ``MIN_DENOMINATOR`` (1e-6); when they do not, every normalised value is nan."""
        return abs(self.clean_logit_diff - self.corrupted_logit_diff) >= MIN_DENOMINATOR

    @property
    def noising(self) -> bool:
        """True for a noising sweep (``source="corrupted"``): low normalised values matter most."""
        return self.source == "corrupted"

    def best(self) -> PatchCell:
        """The cell whose patch matters most, in the sweep's direction.

        Denoising (``source="clean"``, the default): the cell with the *largest* normalised
        mean, the patch that restores the most of the clean logit difference.  Noising
        (``source="corrupted"``): the cell with the *smallest* normalised mean, the patch whose
        corrupted activation takes the most away from the clean run (1 = nothing lost, 0 = all
        lost).  Cells with a nan mean are skipped; a ValueError when every mean is nan (e.g. the
        clean and corrupted runs do not differ, see :attr:`runs_differ`).
        """
        finite = [cell for cell in self.cells if not math.isnan(cell.mean)]
        if not finite:
            raise ValueError(
                f"no cell of the {self.activation!r} sweep has a finite normalised effect: the clean and "
                f"corrupted mean logit differences ({self.clean_logit_diff:.6g}, {self.corrupted_logit_diff:.6g}) "
                f"differ by less than {MIN_DENOMINATOR:g}"
            )
        if self.noising:
            return min(finite, key=lambda cell: cell.mean)
        return max(finite, key=lambda cell: cell.mean)

    def get(self, **where: int | str | None) -> PatchCell:
        """The one cell whose fields equal ``where`` (e.g. ``get(layer=0, head=1)``)."""
        found = [c for c in self.cells if all(getattr(c, k) == v for k, v in where.items())]
        if len(found) != 1:
            raise KeyError(f"{len(found)} cells match {where}")
        return found[0]


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


# ----------------------------------------------------------------------------- machinery


@dataclass
class _Context:
    """Cached clean/corrupted activations and logit differences of one pair under ``hooks``.

    ``weights`` (the bootstrap's resample weights) are drawn once per (n_boot, seed), so every
    sweep of a report uses the same resamples.
    """

    model: object
    pair: PatchingPair
    hooks: HookList
    caches: dict[str, dict[str, Tensor]]
    logit_diffs: dict[str, Tensor]
    weights: dict[tuple[int, int], Tensor] = field(default_factory=dict)

    def add(self, names: Sequence[str]) -> None:
        """Cache more activations (two forwards) when a sweep needs names not cached yet."""
        missing = [name for name in dict.fromkeys(names) if name not in self.caches["clean"]]
        if missing:
            for run, batch in zip(RUNS, self.pair[:2]):
                _, store = run_capture(self.model, batch.inputs, missing, self.hooks)
                self.caches[run].update(store)

    def bootstrap_weights(self, n_boot: int, seed: int) -> Tensor:
        if (n_boot, seed) not in self.weights:
            n = len(self.pair[0])
            rows = torch.randint(n, (n_boot, n), generator=torch.Generator().manual_seed(seed))
            counts = torch.zeros(n_boot, n, dtype=torch.float64)
            counts.scatter_add_(1, rows, torch.ones(n_boot, n, dtype=torch.float64))
            self.weights[(n_boot, seed)] = counts / n
        return self.weights[(n_boot, seed)]


def _context(model, pair: PatchingPair, hooks: HookList, names: Sequence[str]) -> _Context:
    clean, corrupted, answer, wrong = pair
    caches, diffs = {}, {}
    for run, batch in zip(RUNS, (clean, corrupted)):
        logits, caches[run] = run_capture(model, batch.inputs, names, hooks)
        diffs[run] = logit_diff(logits, answer, wrong).double()
    return _Context(model, pair, hooks, caches, diffs)


def _bootstrap(
    weights: Tensor, values: Tensor, clean: Tensor, corrupted: Tensor, confidence: float
) -> tuple[Tensor, Tensor]:
    """Percentile bootstrap of the normalised mean; each resample reweights all three runs jointly.

    ``weights[b, i]`` is how often resample ``b`` drew sample ``i`` (divided by n), so
    ``weights @ x`` are the resampled means of a per-sample quantity ``x``.
    """
    patched = weights @ values.T  # [boot, cell]
    mean_clean, mean_corrupted = weights @ clean, weights @ corrupted
    ratio = (patched - mean_corrupted[:, None]) / (mean_clean - mean_corrupted)[:, None]
    alpha = (1 - confidence) / 2
    bounds = torch.quantile(ratio, torch.tensor([alpha, 1 - alpha], dtype=torch.float64), dim=0)
    return bounds[0], bounds[1]


def _check_options(source: object, target: object, n_boot: object, seed: object, confidence: object) -> None:
    for name, run in (("source", source), ("target", target)):
        if run not in RUNS:
            raise ValueError(f"{name} must be one of {RUNS}, got {run!r}")
    check_int("n_boot", n_boot, 10)
    check_seed(seed)
    if isinstance(confidence, bool) or not isinstance(confidence, float) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")


def _resolve_pair(
    model, pair: PatchingPair | None, n: int, seed: int, task_config: TaskConfig | None = None
) -> PatchingPair:
    """``pair`` validated, else ``patching_pair(task_config or the model's task, n, seed)``."""
    config = check_task_config(model, task_config)
    if pair is None:
        return patching_pair(config, n=n, seed=seed)
    return _check_pair(model, pair)


def _rows_from_axes(model, axes: Sequence[str]) -> list[dict[str, int]]:
    config = model_config_of(model)
    ranges = {
        "layer": config.n_layers,
        "head": config.n_heads,
        "position": 2 * config.V - 1,
        "source_position": 2 * config.V - 1,
    }
    if isinstance(axes, str) or not axes or axes[0] != "layer" or any(a not in ranges for a in axes):
        raise ValueError(f"index_axes must start with 'layer' and use {sorted(ranges)}, got {axes!r}")
    return [dict(zip(axes, combo)) for combo in itertools.product(*(range(ranges[a]) for a in axes))]


def _check_row(model, row: object) -> dict:
    """One index row validated, as a new dict with every index normalised (negative indices
    count from the end, as everywhere in the package)."""
    if not isinstance(row, Mapping):
        raise TypeError(f"each index row must be a mapping, got {type(row).__name__} {row!r}")
    unknown = set(row) - {"layer", "head", "position", "source_position", "neurons"}
    if unknown:
        raise ValueError(f"unknown index keys {sorted(unknown)}")
    if "layer" not in row:
        raise ValueError(f"index row {dict(row)} has no 'layer'")
    out: dict = {"layer": check_layer(model, row["layer"])}
    if row.get("head") is not None:
        out["head"] = check_head(model, row["head"])
    for key in ("position", "source_position"):
        if row.get(key) is not None:
            out[key] = check_position(row[key], seq_len(model), key)
    if row.get("neurons") is not None:
        neurons = row["neurons"]
        if isinstance(neurons, int) and not isinstance(neurons, bool):
            raise TypeError(f"an index row's neurons must be a sequence of ints, got {neurons!r}")
        out["neurons"] = tuple(check_index_list("neurons", neurons, model_config_of(model).resolved_d_mlp))
    return out


def _resid_mid_hooks(layer: int, row: Mapping, source_activation: Tensor) -> HookList:
    """Set the residual stream after attention to the source run's at ``row['position']``.

    In TL 4.3 native bridges ``blocks.L.hook_resid_mid`` is an alias of ``ln2.hook_in``: an
    edit there changes the MLP's input but not the residual stream that reaches
    ``resid_post``.  So the patch is made on ``hook_attn_out`` instead:
    ``attn_out = source_resid_mid - resid_pre`` (``resid_pre`` read live in the same forward),
    which makes ``resid_pre + attn_out`` (the MLP input and the stream) the source's value.
    """
    live: dict[str, Tensor] = {}
    p = row["position"]

    def read_resid_pre(activation: Tensor, hook) -> None:
        live["resid_pre"] = activation.detach()

    def set_attn_out(activation: Tensor, hook) -> Tensor:
        out = activation.clone()
        out[:, p] = source_activation[:, p] - live["resid_pre"][:, p]
        return out

    return [(f"blocks.{layer}.hook_resid_pre", read_resid_pre), (f"blocks.{layer}.hook_attn_out", set_attn_out)]


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
    task_config: TaskConfig | None = None,
    _ctx: _Context | None = None,
) -> PatchingSweep:
    """Patch ``activation_name`` from the ``source`` run into the ``target`` run, once per cell.

    Like TransformerLens' ``generic_activation_patch``: ``patch_setter(target_activation,
    index, source_activation)`` writes the patched part of the source activation into (a clone
    of) the target activation and returns it.  The cells are either ``index_axes`` (every
    combination of ``layer``, ``head``, ``position``, ``source_position`` over the model's
    ranges, like TL's ``index_axis_names``) or explicit ``index_rows`` (dicts with ``layer`` and
    any of ``head``, ``position``, ``source_position``, ``neurons``; negative indices count
    from the end and cells report the normalised ones).  ``hooks`` run in every forward (both
    cached runs and every patched run), before the patch.

    ``pair`` defaults to ``patching_pair(task_config, n, seed)`` with ``task_config`` defaulting
    to the model's training task (``task_config_of(model)``); ``task_config`` and ``n`` are not
    used when ``pair`` is given.  ``seed`` seeds that default pair *and* the bootstrap
    resamples of the confidence intervals (``n_boot`` of them, at level ``confidence``).

    When the unpatched clean and corrupted mean logit differences differ by less than 1e-6,
    the normalisation is undefined: every cell's ``mean``, ``ci_low``, ``ci_high`` and
    ``per_sample`` value is nan (see :attr:`PatchingSweep.runs_differ`).

    A cell whose patched activation equals the target's own (e.g. any position before the last
    in a 1-layer model: both runs share those tokens) is not run: its patched forward would be
    the unpatched target run, whose logit differences are reused exactly.
    ``activation_name="resid_mid"`` is patched through ``hook_attn_out`` (see
    :func:`_resid_mid_hooks`).
    """
    if activation_name not in ACTIVATIONS:
        raise ValueError(f"activation_name must be one of {sorted(ACTIVATIONS)}, got {activation_name!r}")
    _check_options(source, target, n_boot, seed, confidence)
    check_task_config(model, task_config)
    config = model_config_of(model)
    if (index_axes is None) == (index_rows is None):
        raise ValueError("pass exactly one of index_axes and index_rows")
    if index_axes is not None:
        index_rows = _rows_from_axes(model, index_axes)
    if isinstance(index_rows, (str, Mapping)) or not isinstance(index_rows, Sequence):
        raise TypeError(f"index_rows must be a sequence of mappings, got {type(index_rows).__name__}")
    if not index_rows:
        raise ValueError("index_rows is empty")
    index_rows = [_check_row(model, row) for row in index_rows]
    names = sorted({ACTIVATIONS[activation_name].format(layer=row["layer"]) for row in index_rows})
    if _ctx is None:
        pair = _resolve_pair(model, pair, n, seed, task_config)
        hooks = check_hooks(model, hooks)
        _ctx = _context(model, pair, hooks, names)
    else:
        _ctx.add(names)
    _, _, answer, wrong = _ctx.pair
    tokens = (_ctx.pair[0] if target == "clean" else _ctx.pair[1]).inputs
    results, cells = [], []
    for row in index_rows:
        hook_name = ACTIVATIONS[activation_name].format(layer=row["layer"])
        source_activation = _ctx.caches[source][hook_name]
        target_activation = _ctx.caches[target][hook_name]
        cells.append((row, hook_name))
        if torch.equal(patch_setter(target_activation.clone(), row, source_activation), target_activation):
            results.append(_ctx.logit_diffs[target])
            continue
        if activation_name == "resid_mid":
            patch_hooks = _resid_mid_hooks(row["layer"], row, source_activation)
        else:

            def patch_hook(activation: Tensor, hook, row=row, source_activation=source_activation) -> Tensor:
                return patch_setter(activation.clone(), row, source_activation)

            patch_hooks = [(hook_name, patch_hook)]
        with torch.no_grad(), model.hooks(fwd_hooks=_ctx.hooks + patch_hooks):
            logits = model(tokens)
        results.append(logit_diff(logits, answer, wrong).double())
    raw = torch.stack(results)
    clean, corrupted = _ctx.logit_diffs["clean"], _ctx.logit_diffs["corrupted"]
    denominator = clean.mean() - corrupted.mean()
    if abs(float(denominator)) < MIN_DENOMINATOR:  # the runs do not differ: nothing to normalise by
        per_sample = torch.full_like(raw, math.nan)
        means = low = high = torch.full((len(cells),), math.nan, dtype=torch.float64)
    else:
        per_sample = (raw - corrupted.mean()) / denominator
        means = torch.stack([(row.mean() - corrupted.mean()) / denominator for row in raw])
        low, high = _bootstrap(_ctx.bootstrap_weights(n_boot, seed), raw, clean, corrupted, confidence)
    patch_cells = []
    for c, (row, hook_name) in enumerate(cells):
        neurons = row.get("neurons")
        patch_cells.append(
            PatchCell(
                activation=label or activation_name,
                hook_name=hook_name,
                layer=int(row["layer"]),
                head=row.get("head"),
                position=row.get("position"),
                source_position=row.get("source_position"),
                neurons=tuple(neurons) if neurons is not None else None,
                mean=float(means[c]),
                ci_low=float(low[c]),
                ci_high=float(high[c]),
                logit_diff=float(raw[c].mean()),
            )
        )
    return PatchingSweep(
        model_name=config.name,
        activation=label or activation_name,
        source=source,
        target=target,
        cells=tuple(patch_cells),
        per_sample=per_sample.float(),
        clean_logit_diff=float(clean.mean()),
        corrupted_logit_diff=float(corrupted.mean()),
        n=raw.shape[1],
        confidence=confidence,
        n_boot=n_boot,
    )


# ----------------------------------------------------------------------------- patch setters


def set_all(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """The whole activation."""
    return source.clone()


def set_pos(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, pos, ...]`` at ``index['position']``."""
    p = index["position"]
    target[:, p] = source[:, p]
    return target


def set_head(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, pos, head, ...]`` for ``index['head']`` at every position."""
    h = index["head"]
    target[:, :, h] = source[:, :, h]
    return target


def set_head_pos(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, pos, head, ...]`` for ``index['head']`` at ``index['position']`` (or source position)."""
    h = index["head"]
    p = index["position"] if index.get("position") is not None else index["source_position"]
    target[:, p, h] = source[:, p, h]
    return target


def set_pattern(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, head, dest, src]``: the whole pattern of ``index['head']``."""
    h = index["head"]
    target[:, h] = source[:, h]
    return target


def set_pattern_entry(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, head, dest, src]``: one weight ``(position, source_position)`` of ``index['head']``."""
    h, d, s = index["head"], index["position"], index["source_position"]
    target[:, h, d, s] = source[:, h, d, s]
    return target


def set_neurons(target: Tensor, index: Mapping, source: Tensor) -> Tensor:
    """``[batch, pos, d_mlp]``: the neurons ``index['neurons']`` at every position."""
    group = list(index["neurons"])
    target[..., group] = source[..., group]
    return target


# ----------------------------------------------------------------------------- sweeps


def _layers(model) -> range:
    return range(model_config_of(model).n_layers)


def _heads(model) -> range:
    return range(model_config_of(model).n_heads)


def patch_head_outputs(
    model,
    pair: PatchingPair | None = None,
    *,
    by_position: bool = False,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task_config: TaskConfig | None = None,
    _ctx: _Context | None = None,
) -> PatchingSweep:
    """Patch each head's ``hook_z`` (its whole output), at all positions or per position.

    Shared arguments (``hooks``, ``source``, ``target``, ``n``, ``seed``, ``n_boot``,
    ``confidence``, ``task_config``) as in :func:`generic_patch`: ``seed`` seeds the default
    pair ``patching_pair(task_config or task_config_of(model), n, seed)`` and the bootstrap.
    """
    if by_position:
        rows = [
            {"layer": l, "head": h, "position": p}
            for l in _layers(model)
            for h in _heads(model)
            for p in range(seq_len(model))
        ]
        setter, label = set_head_pos, "z_by_pos"
    else:
        rows = [{"layer": l, "head": h} for l in _layers(model) for h in _heads(model)]
        setter, label = set_head, "z"
    return generic_patch(
        model, pair, patch_setter=setter, activation_name="z", index_rows=rows, label=label,
        hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot,
        confidence=confidence, task_config=task_config, _ctx=_ctx,
    )


def patch_head_sources(
    model,
    pair: PatchingPair | None = None,
    *,
    component: str = "pattern",
    dest_position: int = -1,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task_config: TaskConfig | None = None,
    _ctx: _Context | None = None,
) -> PatchingSweep:
    """Per head and source position: one attention weight (``"pattern"``) or one value vector (``"value"``).

    ``"pattern"`` patches the weight from ``dest_position`` (default the last position) to each
    causal source position ``s <= dest``; ``"value"`` patches ``hook_v`` at each source
    position.  See the module docstring for what these measure.  ``dest_position`` accepts a
    negative index (counted from the end).  Shared arguments as in :func:`generic_patch`
    (``seed`` seeds the default pair and the bootstrap; ``task_config`` is the default pair's task).
    """
    if component not in ("pattern", "value"):
        raise ValueError(f"component must be 'pattern' or 'value', got {component!r}")
    dest = check_position(dest_position, seq_len(model), "dest_position")
    if component == "pattern":
        rows = [
            {"layer": l, "head": h, "position": dest, "source_position": s}
            for l in _layers(model)
            for h in _heads(model)
            for s in range(dest + 1)
        ]
        return generic_patch(
            model, pair, patch_setter=set_pattern_entry, activation_name="pattern", index_rows=rows,
            label="pattern_source", hooks=hooks, source=source, target=target, n=n, seed=seed,
            n_boot=n_boot, confidence=confidence, task_config=task_config, _ctx=_ctx,
        )
    rows = [
        {"layer": l, "head": h, "source_position": s}
        for l in _layers(model)
        for h in _heads(model)
        for s in range(seq_len(model))
    ]
    return generic_patch(
        model, pair, patch_setter=set_head_pos, activation_name="v", index_rows=rows,
        label="value_source", hooks=hooks, source=source, target=target, n=n, seed=seed,
        n_boot=n_boot, confidence=confidence, task_config=task_config, _ctx=_ctx,
    )


patch_head_patterns = partial(
    generic_patch, patch_setter=set_pattern, activation_name="pattern", index_axes=("layer", "head")
)
patch_head_patterns.__doc__ = """Patch each head's whole attention pattern (``hook_pattern``, all destinations).

``patch_head_patterns(model, pair=None, **kwargs)``; keyword arguments as :func:`generic_patch`
(``hooks``, ``source``, ``target``, ``n``, ``seed`` (the default pair's and the bootstrap's seed),
``n_boot``, ``confidence``, ``task_config`` (the task of the default pair))."""

patch_attn_out = partial(
    generic_patch, patch_setter=set_pos, activation_name="attn_out", index_axes=("layer", "position")
)
patch_attn_out.__doc__ = """Patch the attention layer's output (``hook_attn_out``) per layer and position.

``patch_attn_out(model, pair=None, **kwargs)``; keyword arguments as :func:`generic_patch`
(``hooks``, ``source``, ``target``, ``n``, ``seed`` (the default pair's and the bootstrap's seed),
``n_boot``, ``confidence``, ``task_config`` (the task of the default pair))."""


def _neuron_groups(groups: int | Sequence[Sequence[int]], d_mlp: int) -> list[tuple[int, ...]]:
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


def patch_mlp(
    model,
    pair: PatchingPair | None = None,
    *,
    neuron_groups: int | Sequence[Sequence[int]] | None = None,
    by_position: bool = False,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task_config: TaskConfig | None = None,
    _ctx: _Context | None = None,
) -> PatchingSweep:
    """Patch the MLP output (``hook_mlp_out``, all positions or per position), or neuron groups.

    With ``neuron_groups`` (a group size, or explicit lists of neurons; negative neurons count
    from the end) the sweep patches ``mlp.hook_post`` for each group at every position instead.
    Shared arguments as in :func:`generic_patch` (``seed`` seeds the default pair and the
    bootstrap; ``task_config`` is the default pair's task).
    """
    kwargs = dict(hooks=hooks, source=source, target=target, n=n, seed=seed, n_boot=n_boot,
                  confidence=confidence, task_config=task_config, _ctx=_ctx)
    if neuron_groups is not None:
        groups = _neuron_groups(neuron_groups, model_config_of(model).resolved_d_mlp)
        rows = [{"layer": l, "neurons": g} for l in _layers(model) for g in groups]
        return generic_patch(
            model, pair, patch_setter=set_neurons, activation_name="post", index_rows=rows,
            label="mlp_neurons", **kwargs,
        )
    if by_position:
        rows = [{"layer": l, "position": p} for l in _layers(model) for p in range(seq_len(model))]
        return generic_patch(
            model, pair, patch_setter=set_pos, activation_name="mlp_out", index_rows=rows,
            label="mlp_out_by_pos", **kwargs,
        )
    rows = [{"layer": l} for l in _layers(model)]
    return generic_patch(
        model, pair, patch_setter=set_all, activation_name="mlp_out", index_rows=rows, **kwargs
    )


def patch_residual(
    model,
    pair: PatchingPair | None = None,
    *,
    site: str = "resid_pre",
    positions: int | Sequence[int] | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    source: str = "clean",
    target: str = "corrupted",
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task_config: TaskConfig | None = None,
    _ctx: _Context | None = None,
) -> PatchingSweep:
    """Patch the residual stream (``site`` = resid_pre / resid_mid / resid_post) per layer and position.

    ``positions`` (default all; negative ones count from the end) restricts the cells.  Shared
    arguments as in :func:`generic_patch` (``seed`` seeds the default pair and the bootstrap;
    ``task_config`` is the default pair's task).
    """
    if site not in ("resid_pre", "resid_mid", "resid_post"):
        raise ValueError(f"site must be resid_pre, resid_mid or resid_post, got {site!r}")
    chosen = check_positions(positions, seq_len(model)) or list(range(seq_len(model)))
    rows = [{"layer": l, "position": p} for l in _layers(model) for p in chosen]
    return generic_patch(
        model, pair, patch_setter=set_pos, activation_name=site, index_rows=rows, hooks=hooks,
        source=source, target=target, n=n, seed=seed, n_boot=n_boot, confidence=confidence,
        task_config=task_config, _ctx=_ctx,
    )


def find_recall_head(
    model,
    pair: PatchingPair | None = None,
    *,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 2000,
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    task_config: TaskConfig | None = None,
) -> RecallHead:
    """The head whose clean output (``hook_z``, all positions) restores the most recall.

    Runs :func:`patch_head_outputs` (clean -> corrupted, denoising) and names the head with the
    largest normalised effect, with its bootstrap CI and the runner-up's effect.  ``pair``
    defaults to ``patching_pair(task_config or task_config_of(model), n, seed)``; ``seed`` seeds
    that pair and the bootstrap.

    Raises:
        ValueError: when the clean and corrupted runs (under ``hooks``) have mean logit
            differences closer than 1e-6: nothing is recalled that a head could restore, so no
            head can be named (checked after the two unpatched runs, before any patch).
    """
    _check_options("clean", "corrupted", n_boot, seed, confidence)
    pair = _resolve_pair(model, pair, n, seed, task_config)
    hooks = check_hooks(model, hooks)
    names = [ACTIVATIONS["z"].format(layer=layer) for layer in _layers(model)]
    ctx = _context(model, pair, hooks, names)
    clean, corrupted = float(ctx.logit_diffs["clean"].mean()), float(ctx.logit_diffs["corrupted"].mean())
    if not abs(clean - corrupted) >= MIN_DENOMINATOR:
        raise ValueError(
            "find_recall_head: the clean and corrupted runs do not differ (mean logit differences "
            f"{clean:.6g} and {corrupted:.6g}, |difference| < {MIN_DENOMINATOR:g}), so no head's patch can "
            "restore recall; check the model recalls at all and that hooks do not erase the logits"
        )
    sweep = patch_head_outputs(
        model, pair, hooks=hooks, seed=seed, n_boot=n_boot, confidence=confidence, _ctx=ctx
    )
    best = sweep.best()
    others = [cell.mean for cell in sweep.cells if cell is not best and not math.isnan(cell.mean)]
    assert best.head is not None
    return RecallHead(
        layer=best.layer,
        head=best.head,
        effect=best.mean,
        ci_low=best.ci_low,
        ci_high=best.ci_high,
        runner_up=max(others) if others else math.nan,
        sweep=sweep,
    )


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
    task_config: TaskConfig | None = None,
) -> PatchingReport:
    """Every sweep on one pair, sharing the two cached runs.

    Heads (``hook_z`` all positions), heads x source position (attention weight from the last
    position), whole attention patterns per head, MLP output, MLP neuron groups (skipped when
    ``neuron_groups`` is None) and the residual stream per position at resid_pre, resid_mid and
    resid_post.  ``pair`` defaults to ``patching_pair(task_config or task_config_of(model), n,
    seed)``; ``seed`` seeds that pair and the bootstrap (see :func:`generic_patch`).
    """
    _check_options(source, target, n_boot, seed, confidence)
    pair = _resolve_pair(model, pair, n, seed, task_config)
    hooks = check_hooks(model, hooks)
    groups = None
    if neuron_groups is not None:
        groups = _neuron_groups(neuron_groups, model_config_of(model).resolved_d_mlp)
    names = [
        ACTIVATIONS[kind].format(layer=layer)
        for layer in _layers(model)
        for kind in ("z", "pattern", "mlp_out", "post", "resid_pre", "resid_mid", "resid_post")
    ]
    ctx = _context(model, pair, hooks, names)
    kwargs = dict(source=source, target=target, seed=seed, n_boot=n_boot, confidence=confidence, _ctx=ctx)
    sweeps = [
        patch_head_outputs(model, pair, **kwargs),
        patch_head_sources(model, pair, **kwargs),
        patch_head_patterns(model, pair, **kwargs),
        patch_mlp(model, pair, **kwargs),
    ]
    if groups is not None:
        sweeps.append(patch_mlp(model, pair, neuron_groups=[list(g) for g in groups], **kwargs))
    sweeps += [patch_residual(model, pair, site=site, **kwargs) for site in ("resid_pre", "resid_mid", "resid_post")]
    return PatchingReport(
        model_name=model_config_of(model).name,
        sweeps=tuple(sweeps),
        clean_logit_diff=float(ctx.logit_diffs["clean"].mean()),
        corrupted_logit_diff=float(ctx.logit_diffs["corrupted"].mean()),
        n=len(pair[0]),
    )
