"""SGD on smoothed or max oracles: the lazy sparse step and averages against a dense reference,
the step schedule, convergence, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
from _reference import exact_primal, random_multiclass_problem, sparse_chain_problem

from structopt.errors import InvalidInputError
from structopt.solvers.sgd import sgd


def dense_reference(p, mu, gamma0, t0, idx, averaging):
    w = np.zeros(p.n_params)
    total, weight = np.zeros_like(w), 0.0
    for t, i in enumerate(idx):
        gamma = gamma0 / (1 + np.floor(t / t0))
        g = p.max_oracle(i, w).grad if mu is None else p.smooth_oracle(i, w, mu).grad
        w = (1 - gamma * p.lam) * w - gamma * g
        omega = {"none": 0.0, "uniform": 1.0, "weighted": t + 1.0}[averaging]
        total += omega * w
        weight += omega
    return w if averaging == "none" else total / weight


@pytest.mark.parametrize("mu", [None, 0.3])
@pytest.mark.parametrize("averaging", ["none", "uniform", "weighted"])
def test_lazy_sgd_equals_dense_reference(mu, averaging):
    p = sparse_chain_problem(2, lam=0.3)
    passes = 3
    r = sgd(p, mu=mu, gamma0=0.5, t0=4, averaging=averaging, max_passes=passes, random_state=11, guard=False)
    # the solver draws the indices pass by pass (one draw per evaluation): rebuild that sequence
    rng = np.random.default_rng(11)
    idx = np.concatenate([rng.integers(0, p.n, size=p.n) for _ in range(passes)])
    ref = dense_reference(p, mu, 0.5, 4, idx, averaging)
    np.testing.assert_allclose(r.w, ref, rtol=1e-9, atol=1e-11)


def test_pegasos_like_step_that_zeroes_the_scale():
    # gamma0 * lam = 1: the first step multiplies w by 0 (the lazy scale is folded, not divided by)
    p = sparse_chain_problem(3, lam=0.5)
    r = sgd(p, gamma0=2.0, t0=1, averaging="weighted", max_passes=2, random_state=0, guard=False)
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.integers(0, p.n, size=p.n) for _ in range(2)])
    np.testing.assert_allclose(r.w, dense_reference(p, None, 2.0, 1, idx, "weighted"), rtol=1e-9, atol=1e-11)


def test_step_schedule_and_counting():
    p = random_multiclass_problem(0)
    r = sgd(p, gamma0=0.1, t0=2 * p.n, max_passes=5, random_state=0)
    for t in r.trace:
        steps = t["oracle_calls"]
        assert t["step"] == pytest.approx(0.1 / (1 + np.floor(steps / (2 * p.n))))
        assert t["oracle_calls_made"] == steps and t["full_grad_passes"] == 0
        assert t["passes"] == pytest.approx(steps / p.n)
    assert r.trace[-1]["primal"] == pytest.approx(p.primal(r.w))


def test_approaches_optimum():
    p = random_multiclass_problem(1, lam=0.3)
    f_star, _ = exact_primal(p)
    r = sgd(p, gamma0=0.3, t0=p.n, max_passes=150, random_state=0)
    assert r.trace[-1]["primal"] < f_star * 1.01
    assert r.trace[-1]["primal"] >= f_star - 1e-9


def test_checkpoint_resume(tmp_path):
    p = random_multiclass_problem(2)
    full = sgd(p, mu=0.2, max_passes=6, random_state=5)
    ck = tmp_path / "sgd.pkl"
    sgd(p, mu=0.2, max_passes=3, random_state=5, checkpoint=ck)
    resumed = sgd(p, mu=0.2, max_passes=6, resume=ck)
    np.testing.assert_allclose(resumed.w, full.w, rtol=1e-12, atol=1e-14)
    assert [t["primal"] for t in resumed.trace] == pytest.approx([t["primal"] for t in full.trace])


def test_bad_arguments():
    p = random_multiclass_problem(0)
    with pytest.raises(InvalidInputError):
        sgd(p, averaging="last")
    with pytest.raises(InvalidInputError):
        sgd(p, mu=-0.1)
    with pytest.raises(InvalidInputError):
        sgd(p, gamma0=0.0)
