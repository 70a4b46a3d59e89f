"""Dual extragradient (Taskar, Lacoste-Julien & Jordan 2006) on the penalized SSVM saddle point.

Formulation (penalized variant): with ``W = R^d``,

    L(w, z) = lam/2 ||w||^2 + (1/n) sum_i [ <w, A_i^T z_i - f_i(y_i)> + <c_i, z_i> + d_i ],

``z_i`` in example i's marginal polytope and ``Delta(y_i, y) = <c_i, stats(y)> + d_i``. Then
``max_z L(w, z)`` is exactly the primal ``F(w)`` every structopt solver reports, and
``min_w L(w, z) = D(z)`` is the SSVM (BCFW) dual of any alpha with marginals z, so the reported
gap ``F(w_bar) - D(z_bar)`` is the same duality gap BCFW reports (the ball-constrained form of the
paper has the same optimum but needs a radius).

Algorithm: Nesterov's dual extrapolation with per-block prox maps (Euclidean projection or
entropic prox on the z-blocks, Euclidean on w with prox-centre 0) and step-weighted dual
accumulation ``s <- s - eta_t G(u_t)``; the output is the ``eta``-weighted average of the
``u_t``. Norm: ``||u||^2 = ||w||^2 + beta sigma sum_i ||z_i||^2`` (``beta`` = ``z_weight``,
``sigma`` = strong convexity of the z-block prox function), in which the operator is Lipschitz
with ``L <= lam + ||B||_2 / (n sqrt(beta sigma))``, ``||B||_2`` by power iteration.

Defaults:

* z prox-centre at the gold outputs (``centre="gold"``): the start ``(w, z) = (0, gold)`` is then
  BCFW's start (``w(z) = 0``, ``D = 0``), whereas from the uniform centre ``w(z_bar)`` is of order
  ``1/lam`` and the first duals are hugely negative. The entropic geometry cannot sit on a vertex:
  its centre has node potentials ``centre_potential`` on the gold labels.
* ``beta`` balances the two prox-diameters (``default_z_weight``).
* adaptive step (``backtracking=True``): grow by ``step_growth``, halve while the exact local
  Lipschitz test fails.
* ``w_block="exact"`` replaces the w-player by its best response ``w(z)`` (extrapolation on the
  concave dual alone).

Fused path: where the problem's kernel family has a z-pass for its structure (chain models whose
structure declares the projection, or prox, as its own: ``kernel_oracles``), each iteration is one
numba call over all examples (:mod:`structopt.fused.chain`), memory-light; other structures use a
per-example Python loop around ``structure.project`` (or the structure's warm-started
``projector``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from structopt.archive import state_type
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fused import select
from structopt.potentials import scale
from structopt.problem import SSVMProblem
from structopt.solvers import _eg_operator as op
from structopt.solvers._eg_geometry import PythonZPass, entropic_sigma, gold_node_potentials
from structopt.solvers.base import (
    Method,
    Monitor,
    Need,
    Options,
    Result,
    RunOptions,
    at_least,
    make_rng,
    non_negative,
    one_of,
    optional,
    positive,
    positive_int,
    run,
    solver,
)

CENTRE_POTENTIAL = 6.0


def _output_sqnorms(problem: SSVMProblem) -> np.ndarray:
    """``||stats(y_i)||^2`` in the full layout (parts used by the gold output: 2T - 1 on a chain)."""
    zero = problem.zeros()
    return np.array([op.sq_norm(problem.gold_stats(i, op.block_theta(problem, i, zero))) for i in range(problem.n)])


def _log_sizes(problem: SSVMProblem) -> np.ndarray:
    """``log |Y_i|`` = log-partition at zero potentials (the entropic prox-diameter of example i)."""
    zero = problem.zeros()
    return np.array([problem.marginals(op.block_theta(problem, i, zero))[0] for i in range(problem.n)])


def _centre_diameters(problem: SSVMProblem, geometry: str, centre: str, centre_potential: float) -> np.ndarray:
    """Per example, the largest prox-distance from the z prox-centre to a vertex (``D_z / beta``).

    Euclidean: ``||stats(y_i)||^2 / 2`` from the uniform centre (about T_i on a chain) and
    ``||stats(y_i)||^2`` from the gold vertex. Entropic: ``max_y KL(y || p_centre) = log Z(centre)``
    (``T_i log S`` uniform, ``T_i log(e^centre_potential + S - 1)`` gold).
    """
    sq = _output_sqnorms(problem)
    if geometry == "euclidean":
        return sq if centre == "gold" else 0.5 * sq
    if centre != "gold":
        return _log_sizes(problem)
    zero = problem.zeros()
    out = []
    for i in range(problem.n):
        gold = problem.gold_stats(i, op.block_theta(problem, i, zero))
        out.append(problem.marginals(gold_node_potentials(gold, centre_potential))[0])
    return np.array(out)


def default_z_weight(problem: SSVMProblem, geometry: str, radius_sq: float, centre: str = "gold",
                     centre_potential: float = 0.0) -> float:
    """``beta`` balancing the two blocks' prox-diameters: ``D_w = radius_sq / 2`` against ``D_z / beta``.

    ``D_z / beta`` is the sum over examples of the distance from the prox-centre to a vertex:
    ``||stats(y_i)||^2 / 2`` (Euclidean; about T_i on a chain) or ``log |Y_i|`` (entropic; T_i log S).
    With ``beta = D_w / (D_z / beta)`` the two terms of the rate constant ``(D_w + D_z) L`` of
    dual extrapolation are equal, which minimises it over ``beta`` up to a factor 2.
    """
    per_example = _centre_diameters(problem, geometry, centre, centre_potential)
    return max(0.5 * radius_sq, 1e-12) / max(float(per_example.sum()), 1e-12)


def _make_zpass(problem, geometry, beta, sigma, memory_light, warm, tol, fused, keep_z, centre, centre_potential):
    if keep_z and fused:
        raise NotSupportedError("dual_extragradient: keep_z keeps per-example z averages, which only the "
                                "per-example Python path has; fused=True cannot be honoured")
    view = None if keep_z else select(problem, fused, zpass=geometry)
    if view is not None:
        return view.zpass(geometry, beta=beta, sigma=sigma, tol=tol, centre=centre,
                          centre_potential=centre_potential)
    return PythonZPass(problem, geometry, beta, sigma, memory_light, warm, tol, keep_z, centre, centre_potential)


@dataclass(frozen=True)
class ExtragradientOptions(Options):
    """The options of :func:`dual_extragradient` beyond the common ones.

    Parameters
    ----------
    geometry : {"euclidean", "entropic"}
        z-block prox: Euclidean projection (``structure.project``; for chains a dual-Newton
        projection with per-example warm starts) or entropic prox in natural parameters (needs
        ``marginals``).
    step : float, optional
        Initial step ``eta`` (default ``1 / L``, ``L = lam + ||B|| / (n sqrt(beta sigma))``).
    z_weight : float, optional
        ``beta``, weight of the z-block distance. Default :func:`default_z_weight` with the squared
        radius ``2 F(0) / lam`` (so that ``lam/2 ||w*||^2 <= F(0)`` holds), i.e. the block
        diameters balanced.
    backtracking : bool
        Adaptive step (default): each iteration first tries ``step_growth`` times the last
        accepted step and halves it while the local Lipschitz test
        ``eta ||G(v) - G(u)||_* <= ||v - u||`` fails (exact on both blocks: the z-part uses
        ``sum_i ||A_i (v_w - u_w)||^2``). With ``False`` the step stays at ``step``.
    step_growth : float
        Growth factor of the adaptive step (1 = only ever decrease).
    memory_light : bool
        Python path only: recompute each ``s_{z_i} = (A_i W_t + Lambda_t c_i) / n`` from the
        w-side sums while streaming instead of storing it. The fused chain
        path is always memory-light.
    power_iters : int
        Power-iteration passes for ``||B||_2``.
    lipschitz_margin : float
        Safety factor on the power-iteration estimate (which approaches ``||B||`` from below).
    projection_tol : float
        Marginalisation residual certified by each Euclidean chain projection.
    warm_projections : bool
        Python path: keep per-example projection multipliers to warm-start the projections.
    fused : bool, optional
        Use the fused numba pass (chain models whose structure's ``kernel_oracles`` cover the
        projection / prox) when available (None), demand it (True) or use the per-example Python
        path (False).
    keep_z : bool
        Keep the averaged ``z_bar`` per example in ``info["z_bar"]`` (Python path; for tests).
    centre : {"gold", "uniform"}
        z prox-centre: the gold outputs (default; the start is then BCFW's) or the uniform point.
    centre_potential : float, optional
        Entropic geometry with ``centre="gold"``: the node potentials on the gold labels of the
        prox-centre (default ``CENTRE_POTENTIAL`` = 6; a vertex is out of the entropic domain).
        Called ``kappa`` up to 0.1.0 (Casimir's ``kappa`` is a prox weight).
    w_block : {"saddle", "exact"}
        Extrapolate on both players (default) or replace the w-player by its best response ``w(z)``.
    """

    geometry: Annotated[str, one_of("euclidean", "entropic")] = "euclidean"
    step: Annotated[float | None, optional(positive)] = None
    z_weight: Annotated[float | None, optional(positive)] = None
    backtracking: Annotated[bool, one_of(True, False)] = True
    step_growth: Annotated[float, at_least(1.0)] = 1.25
    memory_light: Annotated[bool, one_of(True, False)] = False
    power_iters: Annotated[int, positive_int] = 30
    lipschitz_margin: Annotated[float, positive] = 1.05
    projection_tol: Annotated[float, positive] = 1e-8
    warm_projections: Annotated[bool, one_of(True, False)] = True
    fused: Annotated[bool | None, optional(one_of(True, False))] = None
    keep_z: Annotated[bool, one_of(True, False)] = False
    centre: Annotated[str, one_of("gold", "uniform")] = "gold"
    centre_potential: Annotated[float | None, optional(non_negative)] = None
    w_block: Annotated[str, one_of("saddle", "exact")] = "saddle"


@solver("dual_extragradient", ExtragradientOptions, without=("w0",), aliases=("extragradient",),
        needs=(Need("marginals", "geometry='entropic'", lambda o: o["geometry"] == "entropic"),))
def dual_extragradient(problem: SSVMProblem, options: ExtragradientOptions, run_options: RunOptions,
                       executor) -> Result:
    """Dual extragradient on the penalized saddle-point form of the structural SVM.

    Parameters
    ----------
    problem : SSVMProblem
        Needs a decomposable (linear) loss; raises :class:`NotSupportedError` otherwise.
    max_passes : float
        Iterations (each is one pass with two prox calls per example; rejected backtracking trials
        are counted in ``oracle_calls``).
    eval_every : float
        Evaluate primal, dual and gap every this many iterations, rounded up to a whole number (one
        max-oracle pass each, not counted in the trace's ``time``).
    tol : float
        Stop when the gap ``F(w_bar) - D(z_bar)`` is at most ``tol``.
    random_state, checkpoint
        Weight constraints are honoured by projecting the w-side steps. ``random_state`` seeds the power
        iteration for ``||B||``. A checkpoint holds, besides the sums, ``||B||`` and the z-pass state (the
        Euclidean projections' warm starts: four floats per token and state on chains; the
        stored ``s_{z_i}``), so a resumed run equals an uninterrupted one bit for bit.
    executor, n_workers
        Where the primal evaluations run (:mod:`structopt.parallel`); the z-passes stay in this
        process (they update per-example state: warm-start multipliers and the z averages).

    Returns
    -------
    Result
        ``w`` = averaged iterate; trace records have ``passes``, ``oracle_calls`` (prox calls),
        ``time``, ``primal``, ``dual``, ``gap``, ``step``; ``info`` has ``L``, ``norm_B``,
        ``z_weight``, ``w_of_z`` (the dual's weights ``w(z_bar)``).
    """
    if not problem.loss.decomposable:
        raise NotSupportedError(f"dual extragradient needs a loss linear in the statistics (decomposable); "
                                f"{problem.loss!r} is not")
    if not options.step_growth >= 1.0:
        raise InvalidInputError(f"step_growth must be >= 1, got {options.step_growth}")
    return run(problem, _Extragradient(problem, options, run_options, executor))


@state_type
@dataclass
class ExtragradientState:
    """The dual-extrapolation sums: ``t`` steps, ``Lam = sum eta``, ``W = sum eta u_w``, the w-side dual point
    ``s_w``, the z-side sums ``zfeat``/``zlin``, the step, the prox calls (trials), ``||B||`` and the z-pass
    state (projection warm starts, stored ``s_{z_i}``)."""

    t: int
    Lam: float
    W: np.ndarray
    s_w: np.ndarray
    zfeat: np.ndarray
    zlin: float
    eta: float
    trials: int
    norm_b: float
    zpass: Any = None


class _Extragradient(Method):
    name = "dual_extragradient"

    def __init__(self, problem: SSVMProblem, options: ExtragradientOptions, run_options: RunOptions, executor):
        super().__init__(problem, options, run_options, executor)
        geometry, z_weight, centre = options.geometry, options.z_weight, options.centre
        self.geometry, self.step, self.backtracking = geometry, options.step, options.backtracking
        self.step_growth, self.eval_every = options.step_growth, run_options.eval_every
        self.label = f"extragradient-{geometry}"
        self.n, self.lam = problem.n, problem.lam
        self.rng = make_rng(run_options.random_state)
        # strong convexity of the z-block prox function w.r.t. l2: 1 (Euclidean), 1 / max ||stats||^2 (entropic)
        self.sigma = 1.0 if geometry == "euclidean" else entropic_sigma(float(_output_sqnorms(problem).max()))
        f0 = executor.primal(problem.zeros())
        centre_potential = float(CENTRE_POTENTIAL if options.centre_potential is None else options.centre_potential)
        self.beta = (float(z_weight) if z_weight is not None
                     else default_z_weight(problem, geometry, 2.0 * f0 / self.lam, centre, centre_potential))
        if not self.beta > 0:
            raise InvalidInputError(f"z_weight must be > 0, got {z_weight}")
        self.zpass = _make_zpass(problem, geometry, self.beta, self.sigma, options.memory_light,
                                 options.warm_projections, options.projection_tol, options.fused, options.keep_z,
                                 centre, centre_potential)
        self.exact = options.w_block == "exact"

    def _constants(self, norm_b: float) -> None:
        n, lam, beta, sigma = self.n, self.lam, self.beta, self.sigma
        # exact w-block: operator -grad D(z) on z alone, Lipschitz ||B||^2 / (lam n^2 beta sigma)
        self.lip = (norm_b ** 2 / (lam * n * n * beta * sigma) if self.exact
                    else lam + norm_b / (n * np.sqrt(beta * sigma)))
        self.fbar = op.gold_mean(self.problem)
        self.dbar = float(np.mean([op.loss_vector(self.problem, i)[1] for i in range(n)]))

    def init(self, monitor: Monitor) -> ExtragradientState:
        norm_b = self.zpass.operator_norm(self.options.power_iters, self.rng) * self.options.lipschitz_margin
        self._constants(norm_b)
        d = self.problem.n_params
        return ExtragradientState(0, 0.0, np.zeros(d), np.zeros(d), np.zeros(d), 0.0,
                                  float(self.step) if self.step is not None else 1.0 / self.lip, 0, norm_b)

    def resume(self, state: ExtragradientState) -> ExtragradientState:
        # ||B|| comes from a random start (random_state is run control): a resume keeps the run's own
        self._constants(float(state.norm_b))
        self.zpass.load_state(state.zpass)
        return state

    def advance(self, state: ExtragradientState, monitor: Monitor) -> None:
        for _ in range(math.ceil(self.eval_every)):
            self.iteration(state)
            if monitor.reached(state.t):
                break

    def iteration(self, state: ExtragradientState) -> None:
        """One dual-extrapolation step with backtracking on the step."""
        lam, n, beta, sigma, lip, fbar = self.lam, self.n, self.beta, self.sigma, self.lip, self.fbar
        zpass, project, exact, backtracking = self.zpass, self.problem.project_weights, self.exact, self.backtracking
        eta = state.eta * (self.step_growth if backtracking and state.t > 0 else 1.0)
        v_w = project(state.s_w)  # w-prox centre 0 with unit weight: v_w = P(s_w)
        while True:
            if exact:  # w = w(v_z): one look-ahead-only pass for sum_i A_i^T v_i, then the step pass
                r, _, _, _ = zpass.run(state.W, state.Lam, v_w, 0.0)
                v_w = project((fbar - r / n) / lam)
            r, q, lin, dz = zpass.run(state.W, state.Lam, v_w, eta)
            state.trials += 2 if exact else 1
            u_w = project((fbar - q / n) / lam if exact else v_w - eta * (lam * v_w + r / n - fbar))
            if not backtracking:
                break
            if exact:  # local test on -grad D: eta^2 ||B^T B (v - u)||_*^2 / (lam n^2)^2 <= ||v - u||^2
                dual_sq = zpass.sum_sq_theta(v_w - u_w) / (n * n * beta * sigma)
                if eta * eta * dual_sq <= beta * sigma * dz * (1 + 1e-10) or eta * lip <= 1.0:
                    break
                eta *= 0.5
                continue
            dw = v_w - u_w
            dual_sq = (float(np.sum((lam * dw + (r - q) / n) ** 2))
                       + zpass.sum_sq_theta(dw) / (n * n * beta * sigma))
            primal_sq = float(dw @ dw) + beta * sigma * dz
            if eta * eta * dual_sq <= primal_sq * (1 + 1e-10) or eta * lip <= 1.0:
                break
            eta *= 0.5
        zpass.commit(u_w, eta)
        state.s_w = state.s_w - eta * (lam * u_w + q / n - fbar)
        state.W = state.W + eta * u_w
        state.zfeat = state.zfeat + (eta / n) * q
        state.zlin += eta * lin / n
        state.Lam += eta
        state.eta = eta
        state.t += 1

    def evaluate(self, state: ExtragradientState) -> tuple[np.ndarray, dict]:
        lam, fbar = self.lam, self.fbar
        self.w_bar = state.W / state.Lam
        self.w_of_z = self.problem.project_weights((fbar - state.zfeat / state.Lam) / lam)
        dual = self.dbar + state.zlin / state.Lam - 0.5 * lam * float(self.w_of_z @ self.w_of_z)
        primal = self.executor.primal(self.w_bar)
        state.zpass = self.zpass.state()
        return self.w_bar, {"passes": state.t, "oracle_calls": 2 * self.n * state.trials, "primal": primal,
                            "dual": dual, "gap": primal - dual, "step": state.eta}

    def result(self, state: ExtragradientState, monitor: Monitor) -> Result:
        zpass = self.zpass
        info = {"stop_reason": monitor.stop_reason, "L": self.lip, "norm_B": state.norm_b, "z_weight": self.beta,
                "sigma": self.sigma, "geometry": self.geometry, "iterations": state.t, "step": state.eta,
                "w_of_z": self.w_of_z, "fused": zpass.compiled, "max_projection_residual": zpass.max_residual}
        if self.options.keep_z and zpass.z_sum is not None:
            info["z_bar"] = [scale(z, 1.0 / state.Lam) for z in zpass.z_sum]
        return Result(self.w_bar.copy(), monitor.trace, info)


