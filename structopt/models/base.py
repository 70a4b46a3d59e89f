"""The Model interface: a linear joint feature map paired with one structure.

A model maps weights to the potentials of one example, ``theta = A_x w``, and statistics back to
weight space through the adjoint, ``features(x, mu) = A_x^T mu``; the joint feature of an output
is ``Phi(x, y) = features(x, stats(y))``.

Prediction is defined once, here: :meth:`Model.predict` (one input) and :meth:`Model.predict_batch`
(a list of inputs) return the structure's best *output* for the potentials ``A_x w``, integral
always. ``SSVMProblem.predict``, ``StructuredSVM.predict``, ``SavedModel.predict`` and the executors'
prediction pass all call :meth:`Model.predict_batch`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, example_error, numeric_array
from structopt.hooks import has_hook
from structopt.structures.base import Potentials, Structure, check_flag


def model_structure(owner: str, kind: type[Structure], structure: Structure | None, default: Any,
                    **expected: Any) -> Structure:
    """The structure a model runs on: ``default()`` when ``structure`` is None, else ``structure``
    checked to be a ``kind`` instance (a subclass or a configured instance is fine) whose attributes
    ``expected`` agree with the model's own arguments (those given explicitly); a wrong type or
    size is an :class:`InvalidInputError` naming ``owner``'s argument."""
    if structure is None:
        return default()
    if not isinstance(structure, kind):
        raise InvalidInputError(f"{owner} needs structure= to be a {kind.__name__} instance (or a subclass's), got "
                                f"{structure!r}")
    for name, value in expected.items():
        if getattr(structure, name, None) != value:
            raise InvalidInputError(f"{owner}: structure.{name} is {getattr(structure, name, None)!r} but the model "
                                    f"was given {name}={value!r}")
    return structure


