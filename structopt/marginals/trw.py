"""The tree-reweighted (TRW) objective, its gradient, and edge appearance probabilities ρ.

TRW(μ; θ, ρ) = ⟨θ, μ⟩ + Σ_i K_i H(μ_i) + Σ_ij ρ_ij H(μ_ij), with K_i = 1 − Σ_{j∈N(i)} ρ_ij (which can be
negative) and K_ij = ρ_ij. For ρ in the spanning-tree polytope 𝕋, max_{μ∈𝓜} TRW ≥ log Z.
Barrier Frank-Wolfe minimises f = −TRW; the kernels below take the coefficients expanded to one
per flat entry (``k_flat``) so every loop is a single pass over the flat vector.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import minimum_spanning_tree

from structopt.errors import InvalidInputError
from structopt.marginals.mrf import PairwiseMRF


def entropy_coefficients(mrf: PairwiseMRF, rho: np.ndarray) -> np.ndarray:
    """Per-entry entropy coefficients: K_i on node entries, ρ_ij on edge entries, shape (D,)."""
    rho = np.asarray(rho, dtype=np.float64)
    if rho.shape != (mrf.n_edges,):
        raise InvalidInputError(f"rho has shape {rho.shape}, expected ({mrf.n_edges},)")
    k_node = 1.0 - np.bincount(mrf.edges.ravel(), weights=np.repeat(rho, 2), minlength=mrf.n_nodes)
    return np.concatenate([k_node, rho])[mrf.block_of]


@njit(cache=True)
def trw_value(theta: np.ndarray, k_flat: np.ndarray, mu: np.ndarray) -> float:  # pragma: no cover - numba
    """TRW(μ) = Σ θ μ − Σ K μ log μ (0 log 0 = 0; -inf θ with μ = 0 contributes 0)."""
    total = 0.0
    for e in range(mu.size):
        m = mu[e]
        if m > 0.0:
            total += theta[e] * m - k_flat[e] * m * np.log(m)
    return total


@njit(cache=True)
def trw_gradient(theta: np.ndarray, k_flat: np.ndarray, mu: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """∇TRW(μ) = θ − K (1 + log μ) into ``out`` (μ must be positive where K ≠ 0)."""
    for e in range(mu.size):
        out[e] = theta[e] - k_flat[e] * (1.0 + np.log(mu[e]))


@njit(cache=True)
def _directional_derivative(theta: np.ndarray, k_flat: np.ndarray, x: np.ndarray, d: np.ndarray,
                            gamma: float) -> float:  # pragma: no cover - numba
    """d/dγ f(x + γ d) for f = −TRW."""
    total = 0.0
    for e in range(x.size):
        if d[e] != 0.0:
            y = x[e] + gamma * d[e]
            y = y if y > 1e-300 else 1e-300
            total += d[e] * (k_flat[e] * (1.0 + np.log(y)) - theta[e])
    return total


@njit(cache=True)
def line_search(theta: np.ndarray, k_flat: np.ndarray, x: np.ndarray, d: np.ndarray,
                gamma_max: float) -> float:  # pragma: no cover - numba
    """argmin over [0, γ_max] of the convex f(x + γ d), by bisection on the derivative."""
    if _directional_derivative(theta, k_flat, x, d, 0.0) >= 0.0:
        return 0.0
    if _directional_derivative(theta, k_flat, x, d, gamma_max) <= 0.0:
        return gamma_max
    lo, hi = 0.0, gamma_max
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _directional_derivative(theta, k_flat, x, d, mid) > 0.0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-15 * gamma_max:
            break
    return 0.5 * (lo + hi)


def block_entropies(mrf: PairwiseMRF, mu: np.ndarray) -> np.ndarray:
    """Entropy H(μ_c) of every block, shape (N + E,)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(mu > 0, -mu * np.log(mu), 0.0)
    return np.add.reduceat(terms, mrf.offsets[:-1])


def mutual_information(mrf: PairwiseMRF, mu: np.ndarray) -> np.ndarray:
    """I_ij = H(μ_i) + H(μ_j) − H(μ_ij) for every edge, shape (E,)."""
    h = block_entropies(mrf, mu)
    return h[mrf.edges[:, 0]] + h[mrf.edges[:, 1]] - h[mrf.n_nodes:]


