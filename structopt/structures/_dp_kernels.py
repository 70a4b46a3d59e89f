"""Numba kernels of :mod:`structopt.structures.dp`: one recursion over an acyclic hypergraph, run in
the max-plus semiring (argmax, max-marginals), the log-sum-exp semiring (log Z, inside-outside
marginals) and the k-best semiring (exact top-K).

The hypergraph is flat (CSR) and its nodes are numbered in topological order: node ``v``'s incoming
hyperedges are ``in_ptr[v]:in_ptr[v + 1]``; hyperedge ``e`` has the tail nodes
``tails[tail_ptr[e]:tail_ptr[e + 1]]`` (all numbered below ``v``; none for an axiom) and the score
``w[score[e]]`` (0 when ``score[e] < 0``). A node without incoming hyperedges has no derivation
(value -inf). The goal is the last node. Every kernel is one sweep over the nodes in order (the
outside pass sweeps back), with no allocation per node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEG_INF = -np.inf
MAX = 0  # max-plus semiring
LOG = 1  # log-sum-exp semiring


@njit(cache=True)
def inside(mode, in_ptr, score, tail_ptr, tails, w):
    """Inside values ``val`` (N,), hyperedge values ``ev`` (E,) and best incoming hyperedges ``bp`` (N,).

    ``ev[e] = w_e + sum of val over e's tails``; ``val[v]`` is the max (``mode == MAX``) or the
    log-sum-exp (``mode == LOG``) of ``ev`` over v's incoming hyperedges; ``bp[v]`` is the first
    hyperedge reaching the max (-1 when val[v] is -inf).
    """
    n = in_ptr.size - 1
    val = np.full(n, NEG_INF)
    ev = np.empty(score.size)
    bp = np.full(n, -1, dtype=np.int64)
    for v in range(n):
        best, arg = NEG_INF, -1
        for e in range(in_ptr[v], in_ptr[v + 1]):
            s = w[score[e]] if score[e] >= 0 else 0.0
            for p in range(tail_ptr[e], tail_ptr[e + 1]):
                s += val[tails[p]]
            ev[e] = s
            if s > best:
                best, arg = s, e
        bp[v] = arg
        if mode == LOG and best > NEG_INF:
            total = 0.0
            for e in range(in_ptr[v], in_ptr[v + 1]):
                total += np.exp(ev[e] - best)
            val[v] = best + np.log(total)
        else:
            val[v] = best
    return val, ev, bp


@njit(cache=True)
def outside(mode, in_ptr, score, tail_ptr, tails, w, val):
    """Outside values (N,): the semiring sum over derivations of the goal with a hole at each node."""
    n = in_ptr.size - 1
    out = np.full(n, NEG_INF)
    out[n - 1] = 0.0
    arity = 0
    for e in range(score.size):
        arity = max(arity, tail_ptr[e + 1] - tail_ptr[e])
    prefix = np.empty(arity + 1)
    for v in range(n - 1, -1, -1):
        if out[v] == NEG_INF:
            continue
        for e in range(in_ptr[v], in_ptr[v + 1]):
            base = out[v] + (w[score[e]] if score[e] >= 0 else 0.0)
            lo, hi = tail_ptr[e], tail_ptr[e + 1]
            prefix[0] = 0.0
            for p in range(lo, hi):  # sums of the other tails by prefix and suffix: no subtraction of -inf
                prefix[p - lo + 1] = prefix[p - lo] + val[tails[p]]
            suffix = 0.0
            for p in range(hi - 1, lo - 1, -1):
                c = base + prefix[p - lo] + suffix
                suffix += val[tails[p]]
                if c == NEG_INF:
                    continue
                u = tails[p]
                if mode == MAX:
                    if c > out[u]:
                        out[u] = c
                elif out[u] == NEG_INF:
                    out[u] = c
                elif c > out[u]:
                    out[u] = c + np.log1p(np.exp(out[u] - c))
                else:
                    out[u] = out[u] + np.log1p(np.exp(c - out[u]))
    return out


@njit(cache=True)
def _push_edges(bp, tail_ptr, tails, goal, n_hint):
    # the hyperedges of the derivation that follows bp down from goal (depth first)
    edges = np.empty(max(n_hint, 1), dtype=np.int64)
    stack = np.empty(max(n_hint, 1), dtype=np.int64)
    count, top = 0, 1
    stack[0] = goal
    while top > 0:
        top -= 1
        e = bp[stack[top]]
        if count == edges.size:
            edges = np.concatenate((edges, np.empty(edges.size, dtype=np.int64)))
        edges[count] = e
        count += 1
        for p in range(tail_ptr[e], tail_ptr[e + 1]):
            if top == stack.size:
                stack = np.concatenate((stack, np.empty(stack.size, dtype=np.int64)))
            stack[top] = tails[p]
            top += 1
    return edges[:count]


@njit(cache=True)
def argmax(in_ptr, score, tail_ptr, tails, w):
    """Max-plus: the hyperedges of a best derivation of the goal (empty if none) and its score."""
    val, _, bp = inside(MAX, in_ptr, score, tail_ptr, tails, w)
    goal = in_ptr.size - 2
    if val[goal] == NEG_INF:
        return np.zeros(0, dtype=np.int64), NEG_INF
    return _push_edges(bp, tail_ptr, tails, goal, in_ptr.size), val[goal]


@njit(cache=True)
def _edge_heads(in_ptr):
    head = np.empty(in_ptr[-1], dtype=np.int64)
    for v in range(in_ptr.size - 1):
        for e in range(in_ptr[v], in_ptr[v + 1]):
            head[e] = v
    return head


@njit(cache=True)
def marginals(in_ptr, score, tail_ptr, tails, w, n_scores):
    """Log-sum-exp inside-outside: ``(log Z, expected count of each score index (n_scores,))``."""
    val, ev, _ = inside(LOG, in_ptr, score, tail_ptr, tails, w)
    log_z = val[in_ptr.size - 2]
    mu = np.zeros(n_scores)
    if not (log_z > NEG_INF and log_z < np.inf):
        return log_z, mu
    out = outside(LOG, in_ptr, score, tail_ptr, tails, w, val)
    head = _edge_heads(in_ptr)
    for e in range(score.size):
        if score[e] >= 0:
            value = out[head[e]] + ev[e]
            if value > NEG_INF:
                mu[score[e]] += np.exp(value - log_z)
    return log_z, mu


@njit(cache=True)
def max_marginals(in_ptr, score, tail_ptr, tails, w, n_scores):
    """Max-plus inside-outside: the best score of a derivation using each score index (-inf if none)."""
    val, ev, _ = inside(MAX, in_ptr, score, tail_ptr, tails, w)
    out = outside(MAX, in_ptr, score, tail_ptr, tails, w, val)
    head = _edge_heads(in_ptr)
    mm = np.full(n_scores, NEG_INF)
    for e in range(score.size):
        if score[e] >= 0:
            value = out[head[e]] + ev[e]
            if value > mm[score[e]]:
                mm[score[e]] = value
    return mm


@njit(cache=True, inline="always")
def _heap_push(heap, size, item, c_val, c_seq):
    """Push candidate ``item`` onto the max-heap ``heap[:size]`` (ordered by value, then by sequence
    number: the earlier candidate wins a tie). Inlined at the IR level: a call passing arrays would
    cost reference counting in the k-best loop."""
    heap[size] = item
    i = size
    while i > 0:
        up = (i - 1) // 2
        a_, b_ = heap[i], heap[up]
        if c_val[a_] > c_val[b_] or (c_val[a_] == c_val[b_] and c_seq[a_] < c_seq[b_]):
            heap[i], heap[up] = b_, a_
            i = up
        else:
            break


@njit(cache=True)
def topk(in_ptr, score, tail_ptr, tails, w, k):
    """k-best semiring: the k best derivations of the goal (fewer when fewer have a finite score).

    Each node keeps its k best derivations, sorted, as (hyperedge, rank of each tail's derivation).
    A node's list is built best first from a heap of candidates (Huang and Chiang's lazy k-best):
    each incoming hyperedge with every tail at rank 0, and after popping (e, r) the vectors r + 1_q
    for the positions q at or after r's last non-zero entry — each rank vector has exactly one
    predecessor, so none is generated twice, and the sum is monotone in the ranks, so the lists are
    exact. Ties pop in creation order, which makes the first derivation :func:`argmax`'s.

    Returns
    -------
    edges : int64 array, the hyperedges of the derivations, concatenated (each depth first)
    offsets : int64 array (k' + 1,)
    scores : float array (k',)
    """
    n = in_ptr.size - 1
    n_edges = score.size
    arity, degree = 1, 1
    for e in range(n_edges):
        arity = max(arity, tail_ptr[e + 1] - tail_ptr[e])
    for v in range(n):
        degree = max(degree, in_ptr[v + 1] - in_ptr[v])
    kcount = np.zeros(n, dtype=np.int64)
    kval = np.full((n, k), NEG_INF)
    kedge = np.full((n, k), -1, dtype=np.int64)
    kroff = np.zeros((n, k), dtype=np.int64)  # offset of the tails' ranks in `pool`
    pool = np.zeros(k * max(tails.size, 1), dtype=np.int64)
    used = 0
    cap = degree + k * arity + 1
    c_val = np.empty(cap)
    c_seq = np.empty(cap, dtype=np.int64)
    c_edge = np.empty(cap, dtype=np.int64)
    c_rank = np.zeros((cap, arity), dtype=np.int64)
    heap = np.empty(cap, dtype=np.int64)
    for v in range(n):
        n_cand, size = 0, 0
        for e in range(in_ptr[v], in_ptr[v + 1]):
            s = w[score[e]] if score[e] >= 0 else 0.0
            for p in range(tail_ptr[e], tail_ptr[e + 1]):
                s += kval[tails[p], 0]  # -inf when the tail has no derivation
            if s == NEG_INF:
                continue
            c_val[n_cand], c_seq[n_cand], c_edge[n_cand] = s, n_cand, e
            for p in range(arity):
                c_rank[n_cand, p] = 0
            _heap_push(heap, size, n_cand, c_val, c_seq)
            size += 1
            n_cand += 1
        while size > 0 and kcount[v] < k:
            slot = heap[0]  # pop, sift down
            size -= 1
            heap[0] = heap[size]
            i = 0
            while True:
                child, best = 2 * i + 1, i
                for c in range(child, min(child + 2, size)):
                    a_, b_ = heap[c], heap[best]
                    if c_val[a_] > c_val[b_] or (c_val[a_] == c_val[b_] and c_seq[a_] < c_seq[b_]):
                        best = c
                if best == i:
                    break
                heap[i], heap[best] = heap[best], heap[i]
                i = best
            e = c_edge[slot]
            lo, a = tail_ptr[e], tail_ptr[e + 1] - tail_ptr[e]
            r = kcount[v]
            kval[v, r], kedge[v, r], kroff[v, r] = c_val[slot], e, used
            for q in range(a):
                pool[used + q] = c_rank[slot, q]
            used += a
            kcount[v] += 1
            last = 0
            for q in range(a):
                if c_rank[slot, q] > 0:
                    last = q
            for q in range(last, a):
                nxt = c_rank[slot, q] + 1
                if nxt >= kcount[tails[lo + q]]:
                    continue
                s = w[score[e]] if score[e] >= 0 else 0.0
                for p in range(a):
                    s += kval[tails[lo + p], nxt if p == q else c_rank[slot, p]]
                c_val[n_cand], c_seq[n_cand], c_edge[n_cand] = s, n_cand, e
                for p in range(a):  # element by element: a slice copy within one array allocates
                    c_rank[n_cand, p] = c_rank[slot, p]
                c_rank[n_cand, q] = nxt
                _heap_push(heap, size, n_cand, c_val, c_seq)
                size += 1
                n_cand += 1
    goal = n - 1
    found = kcount[goal]
    offsets = np.zeros(found + 1, dtype=np.int64)
    edges = np.empty(max(n, 1), dtype=np.int64)
    stack_v = np.empty(max(n, 1), dtype=np.int64)
    stack_r = np.empty(max(n, 1), dtype=np.int64)
    count = 0
    for r0 in range(found):
        top = 1
        stack_v[0], stack_r[0] = goal, r0
        while top > 0:
            top -= 1
            v, r = stack_v[top], stack_r[top]
            e = kedge[v, r]
            if count == edges.size:
                edges = np.concatenate((edges, np.empty(edges.size, dtype=np.int64)))
            edges[count] = e
            count += 1
            lo, a = tail_ptr[e], tail_ptr[e + 1] - tail_ptr[e]
            for q in range(a):
                if top == stack_v.size:
                    stack_v = np.concatenate((stack_v, np.empty(stack_v.size, dtype=np.int64)))
                    stack_r = np.concatenate((stack_r, np.empty(stack_r.size, dtype=np.int64)))
                stack_v[top], stack_r[top] = tails[lo + q], pool[kroff[v, r] + q]
                top += 1
        offsets[r0 + 1] = count
    return edges[:count], offsets, kval[goal, :found].copy()
