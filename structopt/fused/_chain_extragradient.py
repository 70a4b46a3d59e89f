"""Fused numba z-side pass of the dual extragradient for chain models (no per-example Python loop).

Works on the :class:`~structopt.fused._chain_pack.ChainPack` of a problem (``problem.fused().pack``).
Statistics of example i are in the *full* layout: unary (T, S) and one (S, S) block per edge.
Weights are laid out as the chain model's: the (F, S) unary table, the shared (S, S) transition
block, then start/end (2S) and bias (S) if present.

One call of :func:`chain_z_pass` performs, for every example, the two z-block prox steps of one
dual-extrapolation iteration (look-ahead from the prox-centre and the extragradient step) and
accumulates ``sum_i A_i^T v_i``, ``sum_i A_i^T u_i``, ``sum_i <c_i, u_i>`` and ``sum_i ||v_i - u_i||^2``.
Only O(one example) scratch memory is used besides the projection warm starts, which is the
memory-light variant (``s_{z_i}`` recomputed from the w-side sums).

Scoring and adjoint products are the chain model's own kernels (``chain_unary_scores``,
``chain_axpy``). Used only for unconstrained chains (the structure's ``kernel_oracles`` say so).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.fused._chain_pack import chain_axpy, chain_unary_scores
from structopt.structures._chain_kernels import forward_backward
from structopt.structures._chain_projection import project_local_polytope


@njit(cache=True)
def _unary_theta(data, i, w, out):
    # out (T, S) = node potentials of example i (the model's own scoring kernel)
    chain_unary_scores(i, w, data, out)


@njit(cache=True)
def _add_adjoint(data, i, node, edge, scale, out):
    # out += scale * A_i^T (node, edge): the model's adjoint on the compact layout (edges summed)
    T, S = node.shape
    compact = np.empty(T * S + S * S)
    compact[:T * S] = node.ravel()
    shared = compact[T * S:]
    shared[:] = 0.0
    for t in range(T - 1):
        shared += edge[t].ravel()
    chain_axpy(i, compact, scale, out, data)


@njit(cache=True)
def _project(node_in, edge_in, alpha, beta, tol, max_iter):
    # the dual-Newton projection from the warm multipliers; if it stops short of tol (rare since
    # the derivative line search), once more from zero multipliers, then resumed from its own
    node, edge, res, it = project_local_polytope(node_in, edge_in, alpha, beta, tol, max_iter)
    total = it
    for attempt in range(2):
        if res <= tol:
            break
        if attempt == 0:
            alpha[:] = 0.0
            beta[:] = 0.0
        node, edge, res, it = project_local_polytope(node_in, edge_in, alpha, beta, tol, max_iter)
        total += it
    return node, edge, res, total


@njit(cache=True)
def chain_normal_product(data, x, out):
    """``out = sum_i A_i^T A_i x`` (one power-iteration step); returns ``sum_i ||A_i x||^2``."""
    tok, S, F = data.tok, data.n_states, data.n_features
    n = tok.shape[0] - 1
    out[:] = 0.0
    total = 0.0
    unary = np.empty((tok[-1] - tok[0] if n > 0 else 0, S))
    pw = x[F * S:F * S + S * S].reshape(S, S)
    for i in range(n):
        T = tok[i + 1] - tok[i]
        u = unary[:T]
        _unary_theta(data, i, x, u)
        edge = np.empty((max(T - 1, 0), S, S))
        for t in range(T - 1):
            edge[t] = pw
        total += np.sum(u * u) + np.sum(edge * edge)
        _add_adjoint(data, i, u, edge, 1.0, out)
    return total


@njit(cache=True)
def chain_sum_sq_theta(data, x):
    """``sum_i ||A_i x||^2`` in the full statistics layout."""
    tok, S, F = data.tok, data.n_states, data.n_features
    n = tok.shape[0] - 1
    pw = x[F * S:F * S + S * S]
    pw_sq = np.sum(pw * pw)
    total = 0.0
    unary = np.empty((tok[-1] - tok[0] if n > 0 else 0, S))
    for i in range(n):
        T = tok[i + 1] - tok[i]
        u = unary[:T]
        _unary_theta(data, i, x, u)
        total += np.sum(u * u) + (T - 1) * pw_sq
    return total


@njit(cache=True)
def chain_z_pass(data, W, lam_acc, v_w, eta, beta, inv_n, entropic, labels, centre_potential, warm, tol, max_iter,
                 r_out, q_out, stats):
    """One dual-extrapolation iteration's z-side over all examples (see module docstring).

    Parameters
    ----------
    data : ChainPack (``problem.fused().pack``)
    W : (d,) weighted sum ``sum_k eta_k u_w^k`` of past w-iterates; ``lam_acc = sum_k eta_k``.
    v_w : (d,) current w look-ahead point.
    eta, beta, inv_n : step, z-block weight, 1/n.
    entropic : bool
        Entropic prox (CRF marginals of natural parameters) instead of Euclidean projections.
    labels : (N,) int64 gold labels of all tokens, or empty for the uniform prox-centre.
    centre_potential : float
        Prox-centre at the gold output: Euclidean, the gold vertex (any ``centre_potential``);
        entropic, the chain distribution with node potentials ``centre_potential`` on the gold labels
        (the extragradient solver's option of that name).
    warm : (2, 2, E, S)
        Projection multipliers (look-ahead / step, rows / columns) over all E edges; updated.
    tol, max_iter : projection tolerance and Newton-step cap.
    r_out, q_out : (d,) set to ``sum_i A_i^T v_i`` and ``sum_i A_i^T u_i``.
    stats : (4,) set to ``[sum_i <c_i, u_i>, sum_i ||v_i - u_i||^2, max projection residual,
        total projection iterations]``.
    """
    tok, costs, S, F = data.tok, data.costs, data.n_states, data.n_features
    n = tok.shape[0] - 1
    r_out[:] = 0.0
    q_out[:] = 0.0
    lin = 0.0
    dz = 0.0
    max_res = 0.0
    iters = 0.0
    p0 = F * S
    pw_W = W[p0:p0 + S * S].reshape(S, S)
    pw_v = v_w[p0:p0 + S * S].reshape(S, S)
    maxT = 0
    for i in range(n):
        maxT = max(maxT, tok[i + 1] - tok[i])
    th_W = np.empty((maxT, S))
    th_v = np.empty((maxT, S))
    inv_s = 1.0 / S
    inv_s2 = 1.0 / (S * S)
    gold = labels.shape[0] > 0
    for i in range(n):
        a = tok[i]
        T = tok[i + 1] - a
        E = T - 1
        e0 = a - i  # first edge of example i among all edges
        c = costs[a:a + T]
        sW = th_W[:T]
        gv = th_v[:T]
        _unary_theta(data, i, W, sW)
        _unary_theta(data, i, v_w, gv)
        # s_{z_i} = (A_i W + lam_acc c_i) / n and g_i = (A_i v_w + c_i) / n (edges: shared blocks)
        for t in range(T):
            for s in range(S):
                sW[t, s] = (sW[t, s] + lam_acc * c[t, s]) * inv_n
                gv[t, s] = (gv[t, s] + c[t, s]) * inv_n
        node_in = np.empty((T, S))
        edge_in = np.empty((E, S, S))
        if entropic:
            for t in range(T):
                for s in range(S):
                    node_in[t, s] = sW[t, s] / beta
                if gold:
                    node_in[t, labels[a + t]] += centre_potential
            for t in range(E):
                for x in range(S):
                    for y in range(S):
                        edge_in[t, x, y] = pw_W[x, y] * inv_n / beta
            _, v_node, v_edge = forward_backward(node_in, edge_in)
            for t in range(T):
                for s in range(S):
                    node_in[t, s] += eta * gv[t, s] / beta
            for t in range(E):
                for x in range(S):
                    for y in range(S):
                        edge_in[t, x, y] += eta * pw_v[x, y] * inv_n / beta
            _, u_node, u_edge = forward_backward(node_in, edge_in)
        else:
            for t in range(T):
                for s in range(S):
                    node_in[t, s] = (0.0 if gold else inv_s) + sW[t, s] / beta
                if gold:
                    node_in[t, labels[a + t]] += 1.0
            for t in range(E):
                for x in range(S):
                    for y in range(S):
                        edge_in[t, x, y] = (0.0 if gold else inv_s2) + pw_W[x, y] * inv_n / beta
                if gold:
                    edge_in[t, labels[a + t], labels[a + t + 1]] += 1.0
            v_node, v_edge, res, it = _project(node_in, edge_in, warm[0, 0, e0:e0 + E], warm[0, 1, e0:e0 + E],
                                               tol, max_iter)
            max_res = max(max_res, res)
            iters += it
            for t in range(T):
                for s in range(S):
                    node_in[t, s] = v_node[t, s] + eta * gv[t, s] / beta
            for t in range(E):
                for x in range(S):
                    for y in range(S):
                        edge_in[t, x, y] = v_edge[t, x, y] + eta * pw_v[x, y] * inv_n / beta
            u_node, u_edge, res, it = _project(node_in, edge_in, warm[1, 0, e0:e0 + E], warm[1, 1, e0:e0 + E],
                                               tol, max_iter)
            max_res = max(max_res, res)
            iters += it
        _add_adjoint(data, i, v_node, v_edge, 1.0, r_out)
        _add_adjoint(data, i, u_node, u_edge, 1.0, q_out)
        for t in range(T):
            for s in range(S):
                lin += c[t, s] * u_node[t, s]
                dz += (v_node[t, s] - u_node[t, s]) ** 2
        for t in range(E):
            for x in range(S):
                for y in range(S):
                    dz += (v_edge[t, x, y] - u_edge[t, x, y]) ** 2
    stats[0] = lin
    stats[1] = dz
    stats[2] = max_res
    stats[3] = iters
