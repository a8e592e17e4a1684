"""The runs behind the IOI-style circuit criteria (Wang et al. 2022, "Interpretability in the Wild",
section 4; defined in :mod:`perm_circuits.analysis.circuits.criteria`): one forward per set of
ablated node positions, its F per subgroup cached, each component's ablation hook built once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.analysis.interventions import hooks as ablation
from perm_circuits.analysis.circuits.nodes import SUBGROUPS, Node, class_positions, positions_in, skill_logit_diff
from perm_circuits.analysis.interventions.core import ablate_tokens, ablation_fn, selection
from perm_circuits.analysis.interventions.optimal import optimise_constant, upstream_hooks
from perm_circuits.analysis.interventions.ablation_table import components_of
from perm_circuits.devices import model_device
from perm_circuits.hooks import HookList, run_capture
from perm_circuits.tasks.base import TaskBatch

__all__ = ["CircuitProblem", "CircuitRunner", "circuit_run", "knockout_run", "permutation_problem", "shared_ablations"]


def _restricted(fn: Callable, mask: Tensor) -> Callable:
    """``fn`` (an ablation hook) applied only at the positions where ``mask`` ([pos] bool) is set."""

    def hook(activation: Tensor, hook) -> Tensor:
        if activation.ndim < 2 or activation.shape[1] != mask.shape[0]:
            raise ValueError(f"a node's position class needs an activation with {mask.shape[0]} positions, got shape "
                             f"{tuple(activation.shape)} (use class 'all' for this component)")
        view = mask.to(activation.device).view(1, -1, *([1] * (activation.ndim - 2)))
        return torch.where(view, fn(activation, hook), activation)

    return hook


_SHARED: list[dict] = []  # a stack of ablation caches; the top one is active (see shared_ablations)


@contextmanager
def shared_ablations() -> Iterator[None]:
    """Inside the block, circuit runs on the same model, reference batch and hooks share their ablations.

    Every call of :func:`propose_circuit`, :func:`circuit_metrics` or :func:`faithfulness_by_mode`
    builds each component's ablation hook per mode (a reference forward, an optimal search); in the
    block each is built once, mean / resample / optimal from one reference forward capturing every
    component: the same numbers.  Only for callers that keep the model's weights fixed in the block.
    """
    _SHARED.append({})
    try:
        yield
    finally:
        _SHARED.pop()


@dataclass(frozen=True)
class CircuitProblem:
    """What a circuit run measures: the tokens, F per row, the subgroups' row masks, the reference.

    The permutation task (:func:`permutation_problem`): its test TaskBatch, :func:`skill_logit_diff`,
    the elimination / recall subgroups, sequences of ``2V - 1`` tokens with its position
    classes.  Any task or tokens (``general``): F any per-row metric, one subgroup ``"all"``, the
    position classes of :func:`positions_in`, ablations through
    :func:`~perm_circuits.analysis.interventions.core.ablate_tokens` with ``reference`` (a TaskBatch or
    token ids; ``None`` only for zero ablation).
    """

    tokens: Tensor
    metric: Callable[[Tensor], Tensor]
    masks: Mapping[str, Tensor]
    reference: object
    general: bool
    V: int | None = None

    @property
    def seq(self) -> int:
        return int(self.tokens.shape[1])

    def positions(self, node: Node) -> tuple[int, ...]:
        """The positions node ``node`` covers in this problem's sequences."""
        return positions_in(node.where, self.seq) if self.general else class_positions(node.where, self.V)


def permutation_problem(batch: TaskBatch, reference: TaskBatch) -> CircuitProblem:
    """The permutation task's problem: F = :func:`skill_logit_diff`, subgroups elimination / recall."""
    masks = {group: (batch.extras["repeated"] if group == "recall" else ~batch.extras["repeated"]) for group in SUBGROUPS}
    return CircuitProblem(batch.tokens, lambda logits: skill_logit_diff(logits, batch), masks, reference, False,
                          batch.extras["xs"].shape[1])


