import json
import inspect
import math

import pytest
import torch

from perm_circuits import TaskConfig, make_test_set, probe_sequence
from perm_circuits.tasks.permutation_data import make_batch, make_sequence, split_permutations
from perm_circuits.tasks.permutation_data import ADDED_FIELDS, all_permutations, repeat_source_of, validate_tokens, y_positions


def test_split_sizes_and_disjoint():
    train, test = split_permutations(TaskConfig())
    assert train.shape == (96, 5) and test.shape == (24, 5)
    as_set = lambda t: {tuple(r) for r in t.tolist()}  # noqa: E731
    assert not as_set(train) & as_set(test)
    assert as_set(train) | as_set(test) == as_set(all_permutations(5))


def test_split_is_fixed_by_seed():
    a, _ = split_permutations(TaskConfig(split_seed=3))
    b, _ = split_permutations(TaskConfig(split_seed=3))
    c, _ = split_permutations(TaskConfig(split_seed=4))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("V", [2, 3, 5, 6])
def test_every_sample_is_a_valid_permutation_sequence(V):
    config = TaskConfig(V=V)
    batch = make_batch(config, 2000, seed=1)
    seq = torch.cat([batch.tokens, batch.targets[:, -1:]], dim=1)
    xs, ys = seq[:, 0::2], seq[:, 1::2]
    assert torch.equal(xs.sort(1).values, torch.arange(1, V + 1).expand_as(xs))
    assert torch.equal(ys.sort(1).values, torch.arange(1, V + 1).expand_as(ys))
    assert torch.equal(ys, batch.extras["perms"].gather(1, xs - 1))
    assert torch.equal(batch.targets[:, :-1], batch.tokens[:, 1:])
    train = {tuple(r) for r in split_permutations(config)[0].tolist()}
    assert {tuple(r) for r in batch.extras["perms"].tolist()} <= train


def test_test_split_batches_use_test_permutations():
    config = TaskConfig()
    test = {tuple(r) for r in split_permutations(config)[1].tolist()}
    batch = make_test_set(config, n=500)
    assert {tuple(r) for r in batch.extras["perms"].tolist()} <= test
    assert len(make_test_set(config)) == 5000


def test_repeat_ratio_within_two_percent():
    batch = make_batch(TaskConfig(repeat_ratio=0.3), 10_000, seed=7)
    assert abs(batch.extras["repeated"].float().mean().item() - 0.3) < 0.02
    rep = batch.subset(batch.extras["repeated"])
    assert torch.equal(rep.extras["xs"][:, -1], rep.extras["xs"][:, 0]) and torch.equal(rep.extras["ys"][:, -1], rep.extras["ys"][:, 0])
    assert torch.equal(rep.targets[:, -1], rep.extras["ys"][:, 0])
    assert (rep.extras["repeat_source"] == 0).all() and (batch.extras["repeat_source"][~batch.extras["repeated"]] == -1).all()


def test_repeat_source_other_queries():
    batch = make_batch(TaskConfig(), 1000, repeat_ratio=1.0, repeat_source=2, seed=3)
    assert torch.equal(batch.extras["xs"][:, -1], batch.extras["xs"][:, 2]) and torch.equal(batch.targets[:, -1], batch.extras["ys"][:, 2])
    mixed = make_batch(TaskConfig(), 4000, repeat_ratio=1.0, repeat_source=None, seed=3)
    assert set(mixed.extras["repeat_source"].tolist()) == {0, 1, 2, 3}


def test_mask_positions():
    batch = make_batch(TaskConfig(), 4)
    assert y_positions(5) == [0, 2, 4, 6, 8]
    assert batch.mask[0].tolist() == [1, 0, 1, 0, 1, 0, 1, 0, 1]
    assert batch.tokens.shape == (4, 9) and batch.tokens.dtype == torch.long


