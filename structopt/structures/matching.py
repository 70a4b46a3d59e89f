"""Bipartite matchings: assignment, max-marginals, K-best (Murty), projection onto the Birkhoff polytope.

Outputs are int64 arrays ``y`` of shape (n_left,): ``y[j]`` is the right node matched to left node
j, or -1 when j is unmatched. Statistics are the 0/1 assignment matrix plus, when unmatched nodes
are allowed, the indicators of unmatched left and right nodes.

Every oracle reduces the instance to one *square* assignment problem (see :meth:`_square`):

- ``allow_unmatched``: unmatched scores are folded into the edges,
  ``score(y) = sum(a) + sum(b) + sum_{j->k} (E[j, k] - a[j] - b[k])``, and the (L + R) square
  matrix ``[[E - a - b, 0], [0, 0]]`` has dummy columns (left node unmatched) and dummy rows
  (right node unmatched) of score 0; its perfect matchings are exactly the partial matchings.
- otherwise (L <= R): R - L dummy rows of score 0 absorb the unmatched right nodes.

Assignments are solved exactly on floats with scipy's ``linear_sum_assignment`` (a shortest
augmenting path method, C++); OR-Tools' assignment solver would need integer scaling, whose
resolution can reverse the order of scores closer than the scale.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import NotSupportedError, check_count, example_error, numeric_array
from structopt.structures import _matching_kernels as kern
from structopt.structures._partition_topk import partition_topk
from structopt.structures.base import Polytope, Structure, check_flag, random_like, refuse_nonfinite, unsupported
from structopt.structures.registry import register_structure

NEG_INF = -np.inf


class MatchingPotentials(NamedTuple):
    """Potentials (or statistics) of a bipartite matching between L left and R right nodes.

    Attributes
    ----------
    edge : ndarray, shape (L, R)
        Score of matching left j to right k (statistics: the 0/1 assignment matrix).
    unmatched_left : ndarray, shape (L,), or (0,) when unmatched nodes are not allowed
        Score of leaving left node j unmatched (statistics: its indicator).
    unmatched_right : ndarray, shape (R,), or (0,) when unmatched nodes are not allowed
        Score of leaving right node k unmatched (statistics: its indicator).
    """

    edge: np.ndarray
    unmatched_left: np.ndarray
    unmatched_right: np.ndarray


class ProjectionInfo(NamedTuple):
    """Certificate of :meth:`BipartiteMatching.project`: KKT residuals of the returned point."""

    kkt_residual: float
    iterations: int
    certified: bool


@register_structure("matching")
class BipartiteMatching(Structure):
    """Matchings between L left and R right nodes; outputs are int64 arrays (L,) with -1 = unmatched.

    Parameters
    ----------
    n_left, n_right : int, optional
        Sizes of the two sides. When given, potentials must have that shape; when omitted, the
        sizes are read off each instance's potentials (one structure serves sentences of any length).
    allow_unmatched : bool, default False
        Partial matchings, with per-node scores for staying unmatched (``MatchingPotentials``
        fields ``unmatched_left``/``unmatched_right``). When False every left node is matched,
        which needs ``n_left <= n_right``; right nodes beyond n_left stay unmatched at no score.

    Notes
    -----
    Potentials may be given as a plain (L, R) array of edge scores (unmatched scores 0); oracles
    return statistics as :class:`MatchingPotentials`.
    """

    name = "BipartiteMatching"
    Potentials = MatchingPotentials

    example_variants = (
        {"n_left": 1, "n_right": 1, "allow_unmatched": False},
        {"n_left": 3, "n_right": 3, "allow_unmatched": False},
        {"n_left": 2, "n_right": 4, "allow_unmatched": False},
        {"n_left": 3, "n_right": 5, "allow_unmatched": False},
        {"n_left": 0, "n_right": 2, "allow_unmatched": True},
        {"n_left": 3, "n_right": 3, "allow_unmatched": True},
        {"n_left": 2, "n_right": 4, "allow_unmatched": True},
        {"n_left": 4, "n_right": 2, "allow_unmatched": True},
    )

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n_left: int = 3, n_right: int = 3,
                allow_unmatched: bool = False) -> tuple[BipartiteMatching, MatchingPotentials]:
        """A random matching of ``n_left`` x ``n_right`` nodes (the unmatched-score fields are empty
        unless ``allow_unmatched``)."""
        L, R, allow = int(n_left), int(n_right), bool(allow_unmatched)
        structure = cls(L, R, allow_unmatched=allow)  # validates the sides
        like = MatchingPotentials(np.zeros((L, R)), np.zeros(L if allow else 0), np.zeros(R if allow else 0))
        return structure, random_like(like, rng, integer=integer)

    def __init__(self, n_left: int | None = None, n_right: int | None = None, allow_unmatched: bool = False):
        self.n_left = None if n_left is None else check_count(n_left, "n_left", "BipartiteMatching", 0)
        self.n_right = None if n_right is None else check_count(n_right, "n_right", "BipartiteMatching", 0)
        self.allow_unmatched = check_flag(allow_unmatched, "allow_unmatched", "BipartiteMatching")
        if not self.allow_unmatched and self.n_left is not None and self.n_right is not None:
            self._check_sides(self.n_left, self.n_right)

    def __repr__(self) -> str:
        return (f"BipartiteMatching(n_left={self.n_left}, n_right={self.n_right}, "
                f"allow_unmatched={self.allow_unmatched})")

    def _check_sides(self, L: int, R: int, index: int | None = None) -> None:
        if not self.allow_unmatched and L > R:
            raise example_error(index, f"a matching of {L} left nodes into {R} right nodes must leave some left "
                                       "nodes unmatched: use BipartiteMatching(..., allow_unmatched=True)")

    # ------------------------------------------------------------------ layout
    def check_potentials(self, theta, index: int | None = None) -> MatchingPotentials:
        """Canonical float64 potentials (plain (L, R) arrays accepted), or raise InvalidInputError."""
        if isinstance(theta, MatchingPotentials):
            edge, ul, ur = theta
        else:
            edge, ul, ur = theta, None, None
        edge = numeric_array(edge, "matching edge potentials", index, finite=False)
        if edge.ndim != 2:
            raise example_error(index, f"matching edge potentials must be a 2-d (n_left, n_right) array, "
                                       f"got shape {edge.shape}")
        L, R = edge.shape
        if (self.n_left is not None and L != self.n_left) or (self.n_right is not None and R != self.n_right):
            raise example_error(index, f"matching edge potentials must have shape ({self.n_left}, {self.n_right}), "
                                       f"got {edge.shape}")
        self._check_sides(L, R, index)
        n_ul, n_ur = (L, R) if self.allow_unmatched else (0, 0)
        ul = (np.zeros(n_ul) if ul is None or (np.size(ul) == 0 and n_ul)
              else numeric_array(ul, "matching unmatched_left potentials", index, finite=False))
        ur = (np.zeros(n_ur) if ur is None or (np.size(ur) == 0 and n_ur)
              else numeric_array(ur, "matching unmatched_right potentials", index, finite=False))
        if ul.shape != (n_ul,) or ur.shape != (n_ur,):
            what = "" if self.allow_unmatched else " (allow_unmatched=False: no unmatched scores)"
            raise example_error(index, f"unmatched scores must have shapes ({n_ul},) and ({n_ur},){what}, "
                                       f"got {ul.shape} and {ur.shape}")
        refuse_nonfinite((("edge", edge), ("unmatched_left", ul), ("unmatched_right", ur)), "matching", index)
        return MatchingPotentials(edge, ul, ur)

    def expand(self, theta) -> MatchingPotentials:
        return self.check_potentials(theta)

    def edge_potentials(self, edge: np.ndarray, like) -> MatchingPotentials:
        """Potentials with edge scores ``edge`` (L, R) and no unmatched scores (used by edge losses)."""
        like = self.check_potentials(like)
        return MatchingPotentials(np.asarray(edge, dtype=float), np.zeros_like(like.unmatched_left),
                                  np.zeros_like(like.unmatched_right))

    def _shape(self, like) -> tuple[int, int]:
        edge = like.edge if isinstance(like, MatchingPotentials) else like
        return np.shape(edge)

    def validate_output(self, y, like, index: int | None = None) -> np.ndarray:
        L, R = self._shape(like)
        arr = numeric_array(y, "matching output", index, finite=False) if y is not None else np.asarray(y)
        if arr.shape != (L,):
            raise example_error(index, f"matching output must have shape ({L},) (one entry per left node), "
                                       f"got {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.isfinite(arr)) or not np.all(np.equal(np.mod(arr, 1), 0)):
                raise example_error(index, "matching output entries must be integers")
        arr = arr.astype(np.int64)
        low = -1 if self.allow_unmatched else 0
        bad = (arr < low) | (arr >= R)
        if np.any(bad):
            j = int(np.flatnonzero(bad)[0])
            allowed = f"[-1, {R})" if self.allow_unmatched else f"[0, {R}) (allow_unmatched=False)"
            raise example_error(index, f"matching output: left node {j} is mapped to {arr[j]}, not in {allowed}")
        used = arr[arr >= 0]
        if len(np.unique(used)) != len(used):
            values, counts = np.unique(used, return_counts=True)
            raise example_error(index, f"matching output maps several left nodes to right node "
                                       f"{int(values[counts > 1][0])}: not one-to-one")
        return arr

    # ------------------------------------------------------------------ statistics
    def stats(self, y, like) -> MatchingPotentials:
        L, R = self._shape(like)
        y = np.asarray(y, dtype=np.int64)
        edge = np.zeros((L, R))
        matched = np.flatnonzero(y >= 0)
        edge[matched, y[matched]] = 1.0
        if not self.allow_unmatched:
            return MatchingPotentials(edge, np.zeros(0), np.zeros(0))
        return MatchingPotentials(edge, (y < 0).astype(float), 1.0 - edge.sum(axis=0))

    def score(self, theta, y) -> float:
        theta = self.check_potentials(theta)
        y = np.asarray(y, dtype=np.int64)
        matched = np.flatnonzero(y >= 0)
        value = float(theta.edge[matched, y[matched]].sum())
        if self.allow_unmatched:
            free_right = np.ones(theta.edge.shape[1], dtype=bool)
            free_right[y[matched]] = False
            value += float(theta.unmatched_left[y < 0].sum()) + float(theta.unmatched_right[free_right].sum())
        return value

    def outputs(self, theta) -> Iterator[np.ndarray]:
        L, R = self._shape(theta)
        self._check_sides(L, R)
        y = np.full(L, -1, dtype=np.int64)
        used = np.zeros(R, dtype=bool)

        def rec(j: int) -> Iterator[np.ndarray]:
            if j == L:
                yield y.copy()
                return
            if self.allow_unmatched:
                y[j] = -1
                yield from rec(j + 1)
            for k in range(R):
                if not used[k]:
                    used[k], y[j] = True, k
                    yield from rec(j + 1)
                    used[k] = False
            y[j] = -1

        return rec(0)

    def polytope(self, theta) -> Polytope:
        """Row sums (+ unmatched indicator) = 1 and column sums (+ unmatched indicator) = 1; without
        unmatched nodes, column sums <= 1 when L < R. Totally unimodular, hence integral."""
        L, R = self._shape(theta)
        self._check_sides(L, R)
        n_edge = L * R
        idx = np.arange(n_edge).reshape(L, R)
        row_rows = np.repeat(np.arange(L), R)
        col_rows = np.repeat(np.arange(R), L)
        rows_A = sp.csr_matrix((np.ones(n_edge), (row_rows, idx.ravel())), shape=(L, n_edge))
        cols_A = sp.csr_matrix((np.ones(n_edge), (col_rows, idx.T.ravel())), shape=(R, n_edge))
        if self.allow_unmatched:
            A = sp.bmat([[rows_A, sp.identity(L), None], [cols_A, None, sp.identity(R)]], format="csr")
            like = MatchingPotentials(np.zeros((L, R)), np.zeros(L), np.zeros(R))
            return Polytope(A, np.ones(L + R), None, None, like)
        like = MatchingPotentials(np.zeros((L, R)), np.zeros(0), np.zeros(0))
        if L == R:
            return Polytope(sp.vstack([rows_A, cols_A], format="csr"), np.ones(L + R), None, None, like)
        return Polytope(rows_A, np.ones(L), cols_A, np.ones(R), like)

    def lp_relaxation(self, theta) -> tuple[float, MatchingPotentials]:
        theta = self.check_potentials(theta)
        if theta.edge.size + theta.unmatched_left.size + theta.unmatched_right.size == 0:
            return 0.0, theta  # no variables: the single (empty) matching
        return super().lp_relaxation(theta)

    def project_qp(self, v) -> MatchingPotentials:
        v = self.check_potentials(v)
        if v.edge.size + v.unmatched_left.size + v.unmatched_right.size == 0:
            return v
        return super().project_qp(v)

    # ------------------------------------------------------------------ the square assignment form
    def _square(self, theta: MatchingPotentials) -> tuple[np.ndarray, float]:
        """Square score matrix whose perfect matchings are this instance's matchings, and the constant."""
        edge = theta.edge
        L, R = edge.shape
        if self.allow_unmatched:
            W = np.zeros((L + R, L + R))
            W[:L, :R] = edge - theta.unmatched_left[:, None] - theta.unmatched_right[None, :]
            return W, float(theta.unmatched_left.sum() + theta.unmatched_right.sum())
        if L == R:
            return edge.copy(), 0.0
        W = np.zeros((R, R))
        W[:L] = edge
        return W, 0.0

    def _decode(self, sigma: np.ndarray, L: int, R: int) -> np.ndarray:
        y = np.asarray(sigma[:L], dtype=np.int64).copy()
        y[y >= R] = -1
        return y

    # ------------------------------------------------------------------ oracles
    def argmax(self, theta) -> np.ndarray:
        """Maximum-score matching (exact on float scores; scipy ``linear_sum_assignment``)."""
        theta = self.check_potentials(theta)
        L, R = theta.edge.shape
        if L == 0:
            return np.zeros(0, dtype=np.int64)
        W, _ = self._square(theta)
        sigma = _assignment(W)
        return self._decode(sigma, L, R)

    def max_marginals(self, theta) -> np.ndarray:
        """(L, R) array: the best score of a matching containing edge (j, k), for every edge.

        One assignment plus an all-pairs shortest path over the residual graph (O((L+R)^3)),
        not one re-solve per edge (Duchi et al. 2006; Pillutla et al. App. C.3).
        """
        theta = self.check_potentials(theta)
        L, R = theta.edge.shape
        if L == 0 or R == 0:
            return np.zeros((L, R))
        W, const = self._square(theta)
        sigma = _assignment(W)
        mm = kern.assignment_max_marginals(W, sigma.astype(np.int64))
        return mm[:L, :R] + const

    def topk(self, theta, k: int) -> tuple[list[np.ndarray], np.ndarray]:
        """Exact K best matchings by Murty's partitioning of the output space (the Lawler partition
        search of :func:`~structopt.structures._partition_topk.partition_topk`, shared with ``FactorGraph.topk``).

        Each node of the search fixes a prefix of left nodes and forbids one value of the next;
        the best matching of a node is one constrained assignment (forbidden entries -inf).
        Ties are broken by discovery order, which is deterministic.

        Returns
        -------
        outputs : list of int64 (L,) arrays, sorted by decreasing score (fewer than k if fewer exist)
        scores : float array
        """
        k = check_count(k, "k", "BipartiteMatching.topk")
        theta = self.check_potentials(theta)
        L, R = theta.edge.shape
        if L == 0:
            return [np.zeros(0, dtype=np.int64)], np.array([self.score(theta, np.zeros(0, dtype=np.int64))])
        W0, _ = self._square(theta)

        def solve(W: np.ndarray) -> tuple[float, np.ndarray] | None:
            try:
                sigma = _assignment(W)
            except ValueError:  # every completion uses a forbidden entry
                return None
            if not np.all(np.isfinite(W[np.arange(len(sigma)), sigma])):
                return None
            y = self._decode(sigma, L, R)
            return self.score(theta, y), y

        def forbid(W: np.ndarray, j: int, value: int) -> bool:
            self._forbid(W, j, value, R)
            return True

        return partition_topk(k, W0, L, solve, forbid, lambda W, j, value: self._force(W, j, value, R))

    def _forbid(self, W: np.ndarray, j: int, value: int, R: int) -> None:
        # left node j may not take value (a right node, or -1 = unmatched)
        if value >= 0:
            W[j, value] = NEG_INF
        else:
            W[j, R:] = NEG_INF

    def _force(self, W: np.ndarray, j: int, value: int, R: int) -> None:
        # left node j must take value
        if value >= 0:
            keep = W[j, value]
            W[j, :] = NEG_INF
            W[:, value] = NEG_INF
            W[j, value] = keep
        else:
            W[j, :R] = NEG_INF

    @unsupported
    def marginals(self, theta):
        raise NotSupportedError("the log-partition of bipartite matchings is a permanent: #P-hard "
                                "(use top-K smoothing instead of entropy smoothing)")

    def prox_entropy(self, mu, step, eta):
        raise NotSupportedError("the entropic prox over matchings needs a permanent (#P-hard); "
                                "use the Euclidean projection")

    # ------------------------------------------------------------------ projection
    def project(self, v, tol: float = 1e-9, max_iter: int = 500, return_info: bool = False):
        """Euclidean projection onto the (partial) Birkhoff polytope, in the full statistics space.

        Solves the dual of the projection QP. For row / column multipliers (alpha, beta) the
        primal minimiser is ``Z = max(0, V - alpha_j - beta_k)`` (unmatched slacks
        ``max(0, a - alpha)``, ``max(0, b - beta)``), so the dual is a convex, piecewise-quadratic
        function of L + R variables. A few sweeps of exact block-coordinate ascent (row / column
        simplex projections, numba) warm-start a semismooth Newton method with Armijo line
        search; the dual gradient is the violation of the row / column constraints, so stopping
        at ``max |gradient| <= tol`` certifies the KKT conditions to ``tol`` (non-negativity and
        complementarity hold exactly by construction). Columns with ``<= 1`` constraints
        (``L < R`` without unmatched nodes) are handled by an active-set loop on their sign.

        Parameters
        ----------
        v : MatchingPotentials or (L, R) array
            The point to project (in the statistics layout).
        tol : float
            Certified KKT tolerance (absolute violation of the row / column constraints).
        max_iter : int
            Newton iterations before giving up certification (a RuntimeWarning; the last iterate is
            returned).
        return_info : bool
            Also return a :class:`ProjectionInfo`.
        """
        v = self.check_potentials(v)
        L, R = v.edge.shape
        if L == 0 or R == 0:  # only the empty matching
            out = MatchingPotentials(np.zeros((L, R)), np.ones_like(v.unmatched_left),
                                     np.ones_like(v.unmatched_right))
            return (out, ProjectionInfo(0.0, 0, True)) if return_info else out
        slack = self.allow_unmatched
        col_eq = slack or L == R
        a = v.unmatched_left if slack else np.zeros(L)
        b = v.unmatched_right if slack else np.zeros(R)
        alpha, beta = np.zeros(L), np.zeros(R)
        kern.projection_sweeps(v.edge, a, b, alpha, beta, slack, slack, col_eq, 5)
        tight = np.ones(R, dtype=bool) if col_eq else beta > 0
        iters, residual = 0, np.inf
        for _ in range(R + 2):  # active-set loop over the sign of inequality columns
            alpha, beta, residual, n = _dual_newton(v.edge, a, b, alpha, beta, tight, slack, tol, max_iter)
            iters += n
            if col_eq:
                break
            Z = np.maximum(v.edge - alpha[:, None] - beta[None, :], 0.0)
            drop = tight & (beta < -tol)
            add = ~tight & (Z.sum(axis=0) > 1.0 + tol)
            if not drop.any() and not add.any():
                break
            tight = (tight & ~drop) | add
            beta[drop] = 0.0
        Z = np.maximum(v.edge - alpha[:, None] - beta[None, :], 0.0)
        if not col_eq:
            residual = max(residual, float(np.max(Z.sum(axis=0) - 1.0, initial=0.0)),
                           float(np.max(-beta, initial=0.0)))
        certified = residual <= tol
        if not certified:
            warnings.warn(f"matching projection not certified: KKT residual {residual:.2e} > tol {tol:.1e} "
                          f"after {iters} Newton iterations", RuntimeWarning, stacklevel=2)
        if slack:
            out = MatchingPotentials(Z, np.maximum(a - alpha, 0.0), np.maximum(b - beta, 0.0))
        else:
            out = MatchingPotentials(Z, np.zeros(0), np.zeros(0))
        return (out, ProjectionInfo(residual, iters, certified)) if return_info else out


