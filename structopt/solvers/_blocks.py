"""BCFW block state in statistics space and the two ways of running block steps over it.

``BlockState`` holds everything a BCFW run needs to continue (it is what checkpoints store).
``PythonBlockUpdater`` works for every model and structure through the public interfaces;
``CompiledBlockUpdater`` runs whole sequences of steps in one numba call when the model supplies
compiled kernels (see ``Model.compiled_kernels``). Both perform the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from structopt.problem import SSVMProblem
from structopt.structures.base import flatten, unflatten


@dataclass
class BlockState:
    """Dual state of BCFW.

    ``w = sum_i w_i`` and ``ell = sum_i l_i`` with ``w_i = A_i^T (gold_i - m_i) / (lam n)``; ``m`` is
    the concatenation of the compact statistics ``m_i`` (``offsets`` delimit them); ``u`` and ``v``
    accumulate ``sum_j j(j-1)/2`` times the step increments of ``w`` and ``ell`` (lazy averaging).
    """

    w: np.ndarray
    ell: float
    m: np.ndarray
    offsets: np.ndarray
    ell_i: np.ndarray
    u: np.ndarray
    v: float
    k: int = 0

    @classmethod
    def initial(cls, problem: SSVMProblem) -> BlockState:
        """All blocks at their gold vertex: ``w = 0``, ``ell = 0``."""
        zero = problem.model.zeros()
        parts = []
        for i in range(problem.n):
            theta = problem.theta(i, zero)
            gold = flatten(problem.model.reduce_stats(problem.gold_stats(i, theta)))
            if gold.size != flatten(theta).size:
                raise AssertionError("compact statistics must have the potentials' layout")
            parts.append(gold)
        offsets = np.zeros(problem.n + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([p.size for p in parts])
        return cls(w=zero, ell=0.0, m=np.concatenate(parts), offsets=offsets, ell_i=np.zeros(problem.n),
                   u=problem.model.zeros(), v=0.0)

    def averaged(self) -> tuple[np.ndarray, float]:
        """Weighted average ``(w_bar, l_bar)`` of the iterates 1..k (the iterate itself at k <= 1)."""
        if self.k <= 1:
            return self.w.copy(), self.ell
        factor = 2.0 / (self.k * (self.k + 1.0))
        return self.w - factor * self.u, self.ell - factor * self.v


def gamma_line_search(numerator: float, denominator: float) -> float:
    """argmin over [0, 1] of the dual quadratic along the FW direction (zero curvature: 0 or 1)."""
    if denominator <= 0.0:
        return 1.0 if numerator > 0.0 else 0.0
    return min(1.0, max(0.0, numerator / denominator))


class PythonBlockUpdater:
    """Block steps through the model / structure / loss interfaces (works for everything)."""

    compiled = False

    def __init__(self, problem: SSVMProblem, state: BlockState):
        self.problem = problem
        self.state = state

    def run(self, order: np.ndarray, line_search: bool) -> None:
        """Take one BCFW step on each example of ``order`` in turn."""
        p, st = self.problem, self.state
        model, structure = p.model, p.structure
        n, lam = p.n, p.lam
        for i in order:
            i = int(i)
            d = p.decode(i, st.w)
            loss_s = d.loss / n
            stats = flatten(model.reduce_stats(structure.stats(d.y, d.theta)))
            seg = slice(st.offsets[i], st.offsets[i + 1])
            direction = stats - st.m[seg]
            numerator = float(direction @ flatten(d.theta)) / n - st.ell_i[i] + loss_s
            direction_pot = unflatten(direction, d.theta)
            if line_search:
                denominator = model.features_sqnorm(p.X[i], direction_pot) / (lam * n * n)
                gamma = gamma_line_search(numerator, denominator)
            else:
                gamma = 2.0 * n / (st.k + 2.0 * n)
            st.k += 1
            if gamma == 0.0:
                continue
            weight = 0.5 * st.k * (st.k - 1.0)
            scale = -gamma / (lam * n)
            model.add_features(p.X[i], direction_pot, st.w, scale)
            if weight:
                model.add_features(p.X[i], direction_pot, st.u, weight * scale)
            delta_ell = gamma * (loss_s - st.ell_i[i])
            st.ell += delta_ell
            st.v += weight * delta_ell
            st.ell_i[i] += delta_ell
            st.m[seg] += gamma * direction


def make_block_updater(problem: SSVMProblem, state: BlockState, compiled: bool | None):
    """The compiled updater when available (or demanded), else the Python one."""
    kernels = problem.compiled_kernels() if compiled is not False else None
    if kernels is None:
        if compiled:
            from structopt.errors import NotSupportedError

            raise NotSupportedError(f"{problem.model!r} with {problem.loss!r} has no compiled BCFW kernels")
        return PythonBlockUpdater(problem, state)
    from structopt.solvers._blocks_compiled import CompiledBlockUpdater

    return CompiledBlockUpdater(problem, state, kernels)
