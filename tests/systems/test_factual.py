"""Factual recall (Nichani, Lee & Bietti 2024): the task against its definition, the one-layer
models (frozen parameters, a hand-built exact associative memory), the relation-only baseline,
a reduced hallucination run, and the library's probes and hook interventions on the model."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from perm_circuits.analysis.probes.memory import memory_recall, recall_rate
from perm_circuits.systems.factual import (
    FactualConfig,
    FactualTransformer,
    LinearAttentionConfig,
    LinearAttentionModel,
    StorageResult,
    hallucination_phase,
    n_trainable,
    storage_rows,
)
from perm_circuits.tasks import fit, task_from_dict
from perm_circuits.tasks.factual import FactualRecallTask, fact_table

TASK = FactualRecallTask(S=8, R=3, D=4, n_noise=5, seq_len=7, fact_seed=3)


# ----------------------------------------------------------------------------- the task


def test_label_is_the_fact_table_entry_and_the_sequence_holds_s_r_eos():
    batch = TASK.sample(500, torch.Generator().manual_seed(0))
    s, r, answer = batch.extras["subject"], batch.extras["relation"], batch.extras["answer"]
    table = TASK.facts()
    assert torch.equal(batch.targets[:, -1], table[s, r])
    assert torch.equal(answer, table[s, r])
    assert ((answer // TASK.D) == r).all()  # a*(s, r) lies in the relation's block A_r
    rows = torch.arange(len(batch))
    assert torch.equal(batch.tokens[rows, batch.extras["subject_position"]], TASK.subject_offset + s)
    assert torch.equal(batch.tokens[rows, batch.extras["relation_position"]], TASK.relation_offset + r)
    assert (batch.tokens[:, -1] == TASK.eos).all()
    body = batch.tokens[:, :-1]
    is_noise = (body >= TASK.noise_offset) & (body < TASK.eos)
    assert (is_noise.sum(1) == TASK.seq_len - 3).all()  # everything else is noise
    assert (batch.extras["subject_position"] != batch.extras["relation_position"]).all()


def test_fact_table_is_seeded_and_balanced():
    table = fact_table(16, 4, 8, seed=1)
    assert torch.equal(table, fact_table(16, 4, 8, seed=1))
    assert not torch.equal(table, fact_table(16, 4, 8, seed=2))
    for r in range(4):  # D divides S: every answer of A_r serves S/D = 2 subjects, p(a|r) uniform
        assert torch.equal(torch.bincount(table[:, r] - 8 * r, minlength=8), torch.full((8,), 2))


def test_loss_mask_is_only_at_eos():
    batch = TASK.test_set(50, seed=1)
    expected = torch.zeros_like(batch.mask)
    expected[:, -1] = 1.0
    assert torch.equal(batch.mask, expected)
    assert torch.equal(TASK.test_set(50, seed=1).tokens, batch.tokens)  # seeded


def test_task_round_trips_and_validates():
    assert task_from_dict(TASK.to_dict()) == TASK
    with pytest.raises(ValueError, match="seq_len must be >= 3"):
        FactualRecallTask(seq_len=2)
    with pytest.raises(ValueError, match="split must be one of"):
        TASK.sample(4, torch.Generator(), "valid")
    with pytest.raises(TypeError, match="S must be an int|parameter 'S'"):
        FactualRecallTask(S=2.0)


def test_relation_only_baseline_has_loss_log_D_exactly():
    batch = TASK.all_facts(repeats=2)
    prior = TASK.relation_prior(batch)
    logits = torch.zeros(len(batch), TASK.seq_len, TASK.n_answers, dtype=torch.float64)
    logits[:, -1] = prior.log()  # -inf outside the block: exactly p(a | r)
    metrics = TASK.metrics(logits, batch)
    assert metrics["loss"] == pytest.approx(math.log(TASK.D), abs=1e-12)
    assert metrics["kl_to_relation_prior"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["relation_only_loss"] == pytest.approx(0.0, abs=1e-12)
    assert TASK.relation_baseline_loss == math.log(TASK.D)
    oracle = torch.zeros_like(logits)
    oracle[:, -1] = TASK.reference(batch).log()
    assert TASK.metrics(oracle, batch)["loss"] == 0.0
    assert TASK.metrics(oracle, batch)["fact_accuracy"] == 1.0


# ----------------------------------------------------------------------------- the models


def hand_built(task: FactualRecallTask, gain: float = 40.0) -> FactualTransformer:
    """One-hot embeddings; the EOS query attends to the subject and relation only; W_OV = I, so
    the attention writes (e_s + e_r)/2; one ReLU neuron per fact fires on e_s + e_r and writes its
    answer (the paper's MLP associative-memory construction, with orthogonal embeddings)."""
    d = task.d_vocab
    model = FactualTransformer(FactualConfig.for_task(task, d_model=d, d_head=d, n_heads=1, d_mlp=task.n_facts))
    eye = torch.eye(d)
    with torch.no_grad():
        model.W_E.copy_(eye)
        model.W_U.copy_(eye[:, : task.n_answers])
        model.W_V[0].copy_(eye)
        model.W_O[0].copy_(eye)
        model.W_Q.zero_()
        model.W_K.zero_()
        model.W_Q[0, task.eos, 0] = gain
        keys = list(range(task.subject_offset, task.noise_offset))  # subjects and relations
        model.W_K[0, keys, 0] = math.sqrt(d)
        model.W_in.zero_()
        model.W_out.zero_()
        for s in range(task.S):
            for r in range(task.R):
                n = s * task.R + r
                model.W_in[task.subject_offset + s, n] = 1.0
                model.W_in[task.relation_offset + r, n] = 1.0
                model.W_out[n, task.facts()[s, r]] = 40.0
        model.b_in.fill_(-0.75)
    return model


def test_hand_built_associative_memory_recalls_every_fact():
    model = hand_built(TASK)
    batch = TASK.all_facts(repeats=3)
    metrics = TASK.metrics(model(batch.tokens), batch)
    assert metrics["fact_accuracy"] == 1.0
    assert metrics["loss"] < 1e-3


def test_frozen_parameters_stay_frozen_after_fit():
    task = FactualRecallTask(S=4, R=2, D=4, n_noise=4, seq_len=5)
    model = FactualTransformer(FactualConfig.for_task(task, d_model=16, d_head=8, n_heads=2, d_mlp=16))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    assert {k for k, v in model.named_parameters() if not v.requires_grad} == {"W_E", "W_U"}
    fit(model, task, steps=3, batch_size=16, lr=1e-2, progress=False)
    for name, value in model.named_parameters():
        changed = not torch.equal(value.detach(), before[name])
        assert changed == (name not in ("W_E", "W_U")), name
        assert value.requires_grad == (name not in ("W_E", "W_U"))
    assert n_trainable(model) == sum(before[k].numel() for k in ("W_Q", "W_K", "W_V", "W_O", "W_in", "b_in", "W_out"))


def test_config_declares_frozen_parameters_and_validates():
    config = FactualConfig(d_vocab=10, n_out=4, n_ctx=5, frozen=["W_E", "W_U", "W_Q"])
    model = FactualTransformer(config)
    assert not model.W_Q.requires_grad and model.W_K.requires_grad
    assert FactualConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="frozen must be a tuple of parameter names"):
        FactualConfig(d_vocab=10, n_out=4, n_ctx=5, frozen=("W_X",))
    with pytest.raises(ValueError, match="alpha must be a number > 0, got 0"):
        LinearAttentionConfig(d_vocab=10, n_out=4, n_ctx=5, alpha=0)


