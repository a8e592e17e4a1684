"""Many models at once: K models of one architecture trained as one stacked computation.

:func:`train_stacked` trains K members that differ only in seeds, every weight carrying a leading
member axis: one batched matmul per linear layer, one attention call over ``member x batch`` rows,
one loss, one backward, one Adam update (elementwise, so each member's update is its own).  Each
member is the stacked twin of one :func:`perm_circuits.train.train` run: ``build_model``'s initial
weights, its batches from its own ``torch.Generator().manual_seed(TrainConfig.seed)`` in the same
order on the CPU (members with one data seed share a generator and a draw), its dropout masks from
its own :func:`~perm_circuits.train.dropout_seed` generator in ``fast_forward``'s order, the same
per-epoch evaluation and early stopping.  A stopped member leaves the stack.

**Bit for bit on CPU.**  With ``exact=True`` (the default on CPU) every member's weights, history
and evaluation equal its single run's, for any K, given three choices where the natural stacked
arithmetic rounds differently: LayerNorm runs per member (its weight gradient's reduction order
depends on the shape), linear weight gradients are ``grad^T @ input`` (``torch.mm``'s backward
order), and Adam updates a weight as one stacked tensor only where each member's share is a
multiple of 16 floats (the fused CPU kernel's SIMD tail runs in double precision), else member by
member in one fused call.  ``exact=False`` (the default elsewhere) normalises all members in one
call and updates whole tensors: the same training to float tolerance, fewer kernel launches.
Exactness needs the same torch build and CPU capability as :mod:`perm_circuits.train`'s.

Batched ensembles as in ``torch.func.stack_module_state`` + ``vmap`` (PyTorch "Model ensembling"
tutorial), written out here so the arithmetic matches the single run's; throughput in
``benchmarks/stacked_training.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.optim.adam import adam as adam_update
from tqdm.auto import tqdm

from perm_circuits.evaluate import Evaluation
from perm_circuits.models import ACTIVATIONS, ModelConfig, build_model, resolve_config, run_blocks
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.train import (TrainConfig, TrainingHistory, TrainResult, converged, EpochEvaluator, dropout_seed,
                                 study_task)

__all__ = ["STACKED_UNSUPPORTED", "stack_weights", "stacked_forward", "stacked_loss", "train_stacked"]

SIMD_FLOATS = 16
"""A member's share of a weight is updated in one stacked Adam call only if its size is a multiple
of this (the widest CPU float vector, AVX512; a multiple of the narrower AVX2/NEON widths too)."""

STACKED_UNSUPPORTED = frozenset({"checkpoint_every", "checkpoint_dir"})
"""TrainConfig fields the stacked trainer does not implement (it refuses them when set)."""

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as train() uses them


class _StackedLinear(torch.autograd.Function):
    """``x @ W^T + b`` per member; the backward takes ``torch.mm``'s operand order (see module doc)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # noqa: D102
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def _check_forward_config(config: ModelConfig) -> None:
    if config.normalization_type not in ("LN", None):
        raise ValueError(
            f"stacked training supports normalization_type 'LN' or None (the ones fast_forward computes), "
            f"got {config.normalization_type!r}"
        )


def stacked_forward(
    config: ModelConfig,
    weights: dict[str, Tensor],
    tokens: Int[Tensor, "member batch seq"],
    *,
    dropout_generators: Sequence[torch.Generator] | None = None,
    exact: bool = True,
) -> Float[Tensor, "member batch seq vocab"]:
    """:func:`~perm_circuits.models.fast_forward` of K members at once; member ``i`` reads ``tokens[i]``.

    ``weights``: the bridge's ``state_dict`` keys, each with a leading member axis
    (:func:`stack_weights`).  Member ``i``'s logits equal ``fast_forward`` of ``weights[...][i]``:
    bit for bit on CPU with ``exact=True``, to float tolerance otherwise.  Dropout is applied only
    when ``dropout_generators`` (one CPU generator per member: train mode) is given, the masks drawn
    per member in ``fast_forward``'s order and moved to the weights' device.
    """
    _check_forward_config(config)
    if dropout_generators is not None and len(dropout_generators) != tokens.shape[0]:
        raise ValueError(f"dropout_generators must hold one generator per member ({tokens.shape[0]}), got "
                         f"{len(dropout_generators)}")
    return _forward(config, weights, tokens, dropout_generators, exact)


