"""Exact top-K by Lawler's partition of the output space (Murty's method for assignments).

The outputs are vectors ``y`` of ``n`` positions (a factor graph's variables, a matching's left
nodes). A subproblem is the output set under some constraints (an array the caller interprets:
clamped unary scores, an assignment matrix with forbidden entries) and a mask of the positions it
fixes. After the best output y of a subproblem is taken, the rest of that subproblem splits into
disjoint subproblems, one per free position j in order: "the free positions before j as in y,
position j not as in y". Each is solved exactly; a heap keeps the best open one. So the j-th output
costs at most one exact solve per free position, and ties are broken by discovery order
(deterministic).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import numpy as np


def partition_topk(k: int, root: np.ndarray, n: int,
                   solve: Callable[[np.ndarray], tuple[float, np.ndarray] | None],
                   forbid: Callable[[np.ndarray, int, int], bool],
                   force: Callable[[np.ndarray, int, int], None]) -> tuple[list[np.ndarray], np.ndarray]:
    """The ``k`` best outputs (fewer when fewer exist) and their scores, in decreasing order.

    Parameters
    ----------
    k : int
        How many outputs (a positive integer, checked by the caller).
    root : ndarray
        The constraints of the whole output set (never modified: subproblems work on copies).
    n : int
        Number of positions of an output.
    solve : callable
        ``solve(constraints) -> (score, y)`` for the exact best output under the constraints, or None
        when the subproblem is empty.
    forbid : callable
        ``forbid(constraints, j, value)`` makes position ``j`` differ from ``value`` (in place);
        returns False when that leaves the subproblem visibly empty (it is then not solved).
    force : callable
        ``force(constraints, j, value)`` makes position ``j`` equal ``value`` (in place).

    Returns
    -------
    outputs : list of ndarray
    scores : float ndarray
    """
    counter = itertools.count()
    heap: list = []

    def push(constraints: np.ndarray, fixed: np.ndarray) -> None:
        found = solve(constraints)
        if found is not None:
            score, y = found
            heapq.heappush(heap, (-score, next(counter), y, constraints, fixed))

    push(root.copy(), np.zeros(n, dtype=bool))
    outputs: list[np.ndarray] = []
    scores: list[float] = []
    while heap and len(outputs) < k:
        neg, _, y, constraints, fixed = heapq.heappop(heap)
        outputs.append(y)
        scores.append(-neg)
        if len(outputs) == k:
            break
        base, fixed_now = constraints.copy(), fixed.copy()
        for j in np.flatnonzero(~fixed):
            child = base.copy()
            if forbid(child, int(j), int(y[j])):
                push(child, fixed_now.copy())
            force(base, int(j), int(y[j]))
            fixed_now[j] = True
    return outputs, np.array(scores, dtype=float)
