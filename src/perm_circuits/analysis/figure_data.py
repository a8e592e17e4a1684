"""What the study's evaluation and attention figures draw, computed: the views only render these results.

- :func:`mean_attention`: every head's attention pattern averaged over a test set, overall or per
  last-query subgroup (study section 08) -> :class:`MeanAttention`, drawn by
  :func:`perm_circuits.views.figures.attention_heatmaps`;
- :func:`sequence_attention_patterns`: every head's pattern on one sequence -> :class:`SequenceAttention`
  (:func:`~perm_circuits.views.figures.sequence_attention`);
- :func:`walkthrough_distributions`: the model's P(y = v) at each prediction step of one sequence next to
  the exact Bayesian posteriors (uniform and train-split prior; study section 06) -> :class:`Walkthrough`
  (:func:`~perm_circuits.views.figures.walkthrough`);
- :func:`probe_distributions`: P(y = v) at the last position of the study's memorisation probe per
  model (section 07) -> :class:`ProbeDistribution` (:func:`~perm_circuits.views.figures.probe_distribution`);
- :func:`example_activations`: one forward pass over a few example sequences, keeping the attention
  patterns, the MLP activations and P(correct y) per step -> :class:`ExampleActivations`, which the
  report's circuitsvis views render, over :func:`example_sequences`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from perm_circuits.analysis.figure_results import (
    STUDY_SEQUENCE,
    ExampleActivations,
    MeanAttention,
    ProbeDistribution,
    SequenceAttention,
    Walkthrough,
    format_sequence,
)
from perm_circuits.checks import check_int, check_str
from perm_circuits.evaluate import probe_probabilities, value_probs
from perm_circuits.hooks import run_capture, run_logits
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.base import TaskBatch
from perm_circuits.tasks.permutation_data import (
    PROBE_SEQUENCE,
    TaskConfig,
    make_sequence,
    make_test_set,
    permutation_batch,
    validate_tokens,
)
from perm_circuits.tasks.permutation_posterior import bayes_posterior

__all__ = ["STUDY_SEQUENCE", "ExampleActivations", "MeanAttention", "ProbeDistribution", "SequenceAttention",
           "Walkthrough", "example_activations", "example_sequences", "mean_attention", "probe_distributions",
           "sequence_attention_patterns", "walkthrough_distributions"]

def _check_model(model: object) -> None:
    if not (hasattr(model, "cfg") and hasattr(model, "hook_dict") and callable(model)):
        raise TypeError(f"model must be a TransformerBridge from perm_circuits.build_model/load_pretrained, "
                        f"got {type(model).__name__}")


def attention_patterns_of(model, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch layer head q k"]:
    """Every layer's ``attn.hook_pattern`` on validated ``tokens``, captured in one forward pass (CPU, float)."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model_config_of(model).n_layers)]
    _, store = run_capture(model, tokens, names)
    if len(store) != len(names):
        raise RuntimeError(f"captured attention at {sorted(store)}, expected {len(names)} layers")
    return torch.stack([store[name].float().cpu() for name in names], dim=1)


def mean_attention(model, test_set: TaskBatch | None = None, repeated: bool | str | None = None, *,
                   n: int = 5000) -> MeanAttention:
    """Every head's attention pattern averaged over ``test_set`` (study section 08).

    Row ``q``, column ``k`` of a head's pattern is the mean over sequences of the weight query
    position ``q`` puts on key position ``k``.

    Args:
        test_set: default ``make_test_set(task_config_of(model), n)``.
        repeated: ``None`` averages all sequences; ``True`` / ``False`` only those whose last query
            repeats (does not repeat) an earlier one; ``"split"`` both, one group each.
        n: size of the default test set.
    """
    _check_model(model)
    config = model_config_of(model)
    if repeated is not None and not isinstance(repeated, bool) and repeated != "split":
        raise ValueError(f"repeated must be None, True, False or 'split', got {repeated!r}")
    if test_set is None:
        check_int("n", n, low=1)
        test_set = make_test_set(task_config_of(model), n=n)
    if not isinstance(test_set, TaskBatch):
        raise TypeError(f"test_set must be a TaskBatch, got {type(test_set).__name__}")
    validate_tokens(test_set.tokens, config.V)
    test_set = permutation_batch(test_set)
    everything = torch.ones(len(test_set), dtype=torch.bool, device=test_set.tokens.device)
    groups = {
        None: [("all sequences", everything)],
        True: [("repeated last query", test_set.extras["repeated"])],
        False: [("new last query", ~test_set.extras["repeated"])],
        "split": [("new last query", ~test_set.extras["repeated"]), ("repeated last query", test_set.extras["repeated"])],
    }[repeated]
    for label, rows in groups:
        if not bool(rows.any()):
            raise ValueError(f"test_set has no sequences with a {label} (repeated={repeated!r}); "
                             "use a test set drawn with repeat_ratio > 0")
    patterns = attention_patterns_of(model, test_set.tokens)  # [batch, layer, head, q, k]
    return MeanAttention(config.name, len(test_set),
                         tuple((label, int(rows.sum()), patterns[rows].mean(dim=0)) for label, rows in groups))


def _one_sequence(tokens: Sequence[int] | Tensor, V: int) -> Int[Tensor, "1 seq"]:
    if isinstance(tokens, (list, tuple)):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TypeError(f"tokens must be ints, got {tokens!r}")
        tokens = torch.tensor(tokens, dtype=torch.long, device="cpu")  # a literal sequence: drawn on the CPU
    seq = validate_tokens(tokens, V)
    if seq.shape[0] != 1:
        raise ValueError(f"tokens must be one sequence, got a batch of {seq.shape[0]}")
    return seq


