"""Hypotheses as objects: causal scrubbing, interchange interventions, replacement by rules.

``spec`` (features, components, claims, the frozen :class:`Hypothesis`), ``causal_scrub``
(Chan et al. 2022), ``interchange`` (IIA, Geiger et al. 2021), ``replace`` (rules in place of
components, with the retention of each metric), ``neurons`` (every MLP neuron as a table over a few
named features, and the replacement MLP built from those rules). Task-free: any TransformerLens 4 model, any batch.
"""

from perm_circuits.analysis.hypothesis.causal_scrub import ClaimRecovery, ScrubResult, causal_scrub
from perm_circuits.analysis.hypothesis.interchange import HighLevelModel, InterchangeResult, interchange_accuracy
from perm_circuits.analysis.hypothesis.neurons import NeuronRule, NeuronRules, fit_neuron_rules
from perm_circuits.analysis.hypothesis.replace import (
    FeatureRule, Retention, TableRule, fit_table, replace, retention,
)
from perm_circuits.analysis.hypothesis.spec import Claim, Component, Feature, Hypothesis

__all__ = [
    "Claim", "ClaimRecovery", "Component", "Feature", "FeatureRule", "HighLevelModel", "Hypothesis",
    "InterchangeResult", "Retention", "ScrubResult", "TableRule", "causal_scrub", "fit_table",
    "interchange_accuracy", "replace", "retention", "NeuronRule", "NeuronRules", "fit_neuron_rules",
]