def _forward(config: ModelConfig, weights: dict[str, Tensor], tokens: Int[Tensor, "member batch seq"],
             dropout_generators: Sequence[torch.Generator] | None, exact: bool) -> Float[Tensor, "member batch seq vocab"]:
    """:func:`stacked_forward` without its checks: :func:`train_stacked` checked the config once
    (``_resolve_members``) and draws one generator per live member itself."""
    w = weights
    members, batch, seq = tokens.shape
    p = config.dropout if dropout_generators is not None else 0.0

    def norm(x: Tensor, name: str) -> Tensor:
        if config.normalization_type is None:
            return x
        gain, shift = w[f"{name}.weight"], w[f"{name}.bias"]
        if exact:
            # unbind, not x[i]: the backward of K selects would build K full-size zero tensors
            return torch.stack([
                torch.nn.functional.layer_norm(xi, (config.d_model,), gi, si, 1e-5)
                for xi, gi, si in zip(x.unbind(0), gain.unbind(0), shift.unbind(0))
            ])
        normed = torch.nn.functional.layer_norm(x, (config.d_model,), None, None, 1e-5)
        return torch.addcmul(shift[:, None, None, :], normed, gain[:, None, None, :])

    def linear(x: Tensor, name: str) -> Tensor:
        out = _StackedLinear.apply(x.reshape(members, -1, x.shape[-1]), w[f"{name}.weight"], w.get(f"{name}.bias"))
        return out.view(members, batch, seq, -1)

    def drop(x: Tensor) -> Tensor:  # inverted dropout with each member's own mask stream
        per_member = x.shape[0] // members
        keep = torch.stack([
            torch.empty(per_member, *x.shape[1:]).bernoulli_(1 - p, generator=generator)
            for generator in dropout_generators
        ]).view(x.shape).to(x.device, non_blocking=True)
        return x * keep / (1 - p)

    member = torch.arange(members, device=tokens.device)[:, None, None]
    resid = w["embed.weight"][member, tokens] + w["pos_embed.weight"][:, None, :seq]
    base_act = ACTIVATIONS[config.act_fn]

    def per_member(x: Tensor) -> Tensor:  # exact: a vectorised tanh/erf on one long tensor rounds the
        return torch.stack([base_act(xi) for xi in x.unbind(0)])  # elements at a member's edge as no single run does

    act = per_member if exact and config.act_fn != "relu" else None  # relu rounds nothing: one call (run_blocks')
    resid = run_blocks(config, resid, norm, linear, drop if p > 0 else None, act)
    return linear(norm(resid, "ln_final"), "unembed")  # with the unembedding's bias, as fast_forward adds it


def stacked_loss(
    logits: Float[Tensor, "member batch seq vocab"], targets: Int[Tensor, "member batch seq"],
    mask: Float[Tensor, "member batch seq"],
) -> Float[Tensor, " member"]:
    """Each member's :func:`~perm_circuits.train.masked_loss` (cross-entropy over y positions)."""
    per_token = torch.nn.functional.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
    flat_mask = mask.flatten(1)
    return (per_token.view(flat_mask.shape) * flat_mask).sum(1) / flat_mask.sum(1)


def stack_weights(models: Sequence, device: torch.device | str | None = None) -> dict[str, Tensor]:
    """The bridges' ``state_dict`` tensors stacked on a new leading member axis (detached copies;
    the bridge's trainable parameters require grad here, buffers do not)."""
    if not models:
        raise ValueError("stack_weights needs at least one model")
    states = [model.state_dict(keep_vars=True) for model in models]
    out = {}
    for name, first in states[0].items():
        stacked = torch.stack([state[name].detach() for state in states]).to(device or first.device).clone()
        out[name] = stacked.requires_grad_(isinstance(first, torch.nn.Parameter) and first.requires_grad)
    return out


def _same_except_seed(configs: Sequence, what: str) -> None:
    reference = {k: v for k, v in configs[0].to_dict().items() if k != "seed"}
    for index, config in enumerate(configs[1:], start=1):
        other = {k: v for k, v in config.to_dict().items() if k != "seed"}
        differing = sorted(k for k in reference if reference[k] != other[k])
        if differing:
            raise ValueError(
                f"stacked members must share one {what} (all fields but seed): member {index} differs from "
                f"member 0 in {differing} ({ {k: other[k] for k in differing} } vs { {k: reference[k] for k in differing} })"
            )


