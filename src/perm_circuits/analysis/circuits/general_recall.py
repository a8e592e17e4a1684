"""How the generalising 2-layer model ``d16h1l2-any`` recalls ``y_k`` for every ``k``.

The Birth-of-a-Transformer story (a previous-token head feeding an induction head through
K-composition; Bietti et al. 2023; :mod:`~perm_circuits.analysis.circuits.induction_story`) does not
describe this model.  :func:`any_circuit_numbers` measures what it does instead, as flat numbers for
``docs/templates/general_recall_circuit.md`` (deterministic: fixed seeds, exhaustive batches where cheap):

- ``attn.*``: per source ``k`` (an exhaustive batch each), L0H0's attention from the last position
  on the matching ``x_k`` (a duplicate-token match) and from ``x_{j+1}`` on ``y_j``, L1H0's from the
  last position on ``x_k``, ``y_k``, ``x_{k+1}``; the share of L1H0's key variance (context)
  explained by position and of its query variance (last position) by ``k``;
- ``abl.*``: recall per ``k`` with one component zero / mean / resample ablated at some positions
  only (the last, ``x1..x4``, the y positions, or all);
- ``dla.*``: direct logit attribution of the last-step recall logit difference (answer minus the
  mean of the other values) per component and ``k``;
- ``path.*``: path patching L0H0 -> L1H0's q/k/v, direct and through MLP0
  (:func:`path_patch_through_mlp`), on the swap pair (``path.swap.*``: which slot) and on
  :func:`value_swap_pair` (``path.yswap.*``: which value); ``path.swap.into_MLP1_*``: the change
  of L0H0 / MLP0 / L1H0 added to MLP1's input only; ``patch.*``: activation patching (clean into
  corrupted) of MLP0's and L0H0's output at chosen positions (1 = restores the clean run).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from perm_circuits.analysis.interventions.checks import check_layer
from perm_circuits.analysis.interventions.ablation import ablate_head, ablate_mlp
from perm_circuits.analysis.probes.dla import direct_logit_attribution
from perm_circuits.analysis.interventions.patching import PatchingPair, logit_diff
from perm_circuits.analysis.interventions.path_patching import (
    INPUTS,
    add_to_input_hooks,
    check_head_pair,
    induction_patching_pair,
    input_change,
    path_patch,
    sender_delta,
)
from perm_circuits.evaluate import recall_generalisation
from perm_circuits.hooks import HookList, run_capture
from perm_circuits.models import model_config_of, task_config_of
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, batch_from_queries, exhaustive_batch

__all__ = ["ABLATION_MODES", "any_circuit_numbers", "patch_positions", "path_patch_through_mlp", "value_swap_pair"]

ABLATION_MODES = ("zero", "mean", "resample")
RESAMPLE_SEED = 0
"""Seed of the resample ablations' draw of reference sequences."""


def _restored(model, pair: PatchingPair, hooks: HookList, clean_logits: Tensor, corr_logits: Tensor) -> float:
    """The corrupted run under ``hooks``: ``(LD_patched - LD_corrupted) / (LD_clean - LD_corrupted)`` on means."""
    _, corrupted, answer, wrong = pair
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        patched = model(corrupted.tokens)
    value, clean, corr = (logit_diff(logits, answer, wrong) for logits in (patched, clean_logits, corr_logits))
    return float((value.mean() - corr.mean()) / (clean.mean() - corr.mean()))


