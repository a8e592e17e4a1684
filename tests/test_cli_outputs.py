"""Every CLI command that writes checks its output before any work, and never
overwrites what it did not write without --force.  Everything runs through ``perm_circuits.cli.main``
in this process (a subprocess with torch costs seconds)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch  # noqa: F401 - imported up front: the timings below measure the checks, not torch's import

from perm_circuits import outputs
from perm_circuits.cli import main
from perm_circuits.outputs import check_folder, check_writable, folder_marker, is_marked, mark_folder

SPEC = """
[grid]
seed = [0]
[fixed]
d_model = 16
n_heads = 1
epochs = 1
samples = 256
test_size = 100
[analysis]
n = 100
n_pair = 50
n_boot = 5
recall_n = 50
"""


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(folder.rglob("*"))}


@pytest.fixture
def blocked(tmp_path):
    """A regular file: any path under it is impossible to create (root included, unlike chmod)."""
    (tmp_path / "spec.toml").write_text(SPEC)
    (tmp_path / "sweep").mkdir()
    blocker = tmp_path / "blocker"
    blocker.write_text("the user's file\n")
    return tmp_path, blocker


def _commands(tmp_path: Path, out: Path) -> list[list[str]]:
    spec, sweep = str(tmp_path / "spec.toml"), str(tmp_path / "sweep")
    return [
        ["train", "--preset", "d16h1", "--epochs", "1", "--quiet", "--out", str(out / "ck")],
        ["train", "--resume", str(tmp_path / "missing_checkpoint"), "--quiet", "--out", str(out / "ck")],
        ["report", "d16h1", "--quiet", "--out", str(out / "report")],
        ["discover", "d16h1", "--samples", "20", "--out", str(out / "circuit.svg")],
        ["sweep", spec, "--backend", "serial", "--quiet", "--out", str(out / "sweep")],
        ["sweep-report", sweep, "--out", str(out / "page.html")],
        ["reproduce", "birth", "--quick", "--quiet", "--out", str(out / "repro")],
    ]


@pytest.mark.parametrize("where", ["under a regular file", "in /proc"])
def test_every_writing_command_refuses_an_impossible_out_at_once(blocked, capsys, where):
    tmp_path, blocker = blocked
    out = blocker / "sub" if where == "under a regular file" else Path("/proc/perm_circuits_nowhere")
    before = _tree(tmp_path)
    for command in _commands(tmp_path, out):
        start = time.perf_counter()
        code = main(command)
        seconds = time.perf_counter() - start
        err = capsys.readouterr().err
        assert code == 2, (command, err)
        assert seconds < 1.0, (command[0], seconds)  # no training, discovery or model load first
        assert err.count("\n") == 1 and f"perm-circuits {command[0]}: error: --out" in err, err
        assert "cannot be created" in err or "cannot be written" in err, err
    assert _tree(tmp_path) == before  # nothing written, the blocker untouched
    assert not Path("/proc/perm_circuits_nowhere").exists()
    assert main(["sweep-reanalyse", "/proc/self", "--quiet"]) == 2  # writes into the sweep folder it is given
    assert "error: DIR '/proc/self' cannot be written" in capsys.readouterr().err


def test_a_full_disk_is_refused_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(outputs, "free_bytes", lambda folder: 4096)
    code = main(["train", "--preset", "d16h1", "--epochs", "1", "--quiet", "--out", str(tmp_path / "ck")])
    err = capsys.readouterr().err
    assert code == 2 and "no space left on the device" in err and "4096 bytes free" in err
    assert list(tmp_path.iterdir()) == []


def test_train_resume_does_not_overwrite_a_foreign_out(tmp_path, capsys):
    """The --out check ran only without --resume; it runs first now, before the checkpoint loads
    (so any --resume path shows it; continuing from a real checkpoint is tests/test_cli.py's)."""
    from perm_circuits.cli import _continues

    checkpoint = tmp_path / "run" / "checkpoints" / "epoch_0001"
    other = tmp_path / "other_checkpoint"  # another model's checkpoint
    other.mkdir()
    (other / "config.json").write_text("{}")
    (other / "model.safetensors").write_bytes(b"weights")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("years of work")
    for out, words in ((other, "already holds a checkpoint"), (notes, "non-empty folder")):
        before = _tree(out)
        assert main(["train", "--resume", str(checkpoint), "--epochs", "2", "--quiet", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and repr(str(out)) in err and "--force" in err
        assert _tree(out) == before
    # continuing a run in its own folder (the checkpoint is the folder or inside it) needs no --force
    assert _continues(checkpoint, tmp_path / "run") and _continues(tmp_path / "run", tmp_path / "run")
    assert not _continues(checkpoint, other) and not _continues(None, other)
    assert not _continues(tmp_path / "run", checkpoint)


def test_discover_does_not_overwrite_a_file_without_force(tmp_path, capsys):
    picture = tmp_path / "circuit.svg"
    picture.write_text("<svg>the user's drawing</svg>")
    start = time.perf_counter()
    assert main(["discover", "d16h1", "--samples", "20", "--out", str(picture)]) == 2
    assert time.perf_counter() - start < 1.0  # refused before the discovery runs
    err = capsys.readouterr().err
    assert f"--out {str(picture)!r} exists; pass --force" in err
    assert picture.read_text() == "<svg>the user's drawing</svg>"
    assert main(["discover", "d16h1", "--samples", "20", "--out", str(picture), "--force"]) == 0
    assert picture.read_text().startswith("<?xml") and "<svg" in picture.read_text()


def test_sweep_refuses_a_folder_that_is_not_a_sweep(tmp_path, capsys):
    """The user's own spec.json in the folder: never overwritten, nothing written beside it."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spec.json").write_text('{"mine": true}')
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    assert main(["sweep", str(spec), "--backend", "serial", "--quiet", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"--out {str(folder)!r} is a non-empty folder that perm-circuits sweep did not write" in err
    assert "--force" in err and sorted(p.name for p in folder.iterdir()) == ["spec.json"]
    assert (folder / "spec.json").read_text() == '{"mine": true}'


def test_sweep_folders_are_recognised_by_their_marker_or_rows(tmp_path):
    marked = tmp_path / "marked"
    mark_folder(marked, "sweep")
    (marked / "spec.json").write_text("{}")
    assert is_marked(marked, "sweep") and not is_marked(marked, "reproduce")
    assert check_folder(marked, "sweep", force=False) == marked
    (marked / folder_marker("sweep")).write_text('{"format": "something else"}')  # a name alone is no marker
    with pytest.raises(ValueError, match="did not write"):
        check_folder(marked, "sweep", force=False)
    from perm_circuits.sweep.store import holds_sweep_rows as _holds_sweep_rows

    legacy = tmp_path / "legacy"  # a sweep of a version without the marker: its rows say so
    (legacy / "runs").mkdir(parents=True)
    (legacy / "runs" / "abc123.json").write_text(json.dumps({"run_id": "abc123", "status": "done"}))
    assert check_folder(legacy, "sweep", force=False, owned=_holds_sweep_rows) == legacy
    (legacy / "runs" / "abc123.json").write_text(json.dumps({"run_id": "other", "status": "done"}))
    with pytest.raises(ValueError, match="did not write"):
        check_folder(legacy, "sweep", force=False, owned=_holds_sweep_rows)
    assert check_folder(legacy, "sweep", force=True) == legacy


def test_a_refused_sweep_leaves_no_folder_or_marker(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text("[grid]\nd_model = [12]\nn_heads = [5]\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new", empty):
        assert main(["sweep", str(spec), "--quiet", "--out", str(out)]) == 2
    assert "not divisible" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and list(empty.iterdir()) == []


def test_sweep_report_keeps_a_plotly_file_it_did_not_write(tmp_path, capsys):
    from perm_circuits.views.html import plotly_js_file_name

    folder = tmp_path / "pages"
    folder.mkdir()
    theirs = folder / plotly_js_file_name()
    theirs.write_text("/* the user's patched plotly */")
    assert main(["sweep-report", str(tmp_path), "--out", str(folder / "sweep.html")]) == 2
    err = capsys.readouterr().err
    assert repr(str(theirs)) in err and "did not write" in err
    assert theirs.read_text() == "/* the user's patched plotly */" and sorted(folder.iterdir()) == [theirs]


def test_plotly_copy_is_recognised_by_its_marker(tmp_path):
    from perm_circuits.views.html import (
        PLOTLY_JS_MARKER,
        _plotly_js_text,
        foreign_plotly_js,
        plotly_js_file_name,
        write_plotly_js,
    )

    path = tmp_path / plotly_js_file_name()
    path.write_text("user")
    assert foreign_plotly_js(tmp_path) == path
    with pytest.raises(ValueError, match="perm_circuits did not write it"):
        write_plotly_js(tmp_path)
    assert path.read_text() == "user"
    assert write_plotly_js(tmp_path, force=True) == path and path.read_text().startswith(PLOTLY_JS_MARKER)
    assert foreign_plotly_js(tmp_path) is None
    path.write_text(PLOTLY_JS_MARKER + " an older copy */\n...")  # ours, out of date: rewritten
    assert write_plotly_js(tmp_path).read_text().startswith(PLOTLY_JS_MARKER) and path.stat().st_size > 1_000_000
    path.write_text(_plotly_js_text())  # an unmarked copy of earlier versions, exactly this text: ours
    assert foreign_plotly_js(tmp_path) is None


def test_report_and_reproduce_refuse_foreign_outputs_before_any_work(tmp_path, capsys):
    from perm_circuits.views.html import plotly_js_file_name
    from perm_circuits.views.report import REPORT_MARKER

    report = tmp_path / "report"
    report.mkdir()
    (report / REPORT_MARKER).write_text('{"format": "perm_circuits.report", "files": []}')
    (report / plotly_js_file_name()).write_text("the user's")
    assert main(["report", "no_such_model", "--quiet", "--out", str(report)]) == 2
    assert "did not write it" in capsys.readouterr().err and (report / plotly_js_file_name()).read_text() == "the user's"
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "numbers.json").write_text("{}")
    assert main(["reproduce", "no_such_reproduction", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is a non-empty folder that perm-circuits reproduce did not write" in err and "--force" in err
    assert sorted(p.name for p in folder.iterdir()) == ["numbers.json"]


def test_check_writable_names_the_problem(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"exists and is not a folder"):
        check_writable(tmp_path / "file", folder=True)
    with pytest.raises(ValueError, match=r"is a folder; give a file path"):
        check_writable(tmp_path, label="--out")
    with pytest.raises(ValueError, match=r"cannot be created: '.*file' is not a folder"):
        check_writable(tmp_path / "file" / "a" / "b.html")
    with pytest.raises(TypeError, match="--out must be a path"):
        check_writable(3)
    assert check_writable(tmp_path / "new" / "deeper", folder=True) == tmp_path / "new" / "deeper"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe is gone, nothing created