def _resolve_members(members, architecture, train_config) -> tuple[list[ModelConfig], list[TrainConfig]]:
    if isinstance(members, (str, bytes, ModelConfig, int)) or not isinstance(members, Sequence):
        raise TypeError(
            f"members must be a list of ModelConfigs, preset names or int seeds, got {type(members).__name__} {members!r}"
        )
    if len(members) == 0:
        raise ValueError("train_stacked needs at least one member (got an empty list)")
    n = len(members)
    if train_config is None or isinstance(train_config, TrainConfig):
        train_configs = [train_config or TrainConfig()] * n
    elif isinstance(train_config, Sequence) and all(isinstance(c, TrainConfig) for c in train_config):
        if len(train_config) != n:
            raise ValueError(f"train_config lists {len(train_config)} TrainConfigs for {n} members; give one per member")
        train_configs = list(train_config)
    else:
        raise TypeError(f"train_config must be a TrainConfig or a list of them (one per member), got {train_config!r}")
    model_configs = []
    for index, member in enumerate(members):
        if isinstance(member, bool):
            raise TypeError(f"member {index} is a bool ({member!r}); give a ModelConfig, preset name or int seed")
        if isinstance(member, int):  # a seed: of the model and of the data, as the sweep and the CLI use it
            model_configs.append(resolve_config(architecture, member))
            train_configs[index] = TrainConfig.from_dict({**train_configs[index].to_dict(), "seed": member})
        elif isinstance(member, (ModelConfig, str)):
            model_configs.append(resolve_config(member))
        else:
            raise TypeError(f"member {index} must be a ModelConfig, preset name or int seed, got {type(member).__name__} {member!r}")
    _same_except_seed(model_configs, "architecture (ModelConfig)")
    _same_except_seed(train_configs, "recipe (TrainConfig)")
    unsupported = sorted(name for name in STACKED_UNSUPPORTED if getattr(train_configs[0], name) is not None)
    if unsupported:
        raise ValueError(f"train_stacked does not write checkpoints; unset {unsupported} (train() resumes single runs)")
    _check_forward_config(model_configs[0])
    return model_configs, train_configs


class _StackedAdam:
    """Adam (torch's defaults, fused where the device has it) over the live members' stacked weights:
    one tensor per weight in the fused call, or one view per member where ``exact`` needs it (module
    docstring)."""

    def __init__(self, params: dict[str, Tensor], lr: float, exact: bool, step: int = 0,
                 exp_avg: dict[str, Tensor] | None = None, exp_avg_sq: dict[str, Tensor] | None = None):
        self.params, self.lr, self.exact = params, lr, exact
        self.exp_avg = exp_avg or {name: torch.zeros_like(p) for name, p in params.items()}
        self.exp_avg_sq = exp_avg_sq or {name: torch.zeros_like(p) for name, p in params.items()}
        self.step_count = step
        device = next(iter(params.values())).device
        try:
            torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], lr=lr, fused=True)
            self.fused = True
        except (RuntimeError, TypeError):  # fused unsupported on this device/build, as in train()
            self.fused = False
        self.whole = [name for name, p in params.items() if not exact or p[0].numel() % SIMD_FLOATS == 0]
        self.split = [name for name in params if name not in self.whole]
        self._states, self._states_sq = self._flat(self.exp_avg), self._flat(self.exp_avg_sq)
        self._params = self._flat({n: p.detach() for n, p in params.items()})
        self._steps = [torch.tensor(float(step), device=device) for _ in self._params]

    def _flat(self, tensors: dict[str, Tensor]) -> list[Tensor]:
        """The tensors of the fused call: each whole weight, then each split weight's per-member views."""
        return [tensors[n] for n in self.whole] + [tensors[n][i] for n in self.split for i in range(len(tensors[n]))]

    def step(self) -> None:
        grads = self._flat({n: p.grad for n, p in self.params.items()})
        with torch.no_grad():
            adam_update(self._params, grads, self._states, self._states_sq, [], self._steps, fused=self.fused,
                foreach=None, amsgrad=False, beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1], lr=self.lr, weight_decay=0.0,
                eps=ADAM_EPS, maximize=False)
        self.step_count += 1
        for p in self.params.values():
            p.grad = None

    def keep(self, rows: Tensor) -> _StackedAdam:
        """The optimiser of the members at ``rows`` only (weights and state copied, nothing else changes)."""
        params = {n: p.detach()[rows].clone().requires_grad_(True) for n, p in self.params.items()}
        return _StackedAdam(params, self.lr, self.exact, self.step_count,
                            {n: s[rows].clone() for n, s in self.exp_avg.items()},
                            {n: s[rows].clone() for n, s in self.exp_avg_sq.items()})


@dataclass
class _Member:
    model: object  # a build_model bridge: in eval mode throughout, its weights copied in after each epoch
    weights: dict[str, Tensor]
    model_config: ModelConfig
    train_config: TrainConfig
    history: TrainingHistory
    evaluation: Evaluation | None = None
    epochs_run: int = 0
    stopped_early: bool = False
    seconds: float = 0.0


