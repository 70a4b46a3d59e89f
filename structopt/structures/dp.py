"""Dynamic programming over an acyclic hypergraph: one recursion, several semirings, every oracle.

A dynamic program is a set of *items* (hypergraph nodes) numbered in topological order and, into
each item, *hyperedges* that build it from smaller items (its *tails*; none for an axiom), each
scoring one entry of the potentials (or nothing). A *derivation* of the goal (the last item) picks
one incoming hyperedge at the goal and, recursively, at each tail; it is an output, and its
statistics count the score entries of its hyperedges. Chains (items: position and label), trees
(items: node and label, and messages), segmentations (items: positions), alignment lattices
(items: pairs of positions) are all of this form.

The recursion ``val[v] = ⊕_{e into v} (w_e ⊗ ⊗_{u in tails(e)} val[u])`` gives, in the max-plus
semiring, the best derivation (with back-pointers) and, with the outside pass, max-marginals; in
the log-sum-exp semiring log Z and, by inside-outside, the expected statistics; in the k-best
semiring the exact K best derivations (:mod:`structopt.structures._dp_kernels`). The marginal
polytope is the hypergraph's flow polytope (one auxiliary column per hyperedge), exact when no
derivation uses an item twice (sibling sub-derivations are disjoint), as in every example above.

:class:`DPStructure` is a :class:`~structopt.structures.base.Structure` built from such a
hypergraph; a user subclass describes its hypergraph once in ``__init__`` and, optionally, how
outputs map to derivations (:meth:`DPStructure.decode` / :meth:`DPStructure.encode`).
:class:`~structopt.structures.tree.TreeStructure` runs its oracles on this recursion, and
:meth:`Chain.as_dp` / :meth:`TreeStructure.as_dp` give the equivalent :class:`LabelDP`.
:meth:`DPStructure.from_builder` gives one structure (:class:`DPFamily`) for instances whose hypergraph
depends on their size (read from the potentials), each size built once: Eisner's spans per sentence
length are the example (:mod:`structopt.structures.dependency`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import (
    InvalidInputError,
    NotSupportedError,
    check_count,
    example_error,
    numeric_array,
    refuse_nonfinite,
)
from structopt.structures import _dp_kernels as kern
from structopt.structures.base import Polytope, Potentials, Structure, flatten, unflatten


class DPPotentials(NamedTuple):
    """Potentials (or statistics) of a :class:`DPStructure`: one entry per score index.

    Attributes
    ----------
    score : ndarray, shape (n_scores,)
        ``score[j]`` is added once for every hyperedge of score index j in a derivation; -inf
        forbids those hyperedges.
    """

    score: np.ndarray


class Hypergraph:
    """An acyclic hypergraph with nodes in topological order, stored flat (CSR) for the kernels.

    Parameters
    ----------
    n_nodes : int
        N; node N - 1 is the goal.
    heads : (E,) array-like of ints
        The node each hyperedge builds.
    tails : sequence of E sequences of ints
        The nodes each hyperedge combines, all numbered below its head (empty for an axiom).
    scores : (E,) array-like of ints
        The score index of each hyperedge, or -1 for none.
    n_scores : int, optional
        Number of score indices (default: the largest + 1).

    Hyperedges keep the ids given here (their position in ``heads``); internally they are sorted by
    head (stably, so ties go to the hyperedge listed first).

    Raises
    ------
    InvalidInputError
        On a tail not numbered below its head, indices out of range, or a goal without hyperedges.
    """

    def __init__(self, n_nodes: int, heads: Sequence[int], tails: Sequence[Sequence[int]], scores: Sequence[int],
                 n_scores: int | None = None):
        lengths = np.array([len(t) for t in tails], dtype=np.int64)
        flat = np.concatenate([np.asarray(t, dtype=np.int64).ravel() for t in tails]) if len(tails) else []
        self._build(n_nodes, heads, np.concatenate([[0], np.cumsum(lengths)]), flat, scores, n_scores)

    @classmethod
    def from_csr(cls, n_nodes: int, heads: np.ndarray, tail_ptr: np.ndarray, tails: np.ndarray, scores: np.ndarray,
                 n_scores: int | None = None) -> Hypergraph:
        """The same from flat arrays: hyperedge e's tails are ``tails[tail_ptr[e]:tail_ptr[e + 1]]``."""
        graph = cls.__new__(cls)
        graph._build(n_nodes, heads, tail_ptr, tails, scores, n_scores)
        return graph

    def _build(self, n_nodes, heads, tail_ptr, tails, scores, n_scores) -> None:
        n = check_count(n_nodes, "n_nodes", "Hypergraph")
        heads = np.asarray(heads, dtype=np.int64).ravel()
        scores = np.asarray(scores, dtype=np.int64).ravel()
        tail_ptr = np.asarray(tail_ptr, dtype=np.int64).ravel()
        tails = np.asarray(tails, dtype=np.int64).ravel()
        n_edges = heads.size
        if n < 1 or scores.size != n_edges or tail_ptr.size != n_edges + 1 or tail_ptr[-1] != tails.size:
            raise InvalidInputError(f"Hypergraph needs n_nodes >= 1 and one head, tail list and score per hyperedge; "
                                    f"got {n} nodes, {n_edges} heads, {tail_ptr.size - 1} tail lists, "
                                    f"{scores.size} scores")
        if n_edges and (heads.min() < 0 or heads.max() >= n):
            raise InvalidInputError(f"hyperedge heads must lie in [0, {n}), got min {heads.min()}, max {heads.max()}")
        tail_head = np.repeat(heads, np.diff(tail_ptr))
        bad = np.flatnonzero((tails < 0) | (tails >= tail_head))
        if bad.size:
            e = int(np.searchsorted(tail_ptr, bad[0], side="right") - 1)
            raise InvalidInputError(f"hyperedge {e} into node {heads[e]} has tail {tails[bad[0]]}: tails must be "
                                    "nodes numbered below the head (nodes in topological order)")
        n_scores = int(scores.max(initial=-1)) + 1 if n_scores is None else check_count(n_scores, "n_scores",
                                                                                       "Hypergraph")
        if scores.size and (scores.min() < -1 or scores.max() >= n_scores):
            raise InvalidInputError(f"hyperedge scores must be -1 (none) or lie in [0, {n_scores})")
        if not np.any(heads == n - 1):
            raise InvalidInputError(f"the goal (node {n - 1}, the last) has no hyperedge: nothing can be derived")
        order = np.argsort(heads, kind="stable")
        lengths = np.diff(tail_ptr)[order]
        starts = tail_ptr[:-1][order]
        self.n_nodes, self.n_edges, self.n_scores = n, n_edges, n_scores
        self.edge_id = order  # internal hyperedge -> the caller's id
        self.internal = np.empty(n_edges, dtype=np.int64)
        self.internal[order] = np.arange(n_edges)
        self.in_ptr = np.concatenate([[0], np.cumsum(np.bincount(heads, minlength=n))]).astype(np.int64)
        self.score = np.ascontiguousarray(scores[order])
        self.tail_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.tails = tails[_ranges(starts, lengths)] if tails.size else tails
        self.head = np.repeat(np.arange(n), np.diff(self.in_ptr))

    def __repr__(self) -> str:
        return f"Hypergraph(n_nodes={self.n_nodes}, n_edges={self.n_edges}, n_scores={self.n_scores})"

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(in_ptr, score, tail_ptr, tails)``, the kernels' view (internal hyperedge order)."""
        return self.in_ptr, self.score, self.tail_ptr, self.tails

    def tails_of(self, edges: np.ndarray) -> np.ndarray:
        """The tails of the internal hyperedges ``edges``, concatenated."""
        return self.tails[_ranges(self.tail_ptr[edges], self.tail_ptr[edges + 1] - self.tail_ptr[edges])]

    def is_derivation(self, edges: np.ndarray) -> bool:
        """Whether the internal hyperedges ``edges`` form one derivation of the goal using each node once."""
        if edges.size == 0 or edges.min() < 0 or edges.max() >= self.n_edges:
            return False
        used_in = np.bincount(self.head[edges], minlength=self.n_nodes)
        needed = np.bincount(self.tails_of(edges), minlength=self.n_nodes)
        needed[-1] += 1
        return bool(np.array_equal(used_in, needed) and needed.max() <= 1)

    def derivations(self) -> list[tuple[int, ...]]:
        """Every derivation of the goal as a sorted tuple of internal hyperedges (tiny hypergraphs only)."""
        memo: list[list[tuple[int, ...]]] = []
        for v in range(self.n_nodes):
            found: list[tuple[int, ...]] = []
            for e in range(self.in_ptr[v], self.in_ptr[v + 1]):
                partial: list[tuple[int, ...]] = [(e,)]
                for u in self.tails[self.tail_ptr[e]:self.tail_ptr[e + 1]]:
                    partial = [p + d for p in partial for d in memo[u]]
                found += partial
            memo.append(found)
        return [tuple(sorted(d)) for d in memo[-1]]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    # concatenation of arange(s, s + n) over (starts, lengths), vectorised
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return shift + np.arange(total)


