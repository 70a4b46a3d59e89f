"""Exact MAP on a factor graph with OR-Tools CP-SAT, scores scaled to integers (``FactorGraph.cpsat``)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from structopt.errors import NotSupportedError
from structopt.structures import _ad3_kernels as K
from structopt.structures._fg_types import FactorGraphPotentials, Graph, MAPInterrupted, MAPSolution, check_time_limit


def cpsat(fg: Graph, theta: FactorGraphPotentials, *, time_limit: float | None = None, resolution_bits: int = 30,
          num_workers: int = 1, tol: float = 1e-9, relative_gap: float | None = None,
          hint: np.ndarray | None = None) -> MAPSolution:
    from ortools.sat.python import cp_model

    from structopt.interrupt import interruptible

    t0 = time.perf_counter()
    check_time_limit("time_limit", time_limit)
    theta = fg.check_theta(theta)
    if fg._structs:
        raise NotSupportedError("CP-SAT has no model of structured factors (a Structure's own constraints); "
                                "use method='bnb' (branch-and-bound over AD3) for exact MAP")
    fl = fg.flat
    n = fl.n_vars
    model = cp_model.CpModel()
    # literals: binary variables get one Boolean x (state 1 = x); others one Boolean per state
    lits: list[list[Any]] = []
    for i in range(n):
        S = int(fl.vstates[i])
        if S == 2:
            x = model.new_bool_var(f"x{i}")
            lits.append([x.Not(), x])
        else:
            bs = [model.new_bool_var(f"x{i}_{s}") for s in range(S)]
            model.add_exactly_one(bs)
            lits.append(bs)
    terms: list[tuple[float, Any]] = []  # (coefficient, literal or Boolean)
    const = 0.0
    u = theta.unary
    for i in range(n):
        block = u[fl.voff[i]:fl.voff[i + 1]]
        if not np.isfinite(block).any():
            return MAPSolution(None, -np.inf, -np.inf, False, "infeasible", "cpsat", time.perf_counter() - t0)
        top = float(block[np.isfinite(block)].max())
        const += top
        for s, val in enumerate(block):
            if not np.isfinite(val):
                model.add_bool_and([lits[i][s].Not()])
            elif val != top:
                terms.append((val - top, lits[i][s]))
    for f in range(fl.fkind.size):
        scope = fl.evar[fl.fptr[f]:fl.fptr[f + 1]]
        kind = int(fl.fkind[f])
        if kind != K.DENSE:
            lo, hi = map(int, K.logic_bounds(kind, int(fl.fparam[f]), scope.size))
            model.add_linear_constraint(sum(lits[int(v)][1] for v in scope), lo, hi)
            continue
        table = theta.factors[fl.toff[f]:fl.toff[f + 1]]
        finite = np.isfinite(table)
        if not finite.any():
            return MAPSolution(None, -np.inf, -np.inf, False, "infeasible", "cpsat", time.perf_counter() - t0)
        top = float(table[finite].max())
        const += top
        shape = tuple(int(fl.vstates[v]) for v in scope)
        if shape == (2, 2) and finite.all():
            # θ(y) - top = a + b·x1 + c·x2 + d·x1x2 with one product Boolean
            t00, t01, t10, t11 = (table - top).tolist()
            x1, x2 = lits[int(scope[0])][1], lits[int(scope[1])][1]
            if t00:
                const += t00
            if t10 - t00:
                terms.append((t10 - t00, x1))
            if t01 - t00:
                terms.append((t01 - t00, x2))
            d = t00 - t01 - t10 + t11
            if d:
                prod = model.new_bool_var(f"p{f}")
                if d > 0:  # maximisation pushes the product up: prod <= x1, prod <= x2 suffice
                    model.add_implication(prod, x1)
                    model.add_implication(prod, x2)
                else:  # prod >= x1 + x2 - 1
                    model.add_bool_or([x1.Not(), x2.Not(), prod])
                terms.append((d, prod))
            continue
        zs = []
        for c, states in enumerate(itertools.product(*(range(S) for S in shape))):
            z = model.new_bool_var(f"z{f}_{c}")
            if not finite[c]:
                model.add_bool_and([z.Not()])
            else:
                if table[c] != top:
                    terms.append((float(table[c]) - top, z))
            zs.append((z, states))
        model.add_exactly_one([z for z, _ in zs])
        for j, v in enumerate(scope):
            for s in range(shape[j]):
                model.add(sum(z for z, st in zs if st[j] == s) == lits[int(v)][s])
    if hint is not None:
        for i in range(n):
            if int(fl.vstates[i]) == 2:  # one Boolean: state 1
                model.add_hint(lits[i][1], int(hint[i]) == 1)
            else:
                for state, lit in enumerate(lits[i]):
                    model.add_hint(lit, int(hint[i]) == state)
    coefs = np.array([c for c, _ in terms])
    top = float(np.abs(coefs).max()) if coefs.size else 0.0
    scale = float(2.0 ** resolution_bits / top) if top > 0 else 1.0
    icoef = np.rint(coefs * scale).astype(np.int64)
    model.maximize(sum(int(c) * v for c, (_, v) in zip(icoef, terms) if c != 0))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.catch_sigint_signal = False
    # the LP relaxation inside the search is what makes frustrated grids and Potts models tractable
    solver.parameters.linearization_level = 2
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = float(time_limit)
    if relative_gap is not None:
        solver.parameters.relative_gap_limit = float(relative_gap)
    code = None
    try:
        with interruptible(solver.stop_search):
            code = solver.solve(model)
    except KeyboardInterrupt as interrupt:  # stopped by Ctrl-C: keep what the search had
        sol = fg._cpsat_answer(theta, solver, code, lits, const, scale, len(terms), tol, relative_gap,
                                 time.perf_counter() - t0)
        sol.status, sol.optimal = "interrupted", False
        raise MAPInterrupted(sol) from interrupt
    return fg._cpsat_answer(theta, solver, code, lits, const, scale, len(terms), tol, relative_gap,
                              time.perf_counter() - t0)


def cpsat_answer(fg: Graph, theta: FactorGraphPotentials, solver: Any, code: Any, lits: list, const: float,
                 scale: float, n_terms: int, tol: float, relative_gap: float | None, elapsed: float
                  ) -> MAPSolution:
    # CP-SAT's answer re-scored exactly, its bound widened by the rounding slack (``code`` None: no answer)
    from ortools.sat.python import cp_model

    n = fg.flat.n_vars
    slack = 0.5 * n_terms / scale
    if code is None:
        return MAPSolution(None, -np.inf, np.inf, False, "unknown", "cpsat", elapsed, resolution=1.0 / scale)
    if code == cp_model.INFEASIBLE:
        return MAPSolution(None, -np.inf, -np.inf, True, "infeasible", "cpsat", elapsed, resolution=1.0 / scale)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return MAPSolution(None, -np.inf, np.inf, False, solver.status_name(code).lower(), "cpsat", elapsed,
                           resolution=1.0 / scale)
    y = np.empty(n, dtype=np.int64)
    for i in range(n):
        y[i] = int(np.argmax([solver.boolean_value(lit) for lit in lits[i]]))
    score = fg.score_labels(theta, y)
    upper = const + solver.best_objective_bound / scale + slack
    optimal = code == cp_model.OPTIMAL and score >= upper - 2 * slack - tol * (1.0 + abs(upper))
    if code == cp_model.OPTIMAL:
        status = "gap_limit" if relative_gap and score < upper - 2 * slack - tol * (1.0 + abs(upper)) else "optimal"
    else:
        status = "time_limit"
    return MAPSolution(y, score, float(max(upper, score)), bool(optimal), status, "cpsat", elapsed,
                       resolution=1.0 / scale)
