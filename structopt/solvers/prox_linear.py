"""The inexact prox-linear method for non-linear score maps (Pillutla et al. Algo 5; spec §7).

Iteration k linearises the score map at ``w_{k-1}`` and approximately minimises the convex model
(61) ``F_eta(w; w_{k-1})`` -- the structured hinge of the linearised potentials plus
``lam/2 ||w||^2 + 1/(2 eta) ||w - w_{k-1}||^2`` -- with a convex solver started at ``w_{k-1}``
(the prox-centre warm start of §6.1.2). The subproblem is a
:class:`~structopt.nonconvex.LinearisedProblem`: an ordinary structural SVM in ``u = w - c`` with
regulariser ``lam + 1/eta``, so the inner solvers run unchanged (Casimir keeps its own Catalyst
prox term). Line 4 accepts ``w^_k`` only if ``F(w^_k) <= F(w_{k-1})`` (``accept="descent"``) or
always (``"always"``, Remark 36).

Inexactness (§6.1.1, §7.3.2)
----------------------------
``inner="bcfw"``: certified. BCFW stops at duality gap ``eps_k = eps0 / k`` (Prop. 37's schedule),
which bounds ``F_eta(w^_k) - min F_eta`` as (62) asks; ``eps0`` defaults to ``F(w_0)``, an upper
bound on ``F(w_0) - F*`` since ``F* >= 0`` (Remark 38).
``inner="casimir"`` (PL-Casimir-SVRG, the paper's method), ``"svrg"``, ``"sgd"``: the paper's fixed
budget, ``inner_passes`` oracle passes per subproblem (default 10, i.e. the paper's 5 Casimir-SVRG
iterations at 2 calls per step), top-K smoothing ``mu_k = mu / k`` with smoothness ``L_k = k L0``
(``smoothing="adaptive"``, the paper's default, which realises the ``1/k`` inexactness through the
smoothing) or ``mu_k = mu``, ``L_k = L0`` (``"constant"``). ``L0`` is the local top-K curvature of
the first subproblem at ``w_0`` (:func:`~structopt.solvers._smooth.estimate_lipschitz`) unless
given. Casimir uses the const schedule (Prop. 29's kappa); SGD runs on the smoothed subproblem
with step ``gamma0 / (1 + passes)``, ``gamma0 = 1 / (L_k + lam + 1/eta)``, weighted averaging.
(The subgradient-norm test of §6.1.1 is not implemented: no inner solver here returns a
subgradient of the non-smooth subproblem cheaply; BCFW's gap is the certificate instead.)

Counting: ``oracle_calls`` are the inner solvers' (paper counting: 2 per SVRG step, 1 per SGD step,
1 per BCFW block step); the batch passes -- the inner solvers' full gradients and the evaluation
of ``F(w^_k)`` that Line 4 needs -- are reported apart (``full_grad_passes``, ``objective_passes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from structopt.archive import state_type
from structopt.errors import InvalidInputError
from structopt.nonconvex import LinearisedProblem, NonconvexProblem
from structopt.solvers._smooth import Counters, estimate_lipschitz
from structopt.solvers._smooth_options import Kind, OptionalPositive, TopK
from structopt.solvers.base import (
    Method,
    Monitor,
    Need,
    Options,
    Result,
    RunOptions,
    initial_weights,
    make_rng,
    one_of,
    positive,
    refuse_tol,
    run,
    smoothing_needs,
    solver,
)

INNER_SOLVERS = ("casimir", "svrg", "sgd", "bcfw")


def check_nonconvex(name: str, problem) -> None:
    """Refuse anything but a :class:`NonconvexProblem`, naming the solver."""
    if not isinstance(problem, NonconvexProblem):
        raise InvalidInputError(f"{name} needs a NonconvexProblem (a non-linear score map), got "
                                f"{type(problem).__name__}; convex problems take the convex solvers")


#: options prox_linear sets on the inner solver itself (inner_options may not override them)
_SET_BY_PROX_LINEAR = frozenset({"mu", "kind", "k", "L", "gamma0", "tol", "max_passes", "w0", "random_state",
                                 "eval_every", "schedule", "checkpoint", "resume", "callback", "progress"})


def _inner_options_option(name: str, value) -> None:
    """None or a dict of extra options for the inner solver."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise InvalidInputError(f"{name} must be a dict of inner-solver options, got {type(value).__name__}")
    taken = sorted(set(value) & _SET_BY_PROX_LINEAR)
    if taken:
        raise InvalidInputError(f"{name} may not set {', '.join(taken)}: prox_linear sets them per subproblem")


