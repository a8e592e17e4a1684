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

__all__ = ["TASKS", "BigramTriggerTask", "FitResult", "StepState", "Task", "TaskBatch", "fit", "log_spaced_steps",
           "masked_cross_entropy", "register_task", "task_from_dict"]
