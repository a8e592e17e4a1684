"""Synthetic factual recall (Nichani, Lee & Bietti 2024, "Understanding Factual Recall in
Transformers via Associative Memories", arXiv:2412.06538, section 4; seed 003).

There are ``S`` subjects, ``R`` relations and a set of noise tokens.  Each relation ``r`` owns a
block ``A_r`` of ``D`` answer tokens, and a seeded fact table gives every pair its answer
``a*(s, r) in A_r`` (a balanced random assignment drawn once from ``fact_seed``: see :func:`fact_table`).  A sequence is
``seq_len - 1`` tokens of i.i.d. uniform noise in which one subject and one relation token sit at two
distinct random positions, then ``EOS``; the label at ``EOS`` is ``a*(s, r)`` and the loss is taken
there only ("What is the capital of France? -> Paris", with the question's other words as noise).

Token ids (the answers first, so a model whose readout covers only the answers, as the paper's
eq. 7 normalises over ``A``, uses the answer ids as its class indices):

=================  ==========================================
``0 .. RD-1``      answers; ``A_r = [rD, (r+1)D)``
``RD .. RD+S-1``   subjects
``.. +R``          relations
``.. +n_noise``    noise tokens
``d_vocab - 1``    EOS
=================  ==========================================

Reference predictors:

* the Bayes-optimal prediction is the fact table itself (loss 0): :meth:`FactualRecallTask.reference`;
* the *relation-only* predictor ``p(a | r)`` (uniform over ``A_r``, ignoring the subject) has loss
  exactly ``log D``: the paper's "hallucination" plateau (section 5, Theorem 6), where the model
  outputs a plausible answer of the right type.  :meth:`FactualRecallTask.relation_prior`.

Facts are memorised, not generalised, so ``split`` changes nothing but the random draws: the test
set shows the same facts with fresh noise and positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.checks import check_int, check_seed
from perm_circuits.tasks.base import DataclassTask, TaskBatch, check_sample, register_task

__all__ = ["FactualRecallTask", "fact_table"]


@lru_cache(maxsize=32)
def _fact_table(S: int, R: int, D: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    balanced = torch.arange(S) % D  # each answer of a block serves floor(S/D) or ceil(S/D) subjects
    offsets = torch.stack([balanced[torch.randperm(S, generator=generator)] for _ in range(R)], dim=1)
    return offsets + torch.arange(R)[None, :] * D


def fact_table(S: int, R: int, D: int, seed: int = 0) -> Int[Tensor, "S R"]:
    """The answer token ``a*(s, r) = rD + u(s, r)``, ``u(., r)`` a seeded balanced assignment.

    For each relation the subjects are shuffled and dealt the ``D`` answers of ``A_r`` in turn, so
    every answer serves ``floor(S/D)`` or ``ceil(S/D)`` subjects: when ``D`` divides ``S`` the
    conditional ``p(a | r)`` is exactly uniform over ``A_r`` (the paper's hallucination predictor).
    """
    return _fact_table(S, R, D, seed).clone()


@dataclass(frozen=True)
class FactualRecallTask(DataclassTask):
    """Factual recall (module docstring): ``S`` subjects, ``R`` relations, ``D`` answers per relation,
    ``n_noise`` distinct noise tokens, ``seq_len`` tokens per sequence (``EOS`` included, so
    ``seq_len - 3`` noise tokens), ``fact_seed`` seeding the fact table."""

    S: int = 16
    R: int = 4
    D: int = 8
    n_noise: int = 16
    seq_len: int = 8
    fact_seed: int = 0

    name: ClassVar[str] = "factual_recall"

    def __post_init__(self) -> None:
        for key, low in (("S", 1), ("R", 1), ("D", 1), ("n_noise", None), ("seq_len", None), ("fact_seed", 0)):
            check_int(key, getattr(self, key), low=low)
        check_seed(self.fact_seed, "fact_seed")
        if self.seq_len < 3:
            raise ValueError(f"seq_len must be >= 3 (subject, relation, EOS), got {self.seq_len}")
        if self.n_noise < 0 or (self.n_noise == 0 and self.seq_len > 3):
            raise ValueError(f"n_noise must be >= 1 when seq_len > 3 (noise fills the gaps), got {self.n_noise}")

    @property
    def n_answers(self) -> int:
        """``|A| = R D``."""
        return self.R * self.D

    @property
    def n_facts(self) -> int:
        """``S R`` facts to store."""
        return self.S * self.R

    @property
    def subject_offset(self) -> int:
        return self.n_answers

    @property
    def relation_offset(self) -> int:
        return self.n_answers + self.S

    @property
    def noise_offset(self) -> int:
        return self.n_answers + self.S + self.R

    @property
    def eos(self) -> int:
        return self.noise_offset + self.n_noise

    @property
    def d_vocab(self) -> int:
        return self.eos + 1

    @property
    def n_ctx(self) -> int:
        return self.seq_len

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("loss", "fact_accuracy", "relation_only_loss", "subject_only_loss", "kl_to_relation_prior")

    @property
    def relation_baseline_loss(self) -> float:
        """Loss of the relation-only predictor ``p(a | r)``: exactly ``log D``."""
        return math.log(self.D)

    def facts(self) -> Int[Tensor, "S R"]:
        """The fact table ``a*(s, r)`` (answer token ids)."""
        return fact_table(self.S, self.R, self.D, self.fact_seed)

    def build(
        self,
        subjects: Int[Tensor, " batch"],
        relations: Int[Tensor, " batch"],
        generator: torch.Generator,
    ) -> TaskBatch:
        """Sequences for given ``(subject, relation)`` indices, with random noise and positions."""
        for name, value, bound in (("subjects", subjects, self.S), ("relations", relations, self.R)):
            if not isinstance(value, Tensor) or value.ndim != 1 or value.dtype.is_floating_point:
                raise TypeError(f"{name} must be a 1-D integer tensor")
            if len(value) and (value.min() < 0 or value.max() >= bound):
                raise ValueError(f"{name} must be in [0, {bound - 1}]")
        if subjects.shape != relations.shape:
            raise ValueError(f"subjects {tuple(subjects.shape)} and relations {tuple(relations.shape)} differ in shape")
        n, T = len(subjects), self.seq_len
        if self.n_noise:
            tokens = self.noise_offset + torch.randint(0, self.n_noise, (n, T), generator=generator)
        else:
            tokens = torch.zeros(n, T, dtype=torch.long)
        slots = torch.rand(n, T - 1, generator=generator).argsort(dim=1)[:, :2]  # two distinct positions
        rows = torch.arange(n)
        tokens[rows, slots[:, 0]] = self.subject_offset + subjects
        tokens[rows, slots[:, 1]] = self.relation_offset + relations
        tokens[:, -1] = self.eos
        answers = self.facts()[subjects, relations]
        targets = torch.zeros(n, T, dtype=torch.long)
        targets[:, -1] = answers
        mask = torch.zeros(n, T)
        mask[:, -1] = 1.0
        extras = {"subject": subjects.long(), "relation": relations.long(), "answer": answers,
                  "subject_position": slots[:, 0], "relation_position": slots[:, 1]}
        return TaskBatch(tokens, targets, mask, extras)

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> TaskBatch:
        """``n`` sequences with ``(s, r)`` uniform over all ``S R`` facts."""
        check_sample(n, generator, split)
        subjects = torch.randint(0, self.S, (n,), generator=generator)
        relations = torch.randint(0, self.R, (n,), generator=generator)
        return self.build(subjects, relations, generator)

    def all_facts(self, seed: int = 1234, repeats: int = 1) -> TaskBatch:
        """Every fact ``repeats`` times (subject-major order), each in a fresh noise context."""
        check_int("repeats", repeats, low=1)
        subjects = torch.arange(self.S).repeat_interleave(self.R).repeat(repeats)
        relations = torch.arange(self.R).repeat(self.S).repeat(repeats)
        return self.build(subjects, relations, torch.Generator().manual_seed(seed))

    def relation_prior(self, batch: TaskBatch) -> Float[Tensor, "batch answers"]:
        """``p(a | r)``: uniform over the relation's block ``A_r`` (the hallucination predictor)."""
        relation = batch.extras["relation"]
        block = torch.arange(self.n_answers)[None, :] // self.D
        return (block == relation[:, None]).double() / self.D

    def reference(self, batch: TaskBatch) -> Float[Tensor, "batch answers"]:
        """The Bayes-optimal prediction at EOS: all mass on ``a*(s, r)`` (loss 0)."""
        return torch.nn.functional.one_hot(batch.extras["answer"], self.n_answers).double()

    def metrics(self, logits: Tensor, batch: TaskBatch) -> dict[str, float]:
        """At EOS: cross-entropy, fact accuracy (argmax = ``a*``), the relation-only loss
        ``-log sum_{a in A_r} p(a)`` and subject-only loss ``-log sum_{r'} p(a*(s, r'))`` (the
        paper's figure 5), and ``KL(p(.|r) || p_model)``: 0 exactly when the model outputs ``p(a|r)``."""
        if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[:2] != batch.tokens.shape:
            raise ValueError(
                f"logits must be [batch, seq, out] matching tokens {tuple(batch.tokens.shape)}, "
                f"got {tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__}"
            )
        if logits.shape[-1] < self.n_answers:
            raise ValueError(f"logits cover {logits.shape[-1]} classes, fewer than the {self.n_answers} answers")
        logp = torch.log_softmax(logits[:, -1].detach().double(), dim=-1)
        answer = batch.extras["answer"]
        relation, subject = batch.extras["relation"], batch.extras["subject"]
        loss = -logp.gather(1, answer[:, None])[:, 0]
        accuracy = (logp.argmax(dim=1) == answer).double()
        block = relation[:, None] * self.D + torch.arange(self.D, device=relation.device)[None, :]
        in_block = logp.gather(1, block)
        relation_only = -torch.logsumexp(in_block, dim=1)
        subject_answers = self.facts().to(subject.device)[subject]  # [batch, R]: the answers valid for the subject
        subject_only = -torch.logsumexp(logp.gather(1, subject_answers), dim=1)
        kl = -math.log(self.D) - in_block.mean(dim=1)
        return {"loss": float(loss.mean()), "fact_accuracy": float(accuracy.mean()),
                "relation_only_loss": float(relation_only.mean()), "subject_only_loss": float(subject_only.mean()),
                "kl_to_relation_prior": float(kl.mean())}


register_task(
    FactualRecallTask.name, FactualRecallTask,
    model="perm_circuits.systems.factual_model:build_factual_model", model_keys=("d_model", "n_heads", "d_head", "d_mlp"),
    reproduction=("factual", "perm_circuits.systems.factual",
                  "Factual recall and storage capacity (Nichani, Lee, Bietti 2024)"),
)