def test_seeded_models_are_identical():
    a = FactualTransformer(FactualConfig.for_task(TASK, seed=5))
    b = FactualTransformer(FactualConfig.for_task(TASK, seed=5))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# ----------------------------------------------------------------------------- training dynamics


def test_reduced_hallucination_run_drops_to_log_D_then_below():
    """Linear attention, S=16, R=4, D=8: the loss leaves log|A|, sits at log D while the model
    outputs p(a|r) (KL < 0.1), then falls below it as the facts are stored (section 5)."""
    result = hallucination_phase(FactualRecallTask(S=16, R=4, D=8, n_noise=16, seq_len=8),
                                 steps=400, lr=0.8, batch_size=128, alpha=0.01, n_log=20, repeats=2,
                                 progress=False)
    traj = result.trajectory
    assert traj["loss"].iloc[0] == pytest.approx(math.log(32), abs=1e-3)
    assert result.has_stage
    stage = result.summary()
    assert abs(stage["loss_mean"] - math.log(8)) < 0.05 * math.log(8)
    assert stage["kl_max"] < 0.1
    assert traj["loss"].iloc[-1] < 0.5 * math.log(8)
    assert result.final["fact_accuracy"] > 0.9
    assert traj["step"][traj["loss"] < 0.5 * math.log(8)].min() > stage["last_step"]  # order: plateau first


