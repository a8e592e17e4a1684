"""Head roles: where each head attends, what breaks when it is removed, and whether the study's story holds.

The study (``001_study_presentation``, sections 08-10) tells this story for ``d32h2``:

- one head *eliminates*: its x queries spread their attention uniformly over the prior y
  positions, so the residual at ``x_k`` holds the average of the used values (section 08, head 1);
- one head *binds*: x attends to the immediately preceding y and y attends to itself, "encoding
  the (x, y) pair as a unit" (section 08, head 2; section 09);
- the FFN completes recall: it "performs the associative lookup" of the repeated ``x1``
  (section 09; finding 5), attention does not look up ``x1`` itself;
- ``d16h1`` cannot recall and its single head is a uniform accumulator (sections 07-08); the
  second head is what enables recall (section 10, finding 3).

This module measures each piece and says, per model (any seed, any size), whether it holds.

1. :func:`attention_by_source` -- the mean attention of every query position on every source
   position, per (layer, head), split by whether the last query repeats an earlier query (one
   forward over the batch, ``blocks.L.attn.hook_pattern``).
2. :func:`head_scores` -- per head (Olsson et al. 2022 and Wang et al. 2022 score heads the same
   way, by the attention mass on a hypothesised source):

   - elimination: ``elim_y_mass``, the attention mass of x queries ``x2..xV`` on the prior y
     positions, and ``elim_entropy``, the entropy of that attention restricted to the prior y
     positions (renormalised), divided by ``log(#prior ys)``, per sample, averaged over ``x3..xV``
     (``x2`` has a single prior y, where the normalised entropy is 0/0).  ``elimination_score =
     elim_y_mass * elim_entropy`` (1 for a perfect uniform accumulator);
   - binding: ``x_prev_y``, the mass of ``x_j`` (``j = 2..V``) on ``y_{j-1}`` and ``y_self``, the
     mass of ``y_j`` (``j = 1..V-1``) on itself; ``binding_score`` is their mean;
   - duplicate token: ``dup_repeated``, the mass of the last query on the position of the earlier
     x it repeats, on repeated sequences, and ``dup_baseline``, the mass on the same positions on
     sequences whose last query is new; ``duplicate_score`` is the difference.
     ``source_y_*``: the same for the y that follows the repeated x (the recall answer).

   The last query counts towards the elimination and binding scores on non-repeated sequences
   only (on repeated ones elimination is the wrong algorithm); earlier queries on every sequence.
3. :func:`head_roles` -- combines the attention scores with causal evidence: the ablation table
   of :mod:`perm_circuits.analysis.ablation` (zero / mean / resample; decisions use one mode,
   ``how="mean"`` by default, the others are reported as a sensitivity check), a joint ablation of
   heads that share the eliminator pattern (redundant accumulators survive single ablations), and
   the recall patching of :mod:`perm_circuits.analysis.patching` (how much of the clean logit
   difference each head's / the MLP's clean output restores), and the :func:`recall_signal` under
   every ablation (does the model still favour the recall answer among the used values when the
   query repeats? -- this separates "recall broken" from "output broken" when an ablation kills
   elimination and recall together).  It returns a :class:`RoleVerdict`
   with a role per head and per MLP, a claims table (supported / contradicted / inconclusive, with
   the numbers) and a plain-text :meth:`RoleVerdict.summary`.  :func:`judge_roles` is the pure
   decision step, usable on precomputed or hand-made evidence.

Decision rules (all thresholds are fields of :class:`RoleThresholds`):

- *retention* of a capability under an ablation is chance-corrected,
  ``(acc_ablated - 1/V) / (acc_baseline - 1/V)``; defined only where the baseline has the
  capability (baseline accuracy >= ``incapable`` = 0.5).  ``<= destroyed`` (0.25) destroys it,
  ``>= survives`` (0.75) leaves it, in between damages it.
- a component is *needed for elimination* if ablating it drops elimination retention below
  ``survives`` or raises the steps 1..V-1 MAE (vs the train-prior posterior) by ``mae_increase``
  (0.05).  It is *needed for recall* if ablating it drops recall retention below ``survives``
  while elimination survives; if elimination falls too, only if the recall signal also falls
  (signal retention ``< survives``; taken as yes when the signal was not measured); a head whose
  ablation leaves recall is still needed for it if patching its clean output restores
  ``>= patch_restores`` (0.5) of the clean logit difference (a redundant carrier).
- attention patterns: *eliminator* if ``elim_y_mass >= 0.7`` and ``elim_entropy >= 0.8``;
  *binder* if ``x_prev_y >= 0.6`` and ``y_self >= 0.6`` (a uniform accumulator has
  ``x_prev_y = 25/48 ~ 0.52``); *duplicate* if ``duplicate_score >= 0.3``.
- head role: needed for both -> ``"mixed"``; for elimination only -> ``"eliminator"`` if it has
  the eliminator pattern, else ``"other"``; for recall only -> ``"duplicate/recall"`` with the
  duplicate pattern, ``"binder"`` with the binder pattern, else ``"other"``; for neither ->
  ``"unused"`` (loss rises by < ``loss_increase`` = 0.05 nats) or ``"minor"``.
- MLP role: needed for recall while elimination survives -> ``"completes recall"`` (recall
  retention ``<= destroyed``) or ``"contributes to recall"``; needed for recall and elimination
  -> ``"needed for both"``; elimination only -> ``"needed for elimination"``; else ``"unused"`` /
  ``"minor"``.
- claims (multi-head models: eliminates, recalls, eliminator_head, binding_head,
  division_of_labour, ffn_completes_recall, no_attention_lookup; one-head models: eliminates,
  no_recall, single_head_accumulates): each is supported / contradicted / inconclusive by the
  rules in its ``_*_claim`` function, quoted in its evidence.  E.g. the FFN claim is supported
  when the MLP "completes recall", or is "needed for both" with its recall signal destroyed
  (``<= destroyed``), and contradicted when no MLP is needed for recall ("recall survives MLP
  ablation: the FFN does not decode").  The story holds when every claim is supported and does
  not when any is contradicted.
- model capabilities: accuracy ``>= capable`` (0.9) has it, ``< incapable`` (0.5) lacks it;
  "cannot recall" holds for recall accuracy ``<= recall_absent`` (0.2, chance).

Nothing here prints; every function validates its arguments before any forward pass and leaves
no hooks on the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis._checks import check_index, check_int, check_task_config
from perm_circuits.analysis.ablation import HOWS, AblationRow, AblationTable, ablate_head, ablate_mlp, ablation_table
from perm_circuits.analysis.patching import PatchingSweep, patch_head_outputs, patch_mlp
from perm_circuits.evaluate import evaluate_logits, probe_probabilities
from perm_circuits.hooks import HookList, check_hooks, run_capture
from perm_circuits.models import ModelConfig, model_config_of
from perm_circuits.posterior import bayes_posterior
from perm_circuits.task import Batch, TaskConfig, make_test_set, validate_tokens

__all__ = [
    "DEFAULT_THRESHOLDS",
    "STATUSES",
    "AttentionBySource",
    "Claim",
    "ClaimTable",
    "HeadRole",
    "HeadScore",
    "HeadScores",
    "MlpRole",
    "RoleThresholds",
    "RoleVerdict",
    "attention_by_source",
    "head_roles",
    "head_scores",
    "judge_roles",
    "recall_signal",
    "repeat_source_of",
]

STATUSES: tuple[str, ...] = ("supported", "contradicted", "inconclusive")
STUDY_REPEAT_RATIO = 0.3
"""Repeat ratio of the study's repeated training set; used for the default test set when the
model's own task has none, so that recall can always be measured."""


# ----------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class RoleThresholds:
    """Every threshold the verdict uses (see the module docstring for the rules).

    Attributes:
        eliminator_y_mass: minimum mass of x queries on prior y positions for the eliminator pattern.
        eliminator_entropy: minimum normalised entropy over the prior y positions for it.
        binder_x_prev_y: minimum mass of ``x_j`` on ``y_{j-1}`` for the binder pattern.
        binder_y_self: minimum mass of ``y_j`` on itself for the binder pattern.
        duplicate_score: minimum rise of the last query's mass on the repeated x (repeated minus
            non-repeated sequences) for the duplicate-token pattern.
        destroyed: chance-corrected retention at or below which an ablation destroys a capability.
        survives: retention at or above which the capability survives (between: damaged).
        mae_increase: rise of the steps 1..V-1 MAE (vs the train-prior posterior) that counts as
            harming elimination.
        loss_increase: rise of the test loss (nats) that separates "minor" from "unused".
        patch_restores: normalised patching effect from which a component restores recall.
        patch_none: normalised patching effect below which a component restores nothing.
        capable: baseline accuracy from which the model has a capability.
        incapable: baseline accuracy below which it lacks it (retentions need at least this).
        recall_absent: recall accuracy at or below which "cannot recall" holds (chance, 1/V).
    """

    eliminator_y_mass: float = 0.7
    eliminator_entropy: float = 0.8
    binder_x_prev_y: float = 0.6
    binder_y_self: float = 0.6
    duplicate_score: float = 0.3
    destroyed: float = 0.25
    survives: float = 0.75
    mae_increase: float = 0.05
    loss_increase: float = 0.05
    patch_restores: float = 0.5
    patch_none: float = 0.1
    capable: float = 0.9
    incapable: float = 0.5
    recall_absent: float = 0.2

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise TypeError(f"threshold {item.name} must be a number, got {value!r}")
        if not 0 <= self.destroyed < self.survives <= 1:
            raise ValueError(f"need 0 <= destroyed < survives <= 1, got {self.destroyed}, {self.survives}")
        if not 0 <= self.recall_absent < self.incapable < self.capable <= 1:
            raise ValueError(
                f"need 0 <= recall_absent < incapable < capable <= 1, got "
                f"{self.recall_absent}, {self.incapable}, {self.capable}"
            )
        if not self.patch_none < self.patch_restores:
            raise ValueError(f"need patch_none < patch_restores, got {self.patch_none}, {self.patch_restores}")


