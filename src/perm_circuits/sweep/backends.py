"""Where runs execute: in this process (``serial``), a local process pool (``local``), or Ray (``ray``).

Every backend calls :func:`~perm_circuits.sweep.run.run_one` on each run (one torch thread, so
results are bit-identical across backends) and hands ``(row, checkpoint files)`` to the driver's
``on_result``, which writes them: workers never touch the sweep folder.  The local pool's workers
fork from a forkserver that imported torch and TransformerLens once (else they are spawned) and
exit when the driver dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from perm_circuits.ray_address import RAY_CONNECT_TIMEOUT, check_ray_address
from perm_circuits.sweep.run import config_columns, run_one, versions
from perm_circuits.sweep.spec import RunConfig

__all__ = ["BACKENDS", "RAY_CONNECT_TIMEOUT", "check_ray_address", "default_workers", "import_task_modules", "run_each", "run_local", "run_one_importing",
           "run_pool", "run_ray", "run_serial", "task_modules"]

BACKENDS = ("local", "ray", "serial")

OnResult = Callable[[dict[str, Any], "dict[str, bytes] | None"], None]
OnStart = Callable[[int], None]
Row = tuple[dict[str, Any], "dict[str, bytes] | None"]


def default_workers() -> int:
    """One worker per available core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _lost_row(run: RunConfig, message: str) -> dict[str, Any]:
    """The row of a run whose worker died (the backend raised instead of returning a row)."""
    row = {"status": "failed", "error": message, "wall_seconds": float("nan")}
    try:
        row = {**config_columns(run.run_id, run.config), **row}
    except Exception:  # noqa: BLE001
        row["run_id"] = run.run_id
    return {**row, **versions()}


def run_serial(runs: Sequence[RunConfig], on_result: OnResult, on_running: OnStart, *, keep_models: bool) -> None:
    """One run after another in this process."""
    for run in runs:
        on_running(1)
        on_result(*run_one(run.run_id, run.config, keep_models))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _exit_with(driver: int) -> None:
    """Stop this worker once the driver is gone (e.g. SIGKILLed): no orphan keeps computing."""
    while _alive(driver):
        time.sleep(1.0)
    os._exit(1)


ModuleSource = tuple[str, str | None]
"""``(module name, its .py file or None)``: a module that registers a swept task, for a worker to import."""


def import_task_modules(sources: Sequence[ModuleSource]) -> None:
    """Import each ``(module, file)`` of :func:`task_modules` in a worker, by name, else from its file.
    A module that does not import is skipped (its runs fail with the registry's "unknown task")."""
    from perm_circuits.tasks.base import import_module_or_file

    for module, file in sources:
        with contextlib.suppress(Exception):  # reported by the runs that need it
            import_module_or_file(module, file)


def _init_worker(driver: int, task_modules: Sequence[ModuleSource] = ()) -> None:
    """One torch thread, a watchdog on the driver, the bridge and the swept tasks' modules imported."""
    import torch

    threading.Thread(target=_exit_with, args=(driver,), daemon=True).start()
    torch.set_num_threads(1)
    import transformer_lens.model_bridge  # noqa: F401

    import_task_modules(task_modules)


def task_modules(runs: Sequence[RunConfig]) -> tuple[ModuleSource, ...]:
    """The modules (outside this package) and files of the task classes the runs sweep."""
    import sys

    from perm_circuits.tasks import TASKS

    names = {run.config["task"].get("task") for run in runs if "fit" in run.config}
    modules = {TASKS[name].__module__ for name in names if name in TASKS}
    kept = sorted(m for m in modules if not m.startswith("perm_circuits.") and m != "__main__")
    return tuple((m, getattr(sys.modules.get(m), "__file__", None)) for m in kept)


def run_one_importing(sources: Sequence[ModuleSource], run_id: str, config: dict[str, Any],
                      keep_models: bool) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """:func:`~perm_circuits.sweep.run.run_one` after importing the task modules ``sources`` (a Ray task's body)."""
    import_task_modules(sources)
    return run_one(run_id, config, keep_models)


PRELOAD = ["torch", "transformer_lens.model_bridge", "perm_circuits.sweep.run"]


def _pool_context():
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        return context
    return multiprocessing.get_context("spawn")


