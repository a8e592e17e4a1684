"""Sweep specs: parsing, validation before anything runs, grid expansion and stable run ids."""

from __future__ import annotations

import pytest

from perm_circuits import ModelConfig, TaskConfig, TrainConfig
from perm_circuits.sweep import SweepSpec, allowed_keys, load_spec, run_id_of, run_sweep

from .conftest import TINY_TOML

ISSUE_EXAMPLE = """
[grid]
d_model = [16, 32]
n_heads = [1, 2]
dropout = [0.0, 0.1]
seed = [0, 1, 2, 3, 4]
[fixed]
repeat_ratio = 0.3
early_stop = 3
"""


def test_issue_example_expands_to_40_runs(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(ISSUE_EXAMPLE)
    spec = load_spec(path)
    assert len(spec) == 40 and len({run.run_id for run in spec.runs}) == 40
    first = spec.runs[0]
    model, task, train = first.configs()
    assert (model.d_model, model.n_heads, model.dropout, model.seed) == (16, 1, 0.0, 0)
    assert task.repeat_ratio == 0.3 and train.seed == 0 and train.early_stop_patience == 3
    # unspecified training fields take the study's recipe
    assert (train.epochs, train.samples_per_epoch, train.batch_size, train.lr) == (50, 100_000, 128, 1e-3)
    last = spec.runs[-1].configs()
    assert (last[0].d_model, last[0].n_heads, last[0].dropout, last[0].seed, last[2].seed) == (32, 2, 0.1, 4, 4)


def test_toml_and_dict_give_the_same_runs(tmp_path, tiny):
    path = tmp_path / "spec.toml"
    path.write_text(TINY_TOML)
    assert [r.run_id for r in load_spec(path).runs] == [r.run_id for r in SweepSpec.from_dict(tiny).runs]


def test_run_id_is_a_hash_of_the_resolved_config(tiny):
    spec = SweepSpec.from_dict(tiny)
    run = spec.runs[0]
    assert set(run.config) == {"model", "task", "train", "analysis"}
    assert run.config["model"] == ModelConfig(d_model=16, n_heads=1, dropout=0.1, seed=0).to_dict()
    # fields added after the first sweeps are left out of the hashed config at the value their absence
    # implies (dropout 0.0, repeat_sources (1,)), so adding a field never changes an existing run's id
    task = TaskConfig(repeat_ratio=0.3).to_dict()
    assert run.config["task"] == {k: v for k, v in task.items() if k != "repeat_sources"}
    plain = SweepSpec.from_dict({**tiny, "fixed": {**tiny["fixed"], "dropout": 0.0}}).runs[0]
    assert "dropout" not in plain.config["model"] and plain.run_id != run.run_id
    assert run.run_id == run_id_of(run.config) and len(run.run_id) == 16
    int(run.run_id, 16)
    # the same config spelled differently (defaults made explicit, axis order)
    # names the same run
    other = {"grid": {"seed": [0, 1], "n_heads": [2, 1]},
             "fixed": {**tiny["fixed"], "repeat_ratio": 0.3, "n_layers": 1, "batch_size": 128, "early_stop": None},
             "analysis": tiny["analysis"]}
    assert {r.run_id for r in SweepSpec.from_dict(other).runs} == {r.run_id for r in spec.runs}
    # anything that changes results changes the id
    changed = {**tiny, "fixed": {**tiny["fixed"], "lr": 1e-3}}
    assert not {r.run_id for r in SweepSpec.from_dict(changed).runs} & {r.run_id for r in spec.runs}


def test_seed_seeds_model_and_data(tiny):
    runs = SweepSpec.from_dict(tiny).runs
    seeds = [(r.configs()[0].seed, r.configs()[2].seed) for r in runs]
    assert seeds == [(0, 0), (1, 1), (0, 0), (1, 1)]
    assert TrainConfig.from_dict(runs[0].config["train"]).test_size == 300


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"grid": {"d_modle": [16]}}, r"unknown key\(s\) \['d_modle'\] in \[grid\]; allowed keys: \[.*'d_model'"),
        ({"fixed": {"colour": 1}}, r"unknown key\(s\) \['colour'\] in \[fixed\]"),
        ({"grid": {"seed": []}}, r"\[grid\] 'seed' is an empty axis"),
        ({"grid": {"seed": 3}}, r"\[grid\] 'seed' must be a list of values, got 3 \(scalars go in \[fixed\]\)"),
        ({"grid": {"seed": [0]}, "fixed": {"seed": 1}}, r"\['seed'\] are both in \[grid\] and \[fixed\]"),
        ({"grid": {"d_model": [16, 12], "n_heads": [5]}},
         r"invalid run \(d_model=16, n_heads=5\): d_model=16 is not divisible by n_heads=5"),
        ({"fixed": {"repeat_ratio": 1.5}}, r"invalid run \(the fixed values\): repeat_ratio must be in \[0, 1\]"),
        ({"fixed": {"epochs": 0}}, r"epochs must be > 0, got 0"),
        ({"grids": {}}, r"unknown spec section\(s\) \['grids'\]"),
        ({"analysis": {"n_boot": 5}}, r"\[analysis\] n_boot must be >= 10, got 5"),
        ({}, r"the spec has no \[grid\] or \[fixed\] values"),
        ({"grid": {}, "analysis": {"n": 100}}, r"the spec has no \[grid\] or \[fixed\] values"),
        ({"fixed": {"checkpoint_dir": "x"}}, r"unknown key\(s\) \['checkpoint_dir'\]"),
    ],
)
def test_bad_specs_are_refused_before_anything_starts(tmp_path, spec, message):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        run_sweep(spec, out, backend="serial", progress=False)
    assert not out.exists()


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid\nseed = [0]")
    with pytest.raises(ValueError, match="is not valid TOML"):
        load_spec(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(TypeError, match="spec"):  # beartype's message under the test hook, ours without
        load_spec(3)


def test_bad_arguments_are_refused(tmp_path, tiny):
    with pytest.raises(ValueError, match="backend must be one of"):
        run_sweep(tiny, tmp_path / "a", backend="slurm")
    with pytest.raises(ValueError, match="workers must be a positive int or None, got 0"):
        run_sweep(tiny, tmp_path / "a", workers=0)
    with pytest.raises(ValueError, match="address is for the ray backend only"):
        run_sweep(tiny, tmp_path / "a", address="10.0.0.1:6379")
    assert not (tmp_path / "a").exists()


def test_allowed_keys_follow_the_config_dataclasses():
    keys = allowed_keys()
    for key in ("d_model", "n_heads", "n_layers", "dropout", "d_head", "repeat_ratio", "epochs", "samples",
                "batch_size", "lr", "early_stop", "seed", "test_size"):
        assert key in keys
    for key in ("samples_per_epoch", "early_stop_patience", "checkpoint_every", "V_task"):
        assert key not in keys


def test_int_and_float_spellings_name_the_same_run(tiny):
    as_float = {**tiny, "fixed": {**tiny["fixed"], "dropout": 0.0, "lr": 0.003}}
    as_int = {**tiny, "fixed": {**tiny["fixed"], "dropout": 0, "lr": 3e-3}}
    assert [r.run_id for r in SweepSpec.from_dict(as_float).runs] == [r.run_id for r in SweepSpec.from_dict(as_int).runs]


def test_cli_refuses_a_bad_spec(tmp_path, capsys):
    from perm_circuits.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text("[grid]\nd_model = [12]\nn_heads = [5]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "invalid run (d_model=12, n_heads=5): d_model=12 is not divisible by n_heads=5" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_ray_is_a_clear_error(tmp_path, tiny, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[ray\]"'):
        run_sweep(tiny, tmp_path / "out", backend="ray")
    assert not (tmp_path / "out").exists()


def test_repeat_sources_is_a_list_valued_axis():
    spec = SweepSpec.from_dict({"grid": {"repeat_sources": [[1], [1, 2, 3, 4]]}, "fixed": {"repeat_ratio": 0.3}})
    tasks = [run.configs()[1] for run in spec.runs]
    assert [t.repeat_sources for t in tasks] == [(1,), (1, 2, 3, 4)]
    # the default (1,) hashes like a spec that never names it: old sweeps keep their run ids
    plain = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3}})
    assert spec.runs[0].run_id == plain.runs[0].run_id != spec.runs[1].run_id
    from perm_circuits.sweep.run import config_columns

    cells = [config_columns(run.run_id, run.config)["repeat_sources"] for run in spec.runs]
    assert cells == ["1", "1,2,3,4"]


