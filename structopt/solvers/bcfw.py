"""Block-coordinate Frank-Wolfe for structural SVMs, batch Frank-Wolfe and Pegasos SSG.

Lacoste-Julien, Jaggi, Schmidt, Pletscher (ICML 2013).

Per-example state is kept in *statistics space*: block i of the dual is summarised by the
expected (compact) statistics ``m_i = E_{alpha_i}[stats(y)]`` and its loss share ``l_i``, so that
``w_i = A_i^T (gold_i - m_i) / (lam n)``. That costs O(T S + S^2) per chain example instead of a
weight-sized vector, whatever the feature dimension (sparse hashed features included).

Every quantity of a step comes from the oracle's own products: the line-search numerator
(= the block gap) is ``<m_s - m_i, A_i w> / n - l_i + l_s`` and its denominator
``||A_i^T (m_s - m_i)||^2 / (lam n^2)``; the weighted average of the iterates is kept lazily
(``w_bar_k = w_k - 2 u_k / (k (k+1))`` with ``u_k = sum_j j(j-1)/2 (w_j - w_{j-1})``), so a step
touches only the weights its example uses.

Where one oracle call is expensive (grids, boxes, ILPs), the options ``sampling="gap"``,
``cache_size`` and ``steps="pairwise"``/``"away"`` (Osokin et al., ICML 2016) run the steps of
:mod:`structopt.solvers._gap_blocks` on the generic operators; gap sampling alone also runs on a
fused pass (its steps are BCFW's, which compute each block's gap anyway).
:mod:`structopt.solvers.reg_path` warm-starts BCFW along a decreasing grid of lambdas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from structopt.archive import state_type
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fused import select
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState, gamma_line_search, make_block_updater
from structopt.solvers._gap_blocks import FusedGapUpdater, GapBlockUpdater, GapState, load_draw_kernel
from structopt.solvers._minibatch import MiniBatchUpdater
from structopt.solvers.base import (
    Method,
    Monitor,
    Need,
    Options,
    Result,
    RunOptions,
    make_rng,
    non_negative_int,
    one_of,
    open_unit,
    optional,
    positive_int,
    refuse_tol,
    run,
    solver,
)

#: fused SSG steps per numba call: Python (and so Ctrl-C) gets control back between calls; a whole
#: pass in one call took 1.37 s on CoNLL-2000, 2,000 steps take about 0.1 s. The step counter is
#: carried from call to call, so the iterates do not depend on the chunk size.
SSG_CHUNK = 2000


def _evaluate(problem: SSVMProblem, executor, w_hat: np.ndarray, ell: float) -> tuple[np.ndarray, dict[str, float]]:
    """Feasible weights ``w = P(w_hat)`` and their primal, dual and gap from one batch oracle pass."""
    w = problem.project_weights(w_hat)
    half_sq = 0.5 * problem.lam * float(w @ w)
    primal = half_sq + executor.mean_hinge(w)
    dual = ell - half_sq
    return w, {"primal": primal, "dual": dual, "gap": primal - dual}


def _permutation_steps(state: BlockState, rng: np.random.Generator, count: int) -> np.ndarray:
    """The next ``count`` blocks when each pass visits a fresh random permutation (kept in the state)."""
    n = state.ell_i.size
    out = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:
        position = (state.k + filled) % n
        if position == 0 or state.perm is None:
            state.perm = rng.permutation(n)
        take = min(count - filled, n - position)
        out[filled:filled + take] = state.perm[position:position + take]
        filled += take
    return out


#: gap sampling with the weighted average refreshes its stored gaps by an exact pass at the current iterate
#: at the first evaluation at least this many passes after the previous refresh (with the last iterate the
#: evaluation pass does it at every evaluation). On the 300 OCR words (lambda 1, seeds 0-2) a refresh every
#: pass reaches a 1% gap in 54 passes and 32,100 oracle calls, every 10 passes in 56 and 18,300, never in
#: 56-58 and 16,800-17,400: staleness costs a few passes, a refresh every pass costs half again the calls.
REFRESH_PASSES = 10.0

#: the ``fused`` option of the solvers with a fused pass
FUSED = Annotated[bool | None, optional(one_of(True, False))]
MAX_ORACLE = (Need("max_oracle", "any options"),)


@dataclass(frozen=True)
class BCFWOptions(Options):
    """The options of :func:`bcfw` beyond the common ones.

    Parameters
    ----------
    line_search : bool
        Exact line search (default); otherwise the fixed step ``2n / (k + 2n)`` (with mini-batches
        the paper's ``2n tau / (tau k + 2n)``, clipped to 1).
    averaging : {"weighted", "none"}
        Report and return the weighted average ``w_bar`` (with the matching ``l_bar``), or the
        last iterate.
    sampling : {"perm", "uniform", "gap"}
        A fresh random permutation per pass (default: on OCR, 10 passes over seeds 0-2 end at primal
        2.736-2.739, against 2.760-2.763 drawing uniformly), blocks drawn uniformly with
        replacement as in the paper's analysis, or gap sampling (Osokin et al. 2016): unvisited
        blocks first, then chunks of distinct blocks drawn in proportion to their last exact block
        gaps mixed with uniform draws; the gaps are refreshed by the exact evaluation pass when it is
        at the current iterate (``averaging="none"``), else by a counted exact pass every
        :data:`REFRESH_PASSES` passes (:mod:`structopt.solvers._gap_blocks`). Without corner caches
        and pairwise/away steps it runs on the fused pass where the problem has one.
    batch_size : int
        Mini-batch BCFW (Wang et al. 2016) when > 1: the oracles of ``batch_size`` consecutive
        blocks of the sampling order are solved at the same weights (on the executor's workers)
        and applied together with one line search over the joint direction
        (:mod:`structopt.solvers._minibatch`). Each batch still ascends the dual, and the reported
        gap is the same certified bound.
    cache_size : int
        Past oracle answers (corners) kept per block (0, default: none). A visit first scores the
        cached corners at the current weights; the best one replaces the exact oracle when its
        block gap is at least ``max(cache_factor * g_i, cache_nu * G / n)`` (``g_i`` the block's gap
        at its last oracle call, ``G`` the sum of those gaps). The trace's ``oracle_calls`` counts
        exact calls only (refresh passes of gap sampling included), ``cache_hits`` the others.
    cache_factor : float
        ``F`` of the cache-hit rule, in (0, 1) (the paper's 0.25).
    cache_nu : float
        ``nu`` of the cache-hit rule, in (0, 1) (the paper's 0.01).
    steps : {"fw", "pairwise", "away"}
        Frank-Wolfe steps (default), or pairwise / away steps over each block's active set of cached
        corners (exact line search; needs ``line_search=True``).
    fused : bool, optional
        Use the fused numba pass when the problem has one (None, default), demand it (True) or use
        the per-example Python path (False). Corner caches and pairwise/away steps always run on the
        per-example path (``fused=True`` is refused with them): where a fused pass exists, an oracle
        call costs about as much as scoring a block's cache.
    """

    line_search: Annotated[bool, one_of(True, False)] = True
    averaging: Annotated[str, one_of("weighted", "none")] = "weighted"
    sampling: Annotated[str, one_of("perm", "uniform", "gap")] = "perm"
    batch_size: Annotated[int, positive_int] = 1
    cache_size: Annotated[int, non_negative_int] = 0
    cache_factor: Annotated[float, open_unit] = 0.25
    cache_nu: Annotated[float, open_unit] = 0.01
    steps: Annotated[str, one_of("fw", "pairwise", "away")] = "fw"
    fused: FUSED = None

    @property
    def expensive(self) -> bool:
        """Whether an option for expensive oracles is in use (gap sampling, corner caches, pairwise/away steps)."""
        return self.sampling == "gap" or self.cache_size > 0 or self.steps != "fw"

    def trajectory(self) -> dict[str, Any]:
        """Every option, less :data:`GAP_OPTIONS` for plain BCFW (so its checkpoints' fingerprints are unchanged)."""
        values = super().trajectory()
        return values if self.expensive else {key: value for key, value in values.items() if key not in GAP_OPTIONS}

    def gap_options(self) -> dict[str, Any] | None:
        """The gap-BCFW options when any is in use, else None, refusing the combinations that cannot work
        (one line naming them)."""
        if self.batch_size > 1 and self.fused:
            raise NotSupportedError("bcfw: mini-batches (batch_size > 1) decode through the generic oracles; "
                                    "fused=True cannot be honoured")
        if not self.expensive:
            return None
        if self.fused and (self.cache_size > 0 or self.steps != "fw"):
            raise NotSupportedError("bcfw: corner caches and pairwise/away steps run on the generic oracles (where "
                                    "a fused pass exists an oracle call costs about as much as scanning a cache); "
                                    "fused=True cannot be honoured")
        if self.batch_size > 1:
            raise NotSupportedError("bcfw: gap sampling, corner caches and pairwise/away steps take one block per "
                                    "step; use batch_size=1")
        if self.steps != "fw" and not self.line_search:
            raise NotSupportedError(f"bcfw: steps={self.steps!r} needs the exact line search (line_search=True)")
        return {key: getattr(self, key) for key in GAP_OPTIONS}


#: bcfw's options for expensive oracles (besides ``sampling="gap"``)
GAP_OPTIONS = ("cache_size", "cache_factor", "cache_nu", "steps")


@solver("bcfw", BCFWOptions, without=("w0",), needs=MAX_ORACLE)
def bcfw(problem: SSVMProblem, options: BCFWOptions, run_options: RunOptions, executor) -> Result:
    """Block-coordinate Frank-Wolfe on the structural SVM dual (paper Alg. 3/4).

    Parameters
    ----------
    problem : SSVMProblem
        Any loss (non-decomposable ones decode through their loss hooks); weight constraints are
        honoured (see :mod:`structopt.solvers._blocks`).
    max_passes : float
        Effective passes: exactly ``ceil(max_passes * n)`` block steps.
    eval_every : float
        Evaluate primal, dual and duality gap every this many passes (one batch oracle pass each;
        its time and oracle calls are not counted in the trace's ``time``/``oracle_calls``).
    tol : float
        Stop once the duality gap of the reported iterate is at most ``tol``.
    executor, n_workers
        Where the evaluation passes and the mini-batch oracles run (:mod:`structopt.parallel`).

    Returns
    -------
    Result
        ``w`` (averaged iterate unless ``averaging="none"``), the trace (``passes``,
        ``oracle_calls``, ``time``, ``primal``, ``dual``, ``gap`` of the reported iterate,
        ``dual_iterate`` of the current iterate, which line search never decreases; with the options for
        expensive oracles ``oracle_calls`` counts exact calls and ``cache_hits`` the cached steps) and
        ``info`` (``state``: the blocks; ``gap``: the :class:`~structopt.solvers._gap_blocks.GapState`).
    """
    return run(problem, BCFWMethod(problem, options, run_options, executor))


@state_type
@dataclass
class BCFWState:
    """The dual blocks (statistics-space summaries, lazy average, permutation), the sampler and, with the
    options for expensive oracles, the block gaps and corner caches."""

    blocks: BlockState
    rng: np.random.Generator
    gap: GapState | None = None  # gap sampling, caches and active sets (None for plain BCFW)


class BCFWMethod(Method):
    """BCFW on the shared run loop (:func:`structopt.solvers.base.run`); ``initial`` warm-starts it from given
    blocks (and gap state), as the regularisation path does (:mod:`structopt.solvers.reg_path`)."""

    name = "bcfw"

    def __init__(self, problem: SSVMProblem, options: BCFWOptions, run_options: RunOptions, executor=None, *,
                 initial: tuple[BlockState, GapState | None] | None = None):
        super().__init__(problem, options, run_options, executor)
        self.gap_options = options.gap_options()  # (refuses the combinations that cannot work)
        self.line_search, self.sampling, self.fused = options.line_search, options.sampling, options.fused
        self.averaged = options.averaging == "weighted"
        self.steps_per_eval = max(1, round(run_options.eval_every * problem.n))
        self.progress, self.random_state = run_options.progress, run_options.random_state
        self.initial = initial  # a warm start (the regularisation path), else the gold vertices

    def init(self, monitor: Monitor) -> BCFWState:
        if self.initial is not None:
            blocks, gap = self.initial
        else:
            blocks, gap = BlockState.initial(self.problem), None
        if gap is None and self.gap_options is not None:
            gap = GapState.initial(self.problem, blocks, self.gap_options["steps"] != "fw")
        return BCFWState(blocks, make_rng(self.random_state), gap)

    def resume(self, state: BCFWState) -> BCFWState:
        if not isinstance(state, BCFWState):
            raise InvalidInputError(f"bcfw: the checkpoint holds a {type(state).__name__}, not a BCFW state")
        if (state.gap is None) != (self.gap_options is None):
            raise InvalidInputError("bcfw: the checkpoint's state was written "
                                    f"{'without' if state.gap is None else 'with'} the options for expensive oracles")
        if state.gap is not None:
            state.gap.check(state.blocks, self.gap_options["steps"] != "fw")
        return state

    def warm_up(self, state: BCFWState) -> None:
        if state.gap is not None:
            if self.sampling == "gap":  # the draws' kernel, before the clock starts
                load_draw_kernel()
            options = self.gap_options
            view = select(self.problem, self.fused) if options["cache_size"] == 0 and options["steps"] == "fw" else None
            if view is None:
                self.updater = GapBlockUpdater(self.problem, state.blocks, state.gap, **options)
            else:  # gap sampling alone: the fused steps store the block gaps they compute
                self.updater = FusedGapUpdater(self.problem, state.blocks, state.gap, view)
                self.updater.warm_up(self.progress)
            return
        batch_size = self.options.batch_size
        self.updater = (make_block_updater(self.problem, state.blocks, self.fused) if batch_size == 1
                        else MiniBatchUpdater(self.problem, state.blocks, self.executor, batch_size))
        if self.updater.compiled:  # load the kernels before the clock starts
            self.updater.fused.warm_up("hinge_terms", "adjoint_sum", verbose=self.progress)
            self.updater.run(np.zeros(0, dtype=np.int64), self.line_search, self.averaged)

    def advance(self, state: BCFWState, monitor: Monitor) -> None:
        blocks, n = state.blocks, self.problem.n
        count = min(self.steps_per_eval - blocks.k % self.steps_per_eval, monitor.step_budget(n) - blocks.k)
        if count <= 0:
            return
        if self.sampling == "gap":
            gap = state.gap
            if (self.averaged and np.all(np.isfinite(gap.gaps))
                    and blocks.k - gap.refreshed >= REFRESH_PASSES * n - 1e-9 * n):
                # refresh the stale gaps by an exact pass at the current iterate (counted: it is part of the
                # method); with averaging="none" the evaluation pass is at the current iterate and did it
                self.updater.refresh(self.problem.project_weights(blocks.w))
                gap.calls += n
                gap.refreshed = blocks.k
            self.updater.run_sampled(count, state.rng, self.line_search, self.averaged)
            return
        order = (state.rng.integers(0, n, size=count) if self.sampling == "uniform"
                 else _permutation_steps(blocks, state.rng, count))
        self.updater.run(order, self.line_search, self.averaged)

    def evaluate(self, state: BCFWState) -> tuple[np.ndarray, dict]:
        problem, blocks, gap = self.problem, state.blocks, state.gap
        w_hat, ell_report = self.updater.averaged() if self.averaged else (blocks.w, blocks.ell)
        if gap is not None and self.sampling == "gap" and not self.averaged:
            # the evaluation pass is at the current iterate: its hinge losses refresh every block's gap
            w = problem.project_weights(w_hat)
            hinge = self.updater.exact_pass(w)
            half_sq = 0.5 * problem.lam * float(w @ w)
            primal = half_sq + float(np.mean(hinge))
            dual = ell_report - half_sq
            self.w_report, evaluation = w, {"primal": primal, "dual": dual, "gap": primal - dual}
        else:
            self.w_report, evaluation = _evaluate(problem, self.executor, w_hat, ell_report)
        w_now = problem.project_weights(blocks.w)
        dual_iterate = blocks.ell - 0.5 * problem.lam * float(w_now @ w_now)
        counts = {"oracle_calls": blocks.k} if gap is None else {"oracle_calls": gap.calls, "cache_hits": gap.hits}
        return self.w_report, {"passes": blocks.k / problem.n, **counts, "dual_iterate": dual_iterate, **evaluation}

    def result(self, state: BCFWState, monitor: Monitor) -> Result:
        return Result(self.w_report.copy(), monitor.trace, {"stop_reason": monitor.stop_reason,
                                                            "fused": self.updater.compiled, "state": state.blocks,
                                                            **({} if state.gap is None else {"gap": state.gap})})


@dataclass(frozen=True)
class FrankWolfeOptions(Options):
    """The options of :func:`frank_wolfe` beyond the common ones.

    Parameters
    ----------
    line_search : bool
        Exact line search (default) or the step ``2 / (k + 2)``.
    fused : bool, optional
        Use the fused numba pass when the problem has one (None, default), demand it (True) or use the
        per-example Python path (False).
    """

    line_search: Annotated[bool, one_of(True, False)] = True
    fused: FUSED = None


@solver("frank_wolfe", FrankWolfeOptions, without=("eval_every", "w0"), needs=MAX_ORACLE, aliases=("fw",))
def frank_wolfe(problem: SSVMProblem, options: FrankWolfeOptions, run_options: RunOptions, executor) -> Result:
    """Batch Frank-Wolfe on the structural SVM dual (paper Alg. 2), one oracle pass per iteration.

    The pass at ``w`` yields both the corner ``(w_s, l_s)`` and the primal value, so primal, dual
    and gap of every iterate are free (every pass is an evaluation); it runs on ``executor``
    (:mod:`structopt.parallel`). The method is deterministic: ``random_state`` is accepted for a
    uniform interface and unused.

    Parameters
    ----------
    problem : SSVMProblem
    max_passes : float
        Iterations (each one oracle pass).
    executor, n_workers
        Where the oracle passes run (:mod:`structopt.parallel`).
    """
    return run(problem, _FrankWolfe(problem, options, run_options, executor))


@state_type
@dataclass
class FrankWolfeState:
    """The dual iterate of batch Frank-Wolfe: ``w_hat = A alpha / (lam n)``, its loss ``ell``, iterations ``k``."""

    w_hat: np.ndarray
    ell: float
    k: int


class _FrankWolfe(Method):
    """Each pass at ``w`` is both the step's oracle and the evaluation of ``w`` (primal, dual, gap)."""

    name = "frank_wolfe"

    def __init__(self, problem: SSVMProblem, options: FrankWolfeOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        self.line_search, self.fused = options.line_search, options.fused
        self.fast = select(problem, options.fused)
        if self.fast is not None:  # load the kernels before the clock starts
            self.fast.warm_up("fw_pass", verbose=run_options.progress)
        self.evaluation: tuple[np.ndarray, dict] | None = None

    def init(self, monitor: Monitor) -> FrankWolfeState:
        return FrankWolfeState(self.problem.zeros(), 0.0, 0)

    def advance(self, state: FrankWolfeState, monitor: Monitor) -> None:
        lam, k = self.problem.lam, state.k
        w = self.problem.project_weights(state.w_hat)
        w_s, loss_s, mean_hinge = self.executor.fw_corner(w, self.fused)
        half_sq = 0.5 * lam * float(w @ w)
        primal, dual = half_sq + mean_hinge, state.ell - half_sq
        direction = state.w_hat - w_s
        gap = lam * float(direction @ w) - state.ell + loss_s  # equals primal - dual (Moreau, see _blocks)
        gamma = gamma_line_search(gap, lam * float(direction @ direction)) if self.line_search else 2.0 / (k + 2.0)
        # the record reports w; the checkpoint holds the state after the step
        self.evaluation = (w, {"passes": k + 1, "oracle_calls": (k + 1) * self.problem.n, "primal": primal,
                               "dual": dual, "gap": primal - dual})
        state.w_hat, state.ell, state.k = (state.w_hat - gamma * direction, (1.0 - gamma) * state.ell + gamma * loss_s,
                                           k + 1)

    def evaluate(self, state: FrankWolfeState) -> tuple[np.ndarray, dict]:
        return self.evaluation

    def result(self, state: FrankWolfeState, monitor: Monitor) -> Result:
        return Result(self.evaluation[0], monitor.trace, {"stop_reason": monitor.stop_reason,
                                                          "fused": self.fast is not None})


def _ssg_steps_python(problem: SSVMProblem, order: np.ndarray, w: np.ndarray, w_avg: np.ndarray, k: int,
                      averaging: bool) -> int:
    lam = problem.lam
    constrained = problem.constrained
    for i in order:
        d = problem.decode(int(i), w)
        step = 1.0 / (lam * (k + 1))
        w *= 1.0 - step * lam
        stats = problem.compact_stats(d.y, d.theta)
        problem.adjoint(int(i), stats, w, -step)
        problem.adjoint(int(i), problem.gold_stats(int(i), d.theta), w, step)
        if constrained:  # projected subgradient step
            index = problem.nonnegative_indices
            w[index] = np.maximum(w[index], 0.0)
        k += 1
        if averaging:
            w_avg += (2.0 / (k + 1)) * (w - w_avg)  # weighted average, weight t on w_t
    return k


@dataclass(frozen=True)
class SSGOptions(Options):
    """The options of :func:`ssg` beyond the common ones.

    Parameters
    ----------
    averaging : {"none", "weighted"}
        Report the last iterate (default) or the weighted average.
    fused : bool, optional
        Use the fused numba pass when the problem has one (None, default), demand it (True) or use the
        per-example Python path (False).
    """

    averaging: Annotated[str, one_of("weighted", "none")] = "none"
    fused: FUSED = None


@solver("ssg", SSGOptions, without=("w0",), needs=MAX_ORACLE)
def ssg(problem: SSVMProblem, options: SSGOptions, run_options: RunOptions, executor) -> Result:
    """Pegasos stochastic subgradient: step ``1 / (lam (k + 1))`` on one uniformly drawn example.

    With ``averaging="weighted"`` the average ``2/(k(k+1)) sum_t t w_t`` is reported and returned.
    Constrained weights get projected steps.

    Parameters
    ----------
    problem : SSVMProblem
    max_passes : float
        Exactly ``ceil(max_passes * n)`` steps.
    eval_every : float
        Evaluate the primal every this many passes.
    tol : float
        Must be 0 (no duality gap).
    executor, n_workers
        Where the primal evaluations run (:mod:`structopt.parallel`).
    """
    refuse_tol("ssg", run_options.tol)
    return run(problem, _SSG(problem, options, run_options, executor))


@state_type
@dataclass
class SSGState:
    """Pegasos: the iterate, its weighted average, the step count and the sampler."""

    w: np.ndarray
    w_avg: np.ndarray
    k: int
    rng: np.random.Generator


class _SSG(Method):
    name = "ssg"

    def __init__(self, problem: SSVMProblem, options: SSGOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        self.progress, self.random_state = run_options.progress, run_options.random_state
        self.averaged = options.averaging == "weighted"
        self.fast = select(problem, options.fused)
        self.steps_per_eval = max(1, round(run_options.eval_every * problem.n))

    def init(self, monitor: Monitor) -> SSGState:
        return SSGState(self.problem.zeros(), self.problem.zeros(), 0, make_rng(self.random_state))

    def warm_up(self, state: SSGState) -> None:
        if self.fast is not None:  # load the kernels before the clock starts
            self.fast.warm_up("hinge_terms", verbose=self.progress)
            self.fast.ssg_steps(np.zeros(0, dtype=np.int64), state.w, state.w_avg, state.k, self.averaged)

    def advance(self, state: SSGState, monitor: Monitor) -> None:
        n = self.problem.n
        order = state.rng.integers(0, n, size=max(0, min(self.steps_per_eval, monitor.step_budget(n) - state.k)))
        if self.fast is not None:
            for start in range(0, len(order), SSG_CHUNK):
                state.k = self.fast.ssg_steps(order[start:start + SSG_CHUNK], state.w, state.w_avg, state.k,
                                              self.averaged)
        else:
            state.k = _ssg_steps_python(self.problem, order, state.w, state.w_avg, state.k, self.averaged)

    def evaluate(self, state: SSGState) -> tuple[np.ndarray, dict]:
        w = state.w_avg if self.averaged else state.w
        mean_hinge = self.executor.mean_hinge(w)
        return w, {"passes": state.k / self.problem.n, "oracle_calls": state.k,
                   "primal": 0.5 * self.problem.lam * float(w @ w) + mean_hinge}

    def result(self, state: SSGState, monitor: Monitor) -> Result:
        w = state.w_avg if self.averaged else state.w
        return Result(w.copy(), monitor.trace, {"stop_reason": monitor.stop_reason, "fused": self.fast is not None})


__all__ = ["BCFWOptions", "BCFWState", "FrankWolfeOptions", "FrankWolfeState", "SSGOptions", "SSGState", "bcfw",
           "frank_wolfe", "ssg"]
