"""Interventions on any hooked model, with no task behind them first (:mod:`.core`, :mod:`.hooks`,
:mod:`.checks`, :mod:`.references`), then ablation (:mod:`.ablation`, :mod:`.ablation_table`,
:mod:`.permutation_table` (the study's metrics), :mod:`.optimal`) and patching (:mod:`.patching`,
:mod:`.activation_patching`, :mod:`.path_patching`).

Every public name is re-exported from :mod:`perm_circuits.analysis`.
"""
