"""Time ``import perm_circuits`` in fresh interpreters (target < 1.5 s): the median of several runs.

    python benchmarks/import_time.py [--runs 7]

Each run is a new ``python -c "import perm_circuits"`` subprocess, so nothing is cached in memory
but the operating system's file cache.  The bare interpreter start is timed the same way and
printed beside it.  ``python -X importtime -c "import perm_circuits"`` shows which module costs what.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_seconds(code: str, runs: int) -> float:
    """Median wall time of ``runs`` fresh ``python -c code`` subprocesses."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    bare = median_seconds("pass", args.runs)
    package = median_seconds("import perm_circuits", args.runs)
    first_use = median_seconds("import perm_circuits; perm_circuits.load_pretrained", args.runs)
    print(f"python start:                           {bare:.2f} s")
    print(f"import perm_circuits:                   {package:.2f} s (target < 1.5 s)")
    print(f"import + first use of load_pretrained:  {first_use:.2f} s (torch loads here)")


if __name__ == "__main__":
    main()
