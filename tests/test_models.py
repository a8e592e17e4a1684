import json

import pytest
import torch

from perm_circuits import ModelConfig, TaskConfig, build_model, load_checkpoint, save_model
from perm_circuits.models import fast_forward, load_model
from perm_circuits.tasks.permutation_data import make_batch
from checkpoint_edit import edit_record
from perm_circuits.models import PRESETS, CheckpointError, model_config_of


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_shapes_and_eval_mode(name):
    model = build_model(name)
    config = PRESETS[name]
    assert not model.training
    assert model.cfg.d_model == config.d_model and model.cfg.n_heads == config.n_heads
    assert model.cfg.d_mlp == 2 * config.d_model and model.cfg.d_vocab == 6 and model.cfg.n_ctx == 9
    assert model.cfg.act_fn == "relu" and model.cfg.normalization_type == "LN"
    logits = model(make_batch(TaskConfig(), 3).tokens)
    assert logits.shape == (3, 9, 6)


def test_no_dropout_eval_equals_train_mode():
    model = build_model("d32h2")
    tokens = make_batch(TaskConfig(), 16).tokens
    eval_logits = model(tokens)
    model.train()
    assert torch.equal(model(tokens), eval_logits)


def test_seeded_init():
    a, b = build_model("d16h1", seed=3), build_model("d16h1", seed=3)
    c = build_model("d16h1", seed=4)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key])
    assert not torch.equal(a.state_dict()["blocks.0.attn.q.weight"], c.state_dict()["blocks.0.attn.q.weight"])


@pytest.mark.parametrize(
    "config",
    [
        PRESETS["d16h1"], PRESETS["d32h2"], ModelConfig(d_model=24, n_heads=3, n_layers=2),
        ModelConfig(d_model=16, n_heads=2, V=4), ModelConfig(d_model=12, n_heads=5, d_head=4),
    ],
)
def test_fast_forward_matches_bridge(config):
    model = build_model(config)
    with torch.no_grad():
        sd = model.state_dict()
        for key in sd:  # non-trivial LayerNorm/bias values so every term is exercised
            sd[key] += 0.05 * torch.randn(sd[key].shape, generator=torch.Generator().manual_seed(len(key)))
        model.load_state_dict(sd)
    tokens = make_batch(TaskConfig(V=config.V), 32).tokens
    torch.testing.assert_close(fast_forward(model, tokens), model(tokens), atol=2e-6, rtol=1e-5)


def test_save_load_round_trip_identical_logits(tmp_path):
    model = build_model("d32h2", seed=5)
    task = TaskConfig(repeat_ratio=0.3)
    save_model(model, tmp_path / "ck", task=task, metadata={"note": "x"})
    checkpoint = load_checkpoint(tmp_path / "ck")
    tokens = make_batch(task, 64).tokens
    assert torch.equal(checkpoint.model(tokens), model(tokens))
    assert checkpoint.task_config == task and checkpoint.metadata == {"note": "x"}
    assert model_config_of(checkpoint.model) == model_config_of(model)
    assert not checkpoint.model.training
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "model.safetensors"]


def test_corrupted_weights_rejected(tmp_path):
    save_model(build_model("d16h1"), tmp_path / "ck")
    weights = tmp_path / "ck" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_model(tmp_path / "ck")


def test_mismatched_config_rejected(tmp_path):
    save_model(build_model("d16h1"), tmp_path / "ck")
    config_path = tmp_path / "ck" / "config.json"
    document = json.loads(config_path.read_text())
    document["model"]["d_model"] = 32
    config_path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="model.d_model: saved 16, config.json has 32"):  # an edited config
        load_model(tmp_path / "ck")
    edit_record(tmp_path / "ck", lambda record: record["model"].update(d_model=32))  # a crafted record
    with pytest.raises(CheckpointError, match="shape"):
        load_model(tmp_path / "ck")
    edit_record(tmp_path / "ck", lambda record: record["model"].update(d_model="big"))
    with pytest.raises(CheckpointError, match="invalid model/task config"):
        load_model(tmp_path / "ck")
    config_path.write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_model(tmp_path / "ck")


def test_missing_checkpoint_and_unknown_names(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "nothing")
    with pytest.raises(ValueError, match="unknown preset"):
        build_model("d64h8")
    from perm_circuits import load_pretrained

    with pytest.raises(ValueError, match="unknown pretrained"):
        load_pretrained("gpt2")


