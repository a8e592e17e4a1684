"""perm_circuits: train tiny transformers on in-context permutation lookup (and any other task) and take them apart.

Built on TransformerLens 4 (``TransformerBridge.boot_native``).  The data path:
task -> models -> train -> evaluate -> analyses -> views.

The top level holds what the README and the notebooks use: the tasks, the models, the one
:func:`train` and the one :func:`evaluate`, the main analyses, sweeps and reproductions.  Everything
else is public in its subpackage (``perm_circuits.analysis``, ``perm_circuits.tasks``,
``perm_circuits.tasks.permutation_data``, ``perm_circuits.models``, ``perm_circuits.sweep``, ``perm_circuits.dynamics``,
...).  Names that used to sit here still resolve, with a ``DeprecationWarning`` naming their module.
"""

from typing import TYPE_CHECKING

from perm_circuits._lazy import attach

# Re-exports, loaded on first use (so `import perm_circuits` does not import torch): each name
# below becomes an attribute of the package through `attach` at the end of this file; a name of
# MOVED resolves too, with a DeprecationWarning naming its module.
if TYPE_CHECKING:
    from perm_circuits import analysis, dynamics, sweep, tasks
    from perm_circuits.analysis import (
        ablate_head,
        ablate_mlp,
        ablation_table,
        attention_by_source,
        circuit_metrics,
        direct_logit_attribution,
        faithfulness_by_mode,
        find_recall_head,
        head_roles,
        head_scores,
        memory_probe_tracker,
        model_memory_probes,
        patch_head,
        propose_circuit,
        recall_patching,
    )
    from perm_circuits.dynamics import DynamicsRecorder
    from perm_circuits.evaluate import evaluate, recall_generalisation
    from perm_circuits.handbuilt import build_induction_model
    from perm_circuits.models import (
        PRESETS,
        ModelConfig,
        build_model,
        list_pretrained,
        load_any,
        load_checkpoint,
        load_pretrained,
        save_model,
    )
    from perm_circuits.reproduce import reproduce
    from perm_circuits.sweep import load_sweep, run_sweep
    from perm_circuits.tasks.permutation_data import TaskConfig, make_test_set, probe_sequence
    from perm_circuits.tasks import FitConfig, PermutationTask, Task, TaskBatch, register_task
    from perm_circuits.train import TrainConfig, TrainingHistory, train

__version__ = "0.1.0"

__all__ = [
    # tasks: the study's and any other (one file + register_task)
    "FitConfig",
    "PermutationTask",
    "Task",
    "TaskBatch",
    "TaskConfig",
    "make_test_set",
    "probe_sequence",
    "register_task",
    # models
    "PRESETS",
    "ModelConfig",
    "build_induction_model",
    "build_model",
    "list_pretrained",
    "load_any",
    "load_checkpoint",
    "load_pretrained",
    "save_model",
    # the one training and the one evaluation
    "TrainConfig",
    "TrainingHistory",
    "evaluate",
    "recall_generalisation",
    "train",
    # analyses
    "ablate_head",
    "ablate_mlp",
    "ablation_table",
    "attention_by_source",
    "circuit_metrics",
    "direct_logit_attribution",
    "faithfulness_by_mode",
    "find_recall_head",
    "head_roles",
    "head_scores",
    "memory_probe_tracker",
    "model_memory_probes",
    "patch_head",
    "propose_circuit",
    "recall_patching",
    # training dynamics, sweeps, reproductions
    "DynamicsRecorder",
    "load_sweep",
    "reproduce",
    "run_sweep",
]

MOVED: dict[str, str] = {
    **dict.fromkeys(("task_ablation_table", "ablate", "ffn_key_value_probe", "memory_recall", "mlp_prediction_flips", "optimal_constant",
                     "TaskAblationTable", "TaskPatch", "target_logprob"), "perm_circuits.analysis"),
    **dict.fromkeys(("Evaluation", "RecallGeneralisation", "StepMetrics", "SubgroupMetrics", "probe_probabilities"),
                    "perm_circuits.evaluate"),
    **dict.fromkeys(("check_hooks", "hook_count", "run_logits"), "perm_circuits.hooks"),
    **dict.fromkeys(("Checkpoint", "fast_forward", "load_model"), "perm_circuits.models"),
    **dict.fromkeys(("Posterior", "bayes_posterior"), "perm_circuits.posterior"),
    **dict.fromkeys(("PROBE_SEQUENCE", "Batch", "all_permutations", "exhaustive_batch", "make_batch", "make_sequence",
                     "split_permutations"), "perm_circuits.tasks.permutation_data"),
    **dict.fromkeys(("StepInfo", "TrainResult"), "perm_circuits.train"),
    **dict.fromkeys(("SweepResult", "SweepSpec", "export_parquet"), "perm_circuits.sweep"),
    **dict.fromkeys(("FitResult", "StepState", "fit", "log_spaced_steps", "masked_cross_entropy", "task_from_dict"),
                    "perm_circuits.tasks"),
    **dict.fromkeys(("DynamicsRecord", "load_dynamics", "save_dynamics", "which_first"), "perm_circuits.dynamics"),
    **dict.fromkeys(("Comparison", "Reproduction"), "perm_circuits.reproduce"),
    **dict.fromkeys(("TaskEvaluation",), "perm_circuits.tasks.runner"),
    **dict.fromkeys(("ModelShape", "model_shape"), "perm_circuits.model_shape"),
}
"""Names that were exported here before, and the module that exports them now."""

attach(__name__, __file__)
