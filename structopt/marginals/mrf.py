"""Pairwise Markov random fields with discrete variables of any cardinality.

Every node and every edge is a *block* of a flat vector. Node blocks come first (node i holds
``cards[i]`` entries), then edge blocks (edge e = (i, j), i < j, holds the table
``(cards[i], cards[j])`` in row-major order). Log-potentials θ and marginal vectors μ share this
layout, so ⟨θ, μ⟩ is a dot product and numba kernels sweep plain arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from structopt.errors import InvalidInputError, refuse_nonfinite


@dataclass(frozen=True, eq=False)
class PairwiseMRF:
    """A pairwise MRF p(x) ∝ exp(Σ_i θ_i(x_i) + Σ_ij θ_ij(x_i, x_j) + constant).

    Build one with :meth:`from_potentials` (or :func:`structopt.marginals.read_uai`).

    Attributes
    ----------
    cards : ndarray of int64, shape (N,)
        Number of states of each variable.
    edges : ndarray of int64, shape (E, 2)
        Edges (i, j) with i < j, sorted, without duplicates.
    theta : ndarray of float64, shape (D,)
        Log-potentials in the flat block layout (may hold -inf for zero-probability entries).
    offsets : ndarray of int64, shape (N + E + 1,)
        Block c occupies ``theta[offsets[c]:offsets[c + 1]]``; blocks 0..N-1 are nodes, N.. edges.
    constant : float
        Log of a constant factor (scope-free factors of a UAI file); it shifts log Z only.
    """

    cards: np.ndarray
    edges: np.ndarray
    theta: np.ndarray
    offsets: np.ndarray
    constant: float = 0.0
    block_of: np.ndarray = field(init=False, repr=False)
    block_size: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sizes = np.diff(self.offsets)
        object.__setattr__(self, "block_of", np.repeat(np.arange(sizes.size, dtype=np.int64), sizes))
        object.__setattr__(self, "block_size", np.repeat(sizes, sizes).astype(np.int64))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_potentials(cls, unary: Sequence[np.ndarray], edges: Sequence[tuple[int, int]] | np.ndarray = (),
                        pairwise: Sequence[np.ndarray] = (), constant: float = 0.0) -> PairwiseMRF:
        """Build an MRF from per-node and per-edge log-potential tables.

        Parameters
        ----------
        unary : sequence of 1-D arrays
            ``unary[i]`` holds θ_i, one entry per state (its length is the cardinality of x_i).
        edges : sequence of (i, j) pairs or array of shape (E, 2)
            Edges; any orientation. Repeated edges are summed; i == j is an error.
        pairwise : sequence of 2-D arrays
            ``pairwise[e]`` holds θ_ij with shape (cards[i], cards[j]) for ``edges[e] = (i, j)``.
        constant : float
            Added to log Z.

        Returns
        -------
        PairwiseMRF
        """
        unary = [np.asarray(u, dtype=np.float64) for u in unary]
        if not unary:
            raise InvalidInputError("an MRF needs at least one variable")
        for i, u in enumerate(unary):
            if u.ndim != 1 or u.size == 0:
                raise InvalidInputError(f"variable {i}: "
                                        f"unary potential must be a non-empty 1-D array, got shape {u.shape}")
            refuse_nonfinite(((f"unary of variable {i}", u),), "pairwise MRF", allow_neginf=True)
        cards = np.array([u.size for u in unary], dtype=np.int64)
        n = cards.size
        edge_arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if len(pairwise) != edge_arr.shape[0]:
            raise InvalidInputError(f"{edge_arr.shape[0]} edges but {len(pairwise)} pairwise tables")
        tables: dict[tuple[int, int], np.ndarray] = {}
        for e, ((i, j), table) in enumerate(zip(edge_arr.tolist(), pairwise)):
            table = np.asarray(table, dtype=np.float64)
            if not (0 <= i < n and 0 <= j < n) or i == j:
                raise InvalidInputError(f"edge {e}: ({i}, {j}) is not a pair of distinct variables in 0..{n - 1}")
            if table.shape != (cards[i], cards[j]):
                raise InvalidInputError(f"edge {e} ({i}, {j}): table shape {table.shape}, "
                                        f"expected {(int(cards[i]), int(cards[j]))}")
            refuse_nonfinite(((f"pairwise of edge {e} ({i}, {j})", table),), "pairwise MRF", allow_neginf=True)
            if i > j:
                i, j, table = j, i, table.T
            tables[(i, j)] = tables[(i, j)] + table if (i, j) in tables else table
        keys = sorted(tables)
        sizes = [int(c) for c in cards] + [int(cards[i] * cards[j]) for i, j in keys]
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        theta = np.concatenate(unary + [tables[k].ravel() for k in keys])
        edge_out = np.array(keys, dtype=np.int64).reshape(-1, 2)
        return cls(cards, edge_out, theta, offsets, float(constant))

    # ------------------------------------------------------------------ shapes
    @property
    def n_nodes(self) -> int:
        """Number of variables N."""
        return int(self.cards.size)

    @property
    def n_edges(self) -> int:
        """Number of edges E."""
        return int(self.edges.shape[0])

    @property
    def dim(self) -> int:
        """Length D of the flat θ / μ vectors."""
        return int(self.offsets[-1])

    @property
    def n_node_entries(self) -> int:
        """Number of flat entries held by node blocks (they come first)."""
        return int(self.offsets[self.n_nodes])

    def unary(self, i: int) -> np.ndarray:
        """View of θ_i."""
        return self.theta[self.offsets[i]:self.offsets[i + 1]]

    def pairwise(self, e: int) -> np.ndarray:
        """View of θ_ij for edge e as a (cards[i], cards[j]) table."""
        i, j = self.edges[e]
        c = self.n_nodes + e
        return self.theta[self.offsets[c]:self.offsets[c + 1]].reshape(self.cards[i], self.cards[j])

    def degrees(self) -> np.ndarray:
        """Number of neighbours of each node, shape (N,)."""
        return np.bincount(self.edges.ravel(), minlength=self.n_nodes).astype(np.int64)

    def adjacency(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Incident edges per node in CSR form: (indptr (N+1,), edge ids, 1 where the node is the edge's first end)."""
        ends = self.edges.ravel()
        order = np.argsort(ends, kind="stable")
        indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(ends, minlength=self.n_nodes), out=indptr[1:])
        return indptr, (order // 2).astype(np.int64), (order % 2 == 0).astype(np.int64)

    def with_theta(self, theta: np.ndarray, constant: float | None = None) -> PairwiseMRF:
        """The same graph with other log-potentials (same flat layout)."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != self.theta.shape:
            raise InvalidInputError(f"theta has shape {theta.shape}, expected {self.theta.shape}")
        return PairwiseMRF(self.cards, self.edges, theta.copy(), self.offsets,
                           self.constant if constant is None else float(constant))

    # ------------------------------------------------------------------ assignments and vectors
    def validate_assignment(self, x: np.ndarray) -> np.ndarray:
        """Return ``x`` as int64 after checking its shape and range."""
        x = np.asarray(x)
        if x.shape != (self.n_nodes,) or not np.issubdtype(x.dtype, np.integer):
            raise InvalidInputError(f"an assignment must be an integer array of shape ({self.n_nodes},)")
        if (x < 0).any() or (x >= self.cards).any():
            raise InvalidInputError("assignment has a state out of range")
        return x.astype(np.int64)

    def vertex_indices(self, x: np.ndarray) -> np.ndarray:
        """Flat positions of the ones of φ(x) (N node entries, then E edge entries)."""
        x = self.validate_assignment(x)
        n = self.n_nodes
        node = self.offsets[:n] + x
        i, j = self.edges[:, 0], self.edges[:, 1]
        edge = self.offsets[n:-1] + x[i] * self.cards[j] + x[j]
        return np.concatenate([node, edge])

    def vertex(self, x: np.ndarray) -> np.ndarray:
        """The vertex φ(x) of the marginal polytope: one-hot node and edge indicators."""
        v = np.zeros(self.dim)
        v[self.vertex_indices(x)] = 1.0
        return v

    def score(self, x: np.ndarray) -> float:
        """Unnormalised log-probability Σ θ_i(x_i) + Σ θ_ij(x_i, x_j) + constant."""
        return float(self.theta[self.vertex_indices(x)].sum() + self.constant)

    def uniform(self) -> np.ndarray:
        """u₀: the uniform distribution in every block (a point of the marginal polytope)."""
        return 1.0 / self.block_size.astype(np.float64)

    def node_marginals(self, mu: np.ndarray) -> list[np.ndarray]:
        """Split the node part of a flat marginal vector into per-variable arrays (copies)."""
        return [np.array(mu[self.offsets[i]:self.offsets[i + 1]]) for i in range(self.n_nodes)]

    def is_binary(self) -> bool:
        """True when every variable has two states."""
        return bool((self.cards == 2).all())


@dataclass
class InferenceResult:
    """What every inference method returns.

    Attributes
    ----------
    log_z : float
        Estimate of the natural log-partition function (exact for exact inference).
    marginals : list of ndarray
        ``marginals[i][a]`` estimates p(x_i = a).
    mu : ndarray
        The flat marginal vector (node and edge blocks) the estimate comes from.
    method : str
        Name of the method.
    upper_bound : float or None
        A certified upper bound on log Z, when the method provides one.
    converged : bool
        Whether the method met its tolerance (always True for exact inference).
    seconds : float
        Wall time.
    trace : list of dict
        Per-iteration records (method specific: iteration, objective, gap, time, ...).
    rho : ndarray or None
        Edge appearance probabilities used (tree-reweighted methods).
    status : str
        Why the method stopped: ``"converged"``, ``"max_iter"``, ``"time_limit"`` or
        ``"interrupted"`` (the last three leave ``converged`` False: the result is the current iterate).
    iterations : int
        Iterations run (sweeps for message passing, MAP oracle calls for Barrier Frank-Wolfe).
    residual : float or None
        The quantity compared with ``tol`` at the last iteration (largest message or marginal change
        for message passing, certified Frank-Wolfe gap for Barrier Frank-Wolfe).
    """

    log_z: float
    marginals: list[np.ndarray]
    mu: np.ndarray
    method: str
    upper_bound: float | None = None
    converged: bool = True
    seconds: float = 0.0
    trace: list[dict] = field(default_factory=list)
    rho: np.ndarray | None = None
    status: str = "converged"
    iterations: int = 0
    residual: float | None = None


class InferenceInterrupted(KeyboardInterrupt):
    """Ctrl-C during an iterative inference method; ``result`` holds the iterate reached (status "interrupted").

    A subclass of KeyboardInterrupt, so code that does not look for the partial result stops as usual.
    """

    def __init__(self, result: InferenceResult) -> None:
        super().__init__(f"{result.method} interrupted after {result.iterations} iterations")
        self.result = result
