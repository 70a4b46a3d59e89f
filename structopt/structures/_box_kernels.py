"""numba kernels for bounding boxes over an H x W grid of cells.

Conventions: a box is ``(top, left, bottom, right)``, half-open (rows top..bottom-1, columns
left..right-1, non-empty). Box sums are read off integral images ``S`` of shape (H + 1, W + 1)
with ``S[i, j] = sum(cells[:i, :j])``. The loss term is ``1 - IoU(gold, box)`` with areas in
cells; kernels take ``use_loss`` and a ``gold`` box (ignored when ``use_loss`` is False).

Branch-and-bound (Lampert, Blaschko & Hofmann 2008) works on *box sets*: intervals
``[t0, t1] x [b0, b1] x [l0, l1] x [r0, r1]`` of the four coordinates, stored as one int64 row
of 8 numbers. Every set kept satisfies ``t1 < b1``, ``b0 > t0``, ``l1 < r1``, ``r0 > l0`` after
clamping, so it holds at least one valid box and its singletons are valid boxes.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def integral(cells):
    """Integral image (H + 1, W + 1) of an (H, W) array."""
    H, W = cells.shape
    S = np.zeros((H + 1, W + 1))
    for i in range(H):
        row = 0.0
        for j in range(W):
            row += cells[i, j]
            S[i + 1, j + 1] = S[i, j + 1] + row
    return S


@njit(cache=True, inline="always")
def box_sum(S, t, l, b, r):
    return S[b, r] - S[t, r] - S[b, l] + S[t, l]


@njit(cache=True, inline="always")
def overlap(t, l, b, r, gt, gl, gb, gr):
    # area (in cells) of the intersection of two boxes, 0 when they are disjoint or one is empty
    h = min(b, gb) - max(t, gt)
    w = min(r, gr) - max(l, gl)
    if h <= 0 or w <= 0:
        return 0
    return h * w


@njit(cache=True, inline="always")
def iou_loss(t, l, b, r, gold):
    gt, gl, gb, gr = gold[0], gold[1], gold[2], gold[3]
    inter = overlap(t, l, b, r, gt, gl, gb, gr)
    union = (b - t) * (r - l) + (gb - gt) * (gr - gl) - inter
    return 1.0 - inter / union


# --------------------------------------------------------------------------- exhaustive search
@njit(cache=True)
def exhaustive_argmax(S, gold, use_loss):
    """Best box by scanning all O(H^2 W^2) boxes; ties go to the first in (t, b, l, r) order."""
    H, W = S.shape[0] - 1, S.shape[1] - 1
    best = -np.inf
    arg = np.zeros(4, dtype=np.int64)
    for t in range(H):
        for b in range(t + 1, H + 1):
            for l in range(W):
                for r in range(l + 1, W + 1):
                    v = box_sum(S, t, l, b, r)
                    if use_loss:
                        v += iou_loss(t, l, b, r, gold)
                    if v > best:
                        best = v
                        arg[0], arg[1], arg[2], arg[3] = t, l, b, r
    return arg, best


@njit(cache=True)
def all_values(S, gold, use_loss):
    """Boxes (m, 4) in (t, b, l, r) loop order and their values (score, plus 1 - IoU if ``use_loss``)."""
    H, W = S.shape[0] - 1, S.shape[1] - 1
    m = (H * (H + 1) // 2) * (W * (W + 1) // 2)
    boxes = np.empty((m, 4), dtype=np.int64)
    values = np.empty(m)
    n = 0
    for t in range(H):
        for b in range(t + 1, H + 1):
            for l in range(W):
                for r in range(l + 1, W + 1):
                    v = box_sum(S, t, l, b, r)
                    if use_loss:
                        v += iou_loss(t, l, b, r, gold)
                    boxes[n, 0], boxes[n, 1], boxes[n, 2], boxes[n, 3] = t, l, b, r
                    values[n] = v
                    n += 1
    return boxes, values


# --------------------------------------------------------------------------- branch-and-bound
@njit(cache=True, inline="always")
def _set_bound(P, N, S, s, gold, use_loss):
    # Upper bound of score (+ loss) over box set s; exact on singletons.
    t0, t1, b0, b1, l0, l1, r0, r1 = s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    if t0 == t1 and b0 == b1 and l0 == l1 and r0 == r1:
        v = box_sum(S, t0, l0, b0, r0)
        if use_loss:
            v += iou_loss(t0, l0, b0, r0, gold)
        return v
    # every box of the set lies inside the largest one and contains the smallest one (if any):
    # positive cells of the largest plus negative cells of the smallest bound the score
    v = box_sum(P, t0, l0, b1, r1)
    small = t1 < b0 and l1 < r0
    if small:
        v += box_sum(N, t1, l1, b0, r0)
    if use_loss:
        # IoU >= |smallest ∩ gold| / |largest ∪ gold| (Blaschko & Lampert 2008)
        gt, gl, gb, gr = gold[0], gold[1], gold[2], gold[3]
        inter_small = overlap(t1, l1, b0, r0, gt, gl, gb, gr) if small else 0
        inter_big = overlap(t0, l0, b1, r1, gt, gl, gb, gr)
        union_big = (b1 - t0) * (r1 - l0) + (gb - gt) * (gr - gl) - inter_big
        v += 1.0 - inter_small / union_big
    return v


@njit(cache=True, inline="always")
def _heap_less(keys, seq, a, b):
    # max-heap order: larger key first, then the earlier insertion (deterministic ties)
    if keys[a] != keys[b]:
        return keys[a] > keys[b]
    return seq[a] < seq[b]


@njit(cache=True)
def _heap_push(keys, seq, items, size, key, counter, item):
    cap = keys.shape[0]
    if size == cap:
        new_keys = np.empty(2 * cap)
        new_seq = np.empty(2 * cap, dtype=np.int64)
        new_items = np.empty((2 * cap, 8), dtype=np.int64)
        new_keys[:cap] = keys
        new_seq[:cap] = seq
        new_items[:cap] = items
        keys, seq, items = new_keys, new_seq, new_items
    pos = size
    keys[pos] = key
    seq[pos] = counter
    items[pos] = item
    while pos > 0:
        parent = (pos - 1) // 2
        if _heap_less(keys, seq, pos, parent):
            _swap(keys, seq, items, pos, parent)
            pos = parent
        else:
            break
    return keys, seq, items


@njit(cache=True, inline="always")
def _swap(keys, seq, items, a, b):
    keys[a], keys[b] = keys[b], keys[a]
    seq[a], seq[b] = seq[b], seq[a]
    for c in range(8):
        items[a, c], items[b, c] = items[b, c], items[a, c]


@njit(cache=True)
def _heap_pop(keys, seq, items, size, out):
    # moves the top item into ``out``, returns its key; the heap then has size - 1 entries
    key = keys[0]
    out[:] = items[0]
    last = size - 1
    if last > 0:
        keys[0] = keys[last]
        seq[0] = seq[last]
        items[0] = items[last]
        pos = 0
        while True:
            left = 2 * pos + 1
            right = left + 1
            best = pos
            if left < last and _heap_less(keys, seq, left, best):
                best = left
            if right < last and _heap_less(keys, seq, right, best):
                best = right
            if best == pos:
                break
            _swap(keys, seq, items, pos, best)
            pos = best
    return key


@njit(cache=True, inline="always")
def _clamp(s):
    # keep only coordinates that can still form a non-empty box; False if none can
    if s[1] > s[3] - 1:
        s[1] = s[3] - 1
    if s[2] < s[0] + 1:
        s[2] = s[0] + 1
    if s[5] > s[7] - 1:
        s[5] = s[7] - 1
    if s[6] < s[4] + 1:
        s[6] = s[4] + 1
    return s[1] >= s[0] and s[3] >= s[2] and s[5] >= s[4] and s[7] >= s[6]


@njit(cache=True)
def bnb_topk(cells, gold, use_loss, k):
    """The ``k`` best boxes by best-first branch-and-bound (Lampert et al. 2008; top-K as in
    Pillutla et al. 2018, Algo. 13): a popped singleton beats every set left in the queue.

    Returns
    -------
    boxes : (k', 4) int64, values : (k',) float64 (score plus the loss term if ``use_loss``),
    popped : number of sets taken off the queue (a measure of the search effort).
    """
    H, W = cells.shape
    S = integral(cells)
    P = integral(np.maximum(cells, 0.0))
    N = integral(np.minimum(cells, 0.0))
    cap = 64
    keys = np.empty(cap)
    seq = np.empty(cap, dtype=np.int64)
    items = np.empty((cap, 8), dtype=np.int64)
    root = np.array([0, H - 1, 1, H, 0, W - 1, 1, W], dtype=np.int64)
    keys, seq, items = _heap_push(keys, seq, items, 0, _set_bound(P, N, S, root, gold, use_loss), 0, root)
    size, counter, popped = 1, 1, 0
    out_boxes = np.empty((k, 4), dtype=np.int64)
    out_values = np.empty(k)
    found = 0
    cur = np.empty(8, dtype=np.int64)
    child = np.empty(8, dtype=np.int64)
    while found < k and size > 0:
        key = _heap_pop(keys, seq, items, size, cur)
        size -= 1
        popped += 1
        axis, width = 0, cur[1] - cur[0]
        for c in range(1, 4):  # split the widest coordinate interval
            if cur[2 * c + 1] - cur[2 * c] > width:
                axis, width = c, cur[2 * c + 1] - cur[2 * c]
        if width == 0:  # a singleton: its key is its exact value
            out_boxes[found, 0], out_boxes[found, 1] = cur[0], cur[4]
            out_boxes[found, 2], out_boxes[found, 3] = cur[2], cur[6]
            out_values[found] = key
            found += 1
            continue
        lo, hi = cur[2 * axis], cur[2 * axis + 1]
        mid = (lo + hi) // 2
        for half in range(2):
            child[:] = cur
            if half == 0:
                child[2 * axis + 1] = mid
            else:
                child[2 * axis] = mid + 1
            if _clamp(child):
                keys, seq, items = _heap_push(keys, seq, items, size, _set_bound(P, N, S, child, gold, use_loss),
                                              counter, child)
                size += 1
                counter += 1
    return out_boxes[:found], out_values[:found], popped


# --------------------------------------------------------------------------- sums over all boxes
@njit(cache=True)
def gibbs(cells, gold, use_loss, inv_temp):
    """Gibbs distribution ``p(box) ∝ exp(inv_temp * (score + loss))`` by enumeration.

    Returns ``(log Z, (H, W) cell-inclusion probabilities, E[loss])``; the max is shifted out
    before exponentiating, and a box's mass is spread over its cells through a corner-difference
    array (four updates per box) summed once at the end, so the cost stays O(H^2 W^2).
    """
    H, W = cells.shape
    S = integral(cells)
    top = -np.inf
    for t in range(H):
        for b in range(t + 1, H + 1):
            for l in range(W):
                for r in range(l + 1, W + 1):
                    v = box_sum(S, t, l, b, r)
                    if use_loss:
                        v += iou_loss(t, l, b, r, gold)
                    top = max(top, inv_temp * v)
    corners = np.zeros((H + 1, W + 1))
    z = 0.0
    loss_sum = 0.0
    for t in range(H):
        for b in range(t + 1, H + 1):
            for l in range(W):
                for r in range(l + 1, W + 1):
                    v = box_sum(S, t, l, b, r)
                    if use_loss:
                        loss = iou_loss(t, l, b, r, gold)
                        v += loss
                    p = np.exp(inv_temp * v - top)
                    z += p
                    if use_loss:
                        loss_sum += p * loss
                    corners[t, l] += p
                    corners[t, r] -= p
                    corners[b, l] -= p
                    corners[b, r] += p
    marg = np.empty((H, W))
    for i in range(H):
        row = 0.0
        for j in range(W):
            row += corners[i, j]
            marg[i, j] = (marg[i - 1, j] if i > 0 else 0.0) + row
    for i in range(H):
        for j in range(W):
            marg[i, j] = min(max(marg[i, j] / z, 0.0), 1.0)  # clip cancellation noise of the prefix sums
    return top + np.log(z), marg, loss_sum / z


@njit(cache=True)
def spread(boxes, weights, H, W):
    """``sum_j weights[j] * indicator(boxes[j])`` as an (H, W) array (corner differences)."""
    corners = np.zeros((H + 1, W + 1))
    for j in range(boxes.shape[0]):
        t, l, b, r = boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3]
        p = weights[j]
        corners[t, l] += p
        corners[t, r] -= p
        corners[b, l] -= p
        corners[b, r] += p
    out = np.empty((H, W))
    for i in range(H):
        row = 0.0
        for j in range(W):
            row += corners[i, j]
            out[i, j] = (out[i - 1, j] if i > 0 else 0.0) + row
    return out


@njit(cache=True)
def max_marginals(cells):
    """(H, W): best score of a box containing each cell, in O(H^2 W).

    For rows [t, b) and column j, the best box is ``max_{r > j} C_r - min_{l <= j} C_l`` with C
    the prefix sums of the column sums; a cell (i, j) takes the max over t <= i < b.
    """
    H, W = cells.shape
    out = np.full((H, W), -np.inf)
    col = np.empty(W)
    C = np.empty(W + 1)
    best = np.empty((H + 1, W))  # best[b, j]: best box with rows [t, b) through column j
    for t in range(H):
        col[:] = 0.0
        for b in range(t + 1, H + 1):
            C[0] = 0.0
            for j in range(W):
                col[j] += cells[b - 1, j]
                C[j + 1] = C[j] + col[j]
            suffix = -np.inf
            for j in range(W - 1, -1, -1):
                suffix = max(suffix, C[j + 1])
                best[b, j] = suffix
            prefix = np.inf
            for j in range(W):
                prefix = min(prefix, C[j])
                best[b, j] -= prefix
        running = np.full(W, -np.inf)
        for i in range(H - 1, t - 1, -1):  # running[j] = max over b > i of best[b, j]
            for j in range(W):
                running[j] = max(running[j], best[i + 1, j])
                out[i, j] = max(out[i, j], running[j])
    return out
