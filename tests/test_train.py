import inspect

import pytest
import torch

from perm_circuits import TaskConfig, TrainConfig, train
from perm_circuits.train import masked_loss

SMALL = TrainConfig(epochs=2, samples_per_epoch=2048, batch_size=128, test_size=500)


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_masked_loss_only_counts_y_positions():
    logits = torch.zeros(2, 9, 6)
    logits[:, 1::2, 0] = 100.0  # garbage at x positions must not matter
    targets = torch.ones(2, 9, dtype=torch.long)
    mask = torch.zeros(2, 9)
    mask[:, 0::2] = 1
    assert masked_loss(logits, targets, mask).item() == pytest.approx(torch.log(torch.tensor(6.0)).item())


def test_same_seed_bit_identical_weights_and_history():
    a = train("d16h1", TaskConfig(repeat_ratio=0.3), SMALL, progress=False)
    b = train("d16h1", TaskConfig(repeat_ratio=0.3), SMALL, progress=False)
    wa, wb = _weights(a.model), _weights(b.model)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a.history.rows == b.history.rows
    c = train("d16h1", TaskConfig(repeat_ratio=0.3), TrainConfig(**{**SMALL.to_dict(), "seed": 1}), progress=False)
    assert not torch.equal(wa["blocks.0.attn.q.weight"], c.model.state_dict()["blocks.0.attn.q.weight"])


@pytest.mark.slow
def test_learns_elimination_quickly():
    result = train("d32h2", TaskConfig(), TrainConfig(epochs=4, samples_per_epoch=25_600, test_size=1000), progress=False)
    assert result.history.to_dataframe()["test_loss"].iloc[-1] < 1.0  # ln5 = 1.609 at chance
    assert result.evaluation.metrics["elimination_accuracy"] > 0.95
    assert not result.model.training


def test_resume_equals_uninterrupted(tmp_path):
    config = TrainConfig(**{**SMALL.to_dict(), "epochs": 3, "checkpoint_every": 1, "checkpoint_dir": str(tmp_path)})
    full = train("d16h1", TaskConfig(repeat_ratio=0.3), config, progress=False)
    resumed = train(resume_from=tmp_path / "epoch_0001", progress=False)
    wf, wr = _weights(full.model), _weights(resumed.model)
    assert all(torch.equal(wf[k], wr[k]) for k in wf)
    assert resumed.history.rows == full.history.rows and resumed.epochs_run == 3


def test_callbacks_see_every_epoch_and_can_stop():
    seen = []

    def callback(state):
        seen.append((state.epoch, state.evaluation.test_loss))
        return state.epoch == 2

    result = train("d16h1", TaskConfig(), TrainConfig(**{**SMALL.to_dict(), "epochs": 5}), callbacks=[callback], progress=False)
    assert [e for e, _ in seen] == [1, 2] and result.epochs_run == 2 and result.stopped_early


def test_early_stop_needs_convergence():
    config = TrainConfig(**{**SMALL.to_dict(), "epochs": 3, "early_stop_patience": 1, "early_stop_accuracy": 0.0, "early_stop_min_delta": 10.0})
    result = train("d16h1", TaskConfig(), config, progress=False)
    assert result.stopped_early and result.epochs_run == 2
    strict = TrainConfig(**{**config.to_dict(), "early_stop_accuracy": 1.01})
    assert train("d16h1", TaskConfig(), strict, progress=False).epochs_run == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epochs": 0}, "epochs must be > 0"),
        ({"batch_size": -1}, "batch_size must be > 0"),
        ({"lr": 0.0}, r"lr must be in \(0, 1\)"),
        ({"checkpoint_every": 2}, "checkpoint_every needs checkpoint_dir"),
        ({"seed": 2**64}, r"seed must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\), got 18446744073709551616"),
        ({"test_seed": -(2**63) - 1}, r"test_seed must be in \[-2\*\*63, 2\*\*64\)"),
        ({"early_stop_accuracy": float("nan")}, "early_stop_accuracy must be a number, got nan"),
    ],
)
def test_bad_train_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_wrong_type_in_train_config():
    with pytest.raises(TypeError, match="samples_per_epoch"):
        TrainConfig(samples_per_epoch=1.5)
    raw = inspect.unwrap(TrainConfig.__init__)  # as a user calls it, without the suite's runtime type checker
    with pytest.raises(TypeError, match="seed must be an int, got float 1.5"):
        raw(object.__new__(TrainConfig), seed=1.5)


