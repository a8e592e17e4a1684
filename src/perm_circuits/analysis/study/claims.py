"""The study's claims, each judged on one model from its per-component roles.

The study (``001_study_presentation``, sections 08-10) tells this story for ``d32h2``:

- one head *eliminates*: its x queries spread their attention uniformly over the prior y
  positions, so the residual at ``x_k`` holds the average of the used values (section 08, head 1);
- one head *binds*: x attends to the immediately preceding y and y attends to itself, "encoding
  the (x, y) pair as a unit" (section 08, head 2; section 09);
- the FFN completes recall: it "performs the associative lookup" of the repeated ``x1``
  (section 09; finding 5), attention does not look up ``x1`` itself;
- ``d16h1`` cannot recall and its single head is a uniform accumulator (sections 07-08); the
  second head is what enables recall (section 10, finding 3).

Each piece is a :class:`Claim` (supported / contradicted / inconclusive, with the evidence in a
sentence and the numbers behind it), judged per model (any seed, any size) from the per-component
roles of :mod:`~perm_circuits.analysis.study.roles` and the attention scores of
:mod:`~perm_circuits.analysis.study.scores`; :func:`study_claims` says which claims a model gets.

Rules:

- heads are compared across every layer, named ``L{layer}H{head}``; the FFN claim looks at the
  MLP of every layer.
- each claim is supported / contradicted / inconclusive by the rules in its ``_*_claim``
  function, quoted in its evidence.  E.g. the FFN claim is supported when an MLP "completes
  recall", or is "needed for both" with its recall signal destroyed (``<= destroyed``), and
  contradicted when no MLP is needed for recall ("recall survives MLP ablation: the FFN does not
  decode").  The story holds when every claim is supported and does not when any is
  contradicted.
- model capabilities: accuracy ``>= capable`` (0.9) has it, ``< incapable`` (0.5) lacks it;
  "cannot recall" holds for recall accuracy ``<= recall_absent`` (0.2, chance).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import pandas as pd

from perm_circuits.analysis.study.roles import HeadRole, MlpRole, Context, ge, le, lt, num, pct, mode_label
from perm_circuits.analysis.study.scores import HeadScore
from perm_circuits.models import ModelConfig

__all__ = ["STATUSES", "Claim", "ClaimTable", "single_head", "study_claims"]

STATUSES: tuple[str, ...] = ("supported", "contradicted", "inconclusive")


@dataclass(frozen=True)
class Claim:
    """One claim of the study, judged on one model: ``status`` under the decision mode,
    ``status_by_how`` under every ablation mode in the table, ``robust`` when they all agree;
    ``numbers`` are the values quoted in ``evidence``."""

    claim: str
    statement: str
    status: str
    evidence: str
    numbers: tuple[tuple[str, float], ...]
    status_by_how: tuple[tuple[str, str], ...]
    robust: bool = True


@dataclass(frozen=True)
class ClaimTable:
    """The claims of one verdict; ``to_dataframe()`` gives one row per claim.  ``reference``: where the
    ablated values behind them came from (:data:`~perm_circuits.ablation_modes.REFERENCES`)."""

    model_name: str
    rows: tuple[Claim, ...]
    reference: str = "test"

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame([
            {"model": self.model_name, "reference": self.reference, "claim": c.claim, "status": c.status, "statement": c.statement,
             "evidence": c.evidence, "numbers": dict(c.numbers), "robust": c.robust,
             **{f"status_{how}": status for how, status in c.status_by_how}}
            for c in self.rows
        ])

    def get(self, claim: str) -> Claim:
        for row in self.rows:
            if row.claim == claim:
                return row
        raise KeyError(f"no claim {claim!r}; have {[row.claim for row in self.rows]}")

    def status(self, claim: str) -> str:
        return self.get(claim).status

    def __iter__(self) -> Iterator[Claim]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _or(value: float, default: float) -> float:
    return default if math.isnan(value) else value


def _best(heads: list[HeadRole], scores: dict[str, HeadScore], name: str) -> HeadRole:
    """The head with the largest score ``name`` (nan counts as lowest)."""
    return max(heads, key=lambda h: _or(getattr(scores[h.component], name), -math.inf))


def _claim(claim: str, statement: str, status: str, evidence: str, numbers: dict[str, float]) -> Claim:
    assert status in STATUSES
    return Claim(claim, statement, status, evidence, tuple((k, float(v)) for k, v in numbers.items()), ())


def _capability(ctx: Context, accuracy: float, skill: str, failure: str, missing: str | None = None) -> tuple[str, str]:
    if missing is not None and math.isnan(accuracy):
        return "inconclusive", missing
    if ge(accuracy, ctx.t.capable):
        return "supported", f"{skill} accuracy {pct(accuracy)}."
    if lt(accuracy, ctx.t.incapable):
        return "contradicted", f"{failure}: {skill.lower()} accuracy {pct(accuracy)}."
    return "inconclusive", f"{skill} accuracy {pct(accuracy)} (partial)."


def single_head(config: ModelConfig) -> bool:
    """True for a model with one head in all (one layer, one head): it gets the study's d16h1 claims."""
    return config.n_heads * config.n_layers == 1


