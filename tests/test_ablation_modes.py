"""The ablation-mode registry: every mode list (the study's, any task's, the edges', the benchmark's,
the CLI's help) is read from it."""

from __future__ import annotations

import pytest

from perm_circuits import ablation_modes as am


def test_mode_lists_come_from_the_registry():
    from perm_circuits.analysis import ANY_TASK_HOWS, HOWS, TASK_HOWS
    from perm_circuits.discovery import HOWS as EDGE_HOWS
    from perm_circuits.discovery.benchmark import DEFAULT_HOWS

    assert HOWS == am.modes("study") == ("zero", "mean", "resample", "binding_free", "optimal")
    assert ANY_TASK_HOWS == am.modes("task") == ("zero", "mean", "resample", "optimal")
    assert TASK_HOWS == am.modes("task", default=True) == ("zero", "mean", "resample")
    assert EDGE_HOWS == am.modes("edges") == ("zero", "mean", "resample", "optimal")
    assert DEFAULT_HOWS == am.modes("edges", default=True) == ("zero", "mean", "resample")
    assert [m.key for m in am.ablation_modes()] == list(HOWS)
    assert am.mode_help("edges", "resample") == "zero, mean, resample (default) or optimal"


def test_a_registered_mode_joins_its_scopes():
    am.register_mode("toy_mode", "a toy mode", ("edges",), ("edges",))
    try:
        assert am.modes("edges")[-1] == "toy_mode" and "toy_mode" in am.modes("edges", default=True)
        assert "toy_mode" not in am.modes("study") + am.modes("task")
        assert am.get_mode("toy_mode").description == "a toy mode"
    finally:
        del am._MODES["toy_mode"]
    assert "toy_mode" not in am.modes("edges")


@pytest.mark.parametrize("args, error", [
    (("zero", "again", ("edges",)), ValueError),
    (("New", "x", ("edges",)), ValueError),
    (("new_mode", "x", "edges"), TypeError),
    (("new_mode", "x", ("graph",)), ValueError),
    (("new_mode", "x", ("edges",), ("task",)), ValueError),
    (("new_mode", "", ("edges",)), TypeError),
])
def test_register_mode_refuses(args, error):
    with pytest.raises(error):
        am.register_mode(*args)
    assert "new_mode" not in [m.key for m in am.ablation_modes()]


def test_unknown_scope_and_mode():
    with pytest.raises(ValueError, match="scope must be one of"):
        am.modes("graph")
    with pytest.raises(ValueError, match=r"ablation mode must be one of .*got 'nope'"):
        am.get_mode("nope")
