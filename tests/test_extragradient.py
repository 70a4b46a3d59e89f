"""Dual extragradient against duality theory and the exact cvxpy optimum (tests/_reference.py)."""

import cvxpy as cp
import numpy as np
import pytest
from _reference import exact_primal, random_chain_problem

from structopt.errors import NotSupportedError
from structopt.losses import Loss
from structopt.problem import SSVMProblem
from structopt.solvers import _eg_operator as op
from structopt.solvers.extragradient import dual_extragradient
from structopt.structures.base import flatten, unflatten


class _NonLinearLoss(Loss):
    decomposable = False

    def __call__(self, y_true, y_pred):
        return float(np.any(np.asarray(y_true) != np.asarray(y_pred)))


def test_refuses_non_decomposable_loss():
    p = random_chain_problem(0, n=3)
    q = SSVMProblem(p.model, p.X, p.Y, _NonLinearLoss(), p.lam)
    with pytest.raises(NotSupportedError, match="decomposable"):
        dual_extragradient(q, max_passes=2)


def test_power_iteration_matches_dense_svd():
    p = random_chain_problem(1, n=5, max_len=4)
    columns = []
    for i in range(p.n):  # B = [A_1^T ... A_n^T], column by column over each example's statistics
        like = op.block_theta(p, i, p.model.zeros())
        for k in range(flatten(like).size):
            e = np.zeros(flatten(like).size)
            e[k] = 1.0
            col = np.zeros(p.n_params)
            p.adjoint(i, unflatten(e, like), col)
            columns.append(col)
    dense = np.linalg.norm(np.array(columns).T, 2)
    assert abs(op.operator_norm(p, n_iter=200) - dense) < 1e-6 * dense


@pytest.mark.parametrize("geometry", ["euclidean", "entropic"])
def test_memory_light_matches_standard(geometry):
    p = random_chain_problem(2, n=6)
    a = dual_extragradient(p, geometry=geometry, max_passes=15, eval_every=5, fused=False)
    b = dual_extragradient(p, geometry=geometry, max_passes=15, eval_every=5, fused=False, memory_light=True)
    c = dual_extragradient(p, geometry=geometry, max_passes=15, eval_every=5, fused=True)
    assert np.allclose(a.w, c.w, atol=1e-9) and not a.info["fused"] and c.info["fused"]
    assert np.allclose(a.w, b.w, atol=1e-7)
    assert np.allclose([r["gap"] for r in a.trace], [r["gap"] for r in b.trace], atol=1e-7)


@pytest.mark.parametrize("geometry,centre", [("euclidean", "gold"), ("entropic", "uniform")])
def test_gap_bounds_suboptimality_and_converges(geometry, centre):
    # (the entropic gold-centred default converges too, but more slowly on this tiny problem)
    p = random_chain_problem(3, n=6, lam=1.0)
    f_star, _ = exact_primal(p)
    res = dual_extragradient(p, geometry=geometry, max_passes=1500, eval_every=50, centre=centre)
    for r in res.trace:
        assert r["dual"] <= f_star + 1e-7           # weak duality
        assert r["primal"] - f_star <= r["gap"] + 1e-7  # the gap bounds the true suboptimality
        assert r["primal"] >= f_star - 1e-7
    assert res.trace[-1]["primal"] - f_star <= 1e-3 * abs(f_star)
    # O(1/t): fitted slope of log gap against log iterations
    t = np.array([r["passes"] for r in res.trace])
    g = np.array([r["gap"] for r in res.trace])
    slope = np.polyfit(np.log(t[t >= 20]), np.log(g[t >= 20]), 1)[0]
    print(f"{geometry}: fitted gap slope {slope:.2f}, final gap {g[-1]:.2e}")
    assert slope < -0.7