def value_swap_pair(task: PermutationTask | TaskConfig, n: int = 1000, seed: int = 0) -> PatchingPair:
    """The swap pair's twin for the *value* side: exchange the answers ``y_k`` and ``y_j`` instead of the queries.

    ``clean`` and ``j`` are those of
    :func:`~perm_circuits.analysis.interventions.path_patching.induction_patching_pair` (same
    ``task``, ``n``, ``seed``; a PermutationTask or its bare TaskConfig); the corrupted row keeps every x (the last query still repeats
    ``x_k``) and has ``y_k`` and ``y_j`` exchanged in the context (the permutation changed to match),
    so its answer is the clean ``y_j`` (``wrong``); ``answer`` is ``y_k``.  Only the two y tokens
    differ: what carries an answer's *value* to the last position.
    """
    clean, swapped, answer, _ = induction_patching_pair(task, n=n, seed=seed, corruption="swap")
    rows, k = torch.arange(len(clean)), clean.extras["repeat_source"]
    j = swapped.extras["repeat_source"]
    perms = clean.extras["perms"].clone()
    perms[rows, clean.extras["xs"][rows, k] - 1] = clean.extras["ys"][rows, j]
    perms[rows, clean.extras["xs"][rows, j] - 1] = clean.extras["ys"][rows, k]
    corrupted = batch_from_queries(clean.extras["xs"].clone(), perms, k.clone())
    return clean, corrupted, answer, corrupted.extras["ys"][:, -1].clone()


def path_patch_through_mlp(
    model, sender: tuple[int, int], mlp_layer: int, receiver: tuple[int, int], input: str, pair: PatchingPair,
    *, direct: bool = False,
) -> float:
    """Normalised effect of the path ``sender -> MLP{mlp_layer} -> receiver.input`` (Wang et al. 2022).

    The sender's clean-minus-corrupted output ``delta``
    (:func:`~perm_circuits.analysis.interventions.path_patching.sender_delta`) is added to the
    corrupted run's ``blocks.{mlp_layer}.hook_resid_mid`` only to read the MLP's resulting output
    change ``delta_mlp`` (nothing else of that run is used); ``delta_mlp`` alone is then added to the
    receiver's ``input`` (q, k or v, its LayerNorm recomputed, as in
    :func:`~perm_circuits.analysis.interventions.path_patching.path_patch_hooks`) on the corrupted
    run.  The sender's direct edge is *not* included.  Returns
    ``(LD_patched - LD_corrupted) / (LD_clean - LD_corrupted)`` on means (1 = the path restores
    the clean run, 0 = no effect).  ``direct=True`` adds the sender's direct edge too (``delta +
    delta_mlp``: both routes into the receiver's input at once).  Needs ``sender layer <= mlp_layer
    < receiver layer``.
    """
    s_layer, s_head = check_head_pair(model, "sender", sender)
    r_layer, r_head = check_head_pair(model, "receiver", receiver)
    mlp_layer = check_layer(model, mlp_layer)
    if input not in INPUTS:
        raise ValueError(f"input must be one of {INPUTS}, got {input!r}")
    if not isinstance(direct, bool):
        raise TypeError(f"direct must be a bool, got {direct!r}")
    if not s_layer <= mlp_layer < r_layer:
        raise ValueError(f"need sender layer <= mlp_layer < receiver layer, got {s_layer}, {mlp_layer}, {r_layer}")
    clean, corrupted, _, _ = pair
    z = f"blocks.{s_layer}.attn.hook_z"
    mid, out, pre = f"blocks.{mlp_layer}.hook_resid_mid", f"blocks.{mlp_layer}.hook_mlp_out", f"blocks.{r_layer}.hook_resid_pre"
    clean_logits, clean_cache = run_capture(model, clean.tokens, [z])
    corr_logits, corr_cache = run_capture(model, corrupted.tokens, [z, out, pre])
    delta = sender_delta(model, (s_layer, s_head), clean_cache[z], corr_cache[z])

    def add_delta(activation: Tensor, hook) -> Tensor:
        return activation + delta.to(activation.dtype)

    _, patched = run_capture(model, corrupted.tokens, [out], [(mid, add_delta)])
    delta_mlp = patched[out] - corr_cache[out]
    carried = delta_mlp + delta if direct else delta_mlp
    change = input_change(model, (r_layer, r_head), input, carried, corr_cache.get(pre))
    return _restored(model, pair, add_to_input_hooks((r_layer, r_head), input, change), clean_logits, corr_logits)