class Model(ABC):
    """A linear model ``theta = A_x w`` over a structure.

    Subclasses define :attr:`blocks` (the named weight blocks and their shapes), :meth:`potentials`,
    :meth:`add_features` and :meth:`validate_input`.
    """

    structure: Structure

    #: Names of weight blocks constrained to be >= 0 (e.g. the pairwise block of a grid model, which
    #: keeps its potentials supermodular). The problem exposes the constraint
    #: (``SSVMProblem.project_weights``); every solver keeps its iterates feasible or refuses the model.
    nonnegative_blocks: tuple[str, ...] = ()

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[Model, list[Any]]:
        """A random small model of this class and a few inputs for it, ``(model, X)``: the instances the generic
        checks run on (``tests/test_predict_api.py``: prediction against enumeration, the saved-model round trip),
        so a new model needs no entry in a test's table. Each built-in model defines it."""
        raise NotImplementedError(f"{cls.__name__} defines no example(rng) (a random small model and inputs)")

    @property
    @abstractmethod
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        """Named weight blocks in the order they are laid out in the flat weight vector."""

    @property
    def n_params(self) -> int:
        """Length of the flat weight vector."""
        return sum(math.prod(shape) for _, shape in self.blocks)

    def unpack(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """Views of ``w`` as a dict of named blocks (e.g. ``{"unary": (F, S), "pairwise": (S, S)}``)."""
        w = np.asarray(w)
        if w.dtype.kind not in "biuf":
            raise InvalidInputError(f"weight vector must be numeric, got dtype {w.dtype}")
        blocks = self.blocks
        n_params = sum(math.prod(shape) for _, shape in blocks)
        if w.shape != (n_params,):
            raise InvalidInputError(f"weight vector must have shape ({n_params},), got {w.shape}")
        out, start = {}, 0
        for name, shape in blocks:
            size = math.prod(shape)
            out[name] = w[start:start + size].reshape(shape)
            start += size
        return out

    def zeros(self) -> np.ndarray:
        """A zero weight vector."""
        return np.zeros(self.n_params)

    @abstractmethod
    def validate_input(self, x: Any, index: int | None = None) -> Any:
        """Return ``x`` in canonical form (float64, contiguous or CSR) or raise InvalidInputError."""

    @abstractmethod
    def potentials(self, x: Any, w: np.ndarray) -> Potentials:
        """``A_x w``: the structure's potentials for input ``x``."""

    @abstractmethod
    def add_features(self, x: Any, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        """In place ``out += scale * A_x^T mu`` (touches only the weights ``x`` uses)."""

    def reduce_stats(self, mu: Potentials) -> Potentials:
        """Compact statistics that the model's weights see (same ``features``, same inner product
        with this model's potentials); e.g. a chain with shared transitions sums the per-position
        edge statistics into one (S, S) block. Default: ``mu`` unchanged."""
        return mu

    def features_sqnorm(self, x: Any, mu: Potentials) -> float:
        """``||A_x^T mu||^2`` (models override it to avoid a dense weight-sized vector)."""
        g = self.features(x, mu)
        return float(g @ g)

    def features(self, x: Any, mu: Potentials) -> np.ndarray:
        """``A_x^T mu`` as a dense weight vector; ``features(x, stats(y))`` is ``Phi(x, y)``."""
        out = np.zeros(self.n_params)
        self.add_features(x, mu, out)
        return out

    def joint_feature(self, x: Any, y: Any) -> np.ndarray:
        """``Phi(x, y)``."""
        theta_like = self.potentials(x, self.zeros())
        return self.features(x, self.structure.stats(y, theta_like))

    # ------------------------------------------------------------------ prediction (one code path)
    def check_weights(self, w: Any) -> np.ndarray:
        """``w`` as a finite float64 vector of length :attr:`n_params`, or an :class:`InvalidInputError`."""
        w = numeric_array(w, "weights w")
        if w.shape != (self.n_params,):
            raise InvalidInputError(f"weights w must have shape ({self.n_params},), got {w.shape}")
        return w

    def predict(self, x: Any, w: np.ndarray, exact: bool | None = None) -> Any:
        """The best output of one input: ``argmax_y <A_x w, stats(y)>``, always an output, never a
        relaxed point.

        It is :meth:`predict_output` of the potentials ``A_x w``: the structure's ``argmax`` (exact
        for chains, trees, grids, boxes, matchings, ``LPStructure``, dynamic programs, ...), or, for a
        structure whose ``argmax`` is a relaxation (a factor graph's AD3 oracle,
        :class:`~structopt.models.GraphModel`'s), its ``map_labels`` hook.
        The output is the structure's own type (a chain's labels, a bounding box's 4-tuple of
        cell indices, a dynamic program's output as its ``decode`` makes it, ...).

        Parameters
        ----------
        x : Any
            One input, as :meth:`validate_input` takes it.
        w : ndarray
            The weights (:attr:`n_params` finite numbers).
        exact : bool, optional
            For structures with a relaxed ``argmax`` only (their ``map_labels`` hook): True the exact MAP,
            False their fast labeling (a factor graph's: AD3's best rounded labeling, optimal when AD3
            certifies it), None (default) the hook's own default (a factor graph's: AD3 with its certificate,
            then branch-and-bound while a gap remains, within a budget). The other structures' ``argmax`` is
            exact and ignores it.

        Raises
        ------
        InvalidInputError
            Bad weights or input (before any oracle runs), or potentials that forbid every output.
        """
        return self._predict([x], w, exact, single=True)[0]

    def predict_batch(self, X: Sequence[Any], w: np.ndarray, exact: bool | None = None) -> list[Any]:
        """:meth:`predict` of every input of ``X``, in order (every input is checked first, an error naming
        the example).

        Parameters
        ----------
        X : sequence
            Inputs (a list, a tuple, or an array indexed by example).
        w : ndarray
            The weights.
        exact : bool, optional
            As in :meth:`predict`.
        """
        if isinstance(X, (str, bytes)) or not hasattr(X, "__len__") or not hasattr(X, "__getitem__"):
            raise InvalidInputError(f"X must be a sequence of inputs, got {type(X).__name__}")
        return self._predict(X, w, exact, single=False)

    def _predict(self, X: Sequence[Any], w: np.ndarray, exact: bool | None, single: bool) -> list[Any]:
        exact = None if exact is None else check_flag(exact, "exact", f"{type(self).__name__}.predict")
        w = self.check_weights(w)
        inputs = [self.validate_input(X[i], None if single else i) for i in range(len(X))]
        return [self.predict_output(self.potentials(x, w), exact) for x in inputs]

    def predict_output(self, theta: Potentials, exact: bool | None = None) -> Any:
        """The output :meth:`predict` returns for potentials ``theta``: ``structure.map_labels(theta,
        exact=exact)`` when the structure has that hook (its ``argmax`` is a relaxation; ``exact=None``: the
        hook's own default), else ``structure.argmax(theta)``, refused if it is a relaxed point (statistics
        rather than an output)."""
        structure = self.structure
        if has_hook(structure, "map_labels"):
            return structure.map_labels(theta) if exact is None else structure.map_labels(theta, exact=exact)
        y = structure.argmax(theta)
        if isinstance(y, type(theta)) and hasattr(y, "_fields"):
            raise NotSupportedError(f"{structure!r}.argmax returned a relaxed point ({type(y).__name__}), not an "
                                    "output; give the structure a map_labels(theta, exact) hook for prediction")
        return y


def feature_matrix(x: Any, n_features: int, index: int | None, what: str, rows: str) -> Any:
    """``x`` as a float64 (rows, ``n_features``) array or CSR matrix with at least one row, finite,
    or an :class:`InvalidInputError` naming example ``index`` (``what`` names the input, ``rows``
    its row count in the message)."""
    if sp.issparse(x):
        if x.dtype.kind not in "biuf":
            raise example_error(index, f"{what} must be numeric, got dtype {x.dtype}")
        x = sp.csr_matrix(x, dtype=np.float64)
        values = x.data
    else:
        x = values = numeric_array(x, what, index, finite=False)
    if x.ndim != 2 or x.shape[1] != n_features or x.shape[0] < 1:
        raise example_error(index, f"{what} must have shape ({rows}>=1, {n_features}), got {x.shape}")
    if not np.all(np.isfinite(values)):
        raise example_error(index, f"{what} contains NaN or infinite values")
    return x


def cell_features(x: Any, n_features: int, index: int | None, what: str = "box input") -> np.ndarray:
    """``x`` as a finite float64 (H, W, ``n_features``) cell-feature array with H, W >= 1, or an
    :class:`InvalidInputError` naming example ``index``."""
    x = numeric_array(x, what, index, finite=False)
    if x.ndim != 3 or x.shape[2] != n_features or x.shape[0] < 1 or x.shape[1] < 1:
        raise example_error(index, f"{what} must be a cell-feature array of shape (H, W, {n_features}) "
                                   f"with H, W >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise example_error(index, f"{what} contains NaN or infinite values")
    return x
