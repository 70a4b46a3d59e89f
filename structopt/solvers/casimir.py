"""Casimir-SVRG: smoothing + Catalyst + SVRG (Pillutla et al., Algo 4; spec ``casimir.md``).

Outer iteration k minimises the smoothed, prox-regularised subproblem (25)

    F_k(w) = (1/n) sum_i f_{i,mu_k}(w) + (lam/2)||w||^2 + (kappa_k/2)||w - z_{k-1}||^2

approximately with one SVRG epoch (budget n steps, ``max(n, 50)`` under the decreasing schedule;
:func:`~structopt.solvers.svrg.svrg_epoch`,
snapshot at the warm start), then extrapolates ``z_k = w_k + beta_k (w_k - w_{k-1})`` with
``alpha_k`` the root of (27) and ``beta_k`` of (29).

Schedules
---------
``"decreasing"`` (default): ``kappa = lam``, ``alpha_0 = sqrt(1/2)``, inner solves of ``m = max(n,
EPOCH_MIN)`` steps (:func:`~structopt.solvers._smooth.epoch_steps`), and the outer iteration after
``t`` accepted inner steps smooths with ``mu_t = mu / (1 + t/n)`` and steps at most the Pegasos step
``1 / (lam (n + t))`` of the lam-strongly convex SSVM objective
(:func:`~structopt.solvers._smooth.decreasing_schedule`; ``mu / k`` and ``1 / (lam n k)`` at outer
iteration k when ``m = n``). ``mu_k -> 0`` (the paper's ``mu_k -> 0`` regime of Cor. 20, at
a rate the step can follow), so the run converges to the SSVM optimum itself; the constant
smoothing of ``"const"`` converges to the optimum of the smoothed objective (up to ``mu D``
above it: +74% on a small chain at the old default ``mu = 1``), and the geometric decay of
``"adapt"`` outruns a constant step.

``"const"`` (Prop. 29 / Casimir-SVRG-const): ``mu_k = mu``; ``kappa = L/n - lam`` if
``L/n > 4 lam`` else ``kappa = lam`` (Prop. 29 with the smoothness ``L`` in place of ``A/mu``,
typo "kappa_k = k" read as kappa); learning rate ``1/(L + lam + kappa)``; ``alpha_0 = sqrt(q)``,
``q = lam / (lam + kappa)``.

``"adapt"`` (Prop. 30 / Cor. 18, Casimir-SVRG-adapt): ``kappa = lam`` (so ``q = 1/2``), ``alpha_0 =
sqrt(q)``, ``mu_k = mu * (1 - sqrt(q)/2)^(k/2)``; a constant learning rate (the paper tunes it),
by default ``1/(L + lam + kappa)`` with L the smoothness at the initial ``mu``.

``L`` is given, or estimated by :func:`~structopt.solvers._smooth.estimate_lipschitz`: the
curvature of the top-K smoothed hinges at the start point (largest eigenvalue of the centred
Gram matrix of the K best outputs' features, over a sample, divided by ``mu``). It replaces the
former ``R^2/mu`` bound (row norm of the far-from-gold output), which on CoNLL NER was ~400x the
curvature the iterates see; the paper tunes L on a grid.

Oracle counting: 2 calls per SVRG step as in the paper, full-gradient passes (one per outer
iteration) reported apart; see :mod:`structopt.solvers._smooth`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from structopt.archive import state_type
from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.solvers._smooth import (
    REGROWTH,
    Counters,
    GuardCount,
    backoff,
    decreasing_schedule,
    epoch_steps,
    estimate_lipschitz,
    larger_smoothness,
    rose,
    sgd_pass,
    smooth_view,
)
from structopt.solvers._smooth_options import Flag, Kind, OptionalPositive, TopK
from structopt.solvers.base import (
    Method,
    Monitor,
    Options,
    Result,
    RunOptions,
    initial_weights,
    make_rng,
    non_negative,
    one_of,
    open_unit,
    optional,
    positive,
    positive_int,
    refuse_tol,
    run,
    smoothing_needs,
    solver,
)
from structopt.solvers.bcfw import FUSED
from structopt.solvers.svrg import svrg_epoch

WARM_STARTS = ("prox-center", "extrapolation", "prev-iterate")
# (warm_start, iterate, sgd_init) when not given, per schedule: the best measured on CoNLL-2002 NER
# (benchmarks/conll_casimir_results.md)
SCHEDULE_DEFAULTS = {"const": ("prev-iterate", "average", True), "adapt": ("extrapolation", "average", False),
                     "decreasing": ("prev-iterate", "average", True)}
SCHEDULES = ("decreasing", "const", "adapt")


def catalyst_alpha(alpha_prev: float, kappa: float, kappa_next: float, lam: float) -> float:
    """The root ``alpha_k >= 0`` of (27).

    ``a^2 (kappa_{k+1} + lam) = (1 - a) alpha_{k-1}^2 (kappa_k + lam) + a lam``.
    """
    c = alpha_prev ** 2 * (kappa + lam)
    r1 = kappa_next + lam
    return (-(c - lam) + math.sqrt((c - lam) ** 2 + 4.0 * r1 * c)) / (2.0 * r1)


def catalyst_beta(alpha_prev: float, alpha: float, kappa: float, kappa_next: float, lam: float) -> float:
    """Extrapolation weight (29)."""
    r = kappa + lam
    return alpha_prev * (1.0 - alpha_prev) * r / (alpha_prev ** 2 * r + alpha * (kappa_next + lam))


def const_kappa(L: float, lam: float, n: int) -> float:
    """Prop. 29's prox weight with the smoothness L in place of A/mu."""
    return L / n - lam if L / n > 4.0 * lam else lam


