"""The full-recipe capacity section: both budgets side by side and the study's two claims judged from the table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from perm_circuits.pages.capacity import budget_comparison_markdown, full_recipe_numbers, load_capacity_table

TINY = Path(__file__).resolve().parents[1] / "data" / "capacity_tiny.csv"


def _full(tiny: pd.DataFrame) -> pd.DataFrame:
    full = tiny.copy()
    full["epochs"], full["samples"] = 50, 100_000
    return full


def test_comparison_quotes_both_tables_per_configuration():
    tiny = load_capacity_table(TINY)
    text = budget_comparison_markdown(tiny, _full(tiny))
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == len(tiny.groupby(["d_model", "n_heads", "dropout"]))
    first = rows[0].split(" | ")
    # d8 h1 dropout 0 of the tiny table: seeds 0 and 1 done, seed 0 learns at epoch 12
    done = tiny[(tiny.d_model == 8) & (tiny.n_heads == 1) & (tiny.dropout == 0) & (tiny.status == "done")]
    learned = int((done.recall_accuracy >= 0.99).sum())
    assert first[3] == f"{learned}/{len(done)}"
    assert first[4] == f"{12 * 20_000 / 1e6:.1f}M"  # cut: epoch 12 x 20,000 samples
    assert first[6] == f"{learned}/{len(done)}" and first[7] == f"{12 * 100_000 / 1e6:.1f}M"


def test_claims_are_judged_from_counts():
    tiny = load_capacity_table(TINY)
    full = _full(tiny)
    full.loc[full.d_model == 8, "d_model"] = 16  # the tiny table's one-head rows stand in for d16h1
    full = full[~((full.d_model == 16) & (full.n_heads == 2))]
    d16 = (full.d_model == 16) & (full.n_heads == 1) & (full.dropout == 0) & (full.status == "done")
    assert d16.sum() >= 2
    full.loc[d16, "recall_accuracy"] = 0.2
    numbers = full_recipe_numbers(full, seeds=int(d16.sum()))
    assert numbers["capacity_full.claim.d16h1_cannot_recall"] == "holds"
    full.loc[d16 & (full.seed == full.loc[d16, "seed"].min()), "recall_accuracy"] = 1.0
    numbers = full_recipe_numbers(full, seeds=int(d16.sum()))
    assert numbers["capacity_full.claim.d16h1_cannot_recall"] == "fails"
    assert numbers["capacity_full.d16h1.drop0.learned"] == 1
    # too few seeds finished: neither holds nor fails
    full.loc[d16, "recall_accuracy"] = 0.2
    assert full_recipe_numbers(full, seeds=int(d16.sum()) + 1)["capacity_full.claim.d16h1_cannot_recall"] == "open"
    drop = full.dropout > 0
    full.loc[drop, "recall_accuracy"] = 0.5
    n_drop = int((drop & (full.status == "done")).sum())
    assert full_recipe_numbers(full, seeds=n_drop, architectures=1)["capacity_full.claim.dropout_prevents_recall"] == "holds"
    assert full_recipe_numbers(full, seeds=n_drop + 1, architectures=1)["capacity_full.claim.dropout_prevents_recall"] == "open"
    full.loc[drop & (full.status == "done"), "recall_accuracy"] = 1.0
    assert full_recipe_numbers(full)["capacity_full.claim.dropout_prevents_recall"] == "fails"


def test_the_pages_smallest_width_claim_follows_from_the_committed_tables():
    """docs/results.md says the cut budget measured *when* recall forms below the full recipe's smallest
    learning width: that needs the full recipe's smallest width to be below the cut budget's."""
    from perm_circuits.pages.build import full_grid_numbers
    from perm_circuits.pages.capacity import capacity_numbers

    root = Path(__file__).resolve().parents[2]
    full = full_grid_numbers(root)["capacity_full.drop0.smallest_learning_width"]
    cut = capacity_numbers(load_capacity_table(root / "results" / "capacity_sweep.csv"))["capacity.drop0.smallest_learning_width"]
    assert full < cut
    page = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert f"is d_model {int(full)} at the study's recipe, against d_model\n  {int(cut)} at the cut budget" in page


def test_smallest_learning_width_on_a_hand_built_table():
    from perm_circuits.pages.capacity import capacity_numbers

    tiny = load_capacity_table(TINY)
    numbers = capacity_numbers(tiny)
    assert numbers["capacity.drop0.smallest_learning_width"] == 8  # d8h1 seed 0 learns recall
    import math

    assert math.isnan(numbers["capacity.drop10.smallest_learning_width"])  # no dropout run learns it


def test_the_grid_cost_is_the_rows_own_wall_time():
    tiny = load_capacity_table(TINY)
    full = _full(tiny)
    full["wall_seconds"] = 1800.0
    full.loc[full.index[0], "status"] = "failed"  # a failed row costs nothing in the count
    done = int((full.status == "done").sum())
    numbers = full_recipe_numbers(full)
    assert numbers["capacity_full.core_hours"] == done / 2
    assert numbers["capacity_full.wall_hours_2_workers"] == done / 4
    assert numbers["capacity_full.budget_millions"] == 5.0  # 50 epochs x 100,000 sequences
    ran = full[full.status == "done"]
    assert numbers["capacity_full.samples_millions"] == (ran.epochs_run * 100_000).sum() / 1e6


def test_the_pages_dropout_sentences_hold_in_the_committed_table():
    """The prose under "Dropout prevents recall" reads these facts off the full-recipe table."""
    root = Path(__file__).resolve().parents[2]
    full = load_capacity_table(root / "results" / "capacity_full_sweep.csv")
    done = full[full.status == "done"]
    if len(done) < 100:  # the sentences describe the finished grid
        return
    learned = done[(done.dropout > 0) & (done.recall_accuracy >= 0.99)]
    assert len(learned) > 0 and (learned.n_heads == 1).all()  # "every dropout run that learns it has one head"
    numbers = full_recipe_numbers(full)
    assert numbers["capacity_full.drop10.h2.learned"] == 0
    assert numbers["capacity_full.d16h1.drop10.learned"] == 0 and numbers["capacity_full.d16h1.drop0.learned"] == 5
    assert learned.d_model.min() == numbers["capacity_full.drop10.smallest_learning_width"] >= 24
    assert numbers["capacity_full.d32h1.drop10.epoch_recall_99.median"] > numbers["capacity_full.d32h1.drop0.epoch_recall_99.median"]
