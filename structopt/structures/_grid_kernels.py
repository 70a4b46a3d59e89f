"""numba kernels for s-t min-cuts on 4-connected grids, with residual graphs kept for re-use.

Network layout (N = H * W nodes, node n = r * W + c):

- ``cap`` (N, 4): residual capacity of the arc from n to its neighbour in direction d, with
  d = 0 right, 1 left, 2 down, 3 up (the reverse of d is ``d ^ 1``); arcs off the grid have
  capacity 0 and neighbour -1 in ``nbr``.
- ``rs`` (N,): residual capacity of the source arc s -> n; ``rt`` (N,): of the sink arc n -> t.

A node on the source side of the cut takes label 0, on the sink side label 1. Capacities are
floats and ``inf`` is allowed on terminal arcs (clamped nodes). Every comparison is ``> 0`` on
residuals that are only ever decreased by a path's bottleneck (itself one of the residuals), so
residuals never go negative and the bottleneck arc becomes exactly 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def neighbours(H, W):
    """(N, 4) neighbour index of every node in each direction (-1 off the grid)."""
    nbr = np.full((H * W, 4), -1, dtype=np.int64)
    for r in range(H):
        for c in range(W):
            n = r * W + c
            if c + 1 < W:
                nbr[n, 0] = n + 1
            if c > 0:
                nbr[n, 1] = n - 1
            if r + 1 < H:
                nbr[n, 2] = n + W
            if r > 0:
                nbr[n, 3] = n - W
    return nbr


@njit(cache=True)
def max_flow(cap, rs, rt, nbr):
    """Dinic's algorithm; turns ``cap``, ``rs``, ``rt`` into the residual network in place.

    Returns the value of the flow pushed.
    """
    N = cap.shape[0]
    level = np.empty(N, dtype=np.int64)
    it = np.empty(N, dtype=np.int64)
    queue = np.empty(N, dtype=np.int64)
    path = np.empty(N + 1, dtype=np.int64)
    pdir = np.empty(N + 1, dtype=np.int64)
    flow = 0.0
    for n in range(N):  # paths s -> n -> t
        b = min(rs[n], rt[n])
        if b > 0:
            rs[n] -= b
            rt[n] -= b
            flow += b
    while True:
        level[:] = -1
        tail = 0
        for n in range(N):
            if rs[n] > 0:
                level[n] = 0
                queue[tail] = n
                tail += 1
        n_sources = tail
        head = 0
        reached = False
        while head < tail:
            u = queue[head]
            head += 1
            if rt[u] > 0:
                reached = True
            for d in range(4):
                v = nbr[u, d]
                if v >= 0 and cap[u, d] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue[tail] = v
                    tail += 1
        if not reached:
            return flow
        it[:] = 0
        for k in range(n_sources):
            s0 = queue[k]
            while rs[s0] > 0:
                top = 0
                path[0] = s0
                found = False
                while True:
                    u = path[top]
                    if rt[u] > 0:
                        found = True
                        break
                    advanced = False
                    while it[u] < 4:
                        d = it[u]
                        v = nbr[u, d]
                        if v >= 0 and cap[u, d] > 0 and level[v] == level[u] + 1:
                            pdir[top] = d
                            top += 1
                            path[top] = v
                            advanced = True
                            break
                        it[u] += 1
                    if not advanced:
                        level[u] = -2  # dead end for the rest of this phase
                        if top == 0:
                            break
                        top -= 1
                        it[path[top]] += 1
                if not found:
                    break
                b = min(rs[s0], rt[path[top]])
                for j in range(top):
                    b = min(b, cap[path[j], pdir[j]])
                rs[s0] -= b
                rt[path[top]] -= b
                for j in range(top):
                    cap[path[j], pdir[j]] -= b
                    cap[path[j + 1], pdir[j] ^ 1] += b
                flow += b


@njit(cache=True)
def source_side(cap, rs, nbr):
    """Labels of the minimal min-cut: 0 for nodes reachable from s in the residual, else 1."""
    N = cap.shape[0]
    labels = np.ones(N, dtype=np.int64)
    queue = np.empty(N, dtype=np.int64)
    tail = 0
    for n in range(N):
        if rs[n] > 0:
            labels[n] = 0
            queue[tail] = n
            tail += 1
    head = 0
    while head < tail:
        u = queue[head]
        head += 1
        for d in range(4):
            v = nbr[u, d]
            if v >= 0 and cap[u, d] > 0 and labels[v] == 1:
                labels[v] = 0
                queue[tail] = v
                tail += 1
    return labels


@njit(cache=True)
def _touch(n, touched, list_, count, cap, rs, rt, saved_cap, saved_rs, saved_rt):
    # back up node n's residuals once before the first change
    if not touched[n]:
        touched[n] = True
        list_[count] = n
        count += 1
        for d in range(4):
            saved_cap[n, d] = cap[n, d]
        saved_rs[n] = rs[n]
        saved_rt[n] = rt[n]
    return count


@njit(cache=True)
def _lone_flip(cap0, rs0, rt0, nbr, labels, i):
    # cut increase when node i alone changes side (an upper bound on the flip's extra flow)
    if labels[i] == 0:
        delta = rs0[i] - rt0[i]
    else:
        delta = rt0[i] - rs0[i]
    for d in range(4):
        j = nbr[i, d]
        if j < 0:
            continue
        into, out = cap0[j, d ^ 1], cap0[i, d]  # arcs j -> i and i -> j
        if labels[i] == 0:
            delta += into if labels[j] == 0 else -out
        else:
            delta += out if labels[j] == 1 else -into
    return delta


@njit(cache=True)
def _augment_from(i, limit, cap, rs, rt, nbr, labels, work, stamp):
    """Flow pushed from node i to the other terminal (see :func:`flip_costs`), stopping once it
    reaches ``limit``; the residual is restored before returning ``(flow, stamp)``."""
    mark, parent, pdir, queue, touched, touched_list, saved_cap, saved_rs, saved_rt = work
    forward = labels[i] == 1
    total = 0.0
    count = 0
    while total < limit:
        stamp += 1
        mark[i] = stamp
        parent[i] = -1
        queue[0] = i
        head, tail = 0, 1
        end = -1
        while head < tail:
            u = queue[head]
            head += 1
            if (rt[u] > 0) if forward else (rs[u] > 0):
                end = u
                break
            for d in range(4):
                v = nbr[u, d]
                if v < 0 or mark[v] == stamp or labels[v] != labels[i]:
                    continue
                # forward: arc u -> v; backward: arc v -> u, i.e. direction d ^ 1 from v
                if (cap[u, d] > 0) if forward else (cap[v, d ^ 1] > 0):
                    mark[v] = stamp
                    parent[v] = u
                    pdir[v] = d
                    queue[tail] = v
                    tail += 1
        if end < 0:
            break
        b = rt[end] if forward else rs[end]
        v = end
        while v != i:
            u, d = parent[v], pdir[v]
            b = min(b, cap[u, d] if forward else cap[v, d ^ 1])
            v = u
        count = _touch(end, touched, touched_list, count, cap, rs, rt, saved_cap, saved_rs, saved_rt)
        if forward:
            rt[end] -= b
        else:
            rs[end] -= b
        v = end
        while v != i:
            u, d = parent[v], pdir[v]
            count = _touch(u, touched, touched_list, count, cap, rs, rt, saved_cap, saved_rs, saved_rt)
            count = _touch(v, touched, touched_list, count, cap, rs, rt, saved_cap, saved_rs, saved_rt)
            if forward:  # flow u -> v
                cap[u, d] -= b
                cap[v, d ^ 1] += b
            else:  # flow v -> u
                cap[v, d ^ 1] -= b
                cap[u, d] += b
            v = u
        total += b
    for j in range(count):
        n = touched_list[j]
        for d in range(4):
            cap[n, d] = saved_cap[n, d]
        rs[n] = saved_rs[n]
        rt[n] = saved_rt[n]
        touched[n] = False
    return total, stamp


@njit(cache=True)
def _workspace(cap, rs, rt):
    N = cap.shape[0]
    return (np.zeros(N, dtype=np.int64), np.empty(N, dtype=np.int64), np.empty(N, dtype=np.int64),
            np.empty(N, dtype=np.int64), np.zeros(N, dtype=np.bool_), np.empty(N, dtype=np.int64),
            np.empty_like(cap), np.empty_like(rs), np.empty_like(rt))


@njit(cache=True)
def _slack(bound):
    # the flow counts as reaching the lone-flip bound within this round-off
    return 1e-12 * (1.0 + abs(bound))


@njit(cache=True)
def flip_costs(cap, rs, rt, nbr, labels, clamp, cap0, rs0, rt0):
    """For every free node, the extra flow needed to force it to the other side of the cut.

    ``cap``, ``rs``, ``rt`` must be a maximum-flow residual whose minimal source side is
    ``labels == 0``. Forcing a sink-side node i to the source side adds an infinite arc s -> i;
    the extra flow is the max flow from i to t in the residual (nodes of the source side are
    dead ends and are skipped). Forcing a source-side node to the sink side is symmetric: the
    max flow from s to i, searched backwards from i within the source side. Each computation
    augments along shortest paths from i and is undone afterwards, so the residual is returned
    unchanged. Clamped nodes (``clamp >= 0``) get ``inf``.

    ``cap0``, ``rs0``, ``rt0`` are the original capacities: flipping node i alone raises the cut
    by ``delta_i``, an upper bound on the extra flow attained by a labelling, so the search stops
    as soon as the flow pushed reaches it (to a relative 1e-12) and returns ``delta_i``, without
    the exhaustive search that otherwise proves no augmenting path is left.
    """
    N = cap.shape[0]
    extra = np.zeros(N)
    work = _workspace(cap, rs, rt)
    stamp = 0
    for i in range(N):
        if clamp[i] >= 0:
            extra[i] = np.inf
            continue
        bound = _lone_flip(cap0, rs0, rt0, nbr, labels, i)
        total, stamp = _augment_from(i, bound - _slack(bound), cap, rs, rt, nbr, labels, work, stamp)
        extra[i] = total if total < bound - _slack(bound) else bound
    return extra


@njit(cache=True)
def best_flip(cap, rs, rt, nbr, labels, clamp, cap0, rs0, rt0):
    """The free node whose flip costs the least extra flow, and that cost (see :func:`flip_costs`).

    Equal to the argmin of ``flip_costs`` (smallest index among equal costs) without computing
    every cost: nodes are visited by increasing lone-flip bound and a node's augmentation stops
    as soon as its flow exceeds the best cost found so far. Returns ``(-1, inf)`` when no node is free.
    """
    N = cap.shape[0]
    bounds = np.full(N, np.inf)
    for i in range(N):
        if clamp[i] < 0:
            bounds[i] = _lone_flip(cap0, rs0, rt0, nbr, labels, i)
    order = np.argsort(bounds, kind="mergesort")
    work = _workspace(cap, rs, rt)
    stamp = 0
    best, best_cost = -1, np.inf
    for i in order:
        if clamp[i] >= 0:
            break  # the clamped nodes come last (infinite bound)
        bound = bounds[i]
        cutoff = best_cost + _slack(best_cost) if best_cost < np.inf else np.inf
        limit = min(bound - _slack(bound), cutoff)
        total, stamp = _augment_from(i, limit, cap, rs, rt, nbr, labels, work, stamp)
        if total >= bound - _slack(bound):
            cost = bound
        elif total >= cutoff:
            continue  # costs more than the best so far
        else:
            cost = total
        if cost < best_cost or (cost == best_cost and i < best):
            best, best_cost = i, cost
    return best, best_cost
