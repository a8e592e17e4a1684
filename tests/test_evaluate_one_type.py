"""One evaluation result for every task: ``evaluate`` returns :class:`Evaluation` on one of the
study's shipped models and on a user's task and model alike; the study's per-step numbers are the
permutation task's ``detail``; ``task=`` is the one way to name the task.

Real numbers: the shipped d16h1 (seed 0) on its own task, and a fresh seeded ``boot_native``
transformer (vocabulary 7, context 6) on the toy successor task of tests/tasks/test_base.py.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from perm_circuits import TaskConfig, evaluate, recall_generalisation
from perm_circuits.evaluate import PermutationDetail
from perm_circuits.tasks import PermutationTask
from perm_circuits.tasks.evaluation import FRAME_COLUMNS, Evaluation, EvaluationDetail
from perm_circuits.tasks.runner import default_model
from tasks.test_base import Successor
from conftest import project_files

ROOT = Path(__file__).resolve().parents[1]
N = 300


@pytest.fixture(scope="module")
def study(pretrained):
    model = pretrained("d16h1")
    return model, evaluate(model, n=N)


@pytest.fixture(scope="module")
def user():
    task = Successor()
    model = default_model(task, seed=0)
    return model, task, evaluate(model, task=task, n=N)


def test_one_type_for_the_study_and_a_users_task(study, user):
    _, ev = study
    _, task, theirs = user
    assert type(ev) is type(theirs) is Evaluation
    assert (ev.task, ev.model_name, ev.n_samples) == ("permutation", "d16h1", N)
    assert (theirs.task, theirs.n_samples, theirs.task_dict) == ("test_successor", N, task.to_dict())
    assert isinstance(ev.detail, PermutationDetail) and isinstance(ev.detail, EvaluationDetail) and theirs.detail is None
    assert list(ev.metrics) == list(PermutationTask(TaskConfig(repeat_ratio=0.3)).metric_names)
    assert list(theirs.metrics) == ["accuracy"]
    # the shipped d16h1 on its own repeated task: last step right on every row; the fresh model guesses
    assert ev.metrics["elimination_accuracy"] == ev.metrics["recall_accuracy"] == 1.0
    assert ev.metrics["step1_accuracy"] == ev.detail.steps[0].accuracy < 0.3
    assert 0.0 <= theirs.metrics["accuracy"] < 0.5
    # both references are exact: the posterior (a distribution) and the successor (token ids)
    assert set(ev.reference) == {"reference_tv", "reference_max_ae", "reference_loss", "reference_agreement"}
    assert ev.reference["reference_tv"] < 0.1
    assert theirs.reference == {"reference_agreement": theirs.metrics["accuracy"], "reference_accuracy": 1.0}


def test_the_generic_frame_has_one_shape(study, user):
    frames = [study[1].to_dataframe(), user[2].to_dataframe()]
    for frame in frames:
        assert frame.index.name == "metric" and tuple(frame.columns) == FRAME_COLUMNS
        assert frame.loc["test_loss", "kind"] == "loss" and frame.index.is_unique
    study_frame, user_frame = frames
    assert list(user_frame["kind"]) == ["task", "loss", "reference", "reference"]
    assert user_frame.loc["accuracy", "value"] == user[2].metrics["accuracy"]
    kinds = list(dict.fromkeys(study_frame["kind"]))
    assert kinds == ["task", "loss", "reference", "detail"]
    assert study_frame.loc["step3_mae_train", "value"] == study[1].detail.steps[2].mae_train
    # the per-step table is the detail's own method
    steps = study[1].detail.step_dataframe()
    assert list(steps.index) == [1, 2, 3, 4, 5] and steps.loc[5, "accuracy"] == 1.0


def test_study_summary_keys_are_the_shipped_checkpoints(study, user):
    model, ev = study
    stored = model.metadata["metrics"]  # what training stored in the shipped checkpoint
    summary = ev.summary()
    assert set(summary) == set(stored) and len(summary) == len(stored) == 4 + 3 * 5 + 5
    assert list(summary)[:4] == ["test_loss", "elimination_accuracy", "recall_accuracy", "early_mae_train"]
    assert summary["probe_p4"] == ev.detail.probe[3] > 0.99  # the probe recalls y1 = 4
    assert str(ev).startswith(f"## d16h1: {N} test samples, test loss {ev.test_loss:.4f}")
    assert "memorization" in str(ev) and "Probe [2,4,5,3,4,5,3,2,2]" in str(ev)
    _, _, theirs = user
    assert theirs.summary() == {"accuracy": theirs.metrics["accuracy"], "test_loss": theirs.test_loss,
                                **theirs.reference}
    assert str(theirs).startswith(f"{theirs.model_name} on test_successor: {N} test sequences")


def test_task_and_its_config_give_the_default_numbers(study):
    model, ev = study
    config = model.task_config
    assert evaluate(model, task=PermutationTask(config), n=N) == ev
    assert evaluate(model, task=config, n=N) == ev
    other = evaluate(model, task=TaskConfig(), n=N)  # no repeated query: no memorization subgroup
    assert other.detail.memorization is None and other.metrics["recall_accuracy"] != other.metrics["recall_accuracy"]
    with pytest.raises(ValueError, match="task has V=4 but the model has V=5"):
        evaluate(model, task=TaskConfig(V=4), n=N)
    with pytest.raises(TypeError, match="task must be a perm_circuits.tasks.Task, a TaskConfig or None, got str|parameter 'task'"):
        evaluate(model, task="permutation")
    with pytest.raises(TypeError, match="task_config"):
        evaluate(model, task_config=config)  # removed: task= is the one way
    recall = recall_generalisation(model, task=PermutationTask(config), n=50)
    assert recall == recall_generalisation(model, task=config, n=50) == recall_generalisation(model, n=50)
    with pytest.raises(TypeError, match="task must be a PermutationTask, a TaskConfig or None, got Successor|parameter 'task'"):
        recall_generalisation(model, task=Successor())


def test_a_model_carrying_its_task_needs_no_task_argument(user):
    model, task, theirs = user
    with pytest.raises(TypeError, match="carries no task: evaluate\\(model, task=task\\)"):
        evaluate(model, n=N)
    model.task = task  # a model that carries its task (tasks.base.model_task)
    try:
        assert evaluate(model, n=N) == theirs
    finally:
        del model.task


# ----------------------------------------------------------------------------- no second type, no task_config=

OLD_CALL = re.compile(r"\b(?:evaluate|recall_generalisation)\((?:[^()]|\([^()]*\))*?\btask_config=", re.S)


def test_no_second_evaluation_type_and_no_task_config_argument():
    assert "task_config" not in inspect.signature(evaluate).parameters
    assert "task_config" not in inspect.signature(recall_generalisation).parameters
    hits = []
    for path in project_files(Path(__file__).name, "test_benchmarks.py"):
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":  # the cells' source, not their stored outputs
            cells = json.loads(text)["cells"]
            text = "\n".join("".join(cell["source"]) for cell in cells)
        hits += [f"{path.relative_to(ROOT)}: TaskEvaluation" for _ in re.finditer(r"\bTaskEvaluation\b", text)]
        hits += [f"{path.relative_to(ROOT)}: {m.group(0)[:60]!r}" for m in OLD_CALL.finditer(text)]
    assert hits == []
