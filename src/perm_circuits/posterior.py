"""The permutation task's exact Bayesian posterior under its documented path; it lives in
:mod:`perm_circuits.tasks.permutation_posterior`, beside the task's data."""

from perm_circuits.tasks.permutation_posterior import Posterior, bayes_posterior, prior_permutations

__all__ = ["Posterior", "bayes_posterior", "prior_permutations"]