DEFAULT_THRESHOLDS = RoleThresholds()


def _check_thresholds(thresholds: object) -> RoleThresholds:
    if thresholds is None:
        return DEFAULT_THRESHOLDS
    if not isinstance(thresholds, RoleThresholds):
        raise TypeError(f"thresholds must be a RoleThresholds or None, got {type(thresholds).__name__}")
    return thresholds


# ----------------------------------------------------------------------------- inputs


def repeat_source_of(inputs: Int[Tensor, "batch seq"]) -> Int[Tensor, " batch"]:
    """Index ``k`` (0-based) of the earlier query ``x_{k+1}`` that the last query repeats, else -1.

    Read from the tokens (the first earlier x equal to the last one), so it also works for raw
    token tensors; on task batches it equals ``Batch.repeat_source``.
    """
    last = inputs[:, -1]
    earlier = inputs[:, 0:-1:2]
    match = earlier == last[:, None]
    first = match.int().argmax(dim=1)
    return torch.where(match.any(dim=1), first, torch.full_like(first, -1))


def _default_task(model, task_config: TaskConfig | None) -> TaskConfig:
    config = check_task_config(model, task_config)
    if config.repeat_ratio == 0:
        config = replace(config, repeat_ratio=STUDY_REPEAT_RATIO)
    return config


def _resolve_batch(model, test_set: object, task_config: TaskConfig | None, n: int, seed: int) -> tuple[Batch, TaskConfig]:
    config = _default_task(model, task_config)
    check_int("n", n, 1)
    check_int("seed", seed, 0)
    if test_set is None:
        return make_test_set(config, n=n, seed=seed), config
    if not isinstance(test_set, Batch):
        raise TypeError(f"test_set must be a perm_circuits.Batch or None, got {type(test_set).__name__}")
    validate_tokens(test_set.inputs, model_config_of(model).V)
    return test_set, config


def _resolve_tokens(model, test_set: object, task_config: TaskConfig | None, n: int, seed: int) -> Tensor:
    if isinstance(test_set, Tensor):
        _default_task(model, task_config)
        return validate_tokens(test_set, model_config_of(model).V)
    return _resolve_batch(model, test_set, task_config, n, seed)[0].inputs


def recall_signal(logits: Float[Tensor, "batch seq vocab"], inputs: Int[Tensor, "batch seq"]) -> float:
    """How much more the model favours the repeated query's earlier answer when the query repeats.

    At the last position, per sequence, the margin of each used value ``y_k`` (``k < V``) is its
    logit minus the mean logit of the other used values.  The signal is the mean margin of the
    recall answer ``y_{s+1}`` on repeated sequences (``s`` = the repeated query's index) minus the
    mean margin of the same index on sequences whose last query is new (weighted like the
    repeated ones' sources).  It measures recall in logits, independently of elimination (which
    only separates used from unused values): an ablation that breaks elimination but leaves the
    recall mechanism intact keeps the signal; one that breaks recall removes it.  nan without
    both kinds of sequence or with ``V < 3``.
    """
    source = repeat_source_of(inputs)
    repeated = source >= 0
    n_used = inputs.shape[1] // 2
    if n_used < 2 or not repeated.any() or repeated.all():
        return math.nan
    last = logits[:, -1, 1:].double()
    used = last.gather(1, inputs[:, 1::2] - 1)  # logits of y_1..y_{V-1}
    margin = used - (used.sum(dim=1, keepdim=True) - used) / (n_used - 1)
    k = source[repeated]
    on_repeated = margin[repeated].gather(1, k[:, None]).mean()
    weights = torch.bincount(k, minlength=n_used).double() / len(k)
    on_new = (margin[~repeated].mean(dim=0) * weights).sum()
    return float(on_repeated - on_new)


def _position_label(position: int) -> str:
    return f"x{position // 2 + 1}" if position % 2 == 0 else f"y{(position + 1) // 2}"


def _component(layer: int, head: int | None) -> str:
    return f"L{layer}MLP" if head is None else f"L{layer}H{head}"


# ----------------------------------------------------------------------------- attention by source


@dataclass(frozen=True)
class AttentionBySource:
    """Mean attention of every query on every source position, per (layer, head).

    Attributes:
        mean_not_repeated: ``[layer, head, q, k]`` mean pattern over sequences whose last query
            is new (nan where there are none).
        mean_repeated: the same over sequences whose last query repeats an earlier one.
        patterns: every sample's pattern ``[batch, layer, head, q, k]`` (for per-sample scores).
        source: per sample, the 0-based index of the repeated earlier query, -1 if none
            (:func:`repeat_source_of`).
    """

    model_name: str
    V: int
    n_samples: int
    n_repeated: int
    mean_not_repeated: Float[Tensor, "layer head q k"]
    mean_repeated: Float[Tensor, "layer head q k"]
    patterns: Float[Tensor, "batch layer head q k"] = field(repr=False)
    source: Int[Tensor, " batch"] = field(repr=False)

    def mean(self, group: str = "all") -> Float[Tensor, "layer head q k"]:
        """Mean pattern of ``"all"``, ``"repeated"`` or ``"not_repeated"`` sequences."""
        if group == "all":
            return self.patterns.mean(dim=0)
        if group == "repeated":
            return self.mean_repeated
        if group == "not_repeated":
            return self.mean_not_repeated
        raise ValueError(f"group must be 'all', 'repeated' or 'not_repeated', got {group!r}")

    def pattern(self, layer: int, head: int, group: str = "all") -> Float[Tensor, "q k"]:
        """Mean pattern ``[q, k]`` of one head for ``group`` (see :meth:`mean`)."""
        n_layers, n_heads = self.mean_not_repeated.shape[:2]
        layer = check_index("layer", layer, n_layers, f"the model has {n_layers} layer(s)")
        head = check_index("head", head, n_heads, f"the model has {n_heads} head(s) per layer")
        return self.mean(group)[layer, head]

    def to_dataframe(self) -> pd.DataFrame:
        """Tidy: one row per (group, layer, head, query position, causal source position)."""
        rows = []
        groups = (("not_repeated", self.mean_not_repeated, self.n_samples - self.n_repeated),
                  ("repeated", self.mean_repeated, self.n_repeated))
        n_layers, n_heads, seq, _ = self.mean_not_repeated.shape
        for group, mean, count in groups:
            if count == 0:
                continue
            values = mean.tolist()
            for layer in range(n_layers):
                for head in range(n_heads):
                    for q in range(seq):
                        for k in range(q + 1):
                            rows.append({
                                "group": group, "n": count, "layer": layer, "head": head,
                                "component": _component(layer, head), "query_pos": q,
                                "query": _position_label(q), "source_pos": k,
                                "source": _position_label(k), "attention": values[layer][head][q][k],
                            })
        return pd.DataFrame(rows)


def _capture_patterns(model, tokens: Tensor, hooks: HookList) -> Tensor:
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model_config_of(model).n_layers)]
    store = run_capture(model, tokens, names, hooks)[1]
    return torch.stack([store[name].float() for name in names], dim=1)  # [batch, layer, head, q, k]


def attention_by_source(
    model,
    test_set: Batch | Tensor | None = None,
    *,
    task_config: TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
) -> AttentionBySource:
    """Per-source attention of every query position of every head, mean over ``test_set``.

    One forward (under ``hooks``, which run before the capture) records
    ``blocks.L.attn.hook_pattern`` for every layer; the means are split by whether the last
    query repeats an earlier query (read from the tokens).  This is the measurement behind the
    study's attention maps (section 08).

    Args:
        test_set: a Batch or a token tensor ``[batch, 2V-1]``; default ``make_test_set`` of the
            model's task (with the study's repeat ratio 0.3 when that task has none), ``n``
            samples, ``seed``.
        task_config: the task of the default test set (default: the model's task).
        hooks: a TransformerLens hook list applied during the forward pass.
        n: size of the default test set (unused when ``test_set`` is given).
        seed: the seed of the default test set only (``make_test_set(task, n=n, seed=seed)``);
            unused when ``test_set`` is given.  Nothing else here is random.
    """
    tokens = _resolve_tokens(model, test_set, task_config, n, seed)
    hooks = check_hooks(model, hooks)
    config = model_config_of(model)
    patterns = _capture_patterns(model, tokens, hooks)
    source = repeat_source_of(tokens)
    repeated = source >= 0

    def group_mean(rows: Tensor) -> Tensor:
        if not rows.any():
            return torch.full(patterns.shape[1:], math.nan)
        return patterns[rows].mean(dim=0)

    return AttentionBySource(
        model_name=config.name,
        V=config.V,
        n_samples=len(tokens),
        n_repeated=int(repeated.sum()),
        mean_not_repeated=group_mean(~repeated),
        mean_repeated=group_mean(repeated),
        patterns=patterns,
        source=source,
    )


