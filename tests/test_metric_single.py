"""perm_circuits.metric holds the library's metrics once each: the target log-probability (per row
and pooled), the logit difference and the KL divergence to the full model; every tool that scores
a target reads them, and no other module computes a target's log-probability (checked on the
source with ``ast``)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from perm_circuits.metric import kl_to_full, logit_diff, pooled_target_logprob, target_logprob, target_logprobs
from perm_circuits.tasks.base import TaskBatch

SRC = Path(__file__).resolve().parents[1] / "src" / "perm_circuits"

# Functions that compute a log-probability of a target outside metric.py, each with why it stays.
# Anything else doing so is a second copy of the metric: use perm_circuits.metric instead.
OWN_LOSSES = {
    "tasks/factual.py": "a task's own metrics (the factual-recall task's reference measures)",
    "tasks/permutation.py": "a task's own metrics (the permutation task's per-step losses against the posterior)",
    "analysis/interventions/optimal.py": "the permutation task's answer loss at its x positions, the study's fast "
                                         "optimal search objective, whose committed constants it keeps bit for bit",
}


def _scores_a_target(function: ast.AST) -> bool:
    """Whether a function body takes a log-softmax / logsumexp and gathers from it (a target log-prob)."""
    calls = {node.func.attr for node in ast.walk(function)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    return bool(calls & {"log_softmax", "logsumexp"}) and "gather" in calls


def target_logprob_sites(src: Path = SRC) -> list[str]:
    """``path:function`` of every innermost function outside metric.py that computes a target log-prob."""
    sites = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src).as_posix()
        if relative == "metric.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _scores_a_target(node):
                inner = [n for n in ast.walk(node) if n is not node and isinstance(n, (ast.FunctionDef, ast.Lambda))
                         and _scores_a_target(n)]
                if not inner:
                    sites.append(f"{relative}:{node.name}")
    return sites


def test_no_second_copy_of_the_target_logprob_metric():
    stray = [site for site in target_logprob_sites() if site.split(":")[0] not in OWN_LOSSES]
    assert stray == [], f"a target log-probability computed outside perm_circuits.metric: {stray}"
    assert all((SRC / path).is_file() for path in OWN_LOSSES), "a listed module is gone: drop it from the list"


def test_the_checker_finds_a_copy(tmp_path):
    (tmp_path / "metric.py").write_text("def f(x, t):\n    return x.log_softmax(-1).gather(-1, t)\n")
    (tmp_path / "copy.py").write_text(
        "def outer(batch):\n    def metric(logits):\n        lse = logits.logsumexp(-1)\n"
        "        return logits.gather(-1, batch) - lse\n    return metric\n"
        "def fine(x):\n    return x.log_softmax(-1)\n")
    assert target_logprob_sites(tmp_path) == ["copy.py:metric"]


def _batch() -> tuple[TaskBatch, torch.Tensor]:
    tokens = torch.zeros(3, 4, dtype=torch.long)
    targets = torch.tensor([[1, 2, 0, 3], [0, 0, 4, -100], [2, 2, 2, 2]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 0.0]])
    logits = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    return TaskBatch(tokens, targets, mask), logits


def test_target_logprob_rows_and_pooled_by_hand():
    batch, logits = _batch()
    logp = logits.double().log_softmax(-1)
    rows = [(logp[0, 0, 1] + logp[0, 1, 2] + logp[0, 3, 3]) / 3, logp[1, 2, 4], logp[2, 1, 2]]
    assert target_logprob(batch)(logits).tolist() == pytest.approx([float(r) for r in rows], abs=1e-12)
    pooled = (logp[0, 0, 1] + logp[0, 1, 2] + logp[0, 3, 3] + logp[1, 2, 4] + 2 * logp[2, 1, 2]) / 6
    assert float(pooled_target_logprob(batch)(logits)) == pytest.approx(float(pooled), abs=1e-5)
    # batched over leading runs: one number per run
    two = pooled_target_logprob(batch)(torch.stack([logits, logits * 0]))
    assert two.shape == (2,) and float(two[1]) == pytest.approx(-math.log(5), abs=1e-6)
    # where a mask is 0 the target (here -100) is never read
    assert target_logprobs(logits, batch.targets, batch.mask > 0)[0, 0] == pytest.approx(float(logp[0, 0, 1]), abs=1e-6)


def test_empty_rows_raise_or_score_nan():
    batch, logits = _batch()
    empty = TaskBatch(batch.tokens, batch.targets, batch.mask * torch.tensor([[1.0], [0.0], [1.0]]))
    with pytest.raises(ValueError, match=r"needs a position with mask > 0 \(1 have none\)"):
        target_logprob(empty)
    values = target_logprob(empty, empty="nan")(logits)
    assert math.isnan(float(values[1])) and not torch.isnan(values[[0, 2]]).any()
    nothing = TaskBatch(batch.tokens, batch.targets, batch.mask * 0)
    with pytest.raises(ValueError, match="no target to score"):
        pooled_target_logprob(nothing)
    with pytest.raises(ValueError, match="no row of the batch has a position with mask > 0"):
        target_logprob(nothing, empty="nan")
    with pytest.raises(TypeError, match="TaskBatch"):
        target_logprob(batch.tokens)


def test_every_tool_reads_the_one_metric():
    """The discovery default, the patching metric, the IOI criteria's F and the optimal loss are
    the metric module's functions (the same numbers, not look-alikes)."""
    from perm_circuits.analysis.circuits.nodes import target_logprob_gain
    from perm_circuits.analysis.interventions import activation_patching, patching
    from perm_circuits.analysis.interventions.core import next_token_loss
    from perm_circuits.discovery.interventions import target_logprob_metric

    batch, logits = _batch()
    assert target_logprob_metric is pooled_target_logprob
    assert activation_patching.target_logprob is target_logprob and patching.logit_diff is logit_diff
    gain = target_logprob_gain(batch)(logits)
    assert torch.equal(gain, target_logprob(batch)(logits) + math.log(5))
    assert torch.equal(next_token_loss(batch)(logits), -pooled_target_logprob(batch)(logits))
    tokens = torch.tensor([[1, 2, 3, 4]])
    shifted = next_token_loss(tokens)(logits[:1])
    expected = -sum(float(logits[0, p].log_softmax(-1)[tokens[0, p + 1]]) for p in range(3)) / 3
    assert float(shifted) == pytest.approx(expected, abs=1e-6)


def test_logit_diff_and_kl_to_full():
    _, logits = _batch()
    answer, wrong = torch.tensor([0, 1, 2]), torch.tensor([4, 4, 4])
    assert logit_diff(logits, answer, wrong).tolist() == pytest.approx(
        [float(logits[r, -1, answer[r]] - logits[r, -1, 4]) for r in range(3)])
    with pytest.raises(ValueError, match=r"position 4 out of range: position must be in \[-4, 3\]"):
        logit_diff(logits, answer, wrong, position=4)
    kl = kl_to_full(logits)
    assert float(kl(logits)) == pytest.approx(0.0, abs=1e-12)
    uniform = torch.zeros_like(logits)
    p = logits.double().softmax(-1)
    expected = float((p * (p.log() + math.log(5))).sum(-1).mean())
    assert float(kl(uniform)) == pytest.approx(expected, abs=1e-7)  # float32 weights
    weights = torch.zeros(3, 4)
    weights[1, 2] = 1.0
    assert float(kl_to_full(logits, weights)(uniform)) == pytest.approx(
        float((p[1, 2] * (p[1, 2].log() + math.log(5))).sum()), abs=1e-7)
    assert kl(torch.stack([logits, uniform])).shape == (2,)