def test_same_seed_same_batch_and_generator_stream():
    a = make_batch(TaskConfig(repeat_ratio=0.3), 64, seed=5)
    b = make_batch(TaskConfig(repeat_ratio=0.3), 64, seed=5)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.extras["repeated"], b.extras["repeated"])
    g = torch.Generator().manual_seed(5)
    c, d = make_batch(TaskConfig(), 64, generator=g), make_batch(TaskConfig(), 64, generator=g)
    assert not torch.equal(c.tokens, d.tokens)


def test_probe_sequence():
    assert probe_sequence().tolist() == [[2, 4, 5, 3, 4, 5, 3, 2, 2]]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"V": 1}, ValueError, r"V must be in \[2, 8\], got 1"),
        ({"V": 9}, ValueError, r"V must be in \[2, 8\], got 9"),
        ({"V": 5.0}, TypeError, "V"),
        ({"repeat_ratio": 1.5}, ValueError, r"repeat_ratio must be in \[0, 1\]"),
        ({"repeat_ratio": -0.1}, ValueError, r"repeat_ratio must be in \[0, 1\]"),
        ({"repeat_ratio": "0.3"}, TypeError, "repeat_ratio"),
        ({"train_fraction": 0.0}, ValueError, "train_fraction must be strictly between 0 and 1"),
        ({"train_fraction": 1.0}, ValueError, "train_fraction must be strictly between 0 and 1"),
    ],
)
def test_bad_task_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        TaskConfig(**kwargs)


def test_bad_batch_arguments():
    with pytest.raises(ValueError, match="n must be > 0"):
        make_batch(TaskConfig(), 0)
    with pytest.raises(ValueError, match="split"):
        make_batch(TaskConfig(), 4, split="valid")
    with pytest.raises(ValueError, match="repeat_source"):
        make_batch(TaskConfig(), 4, repeat_source=4)
    with pytest.raises(ValueError, match="repeat_ratio"):
        make_batch(TaskConfig(), 4, repeat_ratio=2.0)


@pytest.mark.parametrize(
    "tokens, error, match",
    [
        (torch.tensor([[2, 4, 5, 3, 4, 5, 3, 2, 0]]), ValueError, "1..5"),
        (torch.tensor([[2, 4, 5, 3, 4, 5, 3, 2, 6]]), ValueError, "1..5"),
        (torch.tensor([[2, 4, 5, 3, 4, 5, 3, 2]]), ValueError, "length"),
        (torch.tensor([[2.0, 4, 5, 3, 4, 5, 3, 2, 2]]), TypeError, "integer"),
        ([2, 4, 5, 3, 4, 5, 3, 2, 2], TypeError, "Tensor"),
    ],
)
def test_validate_tokens_rejects(tokens, error, match):
    with pytest.raises(error, match=match):
        validate_tokens(tokens, 5)


def test_make_sequence_checks_consistency():
    assert make_sequence([1, 2, 3, 4, 1, 2, 5, 1, 4]).shape == (1, 9)
    with pytest.raises(ValueError, match="not consistent"):
        make_sequence([1, 2, 3, 2, 4, 5, 5, 1, 4])  # y=2 twice
    with pytest.raises(ValueError, match="not consistent"):
        make_sequence([1, 2, 3, 4, 1, 3, 5, 1, 4])  # x=1 maps to 2 and 3
    with pytest.raises(TypeError):
        make_sequence([1.0, 2, 3, 4, 1, 2, 5, 1, 4])


def test_permutation_count():
    assert len(all_permutations(6)) == math.factorial(6)


def _digest(batch) -> str:
    import hashlib

    parts = (batch.tokens, batch.extras["repeated"], batch.extras["repeat_source"])
    return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in parts)).hexdigest()[:16]


