"""Every number that ``docs/results.md`` and the README quote, measured on the shipped models.

:func:`shipped_numbers` runs the library's public analyses on ``d16h1``, ``d32h1`` and ``d32h2``
(all trained with seed 0, see ``scripts/train_pretrained.py``) and returns one flat mapping
``key -> value``.  Keys name what they measure, the model, and where it matters the ablation mode
and the seeds, e.g. ``d32h2.mean.L0H0.recall_accuracy`` (last-step recall accuracy of d32h2 with
L0H0 mean-ablated on the fixed test set) or ``d32h2.patch.L0H0.ci_low``.  Fixed settings (stored
in the mapping too, under ``settings.*``):

* test set: ``make_test_set(task, n=5000, seed=1234)`` -- the set ``evaluate`` uses by default;
* ablations: every mode of :data:`~perm_circuits.analysis.HOWS` (zero, mean, resample, binding-free,
  optimal); reference = the test set itself, resample / binding-free seed 0 (``ablation_table``
  defaults);
* patching: ``patching_pair(task, n=2000, seed=0)``, 1000 bootstrap resamples seeded with 0 (the
  ``head_roles`` defaults, so the intervals are those the tool prints);
* roles and claims: ``head_roles`` once with ``hows=MODES``; each role, claim and the verdict are
  read per mode from it (``role_by_how``, ``status_by_how``, ``verdict_by_how``), with the
  decision mode and its reason (``how_reason``);
* circuits (Wang et al. 2022 criteria): read from the same ``head_roles`` verdict
  (``verdict.circuits``): for each skill, ``propose_circuit`` under the decision mode (mean), then
  ``circuit_metrics`` (faithfulness, completeness, minimality per node) and
  ``faithfulness_by_mode`` under every mode in :data:`MODES`, on the first ``circuit_n`` test
  sequences.

:data:`MODES` is :data:`~perm_circuits.analysis.HOWS`, so a new ablation mode reaches every table.

The "before the MLP" accuracies come in two conventions, both stored: ``*.values`` takes the
argmax over the value tokens ``1..V`` only (what ``mlp_prediction_flips`` reports), ``*.vocab``
over the whole vocabulary (as every other accuracy in the docs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import einops
import torch
from torch import Tensor

from perm_circuits.analysis import (
    HOWS,
    ablate_head,
    direct_logit_attribution,
    ffn_key_value_probe,
    head_roles,
    mlp_prediction_flips,
    model_memory_probes,
    patch_head_sources,
    patching_pair,
)
from perm_circuits.analysis.probes.dla import subgroup_masks
from perm_circuits.analysis.probes.memory import apply_norm
from perm_circuits.analysis.study.skill_circuits import CIRCUIT_MAX_N, CIRCUIT_TOLERANCE
from perm_circuits.circuit import Node
from perm_circuits.evaluate import Evaluation, evaluate, recall_generalisation
from perm_circuits.hooks import run_capture
from perm_circuits.models import load_pretrained, model_config_of
from perm_circuits.tasks.permutation_posterior import bayes_posterior
from perm_circuits.tasks.permutation_data import make_test_set

__all__ = ["MODELS", "MODES", "Numbers", "SETTINGS", "shipped_numbers"]

Numbers = dict[str, float | int | str]

MODELS: tuple[str, ...] = ("d16h1", "d32h1", "d32h2")
"""The shipped models the docs quote (seed 0 each)."""

MODES: tuple[str, ...] = HOWS
"""Ablation modes measured for every component: all of :data:`~perm_circuits.analysis.HOWS`."""

SETTINGS: dict[str, int | float | str] = {
    "test_n": 5000,
    "test_seed": 1234,
    "ablation_seed": 0,
    "pair_n": 2000,
    "pair_seed": 0,
    "n_boot": 1000,
    "circuit_n": CIRCUIT_MAX_N,  # head_roles' circuit step: the first CIRCUIT_MAX_N test sequences
    "circuit_how": "mean",  # the verdict's decision mode
    "circuit_threshold": 0.1,  # propose_circuit's default
    "circuit_tolerance": CIRCUIT_TOLERANCE,
}
"""Sample sizes and seeds of every measurement (also written to the table as ``settings.*``)."""

SUBGROUPS = {"steps 1-4": "steps", "last-step elimination": "elimination", "last-step recall": "recall"}
"""Subgroup names of the attribution analyses -> the short names used in keys."""


def _put(numbers: Numbers, key: str, value: object) -> None:
    if key in numbers:
        raise KeyError(f"number {key!r} computed twice")
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool):
        value = str(value)
    elif isinstance(value, float) or hasattr(value, "__float__") and not isinstance(value, (int, str)):
        value = float(value)
    numbers[key] = value


def _evaluation(numbers: Numbers, name: str, model, test_set) -> Evaluation:
    ev = evaluate(model, test_set)
    detail = ev.detail
    for field in ("elimination_accuracy", "recall_accuracy", "test_loss", "early_mae_train"):
        _put(numbers, f"{name}.{field}", ev.summary()[field])
    for v, p in enumerate(detail.probe or (), start=1):
        _put(numbers, f"{name}.probe_p{v}", p)
    for s in detail.steps:
        for field in ("accuracy", "mae_uniform", "mae_train"):
            _put(numbers, f"{name}.step{s.step}.{field}", getattr(s, field))
    early = detail.steps[:-1]
    _put(numbers, f"{name}.steps1-4.mae_uniform.min", min(s.mae_uniform for s in early))
    _put(numbers, f"{name}.steps1-4.mae_uniform.max", max(s.mae_uniform for s in early))
    gen = recall_generalisation(model)
    for k, value in enumerate(gen.recall, start=1):
        _put(numbers, f"{name}.recall_gen.x{k}", value)
    return ev


def _history(numbers: Numbers, name: str, model) -> None:
    """From the training history stored in the checkpoint (evaluated after every epoch)."""
    history = model.metadata["history"]
    _put(numbers, f"{name}.seed", int(model.metadata["seed"]))
    _put(numbers, f"{name}.epochs", len(history))
    recipe = model.metadata["train_config"]
    for field in ("epochs", "samples_per_epoch", "batch_size", "lr"):
        _put(numbers, f"{name}.recipe.{field}", recipe[field])
    _put(numbers, f"{name}.recipe.repeat_ratio", model.task_config.repeat_ratio)
    _put(numbers, f"{name}.recipe.dropout", getattr(model_config_of(model), "dropout", 0.0))
    epoch_99 = next((row["epoch"] for row in history if row["recall_accuracy"] >= 0.99), math.nan)
    _put(numbers, f"{name}.history.epoch_recall_99", epoch_99)
    best = min(history, key=lambda row: row["test_loss"])
    _put(numbers, f"{name}.history.min_test_loss", best["test_loss"])
    _put(numbers, f"{name}.history.min_test_loss_epoch", best["epoch"])


def _modes_text(values: Sequence[tuple[str, object]]) -> str:
    """``(how, value)`` pairs grouped by value: ``"X under zero and mean; Y under resample"``."""
    groups: dict[str, list[str]] = {}
    for how, value in values:
        groups.setdefault(str(value), []).append(how)
    return "; ".join(f"{value} under {_join(hows)}" for value, hows in groups.items())


def _join(words: Sequence[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _roles(numbers: Numbers, name: str, model, test_set):
    """Ablations under every mode, attention scores, patching, and the verdict per mode; returns the verdict."""
    verdict = head_roles(
        model, test_set, how="mean", hows=MODES, n_pair=SETTINGS["pair_n"], pair_seed=SETTINGS["pair_seed"],
        n_boot=SETTINGS["n_boot"], ablation_seed=SETTINGS["ablation_seed"],
    )
    for row in verdict.ablation.rows:
        prefix = f"{name}.baseline" if row.component == "none" else f"{name}.{row.how}.{row.component}"
        _put(numbers, f"{prefix}.elimination_accuracy", row["elimination_accuracy"])
        _put(numbers, f"{prefix}.recall_accuracy", row["recall_accuracy"])
        if row.how in ("resample", "binding_free"):
            _put(numbers, f"{prefix}.follows_reference", row["follows_reference"])
    for score in verdict.scores:
        for field in ("elim_y_mass", "elim_entropy", "x_prev_y", "y_self", "dup_repeated", "dup_baseline"):
            _put(numbers, f"{name}.scores.{score.component}.{field}", getattr(score, field))
    for sweep in (verdict.head_patching, verdict.mlp_patching):
        for cell in sweep.cells if sweep is not None else ():
            component = str(Node(cell.layer, cell.head))
            for field, value in (("effect", cell.mean), ("ci_low", cell.ci_low), ("ci_high", cell.ci_high)):
                _put(numbers, f"{name}.patch.{component}.{field}", value)
    items = (*verdict.heads, *verdict.mlps)
    for item in items:
        for how, role in item.role_by_how:
            _put(numbers, f"{name}.roles.{how}.{item.component}", role)
        _put(numbers, f"{name}.robust.{item.component}", "robust" if item.robust else "mode-dependent")
        _put(numbers, f"{name}.roles_by_mode.{item.component}", _modes_text(item.role_by_how))
    for claim in verdict.claims:
        for how, status in claim.status_by_how:
            _put(numbers, f"{name}.claims.{how}.{claim.claim}", status)
    for how, holds in verdict.verdict_by_how:
        _put(numbers, f"{name}.story_holds.{how}", str(holds))
    robust = [item.component for item in items if item.robust]
    _put(numbers, f"{name}.roles.robust_components", _join(robust) if robust else "none")
    _put(numbers, f"{name}.roles.mode_dependent_components", _join(verdict.mode_dependent) if verdict.mode_dependent else "none")
    _put(numbers, f"{name}.verdict.how", verdict.how)
    _put(numbers, f"{name}.verdict.how_reason", verdict.how_reason)
    _put(numbers, f"{name}.verdict.modes", _join(verdict.hows))
    _put(numbers, f"{name}.verdict.robust", "the same in every mode" if verdict.verdict_robust else "not the same in every mode")
    _put(numbers, f"{name}.claims.modes_agree", "agree" if all(c.robust for c in verdict.claims) else "differ")
    _put(numbers, f"{name}.roles.modes_agree", "agree" if not verdict.mode_dependent else "differ")
    return verdict


def _circuits(numbers: Numbers, name: str, verdict) -> None:
    """For each skill: the circuit ``head_roles`` proposed, its IOI metrics, its faithfulness per mode.

    Read from ``verdict.circuits`` (one source of truth with the verdict and the report: the
    circuit step of :func:`~perm_circuits.analysis.head_roles`, on its first ``CIRCUIT_MAX_N``
    test sequences); a skill the model lacks has no circuit and no keys.
    """
    for circuit in verdict.circuits:
        prefix = f"{name}.circuit.{circuit.skill}"
        _put(numbers, f"{prefix}.nodes", ", ".join(circuit.nodes))
        _put(numbers, f"{prefix}.n_nodes", len(circuit.nodes))
        _put(numbers, f"{prefix}.completeness_method", circuit.metrics.completeness_method)
        _put(numbers, f"{prefix}.n_subsets", circuit.metrics.n_subsets_checked)
        group = circuit.measured
        _put(numbers, f"{prefix}.n", group.n)
        _put(numbers, f"{prefix}.completeness_subset", " + ".join(group.completeness_subset) or "none")
        for field in ("f_model", "f_circuit", "faithfulness", "faithfulness_error", "completeness",
                      "completeness_relative"):
            _put(numbers, f"{prefix}.{field}", getattr(group, field))
        for index, entry in enumerate(group.minimality):
            _put(numbers, f"{prefix}.node{index}.name", entry.node)
            _put(numbers, f"{prefix}.node{index}.minimality", entry.minimality)
            _put(numbers, f"{prefix}.node{index}.minimality_relative", entry.relative)
        faithful = dict(circuit.faithful_by_how)
        for how in MODES:
            row = circuit.by_mode.get(how, circuit.skill)
            _put(numbers, f"{prefix}.{how}.faithfulness", row.faithfulness)
            _put(numbers, f"{prefix}.{how}.faithfulness_error", row.faithfulness_error)
        good = [how for how in MODES if faithful.get(how)]
        bad = [how for how in MODES if not faithful.get(how)]
        _put(numbers, f"{prefix}.faithful_modes", _join(good) if good else "no mode")
        _put(numbers, f"{prefix}.unfaithful_modes", _join(bad) if bad else "no mode")


def _lens_accuracy(model, test_set) -> dict[str, dict[str, float]]:
    """Last-step accuracy of the logit lens on ``resid_mid`` (before the MLP), per subgroup and convention."""
    V = model_config_of(model).V
    _, acts = run_capture(model, test_set.tokens, ["blocks.0.hook_resid_mid"])
    with torch.no_grad():
        resid = acts["blocks.0.hook_resid_mid"][:, 0 : 2 * V - 1 : 2]
        logits = apply_norm(model, resid, "ln_final") @ model.W_U.detach() + model.b_U.detach()
    preds = {"vocab": logits.argmax(-1), "values": logits[..., 1 : V + 1].argmax(-1) + 1}
    masks = subgroup_masks(test_set.tokens)
    return {
        convention: {SUBGROUPS[sub]: float((pred == test_set.extras["ys"])[mask].double().mean()) for sub, mask in masks.items()}
        for convention, pred in preds.items()
    }


def _mlp(numbers: Numbers, name: str, model, test_set) -> None:
    """Direct logit attribution, the MLP's top-1 flips, the FFN key-value probe, the memory probes."""
    dla = direct_logit_attribution(model, test_set)
    heads = [c for c in dla.components if c.startswith("L0H")]
    for sub, short in SUBGROUPS.items():
        _put(numbers, f"{name}.dla.{short}.actual", float(dla.actual[list(dla.subgroups).index(sub)]))
        for component in (*heads, "L0mlp"):
            _put(numbers, f"{name}.dla.{short}.{component}", dla.component(component, sub))
    shares = [dla.component("L0mlp", sub) / float(dla.actual[i]) for i, sub in enumerate(dla.subgroups)]
    _put(numbers, f"{name}.dla.mlp_share_min", min(shares))
    _put(numbers, f"{name}.dla.head_abs_max", max(abs(dla.component(h, s)) for h in heads for s in dla.subgroups))
    flips = mlp_prediction_flips(model, test_set)
    for sub, short in SUBGROUPS.items():
        _put(numbers, f"{name}.flips.{short}.accuracy_post", flips.get(sub).accuracy_post)
    for convention, accuracies in _lens_accuracy(model, test_set).items():
        for short, value in accuracies.items():
            _put(numbers, f"{name}.before_mlp.{short}.{convention}", value)
    summary = ffn_key_value_probe(model).summary()
    _put(numbers, f"{name}.ffn.n_neurons", int(summary["n_neurons"]))
    _put(numbers, f"{name}.ffn.n_repeated", int(summary["n_repeated_neurons"]))
    _put(numbers, f"{name}.ffn.repeated_trap_suppressed", summary["repeated_trap_suppressed"])
    _put(numbers, f"{name}.ffn.repeated_recall_agreement", summary["repeated_recall_agreement"])
    _put(numbers, f"{name}.ffn.chance", 1 / model_config_of(model).V)
    for probe in model_memory_probes(model).probes:
        _put(numbers, f"{name}.memory.{probe.component}.{probe.map}.recall", probe.recall)
        _put(numbers, f"{name}.memory.{probe.component}.{probe.map}.chance", probe.chance)


