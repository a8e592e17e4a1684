import itertools
import math
from fractions import Fraction

import pytest
import torch

from perm_circuits import TaskConfig
from perm_circuits.posterior import bayes_posterior
from perm_circuits.tasks.permutation_data import make_batch, make_sequence, split_permutations
from perm_circuits.tasks.permutation_posterior import CHUNK_ELEMENTS, _posterior_from, prior_permutations


def brute_force(seq: list[int], prior: list[tuple[int, ...]], V: int) -> list[list[float]]:
    """Enumerate the prior permutation by permutation (the definition, no vectorization)."""
    out = []
    for k in range(V):
        xk = seq[2 * k]
        seen = [(seq[2 * j], seq[2 * j + 1]) for j in range(k)]
        consistent = [p for p in prior if all(p[x - 1] == y for x, y in seen)]
        if not consistent:  # documented fallback: the uniform posterior
            consistent = [p for p in itertools.permutations(range(1, V + 1)) if all(p[x - 1] == y for x, y in seen)]
        out.append([sum(p[xk - 1] == v for p in consistent) / len(consistent) for v in range(1, V + 1)])
    return out


@pytest.mark.parametrize("prior", ["uniform", "train"])
def test_matches_brute_force(prior):
    config = TaskConfig(repeat_ratio=0.3)
    batch = make_batch(config, 60, split="test", seed=11)
    post = bayes_posterior(batch.tokens, config, prior)
    support = (
        list(itertools.permutations(range(1, 6)))
        if prior == "uniform"
        else [tuple(p) for p in split_permutations(config)[0].tolist()]
    )
    for row in range(len(batch)):
        expected = torch.tensor(brute_force(batch.tokens[row].tolist(), support, 5))
        torch.testing.assert_close(post.probs[row], expected)


def test_sums_to_one_and_known_values():
    config = TaskConfig(repeat_ratio=0.5)
    batch = make_batch(config, 500, seed=2)
    for prior in ("uniform", "train"):
        post = bayes_posterior(batch.tokens, config, prior)
        torch.testing.assert_close(post.probs.sum(-1), torch.ones(500, 5))
    uniform = bayes_posterior(batch.tokens, config).probs
    # new x: uniform over the 5 - k unused values
    new = ~batch.extras["repeated"]
    for k in range(4):
        assert torch.allclose(uniform[:, k].max(-1).values, torch.tensor(1 / (5 - k)))
    assert torch.equal(uniform[new, 4].argmax(-1) + 1, batch.extras["ys"][new, 4])
    # repeated x: point mass on the earlier y
    rep = batch.extras["repeated"]
    assert torch.equal(uniform[rep, 4].argmax(-1) + 1, batch.extras["ys"][rep, 0])
    assert torch.allclose(uniform[rep, 4].max(-1).values, torch.tensor(1.0))


def test_train_prior_falls_back_on_test_permutations():
    config = TaskConfig()
    batch = make_batch(config, 200, split="test", seed=0)
    post = bayes_posterior(batch.tokens, config, "train")
    assert post.fallback[:, 4].all()  # four pairs pin a test permutation: no train perm consistent
    assert not post.fallback[:, 0].any()
    assert (post.n_consistent[:, 0] == 96).all()


def test_probe_posterior():
    config = TaskConfig()
    post = bayes_posterior(make_sequence([2, 4, 5, 3, 4, 5, 3, 2, 2]), config)
    assert post.probs[0, 4].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]


def test_rejects_inconsistent_or_bad_input():
    with pytest.raises(ValueError, match="not consistent"):
        bayes_posterior(torch.tensor([[1, 2, 3, 2, 4, 5, 5, 1, 4]]), TaskConfig())
    with pytest.raises(ValueError, match="prior"):
        bayes_posterior(make_batch(TaskConfig(), 2).tokens, TaskConfig(), "empirical")
    with pytest.raises(TypeError):
        bayes_posterior(torch.ones(2, 9), TaskConfig())


def generative_conditionals(config: TaskConfig, prior: str) -> dict[tuple[int, ...], dict[int, Fraction]]:
    """P(next y | prefix) by enumerating the whole generative process with exact weights.

    Every permutation of the prior support (uniform), every x order (uniform), and at the last
    query: no repeat (1 - repeat_ratio) or a repeat of x_k, k uniform over repeat_sources.  The
    prefix of step j is the tokens ``x1 y1 ... x_j`` (the model's input up to that y position).
    """
    V = config.V
    support = (
        list(itertools.permutations(range(1, V + 1)))
        if prior == "uniform"
        else [tuple(p) for p in split_permutations(config)[0].tolist()]
    )
    ratio = Fraction(config.repeat_ratio).limit_denominator(1000)
    joint: dict[tuple[int, ...], dict[int, Fraction]] = {}
    for p in support:
        for order in itertools.permutations(range(1, V + 1)):
            variants = [(1 - ratio, order)] + [
                (ratio / len(config.repeat_sources), order[:-1] + (order[k - 1],)) for k in config.repeat_sources
            ]
            for weight, xs in variants:
                if weight == 0:
                    continue
                seq = [t for x in xs for t in (x, p[x - 1])]
                for j in range(V):
                    prefix, target = tuple(seq[: 2 * j + 1]), seq[2 * j + 1]
                    cell = joint.setdefault(prefix, {})
                    cell[target] = cell.get(target, Fraction(0)) + weight / (len(support) * math.factorial(V))
    return {prefix: {v: w / sum(cell.values()) for v, w in cell.items()} for prefix, cell in joint.items()}


