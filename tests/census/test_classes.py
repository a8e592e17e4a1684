"""The class rule of perm_circuits.census.classes on hand-made fingerprints."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perm_circuits.census import canonical_circuit, classify, mechanism_class, wilson_interval


def record(elim: str, recall: str, dup: str = "-", how: str = "mean", ref: str = "test") -> dict:
    return {f"circuit_elimination_{how}_{ref}": elim, f"circuit_recall_{how}_{ref}": recall, "duplicate_heads": dup}


@pytest.mark.parametrize(("elim", "recall", "dup", "name", "key"), [
    ("L0H1+L0MLP", "L0H0+L0H1+L0MLP", "L0H0", "duplicate-gated", "E[L0:1H+MLP] R[L0:2H+MLP] dup:R"),
    ("L0H0+L0H1+L0MLP", "L0H0+L0H1+L0MLP", "L0H0", "duplicate-gated", "E[L0:2H+MLP] R[L0:2H+MLP] dup:RE"),
    ("L0H0+L0MLP", "L0H0+L0MLP", "-", "shared-head", "E[L0:1H+MLP] R[L0:1H+MLP]"),
    ("L1H1", "L0H0+L1H0", "-", "separate-heads", "E[L1:1H] R[L0:1H L1:1H]"),
    ("L0H1+L0MLP", "L0H0+L0MLP", "L0H1", "separate-heads", "E[L0:1H+MLP] R[L0:1H+MLP] dup:E"),
    ("L0H0+L0MLP", "L0MLP", "-", "attention-free recall", "E[L0:1H+MLP] R[L0:0H+MLP]"),
    ("L0H0+L0MLP", "absent", "-", "no recall", "E[L0:1H+MLP] R[-]"),
    ("absent", "absent", "-", "no skill", "E[-] R[-]"),
])
def test_the_rule(elim, recall, dup, name, key):
    got = mechanism_class(record(elim, recall, dup))
    assert (got.name, got.key) == (name, key)
    assert got.description.endswith(f"({key})")


def test_heads_of_one_layer_are_interchangeable_between_seeds():
    a = mechanism_class(record("L0H1+L0MLP", "L0H0+L0H1+L0MLP", "L0H0"))
    b = mechanism_class(record("L0H0+L0MLP", "L0H0+L0H1+L0MLP", "L0H1"))
    assert a == b
    assert canonical_circuit("L0H1+L0MLP") == canonical_circuit("L0MLP+L0H0") == "L0:1H+MLP"
    assert canonical_circuit("-") == "-"


def test_the_mode_and_reference_are_arguments():
    row = {**record("L0H0+L0H1+L0MLP", "L0H1+L0MLP", "L0H0", "resample", "skill"),
           **record("L0H1+L0MLP", "L0H0+L0H1+L0MLP", "L0H0")}
    assert mechanism_class(row, how="resample", reference="skill").name == "shared-head"
    assert mechanism_class(row).name == "duplicate-gated"
    with pytest.raises(ValueError, match="circuit_elimination_zero_test"):
        mechanism_class(row, how="zero")
    with pytest.raises(ValueError, match="not a component: 'X'"):
        mechanism_class(record("X", "L0H0"))


def test_classify_adds_the_columns():
    frame = pd.DataFrame([record("L0H0+L0MLP", "L0H0+L0MLP"), record("L0H0+L0MLP", "absent")])
    out = classify(frame)
    assert list(out["class"]) == ["shared-head", "no recall"]
    assert list(out["class_key"]) == ["E[L0:1H+MLP] R[L0:1H+MLP]", "E[L0:1H+MLP] R[-]"]
    assert "class" not in frame  # a copy


def test_wilson_interval():
    low, high = wilson_interval(1, 5)  # the example: 1/5 is 4-62% at 95%
    assert (round(low, 3), round(high, 3)) == (0.036, 0.624)
    assert wilson_interval(0, 20)[0] == 0.0 and round(wilson_interval(0, 20)[1], 3) == 0.161
    assert wilson_interval(20, 20)[1] == 1.0
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(3, 2)