def _head_output_geometry(numbers: Numbers, name: str, model, test_set, head: int) -> None:
    """Why zero and mean ablation of one head disagree: where its output sits at the last query.

    The head's output ``z_h W_O^h`` at the last position, over the test set: the norm of its mean
    (what mean ablation puts in), the mean distance of a sample's output from that mean, the
    smallest output norm on any sequence (how close a real output ever comes to zero ablation's
    0), and every point projected on the unit vector from the new-query mean to the
    repeated-query mean (so the zero vector, the overall mean and the two group means sit on one
    line).  Then the direct logit attribution of the mean output (its effect on the answer
    through the unembedding alone) and the MLP's, under zero and under mean ablation.
    """
    prefix = f"{name}.L0H{head}_case"
    _, acts = run_capture(model, test_set.tokens, ["blocks.0.attn.hook_z", "blocks.0.hook_resid_mid"])
    with torch.no_grad():
        z = acts["blocks.0.attn.hook_z"][:, -1, head]  # [batch, d_head]
        out = einops.einsum(z, model.W_O[0, head].detach(), "b e, e m -> b m")
        repeated = test_set.extras["repeated"]
        mean, mean_rep, mean_new = out.mean(0), out[repeated].mean(0), out[~repeated].mean(0)
        deviation = (out - mean).norm(dim=-1)
        axis = (mean_rep - mean_new) / (mean_rep - mean_new).norm()
    _put(numbers, f"{prefix}.mean_norm", mean.norm())
    _put(numbers, f"{prefix}.deviation_norm", deviation.mean())
    _put(numbers, f"{prefix}.deviation_norm_repeated", deviation[repeated].mean())
    _put(numbers, f"{prefix}.deviation_norm_new", deviation[~repeated].mean())
    _put(numbers, f"{prefix}.min_norm", out.norm(dim=-1).min())
    _put(numbers, f"{prefix}.resid_mid_norm", acts["blocks.0.hook_resid_mid"][:, -1].norm(dim=-1).mean())
    _put(numbers, f"{prefix}.new_share", (~repeated).double().mean())
    for label, point in (("new", mean_new), ("repeated", mean_rep), ("mean", mean)):
        _put(numbers, f"{prefix}.axis.{label}", point @ axis)
    _put(numbers, f"{prefix}.axis.midpoint", (mean_new + mean_rep) @ axis / 2)
    # cosine between zero ablation's shift of the output (0 - mean) and the new -> repeated direction
    _put(numbers, f"{prefix}.axis.zero_shift_cosine", (-mean) @ axis / mean.norm())
    for how in ("zero", "mean"):
        dla = direct_logit_attribution(model, test_set, hooks=ablate_head(model, layer=0, head=head, how=how))
        for sub, short in SUBGROUPS.items():
            if short == "steps":
                continue
            _put(numbers, f"{prefix}.{how}.dla.{short}.L0H{head}", dla.component(f"L0H{head}", sub))
            _put(numbers, f"{prefix}.{how}.dla.{short}.L0mlp", dla.component("L0mlp", sub))
            _put(numbers, f"{prefix}.{how}.dla.{short}.actual", float(dla.actual[list(dla.subgroups).index(sub)]))


