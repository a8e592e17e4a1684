"""Hypotheses as frozen, printable specs: features of the input, components of a model, claims.

A *feature* is a named function of a batch row (for example "x5", "the set of used y values",
"x5 repeats x1"). A *component* is a node of a TransformerLens model's residual graph: the token
and position embedding, a head's query, key or value (``attn.hook_q/k/v``) or its output
(``attn.hook_z``), an MLP's output (``hook_mlp_out``) or input (``mlp.hook_in``), or the residual
stream before a layer (``hook_resid_pre``), each optionally at one position. A *claim* says that a
component's value depends on the input only through the listed features; a :class:`Hypothesis` is
a set of claims, and every component it does not name is claimed irrelevant.

The spec is declarative in the manner of pyvene (Wu et al., "pyvene: A Library for Understanding
and Improving PyTorch Models via Interventions", NAACL 2024): it holds no model and no batch, is
turned into hooks per batch by :func:`~perm_circuits.analysis.hypothesis.causal_scrub` and
:func:`~perm_circuits.analysis.hypothesis.replace`, and prints as the claims it makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

__all__ = ["Claim", "Component", "Feature", "Hypothesis", "batch_tokens", "feature_codes", "sample_agreeing"]

KINDS = ("embed", "q", "k", "v", "z", "mlp_in", "mlp", "resid")
_STAGE = {"embed": -1, "resid": 0, "q": 1, "k": 1, "v": 1, "z": 2, "mlp_in": 3, "mlp": 4}


@dataclass(frozen=True)
class Feature:
    """A named function of a batch row.

    ``fn`` takes one row's token ids as a tuple of ints and returns a hashable value; with
    ``batched=True`` it takes the whole ``[batch, seq]`` token tensor and returns a tensor whose
    first dimension is the batch (rows agree when their slices are equal).
    """

    name: str
    fn: Callable[..., Any]
    batched: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"a feature's name must be a non-empty str, got {self.name!r}")
        if not callable(self.fn):
            raise TypeError(f"feature {self.name!r}: fn must be callable, got {type(self.fn).__name__}")

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def identity() -> Feature:
        """The whole input: rows agree only when their tokens are equal."""
        return Feature("input", lambda tokens: tokens, batched=True)

    @staticmethod
    def constant() -> Feature:
        """Nothing about the input: every row agrees (a component that reads position only)."""
        return Feature("nothing", lambda tokens: torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device), batched=True)

    @staticmethod
    def token(position: int, name: str | None = None) -> Feature:
        """The token at ``position``."""
        return Feature(name or f"token@{position}", lambda tokens: tokens[:, position], batched=True)

    def values(self, tokens: Int[Tensor, "batch seq"]) -> list:
        """The feature's value on every row, as hashable Python values."""
        if self.batched:
            out = self.fn(tokens)
            if not isinstance(out, Tensor) or out.ndim == 0 or out.shape[0] != tokens.shape[0]:
                raise ValueError(f"feature {self.name!r} must return a tensor with one entry per row "
                                 f"({tokens.shape[0]}), got {getattr(out, 'shape', type(out).__name__)}")
            return [_hashable(row) for row in out.reshape(out.shape[0], -1).tolist()]
        return [_hashable(self.fn(tuple(row))) for row in tokens.tolist()]

    def codes(self, tokens: Int[Tensor, "batch seq"]) -> tuple[Int[Tensor, " batch"], list]:
        """``(codes, values)``: per row an int, equal where the feature's values are equal, and the
        distinct values (``values[codes[row]] == self.values(tokens)[row]``). Vectorised for batched features."""
        if not self.batched:
            table: dict = {}
            codes = [table.setdefault(v, len(table)) for v in self.values(tokens)]
            return torch.tensor(codes, dtype=torch.long, device=tokens.device), list(table)
        out = self.fn(tokens)
        if not isinstance(out, Tensor) or out.ndim == 0 or out.shape[0] != tokens.shape[0]:
            self.values(tokens)  # raises the one error message
        flat = out.reshape(out.shape[0], -1).cpu()
        if flat.shape[1] == 1:  # one column: the fast 1-D unique
            distinct, codes = torch.unique(flat[:, 0], return_inverse=True)
            return codes.long(), [_hashable([value]) for value in distinct.tolist()]
        distinct, codes = torch.unique(flat, dim=0, return_inverse=True)
        return codes.long(), [_hashable(row) for row in distinct.tolist()]


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, Tensor):
        return _hashable(value.tolist())
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    return value


