"""The machinery of activation patching that knows nothing about recall: cached runs, the patch
loop, the paired bootstrap, results and the patch setters (``patch_setter(target, index, source)``
in the style of TransformerLens' ``generic_activation_patch``).  The recall set-up of Wang et al.
2022's denoising patching and the named sweeps live in :mod:`perm_circuits.analysis.study.recall_patching`;
path patching and any-task activation patching share the loop and the bootstrap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.analysis.interventions.checks import (
    check_head,
    check_index_list,
    check_int,
    check_layer,
    check_position,
    check_seed,
    seq_len,
)
from perm_circuits.checks import check_number
from perm_circuits.devices import device_forward, model_device
from perm_circuits.hooks import HookList, run_capture
from perm_circuits.metric import logit_diff, metric_rows
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import permutation_batch, validate_tokens

__all__ = [
    "ACTIVATIONS",
    "MIN_DENOMINATOR",
    "PatchCell",
    "PatchingCache",
    "PatchingPair",
    "PatchingSweep",
    "RUNS",
    "bootstrap_weights",
    "check_pair",
    "check_patch_options",
    "effect_fields",
    "logit_diff",
    "metric_values",
    "normalised_effects",
    "patched_values",
    "patching_cache",
    "run_patch_sweep",
    "set_all",
    "set_head",
    "set_head_pos",
    "set_neurons",
    "set_pattern",
    "set_pattern_entry",
    "set_pos",
    "sweep_cells",
]

PatchingPair = tuple[TaskBatch, TaskBatch, Tensor, Tensor]
"""The ``(clean, corrupted, answer, wrong)`` of :func:`~perm_circuits.analysis.study.recall_patching.patching_pair`."""

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
        marks = (("H", self.head), ("p", self.position), ("s", self.source_position))
        parts = [f"L{self.layer}"] + [f"{mark}{value}" for mark, value in marks if value is not None]
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
        """The cell whose patch matters most in the sweep's direction: the *largest* normalised mean
        when denoising (``source="clean"``: restores the most of the clean logit difference), the
        *smallest* when noising (``source="corrupted"``: takes the most away; 1 = nothing lost).
        Nan means are skipped; a ValueError when all are nan (see :attr:`runs_differ`).
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


# ----------------------------------------------------------------------------- machinery


@dataclass
class PatchingCache:
    """Cached clean/corrupted activations and logit differences of one pair under ``hooks``
    (:func:`patching_cache`), shared by several sweeps of the pair as ``cache=``; the bootstrap's
    resample ``weights`` are drawn once per (n_boot, seed), so every sweep uses the same resamples.
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
                _, store = run_capture(self.model, batch.tokens, missing, self.hooks)
                self.caches[run].update(store)

    def bootstrap_weights(self, n_boot: int, seed: int) -> Tensor:
        if (n_boot, seed) not in self.weights:
            self.weights[(n_boot, seed)] = bootstrap_weights(len(self.pair[0]), n_boot, seed)
        return self.weights[(n_boot, seed)]


def bootstrap_weights(n: int, n_boot: int, seed: int) -> Tensor:
    """``[n_boot, n]`` resample weights of the paired bootstrap: how often resample ``b`` drew
    sequence ``i``, divided by ``n`` (rows drawn with ``torch.Generator().manual_seed(seed)``)."""
    rows = torch.randint(n, (n_boot, n), generator=torch.Generator().manual_seed(seed))
    counts = torch.zeros(n_boot, n, dtype=torch.float64, device=rows.device)  # on the generator's CPU
    counts.scatter_add_(1, rows, torch.ones(n_boot, n, dtype=torch.float64, device=rows.device))
    return counts / n


def patching_cache(model, pair: PatchingPair, hooks: HookList, names: Sequence[str]) -> PatchingCache:
    """Run ``pair``'s clean and corrupted inputs once under checked ``hooks``, caching activations ``names``
    (more on demand, :meth:`PatchingCache.add`); pass the result as ``cache=`` to several sweeps of
    the same model, pair and hooks to run the two unpatched forwards once.
    """
    device = model_device(model)  # once: every sweep on this cache runs on the model's device
    clean, corrupted, answer, wrong = pair = tuple(part.to(device) for part in pair)
    caches, diffs = {}, {}
    for run, batch in zip(RUNS, (clean, corrupted)):
        logits, caches[run] = run_capture(model, batch.tokens, names, hooks)
        diffs[run] = logit_diff(logits, answer, wrong).double()
    return PatchingCache(model, pair, hooks, caches, diffs)


def normalised_effects(
    raw: Float[Tensor, "cell batch"],
    clean: Float[Tensor, " batch"],
    corrupted: Float[Tensor, " batch"],
    weights: Callable[[], Tensor],
    confidence: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(per_sample, means, ci_low, ci_high)`` of patched metric values ``raw``, normalised as
    ``(x - mean corrupted) / (mean clean - mean corrupted)``; all nan when the two unpatched means
    differ by less than :data:`MIN_DENOMINATOR`.  ``weights()`` gives the bootstrap's resample weights."""
    denominator = clean.mean() - corrupted.mean()
    if abs(float(denominator)) < MIN_DENOMINATOR:  # the runs do not differ: nothing to normalise by
        nan = torch.full((len(raw),), math.nan, dtype=torch.float64, device=raw.device)
        return torch.full_like(raw, math.nan), nan, nan, nan
    per_sample = (raw - corrupted.mean()) / denominator
    means = (raw.mean(dim=1) - corrupted.mean()) / denominator
    # paired percentile bootstrap: resample b reweights all three runs jointly (w[b, i]: draws of i / n)
    w = weights().to(raw.device)  # drawn on the CPU generator; moved once per sweep
    patched = w @ raw.T  # [boot, cell]
    mean_clean, mean_corrupted = w @ clean, w @ corrupted
    ratio = (patched - mean_corrupted[:, None]) / (mean_clean - mean_corrupted)[:, None]
    alpha = (1 - confidence) / 2
    bounds = torch.quantile(ratio, torch.tensor([alpha, 1 - alpha], dtype=torch.float64, device=ratio.device), dim=0)
    return per_sample, means, bounds[0], bounds[1]