def catalyst_start(L: float, lam: float, n: int, schedule: str, kappa: float | None, alpha0: float | None
                   ) -> tuple[float, float]:
    """``(kappa, alpha_0)``: the given values, else the defaults that follow from L."""
    if kappa is None:
        kappa = const_kappa(L, lam, n) if schedule == "const" else lam
    kappa = float(kappa)
    alpha = math.sqrt(lam / (lam + kappa)) if alpha0 is None else float(alpha0)
    if not 0.0 < alpha < 1.0:
        raise InvalidInputError(f"casimir_svrg: alpha0 must lie in (0, 1), got {alpha}")
    return kappa, alpha


def adapt_mu(mu: float, q: float, k: int) -> float:
    """Cor. 18's smoothing ``mu_k = mu (1 - sqrt(q)/2)^(k/2)``."""
    return mu * (1.0 - math.sqrt(q) / 2.0) ** (k / 2.0)


def _learning_rate_option(name: str, value) -> None:
    """None, "theory" or a finite number > 0."""
    if value is not None and value != "theory":
        positive(name, value)


@dataclass(frozen=True)
class CasimirOptions(Options):
    """The options of :func:`casimir_svrg` beyond the common ones.

    Parameters
    ----------
    schedule : {"decreasing", "const", "adapt"}
        Parameter schedule (module docstring); ``"decreasing"`` (default) converges to the SSVM
        optimum, ``"const"`` to the optimum of the ``mu``-smoothed objective.
    mu : float, optional
        Smoothing (const) or initial smoothing (decreasing, adapt); default 1 (const) and 2
        (decreasing, adapt), the paper's NER settings.
    kind : {"topk", "entropy"}
        l2 smoothing over the top-K outputs (default) or entropy smoothing.
    k : int
        K of top-K smoothing (default 5).
    L : float, optional
        Smoothness of the smoothed hinges at ``mu``; estimated when omitted.
    kappa : float, optional
        Override the schedule's prox weight (kept constant).
    learning_rate : float or "theory", optional
        Constant inner SVRG step; default ``1/(L + lam + kappa)``. ``"theory"`` follows the
        smoothness of the k-th subproblem, ``1/(L mu/mu_k + lam + kappa)`` (adapt schedule).
    mu_min : float
        Floor of the decaying smoothing (decreasing and adapt schedules; default 0, no floor).
        With the ``"theory"`` step the run then ends as accelerated SVRG on the ``mu_min``-smoothed problem.
    warm_start : {"prox-center", "extrapolation", "prev-iterate"}, optional
        Start of the inner solver: ``z_{k-1}``; ``w_{k-1} + kappa/(kappa+lam) (z_{k-1} - z_{k-2})``;
        ``w_{k-1}``. Default: ``SCHEDULE_DEFAULTS`` (prev-iterate for const and decreasing,
        extrapolation for adapt, as in the paper's released NER scripts).
    alpha0 : float, optional
        Default ``sqrt(lam / (lam + kappa))``.
    inner_steps : int, optional
        Inner SVRG steps per outer iteration: default n (one pass), and ``max(n, 50)`` with the
        decreasing schedule (:func:`~structopt.solvers._smooth.epoch_steps`).
    iterate : {"average", "last"}, optional
        ``w_k`` is the mean of the inner SVRG iterates (as in the paper's released code) or the
        last one. Default: average (``SCHEDULE_DEFAULTS``); the last iterate is lower at the
        weakest regularisation only and unstable at the others.
    sgd_init : bool, optional
        Replace ``w_0`` by one pass of SGD at the step ``1/(L + lam)`` (one oracle call per step),
        see :func:`~structopt.solvers._smooth.sgd_pass`. Default: True for const and decreasing,
        False for adapt.
        These defaults are what measured best on CoNLL-2002 NER
        (``benchmarks/conll_casimir_results.md``).
    guard : bool
        Reject an outer iteration after which the primal rose by more than 1%
        (``_smooth.GUARD_RISE``): the run goes back to ``w_{k-1}`` with ``L`` at least four times
        larger (``_smooth.backoff``: more after a large rise), or the local curvature measured at
        the rejected point if that is larger, with the prox weight and extrapolation that follow
        from L, and restarts the acceleration there. The default L is a local curvature estimate
        at ``w0``, which can be far too small where the curvature grows as the weights train
        (grids, boxes). Rejected iterations' oracle calls are counted, their records say
        ``rejected`` and ``info["rejected_epochs"]`` / ``info["epochs"]`` count them (all
        rejected: ``w`` is still the start point). ``L`` is not lowered again: a rejection
        restarts the acceleration at the larger ``L``, and the decreasing schedule's step cap
        soon falls below ``1/L`` anyway.
    fused : bool, optional
        Run the snapshots and inner steps in the fused numba passes when the problem has them for
        this smoothing (chain models; None, default), demand them (True) or use the generic path
        (False). Same iterates (up to the order of floating-point sums).
    """

    schedule: Annotated[str, one_of(*SCHEDULES)] = "decreasing"
    mu: OptionalPositive = None
    kind: Kind = "topk"
    k: TopK = 5
    L: OptionalPositive = None
    kappa: OptionalPositive = None
    learning_rate: Annotated[float | str | None, _learning_rate_option] = None
    mu_min: Annotated[float, non_negative] = 0.0
    warm_start: Annotated[str | None, optional(one_of(*WARM_STARTS))] = None
    alpha0: Annotated[float | None, optional(open_unit)] = None
    inner_steps: Annotated[int | None, optional(positive_int)] = None
    iterate: Annotated[str | None, optional(one_of("average", "last"))] = None
    sgd_init: Annotated[bool | None, optional(one_of(True, False))] = None
    guard: Flag = True
    fused: FUSED = None


