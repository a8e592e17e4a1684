"""Sweeps: the study's claims across seeds and sizes, on one machine or a Ray cluster.

``run_sweep(spec, out_dir)`` trains, evaluates and analyses each run of a spec's grid
(:mod:`perm_circuits.sweep.spec`) into one JSON row; ``load_sweep`` reads them back as a DataFrame;
``reanalyse_sweep`` recomputes the analysis columns from kept models.
"""

from perm_circuits.sweep.backends import BACKENDS, default_workers
from perm_circuits.sweep.driver import SweepResult, run_sweep, summary_table
from perm_circuits.sweep.lock import SweepLockedError
from perm_circuits.sweep.reanalyse import reanalyse_sweep
from perm_circuits.sweep.run import analysis_columns, roles_columns, run_one
from perm_circuits.sweep.spec import ANALYSIS_DEFAULTS, RunConfig, SweepSpec, allowed_keys, load_spec, run_id_of
from perm_circuits.sweep.store import clean_stale, export_parquet, load_sweep

__all__ = ["ANALYSIS_DEFAULTS", "BACKENDS", "RunConfig", "SweepLockedError", "SweepResult", "SweepSpec", "allowed_keys",
           "analysis_columns", "clean_stale", "default_workers", "export_parquet", "load_spec", "load_sweep",
           "reanalyse_sweep", "roles_columns", "run_id_of", "run_one", "run_sweep", "summary_table"]