@pytest.mark.parametrize("value", [3, ["1"], [1.5], [True]])
def test_repeat_sources_values_must_be_int_lists(value):
    with pytest.raises(ValueError, match=r"'repeat_sources' must be a list of ints"):
        SweepSpec.from_dict({"grid": {"repeat_sources": [value]}})
    with pytest.raises(ValueError, match=r"'repeat_sources' must be a list of ints"):
        SweepSpec.from_dict({"fixed": {"repeat_sources": value}})


def test_a_bad_source_list_is_refused_with_the_task_message():
    with pytest.raises(ValueError, match=r"repeat_sources must be in 1\.\.4"):
        SweepSpec.from_dict({"grid": {"repeat_sources": [[1], [5]]}})


def test_analysis_roles_and_exhaustive_recall_options():
    base = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3}})
    same = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3}, "analysis": {"roles": 1}})
    assert base.runs[0].run_id == same.runs[0].run_id  # the default is not hashed: old run ids hold
    lean = SweepSpec.from_dict({"fixed": {"repeat_ratio": 0.3}, "analysis": {"roles": 0, "recall_n": 0}})
    assert lean.runs[0].run_id != base.runs[0].run_id
    assert lean.runs[0].config["analysis"]["roles"] == 0 and lean.runs[0].config["analysis"]["recall_n"] == 0
    with pytest.raises(ValueError, match=r"\[analysis\] roles must be 0 \(skip head_roles\) or 1, got 2"):
        SweepSpec.from_dict({"analysis": {"roles": 2}})
    with pytest.raises(ValueError, match=r"\[analysis\] recall_n must be >= 0, got -1"):
        SweepSpec.from_dict({"analysis": {"recall_n": -1}})