@pytest.mark.parametrize(
    "V, ratio, sources",
    [(3, 0.3, (1,)), (3, 0.5, (2,)), (3, 1.0, (1, 2)), (4, 0.3, (1,)), (4, 0.3, (1, 2, 3)), (4, 0.7, (1, 3)), (4, 1.0, (2,))],
)
@pytest.mark.parametrize("prior", ["uniform", "train"])
def test_posterior_is_the_generative_conditional_for_every_repeat_source(V, ratio, sources, prior):
    """The exact conditional of the target given the prefix, from enumerating permutations, x orders
    and repeat choices, equals bayes_posterior at every step of every possible sequence (float32
    of the exact fraction, bit for bit)."""
    config = TaskConfig(V=V, repeat_ratio=ratio, repeat_sources=sources)
    conditionals = generative_conditionals(config, prior)
    full = sorted(prefix for prefix in conditionals if len(prefix) == 2 * V - 1)  # every possible input
    post = bayes_posterior(torch.tensor(full), config, prior)
    assert not post.fallback.any()  # sequences the prior can generate never need the fallback
    expected = torch.tensor(
        [[[float(conditionals[seq[: 2 * j + 1]].get(v, 0)) for v in range(1, V + 1)] for j in range(V)] for seq in full],
        dtype=torch.float64,
    )
    assert torch.equal(post.probs, expected.float())
    assert (post.probs.double() - expected).abs().max() < 1e-7  # float32 rounding of the exact value
    inputs = torch.tensor(full)
    counts, total = _posterior_from(prior_permutations(config, prior), inputs[:, 0::2], inputs[:, 1::2])
    assert (counts / total[..., None] - expected).abs().max() < 1e-12  # the float64 it is rounded from
    n_repeated = sum(seq[-1] in seq[0:-1:2] for seq in full)
    n_new = len(full) - n_repeated
    assert n_repeated > 0 and (n_new > 0) == (ratio < 1.0)  # both kinds of last query were compared


def test_point_mass_on_the_repeated_answer_for_every_source():
    config = TaskConfig(repeat_ratio=0.6, repeat_sources=(1, 2, 3, 4))
    batch = make_batch(config, 800, split="test", seed=4)
    rep = batch.extras["repeated"]
    assert set(batch.extras["repeat_source"][rep].tolist()) == {0, 1, 2, 3}
    for prior in ("uniform", "train"):
        last = bayes_posterior(batch.tokens, config, prior).probs[:, 4]
        expected = torch.nn.functional.one_hot(batch.extras["ys"].gather(1, batch.extras["repeat_source"].clamp(min=0)[:, None])[:, 0] - 1, 5)
        assert torch.equal(last[rep], expected[rep].float())  # y_k of the repeated x_k, whichever k
        assert torch.equal(last[~rep], torch.nn.functional.one_hot(batch.extras["ys"][~rep, 4] - 1, 5).float())  # the one unused value


@pytest.mark.parametrize("prior", ["uniform", "train"])
def test_rows_counted_in_chunks_give_the_same_bits(prior, monkeypatch):
    """V = 8 has 40,320 permutations: the counts go chunk by chunk of rows (a 5,000-row test set at
    once took tens of GB and was killed), and each row's posterior is the same bits in any chunking."""
    from perm_circuits.tasks import permutation_posterior

    config = TaskConfig(V=6)
    inputs = make_batch(config, 50, split="test", seed=3).tokens
    whole = bayes_posterior(inputs, config, prior)
    monkeypatch.setattr(permutation_posterior, "CHUNK_ELEMENTS", 720 * 6 * 7)  # 7 rows a chunk, the last one short
    chunked = bayes_posterior(inputs, config, prior)
    for field in ("probs", "fallback", "n_consistent"):
        assert torch.equal(getattr(whole, field), getattr(chunked, field)), field
    assert whole.n_consistent[:, 0].eq(720 if prior == "uniform" else len(split_permutations(config)[0])).all()


def test_largest_vocabulary_posterior_on_a_test_set():
    config = TaskConfig(V=8)
    assert 40320 * 8 * 200 > 4 * CHUNK_ELEMENTS  # the batch below spans several chunks
    posterior = bayes_posterior(make_batch(config, 200, split="test", seed=0).tokens, config, "uniform")
    assert posterior.probs.shape == (200, 8, 8)
    assert torch.allclose(posterior.probs.sum(-1), torch.ones(200, 8))
    assert posterior.n_consistent[:, 0].eq(40320).all() and posterior.n_consistent[:, 1].eq(5040).all()
