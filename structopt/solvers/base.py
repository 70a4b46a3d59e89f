"""What every solver shares: the option declarations, the Result type, the trace, the stopping rule, the run loop.

Calling convention: ``solver(problem, **options) -> Result(w, trace)``. The trace is a list of
dict records, one per evaluation, with keys ``passes`` (effective passes over the data: oracle
calls / n), ``oracle_calls``, ``time`` (seconds of optimisation, evaluations excluded), ``primal``
(the non-smooth F(w) of :meth:`SSVMProblem.primal`, for every solver), and ``dual``/``gap`` where
the method has them, plus whatever the user's callback returns.

Options are data. The options every solver takes, with one meaning everywhere, are the fields of
:class:`RunOptions` (:data:`COMMON_OPTIONS` maps their names to their checks); a method's own options are
the fields of its frozen dataclass (``name: Annotated[type, check] = default``). :func:`solver` turns the
two into the public keyword signature, the docstring's Parameters and the checks of every call, and hands
the solver function the two objects; the function builds its :class:`Method` from them and calls
:func:`run`, whose :class:`Monitor` records the trace and applies the one :class:`StoppingRule`, while a
:class:`~structopt.solvers._checkpoints.Checkpoints` object saves and resumes.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.options import (  # noqa: F401  (re-exported: each solver module imports its checks from here)
    array_option,
    at_least,
    boolean,
    callable_option,
    non_negative,
    non_negative_int,
    one_of,
    open_unit,
    optional,
    path_option,
    positive,
    positive_int,
    random_state_option,
)
from structopt.parallel import executor_scope
from structopt.registry import Registry
from structopt.solvers._checkpoints import (  # noqa: F401  (re-exported)
    CHECKPOINT_FORMAT,
    Checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from structopt.solvers._options import (  # noqa: F401  (re-exported)
    COMMON,
    Check,
    Option,
    Options,
    RunOptions,
    _docstring_options,
    check_values,
    compose_docstring,
    declared_options,
    public_signature,
)

#: the options every solver takes (the fields of :class:`RunOptions`), with their checks
COMMON_OPTIONS: dict[str, Check] = {name: option.check for name, option in COMMON.items()}


def _load_solvers() -> None:
    import structopt.solvers  # noqa: F401  (its modules' @solver declarations fill SOLVERS)


#: every solver by name: the name of its ``@solver`` declaration, its function's own name and its aliases, in
#: declaration order (the order of the imports in :mod:`structopt.solvers`, then module names)
SOLVERS: Registry[Callable[..., Any]] = Registry("solver", load=_load_solvers,
                                                 unknown="unknown {kind} {name!r}; choose from {names}",
                                                 sort_names=True)


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


def solver(name: str, options: type[Options] | None = None, *, without: tuple[str, ...] = (),
           needs: tuple[Need, ...] = (), aliases: tuple[str, ...] = ()) -> Callable:
    """Declare a solver: its options are ``options`` (the method's own dataclass) and :class:`RunOptions`.

    The decorated function is ``function(problem, options, run_options, executor) -> Result``: ``options``
    an instance of the method's class, ``run_options`` a :class:`RunOptions`, ``executor`` the opened
    :class:`~structopt.parallel.Executor` (None when the solver takes no ``executor``). The declaration
    returns the public solver ``solver(problem, *, max_passes, <own options>, <other common options>)``:

    - its signature (``inspect.signature``, ``help``) shows every keyword with its type and default; the
      common options are those of :class:`RunOptions` less ``without``;
    - its docstring is the function's, whose Parameters gain the own options' entries (from their class's
      docstring) and the common ones (see :func:`~structopt.solvers._options.compose_docstring`);
    - each call refuses unknown keywords in one line listing the valid ones, checks every value with its
      declared check (:class:`InvalidInputError` naming ``"{name}: {option}"``) and, for each of ``needs``,
      refuses a problem lacking the oracle (:class:`NotSupportedError` naming the solver, the option and the
      problem), all before any work; the executor is opened for the run and closed after.

    At import, an option without a check or a default, or missing from its class's docstring, is a
    ``TypeError``. ``solver.options`` maps each name to its :class:`Option`, ``solver.needs`` lists the
    needs, ``solver.options_type`` is the method's class. The solver joins :data:`SOLVERS` as ``name``,
    its function's own name and ``aliases`` (short names, ``"fw"`` for ``"frank_wolfe"``).
    """
    unknown = sorted(set(without) - set(COMMON))
    if unknown or "max_passes" in without:
        raise TypeError(f"{name}: without= names {', '.join(unknown) or 'max_passes'}, not an optional common option")

    def wrap(function: Callable) -> Callable:
        own = {} if options is None else declared_options(name, options)
        clash = sorted(set(own) & set(COMMON))
        if clash:
            raise TypeError(f"{name}: {', '.join(clash)} is a common option; it is declared by RunOptions")
        common = [key for key in COMMON if key not in without]
        declared = {"max_passes": COMMON["max_passes"], **own,
                    **{key: COMMON[key] for key in common if key != "max_passes"}}
        accepted = list(declared)
        opens_executor = "executor" in declared

        @functools.wraps(function)
        def call(problem, **given):
            unknown = sorted(set(given) - set(declared))
            if unknown:
                raise InvalidInputError(f"{name} got unknown option(s) {', '.join(unknown)}; it accepts "
                                        f"{', '.join(accepted)}")
            values = {key: given[key] if key in given else option.default for key, option in declared.items()}
            check_values(name, declared, values)
            for need in needs:
                if need.when(values) and _has_oracle(problem, need.oracle) is False:
                    why = problem.missing_oracle(need.oracle) if hasattr(problem, "missing_oracle") else None
                    raise NotSupportedError(f"{name} with {need.because} needs a {need.oracle} oracle, which "
                                            f"the structure of {problem!r} does not have"
                                            + (f": {why}" if why else ""))
            method_options = None if options is None else options(**{key: values[key] for key in own})
            run_options = RunOptions(**{key: values[key] for key in common})
            try:
                if not opens_executor:
                    return function(problem, method_options, run_options, None)
                with executor_scope(problem, run_options.executor, run_options.n_workers) as executor:
                    return function(problem, method_options, run_options, executor)
            except FinishedRun as finished:  # resumed from a run that already met this call's budget
                return finished.result

        call.__signature__ = public_signature(function, declared, Result)
        call.__annotations__ = {key: parameter.annotation for key, parameter in call.__signature__.parameters.items()
                                if parameter.annotation is not inspect.Parameter.empty} | {"return": Result}
        call.__doc__ = compose_docstring(name, function, options, common)
        del call.__wrapped__  # the public signature is the declared one, not the function's
        call.solver_name = name
        hint = call.__signature__.parameters["problem"].annotation  # resolved by public_signature
        call.problem_type = None if hint is inspect.Parameter.empty else hint  # None: no annotation, any problem
        call.options = declared
        call.options_type = options
        call.needs = needs
        call.aliases = aliases
        for each in dict.fromkeys((name, function.__name__, *aliases)):
            SOLVERS.add(each, call)
        return call
    return wrap


def takes(solver: Callable, problem_type: type) -> bool:
    """Whether ``solver`` (a declared solver) takes a ``problem_type``: its declared problem type (the annotation
    of its ``problem``, recorded by :func:`solver` as ``solver.problem_type``) is ``problem_type`` or a base of it.

    The convex solvers declare :class:`~structopt.problem.SSVMProblem`; the non-convex ones
    :class:`~structopt.nonconvex.NonconvexProblem`, which a plain convex problem is not.
    """
    declared = getattr(solver, "problem_type", None)
    return declared is None or (isinstance(declared, type) and issubclass(problem_type, declared))


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




class FinishedRun(Exception):
    """Raised by :func:`run` when the resumed checkpoint already meets this call's stopping rule;
    the ``@solver`` declaration returns its ``result`` unchanged."""

    def __init__(self, result: Result):
        super().__init__(result.info.get("stop_reason", "finished"))
        self.result = result


# --------------------------------------------------------------------------- a run
class StoppingRule:
    """The one stopping rule: a run stops at the first evaluation that meets one of ``run_options``' ``tol``,
    ``max_passes`` and ``time_limit``, or ``rel_tol``.

    ``rel_tol`` (no solver option: the regularisation path sets it) stops once
    ``gap <= rel_tol * max(primal, 0)``, a certified relative accuracy.
    """

    def __init__(self, run_options: RunOptions, rel_tol: float = 0.0):
        self.max_passes = float(run_options.max_passes)
        self.tol, self.rel_tol, self.time_limit = float(run_options.tol), float(rel_tol), run_options.time_limit

    def step_budget(self, n: int) -> int:
        """Steps of one example each that make ``max_passes`` passes: ``ceil(max_passes * n)``."""
        return max(1, math.ceil(self.max_passes * n - 1e-9 * n))

    def reached(self, passes: float) -> bool:
        """Whether ``passes`` meets the budget."""
        return passes >= self.max_passes - 1e-9

    def reason(self, passes: float, gap: float | None, elapsed: float, primal: float | None = None) -> str:
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


class _Progress:
    """The run's progress bar (tqdm), created when first shown: after any kernel loading."""

    def __init__(self, total: float, label: str, enabled: bool):
        self.total, self._bar = total, None
        self._options = {"total": total, "desc": label, "unit": "pass", "leave": False, "disable": not enabled,
                         "bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n:.4g}/{total:g} passes "
                                       "[{elapsed}<{remaining}{postfix}]"}

    def bar(self) -> Any:
        if self._bar is None:
            if self._options["disable"]:
                self._bar = _NoBar()  # tqdm.auto costs ~45 ms of import for a bar nobody sees
            else:
                from tqdm.auto import tqdm

                self._bar = tqdm(**self._options)
        return self._bar

    def show(self, passes: float, postfix: dict[str, str] | None = None) -> None:
        bar = self.bar()
        if postfix is not None:
            bar.set_postfix(postfix, refresh=False)
        bar.update(max(0.0, min(passes, self.total) - bar.n))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


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


class Monitor:
    """The trace of one solver run, its clock, the stopping rule's verdict and the progress bar.

    Parameters
    ----------
    solver_name : str
        Named in the error of a run that makes no progress.
    run_options : RunOptions
        ``max_passes``, ``tol`` and ``time_limit`` make the :class:`StoppingRule`; ``callback`` and
        ``progress`` are read here.
    checkpoints : Checkpoints, optional
        Saves the state of the records it says are due (none without).
    rel_tol : float
        The rule's relative gap (see :class:`StoppingRule`).
    label : str, optional
        Progress-bar label (default ``solver_name``).
    """

    def __init__(self, solver_name: str, run_options: RunOptions, checkpoints: Checkpoints | None = None, *,
                 rel_tol: float = 0.0, label: str | None = None):
        self.solver_name = solver_name
        self.rule = StoppingRule(run_options, rel_tol)
        self.callback = run_options.callback
        self.checkpoints = checkpoints
        self.trace: list[dict[str, Any]] = []
        self.elapsed = 0.0  # optimisation time only
        self._started = time.perf_counter()
        self.progress = _Progress(self.rule.max_passes, label or solver_name, run_options.progress)
        self.stop_reason = ""

    # ----- budget
    def step_budget(self, n: int) -> int:
        """Steps of one example each that make ``max_passes`` passes: ``ceil(max_passes * n)``."""
        return self.rule.step_budget(n)

    def reached(self, passes: float) -> bool:
        """Whether ``passes`` meets the budget (the stopping rule of every solver)."""
        return self.rule.reached(passes)

    def take_over(self, trace: list[dict[str, Any]]) -> str:
        """Continue the trace of a resumed run; return why it already stops ("" if it goes on)."""
        self.trace = list(trace)
        if not self.trace:
            return ""
        last = self.trace[-1]
        reason = self.rule.reason(last["passes"], last.get("gap"), last["time"], last["primal"])
        if not reason:
            self.elapsed = last["time"]
            self.progress.show(last["passes"])
        return reason

    # ----- clock
    def pause(self) -> None:
        """Stop the optimisation clock (call before evaluation work)."""
        self.elapsed += time.perf_counter() - self._started

    def restart(self) -> None:
        """Restart the optimisation clock (call after evaluation work)."""
        self.progress.bar()
        self._started = time.perf_counter()

    def time(self) -> float:
        """Optimisation seconds so far (the clock must be running)."""
        return self.elapsed + time.perf_counter() - self._started

    # ----- records
    def record(self, w: np.ndarray, *, passes: float, oracle_calls: int, primal: float,
               dual: float | None = None, gap: float | None = None, state: Any = None,
               **extra: Any) -> bool:
        """Append a trace record (clock paused by the caller); return True when the run must stop.

        ``state`` is what a resume needs; it is checkpointed when the checkpoints say so (every
        ``checkpoint_every`` passes and when the run stops).
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
        self.progress.show(passes, postfix)
        self.stop_reason = self.rule.reason(passes, gap, self.elapsed, primal)
        if not self.stop_reason and previous is not None and passes <= previous:
            raise RuntimeError(f"{self.solver_name} made no progress between two evaluations "
                               f"(passes {previous:g} -> {passes:g}); this is a bug, please report it")
        if state is not None and self.checkpoints is not None and self.checkpoints.due(passes, bool(self.stop_reason)):
            self.checkpoints.save(passes, state, self.trace, w)
        return bool(self.stop_reason)

    def close(self) -> None:
        self.progress.close()


class Method:
    """One solver on the shared run loop (:func:`run`): how it starts, steps and evaluates.

    A solver builds one from its two options objects and calls ``run(problem, method)``: ``options``, the
    method's own (an :class:`Options` dataclass, whose :meth:`~Options.trajectory` the checkpoints
    fingerprint), and ``run_options`` (:class:`RunOptions`: the run loop's, and the start point, seed and
    evaluation interval the method reads); ``executor`` runs its batch passes. Its state is a dataclass
    registered with :func:`~structopt.archive.state_type`: the whole of what a resume needs, and the
    checkpoint's payload as it is.
    """

    #: written into checkpoints and checked on resume
    name: str = ""
    #: progress-bar label (default ``name``)
    label: str | None = None
    def __init__(self, problem, options: Options | None, run_options: RunOptions, executor=None):
        self.problem, self.options, self.run_options, self.executor = problem, options, run_options, executor

    def trajectory(self) -> dict[str, Any]:
        """The options that decide the iterates (fingerprinted): the own options' :meth:`~Options.trajectory`."""
        return {} if self.options is None else self.options.trajectory()

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


