import json
import subprocess
import sys

import pytest

from perm_circuits.cli import main


def test_train_then_evaluate_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--preset", "d16h1", "--epochs", "1", "--samples", "1024", "--repeat-ratio", "0.3", "--out", str(out), "--quiet"])
    assert code == 0
    document = json.loads((out / "config.json").read_text())
    assert document["metadata"]["command"].startswith("perm-circuits train --preset d16h1")
    assert document["metadata"]["seed"] == 0 and document["task"]["repeat_ratio"] == 0.3
    capsys.readouterr()
    assert main(["evaluate", str(out), "--samples", "200"]) == 0
    text = capsys.readouterr().out
    assert "memorization" in text and "Recall generalisation" in text
    assert main(["evaluate", str(out), "--samples", "200", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    from perm_circuits import evaluate, make_test_set
    from perm_circuits.models import load_model

    model = load_model(out)
    expected = evaluate(model, make_test_set(model.task_config, n=200, seed=1234)).summary()
    assert summary == pytest.approx(expected, abs=1e-6)


def test_custom_architecture(tmp_path):
    out = tmp_path / "custom"
    assert main(["train", "--d-model", "8", "--heads", "2", "--layers", "2", "--V", "4", "--epochs", "1", "--samples", "256", "--out", str(out), "--quiet"]) == 0
    document = json.loads((out / "config.json").read_text())
    assert document["model"]["n_layers"] == 2 and document["model"]["V"] == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--preset", "d16h1", "--epochs", "0", "--out", "x"],
        ["train", "--preset", "d99h1", "--out", "x"],
        ["train", "--preset", "d16h1", "--repeat-ratio", "2", "--out", "x"],
        ["train", "--preset", "d16h1"],
        ["nonsense"],
    ],
)
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_validation_errors_exit_2(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "--preset or --d-model" in capsys.readouterr().err
    assert main(["train", "--d-model", "30", "--heads", "4", "--out", str(tmp_path / "y"), "--quiet"]) == 2
    assert main(["evaluate", str(tmp_path / "missing")]) == 2
    assert "neither a pretrained model" in capsys.readouterr().err


@pytest.mark.slow
def test_the_module_runs_as_a_command():
    """``python -m perm_circuits.cli`` is the command (its help lists the subcommands); what ``info``
    prints is checked in-process below (loading every shipped model again in a subprocess costs seconds)."""
    result = subprocess.run([sys.executable, "-m", "perm_circuits.cli", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "info" in result.stdout and "train" in result.stdout and "sweep-report" in result.stdout


def test_info_names_each_shipped_model_by_the_name_that_loads_it(capsys):
    """A two-layer shipped model is listed as ``d16h1l2-any`` (what ``evaluate`` takes), not by its shape."""
    from perm_circuits.models import list_pretrained

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "presets: d16h1" in out and "transformer-lens" in out
    listed = [line.split(":")[0].removeprefix("pretrained ") for line in out.splitlines()
              if line.startswith("pretrained ")]
    assert listed == list_pretrained() and "d16h1l2-any" in listed


def test_help_names_every_command(capsys):
    from perm_circuits.cli import COMMANDS

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    description = capsys.readouterr().out.split("positional arguments")[0].split("``perm-circuits``:")[1]
    assert {word.strip(" .\n") for word in description.split("|")} == set(COMMANDS)


def test_resume_flags_and_out_checks(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--preset", "d16h1", "--epochs", "1", "--samples", "512", "--checkpoint-every", "1", "--out", str(out), "--quiet"]) == 0
    checkpoint = out / "checkpoints" / "epoch_0001"
    assert main(["train", "--resume", str(checkpoint), "--preset", "d16h1", "--out", str(out), "--quiet"]) == 2
    assert "cannot be given with --resume" in capsys.readouterr().err
    assert main(["train", "--resume", str(checkpoint), "--epochs", "2", "--out", str(tmp_path / "more"), "--quiet"]) == 0
    document = json.loads((tmp_path / "more" / "config.json").read_text())
    assert document["metadata"]["epochs_run"] == 2 and document["metadata"]["train_config"]["samples_per_epoch"] == 512
    (tmp_path / "file").write_text("x")
    assert main(["train", "--preset", "d16h1", "--out", str(tmp_path / "file"), "--quiet"]) == 2


def test_json_output_has_no_nan(tmp_path, capsys):
    out = tmp_path / "plain"
    assert main(["train", "--preset", "d16h1", "--epochs", "1", "--samples", "256", "--repeat-ratio", "0", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--samples", "100", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    summary = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert summary["recall_accuracy"] is None
    assert all(isinstance(v, float) for k, v in summary.items() if k != "recall_accuracy")


def test_train_dropout_flag(tmp_path, capsys):
    out = tmp_path / "drop"
    argv = ["train", "--d-model", "8", "--heads", "1", "--dropout", "0.1", "--epochs", "1", "--samples", "256", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    assert json.loads((out / "config.json").read_text())["model"]["dropout"] == 0.1
    from perm_circuits import load_checkpoint

    assert load_checkpoint(out).model_config.dropout == 0.1
    assert main(["train", "--preset", "d16h1", "--dropout", "1.5", "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "dropout must be in [0, 1), got 1.5" in capsys.readouterr().err


def test_train_refuses_an_existing_checkpoint_unless_forced(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "--preset", "d16h1", "--epochs", "1", "--samples", "256", "--quiet", "--out", str(out)]
    assert main(base) == 0
    weights = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(base + ["--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} already holds a checkpoint" in err and "--force" in err and "--resume" in err
    assert (out / "model.safetensors").read_bytes() == weights  # nothing was touched
    (out / "model.safetensors").rename(tmp_path / "moved")  # a half-written folder counts too
    assert main(base + ["--seed", "1"]) == 2
    (tmp_path / "moved").rename(out / "model.safetensors")
    assert main(base + ["--seed", "1", "--force"]) == 0
    assert (out / "model.safetensors").read_bytes() != weights
    assert json.loads((out / "config.json").read_text())["metadata"]["seed"] == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    assert main(base[:-1] + [str(other)]) == 2
    assert f"--out {str(other)!r} is a non-empty folder; pass --force" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(base[:-1] + [str(tmp_path / "empty")]) == 0


def test_resume_into_the_same_folder_needs_no_force(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--preset", "d16h1", "--epochs", "1", "--samples", "256", "--checkpoint-every", "1", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    resume = ["train", "--resume", str(out / "checkpoints" / "epoch_0001"), "--epochs", "2", "--quiet", "--out", str(out)]
    assert main(resume) == 0
    assert json.loads((out / "config.json").read_text())["metadata"]["epochs_run"] == 2


def test_train_d_head(tmp_path, capsys):
    out = tmp_path / "dh"
    assert main(["train", "--d-model", "12", "--heads", "5", "--d-head", "4", "--epochs", "1", "--samples", "256", "--out", str(out), "--quiet"]) == 0
    from perm_circuits import load_checkpoint

    checkpoint = load_checkpoint(out)
    assert checkpoint.model_config.d_head == 4 and checkpoint.model.cfg.d_head == 4 and checkpoint.model.cfg.n_heads == 5
    assert tuple(checkpoint.model.state_dict()["blocks.0.attn.q.weight"].shape) == (20, 12)
    assert main(["train", "--preset", "d16h1", "--d-head", "8", "--epochs", "1", "--samples", "256", "--out", str(tmp_path / "p"), "--quiet"]) == 0
    assert load_checkpoint(tmp_path / "p").model_config.d_head == 8
    capsys.readouterr()
    assert main(["train", "--d-model", "12", "--heads", "5", "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "not divisible by n_heads=5; pass d_head" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--preset", "d16h1", "--d-head", "0", "--out", str(tmp_path / "zero")])


def test_discover_prints_the_circuit_and_draws_it(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    from perm_circuits.cli import main

    out = tmp_path / "circuit.svg"
    assert main(["discover", "d32h2", "--method", "acdc", "--samples", "200", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    header = text.splitlines()[0]
    assert header.startswith("d32h2: acdc under resample ablation,") and "of 13 edges" in header
    kept = [line.split()[0] for line in text.splitlines()[1:] if "->" in line]
    assert 0 < len(kept) < 13 and all("->" in edge for edge in kept)
    svg = ET.fromstring(out.read_text())
    drawn = [e for e in svg.iter() if "edge" in (e.get("class") or "").split()]
    assert len(drawn) == len(kept)
    assert main(["discover", "d32h2", "--out", str(tmp_path / "x.png")]) == 2


def test_discover_draws_its_picture_by_default(tmp_path, monkeypatch, capsys):
    import xml.etree.ElementTree as ET

    from perm_circuits.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["discover", "d16h1", "--method", "eap", "--samples", "100"]) == 0
    out = tmp_path / "circuit_d16h1_eap_resample.svg"
    assert capsys.readouterr().out.strip().endswith(str(out.name)) and out.is_file()
    svg = ET.fromstring(out.read_text())
    nodes = {e.get("data-node") for e in svg.iter() if "node" in (e.get("class") or "").split()}
    assert nodes == {"embed", "L0H0", "L0MLP", "logits"}  # every component of the one-layer model is drawn
