"""numba kernels for chain dynamic programs.

Conventions: ``unary`` is (T, S) float64; ``pairwise`` is (P, S, S) float64 with P == 1 for a
transition matrix shared by all positions, or P == T - 1 with ``pairwise[t]`` scoring the
transition from position t to t + 1 (``pairwise[t, a, b]``: y_t = a, y_{t+1} = b).
Ties are broken towards the smaller state index (and, in top-K, the smaller rank), so every
kernel is deterministic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEG_INF = -np.inf


@njit(cache=True, inline="always")
def _transition(pairwise, t):
    # transition matrix used between positions t and t + 1
    return pairwise[t] if pairwise.shape[0] > 1 else pairwise[0]


@njit(cache=True)
def viterbi(unary, pairwise):
    """Best label sequence and its score."""
    T, S = unary.shape
    back = np.empty((T, S), dtype=np.int64)
    score = unary[0].copy()
    new = np.empty(S)
    for t in range(1, T):
        pw = _transition(pairwise, t - 1)
        for b in range(S):
            best = NEG_INF
            arg = 0
            for a in range(S):
                v = score[a] + pw[a, b]
                if v > best:
                    best = v
                    arg = a
            new[b] = best + unary[t, b]
            back[t, b] = arg
        score[:] = new
    y = np.empty(T, dtype=np.int64)
    last = 0
    for s in range(1, S):
        if score[s] > score[last]:
            last = s
    y[T - 1] = last
    for t in range(T - 1, 0, -1):
        y[t - 1] = back[t, y[t]]
    return y, score[last]


@njit(cache=True)
def viterbi_batch(unary, pairwise, offsets, out):
    """Viterbi on every example of a concatenated dataset (shared pairwise); labels into ``out``."""
    total = 0.0
    for i in range(offsets.shape[0] - 1):
        y, value = viterbi(unary[offsets[i]:offsets[i + 1]], pairwise)
        out[offsets[i]:offsets[i + 1]] = y
        total += value
    return total


# ----------------------------------------------------------------------------- top-K
@njit(cache=True, inline="always")
def _before(v1, a1, l1, v2, a2, l2):
    # heap order: larger value first, then smaller state, then smaller rank
    if v1 != v2:
        return v1 > v2
    if a1 != a2:
        return a1 < a2
    return l1 < l2


@njit(cache=True)
def _sift_down(hv, ha, hl, n, i):
    while True:
        left = 2 * i + 1
        if left >= n:
            return
        best = left
        right = left + 1
        if right < n and _before(hv[right], ha[right], hl[right], hv[left], ha[left], hl[left]):
            best = right
        if _before(hv[best], ha[best], hl[best], hv[i], ha[i], hl[i]):
            hv[i], hv[best] = hv[best], hv[i]
            ha[i], ha[best] = ha[best], ha[i]
            hl[i], hl[best] = hl[best], hl[i]
            i = best
        else:
            return


@njit(cache=True)
def _heapify(hv, ha, hl, n):
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(hv, ha, hl, n, i)


@njit(cache=True)
def topk_viterbi(unary, pairwise, K):
    """Exact K best label sequences (fewer when fewer exist), sorted by score.

    Forward pass keeps, for every position and state, the K best partial scores with back
    pointers (previous state, previous rank); each cell merges S sorted lists with a heap, so a
    call costs O(T S (S + K log S)) plus the backtracking.
    """
    T, S = unary.shape
    pi = np.full((T, S, K), NEG_INF)
    count = np.zeros((T, S), dtype=np.int64)
    bstate = np.zeros((T, S, K), dtype=np.int64)
    brank = np.zeros((T, S, K), dtype=np.int64)
    for s in range(S):
        pi[0, s, 0] = unary[0, s]
        count[0, s] = 1
    hv = np.empty(S)
    ha = np.empty(S, dtype=np.int64)
    hl = np.empty(S, dtype=np.int64)
    for t in range(1, T):
        pw = _transition(pairwise, t - 1)
        for b in range(S):
            n = 0
            for a in range(S):
                if count[t - 1, a] > 0:
                    hv[n] = pi[t - 1, a, 0] + pw[a, b]
                    ha[n] = a
                    hl[n] = 0
                    n += 1
            _heapify(hv, ha, hl, n)
            k = 0
            while k < K and n > 0:
                v, a, l = hv[0], ha[0], hl[0]
                pi[t, b, k] = v + unary[t, b]
                bstate[t, b, k] = a
                brank[t, b, k] = l
                k += 1
                if l + 1 < count[t - 1, a]:
                    hv[0] = pi[t - 1, a, l + 1] + pw[a, b]
                    hl[0] = l + 1
                else:
                    n -= 1
                    hv[0], ha[0], hl[0] = hv[n], ha[n], hl[n]
                _sift_down(hv, ha, hl, n, 0)
            count[t, b] = k
    # final merge over the last position's states
    n = 0
    for s in range(S):
        if count[T - 1, s] > 0:
            hv[n] = pi[T - 1, s, 0]
            ha[n] = s
            hl[n] = 0
            n += 1
    _heapify(hv, ha, hl, n)
    labels = np.empty((K, T), dtype=np.int64)
    scores = np.empty(K)
    k = 0
    while k < K and n > 0:
        v, s, l = hv[0], ha[0], hl[0]
        scores[k] = v
        # backtrack
        labels[k, T - 1] = s
        for t in range(T - 1, 0, -1):
            prev = bstate[t, s, l]
            l = brank[t, s, l]
            s = prev
            labels[k, t - 1] = s
        k += 1
        s0, l0 = ha[0], hl[0]
        if l0 + 1 < count[T - 1, s0]:
            hv[0] = pi[T - 1, s0, l0 + 1]
            hl[0] = l0 + 1
        else:
            n -= 1
            hv[0], ha[0], hl[0] = hv[n], ha[n], hl[n]
        _sift_down(hv, ha, hl, n, 0)
    return labels[:k], scores[:k]


# ----------------------------------------------------------------------------- sum-product
@njit(cache=True, inline="always")
def _reduce(values, use_max):
    # max, or log-sum-exp shifted by the max (one exp per entry)
    m = NEG_INF
    for v in values:
        if v > m:
            m = v
    if use_max or m == NEG_INF:
        return m
    acc = 0.0
    for v in values:
        acc += np.exp(v - m)
    return m + np.log(acc)


@njit(cache=True)
def _max_product_tables(unary, pairwise):
    T, S = unary.shape
    alpha = np.full((T, S), NEG_INF)
    beta = np.zeros((T, S))
    alpha[0] = unary[0]
    buf = np.empty(S)
    for t in range(1, T):
        pw = _transition(pairwise, t - 1)
        for b in range(S):
            for a in range(S):
                buf[a] = alpha[t - 1, a] + pw[a, b]
            alpha[t, b] = _reduce(buf, True) + unary[t, b]
    for t in range(T - 2, -1, -1):
        pw = _transition(pairwise, t)
        for a in range(S):
            for b in range(S):
                buf[b] = pw[a, b] + unary[t + 1, b] + beta[t + 1, b]
            beta[t, a] = _reduce(buf, True)
    return alpha, beta


# Sum-product in scaled probability space: a transition matrix is exponentiated once, shifted by
# its max (E = exp(pw - pmax)), and each step multiplies max-shifted exponentials of the messages
# by it, so a position costs S^2 multiply-adds and O(S) exp/log instead of S^2 exp. A message
# entry whose scaled sum is too small to trust (below TINY: underflow, or a -inf transition
# column) is recomputed exactly in log space, so the result matches the log-space recursion.
TINY = 1e-280


@njit(cache=True)
def _scaled_transitions(pairwise):
    P, S = pairwise.shape[0], pairwise.shape[1]
    E = np.empty((P, S, S))
    shift = np.empty(P)
    for p in range(P):
        m = NEG_INF
        for a in range(S):
            for b in range(S):
                m = max(m, pairwise[p, a, b])
        shift[p] = m if m > NEG_INF else 0.0
        for a in range(S):
            for b in range(S):
                E[p, a, b] = np.exp(pairwise[p, a, b] - shift[p])
    return E, shift


@njit(cache=True, inline="always")
def _shifted_exp(values, out):
    # out = exp(values - max), returns the max (-inf when all are -inf, out then zero)
    m = NEG_INF
    for v in values:
        m = max(m, v)
    for k in range(values.shape[0]):
        out[k] = np.exp(values[k] - m) if m > NEG_INF else 0.0
    return m


@njit(cache=True)
def forward_backward(unary, pairwise):
    """log Z, node marginals (T, S) and edge marginals (T-1, S, S) (scaled sum-product)."""
    T, S = unary.shape
    E, shift = _scaled_transitions(pairwise)
    single = pairwise.shape[0] == 1
    alpha = np.empty((T, S))
    beta = np.zeros((T, S))
    alpha[0] = unary[0]
    scaled = np.empty(S)
    buf = np.empty(S)
    for t in range(1, T):
        p = 0 if single else t - 1
        top = _shifted_exp(alpha[t - 1], scaled)
        for b in range(S):
            acc = 0.0
            for a in range(S):
                acc += scaled[a] * E[p, a, b]
            if acc > TINY:
                alpha[t, b] = unary[t, b] + top + shift[p] + np.log(acc)
            else:
                for a in range(S):
                    buf[a] = alpha[t - 1, a] + pairwise[p, a, b]
                alpha[t, b] = unary[t, b] + _reduce(buf, False)
    below = np.empty((T, S))  # below[t, b] = unary[t, b] + beta[t, b]
    below[T - 1] = unary[T - 1]
    for t in range(T - 2, -1, -1):
        p = 0 if single else t
        top = _shifted_exp(below[t + 1], scaled)
        for a in range(S):
            acc = 0.0
            for b in range(S):
                acc += E[p, a, b] * scaled[b]
            if acc > TINY:
                beta[t, a] = top + shift[p] + np.log(acc)
            else:
                for b in range(S):
                    buf[b] = pairwise[p, a, b] + below[t + 1, b]
                beta[t, a] = _reduce(buf, False)
            below[t, a] = unary[t, a] + beta[t, a]
    log_z = _reduce(alpha[T - 1], False)
    node = np.exp(alpha + beta - log_z)
    edge = np.empty((max(T - 1, 0), S, S))
    left = np.empty(S)
    for t in range(T - 1):
        p = 0 if single else t
        top_left = _shifted_exp(alpha[t], left)
        top_right = _shifted_exp(below[t + 1], scaled)
        factor = top_left + shift[p] + top_right - log_z
        if factor < 700.0:
            c = np.exp(factor)
            for a in range(S):
                for b in range(S):
                    edge[t, a, b] = c * left[a] * E[p, a, b] * scaled[b]
        else:  # the scaled product could overflow: exact log-space entries
            for a in range(S):
                for b in range(S):
                    edge[t, a, b] = np.exp(alpha[t, a] + pairwise[p, a, b] + below[t + 1, b] - log_z)
    return log_z, node, edge


@njit(cache=True)
def max_marginals(unary, pairwise):
    """mm[t, s] = best score of a sequence with y_t = s."""
    alpha, beta = _max_product_tables(unary, pairwise)
    return alpha + beta