@pytest.mark.parametrize("w_block", ["saddle", "exact"])
def test_backtracking_runs_and_keeps_gap_valid(w_block):
    p = random_chain_problem(4, n=5, lam=0.5)
    f_star, _ = exact_primal(p)
    res = dual_extragradient(p, max_passes=60, eval_every=20, backtracking=True, w_block=w_block)
    for r in res.trace:
        assert r["primal"] - f_star <= r["gap"] + 1e-7
        assert r["dual"] <= f_star + 1e-7
    assert res.trace[-1]["gap"] < res.trace[0]["gap"]


# ---------------------------------------------------------------------------- the paper's boxes
def _dense_saddle(p):
    """Per example: dense A_i (stats x params), c_i, d_i, the gold vertex, and the polytope."""
    blocks = []
    for i in range(p.n):
        like = op.block_theta(p, i, p.model.zeros())
        A = np.array([flatten(op.block_theta(p, i, e)) for e in np.eye(p.n_params)]).T
        c, d = op.loss_vector(p, i)
        blocks.append((A, flatten(c), d, flatten(p.gold_stats(i, like)), p.structure.polytope(like)))
    return blocks


def _operator(p, blocks, w, z):
    """G(u) of the penalized saddle point: (grad_w L, -grad_z L)."""
    n = p.n
    gw = p.lam * w + sum(A.T @ (zi - g) for (A, _, _, g, _), zi in zip(blocks, z)) / n
    gz = [-(A @ w + c) / n for (A, c, _, _, _) in blocks]
    return gw, gz


def _prox_cvxpy(poly, u, s, eta):
    """Bregman-box prox with h = 1/2||.||^2 solved as written: argmax s^T(u' - u) - (1/eta) d(u', u)."""
    z, cons = poly.cvxpy()
    cp.Problem(cp.Maximize(s @ (z - u) - cp.sum_squares(z - u) / (2 * eta)), cons).solve(solver=cp.CLARABEL)
    return np.asarray(z.value)


def test_bregman_box_with_half_square_reproduces_euclidean_box_and_solver():
    p = random_chain_problem(7, n=3, max_len=3, n_states=2, lam=0.5)
    blocks = _dense_saddle(p)
    eta, iters = 0.7, 6
    project = [lambda x, i=i: flatten(p.structure.project(unflatten(x, blocks[i][4].like), tol=1e-12))
               for i in range(p.n)]
    centre_z = [g for (_, _, _, g, _) in blocks]  # prox-centre u_hat = (0, gold vertices)
    # Euclidean box (spec section 3): v = Pi(u_hat + eta s), u = Pi(v - eta G(v)), s -= G(u)
    sw, sz = np.zeros(p.n_params), [np.zeros_like(g) for g in centre_z]
    euclid = []
    for _ in range(iters):
        vw, vz = eta * sw, [project[i](centre_z[i] + eta * sz[i]) for i in range(p.n)]
        gw, gz = _operator(p, blocks, vw, vz)
        uw, uz = vw - eta * gw, [project[i](vz[i] - eta * gz[i]) for i in range(p.n)]
        euclid.append((uw, uz))
        gw, gz = _operator(p, blocks, uw, uz)
        sw, sz = sw - gw, [a - b for a, b in zip(sz, gz)]
    # Bregman box with T_eta solved by cvxpy (W = R^d: T_eta(u, s) = u + eta s in closed form)
    sw, sz = np.zeros(p.n_params), [np.zeros_like(g) for g in centre_z]
    for k in range(iters):
        vw = eta * sw
        vz = [_prox_cvxpy(blocks[i][4], centre_z[i], sz[i], eta) for i in range(p.n)]
        gw, gz = _operator(p, blocks, vw, vz)
        uw = vw - eta * gw
        uz = [_prox_cvxpy(blocks[i][4], vz[i], -gz[i], eta) for i in range(p.n)]
        assert np.max(abs(uw - euclid[k][0])) < 5e-4  # interior-point (Clarabel) accuracy
        assert max(np.max(abs(a - b)) for a, b in zip(uz, euclid[k][1])) < 5e-4
        gw, gz = _operator(p, blocks, uw, uz)
        sw, sz = sw - gw, [a - b for a, b in zip(sz, gz)]
    # the solver (beta = 1, fixed step) outputs the uniform average of the Euclidean box's u^t
    for compiled in (False, True):
        res = dual_extragradient(p, max_passes=iters, eval_every=iters, step=eta, z_weight=1.0,
                                 backtracking=False, fused=compiled, projection_tol=1e-12)
        assert np.max(abs(res.w - np.mean([u[0] for u in euclid], axis=0))) < 1e-8
        zbar = [np.mean([u[1][i] for u in euclid], axis=0) for i in range(p.n)]
        w_of_z = sum(A.T @ (g - z) for (A, _, _, g, _), z in zip(blocks, zbar)) / (p.lam * p.n)
        dual = np.mean([c @ z + d for (_, c, d, _, _), z in zip(blocks, zbar)]) - 0.5 * p.lam * w_of_z @ w_of_z
        assert abs(res.trace[-1]["dual"] - dual) < 1e-8


