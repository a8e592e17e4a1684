"""The local learning coefficient (LLC) of a model, by SGLD (Lau et al. 2023, "Quantifying
degeneracy in singular models via the learning coefficient"; used as a developmental signal by
Hoogland et al. 2024, "The developmental landscape of in-context learning").

devinterp's estimator: SGLD chains (``devinterp.optim.SGMCMC.sgld``) localised at the current
weights ``w*`` sample ``w ~ exp(-n_beta L_n(w) - gamma/2 |w - w*|^2)``, and
``LLC_hat = n_beta * (E_chain[L_n(w)] - L_n(w*))`` with ``L_n`` the task's masked next-token
cross-entropy on a fixed set of ``n`` training sequences.  The loop is devinterp's
``sample_single_chain`` without its zarr output (seconds per estimate); every draw comes from one
``torch.Generator`` per chain seeded from ``LLCConfig.seed`` (deterministic on CPU, global RNG
untouched), and the chains run on copies of the weights.  devinterp is an optional extra
(``pip install -e ".[dynamics]"``).  The defaults (2 chains x 50 draws of 64 sequences, about 100
training steps' compute) follow the LLC's trend over training, not a converged absolute value; raise ``draws`` and
``chains`` for one.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import asdict, dataclass

import pandas as pd
import torch

from perm_circuits.checks import check_int, check_number, check_seed
from perm_circuits.devices import model_device
from perm_circuits.models import fast_forward, model_config_of, task_config_of
from perm_circuits.tasks.permutation import PermutationTask
from perm_circuits.tasks.permutation_data import TaskConfig, make_batch
from perm_circuits.train import masked_loss

__all__ = ["LLCConfig", "LLCEstimate", "local_learning_coefficient", "require_devinterp"]


def require_devinterp():
    """devinterp's SGLD optimiser factory; ImportError naming the extra when it is not installed."""
    try:
        from devinterp.optim import SGMCMC
    except ImportError:
        try:  # devinterp 1.x
            from devinterp.optim import SGLD
        except ImportError:
            raise ImportError(
                'the local learning coefficient needs devinterp (an optional extra): pip install -e ".[dynamics]"'
            ) from None
        return SGLD
    return SGMCMC.sgld


@dataclass(frozen=True)
class LLCConfig:
    """SGLD settings of an LLC estimate.

    Attributes:
        chains: independent SGLD chains.
        draws: SGLD steps per chain that enter the estimate (after ``burnin``).
        burnin: SGLD steps per chain discarded first.
        batch_size: sequences per SGLD step (drawn with replacement from the ``n`` sequences).
        lr: SGLD step size epsilon.
        n_beta: inverse temperature n * beta.
        localization: gamma, the pull towards the weights being measured.
        n: training sequences defining L_n (a fixed sample of the task's train split).
        seed: seeds the sequences and every chain.
    """

    chains: int = 2
    draws: int = 50
    burnin: int = 0
    batch_size: int = 64
    lr: float = 3e-4
    n_beta: float = 100.0
    localization: float = 100.0
    n: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("chains", 1), ("draws", 1), ("batch_size", 1), ("n", 1), ("burnin", 0), ("seed", 0)):
            check_int(f"LLCConfig.{name}", getattr(self, name), low=low)
        check_seed(self.seed, "LLCConfig.seed")  # one torch.manual_seed takes
        for name, strict in (("lr", True), ("n_beta", True), ("localization", False)):
            check_number(f"LLCConfig.{name}", getattr(self, name), low=0, strict=strict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LLCEstimate:
    """An LLC estimate: the mean over chains, their spread, and the losses it comes from."""

    llc: float
    llc_std: float
    per_chain: tuple[float, ...]
    init_loss: float
    mean_chain_loss: float
    config: LLCConfig

    def to_dataframe(self) -> pd.DataFrame:
        """One row per chain."""
        return pd.DataFrame({"chain": range(len(self.per_chain)), "llc": self.per_chain})


def _chain_seed(seed: int, chain: int) -> int:
    digest = hashlib.sha256(f"perm_circuits.llc:{seed}:{chain}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def local_learning_coefficient(
    model, task: TaskConfig | PermutationTask | None = None, config: LLCConfig | None = None
) -> LLCEstimate:
    """Estimate the LLC of ``model`` (a bridge that :func:`fast_forward` runs) at its current weights
    on the training loss of ``task`` (a TaskConfig or its PermutationTask; default the model's own) with ``config``'s SGLD
    settings; ImportError naming ``pip install -e ".[dynamics]"`` without devinterp."""
    config = LLCConfig() if config is None else config
    if not isinstance(config, LLCConfig):
        raise TypeError(f"config must be an LLCConfig or None, got {type(config).__name__}")
    model_config = model_config_of(model)
    task_config = task_config_of(model) if task is None else task
    if isinstance(task_config, PermutationTask):
        task_config = task_config.config
    if not isinstance(task_config, TaskConfig):
        raise TypeError(f"task must be a TaskConfig, a PermutationTask or None, got {type(task).__name__}")
    if task_config.V != model_config.V:
        raise ValueError(f"task V={task_config.V} does not match model V={model_config.V}")
    sgld = require_devinterp()

    # drawn on the CPU generator, moved to the model's device once
    data = make_batch(task_config, config.n, generator=torch.Generator().manual_seed(config.seed))
    data = data.to(model_device(model))
    state = model.state_dict(keep_vars=True)
    sampled = [k for k, v in state.items() if isinstance(v, torch.nn.Parameter) and v.requires_grad]
    base = {k: v.detach().clone() for k, v in state.items()}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            init_loss = float(masked_loss(fast_forward(model, data.tokens, base), data.targets, data.mask))
        per_chain, chain_means = [], []
        for chain in range(config.chains):
            # on the model's device: SGLD draws its noise next to the weights (the same stream on the CPU)
            generator = torch.Generator(device=data.tokens.device).manual_seed(_chain_seed(config.seed, chain))
            params = [base[k].clone().requires_grad_(True) for k in sampled]
            weights = {**base, **dict(zip(sampled, params))}
            optimizer = sgld(params, lr=config.lr, nbeta=config.n_beta, localization=config.localization)
            losses = []
            for t in range(config.burnin + config.draws):
                index = torch.randint(config.n, (config.batch_size,), generator=generator, device=data.tokens.device)
                loss = masked_loss(fast_forward(model, data.tokens[index], weights), data.targets[index], data.mask[index])
                grads = torch.autograd.grad(loss, params)
                for param, grad in zip(params, grads):
                    param.grad = grad
                optimizer.step(noise_generator=generator)
                if t >= config.burnin:
                    losses.append(loss.detach())  # kept on the device: one transfer per chain, not per step
            losses = torch.stack(losses).tolist()
            mean = sum(losses) / len(losses)
            chain_means.append(mean)
            per_chain.append(config.n_beta * (mean - init_loss))
    finally:
        model.train(was_training)
    return LLCEstimate(
        llc=sum(per_chain) / len(per_chain),
        llc_std=statistics.stdev(per_chain) if len(per_chain) > 1 else 0.0,
        per_chain=tuple(per_chain),
        init_loss=init_loss,
        mean_chain_loss=sum(chain_means) / len(chain_means),
        config=config,
    )
