"""Stochastic (sub)gradient descent on the structural SVM, smoothed or not (Pillutla et al. §7).

Step t (from 0) draws an example uniformly and moves

    w <- (1 - gamma_t lam) w - gamma_t grad f_i(w),     gamma_t = gamma0 / (1 + floor(t / t0))

with ``grad f_i`` the smoothed-hinge gradient (``mu > 0``) or a subgradient from the max oracle
(``mu = None``). The iterate is kept as ``w = a v`` and the gradient in statistics space, so a step
touches only the weights of the features present in ``x_i`` (see
:class:`~structopt.solvers._lazy.LazyIterate`). One oracle call per step.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Annotated

import numpy as np

from structopt.problem import SSVMProblem
from structopt.solvers._lazy import LazyIterate
from structopt.solvers._smooth import Counters, estimate_lipschitz, rose, shortened_step
from structopt.solvers.base import (
    Monitor,
    Need,
    Result,
    initial_weights,
    make_rng,
    one_of,
    optional,
    positive,
    positive_int,
    refuse_tol,
    smoothing_needs,
    solver,
)

AVERAGING = ("weighted", "uniform", "none")


def _subgradient_stats(problem: SSVMProblem, i: int, theta):
    # max-oracle subgradient in statistics space: stats(y*) - stats(y_i), reduced
    y = problem.augmented_argmax(i, theta)
    return problem.compact_diff(i, y, theta)


@solver("sgd", needs=(Need("max_oracle", "mu=None", lambda o: o["mu"] is None),
                     *smoothing_needs(lambda o: o["mu"] is not None, "mu set and ")))
def sgd(problem: SSVMProblem, *, mu: Annotated[float | None, optional(positive)] = None,
        kind: Annotated[str, one_of("topk", "entropy")] = "topk", k: Annotated[int, positive_int] = 5,
        gamma0: Annotated[float | None, optional(positive)] = None,
        t0: Annotated[float | None, optional(positive)] = None,
        averaging: Annotated[str, one_of(*AVERAGING)] = "weighted", guard: Annotated[bool, one_of(True, False)] = True,
        max_passes: float = 50, eval_every: float = 1, tol: float = 0.0, w0: np.ndarray | None = None,
        time_limit: float | None = None, random_state: int | np.random.Generator | None = None,
        progress: bool = False, checkpoint: str | os.PathLike | None = None, checkpoint_every: float = 1,
        resume: str | os.PathLike | None = None,
        callback: Callable[[np.ndarray], dict | None] | None = None, executor=None,
        n_workers: int | None = None) -> Result:
    """SGD with step ``gamma0 / (1 + floor(t / t0))`` on the smoothed or non-smooth objective.

    Parameters
    ----------
    problem : SSVMProblem
        Any loss; constrained weights get projected steps.
    mu : float or None
        Smoothing parameter; None uses the max oracle (subgradients of the non-smooth hinge).
    kind, k
        Smoothing kind and K when ``mu`` is given.
    gamma0 : float, optional
        Initial step; default ``1 / (L + lam)`` with L from
        :func:`~structopt.solvers._smooth.estimate_lipschitz` (local top-K curvature at ``w0``) at
        ``mu`` (at 1 without smoothing; on CoNLL NER this gives ~1/54, near the paper's 0.02).
    t0 : float, optional
        Steps between decreases of the step (default n, one pass).
    averaging : {"weighted", "uniform", "none"}
        Report and return the average of the iterates with weights ``t`` (as BCFW-wavg), equal
        weights, or the last iterate.
    guard : bool
        Reject the steps since the last evaluation when they raised the reported primal by more
        than 1% (``_smooth.GUARD_RISE``): the iterate goes back and ``gamma0`` shrinks
        (``_smooth.shortened_step``: at least 4 times, more after a large rise or where the
        curvature at the rejected point asks for it). The default ``gamma0`` comes from a local
        curvature estimate at ``w0``, far too long a step on grids and boxes. Keeps one copy of
        the iterate; the rejected steps' oracle calls are counted and their records say
        ``rejected``.
    max_passes : float
        Stop after this many oracle calls / n (one call per step).
    eval_every : float
        Evaluate the non-smooth primal every this many passes.
    tol : float
        Must be 0: the method has no duality gap.
    w0, time_limit, random_state, progress, checkpoint_every, callback
        As for every solver (:mod:`structopt.solvers.base`).
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
    """
    options = dict(locals())
    refuse_tol("sgd", tol)
    n, lam = problem.n, problem.lam
    monitor = Monitor(problem, "sgd", options)
    saved = monitor.load()
    if saved is not None:
        rng, counters, iterate, gamma0, t0 = (saved["rng"], saved["counters"], saved["iterate"], saved["gamma0"],
                                              saved["t0"])
        primal = saved.get("primal", monitor.trace[-1]["primal"])
    else:
        rng = make_rng(random_state)
        if gamma0 is None:
            gamma0 = 1.0 / (estimate_lipschitz(problem, 1.0 if mu is None else mu, k=k) + lam)
        t0 = float(n if t0 is None else t0)
        iterate = LazyIterate(problem, initial_weights(problem, w0))
        counters = Counters()
        monitor.pause()
        w = iterate.dense()
        primal = executor.primal(w)
        monitor.record(w, primal=primal, step=gamma0, **counters.record(n))
    steps_per_eval = max(1, round(eval_every * n))
    budget = monitor.step_budget(n)

    def report() -> np.ndarray:  # (the projection only removes round-off: the iterates are feasible)
        return problem.project_weights(iterate.dense() if averaging == "none" else iterate.average())

    while not monitor.stop_reason:
        monitor.restart()
        accepted = copy.deepcopy(iterate) if guard else None
        for i in rng.integers(0, n, size=min(steps_per_eval, budget - counters.steps)):
            i = int(i)
            t = counters.steps
            gamma = gamma0 / (1.0 + np.floor(t / t0))
            theta = iterate.potentials(i)
            if mu is None:
                diff = _subgradient_stats(problem, i, theta)
            else:
                diff = problem.smooth_stats(i, theta, mu, kind, k).diff
            omega = 0.0 if averaging == "none" else (1.0 if averaging == "uniform" else float(t + 1))
            iterate.step(1.0 - gamma * lam, gamma, i, diff, omega=omega, nonnegative=problem.nonnegative_indices)
            counters.steps += 1
        counters.oracle_calls = counters.oracle_calls_made = counters.steps
        monitor.pause()
        w_report = report()
        primal_new = executor.primal(w_report)
        rejected = guard and rose(primal, primal_new)
        if rejected:
            gamma0 = shortened_step(problem, gamma0, primal, primal_new, iterate.dense(), 1.0 if mu is None else mu, k)
            iterate = accepted
            w_report = report()
        else:
            primal = primal_new
        state = {"rng": rng, "counters": counters, "iterate": iterate, "gamma0": gamma0, "t0": t0, "primal": primal}
        monitor.record(w_report, primal=primal, step=gamma0 / (1.0 + np.floor(counters.steps / t0)), state=state,
                       **counters.record(n), **({"rejected": primal_new} if rejected else {}))
    monitor.close()
    return Result(report(), monitor.trace, {"stop_reason": monitor.stop_reason, "gamma0": gamma0, "t0": t0})


__all__ = ["sgd"]
