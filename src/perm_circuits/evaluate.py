"""Per-step evaluation against the exact Bayesian posterior.

For every y-prediction step ``1..V`` of a fixed test set, :func:`evaluate` measures the model's
accuracy, the accuracy a Bayesian predictor would reach (its mean probability on the target),
the mean and max absolute error between the model's distribution over the ``V`` value tokens
and each posterior (uniform prior over all permutations, and the train-split prior), and the
loss.  The last step is split into the elimination subgroup (a new query) and the memorization
subgroup (the query repeats an earlier one: recall must beat elimination), as in the study's
section 07, and the memorization subgroup further into one subgroup ``recall_x{k}`` per repeated
earlier query ``x_k`` (``TaskConfig.repeat_sources``; the study repeats only ``x1``).
Distributions are the softmax over the full vocabulary restricted to tokens ``1..V`` (mass on the
unused token 0 counts as error).  Accuracy everywhere is the argmax over the full
vocabulary equal to the target, so a model that prefers token 0 is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
from jaxtyping import Float
from torch import Tensor

from perm_circuits.hooks import run_logits
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.posterior import Posterior, bayes_posterior
from perm_circuits.task import Batch, TaskConfig, exhaustive_batch, make_batch, make_test_set, probe_sequence
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import PermutationTask, as_batch

__all__ = [
    "Evaluation",
    "RecallGeneralisation",
    "StepMetrics",
    "SubgroupMetrics",
    "evaluate",
    "evaluate_logits",
    "probe_probabilities",
    "recall_generalisation",
    "value_probs",
]


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
class Evaluation:
    """Result of :func:`evaluate`; ``str()`` renders the study's tables."""

    model_name: str
    steps: tuple[StepMetrics, ...]
    elimination: SubgroupMetrics
    memorization: SubgroupMetrics | None
    test_loss: float
    probe: tuple[float, ...] | None
    n_samples: int
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
        """``{k: accuracy}`` of the last step where the last query repeats ``x_k`` (1-based ``k``)."""
        return {int(g.name.removeprefix("recall_x")): g.accuracy for g in self.recall_by_source}

    @property
    def elimination_accuracy(self) -> float:
        return self.elimination.accuracy

    @property
    def early_mae_train(self) -> float:
        """Mean over steps ``1..V-1`` of the MAE against the train-prior posterior."""
        return sum(s.mae_train for s in self.steps[:-1]) / (len(self.steps) - 1)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per step."""
        return pd.DataFrame([asdict(s) for s in self.steps]).set_index("step")

    def subgroup_dataframe(self) -> pd.DataFrame:
        """One row per last-step subgroup: elimination, memorization, then ``recall_x{k}`` per source."""
        groups = (self.elimination, self.memorization, *self.recall_by_source)
        rows = [asdict(g) for g in groups if g is not None]
        return pd.DataFrame(rows).set_index("name")

    def summary(self) -> dict[str, float]:
        """Flat dict of headline numbers (used in training history and checkpoint metadata).

        Per-source recall accuracies ``recall_x{k}_accuracy`` are included unless the only
        repeated query is ``x1`` (the study, where it equals ``recall_accuracy``), so the study's
        summaries keep the keys stored with the shipped checkpoints.
        """
        out: dict[str, float] = {
            "test_loss": self.test_loss,
            "elimination_accuracy": self.elimination.accuracy,
            "recall_accuracy": self.recall_accuracy,
            "early_mae_train": self.early_mae_train,
        }
        by_source = self.recall_accuracy_by_source
        if set(by_source) - {1}:
            out.update({f"recall_x{k}_accuracy": acc for k, acc in by_source.items()})
        for s in self.steps:
            out[f"step{s.step}_accuracy"] = s.accuracy
            out[f"step{s.step}_mae_uniform"] = s.mae_uniform
            out[f"step{s.step}_mae_train"] = s.mae_train
        if self.probe is not None:
            for value, p in enumerate(self.probe, start=1):
                out[f"probe_p{value}"] = p
        return out

    def to_markdown(self) -> str:
        steps = self.to_dataframe()
        pct = ["accuracy", "bayes_accuracy", "bayes_accuracy_train"]
        steps[pct] = steps[pct].map(lambda v: f"{100 * v:.2f}%")
        lines = [f"## {self.model_name}: {self.n_samples} test samples, test loss {self.test_loss:.4f}", ""]
        lines.append(steps.to_markdown(floatfmt=".6f"))
        lines += ["", "Last step by subgroup (errors vs the uniform-prior posterior):", ""]
        groups = self.subgroup_dataframe()
        groups["accuracy"] = groups["accuracy"].map(lambda v: f"{100 * v:.2f}%")
        lines.append(groups.to_markdown(floatfmt=".6f"))
        if self.probe is not None:
            probs = ", ".join(f"p({v})={p:.4f}" for v, p in enumerate(self.probe, start=1))
            lines += ["", f"Probe [2,4,5,3,4,5,3,2,2] (recall 4, elimination 1): {probs}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()


def value_probs(logits: Float[Tensor, "batch seq vocab"], V: int) -> Float[Tensor, "batch step value"]:
    """P(y = v), v = 1..V, at every y-prediction position: softmax over the full vocabulary, restricted."""
    return logits[:, 0::2].softmax(dim=-1)[..., 1 : V + 1]


def _subgroup(name: str, rows: Tensor, probs, correct, posterior, losses) -> SubgroupMetrics | None:
    n = int(rows.sum())
    if n == 0:
        return None
    err = (probs[rows] - posterior[rows]).abs()
    return SubgroupMetrics(
        name=name,
        n=n,
        accuracy=float(correct[rows].float().mean()),
        mae=float(err.mean()),
        max_ae=float(err.max()),
        loss=float(losses[rows].mean()),
    )


def evaluate_logits(
    logits: Float[Tensor, "batch seq vocab"],
    batch: Batch,
    config: TaskConfig,
    posteriors: tuple[Posterior, Posterior] | None = None,
    model_name: str = "model",
    probe: Sequence[float] | None = None,
) -> Evaluation:
    """Metrics from precomputed logits (``posteriors`` = (uniform, train) may be cached)."""
    V = config.V
    if posteriors is None:
        posteriors = (bayes_posterior(batch.inputs, config, "uniform"), bayes_posterior(batch.inputs, config, "train"))
    uniform, train = posteriors[0].probs, posteriors[1].probs
    logits = logits.detach().float()
    targets = batch.ys  # [batch, V]: the target of each step
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
            StepMetrics(
                step=k + 1,
                n=len(batch),
                accuracy=float(correct[:, k].float().mean()),
                bayes_accuracy=float(uniform[:, k].gather(1, target_index[:, k]).mean()),
                bayes_accuracy_train=float(train[:, k].gather(1, target_index[:, k]).mean()),
                mae_uniform=float(err_u.mean()),
                max_ae_uniform=float(err_u.max()),
                mae_train=float(err_t.mean()),
                max_ae_train=float(err_t.max()),
                loss=float(losses[:, k].mean()),
            )
        )
    last = (probs[:, -1], correct[:, -1], uniform[:, -1], losses[:, -1])
    elimination = _subgroup("elimination", ~batch.repeated, *last)
    memorization = _subgroup("memorization", batch.repeated, *last)
    sources = batch.repeat_source[batch.repeated].unique().tolist()  # 0-based, sorted
    by_source = tuple(
        _subgroup(f"recall_x{s + 1}", batch.repeated & (batch.repeat_source == s), *last) for s in sources
    )
    if elimination is None:
        elimination = SubgroupMetrics("elimination", 0, math.nan, math.nan, math.nan, math.nan)
    return Evaluation(
        model_name=model_name,
        steps=tuple(steps),
        elimination=elimination,
        memorization=memorization,
        test_loss=float(losses.mean()),
        probe=tuple(float(p) for p in probe) if probe is not None else None,
        n_samples=len(batch),
        recall_by_source=by_source,
    )


def probe_probabilities(
    model, hooks: Sequence[tuple[str, Callable]] | None = None
) -> Float[Tensor, " value"]:
    """P(y = v) for v = 1..5 at the last position of the study's probe ``[2,4,5,3,4,5,3,2,2]``."""
    V = model_config_of(model).V
    if V != 5:
        raise ValueError(f"the study's probe sequence is defined for V=5, model has V={V}")
    logits = run_logits(model, probe_sequence(), hooks)
    return value_probs(logits, V)[0, -1]


