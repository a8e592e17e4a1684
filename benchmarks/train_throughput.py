"""Training throughput: the project's step against plain PyTorch, side by side in one process.

    python benchmarks/train_throughput.py [--steps 300] [--batch-size 128] [--e2e]

Three pipelines train the same architecture (d32h2 by default) on the same task:

* project:   ``perm_circuits`` — vectorized batches from a ``torch.Generator``, the bridge's
             parameters driven by :func:`perm_circuits.models.fast_forward`, fused Adam.
* plain:     a plain-PyTorch ``nn.Module`` of the same architecture with the same vectorized
             batches and ``torch.optim.Adam`` defaults.
* seed-style: the study's pipeline — a ``Dataset`` whose ``__getitem__`` builds one sample in
             Python, a shuffling ``DataLoader``, the plain model.
* bridge:    the project's batches through the TransformerBridge forward (hooks machinery).

Each is timed for ``--steps`` steps after warm-up, interleaved over ``--rounds`` rounds (median),
and the ratios are printed.  ``--e2e`` also times reproducing the study's tables from scratch:
train d16h1 and d32h2 on the recipe with early stopping, then evaluate.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from perm_circuits import TaskConfig, TrainConfig, build_model, evaluate, train
from perm_circuits.tasks.permutation_data import make_batch
from perm_circuits.models import fast_forward
from perm_circuits.models import PRESETS
from perm_circuits.train import _optimizer, masked_loss


class PlainTransformer(nn.Module):
    """The same 1-layer pre-LN architecture written directly in PyTorch."""

    def __init__(self, d_model: int, n_heads: int, V: int = 5):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.embed = nn.Embedding(V + 1, d_model)
        self.pos = nn.Embedding(2 * V - 1, d_model)
        self.ln1, self.ln2, self.ln_final = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.unembed = nn.Linear(d_model, V + 1, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, s = tokens.shape
        x = self.embed(tokens) + self.pos.weight[:s]
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(z.transpose(1, 2).reshape(b, s, -1))
        x = x + self.mlp(self.ln2(x))
        return self.unembed(self.ln_final(x))


class SeedStyleDataset(torch.utils.data.Dataset):
    """The study's per-sample ``__getitem__`` (section 02), verbatim in spirit."""

    def __init__(self, mappings: list[list[int]], size: int, V: int = 5):
        self.mappings, self.size, self.elements = mappings, size, list(range(1, V + 1))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int):
        mapping_perm = random.choice(self.mappings)
        mapping = {x: y for x, y in zip(self.elements, mapping_perm)}
        x_order = list(self.elements)
        random.shuffle(x_order)
        seq = []
        for x in x_order:
            seq.append(x)
            seq.append(mapping[x])
        inputs = torch.tensor(seq[:-1], dtype=torch.long)
        targets = torch.tensor(seq[1:], dtype=torch.long)
        mask = torch.zeros(len(inputs), dtype=torch.float32)
        mask[::2] = 1.0
        return inputs, targets, mask


