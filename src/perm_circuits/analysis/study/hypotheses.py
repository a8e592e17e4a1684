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

Every hypothesis also claims the last position's embedding carries ``x5``. Elimination is scored at
the last step (the docs' ``elimination_accuracy``), not at steps 1-4.
"""

from __future__ import annotations

from typing import Any

from perm_circuits.analysis.hypothesis import Feature, Hypothesis, causal_scrub
from perm_circuits.checks import check_positive_int, check_seed

__all__ = ["FEATURES", "LAST", "SKILLS", "last_step_accuracy", "score_hypotheses", "shipped_hypotheses", "skill_batch"]

SKILLS = ("elimination", "recall", "recall_any")

LAST = 8


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


def shipped_hypotheses(n_layers: int, n_heads: int) -> dict[str, Hypothesis]:
    """The study's and the shortcut hypothesis, with the gate (one layer, two heads) or the query (two
    layers, one head each) hypothesis, for a shipped model (module docstring)."""
    f = FEATURES
    heads = [f"L{layer}H{head}@{LAST}" for layer in range(n_layers) for head in range(n_heads)]
    mlps = [f"L{layer}MLP@{LAST}" for layer in range(n_layers)]
    embed = {f"embed@{LAST}": f["x5"]}
    out = {
        "study": Hypothesis.of({**embed, **{h: (f["bound"], f["used"]) for h in heads},
                                **{m: f["answer"] for m in mlps}}, name="study",
                               description="attention binds (heads carry the y bound to x5), the FFN looks up"),
        "shortcut": Hypothesis.of({**embed, **{h: (f["used"], f["y1"], f["repeat1"]) for h in heads},
                                   **{m: f["answer"] for m in mlps}}, name="shortcut",
                                  description="a position-1 shortcut: heads carry used ys, y1 and x5 == x1"),
    }
    if n_layers == 1 and n_heads == 2:
        out["gate"] = Hypothesis.of({**embed, heads[0]: f["repeat1"], heads[1]: (f["used"], f["y1"]),
                                     mlps[0]: f["answer"]}, name="gate",
                                    description="a duplicate-token head (L0H0) gates an MLP lookup")
    if n_layers == 2 and n_heads == 1:
        out["query"] = Hypothesis.of({**embed, heads[0]: (f["slot"], f["x5"]), mlps[0]: (f["slot"], f["x5"]),
                                      heads[1]: (f["bound"], f["used"]), mlps[1]: f["answer"]}, name="query",
                                     description="layer 0 turns the matched x_k into a positional query, "
                                                 "the layer-1 head reads y_k")
    return out


def last_step_accuracy(logits, batch):
    """Per-row accuracy at the last step: the docs' ``elimination_accuracy`` on rows without a repeat,
    ``recall_accuracy`` on rows whose ``x5`` repeats an earlier query."""
    return (logits[:, LAST].argmax(-1) == batch.targets[:, LAST]).float()


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
