"""Tests of perm_circuits.views.report (no browser): files, sections, numbers, offline, validation."""

from __future__ import annotations

import contextlib
import html
import io
import re
import sys
from pathlib import Path

import pytest

from perm_circuits import evaluate, load_pretrained, make_test_set
from perm_circuits.hooks import hook_count
from perm_circuits.views.html import (
    circuitsvis_bundle_js,
    local_script_refs,
    offline_plotly,
    plotly_js_file_name,
    plotly_js_inline,
    remote_resource_refs,
)

if "perm_circuits.views.report" not in sys.modules:  # check annotations at runtime, like conftest
    from jaxtyping import install_import_hook

    with install_import_hook("perm_circuits.views.report", "beartype.beartype"):
        import perm_circuits.views.report  # noqa: F401
from perm_circuits.reports import write_report  # noqa: E402  (computes, then renders with views.report)
from perm_circuits.views.report import (  # noqa: E402
    COMPARISON_SECTIONS,
    INDEX_PAGE,
    MODEL_SECTIONS,
)

pytestmark = pytest.mark.slow  # its shared fixture takes seconds (tests/README.md)

N = 500
MODEL_FIGURES = 9  # step accuracy, walkthrough, probe, attention, ablation, 2 x patching, FFN, training
MODEL_VIEWS = 5  # attention on probe / walkthrough, P(correct) on both, MLP neurons on the probe
_CACHE: dict[str, object] = {}


@pytest.fixture(scope="session")
def report_pages(tmp_path_factory) -> list[Path]:
    """The report of d16h1 (by name) and d32h2 (a model object), n = 500, written once per session.

    Shared with ``test_report_browser.py`` (it imports this fixture).
    """
    if "pages" not in _CACHE:
        out = tmp_path_factory.mktemp("report")
        d32h2 = load_pretrained("d32h2")
        stderr = io.StringIO()
        verdicts = {}
        import perm_circuits.reports as report_module  # computes the pages' analyses

        def recorded(model, *args, **kwargs):  # keep each page's verdict, to check the page's numbers
            verdict = head_roles(model, *args, **kwargs)
            verdicts[verdict.model_name] = verdict
            return verdict

        head_roles = report_module.head_roles
        with contextlib.redirect_stderr(stderr), pytest.MonkeyPatch.context() as patch:
            patch.setattr(report_module, "head_roles", recorded)
            pages = write_report(["d16h1", d32h2], out, n=N, progress=False)
        _CACHE.update(pages=pages, out=out, d32h2=d32h2, stderr=stderr.getvalue(), verdicts=verdicts)
    return _CACHE["pages"]  # type: ignore[return-value]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_one_page_per_model_and_a_comparison(report_pages):
    out = _CACHE["out"]
    assert report_pages == [out / "d16h1.html", out / "d32h2.html", out / INDEX_PAGE]
    for page in report_pages:
        assert 1_000_000 < page.stat().st_size < 3_000_000  # the circuitsvis bundle is inlined, plotly.js is not
    from perm_circuits.views.report import REPORT_MARKER  # the list of pages, so a rerun may overwrite them

    # one shared plotly.js beside the pages
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [REPORT_MARKER, plotly_js_file_name(), *(p.name for p in report_pages)]
    )
    assert _CACHE["stderr"] == ""  # progress=False: no bar
    assert hook_count(_CACHE["d32h2"]) == 0


def test_every_section_heading_is_on_the_page(report_pages):
    for page in report_pages[:2]:
        text = _text(page)
        headings = re.findall(r"<h2 id=\"[^\"]+\">([^<]+)</h2>", text)
        assert headings == [html.escape(h, quote=False) for h in MODEL_SECTIONS]
        for heading in MODEL_SECTIONS:  # and the table of contents links to each
            assert f'>{html.escape(heading, quote=False)}</a></li>' in text
    index = _text(report_pages[2])
    assert re.findall(r"<h2 id=\"[^\"]+\">([^<]+)</h2>", index) == list(COMPARISON_SECTIONS)


