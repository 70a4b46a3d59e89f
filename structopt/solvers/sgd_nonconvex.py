"""Stochastic subgradient method on a non-linear structural SVM (Davis & Drusvyatskiy; Pillutla et al. §7.2).

The paper's baseline for non-convex scores: step t (from 1) draws an example uniformly and moves

    w <- w - gamma_t (J_i(w)^T (mu(y*) - mu(y_i)) + lam w),   y* = loss-augmented argmax at psi(x_i; w),

with ``gamma_t = gamma0`` (SGD-const), ``gamma0 / sqrt(t)`` (SGD-t^-1/2) or ``gamma0 / t``
(SGD-t^-1). The iterate is kept as ``w = a v`` so the shrinkage ``(1 - gamma_t lam)`` is a scalar
update and a step touches only the weights the vector-Jacobian product touches (for sparse token
features, the first-layer rows of the features present). One oracle call per step; the last
iterate is reported (averages of non-convex iterates carry no guarantee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from structopt.archive import state_type
from structopt.nonconvex import NonconvexProblem
from structopt.solvers._smooth import Counters, estimate_lipschitz
from structopt.solvers._smooth_options import OptionalPositive
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
    solver,
)
from structopt.solvers.prox_linear import check_nonconvex

SCHEDULES = ("const", "sqrt", "linear")
_TINY = 1e-12  # fold the scale a into v below this


def step_size(gamma0: float, t: int, schedule: str) -> float:
    """``gamma_t`` for step ``t >= 1``."""
    if schedule == "const":
        return gamma0
    return gamma0 / math.sqrt(t) if schedule == "sqrt" else gamma0 / t


@dataclass(frozen=True)
class SGDNonconvexOptions(Options):
    """The options of :func:`sgd_nonconvex` beyond the common ones.

    Parameters
    ----------
    schedule : {"const", "sqrt", "linear"}
        ``gamma_t = gamma0``, ``gamma0 / sqrt(t)`` or ``gamma0 / t`` (SGD-const, -t^-1/2, -t^-1).
    gamma0 : float, optional
        Initial step; default ``1 / (L + lam)`` with L the local top-K curvature (at mu = 1) of the
        problem linearised at ``w0``, as the convex SGD's default.
    """

    schedule: Annotated[str, one_of(*SCHEDULES)] = "sqrt"
    gamma0: OptionalPositive = None


@solver("sgd_nonconvex", SGDNonconvexOptions, without=("executor", "n_workers"),
        needs=(Need("max_oracle", "any options"),))
def sgd_nonconvex(problem: NonconvexProblem, options: SGDNonconvexOptions, run_options: RunOptions,
                  executor) -> Result:
    """Stochastic subgradient steps on the non-convex objective ``F`` of a :class:`NonconvexProblem`.

    Parameters
    ----------
    problem : NonconvexProblem
        Any structure with a max oracle.
    max_passes : float
        Exactly ``ceil(max_passes * n)`` steps (one oracle call each).
    eval_every : float
        Evaluate ``F`` every this many passes.
    tol : float
        Must be 0.
    w0 : ndarray, optional
        Start; default ``model.initial_weights(random_state)``.

    Returns
    -------
    Result
        The last iterate; trace records ``passes``, ``oracle_calls``, ``oracle_calls_made``,
        ``full_grad_passes`` (0), ``time``, ``primal`` (``F``), ``step``.
    """
    check_nonconvex("sgd_nonconvex", problem)
    refuse_tol("sgd_nonconvex", run_options.tol)
    return run(problem, _SGDNonconvex(problem, options, run_options))


@state_type
@dataclass
class SGDNonconvexState:
    """The iterate ``w = a v``, the sampler, counters and the initial step."""

    v: np.ndarray
    a: float
    rng: np.random.Generator
    counters: Counters
    gamma0: float


class _SGDNonconvex(Method):
    name = "sgd_nonconvex"

    def __init__(self, problem: NonconvexProblem, options: SGDNonconvexOptions, run_options: RunOptions):
        super().__init__(problem, options, run_options)
        self.schedule = options.schedule
        self.label = f"sgd-nonconvex[{options.schedule}]"
        self.steps_per_eval = max(1, round(run_options.eval_every * problem.n))

    def init(self, monitor: Monitor) -> SGDNonconvexState:
        problem = self.problem
        rng = make_rng(self.run_options.random_state)
        w0 = self.run_options.w0
        v = problem.initial_weights(rng) if w0 is None else initial_weights(problem, w0)
        gamma0 = self.options.gamma0
        if gamma0 is None:
            gamma0 = 1.0 / (estimate_lipschitz(problem.linearize(v, 1.0), 1.0) + problem.lam)
        state = SGDNonconvexState(v, 1.0, rng, Counters(), gamma0)
        monitor.pause()
        monitor.record(v, primal=problem.primal(v), step=float(gamma0), **state.counters.record(problem.n))
        return state

    def advance(self, state: SGDNonconvexState, monitor: Monitor) -> None:
        problem, n, counters = self.problem, self.problem.n, state.counters
        for i in state.rng.integers(0, n, size=min(self.steps_per_eval, monitor.step_budget(n) - counters.steps)):
            i = int(i)
            gamma = step_size(state.gamma0, counters.steps + 1, self.schedule)
            tangent = problem.tangent(i, state.v, scale=state.a)
            theta = problem.tangent_potentials(tangent)
            y = problem.augmented_argmax(i, theta)
            diff = problem.compact_diff(i, y, theta)
            state.a *= 1.0 - gamma * problem.lam
            if abs(state.a) < _TINY:  # rewrite w = a v with a = 1 (dense, rare)
                state.v, state.a = state.a * state.v, 1.0
            problem.tangent_adjoint(tangent, diff, state.v, -gamma / state.a)
            counters.steps += 1
        counters.oracle_calls = counters.oracle_calls_made = counters.steps

    def evaluate(self, state: SGDNonconvexState) -> tuple[np.ndarray, dict]:
        w = state.a * state.v
        return w, {"primal": self.problem.primal(w),
                   "step": step_size(state.gamma0, max(state.counters.steps, 1), self.schedule),
                   **state.counters.record(self.problem.n)}

    def result(self, state: SGDNonconvexState, monitor: Monitor) -> Result:
        return Result(state.a * state.v, monitor.trace, {"stop_reason": monitor.stop_reason, "gamma0": state.gamma0,
                                                         "schedule": self.schedule})


__all__ = ["SCHEDULES", "SGDNonconvexOptions", "SGDNonconvexState", "sgd_nonconvex", "step_size"]
