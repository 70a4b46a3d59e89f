"""User-declared structures: 0/1 vectors subject to linear constraints written in cvxpy.

``LPStructure(z, constraints)`` takes a 1-D cvxpy boolean ``Variable`` z and linear cvxpy
constraints in z; its outputs are the feasible 0/1 vectors and their statistics are the entries of
z, so ``score(theta, y) = <theta.values, y>``. The constraints are turned into matrices once
(cvxpy's own canonicalisation); the oracles then solve 0/1 programs exactly (see
:mod:`structopt.structures._ilp`):

- ``argmax``: one ILP; ``topk``: k ILPs, each excluding the previous answers by a no-good cut;
  ``max_marginals``: one ILP per entry with that entry fixed to 1;
- ``polytope`` / ``lp_relaxation``: the constraints with ``0 <= z <= 1`` (an outer description of the
  marginal polytope conv(Y): its optimum is an upper bound, fractional where the description is);
- ``project``: Euclidean projection onto conv(Y) itself, by Wolfe's min-norm-point method on the
  ILP oracle (equal to ``project_qp`` when the description is integral);
- ``outputs``: enumeration of the 0/1 points for tiny instances (n <= 20).

``LPStructure.from_builder(builder)`` declares a family whose size varies per example:
``builder(n)`` returns ``(z, constraints)`` for instances of size n, read off the potentials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, numeric_array
from structopt.structures._ilp import ILP, get_backend
from structopt.structures._minnorm import project_hull
from structopt.structures.base import Polytope, Structure, random_like, unsupported
from structopt.structures.registry import register_structure

#: largest instance :meth:`LPStructure.outputs` enumerates (2**n candidate points)
MAX_ENUMERATION_SIZE = 20


class VectorPotentials(NamedTuple):
    """Potentials (or statistics) that are one flat vector, shape (n,)."""

    values: np.ndarray


Builder = Callable[[int], tuple[Any, list[Any]]]


def compile_constraints(z: Any, constraints: list[Any]) -> ILP:
    """Matrices of linear cvxpy ``constraints`` in the 1-D boolean variable ``z``.

    Raises
    ------
    InvalidInputError
        If ``z`` is not a 1-D boolean cvxpy Variable, a constraint is not linear (an affine
        equality or inequality), or a constraint involves another variable.
    """
    import cvxpy as cp

    if not isinstance(z, cp.Variable) or z.ndim != 1 or z.size < 1:
        raise InvalidInputError(f"LPStructure needs a 1-D cvxpy Variable of length >= 1, got {z!r}")
    if not z.attributes.get("boolean"):
        raise InvalidInputError("LPStructure needs a boolean variable: cvxpy.Variable(n, boolean=True)")
    if isinstance(constraints, cp.constraints.constraint.Constraint):
        constraints = [constraints]
    elif isinstance(constraints, (list, tuple)):
        constraints = list(constraints)
    else:
        raise InvalidInputError(f"LPStructure constraints must be a list of cvxpy constraints, got "
                                f"{type(constraints).__name__}")
    for j, con in enumerate(constraints):
        if not isinstance(con, cp.constraints.Equality | cp.constraints.Inequality | cp.constraints.Zero
                          | cp.constraints.NonPos | cp.constraints.NonNeg):
            raise InvalidInputError(f"constraint {j} ({con}) is a {type(con).__name__}; LPStructure takes linear "
                                    "equalities and inequalities only")
        if not con.expr.is_affine():
            raise InvalidInputError(f"constraint {j} ({con}) is not linear in z")
        others = [var for var in con.variables() if var.id != z.id]
        if others:
            raise InvalidInputError(f"constraint {j} ({con}) involves variable {others[0].name()} besides z")
        for param in con.parameters():
            if param.value is None:
                raise InvalidInputError(f"constraint {j} ({con}) has parameter {param.name()} without a value")
    n = int(z.size)
    if not constraints:
        return ILP(n, None, None, None, None)
    # cvxpy's canonicalisation: A x = b for the equalities, G x <= h for the inequalities, x = z
    problem = cp.Problem(cp.Minimize(0), [*constraints, z >= 0])
    data, _, _ = problem.get_problem_data(cp.SCIPY)
    if (data["A"] is not None and data["A"].shape[1] != n) or data["G"].shape[1] != n:
        raise InvalidInputError("could not express the constraints in z alone")
    G, h = data["G"], data["h"]
    # drop the z >= 0 rows added above (bounds are implicit) by keeping rows that are not -e_j <= 0
    G = G.tocsr()
    nnz = np.diff(G.indptr)
    bound_rows = (nnz == 1) & (h == 0)
    bound_rows[bound_rows] = G.data[G.indptr[:-1][bound_rows]] < 0
    keep = ~bound_rows
    return ILP(n, data["A"], data["b"], G[keep], h[keep])


@register_structure("lp")
class LPStructure(Structure):
    """0/1 vectors satisfying linear constraints declared with cvxpy.

    Parameters
    ----------
    z : cvxpy.Variable
        A 1-D boolean variable, ``cp.Variable(n, boolean=True)``.
    constraints : list of cvxpy constraints (or one constraint)
        Linear equalities and inequalities in ``z`` only; cvxpy parameters are read once, here.
    solver : {"auto", "cpsat", "highs", "scip"}, default "auto"
        Exact ILP backend. ``"auto"`` uses OR-Tools CP-SAT when the constraint rows scale to integers
        exactly (the fastest on the measured programs, see ``benchmarks/lp_structure.py``; the
        objective is rounded at resolution ``max|theta| * 1e-9``) and scipy's HiGHS ``milp`` otherwise.

    Raises
    ------
    InvalidInputError
        On a non-boolean or non-1-D variable, a non-linear constraint, a constraint in another
        variable, or constraints that no 0/1 vector satisfies.

    Examples
    --------
    >>> import cvxpy as cp
    >>> z = cp.Variable(6, boolean=True)
    >>> structure = LPStructure(z, [cp.sum(z) == 2])      # choose exactly 2 of 6
    """

    name = "LPStructure"
    Potentials = VectorPotentials

    example_variants = ({"n": 1}, {"n": 4}, {"n": 7})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n: int = 5) -> tuple[LPStructure,
                                                                                           VectorPotentials]:
        """Select between lo and hi of ``n`` entries with at most a cap in a random window: interval
        constraint rows are totally unimodular, so the LP description is exact."""
        import cvxpy as cp

        n = int(n)
        if n < 1:
            raise InvalidInputError(f"an lp instance needs n >= 1, got {n}")
        z = cp.Variable(n, boolean=True)
        lo = int(rng.integers(0, n + 1))
        hi = int(rng.integers(lo, n + 1))
        start = int(rng.integers(0, n))
        stop = int(rng.integers(start + 1, n + 1))
        cap = int(rng.integers(max(0, lo - (n - (stop - start))), stop - start + 1))
        structure = cls(z, [cp.sum(z) >= lo, cp.sum(z) <= hi, cp.sum(z[start:stop]) <= cap])
        return structure, random_like(VectorPotentials(np.zeros(structure.size)), rng, integer=integer)
    #: the per-node loss hook: every entry of z is a node with values 0 and 1
    states_per_node = 2

    def __init__(self, z: Any = None, constraints: list[Any] | None = None, solver: str = "auto", *,
                 builder: Builder | None = None):
        self.solver = str(solver).lower()
        self._solve = get_backend(self.solver)
        self._builder = builder
        self._cache: dict[int, ILP] = {}
        self.size: int | None = None
        if builder is None:
            if z is None:
                raise InvalidInputError("LPStructure needs a variable z and its constraints (or use from_builder)")
            ilp = self._checked(compile_constraints(z, [] if constraints is None else constraints))
            self.size = ilp.n
            self._cache[ilp.n] = ilp
        elif z is not None or constraints is not None:
            raise InvalidInputError("pass either (z, constraints) or builder, not both")

    @classmethod
    def from_builder(cls, builder: Builder, solver: str = "auto") -> LPStructure:
        """A structure whose instances vary in size: ``builder(n)`` returns ``(z, constraints)``.

        The size of an instance is the length of its potentials; each size is compiled once.
        """
        if not callable(builder):
            raise InvalidInputError(f"builder must be callable as builder(n) -> (z, constraints), got {builder!r}")
        return cls(solver=solver, builder=builder)

    def __repr__(self) -> str:
        if self._builder is not None:
            return f"LPStructure.from_builder({getattr(self._builder, '__name__', 'builder')}, solver={self.solver!r})"
        return f"LPStructure(n={self.size}, solver={self.solver!r})"

    # ------------------------------------------------------------------ instances
    def _checked(self, ilp: ILP) -> ILP:
        if self._solve(ilp, np.zeros(ilp.n)) is None:
            raise InvalidInputError(f"the constraints of this LPStructure (n={ilp.n}) admit no 0/1 point")
        return ilp

    def _instance(self, n: int, index: int | None = None) -> ILP:
        if n in self._cache:
            return self._cache[n]
        if self._builder is None:
            raise example_error(index, f"LPStructure potentials must have shape ({self.size},), got ({n},)")
        if n < 1:
            raise example_error(index, "LPStructure potentials must have length >= 1")
        z, constraints = self._builder(n)
        ilp = compile_constraints(z, constraints)
        if ilp.n != n:
            raise InvalidInputError(f"builder({n}) returned a variable of length {ilp.n}")
        self._cache[n] = self._checked(ilp)
        return self._cache[n]

    def _values(self, theta: VectorPotentials, index: int | None = None) -> np.ndarray:
        if isinstance(theta, tuple) and not isinstance(theta, VectorPotentials):
            raise example_error(index, f"LPStructure potentials must be VectorPotentials or a 1-D vector, got a "
                                       f"{type(theta).__name__}")
        values = numeric_array(theta.values if isinstance(theta, VectorPotentials) else theta,
                               "LPStructure potentials", index)
        if values.ndim != 1:
            raise example_error(index, f"LPStructure potentials must be a 1-D vector, got shape {values.shape}")
        self._instance(values.size, index)
        return values

    # ------------------------------------------------------------------ layout
    def node_potentials(self, costs: np.ndarray, like: VectorPotentials) -> VectorPotentials:
        """Potentials of per-entry costs ``costs[j, b]`` (price of z_j = b), up to :meth:`node_constant`."""
        costs = np.asarray(costs, dtype=float)
        return VectorPotentials(costs[:, 1] - costs[:, 0])

    def node_constant(self, costs: np.ndarray) -> float:
        """The constant ``sum_j costs[j, 0]`` that completes :meth:`node_potentials` (binary encoding)."""
        return float(np.sum(np.asarray(costs, dtype=float)[:, 0]))

    def expand(self, theta: VectorPotentials) -> VectorPotentials:
        return VectorPotentials(self._values(theta))

    def validate_output(self, y, like: VectorPotentials, index: int | None = None) -> np.ndarray:
        n = np.size(like.values)
        arr = np.asarray(y)
        if arr.shape != (n,):
            raise example_error(index, f"LPStructure output must have shape ({n},), got {arr.shape}")
        if not np.all((arr == 0) | (arr == 1)):
            raise example_error(index, "LPStructure output must contain only 0 and 1")
        arr = arr.astype(np.int64)
        if not self._instance(n, index).feasible(arr)[0]:
            raise example_error(index, "LPStructure output violates the constraints")
        return arr

    def stats(self, y, like: VectorPotentials = None) -> VectorPotentials:
        return VectorPotentials(np.asarray(y, dtype=float).ravel())

    def expected_stats(self, outputs, weights: np.ndarray, like: VectorPotentials) -> VectorPotentials:
        return VectorPotentials(np.asarray(weights, dtype=float) @ np.asarray(outputs, dtype=float).reshape(
            len(weights), -1))

    def score(self, theta: VectorPotentials, y) -> float:
        return float(self._values(theta) @ np.asarray(y, dtype=float))

    def outputs(self, theta: VectorPotentials) -> Iterator[np.ndarray]:
        """Feasible 0/1 vectors in lexicographic order (z[0] most significant); n <= 20 only."""
        n = np.size(theta.values)
        if n > MAX_ENUMERATION_SIZE:
            raise NotSupportedError(f"enumerating 2**{n} points is too large (n <= {MAX_ENUMERATION_SIZE})")
        ilp = self._instance(n)
        shifts = np.arange(n - 1, -1, -1)
        for start in range(0, 2 ** n, 1 << 16):
            codes = np.arange(start, min(2 ** n, start + (1 << 16)), dtype=np.int64)
            points = ((codes[:, None] >> shifts) & 1).astype(np.int64)
            yield from points[ilp.feasible(points)]

    def polytope(self, theta: VectorPotentials) -> Polytope:
        """The constraints with ``0 <= z <= 1``: an outer description of conv(Y) (exact when integral)."""
        ilp = self._instance(np.size(theta.values))
        return Polytope(ilp.A_eq, ilp.b_eq, ilp.A_ub, ilp.b_ub, VectorPotentials(np.zeros(ilp.n)))

    # ------------------------------------------------------------------ oracles
    def argmax(self, theta: VectorPotentials) -> np.ndarray:
        """Best feasible 0/1 vector by an exact ILP."""
        values = self._values(theta)
        return self._solve(self._instance(values.size), values)

    def topk(self, theta: VectorPotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best feasible vectors (fewer when fewer exist), by ILPs with no-good cuts.

        Returns
        -------
        outputs : int64 array (k', n), sorted by decreasing score
        scores : float array (k',)
        """
        k = check_count(k, "k", "LPStructure.topk")
        values = self._values(theta)
        ilp = self._instance(values.size)
        found: list[np.ndarray] = []
        for _ in range(int(k)):
            current = ilp if not found else ilp.with_rows(
                2.0 * np.array(found) - 1.0, np.array([y.sum() - 1.0 for y in found]))
            y = self._solve(current, values)
            if y is None:
                break
            found.append(y)
        outputs = np.array(found, dtype=np.int64).reshape(len(found), values.size)
        scores = outputs @ values
        order = np.argsort(-scores, kind="stable")  # already sorted up to the solvers' tolerances
        return outputs[order], scores[order]

    def max_marginals(self, theta: VectorPotentials) -> np.ndarray:
        """(n,) array: best score of a feasible vector with z_j = 1 (-inf if none); one ILP per entry."""
        values = self._values(theta)
        ilp = self._instance(values.size)
        out = np.full(values.size, -np.inf)
        for j in range(values.size):
            row = np.zeros(values.size)
            row[j] = -1.0
            y = self._solve(ilp.with_rows(row[None, :], np.array([-1.0])), values)
            if y is not None:
                out[j] = float(values @ y)
        return out

    @unsupported
    def marginals(self, theta: VectorPotentials) -> tuple[float, VectorPotentials]:
        raise NotSupportedError("the log-partition over the 0/1 points of a general polytope is #P-hard "
                                "(it counts them)")

    def project(self, v: VectorPotentials, tol: float = 1e-12) -> VectorPotentials:
        """Euclidean projection onto conv(Y), by Wolfe's min-norm point on the ILP oracle."""
        target = self._values(v)
        ilp = self._instance(target.size)
        p, _ = project_hull(target, lambda d: self._solve(ilp, d), tol=tol)
        return VectorPotentials(p)