def patch_positions(model, hook_name: str, positions: Sequence[int], pair: PatchingPair, index: int | None = None) -> float:
    """Activation patching of ``hook_name`` at ``positions`` (head ``index`` of a ``hook_z``), clean into
    corrupted: the normalised last-position logit difference (1 = the clean run, 0 = the corrupted)."""
    clean, corrupted, _, _ = pair
    positions = list(positions)
    clean_logits, cache = run_capture(model, clean.tokens, [hook_name])
    corr_logits, _ = run_capture(model, corrupted.tokens, [])
    source = cache[hook_name]

    def put(activation: Tensor, hook) -> Tensor:
        out = activation.clone()
        if index is None:
            out[:, positions] = source[:, positions].to(out.dtype)
        else:
            out[:, positions, index] = source[:, positions, index].to(out.dtype)
        return out

    return _restored(model, pair, [(hook_name, put)], clean_logits, corr_logits)


def _attention(model, numbers: dict, prefix: str) -> None:
    config = task_config_of(model)
    V = config.V
    last = 2 * V - 2
    names = ["blocks.0.attn.hook_pattern", f"blocks.{model_config_of(model).n_layers - 1}.attn.hook_pattern"]
    prev_y = []
    for k in range(V - 1):
        batch = exhaustive_batch(config, split="test", repeat_source=k)
        _, cache = run_capture(model, batch.tokens, names)
        p0, p1 = cache[names[0]][:, 0], cache[names[1]][:, 0]
        key = f"{prefix}.attn"
        numbers[f"{key}.L0H0_last_to_match.k{k + 1}"] = float(p0[:, last, 2 * k].mean())
        numbers[f"{key}.L0H0_last_to_other_x.k{k + 1}"] = float(
            sum(p0[:, last, 2 * j].mean() for j in range(V - 1) if j != k) / (V - 2))
        numbers[f"{key}.L1H0_last_to_xk.k{k + 1}"] = float(p1[:, last, 2 * k].mean())
        numbers[f"{key}.L1H0_last_to_yk.k{k + 1}"] = float(p1[:, last, 2 * k + 1].mean())
        numbers[f"{key}.L1H0_last_to_next_x.k{k + 1}"] = float(p1[:, last, 2 * k + 2].mean())
        numbers[f"{key}.L1H0_last_to_x.k{k + 1}"] = float(p1[:, last, 0:last:2].sum(-1).mean())
        numbers[f"{key}.L1H0_last_to_y.k{k + 1}"] = float(p1[:, last, 1:last:2].sum(-1).mean())
        prev_y.append(torch.stack([p0[:, 2 * j, 2 * j - 1].mean() for j in range(1, V - 1)]))
        if k == 0:
            for j in range(1, V - 1):  # query x_{j+1}: on the y just before it, and on every earlier y
                numbers[f"{prefix}.attn.L0H0_x{j + 1}_to_prev_y"] = float(p0[:, 2 * j, 2 * j - 1].mean())
                numbers[f"{prefix}.attn.L0H0_x{j + 1}_to_ys"] = float(p0[:, 2 * j, 1 : 2 * j : 2].sum(-1).mean())
    numbers[f"{prefix}.attn.L0H0_x_to_prev_y"] = float(torch.stack(prev_y).mean())
    numbers.update(_variance_shares(model, prefix))


def _variance_shares(model, prefix: str) -> dict[str, float]:
    """L1H0's key over the context (share of its variance that the position explains) and its query
    at the last position (share that the repeated source ``k`` explains), on every exhaustive batch."""
    config = task_config_of(model)
    last = 2 * config.V - 2
    batches = [exhaustive_batch(config, split="test", repeat_source=k) for k in range(config.V - 1)]
    tokens = torch.cat([b.tokens for b in batches])
    source = torch.cat([b.extras["repeat_source"] for b in batches])
    _, cache = run_capture(model, tokens, ["blocks.1.attn.hook_k", "blocks.1.attn.hook_q"])
    keys = cache["blocks.1.attn.hook_k"][:, :last, 0]  # [batch, pos, d_head]
    centred = keys - keys.mean((0, 1))
    key_share = (keys.mean(0) - keys.mean((0, 1))).pow(2).sum(-1).mean() / centred.pow(2).sum(-1).mean()
    query = cache["blocks.1.attn.hook_q"][:, last, 0]
    total = (query - query.mean(0)).pow(2).sum(-1).mean()
    between = sum((query[source == k].mean(0) - query.mean(0)).pow(2).sum() * (source == k).double().mean()
                  for k in range(config.V - 1))
    return {f"{prefix}.attn.L1H0_key_position_share": float(key_share),
            f"{prefix}.attn.L1H0_query_source_share": float(between / total)}


