"""Boosted tree ensembles as plain arrays: exported from scikit-learn, predicted by numpy, no pickle.

A fitted :class:`~sklearn.ensemble.HistGradientBoostingClassifier` (binary) is a baseline score plus
the sum of its trees' leaf values. Each tree is stored as flat node arrays (feature index, threshold,
the side a missing value takes, left and right child, leaf value), all trees concatenated, with the
index of each tree's root. :class:`BoostedTrees` predicts the ensemble's raw score (what
``decision_function`` returns) by walking every row down every tree at once, one vectorised step per
tree level, and turns itself into arrays (:meth:`BoostedTrees.to_arrays`) and back
(:meth:`BoostedTrees.from_arrays`, which checks arrays read from a file as untrusted input).

The split rule is scikit-learn's for numerical features: a row goes left when its value is
``<= threshold``, and a missing value (NaN) goes to the side the tree learnt for it
(``missing_go_to_left``). Categorical splits are not exported (refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError

#: the arrays of :meth:`BoostedTrees.to_arrays`, with their dtypes
ARRAY_FIELDS = (("feature", np.int64), ("threshold", np.float64), ("missing_left", np.bool_),
                ("left", np.int64), ("right", np.int64), ("value", np.float64), ("roots", np.int64),
                ("baseline", np.float64), ("n_features", np.int64))

_CHUNK = 8192  # rows per block: the (rows, trees) node table stays a few MB


@dataclass(frozen=True, eq=False)
class BoostedTrees:
    """A sum of binary decision trees over numerical features, stored as flat arrays.

    Attributes
    ----------
    feature : ndarray of int64, shape (M,)
        The feature a node splits on; -1 for a leaf.
    threshold : ndarray of float64, shape (M,)
        A row goes left when its feature value is ``<= threshold``.
    missing_left : ndarray of bool, shape (M,)
        Where a missing value (NaN) goes.
    left, right : ndarray of int64, shape (M,)
        The children (global node indices, larger than the node's own); -1 for a leaf.
    value : ndarray of float64, shape (M,)
        A leaf's score (unused for internal nodes).
    roots : ndarray of int64, shape (T,)
        The root of each tree; tree ``t`` owns nodes ``roots[t] .. roots[t + 1] - 1``.
    baseline : float
        The score before any tree.
    n_features : int
        The number of columns a row must have.
    """

    feature: np.ndarray
    threshold: np.ndarray
    missing_left: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    baseline: float
    n_features: int
    depth: int  # the longest root-to-leaf path (number of splits): the number of steps of the walk

    @property
    def n_trees(self) -> int:
        """Number of trees."""
        return int(self.roots.size)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's raw score of every row of ``X`` (n, n_features): baseline plus each tree's leaf value.

        Equal (to rounding) to scikit-learn's ``decision_function`` of the classifier it was exported from.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise InvalidInputError(f"boosted trees take rows of {self.n_features} features, got an array of shape "
                                    f"{X.shape}")
        out = np.empty(X.shape[0])
        for start in range(0, X.shape[0], _CHUNK):
            block = X[start:start + _CHUNK]
            node = np.broadcast_to(self.roots, (block.shape[0], self.n_trees)).copy()
            rows = np.arange(block.shape[0])[:, None]
            for _ in range(self.depth):  # one level of every tree per step; leaves stay where they are
                feature = self.feature[node]
                inner = feature >= 0
                x = block[rows, np.maximum(feature, 0)]
                go_left = np.where(np.isnan(x), self.missing_left[node], x <= self.threshold[node])
                node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
            out[start:start + block.shape[0]] = self.baseline + self.value[node].sum(axis=1)
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The ensemble as plain arrays (keys :data:`ARRAY_FIELDS`), for a sealed archive."""
        return {"feature": self.feature, "threshold": self.threshold, "missing_left": self.missing_left,
                "left": self.left, "right": self.right, "value": self.value, "roots": self.roots,
                "baseline": np.array(self.baseline, dtype=np.float64),
                "n_features": np.array(self.n_features, dtype=np.int64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], source: str = "boosted trees") -> BoostedTrees:
        """Rebuild from :meth:`to_arrays`'s arrays, checking them as untrusted input.

        Raises
        ------
        InvalidInputError
            A missing or mistyped array, or nodes that do not form trees (``source`` names the file).
        """
        got = {}
        for key, dtype in ARRAY_FIELDS:
            value = arrays.get(key)
            if not isinstance(value, np.ndarray) or (value.dtype != dtype and not (
                    np.issubdtype(value.dtype, np.integer) and np.issubdtype(dtype, np.integer))):
                raise InvalidInputError(f"{source}: boosted trees need a {np.dtype(dtype).name} array {key!r}")
            got[key] = value.astype(dtype, copy=False)
        M = got["feature"].size
        for key in ("feature", "threshold", "missing_left", "left", "right", "value"):
            if got[key].shape != (M,):
                raise InvalidInputError(f"{source}: boosted-tree array {key!r} has shape {got[key].shape}, not ({M},)")
        if got["baseline"].shape != () or got["n_features"].shape != () or got["roots"].ndim != 1:
            raise InvalidInputError(f"{source}: boosted trees' baseline and n_features must be scalars, roots 1-d")
        return cls._checked(got["feature"], got["threshold"], got["missing_left"], got["left"], got["right"],
                            got["value"], got["roots"], float(got["baseline"]), int(got["n_features"]), source)

    @classmethod
    def _checked(cls, feature: np.ndarray, threshold: np.ndarray, missing_left: np.ndarray, left: np.ndarray,
                 right: np.ndarray, value: np.ndarray, roots: np.ndarray, baseline: float, n_features: int,
                 source: str) -> BoostedTrees:
        M = feature.size
        if n_features < 1:
            raise InvalidInputError(f"{source}: boosted trees need n_features >= 1, got {n_features}")
        if roots.size < 1 or roots[0] != 0 or np.any(np.diff(roots) < 1) or roots[-1] >= M:
            raise InvalidInputError(f"{source}: boosted-tree roots must start at 0 and increase strictly below "
                                    f"{M} nodes")
        if not (np.all(np.isfinite(value)) and np.isfinite(baseline)):
            raise InvalidInputError(f"{source}: boosted-tree leaf values and baseline must be finite")
        inner = feature >= 0
        if np.any(feature >= n_features) or np.any(feature < -1):
            raise InvalidInputError(f"{source}: a boosted-tree node splits on a feature outside [0, {n_features})")
        if np.any(np.isnan(threshold[inner])):
            raise InvalidInputError(f"{source}: a boosted-tree split has a NaN threshold")
        # each node's tree: children must lie after the node and inside the same tree, so every walk ends
        tree = np.searchsorted(roots, np.arange(M), side="right") - 1
        end = np.append(roots[1:], M)[tree]
        own = np.arange(M)
        for child in (left, right):
            c = child[inner]
            if np.any(c <= own[inner]) or np.any(c >= end[inner]):
                raise InvalidInputError(f"{source}: a boosted-tree node's child is not a later node of its tree")
            if np.any(child[~inner] != -1):
                raise InvalidInputError(f"{source}: a boosted-tree leaf has children")
        # depth: levels of a breadth-first sweep from the roots (finite: children come later)
        depth, frontier = 0, roots
        while True:
            frontier = frontier[feature[frontier] >= 0]
            if frontier.size == 0:
                break
            frontier = np.concatenate([left[frontier], right[frontier]])
            depth += 1
        return cls(feature, threshold, missing_left, left, right, value, roots, float(baseline), int(n_features),
                   depth)


def export_hist_gradient_boosting(clf: Any) -> BoostedTrees:
    """The trees of a fitted binary :class:`~sklearn.ensemble.HistGradientBoostingClassifier` as
    :class:`BoostedTrees` (its ``decision_function``, without scikit-learn).

    Raises
    ------
    InvalidInputError
        Not a fitted binary classifier of this kind, or one with categorical splits.
    """
    predictors = getattr(clf, "_predictors", None)
    baseline = np.asarray(getattr(clf, "_baseline_prediction", np.nan), dtype=np.float64)
    if predictors is None or getattr(clf, "n_trees_per_iteration_", None) != 1 or baseline.size != 1:
        raise InvalidInputError(f"only a fitted binary HistGradientBoostingClassifier can be exported, got "
                                f"{type(clf).__name__}")
    parts, roots, offset = [], [], 0
    for (tree,) in predictors:
        nodes = tree.nodes
        if np.any(nodes["is_categorical"][nodes["is_leaf"] == 0]):
            raise InvalidInputError("boosted trees with categorical splits cannot be exported")
        leaf = nodes["is_leaf"].astype(bool)
        parts.append((np.where(leaf, -1, nodes["feature_idx"]).astype(np.int64),
                      nodes["num_threshold"].astype(np.float64), nodes["missing_go_to_left"].astype(bool),
                      np.where(leaf, -1, nodes["left"].astype(np.int64) + offset),
                      np.where(leaf, -1, nodes["right"].astype(np.int64) + offset),
                      nodes["value"].astype(np.float64)))
        roots.append(offset)
        offset += len(nodes)
    if not parts:
        raise InvalidInputError("the classifier has no trees to export")
    columns = [np.concatenate(c) for c in zip(*parts)]
    return BoostedTrees._checked(*columns, np.array(roots, dtype=np.int64), float(baseline.ravel()[0]),
                                 int(clf.n_features_in_), "exported classifier")
