"""One ablation table on every model: the study's table and any task's are one
:class:`AblationTable` of :class:`AblationRow`, with one ``to_dataframe()`` convention; ``task=`` (a
``PermutationTask`` or its ``TaskConfig``) on a study model is the study's table; ``metric=`` still
takes the any-task path; the old second type and ``task_config=`` are gone."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from pathlib import Path

import pytest
import torch

import perm_circuits.analysis as analysis
from perm_circuits.analysis import AblationRow, AblationTable, ablation_table
from perm_circuits.analysis.interventions.permutation_table import ABLATION_METRICS
from perm_circuits.hooks import hook_count
from perm_circuits.systems.forner_model import teacher_model
from perm_circuits.tasks import PermutationTask
from perm_circuits.tasks.permutation_data import make_test_set

from conftest import project_files  # tests/ is on the path (pytest rootdir, no __init__)

ROOT = Path(__file__).resolve().parents[3]
HOWS = ("zero", "mean")


def _columns(table: AblationTable) -> list[str]:
    names = list(table.metric_names)
    return ["component", "how", "layer", "head", *names, "test_loss", *(f"delta_{m}" for m in names)]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def study(pretrained):
    model = pretrained("d16h1")
    config = model.task_config
    test_set = make_test_set(dataclasses.replace(config, repeat_ratio=0.3), n=300, seed=7)
    return model, config, test_set, ablation_table(model, HOWS, test_set)


@pytest.fixture(scope="module")
def chain():
    model = teacher_model()
    task = model.task
    return model, task, ablation_table(model, HOWS, task=task, n=200, reference=task.test_set(200, 3))


def test_the_study_and_a_task_share_one_table_type_and_one_frame_convention(study, chain):
    model, _, test_set, table = study
    _, task, other = chain
    for t in (table, other):
        assert type(t) is AblationTable and all(type(row) is AblationRow for row in t.rows)
        assert t.baseline is t.rows[0] and (t.baseline.component, t.baseline.how) == ("none", "none")
        frame = t.to_dataframe()
        assert list(frame.columns) == _columns(t)
        assert list(zip(frame.component, frame.how)) == [(row.component, row.how) for row in t.rows]
        for i, row in enumerate(t.rows):
            assert t.get(row.component, row.how) is row
            assert frame.loc[i, "test_loss"] == row.test_loss
            for m in t.metric_names:
                assert _same(frame.loc[i, m], row[m]) and _same(frame.loc[i, f"delta_{m}"], row[m] - t.baseline[m])
    # the study's table: the permutation task's metrics, its subgroup count and reference
    assert (table.task, table.metric_names, table.primary_metric) == ("permutation", ABLATION_METRICS,
                                                                    "elimination_accuracy")
    assert (table.n_samples, table.seed, table.reference, table.positions) == (300, 0, "test set", None)
    assert table.n_recall == int(test_set.extras["repeated"].sum()) > 0
    # d16h1's one head is needed for both answers (docs/results.md): zero-ablated, both collapse
    head = table.get("L0H0", "zero")
    assert table.baseline["elimination_accuracy"] > 0.95 and head["elimination_accuracy"] < 0.3
    assert head["recall_accuracy"] < 0.3 and head.test_loss > table.baseline.test_loss + 0.5
    assert math.isnan(head["follows_reference"])  # zero ablation swaps in no reference row
    # a user task's table: its own metrics, no recall subgroup
    assert (other.task, other.metric_names, other.primary_metric) == (task.name, tuple(task.metric_names),
                                                                    "teacher_forced_accuracy")
    assert (other.n_samples, other.seed, other.reference, other.n_recall) == (200, 0, "batch of 200", None)
    # zeroing the teacher's one head makes every logit 0: uniform over the N states
    zero = other.get("L0H0", "zero")
    assert other.baseline["teacher_forced_accuracy"] == 1.0 and zero["teacher_forced_accuracy"] < 0.2
    assert zero.test_loss == pytest.approx(math.log(task.N), abs=1e-6)
    with pytest.raises(KeyError, match="no metric 'recall_accuracy'"):
        zero["recall_accuracy"]
    with pytest.raises(KeyError, match="no row for component='L9H9'"):
        other.get("L9H9", "zero")
    assert hook_count(model) == 0


def test_task_permutation_or_its_config_on_a_study_model_is_the_default_table(study):
    model, config, test_set, table = study
    expected = table.to_dataframe()
    for task in (PermutationTask(config), config):
        again = ablation_table(model, HOWS, test_set, task=task)
        assert (again.task, again.metric_names, again.n_recall) == ("permutation", ABLATION_METRICS, table.n_recall)
        assert again.to_dataframe().equals(expected), type(task).__name__
    # the settings are passed on: another permutation split moves the train-prior MAE, not the accuracies
    other = dataclasses.replace(config, split_seed=config.split_seed + 1)
    moved = ablation_table(model, ("zero",), test_set, task=other).baseline
    assert moved["elimination_accuracy"] == table.baseline["elimination_accuracy"]
    assert abs(moved["early_mae_train"] - table.baseline["early_mae_train"]) > 1e-3
    with pytest.raises(ValueError, match="task has V=4 but the model has V=5"):
        ablation_table(model, HOWS, test_set, task=dataclasses.replace(config, V=4))


def test_a_config_is_refused_on_a_model_of_another_task(chain):
    model, _, _ = chain
    with pytest.raises(TypeError, match="task is a TaskConfig .* not a permutation-lookup model"):
        ablation_table(model, HOWS, task=PermutationTask().config)


def test_metric_takes_the_any_task_path_on_a_study_model_too(study):
    model, config, test_set, _ = study

    def last_logit(logits, batch):
        return logits[:, -1, 1]

    table = ablation_table(model, HOWS, test_set, metric=last_logit)
    assert type(table) is AblationTable and (table.task, table.metric_names) == ("metric", ("metric",))
    assert list(table.to_dataframe().columns) == _columns(table)
    with torch.no_grad():
        expected = float(model(test_set.tokens)[:, -1, 1].mean())
    assert table.baseline["metric"] == pytest.approx(expected, abs=1e-5)
    assert table.get("L0H0", "zero")["metric"] != pytest.approx(expected, abs=1e-3)
    forced = ablation_table(model, HOWS, test_set, task=PermutationTask(config), metric=last_logit)
    assert forced.metric_names == ("metric",) and forced.to_dataframe().equals(table.to_dataframe())
    tokens = ablation_table(model, ("zero",), test_set.tokens, metric=last_logit)  # token ids: no targets, no loss
    assert tokens.baseline["metric"] == pytest.approx(expected, abs=1e-5) and math.isnan(tokens.baseline.test_loss)


def test_the_second_table_type_and_task_config_are_gone():
    assert "task_config" not in inspect.signature(ablation_table).parameters
    old = ["Task" + "AblationTable", "Task" + "AblationRow"]
    assert not any(hasattr(analysis, name) for name in old)
    pattern = re.compile("|".join(old) + r"|ablation_table\([^)]*task_config=")
    offenders = [str(p.relative_to(ROOT)) for p in project_files(Path(__file__).name, "test_benchmarks.py") if pattern.search(p.read_text("utf-8"))]
    assert not offenders
