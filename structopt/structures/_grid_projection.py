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
residuals and its Lipschitz constant is at most ``||A||^2 <= 4 * 3 = 12`` (a node is in at most
4 edges, a constraint row has 3 nonzeros). Accelerated gradient ascent (FISTA, step 1/12, with
the gradient restart of O'Donoghue and Candes) runs until the max-abs residual is <= ``tol``.

Certificate: the returned point satisfies every KKT condition exactly (node simplices, edge
non-negativity, the Lagrangian optimality) except the marginalisation equalities, whose max-abs
residual is returned; the caller falls back to the cvxpy QP when it is above ``tol``.
"""

from __future__ import annotations

import numpy as np

STEP = 1.0 / 12.0


def _primal(u, h, v, ah, bh, av, bv):
    # the Lagrangian minimiser for multipliers (alpha, beta) of horizontal and vertical edges
    s = u.copy()
    s[:, :-1] += ah
    s[:, 1:] += bh
    s[:-1, :] += av
    s[1:, :] += bv
    # two-state simplex projection in closed form
    z0 = np.clip(0.5 * (1.0 + s[..., 0] - s[..., 1]), 0.0, 1.0)
    mu = np.stack([z0, 1.0 - z0], axis=-1)
    eh = np.maximum(h - ah[..., :, None] - bh[..., None, :], 0.0)
    ev = np.maximum(v - av[..., :, None] - bv[..., None, :], 0.0)
    return mu, eh, ev


def _residuals(mu, eh, ev):
    # gradient of the dual: rows(e) - mu_first, cols(e) - mu_second
    return (eh.sum(axis=-1) - mu[:, :-1], eh.sum(axis=-2) - mu[:, 1:],
            ev.sum(axis=-1) - mu[:-1, :], ev.sum(axis=-2) - mu[1:, :])


def project_grid(u: np.ndarray, h: np.ndarray, v: np.ndarray, tol: float = 1e-9, max_iter: int = 20_000):
    """Project ``(u, h, v)`` onto the grid's local polytope by dual FISTA.

    Returns
    -------
    mu, eh, ev : the projected node and edge marginals
    residual : float
        Max-abs marginalisation residual of the returned point (the certificate).
    iterations : int
    """
    H, W = u.shape[:2]
    lam = [np.zeros((H, W - 1, 2)), np.zeros((H, W - 1, 2)), np.zeros((H - 1, W, 2)), np.zeros((H - 1, W, 2))]
    look = [x.copy() for x in lam]
    t = 1.0
    residual = np.inf
    it = 0
    for it in range(max_iter + 1):
        mu, eh, ev = _primal(u, h, v, *look)
        grad = _residuals(mu, eh, ev)
        residual = max((float(np.max(np.abs(g))) for g in grad if g.size), default=0.0)
        if residual <= tol:
            return mu, eh, ev, residual, it
        if it == max_iter:
            break
        new = [y + STEP * g for y, g in zip(look, grad)]
        restart = sum(float(np.sum(g * (n - x))) for g, n, x in zip(grad, new, lam)) < 0.0
        if restart:  # momentum points downhill: keep the step, drop the momentum
            lam, look, t = new, [x.copy() for x in new], 1.0
            continue
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum = (t - 1.0) / t_next
        look = [n + momentum * (n - x) for n, x in zip(new, lam)]
        lam, t = new, t_next
    mu, eh, ev = _primal(u, h, v, *lam)
    grad = _residuals(mu, eh, ev)
    residual = max((float(np.max(np.abs(g))) for g in grad if g.size), default=0.0)
    return mu, eh, ev, residual, it
