import itertools

import pytest
import torch

from perm_circuits import TaskConfig, bayes_posterior, make_batch, make_sequence, split_permutations


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
    post = bayes_posterior(batch.inputs, config, prior)
    support = (
        list(itertools.permutations(range(1, 6)))
        if prior == "uniform"
        else [tuple(p) for p in split_permutations(config)[0].tolist()]
    )
    for row in range(len(batch)):
        expected = torch.tensor(brute_force(batch.inputs[row].tolist(), support, 5))
        torch.testing.assert_close(post.probs[row], expected)


def test_sums_to_one_and_known_values():
    config = TaskConfig(repeat_ratio=0.5)
    batch = make_batch(config, 500, seed=2)
    for prior in ("uniform", "train"):
        post = bayes_posterior(batch.inputs, config, prior)
        torch.testing.assert_close(post.probs.sum(-1), torch.ones(500, 5))
    uniform = bayes_posterior(batch.inputs, config).probs
    # new x: uniform over the 5 - k unused values
    new = ~batch.repeated
    for k in range(4):
        assert torch.allclose(uniform[:, k].max(-1).values, torch.tensor(1 / (5 - k)))
    assert torch.equal(uniform[new, 4].argmax(-1) + 1, batch.ys[new, 4])
    # repeated x: point mass on the earlier y
    rep = batch.repeated
    assert torch.equal(uniform[rep, 4].argmax(-1) + 1, batch.ys[rep, 0])
    assert torch.allclose(uniform[rep, 4].max(-1).values, torch.tensor(1.0))


def test_train_prior_falls_back_on_test_permutations():
    config = TaskConfig()
    batch = make_batch(config, 200, split="test", seed=0)
    post = bayes_posterior(batch.inputs, config, "train")
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
        bayes_posterior(make_batch(TaskConfig(), 2).inputs, TaskConfig(), "empirical")
    with pytest.raises(TypeError):
        bayes_posterior(torch.ones(2, 9), TaskConfig())