def test_mismatched_task_and_model():
    with pytest.raises(ValueError, match="does not match"):
        train("d16h1", TaskConfig(V=4), SMALL, progress=False)


def test_resume_may_extend_epochs_but_not_change_the_recipe(tmp_path):
    config = TrainConfig(**{**SMALL.to_dict(), "epochs": 1, "checkpoint_every": 1, "checkpoint_dir": str(tmp_path)})
    train("d16h1", TaskConfig(repeat_ratio=0.3), config, progress=False)
    longer = train(resume_from=tmp_path / "epoch_0001", recipe=TrainConfig(**{**config.to_dict(), "epochs": 2}), progress=False)
    assert longer.epochs_run == 2 and len(longer.history) == 2
    with pytest.raises(ValueError, match="samples_per_epoch"):
        train(resume_from=tmp_path / "epoch_0001", recipe=TrainConfig(**{**config.to_dict(), "samples_per_epoch": 4096}), progress=False)


def test_resume_rejects_checkpoints_without_optimizer_state(tmp_path):
    from perm_circuits import build_model, save_model
    from perm_circuits.models import CheckpointError

    model = build_model("d16h1")
    save_model(model, tmp_path / "plain", metadata={"epoch": 1, "train_config": SMALL.to_dict(), "history": []})
    with pytest.raises(CheckpointError, match="generator"):
        train(resume_from=tmp_path / "plain", progress=False)
    save_model(build_model("d16h1"), tmp_path / "final")
    with pytest.raises(CheckpointError, match=r"not a resumable.*checkpoint_every writes .*OUT/checkpoints/epoch_NNNN"):
        train(resume_from=tmp_path / "final", progress=False)


def test_callbacks_must_be_callable():
    with pytest.raises(TypeError, match="callbacks"):
        train("d16h1", TaskConfig(), SMALL, callbacks=[42], progress=False)


DROP = TrainConfig(epochs=2, samples_per_epoch=1024, batch_size=128, test_size=300)


def test_dropout_changes_training_not_evaluation():
    from perm_circuits import ModelConfig, evaluate, make_test_set
    from perm_circuits.models import build_model

    task = TaskConfig(repeat_ratio=0.3)
    plain = train(ModelConfig(d_model=16, n_heads=1), task, DROP, progress=False)
    dropped = train(ModelConfig(d_model=16, n_heads=1, dropout=0.1), task, DROP, progress=False)
    again = train(ModelConfig(d_model=16, n_heads=1, dropout=0.1), task, DROP, progress=False)
    wp, wd, wa = _weights(plain.model), _weights(dropped.model), _weights(again.model)
    assert all(torch.equal(wd[k], wa[k]) for k in wd)  # same seed, dropout on: bit-identical
    assert dropped.history.rows == again.history.rows
    assert (wp["blocks.0.attn.q.weight"] - wd["blocks.0.attn.q.weight"]).abs().max() > 1e-4
    assert dropped.model_config.dropout == 0.1 and not dropped.model.training
    # evaluation of the same weights does not depend on the config's dropout
    test_set = make_test_set(task, n=300, seed=1234)
    twin = build_model(ModelConfig(d_model=16, n_heads=1))
    twin.load_state_dict(dropped.model.state_dict())
    assert evaluate(twin, test_set).summary() == evaluate(dropped.model, test_set).summary()
    assert dropped.history.rows[-1]["test_loss"] == pytest.approx(evaluate(twin, test_set).test_loss, abs=1e-6)


