"""The results pages are generated from committed tables, and the tables from the shipped models.

* ``docs/results.md`` and the README's results section equal, byte for byte, what
  ``scripts/build_results.py`` renders from ``results/*.json`` and ``docs/templates/`` (so a number
  edited by hand in the docs fails here);
* ``results/shipped_numbers.json`` equals a fresh ``shipped_numbers()`` (all of it: every model, every
  mode, the same sample sizes and seeds as the script) to the printed precision;
* the templates quote no hand-typed result: numbers in their prose are only the listed constants;
* the capacity section renders from any sweep table (tested on ``tests/data/capacity_tiny.csv``).
"""

from __future__ import annotations

import math
import re
import runpy
import shutil
from pathlib import Path

import pandas as pd
import pytest

from perm_circuits.pages import (
    MODES,
    build_pages,
    capacity_markdown,
    capacity_numbers,
    format_value,
    load_capacity_table,
    read_numbers,
    render,
    replace_section,
    shipped_numbers,
    template_keys,
    verdict_modes,
)
from perm_circuits.pages.build import (
    NUMBERS,
    README_BEGIN,
    README_END,
    README_TEMPLATE,
    RESULTS_TEMPLATE,
    circuit_table,
    full_grid_numbers,
    mode_table,
)

pytestmark = pytest.mark.slow  # its shared fixture takes seconds (tests/README.md)

ROOT = Path(__file__).resolve().parent.parent
TINY = Path(__file__).resolve().parent / "data" / "capacity_tiny.csv"


@pytest.fixture(scope="module")
def committed():
    return read_numbers(ROOT / NUMBERS)


@pytest.fixture(scope="module")
def fresh():
    return shipped_numbers()


# ----------------------------------------------------------------------------- the committed pages


def test_committed_pages_are_the_rendered_tables():
    pages = build_pages(ROOT)
    assert set(map(str, pages)) == {"docs/results.md", "docs/general_recall.md", "README.md", "docs/figures/phase_cut.svg",
                                    "docs/figures/phase_full.svg", "docs/figures/time_to_recall.svg",
                                    "docs/figures/study_dynamics.svg", "docs/figures/attention_d16h1_L0H0.svg",
                                    "docs/figures/attention_d32h1_L0H0.svg", "docs/figures/attention_d32h2_L0H0.svg",
                                    "docs/figures/attention_d32h2_L0H1.svg", "docs/figures/generalisation.svg",
                                    "docs/figures/birth_probes.svg", "docs/figures/birth_positions.svg",
                                    "docs/figures/forner_quick.svg", "docs/figures/forner_full.svg",
                                    "docs/figures/factual_capacity.svg", "docs/figures/factual_trajectory.svg"}
    for path, text in pages.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, (
            f"{path} differs from what `python scripts/build_results.py` renders: edit "
            "docs/templates/ or results/, not the generated page"
        )


def test_a_number_edited_by_hand_in_the_docs_is_caught(committed):
    page = (ROOT / "docs/results.md").read_text(encoding="utf-8")
    quoted = format_value(committed["d32h2.mean.L0MLP.elimination_accuracy"], "pct1")
    assert quoted == "13.6%" and f"drops elimination to {quoted}" in page
    edited = page.replace(f"drops elimination to {quoted}", "drops elimination to 21%")
    assert edited != build_pages(ROOT)[Path("docs/results.md")]
    # and the page follows the table: another value there, another page
    changed = build_pages(ROOT, {**committed, "d32h2.mean.L0MLP.elimination_accuracy": 0.5})[Path("docs/results.md")]
    assert "drops elimination to 50.0%" in changed and "drops elimination to 13.6%" not in changed


def test_the_slips_of_issue_11_are_fixed_by_construction(committed):
    page = (ROOT / "docs/results.md").read_text(encoding="utf-8")
    # the MLP: elimination and recall are quoted separately, under a named mode
    assert "Mean-ablating it drops elimination to 13.6% and recall to 21.1%" in page
    # L0H0's patching interval is the tool's (head_roles defaults: 2000 pairs, 1000 resamples)
    assert "restores 0.94 (95% CI [0.93, 0.94]) of the clean logit difference" in page
    # before the MLP: both conventions, each named
    assert "argmax over the whole vocabulary" in page and "right 0.0%\n  (elimination) and 0.3% (recall)" in page
    assert "value tokens 1-5 only" in page and "30.3% and 15.3%" in page
    assert committed["d32h2.before_mlp.elimination.values"] == pytest.approx(0.303, abs=0.001)
    assert committed["d32h2.before_mlp.recall.vocab"] == pytest.approx(0.003, abs=0.001)


