"""``TaskBatch`` is the only batch, and the general tools get what they need from the
model's task, never by asking what kind of model it is.

Source checks (no model): no ``Batch`` / ``as_batch`` / ``as_task_batch`` anywhere the project's code,
docs, notebooks or scripts are, and no ``is_permutation_model`` dispatch outside the permutation task's
own modules (``tasks/permutation*.py``) and ``analysis/study/``.  Behaviour checks: a permutation batch
carries the task's fields in ``extras``; ``model_task`` / ``own_analysis`` give a study bridge its task
and its own analyses and any other model none.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from perm_circuits.models import bridge_task, build_model
from perm_circuits.tasks import PermutationTask, TaskBatch
from perm_circuits.tasks.base import model_task, own_analysis
from perm_circuits.tasks.permutation_data import PERMUTATION_EXTRAS, TaskConfig, make_batch, permutation_batch

from conftest import project_files  # tests/ is on the path (pytest rootdir, no __init__)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "perm_circuits"
OLD_BATCH = re.compile(r"(?<![\w.])(Batch|as_batch|as_task_batch)\b(?!\s+\d)")  # "Batch 512" is prose on a size


def test_no_second_batch_type_is_named_anywhere():
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
            for path in project_files(Path(__file__).name, "test_benchmarks.py")
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
            if OLD_BATCH.search(line)]
    assert hits == []


def _dispatch_sites() -> list[str]:
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("tasks/permutation", "analysis/study/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\bis_permutation_model\b|\bas_batch\b|\bas_task_batch\b", line):
                sites.append(f"{relative}:{number}")
    return sites


def test_no_model_kind_dispatch_outside_the_permutation_modules():
    assert _dispatch_sites() == []  # 30 sites in 12 modules before the permutation batch became a TaskBatch


def test_a_permutation_batch_is_a_task_batch_with_its_fields_in_extras():
    batch = make_batch(TaskConfig(repeat_ratio=0.5), 64, seed=2)
    assert type(batch) is TaskBatch and tuple(batch.extras) == PERMUTATION_EXTRAS
    xs, ys, perms = (batch.extras[name] for name in ("xs", "ys", "perms"))
    assert torch.equal(ys, perms.gather(1, xs - 1)) and torch.equal(batch.tokens[:, 0::2], xs)
    assert torch.equal(batch.extras["repeated"], batch.extras["repeat_source"] >= 0)
    assert int(batch.extras["repeated"].sum()) == 32  # as the Batch of before drew
    sub = batch.subset(batch.extras["repeated"])  # extras follow the rows
    assert torch.equal(sub.extras["xs"][:, -1], sub.extras["xs"].gather(1, sub.extras["repeat_source"][:, None])[:, 0])
    bare = TaskBatch(batch.tokens, batch.targets, batch.mask)  # made elsewhere: rebuilt from the tokens
    assert all(torch.equal(permutation_batch(bare).extras[name], batch.extras[name]) for name in PERMUTATION_EXTRAS)


def test_the_model_says_its_task_and_the_task_its_own_analyses():
    bridge = build_model("d16h1")
    task = model_task(bridge)
    assert task == PermutationTask(TaskConfig(V=5))
    assert own_analysis(bridge, "ablation_table").__name__ == "study_ablation_table"
    assert bridge_task(bridge) == task and bridge_task(torch.nn.Linear(2, 2)) is None
    assert own_analysis(bridge, "no such analysis") is None
    assert task.value_tokens == slice(1, 6) and task.named_positions["answer"] == range(1, 8, 2)
    with pytest.raises(ValueError, match="tokens must be in 1..5"):
        task.check_tokens(torch.zeros(1, 9, dtype=torch.long))
    plain = torch.nn.Linear(2, 2)
    assert model_task(plain) is None and own_analysis(plain, "ablation_table") is None
