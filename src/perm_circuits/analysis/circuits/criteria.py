"""IOI-style circuit evaluation: faithfulness, completeness and minimality of a set of nodes.

Wang et al. 2022 ("Interpretability in the Wild", the IOI paper, section 4) judge a circuit ``C``
of a model ``M`` on a metric ``F``; ``M \\ K`` / ``C \\ K`` are the model / the circuit with the
nodes ``K`` knocked out, and "the circuit" is the model with *every node outside C* knocked out:

- **faithfulness** ``= F(C) / F(M)`` (the paper's "87%"; 1 is perfect), also as
  ``faithfulness_error = |F(M) - F(C)| / |F(M)| == |1 - faithfulness|`` (0 is perfect);
- **completeness** ``= max over K subset of C of |F(C \\ K) - F(M \\ K)|`` (0 is perfect: no node
  the model uses is missing from C), in logits, relative to ``|F(M)|`` and with the worst ``K``;
- **minimality** of node ``v`` ``= max over K subset of C \\ {v} of |F(C \\ (K + {v})) - F(C \\ K)|``
  (larger is better; 0: v does nothing in any context), with its ``K``, also relative to ``|F(C)|``.

The subsets are enumerated when ``|C| <= max_exhaustive`` (``2^|C|`` of them); larger circuits are
*sampled*: ``ceil(n_subsets / |C|)`` random orderings of C (``subset_seed``), each giving its
``|C| + 1`` prefixes ``{} = K_0 < ... < K_|C| = C`` as completeness subsets and each step
``K_i -> K_i + v`` as a minimality sample for ``v`` (``completeness_method``, ``n_subsets_checked``).

Nodes.  A node is a component (head ``L{layer}H{head}`` on ``blocks.L.attn.hook_z``, or MLP
``L{layer}MLP`` on ``blocks.L.hook_mlp_out``) at a position class (:data:`POSITION_CLASSES`,
defined for any V, sequences of ``2V - 1`` positions):

- ``all``: every position; ``query``: the x positions ``0, 2, ..., 2V-2`` (where a y is
  predicted); ``answer``: the y positions ``1, 3, ..., 2V-3``; ``last``: the final position
  ``2V-2`` (the last query, where elimination and recall are decided); ``context``: every
  position before the last; ``p{k}``: the single position ``k``.

Written ``"L0H1@last"`` (:meth:`Node.parse`; without ``@`` the class is ``all``).  A circuit
keeps each component at the union of its nodes' positions; everywhere else every head and MLP
is ablated.  Embeddings, the attention output bias and the unembedding are never ablated.

Ablation.  ``how`` is a mode of :data:`perm_circuits.analysis.interventions.ablation.HOWS` (mean by default,
the IOI choice; the means are over ``reference``, by default the evaluated test set itself).
For every component the hook of :func:`~perm_circuits.analysis.interventions.ablation.ablate` (whole
component, all positions) is built once, so its reference activations are computed once, and
each run applies it only at the positions that run ablates (``torch.where`` over positions).
For zero, mean and resample ablation this equals ``ablate(..., positions=P)`` exactly (their
replacement at a position does not depend on which other positions are ablated); a mode whose
replacement is fitted (optimal ablation) uses the value fitted with the whole component ablated.
Each run (one set of ablated nodes) is one forward over the test set, inside a
``model.hooks(...)`` context after ``hooks`` (user interventions, applied in every run and in the
reference runs), so no hook outlives a call, even after an exception.

The metric F, per subgroup, at the last position (value logits ``1..V`` only; token 0 is never
a target), averaged over the subgroup's rows:

- ``elimination`` (the last query is new): ``logit(answer) - max over the other values of
  their logit``, the correct answer's margin over its strongest competitor (> 0 iff the model
  answers correctly among values);
- ``recall`` (the last query repeats an earlier one): ``logit(answer) - logit(unused y)``, the
  recalled y against the elimination answer, the value no earlier y took (the logit difference
  of :func:`~perm_circuits.analysis.study.recall_patching.patching_pair`'s clean run).

A subgroup without rows has nan metrics.  Relative values are nan where the denominator is 0.
"""

