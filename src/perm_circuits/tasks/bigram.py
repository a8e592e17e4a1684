"""The bigram-with-triggers task of Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint".

Each sequence ``z_1 .. z_{T+1}`` over ``N`` tokens is a Markov chain that follows a *global* bigram
model ``pi_b`` except after ``K`` sequence-specific *trigger* tokens (paper section 3):

* triggers ``q_1 .. q_K`` are drawn per sequence, without replacement, from the unigram
  distribution (``pi_q = pi_u``, the paper's "random triggers");
* each trigger's output ``o_k`` is drawn uniformly from ``[N]`` (``pi_o`` uniform), per sequence;
* ``z_1 ~ pi_u``; ``z_{t+1} = o_k`` if ``z_t = q_k``, else ``z_{t+1} ~ pi_b(. | z_t)``.

The output after a trigger's *first* occurrence is unpredictable; from the *second* occurrence on
it can be copied from the context (an induction head).  The loss mask (``loss_on="outputs"``, the
paper's "loss on predictable tokens after trigger", as in its Figure 3) is 1 exactly at the input
positions holding the second-or-later occurrence of a trigger, whose target is that trigger's
output; ``loss_on="all"`` trains on every next token (the full language-modelling loss) while the
metrics still read the in-context positions.

**The global bigram model is synthetic.**  The paper estimates ``pi_b`` from Karpathy's
character-level tiny-Shakespeare (``N = 65``), which cannot be downloaded here.  We use a seeded
random Markov chain with a Zipf marginal instead (:func:`zipf_bigram_table`): row ``i`` is
``pi_b(j | i) ∝ w_j g_ij`` with ``w_j = (j + 1)^(-zipf_exponent)`` (token 0 the most frequent) and
``g_ij`` i.i.d. Gamma(1) noise drawn from ``torch.Generator().manual_seed(chain_seed)``, so each
row is a different noisy Zipf profile and the stationary distribution ``pi_u`` is close to Zipf.
``pi_u`` is computed exactly (power iteration) and is the distribution of ``z_1`` and of the
triggers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch
from jaxtyping import Float
from torch import Tensor

from perm_circuits.checks import check_int, check_number, check_seed
from perm_circuits.tasks.base import DataclassTask, TaskBatch, check_sample, load_object, register_task

__all__ = ["BigramTriggerTask", "build_birth_model", "zipf_bigram_table"]

LOSS_ON = ("outputs", "all")


def zipf_bigram_table(N: int, zipf_exponent: float = 1.0, seed: int = 0) -> Float[Tensor, "N N"]:
    """A seeded random bigram table ``pi_b[i, j] = p(j | i)`` with a Zipf-shaped marginal.

    Row ``i`` is ``w_j g_ij`` normalised, ``w_j = (j+1)^-zipf_exponent`` (token 0 the most frequent),
    ``g_ij ~ Gamma(1)`` i.i.d. from ``torch.Generator().manual_seed(seed)``: each row a noisy Zipf profile.
    """
    check_int("N", N, low=2)
    check_number("zipf_exponent", zipf_exponent, low=0, finite=False)
    generator = torch.Generator().manual_seed(int(seed))
    w = (torch.arange(N, dtype=torch.float64) + 1.0) ** (-float(zipf_exponent))
    noise = -torch.rand(N, N, generator=generator, dtype=torch.float64).clamp_min(1e-12).log()  # Exp(1) = Gamma(1)
    table = w[None, :] * noise
    return (table / table.sum(1, keepdim=True)).float()


def _stationary(table: Float[Tensor, "N N"]) -> Float[Tensor, " N"]:
    p = torch.full((table.shape[0],), 1.0 / table.shape[0], dtype=torch.float64)
    t = table.double()
    for _ in range(2000):
        p, previous = p @ t, p
        if (p - previous).abs().max() < 1e-13:
            break
    return (p / p.sum()).float()


@dataclass(frozen=True)
class BigramTriggerTask(DataclassTask):
    """Bigram sequences with in-context trigger -> output rules (module docstring; Bietti et al. 2023 §3):
    ``N`` tokens (paper: 65), ``T`` model inputs (paper: 256; ``T + 1`` tokens drawn), ``K`` triggers,
    the synthetic table's ``zipf_exponent`` and ``chain_seed`` (fixed for the task), ``loss_on``."""

    name: ClassVar[str] = "bigram_triggers"

    N: int = 65
    T: int = 256
    K: int = 5
    zipf_exponent: float = 1.0
    chain_seed: int = 0
    loss_on: str = "outputs"

    def __post_init__(self) -> None:
        for field_name, low in (("N", 2), ("T", 2), ("K", None), ("chain_seed", None)):
            check_int(field_name, getattr(self, field_name), low=low)
        check_seed(self.chain_seed, "chain_seed")
        if not 1 <= self.K <= self.N:
            raise ValueError(f"K must be in [1, N={self.N}], got {self.K}")
        check_number("zipf_exponent", self.zipf_exponent, low=0, finite=False)
        object.__setattr__(self, "zipf_exponent", float(self.zipf_exponent))
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"loss_on must be one of {LOSS_ON}, got {self.loss_on!r}")

    @cached_property
    def bigram(self) -> Float[Tensor, "N N"]:
        """The global bigram table ``pi_b[i, j] = p(z_{t+1} = j | z_t = i)``."""
        return zipf_bigram_table(self.N, self.zipf_exponent, self.chain_seed)

    @cached_property
    def unigram(self) -> Float[Tensor, " N"]:
        """``pi_u``: the stationary distribution of :attr:`bigram` (first token and triggers)."""
        return _stationary(self.bigram)

    @property
    def d_vocab(self) -> int:
        return self.N

    @property
    def n_ctx(self) -> int:
        return self.T

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("in_context_acc", "in_context_loss", "bigram_loss")

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        """``n`` fresh sequences (both splits alike).  ``extras``: ``triggers`` and ``outputs`` [n, K],
        ``occurrence`` [n, T] (k where the input is a trigger's k-th occurrence, else 0)."""
        check_sample(n, generator, split)
        N, T, K = self.N, self.T, self.K
        triggers = torch.multinomial(self.unigram.expand(n, N), K, replacement=False, generator=generator)
        outputs = torch.randint(N, (n, K), generator=generator)
        seq = torch.empty(n, T + 1, dtype=torch.long)
        occurrence = torch.zeros(n, T + 1, dtype=torch.long)
        counts = torch.zeros(n, K, dtype=torch.long)
        seq[:, 0] = torch.multinomial(self.unigram.expand(n, N), 1, generator=generator)[:, 0]
        cdf = self.bigram.double().cumsum(1)
        cdf[:, -1] = 1.0 + 1e-9  # inverse-CDF sampling never runs off the end
        uniform = torch.rand(T, n, 1, generator=generator, dtype=torch.float64)
        for t in range(T):
            current = seq[:, t]
            hit = current[:, None] == triggers  # [n, K], at most one True per row
            is_trigger = hit.any(1)
            counts += hit.long()
            occurrence[:, t] = (counts * hit.long()).sum(1)
            drawn = torch.searchsorted(cdf[current], uniform[t], right=True)[:, 0]
            forced = (outputs * hit.long()).sum(1)
            seq[:, t + 1] = torch.where(is_trigger, forced, drawn)
        tokens, targets, occurrence = seq[:, :T], seq[:, 1:], occurrence[:, :T]
        in_context = (occurrence >= 2).float()
        mask = in_context if self.loss_on == "outputs" else torch.ones(n, T)
        return TaskBatch(tokens, targets, mask, {"triggers": triggers, "outputs": outputs, "occurrence": occurrence})

    def metrics(self, logits: Float[Tensor, "batch seq vocab"], batch: TaskBatch) -> dict[str, float]:
        """In-context accuracy and loss (second-and-later trigger occurrences, the paper's "in-context
        accuracy") and ``bigram_loss``, the mean loss at every input that is not a trigger (its
        "global loss"); nan where a group is empty."""
        if logits.shape[:2] != batch.tokens.shape or logits.shape[-1] != self.N:
            raise ValueError(f"logits must be [batch, {self.T}, {self.N}], got {tuple(logits.shape)}")
        occurrence = batch.extras["occurrence"]
        logits = logits.detach().float()
        in_context = occurrence >= 2
        bigram = occurrence == 0
        losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")
        losses = losses.view_as(batch.targets.float())
        correct = (logits.argmax(-1) == batch.targets).float()
        nan = float("nan")
        return {
            "in_context_acc": float(correct[in_context].mean()) if in_context.any() else nan,
            "in_context_loss": float(losses[in_context].mean()) if in_context.any() else nan,
            "bigram_loss": float(losses[bigram].mean()) if bigram.any() else nan,
        }

    def reference(self, batch: TaskBatch) -> Tensor | None:
        """None: a trigger's first output is unpredictable."""
        return None


def build_birth_model(task: BigramTriggerTask, *, seed: int = 0, **fields: Any):
    """The simplified two-layer model of Bietti et al. (2023) for ``task``
    (:func:`perm_circuits.systems.birth_model.build_birth_model`; ``fields``: ``d_model``)."""
    birth = load_object("perm_circuits.systems.birth_model:BirthModelConfig")
    build = load_object("perm_circuits.systems.birth_model:build_birth_model")
    return build(birth(N=task.N, T=task.T, seed=seed, **fields))


register_task(
    BigramTriggerTask.name, BigramTriggerTask,
    model=build_birth_model, model_keys=("d_model",), forward="perm_circuits.systems.birth_model:plain_forward",
    reproduction=("birth", "perm_circuits.systems.birth",
                  "Birth of a Transformer: a memory viewpoint (Bietti et al. 2023)"),
)
