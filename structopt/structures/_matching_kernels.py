"""numba kernels for bipartite matchings.

Every matching problem is reduced (in ``matching.py``) to a *square* assignment problem: an
(N, N) score matrix ``W`` and a permutation ``sigma`` (row -> column) that maximises
``sum_i W[i, sigma[i]]``. The kernels here work on that square form.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def assignment_max_marginals(W, sigma):
    """Best assignment value with each entry ``(i, c)`` forced in, from one optimal assignment.

    With an optimal ``sigma`` of value ``V``, forcing ``i -> c`` displaces row ``i' = sigma^-1(c)``,
    which must move along an alternating path of rows ending at row ``i`` (whose column
    ``sigma(i)`` becomes free). Moving row ``r`` onto the column of row ``r2`` costs
    ``W[r, sigma[r]] - W[r, sigma[r2]]`` (no negative cycles, since ``sigma`` is optimal), so all
    max-marginals come from one all-pairs shortest path over the rows (Floyd-Warshall, O(N^3)):

        MM[i, c] = V - (W[i, sigma[i]] - W[i, c]) - D[sigma^-1(c), i]

    (Duchi, Tarlow, Elidan, Koller 2006; Pillutla et al. App. C.3.)

    Parameters
    ----------
    W : float64 (N, N), finite
    sigma : int64 (N,), an optimal assignment of ``W``

    Returns
    -------
    float64 (N, N) max-marginals.
    """
    N = W.shape[0]
    inv = np.empty(N, dtype=np.int64)
    for r in range(N):
        inv[sigma[r]] = r
    own = np.empty(N)
    value = 0.0
    for r in range(N):
        own[r] = W[r, sigma[r]]
        value += own[r]
    D = np.empty((N, N))
    for r in range(N):
        for r2 in range(N):
            D[r, r2] = own[r] - W[r, sigma[r2]]
        D[r, r] = 0.0
    for m in range(N):
        for r in range(N):
            drm = D[r, m]
            for r2 in range(N):
                v = drm + D[m, r2]
                if v < D[r, r2]:
                    D[r, r2] = v
    for r in range(N):  # round-off can only make a zero-cost cycle look slightly negative
        D[r, r] = 0.0
    MM = np.empty((N, N))
    for r in range(N):
        for c in range(N):
            MM[r, c] = value - (own[r] - W[r, c]) - D[inv[c], r]
    return MM


@njit(cache=True)
def _simplex_threshold(t, m):
    """tau with sum_j max(0, t[j] - tau) == 1 over the first m entries of t (m >= 1)."""
    s = np.sort(t[:m])[::-1]
    csum = 0.0
    tau = 0.0
    for j in range(m):
        csum += s[j]
        cand = (csum - 1.0) / (j + 1)
        if s[j] > cand:
            tau = cand
        else:
            break
    return tau


@njit(cache=True)
def projection_sweeps(V, a, b, alpha, beta, row_slack, col_slack, col_eq, n_sweeps):
    """Exact block-coordinate ascent on the dual of the projection onto the matching polytope.

    Primal: min 1/2||Z - V||^2 (+ 1/2||u - a||^2 + 1/2||s - b||^2 for the unmatched slacks) over
    Z >= 0, rows: sum_k Z[j, k] (+ u_j) == 1, columns: sum_j Z[j, k] (+ s_k) == 1 (or <= 1 when
    ``col_eq`` is False). For multipliers (alpha, beta) the minimiser is
    Z = max(0, V - alpha_j - beta_k), u = max(0, a - alpha), s = max(0, b - beta); a row (column)
    block update is a simplex projection of the row (column), so each sweep maximises the dual
    exactly over all alphas, then over all betas. Updates ``alpha`` and ``beta`` in place.
    """
    L, R = V.shape
    buf = np.empty(max(L, R) + 1)
    for _ in range(n_sweeps):
        for j in range(L):
            for k in range(R):
                buf[k] = V[j, k] - beta[k]
            m = R
            if row_slack:
                buf[R] = a[j]
                m = R + 1
            alpha[j] = _simplex_threshold(buf, m)
        for k in range(R):
            for j in range(L):
                buf[j] = V[j, k] - alpha[j]
            m = L
            if col_slack:
                buf[L] = b[k]
                m = L + 1
            tau = _simplex_threshold(buf, m)
            if not col_eq and tau < 0.0:
                tau = 0.0
            beta[k] = tau
