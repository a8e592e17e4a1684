"""RoleVerdict.columns() (the sweep / census row of a verdict) carries the verdict's reference,
on the shipped d32h2 under mean ablation."""

from __future__ import annotations

import pytest

from perm_circuits.ablation_modes import REFERENCES


@pytest.fixture(scope="module")
def verdicts(pretrained):
    from perm_circuits.analysis import head_roles

    model = pretrained("d32h2")
    return {ref: head_roles(model, n=300, hows=("mean",), n_pair=60, n_boot=10, circuits=False,
                            induction=False, probe=False, reference=ref) for ref in REFERENCES}


def test_columns_name_the_reference(verdicts):
    columns = {ref: verdict.columns() for ref, verdict in verdicts.items()}
    for ref in REFERENCES:
        assert columns[ref]["reference"] == ref
        assert columns[ref]["role_mean_L0H0"] == verdicts[ref].role("L0H0")
    assert set(columns["test"]) == set(columns["skill"])
    assert next(iter(columns["test"])) == "reference"  # first, before the verdict_/role_/claim_ columns


def test_a_reanalysis_replaces_the_reference_column():
    from perm_circuits.sweep.run import ANALYSIS_PREFIXES

    assert "reference".startswith(ANALYSIS_PREFIXES) and not "recall_accuracy".startswith(ANALYSIS_PREFIXES)
