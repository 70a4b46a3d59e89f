"""scikit-learn style estimator around a model, a loss and a solver.

scikit-learn is optional: with it installed, :class:`StructuredSVM` is a
``sklearn.base.BaseEstimator`` (``clone``, ``GridSearchCV``, ``cross_val_score``, tags); without
it, a small base class provides the same ``get_params`` / ``set_params`` protocol so that ``fit``
works on a bare installation. Supported scikit-learn versions: 1.6 and newer (the
``__sklearn_tags__`` protocol that ``cross_val_score`` and ``GridSearchCV`` rely on since 1.6);
tested with 1.9.
"""

from __future__ import annotations

import inspect
import numbers
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.losses import Hamming, Loss
from structopt.models.base import Model
from structopt.problem import SSVMProblem
from structopt.solvers import SOLVERS, get_solver
from structopt.solvers.base import check_values

try:
    from sklearn.base import BaseEstimator as _Base
    from sklearn.exceptions import NotFittedError as _SklearnNotFitted
except ImportError:  # scikit-learn is a test extra, not a dependency
    _Base = None
    _SklearnNotFitted = AttributeError


class NotFittedError(InvalidInputError, _SklearnNotFitted):
    """``predict`` or ``score`` before ``fit`` (also scikit-learn's ``NotFittedError`` when it is installed)."""