from __future__ import annotations

import math
from functools import partial
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from perm_circuits.analysis.interventions import hooks as ablation
from perm_circuits.analysis.interventions.checks import check_int, check_seed, check_task_config, resolve_task, task_test_set
from perm_circuits.analysis.circuits.nodes import (
    POSITION_CLASSES,
    SUBGROUPS,
    Node,
    class_positions,
    parse_circuit,
    skill_logit_diff,
    target_logprob_gain,
)
from perm_circuits.analysis.circuits.results import (
    CircuitMetrics,
    FaithfulnessByMode,
    FaithfulnessRow,
    NodeMinimality,
    ProposedCircuit,
    SubgroupCircuitMetrics,
)
from perm_circuits.analysis.circuits.runs import (
    CircuitProblem,
    CircuitRunner,
    circuit_run,
    knockout_run,
    permutation_problem,
    shared_ablations,
)
from perm_circuits.analysis.interventions.core import ANY_TASK_HOWS, check_how, reference_tokens
from perm_circuits.analysis.interventions.patching import metric_values
from perm_circuits.metric import bind_metric
from perm_circuits.analysis.circuits.reference import merge_skill_metrics, reference_label, skill_parts, skill_split
from perm_circuits.analysis.interventions.ablation_table import components_of
from perm_circuits.analysis.probes.task_attribution import model_label
from perm_circuits.checks import check_number
from perm_circuits.devices import model_device
from perm_circuits.hooks import HookList, check_hooks
from perm_circuits.models import model_config_of
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set, permutation_batch, validate_tokens
from perm_circuits.tasks.base import Task, TaskBatch, own_analysis

__all__ = [
    "POSITION_CLASSES",
    "SUBGROUPS",
    "CircuitMetrics",
    "FaithfulnessByMode",
    "FaithfulnessRow",
    "Node",
    "NodeMinimality",
    "ProposedCircuit",
    "SubgroupCircuitMetrics",
    "circuit_metrics",
    "faithfulness_by_mode",
    "class_positions",
    "parse_circuit",
    "propose_circuit",
    "shared_ablations",
    "skill_logit_diff",
    "study_setup",
    "target_logprob_gain",
]


def _ratio(numerator: float, denominator: float) -> float:
    undefined = math.isnan(numerator) or math.isnan(denominator) or denominator == 0
    return math.nan if undefined else numerator / denominator


def _general_problem(model, test_set, task, metric, reference, n, seed) -> CircuitProblem:
    """Any task's (or bare tokens') problem: F = ``metric`` (default :func:`target_logprob_gain`), one subgroup."""
    test_set = task_test_set(model, task, test_set, n, seed, hint="(its test set and metric are the default) or "
                             "test_set= (a TaskBatch or token ids) with metric=")
    test_set = test_set.to(model_device(model))  # once: every run of the circuit stays on the model's device
    tokens = reference_tokens(model, test_set)
    if metric is None:
        if not isinstance(test_set, TaskBatch):
            raise ValueError("token ids carry no targets: pass metric= (a callable metric(logits, batch) -> [batch])")
        metric = target_logprob_gain(test_set)
    metric = bind_metric(metric, test_set)
    reference = test_set if reference is None else reference
    reference_tokens(model, reference, positions=tokens.shape[1])
    reference = reference.to(model_device(model))
    rows = (test_set.mask.sum(1) > 0 if isinstance(test_set, TaskBatch)  # F skips rows without a loss position
            else torch.ones(len(tokens), dtype=torch.bool, device=tokens.device))
    return CircuitProblem(tokens, partial(metric_values, metric, batch=len(tokens)), {"all": rows}, reference, True)


def _check_options(n, seed, ablation_seed, ablate_kwargs, progress) -> None:
    """The options :func:`circuit_metrics`, :func:`faithfulness_by_mode` and :func:`propose_circuit` share,
    checked once by each before any test set is drawn (the mode: ``check_how`` by each)."""
    check_int("n", n, 1)
    check_seed(seed)
    check_seed(ablation_seed, "ablation_seed")
    if ablate_kwargs is not None and not isinstance(ablate_kwargs, Mapping):
        raise TypeError(f"ablate_kwargs must be a mapping of extra ablate() arguments, got "
                        f"{type(ablate_kwargs).__name__}")
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")


