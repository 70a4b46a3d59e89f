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


@njit(cache=True)
def _scan(a, s, Wc, Mc, rowof, rep, root_last):
    """``(u, m, w)``: the best arc entering super-node ``a`` from outside it (u = -1 when none is finite);
    with ``root_last``, a root arc only when no other arc is finite (the single-root order)."""
    N = s.shape[0]
    bu, bm, bw = -1, -1, NEG_INF
    first = 1 if root_last else 0
    if a < N:  # a leaf: its column of s
        for u in range(first, N):
            w = s[u, a]
            if w > bw and rep[u] != a:
                bu, bw = u, w
        if bu < 0 and root_last and s[0, a] > NEG_INF:
            bu, bw = 0, s[0, a]
        bm = a
    else:
        r = rowof[a]
        for u in range(first, N):
            w = Wc[r, u]
            if w > bw and rep[u] != a:
                bu, bw = u, w
        if bu < 0 and root_last and Wc[r, 0] > NEG_INF:
            bu, bw = 0, Wc[r, 0]
        if bu >= 0:
            bm = Mc[r, bu]
    return bu, bm, bw


@njit(cache=True)
def _grow(start, nxt, s, Wc, Mc, rowof, free, rep, fpar, status, cached, root_last, enter_u, enter_m, enter_w,
          path):
    """Tarjan's path growth from the untouched super-node ``start`` (module docstring of :func:`best_tree`);
    the next free super-node id, or -1 when some super-node has no finite entering arc."""
    N = s.shape[0]
    a = start
    top = 0
    path[0] = a
    status[a] = 1
    while True:
        if cached[a]:  # its best entering arc is known and still best (its row has not changed)
            cached[a] = False
            bu = enter_u[a]
        else:
            bu, bm, bw = _scan(a, s, Wc, Mc, rowof, rep, root_last)
            if bu < 0:
                return -1
            enter_u[a], enter_m[a], enter_w[a] = bu, bm, bw
        b = rep[bu]
        if status[b] == 2:  # the path hangs from the root now
            for i in range(top + 1):
                status[path[i]] = 2
            return nxt
        if status[b] == 0:
            top += 1
            path[top] = b
            status[b] = 1
            a = b
            continue
        # b is on the path: contract path[j..top] into c, whose row merges its members' reduced rows
        c = nxt
        nxt += 1
        # a row freed by an earlier contraction (still in cache), else a new one: a member's row is never read
        # again once it is merged, so a deep nest of contractions works in a few rows
        if free[0] > 0:
            r = free[free[0]]
            free[0] -= 1
        else:
            r = c - N
        rowof[c] = r
        j = top
        while path[j] != b:
            j -= 1
        for i in range(j, top + 1):
            x = path[i]
            fpar[x] = c
            ew = enter_w[x]
            if i == j:  # the first member's row, copied (no pass filling -inf first)
                if x < N:
                    for u in range(N):
                        Wc[r, u], Mc[r, u] = s[u, x] - ew, x
                else:
                    q = rowof[x]
                    for u in range(N):
                        Wc[r, u], Mc[r, u] = Wc[q, u] - ew, Mc[q, u]
            elif x < N:
                for u in range(N):
                    w = s[u, x] - ew
                    if w > Wc[r, u]:
                        Wc[r, u], Mc[r, u] = w, x
            else:
                q = rowof[x]
                for u in range(N):
                    w = Wc[q, u] - ew
                    if w > Wc[r, u]:
                        Wc[r, u], Mc[r, u] = w, Mc[q, u]
        for u in range(N):
            if fpar[rep[u]] == c:
                rep[u] = c
                Wc[r, u] = NEG_INF  # arcs inside c
        for i in range(j, top + 1):
            if path[i] >= N:
                free[0] += 1
                free[free[0]] = rowof[path[i]]
        status[c] = 1
        top = j
        path[top] = c
        a = c


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

    A member's row is never read again once merged, so its row is reused by the next contraction: a deep
    nest of contractions (the common case on random scores) works in a few rows that stay in cache.

    **Single root, exactly**: in the order that ranks every root arc below every other arc (a root arc is
    taken only by a super-node with no other finite entering arc), Chu-Liu/Edmonds gives the tree with the
    fewest root arcs (one, when a single-root tree exists) and the best score among those (Gabow and Tarjan
    1984; the order is lexicographic on (minus root arcs, score), so no penalty constant and no rounding of
    large scores). The run starts as the multi-root one: when its tree has one root arc, that tree is the
    answer (the cost of multi-root). Else every cycle it contracted is a cycle of best entering arcs in the
    root-last order too (each member's best arc was not a root arc), and contraction is order-free, so the
    run continues from there in the root-last order: each outermost super-node is untouched again, those not
    on a root arc with their entering arc kept (still the best), the root's children looking for a better
    one; the growth contracts until only super-nodes with no other finite arc hang from the root.
    """
    N = s.shape[0]
    heads = np.full(N, -1, dtype=np.int64)
    cap = 2 * N
    rows = max(N - 1, 1)
    # rows of contracted super-nodes (rowof[c]); a leaf's row is its column of s (no copy). np.empty maps the
    # pages lazily: only the rows in use are touched
    Wc = np.empty((rows, N))
    Mc = np.empty((rows, N), dtype=np.int64)  # the original modifier of the arc behind W
    rowof = np.empty(cap, dtype=np.int64)  # the row of each super-node
    free = np.zeros(rows + 1, dtype=np.int64)  # a stack of free rows (free[0] its size)
    rep = np.arange(N)  # the outermost super-node holding each original node
    fpar = np.full(cap, -1, dtype=np.int64)  # the super-node each one was contracted into
    status = np.zeros(cap, dtype=np.int8)  # 0 untouched, 1 on the path, 2 finished (hangs from the root)
    status[0] = 2
    cached = np.zeros(cap, dtype=np.bool_)  # untouched, its best entering arc already known
    enter_u = np.empty(cap, dtype=np.int64)
    enter_m = np.empty(cap, dtype=np.int64)
    enter_w = np.zeros(cap)
    path = np.empty(cap, dtype=np.int64)
    nxt = N
    for start in range(1, N):
        if status[rep[start]] != 0:
            continue
        nxt = _grow(rep[start], nxt, s, Wc, Mc, rowof, free, rep, fpar, status, cached, False, enter_u, enter_m,
                    enter_w, path)
        if nxt < 0:
            return heads, False
    if single_root:
        children = 0
        for m in range(1, N):
            v = rep[m]
            if enter_u[v] == 0 and status[v] == 2:
                children += 1
                status[v] = 3  # counted once
        if children > 1:
            # continue in the root-last order (docstring): every outermost super-node is untouched again; those
            # not on a root arc keep their entering arcs, the root's children look for a better one
            for m in range(1, N):
                v = rep[m]
                if status[v] != 0:
                    cached[v] = enter_u[v] != 0
                    status[v] = 0
            for start in range(1, N):
                if status[rep[start]] != 0:
                    continue
                nxt = _grow(rep[start], nxt, s, Wc, Mc, rowof, free, rep, fpar, status, cached, True, enter_u,
                            enter_m, enter_w, path)
                if nxt < 0:
                    return heads, False
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
