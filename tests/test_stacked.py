"""Stacked training: every member is its single run's twin, bit for bit on CPU."""

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, TrainConfig, build_model, train
from perm_circuits.models import fast_forward
from perm_circuits.tasks.permutation_data import make_batch
from perm_circuits.stacked import stack_weights, stacked_forward, train_stacked

TASK = TaskConfig(repeat_ratio=0.3)


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _with_seed(config: TrainConfig, seed: int) -> TrainConfig:
    return TrainConfig.from_dict({**config.to_dict(), "seed": seed})


def _twin(preset: str, seed: int, task: TaskConfig, recipe: TrainConfig, **model_fields):
    model = ModelConfig.from_dict({**_preset(preset).to_dict(), **model_fields, "seed": seed})
    return train(model, task, _with_seed(recipe, seed), progress=False)


def _preset(name: str) -> ModelConfig:
    from perm_circuits.models import PRESETS

    return PRESETS[name]


def _max_diff(a, b) -> float:
    wa, wb = _weights(a), _weights(b)
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


def test_first_50_steps_equal_single_runs_bit_for_bit_on_cpu():
    recipe = TrainConfig(epochs=1, samples_per_epoch=50 * 128, test_size=200)  # exactly 50 steps
    stacked = train_stacked([0, 1], TASK, recipe, architecture="d32h2", progress=False)
    for seed, member in enumerate(stacked):
        single = _twin("d32h2", seed, TASK, recipe)
        assert _max_diff(member.model, single.model) == 0.0  # bit for bit, not just within 1e-6
        assert member.history.rows == single.history.rows
        assert member.model_config.seed == seed and member.train_config.seed == seed
    # the members really are different models that moved away from their initialisation
    assert _max_diff(stacked[0].model, stacked[1].model) > 1e-3
    assert _max_diff(stacked[0].model, build_model(ModelConfig(seed=0))) > 1e-3


def test_two_epochs_histories_and_results_equal_train():
    recipe = TrainConfig(epochs=2, samples_per_epoch=2000, test_size=500)  # last batch of each epoch is short
    stacked = train_stacked([3, 4], TASK, recipe, architecture="d16h1", progress=False)
    for seed, member in zip((3, 4), stacked):
        single = _twin("d16h1", seed, TASK, recipe)
        assert len(member.history) == 2 and member.history.rows == single.history.rows
        assert member.evaluation == single.evaluation
        assert member.epochs_run == single.epochs_run == 2 and not member.stopped_early
        assert not member.model.training
    assert stacked[0].history.rows[-1]["test_loss"] != stacked[1].history.rows[-1]["test_loss"]
    assert all(m.history.rows[1]["train_loss"] < m.history.rows[0]["train_loss"] for m in stacked)


def test_members_with_configs_share_the_recipe_data_stream():
    recipe = TrainConfig(epochs=1, samples_per_epoch=1280, test_size=200, seed=7)
    members = [ModelConfig(d_model=16, n_heads=1, seed=s) for s in (0, 1)]
    stacked = train_stacked(members, TASK, recipe, progress=False)
    for config, member in zip(members, stacked):
        single = train(config, TASK, recipe, progress=False)  # the data seed is the recipe's, 7
        assert _max_diff(member.model, single.model) == 0.0
        assert member.train_config.seed == 7


def test_dropout_members_equal_their_single_runs():
    recipe = TrainConfig(epochs=1, samples_per_epoch=1024, test_size=200)
    stacked = train_stacked([0, 1], TASK, recipe, architecture=ModelConfig(d_model=12, n_heads=2, dropout=0.1),
                            progress=False)
    for seed, member in enumerate(stacked):
        single = train(ModelConfig(d_model=12, n_heads=2, dropout=0.1, seed=seed), TASK, _with_seed(recipe, seed),
                       progress=False)
        assert _max_diff(member.model, single.model) == 0.0
        assert member.history.rows == single.history.rows
    plain = train(ModelConfig(d_model=12, n_heads=2, seed=0), TASK, recipe, progress=False)
    assert _max_diff(stacked[0].model, plain.model) > 1e-4  # dropout did act


