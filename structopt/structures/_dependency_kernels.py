"""Numba kernels of :mod:`structopt.structures.dependency`: non-projective dependency trees.

Arc scores are an (n + 1, n + 1) matrix ``s[h, m]`` (head h, modifier m; node 0 is the root, column 0
and the diagonal are unused). -inf forbids an arc.

- :func:`best_tree`: the best arborescence rooted at 0 (single- or multi-root) by Tarjan's O(n²) form of
  Chu-Liu/Edmonds on the dense matrix;
- :func:`matrix_tree`: log Z and the arc marginals by the matrix-tree theorem (Koo et al., 2007), with
  each column scaled by its largest entry so that no exponential overflows (long sentences).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEG_INF = -np.inf


@njit(cache=True, inline="always")
def _better(k, w, bk, bw):
    # (k, w) > (bk, bw) in the lexicographic order (root-arc count first, then score)
    return k > bk or (k == bk and w > bw)


@njit(cache=True)
def best_tree(s, single_root):
    """``(heads, ok)``: the best arborescence rooted at node 0 of the arcs ``s[h, m]``, by Tarjan's form of
    Chu-Liu/Edmonds (O(n²) on a dense graph).

    ``heads[m]`` is the head of m (``heads[0] = -1``); ``ok`` is False when no tree has a finite score
    (single root: when no tree with exactly one root arc has one).

    **Tarjan's form** (Tarjan 1977, with the expansion of Camerini, Fratta and Maffioli 1979): a path of
    super-nodes grows backwards along each one's best entering arc; it ends when that arc leaves the root
    or an already finished super-node (the path then hangs from the root), and when it leaves a super-node
    on the path the cycle so closed is contracted at once into a new super-node, which continues the
    path. Each super-node keeps one row ``W[v, u]``: the best *reduced* score of an arc from original node
    u into v (an arc's score minus the score of the arc it would replace inside v), combined from its
    members' rows when it is made, so a contraction costs O(n · cycle length) and the best entering arc
    O(n): O(n²) in all (at most n - 1 contractions, 2n super-nodes). The expansion keeps each outermost
    super-node's entering arc and, inside every super-node, every member's cycle arc except the one
    member the kept arc enters through (super-nodes taken from the newest down).

    **Single root, exactly**: scores are pairs (minus the number of root arcs, score) in the lexicographic
    order, an ordered group in which Chu-Liu/Edmonds is as correct as in the reals; the best pair has as
    few root arcs as any finite tree can have (one, when a single-root tree exists) and the best score
    among those trees. No penalty constant, so no rounding of large scores.
    """
    N = s.shape[0]
    heads = np.full(N, -1, dtype=np.int64)
    cap = 2 * N
    # rows of contracted super-nodes (c - N), grown by doubling: a leaf's row is its column of s (no copy)
    Wc = np.empty((min(N, 8), N))
    Kc = np.empty((min(N, 8), N), dtype=np.int64)  # minus the root arcs behind W (single root; else 0)
    Mc = np.empty((min(N, 8), N), dtype=np.int64)  # the original modifier of the arc behind W
    rep = np.arange(N)  # the outermost super-node holding each original node
    fpar = np.full(cap, -1, dtype=np.int64)  # the super-node each one was contracted into
    status = np.zeros(cap, dtype=np.int8)  # 0 untouched, 1 on the path, 2 finished (hangs from the root)
    status[0] = 2
    enter_u = np.empty(cap, dtype=np.int64)
    enter_m = np.empty(cap, dtype=np.int64)
    enter_w = np.zeros(cap)
    enter_k = np.zeros(cap, dtype=np.int64)
    path = np.empty(cap, dtype=np.int64)
    root_k = -1 if single_root else 0
    nxt = N
    for start in range(1, N):
        if status[rep[start]] != 0:
            continue
        a = start
        top = 0
        path[0] = a
        status[a] = 1
        while True:
            bu, bk, bw = -1, 0, NEG_INF
            if a < N:  # a leaf: its column of s
                for u in range(N):
                    w = s[u, a]
                    if w == NEG_INF or rep[u] == a:
                        continue
                    k = root_k if u == 0 else 0
                    if bu < 0 or _better(k, w, bk, bw):
                        bu, bk, bw = u, k, w
                bm = a
            else:
                r = a - N
                for u in range(N):
                    w = Wc[r, u]
                    if w == NEG_INF or rep[u] == a:
                        continue
                    k = Kc[r, u]
                    if bu < 0 or _better(k, w, bk, bw):
                        bu, bk, bw = u, k, w
                bm = Mc[r, bu] if bu >= 0 else -1
            if bu < 0:
                return heads, False
            enter_u[a], enter_m[a], enter_w[a], enter_k[a] = bu, bm, bw, bk
            b = rep[bu]
            if status[b] == 2:  # the path hangs from the root now
                for i in range(top + 1):
                    status[path[i]] = 2
                break
            if status[b] == 0:
                top += 1
                path[top] = b
                status[b] = 1
                a = b
                continue
            # b is on the path: contract path[j..top] into c
            c = nxt
            nxt += 1
            r = c - N
            if r >= Wc.shape[0]:
                rows = min(2 * Wc.shape[0], N)
                Wc2, Kc2, Mc2 = np.empty((rows, N)), np.empty((rows, N), np.int64), np.empty((rows, N), np.int64)
                Wc2[:r], Kc2[:r], Mc2[:r] = Wc[:r], Kc[:r], Mc[:r]
                Wc, Kc, Mc = Wc2, Kc2, Mc2
            j = top
            while path[j] != b:
                j -= 1
            for u in range(N):
                Wc[r, u] = NEG_INF
                Kc[r, u] = 0
                Mc[r, u] = -1
            for i in range(j, top + 1):
                x = path[i]
                fpar[x] = c
                ew, ek = enter_w[x], enter_k[x]
                if x < N:
                    for u in range(N):
                        w = s[u, x]
                        if w == NEG_INF:
                            continue
                        w -= ew
                        k = (root_k if u == 0 else 0) - ek
                        if Wc[r, u] == NEG_INF or _better(k, w, Kc[r, u], Wc[r, u]):
                            Wc[r, u], Kc[r, u], Mc[r, u] = w, k, x
                else:
                    q = x - N
                    for u in range(N):
                        w = Wc[q, u]
                        if w == NEG_INF:
                            continue
                        w -= ew
                        k = Kc[q, u] - ek
                        if Wc[r, u] == NEG_INF or _better(k, w, Kc[r, u], Wc[r, u]):
                            Wc[r, u], Kc[r, u], Mc[r, u] = w, k, Mc[q, u]
            for u in range(N):
                if fpar[rep[u]] == c:
                    rep[u] = c
                    Wc[r, u] = NEG_INF  # arcs inside c
            status[c] = 1
            top = j
            path[top] = c
            a = c
    # expansion, newest super-node first (a super-node is newer than its members)
    dropped = np.zeros(cap, dtype=np.bool_)
    for v in range(nxt - 1, 0, -1):
        if dropped[v]:
            continue
        m = enter_m[v]
        heads[m] = enter_u[v]
        x = m
        while x != v:  # the super-nodes this arc enters through lose their own entering arcs
            dropped[x] = True
            x = fpar[x]
    if single_root:
        roots = 0
        for m in range(1, N):
            if heads[m] == 0:
                roots += 1
        if roots != 1:
            return heads, False
    return heads, True


@njit(cache=True)
def below_inf(a):
    """Whether every entry of the contiguous array ``a`` is < +inf (False on NaN or +inf): the check of
    potentials in one pass, without numpy's reduction overhead on small sentences."""
    flat = a.ravel()
    for i in range(flat.size):
        if not flat[i] < np.inf:
            return False
    return True


@njit(cache=True)
def tree_score(s, heads):
    """Sum of the arcs ``s[heads[m], m]`` over m >= 1."""
    total = 0.0
    for m in range(1, s.shape[0]):
        total += s[heads[m], m]
    return total


@njit(cache=True)
def matrix_tree(s, single_root):
    """``(log Z, marginals (N, N))`` of the Gibbs distribution over trees (matrix-tree theorem).

    Multi-root: the Laplacian of the arcs among words 1..n, with the root arcs added to its diagonal.
    Single root (Koo et al., 2007): its first row replaced by the root arcs. Column m is scaled by
    ``exp(-c_m)`` with ``c_m`` its largest score (every arc into m shares it), so every entry is at most 1
    and ``log Z = log det + sum c_m``; marginals are ``A[h, m] dlogdet / dL``. Returns ``log Z = -inf``
    when no tree has a finite score.
    """
    N = s.shape[0]
    n = N - 1
    mu = np.zeros((N, N))
    shift = np.zeros(N)
    for m in range(1, N):
        c = NEG_INF
        for h in range(N):
            if h != m and s[h, m] > c:
                c = s[h, m]
        if c == NEG_INF:
            return NEG_INF, mu
        shift[m] = c
    A = np.zeros((N, N))
    for h in range(N):
        for m in range(1, N):
            if h != m and s[h, m] > NEG_INF:
                A[h, m] = np.exp(s[h, m] - shift[m])
    L = np.zeros((n, n))
    for m in range(1, N):
        total = 0.0 if single_root else A[0, m]
        for h in range(1, N):
            if h != m:
                L[h - 1, m - 1] = -A[h, m]
                total += A[h, m]
        L[m - 1, m - 1] = total
    if single_root:
        for m in range(1, N):
            L[0, m - 1] = A[0, m]
    sign, logdet = np.linalg.slogdet(L)
    if not sign > 0:
        return NEG_INF, mu
    log_z = logdet
    for m in range(1, N):
        log_z += shift[m]
    inv = np.linalg.inv(L)
    for m in range(1, N):
        diag = 0.0 if (single_root and m == 1) else inv[m - 1, m - 1]
        mu[0, m] = A[0, m] * (inv[m - 1, 0] if single_root else inv[m - 1, m - 1])
        for h in range(1, N):
            if h != m and A[h, m] > 0.0:
                off = 0.0 if (single_root and h == 1) else inv[m - 1, h - 1]
                mu[h, m] = A[h, m] * (diag - off)
    return log_z, mu
