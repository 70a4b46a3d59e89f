"""Block-coordinate Frank-Wolfe for structural SVMs, batch Frank-Wolfe and Pegasos SSG.

Lacoste-Julien, Jaggi, Schmidt, Pletscher (ICML 2013); see ``shared/specs/bcfw.md``.

Per-example state is kept in *statistics space*: block i of the dual is summarised by the
expected (compact) statistics ``m_i = E_{alpha_i}[stats(y)]`` and its loss share ``l_i``, so that
``w_i = A_i^T (gold_i - m_i) / (lam n)``. That costs O(T S + S^2) per chain example instead of a
weight-sized vector, whatever the feature dimension (sparse hashed features included).

Every quantity of a step comes from the oracle's own products: the line-search numerator
(= the block gap) is ``<m_s - m_i, A_i w> / n - l_i + l_s`` and its denominator
``||A_i^T (m_s - m_i)||^2 / (lam n^2)``; the weighted average of the iterates is kept lazily
(``w_bar_k = w_k - 2 u_k / (k (k+1))`` with ``u_k = sum_j j(j-1)/2 (w_j - w_{j-1})``), so a step
touches only the weights its example uses.
"""

from __future__ import annotations

import os

import numpy as np

from structopt.compiled import compiled_problem
from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState, gamma_line_search, make_block_updater
from structopt.solvers._compiled import fw_pass, ssg_steps
from structopt.solvers.base import Monitor, Result, load_checkpoint, make_rng


def _evaluate(problem: SSVMProblem, updater, w: np.ndarray, ell: float) -> dict[str, float]:
    """Primal, dual and gap at the pair (w, ell) from one batch oracle pass (spec §6)."""
    half_sq = 0.5 * problem.lam * float(w @ w)
    primal = half_sq + updater.mean_hinge(w)
    dual = ell - half_sq
    return {"primal": primal, "dual": dual, "gap": primal - dual}


