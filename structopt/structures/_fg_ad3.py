"""AD3 on a :class:`~structopt.structures.factor_graph.FactorGraph`: the compiled loop's driver (chunks, time
limit, Ctrl-C) and the Python driver of graphs with structured factors.

The kernels are :mod:`structopt.structures._ad3_kernels`; ``FactorGraph.ad3`` / ``_ad3`` delegate here."""

from __future__ import annotations

import time

import numpy as np

from structopt.structures import _ad3_kernels as K
from structopt.structures._ad3_structured import penalised, solve_qp
from structopt.structures._fg_types import (
    _STATUS_NAMES,
    AD3_TOL,
    AD3State,
    FactorGraphPotentials,
    Graph,
    MAPInterrupted,
    MAPSolution,
)


def new_state(fg: Graph, theta: FactorGraphPotentials, eta: float | None = None) -> AD3State:
    fl = fg.flat
    allowed = np.isfinite(theta.unary)
    counts = np.add.reduceat(allowed.astype(float), fl.voff[:-1])
    p = np.where(allowed, 1.0 / np.maximum(np.repeat(counts, fl.vstates), 1.0), 0.0)
    n_e = int(fl.eoff[-1])
    if eta is None:
        # η has the units of a score: start near the scores' spread (residual balancing adapts it).
        # 0.3 × the mean absolute deviation: fewer iterations than 0.1 on the UAI segmentations and
        # the 100-node Delaunay graphs of benchmarks/ad3_graph_calls.py, about as many on the grids
        eta = float(K.initial_eta(np.concatenate([theta.unary, theta.factors])))
    scal = np.zeros(K.N_SCAL)
    scal[K.S_ETA] = eta
    scal[K.S_UPPER] = np.inf
    scal[K.S_LOWER] = -np.inf
    ainv = np.zeros(int(K.inverse_layout(fl.fkind, fl.fptr, fl.aoff)[-1]))
    return AD3State(p, np.zeros(n_e), np.zeros(n_e), np.zeros(int(fl.toff[-1])),
                    np.zeros(int(fl.aoff[-1]), dtype=np.int64), np.zeros(int(fl.aoff[-1])),
                    np.zeros(fl.fkind.size, dtype=np.int64), scal, ainv=ainv)


def ad3(fg: Graph, theta: FactorGraphPotentials, *, max_iter: int = 100_000, time_limit: float | None = None,
        tol_gap: float = AD3_TOL, tol_lp: float = AD3_TOL, tol_res: float | None = None, bound_every: int = 10,
        max_inner: int = 50, tau: float = 1.0, adapt_eta: bool = True, eta_iters: int = 500,
        state: AD3State | None = None, chunk_seconds: float = 0.1, stop_upper: float = -np.inf,
        chunk_iters: int | None = None) -> tuple[MAPSolution, AD3State]:
    # AD3 on checked potentials: the internal entry point (branch-and-bound nodes, argmax, map). The chunks
    # (kernel calls) are sized by the clock, or ``chunk_iters`` iterations each (tests: the result does not
    # depend on them)
    t0 = time.perf_counter()
    fl = fg.flat
    if state is None:
        state = fg.new_state(theta)
    else:
        state.scal[K.S_UPPER], state.scal[K.S_LOWER], state.scal[K.S_ITER] = np.inf, -np.inf, 0.0
        n_inv = int(K.inverse_layout(fl.fkind, fl.fptr, fl.aoff)[-1])
        if state.ainv.size != n_inv:  # a state made without the carried inverses: they start empty (rebuilt)
            state.ainv = np.zeros(n_inv)
    n_entries = max(int(fl.eoff[-1]), 1)
    tol_res = n_entries * max(float(tol_lp), 1e-7) ** 2 if tol_res is None else float(tol_res)
    if fg._structs:
        return fg._ad3_structured(theta, state, t0, max_iter=max_iter, time_limit=time_limit, tol_gap=tol_gap,
                                  tol_lp=tol_lp, tol_res=tol_res, bound_every=bound_every, max_inner=max_inner,
                                  tau=tau, adapt_eta=adapt_eta and eta_iters > 0, eta_iters=eta_iters,
                                  stop_upper=stop_upper)
    best_y = np.zeros(fl.n_vars, dtype=np.int64)
    y_work = np.zeros(fl.n_vars, dtype=np.int64)
    pair_fast = fg._pair_fast(theta)
    # the first chunk by the kernel's estimate (K.first_chunk); later chunks are sized by the measured time.
    # Chunks only bound the time between two checks of the clock and of Ctrl-C: the run is the same bits
    if chunk_iters is None:
        chunk = int(K.first_chunk(pair_fast, fl.toff, fl.n_vars, float(chunk_seconds)))
    else:
        chunk = int(chunk_iters)
    done = 0
    status = K.RUNNING
    trace = []
    try:
        status, done = fg._ad3_loop(theta, state, t0, pair_fast, best_y, y_work, trace, chunk, max_iter=max_iter,
                                    time_limit=time_limit, tol_gap=tol_gap, tol_lp=tol_lp, tol_res=tol_res,
                                    bound_every=bound_every, max_inner=max_inner, tau=tau, adapt_eta=adapt_eta,
                                    eta_iters=eta_iters, chunk_seconds=chunk_seconds, stop_upper=stop_upper,
                                    fixed_chunks=chunk_iters is not None)
        if status == K.RUNNING:
            # the budget or the time limit stopped the run between two evaluations: evaluate its last iterate
            status = K.ad3_finish(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam,
                                  fl.fptr, fl.evar, fl.eoff, fl.toff, fl.order, fl.efac, theta.unary, theta.factors,
                                  pair_fast, state.p, state.lam, state.qe, state.qt, state.scal, best_y, y_work,
                                  tol_res, float(tol_gap), float(tol_lp), float(stop_upper))
            trace.append(_trace_entry(state, done, t0))
    except KeyboardInterrupt as interrupt:  # between chunks: the bound and best labeling are the last chunk's
        raise MAPInterrupted(fg._ad3_solution(state, best_y, "interrupted", int(state.scal[K.S_ITER]), tol_gap,
                                              t0, trace, theta)) from interrupt
    if status != K.RUNNING:
        name = _STATUS_NAMES[status]
    elif done >= max_iter:
        name = "max_iter"
    else:
        name = "time_limit"
    return fg._ad3_solution(state, best_y, name, done, tol_gap, t0, trace), state


