"""Fast Euclidean projection onto a chain's local (= marginal) polytope.

Problem: given targets ``v`` (T, S) for the node marginals and ``w`` (T-1, S, S) for the edge
marginals, solve

    min  1/2 ||mu - v||^2 + 1/2 ||e - w||^2
    s.t. mu_t in simplex,  e_t >= 0,  rows(e_t) = mu_t,  cols(e_t) = mu_{t+1}.

Method: the Lagrangian dual of the marginalisation constraints only. Given multipliers
``alpha_t`` (rows) and ``beta_t`` (columns) the Lagrangian separates: each node is a simplex
projection of ``v_t + alpha_t + beta_{t-1}`` and each edge entry is
``max(0, w_t[a, b] - alpha_t[a] - beta_t[b])``. The dual is concave, piecewise quadratic, with
gradient = the marginalisation residuals. Phase 1 runs accelerated gradient ascent (FISTA with
adaptive restart, step ``1/||A||^2 >= 1/(2S + 2)``) until the residual is below ``switch_tol``;
phase 2 runs semismooth Newton steps, solving the block-tridiagonal generalised Hessian system
(``(S, S)`` blocks along the chain, ridge ``min(residual, 1)``) exactly, each followed by an exact
line search on the piecewise-linear directional derivative (bracketing + Illinois regula falsi).
Plain alternating projections would not give the projection; this dual method does, since the
primal point is the exact Lagrangian minimiser. Warm starts (multipliers of a nearby projection)
are how the extragradient solver calls it.

The line search compares directional derivatives only, never dual values: near the optimum the
value gains fall below the round-off of the value itself, while the derivative stays exact.

Certificate: the returned point satisfies every KKT condition exactly except primal
feasibility of the marginalisation equalities, whose max-abs residual is returned and driven
below ``tol`` (the node simplices and edge non-negativity hold exactly).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _project_simplex(x, out, work):
    # sort-based projection of x (S,) onto the probability simplex, written into out
    S = x.shape[0]
    for s in range(S):
        work[s] = x[s]
    work.sort()
    css = 0.0
    tau = 0.0
    for k in range(S):
        css += work[S - 1 - k]
        t = (css - 1.0) / (k + 1)
        if work[S - 1 - k] - t > 0.0:
            tau = t
    for s in range(S):
        d = x[s] - tau
        out[s] = d if d > 0.0 else 0.0


@njit(cache=True)
def _lagrangian_min(v, w, alpha, beta, mu, e, grad_a, grad_b, buf, work):
    # primal minimiser of the Lagrangian at (alpha, beta), the dual gradient (marginalisation
    # residuals) and the dual value; returns (max |grad|, dual value)
    T, S = v.shape
    value = 0.0
    for t in range(T):
        for s in range(S):
            x = v[t, s]
            if t < T - 1:
                x += alpha[t, s]
            if t > 0:
                x += beta[t - 1, s]
            buf[s] = x
        _project_simplex(buf, mu[t], work)
        for s in range(S):
            value += 0.5 * (mu[t, s] - v[t, s]) ** 2
    res = 0.0
    for t in range(T - 1):
        for b in range(S):
            grad_b[t, b] = -mu[t + 1, b]
        for a in range(S):
            row = -mu[t, a]
            for b in range(S):
                x = w[t, a, b] - alpha[t, a] - beta[t, b]
                if x < 0.0:
                    x = 0.0
                e[t, a, b] = x
                value += 0.5 * (x - w[t, a, b]) ** 2
                row += x
                grad_b[t, b] += x
            grad_a[t, a] = row
            value += alpha[t, a] * row
            if abs(row) > res:
                res = abs(row)
        for b in range(S):
            value += beta[t, b] * grad_b[t, b]
            if abs(grad_b[t, b]) > res:
                res = abs(grad_b[t, b])
    return res, value


@njit(cache=True)
def _node_jacobian(mu_t, out):
    # generalised Jacobian of the simplex projection: diag(s) - s s^T / |s|, s = support of mu_t
    S = mu_t.shape[0]
    k = 0
    for s in range(S):
        if mu_t[s] > 0.0:
            k += 1
    inv = 1.0 / k
    for a in range(S):
        for b in range(S):
            if mu_t[a] > 0.0 and mu_t[b] > 0.0:
                out[a, b] = (1.0 if a == b else 0.0) - inv
            else:
                out[a, b] = 0.0


@njit(cache=True, fastmath=True)
def _cholesky(A):
    # in-place lower Cholesky factor of a symmetric positive definite matrix (row-oriented:
    # contiguous dot products of row prefixes)
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1):
            x = A[i, j]
            for k in range(j):
                x -= A[i, k] * A[j, k]
            if i == j:
                A[i, i] = np.sqrt(x)
            else:
                A[i, j] = x / A[j, j]
        for j in range(i + 1, n):
            A[i, j] = 0.0


@njit(cache=True, fastmath=True)
def _lower_solve(L, B):
    # in place B <- L^{-1} B (B is (n, m)); row axpy form, contiguous inner loops
    n, m = B.shape
    for i in range(n):
        for k in range(i):
            lik = L[i, k]
            if lik != 0.0:
                for c in range(m):
                    B[i, c] -= lik * B[k, c]
        inv = 1.0 / L[i, i]
        for c in range(m):
            B[i, c] *= inv


@njit(cache=True)
def _upper_solve_vec(L, x):
    # in place x <- L^{-T} x
    n = x.shape[0]
    for i in range(n - 1, -1, -1):
        y = x[i]
        for k in range(i + 1, n):
            y -= L[k, i] * x[k]
        x[i] = y / L[i, i]


@njit(cache=True)
def _newton_direction(mu, e, ga, gb, ridge, da, db, Ls, Cs, rhs, P):
    # solve (K + ridge I) d = g with K = A J A^T the (negated) generalised dual Hessian.
    # Unknowns in the order alpha_0, beta_0, alpha_1, ... : a block-tridiagonal system with
    # (S, S) blocks; alpha_t-beta_t couple through edge t, beta_t-alpha_{t+1} through node t+1.
    # Workspace (fully overwritten): Ls, Cs (2E, S, S) (C_k = L_k^{-1} O_k, the coupling of
    # block k to block k + 1), rhs (2E, S), P (S, S).
    E, S = ga.shape
    N = 2 * E
    for k in range(N):
        t = k // 2
        D = Ls[k]
        if k % 2 == 0:  # alpha_t: edge t rows + node t
            _node_jacobian(mu[t], P)
            for a in range(S):
                for b in range(S):
                    D[a, b] = P[a, b]
                n_act = 0.0
                for b in range(S):
                    if e[t, a, b] > 0.0:
                        n_act += 1.0
                D[a, a] += n_act + ridge
                rhs[k, a] = ga[t, a]
            for a in range(S):
                for b in range(S):
                    Cs[k, a, b] = 1.0 if e[t, a, b] > 0.0 else 0.0
        else:  # beta_t: edge t columns + node t+1
            _node_jacobian(mu[t + 1], P)
            for a in range(S):
                for b in range(S):
                    D[a, b] = P[a, b]
            for b in range(S):
                n_act = 0.0
                for a in range(S):
                    if e[t, a, b] > 0.0:
                        n_act += 1.0
                D[b, b] += n_act + ridge
                rhs[k, b] = gb[t, b]
            if k + 1 < N:
                for a in range(S):
                    for b in range(S):
                        Cs[k, a, b] = P[a, b]
        if k > 0:  # Schur complement: D -= C_{k-1}^T C_{k-1}
            C = Cs[k - 1]
            for r in range(S):  # axpy form (contiguous inner loop); lower triangle only, all
                for a in range(S):  # that the row-oriented Cholesky reads
                    c = C[r, a]
                    if c != 0.0:
                        for b in range(a + 1):
                            D[a, b] -= c * C[r, b]
            for a in range(S):  # forward substitution of the right-hand side, part 1
                x = 0.0
                for r in range(S):
                    x += C[r, a] * rhs[k - 1, r]
                rhs[k, a] -= x
        _cholesky(D)
        # y_k = L_k^{-1} rhs_k
        for i in range(S):
            x = rhs[k, i]
            for r in range(i):
                x -= D[i, r] * rhs[k, r]
            rhs[k, i] = x / D[i, i]
        if k + 1 < N:
            _lower_solve(D, Cs[k])
    # back substitution: x_k = L_k^{-T} (y_k - C_k x_{k+1})
    for k in range(N - 1, -1, -1):
        if k + 1 < N:
            C = Cs[k]
            for a in range(S):
                x = 0.0
                for r in range(S):
                    x += C[a, r] * rhs[k + 1, r]
                rhs[k, a] -= x
        _upper_solve_vec(Ls[k], rhs[k])
    for t in range(E):
        for s in range(S):
            da[t, s] = rhs[2 * t, s]
            db[t, s] = rhs[2 * t + 1, s]


@njit(cache=True)
def _fista(v, w, alpha, beta, tol, max_iter, mu, e, ga, gb, buf, work):
    # accelerated dual ascent with adaptive restart; stops once max|grad| <= tol.
    # alpha/beta are overwritten with the last extrapolated point (where mu/e are evaluated).
    E, S = alpha.shape
    step = 1.0 / (2.0 * S + 2.0)  # 1 / ||A||^2 (Gershgorin bound on A A^T)
    ya = alpha.copy()
    yb = beta.copy()
    xa = alpha.copy()
    xb = beta.copy()
    theta = 1.0
    it = 0
    while True:
        res, value = _lagrangian_min(v, w, ya, yb, mu, e, ga, gb, buf, work)
        if res <= tol or it >= max_iter:
            break
        theta_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * theta * theta))
        restart = 0.0
        for t in range(E):
            for s in range(S):
                na = ya[t, s] + step * ga[t, s]
                nb = yb[t, s] + step * gb[t, s]
                restart += ga[t, s] * (na - xa[t, s]) + gb[t, s] * (nb - xb[t, s])
                alpha[t, s] = xa[t, s]  # previous point, kept for the momentum term
                beta[t, s] = xb[t, s]
                xa[t, s] = na
                xb[t, s] = nb
        if restart < 0.0:  # momentum points downhill: drop it (O'Donoghue & Candes)
            theta_next = 1.0
        mom = (theta - 1.0) / theta_next
        for t in range(E):
            for s in range(S):
                ya[t, s] = xa[t, s] + mom * (xa[t, s] - alpha[t, s])
                yb[t, s] = xb[t, s] + mom * (xb[t, s] - beta[t, s])
        theta = theta_next
        it += 1
    alpha[:] = ya
    beta[:] = yb
    return res, value, it


@njit(cache=True)
def _directional(ga, gb, da, db):
    # phi'(s) along d: <dual gradient, d>
    E, S = ga.shape
    x = 0.0
    for t in range(E):
        for s in range(S):
            x += ga[t, s] * da[t, s] + gb[t, s] * db[t, s]
    return x


@njit(cache=True)
def _line_search(v, w, alpha, beta, da, db, slope0, tol, ta, tb, mu, e, ga, gb, buf, work, max_eval):
    # Maximise the concave piecewise-quadratic dual along d: find the root of the monotone,
    # piecewise-linear phi'(s) = <g(alpha + s d), d> by bracketing + Illinois regula falsi
    # (exact as soon as both bracket ends lie on one linear piece). Only gradients are compared,
    # never dual values: near the optimum the value gains fall below the round-off of the value
    # itself. On return (ta, tb, mu, e, ga, gb)
    # hold the accepted point; returns (step, residual, value, evaluations).
    E, S = da.shape
    lo, dlo = 0.0, slope0
    hi, dhi = np.inf, 0.0
    s = 1.0
    side = 0
    res = np.inf
    value = 0.0
    k = 0
    while k < max_eval:
        for t in range(E):
            for j in range(S):
                ta[t, j] = alpha[t, j] + s * da[t, j]
                tb[t, j] = beta[t, j] + s * db[t, j]
        res, value = _lagrangian_min(v, w, ta, tb, mu, e, ga, gb, buf, work)
        k += 1
        phi = _directional(ga, gb, da, db)
        if res <= tol or abs(phi) <= 1e-3 * slope0:
            return s, res, value, k
        if phi > 0.0:
            if hi == np.inf:  # the full Newton step still ascends: take it (no extrapolation)
                return s, res, value, k
            lo, dlo = s, phi
            if side == 1:  # Illinois: the other end was kept twice, halve its weight
                dhi *= 0.5
            side = 1
        else:
            hi, dhi = s, phi
            if side == -1:
                dlo *= 0.5
            side = -1
        s = lo + dlo * (hi - lo) / (dlo - dhi)
        if not (lo < s < hi):
            s = 0.5 * (lo + hi)
    if lo > 0.0 and s != lo:  # budget spent: fall back to the ascent side of the bracket
        for t in range(E):
            for j in range(S):
                ta[t, j] = alpha[t, j] + lo * da[t, j]
                tb[t, j] = beta[t, j] + lo * db[t, j]
        res, value = _lagrangian_min(v, w, ta, tb, mu, e, ga, gb, buf, work)
        k += 1
        s = lo
    return s, res, value, k


@njit(cache=True)
def solve_local_polytope(v, w, alpha, beta, tol, max_iter, switch_tol=1e-3, fista_iter=500, max_eval=20):
    """Projection with its work counters; see :func:`project_local_polytope`.

    Returns
    -------
    mu, e, residual, fista_iterations, newton_iterations, line_search_evaluations
    """
    T, S = v.shape
    E = max(T - 1, 0)
    mu = np.empty((T, S))
    e = np.empty((E, S, S))
    buf = np.empty(S)
    work = np.empty(S)
    ga = np.zeros((E, S))
    gb = np.zeros((E, S))
    if T == 1:
        _project_simplex(v[0], mu[0], work)
        return mu, e, 0.0, 0, 0, 0
    da = np.empty((E, S))
    db = np.empty((E, S))
    ta = np.empty((E, S))
    tb = np.empty((E, S))
    mu2 = np.empty((T, S))
    e2 = np.empty((E, S, S))
    ga2 = np.empty((E, S))
    gb2 = np.empty((E, S))
    Ls = np.empty((2 * E, S, S))
    Cs = np.empty((2 * E, S, S))
    rhs = np.empty((2 * E, S))
    P = np.empty((S, S))
    # phase 1: first-order steps until the active set is roughly right; phase 2: Newton
    res, _, it = _fista(v, w, alpha, beta, max(tol, switch_tol), fista_iter, mu, e, ga, gb, buf, work)
    newton = 0
    evals = 0
    while res > tol and newton < max_iter:
        # a tiny ridge handles the always-present null directions (alpha_t + c, beta_t - c)
        _newton_direction(mu, e, ga, gb, 1e-10 + min(res, 1.0), da, db, Ls, Cs, rhs, P)
        slope = _directional(ga, gb, da, db)
        if not slope > 0.0:  # no ascent left at this precision
            break
        _, res, _, k = _line_search(v, w, alpha, beta, da, db, slope, tol, ta, tb, mu2, e2, ga2, gb2, buf,
                                        work, max_eval)
        evals += k
        alpha[:] = ta
        beta[:] = tb
        mu[:] = mu2
        e[:] = e2
        ga[:] = ga2
        gb[:] = gb2
        newton += 1
    return mu, e, res, it, newton, evals


@njit(cache=True)
def project_local_polytope(v, w, alpha, beta, tol, max_iter, switch_tol=1e-3, fista_iter=500):
    """Project ``(v, w)`` onto the chain's local polytope by semismooth Newton on the dual.

    Parameters
    ----------
    v : (T, S) float64
    w : (T-1, S, S) float64
    alpha, beta : (T-1, S) float64
        Initial multipliers (warm start), overwritten with the final ones.
    tol : float
        Target max-abs marginalisation residual.
    max_iter : int
        Maximum Newton steps.

    Returns
    -------
    mu : (T, S), e : (T-1, S, S), residual : float, iterations : int (first-order + Newton)
    """
    mu, e, res, it, newton, _ = solve_local_polytope(v, w, alpha, beta, tol, max_iter, switch_tol, fista_iter)
    return mu, e, res, it + newton


def project_chain(unary: np.ndarray, pairwise: np.ndarray, tol: float = 1e-9, max_iter: int = 200,
                  warm: tuple[np.ndarray, np.ndarray] | None = None):
    """Euclidean projection onto the local polytope; see :func:`project_local_polytope`.

    Parameters
    ----------
    unary : (T, S) array
    pairwise : (T-1, S, S) array (the full statistics layout)
    tol : float
        Max-abs residual of the marginalisation equalities at return.
    max_iter : int
    warm : (alpha, beta) or None
        Multipliers of a previous, nearby projection; they are updated in place.

    Returns
    -------
    node : (T, S), edge : (T-1, S, S), residual : float, iterations : int
    """
    v = np.ascontiguousarray(unary, dtype=np.float64)
    T, S = v.shape
    w = np.ascontiguousarray(pairwise, dtype=np.float64).reshape(max(T - 1, 0), S, S)
    if warm is None:
        alpha, beta = np.zeros((max(T - 1, 0), S)), np.zeros((max(T - 1, 0), S))
    else:
        alpha, beta = warm
    return project_local_polytope(v, w, alpha, beta, float(tol), int(max_iter))