def test_every_placeholder_names_a_number_and_the_readme_section_sits_between_markers(committed):
    quotes = read_numbers(ROOT / "results/study_quotes.json")
    quotes.update(capacity_numbers(load_capacity_table(ROOT / "results" / "capacity_sweep.csv")))
    quotes.update(full_grid_numbers(ROOT))
    for template in (RESULTS_TEMPLATE, README_TEMPLATE):
        keys = template_keys((ROOT / template).read_text(encoding="utf-8"))
        assert len(keys) > 20
        assert [k for k in keys if k not in committed and k not in quotes] == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(README_BEGIN) == 1 and readme.count(README_END) == 1
    assert readme.index("## What the shipped models show") < readme.index(README_BEGIN)


# Numbers allowed in the templates' prose (outside placeholders and code): constants of the task,
# the study's thresholds, and section numbers -- not results.
ALLOWED = {"0.03", "0.1", "0.99", "1-4", "1-2", "3-4", "1-5", "x2-x4", "99%", "95%", "4.1"}


@pytest.mark.parametrize("template", [RESULTS_TEMPLATE, README_TEMPLATE])
def test_templates_quote_no_hand_typed_result(template):
    text = (ROOT / template).read_text(encoding="utf-8")
    prose = re.sub(r"\{\{.*?\}\}", " ", text)
    prose = re.sub(r"`[^`]*`", " ", prose)
    found = set(re.findall(r"(?<![\w.])(?:x?\d+(?:[.-]\d+)+|\d+%)", prose))
    assert found - ALLOWED == set(), f"hand-typed numbers in {template}: {sorted(found - ALLOWED)}"


# ----------------------------------------------------------------------------- the committed table