def _timed(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def pipelines(preset: str, batch_size: int, task: TaskConfig):
    config = PRESETS[preset]
    generator = torch.Generator().manual_seed(0)

    project = build_model(preset)
    project.train()
    weights = project.state_dict(keep_vars=True)
    project_opt = _optimizer(project, 1e-3)

    def project_step():
        batch = make_batch(task, batch_size, generator=generator)
        loss = masked_loss(fast_forward(project, batch.tokens, weights), batch.targets, batch.mask)
        project_opt.zero_grad(set_to_none=True)
        loss.backward()
        project_opt.step()

    bridge = build_model(preset)
    bridge.train()
    bridge_opt = _optimizer(bridge, 1e-3)

    def bridge_step():
        batch = make_batch(task, batch_size, generator=generator)
        loss = masked_loss(bridge(batch.tokens), batch.targets, batch.mask)
        bridge_opt.zero_grad(set_to_none=True)
        loss.backward()
        bridge_opt.step()

    torch.manual_seed(0)
    plain = PlainTransformer(config.d_model, config.n_heads)
    plain_opt = torch.optim.Adam(plain.parameters(), lr=1e-3)

    def plain_step():
        batch = make_batch(task, batch_size, generator=generator)
        loss = masked_loss(plain(batch.tokens), batch.targets, batch.mask)
        plain_opt.zero_grad(set_to_none=True)
        loss.backward()
        plain_opt.step()

    from perm_circuits.tasks.permutation_data import split_permutations

    mappings = split_permutations(task)[0].tolist()
    seed_model = PlainTransformer(config.d_model, config.n_heads)
    seed_opt = torch.optim.Adam(seed_model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(SeedStyleDataset(mappings, 10**9), batch_size=batch_size, shuffle=False)
    iterator = iter(loader)

    def seed_step():
        inputs, targets, mask = next(iterator)
        loss = masked_loss(seed_model(inputs), targets, mask)
        seed_opt.zero_grad(set_to_none=True)
        loss.backward()
        seed_opt.step()

    return {"project": project_step, "plain": plain_step, "seed-style": seed_step, "bridge": bridge_step}


def throughput(preset: str, batch_size: int, steps: int, rounds: int) -> dict[str, float]:
    task = TaskConfig(repeat_ratio=0.3)
    steps_by_name = pipelines(preset, batch_size, task)
    for step in steps_by_name.values():
        _timed(step, 20)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in steps_by_name}
    for _ in range(rounds):
        for name, step in steps_by_name.items():
            times[name].append(_timed(step, steps))
    return {name: batch_size * steps / statistics.median(t) for name, t in times.items()}


def end_to_end(batch_size: int = 128, lr: float = 1e-3) -> float:
    """Seconds to reproduce the study's tables from scratch (d16h1 + d32h2, early stop, evaluate)."""
    start = time.perf_counter()
    task = TaskConfig(repeat_ratio=0.3)
    for preset in ("d16h1", "d32h2"):
        config = TrainConfig(batch_size=batch_size, lr=lr, early_stop_patience=3)
        result = train(preset, task, config, progress=False)
        table = evaluate(result.model, task=task)
        print(f"  {preset}: {result.epochs_run} epochs, elimination {table.metrics['elimination_accuracy']:.4f}, recall {table.metrics['recall_accuracy']:.4f}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="d32h2", choices=sorted(PRESETS))
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate for --e2e")
    parser.add_argument("--e2e", action="store_true", help="also time the from-scratch reproduction")
    parser.add_argument("--e2e-only", action="store_true", help="only the from-scratch reproduction")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.e2e_only:
        seconds = end_to_end(args.batch_size, args.lr)
        print(f"end-to-end reproduction, batch {args.batch_size}, lr {args.lr}: {seconds:.0f} s (target < 180 s)")
        return
    rates = throughput(args.preset, args.batch_size, args.steps, args.rounds)
    print(f"{args.preset}, batch {args.batch_size}, {args.threads} thread(s), samples/s (median of {args.rounds}):")
    for name, rate in rates.items():
        print(f"  {name:<11} {rate:>10.0f}")
    print(f"project/plain time ratio:        {rates['plain'] / rates['project']:.2f}  (target <= 1.2)")
    print(f"bridge/plain time ratio:         {rates['plain'] / rates['bridge']:.2f}  (TL bridge forward, for reference)")
    print(f"plain speed-up over seed-style:  {rates['plain'] / rates['seed-style']:.2f}x")
    print(f"project speed-up over seed-style: {rates['project'] / rates['seed-style']:.2f}x  (target >= plain's, aim 3x)")
    if args.e2e:
        seconds = end_to_end(args.batch_size, args.lr)
        print(f"end-to-end reproduction (train d16h1 + d32h2 with early stop, evaluate): {seconds:.0f} s (target < 180 s)")
        steps = math.ceil(100_000 / 128) * 50
        print(f"  (full recipe without early stop: {steps} steps per model)")


if __name__ == "__main__":
    main()
