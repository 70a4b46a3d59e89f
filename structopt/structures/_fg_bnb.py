"""Exact MAP on a factor graph by branch-and-bound over AD3 (``FactorGraph.bnb`` delegates here)."""

from __future__ import annotations

import heapq
import itertools
import time

import numpy as np

from structopt.structures._fg_types import AD3State, FactorGraphPotentials, Graph, MAPInterrupted, MAPSolution


def bnb(fg: Graph, theta: FactorGraphPotentials, *, time_limit: float | None = None, node_iter: int = 3000,
        max_nodes: int = 100_000, tol: float = 1e-9, state: AD3State | None = None) -> MAPSolution:
    # branch-and-bound on checked potentials (each node runs the unchecked AD3 entry point)
    t0 = time.perf_counter()
    fl = fg.flat
    counter = itertools.count()
    best_y: np.ndarray | None = None
    best = -np.inf
    iterations = 0
    nodes = 0

    def remaining() -> float | None:
        return None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 0.0)

    def run(unary: np.ndarray, parent: AD3State | None, cap: float):
        nonlocal best, best_y, iterations, nodes
        th = FactorGraphPotentials(unary, theta.factors)
        warm = None
        if parent is not None:
            warm = parent.copy()
            warm.acount[:] = 0
        # the node ends as soon as its bound cannot beat the incumbent
        prune = best + tol * (1.0 + abs(best)) if np.isfinite(best) else -np.inf
        sol, st = fg._ad3(th, max_iter=node_iter, time_limit=remaining(), tol_gap=tol, tol_lp=1e-7, state=warm,
                           stop_upper=prune)
        iterations += sol.iterations
        nodes += 1
        if sol.labels is not None and sol.score > best:
            best, best_y = sol.score, sol.labels
        return min(sol.upper_bound, cap), sol, st

    open_nodes: list = []
    root_state = None
    # the bound of the node whose children are being solved (out of open_nodes meanwhile): inf until the
    # root is solved, so that an interrupt never reports a bound that was not proven
    expanding = np.inf
    try:
        bound, sol, st = run(theta.unary.copy(), state, np.inf)
        root_state = st.copy()
        expanding = -np.inf
        heapq.heappush(open_nodes, (-bound, next(counter), theta.unary.copy(), st, sol))
        status = "optimal"
        while open_nodes:
            neg_bound, _, unary, st, sol = open_nodes[0]
            bound = -neg_bound
            if bound <= best + tol * (1.0 + abs(bound)):
                open_nodes.clear()  # best-bound order: every open node is pruned
                break
            expanding = bound  # before the pop: an interrupt in between must not lose the node's bound
            heapq.heappop(open_nodes)
            if time_limit is not None and time.perf_counter() - t0 >= time_limit:
                heapq.heappush(open_nodes, (neg_bound, next(counter), unary, st, sol))
                status = "time_limit"
                break
            if nodes >= max_nodes:
                heapq.heappush(open_nodes, (neg_bound, next(counter), unary, st, sol))
                status = "node_limit"
                break
            p = st.p
            allowed = np.isfinite(unary)
            pm = np.where(allowed, p, -1.0)
            top = np.maximum.reduceat(pm, fl.voff[:-1])
            n_allowed = np.add.reduceat(allowed.astype(np.int64), fl.voff[:-1])
            frac = np.where(n_allowed > 1, 1.0 - top, -1.0)
            i = int(np.argmax(frac))
            if frac[i] < 0:
                expanding = -np.inf
                continue  # every variable is clamped: the node's bound is its only labeling's score
            block = pm[fl.voff[i]:fl.voff[i + 1]]
            s = int(np.argmax(block))
            fix = unary.copy()
            keep = fix[fl.voff[i] + s]
            fix[fl.voff[i]:fl.voff[i + 1]] = -np.inf
            fix[fl.voff[i] + s] = keep
            drop = unary.copy()
            drop[fl.voff[i] + s] = -np.inf
            for child in (fix, drop):
                c_bound, c_sol, c_st = run(child, st, bound)
                if c_bound == -np.inf or c_bound <= best + tol * (1.0 + abs(c_bound)):
                    continue
                if c_sol.labels is not None and c_sol.score >= c_bound - tol * (1.0 + abs(c_bound)):
                    continue
                heapq.heappush(open_nodes, (-c_bound, next(counter), child, c_st, c_sol))
            expanding = -np.inf
    except KeyboardInterrupt as interrupt:  # the incumbent, and the largest bound of the open nodes
        if isinstance(interrupt, MAPInterrupted):  # inside a node's AD3: its labeling may beat the incumbent
            partial = interrupt.solution
            if partial.labels is not None and partial.score > best:
                best, best_y = partial.score, partial.labels
        upper = max([best, expanding] + [-n[0] for n in open_nodes])
        raise MAPInterrupted(MAPSolution(best_y, best, float(upper), False, "interrupted", "bnb",
                                         time.perf_counter() - t0, iterations, nodes=nodes,
                                         root_state=root_state)) from interrupt
    upper = max([best] + [-n[0] for n in open_nodes]) if open_nodes else best
    if not open_nodes and status == "optimal" and best_y is None:
        status, upper = "infeasible", -np.inf
    optimal = status == "optimal" and best_y is not None
    if optimal:
        upper = max(upper, best)
    return MAPSolution(best_y, best, float(upper), optimal, status, "bnb", time.perf_counter() - t0,
                       iterations, nodes=nodes, root_state=root_state)
