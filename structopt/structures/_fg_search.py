"""Labelings from relaxed answers and their combination: rounding with ICM, the feasibility repair of an
empty rounding, and ``"auto"`` (AD3, then an exact search while a gap remains)."""

from __future__ import annotations

import time

import numpy as np

from structopt.structures import _ad3_kernels as K
from structopt.structures._fg_types import (
    AD3_TOL,
    AUTO_AD3_SHARE,
    PREDICT_NODES,
    PREDICT_SECONDS,
    REPAIR_SECONDS,
    ROUNDING_SWEEPS,
    FactorGraphPotentials,
    Graph,
    MAPInterrupted,
    MAPSolution,
    better,
    check_time_limit,
)


def round_relaxed(fg: Graph, theta: FactorGraphPotentials, p: np.ndarray, qt: np.ndarray
                  ) -> tuple[np.ndarray, float]:
    """The best of AD3's two roundings of a relaxed point (per variable; sequential along the tables'
    support), each improved by a local search (ICM): the labeling and its exact score.

    On the frustrated UAI grids the LP optimum is 1/2 almost everywhere, where per-variable
    rounding alone is close to a coin toss (benchmarks/map_default_results.md)."""
    fl = fg.flat
    vallow = np.isfinite(theta.unary)
    best_y, best = np.zeros(fl.n_vars, dtype=np.int64), -np.inf
    for sequential in (False, True):
        y = np.zeros(fl.n_vars, dtype=np.int64)
        if sequential:
            K.round_sequential(p, qt, fl.order, fl.efac, fl.n_vars, fl.vstates, fl.voff, fl.vptr, fl.vedge, vallow,
                               fl.fkind, fl.fparam, fl.fptr, fl.evar, fl.toff, y)
        else:
            K.round_and_repair(p, fl.n_vars, fl.voff, vallow, fl.fkind, fl.fparam, fl.fptr, fl.evar, y)
        K.local_search(y, fl.n_vars, fl.vstates, fl.voff, fl.vptr, fl.vedge, fl.efac, theta.unary, fl.fkind,
                       fl.fparam, fl.fptr, fl.evar, theta.factors, fl.toff, ROUNDING_SWEEPS)
        score = fg._score(theta, y)
        if score > best:
            best_y, best = y, score
    return best_y, best


def repair(fg: Graph, theta: FactorGraphPotentials, sol: MAPSolution, time_limit: float | None) -> MAPSolution:
    """``sol`` with a labeling whenever the hard factors allow one: when the rounding found none (and
    infeasibility is not proven), an exact search for a labeling that satisfies the hard factors
    (-inf entries and logic factors; scores ignored: CP-SAT, or branch-and-bound with structured
    factors), improved by ICM. Proven infeasible: status ``"infeasible"`` and bound ``-inf``."""
    if sol.labels is not None or sol.status == "infeasible":
        return sol
    t0 = time.perf_counter()
    hard = FactorGraphPotentials(np.where(np.isfinite(theta.unary), 0.0, -np.inf),
                                 np.where(np.isfinite(theta.factors), 0.0, -np.inf))
    # a search cut to nothing would leave the answer empty: at least REPAIR_SECONDS
    limit = None if time_limit is None else max(time_limit, REPAIR_SECONDS)
    found = fg._bnb(hard, time_limit=limit) if fg._structs else fg.cpsat(hard, time_limit=limit)
    sol.time += time.perf_counter() - t0
    if found.status == "infeasible":
        sol.status, sol.upper_bound, sol.optimal, sol.score = "infeasible", -np.inf, True, -np.inf
        return sol
    if found.labels is None:
        return sol
    fl = fg.flat
    y = found.labels.copy()
    K.local_search(y, fl.n_vars, fl.vstates, fl.voff, fl.vptr, fl.vedge, fl.efac, theta.unary, fl.fkind,
                   fl.fparam, fl.fptr, fl.evar, theta.factors, fl.toff, ROUNDING_SWEEPS)
    score = fg._score(theta, y)
    if np.isfinite(score):
        sol.labels, sol.score = y, score
        sol.upper_bound = max(sol.upper_bound, score)
        sol.optimal = bool(score >= sol.upper_bound - 1e-9 * (1.0 + abs(sol.upper_bound)))
    return sol