# ----------------------------------------------------------------------------- head scores


@dataclass(frozen=True)
class HeadScore:
    """Attention scores of one head (definitions in the module docstring).

    ``patterns`` lists the attention patterns the head matches (``"eliminator"``, ``"binder"``,
    ``"duplicate"``) under the thresholds used; ``attention_role`` joins them with ``+``
    (``"other"`` when none).
    """

    layer: int
    head: int
    component: str
    elim_y_mass: float
    elim_entropy: float
    elimination_score: float
    x_prev_y: float
    y_self: float
    binding_score: float
    dup_repeated: float
    dup_baseline: float
    duplicate_score: float
    source_y_repeated: float
    source_y_baseline: float
    source_y_shift: float
    patterns: tuple[str, ...]
    attention_role: str


@dataclass(frozen=True)
class HeadScores:
    """Result of :func:`head_scores`: one :class:`HeadScore` per (layer, head)."""

    model_name: str
    n_samples: int
    n_repeated: int
    thresholds: RoleThresholds
    heads: tuple[HeadScore, ...]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per head."""
        frame = pd.DataFrame([asdict(score) for score in self.heads])
        frame["patterns"] = ["+".join(score.patterns) for score in self.heads]
        frame.insert(0, "model", self.model_name)
        return frame

    def get(self, layer: int, head: int) -> HeadScore:
        for score in self.heads:
            if score.layer == layer and score.head == head:
                return score
        raise KeyError(f"no head L{layer}H{head} in {self.model_name}")

    def __iter__(self) -> Iterator[HeadScore]:
        return iter(self.heads)


def _mean_rows(values: Tensor, rows: Tensor) -> Tensor:
    """Mean over the selected batch rows of ``values [batch, layer, head]`` (nan if none)."""
    if not rows.any():
        return torch.full(values.shape[1:], math.nan, dtype=torch.float64)
    return values[rows].double().mean(dim=0)


def _patterns_matched(score: dict, thresholds: RoleThresholds) -> tuple[str, ...]:
    matched = []
    if score["elim_y_mass"] >= thresholds.eliminator_y_mass and score["elim_entropy"] >= thresholds.eliminator_entropy:
        matched.append("eliminator")
    if score["x_prev_y"] >= thresholds.binder_x_prev_y and score["y_self"] >= thresholds.binder_y_self:
        matched.append("binder")
    if score["duplicate_score"] >= thresholds.duplicate_score:
        matched.append("duplicate")
    return tuple(matched)


def _scores(attention: AttentionBySource, thresholds: RoleThresholds) -> HeadScores:
    """Head scores from per-sample patterns (vectorized over the batch)."""
    P = attention.patterns.double()  # [batch, layer, head, q, k]
    V = attention.V
    last = 2 * V - 2
    source = attention.source
    repeated = source >= 0
    everyone = torch.ones_like(repeated)
    if not (~repeated).any():
        raise ValueError(
            "the test set has no sequence whose last query is new: the elimination and binding "
            "scores need some (the last query is scored on non-repeated sequences only)"
        )

    def rows_for(q: int) -> Tensor:
        return ~repeated if q == last else everyone

    y_mass, entropy, prev_y = [], [], []
    for j in range(2, V + 1):  # x_j at position 2(j-1)
        q = 2 * (j - 1)
        prior = list(range(1, q, 2))
        rows = rows_for(q)
        A = P[:, :, :, q, prior]  # [batch, layer, head, j-1]
        mass = A.sum(dim=-1)
        y_mass.append(_mean_rows(mass, rows))
        prev_y.append(_mean_rows(P[:, :, :, q, q - 1], rows))
        if j >= 3:
            p = A / mass.clamp_min(1e-30)[..., None]
            h = -torch.special.xlogy(p, p).sum(dim=-1) / math.log(j - 1)
            entropy.append(_mean_rows(h, rows))
    y_self = [_mean_rows(P[:, :, :, 2 * j - 1, 2 * j - 1], everyone) for j in range(1, V)]

    def stack_mean(items: list[Tensor]) -> Tensor:
        if not items:
            return torch.full(P.shape[1:3], math.nan, dtype=torch.float64)
        return torch.stack(items).mean(dim=0)

    elim_y_mass, elim_entropy = stack_mean(y_mass), stack_mean(entropy)
    x_prev_y, y_self_mean = stack_mean(prev_y), stack_mean(y_self)

    # duplicate token: last query -> the repeated x (position 2k) and its y (2k + 1)
    nan = torch.full(P.shape[1:3], math.nan, dtype=torch.float64)
    dup_rep, dup_base, src_rep, src_base = nan, nan, nan, nan
    if repeated.any():
        k = source[repeated]
        rows_last = P[repeated][:, :, :, last]  # [n_rep, layer, head, k]
        dup_rep = rows_last[torch.arange(len(k)), :, :, 2 * k].mean(dim=0)
        src_rep = rows_last[torch.arange(len(k)), :, :, 2 * k + 1].mean(dim=0)
        base_last = P[~repeated][:, :, :, last].mean(dim=0)  # [layer, head, k]
        weights = torch.bincount(k, minlength=V - 1).double() / len(k)  # share of each source
        dup_base = (base_last[:, :, 0 : 2 * (V - 1) : 2] * weights).sum(dim=-1)
        src_base = (base_last[:, :, 1 : 2 * (V - 1) : 2] * weights).sum(dim=-1)

    heads = []
    n_layers, n_heads = P.shape[1], P.shape[2]
    for layer in range(n_layers):
        for head in range(n_heads):
            def at(t: Tensor) -> float:
                return float(t[layer, head])

            score = {
                "elim_y_mass": at(elim_y_mass),
                "elim_entropy": at(elim_entropy),
                "elimination_score": at(elim_y_mass) * at(elim_entropy),
                "x_prev_y": at(x_prev_y),
                "y_self": at(y_self_mean),
                "binding_score": (at(x_prev_y) + at(y_self_mean)) / 2,
                "dup_repeated": at(dup_rep),
                "dup_baseline": at(dup_base),
                "duplicate_score": at(dup_rep) - at(dup_base),
                "source_y_repeated": at(src_rep),
                "source_y_baseline": at(src_base),
                "source_y_shift": at(src_rep) - at(src_base),
            }
            matched = _patterns_matched(score, thresholds)
            heads.append(
                HeadScore(
                    layer=layer, head=head, component=_component(layer, head), **score,
                    patterns=matched, attention_role="+".join(matched) or "other",
                )
            )
    return HeadScores(
        model_name=attention.model_name,
        n_samples=attention.n_samples,
        n_repeated=attention.n_repeated,
        thresholds=thresholds,
        heads=tuple(heads),
    )


def head_scores(
    model,
    test_set: Batch | Tensor | None = None,
    *,
    task_config: TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
    thresholds: RoleThresholds | None = None,
    attention: AttentionBySource | None = None,
) -> HeadScores:
    """Elimination, binding and duplicate-token attention scores of every head.

    Definitions in the module docstring (the study's section 08 claims, scored the way Olsson et
    al. 2022 score induction / previous-token heads: attention mass on the hypothesised source).
    Pass ``attention`` (from :func:`attention_by_source`) to reuse a forward pass; otherwise one
    forward over ``test_set`` under ``hooks``.  ``thresholds`` only sets which patterns each
    head is said to match.  ``task_config``, ``n`` and ``seed`` choose the default test set as in
    :func:`attention_by_source`: ``seed`` is the test-set seed (``make_test_set(task, n=n,
    seed=seed)``) and nothing else; all three are unused when ``test_set`` or ``attention`` is
    given.
    """
    thresholds = _check_thresholds(thresholds)
    if attention is not None:
        if not isinstance(attention, AttentionBySource):
            raise TypeError(f"attention must be an AttentionBySource or None, got {type(attention).__name__}")
        config = model_config_of(model)
        expected = (config.n_layers, config.n_heads)
        if tuple(attention.mean_not_repeated.shape[:2]) != expected or attention.V != config.V:
            raise ValueError(
                f"attention has {tuple(attention.mean_not_repeated.shape[:2])} (layers, heads) and V={attention.V}, "
                f"the model {expected} and V={config.V}"
            )
    else:
        attention = attention_by_source(model, test_set, task_config=task_config, hooks=hooks, n=n, seed=seed)
    return _scores(attention, thresholds)


# ----------------------------------------------------------------------------- verdict data


@dataclass(frozen=True)
class HeadRole:
    """The role of one head under the decision mode, with the numbers behind it.

    ``elimination_accuracy`` / ``recall_accuracy`` are the last-step accuracies with the head
    ablated; ``*_retention`` their chance-corrected retention (nan where the baseline lacks the
    capability); ``patch_effect`` the normalised recall restored by patching its clean output
    (nan when not measured); ``joint_elimination_retention`` the elimination retention when every
    head with the eliminator pattern is ablated together (nan unless at least two share it);
    ``recall_signal_retention`` the ablated :func:`recall_signal` over the baseline one (used
    when an ablation breaks elimination and recall together, to tell whether the recall
    mechanism itself is broken).
    """

    layer: int
    head: int
    component: str
    role: str
    attention_role: str
    causal_role: str
    elimination_accuracy: float
    recall_accuracy: float
    elimination_retention: float
    recall_retention: float
    early_mae_increase: float
    loss_increase: float
    patch_effect: float
    patch_ci_low: float
    patch_ci_high: float
    joint_elimination_retention: float
    recall_signal_retention: float
    reason: str


@dataclass(frozen=True)
class MlpRole:
    """The role of one layer's MLP (whole ``hook_mlp_out`` ablated / patched)."""

    layer: int
    component: str
    role: str
    elimination_accuracy: float
    recall_accuracy: float
    elimination_retention: float
    recall_retention: float
    early_mae_increase: float
    loss_increase: float
    patch_effect: float
    patch_ci_low: float
    patch_ci_high: float
    recall_signal_retention: float
    reason: str


