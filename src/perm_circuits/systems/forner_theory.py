"""Mean-field theory of Forner et al. 2026: logits (eqs. 11-12), the order-parameter ODE (eq. 15 with
``c_omega`` of eq. 14) and the final-rollout-accuracy model (eqs. 16-18).

Training time is ``alpha = epochs / (d_g N)`` (section 4.3): one full-batch SGD step with learning
rate ``eta`` advances ``alpha`` by ``1 / (d_g N)``.  Everything here is plain numpy (scipy's
``solve_ivp`` integrates the ODE when installed, else a fixed-step RK4).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "OdeSolution",
    "c_omega",
    "integrate_order_parameters",
    "mean_logits",
    "order_parameter_rhs",
    "rollout_accuracy",
    "rollout_recursion",
    "rope_omegas",
    "step_accuracy_gaussian",
]


def rope_omegas(d_h: int, theta: float = 10000.0, two_pi: bool = True) -> np.ndarray:
    """``omega_n = (2 pi) theta^{-2(n-1)/d_h}``, ``n = 1..d_h/2`` (appendix A; appendix J without 2 pi)."""
    if d_h < 2 or d_h % 2:
        raise ValueError(f"d_h must be a positive even int, got {d_h!r}")
    omega = theta ** (-2.0 * np.arange(d_h // 2) / d_h)
    return 2 * math.pi * omega if two_pi else omega


def c_omega(N: int, d_g: int, L: int, d_h: int, sigma2: float = 1 / 3, omegas: np.ndarray | None = None) -> float:
    """Eq. 14: ``c_omega = 2 d_g N / (L (L-1)) sigma^2 (2/d_h) sum_n [1 - (sin(w_n L/2) / sin(w_n/2))^2 / L^2]^2``;
    an ``omega_n`` multiple of ``2 pi`` has ``lambda_n = 1`` (appendix E) and adds 0.  ``sigma2``: the
    key/query init variance (1/3 for PyTorch's ``nn.Linear(1, d_h)``)."""
    if L < 2:
        raise ValueError(f"c_omega needs L >= 2, got {L}")
    omegas = rope_omegas(d_h) if omegas is None else np.asarray(omegas, dtype=float)
    half = np.sin(omegas / 2)
    degenerate = np.abs(half) < 1e-9
    ratio = np.where(degenerate, float(L), np.sin(omegas * L / 2) / np.where(degenerate, 1.0, half))
    terms = (1 - ratio**2 / L**2) ** 2
    return float(2 * d_g * N / (L * (L - 1)) * sigma2 * 2 / d_h * terms.sum())


def mean_logits(A, R, S, N: int, d_g: int, zeta: float = 0.0):
    """Eqs. 11-12: the mean correct logit ``<z_k> = (A + (1-A)/d_g) R + (d_g-1)/d_g (1-A) S`` and the
    mean other logit ``<z_kbar> = (zeta - <z_k>) / (N-1)``, ``zeta = sum_a sum_rs [M_a]_rs / (d_g N)``."""
    A, R, S = (np.asarray(x, dtype=float) for x in (A, R, S))
    correct = (A + (1 - A) / d_g) * R + (d_g - 1) / d_g * (1 - A) * S
    return correct, (zeta - correct) / (N - 1)


def order_parameter_rhs(state, *, eta: float, N: int, d_g: int, L: int, c_w: float, zeta: float = 0.0) -> np.ndarray:
    """Eq. 15: ``d(A, R, S)/d alpha`` with the margin ``m = <z_k> - <z_kbar>`` of eqs. 11-12."""
    A, R, S = state
    correct, other = mean_logits(A, R, S, N, d_g, zeta)
    gate = 1.0 / (1.0 + math.exp(min(float(correct - other), 700.0)) / (N - 1))
    dA = eta * gate * N / (N - 1) * (d_g - 1) / d_g * c_w * L * A * (1 - A) * (R - S)
    dR = eta * gate * (A + (1 - A) / d_g)
    dS = eta * gate * (1 - A) / d_g
    return np.array([dA, dR, dS])


@dataclass(frozen=True)
class OdeSolution:
    """The ODE's ``A, R, S`` (and the mean logits) at times ``alpha``."""

    alpha: np.ndarray
    A: np.ndarray
    R: np.ndarray
    S: np.ndarray
    mu_correct: np.ndarray
    mu_other: np.ndarray

    def to_dataframe(self) -> pd.DataFrame:
        return pd.DataFrame({"alpha": self.alpha, "A": self.A, "R": self.R, "S": self.S,
                             "mu_correct": self.mu_correct, "mu_other": self.mu_other})


def integrate_order_parameters(
    alpha: np.ndarray,
    *,
    eta: float,
    N: int,
    d_g: int,
    L: int,
    d_h: int,
    A0: float | None = None,
    R0: float = 0.0,
    S0: float = 0.0,
    zeta: float = 0.0,
    sigma2: float = 1 / 3,
    omegas: np.ndarray | None = None,
    method: str = "auto",
) -> OdeSolution:
    """Integrate eq. 15 from ``(A0, R0, S0)`` (default the paper's ``(1/L, 0, 0)``) to the times ``alpha``
    by ``method`` ``"scipy"`` (``solve_ivp``, RK45, rtol 1e-8), ``"rk4"`` (fixed step 0.01 in alpha)
    or ``"auto"`` (scipy when installed)."""
    alpha = np.asarray(alpha, dtype=float)
    if alpha.ndim != 1 or alpha.size == 0 or np.any(np.diff(alpha) < 0) or alpha[0] < 0:
        raise ValueError("alpha must be a non-empty, non-decreasing 1-d array of times >= 0")
    if method not in ("auto", "scipy", "rk4"):
        raise ValueError(f"method must be 'auto', 'scipy' or 'rk4', got {method!r}")
    c_w = c_omega(N, d_g, L, d_h, sigma2, omegas)
    y0 = np.array([1 / L if A0 is None else A0, R0, S0], dtype=float)

    def rhs(_t, y):
        return order_parameter_rhs(y, eta=eta, N=N, d_g=d_g, L=L, c_w=c_w, zeta=zeta)

    if method == "scipy" or (method == "auto" and importlib.util.find_spec("scipy") is not None):
        from scipy.integrate import solve_ivp

        sol = solve_ivp(rhs, (0.0, float(alpha[-1])), y0, t_eval=alpha, rtol=1e-8, atol=1e-10)
        if not sol.success:
            raise RuntimeError(f"solve_ivp failed: {sol.message}")
        y = sol.y
    else:
        y = _rk4(rhs, y0, alpha)
    correct, other = mean_logits(y[0], y[1], y[2], N, d_g, zeta)
    return OdeSolution(alpha, y[0], y[1], y[2], correct, other)


def _rk4(rhs, y0: np.ndarray, alpha: np.ndarray, h: float = 1e-2) -> np.ndarray:
    out = np.empty((len(y0), len(alpha)))
    t, y = 0.0, y0.copy()
    for index, target in enumerate(alpha):
        while t < target - 1e-12:
            step = min(h, target - t)
            k1 = rhs(t, y)
            k2 = rhs(t + step / 2, y + step / 2 * k1)
            k3 = rhs(t + step / 2, y + step / 2 * k2)
            k4 = rhs(t + step, y + step * k3)
            y = y + step / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            t += step
        out[:, index] = y
    return out


def step_accuracy_gaussian(mu_correct, mu_other, var_correct, var_other, N: int, n_grid: int = 2001) -> np.ndarray:
    """Eq. 17: ``rho = int du phi(u) Phi(sigma_k/sigma_kbar u + (mu_k - mu_kbar)/sigma_kbar)^(N-1)``,
    the probability that a ``N(mu_k, sigma_k^2)`` correct logit beats ``N-1`` independent
    ``N(mu_kbar, sigma_kbar^2)`` others (trapezoidal rule on ``u`` in [-10, 10])."""
    mu_c, mu_o = np.broadcast_arrays(np.asarray(mu_correct, float), np.asarray(mu_other, float))
    s_c, s_o = math.sqrt(var_correct), math.sqrt(var_other)
    u = np.linspace(-10, 10, n_grid)
    phi = np.exp(-u**2 / 2) / math.sqrt(2 * math.pi)
    try:
        from scipy.special import ndtr as cdf
    except ImportError:  # pragma: no cover - scipy ships with the test environment
        cdf = np.vectorize(lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2))))
    arg = s_c / s_o * u[None, :] + ((mu_c - mu_o).reshape(-1, 1)) / s_o
    values = np.trapezoid(phi[None, :] * cdf(arg) ** (N - 1), u, axis=1)
    return values.reshape(mu_c.shape)


def rollout_recursion(correct_given_correct, correct_given_wrong) -> float:
    """Eq. 16 (appendix I, eq. 84): ``rho_{t+1} = rho_t (A_t - B_t) + B_t`` from ``rho_0 = 1``;
    ``A_t = P(right | right before)``, ``B_t = P(right | wrong before)``, one value per step."""
    a = np.asarray(correct_given_correct, dtype=float)
    b = np.asarray(correct_given_wrong, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two 1-d sequences of the same length, got shapes {a.shape} and {b.shape}")
    value = 1.0
    for at, bt in zip(a, b):
        value = value * (at - bt) + bt
    return float(value)


def rollout_accuracy(rho, N: int, L: int):
    """Eq. 18: ``P(s_hat_L = s_L) ~ (N-1)/N ((N rho - 1)/(N-1))^L + 1/N``, the final rollout accuracy
    from the one-step accuracy ``rho`` with recovery ``(1 - rho)/(N - 1)`` (eq. 16 solved)."""
    rho = np.asarray(rho, dtype=float)
    if np.any((rho < 0) | (rho > 1)):
        raise ValueError(f"rho must lie in [0, 1], got {rho}")
    return (N - 1) / N * ((N * rho - 1) / (N - 1)) ** L + 1 / N
