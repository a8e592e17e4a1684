"""perm_circuits: train tiny transformers on in-context permutation lookup and take them apart.

Built on TransformerLens 4 (``TransformerBridge.boot_native``).  The data path:
task -> models -> train -> evaluate -> analyses -> views.
"""

from typing import TYPE_CHECKING

from perm_circuits._lazy import attach

# Re-exports, loaded on first use (so `import perm_circuits` does not import torch): each name
# below becomes an attribute of the package through `attach` at the end of this file.
if TYPE_CHECKING:
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
        exhaustive_batch,
        make_batch,
        make_sequence,
        make_test_set,
        probe_sequence,
        split_permutations,
    )
    from perm_circuits.train import TrainConfig, TrainingHistory, TrainResult, train
    from perm_circuits import sweep
    from perm_circuits.sweep import SweepResult, SweepSpec, export_parquet, load_sweep, run_sweep
    from perm_circuits import tasks
    from perm_circuits.reproduce import Comparison, Reproduction, reproduce
    from perm_circuits.task_eval import TaskEvaluation, evaluate_task, train_task
    from perm_circuits.tasks import (
        FitResult,
        PermutationTask,
        StepState,
        Task,
        TaskBatch,
        fit,
        log_spaced_steps,
        masked_cross_entropy,
        register_task,
        task_from_dict,
    )
    from perm_circuits import dynamics
    from perm_circuits.dynamics import DynamicsRecord, DynamicsRecorder, load_dynamics, save_dynamics, which_first
    from perm_circuits.train import StepInfo
    from perm_circuits.analysis.task_ablation import TaskAblationTable, task_ablation_table
    from perm_circuits.analysis.task_patching import TaskPatch, patch_head, target_logprob
    from perm_circuits.model_shape import ModelShape, model_shape

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
    "exhaustive_batch",
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
__all__ += ["sweep", "SweepResult", "SweepSpec", "export_parquet", "load_sweep", "run_sweep"]

# --- tasks: one interface for every system (tasks/), the generic fit loop, task evaluation, reproductions
__all__ += ["tasks", "Comparison", "FitResult", "PermutationTask", "Reproduction", "StepState", "Task", "TaskBatch",
            "TaskEvaluation", "evaluate_task", "fit", "log_spaced_steps", "masked_cross_entropy", "register_task",
            "reproduce", "task_from_dict", "train_task"]

# --- training dynamics: step-level recording, which signal moves first, the LLC (dynamics/)
__all__ += ["dynamics", "DynamicsRecord", "DynamicsRecorder", "StepInfo", "load_dynamics", "save_dynamics", "which_first"]

# --- analyses on any task's model and any hooked TransformerLens model
__all__ += ["ModelShape", "TaskAblationTable", "TaskPatch", "model_shape", "patch_head", "target_logprob",
            "task_ablation_table"]

attach(__name__, __file__)
