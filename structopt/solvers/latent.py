"""The latent structural SVM by the concave-convex procedure (Yu & Joachims, ICML 2009).

Outputs are pairs (y, h): the observed part y_i of each gold output is given, its latent part h_i is not.
With the latent completion oracle of the structure (hook ``complete``: the best output whose observed part
is y_i's), the objective is

``F(w) = lam/2 ||w||^2 + (1/n) sum_i [ max_{(y,h)} (<w, Phi(x_i, y, h)> + Delta(y_i, y))
                                        - max_h <w, Phi(x_i, y_i, h)> ]``,

a difference of convex functions (the first max is the usual loss-augmented decoding, the second the
completion). CCCP: at ``w_t`` impute ``h_i = complete(theta_i(w_t), y_i)`` for every example, which makes
the concave part linear and gives a convex structural SVM ``F_t >= F`` with ``F_t(w_t) = F(w_t)`` (the
problem with gold outputs ``(y_i, h_i)``, :meth:`SSVMProblem.with_outputs`), solve it with a convex
solver, and repeat. ``F(w_{t+1}) <= F_t(w_{t+1})``; a step is kept only when ``F_t(w_{t+1}) <= F(w_t)``
(both computed exactly with the oracles), so the objective never increases. A convex step that does not
decrease it was solved too loosely or CCCP has converged: its dual bounds the possible gain,
``F(w_t) - min F_t <= F(w_t) - dual``; below ``tol`` the run stops, else (BCFW) the same convex problem is
solved again from its dual to a ten times smaller relative gap (down to ``MIN_INNER_EPS`` = 1e-6).

Warm starts. BCFW (default) keeps its dual between the convex steps: the dual variables are
distributions over outputs and the loss depends on the observed part only, so the previous step's dual
is feasible for the next problem; its statistics-space summary ``m_i`` and loss shares carry over and
only ``w = sum_i A_i^T (gold_i - m_i) / (lam n)`` is recomputed for the new completions (the dual
restarts from the gold vertices when the loss terms differ, i.e. the loss reads the latent part). Each
convex step stops at a certified relative duality gap (``gap <= inner_eps * primal``) or after
``inner_passes``. The other convex solvers start from the previous ``w`` (``w0``) where they take one
and run ``inner_passes`` passes; their trace's gap is reported where they have one.

Checkpoints. ``checkpoint=PATH`` writes a sealed archive (:mod:`structopt.archive`, no pickle) after every
CCCP step: the accepted weights and objective, the current completions, BCFW's carried dual, the shared
random generator, the trace and the stop reason if any, with a fingerprint of the problem (the initial
completions included) and of the options that shape the path (inner solver and its own options,
``inner_passes``, ``inner_eps``). ``resume=PATH`` continues from it: the same problem and options give the
same trace as an uninterrupted run (times aside); ``max_outer`` and ``tol`` may change; another problem or
other path options are refused naming what differs.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import time
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fingerprint import digest
from structopt.nonconvex import NonconvexProblem
from structopt.options import (
    array_option,
    non_negative,
    open_unit,
    path_option,
    positive,
    positive_int,
    random_state_option,
)
from structopt.parallel import SerialExecutor
from structopt.potentials import unflatten
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState
from structopt.solvers._checkpoints import load_checkpoint, save_checkpoint
from structopt.solvers.base import Result, RunOptions, check_values, initial_weights, make_rng, run, takes
from structopt.solvers.bcfw import BCFWMethod, BCFWOptions


def inner_solvers() -> tuple[str, ...]:
    """The solvers that may solve the CCCP steps, in declaration order: every declared solver that takes a convex
    :class:`SSVMProblem` (its declared problem type, :func:`~structopt.solvers.base.takes`), derived from
    ``SOLVERS``, so that a new convex solver joins by its ``@solver`` declaration. ``INNER_SOLVERS`` is this tuple."""
    from structopt.solvers import SOLVERS

    return tuple(function.solver_name for function in SOLVERS.unique() if takes(function, SSVMProblem))


def __getattr__(name: str) -> Any:
    if name == "INNER_SOLVERS":  # computed on each read: the registry fills as the solver modules are imported
        return inner_solvers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the most accurate relative gap to which latent_ssvm re-solves a convex step that did not decrease the objective
MIN_INNER_EPS = 1e-6

#: inner-solver options latent_ssvm sets per convex step (inner_options may not)
_SET_BY_LATENT = frozenset({"max_passes", "tol", "w0", "random_state", "checkpoint", "checkpoint_every", "resume"})


def _check_inner(inner: Any, inner_options: dict[str, Any]):
    """The inner solver's function, its options checked by its own declarations (before any work)."""
    from structopt.solvers import SOLVERS

    function = SOLVERS.get(inner) if isinstance(inner, str) else None
    if function is None or not takes(function, SSVMProblem):
        raise InvalidInputError(f"latent_ssvm: unknown inner solver {inner!r}; choose from "
                                f"{', '.join(inner_solvers())}")
    taken = sorted(set(inner_options) & _SET_BY_LATENT)
    if taken:
        raise InvalidInputError(f"latent_ssvm: {', '.join(taken)} may not be given: latent_ssvm sets them per convex "
                                "step (see inner_passes, inner_eps, w0, random_state)")
    unknown = sorted(set(inner_options) - set(function.options))
    if unknown:
        raise InvalidInputError(f"latent_ssvm: {function.solver_name} has no option {', '.join(unknown)}; it accepts "
                                f"{', '.join(key for key in function.options if key not in _SET_BY_LATENT)}")
    check_values(f"latent_ssvm (inner {function.solver_name})",
                 {key: function.options[key] for key in inner_options}, inner_options)
    return function