def metric_values(metric: Callable[[Tensor], Tensor], logits: Tensor, batch: int) -> Float[Tensor, " batch"]:
    """``metric(logits)`` (bound to its batch by :func:`~perm_circuits.metric.bind_metric`) checked by
    :func:`~perm_circuits.metric.metric_rows`: one number per sequence (``[batch]``), detached, as float64."""
    return metric_rows(metric, logits, batch)


def patched_values(
    model, tokens: Tensor, hooks: HookList, patches: Iterable[HookList | None], metric: Callable[[Tensor], Tensor],
    idle: Tensor | None,
) -> Float[Tensor, "cell batch"]:
    """``metric`` of one no-grad forward on ``tokens`` per patch (its hooks after ``hooks``), stacked
    ``[cell, batch]``; a patch given as ``None`` changes nothing and is ``idle``, without a forward."""
    results = []
    for extra in patches:
        if extra is None:
            results.append(idle)
            continue
        with torch.no_grad(), model.hooks(fwd_hooks=hooks + extra):
            results.append(metric(device_forward(model, tokens)))
    return torch.stack(results)


def effect_fields(
    raw: Float[Tensor, "cell batch"],
    clean: Float[Tensor, " batch"],
    corrupted: Float[Tensor, " batch"],
    weights: Callable[[], Tensor],
    confidence: float,
    n_boot: int,
    idle: Sequence[bool] | None = None,
) -> tuple[list[dict[str, float]], dict]:
    """The :func:`normalised_effects` of ``raw`` as result fields: per cell ``mean``, ``ci_low``,
    ``ci_high`` and the raw mean ``logit_diff``; for the sweep ``per_sample``, the unpatched means
    ``clean_logit_diff`` / ``corrupted_logit_diff``, ``n``, ``confidence`` and ``n_boot``.  Cells
    marked ``idle`` (their patch changes nothing) report exactly 0, not 0 plus rounding, when the
    runs differ."""
    per_sample, means, low, high = normalised_effects(raw, clean, corrupted, weights, confidence)
    if idle is not None and abs(float(clean.mean() - corrupted.mean())) >= MIN_DENOMINATOR:
        mask = torch.tensor(idle, device=raw.device)
        means, low, high = (values.masked_fill(mask, 0.0) for values in (means, low, high))
    cells = [{"mean": float(means[c]), "ci_low": float(low[c]), "ci_high": float(high[c]),
              "logit_diff": float(raw[c].mean())} for c in range(len(raw))]
    return cells, {"per_sample": per_sample.float(), "clean_logit_diff": float(clean.mean()),
                   "corrupted_logit_diff": float(corrupted.mean()), "n": raw.shape[1], "confidence": confidence,
                   "n_boot": n_boot}


def check_patch_options(source: object, target: object, n_boot: object, seed: object, confidence: object) -> None:
    for name, run in (("source", source), ("target", target)):
        if run not in RUNS:
            raise ValueError(f"{name} must be one of {RUNS}, got {run!r}")
    check_int("n_boot", n_boot, 10)
    check_seed(seed)
    if not 0 < check_number("confidence", confidence, finite=False) < 1:
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")


def _rows_from_axes(model, axes: Sequence[str]) -> list[dict[str, int]]:
    config, n_positions = model_config_of(model), seq_len(model)
    ranges = {"layer": config.n_layers, "head": config.n_heads, "position": n_positions, "source_position": n_positions}
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

    In TL 4.3 native bridges ``blocks.L.hook_resid_mid`` is an alias of ``ln2.hook_in`` (an edit
    there misses the residual stream), so ``hook_attn_out`` is set to ``source_resid_mid -
    resid_pre`` (``resid_pre`` read live), making ``resid_pre + attn_out`` the source's value.
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