def _setup(model, circuit, test_set, how, n, seed, config, hooks, reference, task=None,
           metric=None) -> tuple[tuple[Node, ...], CircuitProblem, HookList]:
    """The nodes, the problem and the checked hooks (before any ablated forward), for options
    :func:`_check_options` checked: with no ``task`` / ``metric`` and no token-id ``test_set``, the
    model's task's own problem where it has one (a study bridge's: :func:`study_setup`), any task's
    otherwise."""
    own = None if task is not None or metric is not None or isinstance(test_set, Tensor) else (
        own_analysis(model, "circuit_problem"))  # the model's task's own problem (the study's, on its bridges)
    if own is None:
        if how == "binding_free":
            raise ValueError("how='binding_free' needs the permutation-lookup task; on any task use zero, mean, "
                             "resample or optimal")
        problem = _general_problem(model, test_set, task, metric, reference, n, seed)
        nodes = parse_circuit(model, circuit, seq_len=problem.seq) if circuit is not None else ()
        hooks = check_hooks(model, hooks)
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):  # the full model's run first: a wrong metric
            problem.metric(model(problem.tokens))  # is refused (metric_rows) before any ablated run
        return nodes, problem, hooks
    return own(model, circuit, test_set, n, seed, config, hooks, reference)


def study_setup(model, circuit, test_set, n: int, seed: int, config: TaskConfig | None, hooks,
                reference) -> tuple[tuple[Node, ...], CircuitProblem, HookList]:
    """The permutation task's own circuit problem (``own_analysis(model, "circuit_problem")``): the
    nodes, :func:`~perm_circuits.analysis.circuits.runs.permutation_problem` on ``test_set`` (default
    the model's fixed test set), and the checked hooks."""
    nodes = parse_circuit(model, circuit) if circuit is not None else ()
    config = check_task_config(model, config, "task")
    for name, batch in (("test_set", test_set), ("reference", reference)):
        if batch is not None:
            if not isinstance(batch, TaskBatch):
                raise TypeError(f"{name} must be a TaskBatch or None, "
                                f"got {type(batch).__name__}")
            validate_tokens(batch.tokens, model_config_of(model).V)
    hooks = check_hooks(model, hooks)
    if test_set is None:
        test_set = make_test_set(config, n=n, seed=seed)
    test_set = permutation_batch(test_set)
    reference = None if reference is None else permutation_batch(reference)
    test_set = test_set.to(model_device(model))  # once: every run of the circuit stays on the model's device
    reference = test_set if reference is None else reference.to(model_device(model))
    return nodes, permutation_problem(test_set, reference), hooks


def _subsets(
    k: int, max_exhaustive: int, n_subsets: int, subset_seed: int
) -> tuple[str, list[int], list[tuple[int, int]]]:
    """Method, the K masks to check for completeness, and the (K, K + v) minimality pairs."""
    if k <= max_exhaustive:
        masks = list(range(1 << k))
        pairs = [(mask, mask | (1 << v)) for v in range(k) for mask in masks if not mask & (1 << v)]
        return "exhaustive", masks, pairs
    generator = torch.Generator().manual_seed(subset_seed)
    masks, pairs = {0: None}, []
    for _ in range(math.ceil(n_subsets / k)):
        mask = 0
        for v in torch.randperm(k, generator=generator).tolist():
            pairs.append((mask, mask | (1 << v)))
            mask |= 1 << v
            masks[mask] = None
    return "sampled", list(masks), list(dict.fromkeys(pairs))


def _largest(values: Mapping[int, float]) -> tuple[int, float]:
    """The subset mask with the largest finite value (ties: the smallest subset mask), or (0, nan)."""
    finite = {mask: value for mask, value in values.items() if not math.isnan(value)}
    if not finite:
        return 0, math.nan
    best = max(finite, key=lambda mask: (finite[mask], -mask))
    return best, finite[best]


