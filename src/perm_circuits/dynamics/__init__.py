"""Training dynamics: record signals at log-spaced steps (:class:`DynamicsRecorder`), save them with
the checkpoint (:func:`save_dynamics`), and ask which one moves first (:func:`which_first`).  The
emergence figure lives in :mod:`perm_circuits.views.dynamics_figures`.
"""

from perm_circuits.dynamics.emergence import Crossing, WhichFirst, half_crossing, normalised, which_first
from perm_circuits.dynamics.llc import LLCConfig, LLCEstimate, local_learning_coefficient
from perm_circuits.dynamics.record import DYNAMICS_FILE, DynamicsRecord, load_dynamics, save_dynamics
from perm_circuits.dynamics.recorder import (
    DEFAULT_POINTS,
    DEFAULT_TEST_N,
    SIGNAL_GROUPS,
    DynamicsRecorder,
    default_steps,
)

__all__ = [
    "DEFAULT_POINTS",
    "DEFAULT_TEST_N",
    "DYNAMICS_FILE",
    "SIGNAL_GROUPS",
    "Crossing",
    "DynamicsRecord",
    "DynamicsRecorder",
    "LLCConfig",
    "LLCEstimate",
    "WhichFirst",
    "default_steps",
    "half_crossing",
    "load_dynamics",
    "local_learning_coefficient",
    "normalised",
    "save_dynamics",
    "which_first",
]
