"""The exhaustive oracle: the smallest edge set whose faithfulness reaches a target.

Discovery methods are heuristics; on graphs this small the answer they approximate can be
computed.  :func:`exhaustive_oracle` finds the smallest circuit (fewest edges) whose faithfulness
(1 = full model, 0 = every edge ablated; :mod:`~perm_circuits.discovery.interventions`) is at
least ``target``, the most faithful one among those of that size:

- **exhaustive** when the graph has at most ``max_exhaustive`` (16) edges: every one of the
  ``2^E`` subsets is run (13 edges: 8,192), batched ``chunk`` masks per forward.  Subsets are
  enumerated with the edges into the logits varying fastest, and each component (head, MLP,
  logits) is computed once per distinct setting of the edges that can reach it within a batch
  (what does not change is memoised), so most of the work is the last components;
- **by size** otherwise: every *connected* subset of 0, 1, 2, ... edges up to ``max_size``
  (default 6), stopping at the first size that reaches the target.  Connected: every edge's
  receiving component is the logits or sends a kept edge itself.  A disconnected edge changes
  nothing (its receiver's output reaches the logits through no kept edge), so the smallest
  faithful circuit is always connected, and every connected subset grows from a smaller one by
  one edge (breadth-first, without repeats).  Under resample ablation a subset is run only when
  every kept edge's sender (other than the embeddings) also receives a kept edge: a sender whose
  inputs are all ablated reads exactly the corrupted residual stream, so it outputs its ablated
  value and its kept edges change nothing (such a subset is as faithful as a smaller one).  The
  result says when the target was not reached within ``max_size`` or ``max_subsets``.

Scores (for ROC curves): ``1 + |faith(C) - faith(C without e)|`` for the circuit's edges,
``g / (1 + g)`` with ``g = |faith(C with e) - faith(C)|`` for the others, so the circuit ranks first.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor
from tqdm.auto import tqdm

from perm_circuits.checks import check_int
from perm_circuits.discovery.graph import head_of, split_edge
from perm_circuits.discovery.interventions import EdgeIntervention
from perm_circuits.discovery.result import DiscoveryResult, check_selection, explains, finish, flip_each, setup

__all__ = ["exhaustive_oracle"]


def _bits(numbers: Tensor, n_edges: int) -> Tensor:
    """0/1 masks from subset numbers: bit ``n_edges - 1 - e`` of the number is edge ``e`` (last edges fastest)."""
    shifts = torch.arange(n_edges - 1, -1, -1, dtype=torch.long, device=numbers.device)
    return ((numbers[:, None] >> shifts[None]) & 1).float()


def _masks_of(numbers: list[int], n_edges: int, device: torch.device | None = None) -> Tensor:
    """:func:`_bits` for Python ints of any size (graphs past 63 edges overflow a 64-bit tensor)."""
    return torch.tensor([[(x >> (n_edges - 1 - e)) & 1 for e in range(n_edges)] for x in numbers], dtype=torch.float32,
                        device=device)


def _evaluate(ei: EdgeIntervention, masks: Tensor, chunk: int) -> Tensor:
    return ei.faithfulness(ei.evaluate(masks, chunk=chunk, dedupe=True)).double()


def _exhaustive(ei: EdgeIntervention, target: float, chunk: int,
                progress: bool) -> tuple[int, float, int, str, tuple[float, ...]]:
    n = ei.n_edges
    total = 1 << n
    best_number, best_size, best_faith = total - 1, n, -float("inf")
    by_size = torch.full((n + 1,), -float("inf"), dtype=torch.float64, device=ei.device)
    for start in tqdm(range(0, total, chunk * 8), disable=not progress, desc="oracle"):
        numbers = torch.arange(start, min(start + chunk * 8, total), device=ei.device)
        masks = _bits(numbers, n)
        faith = _evaluate(ei, masks, chunk)
        sizes = masks.sum(1).long()
        by_size.scatter_reduce_(0, sizes, faith, reduce="amax")
        ok = faith >= target
        if not ok.any():
            continue
        smallest = int(sizes[ok].min())  # the smallest faithful size here, then its most faithful subset
        i = int(torch.argmax(torch.where(ok & (sizes == smallest), faith, torch.full_like(faith, -float("inf")))))
        if (int(sizes[i]), -float(faith[i])) < (best_size, -best_faith):
            best_number, best_size, best_faith = int(numbers[i]), int(sizes[i]), float(faith[i])
    return (best_number, best_faith, total, f"exhaustive: all {total} subsets of {n} edges",
            tuple(itertools.accumulate(by_size.tolist(), max)))


def _by_size(ei: EdgeIntervention, target: float, chunk: int, max_size: int, max_subsets: int,
             progress: bool) -> tuple[int, float, int, str, tuple[float, ...]]:
    graph, n = ei.graph, ei.n_edges
    bit = [1 << (n - 1 - e) for e in range(n)]
    pairs = [(sender, head_of(receiver)) for sender, receiver in map(split_edge, graph.edges)]
    out_bits = {s: sum(bit[e] for e in graph.outgoing(s)) for s in graph.senders}
    in_bits = {s: sum(bit[e] for e, (_, component) in enumerate(pairs) if component == s) for s in graph.senders}
    needs = [0 if component == "logits" else out_bits[component] for _, component in pairs]
    feeds = [in_bits[sender] if ei.how == "resample" else 0 for sender, _ in pairs]

    def fed(subset: int) -> bool:
        return all(not subset & bit[e] or feeds[e] == 0 or subset & feeds[e] for e in range(n))

    def done(how: str) -> tuple[int, float, int, str, tuple[float, ...]]:
        return best_number, best_faith, seen, f"by size: {how}", tuple(itertools.accumulate(by_size, max))

    level, seen = {0}, 1
    best_number, best_faith = 0, float(_evaluate(ei, torch.zeros(1, n, device=ei.device), chunk)[0])
    by_size = [best_faith]  # the best of each size searched (a size with no subset to run: -inf)
    if best_faith >= target:
        return done("the empty circuit reaches the target")
    for size in range(1, max_size + 1):
        grown = {s | bit[e] for s in level for e in range(n) if not s & bit[e] and (needs[e] == 0 or s & needs[e])}
        if not grown:
            break
        if seen + len(grown) > max_subsets:
            return done(f"stopped before size {size} ({len(grown)} connected subsets would pass "
                        f"max_subsets={max_subsets}); target not reached")
        level = grown
        numbers = sorted(x for x in level if fed(x))
        if not len(numbers):
            by_size.append(-float("inf"))
            continue
        faith = torch.cat([_evaluate(ei, _masks_of(numbers[i : i + chunk * 8], n, ei.device), chunk)
                           for i in tqdm(range(0, len(numbers), chunk * 8), disable=not progress, desc=f"size {size}")])
        seen += len(numbers)
        by_size.append(float(faith.max()))
        i = int(torch.argmax(faith))
        if float(faith[i]) > best_faith:
            best_number, best_faith = int(numbers[i]), float(faith[i])
        if best_faith >= target:
            return done(f"every connected subset of up to {size} edges ({seen} subsets)")
    return done(f"every connected subset of up to {max_size} edges ({seen} subsets); target not reached")


@explains
def exhaustive_oracle(model=None, batch=None, *, target: float = 0.9, how: str | None = None,
                      intervention: EdgeIntervention | None = None, max_exhaustive: int = 16, max_size: int = 6,
                      max_subsets: int = 2_000_000, chunk: int = 64, progress: bool = False, seed: int = 0,
                      **options) -> DiscoveryResult:
    """The smallest circuit whose faithfulness reaches ``target`` (module docstring), searched exhaustively
    when the graph has at most ``max_exhaustive`` edges, else by size up to ``max_size`` edges.

    ``result.search`` says which search ran and whether the target was reached; ``result.circuit``
    is the smallest faithful circuit (the most faithful of that size), or the most faithful one
    seen when the target was not reached; ``result.best_by_size[k]`` is the best faithfulness of
    any circuit of at most ``k`` edges, for every size searched (what a method's top ``k`` edges
    are measured against for the oracle regret at each size).  ``chunk``: masks per batched forward.
    """
    check_int("max_exhaustive", max_exhaustive, 0, 25)  # at most 2^24 subsets
    for name, value, low in (("max_size", max_size, 0), ("max_subsets", max_subsets, 1), ("chunk", chunk, 1)):
        check_int(name, value, low=low)
    check_selection(None, None, target)  # a number, not NaN (no subset reaches NaN: the whole search would run)
    ei, start = setup(model, batch, intervention, how=how, seed=seed, **options)
    n = ei.n_edges
    if n <= max_exhaustive:
        number, faith, runs, search, best_by_size = _exhaustive(ei, float(target), chunk, progress)
    else:
        number, faith, runs, search, best_by_size = _by_size(ei, float(target), chunk, max_size, max_subsets, progress)
    best = _masks_of([number], n, ei.device)[0]
    change = (_evaluate(ei, flip_each(best), chunk) - faith).abs()
    scores = torch.where(best > 0, 1 + change, change / (1 + change))
    return finish("exhaustive_oracle", ei, scores, start, runs + n,
                  {"target": float(target), "max_exhaustive": max_exhaustive, "max_size": max_size},
                  keep=best, faithfulness=faith, search=search, best_by_size=best_by_size)