def ad3_solution(fg: Graph, state: AD3State, best_y: np.ndarray, status: str, done: int, tol_gap: float,
                 t0: float, trace: list[dict], theta: FactorGraphPotentials | None = None) -> MAPSolution:
    # AD3's answer from its iterate; ``theta`` re-scores the labeling (after an interrupt, which may fall
    # between the update of the best score and that of the labeling)
    upper = float(state.scal[K.S_UPPER])
    lower = float(state.scal[K.S_LOWER])
    if theta is not None and np.isfinite(lower):
        lower = fg._score(theta, best_y)
    labels = best_y.copy() if np.isfinite(lower) else None
    optimal = bool(np.isfinite(lower) and lower >= upper - tol_gap * (1.0 + abs(upper)))
    marg = FactorGraphPotentials(state.p.copy(), state.qt.copy())
    return MAPSolution(labels, lower, upper, optimal, status, "ad3", time.perf_counter() - t0, done,
                       float(state.scal[K.S_PRIMAL]), marg, trace=trace)


def ad3_loop(fg: Graph, theta: FactorGraphPotentials, state: AD3State, t0: float, pair_fast: np.ndarray,
             best_y: np.ndarray, y_work: np.ndarray, trace: list[dict], chunk: int, *, max_iter: int,
             time_limit: float | None, tol_gap: float, tol_lp: float, tol_res: float, bound_every: int,
             max_inner: int, tau: float, adapt_eta: bool, eta_iters: int, chunk_seconds: float,
             stop_upper: float, fixed_chunks: bool = False) -> tuple[int, int]:
    # the compiled chunks until a stopping test, the budget or the time limit: (kernel status, iterations)
    fl = fg.flat
    done = 0
    status = K.RUNNING
    settled = np.ones(fl.fkind.size, dtype=np.bool_)  # the kernel's skipping of settled tables, across chunks
    while True:
        n_iter = int(min(chunk, max_iter - done))
        if n_iter <= 0:
            break
        c0 = time.perf_counter()
        status = K.ad3_chunk(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam,
                             fl.fptr, fl.evar, fl.eoff, fl.toff, fl.aoff, fl.order, fl.efac,
                             theta.unary, theta.factors, pair_fast,
                             state.p, state.lam, state.qe, state.qt, state.acfg, state.aw, state.acount, state.ainv,
                             state.scal, best_y, y_work, n_iter, int(bound_every), float(tau), tol_res,
                             float(tol_gap), float(tol_lp), int(max_inner), int(eta_iters) if adapt_eta else 0,
                             float(stop_upper), settled)
        spent = time.perf_counter() - c0
        done = int(state.scal[K.S_ITER])
        trace.append(_trace_entry(state, done, t0))
        if status != K.RUNNING:
            break
        if time_limit is not None and time.perf_counter() - t0 >= time_limit:
            break
        if fixed_chunks:
            continue
        # size the next chunk to about chunk_seconds, or what is left of the time limit (bounded growth)
        per_iter = spent / max(n_iter, 1)
        seconds = chunk_seconds if time_limit is None else min(chunk_seconds,
                                                               time_limit - (time.perf_counter() - t0))
        chunk = int(min(max(seconds / max(per_iter, 1e-9), 1), 4 * chunk + 10))
    return status, done


