"""Score every circuit-discovery method on every model with a known circuit: writes results/discovery.csv.

The committed table is the lean default (60 sequences, seeds 0 to 4, zero, mean and resample
ablation; mask pruning 60 steps; the size-limited oracle up to 8 edges within 300,000 connected
subsets, which is every circuit of up to 6 edges on a 46-edge graph and up to 8 on a 23-edge one):

    python scripts/discovery_benchmark.py

run as two processes on a 2-core CPU with one thread each (``OMP_NUM_THREADS=1``; about 45
minutes), each over part of the models, and concatenated in this order:

    python scripts/discovery_benchmark.py --models induction tracr:frac_prevs tracr:reverse --out a.csv
    python scripts/discovery_benchmark.py --models d32h2 d16h1l2-any d16h1 d32h1 --out b.csv

The full-size run (1,000 sequences, mask pruning 300 steps, the oracle within 3,000,000 subsets;
hours on a CPU):

    python scripts/discovery_benchmark.py --n 1000 --full

The table is written after every model, so an interrupted run keeps what it finished. Then
``python scripts/build_results.py`` renders docs/discovery.md from it.

Re-scoring a committed table against the functional truths (``--rescore``): for each of its
(model, mode, seed) runs with a constructed truth, the functional truth on that run's batch is
computed; where it equals the table's ``true_edges`` the rows are kept as they are, and where it
does not, the run is redone (every method, the oracle included) and its rows replaced:

    python scripts/discovery_benchmark.py --rescore results/discovery.csv \
        --models induction tracr:frac_prevs tracr:reverse
    python scripts/discovery_benchmark.py --rescore results/discovery_full.csv --n 1000 --full \
        --models tracr:frac_prevs tracr:reverse

(the table is rewritten after every redone run; the previous table is kept as ``<name>_structural.csv``
the first time, for docs/discovery.md's "what moved").  ``--refresh`` then re-runs every method but
the oracle (or the ``--methods`` given) on every run of the table with the library's current
methods, keeping the oracle's rows (its circuit gives the trained models' truth and every row's regret):

    python scripts/discovery_benchmark.py --refresh results/discovery.csv --methods node_attribution mask_pruning
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from perm_circuits.discovery import prepare_edges
from perm_circuits.discovery.benchmark import (
    BENCHMARK_COLUMNS,
    DEFAULT_HOWS,
    DEFAULT_METHODS,
    benchmark_models,
    run_benchmark,
    write_by_model,
)
from perm_circuits.discovery.ground_truth import functional_truth

ORDER = ("induction", "tracr:frac_prevs", "tracr:reverse", "d32h2", "d16h1l2-any", "d16h1", "d32h1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None,
                        help=f"default: {' '.join(ORDER)}; also induction_bare, tracr:sort")
    parser.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS))
    parser.add_argument("--hows", nargs="*", default=list(DEFAULT_HOWS), help=f"among {DEFAULT_HOWS}")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--full", action="store_true", help="full-size method settings (not lean)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "discovery.csv")
    parser.add_argument("--rescore", type=Path, default=None,
                        help="a committed table: redo only its runs whose functional truth differs (module docstring)")
    parser.add_argument("--refresh", type=Path, default=None,
                        help="a committed table: re-run every method but the oracle on its runs (module docstring)")
    args = parser.parse_args()
    if args.refresh is not None:
        refresh(args.refresh, args.models, args.n, lean=not args.full, methods=args.methods)
        return
    if args.rescore is not None:
        rescore(args.rescore, args.models or list(ORDER), args.n, lean=not args.full)
        return
    available = benchmark_models()
    models = args.models or [m for m in ORDER if m in available]  # the committed run; others by --models
    write_by_model(models, lambda model: run_benchmark([model], args.methods, args.hows, args.seeds, args.n,
                                                       lean=not args.full), args.out)


def _edges(value) -> frozenset:
    return frozenset(value.split()) if isinstance(value, str) else frozenset()


def rescore(path: Path, models: list[str], n: int, *, lean: bool) -> pd.DataFrame:
    """Redo the runs of ``path``'s table whose functional truth differs from its ``true_edges`` (module
    docstring); keep the others, with ``idle_edges`` empty."""
    table = pd.read_csv(path)
    backup = path.with_name(path.stem + "_structural.csv")
    if not backup.exists():
        table.to_csv(backup, index=False, float_format="%.6g")
    if "idle_edges" not in table.columns:
        table["idle_edges"] = ""
    table = table[list(BENCHMARK_COLUMNS)]
    registry = benchmark_models()
    for model in models:
        truths = registry[model].truths()
        if not truths:
            continue
        built = registry[model].build()
        runs = table[table.model == model][["how", "seed"]].drop_duplicates().itertuples(index=False)
        for how, seed in list(runs):
            at = (table.model == model) & (table.how == how) & (table.seed == seed)
            assert int(table[at].n.iloc[0]) == n, f"{path} has n={table[at].n.iloc[0]}, not --n {n}"
            ei = prepare_edges(built, registry[model].batch(built, n, 1000 + seed), how=how, seed=seed)
            truth = functional_truth(ei, truths[how])
            if truth.edges == _edges(table[at].true_edges.iloc[0]):
                print(f"{model} {how} seed {seed}: truth unchanged ({len(truth.edges)} edges)", flush=True)
                continue
            methods = list(dict.fromkeys(table[at].method))
            new = run_benchmark([model], methods, [how], [int(seed)], n, lean=lean, progress=False)
            old = table[at].set_index("method")
            same = sum(_edges(r.circuit) == _edges(old.circuit[r.method]) for r in new.itertuples())
            print(f"{model} {how} seed {seed}: truth {len(_edges(old.true_edges.iloc[0]))} -> {len(truth.edges)} "
                  f"edges (idle: {' '.join(sorted(truth.idle))}); redone, {same}/{len(new)} methods chose the "
                  "committed circuit", flush=True)
            order = {m: i for i, m in enumerate(methods)}
            new = new.sort_values("method", key=lambda c: c.map(order))
            first = int(at.idxmax())  # the redone rows go where the old ones were
            table = pd.concat([table.loc[: first - 1], new, table.loc[first:][~at.loc[first:]]], ignore_index=True)
            table.to_csv(path, index=False, float_format="%.6g")
    table.to_csv(path, index=False, float_format="%.6g")
    return table


def refresh(path: Path, models: list[str] | None, n: int, *, lean: bool,
            methods: list[str] | None = None) -> pd.DataFrame:
    """Re-run every method but the oracle on each run of ``path``'s table (module docstring): the same
    batch, mode and seed, scored against the run's functional truth (constructed) or the oracle's
    committed circuit (trained), the regret against the committed oracle row."""
    from types import SimpleNamespace

    from perm_circuits.discovery.benchmark import score_result
    from perm_circuits.discovery.registry import METHODS, get_method

    table = pd.read_csv(path)
    table = table.astype({c: object for c in ("circuit", "true_edges", "idle_edges", "oracle_search")})
    registry = benchmark_models()
    for model in models or list(dict.fromkeys(table.model)):
        truths, built = registry[model].truths(), registry[model].build()
        for how, seed in list(table[table.model == model][["how", "seed"]].drop_duplicates().itertuples(index=False)):
            at = (table.model == model) & (table.how == how) & (table.seed == seed)
            assert int(table[at].n.iloc[0]) == n, f"{path} has n={table[at].n.iloc[0]}, not --n {n}"
            ei = prepare_edges(built, registry[model].batch(built, n, 1000 + seed), how=how, seed=seed)
            committed = _edges(table[at].true_edges.iloc[0])
            oracle_rows = table[at & (table.method == "exhaustive_oracle")]
            oracle = None
            if len(oracle_rows):
                o = oracle_rows.iloc[0]
                oracle = SimpleNamespace(circuit=_edges(o.circuit), faithfulness=float(o.faithfulness),
                                         search=str(o.oracle_search))
            if truths:
                checked = functional_truth(ei, truths[how])
                if checked.edges != committed:
                    raise ValueError(f"{model} {how} seed {seed}: the table's truth is not the functional one; run "
                                     "--rescore first")
                truth, idle = checked.edges, checked.idle
            else:
                truth, idle = committed, frozenset()
            moved = 0
            chosen = table.method.isin(methods or DEFAULT_METHODS) & (table.method != "exhaustive_oracle")
            for index in table.index[at & chosen]:
                method = table.at[index, "method"]
                result = METHODS[method](intervention=ei, seed=int(seed), **get_method(method).benchmark_options(lean))
                row = score_result(result, ei, truth, oracle=oracle, idle=idle)
                moved += _edges(row["circuit"]) != _edges(table.at[index, "circuit"])
                for column, value in row.items():
                    table.at[index, column] = value
            print(f"{model} {how} seed {seed}: {moved} methods chose another circuit than before", flush=True)
        table.to_csv(path, index=False, float_format="%.6g")
    return table


if __name__ == "__main__":
    main()