class _ParamsBase:
    """The parameter protocol of scikit-learn estimators, for installations without scikit-learn."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        parameters = inspect.signature(cls.__init__).parameters.values()
        return sorted(p.name for p in parameters if p.name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as stored by ``__init__``."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> _ParamsBase:
        """Set hyper-parameters by name."""
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.get_params().items())
        return f"{type(self).__name__}({shown})"


_EstimatorBase = _Base if _Base is not None else _ParamsBase

#: estimator parameters that are also solver options (everything else goes through solver_options)
_EXPLICIT_OPTIONS = ("max_passes", "tol", "time_limit", "random_state")


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive(name: str, value: Any) -> float:
    if not (_is_real(value) and np.isfinite(value) and value > 0):
        raise InvalidInputError(f"StructuredSVM: {name} must be a finite number > 0, got {value!r}")
    return float(value)


class StructuredSVM(_EstimatorBase):
    """Structural SVM trained by any structopt solver, with scikit-learn conventions.

    Hyper-parameters are stored unchanged by ``__init__`` and validated by :meth:`fit`.

    Parameters
    ----------
    model : Model
        The joint feature map (it carries its structure).
    solver : str, default "bcfw"
        A name from :data:`structopt.solvers.SOLVERS`.
    lam : float, default 0.01
        Regularisation strength (> 0).
    loss : Loss, optional
        Task loss; default :class:`~structopt.losses.Hamming`.
    max_passes : float, default 50
        Effective passes over the data.
    tol : float, default 0
        Stop once the duality gap is at most ``tol`` (passed only when > 0, since solvers without
        a dual cannot use it).
    time_limit : float, optional
        Seconds of optimisation before stopping.
    random_state : int or numpy Generator, optional
        Seed of the solver's sampling.
    solver_options : dict, optional
        Any other keyword option of the solver (e.g. ``{"line_search": False}``); names are
        checked against the solver's signature.

    Attributes
    ----------
    coef_ : ndarray
        Learned weights (``model.unpack(coef_)`` names the blocks).
    trace_ : list of dict
        The solver's trace.
    """

    def __init__(self, model: Model, solver: str = "bcfw", lam: float = 0.01, loss: Loss | None = None,
                 max_passes: float = 50, tol: float = 0.0, time_limit: float | None = None,
                 random_state: int | np.random.Generator | None = None, solver_options: dict[str, Any] | None = None):
        self.model = model
        self.solver = solver
        self.lam = lam
        self.loss = loss
        self.max_passes = max_passes
        self.tol = tol
        self.time_limit = time_limit
        self.random_state = random_state
        self.solver_options = solver_options

    # ----- scikit-learn protocol
    def set_params(self, **params: Any) -> StructuredSVM:
        """Set hyper-parameters; an unknown name raises :class:`InvalidInputError` (a ValueError)."""
        valid = self._get_param_names()
        for name in params:
            if name.split("__")[0] not in valid:
                raise InvalidInputError(f"StructuredSVM has no parameter {name!r}; valid parameters: "
                                        f"{', '.join(valid)} (other solver options go in solver_options)")
        return super().set_params(**params)

    if _Base is not None and hasattr(_Base, "__sklearn_tags__"):  # scikit-learn >= 1.6

        def __sklearn_tags__(self):
            """Structured outputs: neither classifier nor regressor, inputs are lists of per-example arrays."""
            tags = super().__sklearn_tags__()
            tags.estimator_type = None  # plain K-fold splits, ``score`` as the default metric
            tags.target_tags.required = True
            tags.target_tags.one_d_labels = False
            tags.target_tags.two_d_labels = False
            tags.input_tags.two_d_array = False  # X is a list of examples of any shape, not an (n, F) array
            tags.non_deterministic = False
            return tags

    # ----- validation
    def _solver_options(self) -> dict[str, Any]:
        """The solver's keyword options from the hyper-parameters, each checked by the solver's own declaration
        (:attr:`~structopt.solvers.base.Option.check`), so a bad value is refused at ``fit`` before any work."""
        if not isinstance(self.solver, str) or self.solver not in SOLVERS:
            raise InvalidInputError(f"unknown solver {self.solver!r}; choose from {sorted(SOLVERS)}")
        declared = get_solver(self.solver).options
        extra = {} if self.solver_options is None else self.solver_options
        if not isinstance(extra, dict) or not all(isinstance(key, str) for key in extra):
            raise InvalidInputError(f"StructuredSVM: solver_options must be a dict of option names, got {extra!r}")
        clash = sorted(set(extra) & {*_EXPLICIT_OPTIONS, "problem"})
        if clash:
            raise InvalidInputError(f"StructuredSVM: set {', '.join(clash)} as estimator parameter(s), "
                                    "not in solver_options")
        unknown = sorted(name for name in extra if name not in declared)
        if unknown:
            raise InvalidInputError(f"solver {self.solver!r} has no option {', '.join(map(repr, unknown))}; "
                                    f"its options are: {', '.join(declared)}")
        if self.random_state is not None:  # the declared check, in the estimator's own (tested) wording
            seed = self.random_state
            integral = isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
            if not ((integral and seed >= 0) or isinstance(seed, np.random.Generator)):
                raise InvalidInputError(f"StructuredSVM: random_state must be None, an integer >= 0 or a "
                                        f"numpy Generator, got {seed!r}")
        options = {"max_passes": self.max_passes, "tol": self.tol, "time_limit": self.time_limit,
                   "random_state": self.random_state, **extra}
        check_values("StructuredSVM", {name: declared[name] for name in options}, options)
        if options["tol"] == 0:  # passed only when > 0: solvers without a duality gap refuse a positive one
            del options["tol"]
        return options

    def _problem(self, X: Sequence[Any], Y: Sequence[Any]) -> SSVMProblem:
        if not isinstance(self.model, Model):
            raise InvalidInputError(f"StructuredSVM: model must be a structopt Model (e.g. ChainModel), "
                                    f"got {self.model!r}")
        loss = Hamming() if self.loss is None else self.loss
        if not isinstance(loss, Loss):
            raise InvalidInputError(f"StructuredSVM: loss must be a structopt Loss (e.g. Hamming()), got {loss!r}")
        lam = _positive("lam", self.lam)
        return SSVMProblem(self.model, _as_list(X, "X"), _as_list(Y, "Y"), loss, lam)

    # ----- learning
    def fit(self, X: Sequence[Any], Y: Sequence[Any]) -> StructuredSVM:
        """Train on inputs ``X`` and gold outputs ``Y`` (one per example).

        Raises
        ------
        InvalidInputError
            A hyper-parameter, an option name or an example is invalid; the message names it.
        """
        if Y is None:  # scikit-learn's wording, which its estimator checks look for
            raise InvalidInputError("StructuredSVM requires y to be passed, but the target y is None")
        options = self._solver_options()
        problem = self._problem(X, Y)
        result = get_solver(self.solver)(problem, **options)
        self.coef_ = result.w
        self.trace_ = result.trace
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError("this StructuredSVM is not fitted yet; call fit first")

    def decision_potentials(self, x: Any) -> Any:
        """Potentials ``A_x coef_`` of one input."""
        self._check_fitted()
        return self.model.potentials(self.model.validate_input(x), self.coef_)

    def predict(self, X: Sequence[Any]) -> list[Any]:
        """The best output of each input: ``model.predict_batch(X, coef_)``
        (:meth:`~structopt.models.Model.predict_batch`; outputs, never relaxed points)."""
        self._check_fitted()
        return self.model.predict_batch(_as_list(X, "X"), self.coef_)

    def score(self, X: Sequence[Any], Y: Sequence[Any]) -> float:
        """Higher is better. For structures with per-node labels (chains, grids, trees, multiclass,
        0/1 vectors): the fraction of positions predicted exactly, pooled over examples. For the
        others (matchings, boxes): minus the mean task loss of the predictions."""
        X, Y = _as_list(X, "X"), _as_list(Y, "Y")
        if len(X) != len(Y):
            raise InvalidInputError(f"score got {len(X)} inputs X but {len(Y)} outputs Y")
        if not hasattr(self.model.structure, "states_per_node"):
            loss = self.loss if self.loss is not None else Hamming()
            return -float(np.mean([loss(y_true, y_pred) for y_true, y_pred in zip(Y, self.predict(X), strict=True)]))
        right = total = 0
        for i, (y_true, y_pred) in enumerate(zip(Y, self.predict(X), strict=True)):
            y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
            if y_true.shape != y_pred.shape:
                raise InvalidInputError(f"example {i}: output Y has shape {y_true.shape} but the prediction "
                                        f"has shape {y_pred.shape}")
            right += int(np.count_nonzero(y_true == y_pred))
            total += y_true.size
        if total == 0:
            raise InvalidInputError("score needs at least one output position")
        return right / total

    # ----- saving
    def save(self, path: str | os.PathLike) -> int:
        """Write the fitted estimator as a saved model (:func:`structopt.saved_model.save_model`).

        The file holds the model's description, ``coef_``, the loss, the hyper-parameters and
        ``trace_``: no pickle, so loading it can run no code. Returns the file's size in bytes.
        A ``random_state`` that is a numpy Generator is stored as None (its state is not a
        hyper-parameter worth keeping); ``solver_options`` must hold plain values.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        InvalidInputError
            A model, loss or option that a saved model cannot describe.
        """
        from structopt.saved_model import save_model

        self._check_fitted()
        seed = self.random_state if isinstance(self.random_state, numbers.Integral) else None
        params = {"solver": self.solver, "lam": self.lam, "max_passes": self.max_passes, "tol": self.tol,
                  "time_limit": self.time_limit, "random_state": None if seed is None else int(seed),
                  "solver_options": self.solver_options}
        return save_model(path, self.model, self.coef_, loss=self.loss,
                          info={"estimator": params, "trace": getattr(self, "trace_", [])})

    @classmethod
    def load(cls, path: str | os.PathLike) -> StructuredSVM:
        """A fitted estimator from a saved model (written by :meth:`save`, ``structopt train`` or
        :func:`~structopt.saved_model.save_model`); files without hyper-parameters get the defaults.

        Raises
        ------
        DataNotFoundError, InvalidInputError
            As :func:`structopt.saved_model.load_model`: a missing, tampered, truncated or foreign file.
        """
        from structopt.saved_model import load_model

        saved = load_model(path)
        params = saved.info.get("estimator", {})
        if not isinstance(params, dict) or not set(params) <= set(cls._get_param_names()) - {"model", "loss"}:
            raise InvalidInputError(f"model {path}: its estimator parameters are malformed")
        estimator = cls(saved.model, loss=saved.loss, **params)
        estimator.coef_ = saved.w
        estimator.trace_ = list(saved.info.get("trace", []))
        return estimator


def _as_list(data: Any, name: str) -> list[Any]:
    """Examples as a list (lists, tuples and arrays indexed by example; not a bare string or scalar)."""
    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or not hasattr(data, "__getitem__"):
        raise InvalidInputError(f"{name} must be a sequence of examples, got {type(data).__name__}")
    return [data[i] for i in range(len(data))]
