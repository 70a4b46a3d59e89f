"""numba kernels for chain dynamic programs.

Conventions: ``unary`` is (T, S) float64; ``pairwise`` is (P, S, S) float64 with P == 1 for a
transition matrix shared by all positions, or P == T - 1 with ``pairwise[t]`` scoring the
transition from position t to t + 1 (``pairwise[t, a, b]``: y_t = a, y_{t+1} = b).
Ties are broken towards the smaller state index (and, in top-K, the smaller rank), so every
kernel is deterministic.

Entries may be -inf (a forbidden label, transition, start or end): a sequence using one has score
-inf. Viterbi then returns a finite-scoring sequence whenever one exists, top-K lists the finite
scores first and pads with forbidden sequences (score -inf), max-marginals are -inf where no
feasible sequence passes, and forward-backward gives forbidden entries marginal exactly 0. NaN and
+inf are not valid potentials: the ``*_checked`` kernels report them (and an empty feasible set,
read off the best score or log Z being -inf, or an out-of-range log Z) as a status code that
``input_error`` turns into a message.
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
    best = np.empty(S)
    arg = np.empty(S, dtype=np.int64)
    for t in range(1, T):
        pw = _transition(pairwise, t - 1)
        # loop over the previous label outside, the next label inside: the inner loop runs along a
        # row of the transition matrix (contiguous, branch-free selects that vectorise); for each b the
        # comparisons are the same, in the same order (a = 0, 1, ...), as a scan of column b, so the
        # ties (smallest a) and the -inf / NaN cases are unchanged
        best[:] = NEG_INF
        arg[:] = 0
        for a in range(S):
            sa = score[a]
            row = pw[a]
            for b in range(S):
                v = sa + row[b]
                ahead = v > best[b]
                best[b] = v if ahead else best[b]
                arg[b] = a if ahead else arg[b]
        for b in range(S):
            score[b] = best[b] + unary[t, b]
            back[t, b] = arg[b]
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


# ----------------------------------------------------------------------------- input range
# Status codes of the checked kernels (``input_error`` turns them into messages).
OK, HAS_NAN, HAS_POS_INF, INFEASIBLE, LOG_Z_OVERFLOW = 0, 1, 2, 3, 4
# Below this bound on |sum of potentials along a sequence| plain float64 recursions cannot overflow
# (the log-sum-exp terms add at most T log S).
SAFE = 1e300
# Above this bound the rounding error of a score may exceed ~1e-9: forward-backward then checks
# that every position's marginals still sum to 1.
CAREFUL = 1e6


@njit(cache=True)
def input_range(unary, pairwise):
    """Largest |entry| among entries > -inf (-inf marks a forbidden label or transition).

    NaN when an entry is NaN, +inf when one is +inf.
    """
    # branch-free (vectorisable) pass: NaN count, largest entry, smallest entry above -inf
    n_nan = 0
    hi = NEG_INF
    lo = 0.0
    for t in range(unary.shape[0]):
        for s in range(unary.shape[1]):
            x = unary[t, s]
            n_nan += x != x
            hi = max(hi, x)
            lo = min(lo, x if x > NEG_INF else 0.0)
    for p in range(pairwise.shape[0]):
        for a in range(pairwise.shape[1]):
            for b in range(pairwise.shape[2]):
                x = pairwise[p, a, b]
                n_nan += x != x
                hi = max(hi, x)
                lo = min(lo, x if x > NEG_INF else 0.0)
    if n_nan:
        return np.nan
    return max(hi, -lo)


@njit(cache=True)
def _status(bound):
    if bound != bound:
        return HAS_NAN
    if bound == np.inf:
        return HAS_POS_INF
    return OK


@njit(cache=True)
def _power_of_two_at_least(n):
    x = 1.0
    while x < n:
        x *= 2.0
    return x


@njit(cache=True)
def input_status(unary, pairwise):
    """OK, HAS_NAN or HAS_POS_INF, and the largest |entry| above -inf (one compiled pass)."""
    bound = input_range(unary, pairwise)
    return _status(bound), bound


@njit(cache=True)
def viterbi_checked(unary, pairwise):
    """Viterbi labels and a status code (NaN / +inf potentials are refused, not decoded).

    Potentials so large that a sequence's score could overflow are first scaled down by a power
    of two: the maximiser is scale-free, and the scaled sums round exactly like the unscaled ones,
    so a best score of -inf means that every sequence uses a -inf entry (status INFEASIBLE; the
    test costs one comparison, not a pass over the inputs).
    """
    T = unary.shape[0]
    bound = input_range(unary, pairwise)
    status = _status(bound)
    if status != OK:
        return np.zeros(T, dtype=np.int64), status
    if bound * 2 * T < SAFE:
        y, score = viterbi(unary, pairwise)
    else:
        scale = 1.0 / _power_of_two_at_least(2.0 * T + 2.0)
        y, score = viterbi(unary * scale, pairwise * scale)
    return y, OK if score > NEG_INF else INFEASIBLE


# Status of :func:`argmax_entry` when the arrays do not have a chain's shapes (the caller's generic
# check then names the problem).
BAD_SHAPE = 5


@njit(cache=True)
def argmax_entry(unary, pairwise, n_states):
    """Shape check, input scan and Viterbi in one compiled call (``Chain.argmax``'s per-call path).

    ``unary`` is (T, S) and ``pairwise`` (S, S) shared or (T-1, S, S) per position, float64, with
    S = ``n_states``; the transitions of a one-position chain are ignored (as ``check_potentials``
    does). Returns ``(labels, status)``: the status of :func:`viterbi_checked`, or BAD_SHAPE.
    """
    T, S = unary.shape
    if T < 1 or S != n_states or pairwise.shape[pairwise.ndim - 1] != S or pairwise.shape[pairwise.ndim - 2] != S:
        return np.zeros(max(T, 0), dtype=np.int64), BAD_SHAPE
    if pairwise.ndim == 3 and pairwise.shape[0] != T - 1:
        return np.zeros(T, dtype=np.int64), BAD_SHAPE
    if T == 1:  # no transition is used
        return viterbi_checked(unary, np.zeros((1, S, S)))
    return viterbi_checked(unary, pairwise.reshape((pairwise.size // (S * S), S, S)))


def first_blocked_position(unary: np.ndarray, pairwise: np.ndarray) -> int:
    """The first position t at which every label sequence of the prefix 0..t uses a -inf entry.

    -1 when some whole sequence avoids every -inf entry. Reads only which entries are -inf (so
    huge finite potentials cannot fake it); runs on the error path only.
    """
    mask_u = np.where(np.isneginf(unary), NEG_INF, 0.0)
    mask_p = np.where(np.isneginf(pairwise), NEG_INF, 0.0)
    alpha, _ = _max_product_tables(mask_u, mask_p)
    blocked = np.flatnonzero(np.all(np.isneginf(alpha), axis=1))
    return int(blocked[0]) if blocked.size else -1


def infeasible_message(unary: np.ndarray, pairwise: np.ndarray, note: str = "") -> str:
    """Why no label sequence has a finite score (names the first position where all are forbidden)."""
    t = first_blocked_position(unary, pairwise)
    if t == 0:
        where = "every label at position 0 is -inf"
    elif t > 0:
        where = (f"no label at position {t} of {unary.shape[0]} extends a prefix of finite score: its unary "
                 f"or transition entries are -inf")
    else:  # no entry forbids every sequence: finite sums overflowed to -inf
        return (f"the scores of these chain potentials overflow float64 (largest |entry| "
                f"{input_range(unary, pairwise):.3g}); scale them down")
    return f"chain potentials forbid every output: every label sequence has score -inf ({where}{note})"


def input_error(status: int, unary: np.ndarray, pairwise: np.ndarray, note: str = "") -> str:
    """The message for a checked kernel's non-zero status (naming the first offending entry).

    ``note`` is appended to the INFEASIBLE message (e.g. that the chain's masks take part).
    """
    if status in (HAS_NAN, HAS_POS_INF):
        test, what = (np.isnan, "NaN") if status == HAS_NAN else (np.isposinf, "+inf")
        for name, arr in (("unary", unary), ("pairwise", pairwise)):
            where = np.argwhere(test(arr))
            if len(where):
                index = ", ".join(str(i) for i in where[0])
                return (f"chain potentials contain {what} ({name}[{index}]); potentials must be finite "
                        f"or -inf (a forbidden label or transition)")
    if status == INFEASIBLE:
        return infeasible_message(unary, pairwise, note)
    if status == LOG_Z_OVERFLOW:
        return (f"the log-partition of these chain potentials (largest |entry| {input_range(unary, pairwise):.3g}) "
                f"is beyond the float64 range")
    return f"chain kernel status {status}"


# ----------------------------------------------------------------------------- top-K
# An entry of cell (t, b) (the rank-th best partial sequence ending in state b at position t) has
# a value and a code = a << shift | l: it extends rank l of state a at position t - 1 (shifts, not
# divisions, in the inner loops). Entries are ordered by larger value, then smaller code (smaller
# state, then smaller rank): a total order, so the output is deterministic, rank 0 of every cell is
# Viterbi's choice, and the K best for K' < K are the first K' of the K best.


@njit(cache=True, inline="always")
def _ahead(v1, c1, v2, c2):
    # is entry (v1, c1) before (v2, c2) in the order above?
    return (v1 > v2) | ((v1 == v2) & (c1 < c2))


@njit(cache=True, inline="always")
def _heap_push(hv, hc, base, n, v, c):
    # add (v, c) to the n-entry heap stored at hv[base:], hc[base:]
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if not _ahead(v, c, hv[base + parent], hc[base + parent]):
            break
        hv[base + i] = hv[base + parent]
        hc[base + i] = hc[base + parent]
        i = parent
    hv[base + i] = v
    hc[base + i] = c


@njit(cache=True, inline="always")
def _heap_pop(hv, hc, base, n):
    # drop the first entry of the n-entry heap at hv[base:], hc[base:]
    n -= 1
    v, c = hv[base + n], hc[base + n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _ahead(hv[base + child + 1], hc[base + child + 1], hv[base + child], hc[base + child]):
            child += 1
        if not _ahead(hv[base + child], hc[base + child], v, c):
            break
        hv[base + i] = hv[base + child]
        hc[base + i] = hc[base + child]
        i = child
    hv[base + i] = v
    hc[base + i] = c


@njit(cache=True)
def topk_viterbi(unary, pairwise, K):
    """Exact K best label sequences (all S**T when fewer exist), sorted by decreasing score.

    Lazy K-best: a Viterbi pass gives every cell its best entry; a cell's next entries are made
    only on demand, from a heap holding, per previous state, the next unused rank of that state's
    list. The entry just taken from a cell stays 'pending' until the cell's next entry is asked
    for; only then is its successor (the next rank of the same list) pushed, which may ask the
    previous position for one more entry. Position T is a virtual cell (one state, no scores)
    whose list is the answer. Only cells on the paths of the K answers grow, so a call costs
    about one Viterbi pass plus O(K T log S) heap steps.

    Sequences with score -inf (forbidden entries) are ordinary entries: they come last, so fewer
    than K finite scores are padded with distinct sequences of score -inf.
    """
    T, S = unary.shape
    total = 1  # no more than S**T sequences exist: cap K there
    for _ in range(T):
        total = min(total * S, K)
    K = total
    shift = 0
    while (1 << shift) < K:
        shift += 1
    mask = (1 << shift) - 1
    # rank 0 of every cell (compact); ranks >= 1 and the heap of a cell live in a block of the
    # pools, given out in order when the cell is first expanded, so the pages touched are few
    v0 = np.empty((T + 1, S))
    c0 = np.empty((T + 1, S), dtype=np.int64)
    block = np.full((T + 1, S), -1, dtype=np.int64)
    count = np.ones((T + 1, S), dtype=np.int64)
    size = np.zeros((T + 1, S), dtype=np.int64)  # heap sizes
    pending = np.empty((T + 1, S), dtype=np.int64)
    done = np.zeros((T + 1, S), dtype=np.bool_)
    R = max(K - 1, 1)
    n_blocks = 0
    cap = (T + 1) * S
    pool_v = np.empty(cap * R)
    pool_c = np.empty(cap * R, dtype=np.int64)
    heap_v = np.empty(cap * S)
    heap_c = np.empty(cap * S, dtype=np.int64)
    zero = np.zeros((S, 1))
    # Viterbi (same arithmetic and tie-breaking as viterbi)
    for s in range(S):
        v0[0, s] = unary[0, s]
        done[0, s] = True
    for t in range(1, T + 1):
        pw = _transition(pairwise, t - 1) if t < T else zero
        for b in range(S if t < T else 1):
            best = NEG_INF
            top = 0
            for a in range(S):
                v = v0[t - 1, a] + pw[a, b]
                if v > best:
                    best = v
                    top = a
            v0[t, b] = best + unary[t, b] if t < T else best
            c0[t, b] = top << shift
            pending[t, b] = top << shift
    # requests (t, b, rank): make count[t, b] > rank unless the cell runs out; a request may need
    # one entry of the previous position first, so the stack is at most T + 1 deep
    st_t = np.empty(T + 2, dtype=np.int64)
    st_b = np.empty(T + 2, dtype=np.int64)
    st_r = np.empty(T + 2, dtype=np.int64)
    for k in range(1, K):
        sp = 1
        st_t[0], st_b[0], st_r[0] = T, 0, k
        while sp > 0:
            t, b, want = st_t[sp - 1], st_b[sp - 1], st_r[sp - 1]
            if count[t, b] > want or done[t, b]:
                sp -= 1
                continue
            pw = _transition(pairwise, t - 1) if t < T else zero
            if block[t, b] < 0:  # first expansion: a block, and the heads of the other lists
                block[t, b] = n_blocks
                n_blocks += 1
                hb = block[t, b] * S
                first = pending[t, b] >> shift
                for a in range(S):
                    if a != first:
                        _heap_push(heap_v, heap_c, hb, size[t, b], v0[t - 1, a] + pw[a, b], a << shift)
                        size[t, b] += 1
            hb = block[t, b] * S
            c = pending[t, b]
            if c >= 0:  # push the successor of the entry taken last
                a = c >> shift
                rank = (c & mask) + 1
                if rank < K:
                    if count[t - 1, a] <= rank and not done[t - 1, a]:
                        st_t[sp], st_b[sp], st_r[sp] = t - 1, a, rank
                        sp += 1
                        continue
                    if count[t - 1, a] > rank:
                        v = pool_v[block[t - 1, a] * R + rank - 1]
                        _heap_push(heap_v, heap_c, hb, size[t, b], v + pw[a, b], c + 1)
                        size[t, b] += 1
                pending[t, b] = -1
            if size[t, b] == 0:
                done[t, b] = True
                continue
            v, c = heap_v[hb], heap_c[hb]
            _heap_pop(heap_v, heap_c, hb, size[t, b])
            size[t, b] -= 1
            slot = block[t, b] * R + count[t, b] - 1
            pool_v[slot] = v + unary[t, b] if t < T else v
            pool_c[slot] = c
            count[t, b] += 1
            pending[t, b] = c
        if count[T, 0] <= k:
            break
    m = count[T, 0]
    labels = np.empty((m, T), dtype=np.int64)
    scores = np.empty(m)
    for k in range(m):
        if k == 0:
            scores[k], c = v0[T, 0], c0[T, 0]
        else:
            scores[k], c = pool_v[block[T, 0] * R + k - 1], pool_c[block[T, 0] * R + k - 1]
        for t in range(T - 1, -1, -1):
            s = c >> shift
            labels[k, t] = s
            if t > 0:
                rank = c & mask
                c = c0[t, s] if rank == 0 else pool_c[block[t, s] * R + rank - 1]
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
def _normalised_exp(x, n, inv_c, out):
    # out[:n] = softmax(x[:n] * inv_c) (x[:n] has a finite entry)
    m = NEG_INF
    for i in range(n):
        m = max(m, x[i])
    acc = 0.0
    for i in range(n):
        out[i] = np.exp((x[i] - m) * inv_c)
        acc += out[i]
    for i in range(n):
        out[i] /= acc


@njit(cache=True)
def _scaled_transitions(pairwise):
    P, S = pairwise.shape[0], pairwise.shape[1]
    E = np.empty((P, S, S))
    Et = np.empty((P, S, S))  # transposed copy: both passes then sweep contiguous rows
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
                Et[p, b, a] = E[p, a, b]
    return E, Et, shift


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
def _forward_backward_fast(unary, pairwise, careful):
    # exact while no partial sum of potentials overflows (the caller checks the input range);
    # ``careful``: scores may carry a rounding error above ~1e-9 (checks node normalisation)
    T, S = unary.shape
    E, Et, shift = _scaled_transitions(pairwise)
    single = pairwise.shape[0] == 1
    alpha = np.empty((T, S))
    beta = np.zeros((T, S))
    alpha[0] = unary[0]
    scaled = np.empty(S)
    buf = np.empty(S)
    sums = np.empty(S)
    # sums[b] = sum_a scaled[a] E[a, b], accumulated row by row in a (the same order as a dot
    # product per b, but S independent accumulators that vectorise)
    for t in range(1, T):
        p = 0 if single else t - 1
        top = _shifted_exp(alpha[t - 1], scaled)
        sums[:] = 0.0
        for a in range(S):
            sa = scaled[a]
            for b in range(S):
                sums[b] += sa * E[p, a, b]
        for b in range(S):
            acc = sums[b]
            if acc > TINY:
                alpha[t, b] = unary[t, b] + top + shift[p] + np.log(acc)
            else:
                for a in range(S):
                    buf[a] = alpha[t - 1, a] + pairwise[p, a, b]
                alpha[t, b] = unary[t, b] + _reduce(buf, False)
    below = np.empty((T, S))  # below[t, b] = unary[t, b] + beta[t, b]
    below[T - 1] = unary[T - 1]
    mass = np.empty((max(T - 1, 0), S))  # the scaled sums behind beta[t], reused for edge totals
    for t in range(T - 2, -1, -1):
        p = 0 if single else t
        top = _shifted_exp(below[t + 1], scaled)
        sums[:] = 0.0
        for b in range(S):
            sb = scaled[b]
            for a in range(S):
                sums[a] += Et[p, b, a] * sb
        for a in range(S):
            acc = sums[a]
            mass[t, a] = acc
            if acc > TINY:
                beta[t, a] = top + shift[p] + np.log(acc)
            else:
                for b in range(S):
                    buf[b] = pairwise[p, a, b] + below[t + 1, b]
                beta[t, a] = _reduce(buf, False)
            below[t, a] = unary[t, a] + beta[t, a]
    log_z = _reduce(alpha[T - 1], False)
    if log_z == NEG_INF:
        return log_z, np.zeros((T, S)), np.zeros((max(T - 1, 0), S, S))
    node = np.empty((T, S))
    edge = np.empty((max(T - 1, 0), S, S))
    # exp(alpha + beta - log Z) loses or gains mass once the rounding error of a score exceeds
    # ~1e-9 (potentials of magnitude ~1e6 and up): such positions are normalised on their own.
    flat = np.empty(S * S)
    for t in range(T):
        for b in range(S):
            node[t, b] = np.exp(alpha[t, b] + beta[t, b] - log_z)
        if careful and not abs(np.sum(node[t]) - 1.0) < 1e-9:
            for b in range(S):
                flat[b] = alpha[t, b] + beta[t, b]
            _normalised_exp(flat, S, 1.0, node[t])
    left = np.empty(S)
    for t in range(T - 1):
        p = 0 if single else t
        top_left = _shifted_exp(alpha[t], left)
        top_right = _shifted_exp(below[t + 1], scaled)
        factor = top_left + shift[p] + top_right - log_z
        out = edge[t]
        total = 0.0
        if factor < 700.0:
            c = np.exp(factor)
            for a in range(S):
                total += left[a] * mass[t, a]
                for b in range(S):
                    out[a, b] = c * left[a] * E[p, a, b] * scaled[b]
            total *= c
        if not abs(total - 1.0) < 1e-9:  # overflow, underflow or rounding: exact log-space entries
            for a in range(S):
                for b in range(S):
                    flat[a * S + b] = alpha[t, a] + pairwise[p, a, b] + below[t + 1, b]
            _normalised_exp(flat, S * S, 1.0, out.reshape(S * S))
    return log_z, node, edge


# Wide-range sum-product: the log-space recursion run on potentials scaled by c = 2**-k, with
# 2**k >= 4 (T + 1), so neither a partial sum of a sequence's 2T - 1 terms nor the difference of two
# overflows; only the differences inside log-sum-exp are scaled back (by 1/c) before
# exponentiating, and a difference that overflows to -inf there has exponential 0 anyway.
# Power-of-two scaling rounds exactly like the unscaled sums, so this is the plain log-space
# recursion with a wider exponent range.


@njit(cache=True)
def _lse_scaled(x, n, inv_c):
    # c * log sum exp(x[:n] / c) for c-scaled log-weights x
    m = NEG_INF
    for i in range(n):
        m = max(m, x[i])
    if m == NEG_INF:
        return NEG_INF
    acc = 0.0
    for i in range(n):
        acc += np.exp((x[i] - m) * inv_c)
    return m + np.log(acc) / inv_c


@njit(cache=True)
def _forward_backward_wide(unary, pairwise):
    T, S = unary.shape
    single = pairwise.shape[0] == 1
    inv_c = _power_of_two_at_least(4.0 * T + 4.0)
    c = 1.0 / inv_c
    alpha = np.empty((T, S))  # c * log forward messages
    beta = np.empty((T, S))  # c * log backward messages
    buf = np.empty(S)
    for b in range(S):
        alpha[0, b] = c * unary[0, b]
    for t in range(1, T):
        p = 0 if single else t - 1
        for b in range(S):
            for a in range(S):
                buf[a] = alpha[t - 1, a] + c * pairwise[p, a, b]
            alpha[t, b] = c * unary[t, b] + _lse_scaled(buf, S, inv_c)
    beta[T - 1] = 0.0
    for t in range(T - 2, -1, -1):
        p = 0 if single else t
        for a in range(S):
            for b in range(S):
                buf[b] = c * pairwise[p, a, b] + c * unary[t + 1, b] + beta[t + 1, b]
            beta[t, a] = _lse_scaled(buf, S, inv_c)
    node = np.zeros((T, S))
    edge = np.zeros((max(T - 1, 0), S, S))
    log_z_c = _lse_scaled(alpha[T - 1], S, inv_c)
    if log_z_c == NEG_INF:
        return NEG_INF, node, edge, INFEASIBLE
    # Marginals normalised position by position: at magnitudes where the rounding error of a
    # score exceeds 1, exp(alpha + beta - log Z) alone could lose its mass to under/overflow.
    flat = np.empty(S * S)
    for t in range(T):
        for b in range(S):
            flat[b] = alpha[t, b] + beta[t, b]
        _normalised_exp(flat, S, inv_c, node[t])
    for t in range(T - 1):
        p = 0 if single else t
        for a in range(S):
            for b in range(S):
                flat[a * S + b] = alpha[t, a] + c * pairwise[p, a, b] + c * unary[t + 1, b] + beta[t + 1, b]
        _normalised_exp(flat, S * S, inv_c, edge[t].reshape(S * S))
    log_z = log_z_c * inv_c
    return log_z, node, edge, OK if abs(log_z) < np.inf else LOG_Z_OVERFLOW


@njit(cache=True)
def forward_backward_checked(unary, pairwise):
    """log Z, node marginals (T, S), edge marginals (T-1, S, S) and a status code.

    Works for any potentials in [-inf, +inf): forbidden (-inf) entries get marginal exactly 0,
    every position's marginals sum to 1 (once a score's rounding error exceeds ~1e-9 they are
    normalised position by position: the exact marginals of the rounded scores), and no feasible
    sequence gives status INFEASIBLE with zero marginals. Potentials large
    enough to overflow a partial sum take the wide-range recursion (S^2 exponentials per position
    instead of S^2 multiply-adds); log Z beyond float64 gives status LOG_Z_OVERFLOW.
    """
    T, S = unary.shape
    bound = input_range(unary, pairwise)
    status = _status(bound)
    if status != OK:
        return np.nan, np.full((T, S), np.nan), np.full((max(T - 1, 0), S, S), np.nan), status
    if bound * 2 * T < SAFE:
        log_z, node, edge = _forward_backward_fast(unary, pairwise, bound * 2 * T > CAREFUL)
    else:
        log_z, node, edge, status = _forward_backward_wide(unary, pairwise)
    if log_z == NEG_INF and status == OK:
        status = INFEASIBLE
    if status == INFEASIBLE:
        node[:] = 0.0
        edge[:] = 0.0
    return log_z, node, edge, status


@njit(cache=True)
def forward_backward(unary, pairwise):
    """log Z, node marginals (T, S) and edge marginals (T-1, S, S); see forward_backward_checked."""
    log_z, node, edge, _ = forward_backward_checked(unary, pairwise)
    return log_z, node, edge


@njit(cache=True)
def max_marginals(unary, pairwise):
    """mm[t, s] = best score of a sequence with y_t = s."""
    alpha, beta = _max_product_tables(unary, pairwise)
    return alpha + beta
