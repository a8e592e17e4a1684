"""RASP programs compiled with tracr and loaded as TransformerLens bridges.

tracr (Lindner, Kramár, Farquhar, Rahtz, McGrath, Mikulik, "Tracr: Compiled Transformers as a
Laboratory for Interpretability", NeurIPS 2023) compiles a RASP program (Weiss, Goldberg, Yahav,
"Thinking Like Transformers", ICML 2021) into transformer weights whose every residual dimension
has a known meaning. Such models are ground truth for circuit discovery: ACDC (Conmy et al.,
"Towards Automated Circuit Discovery for Mechanistic Interpretability", NeurIPS 2023) scores its
search on them.

The conversion to a ``TransformerBridge.boot_native`` model is TransformerLens's own
``transformer_lens.utilities.tracr`` (categorical output, no layer norm); nothing here rewrites
weights. tracr is an optional dependency (the ``tracr`` extra, PyPI package ``tracr-pypi``):
importing this module never imports it, the builders do.

A tracr input starts with the compiler's BOS token; a bridge is fed the same token ids (tracr's
input encoding) and its logits are read at every position but BOS, decoded with tracr's output
encoding. A batch of one length runs unpadded; a batch of several lengths (``TracrModel.batch``
with a list of lengths) is right-padded with tracr's pad token, each row's length in
``extras["lengths"]``, which the edge interventions read as a key mask
(:mod:`~perm_circuits.discovery.padding`): every ablation mode then runs across lengths.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

BOS = "BOS"

__all__ = [
    "BOS",
    "TRACR_PROGRAMS",
    "TracrModel",
    "build_tracr_model",
    "cached_tracr_model",
    "compile_tracr",
    "make_frac_prevs_program",
    "make_reverse_program",
    "make_sort_program",
    "tracr_available",
    "tracr_to_bridge",
]


def tracr_available() -> bool:
    """Whether tracr (with jax and haiku) imports here."""
    try:
        import tracr.compiler.compiling  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def _rasp():
    try:
        from tracr.rasp import rasp
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("tracr is not installed; install the extra: pip install 'perm_circuits[tracr]'") from error
    return rasp


def make_reverse_program():
    """``reverse``: the input read backwards, via a ``length`` sub-program (tracr's ``lib.make_reverse``).

    ``length = SelectorWidth(Select(tokens, tokens, TRUE))``, ``opp_idx = length - indices``,
    ``opp_idx-1 = opp_idx - 1``, ``reverse = Aggregate(Select(indices, opp_idx-1, EQ), tokens)``.
    """
    rasp = _rasp()
    all_true = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE).named("all_true_selector")
    length = rasp.SelectorWidth(all_true).named("length")
    opp_idx = (length - rasp.indices).named("opp_idx")
    opp_idx = (opp_idx - 1).named("opp_idx-1")
    selector = rasp.Select(rasp.indices, opp_idx, rasp.Comparison.EQ).named("reverse_selector")
    return rasp.Aggregate(selector, rasp.tokens).named("reverse")


def make_frac_prevs_program(token: str = "x"):
    """``frac_prevs``: whether at least half of the tokens so far equal ``token``.

    The fraction is tracr's ``lib.make_frac_prevs`` (the RASP paper's program, ACDC's
    "X-proportion"): a numerical mean of ``tokens == token`` over ``Select(indices, indices, LEQ)``.
    TransformerLens converts only categorical outputs, so a final numerical-to-categorical ``Map``
    (an MLP) reads it out as ``frac >= 1/2``. A finer read-out would be wrong: tracr infers the
    fraction's value set as ``{0, 1/n}`` (its basis inference averages binary values only), so a
    read-out that tells 2/3 from 1/2 is miscompiled; ``>= 1/2`` is exact for ``max_seq_len <= 4``.
    """
    rasp = _rasp()
    bools = rasp.numerical(rasp.Map(lambda t: 1 if t == token else 0, rasp.tokens).named("is_x"))
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ).named("prevs")
    frac = rasp.numerical(rasp.Aggregate(prevs, bools, default=0)).named("frac_prevs")
    return rasp.categorical(rasp.Map(lambda x: bool(x >= 0.5), frac).named("frac_prevs_ge_half"))


def make_sort_program():
    """``sort``: tokens sorted ascending, for distinct tokens (tracr's ``lib.make_sort_unique``).

    ``target_pos = SelectorWidth(Select(tokens, tokens, LT))``, then
    ``sort = Aggregate(Select(target_pos, indices, EQ), tokens)``.
    """
    rasp = _rasp()
    smaller = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT).named("smaller")
    target_pos = rasp.SelectorWidth(smaller).named("target_pos")
    selector = rasp.Select(target_pos, rasp.indices, rasp.Comparison.EQ).named("sort_selector")
    return rasp.Aggregate(selector, rasp.tokens).named("sort")


@dataclass(frozen=True)
class _ProgramSpec:
    make: Callable[[], Any]
    vocab: tuple
    max_seq_len: int
    distinct_tokens: bool = False


TRACR_PROGRAMS: dict[str, _ProgramSpec] = {
    "reverse": _ProgramSpec(make_reverse_program, ("a", "b", "c"), 4),
    "frac_prevs": _ProgramSpec(make_frac_prevs_program, ("a", "b", "x"), 4),
    "sort": _ProgramSpec(make_sort_program, (1, 2, 3, 4), 4, distinct_tokens=True),
}


def tracr_to_bridge(assembled, output_label: str | None = None):
    """A ``TransformerBridge.boot_native`` model (eval mode) with a compiled tracr model's weights.

    Uses ``transformer_lens.utilities.tracr`` (config and state dict) unchanged.  ``output_label``:
    the RASP label of the program's output (its ``.label``, e.g. ``"reverse"``); by default
    TransformerLens infers it from the residual labels, which fails when two labels share the
    output's value set (:func:`compile_tracr` passes the program's own label).
    """
    if output_label is not None and not isinstance(output_label, str):
        raise TypeError(f"output_label must be a str (a RASP label), got {type(output_label).__name__}")
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.utilities.tracr import (
        make_tracr_transformer_bridge_config,
        make_tracr_transformer_bridge_state_dict,
    )

    bridge = TransformerBridge.boot_native(make_tracr_transformer_bridge_config(assembled))
    if output_label is not None:
        labels = {label.rpartition(":")[0] for label in assembled.residual_labels}
        if output_label not in labels:
            raise ValueError(f"output_label {output_label!r} is not a label of the compiled program's residual "
                             f"stream; its labels: {sorted(labels)}")
    state = make_tracr_transformer_bridge_state_dict(assembled, output_label)
    result = bridge.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise ValueError(f"tracr state dict has keys the bridge does not: {result.unexpected_keys}")
    bridge.eval()
    return bridge


@dataclass(frozen=True)
class TracrModel:
    """A compiled RASP program: the tracr model, its TransformerLens bridge and its input domain."""

    name: str
    program: Any
    assembled: Any
    bridge: Any
    vocab: tuple
    max_seq_len: int
    distinct_tokens: bool = False

    def domain(self, length: int | None = None) -> list[tuple]:
        """Every input (without BOS) of the given length, or of every length 1..max_seq_len."""
        if length is not None and not 1 <= length <= self.max_seq_len:
            raise ValueError(f"length must be in 1..{self.max_seq_len}, got {length}")
        lengths = range(1, self.max_seq_len + 1) if length is None else [length]
        if self.distinct_tokens:
            return [word for n in lengths for word in itertools.permutations(self.vocab, n)]
        return [word for n in lengths for word in itertools.product(self.vocab, repeat=n)]

    def _check(self, inputs: list[tuple]) -> None:
        """ValueError unless ``inputs`` is a non-empty list of sequences of vocabulary tokens."""
        if not inputs:
            raise ValueError("inputs must be a non-empty list of sequences")
        table = self.assembled.input_encoder.encoding_map
        bad = sorted({repr(tok) for seq in inputs for tok in seq if tok not in table or tok == BOS})
        if bad:
            raise ValueError(f"tokens {bad} are not in the vocabulary {self.vocab}")

    def encode(self, inputs: list[tuple]) -> Int[Tensor, "batch seq"]:
        """Token ids (tracr's input encoding, BOS first) of equal-length inputs."""
        self._check(inputs)
        lengths = {len(seq) for seq in inputs}
        if len(lengths) != 1:
            raise ValueError(f"inputs must share one length, got lengths {sorted(lengths)}")
        table = self.assembled.input_encoder.encoding_map
        return torch.tensor([[table[BOS]] + [table[tok] for tok in seq] for seq in inputs], dtype=torch.long)

    def encode_padded(self, inputs: list[tuple]) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, " batch"]]:
        """Token ids of inputs of any lengths, right-padded with tracr's pad token to the longest, and
        each row's number of real positions (BOS included): ``extras["lengths"]`` of a padded batch."""
        self._check(inputs)
        table = self.assembled.input_encoder.encoding_map
        width = max(len(seq) for seq in inputs)
        pad = table[self.assembled.input_encoder.pad_token]
        rows = [[table[BOS]] + [table[tok] for tok in seq] + [pad] * (width - len(seq)) for seq in inputs]
        return torch.tensor(rows, dtype=torch.long), torch.tensor([len(seq) + 1 for seq in inputs], dtype=torch.long)

    def tracr_outputs(self, inputs: list[tuple]) -> list[list]:
        """tracr's own decoded outputs (BOS position dropped), in one batched call.

        The steps of ``AssembledTransformerModel.apply`` (encode, ``forward``, decode) on a batch:
        inputs of any lengths are padded with tracr's ``compiler_pad`` token to one shape (tracr's
        compiled attention masks padding), so jax traces the forward once.
        """
        import jax.numpy as jnp

        self._check(inputs)
        encoder = self.assembled.input_encoder
        width = max(len(seq) for seq in inputs)
        pad = encoder.pad_token
        rows = [encoder.encode([BOS, *seq, *[pad] * (width - len(seq))]) for seq in inputs]
        unembedded = self.assembled.forward(self.assembled.params, jnp.asarray(rows)).unembedded_output
        decode = self.assembled.output_encoder.decode
        return [list(decode(row.tolist()))[1 : len(seq) + 1] for seq, row in zip(inputs, unembedded)]

    def batch(self, length: int | Sequence[int] | None = None):
        """A :class:`~perm_circuits.tasks.base.TaskBatch` of every input of ``length`` (default
        ``max_seq_len``), or of each of several lengths (a list, e.g. ``range(1, max_seq_len + 1)``:
        the whole domain): BOS-first token ids, targets tracr's own outputs (output-encoding ids) at
        every position but BOS, which the loss mask leaves out (as it leaves out an output with no
        encoding, e.g. ``None`` where an aggregate selects nothing).  Several lengths: right-padded
        with tracr's pad token, loss mask 0 there, each row's length (BOS included) in
        ``extras["lengths"]`` (:mod:`~perm_circuits.discovery.padding`)."""
        from perm_circuits.tasks.base import TaskBatch

        if length is None or isinstance(length, int):
            lengths, padded = [self.max_seq_len if length is None else length], False
        elif isinstance(length, (str, bytes)) or not isinstance(length, Sequence) or not length:
            raise TypeError(f"length must be an int or a non-empty sequence of ints, got {length!r}")
        else:
            lengths, padded = sorted(set(length)), True
        inputs = [word for n in lengths for word in self.domain(n)]
        tokens, real = self.encode_padded(inputs)
        table = self.assembled.output_encoder.encoding_map
        outputs = self.tracr_outputs(inputs)
        width = tokens.shape[1] - 1
        targets = torch.zeros_like(tokens)
        targets[:, 1:] = torch.tensor([[table.get(v, 0) for v in row] + [0] * (width - len(row)) for row in outputs],
                                      dtype=torch.long)
        mask = torch.zeros(tokens.shape, dtype=torch.float32)
        mask[:, 1:] = torch.tensor([[float(v in table) for v in row] + [0.0] * (width - len(row)) for row in outputs])
        if not bool(mask.any()):
            raise ValueError(f"no tracr output of inputs of length {lengths} has an output encoding (nothing to score)")
        return TaskBatch(tokens, targets, mask, {"lengths": real} if padded else {})

    @torch.no_grad()
    def bridge_outputs(self, inputs: list[tuple]) -> list[list]:
        """The bridge's decoded outputs: argmax of the logits at every position but BOS (inputs of
        several lengths: one unpadded run per length)."""
        self._check(inputs)
        decode = {index: value for value, index in self.assembled.output_encoder.encoding_map.items()}
        out: list = [None] * len(inputs)
        for n in sorted({len(seq) for seq in inputs}):
            rows = [i for i, seq in enumerate(inputs) if len(seq) == n]
            ids = self.bridge(self.encode([inputs[i] for i in rows])).argmax(-1)[:, 1:]
            for i, row in zip(rows, ids):
                out[i] = [decode[int(t)] for t in row]
        return out