def test_device_joins_the_run_id_only_off_the_cpu(tiny):
    from perm_circuits.sweep import SweepSpec
    from perm_circuits.sweep.run import config_columns

    plain = SweepSpec.from_dict(tiny).runs
    on_cpu = SweepSpec.from_dict({**tiny, "fixed": {**tiny["fixed"], "device": "cpu"}}).runs
    on_gpu = SweepSpec.from_dict({**tiny, "fixed": {**tiny["fixed"], "device": "cuda"}}).runs
    assert [r.run_id for r in plain] == [r.run_id for r in on_cpu]
    assert not {r.run_id for r in plain} & {r.run_id for r in on_gpu}
    assert all(r.config["device"] == "cuda" for r in on_gpu) and all("device" not in r.config for r in on_cpu)
    assert config_columns(on_gpu[0].run_id, on_gpu[0].config)["device"] == "cuda"
    assert "device" not in config_columns(plain[0].run_id, plain[0].config)
    import pytest

    with pytest.raises(ValueError, match="device must be"):
        SweepSpec.from_dict({**tiny, "fixed": {**tiny["fixed"], "device": 3}})
    for bogus in ("bogus", "cuda:x"):  # refused with the spec, not stored as failed runs
        with pytest.raises(ValueError, match=f"device must be a torch device name .*got '{bogus}'"):
            SweepSpec.from_dict({**tiny, "fixed": {**tiny["fixed"], "device": bogus}})


def test_a_binary_spec_is_refused_naming_the_file(tmp_path, capsys):
    from perm_circuits.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_bytes(b"\x00\x01binary\xff\xfe")
    with pytest.raises(ValueError, match=r"sweep spec '.*spec\.toml' is not a UTF-8 text file"):
        SweepSpec.from_toml(spec)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "spec.toml" in err and "UTF-8" in err and len(err.splitlines()) == 1
