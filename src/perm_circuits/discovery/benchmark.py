"""The discovery benchmark: every method, on every model with a known circuit, under each ablation mode.

For each model, ablation mode and seed (a test batch drawn with that seed, the method seeded
with it too), every method of :data:`~perm_circuits.discovery.METHODS` runs on one shared
:class:`~perm_circuits.discovery.interventions.EdgeIntervention` and is scored against that
mode's true circuit (:mod:`~perm_circuits.discovery.scoring`):

- ``roc_auc``, ``pr_auc``: ranking every edge by ``|score|`` against the true edges (Conmy et al.
  2023, "Towards Automated Circuit Discovery for Mechanistic Interpretability", score methods by
  ROC AUC; the classes are unbalanced, hence also average precision);
- ``precision``, ``recall``, ``exact`` at the method's own circuit, on edges and (``*_heads``) with
  q/k/v inputs promoted to whole components, as InterpBench (Gupta et al. 2024) scores them;
- ``faith_area``: faithfulness against the number of edges kept, adding edges in the method's
  ranking order (every prefix ``0..E``), its area divided by ``E`` (Hanna et al. 2024, "Have Faith
  in Faithfulness"); ``faithfulness``: the chosen circuit's;
- ``oracle_regret``: at the size ``k`` of the oracle's circuit (the smallest reaching
  faithfulness 0.9), the oracle's faithfulness minus that of the method's top ``k`` edges;
  ``oracle_search`` says how the oracle searched (exhaustive up to 16 edges, else by size) and
  whether it reached the target (the regret is left empty when not); graphs of more than
  :data:`MAX_ORACLE_EDGES` edges get no oracle;
- ``wall_time`` (seconds, the method only) and ``n_forward`` (forward passes over the batch).

Truth (column ``truth``): ``constructed`` where the circuit is known by construction
(:mod:`~perm_circuits.discovery.ground_truth`; a mode is scored only when the construction claims
it, column ``truth_modes``), ``oracle`` for trained models (the exhaustive oracle's circuit under
that mode on that batch; ``oracle_search`` says whether it was exhaustive or size-limited).  A
constructed truth is scored as its *functional* truth on the row's batch and mode
(:func:`~perm_circuits.discovery.ground_truth.functional_truth`: the structural truth less the edges
whose ablation does not change the metric there, checked by intervention); column ``idle_edges``
names the structural edges left out (e.g. the induction model's elimination head under resample
ablation, tracr ``reverse``'s length head on full-length inputs under zero ablation).  Under a mode
with nothing to explain the truth is empty and ``exact`` means the method chose the empty circuit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.ablation_modes import modes
from perm_circuits.checks import check_int, check_seed
from perm_circuits.devices import device_forward
from perm_circuits.discovery.ground_truth import functional_truth, induction_ground_truths, tracr_ground_truths
from perm_circuits.discovery.interventions import prepare_edges
from perm_circuits.discovery.registry import METHODS, get_method, method_names
from perm_circuits.discovery.result import prefix_masks
from perm_circuits.discovery.scoring import average_precision, circuit_metrics, faithfulness_area, roc_auc
from perm_circuits.discovery.tracr_models import cached_tracr_model, tracr_available
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.models import load_pretrained, task_config_of
from perm_circuits.tasks import PermutationTask
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import TaskConfig

__all__ = ["BENCHMARK_COLUMNS", "ORACLE_BEST", "BenchModel", "benchmark_curves", "benchmark_models",
           "faithfulness_curve", "run_benchmark", "score_result", "write_by_model"]

BENCHMARK_COLUMNS = (
    "model", "n_edges_graph", "method", "how", "seed", "n", "truth", "truth_modes", "n_true",
    "roc_auc", "pr_auc", "precision", "recall", "exact", "precision_heads", "recall_heads", "exact_heads",
    "n_chosen", "faithfulness", "faith_area", "oracle_size", "oracle_faithfulness", "oracle_regret",
    "oracle_search", "wall_time", "n_forward", "circuit", "true_edges", "idle_edges",
)
"""The columns of :func:`run_benchmark`'s table (``results/discovery.csv``), in order."""

