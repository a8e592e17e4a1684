"""A user's task in one file: defined here, registered with one line, then trained, evaluated and
swept through the library's one path with no other code (the walk-through of docs/tasks.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar

import pytest
import torch

from perm_circuits import FitConfig, TaskBatch, evaluate, register_task, train
from perm_circuits.sweep import SweepSpec, load_sweep, run_sweep
from perm_circuits.tasks.runner import TaskEvaluation
from perm_circuits.tasks import task_entry, task_from_dict


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
    assert isinstance(evaluation, TaskEvaluation) and evaluation.n_samples == 500
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


def test_sweep_the_users_task_with_identical_rows_on_every_backend(tmp_path):
    spec = {"fixed": {"task": "modular_addition", "d_model": 16, "steps": 60, "lr": 0.01}, "grid": {"seed": [0, 1]}}
    first = run_sweep(spec, tmp_path / "serial", backend="serial", progress=False)
    assert first.done and not first.failed
    rows = load_sweep(tmp_path / "serial")
    assert len(rows) == 2 and (rows["status"] == "done").all() and set(rows["seed"]) == {0, 1}
    assert (rows["accuracy"] > 0.3).all()  # chance is 1/7 after 60 steps of a 16-wide model
    assert (rows["final_train_loss"] < math.log(8)).all()
    run_sweep(spec, tmp_path / "local", backend="local", workers=2, progress=False)
    again = load_sweep(tmp_path / "local")
    columns = ["run_id", "task", "seed", "p", "d_model", "accuracy", "test_loss", "reference_agreement",
               "final_train_loss"]
    assert rows[columns].sort_values("run_id").reset_index(drop=True).equals(
        again[columns].sort_values("run_id").reset_index(drop=True))
    # the run's numbers are the one path's: train then evaluate, with the run's seed
    model = train({"d_model": 16}, ModularAddition(), FitConfig(steps=60, lr=0.01, seed=1), progress=False).model
    one = rows[rows["seed"] == 1].iloc[0]
    assert evaluate(model, task=ModularAddition()).metrics["accuracy"] == one["accuracy"]
