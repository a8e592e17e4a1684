"""perm_circuits.outputs.refuse_outputs: a script's output check before any work, and the scripts that use it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from perm_circuits.outputs import refuse_outputs

ROOT = Path(__file__).resolve().parent.parent


def test_refuse_outputs_prints_one_line_for_the_first_refused_file(tmp_path, capsys):
    fresh, taken = tmp_path / "a.csv", tmp_path / "b.csv"
    taken.write_text("mine")
    assert refuse_outputs({"--out": fresh, "--steps-out": taken}, force=False) is True
    assert capsys.readouterr().err == (f"error: --steps-out {str(taken)!r} exists; pass --force to overwrite it, "
                                       "or choose another path\n")
    assert refuse_outputs({"--out": fresh, "--steps-out": taken}, force=True) is False
    assert refuse_outputs({"--out": tmp_path / "no" / "such" / "folder" / "x.csv"}, force=False) is False  # creatable
    assert taken.read_text() == "mine" and not fresh.exists()


@pytest.mark.parametrize(("script", "flags"), [
    ("hypotheses", ("--out", "--steps-out")),
    ("neuron_rules", ("--out", "--retention")),
    ("claims_by_reference", ("--out",)),
])
def test_a_results_script_refuses_an_existing_table_before_any_work(tmp_path, capsys, script, flags):
    paths = [tmp_path / f"{flag.strip('-')}.csv" for flag in flags]
    paths[-1].write_text("mine")
    argv = [item for flag, path in zip(flags, paths) for item in (flag, str(path))]
    main = runpy.run_path(str(ROOT / "scripts" / f"{script}.py"))["main"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {flags[-1]} ") and "exists" in err
    assert paths[-1].read_text() == "mine" and not any(p.exists() for p in paths[:-1])
