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

from structopt.archive import state_type
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fused import select
from structopt.potentials import Potentials, add
from structopt.problem import SSVMProblem


@state_type
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


GUARD_RISE = 0.01  # relative rise of the primal over an epoch that the SVRG-type guards reject
REGROWTH = 2.0     # an accepted epoch lengthens a step the guard shortened by this factor (up to its start)


@state_type
@dataclass
class GuardCount:
    """Epochs (or evaluations) the step guard judged, and how many it rejected."""

    epochs: int = 0
    rejected_epochs: int = 0

    def count(self, rejected: bool) -> None:
        self.epochs += 1
        self.rejected_epochs += int(rejected)

    def info(self) -> dict[str, int]:
        """``{"epochs", "rejected_epochs"}`` for ``Result.info`` (all rejected: the run never left ``w0``)."""
        return asdict(self)


def regrown_step(gamma: float, gamma_max: float) -> float:
    """The step after an accepted epoch: ``REGROWTH`` times longer, at most ``gamma_max`` (the step
    before any rejection), so that one rejection costs a few epochs, not the rest of the run."""
    return min(gamma_max, REGROWTH * gamma)


MU_SCHEDULES = ("decreasing", "constant")

#: fewest stochastic steps in an SVRG epoch of the decreasing schedules: an epoch is ``max(n, EPOCH_MIN)`` steps
EPOCH_MIN = 50


def epoch_steps(n: int) -> int:
    """Inner steps of an SVRG epoch: one pass, ``n``, but at least ``EPOCH_MIN``.

    Johnson & Zhang (2013) take ``m`` of the order of ``n`` (``2n``); what ``m`` must exceed is the
    condition number, not ``n``. On a tiny problem an epoch of ``n`` steps is too short to be an
    epoch: with ``n = 2`` its average is of two iterates (no averaging against the noise of the
    sampled steps), and the snapshot and the guard's verdict come every two steps (a 1% rise
    between two such averages is noise, not divergence). Counting stays per oracle call.
    """
    return max(int(n), EPOCH_MIN)


def decreasing_schedule(mu: float, gamma: float, lam: float, n: int, t: int) -> tuple[float, float]:
    """``(mu_t, gamma_t)`` of the epoch that starts after ``t`` accepted inner steps of the decreasing schedule.

    ``mu_t = mu / (1 + t / n)`` (``mu / (1 + e)`` at epoch e of n steps) tends to 0, so the smoothed
    objective tends to the SSVM objective (its excess is at most ``mu_t D``, D = 1/2 for top-K
    smoothing); ``gamma_t = min(gamma, 1 / (lam (n + t)))`` never exceeds the Pegasos step
    ``1 / (lam t')`` at the epoch's first inner step ``t' = n + t``, the step of a subgradient method
    on the lam-strongly convex limit (the smoothed hinges' curvature ``L mu / mu_t`` grows without
    bound, so ``1 / L_t`` would stall). Keyed to steps, not epochs, so that the schedule over the
    passes does not depend on the epoch length (:func:`epoch_steps`).
    """
    mu_t = mu / (1.0 + t / n)
    if lam > 0.0:
        gamma = min(gamma, 1.0 / (lam * (n + t)))
    return mu_t, gamma


def rose(before: float, after: float) -> bool:
    """True when the primal went from ``before`` to ``after`` by more than ``GUARD_RISE`` of it
    (or became non-finite): the step that did it was too long."""
    return not np.isfinite(after) or after > before + GUARD_RISE * abs(before)


def backoff(before: float, after: float) -> float:
    """How many times shorter the next step is after a rejected one: at least 4, and
    ``sqrt(after / before)`` when the rise was larger (on a quadratic, a step ``c`` times too long
    multiplies the error by about ``c`` and the objective by ``c^2``), at most ``1e4``."""
    if not np.isfinite(after) or before <= 0.0:
        return 1e4
    return float(min(max(4.0, np.sqrt(after / before)), 1e4))


def larger_smoothness(problem: SSVMProblem, L: float, before: float, after: float, w_far: np.ndarray,
                      mu: float, k: int) -> float:
    """The smoothness estimate after a rejected step (primal ``before`` -> ``after``, landing at
    ``w_far``): at least ``backoff(before, after) * L`` and the local curvature at ``w_far``."""
    return max(backoff(before, after) * L, estimate_lipschitz(problem, mu, k=k, w=w_far))


