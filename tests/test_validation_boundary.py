"""Validation at the boundary (docs/dev/architecture.md, "Validation"): public functions and CLI
commands check their input once; private helpers trust their callers.

The mechanical half reads the source with ``ast``: in every module of the package, a private
function (a ``_name``, or any function of a ``_Private`` class) calls no validator (``check_*`` or
``_check*``) unless it is one itself (named ``_check*``), a CLI command's handler (``cli.COMMANDS``),
or listed in :data:`ALLOWED` with the user path that reaches it.  The behavioural half: a bad
argument to a public function here is refused, naming it, before any forward pass.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "perm_circuits"

AREA = tuple(sorted(
    path.name for path in PACKAGE.iterdir()
    if path.suffix == ".py" or (path.is_dir() and next(path.rglob("*.py"), None) is not None)
))
"""Where the rule is enforced: every module and subpackage of the package."""

# (file relative to the package, function qualname) -> the user path that reaches its check (none is a re-check).
ALLOWED = {
    ("discovery/benchmark.py", "_benchmark_runs"):
        "run_benchmark and benchmark_curves (public) share their argument checks here, run before the first job",
    ("discovery/scoring.py", "_ranked"):
        "roc_auc and average_precision (public) share their scores/truth/edges checks here",
    ("pages/render.py", "_number"):
        "render() formats the values of a numbers file a user edits (results/*.json): each value checked as read",
    ("train.py", "_study_model_config"):
        "train(ModelConfig or preset, ...) (public): the config's fit to the permutation task, checked only here",
    ("stacked.py", "_resolve_members"):
        "train_stacked(members, ...) (public): its members' architecture, checked once before any model is built",
    ("views/table_figures.py", "_heatmap_trace"):
        "heatmap, ablation_heatmap and patching_heatmap (public) pass a user's frame and column names here",
    ("analysis/circuits/criteria.py", "_setup"):
        "circuit_metrics, faithfulness_by_mode and propose_circuit (public): a user's hooks (and on any task "
        "the test set, reference and metric) checked where the problem is built, before its first forward",
    ("analysis/interventions/path_patching.py", "_prepare"):
        "path_patch and path_patching_table (public) share their argument checks here (options, n, task, "
        "corruption, hooks, the pair), run before the clean and corrupted forwards",
    ("analysis/probes/memory.py", "_token_probe"):
        "ov_memory_probe and mlp_memory_probe(targets=) (public): a user's targets, checked against the token "
        "map's size, known once the map (a weight product, no forward) is computed",
    ("analysis/study/recall_patching.py", "_unpatched_runs"):
        "generic_patch (every sweep built on it), find_recall_head and recall_patching (public): a user's pair "
        "and hooks, checked once before the two unpatched runs",
    ("analysis/study/scores.py", "_default_task"):
        "attention_by_source, the study's head_scores and its token scores (public): a user's task=, checked "
        "against the model's V",
    ("analysis/study/scores.py", "_task_head_scores"):
        "head_scores(task=any Task, or token ids) (public): the general path's test set and hooks, checked "
        "before its one forward",
    ("tasks/checkpoint.py", "_build_of"):
        "save_task_model(model_fields=, seed=) (public): the seed a user passes (or the model's cfg carries)",
    ("tasks/runner.py", "_entry_fields"):
        "task_model and check_model_fields (public; the CLI's train --task): a user's task and its model "
        "fields' names, checked once before a model is built",
    ("tasks/runner.py", "_default_config"):
        "default_model, task_model and check_model_fields (public; the CLI's train --task): a user's "
        "d_model, n_heads, n_layers and seed",
}


def _files():
    for entry in AREA:
        path = PACKAGE / entry
        yield from ([path] if path.is_file() else sorted(path.rglob("*.py")))


def _name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_validator(name: str | None) -> bool:
    return bool(name) and (name.startswith("check_") or name.startswith("_check"))


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _cli_handlers() -> set[str]:
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMMANDS" for t in node.targets):
            return {value.id for value in node.value.values}
    raise AssertionError("cli.py has no COMMANDS table")


def private_validator_calls() -> dict[tuple[str, str], list[str]]:
    """``{(file, qualname): [validator calls]}`` of every private, non-validator function in :data:`AREA`."""
    handlers = _cli_handlers()
    found: dict[tuple[str, str], list[str]] = {}

    def visit(node: ast.AST, scope: tuple[str, ...], where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, (*scope, child.name), where)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = (*scope, child.name)
                exempt = child.name.startswith("_check") or (where == "cli.py" and qual == (child.name,)
                                                              and child.name in handlers)
                if any(map(_private, qual)) and not exempt:
                    calls = [f"{_name(c)} (line {c.lineno})" for c in ast.walk(child)
                             if isinstance(c, ast.Call) and _is_validator(_name(c))]
                    if calls:
                        found[(where, ".".join(qual))] = calls
                    continue  # its nested functions were walked with it
                visit(child, qual, where)
            else:
                visit(child, scope, where)

    for path in _files():
        where = path.relative_to(PACKAGE).as_posix()
        visit(ast.parse(path.read_text(encoding="utf-8")), (), where)
    return found


def test_private_helpers_call_no_validator_outside_the_allowlist():
    found = private_validator_calls()
    unexpected = {key: calls for key, calls in found.items() if key not in ALLOWED}
    assert not unexpected, (
        "private helpers that validate (check at the public function or CLI command instead, or add the "
        f"helper to ALLOWED with the user path that reaches it): {unexpected}"
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED entries that no longer validate (remove them): {stale}"


def test_the_scan_reads_every_module_of_the_package():
    assert sorted(_files()) == sorted(PACKAGE.rglob("*.py"))
    assert {"analysis", "tasks", "evaluate.py", "metric.py", "hooks.py", "models.py", "circuit.py"} <= set(AREA)


def test_the_scan_sees_a_private_validator_call(tmp_path, monkeypatch):
    """The rule can fail: a private helper calling check_int is reported (and one named _check_* is not)."""
    (tmp_path / "mod.py").write_text(
        "from perm_circuits.checks import check_int\n"
        "def public(n):\n    return _helper(check_int('n', n))\n"
        "def _helper(n):\n    return check_int('n', n)\n"
        "def _check_n(n):\n    return check_int('n', n)\n"
        "class _Private:\n    def run(self, n):\n        return check_int('n', n)\n"
    )
    (tmp_path / "cli.py").write_text("COMMANDS = {}\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "AREA", ("mod.py",))
    assert sorted(private_validator_calls()) == [("mod.py", "_Private.run"), ("mod.py", "_helper")]


# ----------------------------------------------------------------------------- behaviour at the boundary


class _NoForward:
    """A forward pre-hook on ``model`` (and any extra patched callables) that fails the test when run."""

    def __init__(self, model, monkeypatch, *targets: tuple[object, str]) -> None:
        def boom(*args, **kwargs):
            raise AssertionError("a forward pass ran before the bad argument was refused")

        self.handle = model.register_forward_pre_hook(lambda module, args: boom())
        for owner, name in targets:
            monkeypatch.setattr(owner, name, boom)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


@pytest.fixture(scope="module")
def model(pretrained):
    return pretrained("d16h1")


@pytest.fixture(scope="module")
def batch(model):
    from perm_circuits.tasks import PermutationTask
    from perm_circuits.tasks.base import model_task

    task = model_task(model)
    assert isinstance(task, PermutationTask)
    return task.test_set(16, seed=0)


def test_the_forward_tripwire_fires(model, batch, monkeypatch):
    from perm_circuits.discovery import interventions

    with _NoForward(model, monkeypatch, (interventions, "_capture")):
        with pytest.raises(AssertionError, match="a forward pass ran"):
            model(batch.tokens)
        with pytest.raises(AssertionError, match="a forward pass ran"):
            interventions.prepare_edges(model, batch, how="zero")  # good arguments: reaches the edge forward
    assert model(batch.tokens[:2]).shape[:2] == batch.tokens[:2].shape  # the hook is gone afterwards


def test_prepare_edges_refuses_bad_metric_and_seed_arguments_before_any_forward(model, batch, monkeypatch):
    from perm_circuits.discovery import interventions

    with _NoForward(model, monkeypatch, (interventions, "_capture")):
        with pytest.raises(ValueError, match=r"^metric is required when batch is a tokens tensor"):
            interventions.prepare_edges(model, batch.tokens)
        with pytest.raises(ValueError, match=r"^seed must be in \[-2\*\*63, 2\*\*64\)"):
            interventions.prepare_edges(model, batch, seed=2**70)
        with pytest.raises(ValueError, match=r"^optimal_steps must be >= 1, got 0$"):
            interventions.prepare_edges(model, batch, how="optimal", optimal_steps=0)


def test_prepare_edges_refuses_a_reference_outside_the_vocabulary_before_any_forward(model, batch, monkeypatch):
    from perm_circuits.discovery import interventions

    vocab = model.cfg.d_vocab
    reference = torch.full_like(batch.tokens, vocab)  # one id past the embedding
    with _NoForward(model, monkeypatch, (interventions, "_capture")):
        with pytest.raises(ValueError, match=rf"reference token ids must be in \[0, {vocab}\).*got values {vocab}\.\.{vocab}"):
            interventions.prepare_edges(model, batch, how="mean", reference=reference)


def test_discover_refuses_an_unknown_mode_before_the_test_set_and_any_forward(model, monkeypatch):
    from perm_circuits.discovery import interventions
    from perm_circuits.discovery.registry import discover

    with _NoForward(model, monkeypatch, (interventions, "_capture")):
        with pytest.raises(ValueError, match=r"how must be one of \(.*'resample'.*\), got 'bogus'"):
            discover(model, method="eap", how="bogus")


def test_circuit_metrics_names_its_own_argument_when_it_promotes_to_components():
    from perm_circuits.discovery.scoring import circuit_metrics, edge_components

    with pytest.raises(TypeError, match=r"^chosen must be an iterable of 'SENDER->RECEIVER' strings, got the str"):
        circuit_metrics("L0H0->logits", ["L0H0->logits"], promote_heads=True)
    score = circuit_metrics(["L0H0->logits", "embed->L0H0.q"], ["L0H0->logits", "embed->L1H0.v"], promote_heads=True)
    assert (score.n_chosen, score.n_true, score.n_correct, score.level) == (1, 2, 1, "component")
    assert edge_components(["embed->L1H0.v", "L0MLP->logits"]) == frozenset({"L1H0", "L0MLP"})
    with pytest.raises(TypeError, match=r"^edges must be an iterable"):
        edge_components("L0H0->logits")


def test_train_stacked_refuses_an_unsupported_architecture_before_building_or_running(monkeypatch):
    from perm_circuits import stacked
    from perm_circuits.models import ModelConfig

    def boom(*args, **kwargs):
        raise AssertionError("a model was built or run before the architecture was refused")

    monkeypatch.setattr(stacked, "build_model", boom)
    monkeypatch.setattr(stacked, "_forward", boom)
    rms = ModelConfig(V=4, d_model=16, n_heads=1, normalization_type="RMS")
    with pytest.raises(ValueError, match=r"stacked training supports normalization_type 'LN' or None .*got 'RMS'"):
        stacked.train_stacked([0, 1], architecture=rms, progress=False)
    with pytest.raises(ValueError, match=r"got 'RMS'"):  # the public forward keeps its own check
        stacked.stacked_forward(rms, {}, torch.zeros(2, 1, 7, dtype=torch.long))
    ln = ModelConfig(V=4, d_model=16, n_heads=1)
    with pytest.raises(ValueError, match=r"^dropout_generators must hold one generator per member \(2\), got 1$"):
        stacked.stacked_forward(ln, {}, torch.zeros(2, 1, 7, dtype=torch.long), dropout_generators=[torch.Generator()])


def test_dynamics_recorder_refuses_a_bad_step_before_any_forward(model, monkeypatch):
    from perm_circuits.dynamics import DynamicsRecorder
    from perm_circuits.dynamics import recorder as recorder_module
    from perm_circuits.models import model_config_of
    from perm_circuits.tasks.permutation_data import TaskConfig

    recorder = DynamicsRecorder(TaskConfig(V=model_config_of(model).V), [1, 2], signals=("accuracy",), test_n=8)
    with _NoForward(model, monkeypatch, (recorder_module, "_logits")):
        with pytest.raises(ValueError, match=r"^step must be >= 0, got -1$"):
            recorder.measure(model, -1)


def test_task_sweep_checks_the_task_once_and_names_the_sweepable_ones():
    from perm_circuits.sweep.task_sweep import resolve_task_run, task_keys

    with pytest.raises(ValueError, match=r"^task 'no_such_task' cannot be swept; sweepable tasks: \[.*'factual_recall'"):
        task_keys("no_such_task")
    with pytest.raises(ValueError, match=r"^task 'no_such_task' cannot be swept"):
        resolve_task_run({"task": "no_such_task"})
    with pytest.raises(ValueError, match=r"^unknown key\(s\) \['bogus'\] for task 'factual_recall'"):
        resolve_task_run({"task": "factual_recall", "bogus": 1})


def test_the_emergence_figure_leaves_its_checks_to_which_first_and_keeps_them():
    from perm_circuits.dynamics import DynamicsRecord
    from perm_circuits.views.dynamics_figures import emergence_figure

    record = DynamicsRecord(steps=(1, 2, 4), signals=("a", "b"), values=((0.0, 1.0), (0.5, 0.9), (1.0, 0.0)))
    with pytest.raises(TypeError, match=r"record"):  # which_first's check (or the test run's type checker's)
        emergence_figure("record")
    with pytest.raises(ValueError, match=r"^unknown signals \['c'\]; the record has \['a', 'b'\]$"):
        emergence_figure(record, ["c"])
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\], got 2.0"):
        emergence_figure(record, threshold=2.0)
    with pytest.raises(TypeError, match=r"^title must be a str"):
        emergence_figure(record, title=3)
    fig = emergence_figure(record, ["b", "a"], threshold=1.0)
    assert [trace.name for trace in fig.data[:2]] == ["b", "a"]
    assert fig.layout.shapes[0].y0 == 1.0


def test_generalisation_tables_are_checked_once_with_the_same_message():
    from perm_circuits.pages.generalisation import GENERALISATION_COLUMNS, generalises

    frame = pd.DataFrame([{c: 0 for c in GENERALISATION_COLUMNS} | {"status": "done"}])
    with pytest.raises(ValueError, match=r"^sweep table has no recall_gen_x<k> columns"):
        generalises(frame)
    frame = frame.assign(recall_gen_x2=[0.995], recall_gen_x1=[1.0])
    assert generalises(frame).tolist() == [True]
    assert generalises(frame.assign(recall_gen_x2=[0.98])).tolist() == [False]


def test_attention_figures_check_the_table_once_and_attention_svg_keeps_its_head_check():
    from perm_circuits.pages.attention import ATTENTION_COLUMNS, attention_figures, attention_svg

    with pytest.raises(TypeError, match=r"^the attention table must be a pandas DataFrame, got list$"):
        attention_figures([])
    rows = [{"model": "m", "layer": 0, "head": 0, "group": "all", "n": 5, "query": q, "key": k, "weight": 0.5}
            for q in range(2) for k in range(q + 1)]
    frame = pd.DataFrame(rows, columns=list(ATTENTION_COLUMNS))
    figures = attention_figures(frame)
    assert len(figures) == 1 and next(iter(figures.values())) == attention_svg(frame, "m", 0, 0)
    with pytest.raises(ValueError, match=r"^the attention table has no rows for m L0H1$"):
        attention_svg(frame, "m", 0, 1)


def test_birth_probes_check_the_model_once_and_match_the_single_probes(monkeypatch):
    from perm_circuits.systems import birth_probes as probes_module
    from perm_circuits.systems.birth_model import BirthModelConfig, FullModelConfig, build_birth_model, build_full_model

    model = build_birth_model(BirthModelConfig(N=8, T=8, d_model=16, seed=3))
    reads = []
    matrices = probes_module._matrices
    monkeypatch.setattr(probes_module, "_matrices", lambda m: reads.append(1) or matrices(m))
    probes = probes_module.birth_probes(model, frequent=[0, 1, 2])
    assert len(reads) == 1
    expected = {
        "W_O2": probes_module.wo2_recall(model), "W_K2": probes_module.wk2_recall(model),
        "W_K2_frequent": probes_module.wk2_recall(model, [0, 1, 2]), "W_K1": probes_module.wk1_recall(model),
        "W_K1_window": probes_module.wk1_recall(model, window=4), "W_K1_early": probes_module.wk1_recall(model, queries=(1, 4)),
        "W_K1_late": probes_module.wk1_recall(model, queries=(4, 8)),
    }
    assert {name: getattr(probes, name) for name in expected} == expected  # bit for bit
    with pytest.raises(ValueError, match=r"^window must be an int in \[2, T=8\], got 9$"):
        probes_module.birth_probes(model, window=9)
    with pytest.raises(ValueError, match=r"^tokens must be a non-empty list of token ids in \[0, 7\], got \[8\]$"):
        probes_module.birth_probes(model, frequent=[8])
    tiny = build_birth_model(BirthModelConfig(N=8, T=3, d_model=16))
    with pytest.raises(ValueError, match=r"^queries must be \(a, b\) ints with 0 <= a < b <= 3, got \(1, 1\)$"):
        probes_module.birth_probes(tiny, window=2)  # the early half of a 3-token context holds no query
    two_heads = build_full_model(FullModelConfig(N=8, T=8, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match=r"^the Birth probes need the simplified model .*n_heads=2"):
        probes_module.birth_probes(two_heads)


def test_study_dynamics_checks_its_record_once_and_orders_it_at_each_level():
    from perm_circuits.dynamics import DynamicsRecord, emergence
    from perm_circuits.dynamics.study import MATCH_ATTENTION, MATCH_PROBE, RECALL, study_dynamics

    signals = (RECALL, MATCH_PROBE, MATCH_ATTENTION)
    with pytest.raises(ValueError, match=r"^record has no recorded step$"):
        study_dynamics(DynamicsRecord(steps=(), signals=signals, values=()))
    record = DynamicsRecord(steps=(0, 10, 20, 40), signals=signals,
                            values=((0.1, 0.0, 0.0), (0.2, 0.6, 0.1), (0.9, 1.0, 0.5), (1.0, 1.0, 1.0)))
    answer = study_dynamics(record)
    rows = answer.to_dataframe().set_index("signal")
    assert rows.loc[MATCH_PROBE, ["step_10", "step_50", "step_90"]].tolist() == [10, 10, 20]
    assert rows.loc[RECALL, ["step_10", "step_50", "step_90"]].tolist() == [10, 20, 40]
    assert emergence.which_first(record, [RECALL], 0.5).step_of(RECALL) == 20  # the public order agrees


def test_a_discovery_method_refuses_a_bad_batch_once_in_prepare_edges_before_any_forward(model, batch, monkeypatch):
    from perm_circuits.discovery import interventions
    from perm_circuits.discovery.methods import eap

    with _NoForward(model, monkeypatch, (interventions, "_capture")):
        with pytest.raises(TypeError, match=r"batch"):  # prepare_edges' message (or the test run's type checker's)
            eap(model, [[0, 1, 2]], how="zero")
        with pytest.raises(TypeError, match=r"^batch must be a TaskBatch or integer tokens \[batch, seq\], got Tensor$"):
            eap(model, batch.tokens.float(), how="zero", metric=lambda logits, b: logits[:, -1, 0])
        with pytest.raises(ValueError, match=r"^give model and batch, or a prepared intervention$"):
            eap(model, None, how="zero")


def test_node_oracle_refuses_a_bad_batch_target_or_mode_before_any_forward(model, batch, monkeypatch):
    from perm_circuits.census import node_oracle

    with _NoForward(model, monkeypatch):
        with pytest.raises(TypeError, match=r"^batch must be a TaskBatch \(its targets and mask give the metric\), got Tensor$"):
            node_oracle(model, batch.tokens, how="mean")
        with pytest.raises(ValueError, match=r"^target must be a faithfulness to reach \(a number\), got nan$"):
            node_oracle(model, batch, how="mean", target=float("nan"))
        with pytest.raises(ValueError, match=r"how"):
            node_oracle(model, batch, how="bogus")
    circuit, faith = node_oracle(model, batch, how="zero", target=2.0)
    assert circuit == "none" and faith <= 1.0 + 1e-9


def _metric(logits, batch):
    return logits[:, -1, 0]


# (label, call(model, batch), exception, message): each refused before any forward pass.  A TypeError's
# message names the argument only: the test run's type checker may refuse it first, by its annotation.
ANALYSIS_REFUSALS = [
    ("head_roles how", lambda m, b: _api("head_roles")(m, how="bogus"), ValueError,
     r"^how must be one of \('zero', 'mean', 'resample', 'binding_free', 'optimal'\), got 'bogus'$"),
    ("head_roles n", lambda m, b: _api("head_roles")(m, n=0), ValueError, r"^n must be >= 1, got 0$"),
    ("head_roles thresholds", lambda m, b: _api("head_roles")(m, thresholds=3), TypeError,
     r"thresholds"),
    ("ablation_table hows", lambda m, b: _api("ablation_table")(m, ["bogus"]), ValueError, r"got 'bogus'$"),
    ("ablation_table n (the study's table, where n is unused)", lambda m, b: _api("ablation_table")(m, n=0),
     ValueError, r"^n must be >= 1, got 0$"),
    ("ablation_table metric", lambda m, b: _api("ablation_table")(m, test_set=b.tokens, metric=3), TypeError,
     r"metric"),
    ("ablation_table positions", lambda m, b: _api("ablation_table")(m, positions=99), ValueError,
     r"^position 99 out of range"),
    ("circuit_metrics how", lambda m, b: _api("circuit_metrics")(m, ["L0H0"], how="bogus"), ValueError,
     r"got 'bogus'$"),
    ("circuit_metrics n_subsets", lambda m, b: _api("circuit_metrics")(m, ["L0H0"], n_subsets=0), ValueError,
     r"^n_subsets must be >= 1, got 0$"),
    ("circuit_metrics metric", lambda m, b: _api("circuit_metrics")(m, ["L0H0"], b.tokens, metric="x"), TypeError,
     r"metric"),
    ("circuit_metrics node", lambda m, b: _api("circuit_metrics")(m, ["L9H9"], b.tokens, metric=_metric),
     ValueError, r"^node L9H9@all: layer 9 out of range"),
    ("faithfulness_by_mode hows", lambda m, b: _api("faithfulness_by_mode")(m, ["L0H0"], hows=["zero", "bogus"]),
     ValueError, r"^hows entry must be one of .*got 'bogus'$"),
    ("propose_circuit skill", lambda m, b: _api("propose_circuit")(m, "bogus"), ValueError,
     r"^skill must be one of \('elimination', 'recall'\), got 'bogus'"),
    ("patch_head layer", lambda m, b: _api("patch_head")(m, b, b, _metric, 5, 0), ValueError,
     r"^layer 5 out of range"),
    ("patch_head metric", lambda m, b: _api("patch_head")(m, b, b, 3, 0, 0), TypeError,
     r"metric"),
    ("patch_head pair", lambda m, b: _api("patch_head")(m, b.tokens, b.tokens[:, :-1], _metric, 0, 0), ValueError,
     r"^clean and corrupted tokens must have the same shape, got \(16, 9\) and \(16, 8\)$"),
    ("patch_head n_boot", lambda m, b: _api("patch_head")(m, b, b, _metric, 0, 0, n_boot=0), ValueError,
     r"^n_boot must be >= 10, got 0$"),
    ("path_patch sender", lambda m, b: _api("path_patch")(m, (5, 0), (0, 0), "q"), ValueError,
     r"^layer 5 out of range"),
    ("evaluate task", lambda m, b: _api("evaluate")(m, task="perm"), TypeError,
     r"task"),
    ("evaluate n", lambda m, b: _api("evaluate")(m, n=0), ValueError, r"^n must be >= 1, got 0$"),
    ("evaluate forward", lambda m, b: _api("evaluate")(m, forward=3), TypeError,
     r"forward"),
    ("head_scores thresholds", lambda m, b: _api("head_scores")(m, thresholds=3), TypeError,
     r"thresholds"),
    ("head_scores tokens", lambda m, b: _api("head_scores")(m, b.tokens + 100), ValueError,
     r"^tokens must be in 1\.\.5 \(0 is unused\), found 103$"),
    ("head_scores task", lambda m, b: _api("head_scores")(m, task=3), TypeError, r"task"),
    ("ov_memory_probe targets", lambda m, b: _api("ov_memory_probe")(m, 0, targets=[(0, 99)]), ValueError,
     r"^targets has output index 99 outside \[0, 4\]$"),
    ("model_memory_probes layer", lambda m, b: _api("model_memory_probes")(m, layer=5), ValueError,
     r"^layer 5 out of range"),
]


def _api(name: str):
    import perm_circuits
    from perm_circuits.analysis.interventions import path_patching
    from perm_circuits.analysis.probes import memory

    return next(getattr(owner, name) for owner in (perm_circuits, path_patching, memory) if hasattr(owner, name))


@pytest.mark.parametrize("label, call, error, message", ANALYSIS_REFUSALS, ids=[r[0] for r in ANALYSIS_REFUSALS])
def test_public_analysis_functions_refuse_bad_arguments_before_any_forward(model, batch, monkeypatch, label, call,
                                                                         error, message):
    with _NoForward(model, monkeypatch):
        with pytest.raises(error, match=message):
            call(model, batch)


def test_the_memory_probes_check_once_and_agree_with_the_public_probes(model):
    """model_memory_probes runs the probes' unchecked cores: the same numbers as each public probe."""
    from perm_circuits.analysis.probes import memory

    probes = memory.model_memory_probes(model)
    assert len(probes.probes) == 2 + 4 + 2  # one head: OV copy/suppress, four QK maps; the MLP's two
    assert probes.probes[0] == memory.ov_memory_probe(model, 0, mode="argmax")
    assert probes.get("L0H0", "x_match") == memory.qk_memory_probe(model, 0, "x_match").recall
    assert probes.get("L0MLP", "suppress") == memory.mlp_memory_probe(model, mode="argmin").recall
    scores = memory.ov_scores(model, 0)
    custom = memory.ov_memory_probe(model, 0, targets=[(0, 0), (1, 1)])
    assert (custom.map, custom.n_pairs) == ("custom", 2)
    assert custom.recall == memory.recall_rate(scores, [(0, 0), (1, 1)])
    with pytest.raises(ValueError, match=r"^mode must be one of \('argmax', 'argmin'\), got 'x'$"):
        memory.memory_recall(torch.eye(2), torch.eye(2), torch.eye(2), [(0, 0)], mode="x")  # recall_rate's check


