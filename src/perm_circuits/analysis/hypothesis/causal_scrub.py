"""Causal scrubbing: does a hypothesis explain the metric? (Chan et al. 2022).

Chan, Garriga-Alonso, Goldowsky-Dill, Greenblatt, Nitishinskaya, Radhakrishnan, Shlegeris,
Thomas, "Causal Scrubbing: a method for rigorously testing interpretability hypotheses"
(Alignment Forum, 2022). A hypothesis says which features of the input each named component
depends on; scrubbing replaces every activation by one the hypothesis calls equivalent and
measures how much of the metric survives:

    recovery = (scrubbed - fully randomised) / (model - fully randomised)

**What is implemented** (treewise resampling on the residual DAG, at the granularity of the named
components). For a root row ``r``:

1. the model runs on a random row ``z(r)`` (one random permutation of the batch), so every
   component the hypothesis does not name, and the embedding unless named, carries a random
   input's value: the unnamed paths to the output are resampled at random;
2. each named component ``c`` is set to its *treewise* value for ``r``: the value ``c`` takes when
   the model runs on a row ``s`` drawn uniformly among the rows that agree with ``r`` on ``c``'s
   features, with every named component upstream of ``c`` (earlier in the forward pass) set in
   turn to its treewise value for ``s``, drawn independently (one branch of the tree per edge, the
   number of forwards is the number of tree nodes);
3. the metric of the resulting logits is read against row ``r``'s own targets.

**Approximation against Chan et al.** With ``unnamed="source"`` (the default), inside a named
component's subtree the components the hypothesis does not name run on that component's source row
``s``, not on a fresh random row: a claim covers the whole input of its component except the named
upstream components, which are claimed separately. With ``unnamed="random"`` they run on a fresh
random row, as in Chan et al. (a named embedding still reads its own source row): a component then
reads the input only through the named components
upstream of it, so a hypothesis must name the embedding (``embed``, at every position a component
reads) wherever a component reads tokens directly. Either way the intervention is at hook points:
an unnamed component downstream of a named one inside the same run sees the named one's patched
value, where Chan et al. would feed it a random input on that path too. Rows
are drawn from the batch itself (the batch is the data distribution), and the interval is a
bootstrap over rows with the resampling draws held fixed. The per-claim breakdown scrubs one claim
at a time: that component is set to its value on an agreeing row, every other activation is the
model's own, so ``1 - recovery`` is what that claim alone loses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.hypothesis.spec import (
    Component, Hypothesis, batch_tokens, feature_codes, sample_agreeing,
)
from perm_circuits.checks import check_positive_int, check_seed
from perm_circuits.hooks import HookList, run_capture, run_logits
from perm_circuits.model_shape import model_shape

__all__ = ["ClaimRecovery", "ScrubResult", "causal_scrub", "check_metric_values", "patch_hooks"]

MAX_TREE_NODES = 4096


@dataclass(frozen=True)
class ClaimRecovery:
    """One claim scrubbed alone: its component set to its value on a row agreeing on its features."""

    component: str
    features: str
    metric: float
    recovery: float


@dataclass(frozen=True)
class ScrubResult:
    """The fraction of the metric a hypothesis recovers under causal scrubbing (module docstring).

    ``recovery`` is ``(scrubbed - randomised) / (model - randomised)`` of the mean metric; the
    interval ``[ci_low, ci_high]`` is a percentile bootstrap over rows. ``per_claim`` scrubs each
    claim alone. ``forwards`` counts the model runs the tree needed.
    """

    hypothesis: str
    recovery: float
    ci_low: float
    ci_high: float
    model_metric: float
    random_metric: float
    scrubbed_metric: float
    per_claim: tuple[ClaimRecovery, ...]
    n_rows: int
    n_boot: int
    seed: int
    forwards: int

    def to_dataframe(self):
        """One row for the whole hypothesis (``component = "all"``), then one per claim scrubbed alone."""
        import pandas as pd

        rows = [{"component": "all", "features": "", "metric": self.scrubbed_metric, "recovery": self.recovery,
                 "ci_low": self.ci_low, "ci_high": self.ci_high}]
        rows += [{"component": c.component, "features": c.features, "metric": c.metric, "recovery": c.recovery,
                  "ci_low": float("nan"), "ci_high": float("nan")} for c in self.per_claim]
        frame = pd.DataFrame(rows)
        frame.attrs.update(model_metric=self.model_metric, random_metric=self.random_metric, n_rows=self.n_rows)
        return frame


def check_metric_values(values: object, n: int) -> Float[Tensor, " batch"]:
    """A metric's output as a float ``[n]`` tensor on the CPU, checked by the library's one metric check
    (:func:`perm_circuits.metric.check_rows`: ``metric(logits, batch) -> per-row values``, no NaN)."""
    from perm_circuits.metric import check_rows

    return check_rows(values, n).detach().float().cpu()


def _patch(activation: Tensor, hook: Any, index: tuple, value: Tensor) -> Tensor:
    activation = activation.clone()
    activation[index] = value.to(activation.device, activation.dtype)
    return activation


def patch_hooks(component: Component, n_layers: int, values: dict[str, Tensor]) -> HookList:
    """Hooks setting ``component``'s slice of each of its hook points to ``values[hook_name]``."""
    index = component.index()
    return [(name, partial(_patch, index=index, value=values[name])) for name in component.hook_names(n_layers)]


def _slices(component: Component, n_layers: int, store: dict[str, Tensor]) -> dict[str, Tensor]:
    index = component.index()
    return {name: store[name][index] for name in component.hook_names(n_layers)}


