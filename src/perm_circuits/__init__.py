"""perm_circuits: train tiny transformers on in-context permutation lookup and take them apart.

Built on TransformerLens 4 (``TransformerBridge.boot_native``).  The data path:
task -> models -> train -> evaluate -> analyses -> views.
"""

from perm_circuits import analysis
from perm_circuits.analysis import (
    ablate,
    ablate_head,
    ablate_mlp,
    ablation_table,
    attention_by_source,
    circuit_metrics,
    direct_logit_attribution,
    faithfulness_by_mode,
    ffn_key_value_probe,
    find_recall_head,
    head_roles,
    head_scores,
    memory_probe_tracker,
    memory_recall,
    mlp_prediction_flips,
    model_memory_probes,
    propose_circuit,
    optimal_constant,
    recall_patching,
)
from perm_circuits.evaluate import (
    Evaluation,
    RecallGeneralisation,
    StepMetrics,
    SubgroupMetrics,
    evaluate,
    probe_probabilities,
    recall_generalisation,
)
from perm_circuits.handbuilt import build_induction_model
from perm_circuits.hooks import check_hooks, hook_count, run_logits
from perm_circuits.models import (
    PRESETS,
    Checkpoint,
    ModelConfig,
    build_model,
    fast_forward,
    list_pretrained,
    load_any,
    load_checkpoint,
    load_model,
    load_pretrained,
    save_model,
)
from perm_circuits.posterior import Posterior, bayes_posterior
from perm_circuits.task import (
    PROBE_SEQUENCE,
    Batch,
    TaskConfig,
    all_permutations,
    make_batch,
    make_sequence,
    make_test_set,
    probe_sequence,
    split_permutations,
)
from perm_circuits.train import TrainConfig, TrainingHistory, TrainResult, train

__version__ = "0.1.0"

__all__ = [
    "analysis",
    "ablate",
    "ablate_head",
    "ablate_mlp",
    "ablation_table",
    "attention_by_source",
    "circuit_metrics",
    "direct_logit_attribution",
    "faithfulness_by_mode",
    "ffn_key_value_probe",
    "find_recall_head",
    "head_roles",
    "head_scores",
    "memory_probe_tracker",
    "memory_recall",
    "mlp_prediction_flips",
    "model_memory_probes",
    "propose_circuit",
    "optimal_constant",
    "recall_patching",
    "PRESETS",
    "PROBE_SEQUENCE",
    "Batch",
    "Checkpoint",
    "Evaluation",
    "ModelConfig",
    "Posterior",
    "RecallGeneralisation",
    "StepMetrics",
    "SubgroupMetrics",
    "TaskConfig",
    "TrainConfig",
    "TrainResult",
    "TrainingHistory",
    "all_permutations",
    "bayes_posterior",
    "build_induction_model",
    "build_model",
    "check_hooks",
    "evaluate",
    "fast_forward",
    "hook_count",
    "list_pretrained",
    "load_any",
    "load_checkpoint",
    "load_model",
    "load_pretrained",
    "make_batch",
    "make_sequence",
    "make_test_set",
    "probe_sequence",
    "probe_probabilities",
    "recall_generalisation",
    "run_logits",
    "save_model",
    "split_permutations",
    "train",
]

# --- sweeps: grids of runs on a process pool or Ray, one row per run (sweep/)
from perm_circuits import sweep  # noqa: E402
from perm_circuits.sweep import SweepResult, SweepSpec, export_parquet, load_sweep, run_sweep  # noqa: E402

__all__ += ["sweep", "SweepResult", "SweepSpec", "export_parquet", "load_sweep", "run_sweep"]
