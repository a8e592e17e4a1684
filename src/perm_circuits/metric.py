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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["Metric", "bind_metric", "check_metric", "check_rows", "metric_rows", "reduce_rows"]

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
