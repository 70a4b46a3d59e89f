"""Euclidean projection onto the local polytope of a binary 4-connected grid.

Problem: given targets ``u`` (H, W, 2) for the node marginals and ``h`` (H, W-1, 2, 2), ``v``
(H-1, W, 2, 2) for the horizontal and vertical edge marginals, solve

    min  1/2 ||mu - u||^2 + 1/2 ||e - (h, v)||^2
    s.t. mu_i in simplex,  e_ij >= 0,  rows(e_ij) = mu_i,  cols(e_ij) = mu_j.

Method: the Lagrangian dual of the marginalisation constraints (multipliers ``alpha`` on the rows,
``beta`` on the columns of every edge). Given the multipliers the Lagrangian separates: node i is
the simplex projection of ``u_i + (sum of alpha over edges where i comes first) + (sum of beta
over edges where i comes second)``, edge entries are ``max(0, e[a, b] - alpha[a] - beta[b])``.
The dual is concave and piecewise quadratic, its gradient is the vector of marginalisation
residuals and its Lipschitz constant is at most ``||A||^2 <= 8`` (the simplex projection is
non-expansive, and a row of ``|A A^T|`` sums to at most 3 on the diagonal + 2 for the other side
of its edge + 3 for the other edges at its node). Accelerated gradient ascent (FISTA, step 1/8, with
the gradient restart of O'Donoghue and Candes) runs until the max-abs residual is <= ``tol``;
one iteration is a single numba sweep over nodes and edges.

Certificate: the returned point satisfies every KKT condition exactly (node simplices, edge
non-negativity, the Lagrangian optimality) except the marginalisation equalities, whose max-abs
residual is returned; the caller falls back to the cvxpy QP when it is above ``tol``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

STEP = 1.0 / 8.0


@njit(cache=True)
def _primal_and_residual(u, h, v, ah, bh, av, bv, mu, eh, ev, gah, gbh, gav, gbv):
    """Lagrangian minimiser for the multipliers into (mu, eh, ev), the dual gradient into g*; max |g|."""
    H, W = u.shape[0], u.shape[1]
    for r in range(H):
        for c in range(W):
            s0, s1 = u[r, c, 0], u[r, c, 1]
            if c + 1 < W:
                s0 += ah[r, c, 0]
                s1 += ah[r, c, 1]
            if c > 0:
                s0 += bh[r, c - 1, 0]
                s1 += bh[r, c - 1, 1]
            if r + 1 < H:
                s0 += av[r, c, 0]
                s1 += av[r, c, 1]
            if r > 0:
                s0 += bv[r - 1, c, 0]
                s1 += bv[r - 1, c, 1]
            z0 = min(max(0.5 * (1.0 + s0 - s1), 0.0), 1.0)  # two-state simplex projection
            mu[r, c, 0] = z0
            mu[r, c, 1] = 1.0 - z0
    worst = 0.0
    for r in range(H):
        for c in range(W - 1):
            for a in range(2):
                for b in range(2):
                    eh[r, c, a, b] = max(h[r, c, a, b] - ah[r, c, a] - bh[r, c, b], 0.0)
            for a in range(2):
                gah[r, c, a] = eh[r, c, a, 0] + eh[r, c, a, 1] - mu[r, c, a]
                gbh[r, c, a] = eh[r, c, 0, a] + eh[r, c, 1, a] - mu[r, c + 1, a]
                worst = max(worst, abs(gah[r, c, a]), abs(gbh[r, c, a]))
    for r in range(H - 1):
        for c in range(W):
            for a in range(2):
                for b in range(2):
                    ev[r, c, a, b] = max(v[r, c, a, b] - av[r, c, a] - bv[r, c, b], 0.0)
            for a in range(2):
                gav[r, c, a] = ev[r, c, a, 0] + ev[r, c, a, 1] - mu[r, c, a]
                gbv[r, c, a] = ev[r, c, 0, a] + ev[r, c, 1, a] - mu[r + 1, c, a]
                worst = max(worst, abs(gav[r, c, a]), abs(gbv[r, c, a]))
    return worst


@njit(cache=True)
def _fista(u, h, v, lam, look, grad, tol, max_iter):
    # lam, look, grad: (4, ...) lists of multiplier arrays are packed as one flat vector each
    H, W = u.shape[0], u.shape[1]
    nh, nv = H * (W - 1) * 2, (H - 1) * W * 2
    mu = np.empty((H, W, 2))
    eh = np.empty((H, max(W - 1, 0), 2, 2))
    ev = np.empty((max(H - 1, 0), W, 2, 2))

    def views(x):
        return (x[:nh].reshape(H, max(W - 1, 0), 2), x[nh:2 * nh].reshape(H, max(W - 1, 0), 2),
                x[2 * nh:2 * nh + nv].reshape(max(H - 1, 0), W, 2), x[2 * nh + nv:].reshape(max(H - 1, 0), W, 2))

    gah, gbh, gav, gbv = views(grad)
    t = 1.0
    residual = np.inf
    it = 0
    new = np.empty_like(lam)
    while True:
        ah, bh, av, bv = views(look)
        residual = _primal_and_residual(u, h, v, ah, bh, av, bv, mu, eh, ev, gah, gbh, gav, gbv)
        if residual <= tol or it == max_iter:
            break
        it += 1
        progress = 0.0
        for j in range(lam.shape[0]):
            new[j] = look[j] + STEP * grad[j]
            progress += grad[j] * (new[j] - lam[j])
        if progress < 0.0:  # momentum points downhill: keep the step, drop the momentum
            t = 1.0
            for j in range(lam.shape[0]):
                lam[j] = new[j]
                look[j] = new[j]
            continue
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum = (t - 1.0) / t_next
        for j in range(lam.shape[0]):
            look[j] = new[j] + momentum * (new[j] - lam[j])
            lam[j] = new[j]
        t = t_next
    return mu, eh, ev, residual, it


def multiplier_size(H: int, W: int) -> int:
    """Length of the flat multiplier vector of an H x W grid (alpha, beta of both edge directions)."""
    return 2 * (2 * H * (W - 1) + 2 * (H - 1) * W)


def project_grid(u: np.ndarray, h: np.ndarray, v: np.ndarray, tol: float = 1e-9, max_iter: int = 20_000,
                 warm: np.ndarray | None = None):
    """Project ``(u, h, v)`` onto the grid's local polytope by dual FISTA.

    ``warm``: optional flat multipliers (length :func:`multiplier_size`) to start from, e.g. those
    of a nearby projection; they are overwritten with the final multipliers.

    Returns
    -------
    mu, eh, ev : the projected node and edge marginals (the Lagrangian minimiser at the last
        look-ahead multipliers, whose residual is the one returned)
    residual : float
        Max-abs marginalisation residual of the returned point (the certificate).
    iterations : int
    """
    H, W = u.shape[:2]
    size = multiplier_size(H, W)
    if warm is None:
        lam = np.zeros(size)
    elif warm.shape != (size,) or warm.dtype != np.float64:
        raise ValueError(f"warm multipliers must be a float64 vector of length {size}, got {warm.dtype} {warm.shape}")
    else:
        lam = warm
    u, h, v = (np.ascontiguousarray(x, dtype=np.float64) for x in (u, h, v))
    return _fista(u, h, v, lam, lam.copy(), np.empty(size), float(tol), int(max_iter))
