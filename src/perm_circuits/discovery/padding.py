"""Mixed input lengths in one batch: right padding and a key mask, so every ablation mode runs on them.

A batch whose rows have different lengths is stored right-padded to one width, with the number of
real positions of each row (BOS included) in ``TaskBatch.extras["lengths"]``.  The edge
interventions (:func:`~perm_circuits.discovery.interventions.prepare_edges`) run every row with
attention reading only that row's real positions (a key mask per row): a real position computes
exactly what it computes in a run of the row's own length, and a padded position's output reaches
no real position.  ``prepare_edges`` checks this on the given rows (each length's rows against the
model run unpadded).

Every run keeps its own rows' mask: the clean run the batch's, the resample source (by default the
batch with its rows permuted, so a row is paired with a row of any length) its own rows', the mean
reference its own rows'.  An ablated edge then carries, at each position of the clean row, the
sender's output at that position in the source's run, as path patching does (Wang et al. 2022);
where the source is shorter, that is its output at a padded position, which still reads the
source's real positions (e.g. its length).  This is what lets a length-dependent program be tested
under resample and mean ablation: tracr's ``make_length`` under resample ablation across lengths
has the length to explain, which a batch of one length (or a pairing within each length) never has.
The metric pools the rows: padded positions carry loss weight 0 (refused otherwise).  Rows without
``extras["lengths"]`` (e.g. a corrupted batch given as tokens) count as full width.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["LENGTHS", "batch_lengths", "check_per_length", "key_mask", "keys_of"]

LENGTHS = "lengths"
"""The ``TaskBatch.extras`` key holding each row's number of real positions (BOS included)."""


def batch_lengths(batch) -> Int[Tensor, " batch"] | None:
    """The per-row lengths of a right-padded batch (``extras["lengths"]``), checked; ``None`` without them.

    ValueError unless they are integers in ``1 .. seq`` and the loss mask is 0 at every padded position.
    """
    from perm_circuits.tasks.base import TaskBatch

    if not isinstance(batch, TaskBatch) or LENGTHS not in batch.extras:
        return None
    lengths = batch.extras[LENGTHS]
    seq = batch.tokens.shape[1]
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"extras[{LENGTHS!r}] must be integer lengths [batch], got dtype {lengths.dtype}, "
                         f"shape {tuple(lengths.shape)}")
    if int(lengths.min()) < 1 or int(lengths.max()) > seq:
        raise ValueError(f"extras[{LENGTHS!r}] must be in 1..{seq} (the batch's width), got "
                         f"{int(lengths.min())}..{int(lengths.max())}")
    padded = ~key_mask(lengths.to(batch.mask.device), seq)
    if bool((batch.mask[padded] != 0).any()):
        raise ValueError(f"the loss mask must be 0 at padded positions (beyond extras[{LENGTHS!r}]); a padded "
                         "position would be scored")
    return lengths


def key_mask(lengths: Int[Tensor, " batch"], seq: int) -> Bool[Tensor, "batch seq"]:
    """True at each row's real positions ``0 .. length - 1``."""
    return torch.arange(seq, device=lengths.device)[None] < lengths[:, None]


def keys_of(batch, tokens: Int[Tensor, "batch seq"]) -> Bool[Tensor, "batch seq"]:
    """The key mask of ``batch``'s rows (``tokens``): its ``extras["lengths"]``, or every position."""
    lengths = batch_lengths(batch)
    if lengths is None:
        return torch.ones(tokens.shape, dtype=torch.bool, device=tokens.device)
    return key_mask(lengths.to(tokens.device), tokens.shape[1])


def check_per_length(model, tokens: Int[Tensor, "batch seq"], lengths: Int[Tensor, " batch"],
                     logits: Float[Tensor, "batch seq vocab"], *, atol: float = 1e-4) -> None:
    """RuntimeError unless ``logits`` equal ``model`` run on each length's rows unpadded (up to 256 rows
    per length), at their real positions."""
    for length in torch.unique(lengths).tolist():
        rows = torch.nonzero(lengths.to(tokens.device) == length)[:, 0][:256]
        expected = model(tokens[rows, :length])
        got = logits[rows, :length]
        if not torch.allclose(got, expected.to(got.dtype), atol=atol, rtol=atol):
            raise RuntimeError(f"the padded edge forward does not reproduce model(tokens) on the rows of length "
                               f"{length} (max difference {float((got - expected).abs().max()):.2e})")
