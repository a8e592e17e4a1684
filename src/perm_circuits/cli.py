"""``perm-circuits``: train | evaluate | info | report | sweep | sweep-reanalyse | sweep-report | discover | reproduce.

Exit codes: 0 success, 2 an error the user can fix (bad arguments, an output path that cannot be
written or is someone else's, a file that does not import, a full disk), 1 other failures, 130
interrupted, 141 stdout closed early (``| head``).  Every error ends in one line on stderr;
``--debug`` (or ``PERM_CIRCUITS_DEBUG=1``) shows the traceback instead.  Every output path is
checked before any work (:mod:`perm_circuits.outputs`), and nothing of the user's is overwritten
without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path

__all__ = ["main"]


def _argument(convert, expected: str, accept=None):
    """An argparse ``type``: ``convert(text)``, and an ArgumentTypeError saying ``expected`` when the
    text does not convert or ``accept(value)`` is false (``accept=None`` accepts every value)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if accept is not None and not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


_positive_int = _argument(int, "a positive integer", lambda value: value > 0)
_ratio = _argument(float, "a number in [0, 1]", lambda value: 0.0 <= value <= 1.0)
# --repeat-sources 1,2,3,4 -> (1, 2, 3, 4); range and duplicates: TaskConfig checks
_sources = _argument(lambda text: tuple(int(part) for part in text.split(",")), "comma-separated integers like 1,2,3,4")


def _import_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help=f"import MODULE (a module name, from the current folder too, or a .py file) first, e.g. "
                             f"the file defining and registering {what} (repeatable)")


