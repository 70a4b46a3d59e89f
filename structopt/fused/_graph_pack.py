"""The graph family's packing and model kernels: a GraphModel over a whole problem, its oracle the relaxed AD3.

The kernels work on a :class:`GraphPack`: every example's node and edge features, node loss costs and
the flat layout of its factor graph (one variable per node, one table per edge: the arrays of
``FactorGraph.flat``), concatenated with per-example offsets. Flat potentials and compact statistics of
example i share one layout: the (N, S) unary block, then the (E, S, S) pairwise block (row-major, rows
the first node's state), as ``GraphStructure`` flattens them for its factor graph.

``graph_oracle(i, w, pack, theta_out, stats_out) -> loss``
    the relaxed loss-augmented oracle of example i (``GraphStructure.argmax`` with ``exact=False``):
    AD3 from a fresh iterate at the training tolerances (``AD3_TIGHT``), the same bits as the Python driver's
    run (AD3's iterates do not depend on the chunks a run is cut into); the one-hot statistics of AD3's
    labeling when its certificate holds, else its relaxed point (node and table marginals). Writes ``A_i w``
    (flat) and the statistics, returns the loss (its linear form ``<c_i, mu> + const_i``, the Hamming count at
    a labeling).
``graph_axpy(i, d, scale, out, pack)``
    ``out += scale A_i^T d``.
``graph_sqnorm(i, d, pack)``
    ``||A_i^T d||^2``.

The solver loops over these kernels are in :mod:`structopt.fused._graph_passes`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from structopt.structures import _ad3_kernels as K

#: the relaxed training oracle's settings (FactorGraph.relaxed_oracle: AD3 at AD3_TIGHT, the ad3 defaults)
TOL = 1e-9
MAX_ITER = 100_000
BOUND_EVERY = 10
MAX_INNER = 50
ETA_ITERS = 500
CHUNK_SECONDS = 0.1


class GraphPack(NamedTuple):
    """A graph problem packed for the kernels (numba reads the fields by name)."""

    n_states: int
    n_features: int
    n_edge_features: int
    pair_index: np.ndarray   # (S, S) int64: entry of pairwise weight (a, b) within a block row (symmetric: triangle)
    pair_width: int          # S*S, or S(S+1)/2 when symmetric
    symmetric: bool
    node_ptr: np.ndarray     # (n+1,) node offsets of the examples
    edge_ptr: np.ndarray     # (n+1,) edge offsets
    nodes: np.ndarray        # (sum N, F) node features
    edge_features: np.ndarray  # (sum E, G)
    costs: np.ndarray        # (sum N, S) per-node loss costs
    const: np.ndarray        # (n,) constant loss terms
    # the factor graphs' flat layouts (FactorGraph.flat), local indices, concatenated
    vstates: np.ndarray
    voff: np.ndarray
    deg: np.ndarray
    vptr: np.ndarray
    vedge: np.ndarray
    fkind: np.ndarray
    fparam: np.ndarray
    fptr: np.ndarray
    evar: np.ndarray
    eoff: np.ndarray
    toff: np.ndarray
    aoff: np.ndarray
    order: np.ndarray
    efac: np.ndarray


def pack_graph_problem(model: Any, X: list, costs: list, consts: np.ndarray, graphs: list) -> GraphPack:
    """Pack a GraphModel problem: inputs ``X``, per-node costs ``(N_i, S)``, constant loss terms and each
    example's factor graph (its ``flat`` layout is copied, local indices kept)."""
    S = int(model.n_states)
    n = len(X)
    sizes_n = np.array([x.nodes.shape[0] for x in X], dtype=np.int64)
    sizes_e = np.array([x.edges.shape[0] for x in X], dtype=np.int64)
    node_ptr = np.concatenate([[0], np.cumsum(sizes_n)]).astype(np.int64)
    edge_ptr = np.concatenate([[0], np.cumsum(sizes_e)]).astype(np.int64)
    if model.symmetric:
        index = np.zeros((S, S), dtype=np.int64)
        i, j = np.triu_indices(S)
        index[i, j] = np.arange(i.size)
        index[j, i] = np.arange(i.size)
        width = S * (S + 1) // 2
    else:
        index = np.arange(S * S, dtype=np.int64).reshape(S, S)
        width = S * S
    G = int(model.n_edge_features)
    flats = [fg.flat for fg in graphs]

    def cat(name: str) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([getattr(fl, name) for fl in flats]), dtype=np.int64)

    return GraphPack(
        S, int(model.n_node_features), G, index, width, bool(model.symmetric), node_ptr, edge_ptr,
        np.ascontiguousarray(np.concatenate([x.nodes for x in X]), dtype=np.float64),
        np.ascontiguousarray(np.concatenate([x.edge_features for x in X]).reshape(int(edge_ptr[-1]), G),
                             dtype=np.float64),
        np.ascontiguousarray(np.concatenate(costs).reshape(-1, S), dtype=np.float64),
        np.asarray(consts, dtype=np.float64).reshape(n),
        cat("vstates"), cat("voff"), cat("deg"), cat("vptr"), cat("vedge"), cat("fkind"), cat("fparam"),
        cat("fptr"), cat("evar"), cat("eoff"), cat("toff"), cat("aoff"), cat("order"), cat("efac"))


