"""Discrete labels on a forest: max-product, sum-product, max-marginals, exact top-K.

Every oracle runs on the shared dynamic-programming recursion (:mod:`structopt.structures.dp`): the
forest's hypergraph (:class:`~structopt.structures.dp.LabelDP`) is built once per structure and
the max-plus, log-sum-exp and k-best semirings give argmax, marginals and top-K.

The statistics of a labelling y are node indicators (n, S) and, per edge (u, v), the indicators
``pairwise[e, y_u, y_v]`` (m, S, S). On a forest the local polytope (node simplices plus edge
marginalisation) is the marginal polytope, so :meth:`TreeStructure.polytope` is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, check_count, example_error, numeric_array
from structopt.structures._minnorm import project_hull
from structopt.structures.base import Polytope, Structure, check_eta, product_outputs, random_like, refuse_nonfinite
from structopt.structures.dp import LabelDP, dp_argmax, dp_marginals, dp_max_marginals, dp_topk
from structopt.structures.registry import register_structure


class TreePotentials(NamedTuple):
    """Potentials (or statistics) of labellings of a forest with n nodes, m edges and S states.

    Attributes
    ----------
    unary : ndarray, shape (n, S)
    pairwise : ndarray, shape (m, S, S), or (S, S) shared by every edge; for edge e = (u, v),
        ``pairwise[e, a, b]`` scores y_u = a and y_v = b. Statistics always use the per-edge layout.
    """

    unary: np.ndarray
    pairwise: np.ndarray


class Schedule(NamedTuple):
    """The message schedule of a forest: ``order`` lists the nodes root first (breadth first within each
    tree), ``parent[v]`` is v's parent (-1 for roots), ``pedge[v]`` the edge to it and ``forward[v]``
    whether that edge is stored as (parent, v)."""

    order: np.ndarray
    parent: np.ndarray
    pedge: np.ndarray
    forward: np.ndarray


def forest_schedule(n_nodes: int, edges: np.ndarray) -> Schedule:
    """Root-first breadth-first schedule of a forest (roots: the smallest node of each tree).

    Raises
    ------
    InvalidInputError
        If the edges contain a self-loop, a repeated edge or a cycle.
    """
    root = np.arange(n_nodes)

    def find(a: int) -> int:
        while root[a] != a:
            root[a] = root[root[a]]
            a = root[a]
        return a

    for e, (u, v) in enumerate(edges):
        if u == v:
            raise InvalidInputError(f"edge {e} is a self-loop on node {u}")
        ru, rv = find(int(u)), find(int(v))
        if ru == rv:
            raise InvalidInputError(f"edge {e} ({u}, {v}) closes a cycle: a TreeStructure needs a forest")
        root[max(ru, rv)] = min(ru, rv)
    adjacency = sp.csr_matrix((np.arange(1, len(edges) + 1), (edges[:, 0], edges[:, 1])), shape=(n_nodes, n_nodes))
    adjacency = (adjacency + adjacency.T).tocsr()  # stores edge index + 1 both ways
    parent = np.full(n_nodes, -1, dtype=np.int64)
    pedge = np.full(n_nodes, -1, dtype=np.int64)
    forward = np.zeros(n_nodes, dtype=np.bool_)
    seen = np.zeros(n_nodes, dtype=bool)
    order = []
    for start in range(n_nodes):  # once per structure: a plain BFS
        if seen[start]:
            continue
        seen[start] = True
        queue, head = [start], 0
        while head < len(queue):
            u = queue[head]
            head += 1
            for v, e1 in zip(adjacency.indices[adjacency.indptr[u]:adjacency.indptr[u + 1]],
                             adjacency.data[adjacency.indptr[u]:adjacency.indptr[u + 1]]):
                if not seen[v]:
                    seen[v] = True
                    parent[v], pedge[v] = u, e1 - 1
                    forward[v] = edges[e1 - 1, 0] == u
                    queue.append(int(v))
        order += queue
    return Schedule(np.array(order, dtype=np.int64), parent, pedge, forward)


@register_structure("tree")
class TreeStructure(Structure):
    """Labellings ``y in {0..S-1}^n`` of the nodes of a forest; outputs are int64 arrays (n,).

    Parameters
    ----------
    edges : (m, 2) array-like of ints
        Edges of the forest (any orientation; ``pairwise[e]`` follows the order given).
    n_states : int
        S, the number of states of every node.
    n_nodes : int, optional
        Number of nodes (default: largest node index + 1); nodes without edges are isolated.

    Raises
    ------
    InvalidInputError
        On edges that are not pairs of node indices, self-loops, repeated edges or cycles.
    """

    name = "TreeStructure"
    Potentials = TreePotentials

    example_variants = (
        {"n_nodes": 1, "n_states": 3},
        {"n_nodes": 4, "n_states": 2},
        {"n_nodes": 5, "n_states": 2, "shared": True},
        {"n_nodes": 4, "n_states": 3},
    )

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n_nodes: int = 4, n_states: int = 2,
                shared: bool = False) -> tuple[TreeStructure, TreePotentials]:
        """A random forest (isolated nodes likely): each node after the first joins a random earlier
        node with probability 0.8, else starts a new tree; edges in random orientation."""
        n_nodes = int(n_nodes)
        edges = []
        for v in range(1, n_nodes):
            if rng.random() < 0.8:
                u = int(rng.integers(0, v))
                edges.append((u, v) if rng.random() < 0.5 else (v, u))
        structure = cls(edges, int(n_states), n_nodes=n_nodes)
        S, m = structure.n_states, structure.n_edges
        like = TreePotentials(np.zeros((structure.n_nodes, S)), np.zeros((S, S) if shared else (m, S, S)))
        return structure, random_like(like, rng, integer=integer)

    def __init__(self, edges, n_states: int, n_nodes: int | None = None):
        raw = numeric_array(edges, "TreeStructure edges") if np.size(edges) else np.zeros((0, 2))
        if raw.ndim not in (1, 2) or raw.size % 2 or (raw.ndim == 2 and raw.shape[1] != 2):
            raise InvalidInputError(f"TreeStructure edges must be an (m, 2) array of node pairs, got shape {raw.shape}")
        if not np.all(raw == np.round(raw)):
            raise InvalidInputError("TreeStructure edges must hold integer node indices")
        edges = raw.astype(np.int64).reshape(-1, 2)
        n_states = check_count(n_states, "n_states", "TreeStructure")
        inferred = int(edges.max()) + 1 if edges.size else 0
        n_nodes = inferred if n_nodes is None else check_count(n_nodes, "n_nodes", "TreeStructure")
        if n_nodes < 1:
            raise InvalidInputError("TreeStructure needs at least one node (pass n_nodes for a forest without edges)")
        if edges.size and (edges.min() < 0 or edges.max() >= n_nodes):
            raise InvalidInputError(f"edge endpoints must lie in [0, {n_nodes}), got min {edges.min()}, "
                                    f"max {edges.max()}")
        self.edges = edges
        self.n_states = int(n_states)
        self.n_nodes = n_nodes
        self.schedule = forest_schedule(n_nodes, edges)
        self._dp: LabelDP | None = None  # the shared DP hypergraph, built on first use (as_dp)

    def __repr__(self) -> str:
        return f"TreeStructure(n_nodes={self.n_nodes}, n_edges={len(self.edges)}, n_states={self.n_states})"

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    @property
    def states_per_node(self) -> int:
        """Values each node takes (the per-node loss hook)."""
        return self.n_states

    def node_potentials(self, costs: np.ndarray, like: TreePotentials) -> TreePotentials:
        """Potentials with per-node scores ``costs`` (n, S) and no edge scores."""
        return TreePotentials(np.asarray(costs, dtype=float), np.zeros((self.n_states, self.n_states)))

    # ------------------------------------------------------------------ layout
    def check_potentials(self, theta: TreePotentials, index: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(unary, pairwise)`` as contiguous float64 arrays, pairwise in the per-edge layout."""
        n, m, S = self.n_nodes, self.n_edges, self.n_states
        if not isinstance(theta, tuple) or len(theta) != 2:
            raise example_error(index, f"tree potentials must be TreePotentials(unary, pairwise), got "
                                       f"{type(theta).__name__}")
        unary = numeric_array(theta[0], "tree potentials (unary)", index, finite=False)
        pairwise = numeric_array(theta[1], "tree potentials (pairwise)", index, finite=False)
        if unary.shape != (n, S):
            raise example_error(index, f"tree unary potentials must have shape ({n}, {S}), got {unary.shape}")
        if pairwise.shape == (S, S):
            pairwise = np.broadcast_to(pairwise, (m, S, S))
        elif pairwise.shape != (m, S, S):
            raise example_error(index, f"tree pairwise potentials must have shape ({S}, {S}) or ({m}, {S}, {S}), "
                                       f"got {pairwise.shape}")
        refuse_nonfinite((("unary", unary), ("pairwise", pairwise)), "tree", index)
        return unary, np.ascontiguousarray(pairwise)

    def expand(self, theta: TreePotentials) -> TreePotentials:
        return TreePotentials(*self.check_potentials(theta))

    def validate_output(self, y, like: TreePotentials = None, index: int | None = None) -> np.ndarray:
        arr = np.asarray(y)
        if arr.shape != (self.n_nodes,):
            raise example_error(index, f"tree output must have shape ({self.n_nodes},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer) and not np.all(np.equal(np.mod(arr, 1), 0)):
            raise example_error(index, "tree labels must be integers")
        arr = arr.astype(np.int64)
        if arr.min() < 0 or arr.max() >= self.n_states:
            raise example_error(index, f"tree label out of range [0, {self.n_states}): "
                                       f"min {arr.min()}, max {arr.max()}")
        return arr

    # ------------------------------------------------------------------ statistics
    def stats(self, y, like: TreePotentials = None) -> TreePotentials:
        y = np.asarray(y, dtype=np.int64)
        unary = np.zeros((self.n_nodes, self.n_states))
        unary[np.arange(self.n_nodes), y] = 1.0
        pairwise = np.zeros((self.n_edges, self.n_states, self.n_states))
        pairwise[np.arange(self.n_edges), y[self.edges[:, 0]], y[self.edges[:, 1]]] = 1.0
        return TreePotentials(unary, pairwise)

    def expected_stats(self, outputs, weights: np.ndarray, like: TreePotentials) -> TreePotentials:
        """``sum_j weights[j] * stats(outputs[j])`` for a (k, n) array of labellings, vectorised."""
        labels = np.asarray(outputs, dtype=np.int64).reshape(len(weights), self.n_nodes)
        weights = np.asarray(weights, dtype=float)
        unary = np.zeros((self.n_nodes, self.n_states))
        np.add.at(unary, (np.broadcast_to(np.arange(self.n_nodes), labels.shape), labels), weights[:, None])
        pairwise = np.zeros((self.n_edges, self.n_states, self.n_states))
        if self.n_edges:
            edge_index = np.broadcast_to(np.arange(self.n_edges), (len(weights), self.n_edges))
            np.add.at(pairwise, (edge_index, labels[:, self.edges[:, 0]], labels[:, self.edges[:, 1]]),
                      weights[:, None])
        return TreePotentials(unary, pairwise)

    def score(self, theta: TreePotentials, y) -> float:
        unary, pairwise = self.check_potentials(theta)
        y = np.asarray(y, dtype=np.int64)
        value = unary[np.arange(self.n_nodes), y].sum()
        value += pairwise[np.arange(self.n_edges), y[self.edges[:, 0]], y[self.edges[:, 1]]].sum()
        return float(value)

    def outputs(self, theta: TreePotentials = None) -> Iterator[np.ndarray]:
        return product_outputs(self.n_nodes, self.n_states)

    def polytope(self, theta: TreePotentials = None) -> Polytope:
        """Local polytope of the forest (node normalisation, edge marginalisation): exact on forests."""
        n, m, S = self.n_nodes, self.n_edges, self.n_states
        node = np.arange(n * S).reshape(n, S)
        edge = n * S + np.arange(m * S * S).reshape(m, S, S)
        # rows: n normalisations, then for each edge S rows onto its first node and S onto its second
        norm_rows = np.repeat(np.arange(n), S)
        first = n + np.arange(m * S).reshape(m, S)  # row of (e, a): sum_b mu_e[a, b] = mu_u[a]
        second = n + m * S + np.arange(m * S).reshape(m, S)
        rows = [norm_rows,
                np.repeat(first.ravel(), S), first.ravel(),
                np.repeat(second.ravel(), S), second.ravel()]
        cols = [node.ravel(),
                edge.ravel(), node[self.edges[:, 0]].ravel(),
                edge.transpose(0, 2, 1).ravel(), node[self.edges[:, 1]].ravel()]
        vals = [np.ones(n * S), np.ones(m * S * S), -np.ones(m * S), np.ones(m * S * S), -np.ones(m * S)]
        A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(n + 2 * m * S, n * S + m * S * S))
        b = np.concatenate([np.ones(n), np.zeros(2 * m * S)])
        return Polytope(A, b, None, None, TreePotentials(np.zeros((n, S)), np.zeros((m, S, S))))

    # ------------------------------------------------------------------ oracles
    def as_dp(self) -> LabelDP:
        """This forest's labellings as a :class:`~structopt.structures.dp.LabelDP` (built once): its
        potentials are ``DPPotentials(flatten(expand(theta)))`` and its oracles are this structure's."""
        if getattr(self, "_dp", None) is None:
            self._dp = LabelDP(self.edges, self.n_states, self.schedule)
        return self._dp

    def _scores(self, theta: TreePotentials) -> np.ndarray:
        unary, pairwise = self.check_potentials(theta)
        return np.concatenate((unary.ravel(), pairwise.ravel()))

    def argmax(self, theta: TreePotentials) -> np.ndarray:
        """Max-product (the max-plus recursion of :mod:`~structopt.structures.dp`; ties go to the
        smallest state of each node given its parent's)."""
        dp = self.as_dp()
        edges, _ = dp_argmax(dp.graph, self._scores(theta), self.name)
        return dp.labels(edges)

    def topk(self, theta: TreePotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact k best labellings (the k-best recursion of :mod:`~structopt.structures.dp`).

        Returns
        -------
        labels : int64 array (k', n), sorted by decreasing score; k' = min(k, S**n)
        scores : float array (k',)
        """
        k = check_count(k, "k", "TreeStructure.topk")
        dp = self.as_dp()
        edges, offsets, scores = dp_topk(dp.graph, self._scores(theta), k, self.name)
        rows = np.repeat(np.arange(scores.size), np.diff(offsets))
        node = dp.edge_node[edges]
        labels = np.zeros((scores.size, self.n_nodes), dtype=np.int64)
        labels[rows[node >= 0], node[node >= 0]] = dp.edge_state[edges[node >= 0]]
        return labels, scores

    def marginals(self, theta: TreePotentials) -> tuple[float, TreePotentials]:
        """Sum-product in log space (inside-outside): ``(log Z, marginals)`` in the statistics layout."""
        log_z, mu = dp_marginals(self.as_dp().graph, self._scores(theta), self.name)
        n, m, S = self.n_nodes, self.n_edges, self.n_states
        return log_z, TreePotentials(mu[:n * S].reshape(n, S), mu[n * S:].reshape(m, S, S))

    def max_marginals(self, theta: TreePotentials) -> np.ndarray:
        """(n, S) array: best score of a labelling with node v in state s."""
        mm = dp_max_marginals(self.as_dp().graph, self._scores(theta), self.name)
        return mm[:self.n_nodes * self.n_states].reshape(self.n_nodes, self.n_states)

    def project(self, v: TreePotentials, tol: float = 1e-13) -> TreePotentials:
        """Euclidean projection onto the marginal polytope by Wolfe's min-norm point on max-product.

        Exact up to the certificate ``||p - p*||^2 <= gap <= tol * scale`` (a few times faster than
        the cvxpy QP :meth:`project_qp` on small forests); falls back to the QP if it stalls.
        """
        full = self.expand(v)
        unary_size = full.unary.size

        def linear_oracle(d: np.ndarray) -> np.ndarray:
            direction = TreePotentials(d[:unary_size].reshape(full.unary.shape), d[unary_size:].reshape(
                full.pairwise.shape))
            y = self.argmax(direction)
            return np.concatenate([s.ravel() for s in self.stats(y)])

        target = np.concatenate([full.unary.ravel(), full.pairwise.ravel()])
        try:
            p, _ = project_hull(target, linear_oracle, tol=tol)
        except RuntimeError:
            return self.project_qp(v)
        return TreePotentials(p[:unary_size].reshape(full.unary.shape), p[unary_size:].reshape(full.pairwise.shape))

    def prox_entropy(self, mu: TreePotentials, step: TreePotentials, eta: float) -> TreePotentials:
        """Entropic (KL) prox on the forest's marginal polytope.

        The distribution with marginals ``mu`` factorises as ``prod_e mu_e / prod_v mu_v^(deg v - 1)``,
        so the prox is the marginals of that log-linear model plus ``eta * step``. ``mu`` must be
        strictly positive.
        """
        eta = check_eta(eta, "TreeStructure.prox_entropy")
        if not isinstance(mu, tuple) or len(mu) != 2:
            raise InvalidInputError(f"prox_entropy needs marginals mu as TreePotentials, got {type(mu).__name__}")
        node = numeric_array(mu[0], "prox_entropy marginals mu (unary)")
        edge = numeric_array(mu[1], "prox_entropy marginals mu (pairwise)")
        n, m, S = self.n_nodes, self.n_edges, self.n_states
        if node.shape != (n, S) or edge.shape != (m, S, S):
            raise InvalidInputError(f"prox_entropy needs marginals mu of shapes ({n}, {S}) and ({m}, {S}, {S}), "
                                    f"got {node.shape} and {edge.shape}")
        if np.any(node <= 0) or np.any(edge <= 0):
            raise InvalidInputError("prox_entropy needs strictly positive marginals mu")
        degree = np.bincount(self.edges.ravel(), minlength=self.n_nodes).astype(float)
        step = self.expand(step)
        theta = TreePotentials(-(degree - 1.0)[:, None] * np.log(node) + eta * step.unary,
                               np.log(edge) + eta * step.pairwise)
        return self.marginals(theta)[1]
