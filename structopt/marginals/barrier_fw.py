"""Barrier Frank-Wolfe for marginal inference (Krishnan, Lacoste-Julien and Sontag, NIPS 2015).

Maximises TRW(μ; θ, ρ) over the marginal polytope 𝓜 (or the local polytope 𝕃) with fully
corrective Frank-Wolfe over the contraction 𝓜_δ = (1 − δ)𝓜 + δu₀ (adaptive δ, Algorithms 1 and 4),
away-step corrections over the vertices found so far (Algorithm 3), and an outer Frank-Wolfe loop
over the spanning-tree polytope 𝕋 whose vertex is the maximum-weight spanning tree on the edges'
mutual information (Algorithm 2). The only combinatorial subroutine is a MAP (LP) oracle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from structopt.errors import InvalidInputError
from structopt.marginals._options import (
    boolean,
    count,
    in_interval,
    inference_method,
    non_negative,
    one_of,
    optional,
    positive,
    positive_int,
)
from structopt.marginals.mrf import InferenceInterrupted, InferenceResult, PairwiseMRF
from structopt.marginals.oracles import LocalPolytopeOracle, MarginalPolytopeOracle, icm
from structopt.marginals.trw import (
    check_rho,
    entropy_coefficients,
    line_search,
    max_spanning_tree,
    mutual_information,
    spanning_tree_rho,
    trw_value,
)


@dataclass
class _ActiveSet:
    """x = Σ_v α_v [(1 − δ) v + δ u₀] over uncontracted atoms v; atom 0 is u₀ itself."""

    atoms: np.ndarray  # (capacity, D); rows [:size] are in use
    alpha: np.ndarray  # (capacity,)
    size: int
    keys: dict
    delta: float

    @classmethod
    def start(cls, u0: np.ndarray, delta: float) -> _ActiveSet:
        atoms = np.zeros((16, u0.size))
        atoms[0] = u0
        alpha = np.zeros(16)
        alpha[0] = 1.0
        return cls(atoms, alpha, 1, {}, delta)

    def index(self, vertex: np.ndarray, key: bytes) -> int:
        """Row of ``vertex``, appended (with α = 0) when new."""
        if key in self.keys:
            return self.keys[key]
        if self.size == self.atoms.shape[0]:
            self.atoms = np.vstack([self.atoms, np.zeros_like(self.atoms)])
            self.alpha = np.concatenate([self.alpha, np.zeros_like(self.alpha)])
        self.atoms[self.size] = vertex
        self.keys[key] = self.size
        self.size += 1
        return self.size - 1

    def point(self) -> np.ndarray:
        """x recomputed from α (removes the drift of incremental updates)."""
        k = self.size
        return (1.0 - self.delta) * (self.alpha[:k] @ self.atoms[:k]) + self.delta * self.atoms[0]

    def shrink_delta(self, new_delta: float) -> None:
        """Remap (6): α′_v = α_v (1 − δ)/(1 − δ′) for v ≠ u₀, α′_u₀ = 1 − Σ_{v≠u₀} α′_v; x is unchanged."""
        k = self.size
        self.alpha[1:k] *= (1.0 - self.delta) / (1.0 - new_delta)
        self.alpha[0] = max(1.0 - self.alpha[1:k].sum(), 0.0)
        self.delta = new_delta


def _correction(theta: np.ndarray, k_flat: np.ndarray, state: _ActiveSet, x: np.ndarray, tol: float,
                max_steps: int, deadline: float = np.inf) -> tuple[np.ndarray, int]:
    """Away-step Frank-Wolfe (Algorithm 3) over conv of the contracted atoms; returns (x, steps)."""
    steps = 0
    for steps in range(1, max_steps + 1):  # noqa: B007 - steps is reported
        if time.perf_counter() > deadline:
            break
        grad = k_flat * (1.0 + np.log(x)) - theta  # ∇f, f = −TRW
        k = state.size
        scores = (1.0 - state.delta) * (state.atoms[:k] @ grad) + state.delta * (state.atoms[0] @ grad)
        gx = float(grad @ x)
        s = int(np.argmin(scores))
        active = np.flatnonzero(state.alpha[:k] > 0.0)
        a = int(active[np.argmax(scores[active])])
        g_fw, g_away = gx - scores[s], scores[a] - gx
        if g_fw + g_away <= tol:
            break
        atom_s = (1.0 - state.delta) * state.atoms[s] + state.delta * state.atoms[0]
        atom_a = (1.0 - state.delta) * state.atoms[a] + state.delta * state.atoms[0]
        if g_fw >= g_away:
            d, gamma_max = atom_s - x, 1.0
        else:
            alpha_a = state.alpha[a]
            d, gamma_max = x - atom_a, alpha_a / (1.0 - alpha_a)
        gamma = line_search(theta, k_flat, x, d, gamma_max)
        if g_fw >= g_away:
            state.alpha[:k] *= 1.0 - gamma
            state.alpha[s] += gamma
        else:
            state.alpha[:k] *= 1.0 + gamma
            state.alpha[a] -= gamma
            if gamma >= gamma_max or state.alpha[a] < 0.0:  # the atom leaves the active set
                state.alpha[a] = 0.0
        x = x + gamma * d
    x = state.point()
    return np.maximum(x, 1e-300), steps


def _local_search(mrf: PairwiseMRF, theta: np.ndarray, k_flat: np.ndarray, state: _ActiveSet, x: np.ndarray,
                  start: np.ndarray, steps: int, corr_tol: float | None, correction_steps: int,
                  deadline: float) -> np.ndarray:
    """Algorithm 6: Frank-Wolfe steps over 𝓜_δ with ICM (from the previous vertex) as the oracle."""
    assignment = start
    u0 = state.atoms[0]
    for _ in range(steps):
        if time.perf_counter() > deadline:
            break
        grad = theta - k_flat * (1.0 + np.log(x))
        assignment = icm(mrf, grad, assignment)
        vertex = mrf.vertex(assignment)
        target = (1.0 - state.delta) * vertex + state.delta * u0
        d = target - x
        if float(grad @ d) <= 0.0:
            break
        row = state.index(vertex, assignment.tobytes())
        gamma = line_search(theta, k_flat, x, d, 1.0)
        state.alpha[:state.size] *= 1.0 - gamma
        state.alpha[row] += gamma
        x = np.maximum(x + gamma * d, 1e-300)
        if corr_tol is not None:
            x, _ = _correction(theta, k_flat, state, x, corr_tol, correction_steps, deadline)
    return x


def _rho_option(name: str, value: object) -> None:
    """"optimize", "uniform" or an array (its shape and entries are checked against the model in the call)."""
    ok = value in ("optimize", "uniform") if isinstance(value, str) else isinstance(value, (np.ndarray, list, tuple))
    if not ok:
        raise InvalidInputError(f"{name} must be 'optimize', 'uniform' or an array of edge probabilities, "
                                f"got {value!r}")


_CONTRACTION = in_interval(0.0, 0.25, False, True)


@inference_method("barrier_fw", polytope=one_of("marginal", "local"), rho=_rho_option,
                  max_iter=optional(positive_int), time_limit=optional(positive), tol=non_negative, rho_iters=count,
                  delta_init=_CONTRACTION, fixed_delta=optional(_CONTRACTION), correction=boolean,
                  correction_steps=positive_int, local_search=count, oracle_time_limit=optional(positive),
                  map_solver=one_of("cpsat", "bnb"), progress=boolean)
def barrier_fw(mrf: PairwiseMRF, polytope: str = "marginal", rho: str | np.ndarray = "optimize",
               max_iter: int | None = 2000, time_limit: float | None = None, tol: float = 0.5,
               rho_iters: int = 10, delta_init: float = 0.01, fixed_delta: float | None = None,
               correction: bool = True, correction_steps: int = 200, local_search: int = 0,
               oracle_time_limit: float | None = None, map_solver: str = "cpsat",
               progress: bool = False) -> InferenceResult:
    """Marginals and an upper bound on log Z by Barrier Frank-Wolfe on the TRW objective.

    Parameters
    ----------
    mrf : PairwiseMRF
        A model with finite log-potentials.
    polytope : {"marginal", "local"}
        Optimise over 𝓜 (exact MAP oracle: min-cut or CP-SAT) or 𝕃 (LP oracle).
    rho : {"optimize", "uniform"} or ndarray of shape (E,)
        ``uniform``: the edge appearance probabilities of the uniform distribution over spanning
        trees (matrix-tree theorem). ``optimize``: start there and take ``rho_iters`` Frank-Wolfe
        steps over the spanning-tree polytope (step 2/(i+3), vertex = maximum-weight spanning tree
        on the mutual information). An array fixes ρ (no certified bound then).
    max_iter : int or None
        Budget of oracle calls over the whole run (None: no limit; a tolerance below the oracle's
        certified resolution, e.g. the LP's 1e-7, is then never met).
    time_limit : float, optional
        Seconds (> 0); checked after each oracle call and inside the corrections, and CP-SAT calls
        are cut to the time left (their proven bound then enters the certificate).
    tol : float
        Stop the inner loop when the certified Frank-Wolfe gap over the full polytope is ≤ ``tol`` (≥ 0).
    rho_iters : int
        Number of ρ updates for ``rho="optimize"`` (none on a forest, where ρ ≡ 1 is exact).
    delta_init : float
        Initial contraction δ ≤ 1/4, shrunk adaptively (Algorithm 1).
    fixed_delta : float, optional
        Keep δ fixed at this value instead (the paper's 𝓜_0.0001 variant).
    correction : bool
        Run away-step corrections over the atoms after every Frank-Wolfe step and ρ update.
    correction_steps : int
        Step budget of each correction.
    local_search : int
        After each exact oracle call over 𝓜, up to this many extra Frank-Wolfe steps whose vertex
        comes from ICM warm-started at the previous vertex (Algorithm 6, LOCALSEARCH); every ICM
        vertex joins the atoms. Cheap, and it cuts the number of (expensive) exact MAP calls.
    oracle_time_limit : float, optional
        Per-call limit of the CP-SAT MAP solver (its proven bound then enters the certificate). A call
        out of time before any solution returns the last vertex (the first time: the best node entries)
        with no bound, so a run whose calls never finish returns its iterate, status ``"time_limit"``,
        with ``upper_bound`` None.
    map_solver : {"cpsat", "bnb"}
        Over 𝓜, when neither min-cut nor variable elimination applies: CP-SAT (default) or
        branch-and-bound over AD3 first (warm-started across calls; CP-SAT when it is not proven
        optimal within half a second), see :class:`~structopt.marginals.oracles.MarginalPolytopeOracle`
        and ``benchmarks/barrier_fw_map_oracle_results.md``. Either way the certificate uses only
        proven bounds.
    progress : bool
        Show a progress bar over oracle calls.

    Returns
    -------
    InferenceResult
        ``log_z`` = TRW at the final iterate (natural log, constant included); ``upper_bound`` = the
        smallest TRW + certified gap seen (an upper bound on log Z for ρ in 𝕋 and an exact oracle);
        ``trace`` has one record per oracle call (iteration, rho_iter, objective, gap,
        certified_gap, delta, upper_bound, time, solver); ``rho`` the final edge appearance probabilities.
        ``status`` says why the run stopped (``converged`` only when the last inner loop met ``tol``;
        at ``max_iter`` or ``time_limit`` the result is the current iterate), ``iterations`` counts
        the oracle calls and ``residual`` is the last certified gap.

    Raises
    ------
    InvalidInputError
        An option out of range (``time_limit=0``, ``tol=nan``, ...), named in the message, before any work.
    InferenceInterrupted
        On Ctrl-C (a KeyboardInterrupt); its ``result`` holds the iterate reached, status ``interrupted``.
    """
    start = time.perf_counter()
    deadline = np.inf if time_limit is None else start + time_limit
    if not np.isfinite(mrf.theta).all():
        raise InvalidInputError("barrier_fw needs finite log-potentials (the model has zero-probability entries)")
    certified = isinstance(rho, str)
    if isinstance(rho, str):
        n_rho_updates = rho_iters if rho == "optimize" else 0
        rho_vec = spanning_tree_rho(mrf)
    else:
        rho_vec = check_rho(mrf, rho, "barrier_fw", at_most_one=True)
        n_rho_updates = 0
    if np.all(rho_vec >= 1.0 - 1e-12):  # a forest: TRW is the exact entropy, nothing to tighten
        n_rho_updates = 0
    oracle = (MarginalPolytopeOracle(mrf, time_limit=oracle_time_limit, map_solver=map_solver)
              if polytope == "marginal" else LocalPolytopeOracle(mrf))
    theta = mrf.theta
    u0 = mrf.uniform()
    state = _ActiveSet.start(u0, fixed_delta if fixed_delta is not None else delta_init)
    x = u0.copy()
    k_flat = entropy_coefficients(mrf, rho_vec)
    upper = np.inf
    trace: list[dict] = []
    calls = 0
    status = "running"  # then "converged", "max_iter" or "time_limit"
    from tqdm.auto import tqdm

    bar = tqdm(total=max_iter, desc=f"barrier_fw[{polytope}]", unit="MAP", disable=not progress, leave=False)
    try:
        for rho_iter in range(n_rho_updates + 1):
            inner_done = False
            while True:
                grad = theta - k_flat * (1.0 + np.log(x))  # θ̃ = ∇TRW
                if time_limit is not None and polytope == "marginal":  # CP-SAT must not overrun the budget
                    remaining = max(time_limit - (time.perf_counter() - start), 0.05)
                    oracle.time_limit = remaining if oracle_time_limit is None else min(oracle_time_limit, remaining)
                res = oracle(grad)
                calls += 1
                bar.update(1)
                gx = float(grad @ x)
                gap = res.value - gx  # FW gap from the returned vertex
                certified_gap = res.bound - gx  # ≥ the true gap, also when CP-SAT stopped early
                gap_u = float(grad @ u0) - gx
                objective = float(trw_value(theta, k_flat, x))
                upper = min(upper, objective + certified_gap)
                trace.append({"iteration": calls, "rho_iter": rho_iter, "objective": objective + mrf.constant,
                              "gap": gap, "certified_gap": certified_gap, "delta": state.delta,
                              "upper_bound": upper + mrf.constant,
                              "time": time.perf_counter() - start, "solver": res.solver})
                inner_done = certified_gap <= tol
                if max_iter is not None and calls >= max_iter:
                    status = "max_iter"
                elif time.perf_counter() >= deadline:
                    status = "time_limit"
                if inner_done or status != "running":
                    break
                if fixed_delta is None and gap_u < 0.0 and gap > 0.0:  # Algorithm 1 (g ≤ 0 only if inexact)
                    proposal = gap / (-4.0 * gap_u)
                    if proposal < state.delta:
                        new_delta = min(proposal, state.delta / 2.0)
                        state.shrink_delta(new_delta if new_delta > 1e-15 else 0.0)
                key = res.assignment.tobytes() if res.assignment is not None else np.round(res.vertex, 9).tobytes()
                row = state.index(res.vertex, key)
                target = (1.0 - state.delta) * res.vertex + state.delta * u0
                d = target - x
                gamma = line_search(theta, k_flat, x, d, 1.0)
                state.alpha[:state.size] *= 1.0 - gamma
                state.alpha[row] += gamma
                x = np.maximum(x + gamma * d, 1e-300)
                corr_tol = min(0.5 if gap >= 1.0 else 0.05, max(0.1 * gap, 0.1 * tol))
                if correction:
                    x, _ = _correction(theta, k_flat, state, x, corr_tol, correction_steps, deadline)
                if local_search and res.assignment is not None:
                    x = _local_search(mrf, theta, k_flat, state, x, res.assignment, local_search,
                                      corr_tol if correction else None, correction_steps, deadline)
            if inner_done and rho_iter == n_rho_updates:
                status = "converged"
            if status != "running":
                break
            # Frank-Wolfe step over 𝕋: ∂TRW/∂ρ_ij = −I_ij, so the vertex is the max-weight spanning tree on I
            vertex = max_spanning_tree(mrf, mutual_information(mrf, x))
            new_rho = rho_vec + 2.0 / (rho_iter + 3.0) * (vertex - rho_vec)
            # ρ and its coefficients change together, so an interrupt never leaves x paired with a half update
            rho_vec, k_flat = new_rho, entropy_coefficients(mrf, new_rho)
            if correction:
                x, _ = _correction(theta, k_flat, state, x, min(0.05, tol), correction_steps, deadline)
    except KeyboardInterrupt as interrupt:
        # x is always a point of the polytope between statements (steps rebind it whole), so it is a valid answer
        raise InferenceInterrupted(_result(mrf, polytope, x, k_flat, rho_vec, upper, certified, "interrupted",
                                           calls, trace, start)) from interrupt
    finally:
        bar.close()
    return _result(mrf, polytope, x, k_flat, rho_vec, upper, certified, status, calls, trace, start)


def _result(mrf: PairwiseMRF, polytope: str, x: np.ndarray, k_flat: np.ndarray, rho_vec: np.ndarray, upper: float,
            certified: bool, status: str, calls: int, trace: list[dict], start: float) -> InferenceResult:
    """The result at iterate ``x``: TRW there, the best certified bound seen, why the run stopped."""
    objective = float(trw_value(mrf.theta, k_flat, x)) + mrf.constant
    return InferenceResult(objective, mrf.node_marginals(x), x, f"barrier_fw[{polytope}]",
                           upper_bound=(upper + mrf.constant) if certified and np.isfinite(upper) else None,
                           converged=status == "converged", seconds=time.perf_counter() - start, trace=list(trace),
                           rho=rho_vec, status=status, iterations=calls,
                           residual=trace[-1]["certified_gap"] if trace else None)
