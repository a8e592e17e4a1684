"""Attribution and probes: direct logit attribution (:mod:`.dla`, :mod:`.task_attribution`),
memory-recall probes (:mod:`.memory`), head scores (:mod:`.induction`) and the logit lens across an
MLP (:mod:`.mlp_flips`).

Every public name is re-exported from :mod:`perm_circuits.analysis`.
"""