DEFAULT_METHODS = method_names()
"""The methods registered with the library (:mod:`~perm_circuits.discovery.registry`), in its order: the
benchmark's default and the docs tables' row order.  :data:`METHODS` (the registry's live view) holds
methods registered later too; ``methods=None`` runs every one of them."""
DEFAULT_HOWS = modes("edges", default=True)
TRAINED = ("d16h1", "d32h1", "d32h2", "d16h1l2-any")
ORACLE_BEST = "oracle_best"
"""The method name :func:`benchmark_curves` gives the oracle's best faithfulness at each size."""
MAX_ORACLE_EDGES = 62
"""The oracle's size-limited search numbers subsets as 64-bit integers: larger graphs (tracr ``reverse``,
77 edges) get no oracle (no regret, no oracle row)."""


@dataclass(frozen=True)
class BenchModel:
    """A benchmark model: ``build() -> model``, ``batch(model, n, seed) -> TaskBatch`` and ``truths() ->
    {mode: true edges}`` (empty for trained models: the oracle's circuit is the truth)."""

    name: str
    build: Callable
    batch: Callable
    truths: Callable


def _induction_batch(model, n: int, seed: int) -> TaskBatch:
    batch = PermutationTask(TaskConfig(V=5, repeat_ratio=1.0, repeat_sources=(1, 2, 3, 4))).test_set(n, seed=seed)
    last = torch.zeros_like(batch.mask)
    last[:, -1] = 1.0
    return TaskBatch(batch.tokens, batch.targets, last)


def _by_mode(truths) -> dict:
    """Ground truths -> ``{ablation mode: true edge set}``."""
    return {mode: truth.edges for truth in truths for mode in truth.modes}


def _induction_truths(eliminate: bool = True) -> dict:
    return _by_mode(induction_ground_truths(5, eliminate=eliminate))


def _tracr_batch(name: str, model, n: int, seed: int) -> TaskBatch:
    tm = cached_tracr_model(name)
    domain = tm.domain(tm.max_seq_len)
    rows = torch.randint(len(domain), (n,), generator=torch.Generator().manual_seed(seed))
    tokens = tm.encode([domain[i] for i in rows.tolist()])
    with torch.no_grad():
        targets = device_forward(model, tokens).argmax(-1)
    mask = torch.ones(tokens.shape, dtype=torch.float32, device=tokens.device)
    mask[:, 0] = 0.0  # BOS
    return TaskBatch(tokens, targets, mask)


def _tracr_truths(name: str) -> dict:
    return _by_mode(tracr_ground_truths(cached_tracr_model(name)))


def _tracr_build(name: str):
    return cached_tracr_model(name).bridge


def _trained_build(name: str):
    return load_pretrained(name).eval()


def _trained_batch(model, n: int, seed: int) -> TaskBatch:
    return PermutationTask(task_config_of(model)).test_set(n, seed=seed)


def benchmark_models(*, include_tracr: bool | None = None) -> dict[str, BenchModel]:
    """The benchmark's models: ``induction`` (:func:`~perm_circuits.handbuilt.build_induction_model`) and
    ``induction_bare`` (the same without its elimination head), ``tracr:reverse``, ``tracr:frac_prevs``
    and ``tracr:sort`` (when tracr imports), and the shipped trained models
    ``d16h1``, ``d32h1``, ``d32h2``, ``d16h1l2-any`` (truth: the oracle)."""
    if include_tracr is None:
        include_tracr = tracr_available()
    out = {"induction": BenchModel("induction", partial(build_induction_model, 5), _induction_batch, _induction_truths),
           "induction_bare": BenchModel("induction_bare", partial(build_induction_model, 5, eliminate=False),
                                        _induction_batch, partial(_induction_truths, eliminate=False))}
    if include_tracr:
        for name in ("reverse", "frac_prevs", "sort"):
            out[f"tracr:{name}"] = BenchModel(f"tracr:{name}", partial(_tracr_build, name), partial(_tracr_batch, name),
                                              partial(_tracr_truths, name))
    for name in TRAINED:
        out[name] = BenchModel(name, partial(_trained_build, name), _trained_batch, dict)
    return out


def _safe(fn, *args, **kwargs) -> float:
    try:
        return float(fn(*args, **kwargs))
    except ValueError:  # all edges true or none: the ranking scores are undefined
        return math.nan


def faithfulness_curve(result, ei) -> Float[Tensor, " k"]:
    """Faithfulness of ``result``'s top ``k`` edges (the rest ablated) on ``ei``, ``k = 0 .. E``: the curve
    behind ``faith_area`` (Hanna et al. 2024, "Have Faith in Faithfulness")."""
    masks = prefix_masks([ei.graph.edge_index(e) for e in result.ranking()], ei.device)
    with torch.no_grad():
        return ei.faithfulness(ei.evaluate(masks, chunk=16, dedupe=True)).double()