@dataclass(frozen=True, order=True)
class Component:
    """A node of the residual graph: ``kind`` in ``embed, resid, q, k, v, z, mlp_in, mlp``.

    ``head`` names the head of ``q``/``k``/``v``/``z``; ``position`` restricts the component to one
    sequence position (``None``: every position). ``resid`` at ``layer`` is the residual stream
    entering that layer (``layer = n_layers``: the stream the unembedding reads).
    """

    kind: str
    layer: int = 0
    head: int | None = None
    position: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"component kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("layer", "head", "position"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise TypeError(f"component {name} must be an int, got {value!r}")
        if (self.head is None) == (self.kind in ("q", "k", "v", "z")):
            raise ValueError(f"component {self.kind!r}: head must be given for q/k/v/z and only for them")
        if self.layer < 0 or (self.head is not None and self.head < 0):
            raise ValueError(f"component layer/head must be >= 0, got {self.layer}/{self.head}")

    @staticmethod
    def parse(text: str) -> Component:
        """``"embed"``, ``"L1H0"`` (output), ``"L1H0.q"``, ``"L0MLP"``, ``"L0MLP.in"``, ``"resid1"``,
        each optionally followed by ``"@position"``."""
        from perm_circuits.circuit import Node

        if not isinstance(text, str):
            raise TypeError(f"a component name must be a str, got {type(text).__name__}")
        expected = ("expected embed, L<l>H<h>[.q|.k|.v|.z], L<l>MLP[.in] or resid<l>, optionally @<position>")
        base, at, pos = text.partition("@")
        if at and not (pos.isascii() and pos.isdigit()):
            raise ValueError(f"cannot parse component {text!r}: {expected}")
        position = int(pos) if at else None
        if base == "embed":
            return Component("embed", 0, None, position)
        if base.startswith("resid") and base[5:].isascii() and base[5:].isdigit():
            return Component("resid", int(base[5:]), None, position)
        suffix = next((s for s in (".z", ".in") if base.endswith(s)), "")
        try:  # the one parser of component names (perm_circuits.circuit)
            node = Node.parse(base[: len(base) - len(suffix)])
        except ValueError:
            raise ValueError(f"cannot parse component {text!r}: {expected}") from None
        if node.is_head and node.where == "all" and not (suffix == ".z" and node.port) and suffix != ".in":
            return Component(node.port or "z", node.layer, node.head, position)
        if node.is_mlp and node.where == "all" and node.port is None and suffix != ".z":
            return Component("mlp_in" if suffix else "mlp", node.layer, None, position)
        raise ValueError(f"cannot parse component {text!r}: {expected}")

    def __str__(self) -> str:
        if self.kind == "embed":
            base = "embed"
        elif self.kind == "resid":
            base = f"resid{self.layer}"
        elif self.kind in ("mlp", "mlp_in"):
            base = f"L{self.layer}MLP" + (".in" if self.kind == "mlp_in" else "")
        else:
            base = f"L{self.layer}H{self.head}" + ("" if self.kind == "z" else f".{self.kind}")
        return base if self.position is None else f"{base}@{self.position}"

    @property
    def order(self) -> tuple[int, int]:
        """Where the component sits in the forward pass: ``a`` can feed ``b`` only if ``a.order < b.order``."""
        if self.kind == "embed":
            return (-1, 0)
        return (self.layer, _STAGE[self.kind])

    def hook_names(self, n_layers: int) -> tuple[str, ...]:
        """The TransformerLens hook points that carry the component's value."""
        if self.kind == "embed":
            return ("hook_embed", "hook_pos_embed")
        if self.kind == "resid":
            if self.layer == n_layers:
                return (f"blocks.{n_layers - 1}.hook_resid_post",)
            return (f"blocks.{self.layer}.hook_resid_pre",)
        if self.kind == "mlp":
            return (f"blocks.{self.layer}.hook_mlp_out",)
        if self.kind == "mlp_in":
            return (f"blocks.{self.layer}.mlp.hook_in",)
        return (f"blocks.{self.layer}.attn.hook_{self.kind}",)

    def index(self) -> tuple:
        """The component's slice of each of its hooks' activations (batch first)."""
        position = slice(None) if self.position is None else self.position
        if self.head is None:
            return (slice(None), position)
        return (slice(None), position, self.head)

    def check(self, model: Any, seq_len: int) -> None:
        """ValueError unless the component exists in ``model`` for sequences of ``seq_len`` tokens."""
        from perm_circuits.model_shape import model_shape

        shape = model_shape(model)
        top = shape.n_layers if self.kind == "resid" else shape.n_layers - 1
        if self.kind != "embed" and self.layer > top:
            raise ValueError(f"component {self}: layer {self.layer} out of range (model has {shape.n_layers})")
        if self.head is not None and shape.n_heads is not None and self.head >= shape.n_heads:
            raise ValueError(f"component {self}: head {self.head} out of range (model has {shape.n_heads})")
        if self.position is not None and self.position >= seq_len:
            raise ValueError(f"component {self}: position {self.position} out of range (sequences of {seq_len})")
        missing = [name for name in self.hook_names(shape.n_layers) if not shape.has_hook(name)]
        if missing:
            raise ValueError(f"component {self}: the model has no hook point {missing[0]!r}")