def latent_ssvm(problem: SSVMProblem, inner: str = "bcfw", *, max_outer: int = 20, tol: float = 1e-4,
                inner_passes: float = 50, inner_eps: float = 0.01, w0: np.ndarray | None = None,
                random_state: int | np.random.Generator | None = None, progress: bool = False,
                checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
                **inner_options: Any) -> Result:
    """Train a latent structural SVM by CCCP, a convex solver inside (module docstring).

    Parameters
    ----------
    problem : SSVMProblem
        Its structure declares the latent completion oracle ``complete(theta, y)`` (e.g.
        :class:`~structopt.structures.LatentChain`) and its loss reads the observed part of the outputs only
        (e.g. ``LatentChain.label_loss()``). Its gold outputs ``Y`` carry the initial completions: the first
        convex step trains on them as given unless ``w0`` is given.
    inner : str
        The convex solver of each step (default ``"bcfw"``): one of ``INNER_SOLVERS``, every declared solver
        that takes a convex :class:`SSVMProblem` (:func:`inner_solvers`), short names too.
    max_outer : int
        Largest number of CCCP steps (convex solves).
    tol : float
        Stop once a step decreases the objective by less than ``tol`` (absolute).
    inner_passes : float
        Budget of each convex step, in passes.
    inner_eps : float
        BCFW stops each convex step at the certified relative gap ``gap <= inner_eps * primal``, in (0, 1);
        tightened tenfold for a step that did not decrease the objective (module docstring).
    w0 : ndarray, optional
        Weights of the first imputation (e.g. a seeded random vector to break the symmetry of the sub-states);
        None: the first convex step takes the problem's outputs as the initial completions.
    random_state : int, Generator or None
        Seed of the inner solvers' sampling (one generator for the whole run).
    progress : bool
        One line on stderr per CCCP step.
    checkpoint : str or PathLike, optional
        Write a sealed checkpoint there after every CCCP step (module docstring).
    resume : str or PathLike, optional
        Continue the run saved in this checkpoint (the same problem and path options; a finished run is
        returned as it was, ``info["resumed_finished"]``).
    **inner_options
        Further options of the inner solver (checked by its own declarations; ``max_passes``, ``tol``,
        ``w0``, ``random_state`` and the checkpoint options are set per step and refused here).

    Returns
    -------
    Result
        ``w`` the last accepted weights. ``trace``: one record per CCCP step (and one at ``w0`` when
        given) with ``outer``, ``objective`` (the exact CCCP objective ``F(w_t)``), ``surrogate``
        (``F_{t-1}(w_t)``, the convex step's primal), ``inner_gap`` and ``inner_dual`` (None where the inner
        solver has no gap), ``inner_eps`` (BCFW's relative gap of the step), ``inner_passes``, ``passes`` and
        ``oracle_calls`` (cumulative), ``changed``
        (examples whose completion changed), ``warm`` (``"dual"``, ``"w0"`` or ``"cold"``), ``accepted``
        (False for a step that did not decrease the objective: ``w`` and ``objective`` stay) and ``time``.
        ``info``: ``stop_reason``, ``outputs`` (the last completions), ``problem`` (the last convex problem).

    Raises
    ------
    NotSupportedError
        The structure has no completion oracle, or the problem is non-convex.
    InvalidInputError
        A bad option (named), before any work.
    """
    if isinstance(problem, NonconvexProblem) or not isinstance(problem, SSVMProblem):
        raise NotSupportedError(f"latent_ssvm needs an SSVMProblem (a linear model), got {type(problem).__name__}")
    if not problem.has_completion:
        raise NotSupportedError(f"latent_ssvm needs a structure with the latent completion oracle complete(theta, y) "
                                f"(structopt.hooks.HOOKS); the structure of {problem!r} has none")
    if isinstance(max_outer, (bool, np.bool_)) or not isinstance(max_outer, numbers.Integral):
        raise InvalidInputError(f"latent_ssvm: max_outer must be an integer >= 1, got {max_outer!r}")
    positive_int("latent_ssvm: max_outer", max_outer)
    non_negative("latent_ssvm: tol", tol)
    positive("latent_ssvm: inner_passes", inner_passes)
    open_unit("latent_ssvm: inner_eps", inner_eps)
    array_option("latent_ssvm: w0", w0)
    random_state_option("latent_ssvm: random_state", random_state)
    if not isinstance(progress, (bool, np.bool_)):
        raise InvalidInputError(f"latent_ssvm: progress must be True or False, got {progress!r}")
    path_option("latent_ssvm: checkpoint", checkpoint)
    path_option("latent_ssvm: resume", resume)
    function = _check_inner(inner, inner_options)
    is_bcfw = function.solver_name == "bcfw"
    bcfw_options = None
    if is_bcfw:
        own = {key: value for key, value in inner_options.items() if not function.options[key].common}
        bcfw_options = BCFWOptions(**own)
        bcfw_options.gap_options()  # refuses the combinations that cannot work, before any work
    w = None if w0 is None else initial_weights(problem, w0)
    cccp = _CCCP(problem, function, bcfw_options, dict(inner_options), max_outer, float(tol), float(inner_passes),
                 float(inner_eps), make_rng(random_state), bool(progress), checkpoint)
    return cccp.run(w) if resume is None else cccp.resume(resume)