def score_result(result, ei, truth, *, oracle=None, idle=frozenset()) -> dict:
    """The scores of one :class:`~perm_circuits.discovery.result.DiscoveryResult` (module docstring)
    against the true edge set ``truth``, using its prepared intervention ``ei``; ``oracle``: the
    exhaustive oracle's result on the same intervention, for the regret; ``idle``: the structural
    truth's edges left out of ``truth`` (column ``idle_edges``)."""
    truth = frozenset(truth)
    scores = {e: float(v) for e, v in result.scores.items()}
    n = ei.n_edges
    curve = faithfulness_curve(result, ei)
    row = {
        "n_true": len(truth),
        "roc_auc": _safe(roc_auc, scores, truth),
        "pr_auc": _safe(average_precision, scores, truth),
        "faithfulness": result.faithfulness,
        "faith_area": faithfulness_area(list(enumerate(curve.tolist())), max_edges=n),
        "n_chosen": len(result.circuit),
        "wall_time": result.wall_time,
        "n_forward": result.n_forward,
        "circuit": " ".join(sorted(result.circuit)),
        "true_edges": " ".join(sorted(truth)),
        "idle_edges": " ".join(sorted(idle)),
    }
    for suffix, promote in (("", False), ("_heads", True)):
        if truth:
            m = circuit_metrics(result.circuit, truth, promote_heads=promote)
            row.update({f"precision{suffix}": m.precision, f"recall{suffix}": m.recall, f"exact{suffix}": m.exact})
        else:  # nothing to explain: the right answer is the empty circuit
            row.update({f"precision{suffix}": math.nan, f"recall{suffix}": math.nan,
                        f"exact{suffix}": not result.circuit})
    row.update({"oracle_size": math.nan, "oracle_faithfulness": math.nan, "oracle_regret": math.nan,
                "oracle_search": "" if oracle is None else oracle.search})
    if oracle is not None and "target not reached" not in oracle.search:
        k = len(oracle.circuit)
        row.update({"oracle_size": k, "oracle_faithfulness": oracle.faithfulness,
                    "oracle_regret": oracle.faithfulness - float(curve[k])})
    return row


def run_benchmark(models: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                  hows: Sequence[str] = DEFAULT_HOWS, seeds: Sequence[int] = (0, 1, 2), n: int = 300, *,
                  lean: bool = True, progress: bool = True) -> pd.DataFrame:
    """Score every method on every model under each ablation mode and seed (module docstring).

    Args:
        models: names from :func:`benchmark_models` (default: all of them).
        methods: names from :data:`~perm_circuits.discovery.METHODS` (default: every registered method).
        hows: ablation modes among ``zero``, ``mean``, ``resample``; a constructed truth that does
            not claim a mode skips it.
        seeds: one row per seed: the test batch (seed ``1000 + seed``), the resample pairing and the
            method's own seed.
        n: sequences per batch.
        lean: smaller settings (mask pruning 60 steps; the size-limited oracle up to 8 edges within
            300,000 connected subsets: 6 edges on a 46-edge graph, 8 on a 23-edge one) for a run
            of about an hour on a CPU; ``False``: 300 steps, 8 edges within 3,000,000 subsets.
        progress: a tqdm bar over (model, mode, seed).

    Returns one row per model x method x mode x seed, columns :data:`BENCHMARK_COLUMNS`.
    """
    rows = []
    for job in _benchmark_runs(models, methods, hows, seeds, n, lean=lean, progress=progress):
        row = {"model": job.model, "n_edges_graph": job.ei.n_edges, "method": job.method, "how": job.how,
               "seed": job.seed, "n": n, "truth": job.source, "truth_modes": job.truth_modes}
        row.update(score_result(job.result, job.ei, job.truth, oracle=job.oracle, idle=job.idle))
        if job.method == "exhaustive_oracle":
            row["wall_time"] = job.oracle_time
        rows.append(row)
    return pd.DataFrame(rows, columns=list(BENCHMARK_COLUMNS))


@dataclass(frozen=True)
class _Run:
    model: str
    how: str
    seed: int
    method: str
    ei: object
    result: object
    oracle: object
    oracle_time: float
    truth: frozenset
    source: str
    truth_modes: str
    idle: frozenset = frozenset()


