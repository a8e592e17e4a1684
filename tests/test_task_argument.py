"""``task=`` is the one way to say which task: no public function or class takes a
``task_config`` argument, and on a study model ``task=PermutationTask(cfg)``, ``task=cfg`` and the
default give the same numbers (the study's own analysis on those settings); a wrong task type is a
TypeError naming ``task``, raised before any forward pass."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch

import perm_circuits
from perm_circuits.analysis.circuits.criteria import circuit_metrics
from perm_circuits.analysis.circuits.induction_story import induction_story
from perm_circuits.analysis.interventions.path_patching import induction_patching_pair, path_patching_table
from perm_circuits.analysis.interventions.references import binding_free_reference
from perm_circuits.analysis.probes.dla import LogitAttribution, direct_logit_attribution
from perm_circuits.analysis.study.ffn import ffn_key_value_probe
from perm_circuits.analysis.study.recall_patching import patch_head_outputs, patching_pair
from perm_circuits.analysis.study.scores import attention_by_source, head_scores
from perm_circuits.analysis.study.verdict import head_roles
from perm_circuits.tasks import PermutationTask
from perm_circuits.tasks.permutation_data import make_test_set

RECORDS = {
    "perm_circuits.models.Checkpoint",  # a loaded checkpoint's fields: data, not the argument
    "perm_circuits.train.TrainResult",  # a training run's fields: data, not the argument
}
"""Record types whose *field* is named ``task_config`` (the shared convention keeps record fields)."""

def _public_callables():
    modules = [perm_circuits] + [importlib.import_module(info.name)
                                 for info in pkgutil.walk_packages(perm_circuits.__path__, "perm_circuits.")]
    seen = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name, None)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                obj = inspect.unwrap(obj)
                seen[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return seen


def test_no_public_signature_takes_task_config():
    found = _public_callables()
    assert len(found) > 300  # the walk reached every subpackage's exports
    offenders = set()
    for qualname, obj in found.items():
        try:
            parameters = inspect.signature(obj).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        if "task_config" in parameters:
            offenders.add(qualname)
    assert offenders - RECORDS == set()
    assert RECORDS <= offenders  # the exemptions name real records, not stale names


# ----------------------------------------------------------------------------- same numbers


@pytest.fixture(scope="module")
def study(pretrained):
    model = pretrained("d32h2").eval()
    config = model.task_config
    assert config.repeat_ratio == 0.3
    return model, config


def _three(fn, config):
    """``fn`` under the default task, ``task=config`` and ``task=PermutationTask(config)``."""
    return fn(), fn(task=config), fn(task=PermutationTask(config))


def test_head_scores_same_for_every_spelling_of_the_task(study):
    model, config = study
    runs = _three(lambda **k: head_scores(model, n=400, seed=5, **k), config)
    frames = [run.to_dataframe() for run in runs]
    assert type(runs[1]) is type(runs[0])  # the study's HeadScores, not the general attention scores
    for frame in frames[1:]:
        assert frame.equals(frames[0])
    assert frames[0]["elimination_score"].max() > 0.5  # d32h2 has an eliminator head


def test_circuit_metrics_same_for_every_spelling_of_the_task(study):
    model, config = study
    runs = _three(lambda **k: circuit_metrics(model, ["L0H0"], n=200, **k), config)
    assert runs[0].recall is not None and runs[0].elimination is not None  # the study's two subgroups
    for run in runs[1:]:
        assert run.recall.f_model == runs[0].recall.f_model
        assert run.recall.faithfulness == runs[0].recall.faithfulness
        assert run.elimination.completeness == runs[0].elimination.completeness
    assert runs[0].recall.f_model > 1  # recall's logit difference on the shipped model


def test_patching_same_for_every_spelling_of_the_task(study):
    model, config = study
    runs = _three(lambda **k: patch_head_outputs(model, n=150, n_boot=20, **k), config)
    means = [[cell.mean for cell in run.cells] for run in runs]
    assert means[1] == means[0] and means[2] == means[0]
    assert max(means[0]) > 0.5  # a head restores most of recall


def test_dla_takes_the_study_path_for_a_permutation_task(study):
    model, config = study
    batch = make_test_set(config, n=300, seed=3)
    runs = _three(lambda **k: direct_logit_attribution(model, batch, **k), config)
    assert all(isinstance(run, LogitAttribution) for run in runs)  # not the general TargetAttribution
    for run in runs[1:]:
        assert torch.equal(run.mean, runs[0].mean)


def test_a_task_with_other_settings_changes_the_numbers(study):
    model, config = study
    mixed = head_scores(model, n=400, seed=5, task=config).to_dataframe()
    more_recall = head_scores(model, n=400, seed=5, task=PermutationTask(
        type(config).from_dict({**config.to_dict(), "repeat_ratio": 0.6}))).to_dataframe()
    assert not more_recall.equals(mixed)  # task= is read, not ignored


# ----------------------------------------------------------------------------- wrong task types


@pytest.fixture
def no_forward(study, monkeypatch):
    model, _ = study

    def forbidden(*args, **kwargs):
        raise AssertionError("a forward pass ran before validation")

    monkeypatch.setattr(model, "forward", forbidden)
    return model


CALLS = {
    "head_scores": lambda m, t: head_scores(m, task=t),
    "attention_by_source": lambda m, t: attention_by_source(m, task=t),
    "circuit_metrics": lambda m, t: circuit_metrics(m, ["L0H0"], task=t),
    "direct_logit_attribution": lambda m, t: direct_logit_attribution(m, task=t),
    "patch_head_outputs": lambda m, t: patch_head_outputs(m, task=t),
    "path_patching_table": lambda m, t: path_patching_table(m, task=t),
    "induction_story": lambda m, t: induction_story(m, task=t),
    "ffn_key_value_probe": lambda m, t: ffn_key_value_probe(m, task=t),
    "head_roles": lambda m, t: head_roles(m, task=t),
    "patching_pair": lambda m, t: patching_pair(t),
    "induction_patching_pair": lambda m, t: induction_patching_pair(t),
    "binding_free_reference": lambda m, t: binding_free_reference(t),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_wrong_task_type_is_a_type_error_naming_task(no_forward, name):
    with pytest.raises(TypeError, match=r"\btask\b") as info:  # the type hook's message or ours
        CALLS[name](no_forward, {"V": 5})
    assert "task_config" not in str(info.value) and "unexpected keyword" not in str(info.value)


@pytest.mark.parametrize("name", ["head_scores", "circuit_metrics", "direct_logit_attribution",
                                  "patch_head_outputs", "patching_pair"])
def test_the_package_check_names_task_without_the_type_hook(no_forward, name, monkeypatch):
    """Without the tests' runtime type hook the package's own check answers, naming ``task``."""
    modules = {"head_scores": "perm_circuits.analysis.study.scores",
               "circuit_metrics": "perm_circuits.analysis.circuits.criteria",
               "direct_logit_attribution": "perm_circuits.analysis.probes.dla",
               "patch_head_outputs": "perm_circuits.analysis.study.recall_patching",
               "patching_pair": "perm_circuits.analysis.study.recall_patching"}
    module = importlib.import_module(modules[name])
    for attr in ("head_scores", "attention_by_source", "circuit_metrics", "direct_logit_attribution",
                 "patch_head_outputs", "generic_patch", "patching_pair"):
        if hasattr(module, attr):
            monkeypatch.setattr(module, attr, inspect.unwrap(getattr(module, attr)))
    call = {"head_scores": lambda m: module.head_scores(m, task="x"),
            "circuit_metrics": lambda m: module.circuit_metrics(m, ["L0H0"], task="x"),
            "direct_logit_attribution": lambda m: module.direct_logit_attribution(m, task="x"),
            "patch_head_outputs": lambda m: module.patch_head_outputs(m, task="x"),
            "patching_pair": lambda m: module.patching_pair("x")}[name]
    with pytest.raises(TypeError, match=r"^task must be .*got str$"):
        call(no_forward)


# ----------------------------------------------------------------------------- the routing rule


def test_resolve_task_routes_each_spelling(study):
    from perm_circuits.analysis.interventions.checks import resolve_task, study_config
    from perm_circuits.tasks.bigram import BigramTriggerTask

    model, config = study
    other = type(config).from_dict({**config.to_dict(), "repeat_ratio": 0.6})
    bigram = BigramTriggerTask(N=16, T=32)
    assert resolve_task(model, None) == (None, None)  # the study's own analysis on the stored task
    assert resolve_task(model, other) == (None, other)
    assert resolve_task(model, PermutationTask(other)) == (None, other)
    assert resolve_task(model, other, general=True) == (PermutationTask(other), None)  # metric= / token ids
    assert resolve_task(model, None, general=True) == (PermutationTask(config), None)  # the model's own task
    assert resolve_task(model, bigram) == (bigram, None)  # another task: the general path
    with pytest.raises(ValueError, match="task has V=4 but the model has V=5"):
        resolve_task(model, type(config)(V=4))
    with pytest.raises(TypeError, match="task must be a perm_circuits.tasks.Task .* got dict"):
        resolve_task(model, {"V": 5})
    plain = torch.nn.Linear(2, 2)  # no task of its own: a TaskConfig is its PermutationTask, general path
    assert resolve_task(plain, other) == (PermutationTask(other), None)
    assert resolve_task(plain, None) == (None, None)
    assert study_config(PermutationTask(other)) is other and study_config(other) is other
    with pytest.raises(TypeError, match="task must be a PermutationTask or a TaskConfig, got int"):
        study_config(5)