def _completed(problem: SSVMProblem, w: np.ndarray) -> tuple[SSVMProblem, int]:
    """The convex problem at ``w``: every gold output completed at ``w``; and how many completions changed."""
    outputs = [problem.complete(i, problem.theta(i, w)) for i in range(problem.n)]
    sub = problem.with_outputs(outputs)
    old, offsets = problem.compact_gold_stats(stored=True)
    new, _ = sub.compact_gold_stats(stored=True)
    differs = np.abs(new.astype(np.float64) - old) > 0
    changed = int(np.count_nonzero(np.add.reduceat(differs, offsets[:-1]) if differs.size else differs))
    return sub, changed


def _carried_blocks(blocks: BlockState, sub: SSVMProblem) -> BlockState:
    """BCFW's dual carried into the problem with new completions: the same ``m_i`` and loss shares, with
    ``w = sum_i A_i^T (gold_i - m_i) / (lam n)`` for the new gold statistics; averaging restarts."""
    gold, offsets = sub.compact_gold_stats()
    if not np.array_equal(offsets, blocks.offsets):
        raise RuntimeError("latent_ssvm: the statistics layout changed between convex steps; this is a bug")
    w = sub.zeros()
    scale = 1.0 / (sub.lam * sub.n)
    for i in range(sub.n):
        seg = slice(offsets[i], offsets[i + 1])
        diff = gold[seg] - blocks.m[seg]
        if diff.any():
            sub.adjoint(i, unflatten(diff, sub.like(i)), w, scale)
    return BlockState(w=w, ell=blocks.ell, m=blocks.m, offsets=blocks.offsets, ell_i=blocks.ell_i,
                      r=np.zeros(blocks.m.shape), v=0.0)