def _inner_solve(sub: LinearisedProblem, inner: str, *, u0: np.ndarray, passes: float, mu: float, kind: str,
                 k: int, L: float, tol: float, rng: np.random.Generator, extra: dict):
    # one approximate solve of the subproblem from u0 (the prox centre w_{k-1} in u coordinates)
    if inner == "casimir":
        from structopt.solvers.casimir import casimir_svrg
        return casimir_svrg(sub, schedule="const", mu=mu, kind=kind, k=k, L=L, max_passes=passes, w0=u0,
                            random_state=rng, **extra)
    if inner == "svrg":
        from structopt.solvers.svrg import svrg
        return svrg(sub, mu=mu, kind=kind, k=k, L=L, max_passes=passes, w0=u0, random_state=rng, **extra)
    if inner == "sgd":
        from structopt.solvers.sgd import sgd
        return sgd(sub, mu=mu, kind=kind, k=k, gamma0=1.0 / (L + sub.lam), max_passes=passes, w0=u0,
                   eval_every=passes, random_state=rng, **extra)
    from structopt.solvers.bcfw import bcfw
    return bcfw(sub, tol=tol, max_passes=passes, random_state=rng, **extra)


@dataclass(frozen=True)
class ProxLinearOptions(Options):
    """The options of :func:`prox_linear` beyond the common ones.

    Parameters
    ----------
    inner : {"casimir", "svrg", "sgd", "bcfw"}
        Solver of the convex subproblems (module docstring).
    eta : float
        Prox-linear step length (theory: ``eta <= 1/L`` for an L-smooth score map, Thm 35; the
        paper grid-searches powers of 10).
    inner_passes : float
        Oracle-call budget per subproblem, in passes (the cap for ``inner="bcfw"``).
    mu, smoothing, kind, k
        Smoothing of the subproblems: ``mu_k = mu / k`` (``"adaptive"``) or ``mu``; top-K (K = k)
        or entropy. Unused by BCFW.
    L : float, optional
        ``L0``, the smoothness of the smoothed first subproblem at ``mu``; estimated when omitted
        (the local top-K curvature at ``w_0``, which can be far too small where the K best outputs
        are near-identical, e.g. boxes at a random start: pass L then, the paper tunes it).
    eps0 : float, optional
        BCFW's gap schedule ``eps_k = eps0 / k`` (default ``F(w_0)``); only with ``inner="bcfw"``.
    accept : {"descent", "always"}
        Line 4 of Algo 5 (monotone objective) or Remark 36's variant.
    inner_options : dict, optional
        Further options of the inner solver (e.g. ``{"iterate": "last", "sgd_init": True}`` for
        Casimir or SVRG, ``{"warm_start": "prev-iterate"}`` for Casimir); those prox_linear sets
        per subproblem (smoothing, budget, start, seed, ...) are refused.
    """

    inner: Annotated[str, one_of(*INNER_SOLVERS)] = "casimir"
    eta: Annotated[float, positive] = 1.0
    inner_passes: Annotated[float, positive] = 10.0
    mu: Annotated[float, positive] = 1.0
    smoothing: Annotated[str, one_of("adaptive", "constant")] = "adaptive"
    kind: Kind = "topk"
    k: TopK = 5
    L: OptionalPositive = None
    eps0: OptionalPositive = None
    accept: Annotated[str, one_of("descent", "always")] = "descent"
    inner_options: Annotated[dict | None, _inner_options_option] = None


@solver("prox_linear", ProxLinearOptions, without=("eval_every", "executor", "n_workers"),
        needs=(Need("max_oracle", "inner='bcfw'", lambda o: o["inner"] == "bcfw"),
               *smoothing_needs(lambda o: o["inner"] != "bcfw", "inner!='bcfw' and ")))
def prox_linear(problem: NonconvexProblem, options: ProxLinearOptions, run_options: RunOptions, executor) -> Result:
    """Inexact prox-linear (Algo 5) on a non-linear structural SVM, a convex solver inside.

    Parameters
    ----------
    problem : NonconvexProblem
        Any structure with the inner solver's oracle (top-K or marginals; max for BCFW).
    max_passes : float
        Budget in inner oracle calls / n; the last subproblem's budget is cut to meet it.
    tol : float
        Must be 0 (no duality gap for the non-convex objective).
    w0 : ndarray, optional
        Start; default ``model.initial_weights(random_state)`` (zero weights are a stationary
        point of a two-layer network).
    time_limit, checkpoint
        The time limit is checked after each prox-linear step, checkpoints are written after a step.

    Returns
    -------
    Result
        ``w = w_K``. Trace records: ``passes``, ``oracle_calls``, ``oracle_calls_made``,
        ``full_grad_passes``, ``objective_passes``, ``time``, ``primal`` (``F(w_k)``), and from the
        first step on ``prox_iter``, ``accepted``, ``candidate_primal`` (``F(w^_k)``),
        ``model_value`` (``F_eta(w^_k; w_{k-1})``), ``step_norm`` (``||w^_k - w_{k-1}||``), ``mu``,
        ``L``, and for BCFW ``eps`` and ``inner_gap``.
    """
    check_nonconvex("prox_linear", problem)
    refuse_tol("prox_linear", run_options.tol)
    if options.eps0 is not None and options.inner != "bcfw":
        raise InvalidInputError(f"prox_linear: eps0 sets BCFW's certified gap schedule; inner={options.inner!r} "
                                "runs a fixed budget (inner_passes)")
    return run(problem, _ProxLinear(problem, options, run_options))