DEBUG_ENV = "PERM_CIRCUITS_DEBUG"
"""Set to 1 (like ``--debug``) to see the traceback of an error instead of its one line."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perm-circuits", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an error instead of one line (or set {DEBUG_ENV}=1)")
    common = argparse.ArgumentParser(add_help=False)  # --debug after the command too
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **options) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **options)

    tr = command("train", help="train a model and save a checkpoint folder")
    tr.add_argument("--preset", choices=["d16h1", "d32h1", "d32h2"], help="architecture preset")
    tr.add_argument("--d-model", type=_positive_int, help="residual width (instead of --preset)")
    tr.add_argument("--heads", type=_positive_int, help="attention heads (with --d-model)")
    tr.add_argument("--d-head", type=_positive_int, help="per-head width (default d_model / heads; needed when heads does not divide d_model)")
    tr.add_argument("--layers", type=_positive_int, default=1, help="transformer blocks (default 1)")
    tr.add_argument("--dropout", type=float, metavar="P", help="dropout probability in [0, 1), training only (default 0)")
    tr.add_argument("--V", type=int, default=5, help="number of values (2..8, default 5)")
    tr.add_argument("--seed", type=int, help="init and data seed (default 0)")
    tr.add_argument("--epochs", type=_positive_int, help="epochs (default 50; with --resume: the new total)")
    tr.add_argument("--samples", type=_positive_int, help="samples per epoch (default 100000)")
    tr.add_argument("--batch-size", type=_positive_int, help="default 128")
    tr.add_argument("--lr", type=float, help="Adam learning rate (default 1e-3)")
    tr.add_argument("--repeat-ratio", type=_ratio, help="P(last query repeats an earlier query), default 0.3")
    tr.add_argument("--repeat-sources", type=_sources, metavar="K,K,...",
                    help="earlier queries x_k the last query may repeat, uniformly (default 1: the study)")
    tr.add_argument("--early-stop", type=_positive_int, metavar="PATIENCE", help="stop once converged")
    tr.add_argument("--checkpoint-every", type=_positive_int, metavar="N")
    tr.add_argument("--resume", type=Path, metavar="CHECKPOINT", help="resume a training checkpoint")
    tr.add_argument("--record-dynamics", type=_positive_int, nargs="?", const=0, metavar="N",
                    help="record the training dynamics at N log-spaced steps (default 32) into OUT/dynamics.json")
    tr.add_argument("--out", type=Path, required=True, help="output checkpoint folder (new or empty, unless --force)")
    tr.add_argument("--force", action="store_true", help="overwrite a checkpoint (or other files) already in --out")
    tr.add_argument("--threads", type=_positive_int, default=1, help="torch CPU threads (default 1: fastest for these sizes, and reproducible)")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.add_argument("--device", help="where to train: cpu (default), cuda, cuda:1, mps")

    ev = command("evaluate", help="print the per-step evaluation table")
    ev.add_argument("model", help="pretrained name (d16h1, d32h1, d32h2, d16h1l2-any) or checkpoint folder")
    ev.add_argument("--samples", type=_positive_int, default=5000)
    ev.add_argument("--seed", type=int, default=1234, help="test-set seed")
    ev.add_argument("--json", action="store_true", help="print the summary as JSON")
    ev.add_argument("--device", help="where to run the model: cpu (default), cuda, ...")
    _import_flag(ev, "the task of your own that a checkpoint was trained on")

    command("info", help="versions, presets and shipped models")

    rp = command("report", help="write the HTML report for one or more models",
                 description="Write one offline HTML page per model into --out. A shipped name or a study "
                             "checkpoint gets the study's report (and an index page comparing several); a "
                             "checkpoint of a model trained on any other registered task (saved with "
                             "perm_circuits.tasks.checkpoint.save_task_model, or a sweep's --keep-models) gets "
                             "the task report: its metrics, attention, ablation, patching, attribution and "
                             "circuit. A task defined in your own file needs --import FILE.py (the file that "
                             "registers it).")
    rp.add_argument("models", nargs="+", help="pretrained names or checkpoint folders (of the study's or any registered task)")
    rp.add_argument("--out", type=Path, required=True, help="output folder (new, empty or an earlier report's, unless --force)")
    rp.add_argument("--force", action="store_true", help="write into a non-empty folder that no report wrote")
    rp.add_argument("--samples", type=_positive_int,
                    help="test sequences (default 5000 for the study's models, 500 for a task checkpoint's page)")
    _import_flag(rp, "a task of your own that a checkpoint was trained on")
    rp.add_argument("--quiet", action="store_true")
    rp.add_argument("--device", help="where to run the models: cpu (default), cuda, ...")

    sw = command("sweep", help="run a grid of trainings + analyses from a TOML spec, one row per run")
    sw.add_argument("spec", type=Path, help="sweep spec (TOML: [grid] lists, [fixed] scalars)")
    sw.add_argument("--out", type=Path, required=True, help="sweep folder (runs/<run_id>.json; reruns skip finished runs): "
                    "new, empty or a sweep's, unless --force")
    sw.add_argument("--force", action="store_true", help="write the sweep into a non-empty folder that is not a sweep's")
    sw.add_argument("--backend", choices=["local", "ray", "serial"], default="local", help="default local (process pool)")
    sw.add_argument("--workers", type=_positive_int, help="processes / local Ray CPUs (default: one per core)")
    sw.add_argument("--address", help="a running Ray cluster, e.g. 10.0.0.1:6379 (default: start a local instance)")
    sw.add_argument("--keep-models", action="store_true", help="also save each run's checkpoint in DIR/models/")
    sw.add_argument("--retry-failed", action="store_true", help="re-run the runs stored as failed")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--trainer", choices=["auto", "single", "stacked"], default="auto",
                    help="stacked: train the seeds of one architecture as one stacked model (the same rows bit for bit "
                         "on the CPU; not with --backend ray); auto (default): stacked where some architecture has "
                         "two or more runs to do, except on ray")
    _import_flag(sw, "a task of your own that the spec names")
    ra = command("sweep-reanalyse", help="recompute a sweep's analysis columns from its kept models")
    ra.add_argument("sweep_dir", type=Path, metavar="DIR", help="sweep folder run with --keep-models")
    ra.add_argument("--quiet", action="store_true", help="no progress bar")
    sr = command("sweep-report", help="write the offline HTML page of a sweep folder")
    sr.add_argument("sweep_dir", type=Path, metavar="DIR", help="sweep output folder")
    sr.add_argument("--out", type=Path, required=True, metavar="PAGE.html", help="page to write")
    sr.add_argument("--force", action="store_true", help="overwrite an existing page")
    sr.add_argument("--title", help="page title")
    dc = command("discover", help="find a model's circuit with an edge-level method; print it and draw it")
    dc.add_argument("model", help="pretrained name or checkpoint folder")
    from perm_circuits.ablation_modes import mode_help
    from perm_circuits.discovery.registry import DEFAULT_METHOD, method_help  # the registries load no torch

    dc.add_argument("--method", default=DEFAULT_METHOD,
                    help=f"{method_help(DEFAULT_METHOD)} (or one an --import module registers); the default grows "
                         "then prunes edges until faithfulness is within 0.1 of 1: on the shipped models the "
                         "benchmark's smallest faithful circuits (see docs/discovery.md)")
    dc.add_argument("--how", default="resample", help=f"ablation mode of the edges: {mode_help('edges', 'resample')}")
    dc.add_argument("--samples", type=_positive_int, default=500, help="test sequences (default 500)")
    dc.add_argument("--seed", type=int, default=0)
    dc.add_argument("--out", type=Path, help="write the circuit's picture here (.svg or .html; default "
                    "circuit_MODEL_METHOD_HOW.svg in the current folder); an existing file needs --force")
    dc.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    dc.add_argument("--device", help="where to run the model: cpu (default), cuda, ...")
    _import_flag(dc, "the task of your own that a checkpoint was trained on")
    rr = command("reproduce", help="run a seed paper's headline experiment and print paper vs ours")
    rr.add_argument("name", help="a registered reproduction (birth, forner, factual, ...)")
    rr.add_argument("--quick", action="store_true", help="the CPU-sized run (minutes)")
    rr.add_argument("--out", type=Path, help="also write comparison.csv, numbers.json and an offline HTML page here "
                    "(a new, empty or earlier reproduction's folder, unless --force)")
    rr.add_argument("--force", action="store_true", help="write into a non-empty folder no reproduction wrote")
    rr.add_argument("--quiet", action="store_true", help="no progress bar")
    rr.add_argument("--device", help="where the models train and run: cpu (default), cuda, cuda:1, mps")
    return parser


def _reproduce(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_writable

    if args.out is not None:
        check_writable(args.out, folder=True)  # before torch is imported

    from perm_circuits.reproduce import check_out, reproduce

    if args.out is not None:
        check_out(args.out, force=args.force)  # new, empty or a reproduction's: before minutes of work
    result = reproduce(args.name, quick=args.quick, progress=not args.quiet, device=args.device)
    print(result.to_text())
    if args.out is not None:
        for path in result.write(args.out, force=args.force):
            print(f"wrote {path}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_writable

    check_writable(args.out, folder=True)  # before torch is imported, and long before training ends

    import torch

    from perm_circuits.models import CONFIG_FILE, PRESETS, WEIGHTS_FILE, ModelConfig, save_model
    from perm_circuits.tasks.permutation_data import TaskConfig
    from perm_circuits.train import TrainConfig, load_resumable, train

    if args.record_dynamics is not None and args.resume is not None:
        raise ValueError("--record-dynamics cannot be combined with --resume (the record would miss the steps before the checkpoint)")
    if args.out.is_dir() and not (args.force or _continues(args.resume, args.out)):
        if (args.out / CONFIG_FILE).exists() or (args.out / WEIGHTS_FILE).exists():
            raise ValueError(
                f"--out {str(args.out)!r} already holds a checkpoint ({CONFIG_FILE} / {WEIGHTS_FILE}); "
                "pass --force to overwrite it, --resume CHECKPOINT to continue a run, or choose another folder"
            )
        if any(args.out.iterdir()):
            raise ValueError(
                f"--out {str(args.out)!r} is a non-empty folder; pass --force to write the checkpoint into it "
                "anyway, or choose another folder"
            )
    torch.set_num_threads(args.threads)
    recipe = {"seed": args.seed, "epochs": args.epochs, "samples_per_epoch": args.samples,
              "batch_size": args.batch_size, "lr": args.lr}
    given = {k: v for k, v in recipe.items() if v is not None}
    schedule = {
        "early_stop_patience": args.early_stop,
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_dir": str(args.out / "checkpoints") if args.checkpoint_every else None,
    }
    if args.resume is not None:
        fixed = ("preset", "d_model", "heads", "d_head", "repeat_ratio", "repeat_sources", "seed", "samples",
                 "batch_size", "lr", "dropout")
        clash = ["--" + name.replace("_", "-") for name in fixed if getattr(args, name) is not None]
        if clash:
            raise ValueError(f"{clash} cannot be given with --resume: the checkpoint fixes them")
        saved = load_resumable(args.resume)[3]
        train_config = TrainConfig.from_dict({**saved.to_dict(), **given, **schedule})
        model_config = task_config = None
    else:
        seed = 0 if args.seed is None else args.seed
        if (args.preset is None) == (args.d_model is None):
            raise ValueError("give either --preset or --d-model/--heads")
        if args.preset is None and args.heads is None:
            raise ValueError("--d-model needs --heads")
        shape = PRESETS[args.preset].to_dict() if args.preset else {"d_model": args.d_model, "n_heads": args.heads}
        model_config = ModelConfig.from_dict({**shape, "seed": seed, "V": args.V, "n_layers": args.layers,
                                              "d_head": args.d_head, "dropout": args.dropout or 0.0})
        ratio = 0.3 if args.repeat_ratio is None else args.repeat_ratio
        task_config = TaskConfig(V=args.V, repeat_ratio=ratio, repeat_sources=args.repeat_sources or (1,))
        train_config = TrainConfig(**{"seed": seed, **given, **schedule})
    recorders = []
    if args.record_dynamics is not None:
        from perm_circuits.dynamics import DEFAULT_POINTS, DynamicsRecorder, default_steps

        total = train_config.epochs * train_config.steps_per_epoch
        recorders.append(DynamicsRecorder(task_config, default_steps(total, args.record_dynamics or DEFAULT_POINTS)))
    result = train(
        model_config or "d32h2", task_config, train_config, resume_from=args.resume, progress=not args.quiet,
        step_callbacks=recorders, device=args.device,
    )
    metadata = {
        "command": "perm-circuits " + " ".join(shlex.quote(a) for a in args.argv),
        "seed": result.model_config.seed,
        "train_config": result.train_config.to_dict(),
        "epochs_run": result.epochs_run,
        "stopped_early": result.stopped_early,
        "train_seconds": round(result.seconds, 1),
        "metrics": result.evaluation.summary(),
        "history": list(result.history.rows),
        "versions": _versions(),
    }
    save_model(result.model, args.out, task=result.task_config, metadata=metadata)
    if recorders:
        from perm_circuits.dynamics import save_dynamics

        print(f"recorded dynamics: {save_dynamics(recorders[0].result(), args.out)}")
    print(result.evaluation.to_markdown())
    print(f"\nsaved {args.out} ({result.epochs_run} epochs, {result.seconds:.1f} s)")
    return 0


def _continues(resume: Path | None, out: Path) -> bool:
    """Whether ``train --resume RESUME --out OUT`` continues the run saved in OUT (RESUME is OUT or a
    checkpoint inside it, e.g. OUT/checkpoints/epoch_0010): that folder may be rewritten without --force."""
    if resume is None:
        return False
    here, there = resume.resolve(), out.resolve()
    return here == there or there in here.parents


def _load(args: argparse.Namespace):
    """``(model, task checkpoint or None)``: a checkpoint that records its task (a user's task,
    registered by a module of ``--import``) loads with it; anything else as the study's model."""
    from perm_circuits.models import load_any
    from perm_circuits.tasks.checkpoint import load_task_checkpoint, task_record

    _import_modules(args.imports)
    if task_record(args.model) is not None:
        checkpoint = load_task_checkpoint(args.model, device=args.device)
        return checkpoint.model, checkpoint
    return load_any(args.model, device=args.device), None


