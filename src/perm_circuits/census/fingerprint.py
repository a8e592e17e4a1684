"""A model's mechanism fingerprint: a small flat record that identifies which circuit it runs.

One fingerprint is taken from tools the library already has, on one model of the permutation study:

* **attention** (:func:`~perm_circuits.analysis.study.scores.head_scores`, on the fixed test set):
  per head the duplicate-token score (the last query attends to the x it repeats, minus the baseline),
  the y-accumulation (elimination) score, the x -> preceding-y score and the repeated source-y shift;
* **roles** per ablation mode and per reference (:func:`~perm_circuits.analysis.study.verdict.head_roles`,
  every mode of :data:`~perm_circuits.analysis.HOWS`, once against each reference of
  :data:`~perm_circuits.ablation_modes.REFERENCES`), the story's verdict and every claim's status per mode:
  ``role_<how>_<component>``, ``claim_<how>_<claim>``, ``story_<how>`` against the test set (the roles'
  default), the same names prefixed ``skill_`` against each skill's own rows;
* **hypotheses**: the causal-scrubbing recovery (Chan et al. 2022) of each written hypothesis of
  :func:`~perm_circuits.analysis.study.hypotheses.shipped_hypotheses` per skill (elimination, recall),
  ``hyp_<skill>_<name>`` with its bootstrap interval (``..._ci_low``, ``..._ci_high``).  A census-sized
  measurement, not the docs' one: ``n_hyp`` rows (300) and ``n_hyp_boot`` resamples (20), where
  ``scripts/hypotheses.py`` uses 2,000 and 200 (``docs/how_models_compute.md``), to keep a fingerprint
  under 10 s;
* **circuits**: per skill (elimination, recall; :func:`~perm_circuits.discovery.skills.skill_batches`)
  the oracle's smallest set of components (heads, MLPs) keeping faithfulness 0.9 when every other
  component's output is ablated (:func:`node_oracle`, exhaustive over component subsets), under
  resample and mean ablation, against each
  reference of :data:`REFERENCES` (the skill's own rows, or the whole test set);
* **accuracies**: elimination and recall accuracy on the test set.

Every value is a plain number or string, so fingerprints of many models form one table
(:func:`fingerprint_frame`) and classes are assigned by a stated rule (:mod:`perm_circuits.census.classes`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["CIRCUIT_HOWS", "Fingerprint", "SKILL_CAPABLE", "circuit_components", "fingerprint_frame",
           "mechanism_fingerprint", "node_oracle", "REFERENCES"]

CIRCUIT_HOWS = ("resample", "mean")
"""The ablation modes of the fingerprint's oracle circuits."""

SKILL_CAPABLE = 0.9
"""A skill's circuit is searched only when the model's accuracy on that skill reaches this; below it
the skill is ``"absent"`` (a circuit of a skill the model does not perform explains nothing)."""

SCORE_FIELDS = ("duplicate_score", "elimination_score", "x_prev_y", "source_y_shift")


@dataclass(frozen=True)
class Fingerprint:
    """One model's fingerprint (module docstring); :meth:`to_dict` is its table row."""

    model: str
    record: tuple[tuple[str, Any], ...]
    seconds: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.record)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def to_dataframe(self) -> pd.DataFrame:
        """One row: ``model`` then every fingerprint column."""
        return pd.DataFrame([{"model": self.model, **self.to_dict()}])


def circuit_components(edges: Iterable[str]) -> str:
    """The components (``L0H1``, ``L0MLP``, ...) that a circuit's edges touch, sorted and joined by ``+``
    (``"-"`` for none): an edge ``A->B.q`` touches ``A`` and ``B``; ``embed`` and ``logits`` are not
    components."""
    out = set()
    for edge in edges:
        for end in edge.split("->"):
            node = end.split(".")[0]
            if node not in ("embed", "logits"):
                out.add(node)
    return "+".join(sorted(out)) or "-"


ORACLE_TARGET = 0.9
"""The faithfulness the fingerprint's oracle circuits reach (:func:`node_oracle`'s default ``target``)."""


def node_oracle(model, batch, *, how: str, target: float = ORACLE_TARGET, corrupted=None,
                reference=None) -> tuple[str, float]:
    """The smallest set of components (heads, MLPs) whose outputs, kept while every other component's
    output is ablated under ``how`` (``attn.hook_z`` of the head, ``hook_mlp_out``), reaches faithfulness
    ``target`` on ``batch`` (the most faithful of that size; exhaustive over the ``2^components`` subsets).

    Faithfulness is ``(m(S) - m(none)) / (m(all) - m(none))`` of the mean target log-probability ``m`` under
    ``batch.mask`` (Wang et al. 2022), where ``none`` ablates every component (the embeddings stay).
    ``corrupted`` (the resample source, row-paired) defaults to ``batch`` rolled by one row (another
    sequence of the same slice), ``reference`` (the mean's rows) to ``batch``.  Returns ``(components
    joined by "+", or "-" for none; faithfulness)``, or ``("none", best faithfulness)`` when no subset
    reaches ``target``.
    """
    from perm_circuits.checks import check_number
    from perm_circuits.tasks.base import TaskBatch

    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch (its targets and mask give the metric), got {type(batch).__name__}")
    if math.isnan(check_number("target", target, finite=False)):
        raise ValueError("target must be a faithfulness to reach (a number), got nan")
    return _node_oracle(model, batch, how=how, target=target, corrupted=corrupted, reference=reference)