@dataclass(frozen=True)
class Claim:
    """One claim of the study, judged on one model.

    ``status`` is under the decision mode; ``status_by_how`` repeats the judgement under every
    ablation mode in the table (a sensitivity check); ``numbers`` are the values quoted in
    ``evidence``.
    """

    claim: str
    statement: str
    status: str
    evidence: str
    numbers: tuple[tuple[str, float], ...]
    status_by_how: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ClaimTable:
    """The claims of one verdict; ``to_dataframe()`` gives one row per claim."""

    model_name: str
    rows: tuple[Claim, ...]

    def to_dataframe(self) -> pd.DataFrame:
        records = []
        for claim in self.rows:
            record = {
                "model": self.model_name,
                "claim": claim.claim,
                "status": claim.status,
                "statement": claim.statement,
                "evidence": claim.evidence,
                "numbers": dict(claim.numbers),
            }
            record.update({f"status_{how}": status for how, status in claim.status_by_how})
            records.append(record)
        return pd.DataFrame(records)

    def get(self, claim: str) -> Claim:
        for row in self.rows:
            if row.claim == claim:
                return row
        raise KeyError(f"no claim {claim!r}; have {[row.claim for row in self.rows]}")

    def status(self, claim: str) -> str:
        return self.get(claim).status

    def __iter__(self) -> Iterator[Claim]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class RoleVerdict:
    """Result of :func:`head_roles` / :func:`judge_roles`.

    ``story_holds`` is True when every claim is supported, False when any is contradicted, None
    otherwise.  ``summary()`` says it in sentences; ``claims.to_dataframe()`` and
    ``to_dataframe()`` (one row per head and MLP) give the numbers.
    """

    model_name: str
    model_config: ModelConfig
    how: str
    thresholds: RoleThresholds
    n_samples: int
    n_repeated: int
    elimination_accuracy: float
    recall_accuracy: float
    probe: tuple[float, ...] | None
    recall_signal: float
    heads: tuple[HeadRole, ...]
    mlps: tuple[MlpRole, ...]
    claims: ClaimTable
    story_holds: bool | None
    scores: HeadScores = field(repr=False)
    ablation: AblationTable = field(repr=False)
    head_patching: PatchingSweep | None = field(default=None, repr=False)
    mlp_patching: PatchingSweep | None = field(default=None, repr=False)
    joint: tuple[AblationRow, ...] = field(default=(), repr=False)
    recall_signals: tuple[tuple[str, str, float], ...] = field(default=(), repr=False)

    def role(self, component: str) -> str:
        """Role of ``"L0H1"`` or ``"L0MLP"``."""
        for item in (*self.heads, *self.mlps):
            if item.component == component:
                return item.role
        raise KeyError(f"no component {component!r} in {self.model_name}")

    def heads_with_role(self, role: str) -> list[str]:
        return [h.component for h in self.heads if h.role == role]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per head and per MLP: role, scores, ablation and patching numbers."""
        rows = []
        for head in self.heads:
            score = self.scores.get(head.layer, head.head)
            record = {"model": self.model_name, "kind": "head", **asdict(head)}
            for name in ("elim_y_mass", "elim_entropy", "elimination_score", "x_prev_y", "y_self",
                         "binding_score", "dup_repeated", "dup_baseline", "duplicate_score", "source_y_shift"):
                record[name] = getattr(score, name)
            rows.append(record)
        for mlp in self.mlps:
            rows.append({"model": self.model_name, "kind": "mlp", "head": None, **asdict(mlp)})
        return pd.DataFrame(rows)

    def summary(self) -> str:
        """The verdict in plain sentences: baseline, each component's role, each claim."""
        config = self.model_config
        lines = [
            f"{self.model_name}: {config.n_layers} layer(s), {config.n_heads} head(s), d_model {config.d_model}; "
            f"{self.n_samples} test sequences ({self.n_repeated} with a repeated last query); decisions use "
            f"{self.how} ablation (chance-corrected retention: destroyed <= {self.thresholds.destroyed}, "
            f"survives >= {self.thresholds.survives}).",
            f"Baseline: elimination {_pct(self.elimination_accuracy)}, recall {_pct(self.recall_accuracy)}"
            + (
                f"; probe [2,4,5,3,4,5,3,2,2]: P(4, recall) = {self.probe[3]:.4f}, P(1, elimination) = {self.probe[0]:.4f}."
                if self.probe is not None and len(self.probe) >= 4
                else "."
            ),
            "Heads:",
        ]
        lines += [f"- {head.component} = {head.role}. {head.reason}" for head in self.heads]
        lines.append("MLP:")
        lines += [f"- {mlp.component} = {mlp.role}. {mlp.reason}" for mlp in self.mlps]
        contradicted = [c for c in self.claims if c.status == "contradicted"]
        if self.story_holds is True:
            lines.append(f"Verdict: the study's story holds for {self.model_name}: every claim below is supported.")
        elif self.story_holds is False:
            lines.append(
                f"Verdict: the study's story does NOT hold for {self.model_name}: "
                + "; ".join(c.evidence.rstrip(".") for c in contradicted)
                + "."
            )
        else:
            lines.append(
                f"Verdict: the study's story is neither confirmed nor refuted for {self.model_name}: "
                "no claim is contradicted, but not every claim is supported."
            )
        lines.append("Claims:")
        for claim in self.claims:
            text = f"- [{claim.status}] {claim.statement} {claim.evidence}"
            others = [f"{how}: {status}" for how, status in claim.status_by_how if how != self.how and status != claim.status]
            if others:
                text += f" (other ablation modes disagree: {', '.join(others)}.)"
            lines.append(text)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ----------------------------------------------------------------------------- decisions


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"