def test_default_batches_are_pinned():
    """Seeded batches of the default task (repeat_sources (1,)) never change: pinned before repeat_sources existed."""
    batch = make_batch(TaskConfig(repeat_ratio=0.3), 8, seed=5)
    assert batch.tokens[:3].tolist() == [[1, 4, 5, 3, 4, 2, 3, 1, 2], [3, 3, 5, 5, 1, 1, 2, 4, 4], [5, 5, 1, 3, 4, 4, 3, 1, 2]]
    assert batch.tokens[5].tolist() == [5, 3, 1, 1, 3, 2, 2, 5, 5] and batch.extras["repeated"].nonzero().flatten().tolist() == [5]
    assert _digest(make_test_set(TaskConfig(repeat_ratio=0.3))) == "be1dfbe3d312df81"
    g = torch.Generator().manual_seed(11)  # one generator, two draws: the stream position is pinned too
    first = make_batch(TaskConfig(V=4, repeat_ratio=0.5), 500, generator=g)
    second = make_batch(TaskConfig(V=4, repeat_ratio=0.5), 500, generator=g, split="test")
    assert (_digest(first), _digest(second)) == ("7f8cefb7fcd8878b", "ed24fb6b2255ade4")
    mixed = make_batch(TaskConfig(), 300, repeat_ratio=1.0, repeat_source=None, seed=3)
    assert _digest(mixed) == "9b52a4ac7846dbe8"


# ----------------------------------------------------------------------------- repeat_sources


def test_repeat_sources_follow_the_definition():
    """P(last query = x_k) = repeat_ratio / 4 for each k in (1, 2, 3, 4); the target is y_k."""
    config = TaskConfig(repeat_ratio=0.4, repeat_sources=(1, 2, 3, 4))
    batch = make_batch(config, 20_000, seed=8)
    xs, ys = batch.extras["xs"], batch.extras["ys"]
    for k in (1, 2, 3, 4):
        hit = xs[:, -1] == xs[:, k - 1]
        assert abs(hit.float().mean().item() - 0.1) < 0.006, k  # 3 binomial sd = 0.0064
        assert torch.equal(batch.targets[hit, -1], ys[hit, k - 1])
        assert torch.equal(hit, batch.extras["repeat_source"] == k - 1)
    assert abs(batch.extras["repeated"].float().mean().item() - 0.4) < 0.01
    new = ~batch.extras["repeated"]  # a new last query is the one x not seen before
    assert torch.equal(xs[new].sort(1).values, torch.arange(1, 6).expand(int(new.sum()), 5))
    assert torch.equal(repeat_source_of(batch.tokens), batch.extras["repeat_source"])


def test_repeat_sources_subset_and_single_source():
    batch = make_batch(TaskConfig(repeat_ratio=1.0, repeat_sources=[4, 2]), 4000, seed=3)
    counts = torch.bincount(batch.extras["repeat_source"], minlength=4).tolist()
    assert counts[0] == counts[2] == 0 and abs(counts[1] / 4000 - 0.5) < 0.03
    assert torch.equal(batch.extras["xs"][:, -1], batch.extras["xs"].gather(1, batch.extras["repeat_source"][:, None])[:, 0])
    assert torch.equal(batch.targets[:, -1], batch.extras["ys"].gather(1, batch.extras["repeat_source"][:, None])[:, 0])
    # one source draws nothing extra: the same stream as the explicit 0-based repeat_source
    single = make_batch(TaskConfig(repeat_ratio=0.5, repeat_sources=(3,)), 300, seed=4)
    explicit = make_batch(TaskConfig(repeat_ratio=0.5), 300, seed=4, repeat_source=2)
    assert torch.equal(single.tokens, explicit.tokens) and (single.extras["repeat_source"][single.extras["repeated"]] == 2).all()
    # all of 1..V-1 draws exactly like repeat_source=None (uniform over every earlier query)
    every = make_batch(TaskConfig(repeat_ratio=0.5, repeat_sources=(1, 2, 3, 4)), 300, seed=4)
    uniform = make_batch(TaskConfig(repeat_ratio=0.5), 300, seed=4, repeat_source=None)
    assert torch.equal(every.tokens, uniform.tokens) and torch.equal(every.extras["repeat_source"], uniform.extras["repeat_source"])
    # an explicit repeat_source overrides the config's sources
    forced = make_batch(TaskConfig(repeat_ratio=1.0, repeat_sources=(1, 2)), 50, seed=1, repeat_source=3)
    assert (forced.extras["repeat_source"] == 3).all()


