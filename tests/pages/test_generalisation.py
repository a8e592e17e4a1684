"""The generalisation section: counts and tables from a hand-built sweep table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perm_circuits.pages.generalisation import (
    generalisation_markdown,
    generalisation_numbers,
    generalises,
    load_generalisation_table,
)


def _row(n_layers, d_model, n_heads, sources, seed, recall, status="done"):
    row = {"run_id": f"r{n_layers}{d_model}{n_heads}{sources}{seed}", "status": status, "n_layers": n_layers,
           "d_model": d_model, "n_heads": n_heads, "repeat_sources": sources, "seed": seed,
           "recall_accuracy": recall[0], "elimination_accuracy": 1.0, "epochs": 25, "samples": 40000}
    row.update({f"recall_gen_x{k}": value for k, value in enumerate(recall, start=1)})
    return row


@pytest.fixture
def frame():
    return pd.DataFrame([
        _row(1, 16, 1, "1", 0, (1.0, 0.0, 0.0, 0.0)),  # the x1 shortcut
        _row(1, 16, 1, "1", 1, (0.2, 0.0, 0.0, 0.0)),  # nothing
        _row(2, 16, 1, "1,2,3,4", 0, (1.0, 0.995, 0.99, 1.0)),  # generalises (0.99 counts)
        _row(2, 16, 1, "1,2,3,4", 1, (1.0, 1.0, 0.989, 1.0)),  # just misses x3
        _row(2, 32, 2, "1,2,3,4", 0, (1.0, 1.0, 1.0, 1.0)),
        _row(2, 32, 2, "1,2,3,4", 1, (math.nan,) * 4, status="failed"),
    ])


def test_generalises_needs_every_k(frame):
    assert generalises(frame).tolist() == [False, False, True, False, True, False]


def test_numbers_count_seeds_per_configuration(frame):
    numbers = generalisation_numbers(frame)
    assert numbers["generalisation.d16h1l1.x1.shortcut"] == 1
    assert numbers["generalisation.d16h1l1.x1.generalise"] == 0
    assert numbers["generalisation.d16h1l2.x1234.generalise"] == 1
    assert numbers["generalisation.d16h1l2.x1234.done"] == 2
    assert numbers["generalisation.d16h1l2.x1234.x3"] == pytest.approx((0.99 + 0.989) / 2)
    assert numbers["generalisation.d32h2l2.x1234.done"] == 1  # the failed run is not counted as done
    assert numbers["generalisation.l2.x1234.generalise"] == 2
    assert numbers["generalisation.generalise"] == 2
    assert numbers["generalisation.smallest"] == "d16h1l2"
    assert (numbers["generalisation.smallest.generalise"], numbers["generalisation.smallest.done"]) == (1, 2)


def test_no_generalising_run_says_none(frame):
    assert generalisation_numbers(frame.iloc[:2])["generalisation.smallest"] == "none"


def test_markdown_rows(frame):
    lines = generalisation_markdown(frame).splitlines()
    assert lines[0].startswith("6 runs (5 done, 1 failed)")
    body = [line for line in lines if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert body[0].startswith("| 1 | 16 | 1 | x1 | 2 | 0,1 | 0/2 | 1/2 | 0.600 [0.200, 1.000]")
    assert body[1].startswith("| 2 | 16 | 1 | x1, x2, x3, x4 | 2 | 0,1 | 1/2 | 0/2 |")
    assert body[2].startswith("| 2 | 32 | 2 | x1, x2, x3, x4 | 1 (1 failed) | 0,1 | 1/1 |")


def test_bad_tables_are_refused(frame, tmp_path):
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['repeat_sources'\]"):
        generalisation_numbers(frame.drop(columns="repeat_sources"))
    with pytest.raises(ValueError, match="no recall_gen_x<k> columns"):
        generalisation_markdown(frame.drop(columns=[f"recall_gen_x{k}" for k in range(1, 5)]))
    with pytest.raises(TypeError, match="must be a pandas DataFrame"):
        generalisation_numbers([1])
    with pytest.raises(FileNotFoundError, match="no sweep table"):
        load_generalisation_table(tmp_path / "absent.csv")
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    assert load_generalisation_table(path)["repeat_sources"].tolist()[0] == "1"  # text, not the int 1


def test_dynamics_numbers_on_a_hand_built_record():
    from perm_circuits.dynamics import DynamicsRecord
    from perm_circuits.pages.generalisation import dynamics_numbers

    steps = (1, 10, 100, 1000)
    # early rises at step 10, late at 1000, recall (the target) at 100; flat never crosses
    values = tuple(zip((0.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 1.0), (0.2, 0.2, 1.0, 1.0), (0.5, 0.5, 0.5, 0.5)))
    record = DynamicsRecord(steps, ("early", "late", "recall_x2_accuracy", "flat"), values, {})
    numbers = dynamics_numbers({0: record, 3: record}, {"early": "early", "late": "late", "flat": "flat"})
    assert numbers["any.dynamics.seed_list"] == "0,3" and numbers["any.dynamics.seeds"] == 2
    assert numbers["any.dynamics.seed3.early"] == 10 and numbers["any.dynamics.seed3.late"] == 1000
    assert numbers["any.dynamics.seed0.target"] == 100 and math.isnan(numbers["any.dynamics.seed0.flat"])
    assert numbers["any.dynamics.early.before_target"] == 2
    assert numbers["any.dynamics.late.before_target"] == 0 and numbers["any.dynamics.flat.before_target"] == 0
    with pytest.raises(ValueError, match="records is empty"):
        dynamics_numbers({}, {"early": "early"})


def test_any_model_numbers_on_the_hand_built_induction_circuit():
    """The weight-built circuit generalises exactly, the story holds, and zero-ablating either
    of its heads removes recall of every x_k while elimination (L1H1) stays exact."""
    from perm_circuits import build_induction_model
    from perm_circuits.pages.generalisation import any_model_numbers

    numbers = any_model_numbers(build_induction_model(), n_pair=200, n_boot=20, hows=("zero",))
    assert [numbers[f"any.recall.x{k}"] for k in range(1, 5)] == [1.0] * 4 and numbers["any.elimination"] == 1.0
    assert numbers["any.recall.n_per_source"] == 24 * 120
    assert numbers["any.story.holds"] == "holds" and numbers["any.story.missing"] == "nothing"
    assert (numbers["any.story.previous_head"], numbers["any.story.induction_head"]) == ("L0H0", "L1H0")
    assert numbers["any.story.path_k"] == pytest.approx(1.0) and numbers["any.story.path_q"] == 0.0
    for role in ("previous", "induction"):
        assert numbers[f"any.ablate.zero.{role}.recall.max"] == 0.0
        assert numbers[f"any.ablate.zero.{role}.elimination"] == 1.0


def test_smallest_is_by_parameters_not_by_layers(frame):
    from perm_circuits.pages.generalisation import parameters

    assert parameters(2, 16, 1) == 2 * (4 * 16 * 16 + 2 * 16 * 32) == 4096
    assert parameters(1, 32, 2) == 4 * 32 * 2 * 16 + 2 * 32 * 64 == 8192
    one_layer = pd.DataFrame([_row(1, 32, 2, "1,2,3,4", 0, (1.0,) * 4), _row(2, 16, 1, "1,2,3,4", 0, (1.0,) * 4)])
    numbers = generalisation_numbers(one_layer)
    assert numbers["generalisation.smallest"] == "d16h1l2" and numbers["generalisation.smallest.parameters"] == 4096


def test_necessary_components_are_counted_over_generalising_seeds(frame):
    frame = frame.assign(abl_mean_L1H0_recall=[0.9, 0.9, 0.2, 0.1, 0.6, math.nan], story_holds=[math.nan] * 2 + ["False", "True", "False", "False"])
    numbers = generalisation_numbers(frame)
    assert numbers["generalisation.d16h1l2.x1234.necessary.mean.L1H0"] == 1  # seed 1 does not generalise
    assert numbers["generalisation.d32h2l2.x1234.necessary.mean.L1H0"] == 0
    assert (numbers["generalisation.story.runs"], numbers["generalisation.story.holds"]) == (3, 1)


def test_split_heads_of_one_layer_two_head_generalisers():
    rows = [_row(1, 32, 2, "1,2,3,4", seed, (1.0,) * 4) for seed in (0, 1)]
    frame = pd.DataFrame(rows).assign(
        att_L0H0_xk=[0.8, 0.0], att_L0H0_yk=[0.0, 0.25], att_L0H0_other_y=[0.0, 0.6],
        att_L0H1_xk=[0.0, 0.6], att_L0H1_yk=[0.25, 0.0], att_L0H1_other_y=[0.74, 0.0],
    )
    numbers = generalisation_numbers(frame)
    key = "generalisation.d32h2l1.x1234"
    assert numbers[f"{key}.split_heads"] == 1  # seed 1's answer head puts only 0.85 on the y's (< 0.9)
    assert numbers[f"{key}.match_xk.min"] == 0.6 and numbers[f"{key}.match_xk.max"] == 0.8
    assert numbers[f"{key}.y_mass.min"] == pytest.approx(0.85)
    assert numbers[f"{key}.y_head_yk.min"] == 0.25