@solver("casimir_svrg", CasimirOptions, without=("eval_every",), needs=smoothing_needs(), aliases=("casimir",))
def casimir_svrg(problem: SSVMProblem, options: CasimirOptions, run_options: RunOptions, executor) -> Result:
    """Casimir-SVRG (Algo 4) with the constant (Prop. 29) or adaptive (Prop. 30) schedule.

    Parameters
    ----------
    problem : SSVMProblem
        Any loss with a top-K (or, for ``kind="entropy"``, marginal) oracle; constrained weights
        get projected steps.
    max_passes : float
        Budget in oracle calls / n (paper counting, 2 per inner step, 1 per step of the SGD start);
        the last inner solve (or the SGD start) is shortened to meet it, so a run ends at most one
        call past ``ceil(max_passes * n)`` (half of its last step). Snapshot passes are not
        counted in ``passes`` (see ``full_grad_passes``).
    tol : float
        Must be 0: the method has no duality gap.
    checkpoint, resume : path, optional
        Save the state after every outer iteration / continue from such a state.
        Resuming restores the iterates, counters, random state and the step/schedule constants;
        pass the other options (smoothing, schedule, warm start, max_passes) as in the first run.
    executor, n_workers
        Where the snapshots and primal evaluations run (:mod:`structopt.parallel`).

    Returns
    -------
    Result
        ``w = w_k``. Trace records: ``passes``, ``oracle_calls`` (paper counting),
        ``oracle_calls_made``, ``full_grad_passes``, ``time``, ``primal`` (non-smooth F(w_k)),
        ``outer_iter``, ``mu``, ``kappa``, ``alpha``, ``beta``, ``learning_rate``. ``info``:
        ``stop_reason``, ``L``, ``kappa``, ``memory``, ``schedule``, ``warm_start``, ``epochs``
        (outer iterations run, and the SGD start if any), ``rejected_epochs`` (the SGD start included).
    """
    refuse_tol("casimir_svrg", run_options.tol)
    return run(problem, _Casimir(problem, options, run_options, executor))