def test_a_member_that_stops_early_is_untouched_by_the_others_later_steps():
    task = TaskConfig()  # no repeats: stopping depends on elimination accuracy and the loss only
    base = TrainConfig(epochs=2, samples_per_epoch=1024, test_size=300)
    reference = [_twin("d16h1", seed, task, base) for seed in (0, 1)]
    accuracy = [r.history.rows[-1]["elimination_accuracy"] for r in reference]
    assert accuracy[0] != accuracy[1]
    # patience 1 with a huge min_delta: a member stops at epoch 2 iff its accuracy reaches the threshold
    threshold = sum(accuracy) / 2
    recipe = TrainConfig(epochs=4, samples_per_epoch=1024, test_size=300, early_stop_patience=1,
                         early_stop_accuracy=threshold, early_stop_min_delta=10.0)
    stacked = train_stacked([0, 1], task, recipe, architecture="d16h1", progress=False)
    stops = max((0, 1), key=lambda i: accuracy[i])
    goes_on = 1 - stops
    assert stacked[stops].stopped_early and stacked[stops].epochs_run == 2 and len(stacked[stops].history) == 2
    assert not stacked[goes_on].stopped_early and stacked[goes_on].epochs_run == 4
    # its final weights are its weights at its stop (= two epochs without early stopping), bit for bit
    assert _max_diff(stacked[stops].model, reference[stops].model) == 0.0
    for seed, member in enumerate(stacked):
        single = _twin("d16h1", seed, task, recipe)
        assert (single.epochs_run, single.stopped_early) == (member.epochs_run, member.stopped_early)
        assert _max_diff(member.model, single.model) == 0.0
        assert member.history.rows == single.history.rows


def test_one_member():
    recipe = TrainConfig(epochs=1, samples_per_epoch=640, test_size=200)
    (member,) = train_stacked([5], TASK, recipe, architecture="d16h1", progress=False)
    assert _max_diff(member.model, _twin("d16h1", 5, TASK, recipe).model) == 0.0


def test_inexact_mode_stays_within_float_tolerance():
    recipe = TrainConfig(epochs=1, samples_per_epoch=20 * 128, test_size=200)
    fast = train_stacked([0, 1], TASK, recipe, architecture="d16h1", exact=False, progress=False)
    tokens = make_batch(TASK, 256, seed=9).tokens
    for seed, member in enumerate(fast):
        single = _twin("d16h1", seed, TASK, recipe).model
        a, b = _weights(member.model), _weights(single)
        differences = {k: (a[k] - b[k]).abs().max().item() for k in a}
        assert 0 < max(differences.values())  # not bit for bit: LayerNorm is batched over members
        # the key bias has no effect (softmax ignores a per-query constant): its gradient is rounding
        # noise, which Adam scales up to lr-sized steps, so it alone may drift
        assert max(v for k, v in differences.items() if not k.endswith("attn.k.bias")) < 1e-6
        with torch.no_grad():
            assert (fast_forward(member.model, tokens) - fast_forward(single, tokens)).abs().max() < 1e-5


def test_stacked_forward_equals_fast_forward_per_member():
    models = [build_model("d32h2", seed=s) for s in (0, 1, 2)]
    tokens = torch.stack([make_batch(TASK, 64, seed=s).tokens for s in (0, 1, 2)])
    logits = stacked_forward(models[0].perm_config, stack_weights(models), tokens)
    assert logits.shape == (3, 64, 9, 6)
    for i, model in enumerate(models):
        assert torch.equal(logits[i], fast_forward(model, tokens[i]))



