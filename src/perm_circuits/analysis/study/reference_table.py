"""The study's claims and every component's role per model, ablation mode and reference, as one tidy table
(``results/claims_by_reference.csv``, ``scripts/claims_by_reference.py``, rendered on ``docs/census.md``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["CLAIM_COLUMNS", "claims_by_reference"]


CLAIM_COLUMNS = ("model", "reference", "how", "kind", "name", "value", "elimination_accuracy", "recall_accuracy",
                 "elimination_retention", "recall_retention", "patch_effect", "n", "n_pair", "n_boot")


def claims_by_reference(models: dict, *, hows: Sequence[str] | None = None, references: Sequence[str] = ("test", "skill"),
                        n: int = 5000, seed: int = 1234, n_pair: int = 2000, n_boot: int = 200):
    """The study's claims and every component's role per model, ablation mode and reference: a tidy table.

    ``models`` maps a name to a study model.  Per model and reference, one
    :func:`~perm_circuits.analysis.study.verdict.head_roles` call (every mode of ``hows``, default
    :data:`~perm_circuits.analysis.HOWS`; the test set ``make_test_set(task, n, seed)``, the findings' one;
    no circuit step) gives one row per (mode, claim) (``kind = "claim"``, ``value`` the status) and one per
    (mode, component) (``kind = "role"``, ``value`` the role, with the component's ablated accuracies,
    chance-corrected retentions and patching effect).  Columns: :data:`CLAIM_COLUMNS`.
    """
    import pandas as pd

    from perm_circuits.ablation_modes import check_reference_name
    from perm_circuits.analysis.interventions.core import HOWS
    from perm_circuits.analysis.study.verdict import head_roles

    hows = tuple(HOWS if hows is None else hows)
    references = tuple(check_reference_name(r) for r in references)
    rows = []
    for name, model in models.items():
        model.eval()
        for ref in references:
            verdict = head_roles(model, hows=hows, n=n, seed=seed, n_pair=n_pair, n_boot=n_boot, circuits=False,
                                 induction=False, probe=False, reference=ref)
            settings = {"n": n, "n_pair": n_pair, "n_boot": n_boot}
            for claim in verdict.claims:
                for how, status in claim.status_by_how:
                    rows.append({"model": name, "reference": ref, "how": how, "kind": "claim", "name": claim.claim,
                                 "value": status, **settings})
            judged = {(label_, h): (item, role) for item in (*verdict.heads, *verdict.mlps)
                      for h, role in item.role_by_how for label_ in (item.component,)}
            for (component, how), (item, role) in judged.items():
                row = verdict.ablation.get(component, how)
                base = verdict.ablation.baseline
                chance = 1 / verdict.model_config.V
                retention = (lambda a, b: (a - chance) / (b - chance) if b >= 0.5 else math.nan)
                rows.append({"model": name, "reference": ref, "how": how, "kind": "role", "name": component,
                             "value": role, "elimination_accuracy": row["elimination_accuracy"],
                             "recall_accuracy": row["recall_accuracy"],
                             "elimination_retention": retention(row["elimination_accuracy"], base["elimination_accuracy"]),
                             "recall_retention": retention(row["recall_accuracy"], base["recall_accuracy"]),
                             "patch_effect": item.patch_effect, **settings})
    return pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))