@state_type
@dataclass
class CasimirState:
    """Outer iteration ``k``: iterate ``w_k``, prox centres ``z_k, z_{k-1}``, the Catalyst scalars, the
    smoothness ``L`` (raised by the guard), the step option after backoffs, the last accepted primal and the
    guard's counts."""

    rng: np.random.Generator
    counters: Counters
    k: int
    w: np.ndarray
    z: np.ndarray
    z_prev: np.ndarray
    alpha: float
    L: float
    kappa: float
    memory: dict
    primal: float
    learning_rate: float | str | None
    guard: GuardCount
    L_start: float  # L after init (a rejected SGD start's raise included: evidence about the curvature at w0);
    # an accepted outer iteration lowers L raised by later rejections back towards it


class _Casimir(Method):
    name = "casimir_svrg"

    def __init__(self, problem: SSVMProblem, options: CasimirOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        schedule = self.schedule = options.schedule
        # the defaults that follow from the schedule
        self.mu = (1.0 if schedule == "const" else 2.0) if options.mu is None else float(options.mu)
        warm_start, iterate, sgd_init = SCHEDULE_DEFAULTS[schedule]
        self.warm_start = warm_start if options.warm_start is None else options.warm_start
        self.iterate = iterate if options.iterate is None else options.iterate
        self.sgd_init = sgd_init if options.sgd_init is None else options.sgd_init
        self.kind, self.k, self.mu_min = options.kind, options.k, options.mu_min
        self.view = smooth_view(problem, options.fused, options.kind)
        self.label = f"casimir-{schedule}"

    def start(self, L: float) -> tuple[float, float]:
        """``(kappa, alpha_0)`` that follow from L (or the given kappa / alpha0)."""
        options = self.options
        return catalyst_start(L, self.problem.lam, self.problem.n, self.schedule, options.kappa, options.alpha0)

    def init(self, monitor: Monitor) -> CasimirState:
        problem, n, lam, executor = self.problem, self.problem.n, self.problem.lam, self.executor
        rng = make_rng(self.run_options.random_state)
        w = initial_weights(problem, self.run_options.w0)
        L = estimate_lipschitz(problem, self.mu, k=self.k, w=w) if self.options.L is None else float(self.options.L)
        kappa, alpha = self.start(L)
        counters = Counters()
        monitor.pause()
        primal = executor.primal(w)
        monitor.record(w, primal=primal, outer_iter=0, **counters.record(n))
        guard = GuardCount()
        if self.sgd_init:  # one call per step, shortened to a budget below one pass
            monitor.restart()
            gamma = 1.0 / (L + lam)
            if self.schedule == "decreasing":  # the first outer iteration's cap
                gamma = decreasing_schedule(self.mu, gamma, lam, n, 0)[1]
            w_sgd = sgd_pass(problem, w, gamma=gamma, mu=self.mu, kind=self.kind, k=self.k, rng=rng,
                             counters=counters, n_steps=min(n, monitor.step_budget(n)), view=self.view)
            monitor.pause()
            primal_sgd = executor.primal(w_sgd)
            rejected = self.options.guard and rose(primal, primal_sgd)
            guard.count(rejected)  # the SGD start is judged like an epoch (as svrg counts it)
            if rejected:  # keep w0, take the hint about L (of the step taken)
                L = larger_smoothness(problem, max(L, 1.0 / gamma - lam), primal, primal_sgd, w_sgd, self.mu, self.k)
                kappa, alpha = self.start(L)
                monitor.record(w, primal=primal, outer_iter=0, rejected=primal_sgd, **counters.record(n))
            else:
                w, primal = w_sgd, primal_sgd
                monitor.record(w, primal=primal, outer_iter=0, **counters.record(n))
        return CasimirState(rng, counters, 0, w, w.copy(), w.copy(), alpha, L, kappa, {}, primal,
                            self.options.learning_rate, guard, L)

    def advance(self, state: CasimirState, monitor: Monitor) -> None:
        problem, n, lam, kappa = self.problem, self.problem.n, self.problem.lam, state.kappa
        state.k += 1
        q = lam / (lam + kappa)
        mu_k = self.mu if self.schedule == "const" else max(adapt_mu(self.mu, q, state.k), self.mu_min)
        # the step's smoothness is state.L times this factor (theory: L is kept at smoothing mu, the step is at mu_k)
        self.L_factor = self.mu / max(mu_k, self.mu_min) if state.learning_rate == "theory" else 1.0
        if state.learning_rate == "theory":
            gamma = 1.0 / (state.L * self.L_factor + lam + kappa)
        else:
            gamma = 1.0 / (state.L + lam + kappa) if state.learning_rate is None else float(state.learning_rate)
        m = self.options.inner_steps
        if m is None:
            m = epoch_steps(n) if self.schedule == "decreasing" else n
        if self.schedule == "decreasing":  # (the outer iterations accepted so far were m steps each)
            # the Pegasos cap of the SSVM objective (lam-strongly convex), not of the subproblem's lam + kappa: the
            # prox centre follows the iterates, so the prox term adds no curvature to the path to the optimum
            # (with lam + kappa the steps were half as long and the chains stopped at +1.1%)
            mu_k, gamma = decreasing_schedule(self.mu, gamma, lam, n, (state.k - 1) * m)
            mu_k = max(mu_k, self.mu_min)
        if self.warm_start == "prox-center":
            start = state.z
        elif self.warm_start == "prev-iterate":
            start = state.w
        else:
            start = state.w + (kappa / (kappa + lam)) * (state.z - state.z_prev)
        budget = monitor.step_budget(n)  # in paper-counted oracle calls
        steps = min(m, -(-(budget - state.counters.oracle_calls) // 2))
        self.w_new, state.memory = svrg_epoch(problem, problem.project_weights(start), mu=mu_k, kind=self.kind,
                                              k=self.k, gamma=gamma, rng=state.rng, counters=state.counters,
                                              n_steps=steps, kappa=kappa, z=state.z, iterate=self.iterate,
                                              executor=self.executor, view=self.view)
        self.mu_k, self.gamma = mu_k, gamma

    def evaluate(self, state: CasimirState) -> tuple[np.ndarray, dict]:
        lam, w_new, primal = self.problem.lam, self.w_new, state.primal
        primal_new = self.executor.primal(w_new)
        rejected = self.options.guard and rose(primal, primal_new)
        state.guard.count(rejected)
        if rejected:  # back to w with a larger L; the acceleration restarts there
            state.k -= 1
            if isinstance(state.learning_rate, float | int):
                state.learning_rate = state.learning_rate / backoff(primal, primal_new)
            # from the L of the step taken: the schedule's cap may have been below 1/(L + lam + kappa); in the
            # step's scale (times L_factor) for the curvature estimate at mu_k, back in state.L's scale after
            f = self.L_factor
            L_taken = max(state.L * f, 1.0 / self.gamma - lam - state.kappa)
            state.L = larger_smoothness(self.problem, L_taken, primal, primal_new, w_new, self.mu_k, self.k) / f
            state.kappa, state.alpha = self.start(state.L)
            state.z, state.z_prev, beta = state.w.copy(), state.w.copy(), 0.0
        else:
            kappa = state.kappa
            alpha_new = catalyst_alpha(state.alpha, kappa, kappa, lam)
            beta = catalyst_beta(state.alpha, alpha_new, kappa, kappa, lam)
            state.z_prev, state.z = state.z, w_new + beta * (w_new - state.w)
            state.w, state.alpha, state.primal = w_new, alpha_new, primal_new
            # as regrown_step: one rejection costs a few iterations (a checkpoint from before L_start: no floor known,
            # L stays where it is)
            L_lower = max(getattr(state, "L_start", state.L), state.L / REGROWTH)
            if L_lower < state.L and self.start(L_lower)[0] == state.kappa:  # (not where kappa follows L)
                state.L = L_lower
        return state.w, {"primal": state.primal, "outer_iter": state.k, "mu": self.mu_k, "kappa": state.kappa,
                         "alpha": state.alpha, "beta": beta, "learning_rate": self.gamma,
                         **state.counters.record(self.problem.n), **({"rejected": primal_new} if rejected else {})}

    def result(self, state: CasimirState, monitor: Monitor) -> Result:
        return Result(state.w, monitor.trace, {"stop_reason": monitor.stop_reason, "L": state.L, "kappa": state.kappa,
                                               "memory": state.memory, "schedule": self.schedule,
                                               "warm_start": self.warm_start, **state.guard.info()})


__all__ = ["SCHEDULES", "SCHEDULE_DEFAULTS", "WARM_STARTS", "CasimirOptions", "CasimirState", "adapt_mu",
           "casimir_svrg", "catalyst_alpha", "catalyst_beta", "const_kappa"]