def run_local(runs: Sequence[RunConfig], on_result: OnResult, on_running: OnStart, *, workers: int,
              keep_models: bool) -> None:
    """A process pool of ``workers`` processes, one torch thread each, one run per task (:func:`run_pool`)."""
    run_pool([(run,) for run in runs], run_each, on_result, on_running, workers=workers, keep_models=keep_models)


def run_each(runs: Sequence[tuple[str, dict[str, Any]]], keep_models: bool) -> list[Row]:
    """:func:`~perm_circuits.sweep.run.run_one` on each ``(run_id, config)``."""
    return [run_one(run_id, config, keep_models) for run_id, config in runs]


def run_pool(groups: Sequence[Sequence[RunConfig]], job: Callable[..., list[Row]], on_result: OnResult,
             on_running: OnStart, *, workers: int, keep_models: bool) -> None:
    """``job([(run_id, config), ...], keep_models) -> [(row, files), ...]`` per group of runs, each group
    a task of a pool of ``workers`` processes (never plain ``fork``: this process may hold threads).
    A group whose worker dies gives each of its runs a failed row.  A dead worker breaks the whole
    pool: the groups that were running then fail, and those not yet started go to a fresh pool."""
    sources = task_modules([run for group in groups for run in group])
    todo = [tuple(group) for group in groups]
    while todo:
        todo = _run_pool_once(todo, job, on_result, on_running, sources, workers=workers, keep_models=keep_models)


def _run_pool_once(groups: Sequence[tuple[RunConfig, ...]], job: Callable[..., list[Row]], on_result: OnResult,
                   on_running: OnStart, sources: Sequence[ModuleSource], *, workers: int,
                   keep_models: bool) -> list[tuple[RunConfig, ...]]:
    """:func:`run_pool` on one pool; returns the groups not started when a worker died (else [])."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context(), initializer=_init_worker,
                               initargs=(os.getpid(), sources))
    try:
        futures = {pool.submit(job, [(run.run_id, run.config) for run in group], keep_models): group
                   for group in groups}
        pending = dict.fromkeys(futures)  # in submission order: the first ``workers`` groups are running

        def running() -> int:
            return sum(len(futures[future]) for future in itertools.islice(pending, workers))

        def emit(future) -> None:
            try:
                rows = future.result()
            except Exception:  # noqa: BLE001 - a worker died (killed, out of memory)
                rows = [(_lost_row(run, traceback.format_exc()), None) for run in futures[future]]
            for row, files in rows:
                on_result(row, files)

        on_running(running())
        for future in as_completed(futures):
            if isinstance(future.exception(), BrokenProcessPool):
                started = set(itertools.islice(pending, workers))
                left = []
                for other in list(pending):
                    if other in started or (other.done() and other.exception() is None):
                        emit(other)
                    else:
                        left.append(futures[other])
                pool.shutdown(wait=True, cancel_futures=True)
                return left
            del pending[future]
            on_running(running())
            emit(future)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return []


def import_ray():
    """The ``ray`` module, or ImportError with the install command when Ray is missing."""
    try:
        import ray
    except ImportError:
        raise ImportError('the "ray" backend needs Ray: pip install -e ".[ray]"') from None
    return ray


def run_ray(runs: Sequence[RunConfig], on_result: OnResult, on_running: OnStart, *, workers: int | None,
            address: str | None, keep_models: bool) -> None:
    """Each run a Ray task with ``num_cpus=1``, on the cluster at ``address``, else a local instance
    with ``workers`` CPUs (shut down afterwards); an already initialised Ray is used as is.  Each task
    first imports the swept tasks' modules (:func:`task_modules`; on a cluster, a module's file must
    exist at the same path on every node)."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        if address:
            check_ray_address(address)
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers or default_workers(), include_dashboard=False, log_to_driver=False)
            started = True
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_one_importing)
        sources = task_modules(runs)  # a user's task module, imported in each worker before its run
        refs = {task.remote(sources, run.run_id, run.config, keep_models): run for run in runs}
        slots = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = list(refs)
        on_running(min(slots, len(pending)))
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    row, files = ray.get(ref)
                except Exception:  # noqa: BLE001 - the task's worker died
                    row, files = _lost_row(refs[ref], traceback.format_exc()), None
                on_running(min(slots, len(pending)))
                on_result(row, files)
    except BaseException:
        for ref in refs if "refs" in locals() else ():
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
