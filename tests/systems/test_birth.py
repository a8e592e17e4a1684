"""Birth of a Transformer (Bietti et al. 2023): the bigram-with-triggers task, the simplified model,
its eq. 9 memory-recall probes and a reduced training that checks the claims' direction."""

from __future__ import annotations

import math

import pytest
import torch

from perm_circuits.analysis.probes.memory import identity_map, memory_recall
from perm_circuits.hooks import hook_count, run_capture
from perm_circuits.systems.birth_model import (
    BirthModelConfig,
    FullModelConfig,
    build_birth_model,
    build_full_model,
    frozen_keys,
    handbuilt_induction_model,
    plain_forward,
    trainable_keys,
)
from perm_circuits.systems.birth_probes import (
    BirthProbeTracker,
    birth_probes,
    half_crossing,
    wk1_recall,
    wk2_recall,
    wo2_recall,
)
from perm_circuits.tasks import fit, log_spaced_steps, task_from_dict
from perm_circuits.tasks.bigram import BigramTriggerTask, zipf_bigram_table

# ----------------------------------------------------------------------------- the task


@pytest.fixture(scope="module")
def small_batch():
    task = BigramTriggerTask(N=6, T=30, K=2)
    return task, task.sample(200, torch.Generator().manual_seed(3))


def test_outputs_follow_their_triggers(small_batch):
    task, batch = small_batch
    for row in range(len(batch)):
        triggers, outputs = batch.extras["triggers"][row].tolist(), batch.extras["outputs"][row].tolist()
        assert len(set(triggers)) == task.K
        for t, token in enumerate(batch.tokens[row].tolist()):
            if token in triggers:
                assert batch.targets[row, t] == outputs[triggers.index(token)]


def test_mask_is_exactly_the_second_and_later_trigger_occurrences(small_batch):
    _, batch = small_batch
    expected = torch.zeros_like(batch.mask)
    for row in range(len(batch)):
        triggers = batch.extras["triggers"][row].tolist()
        seen: dict[int, int] = {}
        for t, token in enumerate(batch.tokens[row].tolist()):
            if token in triggers:
                seen[token] = seen.get(token, 0) + 1
                expected[row, t] = float(seen[token] >= 2)
    assert torch.equal(batch.mask, expected)
    assert batch.mask.sum() > 100  # the case is not vacuous
    assert torch.equal(batch.targets[:, :-1], batch.tokens[:, 1:])


def test_non_trigger_transitions_follow_the_bigram_table():
    task = BigramTriggerTask(N=5, T=40, K=1)
    batch = task.sample(1500, torch.Generator().manual_seed(0))
    free = batch.extras["occurrence"] == 0
    counts = torch.zeros(5, 5)
    counts.index_put_((batch.tokens[free], batch.targets[free]), torch.ones(int(free.sum())), accumulate=True)
    empirical = counts / counts.sum(1, keepdim=True)
    assert (empirical - task.bigram).abs().max() < 0.03
    assert torch.allclose(task.unigram @ task.bigram, task.unigram, atol=1e-5)  # stationary
    u = BigramTriggerTask(N=65).unigram  # Zipf-shaped: the first tokens are much more frequent
    assert u[:8].mean() > 10 * u[-8:].mean() and abs(float(u.sum()) - 1) < 1e-5


def test_same_generator_same_batch_and_loss_on_all():
    task = BigramTriggerTask(N=8, T=16, K=2, loss_on="all")
    a, b = (task.sample(4, torch.Generator().manual_seed(9)) for _ in range(2))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, torch.ones(4, 16))
    assert task_from_dict(task.to_dict()) == task
    assert torch.equal(zipf_bigram_table(8, 1.0, 0), task.bigram)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"K": 0}, "K must be in"), ({"N": 1}, "N must be"), ({"loss_on": "x"}, "loss_on must be"),
     ({"zipf_exponent": -1.0}, "zipf_exponent")],
)
def test_task_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BigramTriggerTask(**kwargs)


# ----------------------------------------------------------------------------- the models