def test_storage_rows_judge_the_exponent():
    cap = pd.DataFrame({"d_model": [16, 16], "d_mlp": [16, 64], "params": [1000, 2000], "facts_stored": [100, 200]})
    result = StorageResult(pd.DataFrame(), cap, 1.0, 0.1, 0.3)
    rows = storage_rows(result)
    assert rows[0].holds is True and rows[1].holds is None
    assert storage_rows(StorageResult(pd.DataFrame(), cap, 2.0, 0.1, 0.3))[0].holds is False


# ----------------------------------------------------------------------------- analyses on this model


def test_memory_probes_run_on_the_hand_built_model():
    """Bietti et al.'s R(W_hat, W*) on its OV circuit (a copying memory of the subject tokens) and
    on its MLP read as a fact memory (input e_s + e_r + EOS, output the answer)."""
    model = hand_built(TASK)
    subjects = model.W_E.detach()[TASK.subject_offset : TASK.subject_offset + TASK.S]
    W_OV = model.W_V.detach()[0] @ model.W_O.detach()[0]
    assert memory_recall(W_OV, subjects, subjects, [(i, i) for i in range(TASK.S)]) == 1.0
    facts = TASK.facts()
    E = model.W_E.detach()
    inputs = torch.stack([E[TASK.eos] + (E[TASK.subject_offset + s] + E[TASK.relation_offset + r]) / 2
                          for s in range(TASK.S) for r in range(TASK.R)])
    with torch.no_grad():
        scores = torch.relu(inputs @ model.W_in + model.b_in) @ model.W_out @ model.W_U
    targets = [(s * TASK.R + r, int(facts[s, r])) for s in range(TASK.S) for r in range(TASK.R)]
    assert recall_rate(scores, targets) == 1.0
    with torch.no_grad():
        model.W_out.zero_()
    assert recall_rate(torch.relu(inputs @ model.W_in + model.b_in) @ model.W_out @ model.W_U, targets) == 0.0


def test_head_ablation_and_activation_patching_through_hooks():
    model = hand_built(TASK)
    batch = TASK.all_facts()
    answer = batch.extras["answer"]

    def zero(activation, hook):
        return torch.zeros_like(activation)

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_z", zero)]):
        ablated = TASK.metrics(model(batch.tokens), batch)
    assert ablated["fact_accuracy"] < 0.2  # without the head the MLP never sees s or r
    assert model.hook_dict["blocks.0.attn.hook_z"]._forward_hooks == {}  # no leak

    # patch the attention output of (s, r) into a run on (s', r): the answer follows the patch
    g = torch.Generator().manual_seed(0)
    other = (batch.extras["subject"] + 1) % TASK.S
    corrupted = TASK.build(other, batch.extras["relation"], g)
    _, cache = model.run_with_cache(batch.tokens, names_filter="blocks.0.hook_attn_out")
    clean_out = cache["blocks.0.hook_attn_out"]

    def patch(activation, hook):
        return clean_out

    with model.hooks(fwd_hooks=[("blocks.0.hook_attn_out", patch)]):
        patched = model(corrupted.tokens)[:, -1].argmax(-1)
    unpatched = model(corrupted.tokens)[:, -1].argmax(-1)
    assert torch.equal(patched, answer)
    assert torch.equal(unpatched, corrupted.extras["answer"])


def test_linear_attention_model_matches_its_formula():
    task = FactualRecallTask(S=4, R=2, D=3, n_noise=3, seq_len=5)
    model = LinearAttentionModel(LinearAttentionConfig.for_task(task, alpha=0.5))
    with torch.no_grad():
        model.W_OV.copy_(torch.randn(model.W_OV.shape, generator=torch.Generator().manual_seed(0)))
        model.w_KQ.copy_(torch.randn(model.w_KQ.shape, generator=torch.Generator().manual_seed(1)))
    batch = task.test_set(6)
    logits = model(batch.tokens)
    expected = torch.stack([sum(model.W_OV[z] * model.w_KQ[z] for z in row) for row in batch.tokens])
    assert torch.allclose(logits[:, -1], expected, atol=1e-6)
    assert (logits[:, :-1] == 0).all()