def _node_oracle(model, batch, *, how: str, target: float, corrupted, reference) -> tuple[str, float]:
    """:func:`node_oracle` of checked ``batch`` and ``target`` (``how``, ``corrupted`` and ``reference``
    are checked by ``ablate_tokens`` before any forward pass)."""
    import itertools

    import torch

    from perm_circuits.analysis.interventions.core import ablate_tokens
    from perm_circuits.discovery.interventions import target_logprob_metric
    from perm_circuits.model_shape import model_shape

    shape = model_shape(model)
    tokens = batch.tokens
    if how == "resample":
        options = {"reference": tokens.roll(1, dims=0) if corrupted is None else corrupted, "pairing": "row"}
    else:
        options = {"reference": tokens if reference is None else reference}
    hooks = {}
    for layer in range(shape.n_layers):
        for head in range(shape.n_heads):
            hooks[f"L{layer}H{head}"] = ablate_tokens(model, f"blocks.{layer}.attn.hook_z", how, index=head, **options)
        if shape.mlp(layer):
            hooks[f"L{layer}MLP"] = ablate_tokens(model, f"blocks.{layer}.hook_mlp_out", how, **options)
    metric = target_logprob_metric(batch)
    names = list(hooks)
    subsets = [frozenset(c) for k in range(len(names) + 1) for c in itertools.combinations(names, k)]
    values = []
    with torch.no_grad():
        for keep in subsets:
            ablated = [hook for name in names if name not in keep for hook in hooks[name]]
            values.append(float(metric(model.run_with_hooks(tokens, fwd_hooks=ablated))))
    full, empty = values[-1], values[0]
    faith = [(v - empty) / (full - empty) if full != empty else float("nan") for v in values]
    order = sorted(range(len(subsets)), key=lambda i: (len(subsets[i]), -faith[i]))
    best = next((i for i in order if faith[i] >= target), None)
    if best is None:
        return "none", max((f for f in faith if f == f), default=float("nan"))
    return "+".join(sorted(subsets[best])) or "-", faith[best]


REFERENCES = ("skill", "test")
"""The fingerprint's reference distributions of the ablated values: ``skill`` (the mean over, and the
resample source drawn from, the skill's own rows) and ``test`` (the whole test set: both skills mixed,
as the task presents them)."""


def _oracle_columns(model, test, hows: Sequence[str], accuracy: Mapping[str, float], n: int, seed: int) -> dict:
    import torch

    from perm_circuits.discovery.skills import skill_batches

    out: dict[str, Any] = {}
    parts = skill_batches(test)
    order = torch.randperm(len(test), generator=torch.Generator().manual_seed(seed))
    for skill in ("elimination", "recall"):
        part = parts.get(skill)
        capable = part is not None and accuracy[skill] >= SKILL_CAPABLE
        if capable:
            part = part.subset(torch.arange(min(len(part), n), device=part.tokens.device))
        for how in hows:
            for ref in REFERENCES:
                key = f"{skill}_{how}_{ref}"
                if not capable:
                    out[f"circuit_{key}"], out[f"faith_{key}"] = "absent", math.nan
                    continue
                options = {"corrupted": None, "reference": None}
                if ref == "test":  # the resample source and the mean's rows from the whole test set
                    options = {"corrupted": test.tokens[order[: len(part)]].to(part.tokens.device),
                               "reference": test.tokens}
                out[f"circuit_{key}"], out[f"faith_{key}"] = _node_oracle(model, part, how=how, target=ORACLE_TARGET,
                                                                          **options)
    return out


def _hypothesis_columns(model, n: int, n_boot: int, seed: int) -> dict[str, float]:
    """``hyp_<skill>_<name>`` (+ ``_ci_low``, ``_ci_high``): each written hypothesis's recovery per skill."""
    from perm_circuits.analysis.hypothesis import causal_scrub
    from perm_circuits.analysis.study.hypotheses import last_step_accuracy, shipped_hypotheses, skill_batch
    from perm_circuits.model_shape import model_shape
    from perm_circuits.models import model_config_of

    shape = model_shape(model)
    out: dict[str, float] = {}
    if model_config_of(model).V != 5:  # the hypotheses are written for the study's V = 5 sequences
        return out
    for skill in ("elimination", "recall"):
        batch = skill_batch(skill, n, seed)
        for label, hypothesis in shipped_hypotheses(shape.n_layers, shape.n_heads).items():
            result = causal_scrub(model, hypothesis, batch, last_step_accuracy, n_boot=n_boot, seed=seed,
                                  per_claim=False)
            key = f"hyp_{skill}_{label}"
            out[key], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = result.recovery, result.ci_low, result.ci_high
    return out


