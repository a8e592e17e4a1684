"""Time ``load_pretrained`` (target < 1 s after imports) for every shipped model.

    python benchmarks/load_pretrained.py [name ...]

With names, only those shipped models are loaded (default: every one, ``list_pretrained()``).
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    start = time.perf_counter()
    from perm_circuits import list_pretrained, load_pretrained

    print(f"import perm_circuits + load_pretrained (torch included): {time.perf_counter() - start:.2f} s")
    for name in argv or list_pretrained():
        start = time.perf_counter()
        load_pretrained(name)
        print(f"load_pretrained({name!r}): {1000 * (time.perf_counter() - start):.0f} ms")


if __name__ == "__main__":
    main()
