"""What every solver shares: options, the Result type, the trace, stopping rules, progress, checkpoints.

Calling convention: ``solver(problem, **options) -> Result(w, trace)``. The trace is a list of
dict records, one per evaluation, with keys ``passes`` (effective passes over the data: oracle
calls / n), ``oracle_calls``, ``time`` (seconds of optimisation, evaluations excluded), ``primal``
(the non-smooth F(w) of :meth:`SSVMProblem.primal`, for every solver), and ``dual``/``gap`` where
the method has them, plus whatever the user's callback returns.

Options every solver takes, with one meaning everywhere (:data:`COMMON_OPTIONS`):

``max_passes``
    Budget in effective passes. A run stops at the first evaluation where ``passes >= max_passes``;
    step-based methods take exactly ``ceil(max_passes * n)`` steps, epoch-based methods shorten
    their last epoch, so a run overshoots only by its smallest unit of work (e.g. one full-gradient
    snapshot).
``tol``
    Stop once the duality gap is at most ``tol`` (methods with a certificate; ``tol > 0`` is refused
    by the others).
``time_limit``
    Seconds of optimisation (evaluations excluded).
``eval_every``
    Evaluate (primal, and dual/gap where available) every this many passes.
``random_state``
    None, a non-negative int seed, or a ``numpy.random.Generator``.
``w0``
    Starting weights (methods that start from a weight vector).
``progress``, ``callback``
    tqdm progress bar; ``callback(w) -> dict`` merged into each trace record.
``executor``, ``n_workers``
    Where the batch passes run (:mod:`structopt.parallel`): None (serial), ``"processes"``,
    ``"dask"``, a scheduler address or a ``distributed.Client``. The ``@solver`` declaration opens
    it for the run and hands the solver an :class:`~structopt.parallel.Executor`; results match
    the serial run up to the order of floating-point additions.
``checkpoint``, ``checkpoint_every``, ``resume``
    Save the full state to ``checkpoint`` every ``checkpoint_every`` passes (and when the run
    stops); ``resume`` continues from such a file, which must come from the same problem, solver
    and trajectory options (a fingerprint is checked).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.archive import decode, encode, read_archive, write_archive
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fingerprint import digest
from structopt.options import (  # noqa: F401  (re-exported: each solver module imports its checks from here)
    array_option,
    at_least,
    boolean,
    callable_option,
    non_negative,
    one_of,
    open_unit,
    optional,
    path_option,
    positive,
    positive_int,
    random_state_option,
)
from structopt.parallel import executor_option, executor_scope, n_workers_option

CHECKPOINT_FORMAT = 4  # 4: the shared run loop checkpoints typed states (one dataclass per solver)

#: options that do not decide where a resumed run's iterates go — how long it runs, what it reports,
#: and the starting point and seed, whose effect the checkpoint's own state carries: a checkpoint
#: may be resumed with other values of these
RUN_CONTROL = frozenset({"max_passes", "tol", "rel_tol", "time_limit", "eval_every", "progress", "checkpoint",
                         "checkpoint_every", "resume", "callback", "random_state", "w0", "executor",
                         "n_workers"})


#: the options every solver takes, with their validators
COMMON_OPTIONS: dict[str, Callable[[str, Any], None]] = {
    "max_passes": positive, "tol": non_negative, "time_limit": optional(positive), "eval_every": positive,
    "random_state": random_state_option, "w0": array_option, "progress": boolean, "callback": callable_option,
    "checkpoint": path_option, "checkpoint_every": positive, "resume": path_option,
    "executor": executor_option, "n_workers": n_workers_option,
}


Check = Callable[[str, Any], None]


@dataclass(frozen=True)
class Option:
    """One option of a solver, as declared: its name, default and check.

    A solver's own options are declared once, in its signature, as ``name: Annotated[type, check] = default``;
    the common ones (:data:`COMMON_OPTIONS`) take their check from there. ``description`` is the check's
    one-line docstring (what values it accepts).
    """

    name: str
    default: Any
    check: Check
    common: bool

    @property
    def description(self) -> str:
        return " ".join((self.check.__doc__ or "").split())


@dataclass(frozen=True)
class Need:
    """An oracle a solver needs from the problem, and (``because``) the options that make it needed.

    ``when(options)`` says whether a call with these (defaulted, validated) options needs it; checked
    before the run, so a structure lacking the oracle is refused naming the solver and the option.
    """

    oracle: str  # "max_oracle", "topk" or "marginals"
    because: str
    when: Callable[[dict[str, Any]], bool] = lambda options: True


def smoothing_needs(condition: Callable[[dict[str, Any]], bool] = lambda options: True,
                    prefix: str = "") -> tuple[Need, ...]:
    """The oracle of the smoothing ``kind`` (top-K for "topk", marginals for "entropy"), when ``condition``."""
    return (Need("topk", f"{prefix}kind='topk'", lambda o: condition(o) and o["kind"] == "topk"),
            Need("marginals", f"{prefix}kind='entropy'", lambda o: condition(o) and o["kind"] == "entropy"))


def _has_oracle(problem, oracle: str) -> bool | None:
    """Whether ``problem`` has ``oracle`` (None when the problem does not say: the run finds out)."""
    if oracle == "max_oracle":
        return True  # every structure has argmax
    return getattr(problem, f"has_{oracle}", None)


def _docstring_options(doc: str) -> set[str]:
    """Names listed in the Parameters section of a numpy docstring (``a, b : type`` or ``a`` lines)."""
    match = re.search(r"\n([ ]*)Parameters\n[ ]*-+\n(.*?)(?:\n\s*\n[ ]*(?:Returns|Raises|Notes|Examples)\n|\Z)",
                      doc, re.S)
    if match is None:
        return set()
    indent = match.group(1)
    names: set[str] = set()
    for line in match.group(2).splitlines():
        if line.startswith(indent) and not line[len(indent):].startswith(" ") and line.strip():
            names.update(part.strip() for part in line.split(" : ")[0].split(","))
    return names


def _declared_options(name: str, function: Callable) -> dict[str, Option]:
    """The options of a solver function: its signature, each with its check (declared or common)."""
    hints = typing.get_type_hints(function, include_extras=True)
    options: dict[str, Option] = {}
    for key, parameter in inspect.signature(function).parameters.items():
        if key == "problem":
            continue
        checks = [m for m in getattr(hints.get(key), "__metadata__", ()) if callable(m)]
        if checks and key in COMMON_OPTIONS:
            raise TypeError(f"{name}: {key} is a common option; its check is COMMON_OPTIONS'")
        if not checks and key not in COMMON_OPTIONS:
            raise TypeError(f"{name}: option {key} declares no check (annotate it Annotated[type, check])")
        options[key] = Option(key, parameter.default, checks[0] if checks else COMMON_OPTIONS[key], not checks)
    listed = _docstring_options(function.__doc__ or "")
    missing = sorted(set(options) - listed)
    if missing:
        raise TypeError(f"{name}: the docstring's Parameters section does not list {', '.join(missing)}")
    return options


def solver(name: str, *, needs: tuple[Need, ...] = ()) -> Callable:
    """Declare a solver function: its options are its signature, each checked on every call.

    A solver's own options are annotated ``Annotated[type, check]`` (declared once: name, type,
    default and check in one place); the common ones take their check from :data:`COMMON_OPTIONS`.
    At import, an option without a check or missing from the docstring's Parameters section is a
    ``TypeError``. On a call, unknown option names and bad values raise :class:`InvalidInputError`
    naming the option, and an oracle of ``needs`` that the problem lacks raises
    :class:`NotSupportedError` naming the solver, the option and the problem. The function keeps its
    signature; ``function.options`` maps each name to its :class:`Option`, ``function.needs`` lists
    the needs. A solver that accepts ``executor`` receives it opened (an
    :class:`~structopt.parallel.Executor`, serial by default), closed again when the run ends.
    """
    def wrap(function: Callable) -> Callable:
        signature = inspect.signature(function)
        options = _declared_options(name, function)
        accepted = list(options)

        @functools.wraps(function)
        def run(problem, **given):
            unknown = sorted(set(given) - set(accepted))
            if unknown:
                raise InvalidInputError(f"{name} got unknown option(s) {', '.join(unknown)}; it accepts "
                                        f"{', '.join(accepted)}")
            bound = signature.bind(problem, **given)
            bound.apply_defaults()
            for key, option in options.items():
                option.check(f"{name}: {key}", bound.arguments[key])
            for need in needs:
                if need.when(bound.arguments) and _has_oracle(problem, need.oracle) is False:
                    why = problem.missing_oracle(need.oracle) if hasattr(problem, "missing_oracle") else None
                    raise NotSupportedError(f"{name} with {need.because} needs a {need.oracle} oracle, which "
                                            f"the structure of {problem!r} does not have"
                                            + (f": {why}" if why else ""))
            try:
                if "executor" not in accepted:
                    return function(problem, **given)
                with executor_scope(problem, bound.arguments["executor"],
                                    bound.arguments.get("n_workers")) as executor:
                    return function(problem, **{**given, "executor": executor})
            except FinishedRun as finished:  # resumed from a run that already met this call's budget
                return finished.result

        run.solver_name = name
        run.options = options
        run.needs = needs
        return run
    return wrap


def trajectory_options(solver_name: str, values: dict[str, Any]) -> dict[str, Any]:
    """The options of a call that decide the iterates (all but :data:`RUN_CONTROL` and the problem)."""
    return {"solver": solver_name,
            **{k: v for k, v in values.items() if k not in RUN_CONTROL and k != "problem"}}


@dataclass
class Result:
    """Outcome of a solver run.

    Attributes
    ----------
    w : ndarray
        The returned weights (the averaged iterate when the method averages).
    trace : list of dict
        One record per evaluation (see module docstring).
    info : dict
        Method-specific extras (e.g. the final dual variables' summary, stop reason).
    """

    w: np.ndarray
    trace: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- checkpoints
def _refs(problem) -> dict[str, Any]:
    """Objects a solver state may point at, stored by name (never by value) in checkpoints."""
    return {"problem": problem}


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any], problem=None) -> int:
    """Atomically write a checkpoint; return its size in bytes.

    The file is a sealed :mod:`structopt.archive` (numpy arrays and JSON under a SHA-256; no pickle).
    ``payload`` holds ``solver``, ``fingerprint``, ``state``, ``trace`` and ``w`` (the weights the
    last record reported); references to ``problem`` and its model inside the state are stored by
    name. A kill at any moment leaves either the previous checkpoint or the new one.
    """
    data, arrays = encode({key: value for key, value in payload.items() if key not in ("solver", "fingerprint")},
                          _refs(problem))
    meta = {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": payload["solver"],
            "fingerprint": payload["fingerprint"], "payload": data}
    return write_archive(path, meta, arrays, "checkpoint")


def load_checkpoint(path: str | os.PathLike, solver_name: str, fingerprint: dict[str, str] | None = None,
                    problem=None) -> dict:
    """Read a checkpoint and check that it belongs to ``solver_name`` and to ``fingerprint``.

    The whole file's checksum is verified before anything in it is parsed, and nothing in it is
    unpickled or executed.

    Raises
    ------
    InvalidInputError
        One line naming the file: it is missing, a directory, truncated or corrupted (checksum),
        in the old pickle format, written by another solver or format version, or from a different
        problem or other trajectory options (the message names the components that differ).
    """
    meta, arrays = read_archive(path, "checkpoint")
    if meta.get("kind") != "structopt checkpoint":
        raise InvalidInputError(f"checkpoint {path} is not a structopt checkpoint")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInputError(f"checkpoint {path} has format {meta.get('format')}; this version reads "
                                f"format {CHECKPOINT_FORMAT}")
    if meta.get("solver") != solver_name:
        raise InvalidInputError(f"checkpoint {path} was written by {meta.get('solver')}, not {solver_name}")
    if fingerprint is not None:
        saved = meta.get("fingerprint", {})
        differ = sorted(key for key in set(saved) | set(fingerprint) if saved.get(key) != fingerprint.get(key))
        if differ:
            raise InvalidInputError(
                f"checkpoint {path} belongs to another run: its {', '.join(differ)} "
                f"{'differ' if len(differ) > 1 else 'differs'} from this one's "
                "(resume needs the same data, labels, loss, lam, model and solver options; max_passes, tol, "
                "time_limit and the evaluation/checkpoint intervals may change)")
    try:
        payload = decode(meta["payload"], arrays, _refs(problem))
        if not isinstance(payload, dict) or not isinstance(payload.get("trace"), list) or "state" not in payload:
            raise KeyError("payload")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise InvalidInputError(f"checkpoint {path} is malformed ({type(error).__name__}: {error})") from None
    return {"solver": meta["solver"], "fingerprint": meta.get("fingerprint"), **payload}


class FinishedRun(Exception):
    """Raised by :meth:`Monitor.load` when the checkpoint already meets this call's stopping rule;
    the ``@solver`` declaration returns its ``result`` unchanged."""

    def __init__(self, result: Result):
        super().__init__(result.info.get("stop_reason", "finished"))
        self.result = result


# --------------------------------------------------------------------------- a run
class Monitor:
    """Trace recording, the stopping rule, progress bar and checkpoints of one solver run.

    Parameters
    ----------
    problem : SSVMProblem
    solver_name : str
        Written into checkpoints and checked on resume.
    options : dict
        The call's options (``locals()`` of the solver is fine): the run-control ones are read here,
        the others enter the checkpoint fingerprint. Besides the common ones, ``rel_tol`` (default 0,
        no solver option: callers such as the regularisation path set it) stops a run once
        ``gap <= rel_tol * max(primal, 0)``, a certified relative accuracy.
    label : str, optional
        Progress-bar label (default ``solver_name``).
    """

    def __init__(self, problem, solver_name: str, options: dict[str, Any], label: str | None = None):
        self.problem = problem
        self.solver_name = solver_name
        self.max_passes = float(options["max_passes"])
        self.tol = float(options.get("tol", 0.0))
        self.rel_tol = float(options.get("rel_tol", 0.0))
        self.time_limit = options.get("time_limit")
        self.callback = options.get("callback")
        self.checkpoint = options.get("checkpoint")
        self.checkpoint_every = float(options.get("checkpoint_every", 1.0))
        self._resume_path = options.get("resume")
        self._options = trajectory_options(solver_name, options)
        self._fingerprint: dict[str, str] | None = None
        self._saved_at = -math.inf
        self.trace: list[dict[str, Any]] = []
        self.elapsed = 0.0  # optimisation time only
        self._started = time.perf_counter()
        self._bar_options = {"total": self.max_passes, "desc": label or solver_name, "unit": "pass", "leave": False,
                             "disable": not options.get("progress", False),
                             "bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n:.4g}/{total:g} passes "
                                           "[{elapsed}<{remaining}{postfix}]"}
        self._bar: Any = None  # a tqdm bar, created when the optimisation starts (after any kernel loading)
        self.stop_reason = ""

    # ----- budget and fingerprint
    def step_budget(self, n: int) -> int:
        """Steps of one example each that make ``max_passes`` passes: ``ceil(max_passes * n)``."""
        return max(1, math.ceil(self.max_passes * n - 1e-9 * n))

    def reached(self, passes: float) -> bool:
        """Whether ``passes`` meets the budget (the stopping rule of every solver)."""
        return passes >= self.max_passes - 1e-9

    def fingerprint(self) -> dict[str, str]:
        """Digests of the problem and the trajectory options (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = {**self.problem.fingerprint(), "solver options": digest(self._options)}
        return self._fingerprint

    def load(self) -> dict[str, Any] | None:
        """The saved state to resume from (``resume`` option), its trace taken over; None without one."""
        if self._resume_path is None:
            return None
        payload = load_checkpoint(self._resume_path, self.solver_name, self.fingerprint(), self.problem)
        self.trace = list(payload["trace"])
        if self.trace:
            last = self.trace[-1]
            reason = self._stop_reason(last["passes"], last.get("gap"), last["time"], last["primal"])
            if reason:
                raise FinishedRun(Result(np.array(payload["w"], dtype=float), self.trace, {
                    "stop_reason": f"already finished ({reason}) when resumed from {self._resume_path}",
                    "resumed_finished": True}))
            self.elapsed = self.trace[-1]["time"]
            self._saved_at = self.trace[-1]["passes"]
            self._progress().update(self.trace[-1]["passes"])
        return payload["state"]

    # ----- clock
    def pause(self) -> None:
        """Stop the optimisation clock (call before evaluation work)."""
        self.elapsed += time.perf_counter() - self._started

    def restart(self) -> None:
        """Restart the optimisation clock (call after evaluation work)."""
        self._progress()
        self._started = time.perf_counter()

    def time(self) -> float:
        """Optimisation seconds so far (the clock must be running)."""
        return self.elapsed + time.perf_counter() - self._started

    # ----- records
    def record(self, w: np.ndarray, *, passes: float, oracle_calls: int, primal: float,
               dual: float | None = None, gap: float | None = None, state: dict | None = None,
               **extra: Any) -> bool:
        """Append a trace record (clock paused by the caller); return True when the run must stop.

        ``state`` is what a resume needs; it is checkpointed every ``checkpoint_every`` passes and
        when the run stops.
        """
        previous = self.trace[-1]["passes"] if self.trace else None
        entry: dict[str, Any] = {"passes": float(passes), "oracle_calls": int(oracle_calls),
                                 "time": float(self.elapsed), "primal": float(primal)}
        if dual is not None:
            entry["dual"] = float(dual)
        if gap is not None:
            entry["gap"] = float(gap)
        entry.update({key: float(value) if isinstance(value, np.floating) else value for key, value in extra.items()})
        if self.callback is not None:
            entry.update(self.callback(w) or {})
        self.trace.append(entry)
        postfix = {"primal": f"{primal:.5g}"}
        if gap is not None:
            postfix["gap"] = f"{gap:.3g}"
        bar = self._progress()
        bar.set_postfix(postfix, refresh=False)
        bar.update(max(0.0, min(passes, self.max_passes) - bar.n))
        self.stop_reason = self._stop_reason(passes, gap, self.elapsed, primal)
        if not self.stop_reason and previous is not None and passes <= previous:
            raise RuntimeError(f"{self.solver_name} made no progress between two evaluations "
                               f"(passes {previous:g} -> {passes:g}); this is a bug, please report it")
        if self.checkpoint is not None and state is not None and (
                self.stop_reason or passes >= self._saved_at + self.checkpoint_every - 1e-9):
            save_checkpoint(self.checkpoint, {"solver": self.solver_name, "fingerprint": self.fingerprint(),
                                              "state": state, "trace": self.trace, "w": np.asarray(w)},
                            self.problem)
            self._saved_at = passes
        return bool(self.stop_reason)

    def _stop_reason(self, passes: float, gap: float | None, elapsed: float, primal: float | None = None) -> str:
        """Why a run whose last evaluation is at ``passes`` (``gap``, ``elapsed`` seconds, ``primal``) stops;
        "" if not."""
        if gap is not None and gap <= self.tol:
            return f"gap {gap:.3g} <= tol {self.tol:g}"
        if gap is not None and self.rel_tol > 0 and primal is not None and gap <= self.rel_tol * max(primal, 0.0):
            return f"gap {gap:.3g} <= rel_tol {self.rel_tol:g} x primal {primal:.6g}"
        if self.reached(passes):
            return f"reached max_passes={self.max_passes:g}"
        if self.time_limit is not None and elapsed >= self.time_limit:
            return f"reached time_limit={self.time_limit:g}s"
        return ""

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def _progress(self) -> Any:
        if self._bar is None:
            if self._bar_options["disable"]:
                self._bar = _NoBar()  # tqdm.auto costs ~45 ms of import for a bar nobody sees
            else:
                from tqdm.auto import tqdm

                self._bar = tqdm(**self._bar_options)
        return self._bar


class _NoBar:
    """What the monitor asks of a progress bar, doing nothing (``progress=False``)."""

    def __init__(self) -> None:
        self.n = 0.0

    def update(self, amount: float) -> None:
        self.n += amount

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


class Method:
    """One solver on the shared run loop (:func:`run`): how it starts, steps and evaluates.

    A solver builds one from its (validated) options and calls ``run(problem, method, options)``.
    Its state is a dataclass registered with :func:`~structopt.archive.state_type`: the whole of what a
    resume needs, and the checkpoint's payload as it is.
    """

    #: written into checkpoints and checked on resume
    name: str = ""
    #: progress-bar label (default ``name``)
    label: str | None = None

    def init(self, monitor: Monitor) -> Any:
        """A fresh state (the clock is running; a method that records its start point pauses it first)."""
        raise NotImplementedError

    def resume(self, state: Any) -> Any:
        """The state to continue from, given the checkpoint's (default: as it is)."""
        return state

    def warm_up(self, state: Any) -> None:
        """Work before the optimisation clock starts (loading compiled kernels)."""

    def advance(self, state: Any, monitor: Monitor) -> None:
        """Steps until the next evaluation point (``monitor.step_budget`` caps them)."""
        raise NotImplementedError

    def evaluate(self, state: Any) -> tuple[np.ndarray, dict[str, Any]]:
        """The reported weights and the trace record's fields (clock paused; may reject the last steps)."""
        raise NotImplementedError

    def result(self, state: Any, monitor: Monitor) -> Result:
        """The run's result once it stopped."""
        raise NotImplementedError


def run(problem, method: Method, options: dict[str, Any]) -> Result:
    """The run loop every migrated solver shares: init or resume, then {advance; evaluate; record} until stop.

    ``record`` appends the trace, checkpoints ``state`` every ``checkpoint_every`` passes and when the
    run stops, and applies the one stopping rule (:meth:`Monitor._stop_reason`). A resume from a run
    that already met this call's rule raises :class:`FinishedRun` from :meth:`Monitor.load`.
    """
    monitor = Monitor(problem, method.name, options, label=method.label)
    saved = monitor.load()
    state = method.init(monitor) if saved is None else method.resume(saved)
    method.warm_up(state)
    while not monitor.stop_reason:
        monitor.restart()
        method.advance(state, monitor)
        monitor.pause()
        w, fields = method.evaluate(state)
        monitor.record(w, state=state, **fields)
    monitor.close()
    return method.result(state, monitor)


def refuse_tol(solver_name: str, tol: float) -> None:
    """Methods without a duality gap cannot stop on ``tol``: refuse a positive one."""
    if tol > 0:
        raise NotSupportedError(f"{solver_name} has no duality gap, so tol={tol:g} cannot be honoured; "
                                "use bcfw, frank_wolfe or dual_extragradient for a certified stop")


def make_rng(random_state: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed, a Generator, or None."""
    return random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)


def initial_weights(problem, w0: np.ndarray | None) -> np.ndarray:
    """A fresh copy of ``w0`` (checked against the model's layout and constraints) or zeros."""
    if w0 is None:
        return problem.zeros()
    w = np.array(w0, dtype=float, copy=True)
    if w.shape != (problem.n_params,):
        raise InvalidInputError(f"w0 must have shape ({problem.n_params},), got {w.shape}")
    return problem.project_weights(w)
