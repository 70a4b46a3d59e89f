"""Linear model on a forest of labels: multi-label classification with a label tree."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from structopt.codecs import build_structure, describe_structure, exact_type, register_codec
from structopt.errors import InvalidInputError, check_count, example_error
from structopt.models.base import Model
from structopt.structures.tree import TreePotentials, TreeStructure


class TreeModel(Model):
    """``theta_v(s) = <x, W_unary[:, v, s]>`` per node, ``theta_e(a, b) = W_pairwise[e, a, b]`` per edge.

    One input vector describes the whole example (e.g. a document whose labels are the nodes of a
    label tree), so every node has its own weights over the same features.

    Parameters
    ----------
    structure : TreeStructure
        The forest of labels.
    n_features : int
        F; an input is a dense (F,) vector or a (1, F) scipy.sparse CSR row.

    Examples
    --------
    >>> tree = TreeStructure([(0, 1), (0, 2)], n_states=2)       # 3 binary labels, 0 the parent
    >>> model = TreeModel(tree, n_features=10)                    # y: 0/1 vector of length 3
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[TreeModel, list[np.ndarray]]:
        """A 4-node tree of binary labels with 3 features (see :meth:`Model.example`)."""
        return cls(TreeStructure([(0, 1), (0, 2), (1, 3)], n_states=2), n_features=3), \
            [rng.normal(size=3) for _ in range(4)]

    def __init__(self, structure: TreeStructure, n_features: int):
        if not isinstance(structure, TreeStructure):
            raise InvalidInputError(f"TreeModel needs a TreeStructure, got {structure!r}")
        self.structure = structure
        self.n_features = check_count(n_features, "n_features", "TreeModel")

    def __repr__(self) -> str:
        return f"TreeModel({self.structure!r}, n_features={self.n_features})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        s = self.structure
        return [("unary", (self.n_features, s.n_nodes, s.n_states)), ("pairwise", (s.n_edges, s.n_states, s.n_states))]

    def validate_input(self, x, index: int | None = None) -> np.ndarray:
        if sp.issparse(x):
            if x.shape != (1, self.n_features):
                raise example_error(index, f"sparse tree input must have shape (1, {self.n_features}), got {x.shape}")
            x = x.toarray()
        x = np.ascontiguousarray(x, dtype=np.float64).ravel() if np.ndim(x) == 2 and np.shape(x)[0] == 1 \
            else np.ascontiguousarray(x, dtype=np.float64)
        if x.shape != (self.n_features,):
            raise example_error(index, f"tree input must have shape ({self.n_features},), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise example_error(index, "tree input contains NaN or infinite values")
        return x

    def potentials(self, x: np.ndarray, w: np.ndarray) -> TreePotentials:
        blocks = self.unpack(w)
        unary = np.tensordot(x, blocks["unary"], axes=(0, 0))
        return TreePotentials(unary, blocks["pairwise"].copy())

    def add_features(self, x: np.ndarray, mu: TreePotentials, out: np.ndarray, scale: float = 1.0) -> None:
        s = self.structure
        node, edge = np.asarray(mu.unary, dtype=float), np.asarray(mu.pairwise, dtype=float)
        if node.shape != (s.n_nodes, s.n_states) or edge.shape != (s.n_edges, s.n_states, s.n_states):
            raise InvalidInputError(f"statistics of shapes {node.shape}, {edge.shape} do not match {s!r}")
        blocks = self.unpack(out)
        blocks["unary"] += scale * np.multiply.outer(x, node)
        blocks["pairwise"] += scale * edge

    def features_sqnorm(self, x: np.ndarray, mu: TreePotentials) -> float:
        node, edge = np.asarray(mu.unary, dtype=float), np.asarray(mu.pairwise, dtype=float)
        return float(x @ x) * float(np.sum(node * node)) + float(np.sum(edge * edge))



# ----- saving (structopt.saved_model): the codecs of TreeModel and of its structure
def _describe_tree_model(model: TreeModel) -> dict:
    exact_type(model.structure, TreeStructure, "a TreeModel whose structure is")
    return {"structure": describe_structure(model.structure), "n_features": model.n_features}


register_codec("TreeModel", TreeModel, _describe_tree_model, ("structure", "n_features"),
               build=lambda args: TreeModel(build_structure(args["structure"]), args["n_features"]))
register_codec("TreeStructure", TreeStructure,
               lambda s: {"edges": s.edges, "n_states": s.n_states, "n_nodes": s.n_nodes},
               ("edges", "n_states", "n_nodes"), kind="structure")
