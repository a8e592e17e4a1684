"""Tests of the task report's first screen (no browser): the circuit picture and the findings open the
page, every section below is collapsed, and the findings are the report's own numbers.

Two tasks' tiny models: the hand-built induction model of the bigram-trigger task (Bietti et al.
2023) and the teacher of the permutation-chain task.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from perm_circuits.analysis.report_data import TaskReportData, task_report_data
from perm_circuits.views.html import remote_resource_refs
from perm_circuits.views.task_page import render_task_report

_CACHE: dict[str, dict[str, tuple[TaskReportData, Path]]] = {}


def _models() -> dict:
    from perm_circuits.systems.birth_model import BirthModelConfig, handbuilt_induction_model
    from perm_circuits.systems.forner_model import teacher_model
    from perm_circuits.tasks.bigram import BigramTriggerTask

    forner = teacher_model()
    birth = handbuilt_induction_model(BirthModelConfig(N=16, T=32, d_model=128, seed=0))
    return {  # page -> (model, task, ablation modes, analyses)
        "birth": (birth, BigramTriggerTask(N=16, T=32), ("zero",), True),
        "forner": (forner, forner.task, ("zero", "mean"), True),
        "forner_bare": (forner, forner.task, (), False),  # no ablation, no analyses: the fallback findings
    }


@pytest.fixture(scope="session")
def task_pages(tmp_path_factory) -> dict[str, tuple[TaskReportData, Path]]:
    """name -> (the computed report data, its page), written once per session.

    Shared with ``test_task_report_browser.py`` (it imports this fixture).
    """
    if "pages" not in _CACHE:
        out = tmp_path_factory.mktemp("task_report")
        pages = {}
        for name, (model, task, hows, analyses) in _models().items():
            data = task_report_data(model, task, n=60, n_sequences=1, ablation_hows=hows, analyses=analyses,
                                    n_analysis=60)
            pages[name] = data, render_task_report(data, out / name)
        _CACHE["pages"] = pages
    return _CACHE["pages"]


def _findings(text: str) -> list[str]:
    block = re.search(r'<ul class="pc-findings">(.*?)</ul>', text, re.DOTALL).group(1)
    return [html.unescape(item) for item in re.findall(r"<li>(.*?)</li>", block, re.DOTALL)]


@pytest.mark.parametrize("name, at_least", [("birth", 9), ("forner", 8), ("forner_bare", 3)])
def test_the_circuit_and_findings_open_the_page_and_every_section_below_is_collapsed(task_pages, name, at_least):
    data, page = task_pages[name]
    text = page.read_text()
    assert remote_resource_refs(text) == []
    details = re.findall(r"<details[^>]*>", text)
    assert len(details) >= at_least and all(tag == '<details class="pc-details">' for tag in details)  # all closed
    # every section heading is a <details> summary: nothing but the hero stays expanded
    assert text.count("<h2>") == text.count("<summary><h2>") == len(details)
    first = text.index("<details")
    assert text.index('<div class="pc-hero">') < text.index('<ul class="pc-findings">') < first
    assert _findings(text) == list(data.findings) and 3 <= len(data.findings) <= 5
    assert all("ablation" in line for line in data.findings)  # each names its ablation mode, or "no ablation"


def test_the_birth_page_draws_its_discovered_circuit_first(task_pages):
    data, page = task_pages["birth"]
    text = page.read_text()
    hero = text[text.index('<div class="pc-hero">'): text.index("<details")]
    result = data.skills["task"]
    assert hero.count("<svg") == 1 and f"{result.n_edges} of {len(result.scores)} edges" in hero
    nodes = re.findall(r"<g class='node (in-circuit|idle)' data-node='([^']+)'>", hero)
    assert {node for _, node in nodes} >= {"L0H0", "L1H0"} and len(nodes) >= 4  # embed, both heads, logits
    assert ("in-circuit", "L0H0") in nodes and ("in-circuit", "L1H0") in nodes
    assert "L0H0->L1H0.k" in result.circuit  # K-composition, as the existing task-report test finds
    for section in ("Task and model", "Metrics", "Test sequence 0", "Attention views (test sequence 0)", "Ablation",
                    "Attention scores", "Activation patching", "Direct logit attribution", "Circuit"):
        assert f"<summary><h2>{section}</h2></summary>" in text, section
    assert text.count(".AttentionHeads, {") == 2  # both layers' circuitsvis views, inside their <details>


def test_the_findings_state_the_reports_numbers(task_pages):
    data, _ = task_pages["birth"]
    metrics = data.evaluation.metrics
    assert data.findings[0].startswith(f"Task metrics on 60 test sequences (no ablation): in_context_acc "
                                       f"{metrics['in_context_acc']:.3f}")
    result = data.skills["task"]
    assert data.findings[1].startswith(f"Discovered task circuit (ACDC, resample ablation): {result.n_edges} of "
                                       f"{len(result.scores)} edges, faithfulness {result.faithfulness:.2f}")
    frame = data.ablation.to_dataframe().set_index(["component", "how"])
    drop = frame.loc[("L1H0", "zero"), "delta_in_context_acc"]
    assert drop < -0.5 and drop == frame.xs("zero", level="how")["delta_in_context_acc"].min()  # the induction head
    assert data.findings[2] == (f"Most important component under zero ablation: L1H0 (in_context_acc "
                                f"{metrics['in_context_acc']:.3f} -> {metrics['in_context_acc'] + drop:.3f}, "
                                f"change {drop:+.3f}).")
    assert "Proposed circuit (mean ablation): 2 component(s) (L0H0@all, L1H0@all)" in data.findings[3]
    previous = data.attention.to_dataframe().set_index("head").loc["L0H0", "previous"]
    assert previous > 0.99 and data.findings[4] == (
        f"Top attention pattern (no ablation): L0H0 attends to the previous position with mean weight {previous:.2f} "
        "over query positions >= 1.")

    data, _ = task_pages["forner"]  # no discovered circuit: the ablation line moves up
    assert "Most important component under zero ablation: L0H0 (teacher_forced_accuracy 1.000 -> " in data.findings[1]

    data, _ = task_pages["forner_bare"]  # no ablation, no analyses: the fallbacks still give three or more lines
    sequence = data.sequences[0]
    loss = sequence["loss weight"] > 0
    hits = int((sequence["model's top token"][loss] == sequence["target"][loss]).sum())
    assert hits == int(loss.sum()) > 0  # the teacher is exact
    assert data.findings[1] == (f"On the 1 shown test sequence(s) (no ablation), the model's top token is the target "
                                f"at {hits} of {int(loss.sum())} loss positions.")
    assert any(line.startswith(f"Test loss (no ablation): {data.evaluation.test_loss:.3f} nats") for line in data.findings)
    assert len(data.findings) == 5 and data.findings[-1] == (
        f"Model size: {data.about['parameters']} parameters, {data.about['trainable parameters']} trainable "
        "(no ablation).")


def test_the_package_name_render_task_report_is_the_function_even_after_its_module_loads():
    """The page's module is ``views.task_page``; ``task_report`` (which computes) lives in ``perm_circuits.reports``."""
    import importlib

    import perm_circuits.views as views

    module = importlib.import_module("perm_circuits.views.task_page")
    assert views.render_task_report is module.render_task_report and callable(views.render_task_report)
    assert not hasattr(module, "task_report") and "task_report" not in views.__all__
