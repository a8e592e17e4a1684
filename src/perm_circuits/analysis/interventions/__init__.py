"""Interventions on any hooked model (the task-free core, hooks and checks), ablation and patching;
every public name is re-exported from :mod:`perm_circuits.analysis`.
"""
