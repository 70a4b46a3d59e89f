"""Shared pieces of the smoothed-oracle solvers: counters, snapshots, smoothness estimates.

Oracle counting (Pillutla et al., §7): the x-axis of the paper counts calls to the (smooth)
inference oracle made by the stochastic steps; full-gradient passes are excluded and reported
separately. An SVRG step is counted as **two** calls (at ``w`` and at the snapshot ``w~``), as in
the paper, even though structopt caches the snapshot's per-example statistics (``diff`` of
:meth:`SSVMProblem.smooth_stats`) so that ``grad f_i(w~)`` costs no oracle call; the calls
actually made are in ``oracle_calls_made``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.structures.base import Potentials, add


@dataclass
class Counters:
    """Work done so far by a smoothed-oracle solver."""

    steps: int = 0              # stochastic steps
    oracle_calls: int = 0       # as the paper counts them (2 per SVRG step, 1 per SGD step)
    oracle_calls_made: int = 0  # smooth/max oracle calls actually made by the steps
    full_grad_passes: int = 0   # batch passes over all examples (snapshots), not in oracle_calls

    def record(self, n: int) -> dict[str, float]:
        out = asdict(self)
        out.pop("steps")
        return {"passes": self.oracle_calls / n, **out}


def check_kind(kind: str, k: int) -> None:
    if kind not in ("topk", "entropy"):
        raise InvalidInputError(f"unknown smoothing kind {kind!r}; use 'topk' or 'entropy'")
    if kind == "topk" and int(k) < 1:
        raise InvalidInputError(f"top-K smoothing needs k >= 1, got {k}")


def snapshot(problem: SSVMProblem, w: np.ndarray, mu: float, kind: str, k: int
             ) -> tuple[list[Potentials], np.ndarray, float]:
    """One batch pass at ``w``: per-example gradient statistics, the mean gradient (dense) and the
    mean smoothed hinge."""
    diffs: list[Potentials] = []
    grad = np.zeros(problem.n_params)
    value = 0.0
    for i in range(problem.n):
        res = problem.smooth_stats(i, problem.theta(i, w), mu, kind, k)
        diffs.append(res.diff)
        problem.model.add_features(problem.X[i], res.diff, grad, 1.0 / problem.n)
        value += res.value / problem.n
    return diffs, grad, value


def subtract(a: Potentials, b: Potentials) -> Potentials:
    """Field-wise ``a - b``."""
    return add(a, b, -1.0)


def estimate_lipschitz(problem: SSVMProblem, mu: float, sample: int = 256,
                       random_state: int | np.random.Generator | None = 0) -> float:
    """Estimate the smoothness constant ``A_omega / mu`` of the smoothed hinges.

    ``A_omega`` (paper eq. 58) is ``max_i ||A^(i)||^2`` with the rows of ``A^(i)`` being
    ``Phi(x_i, y) - Phi(x_i, y_i)``. We take, over a random sample of at most ``sample``
    examples, the squared norm of the row of the loss-augmented maximiser at ``w = 0`` (the output
    with the largest loss, far from the gold one). That is the largest row norm ``R^2`` of the
    entropy case when that output is the farthest one, and a lower bound on the spectral norm of
    the l2 case; the paper tunes L on a grid instead, and so may the user (pass ``L``).
    """
    rng = np.random.default_rng(random_state)
    idx = rng.choice(problem.n, size=min(sample, problem.n), replace=False)
    zero = problem.model.zeros()
    best = 0.0
    for i in idx:
        d = problem.decode(int(i), zero)
        diff = problem.model.reduce_stats(subtract(problem.structure.stats(d.y, d.theta),
                                                   problem.gold_stats(int(i), d.theta)))
        best = max(best, problem.model.features_sqnorm(problem.X[int(i)], diff))
    if best <= 0.0:  # every sampled example has a single output: any positive scale works
        best = 1.0
    return best / mu


def stats_nbytes(stats: list[Potentials]) -> int:
    """Bytes held by a list of cached statistics."""
    return int(sum(np.asarray(f).nbytes for s in stats for f in s))