def run(problem, method: Method, *, rel_tol: float = 0.0) -> Result:
    """The run loop every solver shares: init or resume, then {advance; evaluate; record} until the rule stops it.

    The checkpoints (:class:`~structopt.solvers._checkpoints.Checkpoints`: ``checkpoint``,
    ``checkpoint_every``, ``resume`` of ``method.run_options``, its trajectory options in the fingerprint)
    are loaded here and saved by :meth:`Monitor.record`, which applies the :class:`StoppingRule`. A resume
    from a run that already met this call's rule raises :class:`FinishedRun` with the saved result.
    """
    run_options = method.run_options
    checkpoints = Checkpoints(problem, method.name, method.trajectory(), run_options.checkpoint,
                              run_options.checkpoint_every, run_options.resume)
    monitor = Monitor(method.name, run_options, checkpoints, rel_tol=rel_tol, label=method.label)
    saved = checkpoints.load()
    if saved is None:
        state = method.init(monitor)
    else:
        finished = monitor.take_over(saved["trace"])
        if finished:
            raise FinishedRun(Result(np.array(saved["w"], dtype=float), monitor.trace, {
                "stop_reason": f"already finished ({finished}) when resumed from {run_options.resume}",
                "resumed_finished": True}))
        if monitor.trace:
            checkpoints.saved_at = monitor.trace[-1]["passes"]
        state = method.resume(saved["state"])
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


__all__ = ["COMMON_OPTIONS", "SOLVERS", "Checkpoints", "FinishedRun", "Method", "Monitor", "Need", "Option", "Options",
           "Result",
           "RunOptions", "StoppingRule", "initial_weights", "load_checkpoint", "make_rng", "refuse_tol", "run",
           "save_checkpoint", "smoothing_needs", "solver"]