def _trace_entry(state: AD3State, done: int, t0: float) -> dict:
    # the bounds, primal objective and η of the last evaluation, at ``done`` iterations
    return {"iteration": done, "time": time.perf_counter() - t0, "upper": float(state.scal[K.S_UPPER]),
            "lower": float(state.scal[K.S_LOWER]), "primal": float(state.scal[K.S_PRIMAL]),
            "eta": float(state.scal[K.S_ETA])}


def pair_fast(fg: Graph, theta: FactorGraphPotentials) -> np.ndarray:
    # the tables whose local QP has the closed form (they depend on θ's -inf entries only)
    fl = fg.flat
    return K.binary_pairs(fl.fkind, fl.fptr, fl.evar, fl.voff, fl.vstates, np.isfinite(theta.unary),
                          theta.factors, fl.toff)


def ad3_structured(fg: Graph, theta: FactorGraphPotentials, state: AD3State, t0: float, *, max_iter: int,
                   time_limit: float | None, tol_gap: float, tol_lp: float, tol_res: float, bound_every: int,
                   max_inner: int, tau: float, adapt_eta: bool, eta_iters: int, stop_upper: float
                   ) -> tuple[MAPSolution, AD3State]:
    """AD3 on a graph with structured factors: one compiled iteration at a time.

    Before each iteration the structured factors' local QPs run here (active set on the
    structure's ``argmax``, or its ``project``) and write their copies; the kernel then solves
    the other factors, the consensus and the multipliers. Every ``bound_every`` iterations the
    bound g(λ) (the kernel's part plus one ``argmax`` per structured factor at the re-centred
    multipliers) and the roundings run here; the primal objective, the stopping tests and η's
    residual balancing are the kernel's own functions (``primal_value``, ``bound_status``,
    ``lp_status``, ``rebalance_eta``), so both paths share one definition.
    """
    fl = fg.flat
    vallow = np.isfinite(theta.unary)
    uz = np.where(vallow, theta.unary, 0.0)
    deg = np.maximum(fl.deg, 1)
    share = uz / np.repeat(deg, fl.vstates)
    # per structured factor: its edges' entries in λ / qe and its variables' entries in p
    parts = []
    for f, sf in fg._structs.items():
        e_ent = np.concatenate([np.arange(fl.eoff[e], fl.eoff[e + 1]) for e in range(fl.fptr[f], fl.fptr[f + 1])])
        p_ent = np.concatenate([np.arange(fl.voff[v], fl.voff[v + 1]) for v in sf.scope])
        parts.append((f, sf, e_ent, p_ent, theta.factors[fl.toff[f]:fl.toff[f + 1]]))
    pair_fast = fg._pair_fast(theta)
    work = np.zeros(int(fl.eoff[-1]))
    best_y = np.zeros(fl.n_vars, dtype=np.int64)
    y_work = np.zeros(fl.n_vars, dtype=np.int64)
    scal = state.scal
    status = "running"
    trace = []
    done = 0
    try:
        while done < max_iter:
            eta = float(scal[K.S_ETA])
            for f, sf, e_ent, p_ent, block in parts:
                a = state.p[p_ent] + (share[p_ent] + state.lam[e_ent]) / eta
                act = state.struct.get(f) or sf.new_active_set()
                mu, z, state.struct[f] = solve_qp(sf, block, a, vallow[p_ent], eta, act, max_inner)
                state.qe[e_ent] = mu
                state.qt[fl.toff[f]:fl.toff[f + 1]] = z
            K.ad3_chunk(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam, fl.fptr,
                        fl.evar, fl.eoff, fl.toff, fl.aoff, fl.order, fl.efac, theta.unary, theta.factors,
                        pair_fast, state.p, state.lam, state.qe, state.qt, state.acfg, state.aw, state.acount,
                        state.ainv, scal, best_y, y_work, 1, 0, float(tau), tol_res, float(tol_gap), float(tol_lp),
                        int(max_inner), 0, float(stop_upper), np.ones(fl.fkind.size, dtype=np.bool_))
            done = int(scal[K.S_ITER])
            if done % bound_every and done < max_iter and not (time_limit is not None and
                                                               time.perf_counter() - t0 >= time_limit):
                continue
            # ---- bound: the kernel's factors, then each structured factor's max at the re-centred λ
            g = float(K.dual_bound(fl.n_vars, fl.deg, fl.vptr, fl.vedge, fl.voff, vallow, uz, fl.fkind, fl.fparam,
                                   fl.fptr, fl.evar, fl.eoff, fl.vstates, theta.factors, fl.toff, state.lam, work,
                                   pair_fast))
            dual_labels = []
            for _f, sf, e_ent, p_ent, block in parts:
                lab, _, _, val = sf.argmax(block, penalised(work[e_ent], vallow[p_ent], block))
                g += val
                dual_labels.append(lab)
            scal[K.S_UPPER] = min(scal[K.S_UPPER], g)
            # ---- roundings: per variable + repair, each structured factor's nearest output to p
            K.round_and_repair(state.p, fl.n_vars, fl.voff, vallow, fl.fkind, fl.fparam, fl.fptr, fl.evar, y_work)
            candidates = [y_work.copy(), y_work.copy()]
            for (_f, sf, _e, p_ent, block), lab in zip(parts, dual_labels, strict=True):
                w = 1e3 * (1.0 + np.abs(block).sum())
                near, *_ = sf.argmax(block, penalised(w * state.p[p_ent], vallow[p_ent], block))
                candidates[0][list(sf.scope)] = near
                candidates[1][list(sf.scope)] = lab
            for y in candidates:
                K.local_search(y, fl.n_vars, fl.vstates, fl.voff, fl.vptr, fl.vedge, fl.efac, theta.unary, fl.fkind,
                               fl.fparam, fl.fptr, fl.evar, theta.factors, fl.toff, 20)
                val = fg._score(theta, y)
                if val > scal[K.S_LOWER]:
                    scal[K.S_LOWER] = val
                    best_y[:] = y
            # ---- primal objective of the factor copies: the kernel's factors, then the structured blocks
            prim = float(K.primal_value(fl.n_vars, fl.deg, fl.voff, fl.vstates, fl.evar, fl.eoff, uz, fl.fkind,
                                        theta.factors, fl.toff, state.p, state.qe, state.qt))
            for f, _sf, _e, _p, block in parts:
                prim += float(block @ state.qt[fl.toff[f]:fl.toff[f + 1]])
            scal[K.S_PRIMAL] = prim
            upper, lower = float(scal[K.S_UPPER]), float(scal[K.S_LOWER])
            r_p, r_d = float(scal[K.S_RP]), float(scal[K.S_RD])
            trace.append({"iteration": done, "time": time.perf_counter() - t0, "upper": upper, "lower": lower,
                          "primal": prim, "eta": eta})
            # the kernel's stopping tests and η schedule (one definition, _ad3_kernels)
            code = K.bound_status(upper, lower, float(tol_gap), float(stop_upper))
            if code == K.RUNNING:
                code = K.lp_status(upper, lower, prim, r_p, r_d, float(tol_res), float(tol_lp))
            if code != K.RUNNING:
                status = _STATUS_NAMES[code]
            elif time_limit is not None and time.perf_counter() - t0 >= time_limit:
                status = "time_limit"
            if status != "running":
                break
            if adapt_eta and done < eta_iters:
                scal[K.S_ETA] = K.rebalance_eta(eta, r_p, r_d)
    except KeyboardInterrupt as interrupt:  # between iterations: the last evaluation's bound and labeling
        raise MAPInterrupted(fg._ad3_solution(state, best_y, "interrupted", done, tol_gap, t0, trace,
                                                theta)) from interrupt
    if status == "running":
        status = "max_iter"
    return fg._ad3_solution(state, best_y, status, done, tol_gap, t0, trace), state