def build_tracr_model(name: str) -> TracrModel:
    """Compile one of ``TRACR_PROGRAMS`` (``reverse``, ``frac_prevs``, ``sort``) and load it as a bridge.

    Compiling takes a few seconds on CPU; callers that need a model twice keep it.
    """
    if name not in TRACR_PROGRAMS:
        raise ValueError(f"unknown tracr program {name!r}; expected one of {sorted(TRACR_PROGRAMS)}")
    spec = TRACR_PROGRAMS[name]
    return compile_tracr(spec.make(), spec.vocab, spec.max_seq_len, name=name, distinct_tokens=spec.distinct_tokens)


def compile_tracr(program, vocab, max_seq_len: int, *, name: str | None = None, output_label: str | None = None,
                  distinct_tokens: bool = False) -> TracrModel:
    """Compile any RASP program with tracr and load it as a bridge: a user's program in one call.

    Args:
        program: a ``tracr.rasp.rasp`` expression (e.g. from ``tracr.compiler.lib``), categorical output.
        vocab: its input tokens (any hashable values, not ``"BOS"``).
        max_seq_len: the longest input (BOS not counted).
        name: the model's name (default the program's label).
        output_label: the output's RASP label (default the program's own ``.label``; see
            :func:`tracr_to_bridge`).
        distinct_tokens: the program's domain is inputs without repeated tokens (e.g. ``make_sort_unique``).

    The ground truths are :func:`~perm_circuits.discovery.ground_truth.tracr_ground_truths` of the
    result, a batch over its domain ``TracrModel.batch``
    (:func:`~perm_circuits.discovery.ground_truth.tracr_program` returns all three).
    """
    rasp = _rasp()
    if not isinstance(program, rasp.RASPExpr):
        raise TypeError(f"program must be a tracr RASP expression, got {type(program).__name__}")
    if isinstance(vocab, (str, bytes)) or not hasattr(vocab, "__iter__"):
        raise TypeError(f"vocab must be a collection of tokens, got {vocab!r}")
    vocab = tuple(vocab)
    if not vocab or BOS in vocab or len(set(vocab)) != len(vocab):
        raise ValueError(f"vocab must hold distinct tokens, at least one, not {BOS!r}; got {vocab!r}")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be an int >= 1, got {max_seq_len!r}")
    from tracr.compiler import compiling

    assembled = compiling.compile_rasp_to_model(program, vocab=set(vocab), max_seq_len=max_seq_len, compiler_bos=BOS)
    label = program.label if output_label is None else output_label
    return TracrModel(program.label if name is None else name, program, assembled, tracr_to_bridge(assembled, label),
                      vocab, max_seq_len, distinct_tokens)


@functools.lru_cache(maxsize=None)
def cached_tracr_model(name: str) -> TracrModel:
    """:func:`build_tracr_model`, compiled once per process and shared (do not change its weights)."""
    return build_tracr_model(name)
