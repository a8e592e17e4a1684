"""The in-context permutation-lookup task.

Each sample is a permutation ``p`` of ``1..V`` drawn from a fixed train/test split of all ``V!``
permutations, revealed as interleaved pairs ``x1 y1 x2 y2 ... xV yV`` with ``y_k = p(x_k)`` and the
x order shuffled.  The model reads the first ``2V - 1`` tokens and predicts the next token at every
position; only the y predictions (the even input positions ``0, 2, ..., 2V - 2``) carry loss.

In the *repeated* variant (the study's "memorization probe" training set) the last query repeats
an earlier query with probability ``repeat_ratio``; its target is then that query's earlier y,
which pure elimination gets wrong.  Which earlier query is repeated is ``x_k`` with ``k`` drawn
uniformly from ``TaskConfig.repeat_sources`` (1-based; the study's default ``(1,)`` always repeats
``x1``, ``(1, 2, 3, 4)`` asks for general in-context recall at V=5).

Token 0 is never used (vocabulary ``0..V``).  Everything here is vectorized over a batch and driven
by an explicit ``torch.Generator``, so the same seed gives the same batches on every run.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

import torch
from jaxtyping import Int
from torch import Tensor

from perm_circuits._util import dataclass_from_dict
from perm_circuits.checks import MAX_SEQUENCES, check_int, check_number, check_seed, check_size
from perm_circuits.tasks.base import TaskBatch

__all__ = ["PERMUTATION_EXTRAS", "PROBE_SEQUENCE", "TaskConfig", "all_permutations", "exhaustive_batch", "make_batch",
           "make_sequence", "make_test_set", "permutation_batch", "probe_sequence", "repeat_source_of", "split_permutations",
           "validate_tokens", "y_positions"]

MIN_V, MAX_V = 2, 8

PROBE_SEQUENCE: tuple[int, ...] = (2, 4, 5, 3, 4, 5, 3, 2, 2)
"""The study's probe (section 07): x5 = x1 = 2, so recall answers 4 while elimination answers 1."""


@dataclass(frozen=True)
class TaskConfig:
    """Settings that define the data distribution.

    Attributes:
        V: number of values; tokens are ``1..V`` and token 0 is unused.
        repeat_ratio: probability that the last query repeats an earlier query.
        train_fraction: share of the ``V!`` permutations in the train split (0.8 -> 96 of 120;
            rounded, keeping at least one permutation on each side).
        split_seed: seed of the one shuffle that splits the permutations.
        repeat_sources: the earlier queries (1-based ``k`` of ``x_k``, each in ``1..V-1``) that a
            repeated last query may repeat, uniformly; stored sorted (a list is accepted).  The
            default ``(1,)`` is the study (always ``x1``) and draws no extra random numbers, so
            its seeded batches are the ones from before this field existed.
    """

    V: int = 5
    repeat_ratio: float = 0.0
    train_fraction: float = 0.8
    split_seed: int = 0
    repeat_sources: tuple[int, ...] | list[int] = (1,)  # stored as a sorted tuple

    def __post_init__(self) -> None:
        check_int("V", self.V, MIN_V, MAX_V + 1)
        _check_ratio("repeat_ratio", self.repeat_ratio)
        _check_ratio("train_fraction", self.train_fraction)
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction must be strictly between 0 and 1, got {self.train_fraction}")
        check_seed(self.split_seed, "split_seed")
        object.__setattr__(self, "repeat_sources", _check_sources(self.repeat_sources, self.V))

    @property
    def seq_len(self) -> int:
        """Model input length: ``2V - 1`` (the last y is only ever a target)."""
        return 2 * self.V - 1

    @property
    def d_vocab(self) -> int:
        """Vocabulary size ``V + 1`` (token 0 unused)."""
        return self.V + 1

    def to_dict(self) -> dict:
        return {**asdict(self), "repeat_sources": list(self.repeat_sources)}

    @classmethod
    def from_dict(cls, data: dict, *, complete: bool = False) -> TaskConfig:
        """From :meth:`to_dict` output; unknown fields (and missing ones if ``complete``, how checkpoints
        are loaded, except those of :data:`ADDED_FIELDS`) are errors."""
        return dataclass_from_dict(cls, data, complete=complete, added=ADDED_FIELDS)


ADDED_FIELDS: dict[str, object] = {"repeat_sources": (1,)}
"""TaskConfig fields newer than the checkpoint format, with the value that reproduces the older
behaviour: what ``TaskConfig.from_dict(..., complete=True)`` fills in (the shipped models predate
``repeat_sources``)."""


