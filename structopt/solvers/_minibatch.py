"""Mini-batch BCFW (Wang, Sadhanala, Dai, Neiswanger, Sra, Xing, ICML 2016): tau blocks per step.

The oracles of a batch ``B`` of blocks are solved at the same weights ``w`` (in parallel on the
executor), then every block of the batch moves towards its corner with one common step ``gamma``:

    w_i <- (1 - gamma) w_i + gamma w_s,i,   l_i <- (1 - gamma) l_i + gamma l_s,i   (i in B).

In statistics space (see :mod:`structopt.solvers._blocks`) the weight change is
``-gamma / (lam n) * sum_{i in B} A_i^T d_i`` with ``d_i = stats_i - m_i``. Along this joint
direction the dual is a concave quadratic with slope ``g_B = sum_{i in B} g_i`` (the sum of the
block gaps, each >= 0) and curvature ``||sum_{i in B} A_i^T d_i||^2 / (lam n^2)``, so the exact
line search ``gamma = clip(g_B / curvature, 0, 1)`` never decreases the dual: the state stays a
feasible dual point and the gap of :func:`~structopt.solvers.bcfw.bcfw` stays a certified bound.
Without line search the step is the paper's ``2 n tau / (tau^2 K + 2 n)`` with ``K = k / tau``
for ``k`` oracle calls so far (the number of batches when every batch is full), clipped to 1: the
paper's rule starts at ``tau`` and exceeds 1 for the first ``2 n (1 - 1/tau)`` calls, where it
would carry the batch's blocks out of their simplices (an infeasible dual, so a "gap" that no
longer bounds the sub-optimality). Its analysis takes the step in ``[0, 1]`` (the set curvature
is defined over convex combinations), and a step of 1 on a batch is still a Frank-Wolfe step.

Effect of tau per oracle call (``benchmarks/minibatch_bcfw.py``, lam = 0.01, weighted average,
gap after 10 passes for tau = 1, 4, 16, 64, 256): OCR, 6,251 words: 0.125, 0.153, 0.197, 0.314,
0.439; random chains, n = 200: 1.36, 1.56, 2.12, 2.88, 4.14. Progress per call degrades slowly:
on OCR tau = 4 needs about 1.3x the oracle calls of BCFW for the same gap and tau = 16 about 2x
(its gap at 10 passes is BCFW's at 5), so with tau workers and oracle-bound passes a batch of
4-16 still gains wall-clock time, while tau close to n is batch Frank-Wolfe.

A block drawn twice in one batch (possible at a permutation boundary or with uniform sampling)
is stepped once: both oracle answers are the same point. Weighted averaging counts a batch of
``tau`` blocks as ``tau`` iterations whose first ``tau - 1`` do not move (the lazy average of
:class:`~structopt.solvers._blocks.BlockState` holds for any step pattern).
"""

from __future__ import annotations

import numpy as np

from structopt.potentials import unflatten
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState, gamma_line_search


class MiniBatchUpdater:
    """Runs mini-batch BCFW steps over a :class:`BlockState`, the oracles on an executor.

    Parameters
    ----------
    problem : SSVMProblem
    state : BlockState
        Updated in place.
    executor : structopt.parallel.Executor
        Where the batch's oracles run (:meth:`~structopt.parallel.Executor.block_oracles`).
    batch_size : int
        tau, blocks per step.
    """

    compiled = False

    def __init__(self, problem: SSVMProblem, state: BlockState, executor, batch_size: int):
        self.problem = problem
        self.state = state
        self.executor = executor
        self.batch_size = int(batch_size)

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)``, see :meth:`BlockState.averaged`."""
        return self.state.averaged(self.problem)

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        """Mini-batch steps on consecutive slices of ``order`` of ``batch_size`` blocks each."""
        for start in range(0, len(order), self.batch_size):
            self._step(np.asarray(order[start:start + self.batch_size], dtype=np.int64), line_search, averaging)

    def _step(self, batch: np.ndarray, line_search: bool, averaging: bool) -> None:
        p, st = self.problem, self.state
        n, lam = p.n, p.lam
        blocks = list(dict.fromkeys(int(i) for i in batch))  # distinct, in drawing order
        answers = self.executor.block_oracles(p.project_weights(st.w), blocks)
        directions, slope = [], 0.0
        adjoint = np.zeros(p.n_params)  # sum_i A_i^T d_i
        for i, (stats, theta, loss) in zip(blocks, answers, strict=True):
            seg = slice(st.offsets[i], st.offsets[i + 1])
            direction = stats - st.m[seg]
            slope += float(direction @ theta) / n - st.ell_i[i] + loss / n  # block gap g_i
            p.adjoint(i, unflatten(direction, p.like(i)), adjoint, 1.0)
            directions.append((i, seg, direction, loss / n))
        if line_search:
            gamma = gamma_line_search(slope, float(adjoint @ adjoint) / (lam * n * n))
        else:
            tau = self.batch_size
            gamma = min(1.0, 2.0 * n * tau / (tau * tau * (st.k / tau) + 2.0 * n))  # a convex combination
        st.k += len(batch)
        if gamma == 0.0:
            return
        weight = 0.5 * st.k * (st.k - 1.0) if averaging else 0.0
        st.w -= (gamma / (lam * n)) * adjoint
        for i, seg, direction, loss_s in directions:
            st.move_block(i, seg, direction, loss_s - st.ell_i[i], gamma, weight)
