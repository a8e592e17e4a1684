"""Time the HTML report of d16h1 + d32h2 (target: the whole CLI command < 30 s on 2 cores).

    python benchmarks/report_time.py [--samples 5000] [--rounds 1] [--no-cli]

Prints the import time, the time of ``write_report(["d16h1", "d32h2"], DIR, n=...)`` in this
process (loading the models included: the first one pays TransformerLens' lazy imports), each
page's per-section times (the report writes them on the page), and the end-to-end time of
``perm-circuits report d16h1 d32h2 --out DIR --quiet`` in a fresh process (Python start-up and
imports included).  Timings on a shared machine vary with its load: run it when it is quiet,
and compare medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ["d16h1", "d32h2"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5000, help="n test sequences (default 5000)")
    parser.add_argument("--rounds", type=int, default=1, help="repetitions of each measurement")
    parser.add_argument("--no-cli", action="store_true", help="skip the end-to-end CLI timing")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from perm_circuits.reports import write_report

    print(f"import perm_circuits.views.report: {time.perf_counter() - start:.2f} s")
    folder = Path(tempfile.mkdtemp(prefix="report_time_"))
    try:
        report_times = []
        for round_ in range(args.rounds):
            out = folder / f"inprocess{round_}"
            start = time.perf_counter()
            pages = write_report(MODELS, out, n=args.samples, progress=False)
            report_times.append(time.perf_counter() - start)
            label = "first (model loading and TransformerLens imports included)" if round_ == 0 else "warm"
            print(f"write_report({MODELS}, n={args.samples}) {label}: {report_times[-1]:.2f} s")
        for page in pages:
            match = re.search(r"Computed in [^<]*", page.read_text(encoding="utf-8"))
            size = page.stat().st_size / 2**20
            print(f"  {page.name}: {size:.1f} MiB" + (f"; {match.group(0)}" if match else ""))
        if args.rounds > 1:
            print(f"write_report median over {args.rounds} rounds: {statistics.median(report_times):.2f} s")

        if not args.no_cli:
            exe = shutil.which("perm-circuits")
            command = [exe] if exe else [sys.executable, "-m", "perm_circuits.cli"]
            cli_times = []
            for round_ in range(args.rounds):
                out = folder / f"cli{round_}"
                start = time.perf_counter()
                subprocess.run([*command, "report", *MODELS, "--out", str(out), "--samples", str(args.samples),
                                "--quiet"], check=True, stdout=subprocess.DEVNULL)
                cli_times.append(time.perf_counter() - start)
            print(f"perm-circuits report {' '.join(MODELS)} (fresh process, imports included): "
                  f"median {statistics.median(cli_times):.2f} s over {args.rounds} round(s) "
                  f"[{', '.join(f'{t:.2f}' for t in cli_times)}]")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
