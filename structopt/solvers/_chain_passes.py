"""Solver loops fused with the chain kernels: whole passes in one numba call, cached on disk.

Each loop performs exactly the arithmetic of the solver's Python path (the tests compare them
iterate by iterate) but calls :mod:`structopt.models._chain_fused`'s kernels directly, so that
numba compiles it once and loads it from its disk cache in later processes. Flat compact
statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated arrays (the layout of
``SSVMProblem.compact_gold_stats``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.models._chain_fused import chain_axpy, chain_node_sqnorm, chain_oracle

FAMILY = "chain"


@njit(cache=True)
def adjoint_sum(blocks, offsets, scale, out, pack):
    """``out += scale * sum_i A_i^T blocks_i``."""
    for i in range(offsets.shape[0] - 1):
        chain_axpy(i, blocks[offsets[i]:offsets[i + 1]], scale, out, pack)


@njit(cache=True)
def oracle_steps(order, w, pack, offsets, theta_buf, stats_buf):
    """The oracle calls of a BCFW pass at fixed ``w`` and nothing else (the timing baseline)."""
    total = 0.0
    for i in order:
        size = offsets[i + 1] - offsets[i]
        total += chain_oracle(i, w, pack, theta_buf[:size], stats_buf[:size])
    return total


@njit(cache=True)
def hinge_terms(w, pack, offsets, gold, theta_buf, stats_buf, out):
    """``out[i] = H_i(w)`` and ``out[n + i] = Delta(y_i, y_i*)`` for every example (one oracle pass)."""
    n = offsets.shape[0] - 1
    for i in range(n):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = chain_oracle(i, w, pack, theta, stats)
        value = loss
        for j in range(hi - lo):
            value += (stats[j] - gold[lo + j]) * theta[j]
        out[i] = value
        out[n + i] = loss


@njit(cache=True)
def bcfw_steps(order, line_search, averaging, n, lam, w, m, r, offsets, ell_i, scalars, pack, theta_buf, stats_buf,
               direction_buf):
    """BCFW block steps on ``order``; ``scalars = [ell, v, k]`` in and out (see ``_blocks.BlockState``).

    Chain layout: example i's compact statistics are its (T, S) node block, then the shared (S, S)
    transition block. The transition block of ``A_i^T`` is the identity into the shared weights, so
    the averaging accumulator ``r`` of those blocks is summed over examples in one (S, S) array
    (cache-resident) and added to the first example's block at the end: ``sum_i A_i^T r_i`` is
    unchanged, and a step touches only its node block of ``r``.
    """
    ell, v, k = scalars[0], scalars[1], scalars[2]
    S = pack.n_states
    r_pair = np.zeros(S * S)
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        size = hi - lo
        nu = hi - lo - S * S
        theta = theta_buf[:size]
        stats = stats_buf[:size]
        direction = direction_buf[:size]
        loss_s = chain_oracle(i, w, pack, theta, stats) / n
        numerator = 0.0
        for j in range(nu):
            d = stats[j] - m[lo + j]
            direction[j] = d
            numerator += d * theta[j]
        pair_sq = 0.0
        for j in range(nu, size):
            d = stats[j] - m[lo + j]
            direction[j] = d
            numerator += d * theta[j]
            pair_sq += d * d
        numerator = numerator / n - ell_i[i] + loss_s
        if line_search:
            denominator = (chain_node_sqnorm(i, direction, pack) + pair_sq) / (lam * n * n)
            if denominator <= 0.0:
                gamma = 1.0 if numerator > 0.0 else 0.0
            else:
                gamma = min(1.0, max(0.0, numerator / denominator))
        else:
            gamma = 2.0 * n / (k + 2.0 * n)
        k += 1.0
        if gamma == 0.0:
            continue
        chain_axpy(i, direction, -gamma / (lam * n), w, pack)
        delta_ell = gamma * (loss_s - ell_i[i])
        ell += delta_ell
        ell_i[i] += delta_ell
        if averaging:
            weight = 0.5 * k * (k - 1.0)
            v += weight * delta_ell
            for j in range(nu):  # one sweep over both state arrays
                step = gamma * direction[j]
                m[lo + j] += step
                r[lo + j] += weight * step
            for j in range(nu, size):
                step = gamma * direction[j]
                m[lo + j] += step
                r_pair[j - nu] += weight * step
        else:
            for j in range(size):
                m[lo + j] += gamma * direction[j]
    if averaging and offsets.shape[0] > 1:
        first = offsets[1] - S * S
        for j in range(S * S):
            r[first + j] += r_pair[j]
    scalars[0], scalars[1], scalars[2] = ell, v, k


@njit(cache=True)
def ssg_steps(order, lam, w, w_avg, k0, averaging, gold, offsets, pack, theta_buf, stats_buf):
    """Pegasos steps; ``w_avg`` keeps the weighted average ``2/(k(k+1)) sum_t t w_t``; returns the step count."""
    k = k0
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        stats = stats_buf[:hi - lo]
        chain_oracle(i, w, pack, theta_buf[:hi - lo], stats)
        step = 1.0 / (lam * (k + 1.0))
        w *= 1.0 - step * lam
        chain_axpy(i, stats - gold[lo:hi], -step, w, pack)
        k += 1
        if averaging:
            w_avg += (2.0 / (k + 1.0)) * (w - w_avg)
    return k


@njit(cache=True)
def fw_pass(w, lam, n, gold, offsets, pack, w_s, theta_buf, stats_buf):
    """One oracle pass at ``w``: accumulates the corner ``w_s``; returns (sum of losses, sum of hinges)."""
    loss_sum = 0.0
    hinge_sum = 0.0
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        theta = theta_buf[:hi - lo]
        stats = stats_buf[:hi - lo]
        loss = chain_oracle(i, w, pack, theta, stats)
        diff = gold[lo:hi] - stats
        loss_sum += loss
        hinge_sum += loss - np.dot(diff, theta)
        chain_axpy(i, diff, 1.0 / (lam * n), w_s, pack)
    return loss_sum, hinge_sum
