"""Every tensor an analysis makes lives on the model's (or its batch's) device.

Two checks with one allow-list.  The static one reads the source: a tensor factory
(``torch.zeros``, ``torch.arange``, ``torch.tensor``, ...) called without ``device=`` is a
tensor made on the default device, which on a GPU run then meets the model's activations on
another one.  The dynamic one runs the main analyses on a model placed with an explicit
``torch.device("cpu")`` under a ``TorchFunctionMode`` that records every factory call made from
this library's code without a device, and checks that the placed model gives the default
path's numbers bit for bit.

Draws from a seeded ``torch.Generator()`` (a CPU generator) stay on the CPU by design, so the
same seed gives the same numbers on any machine; the tensor is moved once afterwards.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import perm_circuits

PACKAGE = Path(perm_circuits.__file__).parent
SCANNED = ("analysis", "discovery", "tasks", "dynamics", "evaluate.py", "train.py", "stacked.py", "hooks.py")
FACTORY_NAMES = ("zeros", "ones", "full", "empty", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor",
                 "rand", "randn", "randint", "randperm")

# (file relative to the package, function qualname) -> why its factory calls may stay on the CPU.
CPU_SIDE: dict[tuple[str, str], str] = {
    # task data generators: batches are drawn on the CPU (the same batches on every machine) and
    # moved to the model's device once, by the training loop or the analysis that uses them
    ("tasks/bigram.py", "zipf_bigram_table"): "the task's fixed transition table, data side",
    ("tasks/bigram.py", "_stationary"): "the task's stationary distribution, data side",
    ("tasks/bigram.py", "BigramTriggerTask.sample"): "batch generation on the CPU generator",
    ("tasks/factual.py", "_fact_table"): "the task's fact table, data side",
    ("tasks/factual.py", "FactualRecallTask.build"): "batch assembly from CPU-drawn facts and noise",
    ("tasks/factual.py", "FactualRecallTask.all_facts"): "the fixed test batch, data side",
    ("tasks/factual.py", "FactualRecallTask.relation_prior"): "the task's reference distribution, data side",
    ("tasks/perm_chain.py", "permutation_matrices"): "the task's teacher matrices, data side",
    ("tasks/perm_chain.py", "PermutationChainTask.batch_from"): "batch assembly from CPU-drawn chains",
    ("tasks/permutation_data.py", "_all_permutations"): "the task's permutation table, data side",
    ("analysis/circuits/general_recall.py", "value_swap_pair"): "a patching pair built from CPU-drawn batches",
    ("tasks/permutation_data.py", "make_batch"): "batch generation on the CPU generator",
    ("tasks/permutation_data.py", "exhaustive_batch"): "the enumerated batch, data side",
    ("tasks/permutation_data.py", "make_sequence"): "one hand-written sequence from Python ints",
    ("discovery/tracr_models.py", "TracrModel.encode"): "token ids from a Python vocabulary, like a task batch",
    ("discovery/tracr_models.py", "TracrModel.encode_padded"): "padded token ids from a Python vocabulary, data side",
    ("discovery/tracr_models.py", "TracrModel.batch"): "the program's domain as a batch, data side",
    # training internals that must stay on the CPU
    ("train.py", "_optimizer_tensors"): "optimizer step counts serialised into a CPU checkpoint",
    ("stacked.py", "_forward.drop"): "dropout masks drawn on each member's CPU generator, moved at once",
    ("stacked.py", "train_stacked"): "member -> data-stream slots indexing the CPU-drawn batches before their move",
}


def _files():
    for entry in SCANNED:
        path = PACKAGE / entry
        yield from ([path] if path.is_file() else sorted(path.rglob("*.py")))


def _factory_calls(tree: ast.AST):
    """(qualname, line, source) of every ``torch.<factory>(...)`` without ``device=`` or ``generator=``."""

    def visit(node: ast.AST, scope: str):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = f"{scope}.{node.name}" if scope else node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch" and node.func.attr in FACTORY_NAMES):
            keywords = {k.arg for k in node.keywords}
            if "device" not in keywords and "generator" not in keywords:  # a generator's draw: CPU by design
                yield scope, node.lineno, ast.unparse(node)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, scope)

    yield from visit(tree, "")


def test_every_tensor_factory_names_its_device():
    missing, used = [], set()
    for path in _files():
        relative = path.relative_to(PACKAGE).as_posix()
        for scope, line, source in _factory_calls(ast.parse(path.read_text())):
            if (relative, scope) in CPU_SIDE:
                used.add((relative, scope))
            else:
                missing.append(f"{relative}:{line} in {scope}: {source[:90]}")
    assert not missing, "tensor factories without device= (pass the model's or the batch's device):\n" + "\n".join(missing)
    assert used == set(CPU_SIDE), f"allow-list entries that no longer match any call: {sorted(set(CPU_SIDE) - used)}"


def test_the_static_check_catches_a_factory_without_device():
    flagged = list(_factory_calls(ast.parse("def f(x):\n    a = torch.zeros(3)\n    b = torch.ones(3, device=x.device)\n"
                                            "    c = torch.randint(3, (2,), generator=g)\n")))
    assert flagged == [("f", 2, "torch.zeros(3)")]


# ----------------------------------------------------------------------------- dynamic check

FACTORIES = tuple(getattr(torch, name) for name in FACTORY_NAMES)
CPU = torch.device("cpu")


class FactoryWatch(TorchFunctionMode):
    """Records every tensor factory called from this library's code with no device (or ``device=None``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None and "generator" not in kwargs:
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith("torch"):
                frame = frame.f_back
            module = frame.f_globals.get("__name__", "") if frame is not None else ""
            if module.startswith("perm_circuits."):
                relative = Path(frame.f_code.co_filename).resolve().relative_to(PACKAGE.resolve()).as_posix()
                scope = frame.f_code.co_qualname.replace(".<locals>", "")  # the static check's naming
                if (relative, scope) not in CPU_SIDE:
                    self.calls.append(f"{relative}:{frame.f_lineno} in {scope}: torch.{func.__name__}")
        return func(*args, **kwargs)


