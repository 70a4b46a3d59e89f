"""The K best labelings of a factor graph by Lawler's partition over exact branch-and-bound (``FactorGraph.topk``)."""

from __future__ import annotations

import numbers
import time

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures._fg_types import TOPK_MAX_SUBPROBLEMS, FactorGraphPotentials, Graph
from structopt.structures._partition_topk import partition_topk


def topk(fg: Graph, theta: FactorGraphPotentials, k: int) -> tuple[list[np.ndarray], np.ndarray]:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral) or k < 1:
        raise InvalidInputError(f"top-K needs a positive integer k, got {k!r}")
    k = int(k)
    if k * fg.n_vars + 1 > TOPK_MAX_SUBPROBLEMS:
        raise NotSupportedError(f"FactorGraph top-K by branch-and-bound solves up to k·n_vars + 1 = "
                                f"{k * fg.n_vars + 1} exact MAP subproblems, beyond the limit of "
                                f"{TOPK_MAX_SUBPROBLEMS} (MAP on a general factor graph is NP-hard); "
                                f"ask for a smaller k")
    theta = fg.check_theta(theta)
    fl = fg.flat
    t0 = time.perf_counter()

    def solve(unary: np.ndarray) -> tuple[float, np.ndarray] | None:
        limit = None if fg.time_limit is None else max(fg.time_limit - (time.perf_counter() - t0), 1e-3)
        sol = fg._bnb(FactorGraphPotentials(unary, theta.factors), time_limit=limit)
        if sol.status not in ("optimal", "infeasible"):
            raise RuntimeError(f"FactorGraph top-K: a branch-and-bound subproblem ended with status "
                               f"{sol.status!r}, not proven optimal (raise time_limit)")
        return None if sol.labels is None else (sol.score, sol.labels)

    def forbid(unary: np.ndarray, i: int, state: int) -> bool:
        lo, hi = int(fl.voff[i]), int(fl.voff[i + 1])
        unary[lo + state] = -np.inf
        return bool(np.isfinite(unary[lo:hi]).any())

    def force(unary: np.ndarray, i: int, state: int) -> None:
        lo, hi = int(fl.voff[i]), int(fl.voff[i + 1])
        keep = unary[lo + state]
        unary[lo:hi] = -np.inf
        unary[lo + state] = keep

    outputs, scores = partition_topk(k, theta.unary, fl.n_vars, solve, forbid, force)
    if not outputs:
        raise InvalidInputError("FactorGraph potentials forbid every labeling (no feasible output)")
    return outputs, scores
