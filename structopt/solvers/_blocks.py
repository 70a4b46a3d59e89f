"""BCFW block state in statistics space and the two ways of running block steps over it.

``BlockState`` holds everything a BCFW run needs to continue (it is what checkpoints store).
``PythonBlockUpdater`` works for every model and structure through the public interfaces;
``FusedBlockUpdater`` runs whole sequences of steps in one numba call when the problem has a fused
view (see :mod:`structopt.fused`). Both perform the same arithmetic.

Weight constraints (``SSVMProblem.constrained``): the state keeps ``w_hat = A alpha / lam``; the
oracles and the reported weights use ``w = project_weights(w_hat)``, the minimiser of the
Lagrangian over the feasible set, and the dual is ``ell - lam/2 ||w||^2`` (Moreau: the set is a
cone). ``1/2 ||P(.)||^2`` has a 1-Lipschitz gradient, so the unconstrained curvature in the line
search still bounds the dual from below: every step ascends and the gap stays certified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from structopt.archive import state_type
from structopt.fused import FusedProblem, select
from structopt.potentials import flatten, unflatten
from structopt.problem import SSVMProblem


@state_type
@dataclass
class BlockState:
    """Dual state of BCFW.

    ``w = sum_i w_i`` and ``ell = sum_i l_i`` with ``w_i = A_i^T (gold_i - m_i) / (lam n)``; ``m`` is
    the concatenation of the compact statistics ``m_i`` (``offsets`` delimit them). Weighted
    averaging is lazy and in statistics space: ``r`` and ``v`` accumulate ``sum_j j(j-1)/2`` times
    the step increments of ``m`` and ``ell``, so that ``m_bar = m - 2 r / (k (k+1))`` and
    ``w_bar = w + 2 / (k (k+1)) * sum_i A_i^T r_i / (lam n)`` cost one adjoint pass, paid only when
    the average is wanted, never inside a step.
    """

    w: np.ndarray
    ell: float
    m: np.ndarray
    offsets: np.ndarray
    ell_i: np.ndarray
    r: np.ndarray
    v: float
    k: int = 0
    perm: np.ndarray | None = None  # the current pass's permutation (sampling="perm")
    # an index of m kept by fused loops (chain: the non-zeros of each transition block); rebuilt
    # from m when None, and dropped by any other change to m (move_block) and by checkpoints. Code
    # that writes m directly, or shares m between states (copy.copy), must set it to None.
    fused_index: tuple | None = None

    def __getstate__(self) -> dict:
        # checkpoints: the averaging accumulator is mostly zeros on fused chain runs (shared blocks
        # are summed elsewhere), so store its non-zeros only
        state = dict(self.__dict__)
        state["fused_index"] = None
        nonzero = np.flatnonzero(self.r)
        if nonzero.size < self.r.size // 2:
            state["r"] = (self.r.size, nonzero, self.r[nonzero])
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state["r"], tuple):
            size, nonzero, values = state["r"]
            r = np.zeros(size)
            r[nonzero] = values
            state = {**state, "r": r}
        self.__dict__.update({"fused_index": None, **state})

    def move_block(self, i: int, seg: slice, direction: np.ndarray, d_loss: float, gamma: float,
                   weight: float) -> None:
        """Step block i by ``gamma`` along ``(direction, d_loss)``: its statistics ``m_i`` by ``gamma *
        direction``, its loss share ``l_i`` by ``gamma * d_loss`` (towards a corner with loss share ``l_s``:
        ``direction = s - m_i``, ``d_loss = l_s - l_i``); ``weight`` is the averaging weight of this step (0
        without averaging). The weights ``w`` are the caller's (they depend on how the adjoint is applied)."""
        delta_ell = gamma * d_loss
        self.ell += delta_ell
        self.v += weight * delta_ell
        self.ell_i[i] += delta_ell
        self.m[seg] += gamma * direction
        self.fused_index = None
        if weight:
            self.r[seg] += (weight * gamma) * direction

    def rescale_restart(self, factor: float) -> None:
        """Restart from this dual iterate with ``w`` scaled by ``factor`` (the regularisation path's warm start
        at a new lambda: ``w = A alpha / (lam n)`` with ``alpha`` kept, ``factor = lam_old / lam_new``): the
        weighted average, the step count and the permutation start afresh."""
        self.w *= factor
        self.r[:] = 0.0
        self.v, self.k, self.perm, self.fused_index = 0.0, 0, None, None

    @classmethod
    def initial(cls, problem: SSVMProblem) -> BlockState:
        """All blocks at their gold vertex: ``w = 0``, ``ell = 0``."""
        m, offsets = problem.compact_gold_stats()  # a fresh float64 array: m owns it
        return cls(w=problem.zeros(), ell=0.0, m=m, offsets=offsets, ell_i=np.zeros(problem.n),
                   r=np.zeros(m.shape), v=0.0)  # calloc: pages appear when first written

    def averaged(self, problem: SSVMProblem) -> tuple[np.ndarray, float]:
        """Weighted average ``(w_hat_bar, l_bar)`` of the iterates 1..k (the iterate itself at k <= 1)."""
        if self.k <= 1:
            return self.w.copy(), self.ell
        factor = 2.0 / (self.k * (self.k + 1.0))
        w_bar = self.w.copy()
        for i in range(problem.n):
            theta = problem.theta(i, self.w)
            block = unflatten(self.r[self.offsets[i]:self.offsets[i + 1]], theta)
            problem.adjoint(i, block, w_bar, factor / (problem.lam * problem.n))
        return w_bar, self.ell - factor * self.v


