"""The discovery-method registry: every list of methods (discover, the CLI, the benchmark, the docs)
reads it, and a method registered once shows up in each."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from perm_circuits import cli
from perm_circuits.discovery import METHODS, discover, method_names, register_method, unregister_method
from perm_circuits.discovery import benchmark
from perm_circuits.discovery.registry import get_method, method_help

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = ("acdc", "eap", "eap_ig", "node_attribution", "greedy_edges", "mask_pruning", "random_baseline",
            "exhaustive_oracle")


def _discover_help() -> str:
    parser = cli._parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["discover"].format_help()


@pytest.fixture
def toy():
    calls = []

    def toy_method(model=None, batch=None, *, how=None, intervention=None, seed=0, **options):
        calls.append((how, seed, options))
        return "toy result"

    register_method("toy_method", toy_method, "a toy method for the registry test", lean={"steps": 2},
                    full={"steps": 7})
    yield calls
    unregister_method("toy_method")


def test_built_in_methods_in_order():
    assert method_names() == BUILT_IN
    assert tuple(METHODS) == BUILT_IN == benchmark.DEFAULT_METHODS
    assert METHODS["eap"].__module__ == "perm_circuits.discovery.methods"
    assert get_method("mask_pruning").benchmark_options(True) == {"steps": 60}
    assert get_method("mask_pruning").benchmark_options(False) == {"steps": 300}
    assert get_method("exhaustive_oracle").benchmark_options(False)["max_subsets"] == 3_000_000
    assert get_method("eap").benchmark_options(True) == {}


def test_registered_method_reaches_discover_cli_and_benchmark(toy):
    assert method_names()[-1] == "toy_method"
    assert "toy_method" in METHODS and benchmark.METHODS["toy_method"] is METHODS["toy_method"]
    assert "toy_method" in method_help("eap")
    assert re.search(r"toy_method", " ".join(_discover_help().split()))
    # discover dispatches by key, with the batch and options it is given
    assert discover(None, "toy_method", "mean", batch="tokens", seed=3, tau=0.5) == "toy result"
    assert toy == [("mean", 3, {"tau": 0.5})]
    # the benchmark accepts it (an unknown name is refused, naming the registered ones)
    with pytest.raises(ValueError, match="toy_method"):
        benchmark.run_benchmark(["induction"], ["not_a_method"], progress=False)


def test_unregistered_method_is_gone(toy):
    unregister_method("toy_method")
    try:
        assert "toy_method" not in METHODS and "toy_method" not in _discover_help()
        with pytest.raises(ValueError, match=r"method must be one of .*'eap'.*got 'toy_method'"):
            discover(None, "toy_method", batch="tokens")
    finally:
        register_method("toy_method", lambda *a, **k: None, "placeholder for the fixture's teardown")


def test_cli_refuses_unknown_method_in_one_line(capsys):
    assert cli.main(["discover", "d16h1", "--method", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "method must be one of" in err and "'nope'" in err


@pytest.mark.parametrize("bad, error", [
    (("Bad-Key", "perm_circuits.discovery.methods:eap", "x"), ValueError),
    (("eap", "perm_circuits.discovery.methods:eap", "again"), ValueError),
    (("new_one", 3, "x"), TypeError),
    (("new_one", "no_colon", "x"), TypeError),
    (("new_one", "m:f", ""), TypeError),
])
def test_register_refuses_bad_arguments(bad, error):
    with pytest.raises(error):
        register_method(*bad)
    assert method_names() == BUILT_IN


def test_registry_loads_no_torch():
    code = ("import sys, perm_circuits.discovery.registry as r; assert len(r.method_names()) == 8; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_docs_name_exactly_the_registered_methods():
    readme = next(line for line in (ROOT / "README.md").read_text().splitlines() if "perm-circuits discover" in line
                  and "--method" in line)
    listed = re.findall(r"`(\w+)`", readme.split("edge-level method", 1)[1].split(")", 1)[0])
    assert sorted(listed) == sorted(method_names()) and len(listed) == len(set(listed))
    docs = (ROOT / "docs" / "discovery.md").read_text()
    table = docs.split("## Known circuits: the method x mode table", 1)[1].split("\n\n")[2]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert tuple(rows) == method_names()
