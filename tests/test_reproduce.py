"""reproduce.py: the Reproduction table, text and offline page; the registry and the CLI's errors.

The systems' own reproductions are tested with their systems; here a fake system module stands in.
"""

from __future__ import annotations

import json
import re
import sys
import types

import plotly.graph_objects as go
import pytest

import perm_circuits
from perm_circuits.cli import main
from perm_circuits.reproduce import REPRODUCTIONS, Comparison, Reproduction, reproduce
from perm_circuits.views.html import local_script_refs, remote_resource_refs

ROWS = (
    Comparison("W_O2 learned first", "W_O2 before W_K2", "step 40 < step 90", True),
    Comparison("2-layer accuracy", "99%", "71.5%", False, note="quick run, 300 steps"),
    Comparison("ODE matches", "qualitative", "see figure", None),
)


def _reproduction(**changes) -> Reproduction:
    figure = go.Figure(go.Scatter(x=[1, 2, 3], y=[0.1, 0.5, 0.9], name="A"))
    fields = dict(name="toy", title="Toy <paper> (2026)", quick=True, rows=ROWS, numbers={"accuracy": 0.715, "steps": 300},
                  figures={"order parameter A": figure}, full_command="perm-circuits reproduce toy", seconds=12.4)
    fields.update(changes)
    return Reproduction(**fields)


def test_to_dataframe_and_text():
    result = _reproduction()
    frame = result.to_dataframe()
    assert list(frame.columns) == ["claim", "paper", "ours", "holds", "note"]
    assert frame["holds"].tolist() == [True, False, None]
    assert frame.loc[1, "ours"] == "71.5%"
    text = result.to_text()
    lines = text.splitlines()
    assert lines[0] == "Toy <paper> (2026)  (--quick run, 12 s)"
    assert lines[2].split() == ["claim", "paper", "ours", "holds"]
    assert re.fullmatch(r"-+  -+  -+  -+", lines[3])
    # columns are aligned: every cell of "ours" starts where its header does
    column = lines[2].index("ours")
    assert [line[column:].split("  ")[0] for line in lines[4:7]] == ["step 40 < step 90", "71.5%", "see figure"]
    assert [line.split()[-1] for line in lines[4:7]] == ["yes", "NO", "-"]
    assert "* 2-layer accuracy: quick run, 300 steps" in lines
    assert lines[-1] == "paper-size run: perm-circuits reproduce toy"
    full = _reproduction(quick=False, full_command="", rows=ROWS[:1]).to_text()
    assert "(full run, 12 s)" in full and "paper-size run" not in full and "* " not in full


def test_write_is_offline(tmp_path):
    written = _reproduction().write(tmp_path / "out")
    names = [path.name for path in written]
    assert names[:3] == ["comparison.csv", "numbers.json", "index.html"] and names[3].endswith(".js")
    assert all(path.is_file() for path in written)
    assert json.loads((tmp_path / "out" / "numbers.json").read_text()) == {"accuracy": 0.715, "steps": 300}
    csv = (tmp_path / "out" / "comparison.csv").read_text().splitlines()
    assert csv[0] == "claim,paper,ours,holds,note" and csv[2].startswith("2-layer accuracy,99%,71.5%,False")
    page = (tmp_path / "out" / "index.html").read_text()
    assert not re.search(r"https?://", page), re.findall(r"https?://\S{0,40}", page)[:3]
    assert remote_resource_refs(page) == []
    assert local_script_refs(page, tmp_path / "out") == [names[3]]
    assert "Toy &lt;paper&gt; (2026)" in page and "<paper>" not in page
    assert "order parameter A" in page and "perm-circuits reproduce toy" in page and "71.5%" in page


@pytest.fixture
def fake_system(monkeypatch):
    """A system module ``fake_system_for_tests`` whose ``run`` records its arguments."""
    module = types.ModuleType("fake_system_for_tests")
    calls = []

    def run(quick: bool, progress: bool):
        calls.append((quick, progress))
        return _reproduction(quick=quick, seconds=0.0)

    module.run = run
    module.calls = calls
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(REPRODUCTIONS, "toy", (module.__name__, "Toy (2026)"))
    return module


def test_reproduce_runs_the_named_system(fake_system):
    result = reproduce("toy", quick=True, progress=False)
    assert fake_system.calls == [(True, False)]
    assert result.quick is True and result.rows == ROWS and result.seconds > 0.0  # timed by reproduce


def test_reproduce_errors(fake_system, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown reproduction 'nope'; choose one of \['birth', 'factual', 'forner', 'toy'\]"):
        reproduce("nope")
    with pytest.raises(TypeError, match="quick must be a bool, got 1|parameter 'quick'"):
        reproduce("toy", quick=1)
    assert fake_system.calls == []
    monkeypatch.setattr(fake_system, "run", lambda quick, progress: {"rows": []})
    with pytest.raises(TypeError, match="fake_system_for_tests.run returned dict, expected a Reproduction"):
        reproduce("toy")


def test_registry_names_the_three_papers():
    assert set(REPRODUCTIONS) >= {"birth", "forner", "factual"}
    assert perm_circuits.reproduce is reproduce  # exported
    for module, title in REPRODUCTIONS.values():
        assert module.startswith("perm_circuits.systems.") or module == "fake_system_for_tests"
        assert title


def test_cli_reproduce(fake_system, tmp_path, capsys):
    assert main(["reproduce", "nope"]) == 2
    err = capsys.readouterr().err
    assert "perm-circuits reproduce: error: unknown reproduction 'nope'; choose one of" in err
    assert main(["reproduce", "toy", "--quick", "--quiet", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Toy <paper> (2026)  (--quick run,")
    assert "2-layer accuracy" in out and f"wrote {tmp_path / 'r' / 'index.html'}" in out
    assert fake_system.calls == [(True, False)]
    assert (tmp_path / "r" / "comparison.csv").is_file()
