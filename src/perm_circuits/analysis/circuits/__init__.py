"""Circuits as sets of nodes: the nodes and the metric (:mod:`.nodes`), the IOI criteria
(:mod:`.criteria`, :mod:`.runs`, :mod:`.results`), composition scores (:mod:`.composition`) and the
induction story (:mod:`.induction_story`). Edge-level discovery lives in :mod:`perm_circuits.discovery`.

Every public name is re-exported from :mod:`perm_circuits.analysis`.
"""
