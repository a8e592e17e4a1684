"""Forner et al. 2026: the permutation-chain task, the solvable model, its order parameters and theory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from perm_circuits.hooks import check_hooks, hook_count, run_capture
from perm_circuits.systems.forner import (
    FornerConfig,
    FornerModel,
    c_omega,
    chain_snapshot,
    fast_forward,
    integrate_order_parameters,
    mean_logits,
    order_parameter_rhs,
    order_parameters,
    rollout_accuracy,
    rollout_recursion,
    step_accuracy_gaussian,
    teacher_model,
    train_chain,
)
from perm_circuits.tasks import task_from_dict
from perm_circuits.tasks.perm_chain import (
    PermutationChainTask,
    permutation_matrices,
    rollout,
)

SMALL = FornerConfig(N=5, d_g=4, L=4, d_h=16)


# ----------------------------------------------------------------------------- the task


def test_chain_equals_composing_the_permutations():
    task = PermutationChainTask(N=6, d_g=5, L=7, perm_seed=3)
    batch = task.sample(50, torch.Generator().manual_seed(0))
    perms = [p.tolist() for p in task.perms]
    assert len({tuple(p) for p in perms}) == 5 and all(sorted(p) == list(range(6)) for p in perms)
    for actions, states in zip(batch.extras["actions"].tolist(), batch.extras["states"].tolist()):
        s = states[0]
        for t, g in enumerate(actions, start=1):
            s = perms[g][s]  # s_t = sigma_{g_t}(s_{t-1})
            assert states[t] == s
        composed = list(range(6))  # the whole chain is one permutation: sigma_{g_L} o ... o sigma_{g_1}
        for g in actions:
            composed = [perms[g][x] for x in composed]
        assert states[-1] == composed[states[0]]


def test_sequence_layout_targets_and_mask():
    task = PermutationChainTask(N=6, d_g=5, L=7)
    batch = task.sample(8, torch.Generator().manual_seed(1))
    actions, states = batch.extras["actions"], batch.extras["states"]
    assert batch.tokens.shape == (8, 14) == (8, task.n_ctx) and task.d_vocab == 11
    assert torch.equal(batch.tokens[:, :7], actions)  # x_1..x_L = g_1..g_L (ids 0..d_g-1)
    assert torch.equal(batch.tokens[:, 7:], 5 + states[:, :7])  # s_0..s_{L-1} as ids d_g + s
    assert torch.equal(batch.targets[:, 7:], states[:, 1:])  # position L+t-1 predicts s_t
    assert batch.mask[:, :7].sum() == 0 and batch.mask[:, 7:].min() == 1
    assert task.reference(batch) is batch.targets
    assert task_from_dict(task.to_dict()) == task
    a = task.sample(4, torch.Generator().manual_seed(9))
    b = task.sample(4, torch.Generator().manual_seed(9))
    assert torch.equal(a.tokens, b.tokens)


def test_permutation_matrices_act_on_one_hot_states():
    perms = torch.tensor([[2, 0, 1], [0, 2, 1]])
    O = permutation_matrices(perms)
    for a in range(2):
        for j in range(3):
            assert torch.equal(O[a] @ torch.eye(3)[j], torch.eye(3)[perms[a, j]])  # O e_j = e_sigma(j)


def test_bad_task_settings_raise():
    with pytest.raises(ValueError, match="d_g must be <= N!"):
        PermutationChainTask(N=3, d_g=7)
    with pytest.raises(TypeError, match="L must be an int|parameter 'L'"):  # ours, or beartype's under the test hook
        PermutationChainTask(L=2.0)
    with pytest.raises(ValueError, match="actions must lie in"):
        PermutationChainTask(N=3, d_g=2, L=2).batch_from(torch.tensor([[0, 2]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="d_h must be even"):
        FornerConfig(d_h=7)


# ----------------------------------------------------------------------------- the model


def test_teacher_has_accuracy_one_teacher_forced_and_in_rollout():
    model = teacher_model(SMALL)
    task = model.task
    batch = task.test_set(300, seed=5)
    metrics = task.metrics(model(batch.tokens), batch)
    assert metrics["teacher_forced_accuracy"] == 1.0
    result = rollout(model, batch)
    assert result.final_accuracy == 1.0 and result.sequence_accuracy == 1.0
    assert torch.equal(result.states, batch.extras["states"][:, 1:])


def test_teacher_order_parameters_are_one_one_and_the_mean_permutation_overlap():
    model = teacher_model(FornerConfig(N=6, d_g=5, L=5, d_h=16, perm_seed=2))
    params = order_parameters(model)
    O = model.task.teacher_matrices
    overlap = [float(torch.trace(O[a].T @ O[b])) / 6 for a in range(5) for b in range(5) if a != b]
    assert params.A == pytest.approx(1.0, abs=1e-6)
    assert params.R == pytest.approx(1.0, abs=1e-12)
    assert params.S == pytest.approx(np.mean(overlap), abs=1e-12) == pytest.approx(params.tau, abs=1e-12)
    assert params.zeta == pytest.approx(1.0, abs=1e-12)  # eq. 40: each permutation matrix sums to N


def test_uniform_attention_gives_a_equal_one_over_l_and_shifted_logic_gives_known_r():
    model = FornerModel(SMALL)
    teacher = SMALL.task.teacher_matrices
    with torch.no_grad():
        model.blocks[0].attn.W_Q.zero_()
        model.M.copy_(teacher.roll(1, dims=0))  # M_a = M*_{a-1}: R is an off-target overlap, S mixes
    params = order_parameters(model)
    assert params.A == pytest.approx(1 / SMALL.L, abs=1e-7)
    expected_R = np.mean([float(torch.trace(teacher[a].T @ teacher[a - 1])) / SMALL.N for a in range(SMALL.d_g)])
    assert params.R == pytest.approx(expected_R, abs=1e-12)


def test_frozen_parts_come_from_the_config():
    flags = {n: p.requires_grad for n, p in FornerModel(SMALL).named_parameters()}
    assert flags == {"embed.W_E": False, "blocks.0.attn.W_Q": True, "blocks.0.attn.W_K": True,
                     "blocks.0.attn.W_V": False, "blocks.0.logic.M": True}
    frozen_qk = FornerModel(FornerConfig(N=5, d_g=4, L=4, d_h=16, train_qk=False, train_values=True))
    assert not frozen_qk.blocks[0].attn.W_Q.requires_grad and frozen_qk.blocks[0].attn.W_V.requires_grad
    model = FornerModel(SMALL)
    assert torch.equal(model.embed.W_E, torch.ones(9, 1))
    assert torch.equal(model.blocks[0].attn.W_V[:4], torch.eye(4)) and model.blocks[0].attn.W_V[4:].abs().sum() == 0


def test_fast_forward_equals_the_hooked_forward_and_seed_is_deterministic():
    model = FornerModel(SMALL)
    batch = SMALL.task.test_set(64)
    with torch.no_grad():
        assert (fast_forward(model, batch.tokens) - model(batch.tokens)).abs().max() < 1e-5
        assert (fast_forward(model, batch.tokens[:, :6]) - model(batch.tokens[:, :6])).abs().max() < 1e-5
    assert torch.equal(FornerModel(SMALL).M, model.M)
    with pytest.raises(ValueError, match="token ids must lie in"):
        model(torch.full((1, 3), 9))


def test_rope_scores_depend_on_relative_offset_only():
    model = FornerModel(SMALL)
    _, cache = model.run_with_cache(SMALL.task.test_set(2).tokens)
    q, k = cache["blocks.0.attn.hook_q"][0, :, 0], cache["blocks.0.attn.hook_k"][0, :, 0]
    dots = q @ k.T  # eq. 5: q_i . k_j = W_Q^T Omega(j - i) W_K
    assert dots[5, 2] == pytest.approx(float(dots[6, 3]), abs=1e-5) == pytest.approx(float(dots[7, 4]), abs=1e-5)


# ----------------------------------------------------------------------------- hooks: ablation and patching


def test_zero_ablating_the_head_output_leaves_chance_accuracy_and_no_hooks():
    model = teacher_model(SMALL)
    batch = SMALL.task.test_set(400, seed=2)

    def zero(z, hook):
        return torch.zeros_like(z)

    hooks = check_hooks(model, [("blocks.0.attn.hook_z", zero)])
    with model.hooks(fwd_hooks=hooks):
        logits = model(batch.tokens)
    assert logits.abs().max() == 0  # no action retrieved: M~ = 0, every logit 0
    assert hook_count(model) == 0
    def fail(pattern, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", fail)]):
        model(batch.tokens)
    assert hook_count(model) == 0


def test_mean_ablating_the_attention_pattern_drops_accuracy_to_the_uniform_mixture():
    model = teacher_model(SMALL)
    batch = SMALL.task.test_set(400, seed=2)
    L = SMALL.L

    def uniform(pattern, hook):
        out = pattern.clone()
        out[:, :, L:, :L] = 1.0 / L  # every state position attends equally to the L actions (A = 1/L)
        return out

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", uniform)]):
        accuracy = SMALL.task.metrics(model(batch.tokens), batch)["teacher_forced_accuracy"]
    clean = SMALL.task.metrics(model(batch.tokens), batch)["teacher_forced_accuracy"]
    assert clean == 1.0 and 0.2 < accuracy < 0.95


def test_patching_the_retrieved_action_moves_the_prediction():
    model = teacher_model(SMALL)
    task = SMALL.task
    actions = torch.zeros(1, SMALL.L, dtype=torch.long)
    clean = task.batch_from(actions, torch.tensor([0]))
    corrupt = task.batch_from(torch.ones_like(actions), torch.tensor([0]))
    _, store = run_capture(model, clean.tokens, ["blocks.0.attn.hook_z"])
    position = SMALL.L  # predicts s_1 from s_0 with action g_1

    def patch(z, hook):
        z = z.clone()
        z[:, position] = store["blocks.0.attn.hook_z"][:, position]
        return z

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_z", patch)]):
        patched = model(corrupt.tokens)[0, position].argmax()
    unpatched = model(corrupt.tokens)[0, position].argmax()
    assert int(patched) == int(task.perms[0, 0]) and int(unpatched) == int(task.perms[1, 0])


def test_transformer_lens_own_activation_patching_runs_on_the_model():
    """``transformer_lens.patching`` (per-position head-output patching) localises the action lookup."""
    import transformer_lens.patching as tl_patching

    model = teacher_model(SMALL)
    task, L = SMALL.task, SMALL.L
    clean = task.batch_from(torch.zeros(3, L, dtype=torch.long), torch.tensor([0, 1, 2]))
    corrupt = task.batch_from(torch.ones(3, L, dtype=torch.long), torch.tensor([0, 1, 2]))
    _, cache = model.run_with_cache(clean.tokens)

    def metric(logits):  # the clean answer's logit for s_1, at the position holding s_0
        return logits[torch.arange(3), L, clean.targets[:, L]].mean()

    with torch.no_grad():
        assert float(metric(model(clean.tokens))) == 1.0 and float(metric(model(corrupt.tokens))) == 0.0
    effect = tl_patching.get_act_patch_attn_head_out_by_pos(model, corrupt.tokens, cache, metric)
    assert effect.shape == (1, 2 * L, 1)
    expected = torch.zeros(1, 2 * L, 1)
    expected[0, L, 0] = 1.0  # only the head output at that position carries the action
    assert torch.equal(effect, expected)


# ----------------------------------------------------------------------------- theory


def test_c_omega_matches_eq_14_and_skips_multiples_of_two_pi():
    omegas = np.array([2 * math.pi, 0.3, 1.1])
    L = 6
    direct = 2 * 4 * 5 / (L * (L - 1)) / 3 * 2 / 6 * sum(
        (1 - (math.sin(w * L / 2) / math.sin(w / 2)) ** 2 / L**2) ** 2 for w in (0.3, 1.1))
    assert c_omega(5, 4, L, 6, omegas=omegas) == pytest.approx(direct, rel=1e-12)


def test_mean_logits_and_ode_fixed_points():
    correct, other = mean_logits(1.0, 2.0, 0.5, N=5, d_g=4, zeta=0.3)
    assert correct == pytest.approx(2.0) and other == pytest.approx((0.3 - 2.0) / 4)
    kw = {"eta": 0.5, "N": 8, "d_g": 8, "L": 10, "c_w": 0.2}
    assert order_parameter_rhs(np.array([1.0, 3.0, 0.2]), **kw)[0] == 0  # A = 1 is fixed
    assert order_parameter_rhs(np.array([0.0, 3.0, 0.2]), **kw)[0] == 0  # A = 0 is fixed
    dS = order_parameter_rhs(np.array([1.0, 3.0, 0.2]), **kw)[2]
    assert dS == 0  # S stops once attention is perfect (eq. 15c)


def test_ode_early_regime_is_linear_and_a_rises_monotonically():
    alpha = np.linspace(0, 0.2, 5)
    sol = integrate_order_parameters(alpha, eta=0.5, N=32, d_g=32, L=10, d_h=128)
    A0 = 0.1  # appendix G, eq. 78
    np.testing.assert_allclose(sol.R, 0.5 * 31 / 32 * (A0 + (1 - A0) / 32) * alpha, rtol=2e-2, atol=1e-6)
    np.testing.assert_allclose(sol.S, 0.5 * 31 / 32 * (1 - A0) / 32 * alpha, rtol=2e-2, atol=1e-6)
    long = integrate_order_parameters(np.linspace(0, 30, 61), eta=0.5, N=8, d_g=8, L=10, d_h=32)
    assert np.all(np.diff(long.A) >= -1e-12) and long.A[0] == pytest.approx(0.1) and long.A[-1] > 0.99
    rk4 = integrate_order_parameters(np.linspace(0, 30, 61), eta=0.5, N=8, d_g=8, L=10, d_h=32, method="rk4")
    np.testing.assert_allclose(rk4.A, long.A, atol=1e-4)


def test_eq_18_and_the_recursion_of_eq_16():
    assert rollout_accuracy(1.0, 8, 10) == pytest.approx(1.0)
    assert rollout_accuracy(1 / 8, 8, 10) == pytest.approx(1 / 8)
    for rho in (0.3, 0.8, 0.95):
        recursion = rollout_recursion([rho] * 10, [(1 - rho) / 7] * 10)
        assert recursion == pytest.approx(float(rollout_accuracy(rho, 8, 10)), rel=1e-12)
    assert rollout_accuracy(0.9, 8, 10) == pytest.approx(7 / 8 * (6.2 / 7) ** 10 + 1 / 8)
    with pytest.raises(ValueError, match="rho must lie in"):
        rollout_accuracy(1.5, 8, 10)


def test_eq_17_gaussian_step_accuracy():
    assert step_accuracy_gaussian(0.0, 0.0, 0.04, 0.04, N=8) == pytest.approx(1 / 8, abs=1e-4)
    assert step_accuracy_gaussian(5.0, 0.0, 0.04, 0.04, N=8) == pytest.approx(1.0, abs=1e-6)
    rng = np.random.default_rng(0)  # Monte Carlo of the same model
    correct = rng.normal(0.5, 0.3, 200_000)
    others = rng.normal(0.0, 0.25, (200_000, 7))
    assert step_accuracy_gaussian(0.5, 0.0, 0.09, 0.0625, N=8) == pytest.approx(np.mean(correct > others.max(1)), abs=5e-3)


# ----------------------------------------------------------------------------- reduced training


def test_reduced_training_moves_a_off_its_plateau_and_aligns_the_logic():
    cfg = FornerConfig(N=4, d_g=4, L=4, d_h=8, seed=1)
    run = train_chain(cfg, steps=150, batch_size=256, lr=2.0, n_test=256, n_log=6, progress=False)
    log = run.log
    first, last = log.iloc[0], log.iloc[-1]
    assert abs(first["A"] - 1 / cfg.L) < 0.1
    assert last["A"] > 0.6 and last["R"] > last["S"] + 0.5
    assert last["rho"] > 0.9 and last["rollout"] > first["rollout"]
    snapshot = chain_snapshot(run.model, cfg.task.test_set(256), step=150)
    assert snapshot["rollout_eq18"] == pytest.approx(float(rollout_accuracy(snapshot["rho"], 4, 4)))


def test_run_glue_on_a_tiny_budget(monkeypatch, tmp_path):
    """``run`` wires training, the ODE, the five comparison rows and the figures (tiny budget: the
    claims need not hold here; the committed tables check the real run)."""
    from perm_circuits.reproduce import Reproduction
    from perm_circuits.systems import forner

    monkeypatch.setitem(forner.QUICK, "steps", 12)
    monkeypatch.setitem(forner.QUICK, "batch_size", 32)
    monkeypatch.setitem(forner.QUICK, "n_test", 64)
    result = forner.run(quick=True, progress=False)
    assert isinstance(result, Reproduction) and len(result.rows) == 5 and result.quick
    assert set(result.figures) == {"order_parameters", "rollout"}
    assert result.numbers["settings"]["steps"] == 12 and len(result.numbers["log"]) == len(result.numbers["ode"])
    assert not result.rows[2].holds  # 12 steps do not solve the task
    assert "N=32, d_g=32" in result.full_command
    written = result.write(tmp_path)
    assert all(path.exists() for path in written)
    with pytest.raises(TypeError, match="quick must be a bool"):
        forner.run(quick=1)
