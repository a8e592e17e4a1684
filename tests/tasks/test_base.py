"""The task interface (tasks/base.py): TaskBatch, the registry, the masked loss, log spacing and ``fit``.

Everything runs on a toy task defined here (next token = current token + 1 mod K) and a tiny
embedding -> frozen linear -> unembedding model, so the suite stays fast.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import pytest
import torch
from jaxtyping import TypeCheckError
from torch import nn

from perm_circuits.tasks import (
    TASKS,
    FitResult,
    StepState,
    Task,
    TaskBatch,
    fit,
    log_spaced_steps,
    masked_cross_entropy,
    register_task,
    task_from_dict,
)


@dataclass(frozen=True)
class Successor:
    """Toy task: random tokens in 0..K-1, target (token + 1) mod K, no loss on position 0."""

    K: int = 7
    length: int = 6
    name: ClassVar[str] = "test_successor"

    @property
    def d_vocab(self) -> int:
        return self.K

    @property
    def n_ctx(self) -> int:
        return self.length

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("accuracy",)

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        tokens = torch.randint(self.K, (n, self.length), generator=generator)
        mask = torch.ones(n, self.length)
        mask[:, 0] = 0.0
        return TaskBatch(tokens, (tokens + 1) % self.K, mask, {"first": tokens[:, 0]})

    def test_set(self, n: int = 2000, seed: int = 1234) -> TaskBatch:
        return self.sample(n, torch.Generator().manual_seed(seed), "test")

    def metrics(self, logits: torch.Tensor, batch: TaskBatch) -> dict[str, float]:
        rows = batch.mask > 0
        return {"accuracy": float((logits.argmax(-1)[rows] == batch.targets[rows]).float().mean())}

    def reference(self, batch: TaskBatch) -> torch.Tensor:
        return batch.targets.clone()

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.name, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Successor:
        return cls(**data)


class Tiny(nn.Module):
    """Embedding -> a frozen linear map -> unembedding (``frozen`` is declared, not patched in)."""

    def __init__(self, K: int = 7, d: int = 16, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(K, d)
        self.frozen = nn.Linear(d, d)
        self.frozen.requires_grad_(False)
        self.unembed = nn.Linear(d, K)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.unembed(torch.relu(self.frozen(self.embed(tokens))))


@pytest.fixture
def registered():
    register_task(Successor.name, Successor)
    yield Successor
    TASKS.pop(Successor.name, None)


# ----------------------------------------------------------------------------- TaskBatch


def test_task_batch_validates_shapes_and_subsets():
    tokens = torch.arange(12).reshape(3, 4)
    mask = torch.ones(3, 4)
    batch = TaskBatch(tokens, tokens + 1, mask, {"ids": torch.tensor([5, 6, 7])})
    assert len(batch) == 3
    sub = batch.subset(torch.tensor([True, False, True]))
    assert sub.tokens.tolist() == [[0, 1, 2, 3], [8, 9, 10, 11]]
    assert sub.extras["ids"].tolist() == [5, 7]
    # under the test suite's jaxtyping hook the annotations catch a shape mismatch first ...
    with pytest.raises(TypeCheckError, match="parameter 'targets'"):
        TaskBatch(tokens, tokens[:, :3], mask)
    # ... and without it TaskBatch's own check does, with a ValueError naming the shapes
    bad = TaskBatch(tokens, tokens, mask)
    object.__setattr__(bad, "targets", tokens[:, :3])
    with pytest.raises(ValueError, match=r"tokens, targets and mask must share a shape, got \(3, 4\), \(3, 3\), \(3, 4\)"):
        bad.__post_init__()
    with pytest.raises(ValueError, match=r"extras\['ids'\] has batch size"):
        TaskBatch(tokens, tokens, mask, {"ids": torch.zeros(2)})
    with pytest.raises(TypeError, match=r"extras\['ids'\] must be a tensor, got list|parameter 'extras'"):
        TaskBatch(tokens, tokens, mask, {"ids": [1, 2, 3]})
    for name, value, message in (("targets", tokens.float(), "targets must be integer token ids, got dtype torch.float32"),
                                 ("mask", mask.long(), "mask must be a float tensor of loss weights, got dtype torch.int64")):
        with pytest.raises(TypeError, match=f"{message}|parameter '{name}'"):
            TaskBatch(**{"tokens": tokens, "targets": tokens, "mask": mask, name: value})
        object.__setattr__(bad, name, value)
        object.__setattr__(bad, "targets" if name == "mask" else "mask", tokens if name == "mask" else mask)
        with pytest.raises(TypeError, match=message):
            bad.__post_init__()


# ----------------------------------------------------------------------------- registry


def test_register_and_round_trip(registered):
    task = Successor(K=5, length=3)
    assert isinstance(task, Task)
    assert TASKS["test_successor"] is Successor
    assert register_task("test_successor", Successor) is Successor  # same class again: fine
    again = task_from_dict(task.to_dict())
    assert again == task and type(again) is Successor


def test_register_and_from_dict_errors(registered):
    with pytest.raises(ValueError, match="already registered to Successor"):
        register_task("test_successor", type("Other", (Successor,), {}))
    with pytest.raises(ValueError, match="task name must be a non-empty string, got ''"):
        register_task("", Successor)
    with pytest.raises(TypeError, match="task name must be a non-empty string, got int 3|parameter 'name'"):
        register_task(3, Successor)  # the suite's jaxtyping hook may catch this first
    with pytest.raises(ValueError, match="needs a 'task' key naming one of"):
        task_from_dict({"K": 3})
    with pytest.raises(TypeError, match="a task dict must be a mapping with a 'task' key, got list|parameter 'data'"):
        task_from_dict(["task"])
    with pytest.raises(TypeError, match="needs a from_dict classmethod"):
        register_task("test_other", Tiny)
    assert "test_other" not in TASKS
    with pytest.raises(ValueError, match=r"unknown task 'nope'; registered tasks: \[.*'permutation'.*'test_successor'"):
        task_from_dict({"task": "nope"})
    # checked when registering, not at the first sweep: a bad recipe value, keys given as one string
    with pytest.raises(ValueError, match=r"fit_defaults \{'steps': 0\}: steps must be >= 1, got 0"):
        register_task("test_bad_defaults", Successor, fit_defaults={"steps": 0})
    with pytest.raises(TypeError, match="model_keys must be a list or tuple of field names or None, got str 'K'"):
        register_task("test_bad_keys", Successor, model=lambda task, seed: None, model_keys="K")
    assert "test_bad_defaults" not in TASKS and "test_bad_keys" not in TASKS


# ----------------------------------------------------------------------------- loss and log spacing


def test_masked_cross_entropy_matches_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]])
    targets = torch.tensor([[0, 1], [2, 0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 2.0]])
    # -log softmax at the targets: (2,0,0)->0, (0,0,0)->2, (1,2,3)->0; position (0,1) is masked out
    ce = [2 - math.log(math.exp(2) + 2), -math.log(3), 1 - math.log(math.e + math.e**2 + math.e**3)]
    expected = -(1 * ce[0] + 1 * ce[1] + 2 * ce[2]) / 4
    assert masked_cross_entropy(logits, targets, mask).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(1.5383, abs=1e-4)  # (0.2395 + 1.0986 + 2 * 2.4076) / 4
    with pytest.raises(ValueError, match="the loss mask selects no position"):
        masked_cross_entropy(logits, targets, torch.zeros(2, 2))


def test_log_spaced_steps():
    assert log_spaced_steps(100, 3) == (1, 10, 100)
    assert log_spaced_steps(1000, 4) == (1, 10, 100, 1000)
    assert log_spaced_steps(50, 1) == (50,)
    assert log_spaced_steps(5, 40) == (1, 2, 3, 4, 5)  # distinct: fewer than n when the range is short
    assert log_spaced_steps(64, 3, first=4) == (4, 16, 64)
    steps = log_spaced_steps(10_000, 40)
    assert steps[0] == 1 and steps[-1] == 10_000 and list(steps) == sorted(set(steps))
    for total, n, first in ((0, 3, 1), (10, 0, 1), (10, 3, 0), (3, 3, 5)):
        with pytest.raises(ValueError, match="need 1 <= first <= total and n >= 1"):
            log_spaced_steps(total, n, first)
    with pytest.raises(TypeError, match="total must be an int, got bool True"):
        log_spaced_steps(True)  # returned (True,) before
    with pytest.raises(TypeError, match="n must be an int, got bool True"):
        log_spaced_steps(10, True)


# ----------------------------------------------------------------------------- fit


def _train(seed: int = 0, **options) -> FitResult:
    return fit(Tiny(seed=0), Successor(), steps=options.pop("steps", 60), batch_size=32, lr=0.05, seed=seed,
               progress=False, **options)


def test_fit_learns_trains_only_trainable_and_is_bit_identical():
    model = Tiny(seed=0)
    frozen = model.frozen.weight.clone()
    embed = model.embed.weight.clone()
    result = fit(model, Successor(), steps=60, batch_size=32, lr=0.05, seed=3, progress=False)
    assert result.model is model and not model.training
    assert len(result.losses) == 60 and result.losses[-1] < 0.2 < 1.5 < result.losses[0]
    assert torch.equal(model.frozen.weight, frozen) and torch.equal(model.frozen.bias, Tiny(seed=0).frozen.bias)
    assert not torch.equal(model.embed.weight, embed)
    test = Successor().test_set(500)
    with torch.no_grad():
        accuracy = Successor().metrics(model(test.tokens), test)["accuracy"]
    assert accuracy == 1.0
    again = fit(Tiny(seed=0), Successor(), steps=60, batch_size=32, lr=0.05, seed=3, progress=False)
    assert again.losses == result.losses
    for (name, a), b in zip(model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), name
    other = fit(Tiny(seed=0), Successor(), steps=60, batch_size=32, lr=0.05, seed=4, progress=False)
    assert other.losses != result.losses


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_fit_other_optimizers(optimizer):
    result = _train(optimizer=optimizer, momentum=0.9 if optimizer == "sgd" else 0.0, steps=40)
    assert result.losses[-1] < 0.5 * result.losses[0]


def test_fit_callbacks_see_step_state_and_records_are_kept():
    seen: list[tuple[int, float, bool, bool]] = []
    keep = set(log_spaced_steps(20, 5))

    def watch(state: StepState) -> None:
        seen.append((state.step, state.loss, state.model.training, torch.is_grad_enabled()))

    def record(state: StepState):
        if state.step in keep:
            return {"step": state.step, "bias0": float(state.model.unembed.bias[0])}
        return None

    result = _train(steps=20, callbacks=[watch, record])
    assert [s[0] for s in seen] == list(range(1, 21))
    assert [s[1] for s in seen] == list(result.losses)
    assert not any(s[2] or s[3] for s in seen)  # eval mode, no grad inside callbacks
    assert [r["step"] for r in result.records] == sorted(keep) == [1, 2, 4, 9, 20]
    assert result.records[-1]["bias0"] == float(result.model.unembed.bias[0].detach())
    assert isinstance(seen[0], tuple) and all(isinstance(r, dict) for r in result.records)


def test_fit_bad_inputs_raise_before_training():
    """Each bad argument is refused before any step; a wrongly typed one may be caught first by the
    test suite's jaxtyping hook (a TypeError naming the parameter) instead of fit's own message."""
    model = Tiny()
    before = model.embed.weight.clone()
    task = Successor()
    frozen = Tiny()
    frozen.requires_grad_(False)
    cases = [
        (dict(steps=0), ValueError, "steps must be >= 1, got 0"),
        (dict(steps=True), TypeError, "steps must be an int, got bool True"),
        (dict(steps=2, batch_size=-4), ValueError, "batch_size must be >= 1, got -4"),
        (dict(steps=2, batch_size=2.0), TypeError, "parameter 'batch_size'"),
        (dict(steps=2, lr=0.0), ValueError, "lr must be a number > 0, got 0.0"),
        (dict(steps=2, lr=-1e-3), ValueError, "lr must be a number > 0, got -0.001"),
        (dict(steps=2, optimizer="rmsprop"), ValueError, "optimizer must be 'adam', 'adamw' or 'sgd', got 'rmsprop'"),
        (dict(steps=2, callbacks=[3]), TypeError, "callbacks must be callables taking a StepState, got 3|parameter 'callbacks'"),
        (dict(steps=2, seed="0"), TypeError, "seed must be an int, got str '0'|parameter 'seed'"),
        (dict(steps=2, forward="model"), TypeError, "forward must be a callable|parameter 'forward'"),
        (dict(steps=1, task={"task": "x"}), TypeError, "task must implement perm_circuits.tasks.Task, got dict|parameter 'task'"),
        (dict(steps=1, model="d32h2"), TypeError, "model must be a torch.nn.Module mapping tokens to logits, got str|parameter 'model'"),
        (dict(steps=1, model=frozen), ValueError, "the model has no trainable parameter"),
    ]
    for kwargs, error, message in cases:
        kwargs = {"model": model, "task": task, **kwargs}
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            fit(progress=False, **kwargs)
    assert torch.equal(model.embed.weight, before)


def test_fit_custom_forward():
    calls = []

    def forward(model, tokens):
        calls.append(tokens.shape)
        return model(tokens)

    result = _train(steps=3, forward=forward)
    assert calls == [(32, 6)] * 3 and len(result.losses) == 3


def test_a_dataclass_task_inherits_its_test_set_and_dict_round_trip():
    from perm_circuits.tasks import FactualRecallTask, PermutationChainTask
    from perm_circuits.tasks.base import check_sample

    task = FactualRecallTask(S=4, R=2, D=2)
    assert task.to_dict() == {"task": "factual_recall", "S": 4, "R": 2, "D": 2, "n_noise": 16, "seq_len": 8,
                              "fact_seed": 0}
    assert task_from_dict(task.to_dict()) == task
    test = task.test_set(5, 3)
    assert test.tokens.shape == (5, 8)
    assert torch.equal(test.tokens, task.sample(5, torch.Generator().manual_seed(3), "test").tokens)
    chain = PermutationChainTask(N=4, d_g=3, L=2)
    assert chain.to_dict() == {"task": "perm_chain", "N": 4, "d_g": 3, "L": 2, "perm_seed": 0}  # no perms
    with pytest.raises(ValueError, match=r"unknown PermutationChainTask fields \['perms'\]; "
                                         r"expected a subset of \['L', 'N', 'd_g', 'perm_seed'\]"):
        PermutationChainTask.from_dict({"N": 4, "perms": [0]})
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        check_sample(0, torch.Generator(), "train")
    with pytest.raises(TypeError, match="generator must be a torch.Generator, got int"):
        check_sample(2, 0, "train")
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'test'\), got 'val'"):
        chain.sample(2, torch.Generator(), "val")


def test_fit_refuses_a_task_whose_tokens_the_model_cannot_embed():
    from perm_circuits import build_model
    from perm_circuits.tasks import BigramTriggerTask

    model = build_model("d16h1")  # the permutation task's vocabulary: 6 ids
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"task 'bigram_triggers' draws token ids up to \d+ but the model's vocabulary has 6 ids"):
        fit(model, BigramTriggerTask(), steps=2, batch_size=4, progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no step taken
    assert not model.training


def test_masked_cross_entropy_ignores_targets_outside_the_mask():
    """A TaskBatch's targets may be any value where the mask is 0 (e.g. -1 or past the vocabulary)."""
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    expected = masked_cross_entropy(logits, torch.tensor([[0, 0, 1]]), mask)
    assert masked_cross_entropy(logits, torch.tensor([[0, -1, 1]]), mask) == expected
    assert masked_cross_entropy(logits, torch.tensor([[0, 99, 1]]), mask) == expected
    hand = -(torch.log_softmax(logits[0, 0], -1)[0] + torch.log_softmax(logits[0, 2], -1)[1]) / 2
    assert float(expected) == pytest.approx(float(hand), rel=1e-6)


def test_dataclass_task_test_set_checks_its_seed():
    from perm_circuits.tasks import BigramTriggerTask

    raw = inspect.unwrap(BigramTriggerTask.test_set)  # as a user calls it, without the suite's type checker
    with pytest.raises(TypeError, match="seed must be an int, got float 1.5"):
        raw(BigramTriggerTask(), 2, 1.5)
    with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*64\)"):
        BigramTriggerTask().test_set(2, 2**64)


def test_seeds_past_torchs_range_are_named():
    """A seed torch.manual_seed cannot take is refused with its name, not 'Overflow when unpacking long long'."""
    from perm_circuits import TaskConfig
    from perm_circuits.tasks import BigramTriggerTask, FactualRecallTask, FitConfig, PermutationChainTask

    for build, name in [
        (lambda: FitConfig(seed=2**64), "seed"),
        (lambda: TaskConfig(split_seed=2**64), "split_seed"),
        (lambda: BigramTriggerTask(chain_seed=2**64), "chain_seed"),
        (lambda: FactualRecallTask(fact_seed=2**64), "fact_seed"),
        (lambda: PermutationChainTask(perm_seed=2**64), "perm_seed"),
    ]:
        with pytest.raises(ValueError, match=rf"^{name} must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\)"):
            build()