def test_pages_are_offline_with_each_bundle_once(report_pages):
    bundle, plotly_js = circuitsvis_bundle_js(), plotly_js_inline()
    for page in report_pages:
        text = _text(page)
        assert remote_resource_refs(text) == []
        assert "unpkg" not in text
        assert re.search(r"https?://[^\s\"'`<>]*cdn", text) is None, "a CDN address in the page"
        assert local_script_refs(text, page.parent) == [plotly_js_file_name()]  # the only script src
        assert text.count(bundle[:300]) == 1, page.name
        assert text.count(plotly_js[:300]) == 0, page.name  # loaded from the shared file instead
    from plotly.offline import get_plotlyjs

    shared = (report_pages[0].parent / plotly_js_file_name()).read_text(encoding="utf-8")
    assert shared.partition("\n")[2] == offline_plotly(get_plotlyjs())  # after the perm_circuits marker line
    assert re.search(r"https?://[^\s\"'`<>]*cdn", shared) is None, "a CDN address in the shared plotly.js"
    for page in report_pages[:2]:
        text = _text(page)
        assert text.count('class="plotly-graph-div"') == MODEL_FIGURES
        assert text.count('class="pc-view" data-circuitsvis=') == MODEL_VIEWS
        for component in ("AttentionHeads", "ColoredTokens", "TextNeuronActivations"):
            assert f'data-circuitsvis="{component}"' in text
    index = _text(report_pages[2])
    assert index.count('class="plotly-graph-div"') == 2
    assert index.count('class="pc-view" data-circuitsvis="AttentionHeads"') == 2  # the probe, one per model


def test_verdict_summary_and_claims_are_on_the_page(report_pages):
    from perm_circuits.analysis import head_roles
    from perm_circuits.views.report import N_BOOT, page_sizes

    model = load_pretrained("d16h1")
    n_roles, n_patch, _ = page_sizes(N)
    verdict = head_roles(model, n=n_roles, n_pair=n_patch, n_boot=N_BOOT)
    text = _text(report_pages[0])
    for line in verdict.summary().splitlines():
        line = re.sub(r"^- (\[(supported|contradicted|inconclusive)\] )?", "", line)
        assert html.escape(line, quote=False) in text, line
    for claim in verdict.claims:  # the claims table: one row per claim, with its status badge
        assert f"<th>{claim.claim}</th>" in text
    assert text.count('class="pc-status pc-') >= 2 * len(verdict.claims)
    index = _text(report_pages[2])
    assert "Verdict: the study" in index and index.count('class="pc-verdict"') == 2


def test_proposed_circuits_table_on_the_d32h2_page(report_pages):
    verdict = _CACHE["verdicts"]["d32h2"]
    text = _text(report_pages[1])
    assert "<h3>Proposed circuits (IOI criteria)</h3>" in text
    table = text.split("<h3>Proposed circuits (IOI criteria)</h3>")[1].split("</table>")[0]
    assert [c.skill for c in verdict.circuits] == ["elimination", "recall"]
    for item in verdict.circuits:
        m = item.measured
        assert f"<th>{item.skill}</th>" in table
        assert html.escape(", ".join(item.nodes)) in table  # the nodes
        assert f"<td>{m.faithfulness:.3f}</td>" in table and f"<td>{m.faithfulness_error:.3f}</td>" in table
        assert f"<td>{m.completeness:.3f} ({item.metrics.completeness_method})</td>" in table
        for entry in m.minimality:
            assert f"{entry.node}: {entry.minimality:.3f}" in table
        for how in verdict.hows:  # the faithfulness under every mode, unfaithful ones flagged
            row = item.by_mode.get(how, item.skill)
            flag = "" if dict(item.faithful_by_how)[how] else f" (NOT faithful: error {row.faithfulness_error:.3f})"
            assert f"<td>{row.faithfulness:.3f}{flag}</td>" in table
    assert verdict.circuit("recall").nodes == ("L0H0@last", "L0H1@last", "L0MLP@last")
    assert table.count("MODE-DEPENDENT") == sum(c.mode_dependent for c in verdict.circuits)
    assert "faithfulness (zero)" in table and "faithfulness (optimal)" in table
    assert "<h3>Roles under every ablation mode (mode-dependent roles flagged)</h3>" in text  # kept


def test_evaluation_table_numbers(report_pages):
    model = load_pretrained("d16h1")
    result = evaluate(model, make_test_set(model.task_config, n=N))
    text = _text(report_pages[0])
    assert f"{N} test samples, test loss {result.test_loss:.4f}" in text
    for step in result.detail.steps:
        assert f"<td>{100 * step.accuracy:.2f}%</td>" in text
        assert f"<td>{step.mae_uniform:.6f}</td>" in text
    assert f"<td>{100 * result.metrics['elimination_accuracy']:.2f}%</td>" in text
    probs = ", ".join(f"p({v})={p:.4f}" for v, p in enumerate(result.detail.probe, start=1))
    assert probs in text