def sequence_attention_patterns(model, tokens: Sequence[int] | Int[Tensor, "*batch seq"]) -> SequenceAttention:
    """Every head's attention on one sequence ``[x1, y1, ..., xV]`` (a list of ints, a 1-D tensor or ``[1, seq]``)."""
    _check_model(model)
    config = model_config_of(model)
    seq = _one_sequence(tokens, config.V)
    return SequenceAttention(config.name, tuple(seq[0].tolist()), attention_patterns_of(model, seq)[0])


def walkthrough_distributions(model, tokens: Sequence[int] | Int[Tensor, "*batch seq"] | None = None) -> Walkthrough:
    """The model's P(y = v) at each y-prediction step of one sequence, and the exact Bayesian posteriors
    (:func:`~perm_circuits.posterior.bayes_posterior`, uniform and train-split prior; study section 06).

    Args:
        tokens: one sequence ``[x1, y1, ..., xV]``; default :data:`STUDY_SEQUENCE` (V = 5 models).
    """
    _check_model(model)
    V = model_config_of(model).V
    task = task_config_of(model)
    if tokens is None:
        if V != 5:
            raise ValueError(f"the study's default sequence is for V=5, model has V={V}: pass tokens")
        tokens = list(STUDY_SEQUENCE)
    if isinstance(tokens, Tensor):
        tokens = validate_tokens(tokens, V)
        if tokens.shape[0] != 1:
            raise ValueError(f"tokens must be one sequence, got a batch of {tokens.shape[0]}")
    seq = make_sequence(tokens if isinstance(tokens, (list, tuple)) else tokens[0], V)  # validated
    model_probs = value_probs(run_logits(model, seq).float(), V).cpu()[0]  # [step, value]
    uniform = bayes_posterior(seq, task, "uniform")
    train = bayes_posterior(seq, task, "train")
    return Walkthrough(model_config_of(model).name, tuple(seq[0].tolist()), model_probs, uniform.probs[0].cpu(),
                       train.probs[0].cpu(), tuple(bool(f) for f in train.fallback[0].tolist()))


def probe_distributions(models: Mapping[str, Any]) -> ProbeDistribution:
    """P(y = v) at the last position of the probe ``[2,4, 5,3, 4,5, 3,2, 2]`` for each ``{label: model}``
    (V = 5 models; study section 07: recall answers 4, elimination's trap is 1)."""
    if not isinstance(models, Mapping):
        raise TypeError(f"models must be a dict of name -> model, got {type(models).__name__}")
    if not models:
        raise ValueError("models is empty")
    for name, model in models.items():
        check_str("model name", name)
        _check_model(model)
        V = model_config_of(model).V
        if V != 5:
            raise ValueError(f"the probe is defined for V=5, model {name!r} has V={V}")
    return ProbeDistribution({name: tuple(probe_probabilities(model).tolist()) for name, model in models.items()})


def example_sequences(task: TaskConfig, test_set: TaskBatch) -> list[tuple[str, Tensor]]:
    """The study's probe and walkthrough sequences (V = 5), else one repeated and one new test sequence."""
    if task.V == 5:
        return [
            ("probe " + format_sequence(list(PROBE_SEQUENCE)) + " (recall answers 4, elimination's trap is 1)",
             make_sequence(list(PROBE_SEQUENCE), 5)),
            ("walkthrough sequence " + format_sequence(list(STUDY_SEQUENCE)) + " (target 1)",
             make_sequence(list(STUDY_SEQUENCE), 5)),
        ]
    out = []
    for label, rows in (("repeated", test_set.extras["repeated"]), ("new", ~test_set.extras["repeated"])):
        index = torch.nonzero(rows).flatten()
        if len(index):
            seq = test_set.tokens[index[:1]]
            out.append((f"test sequence {format_sequence(seq[0].tolist())} ({label} last query)", seq))
    return out


def example_activations(model, task: TaskConfig, examples: Sequence[tuple[str, Tensor]]) -> ExampleActivations | None:
    """Attention patterns, P(correct y) per step and the MLP activations (``blocks.L.mlp.hook_post``) of one
    forward pass over ``examples`` (``(label, [1, seq] tokens)``); ``None`` when there are none.  The last
    step's correct y is the uniform posterior's point mass (the earlier y of a repeated query, else the
    unused value)."""
    if not examples:
        return None
    config = model_config_of(model)
    tokens = torch.cat([seq for _, seq in examples])
    layers = range(config.n_layers)
    wanted = {f"blocks.{l}.attn.hook_pattern" for l in layers} | {f"blocks.{l}.mlp.hook_post" for l in layers}
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in wanted)
    probs = logits[:, 0::2].float().softmax(-1).cpu()
    targets, correct, patterns = [], [], []
    for i, (_, seq) in enumerate(examples):
        ids = seq[0].tolist()
        last = int(bayes_posterior(seq, task, "uniform").probs[0, -1].argmax()) + 1
        targets.append(tuple(ids[1::2] + [last]))
        correct.append(torch.tensor([float(probs[i, k, t]) for k, t in enumerate(targets[-1])], device="cpu"))
        patterns.append(torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][i].detach().float().cpu() for l in layers]))
    mlp_post = tuple(cache[f"blocks.{l}.mlp.hook_post"][0].detach().float().cpu() for l in layers)
    return ExampleActivations(tuple(label for label, _ in examples), tuple(tuple(s[0].tolist()) for _, s in examples),
                              tuple(targets), tuple(patterns), tuple(correct), mlp_post)