def test_frozen_set_is_declared_and_stays_frozen_after_fit():
    config = BirthModelConfig(N=8, T=8, d_model=8, seed=1)
    model = build_birth_model(config)
    assert trainable_keys(model) == ("blocks.0.attn.k.weight", "blocks.1.attn.k.weight", "blocks.1.attn.o.weight")
    assert set(frozen_keys(config)) | set(trainable_keys(model)) == {
        k for k, v in model.state_dict(keep_vars=True).items() if isinstance(v, torch.nn.Parameter)
    }
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, BigramTriggerTask(N=8, T=8, K=2), steps=3, batch_size=8, lr=0.5, optimizer="sgd",
        forward=plain_forward, progress=False)
    after = model.state_dict()
    for key in frozen_keys(config):
        assert torch.equal(before[key], after[key]), key
    for key in trainable_keys(model):
        assert not torch.equal(before[key], after[key]), key
    for layer in (0, 1):
        assert torch.equal(model.W_Q[layer, 0], torch.eye(8))


def test_same_seed_same_weights():
    def train():
        model = build_birth_model(BirthModelConfig(N=8, T=8, d_model=8, seed=2))
        fit(model, BigramTriggerTask(N=8, T=8, K=2), steps=2, batch_size=4, lr=0.5, optimizer="sgd",
            momentum=0.9, seed=5, forward=plain_forward, progress=False)
        return model.state_dict()

    first, second = train(), train()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_settings_validation():
    from perm_circuits.systems.birth import BirthSettings

    with pytest.raises(ValueError, match="BirthSettings.steps must be >= 1, got 0"):
        BirthSettings(steps=0)
    with pytest.raises(ValueError, match="BirthSettings.seeds must be a non-empty tuple"):
        BirthSettings(seeds=())


def test_model_config_validation():
    with pytest.raises(ValueError, match="unknown frozen entry 'W_Z'"):
        BirthModelConfig(frozen=("W_Z",))
    with pytest.raises(ValueError, match="unknown frozen entry 'W_O.2'"):
        BirthModelConfig(frozen=("W_O.2",))
    with pytest.raises(TypeError, match="config must be a BirthModelConfig"):
        build_birth_model(FullModelConfig())


@pytest.mark.parametrize("full", [False, True])
def test_plain_forward_equals_the_bridge(full):
    tokens = BigramTriggerTask(N=8, T=12, K=2).sample(3, torch.Generator().manual_seed(0)).tokens
    model = (build_full_model(FullModelConfig(N=8, T=12, d_model=16, n_layers=2)) if full
             else build_birth_model(BirthModelConfig(N=8, T=12, d_model=16)))
    with torch.no_grad():
        assert torch.allclose(plain_forward(model, tokens), model(tokens), atol=1e-5)


# ----------------------------------------------------------------------------- the probes


@pytest.fixture(scope="module")
def handbuilt():
    return handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))


def test_probes_of_the_eq8_memories_are_one(handbuilt):
    probes = birth_probes(handbuilt)
    for name in ("W_O2", "W_K2", "W_K1", "W_K1_window", "W_K1_early", "W_K1_late"):
        assert getattr(probes, name) == 1.0, name


def test_probes_of_random_matrices_are_near_chance():
    model = build_birth_model(BirthModelConfig(N=64, T=64, d_model=32, seed=0))
    generator = torch.Generator().manual_seed(0)
    inputs, outputs = torch.randn(64, 32, generator=generator), torch.randn(64, 32, generator=generator)
    mean = sum(memory_recall(torch.randn(32, 32, generator=generator), inputs, outputs, identity_map(64))
               for _ in range(30)) / 30
    assert 0.5 / 64 < mean < 2.0 / 64
    # the untrained model's (random) W_O2 and W_K2 are near chance, too
    assert wo2_recall(model) < 0.1 and wk2_recall(model) < 0.1


def test_wk1_window_and_halves(handbuilt):
    """A W_K1 that stores only the first half of the positions: early = 1, late near chance."""
    model = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    w = model.state_dict(keep_vars=True)
    P = w["pos_embed.weight"]
    dual = P / P.pow(2).sum(-1, keepdim=True)
    with torch.no_grad():
        w["blocks.0.attn.k.weight"].copy_(dual[1:16].T @ dual[:15])
    assert wk1_recall(model, queries=(1, 16)) == 1.0
    assert wk1_recall(model, queries=(16, 32)) <= 2 / 16
    assert wk1_recall(model, window=16) == 1.0
    with pytest.raises(ValueError, match="window must be an int in"):
        wk1_recall(model, window=1)