def _positions(site: str, V: int) -> list[int] | None:
    last = 2 * V - 2
    return {"last": [last], "x": list(range(0, last, 2)), "y": list(range(1, last, 2)), "all": None}[site]


def _into_last_mlp(model, pair: PatchingPair, key: str) -> dict[str, float]:
    """What reaches MLP1's input: the clean-minus-corrupted change of L0H0, MLP0, L1H0 (and sums),
    added to ``blocks.1.ln2.hook_in`` only (the MLP's input; the residual stream itself and the
    logits' direct paths stay corrupted).  Normalised logit difference as in path patching."""
    clean, corrupted, _, _ = pair
    names = ["blocks.0.attn.hook_z", "blocks.0.hook_mlp_out", "blocks.1.attn.hook_z"]
    clean_logits, cc = run_capture(model, clean.tokens, names)
    corr_logits, cx = run_capture(model, corrupted.tokens, names)
    l0 = sender_delta(model, (0, 0), cc[names[0]], cx[names[0]])
    mlp0 = cc[names[1]] - cx[names[1]]
    l1 = sender_delta(model, (1, 0), cc[names[2]], cx[names[2]])
    out = {}
    for name, delta in (("L0H0", l0), ("MLP0", mlp0), ("L0H0_MLP0", l0 + mlp0), ("L1H0", l1), ("all", l0 + mlp0 + l1)):
        def add(activation: Tensor, hook, delta=delta) -> Tensor:
            return activation + delta.to(activation.dtype)

        out[f"{key}_{name}"] = _restored(model, pair, [("blocks.1.ln2.hook_in", add)], clean_logits, corr_logits)
    return out


def _ablations(model, numbers: dict, prefix: str, n: int) -> None:
    V = task_config_of(model).V
    top = model_config_of(model).n_layers - 1
    every = ("last", "x", "y", "all")
    parts = [("L0H0", 0, 0, every), ("MLP0", 0, None, every), (f"L{top}H0", top, 0, ("last",)),
             (f"MLP{top}", top, None, ("last",))]
    for how in ABLATION_MODES:
        for part, layer, head, sites in parts:
            for site in sites:
                pos = _positions(site, V)
                hooks = (ablate_mlp(model, layer, how, positions=pos, seed=RESAMPLE_SEED) if head is None
                         else ablate_head(model, layer, head, how, positions=pos, seed=RESAMPLE_SEED))
                result = recall_generalisation(model, hooks=hooks, n=n)
                key = f"{prefix}.abl.{how}.{part}_{site}"
                numbers.update({f"{key}.k{k}": float(value) for k, value in enumerate(result.recall, start=1)})
                numbers[f"{key}.mean"] = float(sum(result.recall) / len(result.recall))


def _dla(model, numbers: dict, prefix: str) -> None:
    config = task_config_of(model)
    rows = ("embed", "L0H0", "L0mlp", "L1H0", "L1mlp", "total")
    for k in range(config.V - 1):
        frame = direct_logit_attribution(model, exhaustive_batch(config, repeat_source=k), recall_baseline="mean").to_dataframe()
        for row in rows:
            numbers[f"{prefix}.dla.{row}.k{k + 1}"] = float(frame.loc[row, "last-step recall"])


