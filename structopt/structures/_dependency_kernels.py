"""Numba kernels of :mod:`structopt.structures.dependency`: non-projective dependency trees.

Arc scores are an (n + 1, n + 1) matrix ``s[h, m]`` (head h, modifier m; node 0 is the root, column 0
and the diagonal are unused). -inf forbids an arc.

- :func:`chu_liu_edmonds`: the best arborescence rooted at 0 by Chu-Liu/Edmonds with explicit
  contractions on a dense matrix (the simple form: O(n²) work per contraction, O(n³) in the worst
  case, not Tarjan's O(n²) with mergeable heaps);
- :func:`matrix_tree`: log Z and the arc marginals by the matrix-tree theorem (Koo et al., 2007), with
  each column scaled by its largest entry so that no exponential overflows (long sentences).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEG_INF = -np.inf


@njit(cache=True)
def chu_liu_edmonds(s):
    """Best arborescence rooted at node 0 of the arcs ``s[h, m]`` (multi-root: any number of root arcs).

    Returns ``(heads, ok)``: ``heads[m]`` the head of m (``heads[0] = -1``); ``ok`` False when some node
    has no finite incoming arc from a node that can reach it (no tree has a finite score).
    """
    N = s.shape[0]
    cap = 2 * N
    W = np.full((cap, cap), NEG_INF)
    oh = np.zeros((cap, cap), dtype=np.int64)  # the original arc behind each arc of the contracted graph
    om = np.zeros((cap, cap), dtype=np.int64)
    for h in range(N):
        for m in range(1, N):
            if h != m:
                W[h, m] = s[h, m]
                oh[h, m] = h
                om[h, m] = m
    active = np.zeros(cap, dtype=np.bool_)
    active[:N] = True
    rep = np.full(cap, -1, dtype=np.int64)  # the contracted node that swallowed each node
    parent = np.full(cap, -1, dtype=np.int64)
    heads = np.full(N, -1, dtype=np.int64)
    # contraction records: the node, and its cycle's members with their cycle arcs (original ids)
    c_node = np.empty(N, dtype=np.int64)
    c_ptr = np.zeros(N + 1, dtype=np.int64)
    c_member = np.empty(cap, dtype=np.int64)
    c_arc_h = np.empty(cap, dtype=np.int64)
    c_arc_m = np.empty(cap, dtype=np.int64)
    n_contract = 0
    n_nodes = N
    for v in range(1, N):
        best, arg = NEG_INF, -1
        for u in range(N):
            if u != v and W[u, v] > best:
                best, arg = W[u, v], u
        if arg < 0:
            return heads, False
        parent[v] = arg
    stamp = np.full(cap, -1, dtype=np.int64)
    in_cycle = np.zeros(cap, dtype=np.bool_)
    while True:
        # one cycle of the parent graph, if any
        for v in range(n_nodes):
            stamp[v] = -1
        start = -1
        for v0 in range(1, n_nodes):
            if not active[v0] or stamp[v0] >= 0:
                continue
            v = v0
            while v != 0 and stamp[v] < 0:
                stamp[v] = v0
                v = parent[v]
            if v != 0 and stamp[v] == v0:
                start = v
                break
        if start < 0:
            break
        c = n_nodes
        n_nodes += 1
        lo = c_ptr[n_contract]
        k = lo
        v = start
        while True:
            in_cycle[v] = True
            c_member[k] = v
            c_arc_h[k] = oh[parent[v], v]
            c_arc_m[k] = om[parent[v], v]
            k += 1
            v = parent[v]
            if v == start:
                break
        hi = k
        for u in range(c):
            if not active[u] or in_cycle[u]:
                continue
            best_in, best_out = NEG_INF, NEG_INF
            for q in range(lo, hi):
                x = c_member[q]
                if W[u, x] > NEG_INF:
                    val = W[u, x] - W[parent[x], x]
                    if val > best_in:
                        best_in = val
                        oh[u, c] = oh[u, x]
                        om[u, c] = om[u, x]
                if u != 0 and W[x, u] > best_out:
                    best_out = W[x, u]
                    oh[c, u] = oh[x, u]
                    om[c, u] = om[x, u]
            W[u, c] = best_in
            if u != 0:
                W[c, u] = best_out
                if in_cycle[parent[u]]:
                    parent[u] = c  # its best incoming arc now leaves the contracted node
        for q in range(lo, hi):
            x = c_member[q]
            active[x] = False
            in_cycle[x] = False
            rep[x] = c
        active[c] = True
        c_node[n_contract] = c
        n_contract += 1
        c_ptr[n_contract] = hi
        best, arg = NEG_INF, -1
        for u in range(c):
            if active[u] and W[u, c] > best:
                best, arg = W[u, c], u
        if arg < 0:
            return heads, False
        parent[c] = arg
    # expansion: the arc entering each node of the final graph, then each cycle unfolded, latest first
    in_h = np.full(cap, -1, dtype=np.int64)
    in_m = np.full(cap, -1, dtype=np.int64)
    for v in range(1, n_nodes):
        if active[v]:
            in_h[v] = oh[parent[v], v]
            in_m[v] = om[parent[v], v]
    for t in range(n_contract - 1, -1, -1):
        c = c_node[t]
        x = in_m[c]
        while rep[x] != c:  # the member of the cycle that contains the entering arc's modifier
            x = rep[x]
        for q in range(c_ptr[t], c_ptr[t + 1]):
            v = c_member[q]
            if v == x:
                in_h[v], in_m[v] = in_h[c], in_m[c]
            else:
                in_h[v], in_m[v] = c_arc_h[q], c_arc_m[q]
    for m in range(1, N):
        heads[m] = in_h[m]
    return heads, True


@njit(cache=True)
def root_penalty(s):
    """A penalty on every root arc larger than any difference between two trees' other arcs: with it,
    the best tree has as few root arcs as any tree with a finite score can have (one when possible)."""
    N = s.shape[0]
    lo, hi = np.inf, NEG_INF
    for h in range(N):
        for m in range(1, N):
            if h != m and s[h, m] > NEG_INF:
                lo = min(lo, s[h, m])
                hi = max(hi, s[h, m])
    if hi == NEG_INF:
        return 0.0
    return (N + 1) * (hi - lo) + 1.0


@njit(cache=True)
def best_tree(s, single_root):
    """``(heads, ok)``: the best tree (single root: exactly one root arc, by penalising root arcs)."""
    N = s.shape[0]
    if not single_root:
        return chu_liu_edmonds(s)
    penalised = s.copy()
    p = root_penalty(s)
    for m in range(1, N):
        penalised[0, m] = s[0, m] - p
    heads, ok = chu_liu_edmonds(penalised)
    if not ok:
        return heads, False
    roots = 0
    for m in range(1, N):
        if heads[m] == 0:
            roots += 1
    return heads, roots == 1


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
