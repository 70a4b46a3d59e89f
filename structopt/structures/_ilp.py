"""Exact 0/1 integer linear programs behind :class:`~structopt.structures.lp.LPStructure`.

Every backend solves ``max <c, x>`` over ``x in {0, 1}^n`` with ``A_eq x = b_eq`` and
``A_ub x <= b_ub`` to proven optimality (relative and absolute gaps set to zero where the solver
exposes them) and returns the 0/1 point, or None when the program is infeasible.

- ``"highs"``: HiGHS inside scipy (its ``milp``'s solver, driven directly so that a callback can stop
  it on Ctrl-C; never cvxpy's ``highspy``, which clashes with the HiGHS bundled in OR-Tools).
- ``"scip"``: OR-Tools' ``pywraplp`` with SCIP.
- ``"cpsat"``: OR-Tools' CP-SAT, which takes integers only: each constraint row is scaled to integers
  exactly (or refused); an integral objective is used as is, any other is rounded at resolution
  ``1 / scale`` with ``scale = OBJECTIVE_RESOLUTION / max|c|``, so the point returned is optimal
  within ``n * max|c| / OBJECTIVE_RESOLUTION`` of the true optimum.

``benchmarks/lp_structure.py`` measures the three on the same programs: CP-SAT is fastest or close to
it on every family measured (k-of-n, windows, knapsack rows, independent sets), so ``"auto"`` (the
default) uses CP-SAT whenever the rows scale to integers exactly and HiGHS otherwise.

Every backend answers Ctrl-C within milliseconds: the solve runs inside
:func:`structopt.interrupt.interruptible`, which stops the solver and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.interrupt import interruptible

#: integer resolution of CP-SAT objectives: max |c| is mapped to this many units
OBJECTIVE_RESOLUTION = 1e9
#: largest denominator accepted when a constraint row is scaled to integers for CP-SAT
MAX_DENOMINATOR = 10_000


class ILP:
    """A 0/1 program's constraints in scipy form (CSR matrices or None, float vectors).

    Parameters
    ----------
    n : int
        Number of 0/1 variables.
    A_eq, b_eq, A_ub, b_ub
        ``A_eq x = b_eq`` and ``A_ub x <= b_ub`` (either pair may be None).
    """

    def __init__(self, n: int, A_eq, b_eq, A_ub, b_ub):
        self.n = int(n)
        self.A_eq = None if A_eq is None or A_eq.shape[0] == 0 else sp.csr_matrix(A_eq, dtype=float)
        self.b_eq = None if self.A_eq is None else np.asarray(b_eq, dtype=float).ravel()
        self.A_ub = None if A_ub is None or A_ub.shape[0] == 0 else sp.csr_matrix(A_ub, dtype=float)
        self.b_ub = None if self.A_ub is None else np.asarray(b_ub, dtype=float).ravel()
        self._cpsat_rows: list | None = None
        self._integral: bool | None = None  # rows scale to integers (CP-SAT applies); set by solve_auto

    def with_rows(self, A_ub_extra: np.ndarray, b_ub_extra: np.ndarray) -> ILP:
        """A copy with extra ``<=`` rows (no-good cuts, fixings)."""
        rows = sp.csr_matrix(np.atleast_2d(A_ub_extra), shape=(len(b_ub_extra), self.n))
        A_ub = rows if self.A_ub is None else sp.vstack([self.A_ub, rows], format="csr")
        b_ub = np.asarray(b_ub_extra, dtype=float) if self.b_ub is None else np.concatenate([self.b_ub, b_ub_extra])
        child = ILP(self.n, self.A_eq, self.b_eq, A_ub, b_ub)
        if self._cpsat_rows is not None:  # reuse the parent's integer rows; convert only the new ones
            child._cpsat_rows = self._cpsat_rows + _integer_rows(rows, np.asarray(b_ub_extra, dtype=float), False)
            child._integral = True
        elif self._integral is False:  # no integer form: stay on HiGHS without retrying the scaling
            child._integral = False
        return child

    def feasible(self, X: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Which rows of the (m, n) 0/1 array ``X`` satisfy every constraint."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        ok = np.ones(X.shape[0], dtype=bool)
        if self.A_eq is not None:
            ok &= np.all(np.abs(self.A_eq @ X.T - self.b_eq[:, None]) <= tol, axis=0)
        if self.A_ub is not None:
            ok &= np.all(self.A_ub @ X.T <= self.b_ub[:, None] + tol, axis=0)
        return ok


# --------------------------------------------------------------------------- scipy / HiGHS
def _highs_core():
    """scipy's own HiGHS binding when it offers callbacks (scipy >= 1.15), else None."""
    try:
        import scipy.optimize._highspy._core as core
    except ImportError:  # pragma: no cover - older scipy
        return None
    if not all(hasattr(core, name) for name in ("_Highs", "HighsLp", "cb")):  # pragma: no cover
        return None
    return core


