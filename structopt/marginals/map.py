"""MAP inference for pairwise MRFs (e.g. UAI models from :func:`structopt.marginals.read_uai`).

The MRF's log-potentials become a :class:`~structopt.structures.factor_graph.FactorGraph` (one
unary block per variable, one dense table per edge; zero-probability entries are ``-inf``, i.e.
forbidden) and one of its MAP methods runs:

- ``"auto"`` (the default): AD3, then CP-SAT (hinted with AD3's labeling) while a gap remains, within
  the time limit; the better labeling and the smaller certified bound (``optimal`` when they meet).
  On the UAI grids CP-SAT proves the optimum in about a second where AD3 alone leaves a 23% gap
  (benchmarks/map_default_results.md).
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
from structopt.marginals._options import Check
from structopt.marginals.mrf import PairwiseMRF
from structopt.structures.factor_graph import (
    FactorGraph,
    FactorGraphPotentials,
    MAPInterrupted,
    MAPSolution,
    accepted_options,
    check_time_limit,
)
from structopt.structures.factor_graph import check_map_options as check_options

METHODS = ("auto", "ad3", "bnb", "lp", "cpsat")


#: the options each method takes (beside ``time_limit``) and their checks, applied before any work: the factor
#: graph's own table (``FactorGraph.map`` checks the same), without the options that carry an earlier call's objects
OPTIONS: dict[str, dict[str, Check]] = {method: accepted_options(method, carried=False) for method in METHODS}


def check_map_options(method: Any, options: dict[str, Any], where: str = "map_inference") -> None:
    """Refuse an unknown method, an option ``method`` does not take (naming the ones it takes) or a bad value."""
    check_options(method, options, where, methods=METHODS, carried=False)


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
        """``upper_bound - log_score`` (0 when optimal to the tolerance; ``inf`` without a labeling)."""
        return float(self.upper_bound - self.log_score)


class MAPInferenceInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`map_inference`; ``result`` holds the best labeling found so far and a bound that
    holds (status ``"interrupted"``), or None when no labeling was found yet.

    A subclass of KeyboardInterrupt, so code that does not look for the partial answer stops as usual.
    """

    def __init__(self, result: MAPResult | None) -> None:
        super().__init__(f"MAP inference interrupted{'' if result is None else ' (' + result.method + ')'}")
        self.result = result


def mrf_to_factor_graph(mrf: PairwiseMRF) -> tuple[FactorGraph, FactorGraphPotentials]:
    """The factor graph of ``mrf`` (a table per edge) and its potentials (the MRF's log-potentials).

    The MRF's constant is not included (add ``mrf.constant`` to scores).
    """
    if not isinstance(mrf, PairwiseMRF):
        raise InvalidInputError(f"map_inference needs a PairwiseMRF (e.g. from read_uai), got {type(mrf).__name__}")
    # no Python loop over variables or edges: one compiled pass checks the edges and builds the flat arrays the
    # kernels run on (3-9% of the AD3 call on the UAI segmentations, benchmarks/ad3_uai_results.md)
    fg = FactorGraph(np.asarray(mrf.cards, dtype=np.int64))
    fg.add_pairwise_tables(mrf.edges)
    # the flat layouts agree: node blocks then edge tables in the MRF's edge order, row-major
    n = mrf.n_nodes
    unary = mrf.theta[:mrf.offsets[n]].copy()
    tables = mrf.theta[mrf.offsets[n]:].copy()
    return fg, FactorGraphPotentials(unary, tables)


def map_inference(mrf: PairwiseMRF, method: str = "auto", time_limit: float | None = 60.0,
                  **options: Any) -> MAPResult:
    """MAP labeling of a pairwise MRF with a certified upper bound.

    Parameters
    ----------
    mrf : PairwiseMRF
    method : {"auto", "ad3", "bnb", "lp", "cpsat"}
        See the module docstring; ``"auto"`` (AD3, then CP-SAT while a gap remains) by default.
    time_limit : float or None
        Seconds for the method (``"lp"`` runs HiGHS to completion).
    **options
        The method's own options (:data:`OPTIONS` lists them: e.g. ``tol_gap``, ``max_iter`` for
        ``"ad3"``, ``num_workers`` for ``"cpsat"`` and ``"auto"``), each checked before any work.

    Returns
    -------
    MAPResult
        ``labels`` satisfy every hard constraint (zero-probability entries) whenever some labeling does.

    Raises
    ------
    InvalidInputError
        Before any work: an unknown method, an option the method does not take (the message lists the
        ones it takes) or a bad value. After the run: the model has no labeling of positive probability
        (proven), or none was found within the time limit.
    MAPInferenceInterrupted
        Ctrl-C (AD3 returns to Python every ~0.1 s; CP-SAT and HiGHS are stopped promptly); its
        ``result`` holds the best labeling found so far, marked ``"interrupted"``.
    """
    t0 = time.perf_counter()
    check_map_options(method, options)
    check_time_limit("time_limit", time_limit)
    fg, theta = mrf_to_factor_graph(mrf)
    try:
        sol: MAPSolution = fg.map(theta, method=method, time_limit=None if method == "lp" else time_limit, **options)
    except KeyboardInterrupt as interrupt:  # a MAPInterrupted carries the best labeling so far
        partial = interrupt.solution if isinstance(interrupt, MAPInterrupted) else None
        result = None if partial is None or partial.labels is None else _result(mrf, partial, method, t0)
        raise MAPInferenceInterrupted(result) from interrupt
    if sol.labels is None:
        if sol.status == "infeasible":
            raise InvalidInputError(f"{method}: the model has no labeling of positive probability (proven)")
        raise InvalidInputError(f"{method} found no labeling of positive probability within the time limit "
                                f"(status {sol.status}); infeasibility is not proven: allow more time")
    return _result(mrf, sol, method, t0)


def _result(mrf: PairwiseMRF, sol: MAPSolution, method: str, t0: float) -> MAPResult:
    c = mrf.constant
    log_score = mrf.score(sol.labels)
    return MAPResult(sol.labels, log_score, float(max(sol.upper_bound + c, log_score)), bool(sol.optimal),
                     time.perf_counter() - t0, method, sol.status, sol.iterations,
                     None if sol.lp_value is None else sol.lp_value + c, sol.nodes, sol.resolution, sol.trace)