@dataclass(frozen=True)
class Claim:
    """``component`` depends on the input only through ``features`` (rows agreeing on all of them)."""

    component: Component
    features: tuple[Feature, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.component, Component):
            raise TypeError(f"a claim's component must be a Component, got {type(self.component).__name__}")
        if not self.features or not all(isinstance(f, Feature) for f in self.features):
            raise TypeError(f"claim on {self.component}: features must be a non-empty tuple of Feature")

    def __str__(self) -> str:
        return f"{self.component} <- {', '.join(f.name for f in self.features)}"


@dataclass(frozen=True)
class Hypothesis:
    """A set of claims about a model's components; components it does not name are claimed irrelevant.

    Build it from a mapping, ``Hypothesis.of({"L0H0": x5_feature, "L0MLP": [f1, f2]}, name="...")``,
    whose keys are :class:`Component` values or their names (:meth:`Component.parse`).
    """

    claims: tuple[Claim, ...]
    name: str = "hypothesis"
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.claims, tuple) or not all(isinstance(c, Claim) for c in self.claims):
            raise TypeError("claims must be a tuple of Claim")
        seen = [c.component for c in self.claims]
        dupes = sorted({str(c) for c in seen if seen.count(c) > 1})
        if dupes:
            raise ValueError(f"a hypothesis names each component once; repeated: {dupes}")

    @staticmethod
    def of(claims: Mapping[Component | str, Feature | Iterable[Feature]], name: str = "hypothesis",
           description: str = "") -> Hypothesis:
        if not isinstance(claims, Mapping):
            raise TypeError(f"claims must be a mapping component -> feature(s), got {type(claims).__name__}")
        out = []
        for key, features in claims.items():
            component = key if isinstance(key, Component) else Component.parse(key)
            features = (features,) if isinstance(features, Feature) else tuple(features)
            out.append(Claim(component, features))
        return Hypothesis(tuple(out), name, description)

    @property
    def components(self) -> tuple[Component, ...]:
        return tuple(c.component for c in self.claims)

    def __str__(self) -> str:
        lines = [f"Hypothesis {self.name!r}" + (f": {self.description}" if self.description else "")]
        lines += [f"  {claim}" for claim in self.claims] or ["  (names nothing: every component irrelevant)"]
        return "\n".join(lines)


def batch_tokens(batch: Any) -> Int[Tensor, "batch seq"]:
    """The token ids of a batch: a tensor itself or a ``TaskBatch``'s ``tokens``."""
    if isinstance(batch, Tensor):
        tokens = batch
    elif isinstance(getattr(batch, "tokens", None), Tensor):
        tokens = batch.tokens
    else:
        raise TypeError(f"batch must be a token tensor or a TaskBatch, got {type(batch).__name__}")
    if tokens.ndim != 2 or tokens.shape[0] < 2 or tokens.dtype.is_floating_point:
        raise ValueError(f"batch tokens must be integer ids of shape [batch >= 2, seq], got {tuple(tokens.shape)}")
    return tokens


def feature_codes(features: Iterable[Feature], tokens: Int[Tensor, "batch seq"]) -> Int[Tensor, " batch"]:
    """One integer per row: rows with equal codes agree on every feature (codes in first-seen order)."""
    columns = [f.values(tokens) for f in features]
    table: dict = {}
    return torch.tensor([table.setdefault(key, len(table)) for key in zip(*columns)], dtype=torch.long,
                        device=tokens.device)


def sample_agreeing(codes: Int[Tensor, " batch"], rows: Int[Tensor, " n"],
                    generator: torch.Generator) -> Int[Tensor, " n"]:
    """For each row in ``rows``, a row drawn uniformly among those with the same code (itself included)."""
    order = torch.argsort(codes, stable=True)
    counts = torch.bincount(codes)
    starts = torch.cumsum(counts, 0) - counts
    group = codes[rows]
    pick = (torch.rand(rows.shape[0], generator=generator) * counts[group]).long().clamp_max(counts[group] - 1)
    return order[starts[group] + pick]
