"""The Structure interface and its helpers (the potentials arithmetic is :mod:`structopt.potentials`).

A structure is a finite output set together with its marginal polytope. Each output ``y`` has
sufficient statistics ``stats(y)``; a score is linear in them, ``score(theta, y) = <theta, stats(y)>``.
Potentials and statistics share one NamedTuple type per structure, so that ``theta + c`` and
``<theta, mu>`` are defined field by field (numpy broadcasting allows compact potentials, e.g. a
chain's shared (S, S) pairwise block against per-position (T-1, S, S) statistics).

The size of an instance (a chain's length, a matching's sides) is always read off the potentials
passed in, so one structure object serves examples of every size.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError, example_error, refuse_nonfinite  # noqa: F401 (re-exported)

# the potentials arithmetic lives on the ground floor; re-exported here for compatibility
from structopt.potentials import Potentials, add, flatten, inner, scale, unflatten


def check_flag(value: Any, name: str, owner: str) -> bool:
    """``value`` as a bool, or an :class:`InvalidInputError` naming ``owner``'s argument ``name``.

    True, False and the integers 0 and 1 (numpy's too) are accepted; strings (``"no"`` would be
    truthy), None, NaN, other numbers and containers are not.
    """
    import numbers

    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise InvalidInputError(f"{owner} needs {name} to be True or False, got {value!r}")


def check_eta(eta: Any, owner: str) -> float:
    """``eta`` as a finite float (a prox step), or an :class:`InvalidInputError` naming ``owner``."""
    import numbers

    if isinstance(eta, (bool, np.bool_)) or not isinstance(eta, numbers.Real) or not np.isfinite(eta):
        raise InvalidInputError(f"{owner} needs a finite real step eta, got {eta!r}")
    return float(eta)


def random_like(like: Potentials, rng: np.random.Generator, integer: bool = False,
                low: float = -3.0, high: float = 3.0) -> Potentials:
    """Random potentials with the fields' shapes of ``like``.

    Parameters
    ----------
    integer : bool
        Draw integers in ``[low, high]`` (many ties), else uniform floats.
    """
    fields = []
    for x in like:
        shape = np.shape(x)
        if integer:
            fields.append(rng.integers(int(low), int(high) + 1, size=shape).astype(float))
        else:
            fields.append(rng.uniform(low, high, size=shape))
    return type(like)(*fields)


class Polytope(NamedTuple):
    """A linear description of the marginal polytope in the flat statistics layout of one instance.

    ``{z : exists u, A_eq [z; u] = b_eq, A_ub [z; u] <= b_ub, 0 <= z <= 1, aux_bounds on u}``, where
    ``flatten(stats(y))`` are the integral points ``z``. The ``n_aux`` auxiliary columns ``u`` (flows,
    cumulative sums, ...) let a polytope with an exponential description in ``z`` alone have a compact
    extended one; with ``n_aux = 0`` (the default) the matrices have one column per statistic.
    """

    A_eq: Any  # scipy.sparse matrix or None
    b_eq: np.ndarray | None
    A_ub: Any
    b_ub: np.ndarray | None
    like: Potentials  # statistics-shaped template for unflatten
    n_aux: int = 0
    #: (n_aux, 2) lower and upper bounds of the auxiliary variables (±inf allowed); None: u >= 0
    aux_bounds: np.ndarray | None = None

    @property
    def n_stats(self) -> int:
        """Number of statistics columns (the size of ``flatten(like)``)."""
        return sum(int(np.size(x)) for x in self.like)

    def bounds(self, stats_upper: np.ndarray | None = None) -> np.ndarray:
        """(n_stats + n_aux, 2) variable bounds: ``[0, 1]`` per statistic (``stats_upper`` overrides the
        upper ones), then the auxiliary bounds."""
        stats = np.column_stack([np.zeros(self.n_stats), np.ones(self.n_stats) if stats_upper is None
                                 else stats_upper])
        if self.aux_bounds is None:
            aux = np.column_stack([np.zeros(self.n_aux), np.full(self.n_aux, np.inf)])
        else:
            aux = np.asarray(self.aux_bounds, dtype=float).reshape(self.n_aux, 2)
        return np.vstack([stats, aux])

    def cvxpy(self):
        """Return ``(z, constraints)``: the statistics variable and the constraint list (auxiliary
        variables, if any, live inside the constraints)."""
        import cvxpy as cp

        z = cp.Variable(self.n_stats)
        constraints = [z >= 0, z <= 1]
        x = z
        if self.n_aux:
            u = cp.Variable(self.n_aux)
            x = cp.hstack([z, u])
            lower, upper = self.bounds()[self.n_stats:].T
            if np.isfinite(lower).any():
                constraints.append(u[np.flatnonzero(np.isfinite(lower))] >= lower[np.isfinite(lower)])
            if np.isfinite(upper).any():
                constraints.append(u[np.flatnonzero(np.isfinite(upper))] <= upper[np.isfinite(upper)])
        if self.A_eq is not None:
            constraints.append(self.A_eq @ x == self.b_eq)
        if self.A_ub is not None:
            constraints.append(self.A_ub @ x <= self.b_ub)
        return z, constraints

    def violation(self, z: np.ndarray) -> float:
        """Largest violation of the description at the flat statistics point ``z``.

        Without auxiliary variables this is the worst residual of ``0 <= z <= 1`` and each row; with
        them, the smallest such worst residual over ``u`` (one LP).
        """
        z = np.asarray(z, dtype=float)
        worst = max(0.0, float(np.max(-z, initial=0.0)), float(np.max(z - 1.0, initial=0.0)))
        if not self.n_aux:
            if self.A_eq is not None:
                worst = max(worst, float(np.max(np.abs(self.A_eq @ z - self.b_eq), initial=0.0)))
            if self.A_ub is not None:
                worst = max(worst, float(np.max(self.A_ub @ z - self.b_ub, initial=0.0)))
            return worst
        return max(worst, self._aux_violation(z))

    def _aux_violation(self, z: np.ndarray) -> float:
        # min t over (u, t) with |A_eq [z; u] - b_eq| <= t and A_ub [z; u] - b_ub <= t: the columns of z
        # move to the right-hand side
        import scipy.sparse as sp
        from scipy.optimize import linprog

        n, rows, rhs = self.n_stats, [], []
        for A, b, both_sides in ((self.A_eq, self.b_eq, True), (self.A_ub, self.b_ub, False)):
            if A is None:
                continue
            A = sp.csr_matrix(A)
            rest = np.asarray(b, dtype=float) - A[:, :n] @ z
            ones = sp.csr_matrix(np.ones((A.shape[0], 1)))
            rows.append(sp.hstack([A[:, n:], -ones]))
            rhs.append(rest)
            if both_sides:
                rows.append(sp.hstack([-A[:, n:], -ones]))
                rhs.append(-rest)
        if not rows:
            return 0.0
        cost = np.zeros(self.n_aux + 1)
        cost[-1] = 1.0
        bounds = np.vstack([self.bounds()[n:], [[0.0, np.inf]]])
        res = linprog(cost, A_ub=sp.vstack(rows).tocsr(), b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"polytope membership LP failed: {res.message}")
        return float(res.fun)


# --------------------------------------------------------------------------- interface
def unsupported(method):
    """Mark a structure method that only raises :class:`NotSupportedError` (the oracle is intractable
    or absent), so that ``SSVMProblem.has_topk`` / ``has_marginals`` and the solvers' oracle needs can
    tell before a run."""
    method.unsupported = True
    return method


def supports(structure: Any, oracle: str) -> bool:
    """Whether ``structure``'s class implements ``oracle`` (a method not marked :func:`unsupported`)."""
    method = getattr(type(structure), oracle, None)
    return method is not None and not getattr(method, "unsupported", False)


