"""The shipped models' algorithms written as hypotheses, and the features of a permutation sequence.

A sequence is ``x1 y1 x2 y2 x3 y3 x4 y4 x5`` (positions 0..8); the last step answers ``y5`` (the one
value not yet used: *elimination*) or, when ``x5`` repeats ``x_k``, ``y_k`` (*recall*). The
features are functions of a row's tokens (:class:`~perm_circuits.analysis.hypothesis.Feature`);
the hypotheses claim what each component at the last position reads, and are scored with
:func:`~perm_circuits.analysis.hypothesis.causal_scrub` (Chan et al. 2022) by
``scripts/hypotheses.py``:

- **study** ("attention binds, the FFN looks up", the seed study's story): every head carries the
  *binding* of the query, the ``y`` paired with the earlier ``x`` equal to ``x5`` (0 when none),
  with the used ``y`` values; the MLP looks up the answer from them.
- **shortcut** (ours, "a position-1 shortcut"): the heads carry the used ``y`` values, ``y1`` and
  whether ``x5`` repeats ``x1``, never the binding of another position; the MLP maps them to the
  answer.
- **gate** (ours for d32h2, "a duplicate-token head gates an MLP lookup"): L0H0 carries only
  whether ``x5`` repeats ``x1``; L0H1 the used ``y`` values and ``y1``; the MLP the answer.
- **query** (ours for the two-layer d16h1l2-any, after ``docs/general_recall.md``): layer 0 at the
  last position finds which earlier slot ``k`` holds ``x5`` (its head and MLP carry ``k`` and
  ``x5``: a positional query), the layer-1 head reads the bound ``y_k`` and the used values, its
  MLP the answer.
- **shortcut_x5** (ours, one-layer models): the shortcut, with each head also carrying the query
  ``x5`` itself (a head's output mixes in the value at its own position, so it is not a function of
  the earlier pairs alone).
- **query_slot** (ours, the two-layer model): the positional query, with the layer-1 head also
  carrying the slot ``k`` and ``x5``, and the layer-1 MLP the slot ``k`` beside the answer.

Every hypothesis also claims the last position's embedding carries ``x5``. Elimination is scored at
the last step (the docs' ``elimination_accuracy``) by :func:`score_hypotheses`, and at every step
``k = 2..5`` by :func:`score_steps`: the same hypotheses written at step ``k``'s query position
(:func:`features_at`: the query ``x_k``, the ``y`` values used before it, ``y1``, whether ``x_k``
repeats ``x1``, the bound ``y``, the answer set). At steps 1-4 the answer is not determined by the
context (the model's accuracy there is near chance), so the metric is elimination itself: the answer
is a value not yet used (:func:`unused_answer`, equal to the accuracy at the last step; at step 1
every value is unused, so step 1 is not scored).
"""

from __future__ import annotations

from typing import Any

from perm_circuits.analysis.hypothesis import Feature, Hypothesis, causal_scrub
from perm_circuits.analysis.hypothesis.spec import batch_tokens
from perm_circuits.checks import check_positive_int, check_seed

__all__ = ["FEATURES", "LAST", "SKILLS", "STEP_POSITIONS", "features_at", "last_step_accuracy", "unused_answer",
           "score_hypotheses", "score_steps", "shipped_hypotheses", "skill_batch"]

SKILLS = ("elimination", "recall", "recall_any")

LAST = 8
STEP_POSITIONS = (0, 2, 4, 6, 8)  # step k's query sits at 2(k - 1)


def _bound_y(row: tuple) -> int:
    return next((row[2 * k + 1] for k in range(4) if row[2 * k] == row[LAST]), 0)


def _answer(row: tuple) -> int:
    bound = _bound_y(row)
    return bound if bound else (set(range(1, 6)) - set(row[1:LAST:2])).pop()


FEATURES = {
    "x5": Feature("x5", lambda row: row[LAST]),
    "used": Feature("used y values", lambda row: frozenset(row[1:LAST:2])),
    "y1": Feature("y1", lambda row: row[1]),
    "repeat1": Feature("x5 repeats x1", lambda row: row[LAST] == row[0]),
    "bound": Feature("y bound to x5", _bound_y),
    "answer": Feature("answer", _answer),
    "slot": Feature("matched slot k", lambda row: next((k for k in range(4) if row[2 * k] == row[LAST]), -1)),
}