def _dual_newton(V, a, b, alpha, beta, tight, slack: bool, tol: float, max_iter: int):
    """Semismooth Newton on the projection dual over (alpha, beta[tight]); beta elsewhere stays fixed.

    phi(alpha, beta) = 1/2 ||max(0, V - alpha - beta)||^2 (+ 1/2 ||max(0, a - alpha)||^2
    + 1/2 ||max(0, b - beta)||^2) + sum(alpha) + sum(beta[tight]) is minimised; its gradient is
    1 - (row sums), 1 - (column sums), its generalised Hessian the active-set incidence matrix.
    """
    L, R = V.shape
    cols = np.flatnonzero(tight)
    alpha, beta = alpha.copy(), beta.copy()

    def evaluate(al, be):
        red = V - al[:, None] - be[None, :]
        Z = np.maximum(red, 0.0)
        u = np.maximum(a - al, 0.0) if slack else np.zeros(L)
        s = np.maximum(b - be, 0.0) if slack else np.zeros(R)
        value = 0.5 * (np.sum(Z * Z) + u @ u + s @ s) + al.sum() + be[cols].sum()
        grad = np.concatenate([1.0 - Z.sum(axis=1) - u, (1.0 - Z.sum(axis=0) - s)[cols]])
        return value, grad, red > 0, u > 0, s > 0

    value, grad, SZ, Su, Ss = evaluate(alpha, beta)
    it = 0
    for it in range(1, max_iter + 1):
        gnorm = float(np.max(np.abs(grad), initial=0.0))
        if gnorm <= tol:
            return alpha, beta, gnorm, it - 1
        B = SZ[:, cols].astype(float)
        H = np.block([[np.diag(SZ.sum(axis=1) + Su), B], [B.T, np.diag(SZ[:, cols].sum(axis=0) + Ss[cols])]])
        H[np.diag_indices_from(H)] += min(1e-3, gnorm) + 1e-12  # H is singular along (1, -1) per component
        d = -np.linalg.solve(H, grad)
        slope = float(grad @ d)
        t = 1.0
        while True:
            al, be = alpha + t * d[:L], beta.copy()
            be[cols] += t * d[L:]
            new = evaluate(al, be)
            # Armijo on phi; near the solution phi's decrease drowns in round-off, so a step that
            # shrinks the constraint violation is accepted too
            if (new[0] <= value + 1e-4 * t * slope or np.max(np.abs(new[1]), initial=0.0) < 0.5 * gnorm
                    or t < 1e-12):
                break
            t *= 0.5
        alpha, beta = al, be
        value, grad, SZ, Su, Ss = new
    return alpha, beta, float(np.max(np.abs(grad), initial=0.0)), it


def _assignment(W: np.ndarray) -> np.ndarray:
    """The columns of a maximum-score assignment of the rows of ``W`` (scipy.optimize is imported on first
    use: it costs a quarter second and 28 MB at start-up, which a run without matchings need not pay)."""
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment(W, maximize=True)[1]
