"""Attention scores of every head: where it attends, per source position, and how well it matches
the study's hypothesised patterns (the first step of :func:`~perm_circuits.analysis.study.verdict.head_roles`).
Heads are scored by the attention mass on a hypothesised source, as Olsson et al. 2022 ("In-context
Learning and Induction Heads") and Wang et al. 2022 ("Interpretability in the Wild") do:

- elimination: ``elim_y_mass``, the mass of x queries ``x2..xV`` on the prior y positions, and
  ``elim_entropy``, the entropy of that attention renormalised over the prior ys, divided by
  ``log(#prior ys)``, per sample, averaged over ``x3..xV`` (for ``x2`` it is 0/0);
  ``elimination_score = elim_y_mass * elim_entropy`` (1 for a perfect uniform accumulator);
- binding: ``x_prev_y``, the mass of ``x_j`` (``j = 2..V``) on ``y_{j-1}``, and ``y_self``, the mass
  of ``y_j`` (``j = 1..V-1``) on itself; ``binding_score`` is their mean;
- duplicate token: ``dup_repeated``, the mass of the last query on the position of the earlier
  x it repeats, on repeated sequences, and ``dup_baseline``, the mass on the same positions on
  sequences whose last query is new; ``duplicate_score`` is the difference.
  ``source_y_*``: the same for the y that follows the repeated x (the recall answer).

The last query counts towards the elimination and binding scores on non-repeated sequences only (on
repeated ones elimination is the wrong algorithm); earlier queries on every sequence.

Nothing here prints; every function validates its arguments before any forward pass and leaves
no hooks on the model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_index, check_int, check_seed, check_task_config, resolve_task, task_test_set
from perm_circuits.checks import check_number
from perm_circuits.circuit import Node
from perm_circuits.devices import model_device
from perm_circuits.analysis.probes.task_attribution import AttentionScores, attention_patterns, attention_scores
from perm_circuits.hooks import check_hooks, check_token_ids, run_capture
from perm_circuits.model_shape import model_shape
from perm_circuits.models import bridge_task, model_config_of
from perm_circuits.tasks.base import Task, TaskBatch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set, permutation_batch, repeat_source_of, validate_tokens

__all__ = [
    "DEFAULT_THRESHOLDS", "AttentionBySource", "HeadScore", "HeadScores", "RoleThresholds", "attention_by_source",
    "head_scores", "recall_signal", "repeat_source_of",
]

STUDY_REPEAT_RATIO = 0.3
"""Repeat ratio of the study's repeated training set; used for the default test set when the
model's own task has none, so that recall can always be measured."""