@state_type
@dataclass
class ProxLinearState:
    """The iterate ``w_k`` and ``F(w_k)``, the step count, sampler, counters, ``L0``, ``eps0`` and objective passes."""

    w: np.ndarray
    F: float
    k: int
    rng: np.random.Generator
    counters: Counters
    L0: float | None
    eps0: float
    objective_passes: int


class _ProxLinear(Method):
    name = "prox_linear"

    def __init__(self, problem: NonconvexProblem, options: ProxLinearOptions, run_options: RunOptions):
        super().__init__(problem, options, run_options)
        self.label = f"prox-linear[{options.inner}]"

    def init(self, monitor: Monitor) -> ProxLinearState:
        problem, options, w0 = self.problem, self.options, self.run_options.w0
        rng = make_rng(self.run_options.random_state)
        w = problem.initial_weights(rng) if w0 is None else initial_weights(problem, w0)
        F = problem.primal(w)
        state = ProxLinearState(w, F, 0, rng, Counters(), None if options.L is None else float(options.L),
                                F if options.eps0 is None else float(options.eps0), 1)
        monitor.pause()
        monitor.record(w, primal=F, objective_passes=1, **state.counters.record(problem.n))
        return state

    def advance(self, state: ProxLinearState, monitor: Monitor) -> None:
        problem, n, options, counters = self.problem, self.problem.n, self.options, state.counters
        inner = options.inner
        state.k += 1
        sub = problem.linearize(state.w, options.eta)
        u0 = sub.variable(state.w)
        if state.L0 is None and inner != "bcfw":
            state.L0 = estimate_lipschitz(sub, options.mu, k=options.k, w=u0)
        scale = state.k if options.smoothing == "adaptive" else 1
        mu_k, L_k, eps_k = options.mu / scale, (state.L0 or 0.0) * scale, state.eps0 / state.k
        passes = min(float(options.inner_passes), (monitor.step_budget(n) - counters.oracle_calls) / n)
        res = _inner_solve(sub, inner, u0=u0, passes=passes, mu=mu_k, kind=options.kind, k=options.k, L=L_k, tol=eps_k,
                           rng=state.rng, extra=options.inner_options or {})
        last = res.trace[-1]
        counters.oracle_calls += int(last["oracle_calls"])
        counters.oracle_calls_made += int(last.get("oracle_calls_made", last["oracle_calls"]))
        counters.full_grad_passes += int(last.get("full_grad_passes", 0))
        candidate = sub.weights(res.w)
        F_candidate = problem.primal(candidate)  # Line 4's test: part of the method, on the clock
        state.objective_passes += 1
        self.step = (sub, res, candidate, F_candidate, mu_k, L_k, eps_k, last)

    def evaluate(self, state: ProxLinearState) -> tuple[np.ndarray, dict]:
        sub, res, candidate, F_candidate, mu_k, L_k, eps_k, last = self.step
        accepted = self.options.accept == "always" or F_candidate <= state.F
        model_value = sub.primal(res.w) + sub.constant
        step_norm = float(np.linalg.norm(candidate - state.w))
        if accepted:
            state.w, state.F = candidate, F_candidate
        extra = {"eps": eps_k, "inner_gap": last.get("gap")} if self.options.inner == "bcfw" else {"mu": mu_k, "L": L_k}
        return state.w, {"primal": state.F, "prox_iter": state.k, "accepted": bool(accepted),
                         "candidate_primal": F_candidate, "model_value": model_value, "step_norm": step_norm,
                         "objective_passes": state.objective_passes, **extra, **state.counters.record(self.problem.n)}

    def result(self, state: ProxLinearState, monitor: Monitor) -> Result:
        return Result(state.w, monitor.trace, {"stop_reason": monitor.stop_reason, "L0": state.L0, "eps0": state.eps0,
                                               "inner": self.options.inner, "eta": self.options.eta,
                                               "prox_iters": state.k})


__all__ = ["INNER_SOLVERS", "ProxLinearOptions", "ProxLinearState", "check_nonconvex", "prox_linear"]
