"""Time the full analysis suite on the 5,000-sample test set (target < 10 s on a 2-core CPU).

    python benchmarks/analysis_suite.py [d32h2 d16h1 ...] [--n 5000]

``--n`` shrinks the test set (and recall patching's pairs) for a quick check; the target is for 5,000.

Runs every analysis a researcher would run on a shipped model — evaluation, recall generalisation,
ablation table (all five modes: zero/mean/resample/binding-free/optimal), recall patching, head scores,
the head-role verdict (all five modes, roles only -- ``circuits=False`` -- target < 5 s; timed beside it
as its baseline: the same verdict with the three original modes zero/mean/resample; and the default
verdict with its circuit step, proposed IOI circuits per skill on at most ``CIRCUIT_MAX_N`` sequences,
reported as a ratio to the roles-only verdict), FFN key-value
probing, MLP flips, memory-recall probes, direct logit attribution — and prints each one's time.
The baseline, timed side by side, is one plain-PyTorch forward pass of the same 5,000 sequences
(``fast_forward``), so the suite's cost is also given in "plain forwards".
"""

from __future__ import annotations

import argparse
import time

import torch

from perm_circuits import evaluate, load_pretrained, make_test_set, recall_generalisation
from perm_circuits.models import fast_forward
from perm_circuits.analysis import (
    ablation_table,
    direct_logit_attribution,
    ffn_key_value_probe,
    head_roles,
    head_scores,
    mlp_prediction_flips,
    model_memory_probes,
    recall_patching,
)
from perm_circuits.analysis.study.verdict import CIRCUIT_MAX_N


def suite(model, test_set, n: int = 5000) -> dict[str, float]:
    steps = {
        "evaluate": lambda: evaluate(model, test_set),
        "recall_generalisation": lambda: recall_generalisation(model),
        "ablation_table": lambda: ablation_table(model, test_set=test_set),
        "recall_patching": lambda: recall_patching(model, n=n),
        "head_scores": lambda: head_scores(model, test_set),
        "head_roles": lambda: head_roles(model, test_set),
        "head_roles (3 modes, baseline)": lambda: head_roles(model, test_set, hows=("zero", "mean", "resample"),
                                                             circuits=False),
        "head_roles (no circuits)": lambda: head_roles(model, test_set, circuits=False),
        "ffn_key_value_probe": lambda: ffn_key_value_probe(model),
        "mlp_prediction_flips": lambda: mlp_prediction_flips(model, test_set),
        "model_memory_probes": lambda: model_memory_probes(model),
        "direct_logit_attribution": lambda: direct_logit_attribution(model, test_set),
    }
    times = {}
    for name, step in steps.items():
        start = time.perf_counter()
        step()
        times[name] = time.perf_counter() - start
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["d32h2", "d16h1"])
    parser.add_argument("--n", type=int, default=5000, help="test sequences (default 5000)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.models:
        model = load_pretrained(name)
        test_set = make_test_set(model.task_config, n=args.n)
        with torch.no_grad():
            fast_forward(model, test_set.tokens)
            start = time.perf_counter()
            for _ in range(10):
                fast_forward(model, test_set.tokens)
            plain = (time.perf_counter() - start) / 10
        suite(model, make_test_set(model.task_config, n=min(200, args.n)), n=min(200, args.n))  # warm-up (lazy imports, caches)
        times = suite(model, test_set, n=args.n)
        baseline = times.pop("head_roles (3 modes, baseline)")
        roles_only = times.pop("head_roles (no circuits)")
        total = sum(times.values())
        print(f"{name}: analysis suite on {len(test_set)} samples: {total:.2f} s (target < 10 s); "
              f"= {total / plain:.0f} plain forwards ({1000 * plain:.1f} ms each)")
        for step, seconds in sorted(times.items(), key=lambda kv: -kv[1]):
            print(f"  {step:<26} {seconds:6.2f} s")
        print(f"  head_roles, all five modes, roles only (circuits=False): {roles_only:.2f} s (target < 5 s) = "
              f"{roles_only / baseline:.2f} x the three-mode verdict ({baseline:.2f} s)")
        print(f"  head_roles with its circuit step (default): {times['head_roles']:.2f} s = "
              f"{times['head_roles'] / roles_only:.2f} x roles only (the circuit step: "
              f"{times['head_roles'] - roles_only:.2f} s on at most {CIRCUIT_MAX_N} sequences)")


if __name__ == "__main__":
    main()