def _capability_claims(ctx: Context, config: ModelConfig, name: str) -> list[Claim]:
    t, base = ctx.t, ctx.base
    e_acc, r_acc = base["elimination_accuracy"], base["recall_accuracy"]
    status, evidence = _capability(ctx, e_acc, "Elimination", f"{name} does not eliminate")
    claims = [_claim("eliminates",
        "The model eliminates: at the last step it answers the one unused value (study sections 07, 10: 100%).", status,
        evidence, {"elimination_accuracy": e_acc})]
    if not single_head(config):
        status, evidence = _capability(ctx, r_acc, "Recall", f"{name} does not recall",
                                       missing="No repeated sequences in the test set.")
        return claims + [_claim("recalls",
            "The model recalls: when x5 repeats x1 it answers y1, not the unused value (study section 07: 100%).",
            status, evidence, {"recall_accuracy": r_acc})]
    if config.d_model <= 16:
        statement = (
            f"{name} cannot recall: it falls into the elimination trap (study section 07: P(recall) 0.0002 on "
            "the probe; section 10: 0.01%)."
        )
    else:
        statement = (
            "A one-head model cannot recall: the second head is what enables recall (study section 10, "
            "findings 3 and 5)."
        )
    if math.isnan(r_acc):
        status, evidence = "inconclusive", "No repeated sequences in the test set."
    elif r_acc <= t.recall_absent:
        status, evidence = "supported", f"Recall accuracy {pct(r_acc)}."
    elif r_acc >= t.incapable:
        status, evidence = "contradicted", f"{name} recalls: recall accuracy {pct(r_acc)}."
    else:
        status, evidence = "inconclusive", f"Recall accuracy {pct(r_acc)}: above chance but below {pct(t.incapable)}."
    return claims + [_claim("no_recall", statement, status, evidence, {"recall_accuracy": r_acc})]