def evaluate(
    model,
    test_set: Batch | TaskBatch | None = None,
    *,
    task_config: TaskConfig | PermutationTask | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
    probe: bool = True,
) -> Evaluation:
    """Evaluate ``model`` per step against the Bayesian posteriors.

    Args:
        model: a bridge from :func:`~perm_circuits.build_model` / :func:`~perm_circuits.load_pretrained`.
        test_set: the batch to evaluate on; default: the fixed test set (``n`` samples from the
            test permutations, ``seed``) with the model's training ``repeat_ratio`` and
            ``repeat_sources``.
        task_config: the task; default: the one stored with the model.  A
            :class:`~perm_circuits.tasks.PermutationTask` (and a ``TaskBatch`` test set from it)
            is unwrapped: the same evaluation.
        hooks: a TransformerLens hook list applied during the forward pass (ablation, patching...).
        probe: also run the study's probe sequence (a batch of one) under ``hooks``; turn off
            for hooks tied to the test set's batch size (row-paired resampling).
    """
    if isinstance(task_config, PermutationTask):  # the Task interface's wrapper of the study's task
        task_config = task_config.config
    if isinstance(test_set, TaskBatch):
        test_set = as_batch(test_set)
    config = task_config or task_config_of(model)
    if test_set is None:
        test_set = make_test_set(config, n=n, seed=seed)
    if not isinstance(test_set, Batch):
        raise TypeError(f"test_set must be a perm_circuits.Batch, got {type(test_set).__name__}")
    logits = run_logits(model, test_set.inputs, hooks)
    probs = probe_probabilities(model, hooks).tolist() if probe and config.V == 5 else None
    return evaluate_logits(logits, test_set, config, model_name=model_config_of(model).name, probe=probs)


