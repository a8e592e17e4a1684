"""The metric convention shared by every general tool.

A **metric** is a callable ``metric(logits, batch) -> Tensor[batch]``: given the logits of one run
``[batch, seq, vocab]`` and the batch that run was asked about (the clean :class:`TaskBatch`, or
the clean token ids ``[batch, seq]`` when the tool was given plain tokens), it returns **one number
per row**, higher meaning "more of the behaviour" (e.g. the target's log-probability, a logit
difference).  Every tool that takes ``metric=`` (ablation tables, activation and path patching,
the IOI circuit criteria, circuit proposal, every discovery method and the exhaustive oracle)
takes this same callable and reduces it the same way: **the mean over rows** (the normalisations
of Wang et al. 2022, "Interpretability in the Wild", and Conmy et al. 2023, ACDC, are then taken
on those means; patching's bootstrap resamples the rows).

Patched or ablated runs are scored against the *clean* batch (its targets), so a metric asks how
much of the clean behaviour a run keeps.

A callable of the logits alone, ``metric(logits) -> Tensor[batch]`` (a metric already bound to its
batch, such as :func:`~perm_circuits.analysis.interventions.activation_patching.target_logprob`'s),
is accepted too: a callable whose signature has one positional parameter is called with the
logits only, any other with ``(logits, batch)``.  A metric returning a scalar (the mean already
taken) is refused: the tools need the rows (bootstraps, per-row criteria).

Its checks are :func:`check_metric` (callable) and :func:`check_rows` (the output): each tool evaluates the metric once on the clean logits (a
run it needs anyway) before any other forward pass, and a wrong metric (not a tensor, not shape
``(batch,)``, NaN) is refused with a message naming the expected shape.

The library's own metrics live here, once each (``tests/test_metric_single.py`` checks that no
other module computes a target log-probability):

- :func:`target_logprob`: per row, the ``mask``-weighted mean log-probability of a
  :class:`~perm_circuits.tasks.base.TaskBatch`'s targets (patching's default, the IOI criteria's
  F as :func:`~perm_circuits.analysis.circuits.nodes.target_logprob_gain`);
  :func:`pooled_target_logprob`: the same log-probabilities pooled over every scored position of
  the batch, one number per run (edge discovery's default metric; its negative is the any-task
  optimal ablation's loss); both read :func:`target_logprobs`;
- :func:`logit_diff`: ``logit(answer) - logit(wrong)`` at one position, per row (Wang et al. 2022);
- :func:`kl_to_full`: KL divergence of the full model's next-token distribution from a run's,
  averaged over the loss positions (ACDC's criterion, Conmy et al. 2023).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_int
from perm_circuits.tasks.base import TaskBatch, check_target_classes

__all__ = [
    "Metric",
    "bind_metric",
    "check_metric",
    "check_rows",
    "kl_to_full",
    "logit_diff",
    "metric_rows",
    "pooled_target_logprob",
    "reduce_rows",
    "target_logprob",
    "target_logprobs",
]

Metric = Callable[..., Tensor]
"""``metric(logits [batch, seq, vocab], batch) -> [batch]`` (or ``metric(logits) -> [batch]``)."""


def check_metric(metric: object, name: str = "metric") -> Metric:
    """``metric`` if it is callable; a TypeError naming the convention otherwise (no model run)."""
    if not callable(metric):
        raise TypeError(f"{name} must be a callable metric(logits, batch) -> tensor of shape (batch,) (one number "
                        f"per row), got {type(metric).__name__}")
    return metric


def _takes_batch(metric: Metric) -> bool:
    """Whether ``metric`` is called as ``metric(logits, batch)`` (else ``metric(logits)``)."""
    try:
        parameters = inspect.signature(metric).parameters.values()
    except (TypeError, ValueError):  # no signature (a builtin): the convention's two arguments
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return True
    return len(positional) >= 2


def bind_metric(metric: Metric, batch: Any) -> Callable[[Tensor], Tensor]:
    """``logits -> metric(logits, batch)``: the metric of one batch, whichever form it was given in."""
    check_metric(metric)
    if _takes_batch(metric):
        return lambda logits: metric(logits, batch)
    return metric


def check_rows(values: object, n_rows: int, *, finite: bool = True) -> Float[Tensor, " batch"]:
    """The one check of a metric's output: a real tensor of shape ``(n_rows,)`` (one number per
    row) without NaN (``finite=False`` skips the NaN check, which reads the values back from the
    device).  Returns ``values`` as they are (gradients kept)."""
    if not isinstance(values, Tensor):
        raise TypeError(f"metric(logits, batch) must return a tensor of shape ({n_rows},) (batch,): one number per "
                        f"row, got {type(values).__name__}")
    if values.shape != (n_rows,):
        hint = " (a scalar: return the rows, not their mean; the tools take the mean)" if values.dim() == 0 else ""
        raise ValueError(f"metric(logits, batch) must return one number per row, shape ({n_rows},) (batch,), got "
                         f"{tuple(values.shape)}{hint}")
    if values.dtype.is_complex:
        raise TypeError(f"metric(logits, batch) must return real numbers, got dtype {values.dtype}")
    if finite and bool(torch.isnan(values).any()):
        raise ValueError(f"metric(logits, batch) returned NaN in {int(torch.isnan(values).sum())} of {n_rows} rows "
                         f"(shape ({n_rows},) (batch,) expected, every value a number)")
    return values


def metric_rows(
    metric: Callable[[Tensor], Tensor], logits: Tensor, n_rows: int, *, finite: bool = True,
) -> Float[Tensor, " batch"]:
    """``metric(logits)`` (a metric bound by :func:`bind_metric`) checked by :func:`check_rows`,
    detached, as float64."""
    return check_rows(metric(logits), n_rows, finite=finite).detach().double()


def reduce_rows(values: Float[Tensor, "*runs batch"]) -> Float[Tensor, "*runs"]:
    """The one reduction of per-row metric values: the mean over rows (the last dimension)."""
    return values.mean(-1)


# ----------------------------------------------------------------------------- the library's metrics


def target_logprobs(
    logits: Float[Tensor, "*runs batch seq vocab"], targets: Int[Tensor, "batch seq"], scored: Tensor | None = None,
) -> Float[Tensor, "*runs batch seq"]:
    """``log p(target)`` at every position (``logit(target) - logsumexp(logits)``, in the logits'
    dtype); where ``scored`` (bool ``[batch, seq]``) is False the target is never read (a
    :class:`TaskBatch`'s target there may be any value) and the value is meaningless: weight it by 0.
    ``scored=None``: every target is a class of the logits (a caller that cleaned them once).
    The one computation of a target's log-probability in the library."""
    safe = targets if scored is None else torch.where(scored, targets, torch.zeros_like(targets))
    picked = logits.gather(-1, safe.expand(*logits.shape[:-1])[..., None].long())[..., 0]
    return picked - logits.logsumexp(-1)


def _check_batch(batch: object) -> TaskBatch:
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch, got {type(batch).__name__}")
    return batch


def target_logprob(batch: TaskBatch, *, empty: str = "raise") -> Callable[[Tensor], Float[Tensor, " batch"]]:
    """``metric(logits [batch, seq, vocab]) -> [batch]``: per row, the ``mask``-weighted mean
    log-probability of ``batch.targets`` over the row's scored positions (float64).

    Use the *clean* batch's targets for every run, so the metric asks how much of the clean answer
    a run keeps.  Logits may cover fewer classes than the task's vocabulary (e.g. states only) as
    long as every target under the mask indexes them.  ``empty``: ``"raise"`` (every row needs a
    position with mask > 0) or ``"nan"`` (such a row scores nan; some row must have one).
    """
    _check_batch(batch)
    if empty not in ("raise", "nan"):
        raise ValueError(f"empty must be 'raise' or 'nan', got {empty!r}")
    weights = batch.mask.double()
    if empty == "raise" and bool((weights.sum(1) <= 0).any()):
        n_empty = int((weights.sum(1) <= 0).sum())
        raise ValueError(
            f"every sequence of the batch needs a position with mask > 0 ({n_empty} have none); keep the others "
            "with batch.subset(batch.mask.sum(1) > 0)"
        )
    if not bool((weights.sum(1) > 0).any()):
        raise ValueError("no row of the batch has a position with mask > 0: no target to score")
    moved: dict[torch.device, tuple[Tensor, Tensor, Tensor]] = {}  # the batch on each logits' device, moved once
    top = batch.top_target()  # the largest class scored: the logits must cover it

    def metric(logits: Float[Tensor, "batch seq vocab"]) -> Float[Tensor, " batch"]:
        if logits.shape[:2] != batch.tokens.shape:
            raise ValueError(f"logits {tuple(logits.shape)} do not match the batch's tokens {tuple(batch.tokens.shape)}")
        check_target_classes(top, logits.shape[-1])
        if logits.device not in moved:
            moved[logits.device] = (batch.targets.to(logits.device), (batch.mask > 0).to(logits.device),
                                    weights.to(logits.device))
        targets, scored, w = moved[logits.device]
        logp = target_logprobs(logits.double(), targets, scored)
        return (logp * w).sum(1) / w.sum(1)

    return metric


def pooled_target_logprob(batch: TaskBatch) -> Callable[[Tensor], Float[Tensor, "*runs"]]:
    """``metric(logits [*runs, batch, seq, vocab]) -> [*runs]``: the ``mask``-weighted mean
    log-probability of ``batch.targets`` over every scored position of the batch (a row weighs as
    much as its mask), one number per run, float32 (float64 logits stay float64).  The rows'
    mean of ``n_rows * (row's weighted sum) / (the batch's total weight)``; equal to the mean of
    :func:`target_logprob`'s rows when every row has the same total mask.  Edge discovery's
    default metric (batched over masks) and, negated, the any-task optimal ablation's loss."""
    _check_batch(batch)
    if not bool((batch.mask > 0).any()):
        raise ValueError("batch.mask has no position > 0: no target to score (the metric would be 0 for every run)")
    weights = batch.mask.float() / batch.mask.float().sum().clamp_min(1e-12)
    columns = torch.nonzero(weights.sum(0) > 0)[:, 0]  # positions scored in some row
    weights, targets = weights[:, columns], batch.targets[:, columns]
    targets = torch.where(weights != 0, targets, torch.zeros_like(targets))  # unscored targets never read
    top = batch.top_target()

    def metric(logits: Tensor) -> Tensor:
        check_target_classes(top, logits.shape[-1])
        logits = logits[..., columns, :]
        logits = logits if logits.dtype == torch.float64 else logits.float()
        return (target_logprobs(logits, targets) * weights).sum((-1, -2))

    return metric


def logit_diff(
    logits: Float[Tensor, "batch seq vocab"],
    answer: Int[Tensor, " batch"],
    wrong: Int[Tensor, " batch"],
    position: int = -1,
) -> Float[Tensor, " batch"]:
    """``logit(answer) - logit(wrong)`` at ``position``, per row (Wang et al. 2022's logit difference)."""
    if logits.ndim != 3:
        raise ValueError(f"logits must be [batch, seq, vocab], got shape {tuple(logits.shape)}")
    size = logits.shape[1]
    if not -size <= check_int("position", position) < size:
        bound = f"[{-size}, {size - 1}]" if size > 0 else "[] (empty axis)"
        raise ValueError(f"position {position} out of range: position must be in {bound} (sequences have {size} "
                         "positions)")
    for name, ids in (("answer", answer), ("wrong", wrong)):
        if ids.shape != logits.shape[:1]:
            raise ValueError(f"{name} must be one token id per sequence, shape ({logits.shape[0]},), got {tuple(ids.shape)}")
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < logits.shape[-1]:
            raise ValueError(f"{name} ids must be in [0, {logits.shape[-1]}) (the logits' vocabulary), "
                             f"got values {int(ids.min())}..{int(ids.max())}")
    last = logits[:, position % size]
    return last.gather(1, answer[:, None])[:, 0] - last.gather(1, wrong[:, None])[:, 0]


def kl_to_full(
    full_logits: Float[Tensor, "batch seq vocab"], weights: Float[Tensor, "batch seq"] | None = None,
) -> Callable[[Tensor], Float[Tensor, "*runs"]]:
    """``divergence(logits [*runs, batch, seq, vocab]) -> [*runs]``: ``KL(full model || run)`` of the
    next-token distributions (float64), averaged over the positions weighted by ``weights``
    (normalised; default every position equally): ACDC's criterion (Conmy et al. 2023).  Lower is
    closer to the full model (0 for the full model itself)."""
    weights = torch.ones(full_logits.shape[:-1], device=full_logits.device) if weights is None else weights
    weights = weights / weights.sum().clamp_min(1e-12)
    full = full_logits.double().log_softmax(-1)
    full_probs = full.exp()

    def divergence(logits: Tensor) -> Tensor:
        logp = logits.double().log_softmax(-1)
        return ((full_probs * (full - logp)).sum(-1) * weights).sum((-1, -2))

    return divergence