def _patch_sources(numbers: Numbers, name: str, model) -> None:
    """Clean -> corrupted patching of single attention weights from the last query (per source)."""
    pair = patching_pair(model.task_config, n=SETTINGS["pair_n"], seed=SETTINGS["pair_seed"])
    sweep = patch_head_sources(model, pair, n_boot=SETTINGS["n_boot"], seed=SETTINGS["pair_seed"])
    for cell in sweep.cells:
        _put(numbers, f"{name}.patch_source.L{cell.layer}H{cell.head}.s{cell.source_position}", cell.mean)


def _test_set_numbers(numbers: Numbers, model, test_set, ev: Evaluation) -> None:
    """Properties of the test set alone (the Bayesian targets come with any model's evaluation on it)."""
    task = model.task_config
    _put(numbers, "test_set.n", len(test_set))
    _put(numbers, "test_set.seed", SETTINGS["test_seed"])
    _put(numbers, "test_set.repeated_share", test_set.extras["repeated"].double().mean())
    posterior = bayes_posterior(test_set.tokens, task, "uniform")
    p = posterior.probs.gather(-1, (test_set.extras["ys"] - 1)[..., None])[..., 0]
    _put(numbers, "test_set.uniform_posterior_loss", -p.clamp_min(1e-12).log().mean())
    for s in ev.detail.steps:
        _put(numbers, f"test_set.step{s.step}.bayes_accuracy_train", s.bayes_accuracy_train)
        _put(numbers, f"test_set.step{s.step}.bayes_error_train", 1 - s.bayes_accuracy_train)