def _names(nodes: Sequence[Node], mask: int) -> tuple[str, ...]:
    return tuple(node.name for i, node in enumerate(nodes) if mask & (1 << i))


def circuit_metrics(
    model,
    circuit: Node | str | Iterable,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    metric: Callable[[Tensor], Tensor] | None = None,
    how: str = "mean",
    n: int = 2000,
    seed: int = 1234,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    max_exhaustive: int = 8,
    n_subsets: int = 256,
    subset_seed: int = 0,
    reference: TaskBatch | Tensor | str | None = None,
    ablation_seed: int = 0,
    ablate_kwargs: Mapping | None = None,
    progress: bool = False,
) -> CircuitMetrics:
    """Faithfulness, completeness and minimality of ``circuit`` (Wang et al. 2022, section 4).

    Nodes, F, the ablation and the three definitions: module docstring.  On any task's model (or
    any TransformerLens model), or with ``task`` / ``metric``, F is ``metric`` (default
    :func:`target_logprob_gain` of the test set) on one subgroup ``"all"`` (``result.subgroup("all")``),
    e.g. ``circuit_metrics(model, ["L0H0", "L0MLP"], task=task)``, with the position classes ``all``,
    ``last``, ``context``, ``p{k}`` and the ablation modes zero, mean, resample, optimal.

    Args:
        test_set: the sequences F is averaged over; default ``task``'s test set of ``n`` rows
            (``seed``); on any task a TaskBatch or token ids (with ``metric(logits, batch) -> [batch]``,
            :mod:`perm_circuits.metric`).
        task: which task (default: the model's own, ``tasks.base.model_task``).  On a
            permutation-lookup model a :class:`~perm_circuits.tasks.PermutationTask` or its bare
            ``TaskConfig`` both mean the study's problem on those settings (its ``repeat_ratio`` gives the
            recall subgroup); any other :class:`~perm_circuits.tasks.Task` (or ``metric=`` / token ids)
            takes the general path.
        seed: the test-set seed.
        hooks: interventions applied in every run (and in the reference runs).
        max_exhaustive: enumerate all ``2^|C|`` subsets up to this many nodes, else sample.
        n_subsets: the sampling budget (about this many subsets K; see the module docstring).
        subset_seed: seeds the random orderings of the sampled subsets.
        reference: the batch mean / resample ablation draws from, or ``"test"`` (default, the test set) or
            ``"skill"`` (each subgroup's own rows: on the permutation task the elimination and the recall
            subgroup are measured separately, each against itself; :mod:`~perm_circuits.analysis.circuits.reference`).
            Recorded in ``CircuitMetrics.reference`` (``"custom"`` for a batch).
        ablation_seed: the resample seed (which reference row replaces each sample), passed to
            :func:`~perm_circuits.analysis.interventions.ablation.ablate` as its ``seed``.
        ablate_kwargs: extra keyword arguments for every ``ablate`` call (for modes that need
            more, e.g. a reference of their own).
        progress: show a tqdm bar over the forward passes.

    Cost: one forward per distinct run, ``2^(|C|+1)`` at most when exhaustive, plus one
    reference forward per ablated component.
    """
    check_how(how)
    check_int("max_exhaustive", max_exhaustive, 0, 21)
    check_int("n_subsets", n_subsets, 1)
    check_seed(subset_seed, "subset_seed")
    _check_options(n, seed, ablation_seed, ablate_kwargs, progress)
    task, config = resolve_task(model, task, general=metric is not None or isinstance(test_set, Tensor))
    label = reference_label(reference)
    reference = None if isinstance(reference, str) else reference
    skills = skill_split(model, label, test_set, task=task, metric=metric, config=config, n=n, seed=seed)
    options = (how, max_exhaustive, n_subsets, subset_seed, ablation_seed, ablate_kwargs, progress)
    if skills is not None:  # the permutation task: each skill against its own rows (checked once, above)
        parts = [_circuit_metrics(model, *_setup(model, circuit, part, how, n, seed, config, hooks, part), *options,
                                  "custom") for part in skills]
        return merge_skill_metrics(*parts)
    return _circuit_metrics(model, *_setup(model, circuit, test_set, how, n, seed, config, hooks, reference, task,
                                           metric), *options, label)