def highs_solve(c: np.ndarray, A, lower: np.ndarray, upper: np.ndarray, integral: bool,
                options: dict[str, object]) -> tuple[str, np.ndarray | None, float | None]:
    """``min <c, x>`` s.t. ``lower <= A x <= upper``, ``0 <= x`` (``<= 1`` and integral if ``integral``).

    HiGHS through scipy, interruptible: a SIGINT stops HiGHS from its interrupt callback and becomes a
    :class:`KeyboardInterrupt` (HiGHS releases the GIL but has no SIGINT handling of its own, so a plain
    ``milp``/``linprog`` call ignored Ctrl-C until it finished). Falls back to scipy's ``milp`` /
    ``linprog`` (not interruptible) when scipy's binding lacks callbacks.

    Returns
    -------
    status : {"optimal", "infeasible", ...}
        ``"optimal"``, ``"infeasible"``, or HiGHS' description of another outcome.
    x : ndarray or None
        The solution when optimal.
    objective : float or None
        ``<c, x>`` when optimal.
    """
    c = np.asarray(c, dtype=float)
    n = c.size
    A = sp.csc_matrix(A, dtype=float) if A is not None else sp.csc_matrix((0, n))
    core = _highs_core()
    if core is None:  # pragma: no cover - older scipy
        return _highs_fallback(c, A, lower, upper, integral, options)
    lp = core.HighsLp()
    lp.num_col_, lp.num_row_ = n, A.shape[0]
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, A.shape[0]
    lp.a_matrix_.format_ = core.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    lp.col_cost_ = c
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ones(n) if integral else np.full(n, np.inf)
    lp.row_lower_ = np.asarray(lower, dtype=float)
    lp.row_upper_ = np.asarray(upper, dtype=float)
    if integral:
        lp.integrality_ = [core.HighsVarType.kInteger] * n
    highs = core._Highs()
    highs.setOptionValue("output_flag", False)
    for key, value in options.items():
        highs.setOptionValue(key, value)
    if highs.passModel(lp) == core.HighsStatus.kError:
        raise RuntimeError("HiGHS refused the model")
    with interruptible() as interrupt:
        def on_interrupt_check(kind, message, data_out, data_in, user_data) -> None:
            if interrupt.requested:
                data_in.user_interrupt = True

        highs.setCallback(on_interrupt_check, None)
        for kind in (core.cb.HighsCallbackType.kCallbackMipInterrupt,
                     core.cb.HighsCallbackType.kCallbackSimplexInterrupt,
                     core.cb.HighsCallbackType.kCallbackIpmInterrupt):
            highs.startCallback(kind)
        highs.run()
    status = highs.getModelStatus()
    if status == core.HighsModelStatus.kOptimal:
        x = np.asarray(highs.getSolution().col_value, dtype=float)
        return "optimal", x, float(c @ x)
    if status == core.HighsModelStatus.kInfeasible:
        return "infeasible", None, None
    return highs.modelStatusToString(status), None, None