def sweep_cells(
    model, index_axes: Sequence[str] | None, index_rows: Sequence[Mapping[str, int | tuple[int, ...]]] | None
) -> list[dict]:
    """The cells of a sweep: ``index_axes`` expanded or ``index_rows`` validated (exactly one given)."""
    if (index_axes is None) == (index_rows is None):
        raise ValueError("pass exactly one of index_axes and index_rows")
    if index_axes is not None:
        index_rows = _rows_from_axes(model, index_axes)
    if isinstance(index_rows, (str, Mapping)) or not isinstance(index_rows, Sequence):
        raise TypeError(f"index_rows must be a sequence of mappings, got {type(index_rows).__name__}")
    if not index_rows:
        raise ValueError("index_rows is empty")
    return [_check_row(model, row) for row in index_rows]


def run_patch_sweep(
    model,
    cache: PatchingCache,
    *,
    patch_setter: Callable[[Tensor, Mapping, Tensor], Tensor],
    activation_name: str,
    index_rows: list[dict],
    label: str | None,
    source: str,
    target: str,
    n_boot: int,
    seed: int,
    confidence: float,
) -> PatchingSweep:
    """One patched forward per validated cell on the cached pair, normalised and bootstrapped (seeded
    with ``seed``): the loop of :func:`~perm_circuits.analysis.study.recall_patching.generic_patch`,
    whose docstring says what it measures; ``cache`` holds ``activation_name`` at every layer named.
    """
    _, _, answer, wrong = cache.pair
    hook_names = [ACTIVATIONS[activation_name].format(layer=row["layer"]) for row in index_rows]

    def patches() -> Iterator[HookList | None]:
        for row, hook_name in zip(index_rows, hook_names):
            source_activation = cache.caches[source][hook_name]
            target_activation = cache.caches[target][hook_name]
            if torch.equal(patch_setter(target_activation.clone(), row, source_activation), target_activation):
                yield None
            elif activation_name == "resid_mid":
                yield _resid_mid_hooks(row["layer"], row, source_activation)
            else:

                def patch_hook(activation: Tensor, hook, row=row, source_activation=source_activation) -> Tensor:
                    return patch_setter(activation.clone(), row, source_activation)

                yield [(hook_name, patch_hook)]

    tokens = (cache.pair[0] if target == "clean" else cache.pair[1]).tokens
    raw = patched_values(model, tokens, cache.hooks, patches(),
                         lambda logits: logit_diff(logits, answer, wrong).double(), cache.logit_diffs[target])
    fields, sweep = effect_fields(raw, cache.logit_diffs["clean"], cache.logit_diffs["corrupted"],
                                  lambda: cache.bootstrap_weights(n_boot, seed), confidence, n_boot)
    name = label or activation_name
    cells = tuple(
        PatchCell(activation=name, hook_name=hook_name, layer=int(row["layer"]), head=row.get("head"),
                  position=row.get("position"), source_position=row.get("source_position"),
                  neurons=tuple(row["neurons"]) if row.get("neurons") is not None else None, **cell)
        for row, hook_name, cell in zip(index_rows, hook_names, fields)
    )
    return PatchingSweep(model_name=model_config_of(model).name, activation=name, source=source, target=target,
                         cells=cells, **sweep)


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


def check_pair(model, pair: object) -> PatchingPair:
    """A validated ``(clean, corrupted, answer, wrong)`` patching pair of the permutation task for ``model``."""
    V = model_config_of(model).V
    if not (isinstance(pair, tuple) and len(pair) == 4):
        raise TypeError("pair must be the (clean, corrupted, answer, wrong) tuple of patching_pair")
    clean, corrupted, answer, wrong = pair
    for name, batch in (("clean", clean), ("corrupted", corrupted)):
        if not isinstance(batch, TaskBatch):
            raise TypeError(f"pair's {name} must be a TaskBatch, got {type(batch).__name__}")
        validate_tokens(batch.tokens, V)
    clean, corrupted = permutation_batch(clean), permutation_batch(corrupted)
    if clean.tokens.shape != corrupted.tokens.shape:
        raise ValueError(
            f"clean {tuple(clean.tokens.shape)} and corrupted {tuple(corrupted.tokens.shape)} shapes differ"
        )
    for name, tokens in (("answer", answer), ("wrong", wrong)):
        if not isinstance(tokens, Tensor) or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise TypeError(f"pair's {name} must be an integer tensor of token ids")
        if tokens.shape != (len(clean),):
            raise ValueError(f"pair's {name} must have shape ({len(clean)},), got {tuple(tokens.shape)}")
        if ((tokens < 1) | (tokens > V)).any():
            raise ValueError(f"pair's {name} tokens must be in 1..{V}")
    return clean, corrupted, answer.long(), wrong.long()
