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
# A candidate of cell (t, b) is (value, code) with code = a << shift | l: rank l (< 2**shift) of
# state a at t - 1 (shifts, not divisions, in the inner loops).
# Candidates are ordered by larger value, then smaller code (smaller state, then smaller rank), so
# rank 0 of every cell is Viterbi's choice and every kernel breaks ties the same way.


@njit(cache=True, inline="always")
def _ahead(v1, c1, v2, c2):
    # is candidate (v1, c1) ahead of (v2, c2)? (branch-free form of the order above)
    return (v1 > v2) | ((v1 == v2) & (c1 < c2))


@njit(cache=True, inline="always")
def _merge_insert(prev, n_prev, pw, b, K, shift, out_v, out_c, heads):
    """K best of the S sorted lists ``prev[a, :n_prev] + pw[a, b]`` into ``out_v``/``out_c``.

    The list with the best head (Viterbi's choice) is copied first, so the buffer's last entry is
    a high bar from the start: most other lists are dismissed at their head (a predictable branch)
    and few entries are inserted. A list is left at its first entry that does not beat the bar.
    """
    S = prev.shape[0]
    best = NEG_INF
    top = 0
    for a in range(S):
        v = prev[a, 0] + pw[a, b]
        heads[a] = v
        if v > best:
            best = v
            top = a
    w = pw[top, b]
    for l in range(n_prev):
        out_v[l] = prev[top, l] + w
        out_c[l] = (top << shift) | l
    m = n_prev
    for a in range(S):
        if a == top or (m == K and heads[a] < out_v[K - 1]):
            continue  # the usual case, decided without the tie-breaking code
        w = pw[a, b]
        code = a << shift
        if m < K:  # the buffer has room (first positions only): insert
            for l in range(n_prev):
                v = prev[a, l] + w
                if m == K:
                    if not _ahead(v, code | l, out_v[K - 1], out_c[K - 1]):
                        break
                    j = K - 1
                else:
                    j = m
                    m += 1
                while j > 0 and _ahead(v, code | l, out_v[j - 1], out_c[j - 1]):
                    out_v[j] = out_v[j - 1]
                    out_c[j] = out_c[j - 1]
                    j -= 1
                out_v[j] = v
                out_c[j] = code | l
            continue
        # full buffer: the r first entries of list a beat its last entry; merge them in from the
        # back, dropping the r last entries of the union (each moved entry moves once)
        r = 0
        while r < n_prev and _ahead(prev[a, r] + w, code | r, out_v[K - 1], out_c[K - 1]):
            r += 1
        i = K - 1
        j = r - 1
        for _ in range(r):
            if _ahead(prev[a, j] + w, code | j, out_v[i], out_c[i]):
                i -= 1
            else:
                j -= 1
        dst = K - 1
        while j >= 0:
            v = prev[a, j] + w
            if i >= 0 and _ahead(v, code | j, out_v[i], out_c[i]):
                out_v[dst] = out_v[i]
                out_c[dst] = out_c[i]
                i -= 1
            else:
                out_v[dst] = v
                out_c[dst] = code | j
                j -= 1
            dst -= 1
    return m


@njit(cache=True)
def _sift_down(hv, hc, n, i):
    v, c = hv[i], hc[i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _ahead(hv[child + 1], hc[child + 1], hv[child], hc[child]):
            child += 1
        if not _ahead(hv[child], hc[child], v, c):
            break
        hv[i], hc[i] = hv[child], hc[child]
        i = child
    hv[i], hc[i] = v, c


@njit(cache=True)
def _merge_heap(prev, n_prev, pw, b, K, shift, out_v, out_c, hv, hc):
    """K best of the S sorted lists ``prev[a, :n_prev] + pw[a, b]`` with a heap of list heads."""
    S = prev.shape[0]
    for a in range(S):
        hv[a] = prev[a, 0] + pw[a, b]
        hc[a] = a << shift
    for i in range(S // 2 - 1, -1, -1):
        _sift_down(hv, hc, S, i)
    n = S
    m = 0
    while m < K and n > 0:
        out_v[m] = hv[0]
        c = hc[0]
        out_c[m] = c
        m += 1
        a = c >> shift
        l = (c & ((1 << shift) - 1)) + 1
        if l < n_prev:
            hv[0] = prev[a, l] + pw[a, b]
            hc[0] = c + 1
        else:
            n -= 1
            hv[0], hc[0] = hv[n], hc[n]
        _sift_down(hv, hc, n, 0)
    return m


# up to this K the buffer merge beats the heap (measured at S = 26; both give the same output)
INSERT_MAX_K = 32


@njit(cache=True)
def topk_viterbi(unary, pairwise, K):
    """Exact K best label sequences (all S**T when fewer exist), sorted by decreasing score.

    The forward pass keeps, for every state, the K best partial scores (a sorted (S, K) table for
    the previous and current positions only) and a back-pointer code per entry; each cell merges
    the S sorted incoming lists, stopping after K entries, so a call costs O(T S (S + K log S)).
    Sequences with score -inf (forbidden entries) are ordinary candidates: they come last, so
    fewer than K finite scores are padded with distinct sequences of score -inf.
    """
    return _topk(unary, pairwise, K, K <= INSERT_MAX_K)


@njit(cache=True)
def _topk(unary, pairwise, K, small):
    T, S = unary.shape
    total = 1  # no more than S**T sequences exist: cap K (and the tables) there
    for _ in range(T):
        total = min(total * S, K)
    K = total
    shift = 0
    while (1 << shift) < K:
        shift += 1
    mask = (1 << shift) - 1
    prev = np.empty((S, K))
    cur = np.empty((S, K))
    back = np.empty((T, S, K), dtype=np.int32)
    out_v = np.empty(K)
    out_c = np.empty(K, dtype=np.int64)
    hv = np.empty(S)
    hc = np.empty(S, dtype=np.int64)
    for s in range(S):
        prev[s, 0] = unary[0, s]
    n_prev = 1
    for t in range(1, T):
        pw = _transition(pairwise, t - 1)
        n_cur = min(K, n_prev * S)
        for b in range(S):
            if small:
                _merge_insert(prev, n_prev, pw, b, K, shift, out_v, out_c, hv)
            else:
                _merge_heap(prev, n_prev, pw, b, K, shift, out_v, out_c, hv, hc)
            u = unary[t, b]
            for l in range(n_cur):
                cur[b, l] = out_v[l] + u
                back[t, b, l] = out_c[l]
        prev, cur = cur, prev
        n_prev = n_cur
    # final merge over the last position's states (no transition)
    zero = np.zeros((S, 1))
    if small:
        m = _merge_insert(prev, n_prev, zero, 0, K, shift, out_v, out_c, hv)
    else:
        m = _merge_heap(prev, n_prev, zero, 0, K, shift, out_v, out_c, hv, hc)
    labels = np.empty((m, T), dtype=np.int64)
    scores = out_v[:m].copy()
    for k in range(m):
        s = out_c[k] >> shift
        l = out_c[k] & mask
        labels[k, T - 1] = s
        for t in range(T - 1, 0, -1):
            c = back[t, s, l]
            s = c >> shift
            l = c & mask
            labels[k, t - 1] = s
    return labels, scores


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