def trw_objective(mrf: PairwiseMRF, mu: np.ndarray, rho: np.ndarray) -> float:
    """TRW(μ; θ, ρ) + the model's constant (the log Z estimate of a marginal vector μ)."""
    return float(trw_value(mrf.theta, entropy_coefficients(mrf, rho), np.asarray(mu, dtype=np.float64))) + mrf.constant


def check_rho(mrf: PairwiseMRF, rho: object, method: str, at_most_one: bool) -> np.ndarray:
    """User-given edge appearance weights ``rho`` as a float array of shape ``(n_edges,)``.

    Entries must be finite and > 0 (TRBP's reweighting), and <= 1 when ``at_most_one`` (edge
    appearance probabilities of a distribution over spanning trees, as Barrier Frank-Wolfe needs).
    """
    try:
        arr = np.asarray(rho, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.full(0, np.nan)
    ok = arr.shape == (mrf.n_edges,) and bool((np.isfinite(arr) & (arr > 0) & (~at_most_one | (arr <= 1))).all())
    if not ok:  # NaN fails every comparison
        interval = "(0, 1]" if at_most_one else "(0, inf)"
        raise InvalidInputError(f"{method}: rho must have shape ({mrf.n_edges},) with finite entries in {interval}")
    return arr


def spanning_tree_rho(mrf: PairwiseMRF, weights: np.ndarray | None = None) -> np.ndarray:
    """Edge appearance probabilities of the weighted random spanning tree (matrix-tree theorem).

    ρ_ij = w_ij R_ij, with R_ij the effective resistance between i and j in the graph whose edge
    conductances are w (w ≡ 1: the uniform distribution over spanning trees). Per connected
    component Σ ρ = ``|component|`` − 1, 0 < ρ ≤ 1, and ρ ≡ 1 on a forest.

    Parameters
    ----------
    mrf : PairwiseMRF
    weights : ndarray of shape (E,), optional
        Positive edge weights (default all ones).
    """
    e = mrf.n_edges
    if e == 0:
        return np.zeros(0)
    w = np.ones(e) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (e,) or not (w > 0).all():
        raise InvalidInputError("spanning-tree weights must be positive, one per edge")
    i, j = mrf.edges[:, 0], mrf.edges[:, 1]
    lap = np.zeros((mrf.n_nodes, mrf.n_nodes))
    np.add.at(lap, (i, j), -w)
    np.add.at(lap, (j, i), -w)
    lap[np.diag_indices_from(lap)] = -lap.sum(axis=1)
    pinv = np.linalg.pinv(lap, hermitian=True)
    rho = w * (pinv[i, i] + pinv[j, j] - 2.0 * pinv[i, j])
    return np.clip(rho, 1e-12, 1.0)


def max_spanning_tree(mrf: PairwiseMRF, weights: np.ndarray) -> np.ndarray:
    """Indicator (E,) of a maximum-weight spanning forest under ``weights`` (any sign, zeros allowed).

    scipy's sparse minimum spanning tree treats a zero as a missing edge, so the negated weights
    are shifted to be ≥ 1 first; a shift changes no spanning forest's ranking (all have the same
    number of edges per component).
    """
    weights = np.asarray(weights, dtype=np.float64)
    if mrf.n_edges == 0:
        return np.zeros(0)
    cost = weights.max() - weights + 1.0
    i, j = mrf.edges[:, 0], mrf.edges[:, 1]
    graph = coo_matrix((cost, (i, j)), shape=(mrf.n_nodes, mrf.n_nodes)).tocsr()
    tree = minimum_spanning_tree(graph).tocoo()
    ids = coo_matrix((np.arange(1, mrf.n_edges + 1), (i, j)), shape=graph.shape).tocsr()
    rows, cols = np.minimum(tree.row, tree.col), np.maximum(tree.row, tree.col)
    chosen = np.zeros(mrf.n_edges)
    chosen[np.asarray(ids[rows, cols]).ravel() - 1] = 1.0
    return chosen