def _highs_fallback(c, A, lower, upper, integral, options):  # pragma: no cover - older scipy
    from scipy.optimize import Bounds, LinearConstraint, milp

    constraints = [LinearConstraint(A, lower, upper)] if A.shape[0] else []
    res = milp(c, integrality=np.full(c.size, int(integral)), bounds=Bounds(0, 1 if integral else np.inf),
               constraints=constraints, options={k: v for k, v in options.items() if k == "mip_rel_gap"})
    if res.status == 0 and res.x is not None:
        return "optimal", res.x, float(c @ res.x)
    return ("infeasible" if res.status == 2 else res.message), None, None


def solve_highs(ilp: ILP, c: np.ndarray) -> np.ndarray | None:
    """``max <c, x>`` with HiGHS branch-and-cut (scipy's HiGHS; interruptible, see :func:`highs_solve`)."""
    rows, lower, upper = [], [], []
    if ilp.A_eq is not None:
        rows.append(ilp.A_eq)
        lower.append(ilp.b_eq)
        upper.append(ilp.b_eq)
    if ilp.A_ub is not None:
        rows.append(ilp.A_ub)
        lower.append(np.full(ilp.b_ub.size, -np.inf))
        upper.append(ilp.b_ub)
    A = sp.vstack(rows, format="csc") if rows else None
    status, x, _ = highs_solve(-np.asarray(c, dtype=float), A,
                               np.concatenate(lower) if lower else np.zeros(0),
                               np.concatenate(upper) if upper else np.zeros(0), True,
                               {"mip_rel_gap": 0.0, "presolve": "on"})
    if status == "infeasible":
        return None
    if x is None:
        raise RuntimeError(f"HiGHS milp failed: {status}")
    return np.rint(x).astype(np.int64)


