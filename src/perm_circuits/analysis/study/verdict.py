"""Head roles end to end: assign every head and MLP a role and say whether the study's story holds.

:func:`head_roles` measures the causal evidence; :func:`judge_roles` is the pure decision step on
precomputed or hand-made evidence. Both return a :class:`RoleVerdict`: a role per head and MLP (rules
in :mod:`~perm_circuits.analysis.study.roles`), the study's claims (:mod:`~perm_circuits.analysis.study.claims`)
and a plain-text :meth:`RoleVerdict.summary`, decided under one mode (``how="mean"`` by default, see
:data:`MODE_REASONS`) and judged under every other, so each role, claim and the verdict
(``verdict_by_how``) says whether it is robust to the ablation choice.

Nothing here prints; every function validates its arguments before any forward pass and leaves
no hooks on the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import pandas as pd

from perm_circuits.analysis.interventions.checks import check_int
from perm_circuits.analysis.interventions.ablation_table import AblationRow, AblationTable
from perm_circuits.analysis.interventions.permutation_table import ABLATION_METRICS, ablation_runs
from perm_circuits.analysis.study.joint_ablation import joint_eliminator_rows
from perm_circuits.analysis.interventions.core import HOWS
from perm_circuits.analysis.study.claims import Claim, ClaimTable, study_claims
from perm_circuits.analysis.circuits.induction_story import InductionStory, induction_story
from perm_circuits.analysis.study.recall_patching import PatchingSweep, patch_head_outputs, patch_mlp
from perm_circuits.analysis.study.reference import REFERENCE_LABELS, skill_reference_runs, verdict_reference
from perm_circuits.checks import check_number
from perm_circuits.analysis.study.roles import (
    HeadRole, MlpRole, Context, ge, judge_head, judge_mlp, pct, mode_label,
)
from perm_circuits.analysis.study.scores import (
    HeadScores, RoleThresholds, check_thresholds, label_of, resolve_batch, head_scores, recall_signal,
)
from perm_circuits.analysis.study.skill_circuits import CIRCUIT_MAX_N, CIRCUIT_TOLERANCE, SkillCircuit, skill_circuits
from perm_circuits.evaluate import probe_probabilities
from perm_circuits.hooks import check_hooks
from perm_circuits.models import ModelConfig, model_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["CIRCUIT_MAX_N", "CIRCUIT_TOLERANCE", "DECISION_MODE", "MODE_REASONS", "RoleVerdict", "SkillCircuit",
           "head_roles", "judge_roles"]

DECISION_MODE = "mean"
"""The ablation mode the verdict's decisions use by default (why: ``MODE_REASONS["mean"]``)."""

MODE_REASONS: dict[str, str] = {
    "mean": (
        "mean ablation keeps every coordinate of the component's output at its average over the test set, so the "
        "rest of the model sees values it is used to and only the sample-specific information is removed (the IOI "
        "convention, Wang et al. 2022); zero ablation is off-distribution for a component whose mean output is "
        "large, resample and binding-free ablation inject another sample's information, and the optimal constant "
        "(Li & Janson 2024) is the result of a truncated numerical search; all four are judged alongside."
    ),
    "zero": "zero ablation was asked for: it removes the component's output entirely, its mean included.",
    "resample": "resample ablation was asked for: each sample gets the component's output on another sample.",
    "binding_free": (
        "binding-free ablation was asked for: each sample gets the component's output on the same queries with "
        "independent answers."
    ),
    "optimal": (
        "optimal ablation was asked for: the component's output is the constant that minimises the loss "
        "(Li & Janson 2024)."
    ),
}


