"""Batched numba kernels of linear-chain CRFs: one compiled call per padded batch of chains.

Layout: ``unary`` is (B, T, S) float64, padded past each example's length; ``lengths`` (B,) int64 in
1..T; ``pairwise`` is (S, S), one transition matrix shared by every example and position, or
(B, T-1, S, S), one per example and position (``pairwise[..., a, b]`` scores y_t = a followed by
y_{t+1} = b). ``start`` and ``end`` (S,) are added to the first and to the last unary row of each
example (a CRF's boundary scores; zeros for a plain chain). Entries may be -inf (a forbidden label
or transition); NaN and +inf are refused by the checked entry points (``batch_*``), and the
``*_kernel`` functions take inputs that were already checked.

Sum-product runs in scaled probability space: the shared transition matrix is exponentiated once, shifted
by its max (E = exp(P - max P)), each position's unary row once, shifted by its own max, and the forward
and backward recursions are a mat-vec per position followed by a rescaling (forward: alpha_t sums to 1,
its normaliser c_t goes into log Z; backward: beta_t is divided by the same c_{t+1}, so that alpha_t .
beta_t = 1 and the marginals are plain products, Rabiner's scaling). A position costs two S x S mat-vecs,
S exponentials (its unary row) and one logarithm; no exponential per transition entry. The scaled values
are exact to rounding as long as no product of the recursions falls out of the normal float64 range;
every position checks a lower bound on its smallest non-zero product (``GUARD``), and an example that
fails it (potentials of a few hundred and more, or transition masks that starve a label) is recomputed by
the log-space recursion of :mod:`structopt.structures._chain_kernels` (``_forward_backward_wide``: S^2
exponentials per position, power-of-two scaled so that no partial sum overflows, marginals normalised
position by position). So every value, the smallest marginals included, matches the log-space recursion
to ~1e-12 relative at any magnitude.

Viterbi and top-K run the per-example kernels of ``Chain`` (same arithmetic, same tie-breaking) on
each example of the batch inside one compiled loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.errors import InvalidInputError, refuse_nonfinite
from structopt.structures import _chain_kernels as kern

NEG_INF = -np.inf
#: smallest product the scaled recursions may form (normal float64 numbers keep full relative precision
#: down to ~2.2e-308; the margin covers sums of S such products and the divisions by normalisers)
GUARD = 1e-290
#: from this many states on, the summed edge marginals of an example are one BLAS product (below, a loop is faster)
BLAS_STATES = 16


# ----------------------------------------------------------------------------- helpers
@njit(cache=True, inline="always")
def _min_nonzero(x):
    # smallest positive entry of x (inf when none): branch-free selects that vectorise
    lo = np.inf
    for k in range(x.shape[0]):
        v = x[k]
        lo = min(lo, v if v > 0.0 else np.inf)
    return lo


@njit(cache=True, inline="always")
def _vecmat(x, M, out):
    # out = x @ M, four rows of M per sweep over out (one load and store of out per four multiply-adds)
    S = M.shape[0]
    out[:] = 0.0
    a = 0
    while a + 4 <= S:
        x0, x1, x2, x3 = x[a], x[a + 1], x[a + 2], x[a + 3]
        r0, r1, r2, r3 = M[a], M[a + 1], M[a + 2], M[a + 3]
        for b in range(out.shape[0]):
            out[b] += (x0 * r0[b] + x1 * r1[b]) + (x2 * r2[b] + x3 * r3[b])
        a += 4
    while a < S:
        xa = x[a]
        r = M[a]
        for b in range(out.shape[0]):
            out[b] += xa * r[b]
        a += 1


@njit(cache=True)
def _exp_table(pw, E, Et):
    """E = exp(pw - max pw) (0 on -inf entries) and its transpose Et; returns (max, smallest E of a finite entry,
    largest |finite entry|)."""
    S = pw.shape[0]
    top = NEG_INF
    low = 0.0
    for a in range(S):
        for b in range(S):
            x = pw[a, b]
            top = max(top, x)
            low = min(low, x if x > NEG_INF else 0.0)
    if top == NEG_INF:  # every transition forbidden
        E[:] = 0.0
        Et[:] = 0.0
        return top, 0.0, -low
    emin = np.inf  # over the finite entries: an exponential that underflowed to 0 must fail the guard
    for a in range(S):
        for b in range(S):
            x = pw[a, b]
            e = np.exp(x - top)
            E[a, b] = e
            Et[b, a] = e
            emin = min(emin, e if x > NEG_INF else np.inf)
    return top, emin, max(top, -low)


@njit(cache=True)
def _effective_unary(unary, i, L, start, end, ub):
    # ub[:L] = unary[i, :L] plus start on the first row and end on the last
    S = unary.shape[2]
    for t in range(L):
        for s in range(S):
            ub[t, s] = unary[i, t, s]
    for s in range(S):
        ub[0, s] += start[s]
    for s in range(S):
        ub[L - 1, s] += end[s]


@njit(cache=True)
def _transitions_of(pairwise, shared, i, L, zeros):
    # the (P, S, S) transitions of example i in the per-example kernels' convention
    if shared:
        return pairwise[0, 0:1]
    if L > 1:
        return pairwise[i, :L - 1]
    return zeros


# ----------------------------------------------------------------------------- sum-product
@njit(cache=True)
def _scaled_example(ub, L, pairwise, i, shared, E, Et, pmax, emin, pbound,
                    w, umax, wmin, alpha, norm, amin, tops, mins, v, Y, z, node, pair):
    """Scaled forward-backward of example i into node[i] and pair[i]; returns (ok, log Z).

    ``ok`` is False when a product fell below GUARD, a position has no finite unary entry, the
    partial sums could overflow, or every sequence is forbidden: the caller then recomputes the
    example in log space (which also tells the last two apart).
    """
    S = ub.shape[1]
    ubound = 0.0
    for t in range(L):
        hi = NEG_INF
        lo = 0.0
        for s in range(S):
            x = ub[t, s]
            hi = max(hi, x)
            lo = min(lo, x if x > NEG_INF else 0.0)
        if hi == NEG_INF:
            return False, 0.0
        umax[t] = hi
        ubound = max(ubound, max(hi, -lo))
        lowest = np.inf  # over the finite entries (an underflow to 0 is not a forbidden label)
        for s in range(S):
            x = ub[t, s]
            e = np.exp(x - hi)
            w[t, s] = e
            lowest = min(lowest, e if x > NEG_INF else np.inf)
        wmin[t] = lowest
    if not (ubound + pbound) * 2.0 * L < kern.SAFE:  # a partial sum of scores could overflow
        return False, 0.0
    # forward: alpha[t] sums to 1, norm[t] is its normaliser
    total = 0.0
    for s in range(S):
        total += w[0, s]
    for s in range(S):
        alpha[0, s] = w[0, s] / total
    norm[0] = total
    log_z = np.log(total) + umax[0]
    amin[0] = _min_nonzero(alpha[0])
    for t in range(1, L):
        if shared:
            Ep = E
            top, lowest = pmax, emin
        else:  # this position's table, kept in pair[i, t - 1] until the backward pass turns it into marginals
            Ep = pair[i, t - 1]
            top, lowest, bound = _exp_table(pairwise[i, t - 1], Ep, Et)
            if not (ubound + bound) * 2.0 * L < kern.SAFE:
                return False, 0.0
            tops[t - 1], mins[t - 1] = top, lowest
        if not amin[t - 1] * lowest * wmin[t] >= GUARD:
            return False, 0.0
        _vecmat(alpha[t - 1], Ep, v)
        total = 0.0
        for b in range(S):
            f = v[b] * w[t, b]
            alpha[t, b] = f
            total += f
        if not total > 0.0:
            return False, 0.0
        for b in range(S):
            alpha[t, b] /= total
        norm[t] = total
        log_z += np.log(total) + umax[t] + top
        amin[t] = _min_nonzero(alpha[t])
    # backward: beta[t] = E (w[t+1] * beta[t+1]) / norm[t+1], marginals alpha * beta
    for s in range(S):
        z[s] = 1.0
        node[i, L - 1, s] = alpha[L - 1, s]
    for t in range(L - 2, -1, -1):
        y = Y[t]
        inv = 1.0 / norm[t + 1]
        for b in range(S):
            y[b] = w[t + 1, b] * z[b] * inv
        lowest = emin if shared else mins[t]
        if not amin[t] * lowest * _min_nonzero(y) >= GUARD:
            return False, 0.0
        if shared:
            _vecmat(y, Et, z)
        else:  # the table in pair[i, t] becomes this position's edge marginals in place
            Ep = pair[i, t]
            for a in range(S):
                aa = alpha[t, a]
                row = Ep[a]
                s_ = 0.0
                for b in range(S):
                    e = row[b] * y[b]
                    s_ += e
                    row[b] = aa * e
                z[a] = s_
        for a in range(S):
            node[i, t, a] = alpha[t, a] * z[a]
    if shared and L > 1:  # edge marginals summed over positions: (sum_t alpha[t] y[t]^T) * E
        out = pair[i, 0]
        if S >= BLAS_STATES:
            out[:] = np.dot(alpha[:L - 1].T, Y[:L - 1])
        else:
            out[:] = 0.0
            for t in range(L - 1):
                for a in range(S):
                    aa = alpha[t, a]
                    row = out[a]
                    yt = Y[t]
                    for b in range(S):
                        row[b] += aa * yt[b]
        for a in range(S):
            for b in range(S):
                out[a, b] *= E[a, b]
    return True, log_z


@njit(cache=True)
def marginals_kernel(unary, pairwise, shared, start, end, lengths, labels, has_labels):
    """log Z (B,), unary marginals (B, T, S) and pairwise marginals of a checked batch.

    ``pairwise`` is (1, 1, S, S) when ``shared`` (the pairwise marginals are then (B, 1, S, S), summed
    over positions), else (B, T-1, S, S) (marginals of the same shape). With ``has_labels``, the
    statistics of ``labels`` (B, T) are subtracted from the marginals (the gradient of
    log Z - score(labels)) and the scores of the labels come back as a fourth output; otherwise
    that output is zeros. Entries past an example's length are zero. log Z is -inf when every
    sequence of an example is forbidden (its marginals are then zero) and +inf beyond float64. The
    fifth output says which examples took the log-space recursion instead of the scaled one.
    """
    B, T, S = unary.shape
    Tp = max(T - 1, 1)
    log_z = np.empty(B)
    scores = np.zeros(B)
    node = np.zeros((B, T, S))
    pair = np.zeros((B, 1 if shared else max(T - 1, 0), S, S))
    E = np.zeros((S, S))
    Et = np.zeros((S, S))
    pmax, emin, pbound = 0.0, 1.0, 0.0
    if shared:
        pmax, emin, pbound = _exp_table(pairwise[0, 0], E, Et)
    ub = np.empty((T, S))
    w = np.empty((T, S))
    alpha = np.empty((T, S))
    umax = np.empty(T)
    wmin = np.empty(T)
    norm = np.empty(T)
    amin = np.empty(T)
    tops = np.empty(Tp)
    mins = np.empty(Tp)
    v = np.empty(S)
    Y = np.empty((T, S))
    z = np.empty(S)
    zeros = np.zeros((1, S, S))
    log_space = np.zeros(B, dtype=np.bool_)
    for i in range(B):
        L = lengths[i]
        _effective_unary(unary, i, L, start, end, ub)
        ok, lz = _scaled_example(ub, L, pairwise, i, shared, E, Et, pmax, emin, pbound,
                                 w, umax, wmin, alpha, norm, amin, tops, mins, v, Y, z, node, pair)
        if not ok:  # exact log-space recursion for this example
            log_space[i] = True
            lz, nd, ed, status = kern._forward_backward_wide(ub[:L], _transitions_of(pairwise, shared, i, L, zeros))
            if status == kern.INFEASIBLE:
                lz = NEG_INF
            node[i, :L] = nd
            if shared:
                pair[i, 0] = 0.0
                for t in range(L - 1):
                    pair[i, 0] += ed[t]
            elif L > 1:
                pair[i, :L - 1] = ed
        log_z[i] = lz
        if has_labels:
            total = 0.0
            for t in range(L):
                s = labels[i, t]
                total += ub[t, s]
                node[i, t, s] -= 1.0
            for t in range(L - 1):
                a, b = labels[i, t], labels[i, t + 1]
                p = 0 if shared else t
                total += pairwise[0 if shared else i, p, a, b]
                pair[i, p, a, b] -= 1.0
            scores[i] = total
    return log_z, node, pair, scores, log_space


# ----------------------------------------------------------------------------- max-product
@njit(cache=True)
def viterbi_kernel(unary, pairwise, shared, start, end, lengths):
    """Best labels (B, T) (-1 past each length) and their scores (B,) of a checked batch.

    Each example runs :func:`~structopt.structures._chain_kernels.viterbi` (``Chain.argmax``'s
    arithmetic and tie-breaking). Potentials large enough that a sequence's score could overflow are
    first scaled down by a power of two, as ``Chain.argmax`` does (the maximiser is scale-free); the
    score is scaled back. A score of -inf means every sequence of that example is forbidden.
    """
    B, T, S = unary.shape
    labels = np.full((B, T), -1, dtype=np.int64)
    scores = np.empty(B)
    ub = np.empty((T, S))
    zeros = np.zeros((1, S, S))
    bound = kern.input_range(start.reshape((1, S)), end.reshape((1, 1, S)))
    if shared:
        bound = max(bound, kern.input_range(unary[0, :0], pairwise[0, 0:1]))
    for i in range(B):  # the padding is never read, so it does not count
        L = lengths[i]
        bound = max(bound, kern.input_range(unary[i, :L], pairwise[i, :L - 1] if not shared else zeros))
    scale = 1.0
    if not bound * 2.0 * (T + 1) < kern.SAFE:
        scale = 1.0 / kern._power_of_two_at_least(2.0 * T + 4.0)
    for i in range(B):
        L = lengths[i]
        _effective_unary(unary, i, L, start, end, ub)
        pw = _transitions_of(pairwise, shared, i, L, zeros)
        if scale != 1.0:
            y, score = kern.viterbi(ub[:L] * scale, pw * scale)
            score /= scale
        else:
            y, score = kern.viterbi(ub[:L], pw)
        labels[i, :L] = y
        scores[i] = score
    return labels, scores


@njit(cache=True)
def topk_kernel(unary, pairwise, shared, start, end, lengths, k):
    """The k best label sequences of each example, (B, k, T) (-1 past each length and for missing
    ranks), with scores (B, k) (-inf for missing ranks: fewer than k sequences exist, or masks
    forbid them), by :func:`~structopt.structures._chain_kernels.topk_viterbi` (``Chain.topk``)."""
    B, T, S = unary.shape
    labels = np.full((B, k, T), -1, dtype=np.int64)
    scores = np.full((B, k), NEG_INF)
    ub = np.empty((T, S))
    zeros = np.zeros((1, S, S))
    for i in range(B):
        L = lengths[i]
        _effective_unary(unary, i, L, start, end, ub)
        pw = _transitions_of(pairwise, shared, i, L, zeros)
        if k == 1:  # plain Viterbi, as Chain.topk does
            y, score = kern.viterbi(ub[:L], pw)
            if score > NEG_INF:
                labels[i, 0, :L] = y
                scores[i, 0] = score
            continue
        ys, vals = kern.topk_viterbi(ub[:L], pw, k)
        for r in range(vals.shape[0]):
            if vals[r] > NEG_INF:
                labels[i, r, :L] = ys[r]
                scores[i, r] = vals[r]
    return labels, scores


@njit(cache=True)
def score_kernel(unary, pairwise, shared, start, end, lengths, labels):
    """Score (B,) of the labels (B, T) of each example (positions past the length ignored)."""
    B = unary.shape[0]
    scores = np.empty(B)
    for i in range(B):
        L = lengths[i]
        first, last = labels[i, 0], labels[i, L - 1]
        total = start[first] + end[last]
        for t in range(L):
            total += unary[i, t, labels[i, t]]
        for t in range(L - 1):
            total += pairwise[0 if shared else i, 0 if shared else t, labels[i, t], labels[i, t + 1]]
        scores[i] = total
    return scores


# ----------------------------------------------------------------------------- checked entry points
def _check(unary, pairwise, lengths, labels=None, start=None, end=None):
    """Contiguous float64 / int64 arrays in the kernels' layout, or an InvalidInputError naming the argument."""
    unary = np.asarray(unary)
    if unary.ndim != 3 or unary.dtype.kind not in "biuf" or 0 in unary.shape:
        raise InvalidInputError(f"unary must be a non-empty numeric (B, T, S) array, got {unary.dtype} {unary.shape}")
    B, T, S = unary.shape
    unary = np.ascontiguousarray(unary, dtype=np.float64)
    pairwise = np.asarray(pairwise)
    if pairwise.dtype.kind not in "biuf" or pairwise.shape not in ((S, S), (B, T - 1, S, S)):
        raise InvalidInputError(f"pairwise must be a numeric ({S}, {S}) or ({B}, {T - 1}, {S}, {S}) array, "
                                f"got {pairwise.dtype} {pairwise.shape}")
    shared = pairwise.shape == (S, S)
    pairwise = np.ascontiguousarray(pairwise.reshape((1, 1, S, S)) if shared else pairwise, dtype=np.float64)
    lengths = np.asarray(lengths)
    if lengths.shape != (B,) or lengths.dtype.kind not in "iu":
        raise InvalidInputError(f"lengths must be an integer ({B},) array, got {lengths.dtype} {lengths.shape}")
    if lengths.min() < 1 or lengths.max() > T:
        bad = int(np.flatnonzero((lengths < 1) | (lengths > T))[0])
        raise InvalidInputError(f"lengths[{bad}] = {lengths[bad]} is outside 1..{T}")
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    bounds = []
    for name, vec in (("start", start), ("end", end)):
        vec = np.zeros(S) if vec is None else np.asarray(vec)
        if vec.shape != (S,) or vec.dtype.kind not in "biuf":
            raise InvalidInputError(f"{name} must be a numeric ({S},) array, got {vec.dtype} {vec.shape}")
        bounds.append(np.ascontiguousarray(vec, dtype=np.float64))
    inside = np.arange(T)[None, :] < lengths[:, None]  # the padding is never read, so it is not checked
    refuse_nonfinite((("unary", np.where(inside[..., None], unary, 0.0)),
                      ("pairwise", pairwise if not shared else pairwise[0, 0]),
                      ("start", bounds[0]), ("end", bounds[1])), "chain batch", allow_neginf=True)
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (B, T) or labels.dtype.kind not in "iu":
            raise InvalidInputError(f"labels must be an integer ({B}, {T}) array, got {labels.dtype} {labels.shape}")
        bad = inside & ((labels < 0) | (labels >= S))
        if bad.any():
            i, t = (int(k) for k in np.argwhere(bad)[0])
            raise InvalidInputError(f"labels[{i}, {t}] = {labels[i, t]} is outside 0..{S - 1}")
        labels = np.ascontiguousarray(np.where(inside, labels, 0), dtype=np.int64)
    return unary, pairwise, shared, lengths, labels, bounds[0], bounds[1]