def test_repeat_source_of_reads_tokens():
    tokens = torch.tensor([[2, 4, 5, 3, 4, 5, 3, 2, 2], [2, 4, 5, 3, 4, 5, 3, 2, 3], [2, 4, 5, 3, 4, 5, 3, 2, 1]])
    assert repeat_source_of(tokens).tolist() == [0, 3, -1]


def test_repeat_sources_stored_sorted_and_round_trip():
    config = TaskConfig(V=6, repeat_ratio=0.3, repeat_sources=[5, 1, 3])
    assert config.repeat_sources == (1, 3, 5)
    assert config.to_dict()["repeat_sources"] == [1, 3, 5]
    again = TaskConfig.from_dict(json.loads(json.dumps(config.to_dict())), complete=True)
    assert again == config and again.repeat_sources == (1, 3, 5)
    assert TaskConfig().repeat_sources == (1,) and TaskConfig() == TaskConfig(repeat_sources=[1])


def test_checkpoint_configs_without_repeat_sources_load_as_the_study():
    old = {"V": 5, "repeat_ratio": 0.3, "train_fraction": 0.8, "split_seed": 0}
    assert TaskConfig.from_dict(old, complete=True) == TaskConfig(repeat_ratio=0.3)
    assert ADDED_FIELDS == {"repeat_sources": (1,)}
    with pytest.raises(ValueError, match=r"TaskConfig fields missing: \['split_seed'\]"):  # only that one is filled
        TaskConfig.from_dict({k: v for k, v in old.items() if k != "split_seed"}, complete=True)
    with pytest.raises(ValueError, match=r"unknown TaskConfig fields \['repeat_source'\]"):
        TaskConfig.from_dict({**old, "repeat_source": [1]}, complete=True)
    with pytest.raises(TypeError, match="repeat_sources"):
        TaskConfig.from_dict({**old, "repeat_sources": "1,2"}, complete=True)


def test_shipped_and_new_checkpoints_keep_repeat_sources(tmp_path):
    from perm_circuits import build_model, load_checkpoint, save_model
    from perm_circuits.models import PRETRAINED_DIR

    stored = json.loads((PRETRAINED_DIR / "d16h1" / "config.json").read_text())["task"]
    assert "repeat_sources" not in stored  # written before the field existed
    assert load_checkpoint(PRETRAINED_DIR / "d16h1").task_config == TaskConfig(repeat_ratio=0.3)
    task = TaskConfig(repeat_ratio=0.3, repeat_sources=(1, 2, 3, 4))
    save_model(build_model("d16h1"), tmp_path / "ck", task=task)
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["task"]["repeat_sources"] == [1, 2, 3, 4]
    assert load_checkpoint(tmp_path / "ck").task_config == task


@pytest.mark.parametrize(
    "sources, error, match",
    [
        ((), ValueError, "repeat_sources must not be empty"),
        ((0,), ValueError, r"repeat_sources must be in 1..4 .* for V=5, got 0 in \[0\]"),
        ((1, 5), ValueError, r"repeat_sources must be in 1..4 .* got 5 in \[1, 5\]"),
        ((2, 1, 2), ValueError, r"repeat_sources must be unique, got 2 twice"),
        ((True,), TypeError, "repeat_sources entry must be an int, got bool True"),
        (1, TypeError, "repeat_sources"),
        ("12", TypeError, "repeat_sources"),
        ((1.0,), TypeError, "repeat_sources"),
    ],
)
def test_bad_repeat_sources(sources, error, match):
    with pytest.raises(error, match=match):
        TaskConfig(repeat_sources=sources)


def test_repeat_sources_checked_against_V():
    with pytest.raises(ValueError, match=r"repeat_sources must be in 1..2 .* for V=3, got 3"):
        TaskConfig(V=3, repeat_sources=(1, 3))
    with pytest.raises(TypeError, match="repeat_source"):
        make_batch(TaskConfig(), 4, repeat_source="x1")