class CircuitRunner:
    """F on each subgroup (cached) for runs: a run is a tuple ``positions[c]`` of ablated positions
    over the model's components (empty: not ablated)."""

    def __init__(self, model, problem: CircuitProblem, how: str, hooks: HookList,
                 ablation_seed: int, ablate_kwargs: Mapping, progress: bool) -> None:
        self.model, self.problem, self.how, self.reference, self.hooks = model, problem, how, problem.reference, hooks
        self.ablation_seed, self.ablate_kwargs, self.progress = ablation_seed, dict(ablate_kwargs), progress
        self.seq = problem.seq
        self.device = model_device(model)
        self.components: list[tuple[str, str, int | None]] = [
            (label, f"blocks.{layer}.attn.hook_z" if head is not None else f"blocks.{layer}.hook_mlp_out", head)
            for label, layer, head in components_of(model)
        ]
        self.index = {name: i for i, (name, _, _) in enumerate(self.components)}
        self.fns: dict[str, Callable] = {}
        self.cache: dict[tuple, dict[str, float]] = {}
        self.masks = dict(problem.masks)

    def run_of(self, ablated: Mapping[str, Iterable[int]]) -> tuple:
        """The run key ablating ``ablated[component]`` positions (other components untouched)."""
        key = [()] * len(self.components)
        for component, positions in ablated.items():
            key[self.index[component]] = tuple(sorted(set(positions)))
        return tuple(key)

    def _fn(self, component: str) -> Callable:
        if component not in self.fns:
            _, hook_name, head = self.components[self.index[component]]
            shared = _SHARED and not self.ablate_kwargs and not self.problem.general
            self.fns[component] = (self._shared_fn(_SHARED[-1], hook_name, head) if shared
                                   else self._ablate(hook_name, head))
        return self.fns[component]

    def _ablate(self, hook_name: str, head: int | None) -> Callable:
        general = self.problem.general  # any task: ablate_tokens, with no reference for zero ablation
        reference = None if general and self.how == "zero" else self.reference
        hooks = (ablate_tokens if general else ablation.ablate)(self.model, hook_name, self.how, reference=reference,
            index=head, seed=self.ablation_seed, hooks=self.hooks, **self.ablate_kwargs)
        return hooks[0][1]

    def _shared_fn(self, cache: dict, hook_name: str, head: int | None) -> Callable:
        """:meth:`_ablate` through the active :func:`shared_ablations` cache (what ``ablate`` does, once)."""
        hooks = tuple((name, id(fn)) for name, fn in self.hooks)
        base = (id(self.model), id(self.reference), hooks, self.ablation_seed)
        # The key names objects by id: keep them alive as long as the cache, or a reference batch freed
        # after one skill could hand its address, and so its cached means, to the next skill's rows.
        cache.setdefault("alive", {})[base] = (self.model, self.reference, tuple(fn for _, fn in self.hooks))
        key = (*base, hook_name, self.how, head)
        if key in cache:
            return cache[key]
        if self.how not in ("mean", "resample", "optimal"):
            cache[key] = self._ablate(hook_name, head)
            return cache[key]
        if (*base, "acts") not in cache:  # one reference forward for every component (+ optimal's upstream)
            names = [name for _, name, _ in self.components]
            names += [u for name in names for u in upstream_hooks(self.model, name)]
            cache[(*base, "acts")] = run_capture(self.model, self.reference.tokens, list(dict.fromkeys(names)),
                                                 self.hooks)[1]
        acts = cache[(*base, "acts")]
        index = None if head is None else [head]
        activation, constant = acts[hook_name], None
        if self.how == "optimal":
            mask = selection(activation.shape, "pos", index, None, activation.device)
            constant = optimise_constant(self.model, hook_name, mask, self.reference, self.hooks, activation,
                                         upstream=acts)
        cache[key] = ablation_fn(self.how, "pos", index, None, activation, self.ablation_seed, "random", constant)
        return cache[key]

    def _hooks(self, key: tuple) -> HookList:
        out = list(self.hooks)
        for (component, hook_name, _), positions in zip(self.components, key):
            if not positions:
                continue
            fn = self._fn(component)
            if len(positions) < self.seq:
                mask = torch.zeros(self.seq, dtype=torch.bool, device=self.device)
                mask[list(positions)] = True
                fn = _restricted(fn, mask)
            out.append((hook_name, fn))
        return out

    def evaluate(self, keys: Iterable[tuple], desc: str = "circuit") -> None:
        """Compute F for every run in ``keys`` not cached yet (one forward each)."""
        todo = [key for key in dict.fromkeys(keys) if key not in self.cache]
        for key in tqdm(todo, desc=desc, unit="run", disable=not self.progress or not todo):
            with torch.no_grad(), self.model.hooks(fwd_hooks=self._hooks(key)):
                logits = self.model(self.problem.tokens)
            per_row = self.problem.metric(logits)
            self.cache[key] = {group: float(per_row[mask].mean()) for group, mask in self.masks.items()}  # empty: nan

    def f(self, key: tuple, group: str) -> float:
        self.evaluate([key])
        return self.cache[key][group]


def circuit_run(runner: CircuitRunner, nodes: Sequence[Node]) -> tuple:
    """The run of the circuit ``nodes``: every component ablated outside its nodes' positions."""
    kept: dict[str, set[int]] = {name: set() for name, _, _ in runner.components}
    for node in nodes:
        kept[node.component].update(runner.problem.positions(node))
    every = set(range(runner.seq))
    return runner.run_of({name: every - positions for name, positions in kept.items()})


def knockout_run(runner: CircuitRunner, nodes: Sequence[Node]) -> tuple:
    """The run of the model with ``nodes`` ablated (nothing else)."""
    ablated: dict[str, set[int]] = {}
    for node in nodes:
        ablated.setdefault(node.component, set()).update(runner.problem.positions(node))
    return runner.run_of(ablated)