def test_provenance_and_training_history(report_pages):
    for page, name in zip(report_pages[:2], ("d16h1", "d32h2")):
        metadata = load_pretrained(name).metadata
        text = _text(page)
        assert html.escape(metadata["command"], quote=False) in text
        assert f"{len(metadata['history'])} epochs" in text  # training curves from the history
        assert f"{metadata['metrics']['test_loss']:.4f}" in text
    assert "pretrained model 'd16h1'" in _text(report_pages[0])
    assert "model object passed to write_report" in _text(report_pages[1])
    index = _text(report_pages[2])
    assert 'href="d16h1.html"' in index and 'href="d32h2.html"' in index


UNKNOWN = r"'no_such_model' is neither a pretrained model \['d16h1', 'd16h1l2-any', 'd32h1', 'd32h2'\] nor a checkpoint folder"


@pytest.mark.parametrize(
    "models, n, error, match",
    [
        (["no_such_model"], N, ValueError, UNKNOWN),
        (["d16h1", "no_such_model"], N, ValueError, UNKNOWN),
        (["d16h1"], 0, ValueError, r"n must be a positive int \(test sequences\), got 0"),
        (["d16h1"], -5, ValueError, r"n must be a positive int \(test sequences\), got -5"),
        ([], N, ValueError, "models is empty: give at least one pretrained name, checkpoint folder or model"),
        ([42], N, TypeError, r"models\[0\] must be a pretrained name, a checkpoint folder or a model, got int"),
    ],
)
def test_bad_inputs_raise_before_writing(tmp_path, models, n, error, match):
    out = tmp_path / "out"
    with pytest.raises(error, match=match) as info:
        write_report(models, out, n=n, progress=False)
    assert type(info.value) is error
    assert not out.exists()


def test_bad_output_and_checkpoint_folder(tmp_path):
    file = tmp_path / "file.html"
    file.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        write_report(["d16h1"], file, n=N, progress=False)
    empty = tmp_path / "not_a_checkpoint"
    empty.mkdir()
    with pytest.raises(ValueError, match="config.json"):
        write_report([str(empty)], tmp_path / "out", n=N, progress=False)
    assert not (tmp_path / "out").exists()


def test_progress_bar_goes_to_stderr_and_is_silenced(tmp_path, capsys):
    for progress in (True, False):
        with pytest.raises(ValueError, match=UNKNOWN):
            write_report(["d16h1", "no_such_model"], tmp_path / "out", n=N, progress=progress)
        err = capsys.readouterr().err
        assert ("report" in err) is progress


def test_cli_rejects_unknown_model(tmp_path, capsys):
    from perm_circuits.cli import main

    assert main(["report", "no_such_model", "--out", str(tmp_path / "out")]) == 2
    assert "no_such_model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_page_names_are_unique_and_safe():
    from perm_circuits.views.report import file_stem

    taken = {"index"}
    assert [file_stem(n, taken) for n in ("d16h1", "d16h1", "index", "a b/c")] == [
        "d16h1", "d16h1-2", "index-2", "a_b_c",
    ]


def test_models_resolve_from_names_folders_and_objects():
    from perm_circuits.models import PRETRAINED_DIR
    from perm_circuits.reports import _resolve

    name, source, model = _resolve(str(PRETRAINED_DIR / "d16h1"), 0)
    assert name == "d16h1" and source.startswith("checkpoint folder") and model.metadata["command"]
    name, source, same = _resolve(model, 1)
    assert (name, source, same) == ("d16h1", "model object passed to write_report", model)
    with pytest.raises(ValueError, match="neither a pretrained model"):
        _resolve("d64h8", 0)


def test_untrained_models_without_metadata_and_another_V(tmp_path):
    from perm_circuits import ModelConfig, build_model

    v4 = build_model(ModelConfig(d_model=16, n_heads=2, V=4))
    fresh = build_model("d16h1")
    pages = write_report([v4, fresh], tmp_path, n=100, progress=False)
    assert [p.name for p in pages] == ["d16h2.html", "d16h1.html", INDEX_PAGE]
    bundle = circuitsvis_bundle_js()[:300]
    for page in pages:
        text = _text(page)
        assert text.count(bundle) == 1 and remote_resource_refs(text) == []
    v4_text, fresh_text = _text(pages[0]), _text(pages[1])
    assert "The study's probe is defined for V = 5; this model has V = 4." in v4_text
    assert "test sequence [" in v4_text  # views on test sequences instead of the study's V = 5 ones
    for text in (v4_text, fresh_text):
        assert "No training metadata is stored with this model" in text
        assert "No per-epoch training history is stored with this model" in text
    assert hook_count(v4) == 0 and hook_count(fresh) == 0


