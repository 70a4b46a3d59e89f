"""Solver loops fused in numba over a model's compiled kernels (one call per chunk of steps).

The model supplies ``oracle``, ``sqnorm`` and ``axpy`` (see ``structopt.models._chain_compiled``);
these drivers never look inside an example. Each performs exactly the arithmetic of the solver's
Python path, which the tests check iterate by iterate.

The loops are jitted without ``cache=True``: they take the kernels as arguments, whose numba
types differ per process, so a disk cache would never hit (only grow).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.compiled import CompiledProblem
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState


@njit
def _bcfw_steps(order, line_search, averaging, n, lam, w, m, r, offsets, ell_i, scalars,
                oracle, sqnorm, axpy, data, theta_buf, stats_buf):
    ell, v, k = scalars[0], scalars[1], scalars[2]
    direction_buf = np.empty_like(stats_buf)
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        size = hi - lo
        theta = theta_buf[:size]
        stats = stats_buf[:size]
        direction = direction_buf[:size]
        loss_s = oracle(i, w, data, theta, stats) / n
        numerator = 0.0
        for j in range(size):
            direction[j] = stats[j] - m[lo + j]
            numerator += direction[j] * theta[j]
        numerator = numerator / n - ell_i[i] + loss_s
        if line_search:
            denominator = sqnorm(i, direction, data) / (lam * n * n)
            if denominator <= 0.0:
                gamma = 1.0 if numerator > 0.0 else 0.0
            else:
                gamma = min(1.0, max(0.0, numerator / denominator))
        else:
            gamma = 2.0 * n / (k + 2.0 * n)
        k += 1.0
        if gamma == 0.0:
            continue
        axpy(i, direction, -gamma / (lam * n), w, data)
        delta_ell = gamma * (loss_s - ell_i[i])
        ell += delta_ell
        ell_i[i] += delta_ell
        if averaging:
            weight = 0.5 * k * (k - 1.0)
            v += weight * delta_ell
            for j in range(size):  # one sweep over both state arrays
                step = gamma * direction[j]
                m[lo + j] += step
                r[lo + j] += weight * step
        else:
            for j in range(size):
                m[lo + j] += gamma * direction[j]
    scalars[0], scalars[1], scalars[2] = ell, v, k


@njit
def _ssg_steps(order, lam, w, w_avg, k0, averaging, gold, offsets, oracle, axpy, data, theta_buf, stats_buf):
    # Pegasos steps; w_avg keeps the weighted average 2/(k(k+1)) sum_t t w_t
    k = k0
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        stats = stats_buf[:hi - lo]
        oracle(i, w, data, theta_buf[:hi - lo], stats)
        step = 1.0 / (lam * (k + 1.0))
        w *= 1.0 - step * lam
        axpy(i, stats - gold[lo:hi], -step, w, data)
        k += 1
        if averaging:
            w_avg += (2.0 / (k + 1.0)) * (w - w_avg)
    return k


@njit
def _fw_pass(w, lam, n, gold, offsets, oracle, axpy, data, w_s, theta_buf, stats_buf):
    # one oracle pass at w: accumulates the corner w_s, returns (sum of losses, sum of hinges)
    loss_sum = 0.0
    hinge_sum = 0.0
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = oracle(i, w, data, theta, stats)
        diff = gold[lo:hi] - stats
        loss_sum += loss
        hinge_sum += loss - np.dot(diff, theta)
        axpy(i, diff, 1.0 / (lam * n), w_s, data)
    return loss_sum, hinge_sum


def fw_pass(cp: CompiledProblem, w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Batch FW corner at ``w``: ``(w_s, l_s, mean hinge)`` from one compiled oracle pass."""
    p, k = cp.problem, cp.kernels
    w_s = np.zeros_like(w)
    loss_sum, hinge_sum = _fw_pass(w, p.lam, p.n, cp.gold, cp.offsets, k.oracle, k.axpy, k.data, w_s,
                                   cp.theta_buf, cp.stats_buf)
    return w_s, loss_sum / p.n, hinge_sum / p.n


def ssg_steps(cp: CompiledProblem, order: np.ndarray, w: np.ndarray, w_avg: np.ndarray, k0: int,
              averaging: bool) -> int:
    """Pegasos steps on ``order`` in place; returns the new step count."""
    k = cp.kernels
    return _ssg_steps(np.asarray(order, dtype=np.int64), cp.problem.lam, w, w_avg, k0, averaging, cp.gold,
                      cp.offsets, k.oracle, k.axpy, k.data, cp.theta_buf, cp.stats_buf)


class CompiledBlockUpdater:
    """Runs BCFW steps through ``_bcfw_steps`` on a model's compiled kernels."""

    compiled = True

    def __init__(self, problem: SSVMProblem, state: BlockState, compiled: CompiledProblem):
        self.problem = problem
        self.state = state
        self.compiled_problem = compiled
        if not np.array_equal(state.offsets, compiled.offsets):
            raise AssertionError("compiled kernels and block state disagree on the statistics layout")

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        """BCFW steps on ``order`` (see ``PythonBlockUpdater.run``)."""
        st, cp = self.state, self.compiled_problem
        k = cp.kernels
        scalars = np.array([st.ell, st.v, float(st.k)])
        _bcfw_steps(np.asarray(order, dtype=np.int64), line_search, averaging, self.problem.n, self.problem.lam,
                    st.w, st.m, st.r, st.offsets, st.ell_i, scalars, k.oracle, k.sqnorm, k.axpy,
                    k.data, cp.theta_buf, cp.stats_buf)
        st.ell, st.v, st.k = float(scalars[0]), float(scalars[1]), round(scalars[2])

    def mean_hinge(self, w: np.ndarray) -> float:
        return self.compiled_problem.mean_hinge(w)

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)`` with the adjoint pass compiled (see :meth:`BlockState.averaged`)."""
        st = self.state
        if st.k <= 1:
            return st.w.copy(), st.ell
        factor = 2.0 / (st.k * (st.k + 1.0))
        w_bar = st.w.copy()
        self.compiled_problem.add_adjoint(st.r, factor / (self.problem.lam * self.problem.n), w_bar)
        return w_bar, st.ell - factor * st.v