@njit(cache=True)
def graph_potentials(i, w, pk, theta):
    """``theta[:size] = A_i w``: node scores ``x_v W_unary``, then edge tables ``sum_g f_e[g] W_pairwise[g]``."""
    S, F, G = pk.n_states, pk.n_features, pk.n_edge_features
    n0, n1 = pk.node_ptr[i], pk.node_ptr[i + 1]
    e0, e1 = pk.edge_ptr[i], pk.edge_ptr[i + 1]
    N = n1 - n0
    for v in range(N):
        for s in range(S):
            theta[v * S + s] = 0.0
        for f in range(F):
            x = pk.nodes[n0 + v, f]
            if x != 0.0:
                for s in range(S):
                    theta[v * S + s] += x * w[f * S + s]
    base = N * S
    SS = S * S
    p0 = F * S
    for e in range(e1 - e0):
        row = base + e * SS
        for j in range(SS):
            theta[row + j] = 0.0
        for g in range(G):
            x = pk.edge_features[e0 + e, g]
            if x != 0.0:
                wg = p0 + g * pk.pair_width
                for a in range(S):
                    for b in range(S):
                        theta[row + a * S + b] += x * w[wg + pk.pair_index[a, b]]
    return base + (e1 - e0) * SS


@njit(cache=True)
def graph_axpy(i, d, scale, out, pk):
    """``out += scale A_i^T d`` for compact statistics ``d`` of example i (the transpose of graph_potentials)."""
    S, F, G = pk.n_states, pk.n_features, pk.n_edge_features
    n0, n1 = pk.node_ptr[i], pk.node_ptr[i + 1]
    e0, e1 = pk.edge_ptr[i], pk.edge_ptr[i + 1]
    N = n1 - n0
    for v in range(N):
        for f in range(F):
            x = pk.nodes[n0 + v, f]
            if x != 0.0:
                for s in range(S):
                    out[f * S + s] += scale * (x * d[v * S + s])
    if G == 0:
        return
    base = N * S
    SS = S * S
    p0 = F * S
    block = np.zeros((G, SS))
    for e in range(e1 - e0):
        row = base + e * SS
        for g in range(G):
            x = pk.edge_features[e0 + e, g]
            if x != 0.0:
                for j in range(SS):
                    block[g, j] += x * d[row + j]
    for g in range(G):
        wg = p0 + g * pk.pair_width
        for a in range(S):
            for b in range(S):
                out[wg + pk.pair_index[a, b]] += scale * block[g, a * S + b]


@njit(cache=True)
def graph_sqnorm(i, d, pk):
    """``||A_i^T d||^2`` without a weight-sized vector."""
    S, F, G = pk.n_states, pk.n_features, pk.n_edge_features
    n0, n1 = pk.node_ptr[i], pk.node_ptr[i + 1]
    e0, e1 = pk.edge_ptr[i], pk.edge_ptr[i + 1]
    N = n1 - n0
    unary = np.zeros((F, S))
    for v in range(N):
        for f in range(F):
            x = pk.nodes[n0 + v, f]
            if x != 0.0:
                for s in range(S):
                    unary[f, s] += x * d[v * S + s]
    total = 0.0
    for f in range(F):
        for s in range(S):
            total += unary[f, s] * unary[f, s]
    if G == 0:
        return total
    base = N * S
    SS = S * S
    pair = np.zeros((G, pk.pair_width))
    for e in range(e1 - e0):
        row = base + e * SS
        for g in range(G):
            x = pk.edge_features[e0 + e, g]
            if x != 0.0:
                for a in range(S):
                    for b in range(S):
                        pair[g, pk.pair_index[a, b]] += x * d[row + a * S + b]
    for g in range(G):
        for j in range(pk.pair_width):
            total += pair[g, j] * pair[g, j]
    return total