def features_at(position: int) -> dict[str, Feature]:
    """:data:`FEATURES` written for the step whose query sits at ``position`` (``FEATURES`` itself at the
    last position): the query, the ``y`` values used before it, ``y1`` (0 at step 1), whether the query
    repeats ``x1``, the bound ``y``, the answer set (the bound ``y``, else the unused values) and the slot."""
    if position not in STEP_POSITIONS:
        raise ValueError(f"position must be a query position {STEP_POSITIONS}, got {position!r}")
    if position == LAST:
        return FEATURES
    p = position

    def bound(row: tuple) -> int:
        return next((row[2 * k + 1] for k in range(p // 2) if row[2 * k] == row[p]), 0)

    return {
        "x5": Feature("query x", lambda row: row[p]),
        "used": Feature("used y values", lambda row: frozenset(row[1:p:2])),
        "y1": Feature("y1", lambda row: row[1] if p else 0),
        "repeat1": Feature("query repeats x1", lambda row: p > 0 and row[p] == row[0]),
        "bound": Feature("y bound to the query", bound),
        "answer": Feature("answer set", lambda row: bound(row) or frozenset(set(range(1, 6)) - set(row[1:p:2]))),
        "slot": Feature("matched slot k", lambda row: next((k for k in range(p // 2) if row[2 * k] == row[p]), -1)),
    }


def shipped_hypotheses(n_layers: int, n_heads: int, position: int = LAST) -> dict[str, Hypothesis]:
    """The study's and the shortcut hypothesis, with the gate (one layer, two heads) or the query (two
    layers, one head each) hypothesis, for a shipped model (module docstring), at the query ``position``."""
    f = features_at(position)
    heads = [f"L{layer}H{head}@{position}" for layer in range(n_layers) for head in range(n_heads)]
    mlps = [f"L{layer}MLP@{position}" for layer in range(n_layers)]
    embed = {f"embed@{position}": f["x5"]}
    out = {
        "study": Hypothesis.of({**embed, **{h: (f["bound"], f["used"]) for h in heads},
                                **{m: f["answer"] for m in mlps}}, name="study",
                               description="attention binds (heads carry the y bound to x5), the FFN looks up"),
        "shortcut": Hypothesis.of({**embed, **{h: (f["used"], f["y1"], f["repeat1"]) for h in heads},
                                   **{m: f["answer"] for m in mlps}}, name="shortcut",
                                  description="a position-1 shortcut: heads carry used ys, y1 and x5 == x1"),
    }
    if n_layers == 1:
        out["shortcut_x5"] = Hypothesis.of({**embed, **{h: (f["used"], f["y1"], f["repeat1"], f["x5"]) for h in heads},
                                            **{m: f["answer"] for m in mlps}}, name="shortcut_x5",
                                           description="the shortcut, with the heads also carrying the query x5 "
                                                       "itself (the value their output mixes in at its own position)")
    if n_layers == 1 and n_heads == 2:
        out["gate"] = Hypothesis.of({**embed, heads[0]: f["repeat1"], heads[1]: (f["used"], f["y1"]),
                                     mlps[0]: f["answer"]}, name="gate",
                                    description="a duplicate-token head (L0H0) gates an MLP lookup")
    if n_layers == 2 and n_heads == 1:
        out["query"] = Hypothesis.of({**embed, heads[0]: (f["slot"], f["x5"]), mlps[0]: (f["slot"], f["x5"]),
                                      heads[1]: (f["bound"], f["used"]), mlps[1]: f["answer"]}, name="query",
                                     description="layer 0 turns the matched x_k into a positional query, "
                                                 "the layer-1 head reads y_k")
        out["query_slot"] = Hypothesis.of({**embed, heads[0]: (f["slot"], f["x5"]), mlps[0]: (f["slot"], f["x5"]),
                                           heads[1]: (f["bound"], f["used"], f["slot"], f["x5"]),
                                           mlps[1]: (f["answer"], f["slot"])}, name="query_slot",
                                          description="the positional query, with the layer-1 head also carrying "
                                                      "the slot k and x5 and the layer-1 MLP the slot k")
    return out


def last_step_accuracy(logits, batch):
    """Per-row accuracy at the last step: the docs' ``elimination_accuracy`` on rows without a repeat,
    ``recall_accuracy`` on rows whose ``x5`` repeats an earlier query."""
    return (logits[:, LAST].argmax(-1) == batch.targets[:, LAST]).float()


def unused_answer(position: int):
    """The per-row metric of elimination at the step whose query sits at ``position``: the argmax is a
    value ``1..5`` not used by the ``y`` values before it (at the last step this is the accuracy on rows
    without a repeat, the docs' ``elimination_accuracy``; at step 1 every value is unused)."""
    def metric(logits, batch):
        tokens = batch_tokens(batch).to(logits.device)
        answer = logits[:, position].argmax(-1)
        used = (tokens[:, 1:position:2] == answer[:, None]).any(1)
        return ((answer >= 1) & (answer <= 5) & ~used).float()

    metric.__name__ = f"unused_answer@{position}"
    return metric


def skill_batch(skill: str, n: int, seed: int):
    """``n`` test sequences of one skill: ``elimination`` (no repeat), ``recall`` (``x5 = x1``, the
    study's repeat), ``recall_any`` (``x5 = x_k``, ``k`` uniform in 1..4)."""
    from perm_circuits.tasks.permutation_data import TaskConfig, make_batch

    if skill not in SKILLS:
        raise ValueError(f"skill must be one of {SKILLS}, got {skill!r}")
    check_positive_int("n", n)
    check_seed(seed)
    sources = (1, 2, 3, 4) if skill == "recall_any" else (1,)
    config = TaskConfig(repeat_ratio=0.0 if skill == "elimination" else 1.0, repeat_sources=sources)
    return make_batch(config, n, split="test", seed=seed)


def score_hypotheses(model, skill: str, *, n: int = 2000, seed: int = 0, n_boot: int = 200) -> list[dict[str, Any]]:
    """Causal-scrubbing recovery of every :func:`shipped_hypotheses` entry on ``skill``'s rows: one row
    for the whole hypothesis (``component = "all"``, with its bootstrap interval), one per claim alone."""
    from perm_circuits.model_shape import model_shape

    shape = model_shape(model)
    batch = skill_batch(skill, n, seed)
    rows = []
    for name, hypothesis in shipped_hypotheses(shape.n_layers, shape.n_heads).items():
        result = causal_scrub(model, hypothesis, batch, last_step_accuracy, n_boot=n_boot, seed=seed)
        for record in result.to_dataframe().to_dict("records"):
            rows.append({"skill": skill, "hypothesis": name, **record, "model_metric": result.model_metric,
                         "random_metric": result.random_metric, "n_rows": n, "description": hypothesis.description})
    return rows


def score_steps(model, *, n: int = 2000, seed: int = 0, n_boot: int = 200) -> list[dict[str, Any]]:
    """Elimination at every step: each :func:`shipped_hypotheses` entry written at step ``k``'s query
    position, scrubbed on ``n`` test sequences without a repeat and scored by the
    model's answer being a value not yet used (:func:`unused_answer`); rows as :func:`score_hypotheses`'s
    with ``step`` and ``position``. Step 1 is left out: every value is unused there, so the metric
    cannot fail."""
    from perm_circuits.model_shape import model_shape

    shape = model_shape(model)
    batch = skill_batch("elimination", n, seed)
    rows = []
    for step, position in enumerate(STEP_POSITIONS, start=1):
        if step == 1:
            continue
        metric = unused_answer(position)
        for name, hypothesis in shipped_hypotheses(shape.n_layers, shape.n_heads, position).items():
            result = causal_scrub(model, hypothesis, batch, metric, n_boot=n_boot, seed=seed)
            for record in result.to_dataframe().to_dict("records"):
                rows.append({"skill": "elimination", "step": step, "position": position, "hypothesis": name, **record,
                             "model_metric": result.model_metric, "random_metric": result.random_metric,
                             "n_rows": n, "description": hypothesis.description})
    return rows