def test_restricted_gap_below_rate_bound():
    # Euclidean geometry (its distance ball is what cvxpy can state exactly)
    geometry = "euclidean"
    # G_{Dw,Dz}(w_bar, z_bar) = max_{z' in Z, beta d(z_hat, z') <= Dz} L(w_bar, z')
    #                         - min_{1/2||w'||^2 <= Dw} L(w', z_bar)  <=  (Dw + Dz) / Lambda_t,
    # Lambda_t = sum of steps = t / L for the fixed step 1/L (spec section 5, corrected).
    p = random_chain_problem(8, n=4, max_len=3, n_states=2, lam=0.2)
    blocks = _dense_saddle(p)
    n = p.n
    for iters in (3, 12):
        res = dual_extragradient(p, geometry=geometry, max_passes=iters, eval_every=iters, backtracking=False,
                                 fused=False, keep_z=True, centre="gold")
        beta, lip = res.info["z_weight"], res.info["L"]
        zbar = [flatten(z) for z in res.info["z_bar"]]
        wbar = res.w
        d_w, d_z = 0.5 * float(wbar @ wbar) + 0.5, 0.5 * beta
        # inner max over z' in the polytopes intersected with the ball around the gold centre
        zs, cons = [], []
        for (*_, poly) in blocks:
            z, cz = poly.cvxpy()
            zs.append(z)
            cons += cz
        lin = sum((A @ wbar + c) @ z + d - wbar @ (A.T @ g) for (A, c, d, g, _), z in zip(blocks, zs)) / n
        cons.append(beta * 0.5 * sum(cp.sum_squares(z - g) for z, (_, _, _, g, _) in zip(zs, blocks)) <= d_z)
        upper = cp.Problem(cp.Maximize(lin), cons)
        upper.solve(solver=cp.CLARABEL)
        max_z = 0.5 * p.lam * wbar @ wbar + upper.value
        # inner min over w' in the ball: L(w', z_bar) = lam/2 ||w'||^2 + <w', gvec> + const
        gvec = sum(A.T @ (z - g) for (A, _, _, g, _), z in zip(blocks, zbar)) / n
        const = np.mean([c @ z + d for (_, c, d, _, _), z in zip(blocks, zbar)])
        radius = np.sqrt(2 * d_w)
        w_min = -gvec / p.lam if np.linalg.norm(gvec / p.lam) <= radius else -radius * gvec / np.linalg.norm(gvec)
        min_w = 0.5 * p.lam * w_min @ w_min + w_min @ gvec + const
        gap = max_z - min_w
        bound = (d_w + d_z) * lip / iters
        print(f"{geometry} t={iters}: restricted gap {gap:.4f} <= bound {bound:.4f}")
        assert -1e-6 <= gap <= bound + 1e-6

