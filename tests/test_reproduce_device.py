"""``reproduce birth|forner|factual --device``: an explicit CPU device gives the default run's numbers bit for bit.

Each system's ``--quick`` settings are shrunk here so the three runs take seconds; the device is
passed through ``reproduce`` (and the CLI) down to the models' training and evaluation.
"""

from __future__ import annotations

import json

import pytest
import torch

from perm_circuits.cli import main
from perm_circuits.reproduce import reproduce
from perm_circuits.systems import birth, factual, forner

CPU = torch.device("cpu")
TIMES = ("seconds", "cpu_seconds", "cpu_seconds_total", "seconds_hallucination", "seconds_storage")


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(birth, "QUICK", birth.BirthSettings(N=12, T=16, K=2, d_model=16, full_d_model=16, batch_size=8,
                                                            steps=12, full_steps=10, seeds=(0,), n_logged=4,
                                                            eval_size=32))
    monkeypatch.setattr(forner, "QUICK", {"seeds": (0,), "steps": 12, "batch_size": 64, "lr": 0.5, "n_test": 64})
    monkeypatch.setattr(factual, "QUICK", {"hallucination": {"steps": 30, "alpha": 0.01}, "sizes": ((8, 8), (8, 16)),
                                           "subjects": (4, 5, 6), "steps": 20, "seeds": (0,)})
    monkeypatch.setattr(factual, "SOFTMAX", {"model": "softmax", "steps": 20, "lr": 0.003, "d_model": 8, "d_head": 8,
                                             "d_mlp": 0})


def _untimed(value):
    """``numbers`` without wall or CPU times (the only entries that may differ between two runs)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


@pytest.mark.parametrize("name", ["birth", "forner", "factual"])
def test_reproduce_on_an_explicit_cpu_device_gives_the_same_numbers(tiny, name):
    plain = reproduce(name, quick=True, progress=False)
    placed = reproduce(name, quick=True, progress=False, device=CPU)
    assert plain.rows == placed.rows
    a, b = _untimed(dict(plain.numbers)), _untimed(dict(placed.numbers))
    assert json.dumps(a, sort_keys=True, default=float) == json.dumps(b, sort_keys=True, default=float)
    assert len(json.dumps(a, default=float)) > 200  # real numbers were compared, not an empty table


def test_cli_reproduce_takes_a_device(tiny, tmp_path, capsys):
    assert main(["reproduce", "forner", "--quick", "--quiet", "--device", "cpu", "--out", str(tmp_path / "a")]) == 0
    assert main(["reproduce", "forner", "--quick", "--quiet", "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "comparison.csv").read_text() == (tmp_path / "b" / "comparison.csv").read_text()
    assert main(["reproduce", "forner", "--quick", "--quiet", "--device", "gpu0"]) == 2
    assert "not a torch device name" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["birth", "forner", "factual"])
def test_every_reproduction_takes_a_device(name):
    import inspect

    module = {"birth": birth, "forner": forner, "factual": factual}[name]
    assert "device" in inspect.signature(module.run).parameters
