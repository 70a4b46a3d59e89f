"""Task losses Delta(y_true, y_pred).

A *decomposable* loss is linear in the statistics of the prediction,
``Delta(y_true, y) = <c, stats(y)> + const``, so loss-augmented decoding is ``argmax(theta + c)``;
:meth:`Loss.linear_terms` returns ``(c, const)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures.base import Potentials, Structure


class Loss(ABC):
    """A task loss. ``decomposable`` says whether :meth:`linear_terms` is available."""

    decomposable: bool = False

    @abstractmethod
    def __call__(self, y_true: Any, y_pred: Any) -> float:
        """``Delta(y_true, y_pred) >= 0``, zero when they are equal."""

    def linear_terms(self, structure: Structure, y_true: Any, like: Potentials) -> tuple[Potentials, float]:
        """``(c, const)`` with ``Delta(y_true, y) = <c, stats(y)> + const`` for every output y."""
        raise NotSupportedError(f"{type(self).__name__} is not linear in the output statistics")


def _node_terms(structure: Structure, node_costs: np.ndarray, like: Potentials) -> Potentials:
    # the loss vector c of a per-node loss, in the structure's potentials layout
    if not hasattr(structure, "unary_potentials"):
        raise NotSupportedError(f"a per-node loss needs a structure with per-node labels, not {structure.name}")
    return structure.unary_potentials(node_costs, like)


class Hamming(Loss):
    """Number of positions where the labels differ (optionally divided by the length).

    Parameters
    ----------
    normalize : bool, default False
        Divide by the number of positions.
    """

    decomposable = True

    def __init__(self, normalize: bool = False):
        self.normalize = bool(normalize)

    def __repr__(self) -> str:
        return f"Hamming(normalize={self.normalize})"

    def __call__(self, y_true, y_pred) -> float:
        y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
        if y_true.shape != y_pred.shape:
            raise InvalidInputError(f"Hamming loss of outputs with shapes {y_true.shape} and {y_pred.shape}")
        value = float(np.count_nonzero(y_true != y_pred))
        return value / len(y_true) if self.normalize else value

    def linear_terms(self, structure: Structure, y_true, like: Potentials) -> tuple[Potentials, float]:
        y_true = np.atleast_1d(np.asarray(y_true, dtype=np.int64))
        c = np.ones((len(y_true), structure.n_labels))
        c[np.arange(len(y_true)), y_true] = 0.0
        if self.normalize:
            c /= len(y_true)
        return _node_terms(structure, c, like), 0.0


class WeightedHamming(Loss):
    """Sum over positions of ``cost[y_true_t, y_pred_t]`` (optionally divided by the length).

    Parameters
    ----------
    cost : (S, S) array
        ``cost[a, b]`` is the price of predicting b where the truth is a; zero diagonal, >= 0.
    normalize : bool, default False
        Divide by the number of positions.
    """

    decomposable = True

    def __init__(self, cost: np.ndarray, normalize: bool = False):
        cost = np.asarray(cost, dtype=float)
        if cost.ndim != 2 or cost.shape[0] != cost.shape[1]:
            raise InvalidInputError(f"cost matrix must be square, got shape {cost.shape}")
        if np.any(np.diag(cost) != 0) or np.any(cost < 0) or not np.all(np.isfinite(cost)):
            raise InvalidInputError("cost matrix must be finite, non-negative, with a zero diagonal")
        self.cost = cost
        self.normalize = bool(normalize)

    def __repr__(self) -> str:
        return f"WeightedHamming(cost=<{self.cost.shape[0]}x{self.cost.shape[0]}>, normalize={self.normalize})"

    def __call__(self, y_true, y_pred) -> float:
        y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
        if y_true.shape != y_pred.shape:
            raise InvalidInputError(f"Hamming loss of outputs with shapes {y_true.shape} and {y_pred.shape}")
        value = float(self.cost[y_true, y_pred].sum())
        return value / len(y_true) if self.normalize else value

    def linear_terms(self, structure: Structure, y_true, like: Potentials) -> tuple[Potentials, float]:
        y_true = np.atleast_1d(np.asarray(y_true, dtype=np.int64))
        if self.cost.shape[0] != structure.n_labels:
            raise InvalidInputError(f"cost matrix is {self.cost.shape[0]}x{self.cost.shape[0]} but the "
                                    f"structure has {structure.n_labels} labels")
        c = self.cost[y_true]
        if self.normalize:
            c = c / len(y_true)
        return _node_terms(structure, c, like), 0.0


class MatchingHamming(Loss):
    """Weighted Hamming loss over the edges of a bipartite matching.

    ``Delta(y_true, y) = fp_cost * #(predicted edges not in y_true) + fn_cost * #(gold edges not in y)``.
    Linear in the assignment matrix Y: ``c_jk = fp_cost (1 - G_jk) - fn_cost G_jk`` and
    ``const = fn_cost * #gold edges``, with G the gold assignment matrix (BCFW paper: fp 1, fn 3).

    Parameters
    ----------
    fp_cost : float, default 1
        Price of a predicted edge that is not gold (precision error).
    fn_cost : float, default 3
        Price of a gold edge that is not predicted (recall error).
    """

    decomposable = True

    def __init__(self, fp_cost: float = 1.0, fn_cost: float = 3.0):
        for label, value in (("fp_cost", fp_cost), ("fn_cost", fn_cost)):
            if not (np.isfinite(value) and value >= 0):
                raise InvalidInputError(f"MatchingHamming {label} must be a finite number >= 0, got {value!r}")
        self.fp_cost = float(fp_cost)
        self.fn_cost = float(fn_cost)

    def __repr__(self) -> str:
        return f"MatchingHamming(fp_cost={self.fp_cost:g}, fn_cost={self.fn_cost:g})"

    def __call__(self, y_true, y_pred) -> float:
        y_true = np.atleast_1d(np.asarray(y_true, dtype=np.int64))
        y_pred = np.atleast_1d(np.asarray(y_pred, dtype=np.int64))
        if y_true.shape != y_pred.shape:
            raise InvalidInputError(f"MatchingHamming of matchings with shapes {y_true.shape} and {y_pred.shape}")
        common = int(np.count_nonzero((y_true == y_pred) & (y_true >= 0)))
        false_pos = int(np.count_nonzero(y_pred >= 0)) - common
        false_neg = int(np.count_nonzero(y_true >= 0)) - common
        return self.fp_cost * false_pos + self.fn_cost * false_neg

    def linear_terms(self, structure: Structure, y_true, like: Potentials) -> tuple[Potentials, float]:
        if not hasattr(structure, "edge_potentials"):
            raise NotSupportedError(f"MatchingHamming needs a matching structure, not {structure.name}")
        gold = np.asarray(structure.stats(y_true, like).edge, dtype=float)
        c = self.fp_cost * (1.0 - gold) - self.fn_cost * gold
        return structure.edge_potentials(c, like), self.fn_cost * float(gold.sum())
