"""Smoothed maxima over a finite set of scores (Pillutla et al., §2.3).

The l2-smoothed max of scores z is ``h(z) = max_{u in simplex} <u, z> - (mu/2)(||u||^2 - 1)``,
attained at ``u = proj_simplex(z / mu)``; the entropy-smoothed max is ``mu log sum exp(z / mu)``
with gradient ``softmax(z / mu)``. Both lie in ``[max z, max z + mu D]`` with D = 1/2 and log m.
"""

from __future__ import annotations

import numpy as np


def logsumexp(z: np.ndarray) -> float:
    """Numerically stable ``log sum exp(z)`` (``-inf`` for an empty or all ``-inf`` input)."""
    z = np.asarray(z, dtype=float)
    if z.size == 0:
        return -np.inf
    m = np.max(z)
    if not np.isfinite(m):
        return float(m)
    return float(m + np.log(np.sum(np.exp(z - m))))


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto the probability simplex (sort-based, O(m log m))."""
    v = np.asarray(v, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("project_simplex expects a non-empty 1-d array")
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    ks = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / ks > 0)[0][-1]
    tau = css[rho] / (rho + 1)
    return np.maximum(v - tau, 0.0)


def l2_smoothed_max(scores: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """l2-smoothed max of a score vector and its gradient (the simplex weights).

    Parameters
    ----------
    scores : (m,) array
        Finite scores (drop ``-inf`` entries first).
    mu : float
        Smoothing parameter, > 0.

    Returns
    -------
    value : float
        ``<u, z> - (mu/2)(||u||^2 - 1)``, the smoothed max itself (not only ``<u, z>``), so that
        the returned weights are exactly its gradient.
    weights : (m,) array
        ``u = proj_simplex(z / mu)``.
    """
    if mu <= 0:
        raise ValueError(f"smoothing parameter mu must be > 0, got {mu}")
    z = np.asarray(scores, dtype=float)
    u = project_simplex(z / mu)
    return float(u @ z - 0.5 * mu * (u @ u - 1.0)), u


def entropy_smoothed_max(scores: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """Entropy-smoothed max ``mu log sum exp(z / mu)`` and its gradient ``softmax(z / mu)``."""
    if mu <= 0:
        raise ValueError(f"smoothing parameter mu must be > 0, got {mu}")
    z = np.asarray(scores, dtype=float) / mu
    log_z = logsumexp(z)
    return float(mu * log_z), np.exp(z - log_z)