# --------------------------------------------------------------------------- the functional layer
def _infeasible(name: str) -> InvalidInputError:
    return InvalidInputError(f"{name} potentials forbid every output: no derivation of the goal has a finite score "
                             "(the -inf entries remove every one)")


def dp_argmax(graph: Hypergraph, w: np.ndarray, name: str = "DP") -> tuple[np.ndarray, float]:
    """The internal hyperedges of a best derivation and its score (max-plus semiring)."""
    edges, best = kern.argmax(*graph.arrays, w)
    if best == -np.inf:
        raise _infeasible(name)
    return edges, float(best)


def dp_marginals(graph: Hypergraph, w: np.ndarray, name: str = "DP") -> tuple[float, np.ndarray]:
    """``(log Z, expected count of each score index)`` (log-sum-exp semiring, inside-outside)."""
    log_z, mu = kern.marginals(*graph.arrays, w, graph.n_scores)
    if log_z == -np.inf:
        raise _infeasible(name)
    if not np.isfinite(log_z):
        raise InvalidInputError(f"{name}: log Z is beyond the float64 range (potentials too large)")
    return float(log_z), mu


def dp_max_marginals(graph: Hypergraph, w: np.ndarray, name: str = "DP") -> np.ndarray:
    """The best score of a derivation using each score index (-inf where none does)."""
    mm = kern.max_marginals(*graph.arrays, w, graph.n_scores)
    if not np.any(mm > -np.inf) and kern.argmax(*graph.arrays, w)[1] == -np.inf:
        raise _infeasible(name)
    return mm


