"""How often the MLP of one layer changes the model's prediction (the logit lens before vs after it).

The layer-level companion of the key-value view of :mod:`perm_circuits.analysis.study.ffn` (Geva et
al. 2021, "Transformer Feed-Forward Layers Are Key-Value Memories"; nostalgebraist 2020 for the
logit lens): ``ln_final`` (each residual with its own scale) then ``W_U`` on ``resid_mid`` (before
the MLP) and ``resid_post`` (after it), top-1 over the value tokens.  For the last layer
``resid_post`` is the model's own prediction; for an earlier one both are what the stream would
predict if the later layers were skipped, so a flip says what the MLP changes in the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_layer
from perm_circuits.analysis.probes.dla import (
    SUBGROUPS,
    check_batch,
    elimination_answers,
    repeated_queries,
    run_cache,
    subgroup_masks,
    used_values,
)
from perm_circuits.analysis.probes.memory import apply_norm
from perm_circuits.models import model_config_of
from perm_circuits.tasks.base import TaskBatch

__all__ = ["FlipStats", "MLPFlips", "mlp_prediction_flips"]


@dataclass(frozen=True)
class FlipStats:
    """Top-1 (over value tokens) before vs after the MLP, for one subgroup of predictions: rates of
    ``fixed`` (wrong before, right after), ``broken`` (the reverse), ``consistent`` (possible given
    the context: a value not used yet, or the earlier y of a repeated query) and ``trap`` (the
    elimination answer at a repeated last query; NaN outside the recall subgroup)."""

    subgroup: str
    n: int
    flip_rate: float
    accuracy_mid: float
    accuracy_post: float
    fixed_rate: float
    broken_rate: float
    consistent_mid: float
    consistent_post: float
    trap_mid: float
    trap_post: float


@dataclass(frozen=True)
class MLPFlips:
    """Result of :func:`mlp_prediction_flips`: one :class:`FlipStats` per subgroup."""

    model_name: str
    layer: int
    subgroups: tuple[FlipStats, ...]

    def get(self, subgroup: str) -> FlipStats:
        for s in self.subgroups:
            if s.subgroup == subgroup:
                return s
        raise KeyError(f"unknown subgroup {subgroup!r}; have {[s.subgroup for s in self.subgroups]}")

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(s) for s in self.subgroups]).set_index("subgroup")


def _lens_top1(model, resid: Float[Tensor, "batch step d_model"]) -> Int[Tensor, "batch step"]:
    V = model_config_of(model).V
    logits = apply_norm(model, resid, "ln_final") @ model.W_U.detach() + model.b_U.detach()
    return logits[..., 1 : V + 1].argmax(-1) + 1


def mlp_prediction_flips(
    model,
    test_set: TaskBatch | None = None,
    *,
    layer: int = -1,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> MLPFlips:
    """How often the MLP of ``layer`` (default the last) changes the top-1 prediction at the y positions
    of ``test_set`` (default the model's fixed 5,000-sample test set) under ``hooks``, per subgroup
    of :mod:`~perm_circuits.analysis.probes.dla`."""
    layer = check_layer(model, layer)
    batch = check_batch(model, test_set)  # run_cache checks the hooks before its forward
    V = model_config_of(model).V
    mid_name, post_name = f"blocks.{layer}.hook_resid_mid", f"blocks.{layer}.hook_resid_post"
    _, acts, _ = run_cache(model, batch.tokens, [mid_name, post_name], hooks)
    ypos = slice(0, 2 * V - 1, 2)
    with torch.no_grad():
        mid = _lens_top1(model, acts[mid_name][:, ypos])
        post = _lens_top1(model, acts[post_name][:, ypos])
    target = batch.extras["ys"]
    repeated = repeated_queries(batch.tokens)
    used = used_values(batch.tokens, V)
    elim = elimination_answers(batch.tokens, V)

    def consistent(pred: Tensor) -> Tensor:
        unused = ~used.gather(2, (pred - 1)[..., None])[..., 0]
        return torch.where(repeated, pred == target, unused)

    ok_mid, ok_post = mid == target, post == target
    flags = dict(flip_rate=mid != post, accuracy_mid=ok_mid, accuracy_post=ok_post, fixed_rate=~ok_mid & ok_post,
                 broken_rate=ok_mid & ~ok_post, consistent_mid=consistent(mid), consistent_post=consistent(post),
                 trap_mid=mid == elim, trap_post=post == elim)
    stats = []
    for name, mask in subgroup_masks(batch.tokens).items():
        rates = {key: float(x[mask].double().mean()) for key, x in flags.items()}
        if name != SUBGROUPS[2]:  # the trap exists at a repeated last query only
            rates.update(trap_mid=float("nan"), trap_post=float("nan"))
        stats.append(FlipStats(subgroup=name, n=int(mask.sum()), **rates))
    return MLPFlips(model_config_of(model).name, layer, tuple(stats))
