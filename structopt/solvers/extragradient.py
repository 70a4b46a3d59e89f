"""Dual extragradient (Taskar, Lacoste-Julien & Jordan 2006) on the penalized SSVM saddle point.

Formulation (spec ``extragradient.md`` section 2, *penalized variant*): with ``W = R^d``,

    L(w, z) = lam/2 ||w||^2 + (1/n) sum_i [ <w, A_i^T z_i - f_i(y_i)> + <c_i, z_i> + d_i ],

``z_i`` in example i's marginal polytope and ``Delta(y_i, y) = <c_i, stats(y)> + d_i``. Then
``max_z L(w, z)`` is exactly the primal ``F(w)`` every structopt solver reports, and
``min_w L(w, z) = D(z)`` is the SSVM (BCFW) dual of any alpha with marginals z, so the reported
gap ``F(w_bar) - D(z_bar)`` is the same duality gap BCFW reports. We chose this over the issue's
ball-constrained form (radius ``sqrt(2 L_max / lam)``): both have the same optimum, but this one
needs no radius and its gap is directly comparable.

Algorithm: Nesterov's dual extrapolation with per-block prox maps (Euclidean projection or
entropic prox on the z-blocks, Euclidean on w with prox-centre 0) and step-weighted dual
accumulation ``s <- s - eta_t G(u_t)``; the output is the ``eta``-weighted average of the
``u_t`` (uniform for a fixed step). Norm: ``||u||^2 = ||w||^2 + beta sigma sum_i ||z_i||^2``
(``beta`` = ``z_weight``, ``sigma`` = strong convexity of the z-block entropy), in which the
operator is Lipschitz with ``L <= lam + ||B||_2 / (n sqrt(beta sigma))``, ``||B||_2`` estimated
by power iteration over the stacked ``A_i``. One iteration is one streaming pass over the data
(two prox calls per example).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.problem import SSVMProblem
from structopt.solvers import _eg_operator as op
from structopt.solvers._eg_geometry import make_blocks
from structopt.solvers.base import Monitor, Result, load_checkpoint, make_rng
from structopt.structures.base import add, inner, scale


def _default_z_weight(problem: SSVMProblem, geometry: str, f0: float) -> float:
    # balance the two blocks' prox-diameters: D_w = F(0)/lam >= ||w*||^2 / 2 against
    # n * mean per-example z diameter (1/2 ||z - centre||^2 <= T for Euclidean, T log S for entropy)
    lengths = np.array([np.shape(problem.theta(i, problem.model.zeros())[0])[0] for i in range(problem.n)])
    labels = getattr(problem.structure, "n_labels", 2)
    per_example = lengths.astype(float) if geometry == "euclidean" else lengths * np.log(max(labels, 2))
    return max(f0, 1e-12) / problem.lam / max(float(per_example.sum()), 1e-12)


def dual_extragradient(problem: SSVMProblem, *, geometry: str = "euclidean", max_passes: float = 50,
                       step: float | None = None, z_weight: float | None = None, backtracking: bool = False,
                       memory_light: bool = False, gap_every: int = 1, tol: float = 0.0,
                       time_limit: float | None = None, power_iters: int = 30, lipschitz_margin: float = 1.05,
                       projection_tol: float = 1e-8, warm_projections: bool = True,
                       random_state: int | np.random.Generator | None = None, progress: bool = False,
                       checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
                       callback=None) -> Result:
    """Dual extragradient on the penalized saddle-point form of the structural SVM.

    Parameters
    ----------
    problem : SSVMProblem
        Needs a decomposable (linear) loss; raises :class:`NotSupportedError` otherwise.
    geometry : {"euclidean", "entropic"}
        z-block prox: Euclidean projection (``structure.project``; fast dual-Newton method with
        warm starts for chains) or entropic prox in natural parameters (needs ``marginals``).
    max_passes : float
        Iterations (each is one streaming pass with two prox calls per example).
    step : float, optional
        Fixed step ``eta`` (default ``1 / L``, ``L = lam + ||B|| / (n sqrt(beta sigma))``).
    z_weight : float, optional
        ``beta``, weight of the z-block distance (default balances the blocks' diameters).
    backtracking : bool
        Start from ``8 / L`` and halve the step while ``eta ||G(v) - G(u)||_* > ||v - u||``
        (a standard extragradient safeguard, not from the paper). The step never increases.
    memory_light : bool
        Keep only w-side state and recompute each ``s_{z_i} = A_i W_t / n + S_t c_i / n`` from
        the weighted iterate sum ``W_t`` while streaming (spec section 4); otherwise store ``s_{z_i}``.
    gap_every : int
        Evaluate primal, dual and gap every this many iterations (one max-oracle pass each, not
        counted in the trace's ``time``).
    tol : float
        Stop when the gap ``F(w_bar) - D(z_bar)`` is at most ``tol``.
    time_limit : float, optional
    power_iters : int
        Power-iteration passes for ``||B||_2``.
    lipschitz_margin : float
        Safety factor on the power-iteration estimate (which approaches ``||B||`` from below).
    projection_tol : float
        Marginalisation residual certified by each Euclidean chain projection.
    warm_projections : bool
        Keep per-example projection multipliers (O(T S) each) to warm-start the projections.
    random_state, progress, checkpoint, resume, callback
        As in every structopt solver (see :mod:`structopt.solvers.base`).

    Returns
    -------
    Result
        ``w`` = averaged iterate; trace records have ``passes``, ``oracle_calls`` (prox calls),
        ``time``, ``primal``, ``dual``, ``gap``, ``step``; ``info`` has ``L``, ``norm_B``, ``z_weight``.
    """
    if not problem.loss.decomposable:
        raise NotSupportedError(f"dual extragradient needs a loss linear in the statistics (decomposable); "
                                f"{problem.loss!r} is not")
    if int(gap_every) < 1:
        raise InvalidInputError(f"gap_every must be a positive integer, got {gap_every}")
    if step is not None and not step > 0:
        raise InvalidInputError(f"step must be > 0, got {step}")
    n, lam = problem.n, problem.lam
    rng = make_rng(random_state)
    lengths = [int(np.shape(problem.theta(i, problem.model.zeros())[0])[0]) for i in range(n)]
    f0 = problem.primal(problem.model.zeros())
    beta = float(z_weight) if z_weight is not None else _default_z_weight(problem, geometry, f0)
    if not beta > 0:
        raise InvalidInputError(f"z_weight must be > 0, got {z_weight}")
    blocks = make_blocks(geometry, problem.structure, beta, max(lengths), warm_projections, projection_tol)
    norm_b = op.operator_norm(problem, power_iters, rng) * lipschitz_margin
    lip = lam + norm_b / (n * np.sqrt(beta * blocks.sigma))
    eta = float(step) if step is not None else (8.0 if backtracking else 1.0) / lip

    fbar = op.gold_mean(problem)
    dbar = float(np.mean([op.loss_vector(problem, i)[1] for i in range(n)]))
    terms = [op.loss_vector(problem, i)[0] for i in range(n)]
    centres = [blocks.centre(t) for t in terms]

    st: dict[str, Any] = {"solver": "dual_extragradient", "t": 0, "S": 0.0, "W": np.zeros(problem.n_params),
                          "s_w": np.zeros(problem.n_params), "zfeat": np.zeros(problem.n_params), "zlin": 0.0,
                          "u_w_prev": None, "eta_prev": 0.0, "eta": eta,
                          "s_z": None if memory_light else [scale(t, 0.0) for t in terms]}
    monitor = Monitor(problem, max_passes=max_passes, tol=tol, time_limit=time_limit, callback=callback,
                      progress=progress, checkpoint=checkpoint, label=f"extragradient-{geometry}")
    if resume is not None:
        saved = load_checkpoint(resume, "dual_extragradient")
        st = saved["state"]
        monitor.resume(saved["trace"])

    def one_pass(eta_t: float):
        # one dual-extrapolation iteration at step eta_t; returns candidate quantities (no commit)
        v_w = st["s_w"]  # prox-centre 0, unit weight on the w-block
        r = np.zeros_like(v_w)
        q = np.zeros_like(v_w)
        lin = 0.0
        dz = 0.0
        new_s = [] if st["s_z"] is not None else None
        for i in range(n):
            if st["s_z"] is None:  # memory-light: s_{z_i} = (A_i W + S c_i) / n
                s_i = add(op.block_theta(problem, i, st["W"] / n), terms[i], st["S"] / n)
            else:  # stored s_{z_i}, lazily advanced by the previous iterate u_w
                s_i = st["s_z"][i]
                if st["u_w_prev"] is not None:
                    s_i = add(s_i, add(op.block_theta(problem, i, st["u_w_prev"] / n), terms[i], 1.0 / n),
                              st["eta_prev"])
                new_s.append(s_i)
            v_i = blocks.lookahead(i, centres[i], s_i)
            op.add_features(problem, i, v_i, r, 1.0 / n)
            g_i = add(op.block_theta(problem, i, v_w / n), terms[i], 1.0 / n)  # -G_z(v) = (A_i v_w + c_i)/n
            u_i = blocks.step(i, v_i, s_i, scale(g_i, eta_t))
            op.add_features(problem, i, u_i, q, 1.0 / n)
            lin += inner(terms[i], u_i) / n
            dz += op.diff_sq_norm(v_i, u_i)
        u_w = v_w - eta_t * (lam * v_w + r - fbar)
        return v_w, u_w, r, q, lin, dz, new_s

    oracle_calls = 2 * n * st["t"]
    stop = False
    while not stop:
        monitor.restart()
        for _ in range(int(gap_every)):
            while True:
                v_w, u_w, r, q, lin, dz, new_s = one_pass(st["eta"])
                if not backtracking:
                    break
                dw = v_w - u_w
                lhs = (np.sum((lam * dw + r - q) ** 2) + (norm_b / n) ** 2 * float(dw @ dw) / (beta * blocks.sigma))
                rhs = float(dw @ dw) + beta * blocks.sigma * dz
                oracle_calls += 2 * n
                if st["eta"] ** 2 * lhs <= rhs * (1 + 1e-12) or st["eta"] * lip <= 1.0:
                    break
                st["eta"] *= 0.5
            eta_t = st["eta"]
            oracle_calls += 2 * n
            if new_s is not None:
                st["s_z"] = new_s
            st["s_w"] = st["s_w"] - eta_t * (lam * u_w + q - fbar)
            st["W"] = st["W"] + eta_t * u_w
            st["zfeat"] = st["zfeat"] + eta_t * q
            st["zlin"] += eta_t * lin
            st["S"] += eta_t
            st["u_w_prev"], st["eta_prev"] = u_w, eta_t
            st["t"] += 1
            if st["t"] >= max_passes:
                break
        monitor.pause()
        w_bar = st["W"] / st["S"]
        w_of_z = (fbar - st["zfeat"] / st["S"]) / lam
        dual = dbar + st["zlin"] / st["S"] - 0.5 * lam * float(w_of_z @ w_of_z)
        primal = problem.primal(w_bar)
        stop = monitor.record(w_bar, passes=st["t"], oracle_calls=oracle_calls, primal=primal, dual=dual,
                              gap=primal - dual, step=st["eta"],
                              state={"solver": "dual_extragradient", "state": st})
    monitor.close()
    info = {"stop_reason": monitor.stop_reason, "L": lip, "norm_B": norm_b, "z_weight": beta,
            "geometry": geometry, "iterations": st["t"], "step": st["eta"], "w_of_z": w_of_z}
    return Result(w_bar.copy(), monitor.trace, info)
