"""Per-component roles: what each head (``L{layer}H{head}``, ablated and patched on its layer's
``hook_z``) and each MLP (``L{layer}MLP``) of every layer is causally needed for, under one ablation
mode. Thresholds are fields of :class:`~perm_circuits.analysis.study.scores.RoleThresholds`:

- *retention* of a capability under an ablation is chance-corrected,
  ``(acc_ablated - 1/V) / (acc_baseline - 1/V)``; defined only where the baseline has the
  capability (baseline accuracy >= ``incapable`` = 0.5).  ``<= destroyed`` (0.25) destroys it,
  ``>= survives`` (0.75) leaves it, in between damages it.
- a component is *needed for elimination* if ablating it drops elimination retention below
  ``survives`` or raises the steps 1..V-1 MAE (vs the train-prior posterior) by ``mae_increase``
  (0.05); a head with the eliminator pattern is needed *redundantly* if only the joint ablation of
  every head with that pattern drops it, and no other of those heads breaks elimination alone.
  It is *needed for recall* if ablating it drops recall retention below ``survives`` while
  elimination survives; if elimination falls too, only if the recall signal also falls
  (signal retention ``< survives``; taken as yes when the signal was not measured); a head whose
  ablation leaves recall is still needed for it if patching its clean output restores
  ``>= patch_restores`` (0.5) of the clean logit difference (a redundant carrier).
- attention patterns: *eliminator* if ``elim_y_mass >= 0.7`` and ``elim_entropy >= 0.8``;
  *binder* if ``x_prev_y >= 0.6`` and ``y_self >= 0.6`` (a uniform accumulator has
  ``x_prev_y = 25/48 ~ 0.52``); *duplicate* if ``duplicate_score >= 0.3`` (scores:
  :mod:`~perm_circuits.analysis.study.scores`).
- head role: needed for both -> ``"mixed"``; for elimination only -> ``"eliminator"`` if it has
  the eliminator pattern, else ``"other"``; for recall only -> ``"duplicate/recall"`` with the
  duplicate pattern, ``"binder"`` with the binder pattern, else ``"other"``; for neither ->
  ``"unused"`` (loss rises by < ``loss_increase`` = 0.05 nats) or ``"minor"``.
- MLP role: needed for recall while elimination survives -> ``"completes recall"`` (recall
  retention ``<= destroyed``) or ``"contributes to recall"``; needed for recall and elimination
  -> ``"needed for both"``; elimination only -> ``"needed for elimination"``; else ``"unused"`` /
  ``"minor"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perm_circuits.analysis.interventions.ablation_table import AblationRow
from perm_circuits.analysis.study.recall_patching import PatchingSweep
from perm_circuits.analysis.study.scores import HeadScore, RoleThresholds, label_of

__all__ = ["HeadRole", "MlpRole", "mode_label"]


def mode_label(how: str) -> str:
    """An ablation mode as a word for sentences: ``"binding_free"`` -> ``"binding-free"``."""
    return how.replace("_", "-")


class _ModeNote:
    def mode_note(self) -> str:
        """``"robust"`` (``"one mode judged"``) or ``"mode-dependent (zero: X, mean: Y, ...)"``."""
        if self.robust:
            return "robust" if len(self.role_by_how) > 1 else "one mode judged"
        return "mode-dependent (" + ", ".join(f"{how}: {role}" for how, role in self.role_by_how) + ")"


@dataclass(frozen=True)
class HeadRole(_ModeNote):
    """The role of one head under the decision mode, with the numbers behind it.

    ``*_accuracy``: last-step accuracies with the head ablated; ``*_retention``: chance-corrected (nan
    where the baseline lacks the capability); ``patch_effect``: normalised recall restored by patching
    its clean output (nan when not measured); ``joint_elimination_retention``: with every head of the
    eliminator pattern ablated together (nan unless two or more share it); ``recall_signal_retention``:
    ablated over baseline :func:`recall_signal`; ``role_by_how``: the role under every mode judged,
    ``robust`` when they all agree, ``disagreeing`` the modes whose role differs from ``role``.
    """

    layer: int
    head: int
    component: str
    role: str
    attention_role: str
    causal_role: str
    elimination_accuracy: float
    recall_accuracy: float
    elimination_retention: float
    recall_retention: float
    early_mae_increase: float
    loss_increase: float
    patch_effect: float
    patch_ci_low: float
    patch_ci_high: float
    joint_elimination_retention: float
    recall_signal_retention: float
    reason: str
    role_by_how: tuple[tuple[str, str], ...] = ()
    robust: bool = True
    disagreeing: tuple[str, ...] = ()


@dataclass(frozen=True)
class MlpRole(_ModeNote):
    """The role of one layer's MLP (whole ``hook_mlp_out`` ablated / patched)."""

    layer: int
    component: str
    role: str
    elimination_accuracy: float
    recall_accuracy: float
    elimination_retention: float
    recall_retention: float
    early_mae_increase: float
    loss_increase: float
    patch_effect: float
    patch_ci_low: float
    patch_ci_high: float
    recall_signal_retention: float
    reason: str
    role_by_how: tuple[tuple[str, str], ...] = ()
    robust: bool = True
    disagreeing: tuple[str, ...] = ()


def pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"


def num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def lt(value: float, bound: float) -> bool:
    return not math.isnan(value) and value < bound


def ge(value: float, bound: float) -> bool:
    return not math.isnan(value) and value >= bound


def le(value: float, bound: float) -> bool:
    return not math.isnan(value) and value <= bound


@dataclass(frozen=True)
class Context:
    V: int
    how: str
    t: RoleThresholds
    base: AblationRow
    recall_present: bool
    elimination_present: bool
    signals: dict[tuple[str, str], float]
    reference: str = "test"  # where the ablated values came from (perm_circuits.ablation_modes.REFERENCES)

    def retention(self, ablated: float, baseline: float) -> float:
        chance = 1 / self.V
        if math.isnan(baseline) or baseline < self.t.incapable:
            return math.nan
        return (ablated - chance) / (baseline - chance)

    def harms_elimination(self, retention: float, mae_increase: float) -> bool:
        return lt(retention, self.t.survives) or ge(mae_increase, self.t.mae_increase)

    def signal_retention(self, component: str) -> float:
        baseline = self.signals.get(("none", "none"), math.nan)
        ablated = self.signals.get((component, self.how), math.nan)
        if not self.recall_present or math.isnan(baseline) or baseline < MIN_RECALL_SIGNAL:
            return math.nan
        return ablated / baseline


MIN_RECALL_SIGNAL = 1.0
"""Baseline :func:`recall_signal` (logits) below which signal retentions are not computed."""


def _effect(sweep: PatchingSweep | None, **where: int) -> tuple[float, float, float]:
    if sweep is None:
        return math.nan, math.nan, math.nan
    try:
        cell = sweep.get(**where)
    except KeyError:
        return math.nan, math.nan, math.nan
    return cell.mean, cell.ci_low, cell.ci_high


def _measures(ctx: Context, component: str, row: AblationRow, patching: PatchingSweep | None, **where: int) -> tuple:
    """A component's elimination and recall retention, MAE and loss rise, recall-signal retention and
    patching effect (mean, CI; nan where the model does not recall)."""
    base = ctx.base
    return (
        ctx.retention(row["elimination_accuracy"], base["elimination_accuracy"]),
        ctx.retention(row["recall_accuracy"], base["recall_accuracy"]) if ctx.recall_present else math.nan,
        row["early_mae_train"] - base["early_mae_train"],
        row.test_loss - base.test_loss,
        ctx.signal_retention(component),
        _effect(patching, **where) if ctx.recall_present else (math.nan,) * 3,
    )


def _ablation_sentence(ctx: Context, row: AblationRow, signal_retention: float) -> str:
    base = ctx.base
    against = "" if ctx.reference == "test" or ctx.how in ("zero", "binding_free") else " (each skill's own rows)"
    text = (
        f"{mode_label(ctx.how).capitalize()}-ablating it{against}: elimination {pct(base['elimination_accuracy'])} -> "
        f"{pct(row['elimination_accuracy'])}, recall {pct(base['recall_accuracy'])} -> {pct(row['recall_accuracy'])}, "
        f"steps 1-{ctx.V - 1} MAE {row['early_mae_train'] - base['early_mae_train']:+.3f}, "
        f"loss {row.test_loss - base.test_loss:+.3f}"
    )
    if not math.isnan(signal_retention):
        text += f", recall signal kept {num(signal_retention)}"
    return text


def _patch_sentence(effect: float, low: float, high: float) -> str:
    if math.isnan(effect):
        return ""
    return f"Patching its clean output restores {num(effect)} [{num(low)}, {num(high)}] of recall."


def _attention_sentence(score: HeadScore) -> str:
    return (
        f"Attention: x queries put {num(score.elim_y_mass)} of their weight on prior y positions "
        f"(normalised entropy {num(score.elim_entropy)}); x->preceding y {num(score.x_prev_y)}, "
        f"y->itself {num(score.y_self)}; last query->repeated x {num(score.dup_repeated)} on repeated "
        f"vs {num(score.dup_baseline)} on new queries (pattern: {score.attention_role})."
    )