def _eliminator_claim(ctx: Context, heads: list[HeadRole], scores: dict[str, HeadScore], single: bool) -> Claim:
    t = ctx.t
    if single:
        judged = partial(_claim, "single_head_accumulates",
            "The single head is a uniform accumulator: x queries spread their attention evenly over the prior y "
            "positions, and the model's elimination needs it (study section 08, d=16 single head).")
    else:
        judged = partial(_claim, "eliminator_head",
            "One head eliminates: its x queries spread attention uniformly over the prior y positions, and "
            "ablating it destroys elimination (study section 08, head 1).")
    pattern = [h for h in heads if "eliminator" in scores[h.component].patterns]
    best = _best(heads, scores, "elimination_score")
    best_score = scores[best.component]
    numbers = {"best_elim_y_mass": best_score.elim_y_mass, "best_elim_entropy": best_score.elim_entropy}
    if not pattern:
        return judged("contradicted",
            f"No head spreads its x-query attention uniformly over the prior ys (closest: {best.component}, y-mass "
            f"{num(best_score.elim_y_mass)}, entropy {num(best_score.elim_entropy)}; needs >= "
            f"{t.eliminator_y_mass} and >= {t.eliminator_entropy}).", numbers)
    if not ctx.elimination_present:
        return judged("inconclusive",
            f"{', '.join(h.component for h in pattern)} has the eliminator pattern, but the model does not eliminate "
            f"(accuracy {pct(ctx.base['elimination_accuracy'])}).", numbers)

    def strongest(h: HeadRole) -> float:
        values = [v for v in (h.elimination_retention, h.joint_elimination_retention) if not math.isnan(v)]
        return min(values) if values else 2.0

    alone = [h for h in pattern if le(h.elimination_retention, t.destroyed)]
    chosen = min(alone, key=lambda h: h.elimination_retention) if alone else min(pattern, key=strongest)
    score = scores[chosen.component]
    numbers.update({
        "elim_y_mass": score.elim_y_mass,
        "elim_entropy": score.elim_entropy,
        "ablated_elimination_accuracy": chosen.elimination_accuracy,
        "elimination_retention": chosen.elimination_retention,
        "joint_elimination_retention": chosen.joint_elimination_retention,
        "early_mae_increase": chosen.early_mae_increase,
    })
    description = (
        f"{chosen.component}: x queries put {num(score.elim_y_mass)} on prior ys, entropy "
        f"{num(score.elim_entropy)}; {mode_label(ctx.how)}-ablating it leaves elimination at "
        f"{pct(chosen.elimination_accuracy)} (retention {num(chosen.elimination_retention)}), steps 1-{ctx.V - 1} "
        f"MAE {chosen.early_mae_increase:+.3f}"
    )
    if alone:
        if chosen.causal_role == "both":
            description += (
                f"; it is needed for recall too (recall {pct(chosen.recall_accuracy)}, recall signal kept "
                f"{num(chosen.recall_signal_retention)})"
            )
        return judged("supported", description + ".", numbers)
    if le(chosen.joint_elimination_retention, t.destroyed):
        group = "+".join(h.component for h in pattern)
        return judged("inconclusive",
            description + f"; elimination is shared by {group}: no single head's ablation destroys it, ablating them "
            f"together does (retention {num(chosen.joint_elimination_retention)}).", numbers)
    if ctx.harms_elimination(chosen.elimination_retention, chosen.early_mae_increase):
        return judged("inconclusive", description + ": elimination is damaged, not destroyed.", numbers)
    return judged("inconclusive",
        description + ": the attention pattern is there but elimination does not depend on the head.", numbers)


