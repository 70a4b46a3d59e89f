"""An approximate regularisation path of the structural SVM with warm-started BCFW (Osokin et al. 2016, Sec. 5).

For a decreasing sequence of lambdas, BCFW (with any of its options, the gap-BCFW ones included)
runs at each lambda until its duality gap is at most ``eps`` times its primal: a certified
``eps``-relative solution at every lambda. Each lambda starts from the previous one's dual iterate:
the block variables ``alpha_i`` (in statistics space ``m_i`` and ``l_i``) do not depend on lambda, and
only ``w = sum_i A_i^T (gold_i - m_i) / (lam n)`` is rescaled by ``lam_old / lam_new``, so the warm
start is dual-feasible and its gap certified like any BCFW iterate. Corner caches, active sets and
stored block gaps carry over (the gaps as stale estimates, refreshed like any others); the
averaging accumulators restart. The paper's adaptive choice of the next lambda (from the current
gap) is not implemented: the grid is the caller's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.parallel import SerialExecutor
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState
from structopt.solvers.base import RunOptions, check_values, make_rng, run
from structopt.solvers.bcfw import BCFWMethod, BCFWOptions, bcfw


@dataclass
class PathPoint:
    """One lambda of the path: the returned weights and their certificate.

    Attributes
    ----------
    lam : float
    w : ndarray
        The reported weights (averaged unless ``averaging="none"``).
    primal, dual, gap : float
        Certified: ``dual <= F*(lam) <= primal``, ``gap = primal - dual <= eps * primal`` unless the
        budget ran out first (``reached`` False).
    passes : float
        Effective passes (block steps / n) spent at this lambda.
    oracle_calls, cache_hits : int
        Exact oracle calls (refresh passes included) and steps served by cached corners at this lambda.
    seconds : float
        Optimisation seconds at this lambda (evaluations excluded).
    reached : bool
        Whether the relative gap ``eps`` was reached within ``max_passes``.
    validation : float or None
        ``validate(w)`` when a validation function was given.
    """

    lam: float
    w: np.ndarray
    primal: float
    dual: float
    gap: float
    passes: float
    oracle_calls: int
    cache_hits: int
    seconds: float
    reached: bool
    validation: float | None = None


def regularization_path(problem: SSVMProblem, lams, *, eps: float = 0.01, max_passes: float = 200,
                        eval_every: float = 1, validate=None, random_state: int | np.random.Generator | None = None,
                        **options: Any) -> list[PathPoint]:
    """BCFW over a decreasing sequence of lambdas, warm-started, each stopped at a certified relative gap.

    Parameters
    ----------
    problem : SSVMProblem
        Its own ``lam`` is ignored: the path's lambdas replace it.
    lams : sequence of float
        Strictly decreasing, finite, > 0.
    eps : float
        Stop each lambda at ``gap <= eps * primal`` (in (0, 1)).
    max_passes : float
        Budget of effective passes per lambda.
    eval_every : float
        Evaluations (one exact pass each, not counted) every this many passes.
    validate : callable, optional
        ``validate(w) -> float`` recorded at each lambda (e.g. a held-out score).
    random_state : int, Generator or None
        Seed of the block sampling (one generator for the whole path).
    **options
        BCFW's trajectory options: ``line_search``, ``averaging``, ``sampling``, ``cache_size``,
        ``cache_factor``, ``cache_nu``, ``steps`` (see :func:`structopt.solvers.bcfw`; mini-batches
        and the fused pass are the plain solver's). Checked by the solver's own declarations.

    Returns
    -------
    list of PathPoint
        One per lambda, in the given order.
    """
    lams = [float(lam) for lam in lams]
    if not lams or any(not (math.isfinite(lam) and lam > 0) for lam in lams):
        raise InvalidInputError(f"regularization_path: lams must be finite numbers > 0, got {lams!r}")
    if any(b >= a for a, b in itertools.pairwise(lams)):
        raise InvalidInputError(f"regularization_path: lams must be strictly decreasing, got {lams!r}")
    if not (isinstance(eps, (int, float)) and 0.0 < eps < 1.0):
        raise InvalidInputError(f"regularization_path: eps must be a number in (0, 1), got {eps!r}")
    allowed = {"line_search", "averaging", "sampling", "cache_size", "cache_factor", "cache_nu", "steps"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidInputError(f"regularization_path: unknown option(s) {', '.join(unknown)}; it passes "
                                f"{', '.join(sorted(allowed))} to bcfw")
    # the solver's own checks, with its messages
    check_values("regularization_path", {key: bcfw.options[key] for key in sorted(allowed)},
                 {key: options.get(key, bcfw.options[key].default) for key in allowed})
    check_values("regularization_path", {key: bcfw.options[key] for key in ("max_passes", "eval_every")},
                 {"max_passes": max_passes, "eval_every": eval_every})
    bcfw_options = BCFWOptions(**options)  # mini-batches and the fused pass keep their defaults
    bcfw_options.gap_options()  # refuses the combinations that cannot work, before any work
    rng = make_rng(random_state)
    # one generator for the whole path; no checkpoints
    run_options = RunOptions(max_passes=max_passes, eval_every=eval_every, random_state=rng)
    points: list[PathPoint] = []
    warm: tuple[BlockState, Any] | None = None
    previous_lam = None
    for lam in lams:
        sub = problem.with_lam(lam)
        if warm is not None:
            blocks, gap = warm
            blocks.rescale_restart(previous_lam / lam)  # w = A alpha / (lam n): alpha kept, lambda changed
            if gap is not None:  # counts per lambda
                gap.restart()
        method = BCFWMethod(sub, bcfw_options, run_options, SerialExecutor(sub), initial=warm)
        # the shared run loop, stopped at a certified relative gap: gap <= eps * primal
        result = run(sub, method, rel_tol=eps)
        last = result.trace[-1]
        points.append(PathPoint(lam=lam, w=result.w, primal=last["primal"], dual=last["dual"],
                                gap=last["gap"], passes=last["passes"], oracle_calls=int(last["oracle_calls"]),
                                cache_hits=int(last.get("cache_hits", 0)), seconds=last["time"],
                                reached=last["gap"] <= eps * last["primal"],
                                validation=None if validate is None else float(validate(result.w))))
        warm, previous_lam = (result.info["state"], result.info.get("gap")), lam
    return points


__all__ = ["PathPoint", "regularization_path"]
