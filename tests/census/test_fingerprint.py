"""mechanism_fingerprint on models whose mechanism is known by construction, and bit-identical reruns."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from perm_circuits.census import Fingerprint, circuit_components, mechanism_class, mechanism_fingerprint, node_oracle

ROOT = Path(__file__).resolve().parents[2]


def test_the_induction_model_is_what_its_construction_says(induction):
    _, fp = induction
    d = fp.to_dict()
    assert isinstance(fp, Fingerprint) and fp.model == "induction"
    assert d["elimination_accuracy"] == 1.0 and d["recall_accuracy"] == 1.0
    # recall: previous-token head L0H0 -> induction head L1H0, no MLP (its weights are zero)
    for how in ("mean", "resample"):
        assert d[f"circuit_recall_{how}_skill"] == "L0H0+L1H0"
        assert d[f"faith_recall_{how}_skill"] >= 0.9
    # elimination within non-repeated rows: the elimination head L1H1 alone
    assert d["circuit_elimination_mean_skill"] == "L1H1"
    # the induction head attends to the repeated x's *answer* y_k (3/4 more than its baseline), not to x_k
    assert d["L1H0_source_y_shift"] == pytest.approx(0.75, abs=1e-3)
    assert abs(d["L1H0_duplicate_score"]) < 1e-6 and d["duplicate_heads"] == "-"
    assert mechanism_class(d, how="mean", reference="skill").name == "separate-heads"
    assert fp.to_dataframe().shape[0] == 1


def test_node_oracle_on_the_bare_induction_model():
    from perm_circuits.handbuilt import build_induction_model
    from perm_circuits.discovery.skills import skill_batches
    from perm_circuits.tasks.permutation import PermutationTask

    model = build_induction_model(eliminate=False)
    recall = skill_batches(PermutationTask(model.task_config).test_set(300, seed=5))["recall"]
    circuit, faith = node_oracle(model, recall, how="mean")
    assert circuit == "L0H0+L1H0" and faith == pytest.approx(1.0, abs=1e-3)
    assert node_oracle(model, recall, how="zero", target=2.0)[0] == "none"  # no subset reaches faithfulness 2


def test_circuit_components():
    assert circuit_components(["embed->L0H0.q", "L0H0->L0MLP", "L0MLP->logits"]) == "L0H0+L0MLP"
    assert circuit_components([]) == "-"


def test_bad_arguments_are_refused_before_work():
    with pytest.raises(ValueError, match="unknown ablation modes"):
        mechanism_fingerprint(None, hows=("zero", "nope"))
    with pytest.raises(ValueError, match="n"):
        mechanism_fingerprint(None, n=1)


def _census_script():
    spec = importlib.util.spec_from_file_location("census_train", ROOT / "scripts" / "census_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a)


@pytest.mark.slow
def test_two_census_rows_rerun_from_scratch_give_the_same_fingerprint(tmp_path):
    from perm_circuits.models import load_checkpoint

    census = _census_script()
    records = []
    for name in ("a", "b"):
        census.run("d16h1", 3, tmp_path / name, progress=False, epochs=2, samples=3000)
        checkpoint = load_checkpoint(tmp_path / name / "d16h1_s3" / "checkpoints" / "epoch_0002")
        torch.manual_seed(0)
        records.append(mechanism_fingerprint(checkpoint.model, n=300, n_pair=50, n_boot=10, hows=("mean",),
                                             name="d16h1_s3").to_dict())
    assert _same(*records)
    kept = sorted(p.name for p in (tmp_path / "a" / "d16h1_s3" / "checkpoints").iterdir())
    assert kept == ["epoch_0001", "epoch_0002"]
    assert (tmp_path / "a" / "d16h1_s3" / "done.json").is_file()


def test_task_must_be_the_permutation_task():
    with pytest.raises(TypeError, match="permutation task"):
        mechanism_fingerprint(None, task="bigram")
