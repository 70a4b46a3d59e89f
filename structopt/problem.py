"""The regularised structural SVM objective: the only thing solvers see.

``F(w) = lam/2 ||w||^2 + (1/n) sum_i H_i(w)`` with the structured hinge
``H_i(w) = max_y Delta(y_i, y) + <w, Phi(x_i, y) - Phi(x_i, y_i)>``.

Solvers reach the model and the structure only through the problem's per-example operators:
``theta(i, w)`` (``A_i w``), ``adjoint(i, stats, out, scale)`` (``out += scale A_i^T stats``),
``adjoint_sqnorm(i, stats)``, ``zeros()``, the statistics maps ``stats`` / ``reduce_stats`` /
``expand``, and the polytope oracles ``marginals`` / ``project`` / ``projector``. A subclass that
changes one of them (e.g. :class:`~structopt.nonconvex.LinearisedProblem`) changes it for every
solver.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from structopt.contract import check_contract, check_layout, nonnegative_indices
from structopt.errors import InvalidInputError, NotSupportedError, check_count, numeric_array
from structopt.hooks import has_hook
from structopt.losses import Loss
from structopt.models.base import Model
from structopt.potentials import Potentials, add, flatten, inner, narrowest_exact, scale
from structopt.smoothing import l2_smoothed_max_sorted
from structopt.structures.base import supports


class OracleResult(NamedTuple):
    """What an oracle returns for one example.

    Attributes
    ----------
    value : float
        ``H_i(w)`` for the max oracle; the smoothed hinge for the smooth oracles.
    grad : ndarray
        ``Phi(x_i, y*) - Phi(x_i, y_i)`` (a subgradient of ``H_i``), or the smoothed gradient.
    y : Any
        The maximiser ``y*``; for top-K the (k', ...) array of outputs used; for entropy the
        marginals (expected statistics).
    loss : float
        ``Delta(y_i, y*)``, or its expectation under the smoothing weights.
    """

    value: float
    grad: np.ndarray
    y: Any
    loss: float


class SmoothStats(NamedTuple):
    """A smooth oracle's answer with the gradient kept in statistics space (see :meth:`SSVMProblem.smooth_stats`).

    Attributes
    ----------
    value : float
        The smoothed hinge (same convention as :class:`OracleResult`).
    diff : Potentials
        Expected minus gold statistics, reduced by ``model.reduce_stats``; the gradient is
        ``A_i^T diff``.
    y : Any
        Top-K outputs or marginals, as in :class:`OracleResult`.
    loss : float
        Expected loss under the smoothing weights.
    """

    value: float
    diff: Potentials
    y: Any
    loss: float


class Decoded(NamedTuple):
    """Loss-augmented decoding of one example at some w."""

    y: Any            # the maximiser
    loss: float       # Delta(y_i, y)
    theta: Potentials  # A_i w (without the loss)



class _SharedZeros:
    """One read-only zero array per (shape, dtype), shared by every example's all-zero fields.

    The potentials at ``w = 0`` and the transition part of per-node loss terms are zeros of a few
    distinct shapes; keeping one array per example costs as much as the features on CoNLL-sized
    data (T x S floats per sentence). Read-only: a caller that writes into them fails loudly
    instead of changing every example.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple[tuple[int, ...], np.dtype], np.ndarray] = {}

    def share(self, potentials: Potentials) -> Potentials:
        """``potentials`` with every all-zero ndarray field replaced by the shared zero array of its shape."""
        if not (isinstance(potentials, tuple) and hasattr(potentials, "_fields")):  # only NamedTuples are rebuilt
            return potentials
        fields = []
        changed = False
        for field in potentials:
            if type(field) is np.ndarray and field.size and not field.any():
                key = (field.shape, field.dtype)
                shared = self._arrays.get(key)
                if shared is None:
                    shared = self._arrays[key] = np.zeros(field.shape, dtype=field.dtype)
                    shared.flags.writeable = False
                field, changed = shared, True
            fields.append(field)
        return type(potentials)(*fields) if changed else potentials