def dp_topk(graph: Hypergraph, w: np.ndarray, k: int, name: str = "DP") -> tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray]:
    """The k best derivations (k-best semiring): ``(edges, offsets, scores)``, derivation j being the
    internal hyperedges ``edges[offsets[j]:offsets[j + 1]]``; fewer when fewer have a finite score."""
    k = check_count(k, "k", f"{name}.topk")
    edges, offsets, scores = kern.topk(*graph.arrays, w, int(k))
    if scores.size == 0:
        raise _infeasible(name)
    return edges, offsets, scores


# --------------------------------------------------------------------------- the structure
class DPStructure(Structure):
    """A structure whose outputs are the derivations of an acyclic hypergraph (see the module docstring).

    Subclass it and call ``super().__init__(n_nodes, heads, tails, scores)`` once with the hypergraph
    (see :class:`Hypergraph`); every oracle follows: ``argmax``, exact ``topk``, ``marginals``,
    ``max_marginals`` (per score index), ``stats``, ``outputs`` (enumeration), the flow ``polytope``
    (so ``lp_relaxation`` and the Euclidean ``project`` by QP). Potentials are
    :class:`DPPotentials` (one score per index, -inf allowed: forbidden hyperedges), so
    :class:`~structopt.models.feature.FeatureModel` fits. Outputs are, by default, the sorted int64
    array of the hyperedge ids of a derivation; override :meth:`decode` and :meth:`encode` to use
    your own output type (and add ``states_per_node`` / ``node_potentials`` for a Hamming loss).

    Statistics count each score index once per hyperedge using it, so they are 0/1 (and the flow
    polytope exact) when no derivation uses an item or a score index twice.
    """

    name = "DPStructure"
    Potentials = DPPotentials

    def __init__(self, n_nodes: int, heads: Sequence[int], tails: Sequence[Sequence[int]], scores: Sequence[int],
                 n_scores: int | None = None):
        self.graph = Hypergraph(n_nodes, heads, tails, scores, n_scores)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.graph!r})"

    @classmethod
    def from_builder(cls, builder: Callable[[int], Any]) -> DPFamily:
        """One structure for instances of every size: ``builder(n)`` describes the instance whose potentials
        have n entries (n score indices), as a :class:`Hypergraph` or a :class:`DPStructure` (a subclass
        with its own :meth:`decode` / :meth:`encode`); each size is built once (see :class:`DPFamily`)."""
        return DPFamily(builder)

    # ----- output mapping (override for your own output type)
    def decode(self, edges: np.ndarray) -> Any:
        """The output of the derivation made of hyperedges ``edges`` (the caller's ids, sorted)."""
        return edges

    def encode(self, y: Any) -> np.ndarray:
        """The hyperedge ids of the derivation of output ``y`` (inverse of :meth:`decode`)."""
        return np.asarray(y, dtype=np.int64).ravel()

    # ----- layout
    def layout(self) -> Potentials:
        """A zero statistics template of the full layout (override with :meth:`expand` for other layouts)."""
        return DPPotentials(np.zeros(self.graph.n_scores))

    def expand(self, theta: Potentials) -> Potentials:
        """``theta`` checked: one finite or -inf score per index (NaN and +inf refused)."""
        if not isinstance(theta, tuple) or len(theta) != 1:
            raise InvalidInputError(f"{self.name} potentials must be DPPotentials(score), got {type(theta).__name__}")
        score = numeric_array(theta[0], f"{self.name} potentials", finite=False).astype(float, copy=False)
        if score.shape != (self.graph.n_scores,):
            raise InvalidInputError(f"{self.name} potentials must have shape ({self.graph.n_scores},), "
                                    f"got {score.shape}")
        refuse_nonfinite((("score", score),), self.name, allow_neginf=True)
        return DPPotentials(score)

    def flat_scores(self, theta: Potentials) -> np.ndarray:
        """``flatten(expand(theta))`` as one contiguous float64 vector (what the kernels read)."""
        return np.ascontiguousarray(flatten(self.expand(theta)), dtype=float)

    def _output(self, internal: np.ndarray) -> Any:
        return self.decode(np.sort(self.graph.edge_id[internal]))

    def _edges(self, y: Any, index: int | None = None) -> np.ndarray:
        # internal hyperedges of output y, or an InvalidInputError saying why it is not an output
        try:
            user = self.encode(y)
            user = np.asarray(user, dtype=np.int64).ravel()
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise example_error(index, f"{self.name} cannot encode the output {y!r}: {exc}") from None
        if user.size == 0 or user.min() < 0 or user.max() >= self.graph.n_edges:
            raise example_error(index, f"{self.name} output names hyperedges outside [0, {self.graph.n_edges})")
        internal = self.graph.internal[user]
        if not self.graph.is_derivation(internal):
            raise example_error(index, f"{self.name} output is not a derivation of the goal (each item built "
                                       "exactly once, from the goal down)")
        return internal

    # ----- required
    def validate_output(self, y: Any, like: Potentials = None, index: int | None = None) -> Any:
        """``y`` in canonical form, or an :class:`InvalidInputError`: it must encode a derivation that
        decodes back to it."""
        out = self._output(self._edges(y, index))
        try:
            same = np.array_equal(np.asarray(out), np.asarray(y))
        except (TypeError, ValueError):
            same = False
        if not same:
            raise example_error(index, f"{self.name} output {y!r} is not one of its outputs (it encodes a derivation "
                                       f"whose output is {out!r})")
        return out

    def stats(self, y: Any, like: Potentials = None) -> Potentials:
        score = self.graph.score[self._edges(y)]
        counts = np.bincount(score[score >= 0], minlength=self.graph.n_scores).astype(float)
        return unflatten(counts, self.layout())

    def score(self, theta: Potentials, y: Any) -> float:
        """Sum of the scores of y's hyperedges (a -inf entry that y does not use does not count)."""
        score = self.graph.score[self._edges(y)]
        return float(self.flat_scores(theta)[score[score >= 0]].sum())

    def outputs(self, theta: Potentials = None) -> Iterator[Any]:
        for derivation in self.graph.derivations():
            yield self._output(np.array(derivation, dtype=np.int64))

    def polytope(self, theta: Potentials = None) -> Polytope:
        """The flow polytope: a unit of flow into the goal, each item's inflow equal to its uses as a
        tail, statistics the flow of their hyperedges (one auxiliary column per hyperedge)."""
        g = self.graph
        n_s, n_e, n = g.n_scores, g.n_edges, g.n_nodes
        has = g.score >= 0
        # rows 0..n_s-1: z_j - sum_{e of score j} x_e = 0; rows n_s + v: inflow(v) - uses(v) = [v is the goal]
        tail_edge = np.repeat(np.arange(n_e), np.diff(g.tail_ptr))
        rows = np.concatenate([np.arange(n_s), g.score[has], n_s + g.head, n_s + g.tails])
        cols = np.concatenate([np.arange(n_s), n_s + np.flatnonzero(has), n_s + np.arange(n_e), n_s + tail_edge])
        vals = np.concatenate([np.ones(n_s), -np.ones(int(has.sum())), np.ones(n_e), -np.ones(g.tails.size)])
        A = sp.csr_matrix((vals, (rows, cols)), shape=(n_s + n, n_s + n_e))
        b = np.zeros(n_s + n)
        b[-1] = 1.0
        return Polytope(A, b, None, None, self.layout(), n_aux=n_e)

    # ----- oracles
    def argmax(self, theta: Potentials) -> Any:
        """A best derivation (max-plus recursion with back-pointers; ties: the hyperedge listed first)."""
        edges, _ = dp_argmax(self.graph, self.flat_scores(theta), self.name)
        return self._output(edges)

    def topk(self, theta: Potentials, k: int) -> tuple[list[Any], np.ndarray]:
        """The exact k best outputs (k-best recursion), sorted; fewer when fewer have a finite score."""
        edges, offsets, scores = dp_topk(self.graph, self.flat_scores(theta), k, self.name)
        return [self._output(edges[a:b]) for a, b in itertools.pairwise(offsets)], scores

    def marginals(self, theta: Potentials) -> tuple[float, Potentials]:
        """``(log Z, expected statistics)`` by inside-outside in the log-sum-exp semiring."""
        log_z, mu = dp_marginals(self.graph, self.flat_scores(theta), self.name)
        return log_z, unflatten(mu, self.layout())

    def max_marginals(self, theta: Potentials) -> np.ndarray:
        """The best score of an output using each statistic of the first field (-inf where none does)."""
        mm = dp_max_marginals(self.graph, self.flat_scores(theta), self.name)
        return np.asarray(unflatten(mm, self.layout())[0])


