"""Sparse-friendly iterates for stochastic primal solvers (SGD, SVRG, Casimir).

A step of these methods has the form ``w <- rho w - gamma A_i^T d - gamma c`` with a dense
constant ``c`` (SVRG's full gradient minus the prox term, zero for SGD) and a sparse part
``A_i^T d`` that touches only the weight rows of the features present in ``x_i``. Writing
``w = a v + b c`` turns the dense parts into scalar updates (``a <- rho a``, ``b <- rho b -
gamma``) and the sparse part into ``v <- v - (gamma / a) A_i^T d``, applied in place with
``SSVMProblem.adjoint``. A weighted running sum of the iterates ``S = sum_t omega_t w_t`` is kept
as ``S = P + B v + C c``: when ``v`` moves by ``delta``, ``P <- P - B delta`` (same sparsity),
then ``B += omega a`` and ``C += omega b``. So a step costs O(nnz(x_i) S) whatever the dimension.
"""

from __future__ import annotations

import copy

import numpy as np

from structopt.archive import state_type
from structopt.potentials import Potentials, add, scale

_TINY = 1e-12  # fold the scale into v below this, to keep ``gamma / a`` finite


@state_type
class LazyIterate:
    """``w = a v + b c`` with a lazily weighted running sum of the iterates.

    Parameters
    ----------
    problem : SSVMProblem
        Supplies the per-example operators ``theta`` and ``adjoint``.
    w0 : ndarray
        Starting point (copied).
    c : ndarray or None
        Dense constant direction (None: zero).
    """

    def __init__(self, problem, w0: np.ndarray, c: np.ndarray | None = None):
        self.problem = problem
        self.v = np.array(w0, dtype=float, copy=True)
        self.a = 1.0
        self.b = 0.0
        self.c = c
        self.P = np.zeros_like(self.v)
        self.B = 0.0
        self.C = 0.0
        self.weight = 0.0  # sum of omega_t

    @classmethod
    def restarted(cls, problem, w: np.ndarray, weight: float) -> LazyIterate:
        """An iterate at ``w`` whose running sum already holds ``w`` with weight ``weight`` (an average
        of earlier iterates), so that averaging continues from it instead of starting over."""
        it = cls(problem, w)
        if weight > 0.0:
            it.P = weight * it.v
            it.weight = float(weight)
        return it

    def __deepcopy__(self, memo: dict) -> LazyIterate:
        # the problem is shared, never copied: a copy is another iterate of the same problem (and a
        # checkpoint stores the problem by reference)
        clone = LazyIterate.__new__(LazyIterate)
        memo[id(self)] = clone
        clone.__dict__.update({key: value if key == "problem" else copy.deepcopy(value, memo)
                               for key, value in self.__dict__.items()})
        return clone

    # ------------------------------------------------------------------ reading
    def potentials(self, i: int) -> Potentials:
        """``A_i w`` of example i without forming ``w`` (the problem is linear in the weights)."""
        theta = scale(self.problem.theta(i, self.v), self.a)
        if self.c is not None and self.b != 0.0:
            theta = add(theta, self.problem.theta(i, self.c), self.b)
        return theta

    def dense(self) -> np.ndarray:
        """The current iterate as a dense vector (O(d); evaluations only)."""
        w = self.a * self.v
        if self.c is not None and self.b != 0.0:
            w += self.b * self.c
        return w

    def average(self) -> np.ndarray:
        """``sum_t omega_t w_t / sum_t omega_t`` (the current iterate if nothing was accumulated)."""
        if self.weight == 0.0:
            return self.dense()
        s = self.P + self.B * self.v
        if self.c is not None and self.C != 0.0:
            s += self.C * self.c
        return s / self.weight

    # ------------------------------------------------------------------ writing
    def _fold(self, new_a: float) -> None:
        # rewrite w with a = 1 (dense, rare): keep S = P + B v valid by moving B v into P
        if self.B != 0.0:
            self.P += self.B * self.v
            self.B = 0.0
        self.v *= new_a
        self.a = 1.0

    def step(self, rho: float, gamma: float, i: int, d: Potentials | None, omega: float = 0.0,
             nonnegative: np.ndarray | None = None) -> None:
        """``w <- rho w - gamma A_i^T d - gamma c`` (example i), clipped at 0 on the entries ``nonnegative`` (a
        projected step), then add ``omega w`` to the running sum."""
        new_a = rho * self.a
        if abs(new_a) < _TINY:
            self._fold(new_a)
        else:
            self.a = new_a
        self.b = rho * self.b - (gamma if self.c is not None else 0.0)
        if d is not None:
            factor = gamma / self.a
            self.problem.adjoint(i, d, self.v, -factor)  # v <- v + delta, delta = -factor A^T d
            if self.B != 0.0:
                self.problem.adjoint(i, d, self.P, self.B * factor)  # P <- P - B delta
        if nonnegative is not None:
            self.project_nonnegative(nonnegative)
        if omega:
            self.B += omega * self.a
            self.C += omega * self.b
            self.weight += omega

    def fused_steps(self, view, order: np.ndarray, rho: float, gamma: float, omega: float, mu: float, kind: str,
                    k: int, snapshot: np.ndarray | None = None) -> None:
        """:meth:`step` for every i in ``order``, with ``d`` the smoothed gradient statistics at the current
        iterate (minus the flat ``snapshot``'s), in one call of the fused view's kernels
        (:meth:`structopt.fused.FusedProblem.smooth_steps`; unconstrained weights only)."""
        if self.c is not None and getattr(self, "_c_theta", None) is None:  # c is fixed for the iterate's life
            self._c_theta = view.node_potentials(self.c)
        scalars = np.array([self.a, self.b, self.B, self.C, self.weight])
        view.smooth_steps(order, rho, gamma, omega, mu, kind, k, snapshot, self.v, self.c,
                          getattr(self, "_c_theta", None), self.P, scalars)
        self.a, self.b, self.B, self.C, self.weight = (float(x) for x in scalars)

    def project_nonnegative(self, index: np.ndarray) -> None:
        """Clip the entries ``index`` of ``w`` at 0 (a projected step), touching only those entries."""
        if index.size == 0:
            return
        w = self.a * self.v[index]
        if self.c is not None and self.b != 0.0:
            w += self.b * self.c[index]
        negative = w < 0.0
        if not negative.any():
            return
        hit = index[negative]
        delta = -w[negative] / self.a  # v moves so that a v + b c = 0 there
        self.v[hit] += delta
        if self.B != 0.0:
            self.P[hit] -= self.B * delta

    def nbytes(self) -> int:
        """Bytes held by the dense vectors of this iterate."""
        return int(self.v.nbytes + self.P.nbytes + (0 if self.c is None else self.c.nbytes))
