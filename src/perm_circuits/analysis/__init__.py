"""Circuit analyses: ablations and activation patching (more modules may add their names here)."""

from perm_circuits.analysis.interventions.ablation import (
    HOWS, AblationRow, AblationTable, ablate, ablate_head, ablate_mlp, ablation_table, binding_free_reference,
    optimal_constant, reference_activations, resample_rows,
)
from perm_circuits.analysis.study.recall_patching import (
    PatchCell, PatchingReport, PatchingSweep, RecallHead, find_recall_head, generic_patch, logit_diff, patch_attn_out,
    patch_head_outputs, patch_head_patterns, patch_head_sources, patch_mlp, patch_residual, patching_pair,
    recall_patching,
)

__all__ = [
    "HOWS", "AblationRow", "AblationTable", "PatchCell", "PatchingReport", "PatchingSweep", "RecallHead", "ablate",
    "ablate_head", "ablate_mlp", "ablation_table", "binding_free_reference", "find_recall_head", "generic_patch",
    "logit_diff", "patch_attn_out", "patch_head_outputs", "patch_head_patterns", "patch_head_sources", "patch_mlp",
    "patch_residual", "optimal_constant", "patching_pair", "recall_patching", "reference_activations", "resample_rows",
]

# --- FFN key-value memories, memory-recall probes, direct logit attribution (ffn/memory/attribution)
from perm_circuits.analysis.probes.dla import (  # noqa: E402
    LogitAttribution, LogitDiffDecomposition, decompose_logit_diff, direct_logit_attribution,
)
from perm_circuits.analysis.study.ffn import (  # noqa: E402
    FFNKeyValueProbe, MLPFlips, enumerate_sequences, ffn_key_value_probe, mlp_prediction_flips,
)
from perm_circuits.analysis.probes.memory import (  # noqa: E402
    MemoryProbes, identity_map, memory_probe_tracker, memory_recall, mlp_memory_probe, model_memory_probes,
    ov_memory_probe, qk_memory_probe, recall_rate,
)

__all__ += [
    "FFNKeyValueProbe", "LogitAttribution", "LogitDiffDecomposition", "MLPFlips", "MemoryProbes",
    "decompose_logit_diff", "direct_logit_attribution", "enumerate_sequences", "ffn_key_value_probe", "identity_map",
    "memory_probe_tracker", "memory_recall", "mlp_memory_probe", "mlp_prediction_flips", "model_memory_probes",
    "ov_memory_probe", "qk_memory_probe", "recall_rate",
]

# --- head roles: attention scores (scores) -> per-component roles (roles) -> claims (claims) -> verdict (verdict)
from perm_circuits.analysis.study.claims import Claim, ClaimTable  # noqa: E402
from perm_circuits.analysis.study.roles import HeadRole, MlpRole  # noqa: E402
from perm_circuits.analysis.study.scores import (  # noqa: E402
    AttentionBySource, HeadScore, HeadScores, RoleThresholds, attention_by_source, head_scores,
)
from perm_circuits.analysis.study.skill_circuits import SkillCircuit  # noqa: E402
from perm_circuits.analysis.study.verdict import RoleVerdict, head_roles, judge_roles  # noqa: E402

__all__ += [
    "AttentionBySource", "Claim", "ClaimTable", "HeadRole", "HeadScore", "HeadScores", "MlpRole", "RoleThresholds",
    "RoleVerdict", "SkillCircuit", "attention_by_source", "head_roles", "head_scores", "judge_roles",
]

# --- IOI-style circuit evaluation: faithfulness, completeness, minimality (circuit)
from perm_circuits.analysis.circuits.criteria import (  # noqa: E402
    CircuitMetrics, FaithfulnessByMode, FaithfulnessRow, Node, NodeMinimality, ProposedCircuit,
    SubgroupCircuitMetrics, circuit_metrics, faithfulness_by_mode, parse_circuit, propose_circuit,
)

__all__ += [
    "CircuitMetrics", "FaithfulnessByMode", "FaithfulnessRow", "Node", "NodeMinimality", "ProposedCircuit",
    "SubgroupCircuitMetrics", "circuit_metrics", "faithfulness_by_mode", "parse_circuit", "propose_circuit",
]

# --- multi-layer circuit scores: previous-token, induction, duplicate-token (induction)
from perm_circuits.analysis.probes.induction import (  # noqa: E402
    InductionScore, InductionScores, induction_scores, induction_test_set,
)

__all__ += ["InductionScore", "InductionScores", "induction_scores", "induction_test_set"]

# --- multi-layer circuits: Q-, K- and V-composition scores between heads (composition)
from perm_circuits.analysis.circuits.composition import (  # noqa: E402
    CompositionScores, all_composition_scores, composition_baseline, composition_scores,
)

__all__ += ["CompositionScores", "all_composition_scores", "composition_baseline", "composition_scores"]

# --- multi-layer circuits: path patching sender head -> receiver head's q/k/v (path_patching)
from perm_circuits.analysis.interventions.path_patching import (  # noqa: E402
    PathPatchEffect, PathPatchingTable, induction_patching_pair, path_patch, path_patch_hooks, path_patching_table,
    sender_delta,
)

__all__ += [
    "PathPatchEffect", "PathPatchingTable", "induction_patching_pair", "path_patch", "path_patch_hooks",
    "path_patching_table", "sender_delta",
]

# --- multi-layer circuits: the induction story judged from scores, composition and path patching
from perm_circuits.analysis.circuits.induction_story import (  # noqa: E402
    InductionStory, induction_story, judge_induction_story,
)

__all__ += ["InductionStory", "induction_story", "judge_induction_story"]

# --- any task, any hooked model: the any-task ablation table and activation patching over task tokens
from perm_circuits.analysis.interventions.core import ANY_TASK_HOWS  # noqa: E402
from perm_circuits.analysis.interventions.ablation_table import (  # noqa: E402
    TASK_HOWS, ablate_tokens,
)
from perm_circuits.analysis.interventions.activation_patching import (  # noqa: E402
    TaskPatch, patch_activation, patch_head, target_logprob,
)
from perm_circuits.analysis.circuits.nodes import target_logprob_gain  # noqa: E402
from perm_circuits.analysis.report_data import TaskReportData, task_report_data  # noqa: E402
from perm_circuits.analysis.probes.task_attribution import (  # noqa: E402
    AttentionScores, TargetAttribution, attention_scores, target_logit_attribution,
)

__all__ += ["AttentionScores", "TargetAttribution", "TaskReportData", "attention_scores", "target_logit_attribution",
            "target_logprob_gain", "task_report_data"]
__all__ += ["ANY_TASK_HOWS", "TASK_HOWS", "TaskPatch", "ablate_tokens",
            "patch_activation", "patch_head", "target_logprob"]

# --- hypotheses as objects: causal scrubbing, interchange interventions, replacement by rules (hypothesis)
from perm_circuits.analysis.hypothesis import (  # noqa: E402
    ClaimRecovery, Component, Feature, FeatureRule, HighLevelModel, Hypothesis, InterchangeResult, Retention,
    ScrubResult, TableRule, causal_scrub, fit_table, interchange_accuracy, replace, retention,
    NeuronRule, NeuronRules, fit_neuron_rules,
)

__all__ += ["ClaimRecovery", "Component", "Feature", "FeatureRule", "HighLevelModel", "Hypothesis",
            "InterchangeResult", "Retention", "ScrubResult", "TableRule", "causal_scrub", "fit_table",
            "interchange_accuracy", "replace", "retention", "NeuronRule", "NeuronRules", "fit_neuron_rules"]