@dataclass(frozen=True)
class RoleVerdict:
    """Result of :func:`head_roles` / :func:`judge_roles`; ``story_holds`` is True when every claim is
    supported, False when any is contradicted, else None."""

    model_name: str
    model_config: ModelConfig
    how: str
    thresholds: RoleThresholds
    n_samples: int
    n_repeated: int
    elimination_accuracy: float
    recall_accuracy: float
    probe: tuple[float, ...] | None
    recall_signal: float
    heads: tuple[HeadRole, ...]
    mlps: tuple[MlpRole, ...]
    claims: ClaimTable
    story_holds: bool | None
    scores: HeadScores = field(repr=False)
    ablation: AblationTable = field(repr=False)
    head_patching: PatchingSweep | None = field(default=None, repr=False)
    mlp_patching: PatchingSweep | None = field(default=None, repr=False)
    joint: tuple[AblationRow, ...] = field(default=(), repr=False)
    recall_signals: tuple[tuple[str, str, float], ...] = field(default=(), repr=False)
    hows: tuple[str, ...] = ()
    verdict_by_how: tuple[tuple[str, bool | None], ...] = ()
    circuits: tuple[SkillCircuit, ...] = ()
    induction: InductionStory | None = None  # n_layers >= 2 only (analysis/circuits/induction_story.py)
    reference: str = "test"  # where the ablated values come from (ablation_modes.REFERENCES, "custom": a batch)

    @property
    def how_reason(self) -> str:
        """Why the decisions use :attr:`how` (a sentence)."""
        return MODE_REASONS.get(self.how, f"{mode_label(self.how)} ablation was asked for.")

    @property
    def verdict_robust(self) -> bool:
        """True when the story's verdict (``story_holds``) is the same under every mode judged."""
        return len({holds for _, holds in self.verdict_by_how}) <= 1

    @property
    def mode_dependent(self) -> list[str]:
        """Components whose role differs between ablation modes."""
        return [item.component for item in (*self.heads, *self.mlps) if not item.robust]

    def role(self, component: str) -> str:
        """Role of a component: ``"L0H1"``, ``"L1H0"``, ``"L0MLP"``, ``"L1MLP"``..."""
        for item in (*self.heads, *self.mlps):
            if item.component == component:
                return item.role
        raise KeyError(f"no component {component!r} in {self.model_name}")

    def heads_with_role(self, role: str) -> list[str]:
        return [h.component for h in self.heads if h.role == role]

    def columns(self) -> dict[str, str]:
        """The verdict as flat columns (one table row per model): ``reference`` (where the ablated values came
        from: ``"test"``, ``"skill"``, ``"custom"``), ``verdict_<how>`` (``"holds"``, ``"fails"`` or ``"open"``),
        ``role_<how>_<component>`` and ``claim_<how>_<claim>`` for every mode judged."""
        out = {"reference": self.reference}
        out |= {f"verdict_{how}": {True: "holds", False: "fails", None: "open"}[holds] for how, holds in self.verdict_by_how}
        for item in (*self.heads, *self.mlps):
            for how, role in item.role_by_how:
                out[f"role_{how}_{item.component}"] = role
        for claim in self.claims:
            for how, status in claim.status_by_how:
                out[f"claim_{how}_{claim.claim}"] = status
        return out

    def to_dataframe(self) -> pd.DataFrame:
        """One row per head and per MLP: role, scores, ablation and patching numbers.

        Also one ``role_{how}`` column per ablation mode judged, ``robust`` (the same role in
        every mode) and ``disagreeing`` (the modes whose role differs from ``role``, joined by
        ``", "``), and ``reference`` (where the ablated values came from).
        """
        rows = []

        def record_of(item: HeadRole | MlpRole, **extra: object) -> dict:
            record = {"model": self.model_name, "reference": self.reference, **extra, **asdict(item)}
            record.pop("role_by_how")
            record.update({f"role_{how}": role for how, role in item.role_by_how})
            record["disagreeing"] = ", ".join(item.disagreeing)
            return record

        for head in self.heads:
            score = self.scores.get(head.layer, head.head)
            rows.append({**record_of(head, kind="head"), **{name: getattr(score, name) for name in (
                "elim_y_mass", "elim_entropy", "elimination_score", "x_prev_y", "y_self", "binding_score",
                "dup_repeated", "dup_baseline", "duplicate_score", "source_y_shift")}})
        rows += [record_of(mlp, kind="mlp", head=None) for mlp in self.mlps]
        return pd.DataFrame(rows)

    def circuit(self, skill: str) -> SkillCircuit:
        """The proposed circuit of ``skill`` (KeyError when none was proposed)."""
        for item in self.circuits:
            if item.skill == skill:
                return item
        raise KeyError(f"no proposed circuit for {skill!r} in {self.model_name}; "
                       f"proposed: {[c.skill for c in self.circuits]}")

    def circuits_dataframe(self) -> pd.DataFrame:
        """One row per proposed circuit: skill, nodes (``+``-joined), the IOI numbers under the
        decision mode (faithfulness, error, completeness, its method, smallest minimality), the
        per-node minimality (``minimality_{node}``), the faithfulness and its error under every
        mode (``faithfulness_{how}``, ``faithfulness_error_{how}``) and ``mode_dependent``."""
        rows = []
        for item in self.circuits:
            m = item.measured
            record = {
                "model": self.model_name, "skill": item.skill, "how": item.how, "nodes": "+".join(item.nodes),
                "n_samples": item.metrics.n_samples, "f_model": m.f_model, "f_circuit": m.f_circuit,
                "faithfulness": m.faithfulness, "faithfulness_error": m.faithfulness_error,
                "completeness": m.completeness, "completeness_method": item.metrics.completeness_method,
                "min_minimality": min((e.minimality for e in m.minimality), default=math.nan),
            }
            record.update({f"minimality_{e.node}": e.minimality for e in m.minimality})
            for row in item.mode_rows:
                record[f"faithfulness_{row.how}"] = row.faithfulness
                record[f"faithfulness_error_{row.how}"] = row.faithfulness_error
            record["mode_dependent"] = item.mode_dependent
            rows.append(record)
        return pd.DataFrame(rows)

    def summary(self) -> str:
        """The verdict in plain sentences: baseline, each component's role, each claim."""
        config = self.model_config
        lines = [
            f"{self.model_name}: {config.n_layers} layer(s), {config.n_heads} head(s), d_model {config.d_model}; "
            f"{self.n_samples} test sequences ({self.n_repeated} with a repeated last query); decisions use "
            f"{mode_label(self.how)} ablation (chance-corrected retention: destroyed <= {self.thresholds.destroyed}, "
            f"survives >= {self.thresholds.survives}; ablated values from {REFERENCE_LABELS[self.reference]}). "
            f"Why: {self.how_reason}",
            f"Baseline: elimination {pct(self.elimination_accuracy)}, recall {pct(self.recall_accuracy)}"
            + (
                f"; probe [2,4,5,3,4,5,3,2,2]: P(4, recall) = {self.probe[3]:.4f}, P(1, elimination) = {self.probe[0]:.4f}."
                if self.probe is not None and len(self.probe) >= 4
                else "."
            ),
        ]
        for title, items in (("Heads:", self.heads), ("MLP:", self.mlps)):
            lines.append(title)
            lines += [f"- {item.component} = {item.role} [{item.mode_note()}]. {item.reason}" for item in items]
        if self.induction is not None:
            lines.append(f"Induction: {self.induction.summary()}")
        if self.story_holds is True:
            lines.append(f"Verdict: the study's story holds for {self.model_name}: every claim below is supported.")
        elif self.story_holds is False:
            contradicted = "; ".join(c.evidence.rstrip(".") for c in self.claims if c.status == "contradicted")
            lines.append(f"Verdict: the study's story does NOT hold for {self.model_name}: {contradicted}.")
        else:
            lines.append(f"Verdict: the study's story is neither confirmed nor refuted for {self.model_name}: "
                         "no claim is contradicted, but not every claim is supported.")
        if len(self.verdict_by_how) > 1 and self.verdict_robust:
            lines.append(f"The verdict is the same under every ablation mode judged ({', '.join(self.hows)})"
                         + (f", though the roles of {', '.join(self.mode_dependent)} change with the mode."
                            if self.mode_dependent else "; so is every component's role."))
        elif len(self.verdict_by_how) > 1:
            words = {True: "holds", False: "does not hold", None: "undecided"}
            lines.append("The verdict depends on the ablation mode: "
                         + ", ".join(f"{how}: {words[holds]}" for how, holds in self.verdict_by_how) + ".")
        if self.circuits:
            lines.append(f"Proposed circuits (IOI criteria, {self.circuits[0].metrics.n_samples} sequences):")
            lines += [f"- {item.summary()}" for item in self.circuits]
        lines.append("Claims:")
        for claim in self.claims:
            text = f"- [{claim.status}] {claim.statement} {claim.evidence}"
            others = [f"{how}: {status}" for how, status in claim.status_by_how if how != self.how and status != claim.status]
            if others:
                text += f" (other ablation modes disagree: {', '.join(others)}.)"
            lines.append(text)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _assess(
    scores: HeadScores, ablation: AblationTable, config: ModelConfig, how: str, t: RoleThresholds,
    head_patching: PatchingSweep | None, mlp_patching: PatchingSweep | None, joint: tuple[AblationRow, ...],
    signals: dict[tuple[str, str], float], reference: str = "test",
) -> tuple[list[HeadRole], list[MlpRole], list[Claim]]:
    """Roles and claims under one mode ``how`` (the per-mode step of :func:`judge_roles`)."""
    base = ablation.baseline
    ctx = Context(V=config.V, how=how, t=t, base=base, recall_present=ge(base["recall_accuracy"], t.incapable),
        elimination_present=ge(base["elimination_accuracy"], t.incapable), signals=signals, reference=reference)
    joint_row = next((row for row in joint if row.how == how), None)
    joint_members = set(joint_row.component.split("+")) if joint_row is not None else set()

    def breaks_elimination(component: str) -> bool:
        row = ablation.get(component, how)
        return ctx.harms_elimination(ctx.retention(row["elimination_accuracy"], base["elimination_accuracy"]),
                                     row["early_mae_train"] - base["early_mae_train"])

    alone = [c for c in joint_members if breaks_elimination(c)]
    heads = [
        judge_head(ctx, score, ablation.get(score.component, how), head_patching,
                    joint_row if score.component in joint_members else None,
                    explained=", ".join(sorted(c for c in alone if c != score.component)))
        for score in scores.heads
    ]
    mlps = [judge_mlp(ctx, layer, ablation.get(label_of(layer, None), how), mlp_patching)
            for layer in range(config.n_layers)]
    claims = study_claims(ctx, config, heads, mlps, scores.heads)
    return heads, mlps, claims