def shortened_step(problem: SSVMProblem, gamma: float, before: float, after: float, w_far: np.ndarray,
                   mu: float, k: int) -> float:
    """The step after a rejected one: :func:`larger_smoothness` applied to the ``L`` of ``gamma =
    1/(L + lam)``, i.e. at most ``gamma / backoff`` and ``1/(L' + lam)``."""
    L = 1.0 / gamma - problem.lam
    return 1.0 / (larger_smoothness(problem, max(L, 0.0), before, after, w_far, mu, k) + problem.lam)


def check_kind(kind: str, k: int) -> None:
    if kind not in ("topk", "entropy"):
        raise InvalidInputError(f"unknown smoothing kind {kind!r}; use 'topk' or 'entropy'")
    if kind == "topk" and int(k) < 1:
        raise InvalidInputError(f"top-K smoothing needs k >= 1, got {k}")


def check_iterate(iterate: str) -> None:
    if iterate not in ("average", "last"):
        raise InvalidInputError(f"iterate must be 'average' or 'last', got {iterate!r}")


#: fused steps per numba call: Python (and so Ctrl-C) gets control back between calls
FUSED_CHUNK = 512


def smooth_view(problem: SSVMProblem, fused: bool | None, kind: str):
    """The fused view whose smoothed passes serve ``problem`` with smoothing ``kind``, or None (generic path).

    ``fused`` as the solvers' option: None uses the fused passes when they serve, False never, True
    demands them (:class:`NotSupportedError` naming the reason otherwise).
    """
    view = select(problem, fused)
    reason = None if view is None else view.smooth_refusal(kind)
    if reason is not None and fused:
        raise NotSupportedError(f"fused=True: this problem has no fused {kind} smoothed passes: {reason}")
    return view if reason is None else None


def fused_chunks(order: np.ndarray):
    """``order`` in pieces of at most ``FUSED_CHUNK`` steps."""
    for start in range(0, len(order), FUSED_CHUNK):
        yield order[start:start + FUSED_CHUNK]


def sgd_pass(problem: SSVMProblem, w: np.ndarray, *, gamma: float, mu: float, kind: str, k: int,
             rng: np.random.Generator, counters: Counters, n_steps: int | None = None, view=None) -> np.ndarray:
    """One pass of constant-step SGD on the smoothed objective (n uniform draws); the last iterate.

    Used to initialise SVRG-type methods: far from the optimum the snapshot correction
    ``grad f_i(w~) - g~`` of SVRG is as noisy as the gradient itself (the smoothed hinges are
    nearly piecewise linear at the scale of an epoch), so an SVRG epoch costs two oracle calls per
    step for the progress of one SGD step. Johnson & Zhang (2013) likewise start SVRG from SGD.
    Counted as one oracle call per step. ``n_steps`` (default n) shortens the pass to what is left
    of a budget; the draws are then a prefix of the full pass's. ``view``: the fused view
    (:func:`smooth_view`) that runs the steps, or None.
    """
    from structopt.solvers._lazy import LazyIterate

    n_steps = problem.n if n_steps is None else int(n_steps)
    it = LazyIterate(problem, w)
    rho = 1.0 - gamma * problem.lam
    order = rng.integers(0, problem.n, size=n_steps)
    if view is not None:
        for chunk in fused_chunks(order):
            it.fused_steps(view, chunk, rho, gamma, 0.0, mu, kind, k)
    for i in order if view is None else ():
        i = int(i)
        it.step(rho, gamma, i, problem.smooth_stats(i, it.potentials(i), mu, kind, k).diff,
                nonnegative=problem.nonnegative_indices)
    counters.steps += n_steps
    counters.oracle_calls += n_steps
    counters.oracle_calls_made += n_steps
    return it.dense()


def subtract(a: Potentials, b: Potentials) -> Potentials:
    """Field-wise ``a - b``."""
    return add(a, b, -1.0)


def lipschitz_bound(problem: SSVMProblem, mu: float, sample: int = 256,
                    random_state: int | np.random.Generator | None = 0) -> float:
    """A conservative smoothness scale ``R^2 / mu`` of the smoothed hinges.

    ``R^2`` is, over a random sample of at most ``sample`` examples, the squared norm of the row
    ``Phi(x_i, y^) - Phi(x_i, y_i)`` of the loss-augmented maximiser at ``w = 0`` (the output with
    the largest loss, far from the gold one): the largest row norm of the entropy case (eq. 58)
    when that output is the farthest one. It bounds the curvature met anywhere, but on long
    sequences it is orders of magnitude above the curvature the iterates actually see (e.g.
    ~22,000 at mu = 1 on CoNLL NER against ~50-500 locally), so steps ``1/L`` from it crawl.
    """
    rng = np.random.default_rng(random_state)
    idx = rng.choice(problem.n, size=min(sample, problem.n), replace=False)
    zero = problem.zeros()
    best = 0.0
    for i in idx:
        d = problem.decode(int(i), zero)
        diff = problem.compact_diff(int(i), d.y, d.theta)
        best = max(best, problem.adjoint_sqnorm(int(i), diff))
    if best <= 0.0:  # every sampled example has a single output: any positive scale works
        best = 1.0
    return best / mu


