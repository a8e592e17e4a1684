"""The study's story on the permutation task: per-component roles (:mod:`.roles`), the claims and the
verdict (:mod:`.claims`, :mod:`.verdict`), attention scores by source position (:mod:`.scores`),
recall patching (:mod:`.recall_patching`), the FFN key-value probe (:mod:`.ffn`), the joint ablation
of the eliminator heads (:mod:`.joint_ablation`) and the circuit its roles propose per skill
(:mod:`.skill_circuits`). These modules import the general tools; the general tools never import
them.

Every public name is re-exported from :mod:`perm_circuits.analysis`.
"""
