"""Dual extragradient against duality theory and the exact cvxpy optimum (tests/_reference.py)."""

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
            op.add_features(p, i, unflatten(e, like), col)
            columns.append(col)
    dense = np.linalg.norm(np.array(columns).T, 2)
    assert abs(op.operator_norm(p, n_iter=200) - dense) < 1e-6 * dense


@pytest.mark.parametrize("geometry", ["euclidean", "entropic"])
def test_memory_light_matches_standard(geometry):
    p = random_chain_problem(2, n=6)
    a = dual_extragradient(p, geometry=geometry, max_passes=15, gap_every=5)
    b = dual_extragradient(p, geometry=geometry, max_passes=15, gap_every=5, memory_light=True)
    assert np.allclose(a.w, b.w, atol=1e-7)
    assert np.allclose([r["gap"] for r in a.trace], [r["gap"] for r in b.trace], atol=1e-7)


@pytest.mark.parametrize("geometry", ["euclidean", "entropic"])
def test_gap_bounds_suboptimality_and_converges(geometry):
    p = random_chain_problem(3, n=6, lam=1.0)
    f_star, _ = exact_primal(p)
    res = dual_extragradient(p, geometry=geometry, max_passes=1500, gap_every=50)
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


def test_backtracking_runs_and_keeps_gap_valid():
    p = random_chain_problem(4, n=5, lam=0.5)
    f_star, _ = exact_primal(p)
    res = dual_extragradient(p, max_passes=60, gap_every=20, backtracking=True)
    assert res.info["step"] * res.info["L"] <= 8.0
    for r in res.trace:
        assert r["primal"] - f_star <= r["gap"] + 1e-7