@dataclass(frozen=True)
class RecallGeneralisation:
    """Recall accuracy when the last query repeats ``x_k``, for each ``k = 1..V-1``.

    Every ``k`` is measured whatever the model was trained on (``TaskConfig.repeat_sources``):
    the study trains on repeats of ``x1`` only, and a model with general in-context recall
    answers every ``k`` while a position-1 shortcut answers only ``k = 1``.  ``elimination`` is
    the accuracy on non-repeated last queries.  ``trained_sources`` are the ``k`` that the task
    (``TaskConfig.repeat_sources``) repeats, i.e. the ones seen in training.
    """

    model_name: str
    recall: tuple[float, ...]
    elimination: float
    n_per_source: int
    trained_sources: tuple[int, ...] = (1,)

    def to_dataframe(self) -> pd.DataFrame:
        rows = [{"repeats": f"x{k}", "recall_accuracy": acc} for k, acc in enumerate(self.recall, start=1)]
        return pd.DataFrame(rows).set_index("repeats")


def recall_generalisation(
    model,
    *,
    task_config: TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int | None = 2000,
    seed: int = 99,
) -> RecallGeneralisation:
    """Measure recall when the repeated query is ``x_k`` for every ``k`` (test permutations).

    Batch ``k`` repeats ``x_k`` in every sample (an explicit source, so the task's own
    ``repeat_sources`` do not restrict which ``k`` are measured; the batches are the same for
    every ``repeat_sources``).  ``n=None`` measures exhaustively: every test permutation with
    every order of the queries (:func:`~perm_circuits.task.exhaustive_batch`; ``n_per_source``
    is then that count, 2,880 for the study's split).
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive int or None (exhaustive), got {n!r}")
    config = task_config or task_config_of(model)

    def batch_of(source: int | None, offset: int):
        if n is None:
            return exhaustive_batch(config, split="test", repeat_source=source)
        ratio = 0.0 if source is None else 1.0
        return make_batch(config, n, split="test", seed=seed + offset, repeat_ratio=ratio, repeat_source=source)

    recall = []
    for source in range(config.V - 1):
        batch = batch_of(source, source)
        logits = run_logits(model, batch.inputs, hooks)
        recall.append(float((logits[:, -1].argmax(-1) == batch.ys[:, -1]).float().mean()))
    plain = batch_of(None, -1)
    logits = run_logits(model, plain.inputs, hooks)
    elimination = float((logits[:, -1].argmax(-1) == plain.ys[:, -1]).float().mean())
    return RecallGeneralisation(model_config_of(model).name, tuple(recall), elimination, len(batch), config.repeat_sources)
