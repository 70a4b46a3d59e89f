"""MAP inference for pairwise MRFs (e.g. UAI models from :func:`structopt.marginals.read_uai`).

The MRF's log-potentials become a :class:`~structopt.structures.factor_graph.FactorGraph` (one
unary block per variable, one dense table per edge; zero-probability entries are ``-inf``, i.e.
forbidden) and one of its MAP methods runs:

- ``"ad3"``: AD3, the LP-MAP relaxation with a certified upper bound (best dual value) and the best
  rounded labeling; ``optimal`` when they meet.
- ``"bnb"``: branch-and-bound over AD3, exact (``optimal`` unless the time limit stops it).
- ``"lp"``: HiGHS on the local polytope; the LP value is the upper bound, rounding gives the labels.
- ``"cpsat"``: OR-Tools CP-SAT with integer-scaled scores (``resolution`` says the unit), re-scored
  exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.marginals.mrf import PairwiseMRF
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials, MAPSolution, check_time_limit

METHODS = ("ad3", "bnb", "lp", "cpsat")


@dataclass
class MAPResult:
    """MAP answer for a pairwise MRF.

    Attributes
    ----------
    labels : ndarray of int64, shape (N,)
        The best labeling found.
    log_score : float
        Its natural-log unnormalised probability under the MRF (``mrf.score(labels)``, constant
        included).
    upper_bound : float
        Certified upper bound on the MAP log-score (same scale as ``log_score``). For ``"lp"`` it
        holds to HiGHS' tolerances (about 1e-7); for ``"cpsat"`` it includes the rounding slack.
    optimal : bool
        The labels are proven optimal (``log_score >= upper_bound - tol``).
    time : float
        Wall seconds, conversion included.
    method : str
    status : str
        Why the method stopped (see :class:`~structopt.structures.factor_graph.MAPSolution`).
    iterations : int
        AD3 iterations (summed over branch-and-bound nodes), else 0.
    lp_value : float or None
        The LP-MAP value (HiGHS) or AD3's primal objective at the end, constant included.
    nodes : int
        Branch-and-bound nodes.
    resolution : float or None
        CP-SAT's score unit.
    trace : list of dict
        AD3: per chunk, iteration, time, upper, lower, primal, η (constant not included).
    """

    labels: np.ndarray
    log_score: float
    upper_bound: float
    optimal: bool
    time: float
    method: str
    status: str = ""
    iterations: int = 0
    lp_value: float | None = None
    nodes: int = 0
    resolution: float | None = None
    trace: list[dict] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """``upper_bound - log_score`` (0 when optimal to the tolerance)."""
        return float(self.upper_bound - self.log_score)


def mrf_to_factor_graph(mrf: PairwiseMRF) -> tuple[FactorGraph, FactorGraphPotentials]:
    """The factor graph of ``mrf`` (a table per edge) and its potentials (the MRF's log-potentials).

    The MRF's constant is not included (add ``mrf.constant`` to scores).
    """
    if not isinstance(mrf, PairwiseMRF):
        raise InvalidInputError(f"map_inference needs a PairwiseMRF (e.g. from read_uai), got {type(mrf).__name__}")
    fg = FactorGraph(mrf.cards.tolist())
    for i, j in mrf.edges.tolist():
        fg.add_table([i, j])
    # the flat layouts agree: node blocks then edge tables in the MRF's edge order, row-major
    n = mrf.n_nodes
    unary = mrf.theta[:mrf.offsets[n]].copy()
    tables = mrf.theta[mrf.offsets[n]:].copy()
    return fg, FactorGraphPotentials(unary, tables)


def map_inference(mrf: PairwiseMRF, method: str = "ad3", time_limit: float | None = 60.0,
                  **options: Any) -> MAPResult:
    """MAP labeling of a pairwise MRF with a certified upper bound.

    Parameters
    ----------
    mrf : PairwiseMRF
    method : {"ad3", "bnb", "lp", "cpsat"}
        See the module docstring.
    time_limit : float or None
        Seconds for the method (``"lp"`` runs HiGHS to completion).
    **options
        Passed to :meth:`FactorGraph.ad3`, :meth:`FactorGraph.bnb` or :meth:`FactorGraph.cpsat`
        (e.g. ``tol_gap``, ``max_iter``, ``num_workers``).

    Returns
    -------
    MAPResult

    Raises
    ------
    InvalidInputError
        An unknown method, a non-positive time limit, or no labeling of positive probability found.
    KeyboardInterrupt
        Ctrl-C (AD3 returns to Python every ~0.1 s; CP-SAT and HiGHS are stopped promptly).
    """
    t0 = time.perf_counter()
    if method not in METHODS:
        raise InvalidInputError(f"unknown MAP method {method!r}; use one of {', '.join(METHODS)}")
    check_time_limit("time_limit", time_limit)
    fg, theta = mrf_to_factor_graph(mrf)
    sol: MAPSolution = fg.map(theta, method=method, time_limit=None if method == "lp" else time_limit, **options)
    if sol.labels is None:
        raise InvalidInputError(f"{method} found no labeling of positive probability (status {sol.status})")
    c = mrf.constant
    log_score = mrf.score(sol.labels)
    return MAPResult(sol.labels, log_score, float(sol.upper_bound + c), bool(sol.optimal), time.perf_counter() - t0,
                     method, sol.status, sol.iterations, None if sol.lp_value is None else sol.lp_value + c,
                     sol.nodes, sol.resolution, sol.trace)