def test_save_is_atomic_on_failure(tmp_path):
    model = build_model("d16h1")
    save_model(model, tmp_path / "ck")
    before = (tmp_path / "ck" / "config.json").read_text()
    with pytest.raises(TypeError):
        save_model(model, tmp_path / "ck", metadata={"bad": object()})
    assert (tmp_path / "ck" / "config.json").read_text() == before
    assert not [p for p in (tmp_path / "ck").iterdir() if p.name.endswith(".tmp")]
    load_model(tmp_path / "ck")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"d_model": 30, "n_heads": 4}, ValueError, "not divisible by n_heads=4"),
        ({"d_model": 0}, ValueError, "d_model must be > 0"),
        ({"n_heads": 1.5}, TypeError, "n_heads"),
        ({"V": 12}, ValueError, r"V must be in \[2, 8\]"),
        ({"act_fn": "tanh"}, ValueError, "act_fn must be"),
        ({"seed": 2**64}, ValueError, r"seed must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\), got 18446744073709551616"),
    ],
)
def test_bad_model_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        ModelConfig(**kwargs)


def test_incomplete_or_undecodable_config_rejected(tmp_path):
    save_model(build_model("d16h1"), tmp_path / "ck", task=TaskConfig(repeat_ratio=0.3))
    config_path = tmp_path / "ck" / "config.json"
    document = json.loads(config_path.read_text())
    config_path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_model(tmp_path / "ck")
    config_path.write_text(json.dumps(document))
    edit_record(tmp_path / "ck", lambda record: record.update(task={}))
    with pytest.raises(CheckpointError, match="missing"):
        load_model(tmp_path / "ck")
    # must be rejected from the file header, not by allocating
    edit_record(tmp_path / "ck", lambda record: record.update(task=document["task"], model={**document["model"], "d_model": 10**6}))
    with pytest.raises(CheckpointError, match=r"parameter count 8,000,034,000,000 is over the limit"):
        load_model(tmp_path / "ck")
    edit_record(tmp_path / "ck", lambda record: record.update(model={**document["model"], "d_model": 512}))
    with pytest.raises(CheckpointError, match="embed.weight has shape"):  # a model in bounds, of another shape
        load_model(tmp_path / "ck")


def test_saving_a_loaded_model_keeps_its_task(tmp_path):
    model = build_model("d16h1")
    save_model(model, tmp_path / "a", task=TaskConfig(repeat_ratio=0.3))
    again = load_model(tmp_path / "a")
    save_model(again, tmp_path / "b")
    assert load_checkpoint(tmp_path / "b").task_config.repeat_ratio == 0.3
    with pytest.raises(TypeError, match="metadata"):
        save_model(again, tmp_path / "c", metadata=[1, 2])


@pytest.mark.parametrize(
    "value, error, match",
    [
        # TypeErrors come from beartype under the test suite's import hook, else from __post_init__
        (True, TypeError, "dropout"),
        ("0.1", TypeError, "dropout"),
        (1.0, ValueError, "dropout must be in \\[0, 1\\), got 1.0"),
        (-0.1, ValueError, "dropout must be in \\[0, 1\\), got -0.1"),
        (float("nan"), ValueError, "dropout must be in \\[0, 1\\), got nan"),
    ],
)
def test_bad_dropout(value, error, match):
    with pytest.raises(error, match=match):
        ModelConfig(dropout=value)


def test_dropout_type_errors_without_beartype():
    config = ModelConfig()  # set the field behind the type-checked __init__, then validate
    for value, match in ((True, "got bool True"), ("0.1", "got str '0.1'")):
        object.__setattr__(config, "dropout", value)
        with pytest.raises(TypeError, match=r"dropout must be a number, " + match):
            ModelConfig.__post_init__(config)
    object.__setattr__(config, "dropout", 0)
    ModelConfig.__post_init__(config)
    assert config.dropout == 0.0 and isinstance(config.dropout, float)  # ints are normalised


def test_dropout_config_values():
    assert ModelConfig().dropout == 0.0 and ModelConfig(dropout=0.25).dropout == 0.25
    assert ModelConfig(dropout=0.1).to_dict()["dropout"] == 0.1
    with pytest.raises(ValueError, match="dropout > 0 needs normalization_type 'LN' or None"):
        ModelConfig(dropout=0.1, normalization_type="RMS")


def _perturbed(config):
    model = build_model(config)
    with torch.no_grad():
        for key, value in model.state_dict(keep_vars=True).items():
            value += 0.05 * torch.randn(value.shape, generator=torch.Generator().manual_seed(len(key)))
    return model


