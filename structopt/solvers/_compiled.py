"""BCFW block steps fused in numba, driving a model's compiled kernels (one call per chunk).

The arithmetic is exactly that of ``PythonBlockUpdater``; the model supplies ``oracle``,
``sqnorm`` and ``axpy`` (see ``structopt.models._chain_compiled``) and this driver never looks
inside an example.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState


@njit
def _bcfw_steps(order, line_search, averaging, n, lam, w, m, r, offsets, ell_i, scalars,
                oracle, sqnorm, axpy, data, theta_buf, stats_buf):
    ell, v, k = scalars[0], scalars[1], scalars[2]
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        size = hi - lo
        theta = theta_buf[:size]
        stats = stats_buf[:size]
        loss_s = oracle(i, w, data, theta, stats) / n
        direction = stats - m[lo:hi]
        numerator = np.dot(direction, theta) / n - ell_i[i] + loss_s
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
        weight = 0.5 * k * (k - 1.0) if averaging else 0.0
        axpy(i, direction, -gamma / (lam * n), w, data)
        delta_ell = gamma * (loss_s - ell_i[i])
        ell += delta_ell
        v += weight * delta_ell
        ell_i[i] += delta_ell
        for j in range(size):
            m[lo + j] += gamma * direction[j]
            r[lo + j] += weight * gamma * direction[j]
    scalars[0], scalars[1], scalars[2] = ell, v, k


@njit
def _adjoint_sum(blocks, offsets, scale, out, axpy, data):
    # out += scale * sum_i A_i^T blocks_i
    for i in range(offsets.shape[0] - 1):
        axpy(i, blocks[offsets[i]:offsets[i + 1]], scale, out, data)


@njit
def _oracle_steps(order, w, oracle, data, offsets, theta_buf, stats_buf):
    # the same oracle calls as a BCFW pass, without any update (for overhead ratios)
    total = 0.0
    for i in order:
        size = offsets[i + 1] - offsets[i]
        total += oracle(i, w, data, theta_buf[:size], stats_buf[:size])
    return total


@njit
def _hinge_sum(w, oracle, data, offsets, gold, theta_buf, stats_buf):
    total = 0.0
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = oracle(i, w, data, theta, stats)
        total += loss + np.dot(stats - gold[lo:hi], theta)
    return total


class CompiledBlockUpdater:
    """Runs BCFW steps through ``_bcfw_steps`` on a model's compiled kernels."""

    compiled = True

    def __init__(self, problem: SSVMProblem, state: BlockState, kernels):
        self.problem = problem
        self.state = state
        self.kernels = kernels
        if not np.array_equal(np.diff(state.offsets), kernels.sizes):
            raise AssertionError("compiled kernels and block state disagree on the statistics layout")
        width = int(kernels.sizes.max())
        self.theta_buf = np.empty(width)
        self.stats_buf = np.empty(width)
        self._gold = None

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        st, kern = self.state, self.kernels
        scalars = np.array([st.ell, st.v, float(st.k)])
        _bcfw_steps(np.asarray(order, dtype=np.int64), line_search, averaging, self.problem.n, self.problem.lam,
                    st.w, st.m, st.r, st.offsets, st.ell_i, scalars, kern.oracle, kern.sqnorm, kern.axpy,
                    kern.data, self.theta_buf, self.stats_buf)
        st.ell, st.v, st.k = float(scalars[0]), float(scalars[1]), round(scalars[2])

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)`` with the adjoint pass compiled (see :meth:`BlockState.averaged`)."""
        st = self.state
        if st.k <= 1:
            return st.w.copy(), st.ell
        factor = 2.0 / (st.k * (st.k + 1.0))
        w_bar = st.w.copy()
        _adjoint_sum(st.r, st.offsets, factor / (self.problem.lam * self.problem.n), w_bar, self.kernels.axpy,
                     self.kernels.data)
        return w_bar, st.ell - factor * st.v

    def oracle_only(self, order: np.ndarray, w: np.ndarray) -> float:
        """The oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
        kern = self.kernels
        return _oracle_steps(np.asarray(order, dtype=np.int64), w, kern.oracle, kern.data, self.state.offsets,
                             self.theta_buf, self.stats_buf)

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)`` in one compiled pass."""
        if self._gold is None:
            self._gold = BlockState.initial(self.problem).m
        kern = self.kernels
        return _hinge_sum(w, kern.oracle, kern.data, self.state.offsets, self._gold, self.theta_buf,
                          self.stats_buf) / self.problem.n
