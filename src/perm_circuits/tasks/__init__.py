"""Tasks behind one interface (:class:`~perm_circuits.tasks.base.Task`), their registry and the generic step loop."""

from perm_circuits.tasks.base import (DEFAULT_MODEL_KEYS, TASKS, FitConfig, FitResult, StepState, Task, TaskBatch,
                                      TaskEntry, fit, load_object, log_spaced_steps, masked_cross_entropy,
                                      register_task, task_entries, task_entry, task_from_dict)
from perm_circuits.tasks.bigram import BigramTriggerTask  # registers "bigram_triggers"
from perm_circuits.tasks.factual import FactualRecallTask  # registers "factual_recall"
from perm_circuits.tasks.perm_chain import PermutationChainTask, rollout  # registers "perm_chain"
from perm_circuits.tasks.permutation import PermutationTask

__all__ = ["DEFAULT_MODEL_KEYS", "TASKS", "BigramTriggerTask", "FactualRecallTask", "FitConfig", "FitResult",
           "PermutationChainTask", "PermutationTask", "StepState", "Task", "TaskBatch", "TaskEntry", "fit", "load_object",
           "log_spaced_steps", "masked_cross_entropy", "register_task", "rollout", "task_entries", "task_entry",
           "task_from_dict"]