def _evaluate(args: argparse.Namespace) -> int:
    from perm_circuits.evaluate import evaluate, recall_generalisation

    model, checkpoint = _load(args)
    on_task = {} if checkpoint is None else {"task": checkpoint.task, "forward": checkpoint.forward}  # its own metrics
    result = evaluate(model, n=args.samples, seed=args.seed, **on_task)
    if args.json:
        from perm_circuits._util import json_safe

        print(json.dumps(json_safe(result.summary()), indent=2, allow_nan=False))
        return 0
    print(result)
    if checkpoint is not None:  # a task's checkpoint: its metrics are the whole result
        return 0
    general = recall_generalisation(model)  # the study's models: also recall beyond x1
    cells = ", ".join(f"x{k}: {100 * a:.1f}%" for k, a in enumerate(general.recall, start=1))
    print(f"\nRecall generalisation (last query repeats x_k): {cells}")
    return 0


def _discover(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_new_file

    if args.out is not None and args.out.suffix.lower() not in (".svg", ".html"):
        raise ValueError(f"--out must end in .svg or .html, got {str(args.out)!r}")
    out = args.out or Path(f"circuit_{Path(args.model).name}_{args.method}_{args.how}.svg")
    check_new_file(out, force=args.force)  # before the discovery's work

    from perm_circuits.discovery import discover, get_method
    from perm_circuits.views.circuit_graph import circuit_graph

    _import_modules(args.imports)  # a module may register a method
    get_method(args.method)  # an unknown method is refused before the model loads
    model, checkpoint = _load(args)
    task = checkpoint.task if checkpoint is not None else None
    result = discover(model, method=args.method, how=args.how, task=task, n=args.samples, seed=args.seed)
    print(f"{args.model}: {result.method} under {result.how} ablation, {result.n_edges} of {len(result.scores)} edges, "
          f"faithfulness {result.faithfulness:.3f} ({result.wall_time:.2f} s, {result.n_forward} forward passes)")
    if result.nothing_to_explain:
        print("  nothing to explain: the full and the fully ablated model have the same metric (empty circuit)")
    for edge in result.ranking():
        if edge in result.circuit:
            flag = "  (rounding level)" if edge in result.rounding_level else ""
            print(f"  {edge:<22} {result.scores[edge]:+.4f}{flag}")
    if result.rounding_level:
        from perm_circuits.discovery.result import ROUNDING_LEVEL

        print(f"  {len(result.rounding_level)} of {len(result.scores)} scores are at rounding level (|score| < "
              f"{ROUNDING_LEVEL:g} x the metric's total change): their order is float noise")
    picture = circuit_graph(result, title=f"{args.model}: {result.method} circuit ({result.how} ablation)")
    print(picture.save(out))
    return 0


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    import torch

    out = {name: version(name) for name in ("perm_circuits", "torch", "transformer-lens")}
    # bit-identity holds per torch build AND CPU kernel set (AVX2 vs AVX512 round softmax differently)
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


def _info(args: argparse.Namespace) -> int:
    from perm_circuits.models import PRESETS, PRETRAINED_DIR, describe, list_pretrained, load_checkpoint

    print(", ".join(f"{name} {v}" for name, v in _versions().items()))
    print("presets: " + ", ".join(f"{n} ({c.d_model}d, {c.n_heads}h)" for n, c in PRESETS.items()))
    for name in list_pretrained():
        checkpoint = load_checkpoint(PRETRAINED_DIR / name)
        metrics = checkpoint.metadata.get("metrics", {})
        shape = describe(checkpoint.model).partition(": ")[2]  # describe names the shape (d16h1l2), not the shipped name
        print(
            f"pretrained {name}: {shape}; seed {checkpoint.metadata.get('seed')}, "
            f"repeat_ratio {checkpoint.task_config.repeat_ratio}, "
            f"elimination {metrics.get('elimination_accuracy', float('nan')):.4f}, "
            f"recall {metrics.get('recall_accuracy', float('nan')):.4f}"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_writable

    check_writable(args.out, folder=True)  # before loading or computing anything

    from perm_circuits.reports import write_report
    from perm_circuits.tasks.checkpoint import load_task_checkpoint, task_record
    from perm_circuits.views.report import check_out

    check_out(args.out, args.force)
    _import_modules(args.imports)
    on_tasks = [item for item in args.models if task_record(item) is not None]
    loaded = [(item, load_task_checkpoint(item, device=args.device)) for item in on_tasks]  # every error before writing
    study = [item for item in args.models if item not in on_tasks]
    paths = []
    if study:
        paths = write_report(study, args.out, n=args.samples or 5000, progress=not args.quiet, force=args.force,
                             device=args.device)
    if loaded:
        from perm_circuits.reports import task_report

        taken = {path.stem.lower() for path in paths}
        for item, checkpoint in loaded:
            name = Path(item).resolve().name
            base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".-") or "model"
            stem, k = base, 2
            while stem.lower() in taken:
                stem, k = f"{base}-{k}", k + 1
            taken.add(stem.lower())
            paths.append(task_report(checkpoint.model, checkpoint.task, args.out, n=args.samples or 500,
                                     forward=checkpoint.forward, title=f"{name} on {checkpoint.task.name}",
                                     force=args.force, page=stem))
    for path in paths:
        print(path)
    return 0


def _import_modules(modules: list[str]) -> None:
    """Import each module (a name, the current folder on the path, or a .py file), e.g. a task file
    whose register_task line must run."""
    from perm_circuits.tasks.base import import_module_or_file

    for module in modules:
        try:
            import_module_or_file(module)
        except ValueError as error:
            raise ValueError(f"--import {module}: {error}") from None


def _sweep(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_folder
    from perm_circuits.sweep.store import SWEEP_KIND, holds_sweep_rows

    if args.address is not None:
        if args.backend != "ray":
            raise ValueError(f"--address is for --backend ray only (--backend {args.backend})")
        from perm_circuits.ray_address import check_ray_address

        check_ray_address(args.address)  # within seconds, before anything is written
    check_folder(args.out, SWEEP_KIND, force=args.force, owned=holds_sweep_rows)  # before importing the user's modules

    from perm_circuits.sweep import load_sweep, run_sweep, summary_table

    _import_modules(args.imports)
    result = run_sweep(args.spec, args.out, backend=args.backend, workers=args.workers, address=args.address,
                       keep_models=args.keep_models, retry_failed=args.retry_failed, progress=not args.quiet,
                       trainer=args.trainer, force=args.force)
    table = summary_table(load_sweep(args.out))
    print(f"{result.n_runs} runs in the spec: {result.n_skipped} already stored, {len(result.done)} done now, "
          f"{len(result.failed)} failed now ({args.out})")
    if not table.empty:
        print(table.to_markdown(index=False, floatfmt="g"))
    return 1 if result.failed else 0


def _sweep_reanalyse(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_writable
    from perm_circuits.sweep import reanalyse_sweep

    if not args.sweep_dir.is_dir():
        raise ValueError(f"DIR {str(args.sweep_dir)!r} is not a sweep folder (no such folder)")
    check_writable(args.sweep_dir, label="DIR", folder=True)
    done = reanalyse_sweep(args.sweep_dir, progress=not args.quiet)
    print(f"re-analysed {len(done)} runs in {args.sweep_dir}")
    return 0


def _sweep_report(args: argparse.Namespace) -> int:
    from perm_circuits.outputs import check_writable

    check_writable(args.out)  # then the page's own checks (.html, exists, plotly.js beside it) before any reading

    from perm_circuits.views.sweep_report import write_sweep_report

    print(write_sweep_report(args.sweep_dir, args.out, force=args.force, title=args.title))
    return 0


COMMANDS = {"train": _train, "evaluate": _evaluate, "info": _info, "report": _report, "sweep": _sweep,
            "sweep-reanalyse": _sweep_reanalyse, "sweep-report": _sweep_report, "discover": _discover,
            "reproduce": _reproduce}


USER_ERRORS = (ValueError, TypeError, OSError, ImportError, RecursionError)
"""Errors a user can cause and fix (bad values, paths, files, a full disk, nested JSON): exit 2."""


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if isinstance(error, (ValueError, TypeError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _silence_stdout() -> None:
    """After a BrokenPipeError: point stdout at /dev/null, so the interpreter's last flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (captured): nothing to silence
        pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = [a for a in argv if a != "--debug"]  # the command line, recorded in a trained checkpoint's metadata
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:  # | head closed stdout: stop quietly, as Unix tools do
        _silence_stdout()
        return 141
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"perm-circuits {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every error ends in one line (--debug: the traceback)
        if debug:
            raise
        if isinstance(error, USER_ERRORS):
            print(f"perm-circuits {args.command}: error: {_one_line(error)}", file=sys.stderr)
            return 2
        print(f"perm-circuits {args.command}: error: {_one_line(error)} (an unexpected error: run with --debug "
              "for the traceback, and report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
