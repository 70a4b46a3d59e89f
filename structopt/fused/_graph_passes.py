"""Solver loops fused with the graph kernels: whole passes (AD3 oracle calls included) in one numba call.

Each loop performs the arithmetic of the solver's Python path (``_blocks.PythonBlockUpdater``, the FW,
SSG and hinge passes) with :mod:`structopt.fused._graph_pack`'s kernels; tests compare them. Flat compact
statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated arrays (the layout of
``SSVMProblem.compact_gold_stats``). Signatures are the chain family's (:mod:`structopt.fused._chain_passes`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.fused._graph_pack import graph_axpy, graph_oracle, graph_sqnorm


@njit(cache=True)
def adjoint_sum(blocks, offsets, scale, out, pack):
    """``out += scale * sum_i A_i^T blocks_i``."""
    for i in range(offsets.shape[0] - 1):
        graph_axpy(i, blocks[offsets[i]:offsets[i + 1]], scale, out, pack)


@njit(cache=True)
def oracle_steps(order, w, pack, offsets, theta_buf, stats_buf, total=0.0):
    """The oracle calls of a BCFW pass at fixed ``w`` and nothing else (the timing baseline); returns ``total``
    plus the sum of their losses (``total``: the sum so far, when a pass runs in chunks)."""
    for i in order:
        size = offsets[i + 1] - offsets[i]
        total += graph_oracle(i, w, pack, theta_buf[:size], stats_buf[:size])
    return total


@njit(cache=True)
def hinge_terms(w, pack, offsets, gold, theta_buf, stats_buf, out, start=0, stop=-1):
    """``out[i] = H_i(w)`` and ``out[n + i] = Delta(y_i, y_i*)`` for the examples ``start:stop`` (``stop < 0``:
    to the last; one oracle pass)."""
    n = offsets.shape[0] - 1
    for i in range(start, n if stop < 0 else stop):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = graph_oracle(i, w, pack, theta, stats)
        value = loss
        for j in range(hi - lo):
            value += (stats[j] - gold[lo + j]) * theta[j]
        out[i] = value
        out[n + i] = loss


@njit(cache=True)
def block_index(m, offsets, pack):
    """The graph steps keep no index beside ``m`` (their blocks are dense): two empty arrays."""
    return np.zeros((0, 0), dtype=np.int32), np.zeros(0, dtype=np.int64)


@njit(cache=True)
def bcfw_steps(order, line_search, averaging, n, lam, w, m, r, offsets, ell_i, scalars, pack, theta_buf, stats_buf,
               direction_buf, positions, counts, stages=5, gaps=None):
    """BCFW block steps on ``order``; ``scalars = [ell, v, k]`` in and out (see ``_blocks.BlockState``).

    The steps of ``PythonBlockUpdater.run``: direction ``s - m_i`` to the oracle's statistics, the block gap
    (written to ``gaps[i]`` when given; ``stages=2`` computes only the gaps), the line search on the
    curvature ``||A_i^T d||^2 / (lam n^2)``, the weight update, and the block's statistics, loss share and
    averaging accumulators. ``stages < 5`` stops each step early (timing breakdowns, as the chain's).
    ``positions`` and ``counts`` (:func:`block_index`) are unused.
    """
    ell, v, k = scalars[0], scalars[1], scalars[2]
    for p in range(order.shape[0]):
        i = order[p]
        lo, hi = offsets[i], offsets[i + 1]
        size = hi - lo
        theta = theta_buf[:size]
        stats = stats_buf[:size]
        direction = direction_buf[:size]
        loss_s = graph_oracle(i, w, pack, theta, stats) / n
        if stages == 1:
            continue
        numerator = 0.0
        for j in range(size):
            d = stats[j] - m[lo + j]
            direction[j] = d
            numerator += d * theta[j]
        numerator = numerator / n - ell_i[i] + loss_s
        if gaps is not None:
            gaps[i] = numerator
        if stages == 2:
            continue
        if line_search:
            denominator = graph_sqnorm(i, direction, pack) / (lam * n * n)
            if denominator <= 0.0:
                gamma = 1.0 if numerator > 0.0 else 0.0
            else:
                gamma = min(1.0, max(0.0, numerator / denominator))
        else:
            gamma = 2.0 * n / (k + 2.0 * n)
        k += 1.0
        if gamma == 0.0 or stages == 3:
            continue
        graph_axpy(i, direction, -gamma / (lam * n), w, pack)
        if stages == 4:
            continue
        delta_ell = gamma * (loss_s - ell_i[i])
        ell += delta_ell
        ell_i[i] += delta_ell
        weight = 0.5 * k * (k - 1.0) if averaging else 0.0
        if averaging:
            v += weight * delta_ell
        for j in range(size):
            m[lo + j] += gamma * direction[j]
        if averaging and weight != 0.0:
            wg = weight * gamma
            for j in range(size):
                r[lo + j] += wg * direction[j]
    scalars[0], scalars[1], scalars[2] = ell, v, k


@njit(cache=True)
def ssg_steps(order, lam, w, w_avg, k0, averaging, gold, offsets, pack, theta_buf, stats_buf):
    """Pegasos steps; ``w_avg`` keeps the weighted average ``2/(k(k+1)) sum_t t w_t``; returns the step count."""
    k = k0
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        stats = stats_buf[:hi - lo]
        graph_oracle(i, w, pack, theta_buf[:hi - lo], stats)
        step = 1.0 / (lam * (k + 1.0))
        w *= 1.0 - step * lam
        graph_axpy(i, stats - gold[lo:hi], -step, w, pack)
        k += 1
        if averaging:
            w_avg += (2.0 / (k + 1.0)) * (w - w_avg)
    return k


@njit(cache=True)
def fw_pass(w, lam, n, gold, offsets, pack, w_s, theta_buf, stats_buf, start=0, stop=-1, loss_sum=0.0,
            hinge_sum=0.0):
    """One oracle pass at ``w`` over the examples ``start:stop`` (``stop < 0``: to the last): accumulates the
    corner ``w_s``; returns (sum of losses, sum of hinges), added to ``loss_sum``, ``hinge_sum`` (the sums so
    far, when a pass runs in chunks: the same additions in the same order)."""
    for i in range(start, offsets.shape[0] - 1 if stop < 0 else stop):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = graph_oracle(i, w, pack, theta, stats)
        diff = gold[lo:hi] - stats
        loss_sum += loss
        hinge_sum += loss - np.dot(diff, theta)
        graph_axpy(i, diff, 1.0 / (lam * n), w_s, pack)
    return loss_sum, hinge_sum
