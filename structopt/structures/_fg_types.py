"""The types and constants the factor-graph modules share: potentials, the flat layout, AD3's iterate, MAP answers.

:mod:`structopt.structures.factor_graph` re-exports them (the public names are documented there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from structopt.options import optional, positive
from structopt.structures import _ad3_kernels as K
from structopt.structures._ad3_structured import ActiveSet

#: the FactorGraph that the functions of the ``_fg_*`` modules take first (not imported there: they are its parts,
#: and factor_graph imports them)
Graph = Any
#: the one time-limit check of factor graphs, GraphModel and the MAP / marginal inference entry points:
#: None or a finite number of seconds > 0 (booleans refused)
check_time_limit = optional(positive)
#: the kernel's status codes (_ad3_kernels) as MAPSolution statuses
_STATUS_NAMES = {K.INFEASIBLE: "infeasible", K.GAP_CLOSED: "optimal", K.LP_CONVERGED: "lp_converged",
                 K.BELOW_TARGET: "below_target"}
#: top-K solves up to k·n_vars + 1 exact branch-and-bound subproblems; beyond this many it refuses
TOPK_MAX_SUBPROBLEMS = 2000
#: ICM sweeps after rounding a relaxed point (LP) or a feasible labeling (the repair)
ROUNDING_SWEEPS = 100
#: the AD3 run whose rounded labelings ``method="lp"`` also tries when its own rounding misses the LP value
LP_AD3_ITERATIONS, LP_AD3_SECONDS = 2000, 1.0
#: the least time the repair of an empty rounding gets, even when the time limit is spent
REPAIR_SECONDS = 0.5
#: the part of the time limit that ``method="auto"`` gives AD3 before the exact search
AUTO_AD3_SHARE = 0.25
#: AD3's default relative tolerances (labeling gap and LP convergence, :meth:`FactorGraph.ad3`)
AD3_TOL = 1e-6
#: prediction's default (``method="ad3_bnb"``): branch-and-bound after AD3, while a gap remains, within this many
#: seconds and nodes per call (the answer carries its certificate either way)
PREDICT_SECONDS, PREDICT_NODES = 1.0, 2000
#: the tight tolerances (the earlier default): the relaxed oracle of training, whose answer certifies SSVM gaps
AD3_TIGHT = 1e-9


class FactorGraphPotentials(NamedTuple):
    """Scores (or statistics) of a factor graph: per-variable states, then dense tables' entries."""

    unary: np.ndarray
    factors: np.ndarray


@dataclass(frozen=True)
class _Flat:
    """The factor graph as flat arrays for the kernels (built once per graph)."""

    vstates: np.ndarray
    voff: np.ndarray
    deg: np.ndarray
    vptr: np.ndarray
    vedge: np.ndarray
    fkind: np.ndarray
    fparam: np.ndarray
    fptr: np.ndarray
    evar: np.ndarray
    eoff: np.ndarray
    toff: np.ndarray
    aoff: np.ndarray
    efac: np.ndarray
    order: np.ndarray

    @property
    def n_vars(self) -> int:
        return int(self.vstates.size)


@dataclass
class AD3State:
    """AD3's iterate (warm start for a later run): marginals, multipliers, factor copies, active sets, η."""

    p: np.ndarray
    lam: np.ndarray
    qe: np.ndarray
    qt: np.ndarray
    acfg: np.ndarray
    aw: np.ndarray
    acount: np.ndarray
    scal: np.ndarray
    #: structured factors' active sets, by factor index (empty without structured factors)
    struct: dict[int, ActiveSet] = field(default_factory=dict)
    #: the pairwise tables' carried KKT inverses, with their active sets (``_ad3_kernels.inverse_layout``)
    ainv: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def copy(self) -> AD3State:
        """An independent copy (the warm start of a branch-and-bound child)."""
        return AD3State(self.p.copy(), self.lam.copy(), self.qe.copy(), self.qt.copy(), self.acfg.copy(),
                        self.aw.copy(), self.acount.copy(), self.scal.copy(),
                        {f: a.copy() for f, a in self.struct.items()}, self.ainv.copy())


@dataclass
class MAPSolution:
    """The answer of a MAP method on a factor graph.

    Attributes
    ----------
    labels : ndarray of int64 or None
        Best labeling found (None when none satisfying the hard factors was found).
    score : float
        Its exact score (``-inf`` when ``labels`` is None); a lower bound on the MAP value.
    upper_bound : float
        Certified upper bound on the MAP value (AD3: the best dual value; bnb: the largest open
        bound; cpsat: CP-SAT's bound plus the rounding slack; lp: the LP value).
    optimal : bool
        ``score >= upper_bound - tol``: the labeling is proven optimal (cpsat: optimal for the
        integer-scaled scores, see ``resolution``).
    status : str
        ``"optimal"``, ``"lp_converged"``, ``"infeasible"``, ``"max_iter"``, ``"time_limit"``,
        ``"node_limit"`` (bnb) or the solver's own status.
    method : str
    time : float
        Wall seconds.
    iterations : int
        AD3 iterations (summed over nodes for bnb), or 0.
    lp_value : float or None
        AD3's primal objective at the end (the LP-MAP value at convergence), or the HiGHS LP value.
    marginals : FactorGraphPotentials or None
        The relaxed point (AD3 / lp).
    nodes : int
        Branch-and-bound nodes solved.
    resolution : float or None
        CP-SAT: the score unit of the integer scaling (each coefficient is rounded to a multiple).
    """

    labels: np.ndarray | None
    score: float
    upper_bound: float
    optimal: bool
    status: str
    method: str
    time: float = 0.0
    iterations: int = 0
    lp_value: float | None = None
    marginals: FactorGraphPotentials | None = None
    nodes: int = 0
    resolution: float | None = None
    trace: list[dict] = field(default_factory=list)
    #: bnb: the root node's final AD3 iterate (a warm start for the next call on similar potentials)
    root_state: AD3State | None = None


class MAPInterrupted(KeyboardInterrupt):
    """Ctrl-C during a MAP method; ``solution`` holds what it had (status ``"interrupted"``): the best
    labeling found so far (None if none yet) and a bound that still holds (``inf`` when none was proven).

    A subclass of KeyboardInterrupt, so code that does not look for the partial answer stops as usual.
    """

    def __init__(self, solution: MAPSolution) -> None:
        super().__init__(f"{solution.method} interrupted")
        self.solution = solution


def better(a: MAPSolution, b: MAPSolution) -> MAPSolution:
    """The one of two answers on the same potentials with the better labeling (``a`` on ties)."""
    return b if b.labels is not None and (a.labels is None or b.score > a.score) else a