def test_stacked_forward_adds_the_unembedding_bias_once():
    """The hand-built model's unembedding bias is -10 on token 0: stacked logits equal the bridge's."""
    from perm_circuits.handbuilt import build_induction_model

    model = build_induction_model()
    tokens = make_batch(TaskConfig(repeat_ratio=0.5), 16, seed=0).tokens
    logits = stacked_forward(model.perm_config, stack_weights([model, model]), torch.stack([tokens, tokens]))
    assert model.state_dict()["unembed.bias"][0] == -10.0
    for member in logits:
        assert torch.allclose(member, model(tokens), atol=1e-5)

def test_explicit_cpu_device_puts_everything_there():
    recipe = TrainConfig(epochs=1, samples_per_epoch=256, test_size=100)
    device = torch.device("cpu")
    results = train_stacked([0, 1], TASK, recipe, architecture="d16h1", device=device, progress=False)
    tensors = [t for r in results for t in (*r.model.parameters(), *r.model.buffers())]
    assert tensors and all(t.device == device for t in tensors)
    default = train_stacked([0, 1], TASK, recipe, architecture="d16h1", progress=False)
    assert all(_max_diff(a.model, b.model) == 0.0 for a, b in zip(results, default))
    weights = stack_weights([r.model for r in results], device)
    assert all(t.device == device and t.shape[0] == 2 for t in weights.values())


SMALL = TrainConfig(epochs=1, samples_per_epoch=128, test_size=100)


@pytest.mark.parametrize(
    "members, kwargs, error, match",
    [
        ([], {}, ValueError, "at least one member"),
        ("d16h1", {}, TypeError, "list of ModelConfigs"),
        ([ModelConfig(d_model=16, n_heads=1), ModelConfig(d_model=32, n_heads=1)], {}, ValueError, r"architecture.*d_model"),
        ([ModelConfig(seed=0), ModelConfig(seed=1, dropout=0.1)], {}, ValueError, "dropout"),
        ([0, 1], {"train_config": [SMALL, TrainConfig(epochs=1, samples_per_epoch=128, test_size=100, lr=1e-2)]},
         ValueError, r"recipe.*lr"),
        ([0, 1], {"train_config": [SMALL]}, ValueError, "one per member"),
        ([0, 1], {"task": TaskConfig(V=4)}, ValueError, "does not match"),
        ([0], {"train_config": TrainConfig(checkpoint_every=1, checkpoint_dir="x")}, ValueError, "checkpoint"),
        ([0, 1.5], {}, TypeError, "member 1"),
        ([True], {}, TypeError, "bool"),
        ([ModelConfig(normalization_type="RMS")], {}, ValueError, "normalization_type"),
        ([0], {"exact": "yes"}, TypeError, "exact"),
    ],
)
def test_bad_input_is_refused_before_training(members, kwargs, error, match):
    kwargs = {"task": TASK, "train_config": SMALL, **kwargs}
    with pytest.raises(error, match=match):
        train_stacked(members, progress=False, **kwargs)


def test_tanh_gelu_members_with_an_mlp_width_off_the_simd_width_equal_their_single_runs():
    # gelu_new's vectorised tanh on the stacked (member, batch, seq, d_mlp) tensor rounded elements at a
    # member's edge unlike the single run's tensor (d_mlp = 5: members not aligned to the float vector)
    architecture = ModelConfig(d_model=8, n_heads=1, n_layers=2, d_mlp=5, act_fn="gelu_new")
    recipe = TrainConfig(epochs=1, samples_per_epoch=200, test_size=40, batch_size=64)
    stacked = train_stacked([3, 7], TASK, recipe, architecture=architecture, progress=False)
    for seed, member in zip([3, 7], stacked):
        single = train(ModelConfig.from_dict({**architecture.to_dict(), "seed": seed}), TASK, _with_seed(recipe, seed),
                       progress=False)
        assert _max_diff(member.model, single.model) == 0.0
        assert member.history.rows == single.history.rows