@dataclass(frozen=True)
class RoleThresholds:
    """Every threshold the verdict uses (the rules are in :mod:`~perm_circuits.analysis.study.roles`).

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
            if math.isnan(check_number(f"threshold {item.name}", getattr(self, item.name), finite=False)):
                raise ValueError(f"threshold {item.name} must be a number, got nan")
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


def check_thresholds(thresholds: object) -> RoleThresholds:
    if thresholds is None:
        return DEFAULT_THRESHOLDS
    if not isinstance(thresholds, RoleThresholds):
        raise TypeError(f"thresholds must be a RoleThresholds or None, got {type(thresholds).__name__}")
    return thresholds


def _default_task(model, task: object) -> TaskConfig:
    config = check_task_config(model, task, "task")
    if config.repeat_ratio == 0:
        config = replace(config, repeat_ratio=STUDY_REPEAT_RATIO)
    return config


def resolve_batch(model, test_set: object, task: object, n: int, seed: int) -> tuple[TaskBatch, TaskConfig]:
    """The study's batch and task settings: ``test_set`` (a TaskBatch) or ``make_test_set`` of ``task``
    (a PermutationTask or TaskConfig, default the model's; with the study's repeat ratio where it has none)."""
    config = _default_task(model, task)
    check_int("n", n, 1)
    check_seed(check_int("seed", seed, 0))
    if test_set is None:
        return make_test_set(config, n=n, seed=seed).to(model_device(model)), config
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch or None, "
                        f"got {type(test_set).__name__}")
    validate_tokens(test_set.tokens, model_config_of(model).V)
    return permutation_batch(test_set).to(model_device(model)), config  # once: every run on it stays on the model's device


def _resolve_tokens(model, test_set: object, task: object, n: int, seed: int) -> Tensor:
    if isinstance(test_set, Tensor):
        _default_task(model, task)
        return validate_tokens(test_set, model_config_of(model).V).to(model_device(model))
    return resolve_batch(model, test_set, task, n, seed)[0].tokens


def recall_signal(logits: Float[Tensor, "batch seq vocab"], inputs: Int[Tensor, "batch seq"]) -> float:
    """How much more the model favours the repeated query's earlier answer when the query repeats.

    At the last position, the margin of each used value ``y_k`` (``k < V``) is its logit minus the
    mean logit of the other used values; the signal is the mean margin of the recall answer ``y_{s+1}``
    on repeated sequences (``s``: the repeated query's index) minus that of the same index on sequences
    whose last query is new (weighted like the repeated ones' sources). Recall in logits, independent
    of elimination (which only separates used from unused values), so the verdict can tell a broken
    recall from a broken output; nan without both kinds of sequence or with ``V < 3``.
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


def label_of(layer: int, head: int | None) -> str:
    return str(Node(layer, head))


@dataclass(frozen=True)
class AttentionBySource:
    """Mean attention of every query on every source position, per (layer, head).

    ``mean_not_repeated`` / ``mean_repeated``: the mean pattern over sequences whose last query is
    new / repeats an earlier one (nan where there are none); ``patterns``: every sample's pattern;
    ``source``: per sample, the 0-based index of the repeated query, -1 if none (:func:`repeat_source_of`).
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
            for layer, head, q in itertools.product(range(n_layers), range(n_heads), range(seq)):
                rows += [{"group": group, "n": count, "layer": layer, "head": head,
                          "component": label_of(layer, head), "query_pos": q, "query": _position_label(q),
                          "source_pos": k, "source": _position_label(k), "attention": values[layer][head][q][k]}
                         for k in range(q + 1)]
        return pd.DataFrame(rows)


def attention_by_source(
    model,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: PermutationTask | TaskConfig | None = None,
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
        test_set: a TaskBatch or a token tensor ``[batch, 2V-1]``; default ``make_test_set`` of the
            model's task (with the study's repeat ratio 0.3 when that task has none), ``n``
            samples, ``seed``.
        task: the study's task of the default test set (a PermutationTask or its TaskConfig; default:
            the model's task).
        hooks: a TransformerLens hook list applied during the forward pass.
        n: size of the default test set (unused when ``test_set`` is given).
        seed: the seed of the default test set only (``make_test_set(task, n=n, seed=seed)``);
            unused when ``test_set`` is given.  Nothing else here is random.
    """
    tokens = _resolve_tokens(model, test_set, task, n, seed)
    hooks = check_hooks(model, hooks)
    config = model_config_of(model)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(config.n_layers)]
    store = run_capture(model, tokens, names, hooks)[1]
    patterns = torch.stack([store[name].float() for name in names], dim=1)  # [batch, layer, head, q, k]
    source = repeat_source_of(tokens)
    repeated = source >= 0
    return AttentionBySource(model_name=config.name, V=config.V, n_samples=len(tokens), n_repeated=int(repeated.sum()),
        mean_not_repeated=_mean_rows(patterns, ~repeated), mean_repeated=_mean_rows(patterns, repeated),
        patterns=patterns, source=source)


@dataclass(frozen=True)
class HeadScore:
    """Attention scores of one head (definitions in the module docstring); ``patterns``: those it
    matches (``"eliminator"``, ``"binder"``, ``"duplicate"``), joined by ``+`` in ``attention_role``
    (``"other"`` when none)."""

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
    """Mean over the selected batch rows of ``values [batch, ...]`` (nan, of the same dtype, if none)."""
    if not rows.any():
        return torch.full(values.shape[1:], math.nan, dtype=values.dtype, device=values.device)
    return values[rows].mean(dim=0)


def _patterns_matched(score: dict, t: RoleThresholds) -> tuple[str, ...]:
    matches = {
        "eliminator": score["elim_y_mass"] >= t.eliminator_y_mass and score["elim_entropy"] >= t.eliminator_entropy,
        "binder": score["x_prev_y"] >= t.binder_x_prev_y and score["y_self"] >= t.binder_y_self,
        "duplicate": score["duplicate_score"] >= t.duplicate_score,
    }
    return tuple(name for name, ok in matches.items() if ok)


def head_score_rows(attention: AttentionBySource, thresholds: RoleThresholds) -> HeadScores:
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

    y_mass, entropy, prev_y = [], [], []
    for j in range(2, V + 1):  # x_j at position 2(j-1)
        q = 2 * (j - 1)
        prior = list(range(1, q, 2))
        rows = ~repeated if q == last else everyone  # the last query: non-repeated sequences only
        A = P[:, :, :, q, prior]  # [batch, layer, head, j-1]
        mass = A.sum(dim=-1)
        y_mass.append(_mean_rows(mass, rows))
        prev_y.append(_mean_rows(P[:, :, :, q, q - 1], rows))
        if j >= 3:
            p = A / mass.clamp_min(1e-30)[..., None]
            h = -torch.special.xlogy(p, p).sum(dim=-1) / math.log(j - 1)
            entropy.append(_mean_rows(h, rows))
    y_self = [_mean_rows(P[:, :, :, 2 * j - 1, 2 * j - 1], everyone) for j in range(1, V)]

    nan = torch.full(P.shape[1:3], math.nan, dtype=torch.float64, device=P.device)

    def stack_mean(items: list[Tensor]) -> Tensor:
        return torch.stack(items).mean(dim=0) if items else nan

    elim_y_mass, elim_entropy = stack_mean(y_mass), stack_mean(entropy)
    x_prev_y, y_self_mean = stack_mean(prev_y), stack_mean(y_self)

    # duplicate token: last query -> the repeated x (position 2k) and its y (2k + 1)
    dup_rep, dup_base, src_rep, src_base = nan, nan, nan, nan
    if repeated.any():
        k = source[repeated]
        rows_last = P[repeated][:, :, :, last]  # [n_rep, layer, head, k]
        sample = torch.arange(len(k), device=k.device)
        dup_rep = rows_last[sample, :, :, 2 * k].mean(dim=0)
        src_rep = rows_last[sample, :, :, 2 * k + 1].mean(dim=0)
        base_last = P[~repeated][:, :, :, last].mean(dim=0)  # [layer, head, k]
        weights = torch.bincount(k, minlength=V - 1).double() / len(k)  # share of each source
        dup_base = (base_last[:, :, 0 : 2 * (V - 1) : 2] * weights).sum(dim=-1)
        src_base = (base_last[:, :, 1 : 2 * (V - 1) : 2] * weights).sum(dim=-1)

    heads = []
    for layer, head in itertools.product(range(P.shape[1]), range(P.shape[2])):
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
        heads.append(HeadScore(layer=layer, head=head, component=label_of(layer, head), **score, patterns=matched,
                               attention_role="+".join(matched) or "other"))
    return HeadScores(model_name=attention.model_name, n_samples=attention.n_samples, n_repeated=attention.n_repeated,
        thresholds=thresholds, heads=tuple(heads))


def head_scores(
    model,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
    thresholds: RoleThresholds | None = None,
    attention: AttentionBySource | None = None,
) -> HeadScores | AttentionScores:
    """Elimination, binding and duplicate-token attention scores of every head (the study's section
    08 claims; definitions in the module docstring).

    ``task``: which task (default the model's own).  On a study bridge a
    :class:`~perm_circuits.tasks.PermutationTask` or its bare ``TaskConfig`` both mean the study's scores
    on that task's default test set.  On any other task (a non-permutation ``task``, or a model that is
    not a study bridge): the general :class:`~perm_circuits.analysis.probes.task_attribution.AttentionScores`
    (each head's attention to itself, the previous position and position 0) on ``test_set``
    (a TaskBatch or token ids; default ``task.test_set(n, seed)``) under ``hooks``; the study's
    options (``thresholds``, ``attention``) are refused there.  Token ids on a
    study bridge keep the study's scores.

    Pass ``attention`` (from :func:`attention_by_source`) to reuse a forward pass; otherwise one
    forward over ``test_set`` under ``hooks`` (``task``, ``n``, ``seed``: the default test set,
    as in :func:`attention_by_source`; ``seed`` is the test-set seed and nothing else).
    ``thresholds`` only sets which patterns each head matches.
    """
    task, config = resolve_task(model, task)
    if task is not None or bridge_task(model) is None:
        return _task_head_scores(model, test_set, task, hooks, n, seed,
                                 {"thresholds": thresholds, "attention": attention})
    thresholds = check_thresholds(thresholds)
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
        attention = attention_by_source(model, test_set, task=config, hooks=hooks, n=n, seed=seed)
    return head_score_rows(attention, thresholds)


def _task_head_scores(model, test_set, task, hooks, n: int, seed: int, study_options: dict) -> AttentionScores:
    """:func:`head_scores` on any task: the general attention scores (validated before the forward)."""
    given = [name for name, value in study_options.items() if value is not None]
    if given:
        raise ValueError(f"{given} are the permutation study's options; on any task head_scores gives "
                         "attention_scores (self / previous / first position)")
    test_set = task_test_set(model, task, test_set, n, seed, hint="or test_set= (a TaskBatch or token ids)")
    tokens = test_set.tokens if isinstance(test_set, TaskBatch) else test_set  # task_test_set checked the type
    check_token_ids(tokens, model_shape(model).d_vocab)
    hooks = check_hooks(model, hooks)
    with model.hooks(fwd_hooks=hooks):
        return attention_scores(attention_patterns(model, tokens))
