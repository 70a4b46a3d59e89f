"""Multiclass outputs: the trivial structure (one variable, no interactions)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, check_count, example_error, numeric_array
from structopt.smoothing import logsumexp, project_simplex
from structopt.structures.base import Polytope, Structure, check_eta, random_like, refuse_nonfinite
from structopt.structures.registry import register_structure


class MultiClassPotentials(NamedTuple):
    """Scores (or the one-hot statistics) of the S classes, shape (S,)."""

    scores: np.ndarray


@register_structure("multiclass")
class MultiClass(Structure):
    """One label in ``{0..S-1}``; outputs are Python ints. Its polytope is the simplex."""

    name = "MultiClass"
    Potentials = MultiClassPotentials

    example_variants = ({"n_classes": 1}, {"n_classes": 2}, {"n_classes": 5})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True,
                n_classes: int = 4) -> tuple[MultiClass, MultiClassPotentials]:
        """A random instance over ``n_classes`` classes."""
        S = int(n_classes)
        return cls(S), random_like(MultiClassPotentials(np.zeros(S)), rng, integer=integer)

    def __init__(self, n_classes: int):
        self.n_classes = check_count(n_classes, "n_classes", "MultiClass")

    def __repr__(self) -> str:
        return f"MultiClass(n_classes={self.n_classes})"

    @property
    def states_per_node(self) -> int:
        """Number of classes (the per-node loss hook; the output is a single node)."""
        return self.n_classes

    def node_potentials(self, costs: np.ndarray, like=None) -> MultiClassPotentials:
        """Potentials from an (S,) array of class scores."""
        return MultiClassPotentials(np.asarray(costs, dtype=float).reshape(self.n_classes))

    def _scores(self, theta: MultiClassPotentials) -> np.ndarray:
        if not isinstance(theta, tuple) or len(theta) != 1:
            raise InvalidInputError(f"MultiClass potentials must be MultiClassPotentials(scores), got "
                                    f"{type(theta).__name__}")
        scores = numeric_array(theta[0], "MultiClass potentials", finite=False)
        if scores.shape != (self.n_classes,):
            raise InvalidInputError(f"MultiClass potentials must have shape ({self.n_classes},), got {scores.shape}")
        refuse_nonfinite((("scores", scores),), "MultiClass")
        return scores

    def expand(self, theta: MultiClassPotentials) -> MultiClassPotentials:
        return MultiClassPotentials(self._scores(theta))

    def validate_output(self, y, like=None, index: int | None = None) -> int:
        whole = isinstance(y, (int, np.integer)) or (isinstance(y, (float, np.floating)) and float(y).is_integer())
        if isinstance(y, (bool, np.bool_)) or not whole or not 0 <= int(y) < self.n_classes:
            raise example_error(index, f"multiclass label must be an integer in [0, {self.n_classes}), got {y!r}")
        return int(y)

    def stats(self, y, like=None) -> MultiClassPotentials:
        onehot = np.zeros(self.n_classes)
        onehot[int(y)] = 1.0
        return MultiClassPotentials(onehot)

    def score(self, theta: MultiClassPotentials, y) -> float:
        return float(self._scores(theta)[self.validate_output(y)])

    def outputs(self, theta=None) -> Iterator[int]:
        return iter(range(self.n_classes))

    def polytope(self, theta=None) -> Polytope:
        A = sp.csr_matrix(np.ones((1, self.n_classes)))
        return Polytope(A, np.ones(1), None, None, MultiClassPotentials(np.zeros(self.n_classes)))

    def argmax(self, theta: MultiClassPotentials) -> int:
        return int(np.argmax(self._scores(theta)))

    def topk(self, theta: MultiClassPotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = check_count(k, "k", "MultiClass.topk")
        scores = self._scores(theta)
        order = np.argsort(-scores, kind="stable")[:k]
        return order.astype(np.int64), scores[order]

    def marginals(self, theta: MultiClassPotentials) -> tuple[float, MultiClassPotentials]:
        scores = self._scores(theta)
        log_z = logsumexp(scores)
        return log_z, MultiClassPotentials(np.exp(scores - log_z))

    def max_marginals(self, theta: MultiClassPotentials) -> np.ndarray:
        return self._scores(theta).copy()

    def project(self, v: MultiClassPotentials) -> MultiClassPotentials:
        return MultiClassPotentials(project_simplex(self._scores(v)))

    def prox_entropy(self, mu: MultiClassPotentials, step: MultiClassPotentials, eta: float) -> MultiClassPotentials:
        eta = check_eta(eta, "MultiClass.prox_entropy")
        if not isinstance(mu, tuple) or len(mu) != 1:
            raise InvalidInputError(f"prox_entropy needs marginals mu as MultiClassPotentials, got {type(mu).__name__}")
        p = numeric_array(mu[0], "prox_entropy marginals mu")
        if p.shape != (self.n_classes,):
            raise InvalidInputError(f"prox_entropy needs marginals mu of shape ({self.n_classes},), got {p.shape}")
        if np.any(p <= 0):
            raise InvalidInputError("prox_entropy needs strictly positive marginals mu")
        return self.marginals(MultiClassPotentials(np.log(p) + eta * self._scores(step)))[1]
