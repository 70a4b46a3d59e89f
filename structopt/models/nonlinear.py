"""Non-linear score maps ``theta = psi(x; w)`` and their linearisations (Pillutla et al. §6).

A :class:`NonlinearModel` produces a structure's potentials by a smooth map of the weights. What
it provides, beside the :class:`~structopt.models.base.Model` pieces that do not assume linearity
(``structure``, ``blocks``, ``unpack``, ``zeros``, ``validate_input``, ``reduce_stats``):

- ``tangent(x, w)``: the forward pass at ``w``, cached (e.g. hidden activations), from which
- ``tangent_potentials(t)`` is ``psi(x; w)``,
- ``tangent_jvp(t, dw)`` is ``J dw`` (a Jacobian-vector product, in the potentials' layout), and
- ``tangent_vjp(t, mu, out, scale)`` adds ``scale * J^T mu`` to ``out`` (a vector-Jacobian
  product of statistics ``mu`` in the layout of ``reduce_stats``).

``potentials(x, w)``, ``jvp(x, w, dw)`` and ``vjp(x, w, mu)`` are the one-shot forms.

How it meets the extension contract (:mod:`structopt.contract`): it has every attribute the
contract checks, so :class:`~structopt.nonconvex.NonconvexProblem` (an ``SSVMProblem``) validates
inputs, outputs and the potentials/statistics layout exactly as for a linear model, and the
structure's oracles (argmax, top-K, marginals) run unchanged on ``psi(x; w)``. The one piece of a
linear model it cannot have is a weight-independent adjoint ``A_x^T``: ``add_features`` raises
:class:`~structopt.errors.NotSupportedError` (so a convex solver given a non-linear model stops at
its first gradient with that message); gradients go through ``tangent_vjp`` at the current ``w``.

:class:`~structopt.nonconvex.LinearisedProblem` is the prox-linear subproblem at a point: its
operators are ``tangent_jvp`` and ``tangent_vjp`` at the cached tangents, so every convex solver
trains it as a linear SSVM.

Built-in maps: :class:`NonlinearChainModel` (a network over token features for the unary
potentials, a linear transition block) and the cell networks :class:`NonlinearMatchingModel`
(edge scores) and :class:`NonlinearBoxModel` (image-cell scores of a bounding box).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from structopt.codecs import register_codec
from structopt.errors import InvalidInputError, NotSupportedError, example_error
from structopt.models import _mlp
from structopt.models.base import Model, cell_features, feature_matrix
from structopt.structures.base import Potentials
from structopt.structures.box import BoundingBox, BoxPotentials
from structopt.structures.chain import Chain, ChainPotentials
from structopt.structures.matching import BipartiteMatching, MatchingPotentials


class NonlinearModel(Model):
    """A smooth non-linear map from weights to a structure's potentials, with its Jacobian products.

    Subclasses define ``blocks``, ``validate_input``, ``tangent``, ``tangent_potentials``,
    ``tangent_jvp``, ``tangent_vjp`` and ``initial_weights`` (see the module docstring).
    """

    @abstractmethod
    def tangent(self, x: Any, w: np.ndarray, scale: float = 1.0) -> Any:
        """The forward pass of input ``x`` at the point ``scale * w``, cached for Jacobian products."""

    @abstractmethod
    def tangent_potentials(self, t: Any) -> Potentials:
        """``psi(x; w)`` at the tangent's point."""

    @abstractmethod
    def tangent_jvp(self, t: Any, dw: np.ndarray) -> Potentials:
        """``J dw``, the Jacobian of ``w -> psi(x; w)`` at the tangent's point applied to ``dw``."""

    @abstractmethod
    def tangent_vjp(self, t: Any, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        """In place ``out += scale * J^T mu`` for statistics ``mu`` (full or reduced layout)."""

    @abstractmethod
    def initial_weights(self, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """A random starting point (zero weights are a stationary point of a two-layer network)."""

    def tangent_vjp_sqnorm(self, t: Any, mu: Potentials) -> float:
        """``||J^T mu||^2`` (models override it to avoid a weight-sized vector)."""
        out = self.zeros()
        self.tangent_vjp(t, mu, out)
        return float(out @ out)

    def potentials(self, x: Any, w: np.ndarray) -> Potentials:
        """``psi(x; w)``."""
        return self.tangent_potentials(self.tangent(x, w))

    def jvp(self, x: Any, w: np.ndarray, dw: np.ndarray) -> Potentials:
        """``J(x; w) dw``."""
        return self.tangent_jvp(self.tangent(x, w), np.asarray(dw, dtype=float))

    def vjp(self, x: Any, w: np.ndarray, mu: Potentials) -> np.ndarray:
        """``J(x; w)^T mu`` as a dense weight vector."""
        out = self.zeros()
        self.tangent_vjp(self.tangent(x, w), mu, out)
        return out

    def add_features(self, x: Any, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        raise NotSupportedError(f"{type(self).__name__} is not linear in its weights: its adjoint J(x; w)^T depends "
                                "on w (use vjp); train it with prox_linear or sgd_nonconvex")


def _check_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInputError(f"{owner} {name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_activation(owner: str, activation: Any) -> str:
    if activation not in _mlp.ACTIVATIONS:
        raise InvalidInputError(f"{owner} activation must be one of {', '.join(_mlp.ACTIVATIONS)}, "
                                f"got {activation!r}")
    return activation


def _rng(random_state: int | np.random.Generator | None) -> np.random.Generator:
    return random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)


def _mlp_init(model: Model, n_in: int, n_hidden: int, rng: np.random.Generator) -> np.ndarray:
    # Glorot-style scales keep tanh out of saturation at the start; biases at zero
    w = model.zeros()
    blocks = model.unpack(w)
    blocks["hidden"][...] = rng.normal(scale=1.0 / np.sqrt(n_in), size=blocks["hidden"].shape)
    blocks["output"][...] = rng.normal(scale=1.0 / np.sqrt(n_hidden), size=blocks["output"].shape)
    return w


class ChainTangent:
    """A chain network's forward pass at one point (:meth:`NonlinearChainModel.tangent`)."""

    __slots__ = ("mlp", "pairwise")

    def __init__(self, mlp: _mlp.MLPTangent, pairwise: np.ndarray):
        self.mlp = mlp
        self.pairwise = pairwise


class NonlinearChainModel(NonlinearModel):
    """Chain potentials from a two-layer network over token features, plus a linear transition block.

    ``theta_t = act(x_t W_hidden + b_hidden) W_output + b_output`` (unary, (T, S)) and
    ``theta(a, b) = W_pairwise[a, b]``.

    Parameters
    ----------
    n_features : int
        Token feature dimension F; inputs are (T, F) dense arrays or scipy.sparse CSR matrices.
    n_hidden : int
        Hidden units H.
    n_states : int
        Labels S.
    activation : {"tanh", "elu"}
        Hidden activation (both smooth enough for the prox-linear theory: C^1, Lipschitz slope).
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[NonlinearChainModel, list[np.ndarray]]:
        """A 3-state chain scored by a one-hidden-layer network of 4 units, 3 features (see :meth:`Model.example`)."""
        return cls(3, 4, 3), [rng.normal(size=(4, 3)) for _ in range(3)]

    def __init__(self, n_features: int, n_hidden: int, n_states: int, activation: str = "tanh"):
        self.n_features = _check_int("NonlinearChainModel", "n_features", n_features)
        self.n_hidden = _check_int("NonlinearChainModel", "n_hidden", n_hidden)
        self.n_states = _check_int("NonlinearChainModel", "n_states", n_states)
        self.activation = _check_activation("NonlinearChainModel", activation)
        self.structure = Chain(self.n_states)

    def __repr__(self) -> str:
        return (f"NonlinearChainModel(n_features={self.n_features}, n_hidden={self.n_hidden}, "
                f"n_states={self.n_states}, activation={self.activation!r})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        F, H, S = self.n_features, self.n_hidden, self.n_states
        return [("hidden", (F, H)), ("hidden_bias", (H,)), ("output", (H, S)), ("output_bias", (S,)),
                ("pairwise", (S, S))]

    def validate_input(self, x: Any, index: int | None = None) -> Any:
        return feature_matrix(x, self.n_features, index, "chain input", "T")

    def reduce_stats(self, mu: ChainPotentials) -> ChainPotentials:
        """Sum per-position edge statistics into the shared (S, S) transition block."""
        edge = np.asarray(mu.pairwise)
        return ChainPotentials(mu.unary, edge.sum(axis=0) if edge.ndim == 3 else edge)

    def tangent(self, x: Any, w: np.ndarray, scale: float = 1.0) -> ChainTangent:
        b = self.unpack(w)
        mlp = _mlp.forward(x, b["hidden"], b["hidden_bias"], b["output"], b["output_bias"], self.activation, scale)
        return ChainTangent(mlp, scale * b["pairwise"])  # a copy, never a view of w

    def tangent_potentials(self, t: ChainTangent) -> ChainPotentials:
        return ChainPotentials(t.mlp.out, t.pairwise)

    def tangent_jvp(self, t: ChainTangent, dw: np.ndarray) -> ChainPotentials:
        b = self.unpack(dw)
        unary = _mlp.jvp(t.mlp, b["hidden"], b["hidden_bias"], b["output"], b["output_bias"])
        return ChainPotentials(unary, b["pairwise"])

    def tangent_vjp(self, t: ChainTangent, mu: ChainPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        b = self.unpack(out)
        node = np.ascontiguousarray(mu.unary, dtype=float)
        if node.shape != t.mlp.out.shape:
            raise InvalidInputError(f"statistics of shape {node.shape} do not match potentials {t.mlp.out.shape}")
        _mlp.vjp(t.mlp, node, b["hidden"], b["hidden_bias"], b["output"], b["output_bias"], scale)
        edge = np.asarray(mu.pairwise, dtype=float)
        b["pairwise"] += scale * (edge.sum(axis=0) if edge.ndim == 3 else edge)

    def tangent_vjp_sqnorm(self, t: ChainTangent, mu: ChainPotentials) -> float:
        edge = np.asarray(mu.pairwise, dtype=float)
        edge = edge.sum(axis=0) if edge.ndim == 3 else edge
        return _mlp.vjp_sqnorm(t.mlp, np.asarray(mu.unary, dtype=float)) + float(np.sum(edge * edge))

    def initial_weights(self, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        return _mlp_init(self, self.n_features, self.n_hidden, _rng(random_state))


class GridTangent:
    """The forward pass at one point of a network that scores each cell of a 2-D grid
    (matching edges, image cells): :meth:`CellNetworkModel.tangent`."""

    __slots__ = ("mlp", "shape")

    def __init__(self, mlp: _mlp.MLPTangent, shape: tuple[int, int]):
        self.mlp = mlp
        self.shape = shape


class CellNetworkModel(NonlinearModel):
    """One score per cell of a feature grid ``x`` (A, B, F): ``act(x[a, b] W_hidden + b_hidden) w_output +
    b_output``. Subclasses pair it with a structure through :meth:`_wrap` (cell scores -> potentials)
    and :meth:`_cells` (statistics -> their (A, B) cell array)."""

    def __init__(self, n_features: int, n_hidden: int, activation: str = "tanh"):
        owner = type(self).__name__
        self.n_features = _check_int(owner, "n_features", n_features)
        self.n_hidden = _check_int(owner, "n_hidden", n_hidden)
        self.activation = _check_activation(owner, activation)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n_features={self.n_features}, n_hidden={self.n_hidden}, "
                f"activation={self.activation!r})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("hidden", (self.n_features, self.n_hidden)), ("hidden_bias", (self.n_hidden,)),
                ("output", (self.n_hidden, 1)), ("output_bias", (1,))]

    @abstractmethod
    def _wrap(self, cells: np.ndarray) -> Potentials:
        """The structure's potentials from an (A, B) array of cell scores."""

    @abstractmethod
    def _cells(self, mu: Potentials) -> np.ndarray:
        """The (A, B) cell array of statistics ``mu``."""

    def tangent(self, x: np.ndarray, w: np.ndarray, scale: float = 1.0) -> GridTangent:
        b = self.unpack(w)
        A, B = x.shape[:2]
        rows = x.reshape(A * B, self.n_features)
        mlp = _mlp.forward(rows, b["hidden"], b["hidden_bias"], b["output"], b["output_bias"], self.activation, scale)
        return GridTangent(mlp, (A, B))

    def tangent_potentials(self, t: GridTangent) -> Potentials:
        return self._wrap(t.mlp.out.reshape(t.shape))

    def tangent_jvp(self, t: GridTangent, dw: np.ndarray) -> Potentials:
        b = self.unpack(dw)
        cells = _mlp.jvp(t.mlp, b["hidden"], b["hidden_bias"], b["output"], b["output_bias"])
        return self._wrap(cells.reshape(t.shape))

    def tangent_vjp(self, t: GridTangent, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        b = self.unpack(out)
        cells = np.asarray(self._cells(mu), dtype=float)
        if cells.shape != t.shape:
            raise InvalidInputError(f"statistics of shape {cells.shape} do not match an input with {t.shape} cells")
        _mlp.vjp(t.mlp, cells.reshape(-1, 1), b["hidden"], b["hidden_bias"], b["output"], b["output_bias"], scale)

    def tangent_vjp_sqnorm(self, t: GridTangent, mu: Potentials) -> float:
        return _mlp.vjp_sqnorm(t.mlp, np.asarray(self._cells(mu), dtype=float).reshape(-1, 1))

    def initial_weights(self, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        return _mlp_init(self, self.n_features, self.n_hidden, _rng(random_state))


class NonlinearMatchingModel(CellNetworkModel):
    """Perfect-matching edge scores from a two-layer network over edge features ``x`` (L, R, F), ``L <= R``.

    Parameters
    ----------
    n_features, n_hidden : int
        Edge feature dimension F and hidden units H.
    activation : {"tanh", "elu"}
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[NonlinearMatchingModel, list[np.ndarray]]:
        """Three 3 x 3 matchings with 2 features per pair and 3 hidden units (see :meth:`Model.example`)."""
        return cls(2, 3), [rng.normal(size=(3, 3, 2)) for _ in range(3)]

    def __init__(self, n_features: int, n_hidden: int, activation: str = "tanh"):
        super().__init__(n_features, n_hidden, activation)
        self.structure = BipartiteMatching()

    def validate_input(self, x: Any, index: int | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 3 or x.shape[2] != self.n_features:
            raise example_error(index, f"matching input must be an edge-feature array of shape "
                                       f"(n_left, n_right, {self.n_features}), got {x.shape}")
        if x.shape[0] > x.shape[1]:
            raise example_error(index, f"{x.shape[0]} left nodes cannot all be matched into {x.shape[1]} right nodes")
        if not np.all(np.isfinite(x)):
            raise example_error(index, "matching input contains NaN or infinite values")
        return x

    def _wrap(self, cells: np.ndarray) -> MatchingPotentials:
        return MatchingPotentials(cells, np.zeros(0), np.zeros(0))

    def _cells(self, mu: MatchingPotentials) -> np.ndarray:
        return mu.edge


class NonlinearBoxModel(CellNetworkModel):
    """Bounding-box cell scores from a two-layer network over cell features ``x`` (H, W, F) (the paper's
    non-linear localisation score, with cells in place of its convolution's positions).

    Parameters
    ----------
    n_features, n_hidden : int
        Cell feature dimension F and hidden units H.
    activation : {"tanh", "elu"}
        The paper uses ELU.
    search : {"bnb", "exhaustive"}
        Search of the :class:`~structopt.structures.box.BoundingBox` structure.
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[NonlinearBoxModel, list[np.ndarray]]:
        """Three 3 x 3 images with 2 features and 3 hidden units (see :meth:`Model.example`)."""
        return cls(2, 3), [rng.normal(size=(3, 3, 2)) for _ in range(3)]

    def __init__(self, n_features: int, n_hidden: int, activation: str = "tanh", search: str = "bnb"):
        super().__init__(n_features, n_hidden, activation)
        self.structure = BoundingBox(search)

    def validate_input(self, x: Any, index: int | None = None) -> np.ndarray:
        return cell_features(x, self.n_features, index)

    def _wrap(self, cells: np.ndarray) -> BoxPotentials:
        return BoxPotentials(cells)

    def _cells(self, mu: BoxPotentials) -> np.ndarray:
        return mu.cells



# ----- saving (structopt.saved_model): each builds its own structure
register_codec("NonlinearChainModel", NonlinearChainModel,
               lambda m: {"n_features": m.n_features, "n_hidden": m.n_hidden, "n_states": m.n_states,
                          "activation": m.activation}, ("n_features", "n_hidden", "n_states", "activation"))
register_codec("NonlinearMatchingModel", NonlinearMatchingModel,
               lambda m: {"n_features": m.n_features, "n_hidden": m.n_hidden, "activation": m.activation},
               ("n_features", "n_hidden", "activation"))
register_codec("NonlinearBoxModel", NonlinearBoxModel,
               lambda m: {"n_features": m.n_features, "n_hidden": m.n_hidden, "activation": m.activation,
                          "search": m.structure.search}, ("n_features", "n_hidden", "activation", "search"))


__all__ = ["CellNetworkModel", "ChainTangent", "GridTangent", "NonlinearBoxModel",
           "NonlinearChainModel", "NonlinearMatchingModel", "NonlinearModel"]