def batch_marginals(unary, pairwise, lengths, *, start=None, end=None):
    """Forward-backward on a padded batch of chains, in one compiled call.

    Parameters
    ----------
    unary : (B, T, S) array
        Unary potentials, padded past each example's length (the padding is ignored).
    pairwise : (S, S) array shared by every example and position, or (B, T-1, S, S)
    lengths : (B,) integer array in 1..T
    start, end : (S,) arrays, optional
        Scores added to the first and to the last label of each example.

    Returns
    -------
    log_z : (B,) array
        -inf for an example whose every sequence is forbidden (-inf entries).
    unary_marginals : (B, T, S) array, zero past each length
    pairwise_marginals : (B, S, S) summed over positions when ``pairwise`` is shared, else (B, T-1, S, S)
    """
    unary, pairwise, shared, lengths, _, start, end = _check(unary, pairwise, lengths, None, start, end)
    log_z, node, pair, _, _ = marginals_kernel(unary, pairwise, shared, start, end, lengths,
                                               np.zeros((1, 1), dtype=np.int64), False)
    return log_z, node, pair[:, 0] if shared else pair


def batch_nll(unary, pairwise, lengths, labels, *, start=None, end=None):
    """Negative log-likelihood of ``labels`` (B,) and its gradients, in one compiled call.

    Returns ``(nll, unary_grad, pairwise_grad)``: ``log Z - score(labels)`` per example, and the
    marginals of :func:`batch_marginals` minus the statistics of ``labels`` (the gradient of each
    example's NLL with respect to its potentials; summed over positions for shared pairwise). The
    gradient with respect to ``start`` / ``end`` is ``unary_grad`` at the first / last position.
    """
    unary, pairwise, shared, lengths, labels, start, end = _check(unary, pairwise, lengths, labels, start, end)
    log_z, node, pair, scores, _ = marginals_kernel(unary, pairwise, shared, start, end, lengths, labels, True)
    return log_z - scores, node, pair[:, 0] if shared else pair