def auto(fg: Graph, theta: FactorGraphPotentials, *, time_limit: float | None = None, tol: float = 1e-9,
         num_workers: int = 1) -> MAPSolution:
    t0 = time.perf_counter()
    check_time_limit("time_limit", time_limit)
    theta = fg.check_theta(theta)
    share = None if time_limit is None else AUTO_AD3_SHARE * time_limit
    try:
        first, state = fg._ad3(theta, time_limit=share, tol_gap=tol)
    except MAPInterrupted as interrupt:
        interrupt.solution.method = "auto"
        raise
    if first.optimal or first.status == "infeasible":
        first.method, first.time = "auto", time.perf_counter() - t0
        return first
    left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
    if left is not None and left <= 0:
        first = fg._repair(theta, first, left)
        first.method, first.time = "auto", time.perf_counter() - t0
        return first
    try:
        if fg._structs:
            second = fg._bnb(theta, time_limit=left, tol=tol, state=state)
        else:
            second = fg.cpsat(theta, time_limit=left, tol=tol, num_workers=num_workers, hint=first.labels)
    except KeyboardInterrupt as interrupt:  # also while CP-SAT's model is being built: AD3's answer stands
        partial = interrupt.solution if isinstance(interrupt, MAPInterrupted) else MAPSolution(
            None, -np.inf, np.inf, False, "interrupted", "cpsat")
        combined = fg._combine(first, partial, t0, tol)
        combined.status, combined.optimal = "interrupted", False
        raise MAPInterrupted(combined) from interrupt
    # neither found a labeling in time (and none is proven impossible): the feasibility search's, if any
    return fg._repair(theta, fg._combine(first, second, t0, tol), 0.0)


def combine(first: MAPSolution, second: MAPSolution, t0: float, tol: float) -> MAPSolution:
    # two answers on the same potentials: the better labeling, the smaller of two certified bounds
    best = better(first, second)
    if second.status == "infeasible":
        return MAPSolution(None, -np.inf, -np.inf, True, "infeasible", "auto", time.perf_counter() - t0,
                           first.iterations + second.iterations, nodes=second.nodes)
    upper = min(first.upper_bound, second.upper_bound)
    if best.labels is not None:
        upper = max(upper, best.score)  # AD3's bound is exact to its tolerance only
    optimal = second.optimal or bool(best.labels is not None and best.score >= upper - tol * (1.0 + abs(upper)))
    status = "optimal" if optimal else second.status
    return MAPSolution(best.labels, best.score, float(upper), optimal, status, "auto", time.perf_counter() - t0,
                       first.iterations + second.iterations, first.lp_value, first.marginals, second.nodes,
                       second.resolution, first.trace)


def ad3_bnb(fg: Graph, theta: FactorGraphPotentials, *, time_limit: float | None = None, tol: float = AD3_TOL,
            budget: float | None = PREDICT_SECONDS, max_nodes: int = PREDICT_NODES) -> MAPSolution:
    """Prediction's default: AD3 with its certificate, then branch-and-bound only while a gap remains, within
    ``budget`` seconds and ``max_nodes`` nodes (see ``FactorGraph.map``, method ``"ad3_bnb"``)."""
    t0 = time.perf_counter()
    try:
        first, state = fg._ad3(theta, time_limit=time_limit, tol_gap=tol, tol_lp=tol)
    except MAPInterrupted as interrupt:
        interrupt.solution.method = "ad3_bnb"
        raise
    if first.optimal or first.status == "infeasible":
        first.method, first.time = "ad3_bnb", time.perf_counter() - t0
        return first
    left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
    left = budget if left is None else (left if budget is None else min(left, budget))
    if left is not None and left <= 0:
        first = fg._repair(theta, first, left)
        first.method, first.time = "ad3_bnb", time.perf_counter() - t0
        return first
    try:
        second = fg._bnb(theta, time_limit=left, tol=tol, state=state, max_nodes=max_nodes)
    except MAPInterrupted as interrupt:  # AD3's answer stands beside the search's
        combined = combine(first, interrupt.solution, t0, tol)
        combined.status, combined.optimal, combined.method = "interrupted", False, "ad3_bnb"
        raise MAPInterrupted(combined) from interrupt
    sol = fg._repair(theta, combine(first, second, t0, tol), 0.0)
    sol.method = "ad3_bnb"
    return sol
