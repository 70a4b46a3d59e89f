"""Task losses Delta(y_true, y_pred).

A *decomposable* loss is linear in the statistics of the prediction,
``Delta(y_true, y) = <c, stats(y)> + const``, so loss-augmented decoding is ``argmax(theta + c)``;
:meth:`Loss.linear_terms` returns ``(c, const)``.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError, numeric_array
from structopt.hooks import has_hook, node_states
from structopt.structures.base import Potentials, Structure, add, check_flag, inner, scale


class Loss(ABC):
    """A task loss ``Delta(y_true, y_pred) >= 0``.

    A *decomposable* loss implements :meth:`linear_terms`; loss-augmented decoding then adds the
    terms to the potentials and calls the structure's own oracle. A loss that is not linear in the
    statistics (e.g. 1 - IoU of boxes) overrides the ``augmented_*`` hooks instead; the problem
    calls them, and solvers never look inside.
    """

    decomposable: bool = False

    @abstractmethod
    def __call__(self, y_true: Any, y_pred: Any) -> float:
        """``Delta(y_true, y_pred) >= 0``, zero when they are equal."""

    def linear_terms(self, structure: Structure, y_true: Any, like: Potentials) -> tuple[Potentials, float]:
        """``(c, const)`` with ``Delta(y_true, y) = <c, stats(y)> + const`` for every output y."""
        raise NotSupportedError(
            f"{type(self).__name__} is not decomposable (linear in the output statistics); a loss that is not "
            "must override Loss.augmented_argmax (and augmented_topk / augmented_marginals for smoothing)")

    # ----- loss-augmented oracles (defaults: add the linear terms, then call the structure)
    def augmented_argmax(self, structure: Structure, theta: Potentials, y_true: Any) -> Any:
        """``argmax_y Delta(y_true, y) + <theta, stats(y)>``."""
        c, _ = self.linear_terms(structure, y_true, theta)
        return structure.argmax(add(theta, c))

    def augmented_topk(self, structure: Structure, theta: Potentials, y_true: Any, k: int) -> tuple[Any, np.ndarray]:
        """The ``k`` outputs with the highest ``Delta(y_true, y) + <theta, stats(y)>``, sorted, and those values."""
        c, const = self.linear_terms(structure, y_true, theta)
        outputs, scores = structure.topk(add(theta, c), k)
        return outputs, np.asarray(scores, dtype=float) + const

    def augmented_marginals(self, structure: Structure, theta: Potentials, y_true: Any,
                            temperature: float) -> tuple[float, Potentials, float]:
        """Gibbs distribution ``p(y) ∝ exp((Delta(y_true, y) + <theta, stats(y)>) / temperature)``.

        Returns
        -------
        log_z : float
            ``log sum_y exp((Delta + score) / temperature)``.
        marginals : Potentials
            Expected statistics under p.
        expected_loss : float
            ``E_p[Delta(y_true, y)]``.
        """
        c, const = self.linear_terms(structure, y_true, theta)
        log_z, marginals = structure.marginals(scale(add(theta, c), 1.0 / temperature))
        return float(log_z) + const / temperature, marginals, inner(c, marginals) + const


def _node_terms(loss: Loss, structure: Structure, node_costs: np.ndarray, like: Potentials) -> tuple[Potentials, float]:
    # (c, const) of a per-node loss in the structure's potentials layout; the constant is nonzero for
    # encodings without a statistic per (node, value), e.g. a 0/1 vector (optional hook `node_constant`;
    # every hook is documented in structopt.hooks.HOOKS)
    if not (has_hook(structure, "states_per_node") and has_hook(structure, "node_potentials")):
        raise NotSupportedError(
            f"{type(loss).__name__} is a per-node loss: it needs a structure with per-node labels, i.e. one "
            f"that defines `states_per_node` and `node_potentials(costs, like)`; {structure.name} does not")
    const = float(structure.node_constant(node_costs)) if has_hook(structure, "node_constant") else 0.0
    return structure.node_potentials(node_costs, like), const


def _node_labels(structure: Structure, y_true: Any, like: Potentials) -> np.ndarray:
    labels = np.asarray(y_true, dtype=np.int64)
    S = node_states(structure, like)
    if labels.size and (labels.min() < 0 or labels.max() >= S):
        raise InvalidInputError(f"node labels must lie in [0, {S}), got min {labels.min()}, max {labels.max()}")
    return labels


class Hamming(Loss):
    """Number of nodes whose labels differ (optionally divided by the number of nodes).

    Works with every structure that has per-node labels (chains, multiclass, grids, ...): the
    output is an int array of node labels (any shape) or a single int.

    Parameters
    ----------
    normalize : bool, default False
        Divide by the number of nodes.
    """

    decomposable = True

    def __init__(self, normalize: bool = False):
        self.normalize = check_flag(normalize, "normalize", "Hamming")

    def __repr__(self) -> str:
        return f"Hamming(normalize={self.normalize})"

    def __call__(self, y_true, y_pred) -> float:
        y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
        if y_true.shape != y_pred.shape:
            raise InvalidInputError(f"Hamming loss of outputs with shapes {y_true.shape} and {y_pred.shape}")
        value = float(np.count_nonzero(y_true != y_pred))
        return value / y_true.size if self.normalize else value

    def linear_terms(self, structure: Structure, y_true, like: Potentials) -> tuple[Potentials, float]:
        if not has_hook(structure, "states_per_node"):
            return _node_terms(self, structure, np.zeros(0), like)  # raises the contract error
        labels = _node_labels(structure, y_true, like)
        c = np.ones((*labels.shape, node_states(structure, like)))
        np.put_along_axis(c, labels[..., None], 0.0, axis=-1)
        if self.normalize:
            c /= max(labels.size, 1)
        return _node_terms(self, structure, c, like)


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
        cost = numeric_array(cost, "WeightedHamming cost matrix")
        if cost.ndim != 2 or cost.shape[0] != cost.shape[1]:
            raise InvalidInputError(f"cost matrix must be square, got shape {cost.shape}")
        if np.any(np.diag(cost) != 0) or np.any(cost < 0) or not np.all(np.isfinite(cost)):
            raise InvalidInputError("cost matrix must be finite, non-negative, with a zero diagonal")
        self.cost = cost
        self.normalize = check_flag(normalize, "normalize", "WeightedHamming")

    def __repr__(self) -> str:
        return f"WeightedHamming(cost=<{self.cost.shape[0]}x{self.cost.shape[0]}>, normalize={self.normalize})"

    def __call__(self, y_true, y_pred) -> float:
        y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
        if y_true.shape != y_pred.shape:
            raise InvalidInputError(f"Hamming loss of outputs with shapes {y_true.shape} and {y_pred.shape}")
        value = float(self.cost[y_true, y_pred].sum())
        return value / y_true.size if self.normalize else value

    def linear_terms(self, structure: Structure, y_true, like: Potentials) -> tuple[Potentials, float]:
        if not has_hook(structure, "states_per_node"):
            return _node_terms(self, structure, np.zeros(0), like)  # raises the contract error
        if self.cost.shape[0] != node_states(structure, like):
            raise InvalidInputError(f"cost matrix is {self.cost.shape[0]}x{self.cost.shape[0]} but the "
                                    f"structure's nodes take {node_states(structure, like)} values")
        labels = _node_labels(structure, y_true, like)
        c = self.cost[labels]
        if self.normalize:
            c = c / max(labels.size, 1)
        return _node_terms(self, structure, c, like)


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
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not (
                    np.isfinite(value) and value >= 0):
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
        if not has_hook(structure, "edge_potentials"):
            raise NotSupportedError(f"MatchingHamming needs a matching structure, not {structure.name}")
        gold = np.asarray(structure.stats(y_true, like).edge, dtype=float)
        c = self.fp_cost * (1.0 - gold) - self.fn_cost * gold
        return structure.edge_potentials(c, like), self.fn_cost * float(gold.sum())


class BoxLoss(Loss):
    """``1 - IoU(y_true, y_pred)`` of two boxes ``(top, left, bottom, right)``, areas in cells.

    Not linear in the box indicator, so loss-augmented decoding goes through the structure's own
    oracles: exact branch-and-bound and top-K that bound the IoU term over box sets, and exact
    Gibbs sums over all boxes for entropy smoothing (see :class:`structopt.structures.box.BoundingBox`).
    """

    decomposable = False

    def __repr__(self) -> str:
        return "BoxLoss()"

    def __call__(self, y_true, y_pred) -> float:
        from structopt.structures.box import iou

        return 1.0 - iou(_box(y_true, "y_true"), _box(y_pred, "y_pred"))

    @staticmethod
    def _structure(structure: Structure):
        if not has_hook(structure, "topk_iou"):
            raise NotSupportedError(f"BoxLoss needs a BoundingBox structure (IoU-bounding oracles), "
                                    f"not {structure.name}")
        return structure

    def augmented_argmax(self, structure: Structure, theta: Potentials, y_true: Any) -> Any:
        outputs, _ = self._structure(structure).topk_iou(theta, y_true, 1)
        return outputs[0]

    def augmented_topk(self, structure: Structure, theta: Potentials, y_true: Any, k: int) -> tuple[Any, np.ndarray]:
        return self._structure(structure).topk_iou(theta, y_true, k)

    def augmented_marginals(self, structure: Structure, theta: Potentials, y_true: Any,
                            temperature: float) -> tuple[float, Potentials, float]:
        return self._structure(structure).marginals_iou(theta, y_true, temperature)


def _box(y: Any, name: str) -> tuple[int, int, int, int]:
    arr = np.asarray(y)
    if arr.shape != (4,):
        raise InvalidInputError(f"BoxLoss: {name} must be a box (top, left, bottom, right), got {y!r}")
    t, l, b, r = (int(v) for v in arr)
    if not (t < b and l < r):
        raise InvalidInputError(f"BoxLoss: {name} {(t, l, b, r)} is an empty box")
    return t, l, b, r