def test_half_crossing():
    assert half_crossing([0, 1, 2, 4], [0.0, 0.2, 0.6, 0.8]) == 2
    assert math.isnan(half_crossing([0, 1], [0.0, 0.0]))


# ----------------------------------------------------------------------------- analyses on the model


def test_handbuilt_induction_head_solves_the_task_and_ablation_breaks_it(handbuilt):
    """The eq. 8 construction reaches high in-context accuracy; zero-ablating the layer-2 head
    (``blocks.1.attn.hook_z``, through the package's hook runner) drops it to near chance."""
    task = BigramTriggerTask(N=16, T=32, K=3)
    batch = task.test_set(128)

    def zero(z, hook):
        return torch.zeros_like(z)

    clean, cache = run_capture(handbuilt, batch.tokens, ["blocks.0.attn.hook_pattern"])
    ablated, _ = run_capture(handbuilt, batch.tokens, [], hooks=[("blocks.1.attn.hook_z", zero)])
    assert hook_count(handbuilt) == 0
    assert task.metrics(clean, batch)["in_context_acc"] > 0.9
    assert task.metrics(ablated, batch)["in_context_acc"] < 0.25
    # layer 1 is a previous-token head
    assert cache["blocks.0.attn.hook_pattern"][:, 0].diagonal(offset=-1, dim1=1, dim2=2).mean() > 0.95


# ----------------------------------------------------------------------------- reduced training


TINY = BigramTriggerTask(N=16, T=32, K=3)


@pytest.mark.slow
def test_reduced_training_w_o2_rises_before_w_k1():
    """Direction of the learning-order claim on a tiny simplified model (seed 0, probes every step)."""
    model = build_birth_model(BirthModelConfig(N=16, T=32, d_model=32, seed=0))
    tracker = BirthProbeTracker(range(1, 151))
    tracker.record(model, 0)
    fit(model, TINY, steps=150, batch_size=32, lr=0.3, optimizer="sgd", momentum=0.9, weight_decay=1e-4,
        forward=plain_forward, callbacks=[tracker], progress=False)
    table = tracker.to_dataframe()
    rise = {name: half_crossing(table["step"], table[name]) for name in ("W_O2", "W_K1")}
    assert rise["W_O2"] < rise["W_K1"]
    assert table["W_O2"].iloc[-1] > 0.9 and table["W_K1"].iloc[-1] > 0.3


@pytest.mark.slow
def test_reduced_training_two_layers_beat_one():
    """Direction of the accuracy claim: a 2-layer transformer learns the in-context rule, 1 layer does not."""
    batch = TINY.test_set(128)
    accuracy = {}
    for n_layers in (1, 2):
        model = build_full_model(FullModelConfig(N=16, T=32, d_model=32, n_layers=n_layers, seed=0))
        fit(model, TINY, steps=250, batch_size=32, lr=3e-3, forward=plain_forward, progress=False)
        with torch.no_grad():
            accuracy[n_layers] = TINY.metrics(plain_forward(model, batch.tokens), batch)["in_context_acc"]
    assert accuracy[2] > 0.9 and accuracy[1] < 0.8


def test_tracker_records_at_the_given_steps():
    task = BigramTriggerTask(N=8, T=8, K=2)
    model = build_birth_model(BirthModelConfig(N=8, T=8, d_model=8))
    tracker = BirthProbeTracker(log_spaced_steps(5, 3), eval_batch=task.test_set(16), forward=plain_forward)
    result = fit(model, task, steps=5, batch_size=4, lr=0.1, optimizer="sgd", forward=plain_forward,
                 callbacks=[tracker], progress=False)
    assert [r.step for r in result.records] == list(log_spaced_steps(5, 3))
    assert list(tracker.to_dataframe()["step"]) == list(log_spaced_steps(5, 3))
    with pytest.raises(ValueError, match="steps must be a non-empty"):
        BirthProbeTracker([])