def mechanism_fingerprint(model, *, task=None, n: int = 2000, n_circuit: int = 300, n_pair: int = 500,
                          n_boot: int = 100, seed: int = 1234, hows: Sequence[str] | None = None,
                          circuit_hows: Sequence[str] = CIRCUIT_HOWS, name: str | None = None,
                          n_hyp: int = 300, n_hyp_boot: int = 20) -> Fingerprint:
    """The mechanism fingerprint of one permutation-study model (module docstring).

    Args:
        model: a study bridge (``load_pretrained``, ``load_checkpoint(...).model``, ``build_model``).
        task: the permutation task, a ``TaskConfig`` or ``PermutationTask`` (default: the model's own, with
            repeat ratio 0.3 when it has none).
        n: test sequences for the attention scores, the roles and the accuracies (seed ``seed``).
        n_circuit: at most this many sequences per skill for the oracle circuits.
        n_pair: the roles' patching pairs.
        n_boot: the roles' bootstrap resamples.
        hows: the roles' ablation modes (default every mode of :data:`~perm_circuits.analysis.HOWS`).
        circuit_hows: the oracle circuits' ablation modes.
        name: the model's name in the record (default ``model.cfg.model_name`` or ``"model"``).
        n_hyp: rows per skill for the hypotheses' causal scrubbing (seed 0).
        n_hyp_boot: its bootstrap resamples.
    """
    from perm_circuits.analysis import HOWS
    from perm_circuits.analysis.study.verdict import head_roles
    from perm_circuits.checks import check_int
    from perm_circuits.models import task_config_of
    from perm_circuits.tasks.permutation import PermutationTask
    from perm_circuits.tasks.permutation_data import TaskConfig

    for label, value in (("n", n), ("n_circuit", n_circuit), ("n_pair", n_pair), ("n_boot", n_boot),
                         ("n_hyp", n_hyp), ("n_hyp_boot", n_hyp_boot)):
        check_int(label, value, low=2)
    hows = tuple(HOWS if hows is None else hows)
    unknown = [h for h in (*hows, *circuit_hows) if h not in HOWS]
    if unknown:
        raise ValueError(f"unknown ablation modes {unknown}; expected some of {list(HOWS)}")
    if isinstance(task, PermutationTask):
        task = task.config
    if task is not None and not isinstance(task, TaskConfig):
        raise TypeError(f"task must be the permutation task (a TaskConfig or PermutationTask), got {type(task).__name__}")
    task_config = task
    if task_config is None:
        task_config = task_config_of(model)
        if task_config.repeat_ratio == 0:
            task_config = TaskConfig.from_dict({**task_config.to_dict(), "repeat_ratio": 0.3})
    start = time.perf_counter()
    model.eval()
    options = dict(task=task_config, how="mean" if "mean" in hows else hows[0], hows=hows, n=n, seed=seed,
                   n_pair=n_pair, n_boot=n_boot, circuits=False, induction=False)
    verdict = head_roles(model, **options)  # reference="test"
    record: dict[str, Any] = {"elimination_accuracy": float(verdict.elimination_accuracy),
                              "recall_accuracy": float(verdict.recall_accuracy)}
    for score in verdict.scores:
        for field_name in SCORE_FIELDS:
            record[f"{score.component}_{field_name}"] = float(getattr(score, field_name))
        record[f"{score.component}_attention"] = score.attention_role
    record["duplicate_heads"] = "+".join(s.component for s in verdict.scores if "duplicate" in s.patterns) or "-"
    record["eliminator_heads"] = "+".join(s.component for s in verdict.scores if "eliminator" in s.patterns) or "-"
    for key, value in verdict.columns().items():  # the sweep rows' columns; "verdict_<how>" is the story's
        record[key.replace("verdict_", "story_", 1) if key.startswith("verdict_") else key] = value
    skill_verdict = head_roles(model, reference="skill", **options)
    for key, value in skill_verdict.columns().items():  # the same columns against each skill's own rows
        record["skill_" + (key.replace("verdict_", "story_", 1) if key.startswith("verdict_") else key)] = value
    test = PermutationTask(task_config).test_set(n, seed=seed)
    accuracy = {"elimination": record["elimination_accuracy"], "recall": record["recall_accuracy"]}
    record.update(_oracle_columns(model, test, circuit_hows, accuracy, n_circuit, seed=0))
    record.update(_hypothesis_columns(model, n_hyp, n_hyp_boot, seed=0))
    label = name if name is not None else getattr(getattr(model, "cfg", None), "model_name", None) or "model"
    return Fingerprint(model=str(label), record=tuple(record.items()), seconds=time.perf_counter() - start)


def fingerprint_frame(fingerprints: Iterable[Fingerprint], **columns: Sequence[Any]) -> pd.DataFrame:
    """One row per fingerprint (``model`` first), with extra per-row ``columns`` (e.g. ``seed=[...]``) after it."""
    rows = [fp.to_dataframe() for fp in fingerprints]
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame({"model": []})
    for position, (key, values) in enumerate(columns.items(), start=1):
        frame.insert(position, key, list(values))
    return frame