def bcfw(problem: SSVMProblem, *, max_passes: float = 50, line_search: bool = True, averaging: bool = True,
         sampling: str = "uniform", gap_every: float = 1, tol: float = 0.0, time_limit: float | None = None,
         random_state: int | np.random.Generator | None = None, progress: bool = False,
         checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
         callback=None, compiled: bool | None = None) -> Result:
    """Block-coordinate Frank-Wolfe on the structural SVM dual (paper Alg. 3/4).

    Parameters
    ----------
    problem : SSVMProblem
        Needs a decomposable loss (loss-augmented decoding is ``argmax(theta + c)``).
    max_passes : float
        Effective passes (n block steps each).
    line_search : bool
        Exact line search (default); otherwise the fixed step ``2n / (k + 2n)``.
    averaging : bool
        Report and return the weighted average ``w_bar`` (with the matching ``l_bar``) instead of
        the last iterate.
    sampling : {"uniform", "perm"}
        Blocks drawn uniformly with replacement, or a fresh random permutation per pass.
    gap_every : float
        Evaluate primal, dual and duality gap every this many passes (one batch oracle pass each;
        its time and oracle calls are not counted in the trace's ``time``/``oracle_calls``).
    tol : float
        Stop once the duality gap of the reported iterate is at most ``tol``.
    time_limit : float, optional
        Stop after this many seconds of optimisation.
    random_state : int or Generator, optional
    progress : bool
        tqdm progress bar.
    checkpoint : path, optional
        Save the full solver state there at every evaluation.
    resume : path, optional
        Continue from a state saved by ``checkpoint``.
    callback : callable(w) -> dict, optional
        Extra entries for each trace record (e.g. a test error).
    compiled : bool, optional
        Use the fused numba pass when the model provides one (default: when available).

    Returns
    -------
    Result
        ``w`` (averaged iterate when ``averaging``), the trace (``passes``, ``oracle_calls``,
        ``time``, ``primal``, ``dual``, ``gap`` of the reported iterate, ``dual_iterate`` of the
        current iterate, which line search never decreases) and ``info``.
    """
    if sampling not in ("uniform", "perm"):
        raise InvalidInputError(f"sampling must be 'uniform' or 'perm', got {sampling!r}")
    if gap_every <= 0:
        raise InvalidInputError(f"gap_every must be > 0, got {gap_every}")
    n = problem.n
    rng = make_rng(random_state)
    state = BlockState.initial(problem)
    monitor = Monitor(problem, max_passes=max_passes, tol=tol, time_limit=time_limit, callback=callback,
                      progress=progress, checkpoint=checkpoint, label="bcfw")
    if resume is not None:
        saved = load_checkpoint(resume, "bcfw")
        state = saved["state"]
        rng = saved["rng"]
        monitor.resume(saved["trace"])
    updater = make_block_updater(problem, state, compiled)
    steps_per_eval = max(1, round(gap_every * n))

    while True:
        monitor.restart()
        remaining = round(max_passes * n) - state.k
        count = min(steps_per_eval - state.k % steps_per_eval, remaining)
        if count > 0:
            if sampling == "uniform":
                order = rng.integers(0, n, size=count)
            else:
                order = np.concatenate([rng.permutation(n) for _ in range(-(-count // n))])[:count]
            updater.run(order, line_search, averaging)
        monitor.pause()
        w_report, ell_report = updater.averaged() if averaging else (state.w, state.ell)
        evaluation = _evaluate(problem, updater, w_report, ell_report)
        dual_iterate = state.ell - 0.5 * problem.lam * float(state.w @ state.w)
        saved = {"solver": "bcfw", "state": state, "rng": rng}
        if monitor.record(w_report, passes=state.k / n, oracle_calls=state.k, dual_iterate=dual_iterate,
                          state=saved, **evaluation):
            break
    monitor.close()
    w_out = w_report.copy()
    return Result(w_out, monitor.trace, {"stop_reason": monitor.stop_reason, "compiled": updater.compiled,
                                         "state": state})


def _fw_corner(problem: SSVMProblem, w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(w_s, l_s, mean hinge)`` at ``w`` from one oracle pass through the Python interfaces."""
    n, lam, model = problem.n, problem.lam, problem.model
    w_s = model.zeros()
    loss_s = hinge = 0.0
    for i in range(n):
        d = problem.decode(i, w)
        hinge += problem.hinge(i, d)
        loss_s += d.loss
        stats = model.reduce_stats(problem.structure.stats(d.y, d.theta))
        model.add_features(problem.X[i], problem.gold_stats(i, d.theta), w_s, 1.0 / (lam * n))
        model.add_features(problem.X[i], stats, w_s, -1.0 / (lam * n))
    return w_s, loss_s / n, hinge / n


def frank_wolfe(problem: SSVMProblem, *, max_passes: float = 50, line_search: bool = True, tol: float = 0.0,
                time_limit: float | None = None, progress: bool = False, checkpoint: str | os.PathLike | None = None,
                resume: str | os.PathLike | None = None, callback=None, compiled: bool | None = None) -> Result:
    """Batch Frank-Wolfe on the structural SVM dual (paper Alg. 2), one oracle pass per iteration.

    The pass at ``w`` yields both the corner ``(w_s, l_s)`` and the primal value, so primal,
    dual and gap of every iterate are free. Options as in :func:`bcfw`.
    """
    lam = problem.lam
    fast = compiled_problem(problem, compiled)
    w, ell, k = problem.model.zeros(), 0.0, 0
    monitor = Monitor(problem, max_passes=max_passes, tol=tol, time_limit=time_limit, callback=callback,
                      progress=progress, checkpoint=checkpoint, label="frank_wolfe")
    if resume is not None:
        saved = load_checkpoint(resume, "frank_wolfe")
        w, ell, k = saved["w"], saved["ell"], saved["k"]
        monitor.resume(saved["trace"])
    while k < max_passes:
        monitor.restart()
        w_s, loss_s, mean_hinge = fw_pass(fast, w) if fast is not None else _fw_corner(problem, w)
        half_sq = 0.5 * lam * float(w @ w)
        primal, dual = half_sq + mean_hinge, ell - half_sq
        direction = w - w_s
        gap = lam * float(direction @ w) - ell + loss_s  # equals primal - dual
        gamma = gamma_line_search(gap, lam * float(direction @ direction)) if line_search else 2.0 / (k + 2.0)
        monitor.pause()
        state = {"solver": "frank_wolfe", "w": w, "ell": ell, "k": k}
        if monitor.record(w, passes=k + 1, oracle_calls=(k + 1) * problem.n, primal=primal, dual=dual,
                          gap=primal - dual, state=state):
            break
        w = w - gamma * direction
        ell = (1.0 - gamma) * ell + gamma * loss_s
        k += 1
    monitor.close()
    return Result(w, monitor.trace, {"stop_reason": monitor.stop_reason, "compiled": fast is not None})


def _ssg_steps_python(problem: SSVMProblem, order: np.ndarray, w: np.ndarray, w_avg: np.ndarray, k: int,
                      averaging: bool) -> int:
    lam, model = problem.lam, problem.model
    for i in order:
        d = problem.decode(int(i), w)
        step = 1.0 / (lam * (k + 1))
        w *= 1.0 - step * lam
        stats = model.reduce_stats(problem.structure.stats(d.y, d.theta))
        model.add_features(problem.X[i], stats, w, -step)
        model.add_features(problem.X[i], problem.gold_stats(int(i), d.theta), w, step)
        k += 1
        if averaging:
            w_avg += (2.0 / (k + 1)) * (w - w_avg)  # weighted average, weight t on w_t
    return k


def ssg(problem: SSVMProblem, *, max_passes: float = 50, averaging: bool = False, eval_every: float = 1,
        time_limit: float | None = None, random_state: int | np.random.Generator | None = None,
        progress: bool = False, checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
        callback=None, compiled: bool | None = None) -> Result:
    """Pegasos stochastic subgradient: step ``1 / (lam (k + 1))`` on one uniformly drawn example.

    With ``averaging`` the weighted average ``2/(k(k+1)) sum_t t w_t`` is reported and returned.
    The primal is evaluated every ``eval_every`` passes. Other options as in :func:`bcfw`.
    """
    n = problem.n
    fast = compiled_problem(problem, compiled)
    rng = make_rng(random_state)
    w, w_avg, k = problem.model.zeros(), problem.model.zeros(), 0
    monitor = Monitor(problem, max_passes=max_passes, time_limit=time_limit, callback=callback,
                      progress=progress, checkpoint=checkpoint, label="ssg")
    if resume is not None:
        saved = load_checkpoint(resume, "ssg")
        w, w_avg, k, rng = saved["w"], saved["w_avg"], saved["k"], saved["rng"]
        monitor.resume(saved["trace"])
    steps_per_eval = max(1, round(eval_every * n))
    total = round(max_passes * n)
    while True:
        monitor.restart()
        order = rng.integers(0, n, size=min(steps_per_eval, total - k))
        if fast is not None:
            k = ssg_steps(fast, order, w, w_avg, k, averaging)
        else:
            k = _ssg_steps_python(problem, order, w, w_avg, k, averaging)
        monitor.pause()
        w_report = w_avg if averaging else w
        mean_hinge = problem.mean_hinge(w_report)
        state = {"solver": "ssg", "w": w, "w_avg": w_avg, "k": k, "rng": rng}
        if monitor.record(w_report, passes=k / n, oracle_calls=k, state=state,
                          primal=0.5 * problem.lam * float(w_report @ w_report) + mean_hinge):
            break
    monitor.close()
    return Result(w_report.copy(), monitor.trace, {"stop_reason": monitor.stop_reason, "compiled": fast is not None})


__all__ = ["bcfw", "frank_wolfe", "ssg"]
