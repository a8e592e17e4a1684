"""A checkpoint is one atomic, verified record (perm_circuits.checkpoint_io)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time

import pytest
import torch
from checkpoint_edit import edit_record

from perm_circuits import TaskConfig, build_model, load_checkpoint, save_model
from perm_circuits.checkpoint_io import RECORD_KEY, read_checkpoint_document
from perm_circuits.cli import main
from perm_circuits.models import PRETRAINED_DIR, CheckpointError, list_pretrained, load_model
from perm_circuits.train import TrainConfig, _optimizer, save_training_checkpoint, train
from perm_circuits.tasks.permutation_data import make_batch
from perm_circuits.train import masked_loss


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_config_lives_in_the_weights_header_and_an_edit_is_refused_with_the_diff(tmp_path):
    model = build_model("d16h1", seed=3)
    save_model(model, tmp_path / "ck", task=TaskConfig(repeat_ratio=0.3), metadata={"note": "x"})
    document = read_checkpoint_document(tmp_path / "ck")  # from the header
    assert document["model"]["d_model"] == 16 and document["task"]["repeat_ratio"] == 0.3
    config = tmp_path / "ck" / "config.json"
    original = config.read_text()
    edited = json.loads(original)
    edited["model"]["act_fn"] = "gelu"
    edited["task"]["repeat_ratio"] = 0.5
    config.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match=r"model.act_fn: saved 'relu', config.json has 'gelu'; "
                                              r"task.repeat_ratio: saved 0.3, config.json has 0.5"):
        load_model(tmp_path / "ck")
    edited = json.loads(original)
    edited["metadata"]["note"] = "y"  # metadata is part of the record too
    config.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match=r"metadata.note: saved 'x', config.json has 'y'"):
        load_model(tmp_path / "ck")
    config.write_text(original)
    assert _same(load_model(tmp_path / "ck"), model)


def test_a_kill_between_the_two_renames_leaves_the_new_record(tmp_path):
    a, b = build_model("d16h1", seed=1), build_model("d16h1", seed=2)
    save_model(a, tmp_path / "ck", metadata={"n": 1})
    stale = (tmp_path / "ck" / "config.json").read_text()
    save_model(b, tmp_path / "ck", metadata={"n": 2})
    (tmp_path / "ck" / "config.json").write_text(stale)  # the weights were renamed, config.json not yet
    loaded = load_checkpoint(tmp_path / "ck")
    assert _same(loaded.model, b) and loaded.metadata == {"n": 2}
    (tmp_path / "ck" / "config.json").unlink()  # a first save killed before config.json: the record is whole
    assert _same(load_model(tmp_path / "ck"), b)


def test_corrupted_tensor_bytes_are_refused_even_with_a_stale_config(tmp_path):
    save_model(build_model("d16h1"), tmp_path / "ck")
    weights = tmp_path / "ck" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match the SHA-256 of its tensors stored in its record"):
        load_model(tmp_path / "ck")  # config.json names other weights: the record's tensor hash decides
    (tmp_path / "ck" / "config.json").unlink()
    with pytest.raises(CheckpointError, match="does not match the SHA-256 of its tensors stored in its record"):
        load_model(tmp_path / "ck")


def test_old_checkpoints_without_a_record_still_load_and_still_check_their_hash(tmp_path):
    for name in list_pretrained():
        folder = PRETRAINED_DIR / name
        assert RECORD_KEY not in (json.loads(folder.joinpath("model.safetensors").read_bytes()[8:][
            : int.from_bytes(folder.joinpath("model.safetensors").read_bytes()[:8], "little")]).get("__metadata__") or {})
    assert load_model(PRETRAINED_DIR / "d16h1").metadata["seed"] == 0
    shutil.copytree(PRETRAINED_DIR / "d16h1", tmp_path / "old")
    edited = json.loads((tmp_path / "old" / "config.json").read_text())
    edited["weights_sha256"] = "0" * 64
    (tmp_path / "old" / "config.json").write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="does not match the SHA-256 stored in config.json"):
        load_model(tmp_path / "old")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_model_the_loader_refuses_is_refused_at_save(tmp_path, dtype):
    model = build_model("d16h1").to(dtype)
    with pytest.raises(ValueError, match=rf"is {dtype}; checkpoints hold float32 models"):
        save_model(model, tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


def test_nan_or_inf_weights_are_refused_at_save(tmp_path):
    model = build_model("d16h1")
    with torch.no_grad():
        model.state_dict()["embed.weight"][0, 0] = float("nan")
    with pytest.raises(ValueError, match="weight embed.weight has NaN or infinite values"):
        save_model(model, tmp_path / "ck")
    with pytest.raises(ValueError, match="extra.optim.0.exp_avg has NaN or infinite values"):
        save_model(build_model("d16h1"), tmp_path / "ck", extra_tensors={"optim.0.exp_avg": torch.tensor([float("inf")])})
    assert not (tmp_path / "ck").exists()


def test_weights_and_config_get_the_same_mode_under_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        save_model(build_model("d16h1"), tmp_path / "ck")
    finally:
        os.umask(old)
    modes = {name: (tmp_path / "ck" / name).stat().st_mode & 0o777 for name in ("model.safetensors", "config.json")}
    assert modes == {"model.safetensors": 0o644, "config.json": 0o644}


@pytest.fixture(scope="module")
def training_checkpoint(tmp_path_factory):
    """A resumable checkpoint after one real optimizer step (no training loop needed)."""
    folder = tmp_path_factory.mktemp("resume") / "epoch_0001"
    task, config = TaskConfig(), TrainConfig(epochs=2, samples_per_epoch=64, batch_size=64, test_size=64)
    model, generator = build_model("d16h1"), torch.Generator().manual_seed(0)
    optimizer = _optimizer(model, config.lr)
    batch = make_batch(task, 64, generator=generator)
    masked_loss(model(batch.tokens), batch.targets, batch.mask).backward()
    optimizer.step()
    from perm_circuits.train import TrainingHistory

    save_training_checkpoint(folder, model, optimizer, generator, task, config, TrainingHistory(), 1)
    return folder


@pytest.mark.parametrize("corrupt, match", [
    (lambda t: t["extra.optim.0.exp_avg"].fill_(float("nan")), r"corrupted optimizer state extra.optim.0.exp_avg \(NaN"),
    (lambda t: t["extra.optim.2.exp_avg_sq"].fill_(-1.0), r"corrupted optimizer state extra.optim.2.exp_avg_sq"),
    (lambda t: t.update({"extra.optim.1.step": torch.ones(3)}), r"valid optimizer state extra.optim.1.step \(expected a float tensor of shape \(\)\)"),
    (lambda t: t.update({"extra.optim.0.exp_avg": torch.zeros(2)}), r"valid optimizer state extra.optim.0.exp_avg"),
    (lambda t: t.update({"extra.optim.999.step": torch.tensor(1.0)}), r"optimizer state \['extra.optim.999.step'\] that belongs to no parameter"),
    (lambda t: t["extra.generator"].fill_(0), r"invalid generator state extra.generator"),
])
def test_resuming_from_a_corrupted_optimizer_or_generator_state_is_refused(tmp_path, training_checkpoint, corrupt, match):
    folder = tmp_path / "bad"
    shutil.copytree(training_checkpoint, folder)
    edit_record(folder, tensors=corrupt)
    with pytest.raises(CheckpointError, match=match):
        train(resume_from=folder, progress=False)
    out = tmp_path / "out"
    assert main(["train", "--resume", str(folder), "--out", str(out), "--quiet"]) == 2
    assert not (out / "model.safetensors").exists()


def _saver(folder, models, start, report_fd):  # the forked child: saves forever, alternating the two models
    n = start
    while True:
        n += 1
        save_model(models[n % 2], folder, metadata={"n": n})
        os.write(report_fd, n.to_bytes(8, "little"))


def test_kill_9_at_random_moments_leaves_the_previous_or_the_next_save(tmp_path):
    models = (build_model("d32h2", seed=1), build_model("d32h2", seed=2))
    folder = tmp_path / "ck"
    save_model(models[0], folder, metadata={"n": 0})
    rng, last, kills, hit = random.Random(0), 0, 0, 0
    torch.set_num_threads(1)  # nothing parallel across the fork
    deadline = time.monotonic() + 11
    while kills < 20 and time.monotonic() < deadline:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(read_fd)
            try:
                _saver(folder, models, last, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        time.sleep(rng.uniform(0.005, 0.25))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        done = os.read(read_fd, 1 << 20)
        os.close(read_fd)
        finished = int.from_bytes(done[-8:], "little") if done else last
        loaded = load_checkpoint(folder)  # whole, whatever moment the kill hit
        n = loaded.metadata["n"]
        assert n in (finished, finished + 1), (n, finished)
        assert _same(loaded.model, models[n % 2])
        hit += n == finished + 1  # killed after the record's rename, before the save returned
        last, kills = n, kills + 1
    assert kills >= 15 and last >= 10  # the saves went on between the kills, which landed amid them
