"""Stochastic (sub)gradient descent on the structural SVM, smoothed or not (Pillutla et al. §7).

Step t (from 0) draws an example uniformly and moves

    w <- (1 - gamma_t lam) w - gamma_t grad f_i(w),     gamma_t = gamma0 / (1 + floor(t / t0))

with ``grad f_i`` the smoothed-hinge gradient (``mu > 0``) or a subgradient from the max oracle
(``mu = None``). The iterate is kept as ``w = a v`` and the gradient in statistics space, so a step
touches only the weights of the features present in ``x_i`` (see
:class:`~structopt.solvers._lazy.LazyIterate`). One oracle call per step.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.solvers._lazy import LazyIterate
from structopt.solvers._smooth import Counters, check_kind, estimate_lipschitz, subtract
from structopt.solvers.base import Monitor, Result, load_checkpoint, make_rng

AVERAGING = ("none", "uniform", "weighted")


def _subgradient_stats(problem: SSVMProblem, i: int, theta):
    # max-oracle subgradient in statistics space: stats(y*) - stats(y_i), reduced
    if problem.loss.decomposable:
        c, _ = problem.loss_terms(i)
        y = problem.structure.argmax(type(theta)(*(a + b for a, b in zip(theta, c, strict=True))))
    else:
        y = problem.loss.augmented_argmax(problem.structure, theta, problem.Y[i])
    return problem.model.reduce_stats(subtract(problem.structure.stats(y, theta), problem.gold_stats(i, theta)))


def sgd(problem: SSVMProblem, *, mu: float | None = None, kind: str = "topk", k: int = 5,
        gamma0: float | None = None, t0: float | None = None, averaging: str = "weighted",
        max_passes: float = 50, eval_every: float = 1, w0: np.ndarray | None = None,
        time_limit: float | None = None, random_state: int | np.random.Generator | None = None,
        progress: bool = False, checkpoint: str | os.PathLike | None = None,
        resume: str | os.PathLike | None = None,
        callback: Callable[[np.ndarray], dict | None] | None = None) -> Result:
    """SGD with step ``gamma0 / (1 + floor(t / t0))`` on the smoothed or non-smooth objective.

    Parameters
    ----------
    problem : SSVMProblem
        Needs a decomposable loss.
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
    max_passes : float
        Stop after this many oracle calls / n (one call per step).
    eval_every : float
        Evaluate the non-smooth primal every this many passes.
    w0, time_limit, random_state, progress, callback
        As for every solver.
    checkpoint, resume : path, optional
        Save the state at each evaluation / continue from such a state.
        Resuming restores the iterates, counters, random state and the step/schedule constants;
        pass the other options (smoothing, schedule, warm start, max_passes) as in the first run.

    Returns
    -------
    Result
        Trace records ``passes``, ``oracle_calls``, ``oracle_calls_made``, ``full_grad_passes``
        (always 0), ``time``, ``primal`` (non-smooth F of the reported iterate), ``step``.
    """
    if mu is not None:
        check_kind(kind, k)
        if not mu > 0:
            raise InvalidInputError(f"mu must be > 0 (or None for the max oracle), got {mu}")
    if averaging not in AVERAGING:
        raise InvalidInputError(f"averaging must be one of {AVERAGING}, got {averaging!r}")
    if eval_every <= 0:
        raise InvalidInputError(f"eval_every must be > 0, got {eval_every}")
    n, lam = problem.n, problem.lam
    monitor = Monitor(problem, max_passes=max_passes, time_limit=time_limit, callback=callback,
                      progress=progress, checkpoint=checkpoint, label="sgd")
    if resume is not None:
        s = load_checkpoint(resume, "sgd")
        rng, counters, iterate, gamma0, t0 = s["rng"], s["counters"], s["iterate"], s["gamma0"], s["t0"]
        monitor.resume(s["trace"])
    else:
        rng = make_rng(random_state)
        if gamma0 is None:
            gamma0 = 1.0 / (estimate_lipschitz(problem, 1.0 if mu is None else mu, k=k) + lam)
        t0 = float(n if t0 is None else t0)
        if not (gamma0 > 0 and t0 > 0):
            raise InvalidInputError(f"gamma0 and t0 must be > 0, got {gamma0}, {t0}")
        w = problem.model.zeros() if w0 is None else np.array(w0, dtype=float, copy=True)
        if w.shape != (problem.n_params,):
            raise InvalidInputError(f"w0 must have shape ({problem.n_params},), got {w.shape}")
        iterate = LazyIterate(problem.model, w)
        counters = Counters()
        monitor.pause()
        monitor.record(w, primal=problem.primal(w), step=gamma0, **counters.record(n))
    steps_per_eval = max(1, round(eval_every * n))
    total = round(max_passes * n)

    def report() -> np.ndarray:
        return iterate.dense() if averaging == "none" else iterate.average()

    while not monitor.stop_reason:
        monitor.restart()
        count = min(steps_per_eval, total - counters.steps)
        for i in rng.integers(0, n, size=max(count, 0)):
            i = int(i)
            t = counters.steps
            gamma = gamma0 / (1.0 + np.floor(t / t0))
            x = problem.X[i]
            theta = iterate.potentials(x)
            if mu is None:
                diff = _subgradient_stats(problem, i, theta)
            else:
                diff = problem.smooth_stats(i, theta, mu, kind, k).diff
            omega = 0.0 if averaging == "none" else (1.0 if averaging == "uniform" else float(t + 1))
            iterate.step(1.0 - gamma * lam, gamma, x, diff, omega=omega)
            counters.steps += 1
        counters.oracle_calls = counters.oracle_calls_made = counters.steps
        monitor.pause()
        w_report = report()
        state = {"solver": "sgd", "rng": rng, "counters": counters, "iterate": iterate, "gamma0": gamma0, "t0": t0}
        monitor.record(w_report, primal=problem.primal(w_report),
                       step=gamma0 / (1.0 + np.floor(counters.steps / t0)), state=state, **counters.record(n))
        if count <= 0 and not monitor.stop_reason:  # nothing left to do (e.g. max_passes rounding)
            break
    monitor.close()
    return Result(report(), monitor.trace, {"stop_reason": monitor.stop_reason, "gamma0": gamma0, "t0": t0})


__all__ = ["sgd"]