def test_committed_numbers_equal_a_fresh_measurement(committed, fresh):
    """Every number, recomputed from the shipped models with the script's settings (about 30 s)."""
    assert set(fresh) == set(committed)
    assert fresh["settings.modes"] == ",".join(MODES)
    for key, value in fresh.items():
        if isinstance(value, str):
            assert committed[key] == value, key
        elif math.isnan(value):
            assert math.isnan(committed[key]), key
        else:
            assert committed[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    # to the printed precision: the pages rendered from the fresh numbers are the committed pages
    for path, text in build_pages(ROOT, fresh).items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, path


def test_the_l0h0_case_numbers_explain_the_disagreement(committed):
    n = committed
    assert n["d32h2.zero.L0H0.recall_accuracy"] > 0.9 and n["d32h2.zero.L0H0.elimination_accuracy"] < 0.1
    assert n["d32h2.mean.L0H0.recall_accuracy"] < 0.02 and n["d32h2.mean.L0H0.elimination_accuracy"] > 0.99
    case = "d32h2.L0H0_case."
    # zero is further from the mean output than any real output's typical deviation, and no output is near 0
    assert n[case + "mean_norm"] > n[case + "deviation_norm"] and n[case + "min_norm"] > 1.0
    # on the new -> repeated axis: the mean sits on the new side of the midpoint, zero on the repeated side
    assert n[case + "axis.new"] < n[case + "axis.mean"] < n[case + "axis.midpoint"] < 0 < n[case + "axis.repeated"]
    assert n[case + "axis.zero_shift_cosine"] > 0.9  # zero ablation moves the output along new -> repeated
    # the mean output barely acts directly; the MLP's output flips sign between the two ablations
    assert abs(n[case + "mean.dla.recall.L0H0"]) < 0.1
    assert n[case + "zero.dla.recall.L0mlp"] > 3 and n[case + "mean.dla.recall.L0mlp"] < -3
    assert n["d32h2.roles.zero.L0H0"] != n["d32h2.roles.mean.L0H0"] and n["d32h2.roles.modes_agree"] == "differ"


# ----------------------------------------------------------------------------- the renderer


def test_render_formats_and_blocks():
    numbers = {"a": 0.93931, "b": 3, "c": "supported", "d": math.nan}
    text = "{{ a | pct1 }} {{ a | f2 }} {{a|pct0}} {{ b | int }} {{ c }} {{ d | f2 }}\n{{> table }}\nend\n"
    assert render(text, numbers, {"table": "| x |"}) == "93.9% 0.94 94% 3 supported n/a\n| x |\nend\n"
    assert render(text, numbers) == "93.9% 0.94 94% 3 supported n/a\nend\n"
    assert format_value(0.0032594, "pct1") == "0.3%" and format_value(-5.3054, "f2") == "-5.31"


def test_render_refuses_bad_input_before_writing():
    with pytest.raises(KeyError, match=r"'d32h2.mean.L0H0.recal_accuracy'.*near: \['d32h2.mean.L0H0.recall_accuracy'\]"):
        render("{{ d32h2.mean.L0H0.recal_accuracy | pct1 }}", {"d32h2.mean.L0H0.recall_accuracy": 0.0})
    with pytest.raises(ValueError, match=r"unknown format 'pct9' for 'a'"):
        render("{{ a | pct9 }}", {"a": 1.0})
    with pytest.raises(TypeError, match=r"'c' \(format 'f2'\) must be a number, got str 'supported'"):
        render("{{ c | f2 }}", {"c": "supported"})
    with pytest.raises(ValueError, match=r"format 'int' needs a whole number"):
        render("{{ a | int }}", {"a": 1.5})
    with pytest.raises(TypeError, match=r"numbers must be a mapping"):
        render("x", [("a", 1)])


def test_replace_section_needs_each_marker_once():
    text = "intro\n<!-- b -->\nold\n<!-- e -->\ntail\n"
    assert replace_section(text, "new\n", "<!-- b -->", "<!-- e -->") == "intro\n<!-- b -->\nnew\n<!-- e -->\ntail\n"
    with pytest.raises(ValueError, match=r"marker '<!-- x -->' exactly once, found it 0 times"):
        replace_section(text, "new", "<!-- x -->", "<!-- e -->")


def test_mode_table_takes_its_modes_from_the_table(committed):
    table = mode_table(committed, "d32h2")
    assert MODES == ("zero", "mean", "resample", "binding_free", "optimal")
    assert table.splitlines()[0].count("ablation:") == len(MODES)
    assert table.splitlines()[2] == (
        "| L0H0 | 3.2% / 96.8%, mixed | 100.0% / 0.0%, duplicate/recall | 67.9% / 29.3%, mixed "
        "| 100.0% / 100.0%, duplicate/recall | 78.8% / 20.3%, mixed | **mode-dependent** |"
    )
    assert table.splitlines()[3].endswith("| robust |")
    # one more mode in the numbers table -> one more column, with no code change
    extra = {**committed, "settings.modes": ",".join((*MODES, "shuffle"))}
    for component in ("L0H0", "L0H1", "L0MLP"):
        extra.update({f"d32h2.shuffle.{component}.elimination_accuracy": 1.0,
                      f"d32h2.shuffle.{component}.recall_accuracy": 1.0,
                      f"d32h2.roles.shuffle.{component}": "unused"})
    wider = mode_table(extra, "d32h2")
    assert "shuffle ablation: elimination / recall, role" in wider
    assert wider.splitlines()[4] == (
        "| L0MLP | 0.0% / 0.3%, needed for both | 13.6% / 21.1%, needed for both | 16.1% / 20.5%, needed for both "
        "| 22.8% / 23.4%, needed for both | 24.6% / 19.0%, needed for both "
        "| 100.0% / 100.0%, unused | **mode-dependent** |"
    )


def test_circuit_table_and_the_mode_verdict_numbers(committed):
    n = committed
    # the verdict's mode, its reason and its robustness come from head_roles, quoted in 4.1
    assert n["d32h2.verdict.how"] == "mean" and "Wang et al. 2022" in n["d32h2.verdict.how_reason"]
    assert n["d32h2.verdict.robust"] == "the same in every mode"
    assert n["d32h2.robust.L0H0"] == "mode-dependent" and n["d32h2.roles.robust_components"] == "L0H1 and L0MLP"
    assert n["d32h2.roles_by_mode.L0H0"] == "mixed under zero, resample and optimal; duplicate/recall under mean and binding_free"
    # the elimination circuit leaves L0H0 out and is faithful under mean ablation only with binding-free
    assert n["d32h2.circuit.elimination.nodes"] == "L0H1@last, L0MLP@last"
    assert n["d32h2.circuit.elimination.faithfulness_error"] <= n["settings.circuit_tolerance"]
    assert n["d32h2.circuit.elimination.zero.faithfulness"] < 0
    assert n["d32h2.circuit.elimination.faithful_modes"] == "mean and binding_free"
    assert n["d32h2.circuit.recall.completeness"] == 0 and n["d32h2.circuit.recall.faithfulness"] == 1
    table = circuit_table(n, "d32h2").splitlines()
    assert table[2].startswith("| elimination | L0H1@last, L0MLP@last | 1391 | 8.45 | 7.63 | 0.90 | 0.10 | 1.18 (0.14; exhaustive, 4 subsets) |")
    assert table[-2:] == ["| elimination | -0.44 | 0.90 | 0.34 | 1.00 | 0.16 |", "| recall | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 |"]
    assert table[5] == "| d32h2: faithfulness F(C)/F(M), outside ablated by | zero | mean | resample | binding_free | optimal |"
    page = (ROOT / "docs/results.md").read_text(encoding="utf-8")
    assert "\n".join(table) in page and "## 5. Proposed circuits (IOI criteria)" in page
    # section 4.1 quotes every mode for L0H0, and the verdict's mode and reason
    for how in MODES:
        row = f"| {how} | {format_value(n[f'd32h2.{how}.L0H0.elimination_accuracy'], 'pct1')} | "
        assert row + f"{format_value(n[f'd32h2.{how}.L0H0.recall_accuracy'], 'pct1')} | {n[f'd32h2.roles.{how}.L0H0']} |" in page
    assert "The verdict decides under mean ablation because mean ablation keeps every coordinate" in page
    assert "The overall verdict is\nthe same in every mode" in page
    with pytest.raises(KeyError, match="no circuits for 'd99h9'"):
        circuit_table(n, "d99h9")


# ----------------------------------------------------------------------------- the capacity section


def test_capacity_table_from_the_tiny_fixture():
    frame = load_capacity_table(TINY)
    assert verdict_modes(frame) == ["zero", "mean", "resample"]
    lines = capacity_markdown(frame).splitlines()
    assert lines[0].startswith("7 runs (6 done, 1 failed); recipe: epochs 50; samples 20000; batch_size 128;")
    assert lines[2] == (
        "| d_model | heads | dropout | runs done | seeds | learn recall (>= 0.99) | epoch recall >= 0.99: median [range] "
        "| elimination accuracy (mean) | verdict (zero ablation) | verdict (mean ablation) | verdict (resample ablation) |"
    )
    assert lines[4:] == [
        "| 8 | 1 | 0 | 2 (1 failed) | 0,1,2 | 1/2 | 12 [12, 12] (1 of 2 runs) | 0.992 | 2 fails | 2 fails | 2 fails |",
        "| 8 | 1 | 0.1 | 2 | 0,1 | 0/2 | never | 0.999 | 2 open | 2 fails | 2 open |",
        "| 16 | 2 | 0 | 2 | 0,1 | 2/2 | 6.5 [4, 9] | 1.000 | 2 fails | 1 holds, 1 fails | 2 fails |",
    ]


def test_capacity_modes_come_from_the_columns_and_bad_tables_are_refused():
    frame = load_capacity_table(TINY)
    wider = frame.assign(verdict_optimal=["holds"] * len(frame))
    assert verdict_modes(wider)[-1] == "optimal"
    assert capacity_markdown(wider).splitlines()[4].endswith("| 2 fails | 2 fails | 2 fails | 2 holds |")  # done runs only
    # a recipe setting that varies splits the rows instead of pooling them
    mixed = frame.assign(samples=[20000, 20000, 20000, 20000, 100000, 20000, 20000])
    lines = capacity_markdown(mixed).splitlines()
    assert lines[2].startswith("| d_model | heads | dropout | samples | runs done |")
    assert lines[5:7] == [
        "| 8 | 1 | 0.1 | 20000 | 1 | 0 | 0/1 | never | 0.998 | 1 open | 1 fails | 1 open |",
        "| 8 | 1 | 0.1 | 100000 | 1 | 1 | 0/1 | never | 1.000 | 1 open | 1 fails | 1 open |",
    ]
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['epoch_recall_99'\]"):
        capacity_markdown(frame.drop(columns="epoch_recall_99"))
    with pytest.raises(ValueError, match=r"status must be 'done' or 'failed', got \['running'\]"):
        capacity_markdown(frame.assign(status="running"))
    with pytest.raises(ValueError, match="has no rows"):
        capacity_markdown(frame.iloc[:0])
    with pytest.raises(FileNotFoundError, match="no sweep table at"):
        load_capacity_table(TINY.with_name("absent.csv"))


def test_the_capacity_section_renders_the_committed_sweep_table(tmp_path):
    table = load_capacity_table(ROOT / "results" / "capacity_sweep.csv")
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert capacity_markdown(table) in page
    assert page.index("### Across seeds: the capacity sweep") < page.index(capacity_markdown(table))
    # the prose's numbers are the table's: e.g. d32h2 without dropout learns recall in every seed
    numbers = capacity_numbers(table)
    assert (numbers["capacity.d32h2.drop0.learned"], numbers["capacity.d32h2.drop0.done"]) == (5, 5)
    assert "d32h1 in 3/5 and d32h2 in 5/5 (without dropout)" in page
    # without the committed table nothing is rendered (the section's numbers would be missing)
    for path in ("docs/templates", "results"):
        shutil.copytree(ROOT / path, tmp_path / path)
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "results" / "capacity_sweep.csv").unlink()
    with pytest.raises(FileNotFoundError, match="no sweep table at"):
        build_pages(tmp_path)


