"""Sweep backends side by side: the same small grid serially, on the local pool (2 workers), on Ray (2 CPUs).

Targets: local with 2 workers >= 1.8x the runs/hour of serial; Ray within 1.15x of the
local backend's wall time, start-up excluded.  Each backend runs in a fresh Python process and
times ``run_sweep`` in steady state: start-up happens before the clock starts (serial: one tiny
untimed run imports TransformerLens' bridge; local: the pool's forkserver imports torch and the
bridge; Ray: ``ray.init(num_cpus=2)`` and two workers import them).  ``--cold`` also times local
and Ray with their start-up inside the clock (what a short sweep pays once).  The rows of the
three backends are checked identical (wall time aside).

    PYTHONPATH=src python benchmarks/sweep_backends.py [--runs 6] [--epochs 2] [--samples 10000]

The machine's load average is printed before and after: other processes sharing the cores
distort the ratios (a 2-core machine with load > 2 cannot show a 2x speed-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from perm_circuits.sweep import load_sweep


def spec(runs: int, epochs: int, samples: int) -> dict:
    seeds = list(range((runs + 1) // 2))
    return {
        "grid": {"n_heads": [1, 2], "seed": seeds},
        "fixed": {"d_model": 16, "epochs": epochs, "samples": samples, "test_size": 1000, "repeat_ratio": 0.3},
        "analysis": {"n": 1000, "n_pair": 300, "n_boot": 50, "recall_n": 500},
    }


CHILD = """
import json, sys, time, torch
torch.set_num_threads(1)
from perm_circuits.sweep import run_sweep
spec, out, backend, warm = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
if __name__ == "__main__":
    if backend == "ray":
        import ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    if warm and backend == "serial":  # imports (TransformerLens' bridge) done by one tiny run
        tiny = {**spec, "grid": {"seed": [99]}, "fixed": {**spec["fixed"], "epochs": 1, "samples": 256}}
        run_sweep(tiny, out + "_warmup", backend="serial", progress=False)
    if warm and backend == "local":  # the pool's forkserver imports torch and the bridge once
        from perm_circuits.sweep.backends import _pool_context
        process = _pool_context().Process(target=int)  # returns once the forkserver has imported
        process.start()
        process.join()
    if warm and backend == "ray":  # two Ray workers import the package and the bridge (they are reused)
        @ray.remote(num_cpus=1)
        def warm_up():
            import perm_circuits.sweep.run, transformer_lens.model_bridge
            time.sleep(2)
        ray.get([warm_up.remote() for _ in range(2)])
    start = time.perf_counter()
    run_sweep(spec, out, backend=backend, workers=2, progress=False)
    print(json.dumps(time.perf_counter() - start))
"""


def timed(label: str, spec: dict, out: Path, backend: str, warm: bool = False) -> float:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(out), backend, "1" if warm else "0"],
                          check=True, capture_output=True, text=True)
    seconds = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{label:<28} {seconds:7.1f} s   (load average {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--cold", action="store_true", help="also time local and Ray with their start-up")
    args = parser.parse_args(argv)
    grid = spec(args.runs, args.epochs, args.samples)
    n = len(grid["grid"]["n_heads"]) * len(grid["grid"]["seed"])
    print(f"{n} runs: d_model 16, n_heads 1/2, {args.epochs} epochs x {args.samples} samples; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before")
    with tempfile.TemporaryDirectory(prefix="sweep_bench_") as tmp:
        tmp = Path(tmp)
        results = {"serial": timed("serial", grid, tmp / "serial", "serial", warm=True),
                   "local": timed("local, 2 workers", grid, tmp / "local", "local", warm=True)}
        if not args.no_ray:
            results["ray"] = timed("ray, 2 CPUs", grid, tmp / "ray", "ray", warm=True)
        if args.cold:
            results["local_cold"] = timed("local, 2 workers, cold", grid, tmp / "local_cold", "local")
            if not args.no_ray:
                results["ray_cold"] = timed("ray, 2 CPUs, cold workers", grid, tmp / "ray_cold", "ray")
        serial, local = results["serial"], results["local"]
        frames = {name: load_sweep(tmp / name).drop(columns="wall_seconds") for name in results}
        same = all(frame.equals(frames["serial"]) for frame in frames.values())
        print(f"\nrows identical across backends (wall time aside): {same}")
        print("runs/hour: " + ", ".join(f"{name} {3600 * n / s:.0f}" for name, s in results.items()))
        print(f"local-2 vs serial: {serial / local:.2f}x the runs/hour (target >= 1.8x)")
        if "ray" in results:
            print(f"ray vs local wall time: {results['ray'] / local:.2f}x (target <= 1.15x)")
        if "local_cold" in results:
            print(f"with start-up (worker imports) timed: local-2 vs serial {serial / results['local_cold']:.2f}x"
                  + (f", ray vs local {results['ray_cold'] / results['local_cold']:.2f}x" if "ray_cold" in results else ""))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
