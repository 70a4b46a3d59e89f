"""Batched chain SparseMAP: the active-set (min-norm-point) method of every chain of a padded batch in one
compiled call, and its backward (the Jacobian-vector product through the active set).

The method is :func:`structopt.structures._minnorm.min_norm_active_set` step for step (same start, same
major and minor cycles, same stopping tests, same final reduction to an affinely independent set), so
that its answers are the generic :func:`structopt.sparsemap.sparsemap`'s on a
:class:`~structopt.structures.Chain`; only the representation differs. A vertex ``μ(y)`` is kept as its
label sequence ``y``: the inner product of two vertices is the number of positions and of edges where
their labels agree (an integer, so the Gram matrix is exact), ``<θ, μ(y)>`` is the chain's score of y,
and the direction ``θ − μ`` of each major cycle is built densely (T x S and T-1 x S x S) for the
Viterbi kernel of ``Chain.argmax`` (same arithmetic, same tie-breaking), with the chain's masks added as
``Chain.masked_potentials`` adds them.

Layout (as :mod:`structopt.structures._chain_batch`): ``unary`` (B, T, S) padded past ``lengths``;
``pairwise`` (1, 1, S, S) shared (``shared`` True) or (B, T-1, S, S) per position; ``start``, ``end`` (S,)
and ``bias`` (S, S) the masks' 0 / -inf (zeros for an unconstrained chain). Inputs are checked by the
caller (finite potentials, lengths in 1..T).

Status codes per example: 0 optimal (gap <= tol), 1 repeated (the oracle returned an active vertex:
the rounding floor), 2 max_iter.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.structures import _chain_kernels as kern

OPTIMAL, REPEATED, MAX_ITER = 0, 1, 2
#: weights at or below this leave the active set (the generic method's ``_WEIGHT_EPS``)
WEIGHT_EPS = 1e-12
#: relative eigenvalue below which the translated Gram matrix counts as singular (``_DEPENDENT_RTOL``)
DEPENDENT_RTOL = 1e-10


# ----------------------------------------------------------------------------- vertex algebra on labels
@njit(cache=True, inline="always")
def _overlap(ya, yb, L):
    # <μ(ya), μ(yb)>: positions and edges where the two sequences agree
    n = 0
    for t in range(L):
        if ya[t] == yb[t]:
            n += 1
            if t + 1 < L and ya[t + 1] == yb[t + 1]:
                n += 1
    return float(n)


@njit(cache=True)
def _score(unary, pairwise, shared, i, y, L):
    # <θ_i, μ(y)> in the full statistics layout (pairwise broadcast when shared)
    total = 0.0
    for t in range(L):
        total += unary[i, t, y[t]]
    for t in range(L - 1):
        if shared:
            total += pairwise[0, 0, y[t], y[t + 1]]
        else:
            total += pairwise[i, t, y[t], y[t + 1]]
    return total


@njit(cache=True)
def _dense_score(du, dp, y, L):
    # <d, μ(y)> for a dense direction (du (L, S), dp (L-1, S, S))
    total = 0.0
    for t in range(L):
        total += du[t, y[t]]
    for t in range(L - 1):
        total += dp[t, y[t], y[t + 1]]
    return total


@njit(cache=True)
def _direction(unary, pairwise, shared, i, L, labels, weights, k, du, dp):
    # du, dp = θ_i − Σ_j w_j μ(y_j) (the point x accumulated first, then subtracted, as v − x)
    S = unary.shape[2]
    for t in range(L):
        for s in range(S):
            du[t, s] = 0.0
    for t in range(L - 1):
        for a in range(S):
            for b in range(S):
                dp[t, a, b] = 0.0
    for j in range(k):
        w = weights[j]
        y = labels[j]
        for t in range(L):
            du[t, y[t]] += w
        for t in range(L - 1):
            dp[t, y[t], y[t + 1]] += w
    for t in range(L):
        for s in range(S):
            du[t, s] = unary[i, t, s] - du[t, s]
    for t in range(L - 1):
        for a in range(S):
            for b in range(S):
                p = pairwise[0, 0, a, b] if shared else pairwise[i, t, a, b]
                dp[t, a, b] = p - dp[t, a, b]


@njit(cache=True)
def _oracle(du, dp, L, start, end, bias, masked, ub, pb):
    # Chain.argmax at the direction: Viterbi on the masked potentials (the masks added as masked_potentials does)
    S = du.shape[1]
    if not masked:
        if L > 1:
            return kern.viterbi(du[:L], dp[:L - 1])[0]
        return kern.viterbi(du[:1], dp[:1])[0]
    for t in range(L):
        for s in range(S):
            ub[t, s] = du[t, s]
    for s in range(S):
        ub[0, s] += start[s]
    for s in range(S):
        ub[L - 1, s] += end[s]
    for t in range(max(L - 1, 1)):
        for a in range(S):
            for b in range(S):
                pb[t, a, b] = (dp[t, a, b] if L > 1 else 0.0) + bias[a, b]
    return kern.viterbi(ub[:L], pb[:max(L - 1, 1)])[0]


# ----------------------------------------------------------------------------- the Gram system of the active set
# The affine minimiser's weights solve M γ = r with M the Gram matrix of the differences of the active vertices to
# the first one (``_minnorm.affine_weights``). Its Cholesky factor F (M = F Fᵀ, lower) is kept across the
# iterations: a vertex added is a row appended (O(m²)), a vertex dropped a row and column deleted by Givens
# rotations (O(m²)); only dropping the first vertex (the translation changes) refactors from scratch. Where M is
# not positive definite (affinely dependent vertices) the weights are least squares, as the generic method's.
@njit(cache=True)
def _translated(gram, idx, m):
    # the Gram matrix of the differences to the first vertex of idx[:m]
    M = np.empty((m - 1, m - 1))
    g00 = gram[idx[0], idx[0]]
    for r in range(1, m):
        for c in range(1, m):
            M[r - 1, c - 1] = gram[idx[r], idx[c]] - gram[idx[0], idx[r]] - gram[idx[0], idx[c]] + g00
    return M


@njit(cache=True)
def _factor_full(gram, idx, m, F):
    """F[:m-1, :m-1] = Cholesky factor of the translated Gram matrix of idx[:m]; False when not positive definite."""
    n = m - 1
    g00 = gram[idx[0], idx[0]]
    for j in range(n):
        s = gram[idx[j + 1], idx[j + 1]] - 2.0 * gram[idx[0], idx[j + 1]] + g00
        for p in range(j):
            s -= F[j, p] * F[j, p]
        if not s > 0.0:
            return False
        d = np.sqrt(s)
        F[j, j] = d
        for r in range(j + 1, n):
            s = gram[idx[r + 1], idx[j + 1]] - gram[idx[0], idx[r + 1]] - gram[idx[0], idx[j + 1]] + g00
            for p in range(j):
                s -= F[r, p] * F[j, p]
            F[r, j] = s / d
    return True


@njit(cache=True)
def _factor_append(gram, idx, m, F):
    """Extend F by the last vertex idx[m-1] (F holds the factor of idx[:m-1]); False when not positive definite."""
    n = m - 1  # new size of M
    g00 = gram[idx[0], idx[0]]
    q = idx[m - 1]
    g0q = gram[idx[0], q]
    for r in range(n - 1):  # forward solve F[:n-1, :n-1] l = column
        s = gram[idx[r + 1], q] - gram[idx[0], idx[r + 1]] - g0q + g00
        for p in range(r):
            s -= F[r, p] * F[n - 1, p]
        F[n - 1, r] = s / F[r, r]
    s = gram[q, q] - 2.0 * g0q + g00
    for p in range(n - 1):
        s -= F[n - 1, p] * F[n - 1, p]
    if not s > 0.0:
        return False
    F[n - 1, n - 1] = np.sqrt(s)
    return True


@njit(cache=True)
def _factor_delete(F, n, p):
    """Delete row and column p of the n x n matrix whose factor is F (Givens rotations restore the triangle)."""
    for r in range(p, n - 1):  # row r + 1 moves up to r: its entries reach column r + 1
        for c in range(r + 2):
            F[r, c] = F[r + 1, c]
    for r in range(p, n - 1):  # zero F[r, r + 1] by rotating columns r and r + 1 (rows r..n-2)
        a, b = F[r, r], F[r, r + 1]
        h = np.hypot(a, b)
        cos, sin = a / h, b / h
        for i in range(r, n - 1):
            x, y = F[i, r], F[i, r + 1]
            F[i, r] = cos * x + sin * y
            F[i, r + 1] = -sin * x + cos * y
        F[r, r + 1] = 0.0


@njit(cache=True)
def _affine_weights(gram, b, idx, m, F, factored, beta):
    """beta[:m]: the affine minimiser's weights over the vertices idx[:m] (``_minnorm.affine_weights``), from
    the factor F when ``factored``, else by least squares."""
    if m == 1:
        beta[0] = 1.0
        return
    n = m - 1
    g00 = gram[idx[0], idx[0]]
    rhs = np.empty(n)
    for r in range(n):
        rhs[r] = (b[idx[r + 1]] - b[idx[0]]) - (gram[idx[0], idx[r + 1]] - g00)
    gamma = np.empty(n)
    ok = factored
    if ok:
        for r in range(n):  # F z = rhs
            s = rhs[r]
            for p in range(r):
                s -= F[r, p] * gamma[p]
            gamma[r] = s / F[r, r]
        for r in range(n - 1, -1, -1):  # Fᵀ γ = z
            s = gamma[r]
            for p in range(r + 1, n):
                s -= F[p, r] * gamma[p]
            gamma[r] = s / F[r, r]
            ok = ok and np.isfinite(gamma[r])
    if not ok:
        gamma = np.linalg.lstsq(_translated(gram, idx, m), rhs)[0]
    total = 0.0
    for r in range(n):
        beta[r + 1] = gamma[r]
        total += gamma[r]
    beta[0] = 1.0 - total


@njit(cache=True)
def _minor_cycles(gram, b, idx, weights, m, F, factored, beta):
    """Move to the affine minimiser of the active set idx[:m] (weights[:m]), stepping back to the boundary
    and dropping the vertices that reach it while an affine weight is not positive
    (``_minnorm._minor_cycles``); idx, weights and the factor F are updated in place. Returns
    ``(m, factored)``."""
    while True:
        _affine_weights(gram, b, idx, m, F, factored, beta)
        positive = True
        for r in range(m):
            if not beta[r] > WEIGHT_EPS:
                positive = False
                break
        if positive:
            for r in range(m):
                weights[r] = beta[r]
            return m, factored
        first = -1
        best = np.inf
        for r in range(m):  # the first smallest ratio among the moving weights (np.argmin's choice)
            if beta[r] <= WEIGHT_EPS:
                ratio = weights[r] / max(weights[r] - beta[r], 1e-300)
                if first < 0 or ratio < best:
                    best, first = ratio, r
        step = min(max(best, 0.0), 1.0)
        for r in range(m):
            weights[r] = (1.0 - step) * weights[r] + step * beta[r]
        weights[first] = 0.0
        m, factored = _drop(gram, idx, weights, m, F, factored)


@njit(cache=True)
def _drop(gram, idx, weights, m, F, factored):
    """Remove the vertices of weight <= WEIGHT_EPS from idx[:m] (renormalising the others) and from F."""
    refactor = not factored or not weights[0] > WEIGHT_EPS  # the reference vertex leaves: new translation
    if not refactor:
        n = m - 1
        for r in range(m - 1, 0, -1):  # descending, so the positions still to delete do not move
            if not weights[r] > WEIGHT_EPS:
                _factor_delete(F, n, r - 1)
                n -= 1
    kept = 0
    total = 0.0
    for r in range(m):
        if weights[r] > WEIGHT_EPS:
            idx[kept] = idx[r]
            weights[kept] = weights[r]
            total += weights[r]
            kept += 1
    for r in range(kept):
        weights[r] /= total
    if refactor:
        factored = _factor_full(gram, idx, kept, F)
    return kept, factored


@njit(cache=True)
def _independent(gram, idx, m, F, factored):
    """Whether the translated Gram matrix of idx[:m] passes the generic test ``λ_min > rtol max(1, λ_max)``
    for sure, read off the factor: λ_min >= 1 / trace(M⁻¹) and λ_max <= trace(M)."""
    if m == 1:
        return True
    if not factored:
        return False
    n = m - 1
    trace = 0.0
    g00 = gram[idx[0], idx[0]]
    for r in range(n):
        trace += gram[idx[r + 1], idx[r + 1]] - 2.0 * gram[idx[0], idx[r + 1]] + g00
    inverse_trace = 0.0  # trace(M⁻¹) = ‖F⁻¹‖_F², column by column of F⁻¹
    e = np.empty(n)
    for c in range(n):
        for r in range(n):
            if r < c:
                e[r] = 0.0
                continue
            s = 1.0 if r == c else 0.0
            for p in range(c, r):
                s -= F[r, p] * e[p]
            e[r] = s / F[r, r]
            inverse_trace += e[r] * e[r]
    return 1.0 / inverse_trace > DEPENDENT_RTOL * max(1.0, trace)


@njit(cache=True)
def _reduce_dependent(gram, idx, weights, m):
    """Drop vertices until idx[:m] is affinely independent, keeping the point (``_minnorm._reduce_dependent``)."""
    while m > 1:
        M = _translated(gram, idx, m)
        eig, vecs = np.linalg.eigh(M)
        if eig[0] > DEPENDENT_RTOL * max(1.0, eig[m - 2]):
            break
        c = np.empty(m)
        c[0] = -vecs[:, 0].sum()
        c[1:] = vecs[:, 0]
        negative = False
        for r in range(m):
            if c[r] < 0:
                negative = True
        if not negative:
            c = -c
        first = -1
        best = np.inf
        for r in range(m):
            if c[r] < 0:
                ratio = weights[r] / -c[r]
                if first < 0 or ratio < best:
                    best, first = ratio, r
        for r in range(m):
            weights[r] = max(weights[r] + best * c[r], 0.0)
        weights[first] = 0.0
        kept = 0
        total = 0.0
        for r in range(m):
            if weights[r] > WEIGHT_EPS:
                idx[kept] = idx[r]
                weights[kept] = weights[r]
                total += weights[r]
                kept += 1
        for r in range(kept):
            weights[r] /= total
        m = kept
    return m


# ----------------------------------------------------------------------------- one example
@njit(cache=True)
def _grown(a, rows):
    out = np.empty(rows, dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


@njit(cache=True)
def _grown_rows(a, rows):
    out = np.empty((rows, a.shape[1]), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


@njit(cache=True)
def _solve_one(unary, pairwise, shared, i, L, start, end, bias, masked, tol, max_iter, warm, warm_y,
               du, dp, ub, pb):
    """The active set of example i: (labels (m, L), weights (m,), gap, iterations, status)."""
    S = unary.shape[2]
    cap = 16
    labels = np.empty((cap, L), dtype=np.int64)   # slot s holds the vertex added s-th (slots are never reused)
    gram = np.empty((cap, cap))                   # Gram matrix over slots (only active slots' entries are read)
    b = np.empty(cap)                             # <θ, μ(y_slot)>
    idx = np.empty(cap, dtype=np.int64)           # the active slots, in the generic method's order
    weights = np.empty(cap)
    beta = np.empty(cap)
    F = np.empty((cap, cap))                      # Cholesky factor of the active set's translated Gram matrix
    active_labels = np.empty((cap, L), dtype=np.int64)
    if warm:  # a given first vertex of weight 1: the generic method's warm start (its re-optimisation is a no-op)
        labels[0] = warm_y[:L]
    else:
        for t in range(L):
            for s in range(S):
                du[t, s] = unary[i, t, s]
        for t in range(L - 1):
            for a in range(S):
                for c in range(S):
                    dp[t, a, c] = pairwise[0, 0, a, c] if shared else pairwise[i, t, a, c]
        labels[0] = _oracle(du, dp, L, start, end, bias, masked, ub, pb)
    gram[0, 0] = _overlap(labels[0], labels[0], L)
    b[0] = _score(unary, pairwise, shared, i, labels[0], L)
    idx[0] = 0
    weights[0] = 1.0
    m = 1
    factored = True
    n_slots = 1
    iterations = 0
    status = OPTIMAL
    gap = 0.0
    while True:
        for r in range(m):
            active_labels[r] = labels[idx[r]]
        _direction(unary, pairwise, shared, i, L, active_labels, weights, m, du, dp)
        q = _oracle(du, dp, L, start, end, bias, masked, ub, pb)
        # gap = <θ − x, q − x> = <d, q> − Σ_j w_j <d, μ(y_j)>
        inner_x = 0.0
        for r in range(m):
            inner_x += weights[r] * _dense_score(du, dp, active_labels[r], L)
        gap = _dense_score(du, dp, q, L) - inner_x
        if gap <= tol:
            status = OPTIMAL
            break
        if iterations >= max_iter:
            status = MAX_ITER
            break
        repeated = False
        for r in range(m):
            same = True
            y = labels[idx[r]]
            for t in range(L):
                if y[t] != q[t]:
                    same = False
                    break
            if same:
                repeated = True
                break
        if repeated:
            status = REPEATED
            break
        iterations += 1
        if n_slots == cap:
            cap *= 2
            labels, b, idx, weights, beta = (_grown_rows(labels, cap), _grown(b, cap), _grown(idx, cap),
                                             _grown(weights, cap), np.empty(cap))
            gram2 = np.empty((cap, cap))
            gram2[:n_slots, :n_slots] = gram
            gram = gram2
            F2 = np.empty((cap, cap))
            F2[:cap // 2, :cap // 2] = F
            F = F2
            active_labels = np.empty((cap, L), dtype=np.int64)
        slot = n_slots
        n_slots += 1
        labels[slot] = q
        for s in range(slot):
            gram[s, slot] = gram[slot, s] = _overlap(labels[s], q, L)
        gram[slot, slot] = _overlap(q, q, L)
        b[slot] = _score(unary, pairwise, shared, i, q, L)
        idx[m] = slot
        weights[m] = 0.0
        m += 1
        factored = _factor_append(gram, idx, m, F) if factored else _factor_full(gram, idx, m, F)
        m, factored = _minor_cycles(gram, b, idx, weights, m, F, factored, beta)
    if not _independent(gram, idx, m, F, factored):
        m = _reduce_dependent(gram, idx, weights, m)
    out_labels = np.empty((m, L), dtype=np.int64)
    out_weights = np.empty(m)
    for r in range(m):
        out_labels[r] = labels[idx[r]]
        out_weights[r] = weights[r]
    return out_labels, out_weights, max(gap, 0.0), iterations, status


# ----------------------------------------------------------------------------- the batch
@njit(cache=True)
def sparsemap_chunk(unary, pairwise, shared, start, end, bias, masked, lengths, tol, max_iter, warm, warm_labels,
                    first, budget, node, pair, active, weights, offsets, gaps, iterations, status):
    """Examples first, first + 1, ... of the batch until about ``budget`` units of work are spent (at least one
    example; an example of length L, S labels and c major cycles counts ``(c + 2) (L S² + c (c + L))``: its
    Viterbi calls, directions and Gram systems); returns ``(next example to solve, active, weights)``.

    Writes μ* into ``node`` (B, T, S) and ``pair`` (B, T-1, S, S) (zeros past each length), example i's
    active labels into rows ``offsets[i]:offsets[i + 1]`` of ``active`` (n, T) (columns past its length
    untouched) with their weights into ``weights`` (n,) (both grown, by copies, when full: the returned
    arrays are the ones to keep), its Frank–Wolfe gap, major cycles and status.
    """
    B, T, S = unary.shape
    du = np.empty((T, S))
    dp = np.empty((max(T - 1, 1), S, S))
    ub = np.empty((T, S))
    pb = np.empty((max(T - 1, 1), S, S))
    spent = 0
    i = first
    while i < B and (i == first or spent < budget):
        L = lengths[i]
        y, w, gap, its, st = _solve_one(unary, pairwise, shared, i, L, start, end, bias, masked, tol, max_iter,
                                        warm, warm_labels[i], du, dp, ub, pb)
        m = w.shape[0]
        base = offsets[i]
        if base + m > weights.shape[0]:
            grown = max(2 * weights.shape[0], base + m)
            active2 = np.zeros((grown, T), dtype=np.int64)
            active2[:base] = active[:base]
            weights2 = np.empty(grown)
            weights2[:base] = weights[:base]
            active, weights = active2, weights2
        offsets[i + 1] = base + m
        for r in range(m):
            active[base + r, :L] = y[r]
            weights[base + r] = w[r]
        for t in range(T):
            for s in range(S):
                node[i, t, s] = 0.0
        for t in range(T - 1):
            for a in range(S):
                for c in range(S):
                    pair[i, t, a, c] = 0.0
        for r in range(m):
            for t in range(L):
                node[i, t, y[r, t]] += w[r]
            for t in range(L - 1):
                pair[i, t, y[r, t], y[r, t + 1]] += w[r]
        gaps[i] = gap
        iterations[i] = its
        status[i] = st
        spent += (its + 2) * (L * S * S + its * (its + L))
        i += 1
    return i, active, weights


# ----------------------------------------------------------------------------- backward
@njit(cache=True)
def vjp_batch(active, offsets, lengths, grad_node, grad_pair, out_node, out_pair):
    """``(∂μ*/∂θ)ᵀ g`` of every example: ``Dᵀ (D Dᵀ)⁺ D g`` with D the differences of the active vertices
    (rows ``active[offsets[i]:offsets[i + 1]]``) to the first one (``structopt.sparsemap.sparsemap_vjp``);
    the upstream ``grad_node`` (B, T, S), ``grad_pair`` (B, T-1, S, S), the products into ``out_*``."""
    B = grad_node.shape[0]
    out_node[:] = 0.0
    out_pair[:] = 0.0
    for i in range(B):
        L = lengths[i]
        base = offsets[i]
        m = offsets[i + 1] - base
        if m == 1:
            continue  # a single vertex: μ* is locally constant
        ys = active[base:base + m, :L]
        dg = np.empty(m)
        for r in range(m):
            dg[r] = _dense_score(grad_node[i], grad_pair[i], ys[r], L)
        gram = np.empty((m - 1, m - 1))
        rhs = np.empty(m - 1)
        g00 = _overlap(ys[0], ys[0], L)
        for r in range(1, m):
            rhs[r - 1] = dg[r] - dg[0]
            g0r = _overlap(ys[0], ys[r], L)
            for c in range(1, m):
                gram[r - 1, c - 1] = _overlap(ys[r], ys[c], L) - g0r - _overlap(ys[0], ys[c], L) + g00
        coef = np.linalg.lstsq(gram, rhs)[0]
        for r in range(1, m):
            cr = coef[r - 1]
            for t in range(L):
                out_node[i, t, ys[r, t]] += cr
                out_node[i, t, ys[0, t]] -= cr
            for t in range(L - 1):
                out_pair[i, t, ys[r, t], ys[r, t + 1]] += cr
                out_pair[i, t, ys[0, t], ys[0, t + 1]] -= cr
