"""The default discovery finds a circuit smaller than the whole graph on every shipped model;
attribution scores at rounding level are flagged in the result and the CLI output."""

from __future__ import annotations

import dataclasses

import pytest

import perm_circuits.discovery as discovery
from perm_circuits.cli import main
from perm_circuits.discovery import DEFAULT_METHOD, discover
from perm_circuits.discovery.result import ROUNDING_LEVEL


@pytest.mark.parametrize("name", ["d16h1", "d32h1", "d32h2", "d16h1l2-any"])
def test_default_finds_a_circuit_smaller_than_the_graph(pretrained, name):
    model = pretrained(name).eval()
    result = discover(model, n=200)
    assert DEFAULT_METHOD == "greedy_edges" == result.method and result.how == "resample"
    assert 0 < result.n_edges < len(result.scores)
    assert result.faithfulness >= 0.9


def test_help_names_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["discover", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "greedy_edges (default" in out


def test_rounding_level_is_flagged_in_result_and_cli(pretrained, tmp_path, monkeypatch, capsys):
    model = pretrained("d16h1").eval()
    result = discover(model, "eap", n=100)
    ei = discovery.prepare_edges(model, _batch(model), how="resample")
    floor = ROUNDING_LEVEL * abs(ei.full_metric - ei.empty_metric)
    assert result.rounding_level == frozenset(e for e, v in result.scores.items() if abs(v) < floor)
    kept = sorted(result.circuit)[0]
    flagged = dataclasses.replace(result, rounding_level=frozenset({kept}))
    monkeypatch.setattr(discovery, "discover", lambda *a, **k: flagged)
    assert main(["discover", "d16h1", "--method", "eap", "--samples", "100", "--out", str(tmp_path / "c.svg")]) == 0
    out = capsys.readouterr().out
    assert f"{kept}" in out and "(rounding level)" in out
    assert f"1 of {len(result.scores)} scores are at rounding level" in out


def _batch(model):
    from perm_circuits.models import task_config_of
    from perm_circuits.tasks import PermutationTask

    return PermutationTask(task_config_of(model)).test_set(100, seed=1234)
