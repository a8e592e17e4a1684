"""run_sweep (the Python API, not only the CLI) refuses a folder it did not write unless force=True."""

from __future__ import annotations

import json

import pytest

from perm_circuits.outputs import folder_marker
from perm_circuits.sweep import load_sweep, run_sweep

ONE = {"fixed": {"d_model": 16, "epochs": 1, "samples": 300, "test_size": 100, "seed": 0},
       "analysis": {"n": 100, "n_pair": 20, "n_boot": 10, "recall_n": 50}}


def test_a_foreign_folder_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "spec.json").write_text('{"mine": true}')
    with pytest.raises(ValueError, match=r"out_dir .* non-empty folder that perm-circuits sweep did not write "
                                         r".*pass force=True \(CLI: --force\)"):
        run_sweep(ONE, tmp_path, backend="serial", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
    assert json.loads((tmp_path / "spec.json").read_text()) == {"mine": True}
    from perm_circuits.checks import check_bool  # run_sweep's own check (beartype answers first in tests)

    with pytest.raises(TypeError, match="force must be a bool, got str"):
        check_bool("force", "yes")


def test_force_writes_and_the_marker_makes_the_folder_the_sweeps(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    result = run_sweep(ONE, tmp_path, backend="serial", progress=False, force=True)
    assert len(result.done) == 1 and (tmp_path / "notes.txt").read_text() == "keep me"
    assert (tmp_path / folder_marker("sweep")).is_file()
    again = run_sweep(ONE, tmp_path, backend="serial", progress=False)  # its own folder: no force needed
    assert again.n_skipped == 1 and len(load_sweep(tmp_path)) == 1


def test_a_refused_spec_leaves_no_new_folder(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(ValueError):
        run_sweep({"fixed": {"d_model": -1}}, out, backend="serial", progress=False)
    assert not out.exists()
