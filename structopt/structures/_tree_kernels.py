"""Numba kernels of :class:`~structopt.structures.tree.TreeStructure`: max-product, sum-product,
max-marginals and exact top-K on a forest.

Every kernel follows one message schedule computed once per structure: ``order`` lists the nodes
root first (breadth first within each tree), ``parent[v]`` is v's parent (-1 for roots),
``pedge[v]`` the index of the edge to it and ``forward[v]`` whether that edge is stored as
(parent, v) — then ``pairwise[e, a, b]`` scores parent = a, v = b — or as (v, parent), when the
block is read transposed. Upward passes sweep ``order`` backwards, downward passes forwards.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEG_INF = -np.inf


@njit(cache=True)
def _pw(pairwise, e, forward, a, b):
    # score of (parent = a, child = b) on edge e
    return pairwise[e, a, b] if forward else pairwise[e, b, a]


@njit(cache=True)
def _upward_max(unary, pairwise, order, parent, pedge, forward, allowed):
    # belief[v] = unary[v] + messages of v's children; msg[v, a] = best of v's subtree given parent = a
    n, S = unary.shape
    belief = np.empty((n, S))
    for v in range(n):
        for s in range(S):
            belief[v, s] = unary[v, s] if allowed[v, s] else NEG_INF
    msg = np.empty((n, S))
    arg = np.zeros((n, S), dtype=np.int64)
    for idx in range(n - 1, -1, -1):
        v = order[idx]
        p = parent[v]
        if p < 0:
            continue
        e, fwd = pedge[v], forward[v]
        for a in range(S):
            best, best_b = NEG_INF, 0
            for b in range(S):
                value = belief[v, b] + _pw(pairwise, e, fwd, a, b)
                if value > best:
                    best, best_b = value, b
            msg[v, a] = best
            arg[v, a] = best_b
            belief[p, a] += best
    return belief, msg, arg


@njit(cache=True)
def _decode(belief, arg, order, parent):
    n, S = belief.shape
    y = np.zeros(n, dtype=np.int64)
    total = 0.0
    for idx in range(n):
        v = order[idx]
        p = parent[v]
        if p < 0:
            best = 0
            for s in range(1, S):
                if belief[v, s] > belief[v, best]:
                    best = s
            y[v] = best
            total += belief[v, best]
        else:
            y[v] = arg[v, y[p]]
    return y, total


@njit(cache=True)
def map_assignment(unary, pairwise, order, parent, pedge, forward, allowed):
    """Max-product: the best labelling among the allowed states and its score (-inf if none)."""
    belief, _, arg = _upward_max(unary, pairwise, order, parent, pedge, forward, allowed)
    return _decode(belief, arg, order, parent)


@njit(cache=True)
def max_marginals(unary, pairwise, order, parent, pedge, forward):
    """(n, S): best score of a labelling of the whole forest with node v in state s."""
    n, S = unary.shape
    allowed = np.ones((n, S), dtype=np.bool_)
    belief, msg, _ = _upward_max(unary, pairwise, order, parent, pedge, forward, allowed)
    down = np.zeros((n, S))
    # the other trees contribute their own maxima: down[root] = sum of the other roots' best
    total = 0.0
    for idx in range(n):
        if parent[order[idx]] < 0:
            total += np.max(belief[order[idx]])
    for idx in range(n):
        v = order[idx]
        p = parent[v]
        if p < 0:
            down[v, :] = total - np.max(belief[v])
            continue
        e, fwd = pedge[v], forward[v]
        for b in range(S):
            best = NEG_INF
            for a in range(S):
                # everything at p except v's own message (finite potentials: the subtraction is exact enough)
                value = belief[p, a] + down[p, a] - msg[v, a] + _pw(pairwise, e, fwd, a, b)
                if value > best:
                    best = value
            down[v, b] = best
    return belief + down


@njit(cache=True)
def _logsumexp(values):
    m = NEG_INF
    for x in values:
        if x > m:
            m = x
    if m == NEG_INF:
        return NEG_INF
    total = 0.0
    for x in values:
        total += np.exp(x - m)
    return m + np.log(total)


@njit(cache=True)
def sum_product(unary, pairwise, order, parent, pedge, forward):
    """Log-space sum-product: ``(log Z, node marginals (n, S), edge marginals (m, S, S))``."""
    n, S = unary.shape
    m = pairwise.shape[0]
    belief = unary.copy()
    msg = np.zeros((n, S))
    scratch = np.empty(S)
    for idx in range(n - 1, -1, -1):
        v = order[idx]
        p = parent[v]
        if p < 0:
            continue
        e, fwd = pedge[v], forward[v]
        for a in range(S):
            for b in range(S):
                scratch[b] = belief[v, b] + _pw(pairwise, e, fwd, a, b)
            msg[v, a] = _logsumexp(scratch)
            belief[p, a] += msg[v, a]
    log_z = 0.0
    down = np.zeros((n, S))
    node = np.empty((n, S))
    edge = np.zeros((m, S, S))
    pair = np.empty(S * S)
    for idx in range(n):
        v = order[idx]
        p = parent[v]
        if p < 0:
            log_z += _logsumexp(belief[v])
        else:
            e, fwd = pedge[v], forward[v]
            for b in range(S):
                for a in range(S):
                    scratch[a] = belief[p, a] + down[p, a] - msg[v, a] + _pw(pairwise, e, fwd, a, b)
                down[v, b] = _logsumexp(scratch)
            for a in range(S):
                for b in range(S):
                    pair[a * S + b] = belief[p, a] + down[p, a] - msg[v, a] + _pw(pairwise, e, fwd, a, b) + belief[v, b]
            norm = _logsumexp(pair)
            for a in range(S):
                for b in range(S):
                    value = np.exp(pair[a * S + b] - norm)
                    if fwd:
                        edge[e, a, b] = value
                    else:
                        edge[e, b, a] = value
        for s in range(S):
            scratch[s] = belief[v, s] + down[v, s]
        norm = _logsumexp(scratch)
        for s in range(S):
            node[v, s] = np.exp(scratch[s] - norm)
    return log_z, node, edge


@njit(cache=True)
def _restricted(order, S, labels, prefix, excluded):
    # allowed states: nodes order[:prefix] fixed to labels, node order[prefix] without `excluded`
    n = order.shape[0]
    allowed = np.ones((n, S), dtype=np.bool_)
    for t in range(prefix):
        v = order[t]
        for s in range(S):
            allowed[v, s] = s == labels[v]
    if prefix < n:
        for s in range(S):
            if excluded[s]:
                allowed[order[prefix], s] = False
    return allowed


@njit(cache=True)
def topk(unary, pairwise, order, parent, pedge, forward, k):
    """The k best labellings (fewer when fewer exist) by best-first partitioning of the label space.

    A subproblem fixes the first ``prefix`` nodes of the schedule to the labels of an output already
    found and excludes some states of the next node. Popping the best one (ties: the one created
    first) splits the rest of it into "the first j nodes agree with its best labelling, node j + 1
    differs", each scored by masked max-product. Subproblems are stored by this description only
    (O(k n S) memory, not one mask per subproblem); a popped one is solved again for its labels.
    """
    n, S = unary.shape
    cap = 1 + max(k - 1, 0) * n
    source = np.full(cap, -1, dtype=np.int64)  # which found output fixes the prefix (-1: none)
    prefix = np.zeros(cap, dtype=np.int64)
    excluded = np.zeros((cap, S), dtype=np.bool_)
    values = np.full(cap, NEG_INF)
    alive = np.zeros(cap, dtype=np.bool_)
    out = np.zeros((k, n), dtype=np.int64)
    scores = np.zeros(k)
    _, values[0] = map_assignment(unary, pairwise, order, parent, pedge, forward, np.ones((n, S), dtype=np.bool_))
    alive[0] = values[0] > NEG_INF
    count = 1
    found = 0
    for r in range(k):
        best = -1
        for j in range(count):
            if alive[j] and (best < 0 or values[j] > values[best]):
                best = j
        if best < 0:
            break
        alive[best] = False
        labels = out[source[best]] if source[best] >= 0 else out[0]
        y, _ = map_assignment(unary, pairwise, order, parent, pedge, forward,
                              _restricted(order, S, labels, prefix[best], excluded[best]))
        out[found] = y
        scores[found] = values[best]
        found += 1
        if r == k - 1:
            break
        for j in range(prefix[best], n):  # nodes before prefix[best] are fixed: no alternatives
            v = order[j]
            excl = np.zeros(S, dtype=np.bool_)
            if j == prefix[best]:
                excl[:] = excluded[best]
            excl[y[v]] = True
            if np.all(excl):
                continue
            _, value = map_assignment(unary, pairwise, order, parent, pedge, forward,
                                      _restricted(order, S, y, j, excl))
            if value > NEG_INF:
                source[count], prefix[count], values[count], alive[count] = found - 1, j, value, True
                excluded[count] = excl
                count += 1
    return out[:found], scores[:found]