def _binding_claim(ctx: Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    t = ctx.t
    judged = partial(_claim, "binding_head",
        "Another head binds: x attends to the immediately preceding y and y attends to itself (study section 08, "
        "head 2), and recall needs that head (section 09).")
    eliminators = {h.component for h in heads if h.role == "eliminator"}
    pattern = [h for h in heads if "binder" in scores[h.component].patterns and h.component not in eliminators]
    best = _best(heads, scores, "binding_score")
    best_score = scores[best.component]
    numbers = {"best_x_prev_y": best_score.x_prev_y, "best_y_self": best_score.y_self}
    if not pattern:
        if all("eliminator" in scores[h.component].patterns for h in heads):
            detail = ", ".join(
                f"{h.component} y-mass {num(scores[h.component].elim_y_mass)} entropy {num(scores[h.component].elim_entropy)}"
                for h in heads
            )
            evidence = f"No binding head: all heads accumulate (every head has the eliminator pattern: {detail})."
        else:
            evidence = (
                f"No binding head (closest: {best.component}, x->preceding y {num(best_score.x_prev_y)}, y->itself "
                f"{num(best_score.y_self)}; needs >= {t.binder_x_prev_y} and >= {t.binder_y_self})"
            )
            duplicates = [h.component for h in heads if h.role == "duplicate/recall"]
            if duplicates:
                evidence += f"; recall runs through {', '.join(duplicates)}, a duplicate-token head, instead"
            evidence += "."
        return judged("contradicted", evidence, numbers)
    chosen = max(pattern, key=lambda h: (h.role == "binder", -_or(h.recall_retention, 2.0)))
    score = scores[chosen.component]
    numbers.update({
        "x_prev_y": score.x_prev_y, "y_self": score.y_self, "ablated_recall_accuracy": chosen.recall_accuracy,
        "recall_retention": chosen.recall_retention, "patch_effect": chosen.patch_effect,
    })
    description = (
        f"{chosen.component}: x->preceding y {num(score.x_prev_y)}, y->itself {num(score.y_self)}; "
        f"{mode_label(ctx.how)}-ablating it leaves recall at {pct(chosen.recall_accuracy)} (retention "
        f"{num(chosen.recall_retention)}); patching its clean output restores {num(chosen.patch_effect)} of recall"
    )
    if not ctx.recall_present:
        return judged("inconclusive",
            f"{chosen.component} binds by attention (x->preceding y {num(score.x_prev_y)}, y->itself "
            f"{num(score.y_self)}), but the model does not recall, so recall cannot need it.", numbers)
    if le(chosen.recall_retention, t.destroyed) or ge(chosen.patch_effect, t.patch_restores):
        return judged("supported", description + ".", numbers)
    if chosen.role in ("binder", "mixed"):
        return judged("inconclusive", description + ": recall is damaged, not destroyed.", numbers)
    return judged("contradicted", description + f": {chosen.component} binds by attention but recall does not need it.",
                  numbers)


def _division_claim(ctx: Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    judged = partial(_claim, "division_of_labour",
        "The heads divide the labour: one head for elimination, a different head for recall (study section 08; "
        "section 10, findings 3-4).")
    elim = [h for h in heads if h.role == "eliminator"]
    recall = [h for h in heads if h.causal_role == "recall"]
    mixed = [h for h in heads if h.role == "mixed"]
    numbers = {f"{h.component}_elimination_retention": h.elimination_retention for h in heads}
    numbers.update({f"{h.component}_recall_retention": h.recall_retention for h in heads})
    roles = ", ".join(f"{h.component} {h.role}" for h in heads)
    if all("eliminator" in scores[h.component].patterns for h in heads):
        return judged("contradicted", f"All heads accumulate: every head has the eliminator pattern ({roles}).",
                      numbers)
    if not ctx.recall_present:
        return judged("inconclusive", f"The model does not recall, so no head can specialise in recall ({roles}).",
                      numbers)
    if elim and recall and not mixed:
        return judged("supported", f"Roles: {roles}.", numbers)
    if mixed and not (elim and recall):
        return judged("contradicted", f"No split: {', '.join(h.component for h in mixed)} is needed for both "
                      f"elimination and recall ({roles}).", numbers)
    if not recall and not mixed:
        return judged("contradicted", f"No head is needed for recall on its own ({roles}).", numbers)
    return judged("inconclusive", f"Roles: {roles}.", numbers)


def _ffn_claim(ctx: Context, mlps: list[MlpRole]) -> Claim:
    judged = partial(_claim, "ffn_completes_recall",
        "The FFN completes recall: without the MLP the model cannot recall, while attention alone keeps "
        "eliminating (study section 09; section 10, finding 5).")
    mlp = min(mlps, key=lambda m: _or(m.recall_retention, 2.0))
    numbers = {
        "ablated_recall_accuracy": mlp.recall_accuracy, "recall_retention": mlp.recall_retention,
        "ablated_elimination_accuracy": mlp.elimination_accuracy, "elimination_retention": mlp.elimination_retention,
        "recall_signal_retention": mlp.recall_signal_retention, "patch_effect": mlp.patch_effect,
    }
    base = ctx.base
    text = (
        f"{mode_label(ctx.how).capitalize()}-ablating {mlp.component}: recall {pct(base['recall_accuracy'])} -> "
        f"{pct(mlp.recall_accuracy)}, elimination {pct(base['elimination_accuracy'])} -> {pct(mlp.elimination_accuracy)}"
    )
    if not math.isnan(mlp.recall_signal_retention):
        text += f", recall signal kept {num(mlp.recall_signal_retention)}"
    if not math.isnan(mlp.patch_effect):
        text += f"; patching its clean output restores {num(mlp.patch_effect)} of recall"
    if not ctx.recall_present:
        return judged("inconclusive",
            f"The model does not recall (recall {pct(base['recall_accuracy'])}): there is no recall to complete.",
            numbers)
    if mlp.role == "completes recall":
        return judged("supported", text + ".", numbers)
    if mlp.role == "needed for both" and le(mlp.recall_signal_retention, ctx.t.destroyed):
        return judged("supported",
            text + ": recall needs the MLP (its signal is gone), though elimination needs it too.", numbers)
    if not any(m.role in ("completes recall", "contributes to recall", "needed for both") for m in mlps):
        return judged("contradicted", f"Recall survives MLP ablation: the FFN does not decode ({text}).", numbers)
    if mlp.role == "needed for both":
        return judged("inconclusive",
            text + ": the MLP is needed for elimination too, and the recall signal was not shown to vanish.", numbers)
    return judged("inconclusive", text + ": recall is damaged, not destroyed.", numbers)


def _lookup_claim(ctx: Context, heads: list[HeadRole], scores: dict[str, HeadScore]) -> Claim:
    judged = partial(_claim, "no_attention_lookup",
        "Attention does not look up the repeated query: x tokens attend to the preceding y, not to the earlier x1; "
        "the lookup happens in the FFN (study section 09).")
    best = _best(heads, scores, "duplicate_score")
    score = scores[best.component]
    numbers = {"max_duplicate_score": score.duplicate_score, "dup_repeated": score.dup_repeated,
               "dup_baseline": score.dup_baseline}
    if math.isnan(score.duplicate_score):
        return judged("inconclusive", "No repeated sequences in the test set.", numbers)
    if not ctx.recall_present:
        return judged("inconclusive",
            f"The model does not recall (recall {pct(ctx.base['recall_accuracy'])}), so there is no lookup to "
            f"locate (largest duplicate-token rise: {best.component} {score.duplicate_score:+.2f}).", numbers)
    dup_text = (
        f"{best.component}: the last query puts {num(score.dup_repeated)} of its attention on the x it repeats, vs "
        f"{num(score.dup_baseline)} on the same positions when it is new"
    )
    if "duplicate" not in score.patterns:
        return judged("supported",
            f"No duplicate-token head (largest rise {dup_text}; threshold +{ctx.t.duplicate_score}).", numbers)
    numbers.update({"recall_retention": best.recall_retention, "patch_effect": best.patch_effect})
    if best.causal_role in ("recall", "both"):
        return judged("contradicted",
            f"Attention looks up the repeated x: {best.component} is a duplicate-token head ({dup_text}) and recall "
            f"needs it ({mode_label(ctx.how)}-ablated recall {pct(best.recall_accuracy)}, patching restores "
            f"{num(best.patch_effect)}).", numbers)
    return judged("inconclusive", f"{dup_text}, but recall does not need {best.component}.", numbers)


def study_claims(
    ctx: Context, config: ModelConfig, heads: Sequence[HeadRole], mlps: Sequence[MlpRole], scores: Sequence[HeadScore]
) -> list[Claim]:
    """The study's claims for a model of ``config``, judged from its per-component roles under ``ctx.how``.

    A model with one head in all (one layer, one head) gets the study's d16h1 claims (eliminates,
    no_recall, single_head_accumulates); every other model, one head per layer in several layers
    included (their heads can split the work), the d32h2 ones (eliminates, recalls,
    eliminator_head, binding_head, division_of_labour, ffn_completes_recall, no_attention_lookup).
    """
    heads, mlps = list(heads), list(mlps)
    by_name = {score.component: score for score in scores}
    claims = _capability_claims(ctx, config, config.name)
    if single_head(config):
        return claims + [_eliminator_claim(ctx, heads, by_name, single=True)]
    return claims + [_eliminator_claim(ctx, heads, by_name, single=False), _binding_claim(ctx, heads, by_name),
                     _division_claim(ctx, heads, by_name), _ffn_claim(ctx, mlps), _lookup_claim(ctx, heads, by_name)]