def train_stacked(
    members: Sequence[ModelConfig | str | int],
    task: TaskConfig | PermutationTask | None = None,
    train_config: TrainConfig | Sequence[TrainConfig] | None = None,
    *,
    architecture: ModelConfig | str = "d32h2",
    device: torch.device | str | None = None,
    exact: bool | None = None,
    progress: bool = True,
) -> list[TrainResult]:
    """Train K models of one architecture as one stacked computation; one ``TrainResult`` per member.

    Member ``i`` is the twin of ``train(model_config_i, task, train_config_i)`` (module
    docstring; bit for bit on CPU with ``exact``, the default there).

    Args:
        members: per member a :class:`ModelConfig` or preset name (data seed: its
            ``train_config``'s ``seed``), or an int seed ``s``: ``architecture`` with ``seed=s`` and
            the data stream of ``seed=s``, as the sweep and ``perm-circuits train --seed`` seed a
            run.  Members must share every model field but ``seed``.
        task: the data (a TaskConfig or PermutationTask; default: the plain task for the members' V).
        train_config: the recipe (default: the study's), or one per member differing in ``seed``
            only.  Checkpointing is not supported (``checkpoint_every`` must be None).
        device: where weights, optimiser state and every step live (default CPU); batches are drawn
            on the CPU as ``train()`` draws them and moved once per step.
    """
    start = time.perf_counter()
    model_configs, train_configs = _resolve_members(members, architecture, train_config)
    task_config = study_task(task, model_configs[0].V)
    device = torch.device(device) if device is not None else torch.device("cpu")
    if exact is None:
        exact = device.type == "cpu"
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be a bool or None, got {exact!r}")
    recipe, config = train_configs[0], model_configs[0]

    states: list[_Member] = []
    for model_config, member_train in zip(model_configs, train_configs):
        model = build_model(model_config)
        if next(model.parameters()).device != device:
            model.to(device)
        states.append(_Member(model, model.state_dict(keep_vars=True), model_config, member_train, TrainingHistory()))
    data_seeds = sorted({c.seed for c in train_configs})
    generators = {seed: torch.Generator().manual_seed(seed) for seed in data_seeds}
    dropout_generators = [torch.Generator().manual_seed(dropout_seed(c.seed)) for c in train_configs]
    evaluator = EpochEvaluator(task_config, recipe, config.name, device)
    has_recall = task_config.repeat_ratio > 0

    live = list(range(len(states)))  # member indices in stack order
    weights = stack_weights([s.model for s in states], device)
    optimizer = _StackedAdam({n: t for n, t in weights.items() if t.requires_grad}, recipe.lr, exact)
    buffers = {n: t for n, t in weights.items() if not t.requires_grad}
    slots = torch.tensor([data_seeds.index(c.seed) for c in train_configs], dtype=torch.long)
    bar = tqdm(range(1, recipe.epochs + 1), disable=not progress, desc=f"train {len(states)} x {config.name} stacked")
    for epoch in bar:
        running = torch.zeros(len(live), device=device)
        remaining = recipe.samples_per_epoch
        member_slots = slots[live]
        for _ in range(recipe.steps_per_epoch):
            n = min(recipe.batch_size, remaining)
            drawn = [make_batch(task_config, n, generator=generators[seed]) for seed in data_seeds]
            remaining -= n
            inputs, targets, mask = (
                torch.stack([getattr(b, field) for b in drawn])[member_slots].to(device, non_blocking=True)
                for field in ("tokens", "targets", "mask")
            )
            live_weights = {**optimizer.params, **buffers}
            gens = [dropout_generators[i] for i in live] if config.dropout > 0 else None
            losses = stacked_loss(_forward(config, live_weights, inputs, gens, exact),
                                  targets, mask)
            losses.sum().backward()
            optimizer.step()
            running += losses.detach()
        losses_per_member = running.cpu().tolist()  # the epoch's one transfer besides evaluation
        stopped = []
        for row_index, member_index in enumerate(live):
            state = states[member_index]
            with torch.no_grad():
                for name, tensor in state.weights.items():
                    source = optimizer.params[name] if name in optimizer.params else buffers[name]
                    tensor.copy_(source[row_index])
            state.evaluation = evaluator(state.model, state.weights)
            row = {"epoch": epoch, "train_loss": losses_per_member[row_index] / recipe.steps_per_epoch,
                   **state.evaluation.summary()}
            state.history = TrainingHistory(state.history.rows + (row,))
            state.epochs_run = epoch
            if converged(state.history, state.train_config, has_recall):
                state.stopped_early = epoch < recipe.epochs
                state.seconds = time.perf_counter() - start
                stopped.append(row_index)
        if stopped:
            keep = [r for r in range(len(live)) if r not in stopped]
            live = [live[r] for r in keep]
            if not live:
                break
            rows = torch.tensor(keep, dtype=torch.long, device=device)
            optimizer = optimizer.keep(rows)
            buffers = {n: t[rows] for n, t in buffers.items()}
        bar.set_postfix(live=len(live))
    bar.close()
    for member_index in live:
        states[member_index].seconds = time.perf_counter() - start
    return [TrainResult(model=s.model, history=s.history, evaluation=s.evaluation, model_config=s.model_config,
                        task_config=task_config, train_config=s.train_config, epochs_run=s.epochs_run,
                        stopped_early=s.stopped_early, seconds=s.seconds) for s in states]
