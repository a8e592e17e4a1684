"""The census tests' one expensive result: the weight-built induction model's fingerprint, taken once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def induction():
    """``(model, mechanism_fingerprint(...))`` of :func:`~perm_circuits.handbuilt.build_induction_model`
    (600 rows, zero and mean ablation, both references, the hypotheses on 200 rows with 10 resamples)."""
    from perm_circuits.census import mechanism_fingerprint
    from perm_circuits.handbuilt import build_induction_model

    model = build_induction_model()
    return model, mechanism_fingerprint(model, n=600, n_circuit=100, n_pair=100, n_boot=20,
                                        hows=("zero", "mean"), name="induction", n_hyp=200, n_hyp_boot=10)