def test_storage_search_brackets_a_known_capacity(monkeypatch):
    """With a fake trainer that stores a table iff facts <= params / 10, the search finds that
    capacity on the ladder (stored rung, next rung failed) whatever rung it starts from."""
    from perm_circuits.systems import factual

    def fake_run(task, *, d_model, d_mlp, seed, **kwargs):
        params = n_trainable(factual.build_factual_model(task, d_model=d_model, d_mlp=d_mlp, d_head=d_model))
        stored = task.n_facts <= params / 10
        return {"d_model": d_model, "d_mlp": d_mlp, "n_heads": 1, "params": params, "S": task.S, "R": task.R,
                "facts": task.n_facts, "accuracy": 1.0 if stored else 0.5, "stored": stored, "steps": 1}

    monkeypatch.setattr(factual, "storage_run", fake_run)
    ladder = tuple(range(1, 200))
    result = factual.storage_capacity(((16, 16), (16, 64), (16, 32)), subjects=ladder, seeds=(0, 1), progress=False)
    cap = result.capacity
    expected = [4 * int(p / 10 // 4) for p in cap["params"]]
    assert list(cap["facts_stored"]) == expected
    assert result.exponent == pytest.approx(1.0, abs=0.05)
    assert (cap["runs"] < len(ladder)).all()  # the search does not climb from the bottom every time
    with pytest.raises(ValueError, match="seeds must be distinct"):
        factual.storage_capacity(((16, 16),), seeds=(0, 0))


def test_run_assembles_the_reproduction(monkeypatch, tmp_path):
    """``run`` end to end on a tiny plan (a fake capacity trainer, 60 hallucination steps)."""
    from perm_circuits.systems import factual

    monkeypatch.setattr(factual, "QUICK", {"hallucination": {"steps": 60, "alpha": 0.01}, "sizes": ((16, 8), (16, 16)),
                                           "subjects": (2, 4, 8, 16, 32, 64), "steps": 10, "seeds": (0,)})
    monkeypatch.setattr(factual, "SOFTMAX", {**factual.SOFTMAX, "steps": 30})
    monkeypatch.setattr(factual, "storage_run", lambda task, *, d_model, d_mlp, seed, **kw: {
        "d_model": d_model, "d_mlp": d_mlp, "n_heads": 1, "params": 100 * d_mlp, "S": task.S, "R": task.R,
        "facts": task.n_facts, "accuracy": 1.0, "stored": task.n_facts <= 4 * d_mlp, "steps": 1})
    result = factual.run(quick=True, progress=False)
    assert [row.holds for row in result.rows][-2:] == [True, None]  # facts = 4 m, params = 100 m: slope 1
    assert "slope 1.00" in result.rows[-2].ours
    assert result.rows[0].holds is True  # the loss starts at log |A|
    assert len(result.rows) == 7 and set(result.figures) == {"hallucination", "hallucination (softmax)", "storage capacity"}
    written = result.write(tmp_path)
    assert all(path.exists() for path in written)
    paths = factual.write_tables(result, tmp_path, "t")
    assert [p.name for p in paths] == ["t.csv", "t_capacity.csv", "t_runs.csv", "t_trajectory.csv"]
    assert len(pd.read_csv(paths[3])) == len(result.numbers["trajectory"])


def test_log_log_fit_values_and_refusals():
    from perm_circuits.systems.factual import log_log_fit

    slope, intercept = log_log_fit(pd.Series([1, 2, 4]), pd.Series([3.0, 6.0, 12.0]))
    assert slope == pytest.approx(1.0) and intercept == pytest.approx(math.log(3))
    for x, y in (([2, 2], [1.0, 3.0]),  # one distinct x: was a nan slope with a RuntimeWarning
                 ([1, float("nan")], [3.0, 6.0]),  # was nan, silently
                 ([1, 2], [3.0, -1.0])):
        with pytest.raises(ValueError, match="log-log fit"):
            log_log_fit(pd.Series(x), pd.Series(y))
