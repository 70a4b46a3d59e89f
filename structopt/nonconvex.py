"""Structural SVMs with non-linear score maps, and their prox-linear subproblems (Pillutla et al. §6).

:class:`NonconvexProblem` is the objective (59)

    F(w) = (1/n) sum_i max_y [Delta(y_i, y) + <psi(x_i; w), mu(y) - mu(y_i)>] + (lam/2) ||w||^2

for a :class:`~structopt.models.nonlinear.NonlinearModel` ``psi``. Its oracles are those of
:class:`~structopt.problem.SSVMProblem` on the potentials ``psi(x_i; w)``; gradients map
statistics back through the vector-Jacobian product at ``w``.

:class:`LinearisedProblem` is the prox-linear subproblem (61) at ``w_k`` with step ``eta``,

    F_eta(w; w_k) = (1/n) sum_i h(psi_i(w_k) + J_i (w - w_k)) + (lam/2)||w||^2 + (1/(2 eta))||w - w_k||^2,

written as an ordinary structural SVM so that every convex solver trains it unchanged. The two
quadratics are one: ``(lam/2)||w||^2 + (1/(2 eta))||w - w_k||^2 = (lam'/2)||w - c||^2 + const_k``
with ``lam' = lam + 1/eta`` and centre ``c = w_k / (1 + eta lam)``. In the variable ``u = w - c``
the subproblem is an SSVM with regulariser ``lam'``, linear potentials ``theta_i = J_i u`` (the
problem's operators ``theta``/``adjoint`` are the Jacobian-vector and vector-Jacobian products at
the cached tangents ``t_i = tangent(x_i, w_k)``; the model is the non-linear one, unchanged) and
per-example offsets ``o_i = psi_i(w_k) + J_i (c - w_k)``. An offset enters the augmented score as
``<o_i, mu(y) - mu(y_i)>``, exactly like a decomposable loss's linear terms, so it is added to the
potentials wherever the oracles see them (``augmented_argmax``, ``augmented_topk``, the marginals)
and reported in ``Decoded.loss`` (the affine part of the
augmented score, which is what BCFW's dual needs). Hence ``F_eta(c + u; w_k) = primal(u) + const_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import Loss
from structopt.models.nonlinear import NonlinearModel
from structopt.problem import Decoded, OracleResult, SmoothStats, SSVMProblem
from structopt.structures.base import Potentials, add


class NonconvexProblem(SSVMProblem):
    """A structural SVM whose potentials are a smooth non-linear map of the weights.

    Parameters
    ----------
    model : NonlinearModel
        The score map (it carries its structure).
    X, Y : sequences
        Inputs and gold outputs.
    loss : Loss
        Task loss.
    lam : float
        Regularisation strength > 0.
    """

    def __init__(self, model: NonlinearModel, X: Sequence[Any], Y: Sequence[Any], loss: Loss, lam: float):
        if not isinstance(model, NonlinearModel):
            raise InvalidInputError(f"NonconvexProblem needs a NonlinearModel, got {type(model).__name__} "
                                    "(a linear model belongs in SSVMProblem)")
        if tuple(model.nonnegative_blocks):
            # the prox-linear subproblem shifts the variable (u = w - c), so a bound on w is not one on u
            raise NotSupportedError(f"{type(model).__name__}.nonnegative_blocks: weight constraints are not supported "
                                    "for non-linear models (prox_linear and sgd_nonconvex take unconstrained steps)")
        super().__init__(model, X, Y, loss, lam)

    def __repr__(self) -> str:
        return f"NonconvexProblem({self.model!r}, n={self.n}, loss={self.loss!r}, lam={self.lam:g})"

    def features(self, i: int, mu: Potentials) -> np.ndarray:
        raise NotSupportedError("a non-linear model has no weight-independent adjoint; use gradient(i, w, mu)")

    # ----- the score map's operators at a point (sgd_nonconvex)
    def initial_weights(self, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """The model's random starting weights (:meth:`NonlinearModel.initial_weights`)."""
        return self.model.initial_weights(random_state)

    def tangent(self, i: int, w: np.ndarray, scale: float = 1.0) -> Any:
        """The forward pass of example i at ``scale * w`` (cached activations), for
        :meth:`tangent_potentials` and :meth:`tangent_adjoint`."""
        return self.model.tangent(self.X[i], w, scale=scale)

    def tangent_potentials(self, t: Any) -> Potentials:
        """``psi(x_i; w)`` at the tangent's point."""
        return self.model.tangent_potentials(t)

    def tangent_adjoint(self, t: Any, stats: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        """In place ``out += scale * J^T stats``, the Jacobian at the tangent's point (a vector-Jacobian product)."""
        self.model.tangent_vjp(t, stats, out, scale)

    def gradient(self, i: int, w: np.ndarray, mu: Potentials) -> np.ndarray:
        """``J_i(w)^T mu``: statistics mapped back to weights through the Jacobian at ``w``."""
        return self.model.vjp(self.X[i], w, mu)

    def max_oracle(self, i: int, w: np.ndarray) -> OracleResult:
        """Structured hinge of example i at ``w``, a subgradient ``J_i(w)^T (mu(y*) - mu(y_i))``, y*, its loss."""
        d = self.decode(i, w)
        diff = self.compact_diff(i, d.y, d.theta)
        return OracleResult(self.hinge(i, d), self.gradient(i, w, diff), d.y, d.loss)

    def smooth_oracle(self, i: int, w: np.ndarray, mu: float, kind: str = "topk", k: int = 5) -> OracleResult:
        """Smoothed hinge of example i at ``w`` and its gradient through the Jacobian at ``w``."""
        res = self.smooth_stats(i, self.theta(i, w), mu, kind, k)
        return OracleResult(res.value, self.gradient(i, w, res.diff), res.y, res.loss)

    def fused(self) -> None:
        """No fused passes: the fused kernels are those of linear models."""
        return None

    def linearize(self, w: np.ndarray, eta: float) -> LinearisedProblem:
        """The prox-linear subproblem ``F_eta(.; w)`` (61) as a :class:`LinearisedProblem`."""
        return LinearisedProblem(self, w, eta)


class LinearisedProblem(SSVMProblem):
    """The prox-linear subproblem at ``w_k`` as a structural SVM in ``u = w - c`` (module docstring).

    Parameters
    ----------
    parent : NonconvexProblem
    w_k : ndarray
        Linearisation point and prox centre.
    eta : float
        Prox-linear step length (> 0).

    Attributes
    ----------
    centre : ndarray
        ``c = w_k / (1 + eta lam)``; ``w = c + u``.
    constant : float
        ``const_k``, so that ``F_eta(c + u; w_k) = primal(u) + constant``.
    tangents : list
        ``t_i = tangent(x_i, w_k)``, the forward passes the Jacobian products reuse.
    offsets : list of Potentials
        ``o_i = psi_i(w_k) + J_i (c - w_k)``.
    """

    chunk_refusal = ("the subproblem's offsets and oracles live in this process (workers would rebuild the non-linear "
                     "problem without its linearisation); run it serially (executor=None)")

    def __init__(self, parent: NonconvexProblem, w_k: np.ndarray, eta: float):
        if not isinstance(parent, NonconvexProblem):
            raise InvalidInputError(f"LinearisedProblem needs a NonconvexProblem, got {type(parent).__name__}")
        if isinstance(eta, (bool, np.bool_)) or not isinstance(eta, (int, float, np.floating, np.integer)) or not (
                np.isfinite(eta) and eta > 0):
            raise InvalidInputError(f"eta must be a finite number > 0, got {eta!r}")
        w_k = np.asarray(w_k, dtype=float)
        if w_k.shape != (parent.n_params,):
            raise InvalidInputError(f"w_k must have shape ({parent.n_params},), got {w_k.shape}")
        eta, lam = float(eta), parent.lam
        model = parent.model
        self.parent, self.w_k, self.eta = parent, w_k.copy(), eta
        self.centre = w_k / (1.0 + eta * lam)
        shift = self.centre - w_k
        self.constant = 0.5 * lam * float(self.centre @ self.centre) + 0.5 / eta * float(shift @ shift)
        self.tangents = [model.tangent(x, w_k) for x in parent.X]
        self.offsets = [add(model.tangent_potentials(t), model.tangent_jvp(t, shift)) for t in self.tangents]
        super().__init__(model, parent.X, parent.Y, parent.loss, lam + 1.0 / eta)

    def __repr__(self) -> str:
        return f"LinearisedProblem({self.parent!r}, eta={self.eta:g})"

    # ----- the linear operators: the Jacobians at w_k
    def theta(self, i: int, w: np.ndarray) -> Potentials:
        """``J_i u``: the Jacobian of example i at ``w_k`` applied to the subproblem variable ``u = w``."""
        return self.model.tangent_jvp(self.tangents[i], w)

    def adjoint(self, i: int, stats: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        """In place ``out += scale * J_i^T stats`` (the Jacobian at ``w_k``)."""
        self.model.tangent_vjp(self.tangents[i], stats, out, scale)

    def adjoint_sqnorm(self, i: int, stats: Potentials) -> float:
        """``||J_i^T stats||^2``."""
        return self.model.tangent_vjp_sqnorm(self.tangents[i], stats)

    def features(self, i: int, mu: Potentials) -> np.ndarray:
        """``J_i^T mu`` as a dense vector."""
        out = self.zeros()
        self.adjoint(i, mu, out)
        return out

    def fused(self) -> None:
        """No fused passes: the fused kernels are those of linear models."""
        return None

    # ----- the variable change
    def weights(self, u: np.ndarray) -> np.ndarray:
        """``w = c + u``: the non-linear model's weights of a subproblem point."""
        return self.centre + np.asarray(u, dtype=float)

    def variable(self, w: np.ndarray) -> np.ndarray:
        """``u = w - c``."""
        return np.asarray(w, dtype=float) - self.centre

    def model_value(self, w: np.ndarray) -> float:
        """``F_eta(w; w_k)`` (61) at the non-linear model's weights ``w``."""
        return self.primal(self.variable(w)) + self.constant

    # ----- oracles on theta + o_i
    def _offset_score(self, i: int, y: Any) -> float:
        o = self.offsets[i]
        return self.structure.score(o, y) - self.structure.score(o, self.Y[i])

    def augmented_argmax(self, i: int, theta: Potentials) -> Any:
        return super().augmented_argmax(i, add(theta, self.offsets[i]))

    def decode(self, i: int, w: np.ndarray) -> Decoded:
        """Decoding at ``u = w``; ``loss`` is the affine part of the augmented score,
        ``Delta(y_i, y) + <o_i, mu(y) - mu(y_i)>``."""
        theta = self.theta(i, w)
        y = self.augmented_argmax(i, theta)
        return Decoded(y, self.loss_of(i, y, theta) + self._offset_score(i, y), theta)

    def augmented_topk(self, i: int, theta: Potentials, k: int) -> tuple[Any, np.ndarray]:
        """The ``k`` best outputs of ``Delta(y_i, y) + <o_i, mu(y) - mu(y_i)> + <theta, mu(y)>`` and those values."""
        outputs, values = super().augmented_topk(i, add(theta, self.offsets[i]), k)
        return outputs, np.asarray(values, dtype=float) - self.structure.score(self.offsets[i], self.Y[i])

    def smooth_stats(self, i: int, theta: Potentials, mu: float, kind: str = "topk", k: int = 5) -> SmoothStats:
        # top-K goes through augmented_topk, which carries the offset; marginals see shifted potentials
        return super().smooth_stats(i, add(theta, self.offsets[i]) if kind == "entropy" else theta, mu, kind, k)

    def loss_terms(self, i: int) -> tuple[Potentials, float]:
        """The effective linear terms ``(c_i + o_i, const_i - <o_i, mu(y_i)>)`` (decomposable losses)."""
        c, const = super().loss_terms(i)
        o = self.offsets[i]
        return add(c, o), const - self.structure.score(o, self.Y[i])

    def predict(self, X: Sequence[Any], w: np.ndarray) -> list[Any]:
        raise NotSupportedError("predict with the non-linear problem at weights(u); the subproblem's inputs are "
                                "linearisations of its training examples")


__all__ = ["LinearisedProblem", "NonconvexProblem"]
