"""Device plumbing, exercised on the CPU with an explicit device: same numbers, every tensor where asked."""

from __future__ import annotations

import pytest
import torch

from perm_circuits.devices import model_device, resolve_device
from perm_circuits.models import build_model, load_pretrained
from perm_circuits.tasks.permutation_data import TaskConfig
from perm_circuits.train import TrainConfig, train

CPU = torch.device("cpu")


def test_resolve_device():
    assert resolve_device(None) == CPU and resolve_device("cpu") == CPU and resolve_device(CPU) == CPU
    with pytest.raises(TypeError, match="device must be"):
        resolve_device(3)
    with pytest.raises(ValueError, match="not a torch device name"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            resolve_device("cuda")


def test_models_load_and_build_on_the_device():
    model = load_pretrained("d16h1", device=CPU)
    assert model_device(model) == CPU and all(p.device == CPU for p in model.parameters())
    built = build_model("d16h1", device="cpu")
    assert all(p.device == CPU for p in built.parameters())
    assert torch.equal(built.W_E, build_model("d16h1").W_E)  # initialised on the CPU: the same weights


def test_study_loop_with_an_explicit_cpu_device_is_bit_identical():
    recipe = TrainConfig(epochs=1, samples_per_epoch=1280, test_size=200)
    task = TaskConfig(repeat_ratio=0.3)
    plain = train("d16h1", task, recipe, progress=False)
    placed = train("d16h1", task, recipe, progress=False, device=CPU)
    for (name, a), b in zip(plain.model.state_dict().items(), placed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert plain.history.rows == placed.history.rows
    assert all(p.device == CPU for p in placed.model.parameters())


def test_step_loop_with_an_explicit_cpu_device_is_bit_identical():
    from perm_circuits.tasks import FitConfig, PermutationTask

    task = PermutationTask(TaskConfig())
    recipe = FitConfig(steps=20, batch_size=32, lr=1e-2)
    a = train(build_model("d16h1"), task, recipe, progress=False)
    b = train(build_model("d16h1"), task, recipe, progress=False, device="cpu")
    assert a.losses == b.losses and len(a.losses) == 20
    assert all(isinstance(loss, float) for loss in b.losses)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))


def test_reproduce_refuses_a_device_it_cannot_use():
    from perm_circuits.reproduce import reproduce

    with pytest.raises(ValueError, match="not a torch device name"):
        reproduce("birth", quick=True, device="gpu0")


def test_a_model_on_the_meta_device_is_refused_by_name():
    """Shapes without values: evaluate and discover say so, instead of a raw torch error mid-forward."""
    from perm_circuits import build_model, evaluate
    from perm_circuits.discovery import discover

    model = build_model("d16h1", device="meta")
    for run in (lambda: evaluate(model), lambda: discover(model)):
        with pytest.raises(ValueError, match="weights are on the meta device"):
            run()
