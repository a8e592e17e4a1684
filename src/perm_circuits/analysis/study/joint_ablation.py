"""The study's joint ablation: every head with the eliminator pattern ablated together, per mode
(one such head alone may be dispensable while the group is not)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from perm_circuits.analysis.interventions.hooks import ablate
from perm_circuits.analysis.interventions.ablation_table import AblationRow
from perm_circuits.analysis.interventions.permutation_table import study_row
from perm_circuits.analysis.study.scores import HeadScores, recall_signal
from perm_circuits.devices import device_forward
from perm_circuits.evaluate import evaluate_logits
from perm_circuits.hooks import HookList
from perm_circuits.tasks.permutation_posterior import bayes_posterior
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["joint_eliminator_rows"]


def joint_eliminator_rows(
    model,
    scores: HeadScores,
    batch: TaskBatch,
    config: TaskConfig,
    hows: Sequence[str],
    hooks: HookList,
    single: Mapping[tuple[str, str], HookList],
) -> tuple[tuple[AblationRow, ...], dict[tuple[str, str], float]]:
    """Ablate every head with the eliminator pattern together, under each mode (if >= 2 share it).

    The ablation table's single-head hooks (``single``) compose exactly for every mode but
    ``"optimal"``, whose constant is searched jointly for each layer's heads, layer by layer from the
    first with the earlier layers' group already ablated.
    """
    group = [s for s in scores.heads if "eliminator" in s.patterns]
    if len(group) < 2:
        return (), {}
    posteriors = (bayes_posterior(batch.tokens, config, "uniform"), bayes_posterior(batch.tokens, config, "train"))
    component = "+".join(s.component for s in group)
    layers = list(dict.fromkeys(s.layer for s in group))  # AblationRow.layer: None when they span layers
    rows, signals = [], {}
    for how in hows:
        extra: HookList = []
        if how == "optimal":  # layer by layer, each layer's constant searched with the earlier layers' in place
            for layer in sorted(layers):
                heads = [s.head for s in group if s.layer == layer]
                extra += ablate(model, f"blocks.{layer}.attn.hook_z", how, reference=batch, index=heads,
                                hooks=list(hooks) + extra)
        else:
            for s in group:
                extra += single[(s.component, how)]
        with torch.no_grad(), model.hooks(fwd_hooks=list(hooks) + extra):
            logits = device_forward(model, batch.tokens)
        signals[(component, how)] = recall_signal(logits, batch.tokens)
        evaluation = evaluate_logits(logits, batch, config, posteriors=posteriors, reference=False)
        rows.append(study_row(component, how, layers[0] if len(layers) == 1 else None, None, evaluation))
    return tuple(rows), signals