def _benchmark_runs(models, methods, hows, seeds, n, *, lean, progress):
    """Each (model, mode, seed, method)'s result on its shared intervention, after checking every argument."""
    for kind, given in (("models", models), ("methods", methods), ("hows", hows), ("seeds", seeds)):
        if isinstance(given, (str, int)):  # a str would be read as its letters
            raise TypeError(f"{kind} must be a sequence (list or tuple), got {type(given).__name__} {given!r}; "
                            f"wrap one in a list")
    registry = benchmark_models()
    models = list(registry) if models is None else list(models)
    methods = method_names() if methods is None else methods
    for kind, given, known in (("models", models, registry), ("methods", methods, METHODS),
                               ("hows", hows, DEFAULT_HOWS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            raise ValueError(f"unknown {kind} {unknown}; expected names from {sorted(known)}")
    if not seeds:
        raise ValueError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    for s in seeds:
        check_seed(s, "seeds entry")
    check_int("n", n, low=2)
    truths_of = {name: registry[name].truths() for name in models}
    jobs = [(name, how, seed) for name in models for how in hows if not truths_of[name] or how in truths_of[name]
            for seed in seeds]
    built: dict = {}
    for name, how, seed in tqdm(jobs, disable=not progress, desc="discovery benchmark"):
        if name not in built:  # load each model once
            built[name] = registry[name].build()
        model, truths = built[name], truths_of[name]
        ei = prepare_edges(model, registry[name].batch(model, n, 1000 + seed), how=how, seed=seed)
        start = time.perf_counter()
        oracle = None
        if ei.n_edges <= MAX_ORACLE_EDGES:
            oracle = METHODS["exhaustive_oracle"](intervention=ei, seed=seed,
                                                  **get_method("exhaustive_oracle").benchmark_options(lean))
        elif not truths:
            raise ValueError(f"{name} has {ei.n_edges} edges: too many for the oracle, and no constructed truth")
        oracle_time = time.perf_counter() - start
        idle = frozenset()
        if truths:  # the construction's truth, checked by intervention on this batch and mode
            truth_modes = "/".join(m for m in DEFAULT_HOWS if m in truths and truths[m] == truths[how])
            checked = functional_truth(ei, truths[how])
            truth, source, idle = checked.edges, "constructed", checked.idle
        else:
            truth, source, truth_modes = oracle.circuit, "oracle", how
        for method in methods:
            if method == "exhaustive_oracle":
                if oracle is None:
                    continue
                result = oracle
            else:
                result = METHODS[method](intervention=ei, seed=seed, **get_method(method).benchmark_options(lean))
            yield _Run(name, how, seed, method, ei, result, oracle, oracle_time, frozenset(truth), source, truth_modes,
                       idle)


def benchmark_curves(models: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                     hows: Sequence[str] = ("resample",), seeds: Sequence[int] = (0,), n: int = 60, *,
                     lean: bool = True, progress: bool = True) -> pd.DataFrame:
    """Faithfulness against the number of edges kept, per method: the curves whose areas are
    :func:`run_benchmark`'s ``faith_area`` (same arguments, same runs, the same numbers).

    Returns one row per model x mode x seed x method x ``k`` (columns ``model``, ``how``, ``seed``,
    ``method``, ``n_edges_graph``, ``k``, ``faithfulness``): the faithfulness of the method's top
    ``k`` edges, ``k = 0 .. E``; and, as method :data:`ORACLE_BEST`, the best faithfulness of any
    circuit of at most ``k`` edges for every size the oracle searched (the oracle regret at size
    ``k`` is that minus a method's value).
    """
    rows = []
    for job in _benchmark_runs(models, methods, hows, seeds, n, lean=lean, progress=progress):
        curves = {job.method: faithfulness_curve(job.result, job.ei).tolist()}
        if job.method == "exhaustive_oracle":
            curves[ORACLE_BEST] = job.result.best_by_size
        rows += [{"model": job.model, "how": job.how, "seed": job.seed, "method": method,
                  "n_edges_graph": job.ei.n_edges, "k": k, "faithfulness": f}
                 for method, curve in curves.items() for k, f in enumerate(curve)]
    return pd.DataFrame(rows, columns=["model", "how", "seed", "method", "n_edges_graph", "k", "faithfulness"])


def write_by_model(models: Sequence[str], run: Callable[[str], pd.DataFrame], out) -> pd.DataFrame:
    """``run(model)`` for each model, the table so far written to ``out`` (CSV) after every model, so an
    interrupted run keeps what it finished; returns the whole table."""
    out, frames = Path(out), []
    for model in models:
        frames.append(run(model))
        table = pd.concat(frames, ignore_index=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False, float_format="%.6g")
        print(f"{model}: {len(frames[-1])} rows; {len(table)} rows in {out}", flush=True)
    return table