class Structure(ABC):
    """A finite output set and its marginal polytope.

    Subclasses implement at least :meth:`argmax`, :meth:`stats`, :meth:`outputs` (enumeration
    for tests), :meth:`polytope`, :meth:`expand` and :meth:`validate_output`. Every other
    oracle defaults to raising :class:`NotSupportedError` with the reason.
    """

    #: human-readable name used in error messages and reports
    name: str = "structure"

    #: size keyword arguments of :meth:`example`, one dict per instance shape that
    #: :func:`structopt.validate.check_builtin_structures` checks (edge cases first)
    example_variants: tuple[dict[str, Any], ...] = ({},)

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, **size: Any) -> tuple[Structure, Potentials]:
        """A random small instance ``(structure, theta)``, small enough to enumerate (for validation).

        Registered structures (:func:`~structopt.structures.registry.register_structure`) implement it;
        ``size`` takes the structure's own size keywords (documented on each override) and ``integer``
        draws integer potentials in [-3, 3] (many ties) instead of uniform floats.
        """
        raise NotSupportedError(f"{cls.__name__} has no random example instance")

    # ----- required
    @abstractmethod
    def argmax(self, theta: Potentials) -> Any:
        """Highest-scoring output (MAP / loss-augmented decoding when ``theta`` includes the loss)."""

    @abstractmethod
    def stats(self, y: Any, like: Potentials) -> Potentials:
        """Sufficient statistics of output ``y`` for an instance shaped like ``like``."""

    @abstractmethod
    def outputs(self, theta: Potentials) -> Iterator[Any]:
        """Every output of the instance shaped like ``theta`` (tiny instances only, for tests)."""

    @abstractmethod
    def polytope(self, theta: Potentials) -> Polytope:
        """Linear description of the marginal polytope of the instance shaped like ``theta``."""

    @abstractmethod
    def expand(self, theta: Potentials) -> Potentials:
        """``theta`` in the full statistics layout (undo any compact/shared parameterisation)."""

    @abstractmethod
    def validate_output(self, y: Any, like: Potentials, index: int | None = None) -> Any:
        """Return ``y`` as the canonical output type, or raise :class:`InvalidInputError`."""

    # ----- derived
    def score(self, theta: Potentials, y: Any) -> float:
        """``<theta, stats(y)>``."""
        return inner(theta, self.stats(y, theta))

    def expected_stats(self, outputs: Any, weights: np.ndarray, like: Potentials) -> Potentials:
        """``sum_j weights[j] * stats(outputs[j])`` (structures override it to vectorise)."""
        total = None
        for u, y in zip(weights, outputs, strict=True):
            term = scale(self.stats(y, like), float(u))
            total = term if total is None else add(total, term)
        return total

    def enumerate(self, theta: Potentials) -> list[Any]:
        """List of all outputs of the instance (see :meth:`outputs`)."""
        return list(self.outputs(theta))

    def lp_relaxation(self, theta: Potentials) -> tuple[float, Potentials]:
        """Maximise ``<theta, z>`` over :meth:`polytope` with scipy's HiGHS.

        Returns
        -------
        value : float
            The LP optimum.
        marginals : Potentials
            An optimal point, in the statistics layout.
        """
        from scipy.optimize import linprog

        full = self.expand(theta)  # validates theta before anything reads its shape
        poly = self.polytope(full)
        cost = -flatten(full)
        # a -inf potential (a forbidden entry, where the structure accepts it) fixes its statistic at 0
        forbidden = np.isposinf(cost)
        bounds = poly.bounds(np.where(forbidden, 0.0, 1.0))
        cost[forbidden] = 0.0
        cost = np.concatenate([cost, np.zeros(poly.n_aux)])  # auxiliary columns carry no score
        res = linprog(cost, A_ub=poly.A_ub, b_ub=poly.b_ub, A_eq=poly.A_eq, b_eq=poly.b_eq,
                      bounds=bounds, method="highs")
        if res.status == 2:  # an empty polytope: no output exists (-inf entries, masks or constraints)
            raise InvalidInputError(f"{self.name} potentials forbid every output: the LP relaxation has no feasible "
                                    f"point{' avoiding the -inf entries' if forbidden.any() else ''}")
        if res.status != 0:
            raise RuntimeError(f"LP relaxation of {self.name} failed: {res.message}")
        return -float(res.fun), unflatten(res.x[:poly.n_stats], poly.like)

    def project_qp(self, v: Potentials) -> Potentials:
        """Euclidean projection of ``v`` onto the polytope with a cvxpy QP (reference method)."""
        import cvxpy as cp

        full = self.expand(v)  # validates v before anything reads its shape
        poly = self.polytope(full)
        z, constraints = poly.cvxpy()
        target = flatten(full)
        # -inf entries (where the structure accepts them) force their statistics to 0: the limit of the
        # projection as they go to -inf is the projection of the rest onto that face
        forbidden = np.isneginf(target)
        if forbidden.any():
            target[forbidden] = 0.0
            constraints.append(z[np.flatnonzero(forbidden)] == 0)
        problem = cp.Problem(cp.Minimize(cp.sum_squares(z - target)), constraints)
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
        if problem.status in ("infeasible", "infeasible_inaccurate"):  # an empty polytope: no output exists
            raise InvalidInputError(f"{self.name} potentials forbid every output: the polytope has no point"
                                    f"{' avoiding the -inf entries' if forbidden.any() else ''}")
        if problem.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"projection QP of {self.name} failed: {problem.status}")
        return unflatten(np.asarray(z.value), poly.like)

    def kernel_oracles(self) -> frozenset[str]:
        """Names of the oracles that the library's fused (compiled) kernels reproduce exactly here.

        A fast path runs only when every oracle it replaces is listed; the default is none. Built-in
        structures list what their kernels compute, minus anything a subclass overrides (see
        :func:`unchanged_methods`).
        """
        return frozenset()

    # ----- optional oracles
    @unsupported
    def topk(self, theta: Potentials, k: int) -> tuple[list[Any], np.ndarray]:
        """The ``k`` best outputs sorted by score (fewer when fewer exist) and their scores."""
        raise NotSupportedError(f"{self.name} has no top-K oracle")

    @unsupported
    def marginals(self, theta: Potentials) -> tuple[float, Potentials]:
        """``(log Z, marginals)`` of the Gibbs distribution ``p(y) ∝ exp <theta, stats(y)>``."""
        raise NotSupportedError(f"{self.name} has no tractable log-partition")

    @unsupported
    def max_marginals(self, theta: Potentials) -> np.ndarray:
        """Best score among outputs with each node variable fixed to each value."""
        raise NotSupportedError(f"{self.name} has no max-marginal oracle")

    def project(self, v: Potentials) -> Potentials:
        """Euclidean projection onto the marginal polytope (defaults to :meth:`project_qp`)."""
        return self.project_qp(v)

    def prox_entropy(self, mu: Potentials, step: Potentials, eta: float) -> Potentials:
        """Entropic prox ``argmax_z <eta*step, z> - KL(z || mu)`` over the polytope."""
        raise NotSupportedError(f"{self.name} has no tractable entropic prox")


def unchanged_methods(obj: Any, base: type, names: Iterator[str] | tuple[str, ...]) -> frozenset[str]:
    """The names among ``names`` whose implementation on ``type(obj)`` is still ``base``'s own."""
    cls = type(obj)
    return frozenset(name for name in names if getattr(cls, name, None) is getattr(base, name, None))


def brute_force_topk(structure: Structure, theta: Potentials, k: int) -> tuple[list[Any], np.ndarray]:
    """Reference top-K by enumeration (tests and validation only)."""
    outs = structure.enumerate(theta)
    scores = np.array([structure.score(theta, y) for y in outs])
    order = np.argsort(-scores, kind="stable")[:k]
    return [outs[j] for j in order], scores[order]


def product_outputs(n_positions: int, n_states: int) -> Iterator[np.ndarray]:
    """All label sequences of a given length, as int64 arrays."""
    for labels in itertools.product(range(n_states), repeat=n_positions):
        yield np.array(labels, dtype=np.int64)
