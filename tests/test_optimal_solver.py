"""perm_circuits.optimal_solver: the library's one optimal-ablation solver.  It finds the minimum of
a known objective, freezes and restores the model's parameters, and no other module builds an
optimiser for an ablation constant (checked on the source with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from perm_circuits.optimal_solver import OPTIMAL_STEPS, lbfgs_constant

SRC = Path(__file__).resolve().parents[1] / "src" / "perm_circuits"
SOLVER = "optimal_solver.py"


def optimiser_sites(src: Path = SRC, kinds: frozenset[str] = frozenset({"LBFGS"})) -> list[str]:
    """``path:line`` of every ``torch.optim.LBFGS`` (or bare ``LBFGS``) use outside the solver."""
    sites = []
    for path in sorted(src.rglob("*.py")):
        if path.relative_to(src).as_posix() == SOLVER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in kinds:
                sites.append(f"{path.relative_to(src).as_posix()}:{node.lineno}")
    return sites


def test_one_solver():
    assert optimiser_sites() == [], "an L-BFGS search outside perm_circuits.optimal_solver: call lbfgs_constant"
    assert (SRC / SOLVER).read_text().count("torch.optim.LBFGS(") == 1


def test_the_checker_finds_a_second_solver(tmp_path):
    (tmp_path / SOLVER).write_text("import torch\nopt = torch.optim.LBFGS\n")
    (tmp_path / "other.py").write_text("import torch\n\n\ndef solve(c):\n    return torch.optim.LBFGS([c])\n")
    assert optimiser_sites(tmp_path) == ["other.py:5"]


def test_the_solver_finds_a_quadratics_minimum_and_restores_the_model():
    model = torch.nn.Linear(3, 1)
    target = torch.tensor([1.0, -2.0, 0.5])
    seen = []

    def loss_of(c: torch.Tensor) -> torch.Tensor:
        seen.append(model.weight.requires_grad)
        return ((c - target) ** 2).sum() + model(c).sum().detach() * 0

    start = torch.zeros(3)
    found = lbfgs_constant(model, loss_of, start)
    assert torch.allclose(found, target, atol=1e-5) and not found.requires_grad
    assert seen and not any(seen), "the model's parameters are frozen during the search"
    assert model.weight.requires_grad and model.bias.requires_grad, "and restored after"
    assert start.tolist() == [0.0, 0.0, 0.0], "the start is not changed in place"
    assert lbfgs_constant(None, loss_of, start, 0).tolist() == [0.0, 0.0, 0.0]  # no steps: the start
    assert OPTIMAL_STEPS == 20


def test_the_solver_restores_the_model_when_the_objective_fails():
    model = torch.nn.Linear(2, 1)

    def broken(c: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("objective failed")

    with pytest.raises(RuntimeError, match="objective failed"):
        lbfgs_constant(model, broken, torch.zeros(2))
    assert all(p.requires_grad for p in model.parameters())


def test_every_optimal_ablation_reaches_the_solver(monkeypatch, pretrained):
    """The study's fast search, the any-task search and discovery's edge constants all call it."""
    import perm_circuits.analysis.interventions.core as core
    import perm_circuits.analysis.interventions.optimal as optimal
    import perm_circuits.discovery.interventions as edges
    from perm_circuits.analysis.interventions.core import ablate_tokens
    from perm_circuits.hooks import run_capture
    from perm_circuits.tasks import PermutationTask
    from perm_circuits.tasks.permutation_data import TaskConfig, make_batch

    calls = []

    def counting(model, loss_of, start, steps=OPTIMAL_STEPS):
        calls.append(tuple(start.shape))
        return lbfgs_constant(model, loss_of, start, 1)

    for module in (core, optimal, edges):
        monkeypatch.setattr(module, "lbfgs_constant", counting)
    model = pretrained("d32h2")
    batch = make_batch(TaskConfig(V=model.perm_config.V), 40, generator=torch.Generator().manual_seed(0))
    hook = "blocks.0.attn.hook_z"
    activation = run_capture(model, batch.tokens, [hook], [])[1][hook]
    optimal.optimise_constant(model, hook, torch.ones(activation.shape[1:], dtype=torch.bool), batch, [], activation)
    task_batch = PermutationTask(TaskConfig(V=model.perm_config.V)).test_set(40)
    ablate_tokens(model, hook, "optimal", reference=task_batch, index=0, steps=1)
    prepared = edges.prepare_edges(model, task_batch, how="optimal", optimal_steps=1, check=False)
    assert calls[:2] == [tuple(activation.shape[1:])] * 2
    assert prepared.graph.senders == ("embed", "L0H0", "L0H1", "L0MLP")
    assert calls[2:] == [(1, 9, model.cfg.d_model)] * 4  # one constant per sender and position