def _check_sequence(name: str, value: Any) -> None:
    """Refuse anything but a sequence with one entry per example (strings included: not a list of inputs)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not hasattr(value, "__getitem__"):
        raise InvalidInputError(f"{name} must be a sequence (e.g. a list) with one entry per example, "
                                f"got {type(value).__name__}")

def _narrow_integer_fields(potentials: Potentials) -> Potentials:
    """``potentials`` with every writable float64 field whose values are small non-negative integers (0/1
    costs, counts) stored as uint8 or uint16 (:func:`structopt.potentials.narrowest_exact`); the shared read-only
    zeros stay shared. ``x + 1.0 * c``, ``<c, mu>`` and the like give the same float64 results on them
    (exact integer values), at an eighth of the memory for per-node loss costs."""
    if not (isinstance(potentials, tuple) and hasattr(potentials, "_fields")):
        return potentials
    fields = []
    for field in potentials:
        if type(field) is np.ndarray and field.dtype == np.float64 and field.flags.writeable and field.size:
            narrow = narrowest_exact(field)
            field = narrow if narrow.dtype.kind == "u" else field  # float32 would round 'scale * c' in float32
        fields.append(field)
    return type(potentials)(*fields)


def _views_of(validated: Any, original: Any) -> bool:
    """Whether every array of sparse matrix ``validated`` views its counterpart of ``original`` exactly
    (same start, length, strides and dtype)."""
    for name in ("data", "indices", "indptr"):
        a, b = getattr(validated, name, None), getattr(original, name, None)
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype \
                or a.shape != b.shape or a.strides != b.strides \
                or a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
            return False
    return True


def _kept(original: Any, validated: Any) -> Any:
    """The caller's own input object when validation only wrapped its arrays in a new sparse matrix of the
    same type and shape (one matrix object per example instead of two: on CoNLL-sized data the second
    objects cost megabytes), else the validated one."""
    if (validated is not original and type(validated) is type(original) and hasattr(validated, "indptr")
            and validated.shape == original.shape and _views_of(validated, original)):
        return original
    return validated


def _check_lam(lam: Any) -> None:
    if isinstance(lam, (bool, np.bool_)) or not isinstance(lam, numbers.Real) or not (np.isfinite(lam) and lam > 0):
        raise InvalidInputError(f"lam must be a finite number > 0, got {lam!r}")


class SSVMProblem:
    """A structural SVM training problem.

    Parameters
    ----------
    model : Model
        The linear model (it carries its structure).
    X, Y : sequences
        Inputs and gold outputs, one per example.
    loss : Loss
        Task loss. Solvers that need a decomposable (linear) loss check ``loss.decomposable``.
    lam : float
        Regularisation strength lambda > 0.
    """

    #: why a parallel executor cannot rebuild this problem's examples on its workers from
    #: ``(model, X, Y, loss, lam)`` (a subclass whose oracles carry more than those), or None
    chunk_refusal: str | None = None

    def __init__(self, model: Model, X: Sequence[Any], Y: Sequence[Any], loss: Loss, lam: float):
        check_contract(model, loss)
        for name, value in (("X", X), ("Y", Y)):
            _check_sequence(name, value)
        n_x, n_y = len(X), len(Y)
        if n_x != n_y:
            raise InvalidInputError(f"X has {n_x} inputs but Y has {n_y} outputs")
        if n_x == 0:
            raise InvalidInputError("a problem needs at least one example")
        _check_lam(lam)
        self.model = model
        self.structure = model.structure
        self.loss = loss
        self.lam = float(lam)
        self.X = [_kept(x, model.validate_input(x, i)) for i, x in enumerate(X)]
        zero = model.zeros()
        zeros = _SharedZeros()
        self.Y = []
        self._terms = []
        self._likes = []  # potentials at w = 0: each example's shapes and layout (reused, never written)
        for i, (x, y) in enumerate(zip(self.X, Y, strict=True)):
            like = model.potentials(x, zero)
            y = self.structure.validate_output(y, like, i)
            if i == 0:
                check_layout(model, like, self.structure.stats(y, like))
            self.Y.append(y)
            terms = loss.linear_terms(self.structure, y, like) if loss.decomposable else None
            self._likes.append(zeros.share(like))
            self._terms.append(None if terms is None else (_narrow_integer_fields(zeros.share(terms[0])), terms[1]))
        self.n = len(self.X)
        self._nonnegative = nonnegative_indices(model)

    def __repr__(self) -> str:
        return f"SSVMProblem({self.model!r}, n={self.n}, loss={self.loss!r}, lam={self.lam:g})"

    @property
    def n_params(self) -> int:
        return self.model.n_params

    # ------------------------------------------------------------------ weight constraints
    @property
    def constrained(self) -> bool:
        """Whether some weights must stay >= 0 (``model.nonnegative_blocks``)."""
        return self._nonnegative.size > 0

    @property
    def nonnegative_indices(self) -> np.ndarray:
        """Indices of the weights constrained to be >= 0 (empty when unconstrained)."""
        return self._nonnegative

    def project_weights(self, w: np.ndarray) -> np.ndarray:
        """Euclidean projection onto the feasible weights: ``w`` itself when unconstrained, else a copy
        with the constrained entries clipped at 0."""
        if not self.constrained:
            return w
        out = np.array(w, dtype=float, copy=True)
        out[self._nonnegative] = np.maximum(out[self._nonnegative], 0.0)
        return out

    # ------------------------------------------------------------------ argument checks (public entry points)
    def check_weights(self, w: Any) -> np.ndarray:
        """``w`` as a finite float vector of the model's length, or an error naming it."""
        w = numeric_array(w, "weights w")
        if w.shape != (self.n_params,):
            raise InvalidInputError(f"weights w must have shape ({self.n_params},), got {w.shape}")
        return w

    def check_index(self, i: Any) -> int:
        """``i`` as a valid example index, or an error naming it."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral) or not 0 <= i < self.n:
            raise InvalidInputError(f"example index must be an integer in [0, {self.n}), got {i!r}")
        return int(i)

    # ------------------------------------------------------------------ building blocks
    def loss_terms(self, i: int) -> tuple[Potentials, float]:
        """``(c_i, const_i)`` of a decomposable loss, so that ``Delta(y_i, y) = <c_i, stats(y)> + const_i``
        (float64 fields; the problem stores integer-valued ones, such as Hamming's 0/1 costs, as uint8)."""
        if self._terms[i] is None:
            raise NotSupportedError(f"{self.loss!r} is not decomposable (linear in the statistics)")
        c, const = self._terms[i]
        if isinstance(c, tuple) and hasattr(c, "_fields"):
            c = type(c)(*(field.astype(np.float64) if isinstance(field, np.ndarray) and field.dtype.kind in "iu"
                          else field for field in c))
        return c, const

    # ------------------------------------------------------------------ per-example operators (what solvers use)
    def zeros(self) -> np.ndarray:
        """A zero weight vector (length ``n_params``)."""
        return self.model.zeros()

    def theta(self, i: int, w: np.ndarray) -> Potentials:
        """Potentials ``A_i w`` of example i (without the loss), in the model's compact layout."""
        return self.model.potentials(self.X[i], w)

    def adjoint(self, i: int, stats: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        """In place ``out += scale * A_i^T stats`` for compact statistics ``stats`` of example i.

        Parameters
        ----------
        i : int
            Example index.
        stats : Potentials
            Statistics in the layout of :meth:`theta` (e.g. from :meth:`compact_stats` or a
            :class:`SmoothStats` ``diff``); full-layout statistics broadcast where the model allows.
        out : ndarray
            Weight vector, updated in place (only the rows example i's features touch).
        scale : float
            Factor on the product.
        """
        self.model.add_features(self.X[i], stats, out, scale)

    def adjoint_sqnorm(self, i: int, stats: Potentials) -> float:
        """``||A_i^T stats||^2`` without a weight-sized vector where the model allows (BCFW's line search,
        the smoothness estimates)."""
        return self.model.features_sqnorm(self.X[i], stats)

    def stats(self, y: Any, like: Potentials) -> Potentials:
        """Statistics ``mu(y)`` of output ``y`` in the structure's full layout (shapes from ``like``)."""
        return self.structure.stats(y, like)

    def reduce_stats(self, mu: Potentials) -> Potentials:
        """Full-layout statistics ``mu`` in the model's compact layout (``model.reduce_stats``, linear)."""
        return self.model.reduce_stats(mu)

    def expand(self, theta: Potentials) -> Potentials:
        """Compact potentials (or statistics) in the structure's full layout (``structure.expand``)."""
        return self.structure.expand(theta)

    # ------------------------------------------------------------------ polytope oracles (full layout)
    @property
    def has_marginals(self) -> bool:
        """Whether the structure has a tractable log-partition (:meth:`marginals`)."""
        return supports(self.structure, "marginals")

    @property
    def has_topk(self) -> bool:
        """Whether the structure has a top-K oracle (:meth:`augmented_topk`)."""
        return supports(self.structure, "topk")

    def missing_oracle(self, oracle: str) -> str | None:
        """None when the structure has ``oracle`` (``"topk"`` or ``"marginals"``), else why not, in the
        structure's own words (its oracle is asked once, on example 0 at zero weights)."""
        if supports(self.structure, oracle):
            return None
        theta = self.theta(0, self.zeros())
        try:
            self.structure.topk(theta, 1) if oracle == "topk" else self.structure.marginals(theta)
        except NotSupportedError as error:
            return str(error)
        return f"{type(self.structure).__name__} declares no {oracle} oracle"

    def marginals(self, theta: Potentials) -> tuple[float, Potentials]:
        """``(log Z(theta), E[mu])`` of the Gibbs distribution with full-layout potentials ``theta``
        (raises :class:`NotSupportedError` where the structure has none, see :attr:`has_marginals`)."""
        return self.structure.marginals(theta)

    def project(self, v: Potentials) -> Potentials:
        """Euclidean projection of full-layout ``v`` onto the marginal polytope."""
        return self.structure.project(v)

    def projector(self, tol: float, warm: bool) -> Any:
        """The structure's warm-started projector (``projector(tol, warm)``: an object with
        ``project(point, key)``, ``state()``, ``load_state(state)``, ``max_residual``), or None when the
        structure has none; then :meth:`project` is the projection."""
        make = getattr(self.structure, "projector", None)
        return None if make is None else make(tol=float(tol), warm=warm)

    def gold_stats(self, i: int, like: Potentials) -> Potentials:
        """Statistics of the gold output of example i."""
        return self.structure.stats(self.Y[i], like)

    def like(self, i: int) -> Potentials:
        """Example i's potentials at ``w = 0``: its shapes and layout (shared: do not modify)."""
        return self._likes[i]

    def compact_stats(self, y: Any, like: Potentials) -> Potentials:
        """Statistics of output ``y`` in the model's compact layout (``model.reduce_stats``)."""
        return self.model.reduce_stats(self.structure.stats(y, like))

    def compact_diff(self, i: int, y: Any, like: Potentials) -> Potentials:
        """``stats(y) - stats(y_i)`` of example i in the model's compact layout (a subgradient's statistics)."""
        return self.model.reduce_stats(add(self.structure.stats(y, like), self.gold_stats(i, like), -1.0))

    def decode(self, i: int, w: np.ndarray) -> Decoded:
        """Loss-augmented decoding ``argmax_y Delta(y_i, y) + <A_i w, stats(y)>``.

        A decomposable loss adds its cached linear terms and calls ``structure.argmax``; any other
        loss decodes through its own ``Loss.augmented_argmax`` hook.
        """
        theta = self.theta(i, w)
        y = self.augmented_argmax(i, theta)
        return Decoded(y, self.loss_of(i, y, theta), theta)

    def loss_of(self, i: int, y: Any, theta: Potentials) -> float:
        """``Delta(y_i, y)``; for a relaxed oracle's fractional point (statistics of ``theta``'s type,
        e.g. a factor graph's LP-MAP vertex) a decomposable loss is valued linearly,
        ``<c_i, y> + const_i``, which equals the loss at every integral output."""
        if isinstance(y, type(theta)) and self._terms[i] is not None:
            c, const = self._terms[i]
            return inner(c, y) + const
        return self.loss(self.Y[i], y)

    def augmented_argmax(self, i: int, theta: Potentials) -> Any:
        """``argmax_y Delta(y_i, y) + <theta, stats(y)>`` for example i's potentials ``theta``."""
        if self._terms[i] is not None:
            return self.structure.argmax(add(theta, self._terms[i][0]))
        return self.loss.augmented_argmax(self.structure, theta, self.Y[i])

    def hinge(self, i: int, decoded: Decoded) -> float:
        """``H_i`` from a decoding: ``Delta + score(theta, y*) - score(theta, y_i)``."""
        s = self.structure
        return decoded.loss + s.score(decoded.theta, decoded.y) - s.score(decoded.theta, self.Y[i])

    def features(self, i: int, mu: Potentials) -> np.ndarray:
        """``A_i^T mu`` as a dense weight vector."""
        return self.model.features(self.X[i], mu)

    # ------------------------------------------------------------------ oracles
    def max_oracle(self, i: int, w: np.ndarray) -> OracleResult:
        """Structured hinge of example i, a subgradient, the maximiser and its loss."""
        i, w = self.check_index(i), self.check_weights(w)
        d = self.decode(i, w)
        diff = add(self.structure.stats(d.y, d.theta), self.gold_stats(i, d.theta), -1.0)
        return OracleResult(self.hinge(i, d), self.features(i, diff), d.y, d.loss)

    def smooth_stats(self, i: int, theta: Potentials, mu: float, kind: str = "topk", k: int = 5) -> SmoothStats:
        """Smoothed hinge of example i from its potentials, with the gradient in statistics space.

        The gradient of the smoothed hinge is ``A_i^T diff``; solvers on sparse features apply it
        with ``model.add_features(x_i, diff, out, scale)`` instead of building a dense vector.

        Parameters
        ----------
        theta : Potentials
            ``A_i w`` (without the loss), e.g. from :meth:`theta`.
        mu, kind, k
            As in :meth:`smooth_oracle`.

        Returns
        -------
        SmoothStats
            ``diff`` is reduced by ``model.reduce_stats`` (the compact layout the weights see).
        """
        if isinstance(mu, (bool, np.bool_)) or not isinstance(mu, numbers.Real) or not (np.isfinite(mu) and mu > 0):
            raise InvalidInputError(f"smoothing parameter mu must be a finite number > 0, got {mu!r}")
        if not isinstance(kind, str) or kind not in ("topk", "entropy"):
            raise InvalidInputError(f"unknown smoothing kind {kind!r}; use 'topk' or 'entropy'")
        if kind == "topk":
            k = check_count(k, "k", "top-K smoothing")
        gold = self.gold_stats(i, theta)
        gold_score = self.structure.score(theta, self.Y[i])
        if kind == "topk":
            outputs, values = self.augmented_topk(i, theta, k)
            keep = np.flatnonzero(np.isfinite(values))  # fewer than k outputs exist: -inf padding
            outputs, values = [outputs[j] for j in keep], np.asarray(values)[keep]
            value, weights = l2_smoothed_max_sorted(values - gold_score, mu)
            used = np.flatnonzero(weights > 0)
            expected = self.structure.expected_stats([outputs[j] for j in used], weights[used], theta)
            loss = float(sum(weights[j] * self.loss(self.Y[i], outputs[j]) for j in used))
            diff = self.model.reduce_stats(add(expected, gold, -1.0))
            return SmoothStats(value, diff, np.asarray(outputs), loss)
        if self._terms[i] is not None:
            c, const = self._terms[i]
            log_z, marg = self.structure.marginals(scale(add(theta, c), 1.0 / mu))
            log_z, loss = log_z + const / mu, inner(c, marg) + const
        else:
            log_z, marg, loss = self.loss.augmented_marginals(self.structure, theta, self.Y[i], mu)
        diff = self.model.reduce_stats(add(marg, gold, -1.0))
        return SmoothStats(float(mu * log_z - gold_score), diff, marg, float(loss))

    def augmented_topk(self, i: int, theta: Potentials, k: int) -> tuple[Any, np.ndarray]:
        """The ``k`` best outputs of ``Delta(y_i, y) + <theta, stats(y)>``, sorted, and those values."""
        if self._terms[i] is not None:
            c, const = self._terms[i]
            outputs, scores = self.structure.topk(add(theta, c), k)
            return outputs, np.asarray(scores, dtype=float) + const
        return self.loss.augmented_topk(self.structure, theta, self.Y[i], k)

    def smooth_oracle(self, i: int, w: np.ndarray, mu: float, kind: str = "topk", k: int = 5) -> OracleResult:
        """Smoothed structured hinge of example i (Pillutla et al., Algo 6 and Prop. 9).

        Parameters
        ----------
        mu : float
            Smoothing parameter (> 0).
        kind : {"topk", "entropy"}
            l2 smoothing over the top-K outputs, or entropy smoothing (exp oracle).
        k : int
            K for top-K smoothing.

        Returns
        -------
        OracleResult
            ``value`` is the smoothed max itself (for top-K: ``<u, psi> - mu/2 (||u||^2 - 1)``,
            eq. (11), whose gradient is exactly ``grad``; Algo 6's ``s = <u, psi>`` is smaller by
            ``mu/2 (1 - ||u||^2)``); ``y`` holds the top-K outputs or the marginals; ``loss`` the
            expected loss under the smoothing weights.
        """
        i, w = self.check_index(i), self.check_weights(w)
        res = self.smooth_stats(i, self.theta(i, w), mu, kind, k)
        return OracleResult(res.value, self.features(i, res.diff), res.y, res.loss)

    # ------------------------------------------------------------------ batch
    def _indices(self, indices: Sequence[int] | None) -> Sequence[int]:
        return range(self.n) if indices is None else indices

    def max_oracle_batch(self, w: np.ndarray, indices: Sequence[int] | None = None) -> list[OracleResult]:
        """:meth:`max_oracle` on several examples (all by default)."""
        return [self.max_oracle(i, w) for i in self._indices(indices)]

    def smooth_oracle_batch(self, w: np.ndarray, mu: float, kind: str = "topk", k: int = 5,
                            indices: Sequence[int] | None = None) -> list[OracleResult]:
        """:meth:`smooth_oracle` on several examples (all by default)."""
        return [self.smooth_oracle(i, w, mu, kind, k) for i in self._indices(indices)]

    def hinge_losses(self, w: np.ndarray, executor: Any = None) -> np.ndarray:
        """``H_i(w)`` for every example (no gradients built); on ``executor`` when one is given
        (an open :class:`structopt.parallel.Executor` of this problem)."""
        if executor is not None:
            return executor.hinge_losses(w)
        return np.array([self.hinge(i, self.decode(i, w)) for i in range(self.n)])

    def compact_gold_stats(self, stored: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Gold statistics of every example in the model's compact layout, flattened and concatenated.

        Returns ``(flat, offsets)``; example i's block is ``flat[offsets[i]:offsets[i+1]]`` and has the
        layout of ``flatten(theta(i, w))``, so ``<block, flatten(theta)>`` is the gold score.

        Parameters
        ----------
        stored : bool, default False
            False: ``flat`` is a fresh float64 array (the caller's to keep or modify). True: the array the
            problem keeps (computed once, shared: do not modify), in the narrowest dtype that holds every
            value exactly (:func:`structopt.potentials.narrowest_exact`: uint8 for 0/1 statistics and counts
            below 256, an eighth of float64 on long datasets); read into float64 arithmetic it gives the
            same results. ``offsets`` (int64) is computed once and shared either way.
        """
        if not hasattr(self, "_compact_gold"):
            flat, offsets = self._build_compact_gold()
            self._compact_gold = (narrowest_exact(flat), offsets)
        flat, offsets = self._compact_gold
        return (flat, offsets) if stored else (flat.astype(np.float64), offsets)

    def _build_compact_gold(self) -> tuple[np.ndarray, np.ndarray]:
        # filled in place (sizes from the potentials' layouts): no list of per-example copies beside the
        # result, which would double this (T x S floats per example) array's peak on long datasets
        sizes = np.array([sum(int(np.size(field)) for field in like) for like in self._likes], dtype=np.int64)
        offsets = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        flat = np.empty(int(offsets[-1]))
        for i, like in enumerate(self._likes):
            gold = flatten(self.model.reduce_stats(self.gold_stats(i, like)))
            if gold.size != sizes[i]:
                raise InvalidInputError(f"example {i}: {type(self.model).__name__}.reduce_stats returns {gold.size} "
                                        f"statistics but the potentials have {sizes[i]}; reduce_stats must give the "
                                        "layout of the model's potentials")
            flat[offsets[i]:offsets[i + 1]] = gold
        return flat, offsets

    def mean_hinge(self, w: np.ndarray, executor: Any = None) -> float:
        """``mean_i H_i(w)``: one fused pass when the model has kernels for this problem, else the Python loop;
        on ``executor`` when one is given (an open :class:`structopt.parallel.Executor` of this problem)."""
        if executor is not None:
            return executor.mean_hinge(w)
        from structopt.fused import select

        fast = select(self)
        return fast.mean_hinge(np.asarray(w, dtype=float)) if fast is not None else float(np.mean(self.hinge_losses(w)))

    def primal(self, w: np.ndarray, executor: Any = None) -> float:
        """``F(w) = lam/2 ||w||^2 + mean_i H_i(w)``, the objective every solver reports (the hinge pass on
        ``executor`` when one is given)."""
        w = self.check_weights(w)
        return 0.5 * self.lam * float(w @ w) + self.mean_hinge(w, executor)

    def with_lam(self, lam: float) -> SSVMProblem:
        """The same problem with regularisation ``lam``: a shallow copy sharing inputs, outputs and loss
        terms, without what depends on λ (the fused view and the fingerprint, rebuilt on demand).

        Raises
        ------
        InvalidInputError
            ``lam`` is not a finite number > 0.
        """
        import copy

        _check_lam(lam)
        out = copy.copy(self)
        out.lam = float(lam)
        for cached in ("_fused", "fused_refusal", "_fingerprint"):
            out.__dict__.pop(cached, None)
        return out

    # ------------------------------------------------------------------ latent outputs (solvers.latent_ssvm)
    @property
    def has_completion(self) -> bool:
        """Whether the structure declares the latent completion oracle (the hook ``complete``)."""
        return has_hook(self.structure, "complete")

    def complete(self, i: int, theta: Potentials) -> Any:
        """The best output with example i's observed part, its latent part imputed at potentials ``theta``
        (``structure.complete(theta, Y[i])``, validated as an output of example i)."""
        if not self.has_completion:
            raise NotSupportedError(f"{type(self.structure).__name__} declares no latent completion oracle "
                                    "(complete(theta, y)); see structopt.hooks.HOOKS")
        return self.structure.validate_output(self.structure.complete(theta, self.Y[i]), self._likes[i], i)

    def with_outputs(self, Y: Sequence[Any]) -> SSVMProblem:
        """The same problem with gold outputs ``Y`` (validated; the loss terms recomputed): a shallow copy sharing
        inputs and model, without what depends on the outputs (fused view, fingerprint, gold statistics).

        Raises
        ------
        InvalidInputError
            ``Y`` does not hold one valid output per example.
        """
        import copy

        _check_sequence("Y", Y)
        if len(Y) != self.n:
            raise InvalidInputError(f"with_outputs: {len(Y)} outputs for {self.n} examples")
        out = copy.copy(self)
        zeros = _SharedZeros()
        out.Y, out._terms = [], []
        for i, (y, like) in enumerate(zip(Y, self._likes, strict=True)):
            y = self.structure.validate_output(y, like, i)
            out.Y.append(y)
            terms = self.loss.linear_terms(self.structure, y, like) if self.loss.decomposable else None
            out._terms.append(None if terms is None else (_narrow_integer_fields(zeros.share(terms[0])), terms[1]))
        for cached in ("_fused", "fused_refusal", "_fingerprint", "_compact_gold"):
            out.__dict__.pop(cached, None)
        return out

    def same_loss_terms(self, other: SSVMProblem) -> bool:
        """Whether ``other`` (e.g. from :meth:`with_outputs`) has this problem's loss: equal linear terms for every
        example (a loss that reads only the observed part of the outputs keeps them under a new completion)."""
        if other.n != self.n or other.loss is not self.loss or not self.loss.decomposable:
            return False
        for (c, const), (d, other_const) in zip(self._terms, other._terms, strict=True):
            if const != other_const or not all(np.array_equal(a, b) for a, b in zip(c, d, strict=True)):
                return False
        return True

    def fused(self):
        """The fused view (:class:`structopt.fused.FusedProblem`) when a registered kernel family computes
        exactly this problem's oracles, else None (the reason in ``fused_refusal``). Built once; solvers
        choose through :func:`structopt.fused.select`."""
        if not hasattr(self, "_fused"):
            from structopt.fused import build

            self._fused, self.fused_refusal = build(self)
        return self._fused

    def fingerprint(self) -> dict[str, str]:
        """Digests of inputs, outputs, loss, lam and model (:func:`structopt.fingerprint.problem_fingerprint`)."""
        if not hasattr(self, "_fingerprint"):
            from structopt.fingerprint import problem_fingerprint

            self._fingerprint = problem_fingerprint(self)
        return self._fingerprint

    def predict(self, X: Sequence[Any], w: np.ndarray, executor: Any = None) -> list[Any]:
        """The best output of each new input: :meth:`Model.predict_batch <structopt.models.Model.predict_batch>`
        (outputs, never relaxed points; a factor graph's exact MAP labels), split over ``executor``'s
        workers when one is given."""
        w = self.check_weights(w)
        _check_sequence("X", X)
        if executor is not None:
            return executor.predict(X, w)
        return self.model.predict_batch(X, w)