# --------------------------------------------------------------------------- OR-Tools SCIP
def solve_scip(ilp: ILP, c: np.ndarray) -> np.ndarray | None:
    """``max <c, x>`` with SCIP through OR-Tools' ``pywraplp`` (gaps set to zero)."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        raise NotSupportedError("this OR-Tools build has no SCIP solver")
    x = [solver.BoolVar(f"x{j}") for j in range(ilp.n)]
    for A, b, equal in ((ilp.A_eq, ilp.b_eq, True), (ilp.A_ub, ilp.b_ub, False)):
        if A is None:
            continue
        for r in range(A.shape[0]):
            lo = b[r] if equal else -solver.infinity()
            row = solver.Constraint(lo, b[r])
            for j, a in zip(A.indices[A.indptr[r]:A.indptr[r + 1]], A.data[A.indptr[r]:A.indptr[r + 1]]):
                row.SetCoefficient(x[j], float(a))
    objective = solver.Objective()
    for j, cj in enumerate(np.asarray(c, dtype=float)):
        objective.SetCoefficient(x[j], float(cj))
    objective.SetMaximization()
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    # SCIP's own SIGINT handler would only end this solve early (then "status FEASIBLE" errors); ours stops
    # it and raises KeyboardInterrupt
    solver.SetSolverSpecificParametersAsString("misc/catchctrlc = FALSE\n")
    with interruptible(solver.InterruptSolve):  # Solve releases the GIL; InterruptSolve stops SCIP
        status = solver.Solve(params)
    if status == pywraplp.Solver.INFEASIBLE:
        return None
    if status != pywraplp.Solver.OPTIMAL:
        raise RuntimeError(f"SCIP returned status {status}")
    return np.array([round(v.solution_value()) for v in x], dtype=np.int64)


# --------------------------------------------------------------------------- OR-Tools CP-SAT
def _integer_row(values: np.ndarray, rhs: float) -> tuple[list[int], int]:
    # the smallest common denominator that makes the row and its right-hand side integral, exactly
    fractions = [Fraction(float(v)).limit_denominator(MAX_DENOMINATOR) for v in (*values, rhs)]
    for f, v in zip(fractions, (*values, rhs)):
        if abs(float(f) - float(v)) > 1e-12 * max(1.0, abs(float(v))):
            raise NotSupportedError(f"CP-SAT needs rational constraint coefficients with denominators <= "
                                    f"{MAX_DENOMINATOR}; {v!r} is not one (use solver='highs' or 'scip')")
    denom = 1
    for f in fractions:
        denom = denom * f.denominator // np.gcd(denom, f.denominator)
    ints = [int(f * denom) for f in fractions]
    return ints[:-1], ints[-1]


def _integer_rows(A, b: np.ndarray, equal: bool) -> list[tuple[np.ndarray, list[int], int, bool]]:
    A = A.tocsr()
    rows = []
    for r in range(A.shape[0]):
        cols = A.indices[A.indptr[r]:A.indptr[r + 1]]
        coefs, rhs = _integer_row(A.data[A.indptr[r]:A.indptr[r + 1]], b[r])
        rows.append((cols, coefs, rhs, equal))
    return rows


def _cpsat_rows(ilp: ILP) -> list[tuple[np.ndarray, list[int], int, bool]]:
    if ilp._cpsat_rows is None:
        rows = []
        for A, b, equal in ((ilp.A_eq, ilp.b_eq, True), (ilp.A_ub, ilp.b_ub, False)):
            if A is not None:
                rows += _integer_rows(A, b, equal)
        ilp._cpsat_rows = rows
    return ilp._cpsat_rows


def cpsat_objective(c: np.ndarray) -> tuple[np.ndarray, float]:
    """Integer objective for CP-SAT and its scale: ``c`` itself when it is integral (exact), else
    ``round(scale * c)`` with ``scale = R / max|c|``."""
    c = np.asarray(c, dtype=float)
    top = float(np.max(np.abs(c), initial=0.0))
    if np.all(c == np.rint(c)) and top * max(c.size, 1) <= OBJECTIVE_RESOLUTION:
        return c.astype(np.int64), 1.0
    factor = OBJECTIVE_RESOLUTION / top if top > 0 else 1.0
    return np.rint(c * factor).astype(np.int64), factor


def solve_cpsat(ilp: ILP, c: np.ndarray) -> np.ndarray | None:
    """``max <c, x>`` with CP-SAT on the integer-scaled program (see the module docstring)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = [model.NewBoolVar(f"x{j}") for j in range(ilp.n)]
    for cols, coefs, rhs, equal in _cpsat_rows(ilp):
        expr = sum(a * x[j] for j, a in zip(cols, coefs))
        if equal:
            model.Add(expr == rhs)
        else:
            model.Add(expr <= rhs)
    obj, _ = cpsat_objective(c)
    model.Maximize(sum(int(a) * x[j] for j, a in enumerate(obj) if a != 0))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # deterministic, and the machine's cores belong to the caller
    # CP-SAT's own SIGINT handler only stops the search (the run then went on, or failed on status
    # UNKNOWN); ours stops it and raises KeyboardInterrupt
    solver.parameters.catch_sigint_signal = False
    with interruptible(solver.stop_search):
        status = solver.Solve(model)
    if status == cp_model.INFEASIBLE:
        return None
    if status != cp_model.OPTIMAL:
        raise RuntimeError(f"CP-SAT returned status {solver.StatusName(status)}")
    return np.array([solver.Value(v) for v in x], dtype=np.int64)


def solve_auto(ilp: ILP, c: np.ndarray) -> np.ndarray | None:
    """CP-SAT when every constraint row scales to integers exactly, else HiGHS (the measured order)."""
    if ilp._integral is None:
        try:
            _cpsat_rows(ilp)
            ilp._integral = True
        except NotSupportedError:
            ilp._integral = False
    return solve_cpsat(ilp, c) if ilp._integral else solve_highs(ilp, c)


BACKENDS: dict[str, Callable[[ILP, np.ndarray], np.ndarray | None]] = {
    "auto": solve_auto, "highs": solve_highs, "scip": solve_scip, "cpsat": solve_cpsat,
}


def get_backend(name: str) -> Callable[[ILP, np.ndarray], np.ndarray | None]:
    """The solve function of a backend name (``"auto"``, ``"highs"``, ``"scip"`` or ``"cpsat"``)."""
    try:
        return BACKENDS[str(name).lower()]
    except KeyError:
        raise InvalidInputError(f"unknown ILP solver {name!r}; use one of {', '.join(BACKENDS)}") from None
