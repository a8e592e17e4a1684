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
from perm_circuits.tasks.factual import FactualRecallTask

__all__ = ["TASKS", "FactualRecallTask", "FitResult", "StepState", "Task", "TaskBatch", "fit", "log_spaced_steps",
           "masked_cross_entropy", "register_task", "task_from_dict"]
