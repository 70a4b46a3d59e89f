"""One OR-Tools min-cost-flow call on integer arcs (the b-matching backend of the fertility alignment task).

OR-Tools' ``SimpleMinCostFlow`` solves with integer capacities and integer unit costs only: the caller
scales its float costs and certifies the answer in floats (as the min-cut backends in ``_mincut`` do).

Ctrl-C: ``SimpleMinCostFlow.solve`` holds the GIL and has no stop function, so nothing can end it
early; like :func:`~structopt.structures._mincut.ortools_min_cut` the call is not wrapped in
:func:`structopt.interrupt.interruptible` (whose signal-handler swap costs ~13 µs, a tenth of a Hansards
b-matching call, and would still wait for the return). Python raises the :class:`KeyboardInterrupt` as
soon as the call returns: ``benchmarks/alignment_fertility_results.md`` measured at most 13 ms per
call up to 100 x 100 word pairs, and a dense 800 x 800 b-matching takes 0.3 s.
"""

from __future__ import annotations

import numpy as np

#: OR-Tools multiplies unit costs by (nodes + 1) in its cost-scaling algorithm and refuses (BAD_COST_RANGE)
#: when |cost| * (nodes + 1) nears 2^62 (measured: 2^57 accepted on 8 and 42 nodes, 2^54 on 202): callers
#: keep |cost| * (nodes + 1) * COST_HEADROOM below 2^62
COST_HEADROOM = 16


def max_cost_magnitude(n_nodes: int) -> int:
    """The largest |unit cost| that :func:`ortools_min_cost_flow` accepts safely on ``n_nodes`` nodes."""
    return max(1, (1 << 62) // (COST_HEADROOM * (int(n_nodes) + 1)))


def ortools_min_cost_flow(tails: np.ndarray, heads: np.ndarray, capacities: np.ndarray, costs: np.ndarray,
                          supplies: np.ndarray) -> tuple[np.ndarray, int]:
    """Min-cost flow with OR-Tools on integer arcs over nodes ``0..len(supplies)-1``.

    Parameters
    ----------
    tails, heads : (m,) int arrays
        Arc endpoints.
    capacities, costs : (m,) int arrays
        Arc capacities (>= 0) and unit costs; keep ``|costs| <= max_cost_magnitude(n)``.
    supplies : (n,) int array
        Node supplies (positive) and demands (negative), summing to 0.

    Returns
    -------
    flows : (m,) int64 array
        The flow on every arc, in the input order.
    cost : int
        The optimal total cost ``<costs, flows>``.

    Raises
    ------
    RuntimeError
        When OR-Tools does not report an optimal flow (infeasible supplies, cost or capacity range).
    """
    from ortools.graph.python import min_cost_flow

    supplies = np.asarray(supplies, dtype=np.int64)
    solver = min_cost_flow.SimpleMinCostFlow()
    arcs = solver.add_arcs_with_capacity_and_unit_cost(
        np.asarray(tails, dtype=np.int64), np.asarray(heads, dtype=np.int64),
        np.asarray(capacities, dtype=np.int64), np.asarray(costs, dtype=np.int64))
    solver.set_nodes_supplies(np.arange(supplies.size, dtype=np.int64), supplies)
    status = solver.solve()
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-Tools min-cost flow failed with status {status}")
    return np.asarray(solver.flows(arcs), dtype=np.int64), int(solver.optimal_cost())
