"""Batch passes over a problem, written once for every executor.

Each function runs one pass over all examples of ``problem`` at fixed weights and returns *sums*
(scalars, a weight-space vector, or compact statistics of named blocks), never per-example dense
vectors. The serial executor calls them on the whole problem; the parallel executors call them on
contiguous chunks (sub-problems) and add the chunks' answers in chunk order, so the results agree
with the serial ones up to the order of floating-point additions.

``n_total`` is the size of the whole problem: the scale ``1 / n`` of a sum belongs to the whole
problem, not to the chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from structopt.fused import select
from structopt.potentials import Potentials, flatten
from structopt.problem import SSVMProblem


def hinge_values(problem: SSVMProblem, w: np.ndarray) -> np.ndarray:
    """``H_i(w)`` of every example (fused pass when the problem has one)."""
    fast = select(problem)
    if fast is not None:
        return fast.hinge_terms(np.asarray(w, dtype=float))[0].copy()
    return problem.hinge_losses(w)


def fw_corner(problem: SSVMProblem, w: np.ndarray, fused: bool | None, n_total: int
              ) -> tuple[np.ndarray, float, float]:
    """Frank-Wolfe corner of one oracle pass at ``w``.

    Returns
    -------
    w_s : ndarray
        ``sum_i A_i^T (gold_i - stats(y_i*)) / (lam n_total)``.
    loss_sum, hinge_sum : float
        ``sum_i Delta(y_i, y_i*)`` and ``sum_i H_i(w)``.
    """
    w = np.ascontiguousarray(w, dtype=np.float64)
    w_s = np.zeros_like(w)
    fast = select(problem, fused)
    if fast is not None:
        loss_sum, hinge_sum = fast.fw_pass(w, n_total, w_s)
        return w_s, float(loss_sum), float(hinge_sum)
    scale = 1.0 / (problem.lam * n_total)
    loss_sum = hinge_sum = 0.0
    for i in range(problem.n):
        d = problem.decode(i, w)
        hinge_sum += problem.hinge(i, d)
        loss_sum += d.loss
        stats = problem.compact_stats(d.y, d.theta)
        problem.adjoint(i, problem.gold_stats(i, d.theta), w_s, scale)
        problem.adjoint(i, stats, w_s, -scale)
    return w_s, loss_sum, hinge_sum


def smooth_snapshot(problem: SSVMProblem, w: np.ndarray, mu: float, kind: str, k: int, n_total: int
                    ) -> tuple[list[Potentials], np.ndarray, float]:
    """One smoothed-oracle pass at ``w`` (an SVRG snapshot).

    Returns
    -------
    diffs : list of Potentials
        Per example, expected minus gold statistics in the model's compact layout (what the
        stochastic steps subtract; statistics-sized, not weight-sized).
    grad : ndarray
        ``sum_i A_i^T diffs_i / n_total``.
    value : float
        ``sum_i f_{i,mu}(w) / n_total``.
    """
    diffs: list[Potentials] = []
    grad = np.zeros(problem.n_params)
    value = 0.0
    for i in range(problem.n):
        res = problem.smooth_stats(i, problem.theta(i, w), mu, kind, k)
        diffs.append(res.diff)
        problem.adjoint(i, res.diff, grad, 1.0 / n_total)
        value += res.value / n_total
    return diffs, grad, value


def block_oracles(problem: SSVMProblem, w: np.ndarray, indices: Sequence[int]
                  ) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Loss-augmented decoding of the examples ``indices`` at the same ``w`` (mini-batch BCFW).

    Returns, per example, ``(stats, theta, loss)``: the maximiser's compact statistics and the
    potentials ``A_i w``, both flat in the layout of ``SSVMProblem.compact_gold_stats``, and
    ``Delta(y_i, y_i*)``.
    """
    out = []
    for i in indices:
        d = problem.decode(int(i), w)
        stats = flatten(problem.compact_stats(d.y, d.theta))
        out.append((stats, flatten(d.theta), float(d.loss)))
    return out


def echo(problem: SSVMProblem, w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """No oracle work, an answer shaped like :func:`fw_corner`'s: what a round costs on an executor
    besides the oracles (scheduling, sending ``w``, returning a weight-sized sum)."""
    return np.zeros_like(np.asarray(w, dtype=float)), 0.0, 0.0


def predict(problem: SSVMProblem, X: Sequence[Any], w: np.ndarray) -> list[Any]:
    """MAP outputs for the inputs ``X`` (see :meth:`SSVMProblem.predict`)."""
    return problem.predict(X, w)
