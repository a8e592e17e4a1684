"""perm_circuits.metric: the one metric convention, its one check, and docs/analyses.md's section on it
(its code block runs as written and gives the numbers the page states)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from perm_circuits.metric import bind_metric, check_metric, check_rows, metric_rows, reduce_rows

DOC = Path(__file__).resolve().parent.parent / "docs" / "analyses.md"


def test_bind_metric_calls_two_argument_metrics_with_the_batch_and_one_argument_ones_without():
    logits, batch = torch.arange(24.0).reshape(2, 3, 4), torch.tensor([[1, 2, 3], [0, 1, 2]])
    two = bind_metric(lambda logits, batch: logits[:, -1, 0] + batch[:, 0], batch)
    one = bind_metric(lambda logits: logits[:, -1, 0], batch)
    assert two(logits).tolist() == [9.0, 20.0] and one(logits).tolist() == [8.0, 20.0]

    def star(*args):
        return args[0][:, 0, 0] * len(args)

    assert bind_metric(star, batch)(logits).tolist() == [0.0, 24.0]  # *args: the convention's two


def test_check_rows_names_the_expected_shape():
    assert check_rows(torch.ones(3), 3).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"shape \(3,\) \(batch,\), got \(\) \(a scalar: return the rows"):
        check_rows(torch.tensor(1.0), 3)
    with pytest.raises(ValueError, match=r"shape \(3,\) \(batch,\), got \(3, 2\)$"):
        check_rows(torch.ones(3, 2), 3)
    with pytest.raises(TypeError, match=r"must return a tensor of shape \(3,\) \(batch,\): one number per row, got list"):
        check_rows([1.0, 2.0, 3.0], 3)
    with pytest.raises(ValueError, match=r"NaN in 1 of 3 rows"):
        check_rows(torch.tensor([1.0, float("nan"), 2.0]), 3)
    assert torch.isnan(check_rows(torch.tensor([float("nan")] * 3), 3, finite=False)).all()  # skipped on request
    with pytest.raises(TypeError, match=r"got int"):
        check_metric(3)
    values = metric_rows(lambda logits: logits.sum(-1), torch.ones(2, 5, requires_grad=True), 2)
    assert values.dtype == torch.float64 and not values.requires_grad and values.tolist() == [5.0, 5.0]
    assert reduce_rows(torch.tensor([[1.0, 2.0], [3.0, 5.0]])).tolist() == [1.5, 4.0]


def _section_block() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The metric convention", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1
    return blocks[0]


def test_the_docs_example_runs_and_gives_one_baseline_everywhere(capsys):
    namespace: dict = {}
    exec(compile(_section_block(), str(DOC), "exec"), namespace)
    head, everything, table = namespace["head"], namespace["everything"], namespace["table"]
    criteria, found = namespace["criteria"], namespace["found"]
    assert everything.effect == pytest.approx(1.0, abs=1e-9)  # "exactly 1.0"
    baseline = table.baseline.metrics["metric"]
    assert head.clean == pytest.approx(baseline, abs=1e-6)
    assert criteria.groups[0].f_model == pytest.approx(baseline, abs=1e-6)
    from perm_circuits.discovery import prepare_edges

    edges = prepare_edges(namespace["model"], namespace["clean"], metric=namespace["first_token"],
                          corrupted=namespace["corrupted"])
    assert edges.full_metric == pytest.approx(baseline, abs=1e-5)
    assert found.method == "eap" and 0 < len(found.circuit) < edges.n_edges
    assert 0 < abs(head.effect) < 1 and abs(criteria.groups[0].faithfulness - 1) > 1e-3
    assert len(table.rows) == 21 and "metric" in capsys.readouterr().out