def _paths(model, numbers: dict, prefix: str, n: int) -> None:
    V = task_config_of(model).V
    pairs = {"swap": induction_patching_pair(task_config_of(model), n=n, seed=0, corruption="swap"),
             "yswap": value_swap_pair(task_config_of(model), n=n, seed=0)}
    for name, pair in pairs.items():
        for input in INPUTS:
            direct = path_patch(model, (0, 0), (1, 0), input, pair, n_boot=100)
            numbers[f"{prefix}.path.{name}.direct_{input}"] = float(direct.effects[0].mean)
            numbers[f"{prefix}.path.{name}.via_mlp0_{input}"] = path_patch_through_mlp(model, (0, 0), 0, (1, 0), input, pair)
            numbers[f"{prefix}.path.{name}.both_{input}"] = path_patch_through_mlp(model, (0, 0), 0, (1, 0), input, pair,
                                                                                   direct=True)
        for site in ("last", "x", "y"):
            pos = _positions(site, V)
            numbers[f"{prefix}.patch.{name}.resid1_{site}"] = patch_positions(model, "blocks.1.hook_resid_pre", pos, pair)
            numbers[f"{prefix}.patch.{name}.L0H0_{site}"] = patch_positions(model, "blocks.0.attn.hook_z", pos, pair, index=0)
            numbers[f"{prefix}.patch.{name}.MLP0_{site}"] = patch_positions(model, "blocks.0.hook_mlp_out", pos, pair)
        numbers[f"{prefix}.patch.{name}.L1H0_last"] = patch_positions(model, "blocks.1.attn.hook_z", [2 * V - 2], pair, index=0)
        numbers[f"{prefix}.patch.{name}.MLP1_last"] = patch_positions(model, "blocks.1.hook_mlp_out", [2 * V - 2], pair)
    numbers.update(_into_last_mlp(model, pairs["swap"], f"{prefix}.path.swap.into_MLP1"))
    clean, corrupted, answer, wrong = pairs["yswap"]
    for k in range(V - 1):
        rows = clean.extras["repeat_source"] == k
        sub = (clean.subset(rows), corrupted.subset(rows), answer[rows], wrong[rows])
        for site in ("x", "y"):
            numbers[f"{prefix}.patch.yswap.L0H0_{site}.k{k + 1}"] = patch_positions(
                model, "blocks.0.attn.hook_z", _positions(site, V), sub, index=0)


def any_circuit_numbers(model, *, prefix: str = "any.circuit", n: int = 300, n_pair: int = 1000) -> dict[str, float | str]:
    """Every number of the general-recall circuit explanation (module docstring) of a 2-layer, 1-head
    model, flat keys under ``prefix``; ``n`` seeded sequences per source for each ablation's recall,
    ``n_pair`` rows of the swap pair for path and activation patching."""
    config = model_config_of(model)
    if config.n_layers != 2 or config.n_heads != 1:
        raise ValueError(f"any_circuit_numbers needs a 2-layer, 1-head model, got n_layers={config.n_layers}, "
                         f"n_heads={config.n_heads}")
    if not isinstance(prefix, str) or not prefix:
        raise TypeError(f"prefix must be a non-empty str, got {prefix!r}")
    numbers: dict[str, float | str] = {f"{prefix}.model": config.name, f"{prefix}.seed": float(config.seed),
                                       f"{prefix}.n_layers": float(config.n_layers), f"{prefix}.d_model": float(config.d_model),
                                       f"{prefix}.d_mlp": float(model.cfg.d_mlp),
                                       f"{prefix}.settings.n": float(n), f"{prefix}.settings.n_pair": float(n_pair),
                                       f"{prefix}.settings.resample_seed": float(RESAMPLE_SEED)}
    torch.manual_seed(0)
    recall = recall_generalisation(model, n=None)
    numbers.update({f"{prefix}.recall.k{k}": float(value) for k, value in enumerate(recall.recall, start=1)})
    numbers[f"{prefix}.elimination"] = float(recall.elimination)
    numbers[f"{prefix}.settings.n_exhaustive"] = float(recall.n_per_source)
    _attention(model, numbers, prefix)
    _ablations(model, numbers, prefix, n)
    _dla(model, numbers, prefix)
    _paths(model, numbers, prefix, n_pair)
    return numbers
