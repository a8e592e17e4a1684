"""The study's permutation lookup behind the :class:`~perm_circuits.tasks.base.Task` interface: an
adapter over :mod:`~perm_circuits.tasks.permutation_data` (the same tokens bit for bit), with the
metrics of :func:`evaluate_logits` and the exact Bayesian posterior of :mod:`perm_circuits.posterior`
as its reference."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.tasks.permutation_posterior import Posterior, bayes_posterior
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch, make_test_set, permutation_batch, validate_tokens
from perm_circuits.tasks.base import TaskBatch, register_task
from perm_circuits.tasks.evaluation import Evaluation, reference_agreement

__all__ = ["PermutationDetail", "PermutationTask", "StepMetrics", "SubgroupMetrics", "evaluate_logits",
           "reference_probs", "value_probs"]

@dataclass(frozen=True)
class StepMetrics:
    """Metrics of one y-prediction step over the test set."""

    step: int
    n: int
    accuracy: float
    bayes_accuracy: float
    bayes_accuracy_train: float
    mae_uniform: float
    max_ae_uniform: float
    mae_train: float
    max_ae_train: float
    loss: float


@dataclass(frozen=True)
class SubgroupMetrics:
    """Last-step metrics of a subgroup (errors against the uniform-prior posterior)."""

    name: str
    n: int
    accuracy: float
    mae: float
    max_ae: float
    loss: float


@dataclass(frozen=True)
class PermutationDetail:
    """The permutation task's breakdown of an :class:`~perm_circuits.tasks.evaluation.Evaluation`
    (its ``detail``): the study's per-step metrics against the Bayesian posteriors, the last step by
    subgroup and the probe.  ``str(evaluation)`` renders its tables; ``evaluation.summary()`` gives its
    headline keys (those of the shipped checkpoints and the training history)."""

    steps: tuple[StepMetrics, ...]
    elimination: SubgroupMetrics
    memorization: SubgroupMetrics | None
    probe: tuple[float, ...] | None
    recall_by_source: tuple[SubgroupMetrics, ...] = ()
    """One subgroup ``recall_x{k}`` per earlier query ``x_k`` that some last query of the test set
    repeats (sorted by ``k``); together they are the memorization subgroup."""

    @property
    def recall_accuracy(self) -> float:
        """Memorization-subgroup accuracy over every repeated sample, whichever ``x_k`` it repeats
        (nan when the test set has no repeated query)."""
        return self.memorization.accuracy if self.memorization else math.nan

    @property
    def recall_accuracy_by_source(self) -> dict[int, float]:
        """``{k: accuracy}`` of the last step where the last query repeats ``x_k`` (1-based)."""
        return {int(g.name.removeprefix("recall_x")): g.accuracy for g in self.recall_by_source}

    @property
    def elimination_accuracy(self) -> float:
        return self.elimination.accuracy

    @property
    def early_mae_train(self) -> float:
        """Mean over steps ``1..V-1`` of the MAE against the train-prior posterior."""
        return sum(s.mae_train for s in self.steps[:-1]) / (len(self.steps) - 1)

    def step_dataframe(self) -> pd.DataFrame:
        """One row per y-prediction step (index ``step``; the :class:`StepMetrics` fields)."""
        return pd.DataFrame([asdict(s) for s in self.steps]).set_index("step")

    def subgroup_dataframe(self) -> pd.DataFrame:
        """One row per last-step subgroup: elimination, memorization, then ``recall_x{k}`` per source."""
        groups = (self.elimination, self.memorization, *self.recall_by_source)
        rows = [asdict(g) for g in groups if g is not None]
        return pd.DataFrame(rows).set_index("name")

    def summary(self, evaluation: Evaluation) -> dict[str, float]:
        """Flat dict of headline numbers (training history, checkpoint metadata, sweep rows): ``test_loss``
        (the evaluation's), then the detail's; ``recall_x{k}_accuracy`` only where some repeated query is
        not ``x1`` (the study's keys stay those of the shipped checkpoints)."""
        out: dict[str, float] = {
            "test_loss": evaluation.test_loss,
            "elimination_accuracy": self.elimination.accuracy,
            "recall_accuracy": self.recall_accuracy,
            "early_mae_train": self.early_mae_train,
        }
        by_source = self.recall_accuracy_by_source
        if set(by_source) - {1}:
            out.update({f"recall_x{k}_accuracy": acc for k, acc in by_source.items()})
        for s in self.steps:
            out.update({f"step{s.step}_{key}": getattr(s, key) for key in ("accuracy", "mae_uniform", "mae_train")})
        out.update({f"probe_p{value}": p for value, p in enumerate(self.probe or (), start=1)})
        return out

    def to_markdown(self, evaluation: Evaluation) -> str:
        """The study's tables: per step, by last-step subgroup, and the probe."""
        steps = self.step_dataframe()
        pct = ["accuracy", "bayes_accuracy", "bayes_accuracy_train"]
        steps[pct] = steps[pct].map(lambda v: f"{100 * v:.2f}%")
        lines = [f"## {evaluation.model_name}: {evaluation.n_samples} test samples, test loss {evaluation.test_loss:.4f}",
                 "", steps.to_markdown(floatfmt=".6f"), "",
                 "Last step by subgroup (errors vs the uniform-prior posterior):", ""]
        groups = self.subgroup_dataframe()
        groups["accuracy"] = groups["accuracy"].map(lambda v: f"{100 * v:.2f}%")
        lines.append(groups.to_markdown(floatfmt=".6f"))
        if self.probe is not None:
            probs = ", ".join(f"p({v})={p:.4f}" for v, p in enumerate(self.probe, start=1))
            lines += ["", f"Probe [2,4,5,3,4,5,3,2,2] (recall 4, elimination 1): {probs}"]
        return "\n".join(lines)


def value_probs(logits: Float[Tensor, "batch seq vocab"], V: int) -> Float[Tensor, "batch step value"]:
    """P(y = v), v = 1..V, at every y-prediction position: softmax over the full vocabulary, restricted."""
    return logits[:, 0::2].softmax(dim=-1)[..., 1 : V + 1]


def _subgroup(name: str, rows: Tensor, probs, correct, posterior, losses) -> SubgroupMetrics | None:
    n = int(rows.sum())
    if n == 0:
        return None
    err = (probs[rows] - posterior[rows]).abs()
    return SubgroupMetrics(name=name, n=n, accuracy=float(correct[rows].float().mean()), mae=float(err.mean()),
        max_ae=float(err.max()), loss=float(losses[rows].mean()))


def reference_probs(posterior: Float[Tensor, "batch step value"], seq: int) -> Float[Tensor, "batch seq vocab"]:
    """The task's reference over the vocabulary ``0..V`` from the uniform-prior ``posterior`` of its y steps:
    the posterior at every y-prediction position, uniform over the values at x positions (no loss)."""
    n, _, V = posterior.shape
    probs = torch.zeros(n, seq, V + 1, device=posterior.device)
    probs[:, :, 1:] = 1.0 / V
    probs[:, 0::2, 1:] = posterior
    return probs


def evaluate_logits(
    logits: Float[Tensor, "batch seq vocab"],
    batch: TaskBatch,
    config: TaskConfig,
    posteriors: tuple[Posterior, Posterior] | None = None,
    model_name: str = "model",
    probe: Sequence[float] | None = None,
    reference: bool = True,
) -> Evaluation:
    """The permutation task's :class:`~perm_circuits.tasks.evaluation.Evaluation` from precomputed
    logits (``posteriors`` = (uniform, train) may be cached) on a permutation-lookup ``batch`` (its
    extras rebuilt from the tokens where missing): the task's metrics, the mean loss of the y steps,
    the agreement with the uniform-prior posterior (``reference=False``: not measured, an empty
    mapping; the runs of an ablation table and of the training dynamics read the detail only, and
    the agreement would double the cost of a call) and the :class:`PermutationDetail`."""
    V = config.V
    batch = permutation_batch(batch)
    extras = batch.extras
    if posteriors is None:
        posteriors = (bayes_posterior(batch.tokens, config, "uniform"), bayes_posterior(batch.tokens, config, "train"))
    uniform, train = posteriors[0].probs, posteriors[1].probs
    logits = logits.detach().float()
    targets = extras["ys"]  # [batch, V]: the target of each step
    log_probs = logits[:, 0::2].log_softmax(dim=-1)
    losses = -log_probs.gather(2, targets[..., None])[..., 0]  # [batch, step]
    probs = value_probs(logits, V)
    correct = logits[:, 0::2].argmax(-1) == targets
    target_index = (targets - 1)[..., None]
    steps = []
    for k in range(V):
        err_u = (probs[:, k] - uniform[:, k]).abs()
        err_t = (probs[:, k] - train[:, k]).abs()
        steps.append(
            StepMetrics(step=k + 1, n=len(batch), accuracy=float(correct[:, k].float().mean()),
                bayes_accuracy=float(uniform[:, k].gather(1, target_index[:, k]).mean()),
                bayes_accuracy_train=float(train[:, k].gather(1, target_index[:, k]).mean()),
                mae_uniform=float(err_u.mean()), max_ae_uniform=float(err_u.max()), mae_train=float(err_t.mean()),
                max_ae_train=float(err_t.max()), loss=float(losses[:, k].mean()))
        )
    last = (probs[:, -1], correct[:, -1], uniform[:, -1], losses[:, -1])
    repeated, repeat_source = extras["repeated"], extras["repeat_source"]
    elimination = _subgroup("elimination", ~repeated, *last)
    memorization = _subgroup("memorization", repeated, *last)
    sources = repeat_source[repeated].unique().tolist()  # 0-based, sorted
    by_source = tuple(_subgroup(f"recall_x{s + 1}", repeated & (repeat_source == s), *last) for s in sources)
    if elimination is None:
        elimination = SubgroupMetrics("elimination", 0, math.nan, math.nan, math.nan, math.nan)
    detail = PermutationDetail(steps=tuple(steps), elimination=elimination, memorization=memorization,
        probe=tuple(float(p) for p in probe) if probe is not None else None, recall_by_source=by_source)
    task = PermutationTask(config)
    test_loss = float(losses.mean())
    metrics = {"elimination_accuracy": detail.elimination_accuracy, "recall_accuracy": detail.recall_accuracy,
               **{f"step{s.step}_accuracy": s.accuracy for s in detail.steps}, "test_loss": test_loss}
    return Evaluation(task=task.name, model_name=model_name, metrics=metrics, test_loss=test_loss,
        reference=reference_agreement(logits, batch, reference_probs(uniform, batch.tokens.shape[1])) if reference else {},
        n_samples=len(batch), task_dict=task.to_dict(), detail=detail)


@dataclass(frozen=True)
class PermutationTask:
    """In-context permutation lookup (the study) on the distribution ``config`` (default: V = 5, no
    repeated query)."""

    config: TaskConfig = field(default_factory=TaskConfig)
    name: ClassVar[str] = "permutation"
    analyses: ClassVar[dict[str, str]] = {
        "ablation_table": "perm_circuits.analysis.interventions.permutation_table:study_ablation_table",
        "ablate": "perm_circuits.analysis.interventions.hooks:study_ablate",
        "circuit_problem": "perm_circuits.analysis.circuits.criteria:study_setup",
        "direct_logit_attribution": "perm_circuits.analysis.probes.dla:study_logit_attribution",
        "patching_pair": "perm_circuits.analysis.interventions.path_patching:induction_patching_pair",
    }
    """The study's own analyses (:func:`~perm_circuits.tasks.base.own_analysis`): what the general
    tools run on a permutation-lookup model when given no ``task=`` / ``metric=``."""

    def __post_init__(self) -> None:
        if not isinstance(self.config, TaskConfig):
            raise TypeError(f"config must be a perm_circuits.TaskConfig, got {type(self.config).__name__}")

    @property
    def d_vocab(self) -> int:
        return self.config.d_vocab

    @property
    def n_ctx(self) -> int:
        return self.config.seq_len

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Elimination and recall accuracy of the last step, each step's accuracy, and the test loss."""
        steps = tuple(f"step{k}_accuracy" for k in range(1, self.config.V + 1))
        return ("elimination_accuracy", "recall_accuracy", *steps, "test_loss")

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        """``make_batch(config, n, split=split, generator=generator)``."""
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        return make_batch(self.config, n, split=split, generator=generator)

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch:
        """``make_test_set(config, n, seed)``."""
        return make_test_set(self.config, n=n, seed=seed)

    def metrics(self, logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch) -> dict[str, float]:
        """:func:`evaluate_logits`' :attr:`metric_names` (``recall_accuracy`` nan when no last query repeats)."""
        return dict(evaluate_logits(logits, batch, self.config, reference=False).metrics)

    def reference(self, batch: TaskBatch) -> Float[Tensor, "batch seq vocab"]:
        """The exact Bayesian posterior (uniform prior over all permutations) over the vocabulary at
        every y-prediction position; uniform over the values at x positions (no loss)."""
        posterior = bayes_posterior(batch.tokens, self.config, "uniform").probs  # [batch, step, value]
        return reference_probs(posterior, batch.tokens.shape[1])

    def evaluation_detail(self, logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch) -> PermutationDetail:
        """The :class:`PermutationDetail` of ``logits`` on ``batch`` (no probe): the ``detail`` the runner
        attaches to this task's :class:`~perm_circuits.tasks.evaluation.Evaluation` on any model."""
        return evaluate_logits(logits, batch, self.config, reference=False).detail

    @property
    def value_tokens(self) -> slice:
        """The tokens that carry values, ``1..V`` (token 0 is unused): what the weight probes read."""
        return slice(1, self.config.V + 1)

    @property
    def named_positions(self) -> dict[str, range]:
        """The position classes of a circuit node beside ``first``/``last``/``p{k}``: ``query`` (every
        x, ``0, 2, ..., 2V - 2``) and ``answer`` (every revealed y, ``1, 3, ..., 2V - 3``)."""
        V = self.config.V
        return {"query": range(0, 2 * V - 1, 2), "answer": range(1, 2 * V - 2, 2)}

    def check_tokens(self, tokens: Tensor) -> Tensor:
        """Model inputs checked against the task (:func:`~perm_circuits.tasks.permutation_data.validate_tokens`)."""
        return validate_tokens(tokens, self.config.V)

    def token_labels(self, tokens: list[int]) -> list[str]:
        """``["x=2", "y=4", "x=5", ...]`` (for views)."""
        return [f"{'x' if pos % 2 == 0 else 'y'}={token}" for pos, token in enumerate(tokens)]

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.name, **self.config.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PermutationTask:
        """From :meth:`to_dict` output, with or without the ``"task"`` key."""
        data = dict(data)
        name = data.pop("task", cls.name)
        if name != cls.name:
            raise ValueError(f"not a {cls.name!r} task dict: 'task' is {name!r}")
        return cls(TaskConfig.from_dict(data))


register_task(PermutationTask.name, PermutationTask, recognise="perm_circuits.models:bridge_task")
