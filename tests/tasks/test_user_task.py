"""A user's task in one file: defined here, registered with one line, then trained, evaluated and
swept through the library's one path with no other code (the walk-through of docs/tasks.md)."""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from typing import ClassVar

import pytest
import torch
from checkpoint_edit import edit_record

from perm_circuits import FitConfig, TaskBatch, evaluate, register_task, train
from perm_circuits.cli import main
from perm_circuits.models import PRETRAINED_DIR, CheckpointError, load_checkpoint
from perm_circuits.sweep import SweepSpec, load_sweep, reanalyse_sweep, run_sweep
from perm_circuits.tasks import TASKS, task_entry, task_from_dict
from perm_circuits.tasks.base import file_module_name, import_module_or_file
from perm_circuits.tasks.checkpoint import (
    load_task_checkpoint,
    save_task_model,
    task_record,
)
from perm_circuits.tasks.evaluation import Evaluation


@dataclass(frozen=True)
class ModularAddition:
    """``a b =`` -> ``(a + b) mod p``: the answer is read at the ``=`` token, the only loss position."""

    p: int = 7
    name: ClassVar[str] = "modular_addition"

    @property
    def d_vocab(self) -> int:
        return self.p + 1  # the residues 0..p-1 and the "=" token p

    @property
    def n_ctx(self) -> int:
        return 3

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("accuracy",)

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        a = torch.randint(self.p, (n,), generator=generator)
        b = torch.randint(self.p, (n,), generator=generator)
        tokens = torch.stack([a, b, torch.full_like(a, self.p)], dim=1)
        targets = torch.zeros_like(tokens)
        targets[:, -1] = (a + b) % self.p
        mask = torch.zeros(n, 3)
        mask[:, -1] = 1.0
        return TaskBatch(tokens, targets, mask)

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch:
        return self.sample(n, torch.Generator().manual_seed(seed), "test")

    def metrics(self, logits: torch.Tensor, batch: TaskBatch) -> dict[str, float]:
        return {"accuracy": float((logits[:, -1].argmax(-1) == batch.targets[:, -1]).float().mean())}

    def reference(self, batch: TaskBatch) -> torch.Tensor:
        return batch.targets  # the exact answer, as token ids

    def to_dict(self) -> dict:
        return {"task": self.name, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> ModularAddition:
        return cls(**data)


register_task(ModularAddition.name, ModularAddition)

RECIPE = FitConfig(steps=150, batch_size=64, lr=1e-2, seed=0)


def test_one_register_line_gives_the_task_a_default_model_and_sweep_keys():
    entry = task_entry("modular_addition")
    assert entry.cls is ModularAddition and entry.model is None and entry.reproduction is None
    assert entry.model_keys == ("d_model", "n_heads", "n_layers")
    assert task_from_dict({"task": "modular_addition", "p": 5}) == ModularAddition(5)
    spec = SweepSpec.from_dict({"fixed": {"task": "modular_addition", "p": 5, "d_model": 16, "steps": 10}})
    assert spec.runs[0].config == {"task": {"task": "modular_addition", "p": 5}, "model": {"d_model": 16},
                                   "fit": {"steps": 10, "batch_size": 64, "lr": 1e-3, "optimizer": "adam",
                                           "momentum": 0.0, "weight_decay": 0.0}, "seed": 0}
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['d_mlp'\] in \[fixed\]"):
        SweepSpec.from_dict({"fixed": {"task": "modular_addition", "d_mlp": 16}})
    with pytest.raises(ValueError, match=r"invalid run .*d_model=30 is not divisible by n_heads=4"):
        SweepSpec.from_dict({"fixed": {"task": "modular_addition", "d_model": 30, "n_heads": 4}})


def test_train_and_evaluate_the_users_task():
    task = ModularAddition()
    result = train(None, task, RECIPE, progress=False)  # None: the task's default transformer
    model = result.model
    assert (model.cfg.d_vocab, model.cfg.n_ctx, model.cfg.d_model, model.cfg.n_heads) == (8, 3, 32, 2)
    assert result.task is task and len(result.losses) == 150
    # the untrained model's loss is near log 8 (a uniform guess over the vocabulary); training cuts it 20-fold
    assert result.losses[0] == pytest.approx(math.log(8), abs=0.3) and result.losses[-1] < 0.15
    evaluation = evaluate(model, task=task, n=500)
    assert isinstance(evaluation, Evaluation) and evaluation.n_samples == 500 and evaluation.detail is None
    # chance is 1/7; the exact reference (the answer itself) agrees with the model wherever it is right
    assert evaluation.metrics["accuracy"] > 0.9
    assert evaluation.reference == {"reference_agreement": evaluation.metrics["accuracy"], "reference_accuracy": 1.0}
    assert evaluation.test_loss < 0.3
    # same seed, same model and data stream, bit for bit: a shorter run is the first steps of this one
    short = train(None, task, FitConfig(steps=20, batch_size=64, lr=1e-2, seed=0), progress=False)
    assert short.losses == result.losses[:20]
    # a preset or a dict names the default transformer's architecture; its vocabulary comes from the task
    small = train("d16h1", task, FitConfig(steps=2), progress=False).model
    assert (small.cfg.d_model, small.cfg.n_heads, small.cfg.d_vocab) == (16, 1, 8)
    deep = train({"d_model": 16, "n_layers": 2}, task, FitConfig(steps=2), progress=False).model
    assert (deep.cfg.d_model, deep.cfg.n_layers, deep.cfg.n_ctx) == (16, 2, 3)


@pytest.mark.slow
def test_sweep_the_users_task_with_identical_rows_on_every_backend(tmp_path, task_file):
    """The task comes from the user's own file, imported as ``--import FILE.py`` does; the local
    pool's workers import it too, from the file (its folder is not on their path).  Ray's workers:
    tests/sweep/test_backends.py::test_ray_runs_a_users_task_from_its_file."""
    module = import_module_or_file(str(task_file("user_sum_sweep", "modular_addition_sweep")))
    spec = {"fixed": {"task": "modular_addition_sweep", "d_model": 16, "steps": 60, "lr": 0.01},
            "grid": {"seed": [0, 1]}}
    first = run_sweep(spec, tmp_path / "serial", backend="serial", keep_models=True, progress=False)
    assert first.done and not first.failed
    with pytest.raises(ValueError, match=r"kept models of another task than the study's .*--import FILE.py"):
        reanalyse_sweep(tmp_path / "serial")
    rows = load_sweep(tmp_path / "serial")
    assert len(rows) == 2 and (rows["status"] == "done").all() and set(rows["seed"]) == {0, 1}
    assert (rows["accuracy"] > 0.3).all()  # chance is 1/7 after 60 steps of a 16-wide model
    assert (rows["final_train_loss"] < math.log(8)).all()
    columns = ["run_id", "task", "seed", "p", "d_model", "accuracy", "test_loss", "reference_agreement",
               "final_train_loss"]
    expected = rows[columns].sort_values("run_id").reset_index(drop=True)
    run_sweep(spec, tmp_path / "local", backend="local", workers=2, progress=False)
    assert load_sweep(tmp_path / "local")[columns].sort_values("run_id").reset_index(drop=True).equals(expected)
    # the Ray leg runs in tests/sweep/test_backends.py, inside that file's one Ray session
    # the run's numbers are the one path's: train then evaluate, with the run's seed
    task = module.ModularAddition()
    model = train({"d_model": 16}, task, FitConfig(steps=60, lr=0.01, seed=1), progress=False).model
    assert evaluate(model, task=task).metrics["accuracy"] == rows[rows["seed"] == 1].iloc[0]["accuracy"]


def _task_file(folder, module: str, task_name: str):
    """A user's task file: this module's ModularAddition, registered under ``task_name``."""
    source = inspect.getsource(ModularAddition).replace('"modular_addition"', repr(task_name))
    path = folder / f"{module}.py"
    path.write_text("from __future__ import annotations\n\nfrom dataclasses import asdict, dataclass\n"
                    "from typing import ClassVar\n\nimport torch\n\nfrom perm_circuits import TaskBatch, register_task\n\n\n"
                    f"{source}\n\nregister_task(ModularAddition.name, ModularAddition)\n", encoding="utf-8")
    return path


@pytest.fixture
def task_file(tmp_path):
    """Write a task file into tmp_path; forget its module and registration afterwards."""
    made = []

    def make(module: str, task_name: str):
        made.append((module, task_name))
        return _task_file(tmp_path, module, task_name)

    yield make
    for module, task_name in made:
        sys.modules.pop(module, None)
        sys.modules.pop(file_module_name(tmp_path / f"{module}.py"), None)  # the name --import FILE.py gives it
        TASKS.pop(task_name, None)


def test_report_a_checkpoint_of_the_users_task(tmp_path, task_file, capsys):
    path = task_file("user_sum_report", "modular_addition_report")
    task = import_module_or_file(str(path)).ModularAddition()
    result = train(None, task, FitConfig(steps=60, batch_size=64, lr=1e-2, seed=0), progress=False)
    saved = save_task_model(result.model, tmp_path / "sum_model", task, metadata={"note": "a user's task"})
    record = json.loads((saved / "config.json").read_text())["trained_on"]
    assert record == {"task": {"task": "modular_addition_report", "p": 7}, "model": {"d_model": 32, "n_heads": 2,
                      "n_layers": 1}, "seed": 0} and task_record(saved) == record
    loaded = load_task_checkpoint(saved)
    assert loaded.task == task and loaded.seed == 0 and loaded.metadata == {"note": "a user's task"}
    tokens = task.test_set(50).tokens
    assert torch.equal(loaded.model(tokens), result.model(tokens))  # the same model, bit for bit
    with pytest.raises(CheckpointError, match=r"trained on task 'modular_addition_report', not a permutation"):
        load_checkpoint(saved)  # the study's loader says where to go
    expected = evaluate(result.model, task=task, n=100)

    # a fresh session: the task's module is not imported, so its name is unknown until --import runs it
    sys.modules.pop(file_module_name(path))  # --import runs the file under a private name
    TASKS.pop("modular_addition_report")
    out = tmp_path / "report"
    assert main(["report", str(saved), "--out", str(out), "--samples", "100"]) == 2
    error = capsys.readouterr().err
    assert "trained on task 'modular_addition_report', which is not registered" in error and "--import" in error
    assert not out.exists()
    assert main(["report", str(saved), "--import", str(path), "--out", str(out), "--samples", "100"]) == 0
    page = out / "sum_model.html"
    assert capsys.readouterr().out.split() == [str(page)]
    html = page.read_text(encoding="utf-8")
    assert "sum_model on modular_addition_report" in html and "modular_addition_report" in html
    assert expected.metrics["accuracy"] > 0.3  # chance is 1/7
    for name, value in (("accuracy", expected.metrics["accuracy"]), ("test_loss", expected.test_loss),
                        ("reference_agreement", expected.reference["reference_agreement"])):
        assert re.search(rf"<th>{name}</th>\s*<td>{value:.4f}</td>", html), name
    # evaluate and discover take the same checkpoint: the task's own metrics, its own test set
    assert main(["evaluate", str(saved), "--import", str(path), "--samples", "100", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["accuracy"] == expected.metrics["accuracy"] and summary["test_loss"] == expected.test_loss
    picture = tmp_path / "circuit.svg"
    assert main(["discover", str(saved), "--import", str(path), "--method", "eap", "--samples", "50",
                 "--out", str(picture)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{saved}: eap under resample ablation") and "<svg" in picture.read_text()
    # the shipped checkpoints carry no task record and still load as the study's models
    assert task_record(PRETRAINED_DIR / "d16h1") is None and load_checkpoint(PRETRAINED_DIR / "d16h1").model_config.name == "d16h1"


def test_a_checkpoint_must_name_a_registered_task_and_rebuild_its_model(tmp_path):
    task = ModularAddition()
    model = train({"d_model": 16}, task, FitConfig(steps=2), progress=False).model
    with pytest.raises(ValueError, match=r"does not rebuild this model \(its keys or shapes differ\)"):
        save_task_model(model, tmp_path / "wrong", task, model_fields={"d_model": 32})
    assert not (tmp_path / "wrong").exists()  # nothing written
    saved = save_task_model(model, tmp_path / "ok", task)
    edit_record(saved, lambda record: record["trained_on"]["task"].update(task="no_such_task"))
    user_json = import_module_or_file(str(_task_file(tmp_path, "json", "modular_addition_json")))
    assert user_json is not sys.modules["json"]  # the user's json.py runs, and never shadows the standard json
    assert TASKS.pop("modular_addition_json") is user_json.ModularAddition
    with pytest.raises(ValueError, match=r"trained on task 'no_such_task', which is not registered; registered tasks: "
                                         r"\[.*'modular_addition'.*\]\. Import the module"):
        load_task_checkpoint(saved)
    assert main(["report", str(saved), "--out", str(tmp_path / "page")]) == 2
    assert main(["report", str(saved), "--import", "no_module_named_so", "--out", str(tmp_path / "page")]) == 2
