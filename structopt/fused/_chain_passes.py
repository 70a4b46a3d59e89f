"""Solver loops fused with the chain kernels: whole passes in one numba call, cached on disk.

Each loop performs exactly the arithmetic of the solver's Python path (the tests compare them
iterate by iterate) but calls :mod:`structopt.fused._chain_pack`'s kernels directly, so that
numba compiles it once and loads it from its disk cache in later processes. Flat compact
statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated arrays (the layout of
``SSVMProblem.compact_gold_stats``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.fused._chain_pack import chain_axpy, chain_node_axpy, chain_node_sqnorm, chain_oracle
from structopt.fused._prefetch import prefetch


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
def block_index(m, offsets, pack):
    """The index ``bcfw_steps`` keeps beside ``m``: per example, the positions of the non-zero
    entries of its transition block, ``(positions (n, S*S) int32, counts (n,))``."""
    SS = pack.n_states * pack.n_states
    n = offsets.shape[0] - 1
    positions = np.empty((n, SS), dtype=np.int32)
    counts = np.zeros(n, dtype=np.int64)
    for i in range(n):
        base = offsets[i + 1] - SS
        c = 0
        for j in range(SS):
            if m[base + j] != 0.0:
                positions[i, c] = j
                c += 1
        counts[i] = c
    return positions, counts


@njit(cache=True)
def _support_union(positions, count, labels, T, S, marked, out):
    # the sorted union of the block's support (sorted) and the corner's transitions, so that sums
    # over it run in one order however the support was reached (a resumed run rebuilds it from m);
    # returns its length. ``marked`` (S*S, all False) is left all False.
    for q in range(count):
        out[q] = positions[q]
        marked[positions[q]] = True
    c = count
    for t in range(1, T):
        j = labels[t - 1] * S + labels[t]
        if not marked[j]:  # new: insert in place (a corner adds few)
            marked[j] = True
            q = c
            while q > 0 and out[q - 1] > j:
                out[q] = out[q - 1]
                q -= 1
            out[q] = j
            c += 1
    for q in range(c):
        marked[out[q]] = False
    return c


@njit(cache=True)
def bcfw_steps(order, line_search, averaging, n, lam, w, m, r, offsets, ell_i, scalars, pack, theta_buf, stats_buf,
               direction_buf, positions, counts, stages=5, gaps=None):
    """BCFW block steps on ``order``; ``scalars = [ell, v, k]`` in and out (see ``_blocks.BlockState``).

    ``gaps`` (n values, optional): each visited block's exact gap at the weights of its step (the
    line-search numerator, before the step) is written to ``gaps[i]``, for gap sampling
    (:mod:`structopt.solvers._gap_blocks`). With ``stages=2`` nothing else changes: the call only
    computes the gaps of the blocks of ``order`` at ``w`` (gap sampling's refresh pass).

    Chain layout: example i's compact statistics are its (T, S) node block, then the shared (S, S)
    transition block. The transition block of ``A_i^T`` is the identity into the shared weights, so
    the averaging accumulator ``r`` of those blocks is summed over examples in one (S, S) array
    (cache-resident) and added to the first example's block at the end: ``sum_i A_i^T r_i`` is
    unchanged, and a step touches only its node block of ``r``.

    A transition block of ``m`` is a combination of a few corners' transition counts: a few dozen
    non-zeros out of S*S. ``positions``/``counts`` (from :func:`block_index`, kept up to date here)
    list them, so a step reads and writes only the union of those and the new corner's
    transitions (in increasing order); the entries skipped are zero in the direction, so the sums
    are the dense loop's.

    ``stages < 5`` is for timing breakdowns (stages 3 and 4 leave the state inconsistent): each step
    stops after its oracle call (1), its direction and block gap (2: the state is unchanged), its
    line-search norm (3) or its weight update (4).
    """
    ell, v, k = scalars[0], scalars[1], scalars[2]
    S = pack.n_states
    SS = S * S
    p0 = pack.n_features * S
    r_pair = np.zeros(SS)
    union = np.empty(SS, dtype=np.int64)
    pair_direction = np.empty(SS)
    max_tokens = stats_buf.shape[0] // S + 1
    labels = np.empty(max_tokens, dtype=np.int64)  # the corner's labels
    nonzero = np.empty((max_tokens, S), dtype=np.int64)  # per token, the labels where the direction is non-zero
    n_nonzero = np.zeros(max_tokens, dtype=np.int64)
    marked = np.zeros(SS, dtype=np.bool_)
    for p in range(order.shape[0]):
        i = order[p]
        lo, hi = offsets[i], offsets[i + 1]
        size = hi - lo
        nu = size - SS
        T = nu // S
        # the blocks are far apart in memory: ask for the next step's lines (its node block, support
        # list, loss share and Gram matrix) and this step's transition entries now, to arrive
        # during the oracle call
        if p + 1 < order.shape[0]:
            following = order[p + 1]
            start, stop = offsets[following], offsets[following + 1] - SS
            for j in range(start, stop, 8):
                prefetch(m, j)
                if averaging:
                    prefetch(r, j)
            prefetch(positions[following], 0)
            prefetch(ell_i, following)
            if line_search:
                for j in range(pack.gram_off[following], pack.gram_off[following + 1], 8):
                    prefetch(pack.gram, j)
        for q in range(counts[i]):
            prefetch(m, lo + nu + positions[i, q])
        theta = theta_buf[:size]
        stats = stats_buf[:size]
        direction = direction_buf[:size]
        loss_s = chain_oracle(i, w, pack, theta, stats) / n
        if stages == 1:
            continue
        numerator = 0.0
        for t in range(T):  # branch-free: the non-zeros fall at unpredictable labels
            c = 0
            label = 0.0
            row = nonzero[t]
            for s in range(S):
                j = t * S + s
                d = stats[j] - m[lo + j]
                direction[j] = d
                numerator += d * theta[j]
                label += s * stats[j]  # the corner is one-hot
                row[c] = s
                c += d != 0.0
            labels[t] = int(label)
            n_nonzero[t] = c
        n_union = _support_union(positions[i], counts[i], labels, T, S, marked, union)
        pair_sq = 0.0
        for q in range(n_union):
            j = nu + union[q]
            d = stats[j] - m[lo + j]
            pair_direction[q] = d
            numerator += d * theta[j]
            pair_sq += d * d
        numerator = numerator / n - ell_i[i] + loss_s
        if gaps is not None:
            gaps[i] = numerator
        if stages == 2:
            continue
        if line_search:
            denominator = (chain_node_sqnorm(i, direction, nonzero, n_nonzero, pack) + pair_sq) / (lam * n * n)
            if denominator <= 0.0:
                gamma = 1.0 if numerator > 0.0 else 0.0
            else:
                gamma = min(1.0, max(0.0, numerator / denominator))
        else:
            gamma = 2.0 * n / (k + 2.0 * n)
        k += 1.0
        if gamma == 0.0 or stages == 3:
            continue
        scale = -gamma / (lam * n)
        chain_node_axpy(i, direction, nonzero, n_nonzero, scale, w, pack)
        for q in range(n_union):
            w[p0 + union[q]] += scale * pair_direction[q]
        if stages == 4:
            continue
        delta_ell = gamma * (loss_s - ell_i[i])
        ell += delta_ell
        ell_i[i] += delta_ell
        weight = 0.5 * k * (k - 1.0) if averaging else 0.0
        if averaging:
            v += weight * delta_ell
        for t in range(T):  # the non-zeros of the node block, in both state arrays
            for q in range(n_nonzero[t]):
                j = lo + t * S + nonzero[t, q]
                step = gamma * direction[j - lo]
                m[j] += step
                if averaging:
                    r[j] += weight * step
        c = 0
        row = positions[i]
        for q in range(n_union):
            j = union[q]
            step = gamma * pair_direction[q]
            m[lo + nu + j] += step
            if averaging:
                r_pair[j] += weight * step
            if m[lo + nu + j] != 0.0:
                row[c] = j
                c += 1
        counts[i] = c
    if averaging and offsets.shape[0] > 1:
        first = offsets[1] - SS
        for j in range(SS):
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