def _numbers(value):
    """Every tensor and number of a result, in order, for a bit-for-bit comparison."""
    import dataclasses

    import pandas as pd

    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return [value.to_csv()]  # floats written with repr: exact
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [x for field in dataclasses.fields(value) for x in _numbers(getattr(value, field.name))]
    if isinstance(value, dict):
        return [x for key in value for x in _numbers(value[key])]
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _numbers(item)]
    return [value]


def _same(a, b) -> bool:
    left, right = _numbers(a), _numbers(b)
    if len(left) != len(right):
        return False
    for x, y in zip(left, right):
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.device == y.device == CPU and x.shape == y.shape
                    and torch.equal(x.nan_to_num(7.0), y.nan_to_num(7.0))):
                return False
        elif isinstance(x, float) and isinstance(y, float) and x != x:
            if y == y:
                return False
        elif x != y:
            return False
    return True


def _analyses():
    from perm_circuits.analysis import (
        ablation_table,
        circuit_metrics,
        direct_logit_attribution,
        model_memory_probes,
        patch_activation,
        target_logprob,
    )
    from perm_circuits.analysis.probes.task_attribution import attention_patterns, attention_scores
    from perm_circuits.analysis.interventions.path_patching import path_patching_table
    from perm_circuits.discovery import eap
    from perm_circuits.dynamics.recorder import DynamicsRecorder
    from perm_circuits.evaluate import evaluate, recall_generalisation
    from perm_circuits.tasks import PermutationTask
    from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

    def batches(model):
        config = model.task_config if hasattr(model, "task_config") else TaskConfig()
        return make_test_set(config, n=64, seed=3), config

    def ablations(model, how):
        batch, _ = batches(model)
        return ablation_table(model, hows=(how,), test_set=batch, seed=1).to_dataframe()

    def patching(model):
        batch, config = batches(model)
        task = PermutationTask(config)
        clean = task.test_set(32, seed=5)
        corrupted = task.test_set(32, seed=6)
        return patch_activation(model, clean, corrupted, target_logprob(clean), "blocks.1.attn.hook_z", n_boot=50)

    def tokens(model):
        return batches(model)[0].tokens

    return {
        **{f"ablation_table[{how}]": (lambda m, how=how: ablations(m, how))
           for how in ("zero", "mean", "resample", "binding_free", "optimal")},
        "activation_patching": patching,
        "path_patching": lambda m: path_patching_table(m, n=64, n_boot=50, seed=2).to_dataframe(),
        "circuit_metrics": lambda m: circuit_metrics(m, "L1H0", batches(m)[0], how="mean", n_subsets=8),
        "direct_logit_attribution": lambda m: direct_logit_attribution(m, batches(m)[0]).to_dataframe(),
        "attention_scores": lambda m: attention_scores(attention_patterns(m, tokens(m))),
        "memory_probes": lambda m: model_memory_probes(m).to_dataframe(),
        "eap": lambda m: eap(m, PermutationTask(batches(m)[1]).test_set(32, seed=7), how="mean").scores,
        "evaluate": lambda m: evaluate(m, batches(m)[0]),
        "recall_generalisation": lambda m: recall_generalisation(m, n=32),
        "dynamics_recorder": lambda m: DynamicsRecorder(batches(m)[1], [1], test_n=32).measure(m, 1),
    }


