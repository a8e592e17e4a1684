"""Tasks behind one interface (:class:`~perm_circuits.tasks.base.Task`) and the generic :func:`fit` loop."""

from perm_circuits.tasks.base import (
    TASKS,
    FitResult,
    StepState,
    Task,
    TaskBatch,
    fit,
    log_spaced_steps,
    masked_cross_entropy,
    register_task,
    task_from_dict,
)
from perm_circuits.tasks.bigram import BigramTriggerTask  # registers "bigram_triggers"
from perm_circuits.tasks.factual import FactualRecallTask  # registers "factual_recall"
from perm_circuits.tasks.perm_chain import PermutationChainTask, rollout  # registers "perm_chain"
from perm_circuits.tasks.permutation import PermutationTask

__all__ = ["TASKS", "BigramTriggerTask", "FactualRecallTask", "FitResult", "PermutationTask", "StepState", "Task",
           "TaskBatch", "fit", "log_spaced_steps", "masked_cross_entropy", "register_task", "task_from_dict",
           "PermutationChainTask", "rollout"]
