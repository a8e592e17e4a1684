"""Record the dynamics of a training run at log-spaced optimiser steps.

:class:`DynamicsRecorder` is a step callback for :func:`perm_circuits.train.train`
(``train(..., step_callbacks=[recorder])``).  At each of its ``steps`` it measures, in eval mode
and without gradients, on fixed seeded test sets built once:

* ``"accuracy"``: last-step accuracy of the elimination and memorization subgroups of the task's
  own test set (``elimination_accuracy``, ``recall_accuracy``, as in the training history) and
  ``recall_x{k}_accuracy`` for every earlier query ``k = 1..V-1`` on sequences that all repeat
  (the :func:`~perm_circuits.analysis.probes.induction.induction_test_set`), so a shortcut that recalls
  only ``x1`` shows;
* ``"loss"``: ``test_loss`` (the task's test set) and ``train_loss`` (the step's batch);
* ``"memory"``: every memory-recall probe R(W_hat, W*) of every layer (Bietti et al. 2023;
  :func:`~perm_circuits.analysis.probes.memory.model_memory_probes`), named
  ``{component}.{circuit}.{map}`` (``L0H0.QK.x_match``, ``L0H1.OV.suppress``, ``L0MLP.MLP.copy``);
* ``"induction"``: previous-token, induction and duplicate-token scores of every head
  (:func:`~perm_circuits.analysis.probes.induction.induction_scores`), ``L0H0.previous_token`` ...;
* ``"head_scores"``: the study's attention scores of every head
  (:func:`~perm_circuits.analysis.study.scores.head_scores`), ``L0H0.duplicate_score`` ...;
* ``llc=True``: the local learning coefficient ``llc`` (:mod:`perm_circuits.dynamics.llc`,
  needs the ``dynamics`` extra).

Recording reads the model and its own test sets only: the weights, the optimiser and training's
generators are untouched, so a run gives bit-identical weights with and without a recorder, and
the record itself is deterministic for a fixed seed.  The cost is one measurement per recorded
step (about ten training steps' worth on d32h2 without the LLC), so log-spaced steps keep it
small: :data:`DEFAULT_POINTS` points cost a few seconds whatever the run's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from perm_circuits.analysis.interventions.checks import study_config
from perm_circuits.analysis.probes.induction import induction_scores, induction_test_set
from perm_circuits.analysis.probes.memory import model_memory_probes
from perm_circuits.analysis.study.scores import STUDY_REPEAT_RATIO, head_scores
from perm_circuits.checks import check_int, check_seed
from perm_circuits.devices import model_device
from perm_circuits.dynamics.llc import LLCConfig, local_learning_coefficient, require_devinterp
from perm_circuits.dynamics.record import DynamicsRecord
from perm_circuits.evaluate import evaluate_logits
from perm_circuits.models import fast_forward, model_config_of
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_posterior import bayes_posterior
from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set
from perm_circuits.tasks.base import log_spaced_steps

__all__ = ["DEFAULT_POINTS", "DEFAULT_TEST_N", "SIGNAL_GROUPS", "DynamicsRecorder", "default_steps"]

SIGNAL_GROUPS = ("accuracy", "loss", "memory", "induction", "head_scores")
DEFAULT_POINTS = 32
"""Recorded steps of the default cadence (log-spaced over the run): benchmarks/dynamics.py
measures its cost against training without a recorder."""
DEFAULT_TEST_N = 512

_HEAD_SCORE_FIELDS = (
    "elim_y_mass", "elim_entropy", "elimination_score", "x_prev_y", "y_self", "binding_score",
    "dup_repeated", "dup_baseline", "duplicate_score", "source_y_repeated", "source_y_baseline", "source_y_shift",
)
_INDUCTION_FIELDS = ("previous_token", "induction", "duplicate_token")


class _WeightsView:
    """The bridge with its ``state_dict()`` built once (the bridge rebuilds it per call, ~10 ms on
    d32h2, and :func:`~perm_circuits.analysis.probes.memory.model_memory_probes` asks ~20 times per
    layer); valid while the weights do not change (one measurement)."""

    def __init__(self, model):
        self._model = model
        self._state = model.state_dict()

    def state_dict(self):
        return self._state

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def default_steps(total_steps: int, n: int = DEFAULT_POINTS) -> tuple[int, ...]:
    """The default cadence: about ``n`` log-spaced steps from 1 to ``total_steps``
    (:func:`~perm_circuits.tasks.base.log_spaced_steps`)."""
    return log_spaced_steps(total_steps, n=n)


class DynamicsRecorder:
    """A ``train(..., step_callbacks=[recorder])`` callback recording signals at ``steps``.

    ``steps``: global optimiser steps, strictly increasing positive ints (e.g. :func:`default_steps`
    of ``epochs * steps_per_epoch``); ``signals``: groups of :data:`SIGNAL_GROUPS` (default all);
    the test sets (``test_n`` sequences, seeded by ``seed``) are built once from ``task_config``;
    ``llc`` adds the local learning coefficient (needs devinterp) with ``llc_config``'s SGLD
    settings.  After training, :meth:`result` gives the :class:`DynamicsRecord`."""

    def __init__(
        self,
        task: TaskConfig | PermutationTask,
        steps: Sequence[int],
        *,
        signals: Sequence[str] = SIGNAL_GROUPS,
        test_n: int = DEFAULT_TEST_N,
        seed: int = 1234,
        llc: bool = False,
        llc_config: LLCConfig | None = None,
    ):
        task_config = study_config(task)
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
            raise ValueError(f"steps must be a non-empty sequence of positive ints, got {steps!r}")
        for step in steps:
            check_int("every step", step, 1)
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"steps must be strictly increasing, got {list(steps)}")
        if isinstance(signals, str) or not isinstance(signals, Sequence) or not signals:
            raise ValueError(f"signals must be a non-empty sequence of {SIGNAL_GROUPS}, got {signals!r}")
        unknown = [s for s in signals if s not in SIGNAL_GROUPS]
        if unknown:
            raise ValueError(f"unknown signal groups {unknown}; choose from {SIGNAL_GROUPS}")
        self.test_n = check_int("test_n", test_n, 1)
        self.seed = check_seed(check_int("seed", seed, 0))
        if not isinstance(llc, bool):
            raise TypeError(f"llc must be a bool, got {llc!r}")
        if llc_config is not None and not isinstance(llc_config, LLCConfig):
            raise TypeError(f"llc_config must be an LLCConfig or None, got {type(llc_config).__name__}")
        if llc:
            require_devinterp()  # fail before training starts
        self.task_config = task_config
        self.steps = tuple(steps)
        self.groups = tuple(dict.fromkeys(signals))
        self.llc = llc
        self.llc_config = llc_config or LLCConfig()
        self._pending = set(self.steps)
        self._rows: list[tuple[int, dict[str, float]]] = []
        self._model_name: str | None = None

        self._own = make_test_set(task_config, n=test_n, seed=seed)
        self._posteriors = tuple(bayes_posterior(self._own.tokens, task_config, prior) for prior in ("uniform", "train"))
        self._every = induction_test_set(task_config.V, n=test_n, seed=seed)
        if 0 < task_config.repeat_ratio < 1:
            self._mixed = self._own
        else:  # head scores need both repeated and new last queries
            self._mixed = make_test_set(replace(task_config, repeat_ratio=STUDY_REPEAT_RATIO), n=test_n, seed=seed)

    def __call__(self, info: Any) -> None:
        if info.step in self._pending:
            self._pending.discard(info.step)
            self.measure(info.model, info.step, train_loss=info.loss)

    def measure(self, model, step: int, *, train_loss: float | torch.Tensor | None = None) -> dict[str, float]:
        """Measure every signal of ``model`` now and add it to the record as ``step`` (the model's
        train/eval mode is restored afterwards; its weights are not touched)."""
        check_int("step", step, 0)
        if self._rows and step <= self._rows[-1][0]:
            raise ValueError(f"step {step} is not after the last recorded step {self._rows[-1][0]}")
        config = model_config_of(model)
        if config.V != self.task_config.V:
            raise ValueError(f"model V={config.V} does not match the recorder's task V={self.task_config.V}")
        self._model_name = config.name
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                values = self._measure(model, config, train_loss)
            if self.llc:
                values["llc"] = local_learning_coefficient(model, self.task_config, self.llc_config).llc
        finally:
            model.train(was_training)
        self._rows.append((step, values))
        return values

    def _measure(self, model, config, train_loss) -> dict[str, float]:
        values: dict[str, float] = {}
        groups = self.groups
        if "accuracy" in groups or "loss" in groups:
            # the forward on the model's device, the logits back beside the CPU test sets: once per recorded step
            evaluation = evaluate_logits(
                _logits(model, self._own.tokens), self._own, self.task_config, self._posteriors, config.name,
                reference=False)
            if "loss" in groups:
                values["test_loss"] = evaluation.test_loss
                if train_loss is not None:
                    values["train_loss"] = float(train_loss)
            if "accuracy" in groups:
                values["elimination_accuracy"] = evaluation.metrics["elimination_accuracy"]
                values["recall_accuracy"] = evaluation.metrics["recall_accuracy"]
                logits = _logits(model, self._every.tokens)
                correct = logits[:, -1].argmax(-1) == self._every.extras["ys"][:, -1]
                for k in range(1, config.V):
                    rows = self._every.extras["repeat_source"] == k - 1
                    values[f"recall_x{k}_accuracy"] = float(correct[rows].float().mean()) if rows.any() else math.nan
        if "memory" in groups:
            view = _WeightsView(model)
            for layer in range(config.n_layers):
                for probe in model_memory_probes(view, layer=layer).probes:
                    values[f"{probe.component}.{probe.circuit}.{probe.map}"] = probe.recall
        if "induction" in groups:
            for score in induction_scores(model, self._every):
                for name in _INDUCTION_FIELDS:
                    values[f"{score.component}.{name}"] = getattr(score, name)
        if "head_scores" in groups:
            for score in head_scores(model, self._mixed, task=self.task_config):
                for name in _HEAD_SCORE_FIELDS:
                    values[f"{score.component}.{name}"] = getattr(score, name)
        return values

    def result(self) -> DynamicsRecord:
        """The record so far (signals in first-seen order; nan where a step lacks one)."""
        names = tuple(dict.fromkeys(name for _, values in self._rows for name in values))
        return DynamicsRecord(
            steps=tuple(step for step, _ in self._rows),
            signals=names,
            values=tuple(tuple(float(values.get(name, math.nan)) for name in names) for _, values in self._rows),
            settings={
                "model": self._model_name,
                "task": self.task_config.to_dict(),
                "groups": list(self.groups),
                "planned_steps": list(self.steps),
                "test_n": self.test_n,
                "seed": self.seed,
                "llc": self.llc_config.to_dict() if self.llc else None,
            },
        )


def _logits(model, inputs: torch.Tensor) -> torch.Tensor:
    """``fast_forward(model, inputs)`` run on the model's device, returned on the inputs' device."""
    return fast_forward(model, inputs.to(model_device(model))).to(inputs.device)
