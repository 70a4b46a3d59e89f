"""Non-linear score maps: JVP/VJP by finite differences and adjointness, the objective's gradients,
the linearised subproblem against its definition (enumeration, exact cvxpy optimum), bad input."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import BoxLoss, Hamming, MatchingHamming
from structopt.models.chain import ChainModel
from structopt.models.nonlinear import (
    NonlinearBoxModel,
    NonlinearChainModel,
    NonlinearMatchingModel,
)
from structopt.nonconvex import LinearisedProblem, NonconvexProblem
from structopt.smoothing import l2_smoothed_max_sorted
from structopt.solvers.bcfw import bcfw
from structopt.solvers.svrg import svrg
from structopt.structures.base import flatten


def chain_problem(seed: int, n: int = 5, F: int = 4, H: int = 3, S: int = 3, max_len: int = 3,
                  activation: str = "tanh", lam: float = 0.1, sparse: bool = False) -> NonconvexProblem:
    """A tiny planted chain problem: labels from a random network plus noise."""
    rng = np.random.default_rng(seed)
    model = NonlinearChainModel(F, H, S, activation=activation)
    w_true = 2.0 * model.initial_weights(rng)
    X, Y = [], []
    for _ in range(n):
        x = rng.normal(size=(int(rng.integers(1, max_len + 1)), F))
        theta = model.potentials(x, w_true)
        noisy = type(theta)(theta.unary + 0.5 * rng.normal(size=theta.unary.shape), theta.pairwise)
        X.append(sp.csr_matrix(x) if sparse else x)
        Y.append(model.structure.argmax(noisy))
    return NonconvexProblem(model, X, Y, Hamming(), lam)


def matching_problem(seed: int, n: int = 4, F: int = 3, H: int = 3, size: int = 3) -> NonconvexProblem:
    rng = np.random.default_rng(seed)
    model = NonlinearMatchingModel(F, H)
    X = [rng.normal(size=(size, size, F)) for _ in range(n)]
    Y = [rng.permutation(size) for _ in range(n)]
    return NonconvexProblem(model, X, Y, MatchingHamming(), 0.1)


def box_problem(seed: int, n: int = 4, F: int = 3, H: int = 3, size: int = 3) -> NonconvexProblem:
    """Boxes with the 1 - IoU loss (not decomposable: decoding goes through the loss hooks)."""
    rng = np.random.default_rng(seed)
    model = NonlinearBoxModel(F, H)
    w_true = 2.0 * model.initial_weights(rng)
    X = [rng.normal(size=(size, size + 1, F)) for _ in range(n)]
    Y = [model.structure.argmax(model.potentials(x + 0.3 * rng.normal(size=x.shape), w_true)) for x in X]
    return NonconvexProblem(model, X, Y, BoxLoss(), 0.1)


def central_difference(f, w: np.ndarray, dw: np.ndarray, h: float = 1e-6) -> np.ndarray:
    return (f(w + h * dw) - f(w - h * dw)) / (2.0 * h)


@pytest.mark.parametrize("activation", ["tanh", "elu"])
@pytest.mark.parametrize("sparse", [False, True])
def test_chain_jvp_matches_finite_differences(activation, sparse):
    p = chain_problem(0, activation=activation, sparse=sparse)
    rng = np.random.default_rng(1)
    w, dw = p.model.initial_weights(rng), rng.normal(size=p.n_params)
    for x in p.X:
        fd = central_difference(lambda v, x=x: flatten(p.model.potentials(x, v)), w, dw)
        np.testing.assert_allclose(flatten(p.model.jvp(x, w, dw)), fd, atol=1e-6)


@pytest.mark.parametrize("make", [matching_problem, box_problem])
def test_cell_network_jvp_matches_finite_differences(make):
    p = make(0)
    rng = np.random.default_rng(2)
    w, dw = p.model.initial_weights(rng), rng.normal(size=p.n_params)
    for x in p.X:
        fd = central_difference(lambda v, x=x: flatten(p.model.potentials(x, v)), w, dw)
        np.testing.assert_allclose(flatten(p.model.jvp(x, w, dw)), fd, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: chain_problem(3), lambda: chain_problem(3, sparse=True),
                                  lambda: matching_problem(3), lambda: box_problem(3)])
def test_vjp_is_the_adjoint_of_jvp(make):
    p = make()
    rng = np.random.default_rng(4)
    w, dw = p.model.initial_weights(rng), rng.normal(size=p.n_params)
    for x in p.X:
        theta = p.model.potentials(x, w)
        mu = type(theta)(*(rng.normal(size=np.shape(f)) for f in theta))
        lhs = float(flatten(p.model.jvp(x, w, dw)) @ flatten(mu))
        assert lhs == pytest.approx(float(dw @ p.model.vjp(x, w, mu)), rel=1e-10, abs=1e-10)


def test_sparse_and_dense_inputs_agree_and_scaled_tangent_is_the_scaled_point():
    dense, sparse = chain_problem(5), chain_problem(5, sparse=True)
    model = dense.model
    rng = np.random.default_rng(5)
    w = model.initial_weights(rng)
    for xd, xs in zip(dense.X, sparse.X, strict=True):
        theta = model.potentials(xd, w)
        np.testing.assert_allclose(flatten(model.potentials(xs, w)), flatten(theta), atol=1e-12)
        np.testing.assert_allclose(model.vjp(xs, w, theta), model.vjp(xd, w, theta), atol=1e-12)
        scaled = model.tangent_potentials(model.tangent(xd, w, scale=0.3))
        np.testing.assert_allclose(flatten(scaled), flatten(model.potentials(xd, 0.3 * w)), atol=1e-12)


def test_objective_gradients_match_finite_differences():
    p = chain_problem(6, n=4)
    rng = np.random.default_rng(6)
    w, dw = p.model.initial_weights(rng), rng.normal(size=p.n_params)
    for i in range(p.n):
        # the entropy-smoothed hinge is smooth everywhere
        fd = central_difference(lambda v, i=i: np.array([p.smooth_oracle(i, v, 0.5, "entropy").value]), w, dw)[0]
        assert float(p.smooth_oracle(i, w, 0.5, "entropy").grad @ dw) == pytest.approx(fd, rel=1e-5, abs=1e-6)
        # the hinge is differentiable where its maximiser is unique (a random point, a tiny step)
        fd = central_difference(lambda v, i=i: np.array([p.max_oracle(i, v).value]), w, dw, h=1e-7)[0]
        assert float(p.max_oracle(i, w).grad @ dw) == pytest.approx(fd, rel=1e-5, abs=1e-6)


def enumerated_model_value(p: NonconvexProblem, w_k: np.ndarray, eta: float, w: np.ndarray) -> float:
    """``F_eta(w; w_k)`` of (61) straight from its definition, by enumerating every output."""
    total = 0.0
    for x, y_i in zip(p.X, p.Y, strict=True):
        theta = p.model.potentials(x, w_k)
        step = p.model.jvp(x, w_k, w - w_k)
        lin = type(theta)(*(a + b for a, b in zip(theta, step, strict=True)))
        total += max(p.loss(y_i, y) + p.structure.score(lin, y) - p.structure.score(lin, y_i)
                     for y in p.structure.enumerate(theta))
    return total / p.n + 0.5 * p.lam * float(w @ w) + 0.5 / eta * float((w - w_k) @ (w - w_k))


@pytest.mark.parametrize("make", [lambda: chain_problem(7), lambda: matching_problem(7), lambda: box_problem(7)])
def test_linearised_problem_is_the_prox_linear_model(make):
    p = make()
    rng = np.random.default_rng(7)
    w_k = p.model.initial_weights(rng)
    sub = p.linearize(w_k, 0.5)
    assert sub.model is p.model
    # its potentials are the Jacobian at w_k: theta_i(u) = J_i u
    u = rng.normal(size=p.n_params)
    for i, x in enumerate(p.X[:3]):
        for got, want in zip(sub.theta(i, u), p.model.jvp(x, w_k, u), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert sub.lam == pytest.approx(p.lam + 2.0)
    # exact at the linearisation point
    assert sub.model_value(w_k) == pytest.approx(p.primal(w_k), rel=1e-12)
    for _ in range(3):
        w = w_k + rng.normal(size=p.n_params)
        assert sub.model_value(w) == pytest.approx(enumerated_model_value(p, w_k, 0.5, w), rel=1e-10)
        # oracles of the subproblem see the offsets: the max oracle's value is the hinge, its
        # gradient the linearised subgradient J^T (mu(y*) - mu(y_i))
        u = sub.variable(w)
        for i in range(p.n):
            theta = sub.theta(i, u)
            lin = type(theta)(*(a + b for a, b in zip(theta, sub.offsets[i], strict=True)))
            psi = sorted((p.loss(p.Y[i], y) + p.structure.score(lin, y) - p.structure.score(lin, p.Y[i])
                          for y in p.structure.enumerate(theta)), reverse=True)
            _, values = sub.augmented_topk(i, theta, 3)
            np.testing.assert_allclose(np.asarray(values) - p.structure.score(theta, p.Y[i]), psi[:3], atol=1e-10)
            for kind in ("topk", "entropy"):
                if kind == "entropy" and isinstance(p.model, NonlinearMatchingModel):
                    continue  # matchings have no marginals
                mu = 0.7
                smooth = sub.smooth_stats(i, theta, mu, kind, k=50)  # k above |Y|: exact l2 smoothing
                assert smooth.value == pytest.approx(
                    mu * np.log(np.sum(np.exp(np.array(psi) / mu))) if kind == "entropy"
                    else l2_smoothed_max_sorted(np.array(psi), mu)[0], rel=1e-9)
            res = sub.max_oracle(i, u)
            assert res.value == pytest.approx(sub.hinge_losses(u)[i])
            lin_grad = p.model.vjp(p.X[i], w_k, p.model.reduce_stats(
                type(sub.offsets[i])(*(a - b for a, b in zip(p.structure.stats(res.y, sub.offsets[i]),
                                                              p.structure.stats(p.Y[i], sub.offsets[i]),
                                                              strict=True)))))
            np.testing.assert_allclose(res.grad, lin_grad, atol=1e-10)


def test_linearisation_agrees_to_second_order():
    # |F(w_k + t z) - F(w_k + t z; w_k)| <= (L/2) t^2 ||z||^2 (Lemma 34, with eta = inf): the ratio
    # to t^2 stays bounded as t -> 0 (a wrong offset or Jacobian leaves an O(t) or O(1) error)
    p = chain_problem(8, n=6)
    rng = np.random.default_rng(8)
    w_k, z = p.model.initial_weights(rng), rng.normal(size=p.n_params)
    sub = p.linearize(w_k, 1e12)  # the prox term vanishes
    ratios = []
    for t in (1e-1, 1e-2, 1e-3, 1e-4):
        w = w_k + t * z
        linear_part = sub.model_value(w) - 0.5 / sub.eta * t * t * float(z @ z)
        ratios.append(abs(p.primal(w) - linear_part) / t ** 2)
    assert max(ratios[1:]) <= 2.0 * ratios[0] + 1e-6


def exact_subproblem(sub: LinearisedProblem) -> float:
    """``min_u primal(u)`` of a linearised subproblem by cvxpy over enumerated outputs."""
    rows, owner, offsets = [], [], []
    for i in range(sub.n):
        y_i, like = sub.Y[i], sub.offsets[i]
        gold = sub.features(i, sub.stats(y_i, like))
        for y in sub.structure.enumerate(like):
            rows.append(sub.features(i, sub.stats(y, like)) - gold)
            owner.append(i)
            offsets.append(sub.loss(y_i, y) + sub.structure.score(like, y) - sub.structure.score(like, y_i))
    u, xi = cp.Variable(sub.n_params), cp.Variable(sub.n)
    E = np.zeros((len(rows), sub.n))
    E[np.arange(len(rows)), owner] = 1.0
    problem = cp.Problem(cp.Minimize(0.5 * sub.lam * cp.sum_squares(u) + cp.sum(xi) / sub.n),
                         [E @ xi >= np.array(offsets) + np.array(rows) @ u])
    problem.solve(solver=cp.CLARABEL)
    return sub.primal(np.asarray(u.value))


def test_bcfw_certifies_the_linearised_subproblem():
    # BCFW's dual uses Decoded.loss, the affine part of the augmented score: its gap is a certificate
    p = chain_problem(9, n=4, max_len=2)
    sub = p.linearize(p.model.initial_weights(9), 1.0)
    res = bcfw(sub, tol=1e-3, max_passes=500, random_state=0)
    last, best = res.trace[-1], exact_subproblem(sub)
    assert last["gap"] <= 1e-3
    assert best - 1e-7 <= last["primal"] <= best + last["gap"] + 1e-7
    assert last["dual"] <= best + 1e-7


def test_bad_input_is_refused():
    with pytest.raises(InvalidInputError, match="n_hidden"):
        NonlinearChainModel(3, 0, 2)
    with pytest.raises(InvalidInputError, match="activation"):
        NonlinearChainModel(3, 2, 2, activation="relu")
    with pytest.raises(InvalidInputError, match="NonlinearModel"):
        NonconvexProblem(ChainModel(3, 2), [np.zeros((2, 3))], [np.zeros(2, dtype=int)], Hamming(), 0.1)
    p = chain_problem(10)
    with pytest.raises(InvalidInputError, match="eta"):
        p.linearize(p.model.zeros(), 0.0)
    with pytest.raises(InvalidInputError, match="w_k"):
        p.linearize(np.zeros(3), 1.0)
    with pytest.raises(InvalidInputError, match="example 0"):
        NonconvexProblem(p.model, [np.zeros((2, 5))], [np.zeros(2, dtype=int)], Hamming(), 0.1)
    with pytest.raises(NotSupportedError, match="predict"):
        p.linearize(p.model.zeros(), 1.0).predict(p.X, p.model.zeros())
    class Constrained(NonlinearChainModel):
        nonnegative_blocks = ("pairwise",)
    with pytest.raises(NotSupportedError, match="nonnegative_blocks"):
        NonconvexProblem(Constrained(4, 3, 3), p.X, p.Y, Hamming(), 0.1)
    # a convex solver stops at its first adjoint with the reason
    with pytest.raises(NotSupportedError, match="not linear"):
        svrg(p, mu=1.0, L=1.0, max_passes=1)


@pytest.mark.parametrize("make", [lambda: chain_problem(19), lambda: chain_problem(19, sparse=True),
                                  lambda: matching_problem(19), lambda: box_problem(19)])
def test_linearised_features_sqnorm_matches_the_dense_adjoint(make):
    p = make()
    rng = np.random.default_rng(19)
    w = p.model.initial_weights(rng)
    sub = p.linearize(w, 1.0)
    for i, x in enumerate(p.X):
        theta = p.model.potentials(x, w)
        mu = type(theta)(*(rng.normal(size=np.shape(f)) for f in theta))
        g = sub.features(i, mu)
        np.testing.assert_allclose(g, p.model.vjp(x, w, mu), rtol=1e-12, atol=1e-12)
        assert sub.adjoint_sqnorm(i, mu) == pytest.approx(float(g @ g), rel=1e-10)


@pytest.mark.parametrize("executor", ["processes", "dask"])
def test_parallel_executors_refuse_a_linearised_subproblem_saying_why(executor):
    # workers rebuild problems from their pieces, which would lose the linearisation
    p = chain_problem(9, n=4, max_len=2)
    sub = p.linearize(p.model.initial_weights(9), 1.0)
    with pytest.raises(NotSupportedError, match="parallel executors cannot run"):
        bcfw(sub, max_passes=1, executor=executor, n_workers=1)