def local_curvature(problem: SSVMProblem, i: int, w: np.ndarray, mu: float, k: int = 5) -> float:
    """Curvature of the top-K l2-smoothed hinge of example i around ``w``.

    On a region where the top-K outputs and the support ``S`` of the projection ``u*`` do not
    change, the smoothed hinge is ``h(A_S w + b_S)`` with Hessian ``A_S^T (I - 11^T/|S|) A_S / mu``
    (the Jacobian of the simplex projection): only the **centred** rows
    ``Phi(x_i, y_j) - mean_l Phi(x_i, y_l)`` matter, the gold row cancels. We return the largest
    eigenvalue over all K candidates (an upper bound for every support ``S`` within them), via the
    squared distances ``||Phi(x, y_j) - Phi(x, y_l)||^2`` and double centring (no weight-sized
    vectors). The K best outputs of a chain differ in a few positions, so this is the per-token
    feature scale rather than the whole-sequence ``R^2`` of :func:`lipschitz_bound`.
    """
    theta = problem.theta(i, w)
    outputs, scores = problem.augmented_topk(i, theta, k)
    outputs = [y for y, s in zip(outputs, scores, strict=True) if np.isfinite(s)]
    m = len(outputs)
    if m < 2:
        return 0.0
    stats = [problem.stats(y, theta) for y in outputs]
    dist = np.zeros((m, m))
    for a in range(m):
        for b in range(a + 1, m):
            diff = problem.reduce_stats(subtract(stats[a], stats[b]))
            dist[a, b] = dist[b, a] = problem.adjoint_sqnorm(i, diff)
    j = np.eye(m) - 1.0 / m
    gram = -0.5 * j @ dist @ j  # Gram matrix of the centred rows
    return float(np.linalg.eigvalsh(gram)[-1]) / mu


def estimate_lipschitz(problem: SSVMProblem, mu: float, sample: int = 64, k: int = 5,
                       w: np.ndarray | None = None, method: str = "local",
                       random_state: int | np.random.Generator | None = 0) -> float:
    """Smoothness constant ``L`` of the smoothed hinges used for the default learning rates.

    Parameters
    ----------
    problem : SSVMProblem
    mu : float
        Smoothing parameter.
    sample : int
        Examples examined (random, without replacement).
    k : int
        K of the top-K candidates (``method="local"``); at least 2 is used.
    w : ndarray, optional
        Point where the local curvature is measured (default zeros, the usual start).
    method : {"local", "bound"}
        ``"local"`` (default): the largest :func:`local_curvature` over the sample at ``w`` -- the
        Lipschitz constant of the gradients on the regions the top-K candidates describe, tight
        where the iterates are but not a global bound (the curvature grows a few-fold as ``w``
        trains on CoNLL NER; SVRG tolerates this, and the paper tunes L on a grid anyway).
        ``"bound"``: :func:`lipschitz_bound`, conservative, for steps that must be safe
        (convergence tests, the ``"theory"`` schedule). Where the structure has no top-K oracle,
        ``"local"`` falls back to ``"bound"``, which needs only the max oracle (so SGD's and the
        non-convex SGD's default steps, and the guards' shortened steps, work on any structure).
    random_state
        Seed of the sample.
    """
    if method == "bound":
        return lipschitz_bound(problem, mu, sample=max(sample, 256), random_state=random_state)
    if method != "local":
        raise InvalidInputError(f"method must be 'local' or 'bound', got {method!r}")
    rng = np.random.default_rng(random_state)
    idx = rng.choice(problem.n, size=min(sample, problem.n), replace=False)
    if not problem.has_topk:  # the max-oracle bound (safe, if slow), not a refusal
        return lipschitz_bound(problem, mu, sample=max(sample, 256), random_state=random_state)
    w = problem.zeros() if w is None else w
    best = max(local_curvature(problem, int(i), w, mu, max(int(k), 2)) for i in idx)
    if best <= 0.0:  # no example has two outputs: any positive scale works
        best = 1.0 / mu
    return best


def stats_nbytes(stats: list[Potentials]) -> int:
    """Bytes held by a list of cached statistics."""
    return int(sum(np.asarray(f).nbytes for s in stats for f in s))
