"""The induction story, judged: "previous-token head A feeds induction head B through K-composition".

Bietti et al. 2023 ("Birth of a Transformer", section 3) and Olsson et al. 2022 predict that
general in-context recall needs a previous-token head A writing each token's predecessor into the
residual stream and an induction head B in a later layer whose *key* reads it (Elhage et al. 2021,
K-composition), so the last query attends after its earlier occurrence and copies what is there.
Three independent kinds of evidence, each missing piece named:

(a) **attention**: B is the head of a layer >= 1 with the highest induction score, A the head of an
    earlier layer with the highest previous-token score (:mod:`~perm_circuits.analysis.probes.induction`);
    both ``>= SCORE_MIN`` (0.5; a perfect head scores 1, a uniform causal head 0.23 (previous-token)
    and ``1/(2V-1)`` (induction));
(b) **weights**: the K-composition score A -> B above the Q- and V-composition scores A -> B and
    the K baseline of random heads (:mod:`~perm_circuits.analysis.circuits.composition`);
(c) **causation**: path patching A -> B's key on the ``"swap"`` induction pair restores
    ``>= PATH_MIN`` (0.5) of the clean logit difference with a bootstrap CI excluding 0
    (:func:`~perm_circuits.analysis.interventions.path_patching.path_patching_table`).

The story holds only when all three do: attention maps alone are not enough (Wang et al. 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from perm_circuits.analysis.interventions.checks import (
    check_int,
    check_positive_int,
    check_seed,
    check_task_config,
)
from perm_circuits.analysis.circuits.composition import (
    KINDS,
    CompositionScores,
    composition_scores,
)
from perm_circuits.analysis.probes.induction import (
    InductionScores,
    induction_scores,
    induction_test_set,
)
from perm_circuits.analysis.interventions.path_patching import (
    SIGNIFICANT_EFFECT,
    PathPatchEffect,
    PathPatchingTable,
    path_patching_table,
)
from perm_circuits.hooks import check_hooks
from perm_circuits.models import model_config_of
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["PATH_MIN", "SCORE_MIN", "InductionStory", "induction_story", "judge_induction_story"]

SCORE_MIN = 0.5
"""Previous-token score of A and induction score of B needed for (a)."""

PATH_MIN = SIGNIFICANT_EFFECT
"""Normalised path-patching effect A -> B.k needed for (c) (with a CI excluding 0)."""


@dataclass(frozen=True)
class InductionStory:
    """Whether previous-token head A feeds induction head B through K-composition (module docstring).

    ``previous_head`` / ``induction_head`` are the best candidates (``"L{l}H{h}"``) whether or not
    the story holds; ``missing`` names each piece that fails (empty when ``holds``); ``path_*``
    are the normalised path-patching effects A -> B's query, key and value.
    """

    model_name: str
    holds: bool
    previous_head: str
    induction_head: str
    previous_token: float
    induction: float
    k_composition: float
    q_composition: float
    v_composition: float
    k_baseline: float
    path_k: float
    path_k_ci_low: float
    path_k_ci_high: float
    path_q: float
    path_v: float
    missing: tuple[str, ...]
    scores: InductionScores = field(repr=False)
    paths: PathPatchingTable = field(repr=False)

    def summary(self) -> str:
        """One sentence: the circuit with its numbers, or what is missing."""
        a, b = self.previous_head, self.induction_head
        numbers = (
            f"previous-token score of {a} {self.previous_token:.2f}, induction score of {b} {self.induction:.2f}; "
            f"composition {a}->{b}: K {self.k_composition:.2f}, Q {self.q_composition:.2f}, "
            f"V {self.v_composition:.2f} (random heads: K {self.k_baseline:.2f}); path patching {a}->{b}: "
            f"key {self.path_k:.2f} [{self.path_k_ci_low:.2f}, {self.path_k_ci_high:.2f}], "
            f"query {self.path_q:.2f}, value {self.path_v:.2f}"
        )
        if self.holds:
            return (f"induction circuit: previous-token head {a} feeds induction head {b} through K-composition "
                    f"({numbers}).")
        return (f"no induction circuit ({a} -> {b} is the best candidate): missing {'; '.join(self.missing)} "
                f"({numbers}).")


def _best(scores: InductionScores, attribute: str, layers: range) -> tuple[str, int, int, float]:
    candidates = [s for s in scores.heads if s.layer in layers]
    best = max(candidates, key=lambda s: (getattr(s, attribute), -s.layer, -s.head))
    return best.component, best.layer, best.head, float(getattr(best, attribute))


def judge_induction_story(
    scores: InductionScores,
    composition: Mapping[str, CompositionScores],
    paths: PathPatchingTable,
) -> InductionStory:
    """The decision of :func:`induction_story` from precomputed evidence: ``composition`` maps ``"Q"``,
    ``"K"``, ``"V"`` to :func:`composition_scores` of the model, ``paths`` holds the edges from every
    earlier-layer head into the induction candidate (as ``path_patching_table`` does)."""
    if not isinstance(scores, InductionScores):
        raise TypeError(f"scores must be InductionScores, got {type(scores).__name__}")
    if not isinstance(paths, PathPatchingTable):
        raise TypeError(f"paths must be a PathPatchingTable, got {type(paths).__name__}")
    if not isinstance(composition, Mapping) or set(composition) != set(KINDS):
        raise ValueError(f"composition must map each of {KINDS} to CompositionScores, got {composition!r}")
    n_layers = max(s.layer for s in scores.heads) + 1
    if n_layers < 2:
        raise ValueError(f"the induction story needs n_layers >= 2, {scores.model_name} has {n_layers}")
    b, bl, bh, induction = _best(scores, "induction", range(1, n_layers))
    a, al, ah, previous = _best(scores, "previous_token", range(bl))
    comp = {kind: float(composition[kind].scores[al, ah, bl, bh]) for kind in KINDS}
    baseline = composition["K"].baseline
    try:
        edges: dict[str, PathPatchEffect] = {i: paths.get((al, ah), (bl, bh), i) for i in ("q", "k", "v")}
    except KeyError as error:
        raise ValueError(f"paths lacks an edge of the candidate circuit: {error}") from None

    missing = []
    if previous < SCORE_MIN:
        missing.append(f"a previous-token head (best: {a}, score {previous:.2f} < {SCORE_MIN})")
    if induction < SCORE_MIN:
        missing.append(f"an induction head (best: {b}, score {induction:.2f} < {SCORE_MIN})")
    k, q, v = (-math.inf if math.isnan(comp[kind]) else comp[kind] for kind in "KQV")  # NaN never dominates
    if not (k > q and k > v and k > baseline):
        missing.append(
            f"K-composition {a}->{b} dominating (K {comp['K']:.2f}, Q {comp['Q']:.2f}, V {comp['V']:.2f}, "
            f"random {baseline:.2f})"
        )
    key = edges["k"]
    if math.isnan(key.mean):
        missing.append(
            f"a causal {a}->{b} key path (path patching is undefined: the model answers the clean and corrupted "
            f"induction pairs alike, logit difference {paths.clean_logit_diff:.2f} vs {paths.corrupted_logit_diff:.2f})"
        )
    elif not (key.significant and key.mean >= PATH_MIN):
        missing.append(
            f"a causal {a}->{b} key path (path patching restores {key.mean:.2f} [{key.ci_low:.2f}, {key.ci_high:.2f}]; "
            f"needs >= {PATH_MIN} with a CI excluding 0)"
        )
    return InductionStory(model_name=scores.model_name, holds=not missing, previous_head=a, induction_head=b,
        previous_token=previous, induction=induction, k_composition=comp["K"], q_composition=comp["Q"],
        v_composition=comp["V"], k_baseline=baseline, path_k=key.mean, path_k_ci_low=key.ci_low,
        path_k_ci_high=key.ci_high, path_q=edges["q"].mean, path_v=edges["v"].mean, missing=tuple(missing),
        scores=scores, paths=paths)


def induction_story(
    model,
    *,
    task: PermutationTask | TaskConfig | None = None,
    n: int = 2000,
    seed: int = 1234,
    n_pair: int = 2000,
    pair_seed: int = 0,
    n_boot: int = 1000,
    hooks: Sequence[tuple[str, Callable]] | None = None,
) -> InductionStory:
    """Measure (a), (b) and (c) of the module docstring on ``model`` and judge the story.

    (a) ``induction_scores`` on ``induction_test_set(V, n, seed)``; (b) ``composition_scores``
    (weights only: ``hooks`` do not apply); (c) ``path_patching_table`` on
    ``induction_patching_pair(task, n_pair, pair_seed)`` (``task``: a PermutationTask or its bare
    TaskConfig, the same either way; default the model's) with ``n_boot`` resamples.  ``hooks`` run in every forward.  Needs ``n_layers >= 2``.
    """
    config = model_config_of(model)
    if config.n_layers < 2:
        raise ValueError(f"the induction story needs n_layers >= 2 (a head before a head), {config.name} has 1")
    check_positive_int("n", n)
    check_seed(seed)
    check_int("n_pair", n_pair, 2)
    check_seed(pair_seed, "pair_seed")
    task = check_task_config(model, task, "task")
    hooks = check_hooks(model, hooks)
    scores = induction_scores(model, induction_test_set(config.V, n=n, seed=seed), hooks=hooks)
    composition = {kind: composition_scores(model, kind) for kind in KINDS}
    paths = path_patching_table(model, task=task, n=n_pair, seed=pair_seed, n_boot=n_boot, hooks=hooks)
    return judge_induction_story(scores, composition, paths)