def _check_sources(sources: object, V: int) -> tuple[int, ...]:
    if not isinstance(sources, (list, tuple)):
        raise TypeError(
            f"repeat_sources must be a tuple or list of ints in 1..{V - 1}, got {type(sources).__name__} {sources!r}"
        )
    for k in sources:
        check_int("repeat_sources entry", k)
    if not sources:
        raise ValueError(f"repeat_sources must not be empty (give earlier queries in 1..{V - 1})")
    bad = [k for k in sources if not 1 <= k <= V - 1]
    if bad:
        raise ValueError(
            f"repeat_sources must be in 1..{V - 1} (1-based earlier queries x_k) for V={V}, "
            f"got {bad[0]} in {list(sources)}"
        )
    if len(set(sources)) != len(sources):
        duplicate = next(k for k in sources if list(sources).count(k) > 1)
        raise ValueError(f"repeat_sources must be unique, got {duplicate} twice in {list(sources)}")
    return tuple(sorted(sources))


def _check_ratio(name: str, value: float) -> None:
    if not 0.0 <= check_number(name, value, finite=False) <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {value}")


@lru_cache(maxsize=None)
def _all_permutations(V: int) -> Tensor:
    return torch.tensor(list(itertools.permutations(range(1, V + 1))), dtype=torch.long)


def all_permutations(V: int) -> Int[Tensor, "n_perms V"]:
    """All ``V!`` permutations of ``1..V`` in lexicographic order; row ``i`` maps ``x -> row[x-1]``."""
    TaskConfig(V=V)  # validates V
    return _all_permutations(V).clone()


@lru_cache(maxsize=None)
def _split(V: int, train_fraction: float, split_seed: int) -> tuple[Tensor, Tensor]:
    perms = _all_permutations(V)
    # at least one permutation on each side (V=2 has only two)
    n_train = min(max(round(train_fraction * len(perms)), 1), len(perms) - 1)
    order = torch.randperm(len(perms), generator=torch.Generator().manual_seed(split_seed))
    return perms[order[:n_train]], perms[order[n_train:]]


def split_permutations(config: TaskConfig) -> tuple[Int[Tensor, "n_train V"], Int[Tensor, "n_test V"]]:
    """The fixed, disjoint train/test split of all permutations (one seeded shuffle)."""
    train, test = _split(config.V, float(config.train_fraction), config.split_seed)
    return train.clone(), test.clone()


def y_positions(V: int) -> list[int]:
    """Input positions where a y is predicted: ``0, 2, ..., 2V - 2`` (one per step)."""
    return list(range(0, 2 * V - 1, 2))


PERMUTATION_EXTRAS: tuple[str, ...] = ("xs", "ys", "perms", "repeated", "repeat_source")
"""What a permutation-lookup :class:`~perm_circuits.tasks.base.TaskBatch` carries in ``extras``, each with
the batch as first dimension: ``xs``, ``ys`` (``[batch, V]``: the V queries and their answers,
``ys[:, k]`` the target of step ``k + 1``), ``perms`` (``[batch, V]``: each sample's permutation),
``repeated`` (``[batch]`` bool: whether the last query repeats an earlier one) and ``repeat_source``
(``[batch]``: the 0-based index of the repeated earlier query, -1 where not repeated)."""