def judge_roles(
    scores: HeadScores,
    ablation: AblationTable,
    *,
    model_config: ModelConfig,
    how: str = DECISION_MODE,
    head_patching: PatchingSweep | None = None,
    mlp_patching: PatchingSweep | None = None,
    joint: Sequence[AblationRow] = (),
    recall_signals: Mapping[tuple[str, str], float] | None = None,
    probe: Sequence[float] | None = None,
    thresholds: RoleThresholds | None = None,
    reference: str = "test",
) -> RoleVerdict:
    """The verdict from precomputed evidence (the decision step of :func:`head_roles`).

    Args:
        scores: :func:`head_scores` of the model (its ``thresholds`` are not reused; pass
            ``thresholds`` here).
        ablation: the permutation task's :class:`~perm_circuits.analysis.interventions.ablation.AblationTable`
            (:data:`~perm_circuits.analysis.interventions.permutation_table.ABLATION_METRICS`) with a ``"none"``
            baseline and a row per head (``"L{l}H{h}"``) and MLP (``"L{l}MLP"``) under ``how``;
            every other mode in it is judged too, for ``Claim.status_by_how``.
        head_patching: per-head recall patching (``patch_head_outputs``); None = not measured.
        mlp_patching: per-layer MLP recall patching (``patch_mlp``); None = not measured.
        joint: ablation rows of several heads ablated together, ``component`` = their names
            joined by ``+`` (used for heads sharing the eliminator pattern), one per mode.
        recall_signals: :func:`recall_signal` per ``(component, how)``, with the baseline under
            ``("none", "none")``; missing entries count as not measured (an ablation that breaks
            elimination and recall together is then taken to break recall).
        probe: P(y = 1..V) on the study's probe, quoted in the summary.
        reference: where ``ablation``'s ablated values came from (:data:`~perm_circuits.ablation_modes.REFERENCES`,
            or ``"custom"`` for a batch of one's own), recorded in the verdict, its roles' sentences and its claims.
    """
    t = check_thresholds(thresholds)
    reference, _ = verdict_reference(reference, batch_allowed=False)
    for name, value, kind, what in (("scores", scores, HeadScores, "HeadScores"),
                                    ("ablation", ablation, AblationTable, "an AblationTable"),
                                    ("model_config", model_config, ModelConfig, "a ModelConfig")):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    missing = [m for m in ABLATION_METRICS if m not in ablation.metric_names]
    if missing:
        raise ValueError(f"ablation must be the permutation task's table (metrics {list(ABLATION_METRICS)}); "
                         f"the {ablation.task!r} table lacks {missing}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    for sweep, label in ((head_patching, "head_patching"), (mlp_patching, "mlp_patching")):
        if sweep is not None and not isinstance(sweep, PatchingSweep):
            raise TypeError(f"{label} must be a PatchingSweep or None, got {type(sweep).__name__}")
    joint = tuple(joint)
    if not all(isinstance(row, AblationRow) for row in joint):
        raise TypeError("joint must be a sequence of AblationRow")
    signals = dict(recall_signals or {})
    for key, value in signals.items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)):
            raise TypeError(f"recall_signals keys must be (component, how) pairs, got {key!r}")
        check_number(f"recall_signals[{key!r}]", value, finite=False)
    expected = {(l, h) for l in range(model_config.n_layers) for h in range(model_config.n_heads)}
    if {(s.layer, s.head) for s in scores.heads} != expected:
        raise ValueError(f"scores cover heads {sorted((s.layer, s.head) for s in scores.heads)}, "
                         f"the model has {sorted(expected)}")
    hows = [h for h in dict.fromkeys(row.how for row in ablation.rows) if h != "none"]
    try:
        ablation.baseline
        for h in [how] + hows:
            for score in scores.heads:
                ablation.get(score.component, h)
            for layer in range(model_config.n_layers):
                ablation.get(label_of(layer, None), h)
    except KeyError as error:
        raise ValueError(f"the ablation table lacks a row the verdict needs: {error}") from None

    judged = {h: _assess(scores, ablation, model_config, h, t, head_patching, mlp_patching, joint, signals, reference)
              for h in dict.fromkeys([how, *hows])}
    heads, mlps, claims = judged[how]
    modes = hows or [how]

    def with_modes(item: HeadRole | MlpRole, index: int, kind: int) -> HeadRole | MlpRole:
        by_how = tuple((h, judged[h][kind][index].role) for h in modes)
        disagreeing = tuple(h for h, role in by_how if role != item.role)
        return replace(item, role_by_how=by_how, robust=not disagreeing, disagreeing=disagreeing)

    heads = [with_modes(item, i, 0) for i, item in enumerate(heads)]
    mlps = [with_modes(item, i, 1) for i, item in enumerate(mlps)]
    by_how = {h: {c.claim: c.status for c in judged[h][2]} for h in hows}
    claims = [
        replace(c, status_by_how=tuple((h, by_how[h].get(c.claim, "inconclusive")) for h in hows),
                robust=all(by_how[h].get(c.claim, "inconclusive") == c.status for h in hows))
        for c in claims
    ]
    verdict_by_how = tuple((h, _story(judged[h][2])) for h in modes)
    story = _story(claims)
    base = ablation.baseline
    return RoleVerdict(model_name=model_config.name, model_config=model_config, how=how, thresholds=t,
        n_samples=ablation.n_samples, n_repeated=ablation.n_recall, elimination_accuracy=base["elimination_accuracy"],
        recall_accuracy=base["recall_accuracy"], probe=tuple(float(p) for p in probe) if probe is not None else None,
        recall_signal=float(signals.get(("none", "none"), math.nan)), heads=tuple(heads), mlps=tuple(mlps),
        claims=ClaimTable(model_config.name, tuple(claims), reference), story_holds=story, scores=scores, ablation=ablation,
        head_patching=head_patching, mlp_patching=mlp_patching, joint=joint,
        recall_signals=tuple((c, h, float(v)) for (c, h), v in signals.items()), hows=tuple(modes),
        verdict_by_how=verdict_by_how, reference=reference)