def test_dropout_only_in_train_mode():
    config = ModelConfig(d_model=16, n_heads=2, n_layers=2, dropout=0.3)
    model = _perturbed(config)
    tokens = make_batch(TaskConfig(), 32).tokens
    bridge = model(tokens)
    # eval mode: no dropout, fast_forward is the bridge, the generator is not consumed
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    torch.testing.assert_close(fast_forward(model, tokens, generator=generator), bridge, atol=2e-6, rtol=1e-5)
    assert torch.equal(generator.get_state(), before)
    model.train()
    with pytest.raises(ValueError, match="needs generator=torch.Generator"):
        fast_forward(model, tokens)
    global_state = torch.get_rng_state()
    a = fast_forward(model, tokens, generator=torch.Generator().manual_seed(7))
    b = fast_forward(model, tokens, generator=torch.Generator().manual_seed(7))
    c = fast_forward(model, tokens, generator=torch.Generator().manual_seed(8))
    assert torch.equal(torch.get_rng_state(), global_state)  # masks never come from the global RNG
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert (a - bridge).abs().max() > 0.05  # dropout 0.3 really changes the logits
    model.eval()
    torch.testing.assert_close(fast_forward(model, tokens), bridge, atol=2e-6, rtol=1e-5)


def test_dropout_train_path_is_explicit_attention_when_nothing_is_dropped():
    """With p -> 0 the explicit-attention path equals the bridge (checks its attention maths)."""
    model = _perturbed(ModelConfig(d_model=16, n_heads=2, n_layers=2, dropout=1e-12))
    tokens = make_batch(TaskConfig(), 32).tokens
    expected = model(tokens)
    model.train()
    torch.testing.assert_close(
        fast_forward(model, tokens, generator=torch.Generator().manual_seed(0)), expected, atol=2e-6, rtol=1e-5
    )


def test_checkpoint_keeps_dropout_and_old_checkpoints_load_as_zero(tmp_path):
    save_model(build_model(ModelConfig(d_model=16, n_heads=1, dropout=0.1)), tmp_path / "ck")
    assert load_checkpoint(tmp_path / "ck").model_config.dropout == 0.1
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["model"]["dropout"] == 0.1
    # a checkpoint written before the field existed: dropout reads as 0.0, nothing else is lenient
    edit_record(tmp_path / "ck", lambda record: record["model"].pop("dropout"))
    assert load_checkpoint(tmp_path / "ck").model_config.dropout == 0.0
    edit_record(tmp_path / "ck", lambda record: record["model"].pop("act_fn"))
    with pytest.raises(CheckpointError, match=r"fields missing: \['act_fn'\]"):
        load_checkpoint(tmp_path / "ck")


def test_shipped_pretrained_load_without_dropout_key():
    from perm_circuits.models import PRETRAINED_DIR, list_pretrained

    for name in ("d16h1", "d32h1", "d32h2"):  # written before the field existed (d16h1l2-any came later)
        assert "dropout" not in json.loads((PRETRAINED_DIR / name / "config.json").read_text())["model"]
    for name in list_pretrained():
        assert load_checkpoint(PRETRAINED_DIR / name).model_config.dropout == 0.0


def test_load_any_names_and_folders(tmp_path, monkeypatch):
    import perm_circuits
    from perm_circuits.models import load_any

    assert perm_circuits.load_any is load_any
    assert load_any("d16h1").metadata["seed"] == 0
    model = build_model("d16h1", seed=9)
    save_model(model, tmp_path / "d16h1")
    monkeypatch.chdir(tmp_path)  # a folder named like a shipped model wins over it
    for name in ("d16h1", tmp_path / "d16h1"):
        assert torch.equal(load_any(name).state_dict()["embed.weight"], model.state_dict()["embed.weight"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_any("empty")
    with pytest.raises(ValueError, match=r"'d64h8' is neither a pretrained model \['d16h1', 'd16h1l2-any', 'd32h1', 'd32h2'\] nor a checkpoint folder"):
        load_any("d64h8")
    with pytest.raises(TypeError, match="name"):
        load_any(3)


def test_save_model_refuses_a_task_of_another_v_before_writing(tmp_path):
    model = build_model("d16h1")  # V = 5
    with pytest.raises(ValueError, match="task has V=7 but the model has V=5"):
        save_model(model, tmp_path / "ck", task=TaskConfig(V=7))
    assert not (tmp_path / "ck").exists()  # nothing written that load_checkpoint would refuse
    save_model(model, tmp_path / "ok", task=TaskConfig(V=5, repeat_ratio=0.3))
    assert load_checkpoint(tmp_path / "ok").task_config.repeat_ratio == 0.3