class LabelDP(DPStructure):
    """Node labellings of a forest (or a chain) as a :class:`DPStructure`; outputs are int64 labels (n,).

    Items: ``U(v, s)``, the best of v's subtree with y_v = s (one hyperedge: score ``unary[v, s]``,
    tails the children's messages); ``M(v, a)``, v's subtree given its parent's label a (S hyperedges
    ``U(v, b)``, score ``pairwise[e, ., .]``); one item per root and the goal. Potentials are the
    flattened full layout ``(unary (n, S), pairwise (m, S, S))`` of a tree or chain. Built by
    :meth:`TreeStructure.as_dp <structopt.structures.tree.TreeStructure.as_dp>` and
    :meth:`Chain.as_dp <structopt.structures.chain.Chain.as_dp>`; masks drop hyperedges.

    Parameters
    ----------
    edges : (m, 2) int array
    n_states : int
    schedule : (order, parent, pedge, forward)
        A root-first schedule of the forest (``structopt.structures.tree.forest_schedule``).
    allowed_unary : (n, S) bool array, optional
    allowed_pair : (m, S, S) bool array, optional
        ``allowed_pair[e, a, b]``: y_u = a with y_v = b on edge e = (u, v).
    """

    name = "LabelDP"

    def __init__(self, edges: np.ndarray, n_states: int, schedule: tuple[np.ndarray, ...],
                 allowed_unary: np.ndarray | None = None, allowed_pair: np.ndarray | None = None):
        order, parent, pedge, forward = schedule
        n, S = len(order), int(n_states)
        m = len(edges)
        allowed_unary = np.ones((n, S), dtype=bool) if allowed_unary is None else np.asarray(allowed_unary, bool)
        allowed_pair = np.ones((m, S, S), dtype=bool) if allowed_pair is None else np.asarray(allowed_pair, bool)
        pos = np.empty(n, dtype=np.int64)
        pos[order[::-1]] = np.arange(n)  # leaves first: a node's items come after its children's
        children: list[list[int]] = [[] for _ in range(n)]
        for v in order:
            if parent[v] >= 0:
                children[parent[v]].append(int(v))
        roots = order[parent[order] < 0]
        n_items = 2 * S * n + len(roots) + 1
        heads, tails, scores, node, state = [], [], [], [], []
        states = np.arange(S)
        for v in order[::-1]:
            kids = 2 * S * pos[np.array(children[v], dtype=np.int64)] + S
            for s in states[allowed_unary[v]]:  # U(v, s)
                heads.append(2 * S * pos[v] + s)
                tails.append(kids + s)
                scores.append(v * S + s)
                node.append(v)
                state.append(s)
            if parent[v] >= 0:  # M(v, a) <- U(v, b)
                e = pedge[v]
                a, b = np.meshgrid(states, states, indexing="ij")
                block = allowed_pair[e] if forward[v] else allowed_pair[e].T
                a, b = a[block], b[block]
                heads += list(2 * S * pos[v] + S + a)
                tails += [[2 * S * pos[v] + bb] for bb in b]
                scores += list(n * S + e * S * S + (a * S + b if forward[v] else b * S + a))
                node += [-1] * a.size
                state += [-1] * a.size
        for i, r in enumerate(roots):
            for s in states:
                heads.append(2 * S * n + i)
                tails.append([2 * S * pos[r] + s])
                scores.append(-1)
                node.append(-1)
                state.append(-1)
        heads.append(n_items - 1)
        tails.append(2 * S * n + np.arange(len(roots)))
        scores.append(-1)
        node.append(-1)
        state.append(-1)
        super().__init__(n_items, heads, tails, scores, n_scores=n * S + m * S * S)
        self.n_labels, self.n_states, self.edges = n, S, np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.edge_node = np.asarray(node, dtype=np.int64)[self.graph.edge_id]  # per internal hyperedge
        self.edge_state = np.asarray(state, dtype=np.int64)[self.graph.edge_id]
        self.node_edge = np.full((n, S), -1, dtype=np.int64)  # internal U(v, s) hyperedge, -1 if dropped
        is_u = self.edge_node >= 0
        self.node_edge[self.edge_node[is_u], self.edge_state[is_u]] = np.flatnonzero(is_u)
        self._root_items = 2 * S * n + np.arange(len(roots))
        self._roots = roots
        self._pos = pos
        self._parent = np.asarray(parent, dtype=np.int64)  # the schedule's parent of each node (-1: a root)

    def __repr__(self) -> str:
        return f"LabelDP(n_nodes={self.n_labels}, n_states={self.n_states}, {self.graph!r})"

    @property
    def states_per_node(self) -> int:
        """Values each node takes (the per-node loss hook)."""
        return self.n_states

    def node_potentials(self, costs: np.ndarray, like: Potentials = None) -> DPPotentials:
        """Potentials with per-node scores ``costs`` (n, S) and no edge scores."""
        score = np.zeros(self.graph.n_scores)
        score[:costs.size] = np.asarray(costs, dtype=float).ravel()
        return DPPotentials(score)

    def labels(self, internal: np.ndarray) -> np.ndarray:
        """The labelling of the derivation made of the internal hyperedges ``internal``."""
        y = np.zeros(self.n_labels, dtype=np.int64)
        used = internal[self.edge_node[internal] >= 0]
        y[self.edge_node[used]] = self.edge_state[used]
        return y

    def _output(self, internal: np.ndarray) -> np.ndarray:
        return self.labels(internal)

    def decode(self, edges: np.ndarray) -> np.ndarray:
        return self.labels(self.graph.internal[edges])

    def encode(self, y: Any) -> np.ndarray:
        y = np.asarray(y)
        if y.shape != (self.n_labels,) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 \
                or y.max() >= self.n_states:
            raise ValueError(f"labels must be an int array of shape ({self.n_labels},) in [0, {self.n_states})")
        g = self.graph
        u_edges = self.node_edge[np.arange(self.n_labels), y]
        if np.any(u_edges < 0):
            raise ValueError("a label is forbidden at its node")
        internal = [u_edges]
        for v in range(self.n_labels):  # M(v, y_parent) <- U(v, y_v): the hyperedge whose tail is U(v, y_v)
            if v not in self._roots:
                item = 2 * self.n_states * self._pos[v]
                message = item + self.n_states + y[self._parent[v]]  # M(v, y_parent)
                lo, hi = g.in_ptr[message], g.in_ptr[message + 1]
                match = [e for e in range(lo, hi) if g.tails[g.tail_ptr[e]] == item + y[v]]
                if not match:
                    raise ValueError(f"the transition into node {v} is forbidden")
                internal.append(np.array(match, dtype=np.int64))
        for i, r in enumerate(self._roots):
            lo = g.in_ptr[self._root_items[i]]
            internal.append(np.array([lo + y[r]], dtype=np.int64))
        internal.append(np.array([g.in_ptr[-2]], dtype=np.int64))
        return np.sort(g.edge_id[np.concatenate(internal)])