def test_report_refuses_a_folder_it_did_not_write(tmp_path):
    import json

    from perm_circuits import ModelConfig, build_model
    from perm_circuits.views.report import REPORT_MARKER

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"non-empty folder that perm-circuits report did not write .*force=True \(CLI: --force\)"):
        write_report(["d16h1"], out, n=100, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    from perm_circuits.views.report import check_out  # write_report's own check (beartype runs first in tests)

    with pytest.raises(TypeError, match="force must be a bool, got str"):
        check_out(out, "yes")
    model = build_model("d16h1")
    pages = write_report([model], out, n=100, progress=False, force=True)
    assert [p.name for p in pages] == ["d16h1.html"] and (out / "notes.txt").read_text() == "keep me"
    shared = plotly_js_file_name()  # the shared plotly.js is the report's too: a rerun may replace it
    assert json.loads((out / REPORT_MARKER).read_text()) == {"format": "perm_circuits.report", "files": ["d16h1.html", shared]}
    # a folder holding the marker is the report's own: rewriting it needs no force, the marker accumulates
    other = build_model(ModelConfig(d_model=16, n_heads=2))
    pages = write_report([other, model], out, n=100, progress=False)
    assert [p.name for p in pages] == ["d16h2.html", "d16h1.html", INDEX_PAGE]
    assert json.loads((out / REPORT_MARKER).read_text())["files"] == ["d16h1.html", "d16h2.html", INDEX_PAGE, shared]
    # empty and new folders need no force either
    (tmp_path / "empty").mkdir()
    assert write_report([model], tmp_path / "empty", n=100, progress=False)[0].is_file()


def test_cli_report_refuses_and_passes_force(tmp_path, capsys, monkeypatch):
    from perm_circuits.cli import main
    from perm_circuits import reports as report

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("x")
    assert main(["report", "d16h1", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--force" in err and "did not write" in err
    seen = {}
    monkeypatch.setattr(report, "write_report", lambda models, out, **kwargs: seen.update(kwargs) or [])
    assert main(["report", "d16h1", "--out", str(out), "--quiet", "--force"]) == 0
    assert seen == {"n": 5000, "progress": False, "force": True, "device": None}


def test_pages_open_with_each_skills_circuit_and_findings(report_pages):
    """Before the sections: the discovered circuit of elimination and recall (ACDC, resample
    ablation) as SVG, and three to five findings, each naming its ablation mode."""
    text = (report_pages[1]).read_text(encoding="utf-8")  # d32h2
    hero = text[text.index('<div class="pc-hero">'):text.index('<ul class="pc-toc">')]
    assert hero.count("<svg") == 2 and "elimination: ACDC, resample ablation" in hero and "recall: ACDC" in hero
    findings = re.findall(r"<li>([^<]+)</li>", hero[hero.index('class="pc-findings"'):])
    assert 3 <= len(findings) <= 5
    assert all("ablation" in line for line in findings)
    assert text.index('class="pc-hero"') < text.index('<h2 id=')  # before every section
    assert text.count('<details class="pc-details">') == 6  # the table sections start collapsed


def test_the_first_screen_agrees_with_itself(report_pages):
    """The headline recall circuit is found with the findings' reference (ablated values from the whole
    test set) and says so in its caption, in one line: on d32h2 it keeps L0H0, which the findings say
    recall runs through (mean-ablated recall 0%); against the recall rows alone it would grey L0H0 out."""
    text = (report_pages[1]).read_text(encoding="utf-8")  # d32h2
    hero = text[text.index('<div class="pc-hero">'):text.index('<ul class="pc-toc">')]
    captions = re.findall(r"<figcaption>([^<]+)</figcaption>", hero)
    recall = next(c for c in captions if c.startswith("recall:"))
    assert "resample ablation (ablated values from the whole test set), metric: " in recall
    svg = hero[hero.index("recall</text>") if "recall</text>" in hero else 0:]
    assert re.search(r"L0H0-&gt;|L0H0->", svg), "the recall circuit keeps L0H0 against the test set"


def test_the_skill_reference_is_an_argument_and_changes_the_d32h2_recall_circuit(pretrained):
    from perm_circuits.discovery.skills import discover_skills
    from perm_circuits.tasks.permutation import PermutationTask

    model = pretrained("d32h2")
    batch = PermutationTask(model.task_config).test_set(600, seed=1234)
    by_ref = {ref: discover_skills(model, batch, reference=ref, max_rows=150)["recall"] for ref in ("test", "skill")}
    assert any(edge.startswith("L0H0->") for edge in by_ref["test"].circuit)
    assert not any(edge.startswith("L0H0->") for edge in by_ref["skill"].circuit)
    assert by_ref["test"].params["reference"] == "test" and by_ref["skill"].params["reference"] == "skill"
    with pytest.raises(ValueError, match="reference must be one of"):
        discover_skills(model, batch, reference="recall")