@njit(cache=True)
def graph_oracle(i, w, pk, theta, stats):
    """The relaxed loss-augmented oracle of example i (see the module docstring); returns its loss."""
    S = pk.n_states
    n0, n1 = pk.node_ptr[i], pk.node_ptr[i + 1]
    e0, e1 = pk.edge_ptr[i], pk.edge_ptr[i + 1]
    N = n1 - n0
    E = e1 - e0
    size = graph_potentials(i, w, pk, theta)
    nu = N * S
    u = np.empty(nu)
    for v in range(N):
        for s in range(S):
            u[v * S + s] = theta[v * S + s] + pk.costs[n0 + v, s]
    tab = theta[nu:size]
    # the example's factor graph
    vstates = pk.vstates[n0:n1]
    voff = pk.voff[n0 + i:n1 + i + 1]
    deg = pk.deg[n0:n1]
    vptr = pk.vptr[n0 + i:n1 + i + 1]
    vedge = pk.vedge[2 * e0:2 * e1]
    fkind = pk.fkind[e0:e1]
    fparam = pk.fparam[e0:e1]
    fptr = pk.fptr[e0 + i:e1 + i + 1]
    evar = pk.evar[2 * e0:2 * e1]
    eoff = pk.eoff[2 * e0 + i:2 * e1 + i + 1]
    toff = pk.toff[e0 + i:e1 + i + 1]
    aoff = pk.aoff[e0 + i:e1 + i + 1]
    order = pk.order[n0:n1]
    efac = pk.efac[2 * e0:2 * e1]
    # a fresh iterate (FactorGraph.new_state): uniform marginals, λ = 0, η from the scores' spread
    p = np.empty(nu)
    for v in range(N):
        for s in range(S):
            p[v * S + s] = 1.0 / vstates[v]
    vals = np.concatenate((u, tab))
    eta = K.initial_eta(vals)
    n_e = eoff[eoff.size - 1]
    lam = np.zeros(n_e)
    qe = np.zeros(n_e)
    qt = np.zeros(toff[toff.size - 1])
    acfg = np.zeros(aoff[aoff.size - 1], dtype=np.int64)
    aw = np.zeros(aoff[aoff.size - 1])
    acount = np.zeros(E, dtype=np.int64)
    ainv = np.zeros(K.inverse_layout(fkind, fptr, aoff)[E])
    scal = np.zeros(K.N_SCAL)
    scal[K.S_ETA] = eta
    scal[K.S_UPPER] = np.inf
    scal[K.S_LOWER] = -np.inf
    best_y = np.zeros(N, dtype=np.int64)
    y_work = np.zeros(N, dtype=np.int64)
    vallow = np.isfinite(u)
    pair_fast = K.binary_pairs(fkind, fptr, evar, voff, vstates, vallow, tab, toff)
    tol_res = max(n_e, 1) * max(TOL, 1e-7) ** 2
    chunk = K.first_chunk(pair_fast, toff, N, CHUNK_SECONDS)  # the chunks the Python driver starts with
    done = 0
    settled = np.ones(E, dtype=np.bool_)
    status = K.RUNNING
    while done < MAX_ITER:
        n_iter = min(chunk, MAX_ITER - done)
        status = K.ad3_chunk(N, vstates, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, order,
                             efac, u, tab, pair_fast, p, lam, qe, qt, acfg, aw, acount, ainv, scal, best_y, y_work,
                             n_iter, BOUND_EVERY, 1.0, tol_res, TOL, TOL, MAX_INNER, ETA_ITERS, -np.inf, settled)
        done = int(scal[K.S_ITER])
        if status != K.RUNNING:
            break
        chunk = 4 * chunk + 10
    if status == K.RUNNING:  # the budget ran out between two evaluations: the driver's closing one
        K.ad3_finish(N, vstates, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, order, efac, u, tab,
                     pair_fast, p, lam, qe, qt, scal, best_y, y_work, tol_res, TOL, TOL, -np.inf)
    upper, lower = scal[K.S_UPPER], scal[K.S_LOWER]
    certified = np.isfinite(lower) and lower >= upper - TOL * (1.0 + abs(upper))
    loss = pk.const[i]
    if certified:
        for j in range(size):
            stats[j] = 0.0
        for v in range(N):
            stats[v * S + best_y[v]] = 1.0
            loss += pk.costs[n0 + v, best_y[v]]
        for e in range(E):
            a, b = evar[2 * e], evar[2 * e + 1]
            stats[nu + e * S * S + best_y[a] * S + best_y[b]] = 1.0
    else:
        for j in range(nu):
            stats[j] = p[j]
        for v in range(N):
            for s in range(S):
                loss += pk.costs[n0 + v, s] * p[v * S + s]
        for j in range(size - nu):
            stats[nu + j] = qt[j]
    return loss
