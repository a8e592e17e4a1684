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
"""

from __future__ import annotations

from perm_circuits.analysis.hypothesis import Feature, Hypothesis

__all__ = ["FEATURES", "LAST", "shipped_hypotheses"]

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
}


def shipped_hypotheses(n_layers: int, n_heads: int) -> dict[str, Hypothesis]:
    """The study's, the shortcut and (two heads) the gate hypothesis for a 1- or 2-layer shipped model."""
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
    return out