def gamma_line_search(numerator: float, denominator: float, limit: float = 1.0) -> float:
    """argmin over ``[0, limit]`` of the dual quadratic along a direction with slope ``numerator`` and
    curvature ``denominator`` (zero curvature: 0 or ``limit``); ``limit = 1`` for a FW direction, the
    largest step that keeps the active-set weights feasible for pairwise / away steps."""
    if denominator <= 0.0:
        return limit if numerator > 0.0 else 0.0
    return min(limit, max(0.0, numerator / denominator))


class PythonBlockUpdater:
    """Block steps through the problem's per-example operators (works for everything)."""

    compiled = False

    def __init__(self, problem: SSVMProblem, state: BlockState):
        self.problem = problem
        self.state = state

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)`` (one batch oracle pass)."""
        return float(np.mean(self.problem.hinge_losses(w)))

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)``, see :meth:`BlockState.averaged`."""
        return self.state.averaged(self.problem)

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        """Take one BCFW step on each example of ``order`` in turn (``u``, ``v`` kept if ``averaging``)."""
        p, st = self.problem, self.state
        n, lam = p.n, p.lam
        for i in order:
            i = int(i)
            d = p.decode(i, p.project_weights(st.w))
            loss_s = d.loss / n
            stats = flatten(p.compact_stats(d.y, d.theta))
            seg = slice(st.offsets[i], st.offsets[i + 1])
            direction = stats - st.m[seg]
            numerator = float(direction @ flatten(d.theta)) / n - st.ell_i[i] + loss_s
            direction_pot = unflatten(direction, d.theta)
            if line_search:
                denominator = p.adjoint_sqnorm(i, direction_pot) / (lam * n * n)
                gamma = gamma_line_search(numerator, denominator)
            else:
                gamma = 2.0 * n / (st.k + 2.0 * n)
            st.k += 1
            if gamma == 0.0:
                continue
            weight = 0.5 * st.k * (st.k - 1.0) if averaging else 0.0
            p.adjoint(i, direction_pot, st.w, -gamma / (lam * n))
            st.move_block(i, seg, direction, loss_s - st.ell_i[i], gamma, weight)


class FusedBlockUpdater:
    """Runs BCFW steps through the fused ``bcfw_steps`` loop of the problem's kernel family."""

    compiled = True

    def __init__(self, problem: SSVMProblem, state: BlockState, fused: FusedProblem):
        self.problem = problem
        self.state = state
        self.fused = fused
        if not np.array_equal(state.offsets, fused.offsets):
            raise RuntimeError("fused kernels and block state disagree on the statistics layout")

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True, stages: int = 5,
            gaps: np.ndarray | None = None) -> None:
        """BCFW steps on ``order`` (see ``PythonBlockUpdater.run``); ``stages < 5`` runs only the first
        parts of each step, for timing breakdowns (see the family's ``bcfw_steps``). ``gaps`` (n values):
        each visited block's exact gap at its step is stored there (gap sampling)."""
        st = self.state
        scalars = np.array([st.ell, st.v, float(st.k)])
        if st.fused_index is None:
            st.fused_index = self.fused.block_index(st.m)
        self.fused.bcfw_steps(np.asarray(order, dtype=np.int64), line_search, averaging, st, scalars, stages, gaps)
        st.ell, st.v, st.k = float(scalars[0]), float(scalars[1]), round(scalars[2])

    def block_gaps(self, gaps: np.ndarray) -> None:
        """Every block's exact gap at the current iterate into ``gaps`` (one oracle pass, no step: the
        family's ``bcfw_steps`` with ``stages=2``)."""
        self.run(np.arange(self.problem.n), True, False, stages=2, gaps=gaps)

    def mean_hinge(self, w: np.ndarray) -> float:
        return self.fused.mean_hinge(w)

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)`` with the adjoint pass fused (see :meth:`BlockState.averaged`)."""
        st = self.state
        if st.k <= 1:
            return st.w.copy(), st.ell
        factor = 2.0 / (st.k * (st.k + 1.0))
        w_bar = st.w.copy()
        self.fused.add_adjoint(st.r, factor / (self.problem.lam * self.problem.n), w_bar)
        return w_bar, st.ell - factor * st.v


def make_block_updater(problem: SSVMProblem, state: BlockState, fused: bool | None):
    """The fused updater when available (or demanded), else the Python one."""
    view = select(problem, fused)
    return PythonBlockUpdater(problem, state) if view is None else FusedBlockUpdater(problem, state, view)
