"""Pairwise CRFs on general graphs (one graph per example), trained with the relaxed LP-MAP oracle.

Each example is a graph with node features, edges and edge features; its output is a label per
node. The structure is a :class:`~structopt.structures.factor_graph.FactorGraph` with one variable
per node and one pairwise table per edge, built once per graph and cached. On graphs with cycles
MAP is NP-hard: the max oracle is AD3's LP-MAP over the *local* polytope, so training solves the
relaxed structural SVM (Finley & Joachims, ICML 2008); see :class:`GraphModel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, refuse_nonfinite
from structopt.models.base import Model
from structopt.structures.base import Polytope, Structure, check_flag, unchanged_methods, unsupported
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials, check_time_limit


class GraphInput(NamedTuple):
    """One example's graph.

    Attributes
    ----------
    nodes : ndarray, shape (N, F)
        Node features.
    edges : ndarray of int64, shape (E, 2)
        Edges ``(u, v)``: distinct nodes, no edge twice (in either direction). With non-symmetric
        pairwise weights the direction matters: the table's rows are u's state, its columns v's.
    edge_features : ndarray, shape (E, G)
        Edge features (e.g. a constant 1 and a contrast).
    """

    nodes: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray


class GraphPotentials(NamedTuple):
    """Scores (or statistics) of one graph: per node and state, per edge and pair of states.

    Potentials made by :meth:`GraphModel.potentials` are of a per-graph subclass that carries its
    graph (``type(theta).factor_graph``), so that one :class:`GraphStructure` serves every example
    and the potentials arithmetic (which keeps ``type(theta)``) keeps the graph.
    """

    unary: np.ndarray  # (N, S)
    pairwise: np.ndarray  # (E, S, S)


# per-graph potentials classes, keyed by (N, S, edges): built once per graph, shared by every copy of the
# model (and rebuilt from the key when potentials are unpickled in another process)
_GRAPH_TYPES: dict[tuple[int, int, bytes], type] = {}


def _graph_type(n_nodes: int, n_states: int, edges: np.ndarray) -> type:
    edges = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    key = (int(n_nodes), int(n_states), edges.tobytes())
    cls = _GRAPH_TYPES.get(key)
    if cls is None:
        cls = type("GraphPotentials", (GraphPotentials,), {
            "__slots__": (), "n_nodes": int(n_nodes), "n_states": int(n_states), "edges": edges,
            "_fg": None, "_warm": None, "factor_graph": property(_factor_graph),
            "__reduce_ex__": _reduce_graph_potentials})
        _GRAPH_TYPES[key] = cls
    return cls


def _factor_graph(theta: GraphPotentials) -> FactorGraph:
    cls = type(theta)
    if cls._fg is None:
        fg = FactorGraph(np.full(cls.n_nodes, cls.n_states, dtype=np.int64))
        fg.add_pairwise_tables(cls.edges)  # one array operation, not a Python loop over edges
        cls._fg = fg
    return cls._fg


def _rebuild_graph_potentials(n_nodes: int, n_states: int, edges: np.ndarray, fields: tuple) -> GraphPotentials:
    return _graph_type(n_nodes, n_states, edges)(*fields)


def _reduce_graph_potentials(self: GraphPotentials, protocol: int) -> tuple:
    cls = type(self)
    return _rebuild_graph_potentials, (cls.n_nodes, cls.n_states, cls.edges, tuple(self))


def _graph_of(theta: Any, index: int | None = None) -> FactorGraph:
    if not isinstance(theta, GraphPotentials) or type(theta) is GraphPotentials:
        raise example_error(index, f"GraphStructure potentials must come from GraphModel.potentials (they carry "
                                   f"their graph), got {type(theta).__name__}")
    return theta.factor_graph


class GraphStructure(Structure):
    """Labelings of the nodes of the graph that each example's potentials carry (see :class:`GraphModel`).

    Parameters
    ----------
    n_states : int
        States per node.
    exact : bool, default False
        False: :meth:`argmax` is the relaxed oracle, AD3's LP-MAP point over the local polytope (a
        labeling when AD3 certifies one optimal, else the fractional point as statistics). True:
        the exact MAP labeling by branch-and-bound over AD3 (exponential in the worst case).
    time_limit : float, optional
        Seconds per oracle call (None: no limit).
    warm_start : bool, default False
        Start the relaxed oracle's AD3 from its previous iterate on the same graph (kept per graph in
        this process; the potentials of a training run drift slowly, so the previous multipliers are
        close). The answer meets the same tolerances; which LP-optimal point is returned on a tied face
        may depend on the call history, so a run resumed from a checkpoint is not bit-identical.
    """

    name = "GraphStructure"

    def __init__(self, n_states: int, exact: bool = False, time_limit: float | None = None,
                 warm_start: bool = False):
        self.n_states = check_count(n_states, "n_states", "GraphStructure")
        self.exact = check_flag(exact, "exact", "GraphStructure")
        self.warm_start = check_flag(warm_start, "warm_start", "GraphStructure")
        check_time_limit("GraphStructure time_limit", time_limit)
        self.time_limit = None if time_limit is None else float(time_limit)

    def __repr__(self) -> str:
        return f"GraphStructure(n_states={self.n_states}, exact={self.exact})"

    def kernel_oracles(self) -> frozenset[str]:
        """Oracles the fused graph kernels reproduce (:mod:`structopt.fused.graph`): the relaxed oracle from a
        fresh AD3 iterate, its statistics and scores; none with ``exact`` (branch-and-bound), a ``time_limit``
        (the kernels run to AD3's tolerances) or ``warm_start`` (iterates kept per graph in Python)."""
        if self.exact or self.time_limit is not None or self.warm_start:
            return frozenset()
        return unchanged_methods(self, GraphStructure, ("argmax", "stats", "score", "expand"))

    @staticmethod
    def _flat(theta: GraphPotentials) -> FactorGraphPotentials:
        return FactorGraphPotentials(np.ravel(theta.unary), np.ravel(theta.pairwise))

    def argmax(self, theta: GraphPotentials) -> Any:
        """Relaxed oracle (labels, or the fractional LP-MAP point as :class:`GraphPotentials`), or
        the exact MAP labels with ``exact=True``."""
        theta = self.expand(theta)
        # expand made the checks FactorGraph.check_theta would repeat: the oracle skips them
        fg = _graph_of(theta)
        if self.warm_start and not self.exact:
            cls = type(theta)
            out, cls._warm = fg.relaxed_oracle(self._flat(theta), self.time_limit, cls._warm, checked=True)
        else:
            out = fg.oracle(self._flat(theta), self.exact, self.time_limit, checked=True)
        if isinstance(out, FactorGraphPotentials):
            return type(theta)(out.unary.reshape(theta.unary.shape), out.factors.reshape(theta.pairwise.shape))
        return out

    def map_labels(self, theta: GraphPotentials, exact: bool | None = None) -> np.ndarray:
        """A labeling (:meth:`FactorGraph.map_labels`): by default (``None``) AD3 with its certificate, then
        branch-and-bound while a gap remains within a budget; ``True`` the exact MAP (branch-and-bound to the
        end); ``False`` AD3's best rounded labeling alone."""
        theta = self.expand(theta)
        return _graph_of(theta).labels_checked(self._flat(theta), exact=exact, time_limit=self.time_limit)

    def stats(self, y: Any, like: GraphPotentials) -> GraphPotentials:
        """One-hot node and edge indicators of labels ``y`` (N,), or a relaxed point unchanged."""
        cls = type(like)
        if isinstance(y, GraphPotentials):
            return cls(np.asarray(y.unary, dtype=float), np.asarray(y.pairwise, dtype=float))
        y = self.validate_output(y, like)
        N, S = np.shape(like.unary)
        unary = np.zeros((N, S))
        unary[np.arange(N), y] = 1.0
        _graph_of(like)
        edges = cls.edges
        pairwise = np.zeros((len(edges), S, S))
        pairwise[np.arange(len(edges)), y[edges[:, 0]], y[edges[:, 1]]] = 1.0
        return cls(unary, pairwise)

    def outputs(self, theta: GraphPotentials) -> Iterator[np.ndarray]:
        theta = self.expand(theta)
        return _graph_of(theta).outputs(self._flat(theta))

    def polytope(self, theta: GraphPotentials) -> Polytope:
        """The local polytope of the graph (exact on forests, an outer relaxation with cycles)."""
        theta = self.expand(theta)
        poly = _graph_of(theta).polytope(self._flat(theta))
        return poly._replace(like=type(theta)(np.zeros_like(theta.unary), np.zeros_like(theta.pairwise)))

    def expand(self, theta: GraphPotentials, index: int | None = None) -> GraphPotentials:
        """``theta`` as float arrays of shapes (N, S) and (E, S, S); NaN and +inf refused."""
        _graph_of(theta, index)
        cls = type(theta)
        N, E, S = cls.n_nodes, len(cls.edges), cls.n_states
        fields = []
        for label, arr, shape in (("unary", theta[0], (N, S)), ("pairwise", theta[1], (E, S, S))):
            arr = np.asarray(arr, dtype=np.float64)
            if arr.shape != shape:
                raise example_error(index, f"graph potentials: {label} has shape {arr.shape}, expected {shape}")
            refuse_nonfinite(((label, arr),), "graph", index, allow_neginf=True)
            fields.append(arr)
        return cls(*fields)

    def validate_output(self, y: Any, like: GraphPotentials, index: int | None = None) -> np.ndarray:
        N, S = np.shape(like.unary)
        arr = np.asarray(y)
        if arr.shape != (N,) or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise example_error(index, f"graph labels must be an integer array of shape ({N},) (one per node), got "
                                       f"{arr.dtype} {arr.shape}")
        arr = arr.astype(np.int64)
        bad = np.flatnonzero((arr < 0) | (arr >= S))
        if bad.size:
            raise example_error(index, f"graph labels: node {int(bad[0])} has label {int(arr[bad[0]])}, outside "
                                       f"0..{S - 1}")
        return arr

    # ----- per-node loss hooks (Hamming, WeightedHamming)
    @property
    def states_per_node(self) -> int:
        """States per node (the per-node loss hook)."""
        return self.n_states

    def node_potentials(self, costs: np.ndarray, like: GraphPotentials) -> GraphPotentials:
        """Potentials with per-node scores ``costs`` (N, S) and no edge scores."""
        return type(like)(np.asarray(costs, dtype=float), np.zeros(np.shape(like.pairwise)))

    @unsupported
    def topk(self, theta: GraphPotentials, k: int) -> tuple[list[Any], np.ndarray]:
        raise NotSupportedError(f"{type(self).__name__} has no top-K oracle: MAP on a graph with cycles is NP-hard "
                                "(its max oracle is the LP-MAP relaxation); train its model with bcfw, frank_wolfe or "
                                "ssg")

    @unsupported
    def marginals(self, theta: GraphPotentials) -> tuple[float, GraphPotentials]:
        raise NotSupportedError(f"{type(self).__name__} has no marginals: the log-partition of a graph with cycles "
                                "is #P-hard; train its model with bcfw, frank_wolfe or ssg (max oracle)")


class GraphModel(Model):
    """A pairwise CRF on each example's own graph: ``theta_i(s) = <x_i, W_unary[:, s]>`` and
    ``theta_uv(a, b) = sum_g f_uv[g] W_pairwise[g, a, b]``.

    Inputs are :class:`GraphInput` ``(nodes (N, F), edges (E, 2), edge_features (E, G))`` (any
    tuple of three arrays); outputs are int labels ``(N,)`` in ``0..n_states-1``. Graphs may differ
    in size and shape from one example to the next; each one's factor graph is built once and cached.

    Parameters
    ----------
    n_node_features : int
        F.
    n_edge_features : int
        G (0: a unary-only model, no ``pairwise`` block).
    n_states : int
        S, states per node.
    symmetric : bool, default False
        Tie ``W_pairwise[g, a, b] = W_pairwise[g, b, a]`` (undirected edges): the ``pairwise`` block
        then holds the upper triangles, shape ``(G, S (S + 1) / 2)``; else it is ``(G, S, S)``.
    exact : bool, default False
        The oracle of training and of ``SSVMProblem.predict``: False, the relaxed LP-MAP oracle
        (below); True, exact MAP by branch-and-bound (exponential in the worst case).
    time_limit : float, optional
        Seconds per oracle call.
    warm_start : bool, default False
        The relaxed oracle starts AD3 from its previous iterate on the same graph (see
        :class:`GraphStructure`; faster on slowly drifting weights, not bit-identical on resume).

    Notes
    -----
    **Training solves the relaxed structural SVM.** With ``exact=False`` the max oracle maximises
    the loss-augmented score over the *local* polytope of the graph (AD3, Martins et al. 2015),
    whose vertices include fractional ones on graphs with cycles. bcfw, frank_wolfe and ssg then
    minimise the SSVM objective in which the hinge maximises over that polytope (Finley & Joachims,
    ICML 2008: "relaxed" training), and the duality gap they report certifies *that* objective. It
    upper-bounds the exact SSVM objective; on forests, where the local polytope is the marginal
    polytope, the two coincide and the gap certifies the exact SSVM. The oracle is AD3 run to its
    tolerance (about 1e-9 relative), so the gap is certified to that accuracy; a fractional
    maximiser's loss is the decomposable loss's linear form ``<c_i, mu> + const_i``
    (``SSVMProblem.loss_of``). sgd, svrg and casimir need top-K or marginals, which graphs with
    cycles do not have: they refuse (NotSupportedError) before the run.

    **Prediction** (:meth:`~structopt.models.Model.predict`, and ``SSVMProblem.predict``,
    ``StructuredSVM.predict`` and ``SavedModel.predict``, which call it) returns labels, never the
    relaxed point, whatever ``exact`` the model was trained with (:meth:`GraphStructure.map_labels`): by
    default AD3's labeling with its certificate (optimal when AD3's bound meets its score), then
    branch-and-bound over AD3 only while a gap remains, within a budget (``FactorGraph.map(method=
    "ad3_bnb")``); ``predict(x, w, exact=True)`` runs branch-and-bound to the exact MAP, ``exact=False``
    takes AD3's rounded labeling alone.

    Examples
    --------
    >>> model = GraphModel(n_node_features=5, n_edge_features=1, n_states=3, symmetric=True)
    >>> x = (np.ones((4, 5)), np.array([[0, 1], [1, 2], [2, 3], [3, 0]]), np.ones((4, 1)))
    >>> model.predict(x, model.zeros()).shape
    (4,)
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[GraphModel, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """A triangle with a pendant node (a frustrated cycle under repulsive weights, where the LP-MAP point is
        fractional), 2 states, random node and edge features (see :meth:`Model.example`)."""
        edges = np.array([[0, 1], [1, 2], [2, 0], [2, 3]])
        return cls(2, 1, 2), [(rng.normal(size=(4, 2)), edges, rng.random((4, 1))) for _ in range(3)]

    def __init__(self, n_node_features: int, n_edge_features: int, n_states: int, symmetric: bool = False, *,
                 exact: bool = False, time_limit: float | None = None, warm_start: bool = False):
        self.n_node_features = check_count(n_node_features, "n_node_features", "GraphModel")
        self.n_edge_features = check_count(n_edge_features, "n_edge_features", "GraphModel", 0)
        self.n_states = check_count(n_states, "n_states", "GraphModel")
        self.symmetric = check_flag(symmetric, "symmetric", "GraphModel")
        self.structure = GraphStructure(self.n_states, exact, time_limit, warm_start)
        self._triu = np.triu_indices(self.n_states)

    def __repr__(self) -> str:
        return (f"GraphModel(n_node_features={self.n_node_features}, n_edge_features={self.n_edge_features}, "
                f"n_states={self.n_states}, symmetric={self.symmetric}, exact={self.structure.exact})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        F, G, S = self.n_node_features, self.n_edge_features, self.n_states
        blocks = [("unary", (F, S))]
        if G:
            blocks.append(("pairwise", (G, S * (S + 1) // 2) if self.symmetric else (G, S, S)))
        return blocks

    def validate_input(self, x: Any, index: int | None = None) -> GraphInput:
        if not isinstance(x, tuple) or len(x) != 3:
            raise example_error(index, "graph input must be a tuple (node_features (N, F), edges (E, 2), "
                                       "edge_features (E, G))")
        F, G = self.n_node_features, self.n_edge_features
        try:
            nodes = np.ascontiguousarray(x[0], dtype=np.float64)
            feats = np.ascontiguousarray(x[2], dtype=np.float64)
        except (TypeError, ValueError):
            raise example_error(index, "graph node and edge features must be numeric arrays") from None
        if nodes.ndim != 2 or nodes.shape[1] != F or nodes.shape[0] < 1:
            raise example_error(index, f"graph node features must have shape (N>=1, {F}), got {nodes.shape}")
        if not np.all(np.isfinite(nodes)):
            raise example_error(index, "graph node features contain NaN or infinite values")
        N = nodes.shape[0]
        edges = self._edges(x[1], N, index)
        E = edges.shape[0]
        if feats.shape != (E, G):
            raise example_error(index, f"graph edge features must have shape ({E}, {G}) (one row per edge), got "
                                       f"{feats.shape}")
        if not np.all(np.isfinite(feats)):
            raise example_error(index, "graph edge features contain NaN or infinite values")
        return GraphInput(nodes, edges, feats)

    @staticmethod
    def _edges(raw: Any, n_nodes: int, index: int | None) -> np.ndarray:
        arr = np.asarray(raw)
        if arr.size == 0:
            arr = arr.reshape(0, 2)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise example_error(index, f"graph edges must have shape (E, 2), got {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise example_error(index, f"graph edges must be integer node indices, got dtype {arr.dtype}")
        edges = np.ascontiguousarray(arr, dtype=np.int64)
        bad = np.flatnonzero(((edges < 0) | (edges >= n_nodes)).any(axis=1))
        if bad.size:
            e = int(bad[0])
            raise example_error(index, f"graph edge {e} {tuple(edges[e].tolist())} names a node outside "
                                       f"0..{n_nodes - 1}")
        loops = np.flatnonzero(edges[:, 0] == edges[:, 1])
        if loops.size:
            e = int(loops[0])
            raise example_error(index, f"graph edge {e} is a self-loop on node {int(edges[e, 0])}")
        pairs = np.sort(edges, axis=1)
        _, first, counts = np.unique(pairs, axis=0, return_index=True, return_counts=True)
        if (counts > 1).any():
            pair = pairs[first[np.flatnonzero(counts > 1)[0]]]
            dup = np.flatnonzero((pairs == pair).all(axis=1))
            raise example_error(index, f"graph edges {int(dup[0])} and {int(dup[1])} join the same nodes "
                                       f"{tuple(pair.tolist())} (duplicate edge, in either direction)")
        return edges

    def _pairwise_weights(self, block: np.ndarray) -> np.ndarray:
        # (G, S, S) tables from the block (mirrored upper triangles when symmetric)
        if not self.symmetric:
            return block
        S = self.n_states
        full = np.zeros((block.shape[0], S, S))
        full[:, self._triu[0], self._triu[1]] = block
        full[:, self._triu[1], self._triu[0]] = block
        return full

    def potentials(self, x: GraphInput, w: np.ndarray) -> GraphPotentials:
        blocks = self.unpack(w)
        cls = _graph_type(x.nodes.shape[0], self.n_states, x.edges)
        unary = x.nodes @ blocks["unary"]
        S, E = self.n_states, x.edges.shape[0]
        if not self.n_edge_features:
            return cls(unary, np.zeros((E, S, S)))
        W = self._pairwise_weights(blocks["pairwise"])
        return cls(unary, (x.edge_features @ W.reshape(self.n_edge_features, S * S)).reshape(E, S, S))

    def _blocks_of(self, x: GraphInput, mu: GraphPotentials) -> tuple[np.ndarray, np.ndarray | None]:
        # A_x^T mu as its unary (F, S) and pairwise blocks
        N, S, E = x.nodes.shape[0], self.n_states, x.edges.shape[0]
        node, edge = np.asarray(mu[0], dtype=float), np.asarray(mu[1], dtype=float)
        if node.shape != (N, S) or edge.shape != (E, S, S):
            raise InvalidInputError(f"statistics of shapes {node.shape}, {edge.shape} do not match a graph with {N} "
                                    f"nodes, {E} edges and {S} states")
        unary = x.nodes.T @ node
        if not self.n_edge_features:
            return unary, None
        M = (x.edge_features.T @ edge.reshape(E, S * S)).reshape(self.n_edge_features, S, S)
        if not self.symmetric:
            return unary, M
        i, j = self._triu
        return unary, np.where(i == j, M[:, i, j], M[:, i, j] + M[:, j, i])

    def add_features(self, x: GraphInput, mu: GraphPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        unary, pairwise = self._blocks_of(x, mu)
        blocks["unary"] += scale * unary
        if pairwise is not None:
            blocks["pairwise"] += scale * pairwise

    def features_sqnorm(self, x: GraphInput, mu: GraphPotentials) -> float:
        """``||A_x^T mu||^2`` from the blocks alone."""
        unary, pairwise = self._blocks_of(x, mu)
        return float(np.sum(unary * unary)) + (float(np.sum(pairwise * pairwise)) if pairwise is not None else 0.0)



# ----- saving (structopt.saved_model)
def _describe_graph_model(model: GraphModel) -> dict:
    exact_type(model.structure, GraphStructure, "a GraphModel whose structure is")
    s = model.structure
    # the whole configuration: the oracle options change what training and SSVMProblem.predict compute
    return {"n_node_features": model.n_node_features, "n_edge_features": model.n_edge_features,
            "n_states": model.n_states, "symmetric": model.symmetric, "exact": s.exact,
            "time_limit": s.time_limit, "warm_start": s.warm_start}


register_codec("GraphModel", GraphModel, _describe_graph_model,
               ("n_node_features", "n_edge_features", "n_states", "symmetric", "exact", "time_limit", "warm_start"))