def test_cli_train_repeat_sources(tmp_path, capsys):
    from perm_circuits.cli import main

    out = tmp_path / "run"
    argv = ["train", "--preset", "d16h1", "--epochs", "1", "--samples", "256", "--repeat-sources", "3,1", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    document = json.loads((out / "config.json").read_text())
    assert document["task"]["repeat_sources"] == [1, 3] and document["task"]["repeat_ratio"] == 0.3
    assert {"recall_x1_accuracy", "recall_x3_accuracy"} <= set(document["metadata"]["metrics"])
    capsys.readouterr()
    assert main(["train", "--preset", "d16h1", "--repeat-sources", "0,1", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "repeat_sources must be in 1..4" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--repeat-sources", "1", "--out", str(tmp_path / "y"), "--quiet"]) == 2
    assert "['--repeat-sources'] cannot be given with --resume" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--preset", "d16h1", "--repeat-sources", "x1", "--out", str(tmp_path / "z")])
    assert exit_info.value.code == 2 and "comma-separated integers" in capsys.readouterr().err


@pytest.mark.parametrize("source", [None, 0, 3])
def test_exhaustive_batch_is_every_sequence_once(source):
    from perm_circuits.tasks.permutation_data import exhaustive_batch, split_permutations

    config = TaskConfig()
    batch = exhaustive_batch(config, repeat_source=source)
    test_perms = split_permutations(config)[1]
    assert len(batch) == len(test_perms) * 120
    assert len({tuple(row) for row in batch.tokens.tolist()}) == len(batch)  # no sequence twice
    # every sequence is consistent: y = perm(x), and queries 1..4 are distinct
    assert torch.equal(batch.extras["ys"], batch.extras["perms"].gather(1, batch.extras["xs"] - 1))
    assert all(len(set(row[:4])) == 4 for row in batch.extras["xs"].tolist())
    if source is None:
        assert not batch.extras["repeated"].any() and (batch.extras["repeat_source"] == -1).all()
        assert all(len(set(row)) == 5 for row in batch.extras["xs"].tolist())
    else:
        assert batch.extras["repeated"].all() and torch.equal(batch.extras["xs"][:, -1], batch.extras["xs"][:, source])
    with pytest.raises(ValueError, match=r"repeat_source must be in \[0, 3\], got 4"):
        exhaustive_batch(config, repeat_source=4)


def test_batch_from_queries_rebuilds_a_batch_and_unused_query_finds_the_new_value():
    from perm_circuits.tasks.permutation_data import batch_from_queries, unused_query

    batch = make_batch(TaskConfig(repeat_ratio=0.5), 200, seed=3)
    rebuilt = batch_from_queries(batch.extras["xs"], batch.extras["perms"], batch.extras["repeat_source"])
    for name in ("tokens", "targets", "mask"):
        assert torch.equal(getattr(rebuilt, name), getattr(batch, name)), name
    for name in ("xs", "ys", "perms", "repeated", "repeat_source"):
        assert torch.equal(rebuilt.extras[name], batch.extras[name]), name
    new = unused_query(batch.extras["xs"])
    assert all(v not in row[:4] for v, row in zip(new.tolist(), batch.extras["xs"].tolist()))
    assert all(sorted([*row[:4], v]) == [1, 2, 3, 4, 5] for v, row in zip(new.tolist(), batch.extras["xs"].tolist()))


def test_make_batch_checks_seed_and_config_itself():
    # the raw function (as a user calls it, without the test suite's runtime type checker)
    raw = inspect.unwrap(make_batch)
    with pytest.raises(TypeError, match="seed must be an int, got float 1.5"):
        raw(TaskConfig(), 3, seed=1.5)
    with pytest.raises(TypeError, match="config must be a TaskConfig, got dict"):
        raw({"V": 5}, 3)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        raw(TaskConfig(), 3, generator=0)
    assert torch.equal(raw(TaskConfig(), 3, seed=7).tokens, make_batch(TaskConfig(), 3, seed=7).tokens)