def _num(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def _lt(value: float, bound: float) -> bool:
    return not math.isnan(value) and value < bound


def _ge(value: float, bound: float) -> bool:
    return not math.isnan(value) and value >= bound


def _le(value: float, bound: float) -> bool:
    return not math.isnan(value) and value <= bound


@dataclass(frozen=True)
class _Context:
    V: int
    how: str
    t: RoleThresholds
    base: AblationRow
    recall_present: bool
    elimination_present: bool
    signals: dict[tuple[str, str], float]

    def retention(self, ablated: float, baseline: float) -> float:
        chance = 1 / self.V
        if math.isnan(baseline) or baseline < self.t.incapable:
            return math.nan
        return (ablated - chance) / (baseline - chance)

    def signal_retention(self, component: str) -> float:
        baseline = self.signals.get(("none", "none"), math.nan)
        ablated = self.signals.get((component, self.how), math.nan)
        if not self.recall_present or math.isnan(baseline) or baseline < MIN_RECALL_SIGNAL:
            return math.nan
        return ablated / baseline


MIN_RECALL_SIGNAL = 1.0
"""Baseline :func:`recall_signal` (logits) below which signal retentions are not computed."""


def _effect(sweep: PatchingSweep | None, **where: int) -> tuple[float, float, float]:
    if sweep is None:
        return math.nan, math.nan, math.nan
    try:
        cell = sweep.get(**where)
    except KeyError:
        return math.nan, math.nan, math.nan
    return cell.mean, cell.ci_low, cell.ci_high


def _ablation_sentence(ctx: _Context, row: AblationRow, signal_retention: float) -> str:
    base = ctx.base
    text = (
        f"{ctx.how.capitalize()}-ablating it: elimination {_pct(base.elimination_accuracy)} -> "
        f"{_pct(row.elimination_accuracy)}, recall {_pct(base.recall_accuracy)} -> {_pct(row.recall_accuracy)}, "
        f"steps 1-{ctx.V - 1} MAE {row.early_mae_train - base.early_mae_train:+.3f}, loss {row.loss - base.loss:+.3f}"
    )
    if not math.isnan(signal_retention):
        text += f", recall signal kept {_num(signal_retention)}"
    return text


def _attention_sentence(score: HeadScore) -> str:
    return (
        f"Attention: x queries put {_num(score.elim_y_mass)} of their weight on prior y positions "
        f"(normalised entropy {_num(score.elim_entropy)}); x->preceding y {_num(score.x_prev_y)}, "
        f"y->itself {_num(score.y_self)}; last query->repeated x {_num(score.dup_repeated)} on repeated "
        f"vs {_num(score.dup_baseline)} on new queries (pattern: {score.attention_role})."
    )


def _recall_needed(ctx: _Context, r_ret: float, elim_harmed: bool, signal_ret: float, effect: float) -> tuple[bool, str]:
    """Whether the component is needed for recall, and a note when the call needed the recall signal."""
    t = ctx.t
    if not ctx.recall_present:
        return False, ""
    if _lt(r_ret, t.survives) and not elim_harmed:
        return True, ""
    if _lt(r_ret, t.survives):
        # both capabilities fall: the accuracy cannot tell a broken recall from a broken output
        if math.isnan(signal_ret):
            return True, "Recall and elimination fall together and the recall signal was not measured."
        if signal_ret < t.survives:
            return True, f"The recall signal falls too (kept {_num(signal_ret)}): the recall mechanism needs it."
        return False, (
            f"The recall signal survives (kept {_num(signal_ret)}): the recall accuracy falls only because the "
            "output breaks."
        )
    return _ge(effect, t.patch_restores), ""


def _judge_head(
    ctx: _Context, score: HeadScore, row: AblationRow, patching: PatchingSweep | None, joint: AblationRow | None
) -> HeadRole:
    t, base = ctx.t, ctx.base
    e_ret = ctx.retention(row.elimination_accuracy, base.elimination_accuracy)
    r_ret = ctx.retention(row.recall_accuracy, base.recall_accuracy) if ctx.recall_present else math.nan
    mae_up = row.early_mae_train - base.early_mae_train
    loss_up = row.loss - base.loss
    signal_ret = ctx.signal_retention(score.component)
    effect, low, high = _effect(patching, layer=score.layer, head=score.head) if ctx.recall_present else (math.nan,) * 3
    joint_ret = math.nan
    if joint is not None:
        joint_ret = ctx.retention(joint.elimination_accuracy, base.elimination_accuracy)
    needs_elim = _lt(e_ret, t.survives) or _ge(mae_up, t.mae_increase)
    redundant = not needs_elim and _lt(joint_ret, t.survives)
    needs_recall, note = _recall_needed(ctx, r_ret, needs_elim or redundant, signal_ret, effect)
    if (needs_elim or redundant) and needs_recall:
        causal = "both"
    elif needs_elim or redundant:
        causal = "elimination (redundant)" if redundant else "elimination"
    elif needs_recall:
        causal = "recall"
    else:
        causal = "none"
    matched = score.patterns
    if causal == "both":
        role = "mixed"
    elif causal.startswith("elimination"):
        role = "eliminator" if "eliminator" in matched else "other"
    elif causal == "recall":
        role = "duplicate/recall" if "duplicate" in matched else "binder" if "binder" in matched else "other"
    else:
        role = "unused" if loss_up < t.loss_increase else "minor"
    parts = [_attention_sentence(score), _ablation_sentence(ctx, row, signal_ret) + "."]
    if note:
        parts.append(note)
    if not math.isnan(effect):
        parts.append(f"Patching its clean output restores {_num(effect)} [{_num(low)}, {_num(high)}] of recall.")
    if joint is not None:
        parts.append(
            f"Ablating every head with the eliminator pattern together ({joint.component}): elimination "
            f"{_pct(joint.elimination_accuracy)}."
        )
    parts.append(f"Causally needed for: {causal}.")
    return HeadRole(
        layer=score.layer, head=score.head, component=score.component, role=role,
        attention_role=score.attention_role, causal_role=causal,
        elimination_accuracy=row.elimination_accuracy, recall_accuracy=row.recall_accuracy,
        elimination_retention=e_ret, recall_retention=r_ret, early_mae_increase=mae_up, loss_increase=loss_up,
        patch_effect=effect, patch_ci_low=low, patch_ci_high=high, joint_elimination_retention=joint_ret,
        recall_signal_retention=signal_ret, reason=" ".join(parts),
    )


def _judge_mlp(ctx: _Context, layer: int, row: AblationRow, patching: PatchingSweep | None) -> MlpRole:
    t, base = ctx.t, ctx.base
    component = _component(layer, None)
    e_ret = ctx.retention(row.elimination_accuracy, base.elimination_accuracy)
    r_ret = ctx.retention(row.recall_accuracy, base.recall_accuracy) if ctx.recall_present else math.nan
    mae_up = row.early_mae_train - base.early_mae_train
    loss_up = row.loss - base.loss
    signal_ret = ctx.signal_retention(component)
    effect, low, high = _effect(patching, layer=layer) if ctx.recall_present else (math.nan,) * 3
    elim_harmed = _lt(e_ret, t.survives) or _ge(mae_up, t.mae_increase)
    needs_recall, note = _recall_needed(ctx, r_ret, elim_harmed, signal_ret, math.nan)
    if needs_recall and not elim_harmed:
        role = "completes recall" if _le(r_ret, t.destroyed) else "contributes to recall"
    elif needs_recall:
        role = "needed for both"
    elif elim_harmed:
        role = "needed for elimination"
    else:
        role = "unused" if loss_up < t.loss_increase else "minor"
    reason = _ablation_sentence(ctx, row, signal_ret) + "."
    if note:
        reason += " " + note
    if not math.isnan(effect):
        reason += f" Patching its clean output restores {_num(effect)} [{_num(low)}, {_num(high)}] of recall."
    return MlpRole(
        layer=layer, component=component, role=role,
        elimination_accuracy=row.elimination_accuracy, recall_accuracy=row.recall_accuracy,
        elimination_retention=e_ret, recall_retention=r_ret, early_mae_increase=mae_up, loss_increase=loss_up,
        patch_effect=effect, patch_ci_low=low, patch_ci_high=high, recall_signal_retention=signal_ret,
        reason=reason,
    )


def _or(value: float, default: float) -> float:
    return default if math.isnan(value) else value


def _best(heads: list[HeadRole], scores: dict[str, HeadScore], name: str) -> HeadRole:
    """The head with the largest score ``name`` (nan counts as lowest)."""
    return max(heads, key=lambda h: _or(getattr(scores[h.component], name), -math.inf))


def _claim(claim: str, statement: str, status: str, evidence: str, numbers: dict[str, float]) -> Claim:
    assert status in STATUSES
    return Claim(claim, statement, status, evidence, tuple((k, float(v)) for k, v in numbers.items()), ())


def _capability_claims(ctx: _Context, config: ModelConfig, name: str) -> list[Claim]:
    t, base = ctx.t, ctx.base
    e_acc, r_acc = base.elimination_accuracy, base.recall_accuracy
    claims = []
    if _ge(e_acc, t.capable):
        status, evidence = "supported", f"Elimination accuracy {_pct(e_acc)}."
    elif _lt(e_acc, t.incapable):
        status, evidence = "contradicted", f"{name} does not eliminate: elimination accuracy {_pct(e_acc)}."
    else:
        status, evidence = "inconclusive", f"Elimination accuracy {_pct(e_acc)} (partial)."
    claims.append(_claim(
        "eliminates",
        "The model eliminates: at the last step it answers the one unused value (study sections 07, 10: 100%).",
        status, evidence, {"elimination_accuracy": e_acc},
    ))
    if config.n_heads >= 2:
        if math.isnan(r_acc):
            status, evidence = "inconclusive", "No repeated sequences in the test set."
        elif r_acc >= t.capable:
            status, evidence = "supported", f"Recall accuracy {_pct(r_acc)}."
        elif r_acc < t.incapable:
            status, evidence = "contradicted", f"{name} does not recall: recall accuracy {_pct(r_acc)}."
        else:
            status, evidence = "inconclusive", f"Recall accuracy {_pct(r_acc)} (partial)."
        claims.append(_claim(
            "recalls",
            "The model recalls: when x5 repeats x1 it answers y1, not the unused value (study section 07: 100%).",
            status, evidence, {"recall_accuracy": r_acc},
        ))
    else:
        if config.d_model <= 16:
            statement = (
                f"{name} cannot recall: it falls into the elimination trap (study section 07: P(recall) 0.0002 on "
                "the probe; section 10: 0.01%)."
            )
        else:
            statement = (
                "A one-head model cannot recall: the second head is what enables recall (study section 10, "
                "findings 3 and 5)."
            )
        if math.isnan(r_acc):
            status, evidence = "inconclusive", "No repeated sequences in the test set."
        elif r_acc <= t.recall_absent:
            status, evidence = "supported", f"Recall accuracy {_pct(r_acc)}."
        elif r_acc >= t.incapable:
            status, evidence = "contradicted", f"{name} recalls: recall accuracy {_pct(r_acc)}."
        else:
            status, evidence = "inconclusive", f"Recall accuracy {_pct(r_acc)}: above chance but below {_pct(t.incapable)}."
        claims.append(_claim("no_recall", statement, status, evidence, {"recall_accuracy": r_acc}))
    return claims


def _eliminator_claim(ctx: _Context, heads: list[HeadRole], scores: dict[str, HeadScore], single: bool) -> Claim:
    t = ctx.t
    if single:
        claim, statement = (
            "single_head_accumulates",
            "The single head is a uniform accumulator: x queries spread their attention evenly over the prior y "
            "positions, and the model's elimination needs it (study section 08, d=16 single head).",
        )
    else:
        claim, statement = (
            "eliminator_head",
            "One head eliminates: its x queries spread attention uniformly over the prior y positions, and "
            "ablating it destroys elimination (study section 08, head 1).",
        )
    pattern = [h for h in heads if "eliminator" in scores[h.component].patterns]
    best = _best(heads, scores, "elimination_score")
    best_score = scores[best.component]
    numbers = {"best_elim_y_mass": best_score.elim_y_mass, "best_elim_entropy": best_score.elim_entropy}
    if not pattern:
        return _claim(
            claim, statement, "contradicted",
            f"No head spreads its x-query attention uniformly over the prior ys (closest: {best.component}, y-mass "
            f"{_num(best_score.elim_y_mass)}, entropy {_num(best_score.elim_entropy)}; needs >= "
            f"{t.eliminator_y_mass} and >= {t.eliminator_entropy}).",
            numbers,
        )
    if not ctx.elimination_present:
        return _claim(
            claim, statement, "inconclusive",
            f"{', '.join(h.component for h in pattern)} has the eliminator pattern, but the model does not eliminate "
            f"(accuracy {_pct(ctx.base.elimination_accuracy)}).",
            numbers,
        )
    def strongest(h: HeadRole) -> float:
        values = [v for v in (h.elimination_retention, h.joint_elimination_retention) if not math.isnan(v)]
        return min(values) if values else 2.0

    alone = [h for h in pattern if _le(h.elimination_retention, t.destroyed)]
    chosen = min(alone, key=lambda h: h.elimination_retention) if alone else min(pattern, key=strongest)
    score = scores[chosen.component]
    numbers.update({
        "elim_y_mass": score.elim_y_mass,
        "elim_entropy": score.elim_entropy,
        "ablated_elimination_accuracy": chosen.elimination_accuracy,
        "elimination_retention": chosen.elimination_retention,
        "joint_elimination_retention": chosen.joint_elimination_retention,
        "early_mae_increase": chosen.early_mae_increase,
    })
    description = (
        f"{chosen.component}: x queries put {_num(score.elim_y_mass)} on prior ys, entropy "
        f"{_num(score.elim_entropy)}; {ctx.how}-ablating it leaves elimination at "
        f"{_pct(chosen.elimination_accuracy)} (retention {_num(chosen.elimination_retention)}), steps 1-{ctx.V - 1} "
        f"MAE {chosen.early_mae_increase:+.3f}"
    )
    if alone:
        if chosen.causal_role == "both":
            description += (
                f"; it is needed for recall too (recall {_pct(chosen.recall_accuracy)}, recall signal kept "
                f"{_num(chosen.recall_signal_retention)})"
            )
        return _claim(claim, statement, "supported", description + ".", numbers)
    if _le(chosen.joint_elimination_retention, t.destroyed):
        group = "+".join(h.component for h in pattern)
        return _claim(
            claim, statement, "inconclusive",
            description + f"; elimination is shared by {group}: no single head's ablation destroys it, ablating them "
            f"together does (retention {_num(chosen.joint_elimination_retention)}).",
            numbers,
        )
    if _lt(chosen.elimination_retention, t.survives) or _ge(chosen.early_mae_increase, t.mae_increase):
        return _claim(claim, statement, "inconclusive", description + ": elimination is damaged, not destroyed.", numbers)
    return _claim(
        claim, statement, "inconclusive",
        description + ": the attention pattern is there but elimination does not depend on the head.", numbers,
    )


def _binding_claim(ctx: _Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    t = ctx.t
    statement = (
        "Another head binds: x attends to the immediately preceding y and y attends to itself (study section 08, "
        "head 2), and recall needs that head (section 09)."
    )
    eliminators = {h.component for h in heads if h.role == "eliminator"}
    pattern = [h for h in heads if "binder" in scores[h.component].patterns and h.component not in eliminators]
    best = _best(heads, scores, "binding_score")
    best_score = scores[best.component]
    numbers = {"best_x_prev_y": best_score.x_prev_y, "best_y_self": best_score.y_self}
    if not pattern:
        all_accumulate = all("eliminator" in scores[h.component].patterns for h in heads)
        if all_accumulate:
            detail = ", ".join(
                f"{h.component} y-mass {_num(scores[h.component].elim_y_mass)} entropy {_num(scores[h.component].elim_entropy)}"
                for h in heads
            )
            evidence = f"No binding head: all heads accumulate (every head has the eliminator pattern: {detail})."
        else:
            evidence = (
                f"No binding head (closest: {best.component}, x->preceding y {_num(best_score.x_prev_y)}, y->itself "
                f"{_num(best_score.y_self)}; needs >= {t.binder_x_prev_y} and >= {t.binder_y_self})"
            )
            duplicates = [h.component for h in heads if h.role == "duplicate/recall"]
            if duplicates:
                evidence += f"; recall runs through {', '.join(duplicates)}, a duplicate-token head, instead"
            evidence += "."
        return _claim("binding_head", statement, "contradicted", evidence, numbers)
    chosen = max(pattern, key=lambda h: (h.role == "binder", -_or(h.recall_retention, 2.0)))
    score = scores[chosen.component]
    numbers.update({
        "x_prev_y": score.x_prev_y, "y_self": score.y_self, "ablated_recall_accuracy": chosen.recall_accuracy,
        "recall_retention": chosen.recall_retention, "patch_effect": chosen.patch_effect,
    })
    description = (
        f"{chosen.component}: x->preceding y {_num(score.x_prev_y)}, y->itself {_num(score.y_self)}; "
        f"{ctx.how}-ablating it leaves recall at {_pct(chosen.recall_accuracy)} (retention "
        f"{_num(chosen.recall_retention)}); patching its clean output restores {_num(chosen.patch_effect)} of recall"
    )
    if not ctx.recall_present:
        return _claim(
            "binding_head", statement, "inconclusive",
            f"{chosen.component} binds by attention (x->preceding y {_num(score.x_prev_y)}, y->itself "
            f"{_num(score.y_self)}), but the model does not recall, so recall cannot need it.",
            numbers,
        )
    if _le(chosen.recall_retention, t.destroyed) or _ge(chosen.patch_effect, t.patch_restores):
        return _claim("binding_head", statement, "supported", description + ".", numbers)
    if chosen.role in ("binder", "mixed"):
        return _claim("binding_head", statement, "inconclusive", description + ": recall is damaged, not destroyed.", numbers)
    return _claim(
        "binding_head", statement, "contradicted",
        description + f": {chosen.component} binds by attention but recall does not need it.", numbers,
    )


def _division_claim(ctx: _Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    statement = (
        "The heads divide the labour: one head for elimination, a different head for recall (study section 08; "
        "section 10, findings 3-4)."
    )
    elim = [h for h in heads if h.role == "eliminator"]
    recall = [h for h in heads if h.causal_role == "recall"]
    mixed = [h for h in heads if h.role == "mixed"]
    numbers = {f"{h.component}_elimination_retention": h.elimination_retention for h in heads}
    numbers.update({f"{h.component}_recall_retention": h.recall_retention for h in heads})
    roles = ", ".join(f"{h.component} {h.role}" for h in heads)
    if all("eliminator" in scores[h.component].patterns for h in heads):
        return _claim("division_of_labour", statement, "contradicted",
                      f"All heads accumulate: every head has the eliminator pattern ({roles}).", numbers)
    if not ctx.recall_present:
        return _claim("division_of_labour", statement, "inconclusive",
                      f"The model does not recall, so no head can specialise in recall ({roles}).", numbers)
    if elim and recall and not mixed:
        return _claim("division_of_labour", statement, "supported", f"Roles: {roles}.", numbers)
    if mixed and not (elim and recall):
        return _claim("division_of_labour", statement, "contradicted",
                      f"No split: {', '.join(h.component for h in mixed)} is needed for both elimination and recall "
                      f"({roles}).", numbers)
    if not recall and not mixed:
        return _claim("division_of_labour", statement, "contradicted",
                      f"No head is needed for recall on its own ({roles}).", numbers)
    return _claim("division_of_labour", statement, "inconclusive", f"Roles: {roles}.", numbers)


def _ffn_claim(ctx: _Context, mlps: list[MlpRole]) -> Claim:
    t = ctx.t
    statement = (
        "The FFN completes recall: without the MLP the model cannot recall, while attention alone keeps "
        "eliminating (study section 09; section 10, finding 5)."
    )
    mlp = min(mlps, key=lambda m: m.recall_retention if not math.isnan(m.recall_retention) else 2.0)
    numbers = {
        "ablated_recall_accuracy": mlp.recall_accuracy, "recall_retention": mlp.recall_retention,
        "ablated_elimination_accuracy": mlp.elimination_accuracy, "elimination_retention": mlp.elimination_retention,
        "recall_signal_retention": mlp.recall_signal_retention, "patch_effect": mlp.patch_effect,
    }
    base = ctx.base
    text = (
        f"{ctx.how.capitalize()}-ablating {mlp.component}: recall {_pct(base.recall_accuracy)} -> "
        f"{_pct(mlp.recall_accuracy)}, elimination {_pct(base.elimination_accuracy)} -> {_pct(mlp.elimination_accuracy)}"
    )
    if not math.isnan(mlp.recall_signal_retention):
        text += f", recall signal kept {_num(mlp.recall_signal_retention)}"
    if not math.isnan(mlp.patch_effect):
        text += f"; patching its clean output restores {_num(mlp.patch_effect)} of recall"
    if not ctx.recall_present:
        return _claim("ffn_completes_recall", statement, "inconclusive",
                      f"The model does not recall (recall {_pct(base.recall_accuracy)}): there is no recall to complete.",
                      numbers)
    if mlp.role == "completes recall":
        return _claim("ffn_completes_recall", statement, "supported", text + ".", numbers)
    if mlp.role == "needed for both" and _le(mlp.recall_signal_retention, t.destroyed):
        return _claim(
            "ffn_completes_recall", statement, "supported",
            text + ": recall needs the MLP (its signal is gone), though elimination needs it too.", numbers,
        )
    if not any(m.role in ("completes recall", "contributes to recall", "needed for both") for m in mlps):
        return _claim("ffn_completes_recall", statement, "contradicted",
                      f"Recall survives MLP ablation: the FFN does not decode ({text}).", numbers)
    if mlp.role == "needed for both":
        return _claim("ffn_completes_recall", statement, "inconclusive",
                      text + ": the MLP is needed for elimination too, and the recall signal was not shown to vanish.",
                      numbers)
    return _claim("ffn_completes_recall", statement, "inconclusive", text + ": recall is damaged, not destroyed.", numbers)


def _lookup_claim(ctx: _Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    t = ctx.t
    statement = (
        "Attention does not look up the repeated query: x tokens attend to the preceding y, not to the earlier x1; "
        "the lookup happens in the FFN (study section 09)."
    )
    best = _best(heads, scores, "duplicate_score")
    score = scores[best.component]
    numbers = {"max_duplicate_score": score.duplicate_score, "dup_repeated": score.dup_repeated,
               "dup_baseline": score.dup_baseline}
    if math.isnan(score.duplicate_score):
        return _claim("no_attention_lookup", statement, "inconclusive", "No repeated sequences in the test set.", numbers)
    if not ctx.recall_present:
        return _claim("no_attention_lookup", statement, "inconclusive",
                      f"The model does not recall (recall {_pct(ctx.base.recall_accuracy)}), so there is no lookup to "
                      f"locate (largest duplicate-token rise: {best.component} {score.duplicate_score:+.2f}).", numbers)
    dup_text = (
        f"{best.component}: the last query puts {_num(score.dup_repeated)} of its attention on the x it repeats, vs "
        f"{_num(score.dup_baseline)} on the same positions when it is new"
    )
    if "duplicate" not in score.patterns:
        return _claim("no_attention_lookup", statement, "supported",
                      f"No duplicate-token head (largest rise {dup_text}; threshold +{t.duplicate_score}).", numbers)
    numbers.update({"recall_retention": best.recall_retention, "patch_effect": best.patch_effect})
    if best.causal_role in ("recall", "both"):
        return _claim(
            "no_attention_lookup", statement, "contradicted",
            f"Attention looks up the repeated x: {best.component} is a duplicate-token head ({dup_text}) and recall "
            f"needs it ({ctx.how}-ablated recall {_pct(best.recall_accuracy)}, patching restores {_num(best.patch_effect)}).",
            numbers,
        )
    return _claim("no_attention_lookup", statement, "inconclusive",
                  f"{dup_text}, but recall does not need {best.component}.", numbers)


def _assess(
    scores: HeadScores,
    ablation: AblationTable,
    config: ModelConfig,
    how: str,
    t: RoleThresholds,
    head_patching: PatchingSweep | None,
    mlp_patching: PatchingSweep | None,
    joint: tuple[AblationRow, ...],
    signals: dict[tuple[str, str], float],
) -> tuple[list[HeadRole], list[MlpRole], list[Claim]]:
    base = ablation.baseline
    ctx = _Context(
        V=config.V, how=how, t=t, base=base,
        recall_present=_ge(base.recall_accuracy, t.incapable),
        elimination_present=_ge(base.elimination_accuracy, t.incapable),
        signals=signals,
    )
    joint_row = next((row for row in joint if row.how == how), None)
    joint_members = set(joint_row.component.split("+")) if joint_row is not None else set()
    heads = [
        _judge_head(ctx, score, ablation.get(score.component, how), head_patching,
                    joint_row if score.component in joint_members else None)
        for score in scores.heads
    ]
    mlps = [_judge_mlp(ctx, layer, ablation.get(_component(layer, None), how), mlp_patching)
            for layer in range(config.n_layers)]
    by_name = {score.component: score for score in scores.heads}
    name = config.name
    claims = _capability_claims(ctx, config, name)
    if config.n_heads == 1 and config.n_layers == 1:
        claims.append(_eliminator_claim(ctx, heads, by_name, single=True))
    else:
        claims.append(_eliminator_claim(ctx, heads, by_name, single=False))
        claims.append(_binding_claim(ctx, heads, by_name))
        claims.append(_division_claim(ctx, heads, by_name))
        claims.append(_ffn_claim(ctx, mlps))
        claims.append(_lookup_claim(ctx, heads, by_name))
    return heads, mlps, claims


def judge_roles(
    scores: HeadScores,
    ablation: AblationTable,
    *,
    model_config: ModelConfig,
    how: str = "mean",
    head_patching: PatchingSweep | None = None,
    mlp_patching: PatchingSweep | None = None,
    joint: Sequence[AblationRow] = (),
    recall_signals: Mapping[tuple[str, str], float] | None = None,
    probe: Sequence[float] | None = None,
    thresholds: RoleThresholds | None = None,
) -> RoleVerdict:
    """The verdict from precomputed evidence (the decision step of :func:`head_roles`).

    Args:
        scores: :func:`head_scores` of the model (its ``thresholds`` are not reused; pass
            ``thresholds`` here).
        ablation: an :class:`~perm_circuits.analysis.ablation.AblationTable` with a ``"none"``
            baseline and a row per head (``"L{l}H{h}"``) and MLP (``"L{l}MLP"``) under ``how``;
            every other mode in it is judged too, for ``Claim.status_by_how``.
        head_patching: per-head recall patching (``patch_head_outputs``); None = not measured.
        mlp_patching: per-layer MLP recall patching (``patch_mlp``); None = not measured.
        joint: ablation rows of several heads ablated together, ``component`` = their names
            joined by ``+`` (used for heads sharing the eliminator pattern), one per mode.
        recall_signals: :func:`recall_signal` per ``(component, how)``, with the baseline under
            ``("none", "none")``; missing entries count as not measured (an ablation that breaks
            elimination and recall together is then taken to break recall).
        probe: P(y = 1..V) on the study's probe, quoted in the summary.
    """
    t = _check_thresholds(thresholds)
    if not isinstance(scores, HeadScores):
        raise TypeError(f"scores must be HeadScores, got {type(scores).__name__}")
    if not isinstance(ablation, AblationTable):
        raise TypeError(f"ablation must be an AblationTable, got {type(ablation).__name__}")
    if not isinstance(model_config, ModelConfig):
        raise TypeError(f"model_config must be a ModelConfig, got {type(model_config).__name__}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    for sweep, label in ((head_patching, "head_patching"), (mlp_patching, "mlp_patching")):
        if sweep is not None and not isinstance(sweep, PatchingSweep):
            raise TypeError(f"{label} must be a PatchingSweep or None, got {type(sweep).__name__}")
    joint = tuple(joint)
    if not all(isinstance(row, AblationRow) for row in joint):
        raise TypeError("joint must be a sequence of AblationRow")
    signals = dict(recall_signals or {})
    for key, value in signals.items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)):
            raise TypeError(f"recall_signals keys must be (component, how) pairs, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"recall_signals[{key!r}] must be a float, got {value!r}")
    expected = {(l, h) for l in range(model_config.n_layers) for h in range(model_config.n_heads)}
    if {(s.layer, s.head) for s in scores.heads} != expected:
        raise ValueError(f"scores cover heads {sorted((s.layer, s.head) for s in scores.heads)}, "
                         f"the model has {sorted(expected)}")
    hows = [h for h in dict.fromkeys(row.how for row in ablation.rows) if h != "none"]
    try:
        ablation.baseline
        for h in [how] + hows:
            for score in scores.heads:
                ablation.get(score.component, h)
            for layer in range(model_config.n_layers):
                ablation.get(_component(layer, None), h)
    except KeyError as error:
        raise ValueError(f"the ablation table lacks a row the verdict needs: {error}") from None

    heads, mlps, claims = _assess(scores, ablation, model_config, how, t, head_patching, mlp_patching, joint, signals)
    by_how: dict[str, dict[str, str]] = {}
    for other in hows:
        _, _, other_claims = _assess(scores, ablation, model_config, other, t, head_patching, mlp_patching, joint,
                                     signals)
        by_how[other] = {c.claim: c.status for c in other_claims}
    claims = [
        replace(c, status_by_how=tuple((h, by_how[h].get(c.claim, "inconclusive")) for h in hows)) for c in claims
    ]
    statuses = {c.status for c in claims}
    story = False if "contradicted" in statuses else True if statuses == {"supported"} else None
    base = ablation.baseline
    return RoleVerdict(
        model_name=model_config.name,
        model_config=model_config,
        how=how,
        thresholds=t,
        n_samples=ablation.n_samples,
        n_repeated=ablation.n_recall,
        elimination_accuracy=base.elimination_accuracy,
        recall_accuracy=base.recall_accuracy,
        probe=tuple(float(p) for p in probe) if probe is not None else None,
        recall_signal=float(signals.get(("none", "none"), math.nan)),
        heads=tuple(heads),
        mlps=tuple(mlps),
        claims=ClaimTable(model_config.name, tuple(claims)),
        story_holds=story,
        scores=scores,
        ablation=ablation,
        head_patching=head_patching,
        mlp_patching=mlp_patching,
        joint=joint,
        recall_signals=tuple((c, h, float(v)) for (c, h), v in signals.items()),
    )


# ----------------------------------------------------------------------------- head_roles


def _ablated_logits(model, batch: Batch, hooks: HookList, extra: HookList) -> Tensor:
    with torch.no_grad(), model.hooks(fwd_hooks=list(hooks) + list(extra)):
        return model(batch.inputs)


def _joint_rows(
    model, scores: HeadScores, batch: Batch, config: TaskConfig, hows: Sequence[str], hooks: HookList, seed: int
) -> tuple[tuple[AblationRow, ...], dict[tuple[str, str], float]]:
    """Ablate every head with the eliminator pattern together, under each mode (if >= 2 share it)."""
    group = [s for s in scores.heads if "eliminator" in s.patterns]
    if len(group) < 2:
        return (), {}
    posteriors = (bayes_posterior(batch.inputs, config, "uniform"), bayes_posterior(batch.inputs, config, "train"))
    component = "+".join(s.component for s in group)
    rows, signals = [], {}
    for how in hows:
        extra: HookList = []
        for s in group:
            extra += ablate_head(model, s.layer, s.head, how, reference=batch, seed=seed, hooks=hooks)
        logits = _ablated_logits(model, batch, hooks, extra)
        signals[(component, how)] = recall_signal(logits, batch.inputs)
        evaluation = evaluate_logits(logits, batch, config, posteriors=posteriors)
        memorization = evaluation.memorization
        rows.append(AblationRow(
            component=component, how=how, layer=group[0].layer, head=None,
            elimination_accuracy=evaluation.elimination.accuracy, recall_accuracy=evaluation.recall_accuracy,
            early_mae_train=evaluation.early_mae_train, loss=evaluation.test_loss,
            elimination_loss=evaluation.elimination.loss,
            recall_loss=memorization.loss if memorization is not None else math.nan,
        ))
    return tuple(rows), signals


def _recall_signals(
    model, batch: Batch, hows: Sequence[str], hooks: HookList, seed: int
) -> dict[tuple[str, str], float]:
    """:func:`recall_signal` of the baseline and of every head / MLP ablation (the ablation table's hooks)."""
    config = model_config_of(model)
    signals = {("none", "none"): recall_signal(_ablated_logits(model, batch, hooks, []), batch.inputs)}
    for how in hows:
        for layer in range(config.n_layers):
            for head in range(config.n_heads):
                extra = ablate_head(model, layer, head, how, reference=batch, seed=seed, hooks=hooks)
                signals[(_component(layer, head), how)] = recall_signal(
                    _ablated_logits(model, batch, hooks, extra), batch.inputs
                )
            extra = ablate_mlp(model, layer, how, reference=batch, seed=seed, hooks=hooks)
            signals[(_component(layer, None), how)] = recall_signal(
                _ablated_logits(model, batch, hooks, extra), batch.inputs
            )
    return signals


def head_roles(
    model,
    test_set: Batch | None = None,
    *,
    how: str = "mean",
    hows: Sequence[str] = HOWS,
    task_config: TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
    n_pair: int = 2000,
    pair_seed: int = 0,
    n_boot: int = 1000,
    ablation_seed: int = 0,
    thresholds: RoleThresholds | None = None,
    probe: bool = True,
) -> RoleVerdict:
    """Assign every head and MLP a role and judge the study's story on ``model``.

    Measures, all vectorized over the batch (one forward per intervention):

    1. :func:`head_scores` on ``test_set`` (one forward);
    2. :func:`~perm_circuits.analysis.ablation.ablation_table` under every mode in ``hows``
       (reference = the test set itself), plus a joint ablation of the heads sharing the
       eliminator pattern when there are several;
    3. when the model recalls (baseline recall >= ``thresholds.incapable``):
       :func:`~perm_circuits.analysis.patching.patch_head_outputs` and
       :func:`~perm_circuits.analysis.patching.patch_mlp` (clean -> corrupted recall patching on
       ``n_pair`` pairs from ``patching_pair(task, n_pair, pair_seed)`` -- ``task`` being
       ``task_config`` when given, else the model's task -- and ``n_boot`` bootstrap resamples
       seeded with ``pair_seed``) and the :func:`recall_signal` of the baseline and of every ablation (the
       ablation table's hooks again, one forward each);
    4. the probe's probabilities (V = 5);

    then :func:`judge_roles` under ``how``.  Works for any model (1-head models get the study's
    d16h1 claims, multi-head models the d32h2 ones).

    Args:
        test_set: default ``make_test_set(task, n=n, seed=seed)`` of ``task_config`` (default:
            the model's task), with the study's repeat ratio 0.3 when the task has none.
        how: the ablation mode the decisions use; must be in ``hows``.
        task_config: the task of the default test set *and* of the patching pairs (default:
            ``task_config_of(model)``); must have the model's V.
        seed: the seed of the default test set only (``make_test_set(task, n=n, seed=seed)``);
            unused when ``test_set`` is given.  The other measurements have their own seeds.
        n_pair: number of patching pairs.
        pair_seed: the seed of the patching pairs (``patching_pair(task, n_pair, pair_seed)``)
            and of the patching bootstrap.
        n_boot: bootstrap resamples of the patching confidence intervals.
        hooks: an intervention applied in every run (the verdict of the intervened model); it
            must work on any batch, as it also runs on the patching pairs (and the probe).
        ablation_seed: the resample-ablation seed (which reference sample replaces each test
            sample under ``"resample"``), used by the ablation table, the joint ablation and the
            recall signals; the ``"mean"`` reference is the test set itself.
        probe: also run the study's probe sequence (a batch of one) under ``hooks``; turn off for
            hooks tied to the test set's batch size.
    """
    thresholds = _check_thresholds(thresholds)
    if isinstance(hows, str) or not isinstance(hows, (list, tuple)) or not hows:
        raise TypeError(f"hows must be a non-empty sequence of modes from {HOWS}, got {hows!r}")
    bad = [h for h in hows if h not in HOWS]
    if bad:
        raise ValueError(f"hows must be modes from {HOWS}, got {bad}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    if how not in hows:
        raise ValueError(f"how={how!r} must be one of hows={tuple(hows)}")
    if not isinstance(probe, bool):
        raise TypeError(f"probe must be a bool, got {probe!r}")
    for name, value, minimum in (("n_pair", n_pair, 2), ("pair_seed", pair_seed, 0), ("n_boot", n_boot, 10),
                                 ("ablation_seed", ablation_seed, 0)):
        check_int(name, value, minimum)
    batch, config = _resolve_batch(model, test_set, task_config, n, seed)
    hooks = check_hooks(model, hooks)
    model_config = model_config_of(model)

    attention = attention_by_source(model, batch, task_config=config, hooks=hooks)
    scores = _scores(attention, thresholds)
    ablation = ablation_table(model, hows=tuple(hows), test_set=batch, task_config=config, hooks=hooks,
                              seed=ablation_seed)
    joint, joint_signals = _joint_rows(model, scores, batch, config, hows, hooks, ablation_seed)
    head_patching = mlp_patching = None
    signals: dict[tuple[str, str], float] = {}
    if _ge(ablation.baseline.recall_accuracy, thresholds.incapable):
        options = dict(hooks=hooks, n=n_pair, seed=pair_seed, n_boot=n_boot, task_config=config)
        head_patching = patch_head_outputs(model, **options)
        mlp_patching = patch_mlp(model, **options)
        signals = {**_recall_signals(model, batch, hows, hooks, ablation_seed), **joint_signals}
    probs = probe_probabilities(model, hooks).tolist() if probe and model_config.V == 5 else None
    return judge_roles(
        scores, ablation, model_config=model_config, how=how, head_patching=head_patching,
        mlp_patching=mlp_patching, joint=joint, recall_signals=signals, probe=probs, thresholds=thresholds,
    )