ANALYSES = _analyses()


@pytest.fixture(scope="module")
def models():
    from perm_circuits.models import load_pretrained

    return load_pretrained("d16h1l2-any"), load_pretrained("d16h1l2-any", device=CPU)


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_analysis_on_an_explicit_device_makes_no_tensor_elsewhere_and_gives_the_same_numbers(models, name):
    plain, placed = models
    expected = ANALYSES[name](plain)
    watch = FactoryWatch()
    with watch:
        got = ANALYSES[name](placed)
    assert not watch.calls, "tensors made without the model's device:\n" + "\n".join(dict.fromkeys(watch.calls))
    assert _same(expected, got)
    assert _numbers(got), "the analysis returned no numbers to compare"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run where one is lent)")
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_analysis_on_a_gpu_runs_there_and_agrees_with_the_cpu(models, name):
    """On a GPU the arithmetic differs in the last bits: the same structure of results, numbers close."""
    from perm_circuits.models import load_pretrained

    expected = ANALYSES[name](models[0])
    got = ANALYSES[name](load_pretrained("d16h1l2-any", device="cuda"))
    left, right = _numbers(expected), _numbers(got)
    assert len(left) == len(right)
    for x, y in zip(left, right):
        if isinstance(x, torch.Tensor):
            assert y.shape == x.shape
            torch.testing.assert_close(y.cpu().double(), x.double(), atol=2e-2, rtol=2e-2, equal_nan=True)


def test_the_watch_sees_a_factory_without_device():
    from perm_circuits.analysis.probes import memory

    watch = FactoryWatch()
    with watch:
        memory.identity_map(3, device=CPU)
    assert watch.calls == []
    with watch:
        memory.identity_map(3)  # no device: torch.arange on the default device
    assert len(watch.calls) == 1 and "identity_map" in watch.calls[0] and "torch.arange" in watch.calls[0]


def test_batches_move_once_and_stay_themselves_where_they_already_are():
    from perm_circuits.tasks import PermutationTask
    from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set

    batch = make_test_set(TaskConfig(), n=8, seed=0)
    assert batch.to(CPU) is batch and batch.to("cpu") is batch
    task_batch = PermutationTask(TaskConfig()).test_set(8, seed=0)
    assert task_batch.to(CPU) is task_batch
    meta = task_batch.to("meta")  # another device: every tensor moves, shapes and dtypes kept
    assert meta is not task_batch and meta.tokens.device.type == "meta" and meta.tokens.shape == task_batch.tokens.shape
    assert all(v.device.type == "meta" for v in meta.extras.values())
    moved = batch.to("meta")
    assert moved.tokens.device.type == moved.extras["repeat_source"].device.type == "meta" and moved.extras["xs"].shape == batch.extras["xs"].shape


def test_device_forward_runs_on_the_model_and_returns_beside_the_tokens(models):
    from perm_circuits.devices import device_forward

    _, placed = models
    tokens = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3, 4]], device=CPU)
    logits = device_forward(placed, tokens)
    assert logits.device == CPU and torch.equal(logits, placed(tokens))
