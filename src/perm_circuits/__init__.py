"""perm_circuits: train tiny transformers on in-context permutation lookup (and any other task) and take them apart.

Built on TransformerLens 4 (``TransformerBridge.boot_native``); the data path is task -> models ->
train -> evaluate -> analyses -> views.  The top level holds what the README and the notebooks use;
everything else is public in its subpackage (``perm_circuits.analysis``, ``perm_circuits.tasks``, ...).
"""

from typing import TYPE_CHECKING

from perm_circuits._lazy import attach

# Re-exports, loaded on first use (perm_circuits._lazy)
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

attach(__name__, __file__)