def test_the_script_checks_the_committed_pages(capsys):
    script = runpy.run_path(str(ROOT / "scripts" / "build_results.py"))
    assert script["main"](["--check"]) == 0
    assert capsys.readouterr().out.strip() == "up to date"


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    with pytest.raises(TypeError, match=r"models must be a non-empty sequence of shipped model names, got 'd32h2'"):
        shipped_numbers("d32h2")
    with pytest.raises(ValueError, match=r"unknown model\(s\) \['d99h9'\]; the study's shipped models: \['d16h1', 'd32h1', 'd32h2'\]"):
        shipped_numbers(["d32h2", "d99h9"])
    with pytest.raises(ValueError, match=r"is not the repository root: it has no docs/templates/results.md"):
        build_pages(tmp_path)


def test_capacity_numbers_from_the_tiny_fixture():
    """Counted by hand from tests/data/capacity_tiny.csv (7 runs, one failed)."""
    numbers = capacity_numbers(load_capacity_table(TINY))
    assert (numbers["capacity.runs"], numbers["capacity.done"], numbers["capacity.failed"]) == (7, 6, 1)
    # d8h1 without dropout: seed 0 reaches recall 1.0 at epoch 12, seed 1 stops at 0.57
    assert numbers["capacity.d8h1.drop0.learned"] == 1 and numbers["capacity.d8h1.drop0.done"] == 2
    assert numbers["capacity.d8h1.drop0.epoch_recall_99.median"] == 12.0
    assert numbers["capacity.d8h1.drop0.elimination_accuracy"] == pytest.approx(0.992)
    # with dropout 0.1 no d8h1 seed learns recall; both d16h2 seeds do (epochs 4 and 9)
    assert numbers["capacity.drop10.learned"] == 0 and math.isnan(numbers["capacity.drop10.h1.smallest_all_learn"])
    assert numbers["capacity.d16h2.drop0.epoch_recall_99.median"] == 6.5
    assert numbers["capacity.drop0.h2.smallest_all_learn"] == 16
    assert (numbers["capacity.drop0.learned"], numbers["capacity.drop0.done"]) == (3, 4)
    assert numbers["capacity.drop0.elimination_accuracy.mean"] == pytest.approx((1.0 + 0.984 + 1.0 + 1.0) / 4)
    assert numbers["capacity.drop10.recall_accuracy.max"] == 0.0
    assert numbers["capacity.recipe.samples"] == 20000 and isinstance(numbers["capacity.recipe.samples"], int)
    assert numbers["capacity.verdict.mean.fails"] == 5 and numbers["capacity.verdict.zero.open"] == 2
    assert numbers["capacity.binding_supported.mean"] == 0 and numbers["capacity.h2.recall.runs"] == 2