class _CCCP:
    """The outer loop: impute, solve the convex step warm-started, check the decrease, record."""

    def __init__(self, problem: SSVMProblem, function, bcfw_options: BCFWOptions | None, inner_options: dict,
                 max_outer: int, tol: float, inner_passes: float, inner_eps: float, rng: np.random.Generator,
                 progress: bool, checkpoint: str | os.PathLike | None = None):
        self.problem, self.function, self.bcfw_options = problem, function, bcfw_options
        self.inner_options, self.max_outer, self.tol = inner_options, max_outer, tol
        self.inner_passes, self.inner_eps, self.rng, self.progress = inner_passes, inner_eps, rng, progress
        self.checkpoint = checkpoint
        self.trace: list[dict[str, Any]] = []
        self.passes, self.oracle_calls, self.elapsed = 0.0, 0, 0.0

    def fingerprint(self) -> dict[str, str]:
        """The problem's digests and those of the options that shape the CCCP path (run control excluded)."""
        own = {key: value for key, value in self.inner_options.items() if not self.function.options[key].common}
        return {**self.problem.fingerprint(),
                "solver options": digest({"solver": "latent_ssvm", "inner": self.function.solver_name, "own": own,
                                          "inner_passes": self.inner_passes, "inner_eps": self.inner_eps})}

    def save(self, outer: int, w, objective, eps: float, blocks, sub: SSVMProblem, stop_reason: str | None) -> None:
        """The checkpoint after step ``outer`` (when one was asked for)."""
        if self.checkpoint is None:
            return
        state = {"outer": outer, "w": None if w is None else np.asarray(w, dtype=float), "objective": objective,
                 "eps": eps, "blocks": blocks, "rng": self.rng, "passes": self.passes,
                 "oracle_calls": self.oracle_calls, "elapsed": self.elapsed, "stop_reason": stop_reason,
                 "outputs": None if sub is self.problem else list(sub.Y)}
        save_checkpoint(self.checkpoint, {"solver": "latent_ssvm", "fingerprint": self.fingerprint(), "state": state,
                                          "trace": self.trace, "w": state["w"] if w is not None else np.zeros(0)})

    def resume(self, path: str | os.PathLike) -> Result:
        """Continue the run saved at ``path`` (checked against this problem and these options)."""
        saved = load_checkpoint(path, "latent_ssvm", self.fingerprint())
        state = saved["state"]
        try:
            self.trace = list(saved["trace"])
            self.rng = state["rng"]
            self.passes, self.oracle_calls, self.elapsed = state["passes"], state["oracle_calls"], state["elapsed"]
            sub = self.problem if state["outputs"] is None else self.problem.with_outputs(state["outputs"])
            args = (state["w"], state["objective"], state["eps"], state["blocks"], sub, int(state["outer"]))
            stop_reason = state["stop_reason"]
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidInputError(f"checkpoint {path} is malformed ({type(error).__name__}: {error})") from None
        if stop_reason is not None:
            return self.result(args[0], sub, stop_reason, resumed_finished=True)
        return self.loop(*args)

    def result(self, w, sub: SSVMProblem, stop_reason: str, **info: Any) -> Result:
        return Result(np.array(w, dtype=float), self.trace,
                      {"stop_reason": stop_reason, "outputs": [sub.complete(i, sub.theta(i, w)) for i in range(sub.n)],
                       "problem": sub, "inner": self.function.solver_name, **info})

    def say(self, text: str) -> None:
        if self.progress:
            print(f"latent_ssvm: {text}", file=sys.stderr, flush=True)

    def solve(self, sub: SSVMProblem, w: np.ndarray | None, blocks: BlockState | None,
              eps: float) -> tuple[Result, str]:
        """One convex step on ``sub``, warm-started; the result and how it was started."""
        if self.bcfw_options is not None:
            common = {key: value for key, value in self.inner_options.items() if self.function.options[key].common}
            run_options = RunOptions(max_passes=self.inner_passes, random_state=self.rng, **common)
            method = BCFWMethod(sub, self.bcfw_options, run_options, SerialExecutor(sub),
                                initial=None if blocks is None else (blocks, None))
            return run(sub, method, rel_tol=eps), "cold" if blocks is None else "dual"
        start = {}
        if w is not None and "w0" in self.function.options:
            start = {"w0": w}
        result = self.function(sub, max_passes=self.inner_passes, random_state=self.rng, **start,
                               **self.inner_options)
        return result, "w0" if start else "cold"

    def record(self, **fields: Any) -> None:
        entry = {"passes": self.passes, "oracle_calls": self.oracle_calls, "time": self.elapsed, **fields}
        self.trace.append(entry)

    def run(self, w: np.ndarray | None) -> Result:
        problem = self.problem
        started = time.perf_counter()
        if w is None:
            sub, objective = problem, None  # the given outputs are the first completions
        else:
            sub, _ = _completed(problem, w)
            objective = sub.primal(w)
            self.elapsed = time.perf_counter() - started
            self.record(outer=0, objective=objective, surrogate=None, inner_gap=None, inner_dual=None,
                        inner_passes=0.0, changed=None, warm=None, accepted=True)
            self.say(f"start: objective {objective:.6g}")
            self.save(0, w, objective, self.inner_eps, None, sub, None)
        return self.loop(w, objective, self.inner_eps, None, sub, 0)

    def loop(self, w: np.ndarray | None, objective: float | None, eps: float, blocks: BlockState | None,
             sub: SSVMProblem, done: int) -> Result:
        """CCCP steps ``done + 1 ..`` from the given state (``eps``: BCFW's relative gap, tightened where a step
        cannot certify a decrease)."""
        stop_reason = f"reached max_outer={self.max_outer}"
        for outer in range(done + 1, self.max_outer + 1):
            clock = time.perf_counter()
            result, warm = self.solve(sub, w, blocks, eps)
            last = result.trace[-1]
            self.passes += float(last["passes"])
            self.oracle_calls += int(last["oracle_calls"])
            candidate = result.w
            surrogate = sub.primal(candidate)  # F_t(w_{t+1}), exact
            inner = {"inner_gap": last.get("gap"), "inner_dual": last.get("dual"),
                     "inner_passes": float(last["passes"]), "warm": warm}
            if objective is not None and surrogate > objective:
                # the convex step did not improve on w_t. Its dual bounds what it could gain: F(w_t) - min F_t <=
                # F(w_t) - dual. Below tol (or without a dual) CCCP has converged; else the same convex problem is
                # solved again from its dual, ten times more accurately.
                self.elapsed += time.perf_counter() - clock
                self.record(outer=outer, objective=objective, surrogate=surrogate, changed=0, accepted=False,
                            inner_eps=eps, **inner)
                possible = None if inner["inner_dual"] is None else objective - inner["inner_dual"]
                if possible is None or possible < self.tol or eps <= MIN_INNER_EPS:
                    stop_reason = ("the convex step did not decrease the objective (F_t(w) "
                                   f"{surrogate:.6g} > F(w_t) {objective:.6g}) and "
                                   + ("the inner solver has no dual bound" if possible is None else
                                      f"at most {max(possible, 0.0):.3g} could be gained: converged"))
                    self.save(outer, w, objective, eps, blocks, sub, stop_reason)
                    break
                eps = max(eps / 10.0, MIN_INNER_EPS)
                blocks = result.info.get("state")
                if blocks is not None:
                    blocks.rescale_restart(1.0)  # the same problem: the dual as it is, averaging afresh
                self.save(outer, w, objective, eps, blocks, sub, None)
                self.say(f"step {outer}: no decrease at inner gap {inner['inner_gap']:.3g}; solving the convex "
                         f"problem again to relative gap {eps:g}")
                continue
            new_sub, changed = _completed(sub, candidate)
            new_objective = new_sub.primal(candidate)  # F(w_{t+1}) <= F_t(w_{t+1})
            if self.bcfw_options is not None:
                blocks = _carried_blocks(result.info["state"], new_sub) if new_sub.same_loss_terms(sub) else None
            self.elapsed += time.perf_counter() - clock
            self.record(outer=outer, objective=new_objective, surrogate=surrogate, changed=changed, accepted=True,
                        inner_eps=eps, **inner)
            gap = inner["inner_gap"]
            self.say(f"step {outer}: objective {new_objective:.6g}, inner gap "
                     f"{'n/a' if gap is None else f'{gap:.3g}'} after {inner['inner_passes']:g} passes, "
                     f"{changed} completions changed")
            decrease = math.inf if objective is None else objective - new_objective
            w, objective, sub = candidate, new_objective, new_sub
            stopped = f"objective decrease {decrease:.3g} < tol {self.tol:g}" if decrease < self.tol else None
            self.save(outer, w, objective, eps, blocks, sub, stopped)
            if stopped:
                stop_reason = stopped
                break
        return self.result(w, sub, stop_reason)


__all__ = ["INNER_SOLVERS", "inner_solvers", "latent_ssvm"]  # noqa: F822  (INNER_SOLVERS: __getattr__)
