"""scikit-learn style estimator around a model, a loss and a solver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.losses import Hamming, Loss
from structopt.models.base import Model
from structopt.problem import SSVMProblem
from structopt.solvers import get_solver


class StructuredSVM:
    """Structural SVM trained by any structopt solver.

    Parameters
    ----------
    model : Model
        The joint feature map (it carries its structure).
    solver : str, default "bcfw"
        A name from :data:`structopt.solvers.SOLVERS`.
    lam : float, default 0.01
        Regularisation strength.
    loss : Loss, optional
        Task loss; default :class:`Hamming`.
    **solver_options
        Passed unchanged to the solver (e.g. ``max_passes=20, random_state=0``).

    Attributes
    ----------
    coef_ : ndarray
        Learned weights (``model.unpack(coef_)`` names the blocks).
    trace_ : list of dict
        The solver's trace.
    """

    def __init__(self, model: Model, solver: str = "bcfw", lam: float = 0.01, loss: Loss | None = None,
                 **solver_options: Any):
        self.model = model
        self.solver = solver
        self.lam = lam
        self.loss = loss
        self.solver_options = solver_options

    # ----- scikit-learn parameter protocol (solver options are parameters too)
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as passed to ``__init__``."""
        return {"model": self.model, "solver": self.solver, "lam": self.lam, "loss": self.loss,
                **self.solver_options}

    def set_params(self, **params: Any) -> StructuredSVM:
        """Set hyper-parameters; unknown names become solver options."""
        for key, value in params.items():
            if key in ("model", "solver", "lam", "loss"):
                setattr(self, key, value)
            else:
                self.solver_options[key] = value
        return self

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.solver_options.items())
        return f"StructuredSVM({self.model!r}, solver={self.solver!r}, lam={self.lam!r}{options})"

    # ----- learning
    def fit(self, X: Sequence[Any], Y: Sequence[Any]) -> StructuredSVM:
        """Train on inputs ``X`` and gold outputs ``Y``."""
        loss = self.loss if self.loss is not None else Hamming()
        problem = SSVMProblem(self.model, X, Y, loss, self.lam)
        result = get_solver(self.solver)(problem, **self.solver_options)
        self.coef_ = result.w
        self.trace_ = result.trace
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise InvalidInputError("this StructuredSVM is not fitted yet; call fit first")

    def decision_potentials(self, x: Any) -> Any:
        """Potentials ``A_x coef_`` of one input."""
        self._check_fitted()
        return self.model.potentials(self.model.validate_input(x), self.coef_)

    def predict(self, X: Sequence[Any]) -> list[Any]:
        """MAP output of each input."""
        self._check_fitted()
        structure = self.model.structure
        return [structure.argmax(self.model.potentials(self.model.validate_input(x, i), self.coef_))
                for i, x in enumerate(X)]

    def score(self, X: Sequence[Any], Y: Sequence[Any]) -> float:
        """Fraction of output positions predicted exactly (token accuracy), pooled over examples."""
        predictions = self.predict(X)
        right = total = 0
        for y_true, y_pred in zip(Y, predictions, strict=True):
            y_true, y_pred = np.atleast_1d(y_true), np.atleast_1d(y_pred)
            right += int(np.count_nonzero(y_true == y_pred))
            total += y_true.size
        return right / total
