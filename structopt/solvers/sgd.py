"""Stochastic (sub)gradient descent on the structural SVM, smoothed or not (Pillutla et al. §7).

Step t (from 0) draws an example uniformly and moves

    w <- (1 - gamma_t lam) w - gamma_t grad f_i(w),     gamma_t = gamma0 / (1 + floor(t / t0))

with ``grad f_i`` the smoothed-hinge gradient (``mu > 0``) or a subgradient from the max oracle
(``mu = None``). The iterate is kept as ``w = a v`` and the gradient in statistics space, so a step
touches only the weights of the features present in ``x_i`` (see
:class:`~structopt.solvers._lazy.LazyIterate`). One oracle call per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from structopt.archive import state_type
from structopt.problem import SSVMProblem
from structopt.solvers._lazy import LazyIterate
from structopt.solvers._smooth import Counters, GuardCount, estimate_lipschitz, regrown_step, rose, shortened_step
from structopt.solvers._smooth_options import Flag, Kind, OptionalPositive, TopK
from structopt.solvers.base import (
    Method,
    Monitor,
    Need,
    Options,
    Result,
    RunOptions,
    initial_weights,
    make_rng,
    one_of,
    refuse_tol,
    run,
    smoothing_needs,
    solver,
)

AVERAGING = ("weighted", "uniform", "none")


def _subgradient_stats(problem: SSVMProblem, i: int, theta):
    # max-oracle subgradient in statistics space: stats(y*) - stats(y_i), reduced
    y = problem.augmented_argmax(i, theta)
    return problem.compact_diff(i, y, theta)


@dataclass(frozen=True)
class SGDOptions(Options):
    """The options of :func:`sgd` beyond the common ones.

    Parameters
    ----------
    mu : float or None
        Smoothing parameter; None uses the max oracle (subgradients of the non-smooth hinge).
    kind, k
        Smoothing kind and K when ``mu`` is given.
    gamma0 : float, optional
        Initial step; default ``1 / (L + lam)`` with L from
        :func:`~structopt.solvers._smooth.estimate_lipschitz` (local top-K curvature at ``w0``) at
        ``mu`` (at 1 without smoothing; on CoNLL NER this gives ~1/54, near the paper's 0.02).
    t0 : float, optional
        Steps between decreases of the step; default ``1 / (lam gamma0)`` (Bottou's rule), so that
        the step tends to the Pegasos step ``1 / (lam t)`` of the lam-strongly convex objective and
        the run converges to its optimum (a longer ``t0`` leaves steps too short to get there).
    averaging : {"weighted", "uniform", "none"}
        Report and return the average of the iterates with weights ``t`` (as BCFW-wavg), equal
        weights, or the last iterate.
    guard : bool
        Reject the steps since the last evaluation when they raised the reported primal by more
        than 1% (``_smooth.GUARD_RISE``): the run restarts from the last accepted report (the
        average keeps its weight: going back to the last iterate would let the average drift to
        it again, whatever the step) and ``gamma0`` shrinks
        (``_smooth.shortened_step``: at least 4 times, more after a large rise or where the
        curvature at the rejected point asks for it). The default ``gamma0`` comes from a local
        curvature estimate at ``w0``, far too long a step on grids and boxes. Each accepted
        evaluation lets ``gamma0`` grow back (``_smooth.regrown_step``: twice, at most its first
        value). Keeps one copy of the accepted report; the rejected steps' oracle calls are counted, their
        records say ``rejected`` and ``info["rejected_epochs"]`` / ``info["epochs"]`` count the
        evaluations.
    """

    mu: OptionalPositive = None
    kind: Kind = "topk"
    k: TopK = 5
    gamma0: OptionalPositive = None
    t0: OptionalPositive = None
    averaging: Annotated[str, one_of(*AVERAGING)] = "weighted"
    guard: Flag = True


@solver("sgd", SGDOptions, needs=(Need("max_oracle", "mu=None", lambda o: o["mu"] is None),
                                  *smoothing_needs(lambda o: o["mu"] is not None, "mu set and ")))
def sgd(problem: SSVMProblem, options: SGDOptions, run_options: RunOptions, executor) -> Result:
    """SGD with step ``gamma0 / (1 + floor(t / t0))`` on the smoothed or non-smooth objective.

    Parameters
    ----------
    problem : SSVMProblem
        Any loss; constrained weights get projected steps.
    max_passes : float
        Stop after this many oracle calls / n (one call per step).
    eval_every : float
        Evaluate the non-smooth primal every this many passes.
    tol : float
        Must be 0: the method has no duality gap.
    checkpoint, resume : path, optional
        Save the state at each evaluation / continue from such a state.
        Resuming restores the iterates, counters, random state and the step/schedule constants;
        pass the other options (smoothing, schedule, warm start, max_passes) as in the first run.
    executor, n_workers
        Where the primal evaluations run (:mod:`structopt.parallel`).

    Returns
    -------
    Result
        Trace records ``passes``, ``oracle_calls``, ``oracle_calls_made``, ``full_grad_passes``
        (always 0), ``time``, ``primal`` (non-smooth F of the reported iterate), ``step``.
        ``info``: ``stop_reason``, ``gamma0``, ``t0``, ``epochs`` (evaluations judged by the
        guard), ``rejected_epochs``.
    """
    refuse_tol("sgd", run_options.tol)
    return run(problem, _SGD(problem, options, run_options, executor))


@state_type
@dataclass
class SGDState:
    """The lazy iterate (and its running average), counters, sampler, step constants (``gamma0_max`` the first
    ``gamma0``), last accepted primal and the guard's counts."""

    rng: np.random.Generator
    counters: Counters
    iterate: LazyIterate
    gamma0: float
    t0: float
    primal: float
    gamma0_max: float
    guard: GuardCount
    accepted: np.ndarray       # the last accepted report, where a rejection restarts
    accepted_weight: float     # the averaging weight it stands for


class _SGD(Method):
    name = "sgd"

    def __init__(self, problem: SSVMProblem, options: SGDOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        # read on every step of the Python loop: plain attributes
        self.mu, self.kind, self.k, self.averaging = options.mu, options.kind, options.k, options.averaging
        self.steps_per_eval = max(1, round(run_options.eval_every * problem.n))

    def init(self, monitor: Monitor) -> SGDState:
        problem, n = self.problem, self.problem.n
        rng = make_rng(self.run_options.random_state)
        gamma0 = self.options.gamma0
        if gamma0 is None:
            gamma0 = 1.0 / (estimate_lipschitz(problem, 1.0 if self.mu is None else self.mu, k=self.k) + problem.lam)
        t0 = 1.0 / (problem.lam * gamma0) if self.options.t0 is None and problem.lam > 0 else self.options.t0
        w = initial_weights(problem, self.run_options.w0)
        state = SGDState(rng, Counters(), LazyIterate(problem, w), gamma0, float(n if t0 is None else t0), 0.0,
                         gamma0, GuardCount(), w, 0.0)
        monitor.pause()
        state.primal = self.executor.primal(w)
        monitor.record(w, primal=state.primal, step=gamma0, **state.counters.record(n))
        return state

    def report(self, state: SGDState) -> np.ndarray:  # (the projection only removes round-off: iterates are feasible)
        return self.problem.project_weights(state.iterate.dense() if self.averaging == "none"
                                            else state.iterate.average())

    def advance(self, state: SGDState, monitor: Monitor) -> None:
        problem, n, lam = self.problem, self.problem.n, self.problem.lam
        counters, iterate = state.counters, state.iterate
        for i in state.rng.integers(0, n, size=min(self.steps_per_eval, monitor.step_budget(n) - counters.steps)):
            i = int(i)
            t = counters.steps
            gamma = state.gamma0 / (1.0 + np.floor(t / state.t0))
            theta = iterate.potentials(i)
            if self.mu is None:
                diff = _subgradient_stats(problem, i, theta)
            else:
                diff = problem.smooth_stats(i, theta, self.mu, self.kind, self.k).diff
            omega = 0.0 if self.averaging == "none" else (1.0 if self.averaging == "uniform" else float(t + 1))
            iterate.step(1.0 - gamma * lam, gamma, i, diff, omega=omega, nonnegative=problem.nonnegative_indices)
            counters.steps += 1
        counters.oracle_calls = counters.oracle_calls_made = counters.steps

    def evaluate(self, state: SGDState) -> tuple[np.ndarray, dict]:
        w_report = self.report(state)
        primal_new = self.executor.primal(w_report)
        rejected = self.options.guard and rose(state.primal, primal_new)
        state.guard.count(rejected)
        if rejected:  # restart from the last accepted report (the average, if averaging) with a shorter step
            state.gamma0 = shortened_step(self.problem, state.gamma0, state.primal, primal_new, state.iterate.dense(),
                                          1.0 if self.mu is None else self.mu, self.k)
            state.iterate = LazyIterate.restarted(self.problem, state.accepted, state.accepted_weight)
            w_report = self.report(state)
        else:
            state.primal, state.accepted, state.accepted_weight = primal_new, w_report, state.iterate.weight
            state.gamma0 = regrown_step(state.gamma0, state.gamma0_max)
        step = state.gamma0 / (1.0 + np.floor(state.counters.steps / state.t0))
        return w_report, {"primal": state.primal, "step": step, **state.counters.record(self.problem.n),
                          **({"rejected": primal_new} if rejected else {})}

    def result(self, state: SGDState, monitor: Monitor) -> Result:
        return Result(self.report(state), monitor.trace, {"stop_reason": monitor.stop_reason, "gamma0": state.gamma0,
                                                          "t0": state.t0, **state.guard.info()})


__all__ = ["SGDOptions", "SGDState", "sgd"]
