"""Linear-algebra pieces of the extragradient saddle point: the A_i blocks, gold sums, ||B||_2."""

from __future__ import annotations

import numpy as np

from structopt.potentials import Potentials, add, sq_norm


def block_theta(problem, i: int, w: np.ndarray) -> Potentials:
    """``A_i w`` in the full statistics layout (shared parameters expanded per part)."""
    return problem.expand(problem.theta(i, w))


def loss_vector(problem, i: int) -> tuple[Potentials, float]:
    """``(c_i, d_i)`` of the linear loss, ``c_i`` in the full statistics layout."""
    c, d = problem.loss_terms(i)
    return problem.expand(c), float(d)


def gold_mean(problem) -> np.ndarray:
    """``(1/n) sum_i f_i(y_i)`` with ``f_i(y_i) = A_i^T stats(y_i)``."""
    out = np.zeros(problem.n_params)
    for i in range(problem.n):
        like = block_theta(problem, i, out * 0.0)
        problem.adjoint(i, problem.gold_stats(i, like), out, 1.0 / problem.n)
    return out


def operator_norm(problem, n_iter: int = 30, rng: np.random.Generator | None = None) -> float:
    """``||B||_2`` for ``B = [A_1^T ... A_n^T]`` by power iteration on ``B B^T = sum_i A_i^T A_i``.

    Each iteration is one pass of ``potentials`` / ``add_features`` products over the data.
    Power iteration approaches the top eigenvalue from below; callers add a safety margin.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    x = rng.normal(size=problem.n_params)
    x /= np.linalg.norm(x)
    estimate = 0.0
    for _ in range(int(n_iter)):
        y = np.zeros_like(x)
        for i in range(problem.n):
            problem.adjoint(i, block_theta(problem, i, x), y)
        estimate = float(x @ y)  # Rayleigh quotient of the unit vector x
        norm = np.linalg.norm(y)
        if norm == 0.0:
            return 0.0
        x = y / norm
    return float(np.sqrt(max(estimate, 0.0)))


def diff_sq_norm(a: Potentials, b: Potentials) -> float:
    """``||a - b||^2``."""
    return sq_norm(add(a, b, -1.0))
