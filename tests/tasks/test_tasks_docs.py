"""docs/tasks.md: its code runs as written, and the numbers the page states are the ones it produces."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch

from perm_circuits.tasks import TASKS, task_from_dict

DOC = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_page_is_in_the_nav():
    nav = (DOC.parent.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert "tasks.md" in nav


def test_worked_example_runs_and_states_its_numbers(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) == 4  # the fourth ('Analyses on any task') runs in tests/analysis/test_generic.py
    monkeypatch.chdir(tmp_path)
    (tmp_path / "previous_token.py").write_text(blocks[1], encoding="utf-8")  # "Save it as previous_token.py"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "previous_token", raising=False)  # imported afresh, popped afterwards
    module = types.ModuleType("docs_tasks_example")  # training it: the page's second block, its own script
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    try:
        exec(compile(blocks[2], str(DOC), "exec"), namespace)
        task = namespace["task"]
        assert TASKS["previous_token"] is type(task)
        assert task_from_dict(task.to_dict()) == task
        records = namespace["result"].records
        by_step = {r["step"]: r["accuracy"] for r in records}
        assert sorted(by_step) == [1, 2, 4, 7, 14, 27, 52, 100]
        assert by_step[1] == pytest.approx(0.26, abs=0.005) and by_step[14] == pytest.approx(0.87, abs=0.005)
        assert all(by_step[step] == 1.0 for step in (27, 52, 100))
        evaluation = namespace["evaluation"]
        assert evaluation.metrics["accuracy"] == 1.0 and evaluation.reference["reference_agreement"] == 1.0
        assert namespace["previous"] == pytest.approx(0.97, abs=0.005)
        page = namespace["page"]
        assert page == Path("previous_token_report") / "previous_token.html" and (tmp_path / page).is_file()
        from perm_circuits.tasks.checkpoint import load_task_checkpoint, task_record

        assert task_record(namespace["checkpoint"]) == {"task": {"task": "previous_token", "V": 5, "length": 10},
                                                        "model": {"d_model": 16, "n_heads": 1, "n_layers": 1},
                                                        "seed": 0}  # as the page states
        loaded = load_task_checkpoint(namespace["checkpoint"])
        tokens = task.test_set(20).tokens
        assert loaded.task == task and torch.equal(loaded.model(tokens), namespace["model"](tokens))
    finally:
        TASKS.pop("previous_token", None)
        sys.modules.pop("previous_token", None)


def test_study_example_numbers(pretrained):
    from perm_circuits import PermutationTask, TaskConfig, evaluate

    block = _blocks()[0]
    assert "evaluate(load_pretrained(\"d32h2\"), task=PermutationTask(TaskConfig(repeat_ratio=0.3)), n=500)" in block
    result = evaluate(pretrained("d32h2"), task=PermutationTask(TaskConfig(repeat_ratio=0.3)), n=500)
    assert result.metrics["elimination_accuracy"] == result.metrics["recall_accuracy"] == 1.0
    assert round(result.test_loss, 3) == 1.015 and round(result.reference["reference_tv"], 3) == 0.042


def test_the_walk_through_sweeps_the_new_task(monkeypatch):
    """The page's spec of the new task is a valid sweep of it (keys, run ids), and the page names
    the one path only (no deprecated name in its code)."""
    import tomllib

    from perm_circuits.sweep import SweepSpec

    page = DOC.read_text(encoding="utf-8")
    walk = page[page.index("## A new task, from an empty file to a swept model"):page.index("## Analyses on any task")]
    module = types.ModuleType("previous_token")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    try:
        exec(compile(_blocks()[1], str(DOC), "exec"), module.__dict__)
        spec = SweepSpec.from_dict(tomllib.loads(re.search(r"```toml\n(.*?)```", walk, re.S).group(1)))
        assert len(spec) == 6 and {run.config["model"]["d_model"] for run in spec.runs} == {8, 16}
        run = spec.runs[0].config
        assert run["task"] == {"task": "previous_token", "V": 5, "length": 10} and run["model"]["n_heads"] == 1
        assert run["fit"]["steps"] == 100 and run["fit"]["lr"] == 0.01
        assert "--import previous_token" in walk
        assert "perm-circuits report previous_token_model --import previous_token.py --out previous_token_report" in walk
    finally:
        TASKS.pop("previous_token", None)
    code = "".join(_blocks())
    for old in ("evaluate_task", "train_task", "fit("):
        assert old not in code, old