def _circuit_metrics(model, nodes: tuple[Node, ...], problem: CircuitProblem, hooks: HookList, how: str,
                     max_exhaustive: int, n_subsets: int, subset_seed: int, ablation_seed: int,
                     ablate_kwargs: Mapping | None, progress: bool, label: str) -> CircuitMetrics:
    """:func:`circuit_metrics` of one checked problem (one test set, or one skill's rows)."""
    runner = CircuitRunner(model, problem, how, hooks, ablation_seed, ablate_kwargs or {}, progress)
    method, masks, pairs = _subsets(len(nodes), max_exhaustive, n_subsets, subset_seed)
    runs_c = {mask: circuit_run(runner, [v for i, v in enumerate(nodes) if not mask & (1 << i)])  # C \ K
              for mask in set(masks) | {b for pair in pairs for b in pair}}
    runs_m = {mask: knockout_run(runner, [v for i, v in enumerate(nodes) if mask & (1 << i)])  # M \ K
              for mask in masks}
    runner.evaluate([runs_m[0], runs_c[0], *runs_c.values(), *runs_m.values()])

    groups = {}
    for group in runner.masks:
        f_model, f_circuit = runner.f(runs_m[0], group), runner.f(runs_c[0], group)
        gaps = {mask: abs(runner.f(runs_c[mask], group) - runner.f(runs_m[mask], group)) for mask in masks}
        worst, completeness = _largest(gaps)
        minimality = []
        for i, node in enumerate(nodes):
            bit = 1 << i
            steps = {a: abs(runner.f(runs_c[b], group) - runner.f(runs_c[a], group))
                     for a, b in pairs if not a & bit and b == a | bit}
            best, value = _largest(steps)
            minimality.append(NodeMinimality(node=node.name, subgroup=group, minimality=value,
                relative=_ratio(value, abs(f_circuit)), subset=_names(nodes, best)))
        groups[group] = SubgroupCircuitMetrics(subgroup=group, n=int(runner.masks[group].sum()), f_model=f_model,
            f_circuit=f_circuit, faithfulness=_ratio(f_circuit, f_model),
            faithfulness_error=_ratio(abs(f_model - f_circuit), abs(f_model)), completeness=completeness,
            completeness_relative=_ratio(completeness, abs(f_model)),
            completeness_subset=_names(nodes, worst), minimality=tuple(minimality))
    return CircuitMetrics(model_name=model_label(model), how=how, circuit=tuple(node.name for node in nodes),
        n_samples=len(problem.tokens), completeness_method=method, n_subsets_checked=len(masks),
        elimination=groups.get("elimination"), recall=groups.get("recall"),
        groups=tuple(groups.values()) if problem.general else (), reference=label)


