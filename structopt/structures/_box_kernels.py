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


@njit(cache=True)
def _integrals(cells):
    # integral images of the cells, of their positive parts and of their negative parts
    H, W = cells.shape
    S = np.zeros((H + 1, W + 1))
    P = np.zeros((H + 1, W + 1))
    N = np.zeros((H + 1, W + 1))
    for i in range(H):
        row = row_p = row_n = 0.0
        for j in range(W):
            v = cells[i, j]
            row += v
            if v > 0.0:
                row_p += v
            else:
                row_n += v
            S[i + 1, j + 1] = S[i, j + 1] + row
            P[i + 1, j + 1] = P[i, j + 1] + row_p
            N[i + 1, j + 1] = N[i, j + 1] + row_n
    return S, P, N


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


@njit(cache=True, inline="always")
def box_value(S, t, l, b, r, gold, use_loss):
    # score of the box from the integral image S, plus its 1 - IoU with ``gold`` if ``use_loss``
    v = box_sum(S, t, l, b, r)
    if use_loss:
        v += iou_loss(t, l, b, r, gold)
    return v


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
                    v = box_value(S, t, l, b, r, gold, use_loss)
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
                    v = box_value(S, t, l, b, r, gold, use_loss)
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
        return box_value(S, t0, l0, b0, r0, gold, use_loss)
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


# The queue is a binary max-heap of indices into an append-only pool of sets (``keys``, ``items``):
# sifting moves one int per level, and the pool index doubles as the insertion order that breaks
# ties between equal keys deterministically (earlier first).
@njit(cache=True, inline="always")
def _before(keys, a, b):
    return keys[a] > keys[b] or (keys[a] == keys[b] and a < b)


@njit(cache=True)
def _grow(keys, items, heap):
    cap = keys.shape[0]
    new_keys = np.empty(2 * cap)
    new_items = np.empty((2 * cap, 8), dtype=np.int64)
    new_heap = np.empty(2 * cap, dtype=np.int64)
    new_keys[:cap] = keys
    new_items[:cap] = items
    new_heap[:cap] = heap
    return new_keys, new_items, new_heap


@njit(cache=True, inline="always")
def _sift_up(keys, heap, pos):
    node = heap[pos]
    while pos > 0:
        parent = (pos - 1) // 2
        if not _before(keys, node, heap[parent]):
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = node


@njit(cache=True, inline="always")
def _pop(keys, heap, size):
    # remove and return the top pool index; the heap then holds size - 1 entries
    top = heap[0]
    last = size - 1
    if last > 0:
        node = heap[last]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= last:
                break
            if child + 1 < last and _before(keys, heap[child + 1], heap[child]):
                child += 1
            if not _before(keys, heap[child], node):
                break
            heap[pos] = heap[child]
            pos = child
        heap[pos] = node
    return top


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
    S, P, N = _integrals(cells)
    cap = 256
    keys = np.empty(cap)
    items = np.empty((cap, 8), dtype=np.int64)
    heap = np.empty(cap, dtype=np.int64)
    items[0, 0], items[0, 1], items[0, 2], items[0, 3] = 0, H - 1, 1, H
    items[0, 4], items[0, 5], items[0, 6], items[0, 7] = 0, W - 1, 1, W
    keys[0] = _set_bound(P, N, S, items[0], gold, use_loss)
    heap[0] = 0
    size, used, popped = 1, 1, 0
    out_boxes = np.empty((k, 4), dtype=np.int64)
    out_values = np.empty(k)
    found = 0
    while found < k and size > 0:
        top = _pop(keys, heap, size)
        size -= 1
        popped += 1
        cur = items[top]
        axis, width = 0, cur[1] - cur[0]
        for c in range(1, 4):  # split the widest coordinate interval
            if cur[2 * c + 1] - cur[2 * c] > width:
                axis, width = c, cur[2 * c + 1] - cur[2 * c]
        if width == 0:  # a singleton: its key is its exact value
            out_boxes[found, 0], out_boxes[found, 1] = cur[0], cur[4]
            out_boxes[found, 2], out_boxes[found, 3] = cur[2], cur[6]
            out_values[found] = keys[top]
            found += 1
            continue
        mid = (cur[2 * axis] + cur[2 * axis + 1]) // 2
        for half in range(2):
            if used == keys.shape[0]:
                keys, items, heap = _grow(keys, items, heap)
                cur = items[top]
            child = items[used]
            child[:] = cur
            if half == 0:
                child[2 * axis + 1] = mid
            else:
                child[2 * axis] = mid + 1
            if _clamp(child):
                keys[used] = _set_bound(P, N, S, child, gold, use_loss)
                heap[size] = used
                _sift_up(keys, heap, size)
                size += 1
                used += 1
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
                    top = max(top, inv_temp * box_value(S, t, l, b, r, gold, use_loss))
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
    marg = _accumulate_corners(corners, H, W)
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
    return _accumulate_corners(corners, H, W)


@njit(cache=True)
def _accumulate_corners(corners, H, W):
    # (H, W) 2-D prefix sums of the (H+1, W+1) corner differences: the cell-wise sum of the boxes
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
