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


def l2_smoothed_max_sorted(z: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """:func:`l2_smoothed_max` of scores already sorted non-increasingly (Prop. 3).

    The support size k is the first j with ``sum_{i<=j} (z_i - z_{j+1}) >= mu`` (else all), and
    ``u_i = max(0, 1/k + (z_i - mean(z_1..z_k)) / mu)``: the scores are never divided by mu, so the
    weights stay exact (one-hot, or uniform over ties) when mu is far below the score gaps.
    """
    if mu <= 0:
        raise ValueError(f"smoothing parameter mu must be > 0, got {mu}")
    z = np.asarray(z, dtype=float)
    m = z.size
    csum = np.cumsum(z)
    j = np.arange(1, m)
    hit = np.flatnonzero(csum[:-1] - j * z[1:] >= mu)
    k = int(hit[0]) + 1 if hit.size else m
    u = np.zeros(m)
    u[:k] = np.maximum(0.0, 1.0 / k + (z[:k] - csum[k - 1] / k) / mu)
    u /= u.sum()  # round-off only
    return float(u @ z - 0.5 * mu * (u @ u - 1.0)), u


def l2_smoothed_max(scores: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """l2-smoothed max of a score vector and its gradient (the simplex weights).

    Parameters
    ----------
    scores : (m,) array
        Finite scores (drop ``-inf`` entries first), in any order.
    mu : float
        Smoothing parameter, > 0.

    Returns
    -------
    value : float
        ``<u, z> - (mu/2)(||u||^2 - 1)``, the smoothed max itself (not only ``<u, z>``), so that
        the returned weights are exactly its gradient.
    weights : (m,) array
        ``u = proj_simplex(z / mu)``, in the order of ``scores``.
    """
    z = np.asarray(scores, dtype=float)
    order = np.argsort(-z, kind="stable")
    value, sorted_weights = l2_smoothed_max_sorted(z[order], mu)
    weights = np.empty_like(sorted_weights)
    weights[order] = sorted_weights
    return value, weights


def entropy_smoothed_max(scores: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """Entropy-smoothed max ``mu log sum exp(z / mu)`` and its gradient ``softmax(z / mu)``."""
    if mu <= 0:
        raise ValueError(f"smoothing parameter mu must be > 0, got {mu}")
    z = np.asarray(scores, dtype=float) / mu
    log_z = logsumexp(z)
    return float(mu * log_z), np.exp(z - log_z)