def test_dropout_seed_is_stable_and_distinct():
    from perm_circuits.train import dropout_seed

    assert dropout_seed(0) == dropout_seed(0) != dropout_seed(1)
    assert 0 <= dropout_seed(0) < 2**63 and dropout_seed(0) not in (0, 1)


def test_resume_with_dropout_equals_uninterrupted(tmp_path):
    from perm_circuits import ModelConfig

    config = TrainConfig(**{**DROP.to_dict(), "epochs": 3, "checkpoint_every": 1, "checkpoint_dir": str(tmp_path)})
    model_config = ModelConfig(d_model=16, n_heads=1, dropout=0.2)
    full = train(model_config, TaskConfig(repeat_ratio=0.3), config, progress=False)
    resumed = train(resume_from=tmp_path / "epoch_0001", progress=False)
    wf, wr = _weights(full.model), _weights(resumed.model)
    assert all(torch.equal(wf[k], wr[k]) for k in wf)
    assert resumed.history.rows == full.history.rows and resumed.model_config.dropout == 0.2


def test_resume_with_dropout_needs_the_dropout_generator_state(tmp_path):
    from perm_circuits import ModelConfig, build_model
    from perm_circuits.models import CheckpointError
    from perm_circuits.train import TrainingHistory, _optimizer, save_training_checkpoint

    task = TaskConfig(repeat_ratio=0.3)
    for dropout, name in ((0.1, "with"), (0.0, "plain")):
        model = build_model(ModelConfig(d_model=16, n_heads=1, dropout=dropout))
        save_training_checkpoint(  # no dropout_generator: as written before dropout existed
            tmp_path / name, model, _optimizer(model, 1e-3), torch.Generator().manual_seed(0), task, DROP,
            TrainingHistory(), 0,
        )
    with pytest.raises(CheckpointError, match=r"has dropout=0.1 but no extra.dropout_generator state"):
        train(resume_from=tmp_path / "with", progress=False)
    # dropout 0 never draws a mask: such an old checkpoint still resumes (optimizer state is checked next)
    with pytest.raises(CheckpointError, match="optimizer state"):
        train(resume_from=tmp_path / "plain", progress=False)


def test_resume_validates_the_checkpoint_epoch_history_and_conflicting_arguments(tmp_path):
    import shutil

    from checkpoint_edit import edit_record

    from perm_circuits.models import CheckpointError

    config = TrainConfig(**{**SMALL.to_dict(), "epochs": 1, "checkpoint_every": 1, "checkpoint_dir": str(tmp_path / "ck")})
    train("d16h1", TaskConfig(repeat_ratio=0.3), config, progress=False)

    def tampered(name, **changes):
        folder = tmp_path / name
        shutil.copytree(tmp_path / "ck" / "epoch_0001", folder)
        return edit_record(folder, lambda record: record["metadata"].update(changes))

    for epoch in ("1", 1.5, -1, 99, True):  # each silently resumed (int("1"), int(1.5), from epoch -1 or past the end)
        with pytest.raises(CheckpointError, match=rf"has metadata epoch {epoch!r}: expected an int in \[0, 1\]"):
            train(resume_from=tampered(f"epoch_{epoch}", epoch=epoch), progress=False)
    with pytest.raises(CheckpointError, match="invalid metadata history: expected a list of per-epoch dicts"):
        train(resume_from=tampered("history", history="x"), progress=False)
    with pytest.raises(ValueError, match=r"trains task .* not the task passed .*repeat_ratio=0.5"):
        train(task=TaskConfig(repeat_ratio=0.5), resume_from=tmp_path / "ck" / "epoch_0001", progress=False)
    from perm_circuits import ModelConfig

    with pytest.raises(ValueError, match=r"trains model .* not the model passed"):
        train(ModelConfig(d_model=32, n_heads=1), resume_from=tmp_path / "ck" / "epoch_0001", progress=False)