def path_schedule(length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The root-first schedule of the path 0 - 1 - ... - (length - 1), edges stored as (t, t + 1)."""
    T = int(length)
    return (np.arange(T, dtype=np.int64), np.arange(-1, T - 1, dtype=np.int64), np.arange(-1, T - 1, dtype=np.int64),
            np.ones(T, dtype=np.bool_))


class DPFamily(Structure):
    """Dynamic programs whose hypergraph depends on the instance's size, one object for every size (as
    :meth:`LPStructure.from_builder <structopt.structures.lp.LPStructure.from_builder>`); made by
    :meth:`DPStructure.from_builder`.

    The size of an instance is the number of entries of its potentials (``DPPotentials(score)``, n
    score indices); ``builder(n)`` returns its :class:`Hypergraph` (with ``n_scores == n``) or a
    :class:`DPStructure` built on one, and is called once per size (the instances are cached). Every
    oracle runs on the instance of its potentials' size, so a model and a problem can mix sizes.

    Parameters
    ----------
    builder : callable
        ``builder(n) -> Hypergraph or DPStructure``.

    Raises
    ------
    InvalidInputError
        When ``builder`` is not callable, or (on first use of a size) returns something else or an
        instance with another number of score indices.
    """

    name = "DPStructure"
    Potentials = DPPotentials

    def __init__(self, builder: Callable[[int], Any]):
        if not callable(builder):
            raise InvalidInputError(f"DPStructure.from_builder needs builder(n) -> Hypergraph or DPStructure, got "
                                    f"{builder!r}")
        self.builder = builder
        self._cache: dict[int, DPStructure] = {}

    def __repr__(self) -> str:
        return f"DPStructure.from_builder({getattr(self.builder, '__name__', 'builder')})"

    def instance(self, n: int, index: int | None = None) -> DPStructure:
        """The :class:`DPStructure` of the instances with n score indices (built on first use)."""
        if n in self._cache:
            return self._cache[n]
        if n < 1:
            raise example_error(index, f"{self.name} potentials must have at least one entry, got {n}")
        built = self.builder(n)
        if isinstance(built, Hypergraph):  # the plain structure on it: outputs are hyperedge ids
            graph, built = built, DPStructure.__new__(DPStructure)
            built.graph = graph
        if not isinstance(built, DPStructure):
            raise InvalidInputError(f"builder({n}) must return a Hypergraph or a DPStructure, got "
                                    f"{type(built).__name__}")
        if built.graph.n_scores != n:
            raise InvalidInputError(f"builder({n}) returned a hypergraph with {built.graph.n_scores} score indices; "
                                    f"the potentials of its instances have {n}")
        self._cache[n] = built
        return built

    def _of(self, theta: Potentials | None, index: int | None = None) -> DPStructure:
        if theta is None:
            raise example_error(index, f"{self.name}.from_builder needs the instance's potentials (like=) to know "
                                       "its size")
        if not isinstance(theta, tuple) or len(theta) != 1:
            raise example_error(index, f"{self.name} potentials must be DPPotentials(score), got "
                                       f"{type(theta).__name__}")
        score = np.asarray(theta[0])
        if score.ndim != 1:
            raise example_error(index, f"{self.name} potentials must be a 1-D score vector, got shape {score.shape}")
        return self.instance(score.size, index)

    # every operation runs on the instance of its potentials' size
    def expand(self, theta: Potentials) -> Potentials:
        return self._of(theta).expand(theta)

    def validate_output(self, y: Any, like: Potentials, index: int | None = None) -> Any:
        return self._of(like, index).validate_output(y, like, index)

    def stats(self, y: Any, like: Potentials) -> Potentials:
        return self._of(like).stats(y, like)

    def score(self, theta: Potentials, y: Any) -> float:
        return self._of(theta).score(theta, y)

    def outputs(self, theta: Potentials) -> Iterator[Any]:
        return self._of(theta).outputs(theta)

    def polytope(self, theta: Potentials) -> Polytope:
        return self._of(theta).polytope(theta)

    def argmax(self, theta: Potentials) -> Any:
        return self._of(theta).argmax(theta)

    def topk(self, theta: Potentials, k: int) -> tuple[list[Any], np.ndarray]:
        return self._of(theta).topk(theta, k)

    def marginals(self, theta: Potentials) -> tuple[float, Potentials]:
        return self._of(theta).marginals(theta)

    def max_marginals(self, theta: Potentials) -> np.ndarray:
        return self._of(theta).max_marginals(theta)

    # the per-node loss hooks, per instance: the instance's own, when its DPStructure declares them
    def _node_hook(self, like: Potentials, name: str) -> Any:
        instance = self._of(like)
        if not hasattr(instance, name):
            raise NotSupportedError(f"a per-node loss needs {name} on the instances of {self!r}; the instance with "
                                    f"{instance.graph.n_scores} potentials ({type(instance).__name__}) does not "
                                    "declare it (return a DPStructure subclass with states_per_node and "
                                    "node_potentials from the builder)")
        return getattr(instance, name)

    def states_per_node(self, like: Potentials) -> int:
        """The values each node takes in the instance shaped like ``like`` (its DPStructure's hook)."""
        return self._node_hook(like, "states_per_node")

    def node_potentials(self, costs: np.ndarray, like: Potentials) -> Potentials:
        """Per-node costs as potentials of the instance shaped like ``like`` (its DPStructure's hook)."""
        return self._node_hook(like, "node_potentials")(costs, like)