def faithfulness_by_mode(
    model,
    circuit: Node | str | Iterable,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    metric: Callable[[Tensor], Tensor] | None = None,
    hows: Sequence[str] | None = None,
    n: int = 2000,
    seed: int = 1234,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    reference: TaskBatch | Tensor | str | None = None,
    ablation_seed: int = 0,
    ablate_kwargs: Mapping[str, Mapping] | None = None,
    progress: bool = False,
) -> FaithfulnessByMode:
    """Faithfulness of ``circuit`` under every ablation mode in ``hows`` (the mode sensitivity).

    One F(M) and test set; F(C) ablates everything outside the circuit by each mode in turn
    (arguments as in :func:`circuit_metrics`; ``seed`` is the test-set seed, ``ablation_seed`` the
    resample seed; ``ablate_kwargs`` maps a mode to its extra ``ablate`` arguments; on any task one
    subgroup ``"all"``, no ``binding_free``; ``hows=None``: every mode of ``HOWS`` the problem has, all five
    on the permutation task, ``ANY_TASK_HOWS`` on any other).  A circuit faithful under
    one mode only is a claim about that mode, not the model (d32h2's L0H0 changes role between zero
    and mean ablation).  ``reference``: as in :func:`circuit_metrics` (``"skill"``: each subgroup's rows
    against themselves), recorded in ``FaithfulnessByMode.reference``.
    """
    if hows is not None and (isinstance(hows, str) or not isinstance(hows, (list, tuple)) or not hows):
        raise TypeError(f"hows must be a non-empty sequence of modes, got {hows!r}")
    hows = None if hows is None else [check_how(how, "hows entry") for how in hows]
    if ablate_kwargs is not None and (not isinstance(ablate_kwargs, Mapping)
                                      or not all(isinstance(v, Mapping) for v in ablate_kwargs.values())):
        raise TypeError("ablate_kwargs must map a mode to a mapping of extra ablate() arguments")
    _check_options(n, seed, ablation_seed, None, progress)
    task, config = resolve_task(model, task, general=metric is not None or isinstance(test_set, Tensor))
    label = reference_label(reference)
    reference = None if isinstance(reference, str) else reference
    skills = skill_split(model, label, test_set, task=task, metric=metric, config=config, n=n, seed=seed)
    first = "zero" if hows is None else "binding_free" if "binding_free" in hows else hows[0]  # refused on any task
    options = (hows, ablation_seed, ablate_kwargs, progress)
    if skills is not None:  # the permutation task: each skill against its own rows (checked once, above)
        parts = [_faithfulness_by_mode(model, *_setup(model, circuit, part, first, n, seed, config, hooks, part),
                                       *options, "custom") for part in skills]
        rows = tuple(row for part, group in zip(parts, ("elimination", "recall")) for row in part.rows
                     if row.subgroup == group)
        return FaithfulnessByMode(parts[0].model_name, parts[0].circuit, rows, reference="skill")
    return _faithfulness_by_mode(model, *_setup(model, circuit, test_set, first, n, seed, config, hooks, reference,
                                                task, metric), *options, label)


def _faithfulness_by_mode(model, nodes: tuple[Node, ...], problem: CircuitProblem, hooks: HookList,
                          hows: list[str] | None, ablation_seed: int, ablate_kwargs: Mapping | None, progress: bool,
                          label: str) -> FaithfulnessByMode:
    """:func:`faithfulness_by_mode` of one checked problem (one test set, or one skill's rows)."""
    if hows is None:
        hows = list(ANY_TASK_HOWS if problem.general else ablation.HOWS)
    rows, f_model = [], None
    for how in hows:
        extra = (ablate_kwargs or {}).get(how, {})
        runner = CircuitRunner(model, problem, how, hooks, ablation_seed, extra, progress)
        if f_model is None:
            f_model = tuple(runner.f(runner.run_of({}), group) for group in runner.masks)
        for group, fm in zip(runner.masks, f_model):
            fc = runner.f(circuit_run(runner, nodes), group)
            rows.append(FaithfulnessRow(how=how, subgroup=group, f_model=fm, f_circuit=fc,
                                        faithfulness=_ratio(fc, fm), faithfulness_error=_ratio(abs(fm - fc), abs(fm))))
    return FaithfulnessByMode(model_name=model_label(model), circuit=tuple(v.name for v in nodes), rows=tuple(rows),
                              reference=label)