def batch_viterbi(unary, pairwise, lengths, *, start=None, end=None):
    """Viterbi on a padded batch: ``(labels (B, T) int64, -1 past each length; scores (B,))``.

    Same labels as ``Chain.argmax`` per example; a score of -inf means every sequence of that
    example is forbidden (its labels are then meaningless).
    """
    unary, pairwise, shared, lengths, _, start, end = _check(unary, pairwise, lengths, None, start, end)
    return viterbi_kernel(unary, pairwise, shared, start, end, lengths)


def batch_topk(unary, pairwise, lengths, k, *, start=None, end=None):
    """The ``k`` best sequences per example: ``(labels (B, k, T), scores (B, k))``, as ``Chain.topk``
    per example; ranks beyond the sequences that exist (or are allowed) have labels -1 and score -inf."""
    unary, pairwise, shared, lengths, _, start, end = _check(unary, pairwise, lengths, None, start, end)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidInputError(f"k must be an integer >= 1, got {k!r}")
    return topk_kernel(unary, pairwise, shared, start, end, lengths, int(k))


def batch_score(unary, pairwise, lengths, labels, *, start=None, end=None):
    """Score (B,) of the label sequences ``labels`` (B, T) (entries past each length are ignored)."""
    unary, pairwise, shared, lengths, labels, start, end = _check(unary, pairwise, lengths, labels, start, end)
    return score_kernel(unary, pairwise, shared, start, end, lengths, labels)
