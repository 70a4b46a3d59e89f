"""The exact solvers behind the structures' oracles, for the layers that reuse them.

- :func:`highs_solve`: an LP or MILP by HiGHS (interruptible), as ``LPStructure`` and the factor
  graphs' ``lp`` method use it; the marginal-inference MAP oracle solves the local polytope with it.
- :func:`ortools_min_cut`: a minimum s-t cut by OR-Tools, the binary grid's backend; the MAP oracle
  uses it for submodular perturbed potentials.
- :func:`ortools_min_cost_flow`: a min-cost flow by OR-Tools on integer arcs (costs within
  :func:`max_cost_magnitude`), the fertility alignment task's b-matching backend.
- :func:`project_hull`: the Euclidean projection onto the convex hull of given points (min-norm
  point), which validation uses as the reference projection onto a polytope;
  :func:`min_norm_active_set` is the same method returning its active set (vertices, convex
  weights, the oracle's outputs), which SparseMAP uses.
"""

from __future__ import annotations

from structopt.structures._ilp import highs_solve
from structopt.structures._mincostflow import max_cost_magnitude, ortools_min_cost_flow
from structopt.structures._mincut import ortools_min_cut
from structopt.structures._minnorm import ActiveSet, min_norm_active_set, project_hull

__all__ = ["ActiveSet", "highs_solve", "max_cost_magnitude", "min_norm_active_set", "ortools_min_cost_flow",
           "ortools_min_cut", "project_hull"]
