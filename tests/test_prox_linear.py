"""prox_linear and sgd_nonconvex: descent per prox-linear step, the upper model at the iterates,
Line 4's acceptance, every inner solver and structure, budget/determinism/resume, option errors."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from test_nonlinear import box_problem, chain_problem, matching_problem

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.solvers import get_solver
from structopt.solvers.prox_linear import prox_linear
from structopt.solvers.sgd_nonconvex import sgd_nonconvex, step_size
from structopt.structures.base import add


@pytest.mark.parametrize("seed", range(3))
def test_each_step_decreases_the_objective_with_certified_inner_solves(seed):
    # Thm 35's chain with (62) certified by BCFW's duality gap g_k (it aims at eps_k = eps0 / k
    # within inner_passes) and eta small enough for the upper model (eta <= 1/L):
    # F(w^_k) <= F_eta(w^_k; w_{k-1}) <= min F_eta + g_k <= F_eta(w_{k-1}; w_{k-1}) + g_k = F(w_{k-1}) + g_k
    p = chain_problem(seed, n=6)
    res = prox_linear(p, inner="bcfw", eta=0.3, eps0=1e-2, inner_passes=100, max_passes=400, accept="always",
                      random_state=0)
    steps = res.trace[1:]
    assert len(steps) >= 3
    for before, step in pairwise(res.trace):
        certified = step["inner_gap"]  # F_eta(w^_k) - min F_eta <= the reported iterate's gap
        assert step["candidate_primal"] <= step["model_value"] + 1e-9          # upper model
        assert step["model_value"] <= before["primal"] + certified + 1e-9      # inexact minimisation
        assert step["candidate_primal"] <= before["primal"] + certified + 1e-9
    assert res.trace[-1]["primal"] < 0.8 * res.trace[0]["primal"]


@pytest.mark.parametrize("inner", ["casimir", "svrg", "sgd"])
def test_fixed_budget_inner_solvers_decrease_the_objective_monotonically(inner):
    p = chain_problem(11, n=8)
    res = prox_linear(p, inner=inner, eta=1.0, inner_passes=4, max_passes=16, random_state=0)
    primal = [e["primal"] for e in res.trace]
    for prev, step in pairwise(res.trace):  # Line 4: a step is taken iff it does not increase F
        assert step["accepted"] == (step["candidate_primal"] <= prev["primal"])
        assert step["primal"] == (step["candidate_primal"] if step["accepted"] else prev["primal"])
    assert primal[-1] < 0.8 * primal[0]
    assert res.trace[-1]["passes"] >= 16 - 1e-9
    assert [e["mu"] for e in res.trace[1:]] == pytest.approx([1.0 / k for k in range(1, len(primal))])


def test_matching_structure_with_casimir():
    p = matching_problem(12, n=6)
    res = prox_linear(p, inner="casimir", eta=1.0, inner_passes=4, max_passes=12, random_state=0,
                      inner_options={"iterate": "last", "warm_start": "prev-iterate"})
    assert res.trace[-1]["primal"] < res.trace[0]["primal"]


@pytest.mark.parametrize("inner", ["casimir", "bcfw"])
def test_boxes_with_the_iou_loss(inner):
    # a loss that is not decomposable: the offsets go through the loss hooks
    p = box_problem(20, n=6)
    res = prox_linear(p, inner=inner, eta=1.0, inner_passes=4, max_passes=12, random_state=0)
    assert res.trace[-1]["primal"] < res.trace[0]["primal"]


def test_entropy_smoothing_and_constant_schedule():
    p = chain_problem(13, n=6)
    res = prox_linear(p, inner="svrg", kind="entropy", smoothing="constant", mu=0.5, inner_passes=4, max_passes=8,
                      random_state=0)
    assert {e["mu"] for e in res.trace[1:]} == {0.5}
    assert res.trace[-1]["primal"] < res.trace[0]["primal"]


def test_determinism_budget_and_resume(tmp_path):
    p = chain_problem(14, n=6)
    full = prox_linear(p, inner="svrg", inner_passes=2, max_passes=8, random_state=3)
    again = prox_linear(p, inner="svrg", inner_passes=2, max_passes=8, random_state=3)
    assert [e["primal"] for e in full.trace] == [e["primal"] for e in again.trace]
    assert full.trace[-1]["passes"] == pytest.approx(8.0)
    path = tmp_path / "pl.ckpt"
    prox_linear(p, inner="svrg", inner_passes=2, max_passes=4, random_state=3, checkpoint=path)
    resumed = prox_linear(p, inner="svrg", inner_passes=2, max_passes=8, resume=path)
    np.testing.assert_allclose(resumed.w, full.w, atol=1e-12)
    assert [e["primal"] for e in resumed.trace] == pytest.approx([e["primal"] for e in full.trace])
    with pytest.raises(InvalidInputError, match="differ"):
        prox_linear(p, inner="svrg", eta=2.0, inner_passes=2, max_passes=8, resume=path)


def test_bad_options_are_refused():
    p = chain_problem(15)
    with pytest.raises(InvalidInputError, match="inner"):
        prox_linear(p, inner="bfgs")
    with pytest.raises(InvalidInputError, match="eta"):
        prox_linear(p, eta=0.0)
    with pytest.raises(InvalidInputError, match="inner_passes"):
        prox_linear(p, inner_passes=-1)
    with pytest.raises(InvalidInputError, match="eps0"):
        prox_linear(p, inner="casimir", eps0=0.1)
    with pytest.raises(InvalidInputError, match="w0"):
        prox_linear(p, w0=np.zeros(3))
    with pytest.raises(InvalidInputError, match="unknown option"):
        prox_linear(p, step=1.0)
    with pytest.raises(InvalidInputError, match="inner_options may not set max_passes"):
        prox_linear(p, inner_options={"max_passes": 3})
    with pytest.raises(InvalidInputError, match="iterate"):  # the inner solver validates the rest
        prox_linear(p, inner="svrg", inner_options={"iterate": "median"}, max_passes=1)
    with pytest.raises(NotSupportedError, match="duality gap"):
        prox_linear(p, tol=0.1)
    with pytest.raises(InvalidInputError, match="schedule"):
        sgd_nonconvex(p, schedule="cosine")
    from _reference import random_chain_problem
    with pytest.raises(InvalidInputError, match="NonconvexProblem"):
        prox_linear(random_chain_problem(0))
    with pytest.raises(InvalidInputError, match="NonconvexProblem"):
        sgd_nonconvex(random_chain_problem(0))
    assert get_solver("prox_linear") is prox_linear and get_solver("sgd_nonconvex") is sgd_nonconvex


def test_sgd_nonconvex_lazy_steps_equal_dense_steps():
    p = chain_problem(16, n=5, sparse=True)
    w0 = p.model.initial_weights(0)
    res = sgd_nonconvex(p, schedule="sqrt", gamma0=0.3, max_passes=2, w0=w0, random_state=7)
    rng, w = np.random.default_rng(7), w0.copy()
    for t, i in enumerate(rng.integers(0, p.n, size=p.n), start=1):  # eval_every = 1: one draw per pass
        gamma = 0.3 / np.sqrt(t)
        w = w - gamma * (p.max_oracle(int(i), w).grad + p.lam * w)
    for t, i in enumerate(rng.integers(0, p.n, size=p.n), start=p.n + 1):
        gamma = 0.3 / np.sqrt(t)
        w = w - gamma * (p.max_oracle(int(i), w).grad + p.lam * w)
    np.testing.assert_allclose(res.w, w, atol=1e-10)
    assert res.trace[-1]["oracle_calls"] == 2 * p.n


@pytest.mark.parametrize("schedule", ["const", "sqrt", "linear"])
def test_sgd_nonconvex_decreases_the_objective(schedule):
    p = chain_problem(17, n=10)
    res = sgd_nonconvex(p, schedule=schedule, gamma0=0.2, max_passes=10, eval_every=5, random_state=0)
    assert res.trace[-1]["primal"] < res.trace[0]["primal"]
    assert step_size(0.2, 4, schedule) == pytest.approx({"const": 0.2, "sqrt": 0.1, "linear": 0.05}[schedule])


def test_subgradient_is_the_gradient_through_the_jacobian():
    # what both methods move along: J_i(w)^T (mu(y*) - mu(y_i)), checked against the linearised
    # problem's adjoint at the same point
    p = chain_problem(18, n=3)
    w = p.model.initial_weights(1)
    sub = p.linearize(w, 1.0)
    for i in range(p.n):
        res = p.max_oracle(i, w)
        theta = p.theta(i, w)
        diff = p.model.reduce_stats(add(p.structure.stats(res.y, theta), p.gold_stats(i, theta), -1.0))
        np.testing.assert_allclose(res.grad, sub.features(i, diff), atol=1e-12)