def test_task_models_check_the_task_once_before_any_model_is_built(monkeypatch):
    from perm_circuits.tasks import runner
    from perm_circuits.tasks import PermutationTask  # no model builder of its own: the default transformer

    built = []
    def boot(config):
        built.append(config)
        model = torch.nn.Identity()
        model.booted = config
        return model

    monkeypatch.setattr(runner, "_boot", boot)
    for make in (runner.task_model, runner.default_model, runner.check_model_fields):
        with pytest.raises(TypeError, match=r"task"):  # _check_task's message (or the test run's type checker's)
            make("permutation")
    with pytest.raises(ValueError, match=r"^unknown model field\(s\) \['width'\] for task '"):
        runner.task_model(PermutationTask(), width=3)
    with pytest.raises(ValueError, match=r"^d_model=30 is not divisible by n_heads=4$"):
        runner.task_model(PermutationTask(), d_model=30, n_heads=4)
    assert built == []
    model, forward = runner.task_model(PermutationTask(), seed=3, d_model=16, n_heads=2)
    assert forward is None and model.booted == built[0]
    assert (model.booted["d_head"], model.booted["seed"], model.booted["n_layers"]) == (8, 3, 1)
    assert model.task_build == {"seed": 3, "model": {"d_model": 16, "n_heads": 2, "n_layers": 1}}
    assert runner.default_model(PermutationTask(), seed=3, d_model=16, n_heads=2).booted == built[0]


def test_the_circuit_criteria_check_their_options_once_across_the_skill_split(model, monkeypatch):
    """reference="skill" measures each skill's rows in turn: the options are checked once, before the split."""
    from perm_circuits.analysis.circuits import criteria

    calls = []
    check = criteria._check_options
    monkeypatch.setattr(criteria, "_check_options", lambda *args: calls.append(args) or check(*args))
    metrics = criteria.circuit_metrics(model, ["L0H0"], n=64, reference="skill", how="zero")
    assert len(calls) == 1 and metrics.reference == "skill"
    assert metrics.elimination.n + metrics.recall.n == metrics.n_samples == 64
    by_mode = criteria.faithfulness_by_mode(model, ["L0H0"], n=64, reference="skill", hows=["zero"])
    assert len(calls) == 2 and [row.subgroup for row in by_mode.rows] == ["elimination", "recall"]
    assert by_mode.rows[0].faithfulness == metrics.elimination.faithfulness
    with _NoForward(model, monkeypatch):
        with pytest.raises(ValueError, match=r"^ablation_seed must be in \[-2\*\*63, 2\*\*64\)"):
            criteria.circuit_metrics(model, ["L0H0"], reference="skill", ablation_seed=2**70)