def _recall_needed(ctx: Context, r_ret: float, elim_harmed: bool, signal_ret: float, effect: float) -> tuple[bool, str]:
    """Whether the component is needed for recall, and a note when the call needed the recall signal."""
    t = ctx.t
    if not ctx.recall_present:
        return False, ""
    if lt(r_ret, t.survives) and not elim_harmed:
        return True, ""
    if lt(r_ret, t.survives):
        # both capabilities fall: the accuracy cannot tell a broken recall from a broken output
        if math.isnan(signal_ret):
            return True, "Recall and elimination fall together and the recall signal was not measured."
        if signal_ret < t.survives:
            return True, f"The recall signal falls too (kept {num(signal_ret)}): the recall mechanism needs it."
        return False, (
            f"The recall signal survives (kept {num(signal_ret)}): the recall accuracy falls only because the "
            "output breaks."
        )
    return ge(effect, t.patch_restores), ""


def judge_head(
    ctx: Context, score: HeadScore, row: AblationRow, patching: PatchingSweep | None, joint: AblationRow | None,
    explained: str = "",
) -> HeadRole:
    """The role of one head.  ``explained``: another head of the joint group (``joint``) whose own
    ablation already breaks elimination; the joint ablation's loss is then put down to it, and this
    head is not called redundant for elimination."""
    t, base = ctx.t, ctx.base
    e_ret, r_ret, mae_up, loss_up, signal_ret, (effect, low, high) = _measures(
        ctx, score.component, row, patching, layer=score.layer, head=score.head)
    joint_ret = math.nan if joint is None else ctx.retention(joint["elimination_accuracy"], base["elimination_accuracy"])
    needs_elim = ctx.harms_elimination(e_ret, mae_up)
    redundant = not needs_elim and lt(joint_ret, t.survives) and not explained
    needs_recall, note = _recall_needed(ctx, r_ret, needs_elim or redundant, signal_ret, effect)
    matched = score.patterns
    if (needs_elim or redundant) and needs_recall:
        causal, role = "both", "mixed"
    elif needs_elim or redundant:
        causal = "elimination (redundant)" if redundant else "elimination"
        role = "eliminator" if "eliminator" in matched else "other"
    elif needs_recall:
        causal = "recall"
        role = "duplicate/recall" if "duplicate" in matched else "binder" if "binder" in matched else "other"
    else:
        causal, role = "none", "unused" if loss_up < t.loss_increase else "minor"
    parts = [_attention_sentence(score), _ablation_sentence(ctx, row, signal_ret) + ".", note,
             _patch_sentence(effect, low, high)]
    if joint is not None:
        parts.append(
            f"Ablating every head with the eliminator pattern together ({joint.component}): elimination "
            f"{pct(joint['elimination_accuracy'])}"
            + (f", which {explained} alone already breaks." if explained and not needs_elim else ".")
        )
    parts.append(f"Causally needed for: {causal}.")
    return HeadRole(layer=score.layer, head=score.head, component=score.component, role=role,
        attention_role=score.attention_role, causal_role=causal, elimination_accuracy=row["elimination_accuracy"],
        recall_accuracy=row["recall_accuracy"], elimination_retention=e_ret, recall_retention=r_ret,
        early_mae_increase=mae_up, loss_increase=loss_up, patch_effect=effect, patch_ci_low=low, patch_ci_high=high,
        joint_elimination_retention=joint_ret, recall_signal_retention=signal_ret, reason=" ".join(filter(None, parts)))


def judge_mlp(ctx: Context, layer: int, row: AblationRow, patching: PatchingSweep | None) -> MlpRole:
    t, component = ctx.t, label_of(layer, None)
    e_ret, r_ret, mae_up, loss_up, signal_ret, (effect, low, high) = _measures(ctx, component, row, patching, layer=layer)
    elim_harmed = ctx.harms_elimination(e_ret, mae_up)
    needs_recall, note = _recall_needed(ctx, r_ret, elim_harmed, signal_ret, math.nan)
    if needs_recall and not elim_harmed:
        role = "completes recall" if le(r_ret, t.destroyed) else "contributes to recall"
    elif needs_recall:
        role = "needed for both"
    elif elim_harmed:
        role = "needed for elimination"
    else:
        role = "unused" if loss_up < t.loss_increase else "minor"
    reason = " ".join(filter(None, [_ablation_sentence(ctx, row, signal_ret) + ".", note,
                                    _patch_sentence(effect, low, high)]))
    return MlpRole(layer=layer, component=component, role=role, elimination_accuracy=row["elimination_accuracy"],
        recall_accuracy=row["recall_accuracy"], elimination_retention=e_ret, recall_retention=r_ret,
        early_mae_increase=mae_up, loss_increase=loss_up, patch_effect=effect, patch_ci_low=low, patch_ci_high=high,
        recall_signal_retention=signal_ret, reason=reason)