def _across(numbers: Numbers, key: str, pattern: str, models: Sequence[str], reduce: Callable) -> None:
    values = [numbers[pattern.format(m=m)] for m in models]
    _put(numbers, key, reduce(values))


def shipped_numbers(models: Sequence[str] = MODELS, *, progress: bool = False) -> Numbers:
    """Measure every number the results pages quote on the shipped ``models``; see the module docstring.

    Deterministic on CPU (fixed seeds everywhere).  Takes about 30 s for the three models on one
    CPU thread.  Returns a flat ``{key: float | int | str}`` mapping, sorted by key.
    """
    if isinstance(models, str) or not models:
        raise TypeError(f"models must be a non-empty sequence of shipped model names, got {models!r}")
    unknown = [m for m in models if m not in MODELS]
    if unknown:  # the study's models (d16h1l2-any has its own page: results.generalisation)
        raise ValueError(f"unknown model(s) {unknown}; the study's shipped models: {list(MODELS)}")
    numbers: Numbers = {f"settings.{k}": v for k, v in SETTINGS.items()}
    _put(numbers, "settings.modes", ",".join(MODES))
    for index, name in enumerate(models):
        if progress:
            print(f"[{index + 1}/{len(models)}] {name}", flush=True)
        model = load_pretrained(name)
        test_set = make_test_set(model.task_config, n=SETTINGS["test_n"], seed=SETTINGS["test_seed"])
        _history(numbers, name, model)
        evaluation = _evaluation(numbers, name, model, test_set)
        if index == 0:
            _test_set_numbers(numbers, model, test_set, evaluation)
        verdict = _roles(numbers, name, model, test_set)
        _mlp(numbers, name, model, test_set)
        _circuits(numbers, name, verdict)
        if model_config_of(model).n_heads > 1:
            _patch_sources(numbers, name, model)
            _head_output_geometry(numbers, name, model, test_set, head=0)
    _across(numbers, "all.step4.accuracy.min", "{m}.step4.accuracy", models, min)
    _across(numbers, "all.step4.accuracy.max", "{m}.step4.accuracy", models, max)
    _across(numbers, "all.step3.mae_train.min", "{m}.step3.mae_train", models, min)
    _across(numbers, "all.step4.mae_train.max", "{m}.step4.mae_train", models, max)
    _across(numbers, "all.test_loss.min", "{m}.test_loss", models, min)
    _across(numbers, "all.test_loss.max", "{m}.test_loss", models, max)
    _across(numbers, "all.dla.mlp_share_min", "{m}.dla.mlp_share_min", models, min)
    _across(numbers, "all.recall_accuracy.min", "{m}.recall_accuracy", models, min)
    _across(numbers, "all.elimination_accuracy.min", "{m}.elimination_accuracy", models, min)
    _put(numbers, "all.recall_gen.x2-4.max", max(numbers[f"{m}.recall_gen.x{k}"] for m in models for k in (2, 3, 4)))
    return dict(sorted(numbers.items()))
