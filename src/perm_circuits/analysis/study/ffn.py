"""The MLP as a key-value memory (Geva et al. 2021, "Transformer Feed-Forward Layers Are
Key-Value Memories"), and how often it changes the model's prediction.

Key-value view of neuron ``n`` of layer ``l``: its *key* is column ``W_in[l][:, n]``, its
*coefficient* on an input is the activation ``blocks.l.mlp.hook_post[..., n]`` and its *value* is row
``W_out[l][n]``.  :func:`ffn_key_value_probe`:

1. **Enumerates** every x-position input of the task instead of sampling (:func:`enumerate_sequences`,
   plain and repeated), one forward pass, and keeps each distinct prefix ``x1 y1 .. x_k`` once (a
   *trigger*, :class:`TriggerSet`).
2. Ranks the triggers by each neuron's coefficient; the ``top_k`` with a positive coefficient are
   its *top triggers*, summarised by the pattern ``(position, query token, set of used y values,
   repeated or not)`` and by each of those attributes alone.
3. Projects the value through the unembedding to the value tokens ``1..V``: ``W_out[n] @ C diag(w_lnf)
   W_U`` (:func:`~perm_circuits.analysis.probes.memory.effective_unembed`), times the mean of
   ``coefficient / ln_final scale`` over the top triggers — i.e. the neuron's *actual* mean direct
   effect on the logits when it fires on its triggers.  **ln_final scaling**: centring and the
   LayerNorm weight are applied (they change the direction, hence the ranking of tokens); the
   per-position ``1/scale`` is the cached ``ln_final.hook_scale`` at each trigger, a positive number
   that sets the distribution's temperature only — the value's top token does not depend on it.
4. **Agreement** (Geva et al. 2021, section 4): the fraction of a neuron's top triggers whose correct
   y equals the value's top token; chance is ``1/V``.  Before the last step a prefix does not
   determine its y, so each trigger counts with ``P(correct y = value top | prefix)`` over the
   enumerated sequences sharing it (:attr:`TriggerSet.target_probs`; 0 or 1 at the last step).
   ``suppress_used`` is the elimination analogue: the fraction of top triggers for which the
   value's *bottom* token is a value already used.  For neurons whose top triggers are repeated
   queries (``fires_on_repeated``: more than half of them), ``recall_agreement`` /
   ``trap_agreement`` say whether the value writes the recalled y or the elimination answer, and
   ``trap_suppressed`` whether its most negative token is the elimination answer (recall by vetoing
   the trap rather than by writing y1) — the study's (section 09) "the FFN does the lookup"
   hypothesis.

Any layer (``layer``, default 0; negative values count from the end): the coefficients are that
layer's ``mlp.hook_post``, and the value is read through the unembedding directly, so in a layer
before the last it is the neuron's *direct* effect on the logits; later layers may still move what
it writes (its total effect is what :func:`~perm_circuits.analysis.interventions.ablation.ablate_mlp` with
``neurons=`` measures).  The layer-level view, :func:`mlp_prediction_flips`, is re-exported here
from :mod:`perm_circuits.analysis.probes.mlp_flips`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from perm_circuits.analysis.probes.dla import elimination_answers, repeated_queries, run_cache, used_values
from perm_circuits.analysis.interventions.checks import (
    check_int, check_layer, check_neurons, check_positive_int, check_task_config,
)
from perm_circuits.analysis.probes.memory import effective_unembed
from perm_circuits.analysis.probes.mlp_flips import FlipStats, MLPFlips, mlp_prediction_flips
from perm_circuits.hooks import check_hooks
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, batch_from_queries, split_permutations

__all__ = [
    "FFNKeyValueProbe", "FlipStats", "MLPFlips", "NeuronKeyValue", "TriggerSet", "enumerate_sequences",
    "ffn_key_value_probe", "mlp_prediction_flips", "x_position_triggers",
]


MAX_ENUMERATED = 3_000_000
"""The most sequences :func:`enumerate_sequences` builds (every split and source choice of V <= 6 fits;
V = 7's test split alone is 10 million sequences, whose MLP activations take tens of GB)."""


def enumerate_sequences(config: TaskConfig, split: str = "test", repeat_sources: Sequence[int] = (0,)) -> TaskBatch:
    """Every sequence of ``split``'s permutations (``"test"``, ``"train"`` or ``"all"``) x every x
    order, plain and, for each ``s`` in ``repeat_sources``, with the last query replaced by ``x_{s+1}``
    (target: its earlier y). The default task (24 test permutations, V=5) gives 24 x 120 x 2 = 5,760.
    """
    if not isinstance(config, TaskConfig):
        raise TypeError(f"config must be a TaskConfig, got {type(config).__name__}")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    V = config.V
    if not isinstance(repeat_sources, (list, tuple)):
        raise TypeError(f"repeat_sources must be a list/tuple of ints, got {type(repeat_sources).__name__}")
    for s in repeat_sources:
        check_int("repeat_sources entry", s)
        if not 0 <= s <= V - 2:
            raise ValueError(f"repeat source {s} out of range [0, {V - 2}]")
    if len(set(repeat_sources)) != len(repeat_sources):
        raise ValueError(f"repeat_sources has duplicates: {list(repeat_sources)}")
    train, test = split_permutations(config)
    perms = {"train": train, "test": test, "all": torch.cat([train, test])}[split]
    size = len(perms) * math.factorial(V) * (1 + len(repeat_sources))
    if size > MAX_ENUMERATED:
        raise ValueError(f"enumerating the {split} split of V={V} gives {size:,} sequences ({len(perms)} permutations x {V}! "
                         f"query orders x {1 + len(repeat_sources)} variants), more than {MAX_ENUMERATED:,}: the FFN "
                         "key-value probe enumerates the task, which fits V <= 6")
    orders = torch.tensor(list(itertools.permutations(range(1, V + 1))), dtype=torch.long, device=perms.device)
    xs = orders.repeat(len(perms), 1)
    variants = [xs] + [torch.cat([xs[:, :-1], xs[:, s : s + 1]], dim=1) for s in repeat_sources]  # last -> x_{s+1}
    source = torch.cat([torch.full((len(xs),), s, device=xs.device) for s in (-1, *repeat_sources)])
    perms_rep = perms.repeat_interleave(len(orders), dim=0).repeat(len(variants), 1)
    return batch_from_queries(torch.cat(variants), perms_rep, source)


@dataclass(frozen=True)
class TriggerSet:
    """The distinct x-position inputs (prefixes ``x1 y1 .. x_k``) of an enumerated batch.

    Attributes:
        source: row of the enumerated batch holding a representative sequence.
        position: input position ``2(k-1)`` of the query; ``step`` = ``k``.
        query: the query token ``x_k``.
        used: ``[n, V]`` y values revealed before the query.
        repeated: the query repeats an earlier x.
        target_probs: ``[n, V]`` distribution of the correct y over the enumerated sequences that
            share the prefix (before the last step the prefix does not determine the answer: this
            is the posterior under the enumerated split's permutations; one-hot at the last step).
        target: the most frequent correct y (the correct y at the last step).
        elimination: the pure-elimination answer (the only unused value; -1 if several).
        count: enumerated sequences sharing this prefix.
    """

    source: Int[Tensor, " n"]
    position: Int[Tensor, " n"]
    step: Int[Tensor, " n"]
    query: Int[Tensor, " n"]
    used: Bool[Tensor, "n value"]
    repeated: Bool[Tensor, " n"]
    target_probs: Float[Tensor, "n value"]
    target: Int[Tensor, " n"]
    elimination: Int[Tensor, " n"]
    count: Int[Tensor, " n"]

    def __len__(self) -> int:
        return len(self.position)

    def pattern(self, index: int) -> str:
        """``"pos8 x=2 used={1,3,4,5} repeated"``: the summary key of one trigger."""
        used = ",".join(str(v + 1) for v in self.used[index].nonzero()[:, 0].tolist())
        tail = " repeated" if bool(self.repeated[index]) else ""
        return f"pos{int(self.position[index])} x={int(self.query[index])} used={{{used}}}{tail}"

    def to_dataframe(self, index: Sequence[int] | Tensor | None = None) -> pd.DataFrame:
        rows = range(len(self)) if index is None else [int(i) for i in index]
        return pd.DataFrame([
            {"trigger": i, "position": int(self.position[i]), "step": int(self.step[i]), "query": int(self.query[i]),
             "used": tuple(v + 1 for v in self.used[i].nonzero()[:, 0].tolist()), "repeated": bool(self.repeated[i]),
             "target": int(self.target[i]), "target_prob": float(self.target_probs[i, int(self.target[i]) - 1]),
             "elimination": int(self.elimination[i]), "count": int(self.count[i]), "pattern": self.pattern(i)}
            for i in rows
        ]).set_index("trigger")


def x_position_triggers(batch: TaskBatch) -> tuple[TriggerSet, Int[Tensor, " n"], Int[Tensor, " n"]]:
    """Deduplicate the x-position prefixes of ``batch``: ``(triggers, row, step_index)``, trigger ``i``
    being the prefix ``inputs[row[i], :2*step+1]``."""
    inputs = batch.tokens
    V = batch.extras["xs"].shape[1]
    used = used_values(inputs, V)
    repeated = repeated_queries(inputs)
    elim = elimination_answers(inputs, V)
    parts: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
    for k in range(V):
        prefix = inputs[:, : 2 * k + 1]
        _, inverse, counts = torch.unique(prefix, dim=0, return_inverse=True, return_counts=True)
        first = torch.full((len(counts),), len(inputs), dtype=torch.long, device=inputs.device)
        first = first.scatter_reduce(0, inverse, torch.arange(len(inputs), device=inputs.device), reduce="amin")
        answers = torch.zeros(len(counts), V, device=inputs.device).index_put_(
            (inverse, batch.extras["ys"][:, k] - 1), torch.ones(len(inputs), device=inputs.device), accumulate=True
        )
        parts.append((first, torch.full_like(first, k), counts, answers / counts[:, None]))
    rows, steps, counts, target_probs = (torch.cat(column) for column in zip(*parts))
    triggers = TriggerSet(
        source=rows,
        position=2 * steps,
        step=steps + 1,
        query=inputs[rows, 2 * steps],
        used=used[rows, steps],
        repeated=repeated[rows, steps],
        target_probs=target_probs,
        target=target_probs.argmax(-1) + 1,
        elimination=elim[rows, steps],
        count=counts,
    )
    return triggers, rows, steps


@dataclass(frozen=True)
class NeuronKeyValue:
    """Key-value summary of one MLP neuron (module docstring); token fields are value tokens ``1..V``.
    ``live`` is False when no enumerated input gives a positive coefficient (the trigger and agreement
    fields are then NaN / empty, the tokens -1)."""

    layer: int
    neuron: int
    live: bool
    max_activation: float
    n_triggers: int
    value_top: int
    value_bottom: int
    value_probs: tuple[float, ...]
    value_logit_range: float
    agreement: float
    top1_agreement: float
    suppress_used: float
    top_pattern: str
    top_pattern_share: float
    top_position: int
    top_position_share: float
    top_query: int
    top_query_share: float
    repeated_share: float
    fires_on_repeated: bool
    repeated_selectivity: float
    recall_agreement: float
    trap_agreement: float
    trap_suppressed: float
    top_triggers: tuple[int, ...]


@dataclass(frozen=True)
class FFNKeyValueProbe:
    """Result of :func:`ffn_key_value_probe`: one :class:`NeuronKeyValue` per probed neuron."""

    model_name: str
    layer: int
    top_k: int
    n_sequences: int
    triggers: TriggerSet
    neurons: tuple[NeuronKeyValue, ...]

    @property
    def live(self) -> tuple[NeuronKeyValue, ...]:
        return tuple(n for n in self.neurons if n.live)

    @property
    def mean_agreement(self) -> float:
        """Mean per-neuron agreement over live neurons (chance: 1/V)."""
        return _mean([n.agreement for n in self.live])

    @property
    def fraction_above_chance(self) -> float:
        """Fraction of live neurons whose agreement exceeds chance 1/V (by more than 1e-6)."""
        live = self.live
        if not live:
            return float("nan")
        chance = 1.0 / len(self.neurons[0].value_probs)
        return sum(n.agreement > chance + 1e-6 for n in live) / len(live)

    @property
    def top1_agreement_rate(self) -> float:
        """Geva et al.'s agreement rate: mean over live neurons of P(top trigger's correct y = value's top token)."""
        return _mean([n.top1_agreement for n in self.live])

    @property
    def repeated_neurons(self) -> tuple[int, ...]:
        """Neurons whose top triggers are mostly (> 50%) repeated queries."""
        return tuple(n.neuron for n in self.neurons if n.fires_on_repeated)

    def summary(self) -> dict[str, float]:
        """Headline numbers (counts as floats)."""
        return {
            "n_neurons": float(len(self.neurons)),
            "n_live": float(len(self.live)),
            "mean_agreement": self.mean_agreement,
            "fraction_above_chance": self.fraction_above_chance,
            "top1_agreement_rate": self.top1_agreement_rate,
            "n_repeated_neurons": float(len(self.repeated_neurons)),
            "repeated_recall_agreement": _mean([n.recall_agreement for n in self.neurons if n.fires_on_repeated]),
            "repeated_trap_suppressed": _mean([n.trap_suppressed for n in self.neurons if n.fires_on_repeated]),
        }

    def to_dataframe(self) -> pd.DataFrame:
        """One row per neuron (``value_probs`` and ``top_triggers`` left out)."""
        rows = []
        for n in self.neurons:
            row = asdict(n)
            row.pop("top_triggers")
            row.update({f"p{v}": p for v, p in enumerate(row.pop("value_probs"), start=1)})
            rows.append(row)
        return pd.DataFrame(rows).set_index("neuron")

    def triggers_dataframe(self, neuron: int) -> pd.DataFrame:
        """The top triggers of one neuron (with their representative sequence)."""
        for n in self.neurons:
            if n.neuron == neuron:
                return self.triggers.to_dataframe(list(n.top_triggers))
        raise KeyError(f"neuron {neuron} was not probed")


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else float("nan")


def _mode_share(values: list) -> tuple[object, float]:
    best, count = Counter(values).most_common(1)[0]  # ties: the first seen, as max() picks
    return best, count / len(values)


def ffn_key_value_probe(
    model,
    *,
    layer: int = 0,
    neurons: Sequence[int] | None = None,
    top_k: int = 25,
    split: str = "test",
    repeat_sources: Sequence[int] = (0,),
    task: PermutationTask | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> FFNKeyValueProbe:
    """Geva et al. (2021) key-value probing of the MLP of ``layer`` on the enumerated task.

    Args:
        layer: the MLP layer (negative values count from the end: ``-1`` is the last layer).
        neurons: distinct neuron indices to summarise (default: all; negative ones count from
            the end).
        top_k: top triggers per neuron (Geva et al. use 25).
        split: permutations to enumerate (``"test"``, ``"train"`` or ``"all"``).
        repeat_sources: which earlier x the repeated variants repeat (``()``: none).
        task: the permutation task enumerated (a PermutationTask or its bare TaskConfig, the same
            either way); default the model's training task.
        hooks: an intervention hook list applied during the forward pass.
    """
    config = model_config_of(model)
    layer = check_layer(model, layer)
    if neurons is not None and not isinstance(neurons, (list, tuple)):
        raise TypeError(f"neurons must be a list/tuple of ints or None, got {type(neurons).__name__}")
    selected = check_neurons(model, neurons)
    if selected is None:
        selected = list(range(config.resolved_d_mlp))
    top_k = check_positive_int("top_k", top_k)
    task = check_task_config(model, task, "task")
    check_hooks(model, hooks)
    batch = enumerate_sequences(task, split, repeat_sources)

    post_name = f"blocks.{layer}.mlp.hook_post"
    has_scale = "ln_final.hook_scale" in model.hook_dict and config.normalization_type is not None
    names = [post_name, "ln_final.hook_scale"] if has_scale else [post_name]
    _, acts, _ = run_cache(model, batch.tokens, names, hooks)
    triggers, rows, steps = x_position_triggers(batch)
    positions = 2 * steps
    act = acts[post_name][rows, positions]  # [n_triggers, d_mlp]
    scale = acts["ln_final.hook_scale"][rows, positions, 0] if has_scale else torch.ones(len(rows), device=act.device)

    V = config.V
    unit_logits = model.W_out.detach()[layer] @ effective_unembed(model)  # [d_mlp, V]
    k = min(top_k, len(triggers))
    top_vals, top_idx = act[:, selected].topk(k, dim=0)  # [k, n_selected]

    last = triggers.step == V
    last_rep, last_new = last & triggers.repeated, last & ~triggers.repeated
    results = []
    for column, n in enumerate(selected):
        valid = top_vals[:, column] > 0
        idx = top_idx[valid, column]
        max_act = float(act[:, n].max())
        if len(idx) == 0:
            results.append(_dead_neuron(layer, n, max_act, V))
            continue
        weight = float((act[idx, n] / scale[idx]).mean())
        logits = unit_logits[n] * weight
        value_top, value_bottom = int(logits.argmax()) + 1, int(logits.argmin()) + 1
        targets = triggers.target[idx]
        hit = triggers.target_probs[idx, value_top - 1]  # P(correct y = value top) per trigger
        agreement = float(hit.mean())
        suppress = float(triggers.used[idx, value_bottom - 1].float().mean())
        top_pattern, pattern_share = _mode_share([triggers.pattern(int(i)) for i in idx])
        top_position, position_share = _mode_share(triggers.position[idx].tolist())
        top_query, query_share = _mode_share(triggers.query[idx].tolist())
        rep = triggers.repeated[idx]
        repeated_share = float(rep.float().mean())
        selectivity = float("nan")
        if last_rep.any() and last_new.any() and max_act > 0:
            selectivity = float((act[last_rep, n].mean() - act[last_new, n].mean()) / max_act)
        recall_agreement = trap_agreement = trap_suppressed = float("nan")
        if rep.any():
            trap = triggers.elimination[idx][rep]
            recall_agreement = float((targets[rep] == value_top).float().mean())
            trap_agreement = float((trap == value_top).float().mean())
            trap_suppressed = float((trap == value_bottom).float().mean())
        results.append(NeuronKeyValue(
            layer=layer, neuron=n, live=True, max_activation=max_act, n_triggers=len(idx), value_top=value_top,
            value_bottom=value_bottom, value_probs=tuple(float(p) for p in logits.softmax(-1)),
            value_logit_range=float(logits.max() - logits.min()), agreement=agreement, top1_agreement=float(hit[0]),
            suppress_used=suppress, top_pattern=str(top_pattern), top_pattern_share=pattern_share,
            top_position=int(top_position), top_position_share=position_share, top_query=int(top_query),
            top_query_share=query_share, repeated_share=repeated_share, fires_on_repeated=repeated_share > 0.5,
            repeated_selectivity=selectivity, recall_agreement=recall_agreement, trap_agreement=trap_agreement,
            trap_suppressed=trap_suppressed, top_triggers=tuple(int(i) for i in idx),
        ))
    return FFNKeyValueProbe(model_name=config.name, layer=layer, top_k=top_k, n_sequences=len(batch), triggers=triggers,
                            neurons=tuple(results))


def _dead_neuron(layer: int, neuron: int, max_act: float, V: int) -> NeuronKeyValue:
    nan = float("nan")
    return NeuronKeyValue(
        layer=layer, neuron=neuron, live=False, max_activation=max_act, n_triggers=0, value_top=-1,
        value_bottom=-1, value_probs=tuple([nan] * V), value_logit_range=nan, agreement=nan,
        top1_agreement=nan, suppress_used=nan, top_pattern="", top_pattern_share=nan, top_position=-1,
        top_position_share=nan, top_query=-1, top_query_share=nan, repeated_share=nan,
        fires_on_repeated=False, repeated_selectivity=nan, recall_agreement=nan, trap_agreement=nan,
        trap_suppressed=nan, top_triggers=(),
    )