def make_batch(
    config: TaskConfig,
    n: int,
    *,
    split: str = "train",
    generator: torch.Generator | None = None,
    seed: int | None = None,
    repeat_ratio: float | None = None,
    repeat_source: int | Literal["config"] | None = "config",
) -> TaskBatch:
    """Draw ``n`` sequences, vectorized, as a :class:`~perm_circuits.tasks.base.TaskBatch` whose
    ``extras`` are :data:`PERMUTATION_EXTRAS`.

    Args:
        config: the task; its ``repeat_ratio`` is used unless ``repeat_ratio`` overrides it.
        n: number of sequences.
        split: ``"train"`` or ``"test"`` permutations (``"all"`` draws from every permutation).
        generator: the random stream to draw from (pass this or ``seed``, not both).
        seed: seed of a fresh generator (``0`` if neither is given).
        repeat_source: which earlier query a repeated last query repeats.  ``"config"`` (the
            default): ``x_k`` with ``k`` uniform over ``config.repeat_sources``, drawn per
            sample from ``generator`` (no draw when there is one source, so the study's ``(1,)``
            batches are unchanged); an int: always that 0-based query (0 = x1); ``None``:
            uniform over all of ``x1..x_{V-1}``.

    ``extras["repeat_source"]`` stores the 0-based index (``k - 1``), -1 where not repeated.
    """
    if not isinstance(config, TaskConfig):
        raise TypeError(f"config must be a TaskConfig, got {type(config).__name__}")
    if check_int("n", n) <= 0:
        raise ValueError(f"n must be > 0, got {n}")
    check_size("n (sequences drawn at once)", n, MAX_SEQUENCES)
    if seed is not None:
        check_seed(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    ratio = config.repeat_ratio if repeat_ratio is None else repeat_ratio
    _check_ratio("repeat_ratio", ratio)
    if repeat_source is not None and repeat_source != "config":
        check_int("repeat_source", repeat_source, 0, config.V - 1)
    if generator is not None and seed is not None:
        raise ValueError("pass either generator or seed, not both")
    if generator is None:
        generator = torch.Generator().manual_seed(0 if seed is None else seed)
    pool = _pool(config, split)
    V = config.V

    perms = pool[torch.randint(len(pool), (n,), generator=generator)]
    xs = torch.rand(n, V, generator=generator).argsort(dim=1) + 1
    repeated = torch.rand(n, generator=generator) < ratio
    if repeat_source == "config" and len(config.repeat_sources) > 1:
        choices = torch.tensor(config.repeat_sources, dtype=torch.long) - 1
        source = choices[torch.randint(len(choices), (n,), generator=generator)]
    elif repeat_source == "config":
        source = torch.full((n,), config.repeat_sources[0] - 1, dtype=torch.long)
    elif repeat_source is None:
        source = torch.randint(V - 1, (n,), generator=generator)
    else:
        source = torch.full((n,), repeat_source, dtype=torch.long)
    xs[:, -1] = torch.where(repeated, xs.gather(1, source[:, None])[:, 0], xs[:, -1])
    return batch_from_queries(xs, perms, torch.where(repeated, source, -1))


def _pool(config: TaskConfig, split: str) -> Tensor:
    if split == "all":
        return _all_permutations(config.V)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    train, test = _split(config.V, float(config.train_fraction), config.split_seed)
    return train if split == "train" else test


def batch_from_queries(
    xs: Int[Tensor, "batch V"], perms: Int[Tensor, "batch V"], repeat_source: Int[Tensor, " batch"]
) -> TaskBatch:
    """The batch asking queries ``xs`` of permutations ``perms``; ``repeat_source`` as in
    :data:`PERMUTATION_EXTRAS`."""
    ys = perms.gather(1, xs - 1)
    seq = torch.stack([xs, ys], dim=2).flatten(1)  # x1 y1 x2 y2 ...
    mask = torch.zeros(seq.shape[1] - 1, device=seq.device)
    mask[0::2] = 1.0
    extras = {"xs": xs, "ys": ys, "perms": perms, "repeated": repeat_source >= 0, "repeat_source": repeat_source}
    return TaskBatch(seq[:, :-1].contiguous(), seq[:, 1:].contiguous(), mask.expand(len(xs), -1).contiguous(), extras)


def permutation_batch(batch: TaskBatch) -> TaskBatch:
    """``batch`` with the :data:`PERMUTATION_EXTRAS` the study's analyses read: itself where
    :func:`make_batch` made it, else the extras rebuilt from the tokens (the one unrevealed value of
    a repeated sequence's permutation is the value left over)."""
    if not isinstance(batch, TaskBatch):
        raise TypeError(f"batch must be a TaskBatch, got {type(batch).__name__}")
    if all(name in batch.extras for name in PERMUTATION_EXTRAS):
        return batch
    inputs, targets = batch.tokens, batch.targets
    if inputs.shape[1] % 2 == 0:
        raise ValueError(
            f"a permutation-lookup batch has sequences of odd length 2V-1, got length {inputs.shape[1]} "
            "(a TaskBatch of another task?)"
        )
    validate_tokens(inputs, (inputs.shape[1] + 1) // 2)  # ids in 1..V, else the rebuild below indexes out of range
    xs = inputs[:, 0::2]
    ys = targets[:, 0::2]
    V = xs.shape[1]
    perms = torch.zeros_like(xs).scatter_(1, xs - 1, ys)
    left = V * (V + 1) // 2 - perms.sum(dim=1)  # the value no revealed pair uses (0 when all revealed)
    perms = torch.where(perms == 0, left[:, None].expand_as(perms), perms)
    source = repeat_source_of(inputs)
    extras = {"xs": xs, "ys": ys, "perms": perms, "repeated": source >= 0, "repeat_source": source}
    return TaskBatch(inputs, targets, batch.mask, {**batch.extras, **extras})


def unused_query(xs: Int[Tensor, "batch V"]) -> Int[Tensor, " batch"]:
    """Per row, the one value that none of the first ``V - 1`` queries uses (a new last query)."""
    V = xs.shape[1]
    values = torch.arange(1, V + 1, device=xs.device)
    seen = (xs[:, : V - 1, None] == values).any(dim=1)
    return values.expand(len(xs), V)[~seen]


def exhaustive_batch(config: TaskConfig, *, split: str = "test", repeat_source: int | None = None) -> TaskBatch:
    """Every sequence of a split (``|split| * V!``): each permutation x every order of the queries;
    with ``repeat_source=j`` (0-based) the last query repeats ``x_{j+1}`` in every sequence."""
    if repeat_source is not None:
        check_int("repeat_source", repeat_source, 0, config.V - 1)
    pool = _pool(config, split)
    orders = _all_permutations(config.V).clone()
    perms = pool.repeat_interleave(len(orders), dim=0)
    xs = orders.repeat(len(pool), 1)
    if repeat_source is not None:
        xs[:, -1] = xs[:, repeat_source]
    source = -1 if repeat_source is None else repeat_source
    return batch_from_queries(xs, perms, torch.full((len(xs),), source, dtype=torch.long))


def make_test_set(config: TaskConfig, n: int = 5000, seed: int = 1234) -> TaskBatch:
    """The fixed evaluation set: ``n`` seeded sequences from the test permutations."""
    return make_batch(config, n, split="test", seed=seed)


def repeat_source_of(inputs: Int[Tensor, "batch seq"]) -> Int[Tensor, " batch"]:
    """0-based index of the earlier query the last query repeats, else -1, read from the tokens
    (equals ``extras["repeat_source"]`` on task batches)."""
    last = inputs[:, -1]
    match = inputs[:, 0:-1:2] == last[:, None]
    first = match.int().argmax(dim=1)
    return torch.where(match.any(dim=1), first, torch.full_like(first, -1))


def validate_tokens(tokens: object, V: int) -> Int[Tensor, "batch seq"]:
    """A model input checked (integer tokens in ``1..V``, length ``2V - 1``) as a 2-D long tensor;
    a 1-D sequence becomes a batch of one."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be a torch.Tensor of integer token ids, got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must have an integer dtype, got {tokens.dtype}")
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [batch, {2 * V - 1}], got shape {tuple(tokens.shape)}")
    if tokens.shape[1] != 2 * V - 1:
        raise ValueError(f"sequence length must be 2V-1 = {2 * V - 1} for V={V}, got {tokens.shape[1]}")
    if tokens.numel() == 0:
        raise ValueError("tokens is empty")
    bad = (tokens < 1) | (tokens > V)
    if bad.any():
        value = tokens[bad][0].item()
        raise ValueError(f"tokens must be in 1..{V} (0 is unused), found {value}")
    return tokens.long()


def make_sequence(tokens: list[int] | tuple[int, ...] | Tensor, V: int = 5) -> Int[Tensor, "1 seq"]:
    """A custom input ``[x1, y1, ..., xV]``, checked by :func:`validate_tokens` and :func:`check_consistent`."""
    if isinstance(tokens, (list, tuple)):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError(f"tokens must be ints, got {tokens!r}")
        tokens = torch.tensor(tokens, dtype=torch.long)
    seq = validate_tokens(tokens, V)
    check_consistent(seq)
    return seq


def check_consistent(inputs: Int[Tensor, "batch seq"]) -> None:
    """ValueError if any sequence's revealed pairs contradict a permutation (an x with two ys, a y
    with two xs)."""
    px, py = inputs[:, 0:-1:2], inputs[:, 1::2]  # the revealed pairs
    same_x = px[:, :, None] == px[:, None, :]
    same_y = py[:, :, None] == py[:, None, :]
    conflict = same_x != same_y
    if conflict.any():
        row = int(conflict.flatten(1).any(1).nonzero()[0])
        raise ValueError(
            f"sequence {row} {inputs[row].tolist()} is not consistent with a permutation: "
            "an x maps to two ys or two xs share a y"
        )


def probe_sequence() -> Int[Tensor, "1 seq"]:
    """The study's probe ``[2,4,5,3,4,5,3,2,2]``: recall answers 4, elimination answers 1."""
    return make_sequence(list(PROBE_SEQUENCE), V=5)
