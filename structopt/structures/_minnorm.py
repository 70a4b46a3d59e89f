"""Euclidean projection onto the convex hull of a structure's outputs, from its argmax oracle only.

Wolfe's minimum-norm-point algorithm on the translated hull ``conv(Y) - v``: a corral of vertices
is kept, each major cycle adds the vertex returned by the linear oracle, and minor cycles move to
the affine minimiser of the corral (dropping vertices whose weight would turn negative). It stops
when the Frank-Wolfe gap ``<v - p, s - p>`` of the oracle's vertex s is below the tolerance, which
is the optimality certificate of the projection p (``||p - p*||^2 <= gap``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_WEIGHT_EPS = 1e-12


def _affine_minimiser(points: np.ndarray) -> np.ndarray:
    # weights a (sum 1) minimising ||points @ a||: the KKT system [[G, 1], [1^T, 0]] of the Gram matrix
    m = points.shape[1]
    kkt = np.zeros((m + 1, m + 1))
    kkt[:m, :m] = points.T @ points
    kkt[:m, m] = kkt[m, :m] = 1.0
    rhs = np.zeros(m + 1)
    rhs[m] = 1.0
    solution = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    return solution[:m]


def project_hull(v: np.ndarray, linear_oracle: Callable[[np.ndarray], np.ndarray], tol: float = 1e-12,
                 max_iter: int | None = None) -> tuple[np.ndarray, float]:
    """Project ``v`` onto ``conv(Y)`` given ``linear_oracle(d) = argmax_{s in Y} <d, s>``.

    Parameters
    ----------
    v : (n,) array
    linear_oracle : callable
        Returns a vertex (flat statistics, (n,) array) maximising ``<d, s>``.
    tol : float
        Stop when the Frank-Wolfe gap is at most ``tol * max(1, ||s - v||^2)``.
    max_iter : int, optional
        Major cycles allowed (default ``10 n + 100``).

    Returns
    -------
    p : (n,) array
        The projection.
    gap : float
        The final gap ``max_s <v - p, s - p>`` (a certificate: ``||p - p*||^2 <= gap``).
    """
    v = np.asarray(v, dtype=float)
    max_iter = 10 * v.size + 100 if max_iter is None else int(max_iter)
    corral = (np.asarray(linear_oracle(v), dtype=float) - v)[:, None]
    weights = np.ones(1)
    x = corral[:, 0].copy()
    for _ in range(max_iter):
        q = np.asarray(linear_oracle(-x), dtype=float) - v
        gap = float(x @ x - x @ q)
        if gap <= tol * max(1.0, float(q @ q)):
            return x + v, max(gap, 0.0)
        if np.any(np.all(np.abs(corral - q[:, None]) <= 1e-15, axis=0)):
            return x + v, max(gap, 0.0)  # the oracle's vertex is already in the corral: rounding floor
        corral = np.column_stack([corral, q])
        weights = np.append(weights, 0.0)
        while True:  # minor cycles
            alpha = _affine_minimiser(corral)
            if np.all(alpha > _WEIGHT_EPS):
                weights = alpha
                break
            moving = alpha <= _WEIGHT_EPS
            ratios = weights[moving] / np.maximum(weights[moving] - alpha[moving], 1e-300)
            step = float(np.clip(np.min(ratios), 0.0, 1.0))
            weights = (1.0 - step) * weights + step * alpha
            keep = weights > _WEIGHT_EPS
            corral, weights = corral[:, keep], weights[keep] / weights[keep].sum()
        x = corral @ weights
    q = np.asarray(linear_oracle(-x), dtype=float) - v
    gap = float(x @ x - x @ q)
    raise RuntimeError(f"min-norm-point projection did not converge in {max_iter} iterations (gap {gap:.2e})")
