"""The results the study's evaluation and attention figures draw (computed by
:mod:`perm_circuits.analysis.figure_data`, rendered by :mod:`perm_circuits.views`): plain frozen
dataclasses of CPU tensors and numbers, so a view needs nothing that runs a model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor

__all__ = ["STUDY_SEQUENCE", "ExampleActivations", "MeanAttention", "ProbeDistribution", "SequenceAttention", "Walkthrough", "format_sequence"]

STUDY_SEQUENCE: tuple[int, ...] = (2, 3, 1, 5, 4, 4, 3, 2, 5)
"""Section 06's test sequence ``[2,3, 1,5, 4,4, 3,2, 5]`` (mapping 2->3, 1->5, 4->4, 3->2, 5->1;
the last target is 1)."""


@dataclass(frozen=True)
class MeanAttention:
    """Mean attention per head over a test set: ``groups`` of ``(label, sequences averaged, pattern
    [layer, head, q, k])``, one per subgroup drawn."""

    model_name: str
    n_sequences: int
    groups: tuple[tuple[str, int, Tensor], ...]


@dataclass(frozen=True)
class SequenceAttention:
    """Every head's attention on one sequence: ``patterns`` ``[layer, head, q, k]``."""

    model_name: str
    tokens: tuple[int, ...]
    patterns: Tensor


@dataclass(frozen=True)
class Walkthrough:
    """One sequence step by step: the model's P(y = v) (``model_probs`` ``[step, value]``) and the exact
    posteriors with the uniform and the train-split prior (``train_fallback[k]``: no train permutation
    fits at step ``k``, so the train prior's posterior is the uniform one)."""

    model_name: str
    tokens: tuple[int, ...]
    model_probs: Tensor
    uniform: Tensor
    train: Tensor
    train_fallback: tuple[bool, ...]

    @property
    def V(self) -> int:
        return len(self.tokens) // 2 + 1


@dataclass(frozen=True)
class ProbeDistribution:
    """P(y = v), v = 1..5, at the last position of the study's probe, per model name (in order)."""

    probs: Mapping[str, tuple[float, ...]]


@dataclass(frozen=True)
class ExampleActivations:
    """One forward pass over example sequences: per example its ``label`` and ``tokens``; ``patterns[i]``
    ``[layer, head, q, k]``; ``correct[i]`` P(correct y) per step (``targets[i]`` the correct ys); and the
    first example's MLP activations ``mlp_post[layer]`` ``[pos, neuron]``."""

    labels: tuple[str, ...]
    tokens: tuple[tuple[int, ...], ...]
    targets: tuple[tuple[int, ...], ...]
    patterns: tuple[Tensor, ...]
    correct: tuple[Tensor, ...]
    mlp_post: tuple[Tensor, ...]


def format_sequence(tokens: Sequence[int]) -> str:
    """``[2,3, 1,5, 4]``: pairs separated by spaces, as the study writes them."""
    pairs = [",".join(str(t) for t in tokens[i : i + 2]) for i in range(0, len(tokens), 2)]
    return "[" + ", ".join(pairs) + "]"
