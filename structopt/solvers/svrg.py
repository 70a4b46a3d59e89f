"""SVRG on the smoothed structural SVM objective (Johnson & Zhang 2013; Pillutla et al. §6-7).

Objective of an epoch: ``(1/n) sum_i f_{i,mu}(w) + (lam/2)||w||^2 + (kappa/2)||w - z||^2`` (the
prox term is Casimir's; plain SVRG has ``kappa = 0``). An epoch takes a batch pass at the snapshot
``w~`` (its start point), then ``m`` steps on uniformly drawn examples (with replacement): ``m = n``, or
``max(n, 50)`` under the decreasing schedule (:func:`~structopt.solvers._smooth.epoch_steps`)

    w <- w - gamma (grad f_i(w) - grad f_i(w~) + g~ + lam w + kappa (w - z))

and returns the average of its iterates, which is the next snapshot. The regularisers
enter exactly; ``grad f_i(w~)`` comes from the snapshot's cached statistics (no oracle call).

Sparse features: gradients stay in statistics space (``A_i^T diff``) and the dense parts of the
step are folded into scalars (``w = a v + b c``, :class:`~structopt.solvers._lazy.LazyIterate`),
so a step touches only the weight rows of the features present in ``x_i``. Oracle counting: see
:mod:`structopt.solvers._smooth` (2 calls per step as in the paper; full-gradient passes apart).

Fused passes: on problems a kernel family serves for the smoothing kind (chain models,
:func:`~structopt.solvers._smooth.smooth_view`), the snapshot and the lazy steps run in numba
(:mod:`structopt.fused._chain_smooth`), in chunks of ``_smooth.FUSED_CHUNK`` steps so that Ctrl-C is
honoured; the iterates are the generic path's (tests/test_fast_paths.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from structopt.archive import state_type
from structopt.batch import smooth_snapshot
from structopt.errors import InvalidInputError
from structopt.parallel import SerialExecutor
from structopt.potentials import flatten
from structopt.problem import SSVMProblem
from structopt.solvers._lazy import LazyIterate
from structopt.solvers._smooth import (
    MU_SCHEDULES,
    Counters,
    GuardCount,
    check_iterate,
    decreasing_schedule,
    epoch_steps,
    estimate_lipschitz,
    fused_chunks,
    regrown_step,
    rose,
    sgd_pass,
    shortened_step,
    smooth_view,
    stats_nbytes,
    subtract,
)
from structopt.solvers._smooth_options import Flag, Iterate, Kind, OptionalPositive, TopK
from structopt.solvers.base import (
    Method,
    Monitor,
    Options,
    Result,
    RunOptions,
    initial_weights,
    make_rng,
    one_of,
    refuse_tol,
    run,
    smoothing_needs,
    solver,
)
from structopt.solvers.bcfw import FUSED


def svrg_epoch(problem: SSVMProblem, w_start: np.ndarray, *, mu: float, kind: str, k: int, gamma: float,
               rng: np.random.Generator, counters: Counters, n_steps: int | None = None, kappa: float = 0.0,
               z: np.ndarray | None = None, iterate: str = "average", executor=None, view=None
               ) -> tuple[np.ndarray, dict[str, int]]:
    """One SVRG epoch from the snapshot ``w_start``; returns its averaged (or last) iterate and memory use.

    Parameters
    ----------
    problem : SSVMProblem
    w_start : ndarray
        Start point and snapshot.
    mu, kind, k
        Smoothing of the hinges (see :meth:`SSVMProblem.smooth_stats`).
    gamma : float
        Learning rate.
    rng : Generator
    counters : Counters
        Updated in place.
    n_steps : int, optional
        Inner steps (default n, one pass).
    kappa, z
        Prox weight and prox centre (Casimir's subproblem); ``kappa = 0`` for plain SVRG.
    iterate : {"average", "last"}
        Return the mean of the inner iterates (the paper's SVRG baseline and its released
        code) or the last one (Johnson & Zhang's option I).
    executor : structopt.parallel.Executor, optional
        Where the snapshot pass runs (default: here).
    view : structopt.fused.FusedProblem, optional
        The fused view (:func:`~structopt.solvers._smooth.smooth_view`) that runs the snapshot (unless
        ``executor`` runs it on workers) and the steps; None: the generic path. Same iterates.

    Returns
    -------
    w_avg : ndarray
    memory : dict
        Bytes of the snapshot statistics cache and of the dense iterate vectors.
    """
    n, lam = problem.n, problem.lam
    n_steps = n if n_steps is None else int(n_steps)
    rho = 1.0 - gamma * (lam + kappa)
    if not gamma > 0.0:
        raise InvalidInputError(f"learning rate must be > 0, got {gamma}")
    check_iterate(iterate)
    if view is not None and (executor is None or isinstance(executor, SerialExecutor)):
        diffs, gbar, _ = view.smooth_snapshot(w_start, mu, kind, k)
    elif executor is None:
        diffs, gbar, _ = smooth_snapshot(problem, w_start, mu, kind, k, problem.n)
    else:
        diffs, gbar, _ = executor.smooth_snapshot(w_start, mu, kind, k)
        if view is not None:  # workers' statistics, flat for the fused steps
            diffs = np.concatenate([flatten(d) for d in diffs])
    counters.full_grad_passes += 1
    c = gbar if (kappa == 0.0 or z is None) else gbar - kappa * z
    it = LazyIterate(problem, w_start, c)
    order = rng.integers(0, n, size=n_steps)
    if view is not None:
        for chunk in fused_chunks(order):
            it.fused_steps(view, chunk, rho, gamma, 1.0, mu, kind, k, diffs)
    for i in order if view is None else ():
        i = int(i)
        res = problem.smooth_stats(i, it.potentials(i), mu, kind, k)
        it.step(rho, gamma, i, subtract(res.diff, diffs[i]), omega=1.0, nonnegative=problem.nonnegative_indices)
    counters.steps += n_steps
    counters.oracle_calls += 2 * n_steps
    counters.oracle_calls_made += n_steps
    memory = {"snapshot_cache_bytes": diffs.nbytes if isinstance(diffs, np.ndarray) else stats_nbytes(diffs),
              "iterate_bytes": it.nbytes() + gbar.nbytes}
    # the projection only removes round-off: the iterates are feasible
    return problem.project_weights(it.average() if iterate == "average" else it.dense()), memory


@dataclass(frozen=True)
class SVRGOptions(Options):
    """The options of :func:`svrg` beyond the common ones.

    Parameters
    ----------
    mu : float, optional
        Smoothing parameter (> 0) of the first epoch; default 1 (``"decreasing"``) or 0.1
        (``"constant"``).
    mu_schedule : {"decreasing", "constant"}
        ``"decreasing"`` (default): epochs of ``max(n, 50)`` steps
        (:func:`~structopt.solvers._smooth.epoch_steps`); the epoch after ``t`` accepted SVRG steps
        (the SGD start not counted) smooths with ``mu_t = mu / (1 + t/n)`` and steps at most
        ``1 / (lam (n + t))``, the Pegasos step ``1/(lam t')`` of its first inner step ``t' = n + t``
        (:func:`~structopt.solvers._smooth.decreasing_schedule`): ``mu_t -> 0``, so the run
        converges to the SSVM optimum itself. ``"constant"``: ``mu`` throughout and epochs of
        ``n`` steps (the paper's), the run converges
        to the optimum of the ``mu``-smoothed objective (up to ``mu / 2`` above the SSVM optimum
        with top-K smoothing, ``mu log|Y|`` with entropy).
    kind : {"topk", "entropy"}
        l2 smoothing over the top-K outputs (default) or entropy smoothing.
    k : int
        K of top-K smoothing.
    learning_rate : float, optional
        Step (the ``"decreasing"`` schedule caps it per epoch); default ``1 / (L + lam)``.
    L : float, optional
        Smoothness constant of the smoothed hinges at the first ``mu``; default
        :func:`~structopt.solvers._smooth.estimate_lipschitz` (the local top-K curvature at the
        start point, largest over a sample of examples).
    iterate : {"average", "last"}
        Next snapshot: the mean of the epoch's iterates (the Casimir paper's SVRG baseline,
        default) or the last iterate (Johnson & Zhang's option I). The default follows the CoNLL
        NER measurements in ``benchmarks/conll_casimir_results.md``: the mean is stable at every
        regularisation, the last iterate lower at the weakest only.
    sgd_init : bool
        Start with one pass of SGD at the same step (one oracle call per step) before the first
        snapshot (:func:`~structopt.solvers._smooth.sgd_pass`); default True, as measured there.
    guard : bool
        Reject an epoch after which the primal rose by more than 1% (``_smooth.GUARD_RISE``) and
        run it again from its start with a shorter step (``_smooth.shortened_step``: at least 4
        times shorter than the step the epoch took, the decreasing schedule's cap included, more
        after a large rise or where the curvature at the rejected point asks for it). The default
        step comes from a local curvature estimate at ``w0``, which can be far too long where the
        curvature grows as the weights train (grids, boxes); the guard turns that divergence into
        a few repeated epochs (Weizmann horses, 2 passes: the SGD start is rejected, the second
        pass learns). Their oracle calls are counted, and their records say ``rejected``.
    fused : bool, optional
        Run the snapshots and steps in the fused numba passes when the problem has them for this
        smoothing (chain models; None, default), demand them (True) or use the generic path
        (False). Same iterates (up to the order of floating-point sums).
    """

    mu: OptionalPositive = None
    mu_schedule: Annotated[str, one_of(*MU_SCHEDULES)] = "decreasing"
    kind: Kind = "topk"
    k: TopK = 5
    learning_rate: OptionalPositive = None
    L: OptionalPositive = None
    iterate: Iterate = "average"
    sgd_init: Flag = True
    guard: Flag = True
    fused: FUSED = None


@solver("svrg", SVRGOptions, without=("eval_every",), needs=smoothing_needs())
def svrg(problem: SSVMProblem, options: SVRGOptions, run_options: RunOptions, executor) -> Result:
    """SVRG on the smoothed objective: epochs of ``max(n, 50)`` steps (``n`` with ``"constant"``), full gradient at
    the averaged iterate.

    Parameters
    ----------
    problem : SSVMProblem
        Any loss with a top-K (or, for ``kind="entropy"``, marginal) oracle; constrained weights
        get projected steps.
    max_passes : float
        Budget in oracle calls / n (paper counting: 2 per step, so ``2 m / n`` per epoch of ``m``
        steps, 2 with ``"constant"``, 100 for ``n = 2`` with ``"decreasing"``; 1 per step of the SGD pass);
        the last epoch (or the SGD pass) is shortened to meet it, so a run ends at most
        one call past ``ceil(max_passes * n)`` (half of its last step). Snapshot passes are not
        counted in ``passes`` (see ``full_grad_passes``).
    tol : float
        Must be 0: the method has no duality gap.
    executor, n_workers
        Where the snapshots and primal evaluations run (:mod:`structopt.parallel`).

    Returns
    -------
    Result
        ``w`` is the last epoch's averaged (or last) iterate. Trace records: ``passes`` (= oracle_calls / n),
        ``oracle_calls`` (paper counting), ``oracle_calls_made``, ``full_grad_passes``, ``time``,
        ``primal`` (non-smooth F of ``w``), ``epoch``, ``mu``. ``info``: ``stop_reason``,
        ``learning_rate``, ``memory``, ``epochs`` (epochs run, the SGD start included),
        ``rejected_epochs``.
    """
    refuse_tol("svrg", run_options.tol)
    return run(problem, _SVRG(problem, options, run_options, executor))


@state_type
@dataclass
class SVRGState:
    """The snapshot ``w`` (last accepted epoch's output), counters, sampler, accepted epochs, step (after the
    guard's backoffs; ``gamma_max`` the initial one), last primal, and the epochs run / rejected."""

    w: np.ndarray
    counters: Counters
    rng: np.random.Generator
    epoch: int
    gamma: float
    memory: dict
    primal: float
    gamma_max: float
    guard: GuardCount


class _SVRG(Method):
    name = "svrg"

    def __init__(self, problem: SSVMProblem, options: SVRGOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        self.view = smooth_view(problem, options.fused, options.kind)
        # mu's default follows from the schedule
        self.mu = (1.0 if options.mu_schedule == "decreasing" else 0.1) if options.mu is None else float(options.mu)
        self.mu_schedule, self.kind, self.k = options.mu_schedule, options.kind, options.k
        self.w_new: np.ndarray | None = None  # the last epoch's output, before the guard's verdict

    def init(self, monitor: Monitor) -> SVRGState:
        problem = self.problem
        rng = make_rng(self.run_options.random_state)
        w = initial_weights(problem, self.run_options.w0)
        learning_rate = self.options.learning_rate
        if learning_rate is None:
            L = estimate_lipschitz(problem, self.mu, k=self.k, w=w) if self.options.L is None else float(self.options.L)
            learning_rate = 1.0 / (L + problem.lam)
        state = SVRGState(w, Counters(), rng, 0, float(learning_rate), {}, 0.0, float(learning_rate), GuardCount())
        monitor.pause()
        state.primal = self.executor.primal(w)
        monitor.record(w, primal=state.primal, epoch=0, **state.counters.record(problem.n))
        return state

    def advance(self, state: SVRGState, monitor: Monitor) -> None:
        problem, n, counters = self.problem, self.problem.n, state.counters
        budget = monitor.step_budget(n)  # in paper-counted oracle calls
        m = epoch_steps(n) if self.mu_schedule == "decreasing" else n  # (the paper's epochs with constant mu)
        if self.options.sgd_init and state.epoch == 0:  # one call per step: shortened to the budget like an epoch
            self.mu_e, gamma = self.mu, state.gamma
            if self.mu_schedule == "decreasing":  # the first epoch's cap
                gamma = decreasing_schedule(self.mu, gamma, problem.lam, n, 0)[1]
            self.gamma_e = gamma
            self.w_new = sgd_pass(problem, state.w, gamma=gamma, mu=self.mu, kind=self.kind, k=self.k,
                                  rng=state.rng, counters=counters, n_steps=min(n, budget - counters.oracle_calls),
                                  view=self.view)
        else:  # two calls per step: an odd remainder ends one call (1/n pass) past the budget
            steps = min(m, -(-(budget - counters.oracle_calls) // 2))
            e = state.epoch - (1 if self.options.sgd_init else 0)  # SVRG epochs accepted so far (all m steps long)
            self.mu_e, gamma = self.mu, state.gamma
            if self.mu_schedule == "decreasing":
                self.mu_e, gamma = decreasing_schedule(self.mu, state.gamma, problem.lam, n, e * m)
            self.gamma_e = gamma
            self.w_new, state.memory = svrg_epoch(problem, state.w, mu=self.mu_e, kind=self.kind, k=self.k,
                                                  gamma=gamma, rng=state.rng, counters=counters,
                                                  iterate=self.options.iterate, n_steps=steps, executor=self.executor,
                                                  view=self.view)

    def evaluate(self, state: SVRGState) -> tuple[np.ndarray, dict]:
        primal_new = self.executor.primal(self.w_new)
        rejected = self.options.guard and rose(state.primal, primal_new)
        state.guard.count(rejected)
        if rejected:  # shorten the step the epoch took (the schedule's cap may have been below state.gamma)
            state.gamma = shortened_step(self.problem, self.gamma_e, state.primal, primal_new, self.w_new, self.mu_e,
                                         self.k)
        else:
            state.w, state.primal, state.epoch = self.w_new, primal_new, state.epoch + 1
            state.gamma = regrown_step(state.gamma, state.gamma_max)
        return state.w, {"primal": state.primal, "epoch": state.epoch, "mu": self.mu_e,
                         **state.counters.record(self.problem.n),
                         **({"rejected": primal_new, "learning_rate": state.gamma} if rejected else {})}

    def result(self, state: SVRGState, monitor: Monitor) -> Result:
        return Result(state.w, monitor.trace, {"stop_reason": monitor.stop_reason, "learning_rate": state.gamma,
                                               "memory": state.memory, **state.guard.info()})


__all__ = ["SVRGOptions", "SVRGState", "svrg", "svrg_epoch"]