def _story(claims: Sequence[Claim]) -> bool | None:
    """True when every claim is supported, False when any is contradicted, else None."""
    statuses = {c.status for c in claims}
    return False if "contradicted" in statuses else True if statuses == {"supported"} else None


def head_roles(
    model,
    test_set: TaskBatch | None = None,
    *,
    how: str = DECISION_MODE,
    hows: Sequence[str] = HOWS,
    task: PermutationTask | TaskConfig | None = None,
    hooks: Sequence[tuple[str, Callable]] | None = None,
    n: int = 5000,
    seed: int = 1234,
    n_pair: int = 2000,
    pair_seed: int = 0,
    n_boot: int = 1000,
    ablation_seed: int = 0,
    thresholds: RoleThresholds | None = None,
    probe: bool = True,
    circuits: bool = True,
    induction: bool = True,
    reference: str | TaskBatch = "test",
) -> RoleVerdict:
    """Assign every head and MLP a role and judge the study's story on ``model``.

    Measures, vectorized over the batch (one forward per intervention):

    1. :func:`head_scores` on ``test_set``;
    2. :func:`~perm_circuits.analysis.interventions.ablation.ablation_table` under every mode in ``hows``
       (default all five: zero, mean, resample, binding-free, optimal; reference = the test set
       itself), computed once: its logits also give the recall signals, its hooks (optimal
       constants included) the joint ablation of the heads sharing the eliminator pattern when
       there are several;
    3. when the model recalls (baseline recall >= ``thresholds.incapable``):
       :func:`~perm_circuits.analysis.study.recall_patching.patch_head_outputs` and
       :func:`~perm_circuits.analysis.study.recall_patching.patch_mlp` (clean -> corrupted recall patching on
       ``n_pair`` pairs, ``n_boot`` bootstrap resamples) and the :func:`recall_signal` of the baseline
       and of every ablation (from the ablation table's logits, no extra forward);
    4. the probe's probabilities (V = 5);
    5. when ``circuits`` (default): a circuit per skill -- elimination always, recall when the
       model recalls (the gate of step 3) -- proposed under ``how`` and judged by the IOI criteria
       (Wang et al. 2022) under ``how`` and every mode in ``hows``
       (:func:`~perm_circuits.analysis.study.skill_circuits.skill_circuits`; ``RoleVerdict.circuits``,
       :class:`SkillCircuit`), on the first :data:`CIRCUIT_MAX_N` sequences of the test set (all of
       them when fewer) with the same ``ablation_seed``;
    6. when ``induction`` and ``n_layers >= 2``: the induction story
       (:func:`~perm_circuits.analysis.circuits.induction_story.induction_story`; ``n_pair``,
       ``pair_seed``, ``n_boot``);

    then :func:`judge_roles` under ``how`` and every other mode in ``hows``. Works for any model, any
    number of layers (components ``L{layer}H{head}`` / ``L{layer}MLP``; a model with one head in
    all gets the study's d16h1 claims, every other model the d32h2 ones, see
    :func:`~perm_circuits.analysis.study.claims.single_head`). Decision mode: mean
    ablation (``DECISION_MODE``), not chosen for the story it tells (:data:`MODE_REASONS`); zero
    ablation is off-distribution for components with a large mean output (d32h2's L0H0:
    zero-ablating it removes elimination, mean-ablating it removes recall).

    Args:
        test_set: default ``make_test_set(task, n=n, seed=seed)`` of ``task`` (default:
            the model's task), with the study's repeat ratio 0.3 when the task has none.
        how: the ablation mode the decisions use; must be in ``hows``.
        hows: the ablation modes measured and judged (default :data:`HOWS`, all five).
        task: the study's task (a :class:`~perm_circuits.tasks.PermutationTask` or its bare
            ``TaskConfig``, the same either way) of the default test set *and* of the patching pairs
            (default: ``task_config_of(model)``); must have the model's V.
        seed: the seed of the default test set only (``make_test_set(task, n=n, seed=seed)``);
            unused when ``test_set`` is given.  The other measurements have their own seeds.
        pair_seed: the seed of the patching pairs (``patching_pair(task, n_pair, pair_seed)``)
            and of the patching bootstrap.
        hooks: an intervention applied in every run (the verdict of the intervened model); it
            must work on any batch, as it also runs on the patching pairs (and the probe).
        ablation_seed: the resample-ablation seed (which reference sample replaces each test
            sample under ``"resample"``, and the binding-free answers' seed), used by the ablation
            table, the joint ablation and the recall signals; the ``"mean"`` and ``"optimal"``
            reference is the test set itself.
        probe: also run the study's probe sequence (a batch of one) under ``hooks``; turn off for
            hooks tied to the test set's batch size.
        circuits: also propose and measure a circuit per skill (step 5; ``RoleVerdict.circuits``).
            Callers that only need the roles (the sweep) pass False: no circuit forward runs and
            ``circuits`` is empty.  With ``hooks`` tied to the test set's batch size, pass False
            too (the circuit step runs on a sub-batch).
        reference: where the ablated values come from (:data:`~perm_circuits.ablation_modes.REFERENCES`):
            ``"test"`` (default), the whole test set; ``"skill"``, each skill's own rows (elimination rows
            ablated with values from the elimination rows, recall rows from the recall rows;
            :mod:`~perm_circuits.analysis.study.reference`; the joint eliminator ablation's recall signal is
            then not measured); or a TaskBatch of one's own (e.g. a matched counterfactual batch: the mean over,
            and the resample source drawn from, its rows), recorded as ``"custom"``.  The proposed circuits
            (step 5) draw from the same reference.  Recorded in ``RoleVerdict.reference``, its tables and its claims.
    """
    thresholds = check_thresholds(thresholds)
    reference, reference_batch = verdict_reference(reference)
    if not isinstance(hows, (list, tuple)) or not hows:
        raise TypeError(f"hows must be a non-empty sequence of modes from {HOWS}, got {hows!r}")
    bad = [h for h in hows if h not in HOWS]
    if bad:
        raise ValueError(f"hows must be modes from {HOWS}, got {bad}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    if how not in hows:
        raise ValueError(f"how={how!r} must be one of hows={tuple(hows)}")
    for name, flag in (("probe", probe), ("circuits", circuits), ("induction", induction)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r}")
    for name, value, minimum in (("n_pair", n_pair, 2), ("pair_seed", pair_seed, 0), ("n_boot", n_boot, 10),
                                 ("ablation_seed", ablation_seed, 0)):
        check_int(name, value, minimum)
    batch, config = resolve_batch(model, test_set, task, n, seed)
    hooks = check_hooks(model, hooks)
    model_config = model_config_of(model)

    scores = head_scores(model, batch, task=config, hooks=hooks, thresholds=thresholds)
    source = reference if reference_batch is None else reference_batch  # what every ablation below draws from
    if reference == "skill":
        ablation, logits, ordered, joint = skill_reference_runs(model, hows, batch, config, hooks, ablation_seed, scores)
        joint_signals: dict[tuple[str, str], float] = {}
    else:
        ablation, single, logits = ablation_runs(model, tuple(hows), batch, config=config, hooks=hooks,
                                                  seed=ablation_seed, reference=source)
        joint, joint_signals = joint_eliminator_rows(model, scores, batch, config, hows, hooks, single)
        ordered = batch
    head_patching = mlp_patching = None
    signals: dict[tuple[str, str], float] = {}
    if ge(ablation.baseline["recall_accuracy"], thresholds.incapable):
        options = dict(hooks=hooks, n=n_pair, seed=pair_seed, n_boot=n_boot, task=config)
        head_patching = patch_head_outputs(model, **options)
        mlp_patching = patch_mlp(model, **options)
        signals = {key: recall_signal(value, ordered.tokens) for key, value in logits.items()}
        signals.update(joint_signals)
    probs = probe_probabilities(model, hooks).tolist() if probe and model_config.V == 5 else None
    verdict = judge_roles(scores, ablation, model_config=model_config, how=how, head_patching=head_patching,
        mlp_patching=mlp_patching, joint=joint, recall_signals=signals, probe=probs, thresholds=thresholds,
        reference=reference)
    if induction and model_config.n_layers >= 2:
        verdict = replace(verdict, induction=induction_story(model, task=config, n=n_pair, n_pair=n_pair,
                                                             pair_seed=pair_seed, n_boot=n_boot, hooks=hooks))
    if not circuits:
        return verdict
    skills = ("elimination", "recall") if head_patching is not None else ("elimination",)
    return replace(verdict, circuits=skill_circuits(model, batch, config, how, tuple(hows), hooks, ablation_seed,
                                                      skills, source))
