"""A problem's compiled view: whole passes of its model's numba kernels, no Python per example.

``Model.compiled_kernels(problem)`` returns packed data plus jitted ``oracle`` / ``sqnorm`` /
``axpy`` functions (see ``structopt.models._chain_compiled``); :class:`CompiledProblem` wraps
them with the gold statistics and scratch buffers, and runs the passes every solver needs (the
hinge values behind ``SSVMProblem.primal``, adjoint sums). Solver loops built on the same kernels
live in ``structopt.solvers._compiled``.

The loops are jitted without ``cache=True``: they take the kernels as arguments, whose numba
types differ per process, so a disk cache would never hit (only grow).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from structopt.errors import NotSupportedError


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


class CompiledProblem:
    """A problem together with its model's compiled kernels, gold statistics and scratch buffers.

    Flat compact statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated
    arrays (the layout of ``SSVMProblem.compact_gold_stats``).
    """

    def __init__(self, problem: Any, kernels: Any):
        self.problem = problem
        self.kernels = kernels
        self.gold, self.offsets = problem.compact_gold_stats()
        if not np.array_equal(np.diff(self.offsets), kernels.sizes):
            raise AssertionError("compiled kernels and the problem disagree on the statistics layout")
        width = int(kernels.sizes.max())
        self.theta_buf = np.empty(width)
        self.stats_buf = np.empty(width)

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)`` in one compiled pass."""
        k = self.kernels
        return _hinge_sum(w, k.oracle, k.data, self.offsets, self.gold, self.theta_buf, self.stats_buf) / self.problem.n

    def oracle_only(self, order: np.ndarray, w: np.ndarray) -> float:
        """The oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
        k = self.kernels
        return _oracle_steps(np.asarray(order, dtype=np.int64), w, k.oracle, k.data, self.offsets,
                             self.theta_buf, self.stats_buf)

    def add_adjoint(self, blocks: np.ndarray, scale: float, out: np.ndarray) -> None:
        """``out += scale * sum_i A_i^T blocks_i`` for concatenated compact statistics ``blocks``."""
        _adjoint_sum(blocks, self.offsets, scale, out, self.kernels.axpy, self.kernels.data)


def compiled_problem(problem: Any, compiled: bool | None = None) -> CompiledProblem | None:
    """The compiled view of ``problem`` (cached on it), or None.

    ``compiled=None`` uses it when the model provides kernels, ``False`` never, ``True`` demands it.
    """
    if compiled is False:
        return None
    kernels = problem.compiled_kernels()
    if kernels is None:
        if compiled:
            raise NotSupportedError(f"{problem.model!r} with {problem.loss!r} has no compiled kernels")
        return None
    if getattr(problem, "_compiled_problem", None) is None:
        problem._compiled_problem = CompiledProblem(problem, kernels)
    return problem._compiled_problem