def propose_circuit(
    model,
    skill: str,
    test_set: TaskBatch | Tensor | None = None,
    *,
    task: Task | TaskConfig | None = None,
    metric: Callable[[Tensor], Tensor] | None = None,
    how: str = "mean",
    where: Sequence[str] = ("context", "last"),
    threshold: float = 0.1,
    tolerance: float = 0.1,
    n: int = 2000,
    seed: int = 1234,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    reference: TaskBatch | Tensor | str | None = None,
    ablation_seed: int = 0,
    ablate_kwargs: Mapping | None = None,
    progress: bool = False,
) -> ProposedCircuit:
    """A proposed circuit for ``skill`` (``"elimination"`` or ``"recall"``): F's subgroup of that name.

    1. Candidates: every head and MLP at every position class in ``where`` (default: the last
       position and everything before it), kept when ablating it alone (``how``) moves F by at
       least ``threshold`` of ``|F(M)|`` either way (one working *against* the skill, as IOI's
       negative name movers, belongs to a faithful circuit too).
    2. Grow: while the circuit's ``faithfulness_error`` exceeds ``tolerance``, add the left-out
       candidate that lowers it most (stop when none lowers it).
    3. Prune: in order of increasing single-ablation effect, drop a node when the circuit
       without it still has ``faithfulness_error <= tolerance``.

    On any task ``skill`` is ``"all"`` and ``where`` uses ``all``, ``last``, ``context``, ``p{k}``.
    ``seed`` is the test-set seed, ``ablation_seed`` the resample seed; the other arguments as in
    :func:`circuit_metrics`; ``reference`` as there (``"skill"`` on the permutation task: the proposal runs on
    the ``skill`` rows alone, their own means / resample source).  Returns a :class:`ProposedCircuit`: the
    nodes in canonical order (equal to their plain tuple), with ``.reference`` (``"test"``, ``"skill"``,
    ``"custom"`` for a batch).  One forward per candidate plus one per tried circuit.
    """
    if skill not in (*SUBGROUPS, "all"):
        raise ValueError(f"skill must be one of {SUBGROUPS}, got {skill!r} ('all' on any task's model)")
    if isinstance(where, str) or not isinstance(where, (list, tuple)) or not where:
        raise TypeError(f"where must be a non-empty sequence of position classes, got {where!r}")
    for name, value in (("threshold", threshold), ("tolerance", tolerance)):
        check_number(name, value, low=0, finite=False)
    check_how(how)
    _check_options(n, seed, ablation_seed, ablate_kwargs, progress)
    task, config = resolve_task(model, task, general=metric is not None or isinstance(test_set, Tensor))
    label = reference_label(reference)
    reference = None if isinstance(reference, str) else reference
    if label == "skill" and skill in SUBGROUPS and task is None and metric is None and not isinstance(
            test_set, Tensor) and own_analysis(model, "circuit_problem") is not None:  # the skill's rows alone
        if test_set is None:
            test_set = make_test_set(check_task_config(model, config, "task"), n=n, seed=seed)
        test_set = reference = skill_parts(test_set)[SUBGROUPS.index(skill)]
    _, problem, hooks = _setup(model, None, test_set, how, n, seed, config, hooks, reference, task, metric)
    for cls in where:
        problem.positions(Node(0, None, cls))
    if skill not in problem.masks:
        raise ValueError(f"skill must be one of {tuple(problem.masks)} on this model and test set, got {skill!r}")
    runner = CircuitRunner(model, problem, how, hooks, ablation_seed, ablate_kwargs or {}, progress)
    candidates = [Node(layer, head, cls) for _, layer, head in components_of(model) for cls in dict.fromkeys(where)]
    f_model = runner.f(runner.run_of({}), skill)
    if math.isnan(f_model) or f_model == 0:
        raise ValueError(f"the model's F on the {skill} subgroup is {f_model}: nothing to explain "
                         f"(the test set has {int(runner.masks[skill].sum())} {skill} rows)")
    runner.evaluate([knockout_run(runner, [v]) for v in candidates], desc="candidates")
    effect = {v: abs(f_model - runner.f(knockout_run(runner, [v]), skill)) / abs(f_model) for v in candidates}

    def error(nodes: Iterable[Node]) -> float:
        return abs(f_model - runner.f(circuit_run(runner, list(nodes)), skill)) / abs(f_model)

    circuit = [v for v in candidates if effect[v] >= threshold]
    while error(circuit) > tolerance:
        rest = [v for v in candidates if v not in circuit]
        if not rest:
            break
        best = min(rest, key=lambda v: (error(circuit + [v]), candidates.index(v)))
        if error(circuit + [best]) >= error(circuit):
            break
        circuit.append(best)
    for v in sorted(circuit, key=lambda v: (effect[v], candidates.index(v))):
        trial = [u for u in circuit if u != v]
        if error(trial) <= tolerance:
            circuit = trial
    return ProposedCircuit(sorted(circuit), reference=label)

