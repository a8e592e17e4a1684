"""Time ``load_pretrained`` (target < 1 s after imports) for every shipped model.

    python benchmarks/load_pretrained.py
"""

import time

start = time.perf_counter()
from perm_circuits import list_pretrained, load_pretrained  # noqa: E402

print(f"import perm_circuits + load_pretrained (torch included): {time.perf_counter() - start:.2f} s")
for name in list_pretrained():
    start = time.perf_counter()
    load_pretrained(name)
    print(f"load_pretrained({name!r}): {1000 * (time.perf_counter() - start):.0f} ms")