class _Tree:
    """The treewise values of a hypothesis's named components on one batch."""

    def __init__(self, model, tokens: Tensor, hypothesis: Hypothesis, generator: torch.Generator,
                 unnamed: str = "source") -> None:
        self.model, self.tokens, self.generator, self.unnamed = model, tokens, generator, unnamed
        self.n_layers = model_shape(model).n_layers
        self.claims = sorted(hypothesis.claims, key=lambda c: c.component.order)
        self.codes = [feature_codes(c.features, tokens) for c in self.claims]
        self.forwards = 0

    def value(self, i: int, rows: Int[Tensor, " n"]) -> dict[str, Tensor]:
        """Claim ``i``'s component, treewise, for root rows ``rows``."""
        component = self.claims[i].component
        source = sample_agreeing(self.codes[i], rows, self.generator)
        hooks: HookList = []
        for j in range(i):
            upstream = self.claims[j].component
            if upstream.order < component.order:
                hooks += patch_hooks(upstream, self.n_layers, self.value(j, source))
        self.forwards += 1
        if self.forwards > MAX_TREE_NODES:
            raise ValueError(f"the hypothesis's resampling tree needs more than {MAX_TREE_NODES} forwards; "
                             "name fewer chained components")
        fresh = self.unnamed == "random" and component.kind != "embed"  # the embedding is the source's input
        run = source if not fresh else torch.randint(len(self.tokens), source.shape,
                                                                       generator=self.generator)
        _, store = run_capture(self.model, self.tokens[run], component.hook_names(self.n_layers), hooks)
        return _slices(component, self.n_layers, store)

    def root_hooks(self, rows: Int[Tensor, " n"]) -> HookList:
        hooks: HookList = []
        for i, claim in enumerate(self.claims):
            hooks += patch_hooks(claim.component, self.n_layers, self.value(i, rows))
        return hooks


def _recovery(scrubbed: Tensor, model: Tensor, random: Tensor) -> float:
    gap = float(model.mean() - random.mean())
    return float("nan") if gap == 0 else float(scrubbed.mean() - random.mean()) / gap


def _check(model, hypothesis, batch, metric, n_boot, confidence, seed, unnamed) -> Tensor:
    if not isinstance(hypothesis, Hypothesis):
        raise TypeError(f"hypothesis must be a Hypothesis, got {type(hypothesis).__name__}")
    tokens = batch_tokens(batch)
    for component in hypothesis.components:
        component.check(model, tokens.shape[1])
    if not callable(metric):
        raise TypeError(f"metric must be a callable metric(logits, batch) -> per-row values, got {metric!r}")
    check_positive_int("n_boot", n_boot)
    if not isinstance(confidence, float) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")
    check_seed(seed)
    if unnamed not in ("source", "random"):
        raise ValueError(f"unnamed must be 'source' or 'random', got {unnamed!r}")
    return tokens


def causal_scrub(
    model,
    hypothesis: Hypothesis,
    batch: Any,
    metric: Callable[[Tensor, Any], Tensor],
    *,
    n_boot: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
    per_claim: bool = True,
    unnamed: str = "source",
) -> ScrubResult:
    """Scrub ``model`` under ``hypothesis`` on ``batch`` and report the recovered fraction of ``metric``.

    ``batch`` is the data distribution (tokens or a ``TaskBatch``); rows are
    resampled within it. ``metric(logits, batch)`` returns one value per row (read against the row's
    own targets), mean-reduced here. ``unnamed`` says where the components a claim's subtree does
    not name run: on the claim's source row (``"source"``) or on a random row (``"random"``, Chan
    et al.'s). Same ``seed``, same result, bit for bit. See the module docstring for the resampling
    tree and how it approximates Chan et al. 2022.
    """
    tokens = _check(model, hypothesis, batch, metric, n_boot, confidence, seed, unnamed)
    n = tokens.shape[0]
    generator = torch.Generator().manual_seed(seed)
    rows = torch.arange(n, device="cpu")  # row indices, drawn with the CPU generator
    shuffled = torch.randperm(n, generator=generator)

    def measure(run_tokens: Tensor, hooks: HookList) -> Tensor:
        return check_metric_values(metric(run_logits(model, run_tokens, hooks), batch), n)

    clean = measure(tokens, [])
    random = measure(tokens[shuffled], [])
    tree = _Tree(model, tokens, hypothesis, generator, unnamed)
    scrubbed = measure(tokens[shuffled], tree.root_hooks(rows)) if hypothesis.claims else random

    claims: list[ClaimRecovery] = []
    if per_claim:
        n_layers = model_shape(model).n_layers
        for claim, codes in zip(tree.claims, tree.codes):
            source = sample_agreeing(codes, rows, generator)
            names = claim.component.hook_names(n_layers)
            _, store = run_capture(model, tokens[source], names)
            alone = measure(tokens, patch_hooks(claim.component, n_layers, _slices(claim.component, n_layers, store)))
            claims.append(ClaimRecovery(str(claim.component), ", ".join(f.name for f in claim.features),
                                        float(alone.mean()), _recovery(alone, clean, random)))

    boot = torch.randint(n, (n_boot, n), generator=generator)
    gap = clean[boot].mean(1) - random[boot].mean(1)
    samples = ((scrubbed[boot].mean(1) - random[boot].mean(1)) / gap)[gap != 0]
    tail = (1 - confidence) / 2
    low, high = (float(torch.quantile(samples, q)) for q in (tail, 1 - tail)) if len(samples) else (float("nan"),) * 2
    return ScrubResult(str(hypothesis), _recovery(scrubbed, clean, random), low, high, float(clean.mean()),
                       float(random.mean()), float(scrubbed.mean()), tuple(claims), n, n_boot, seed,
                       tree.forwards)
