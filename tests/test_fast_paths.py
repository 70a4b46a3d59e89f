"""Fast paths are chosen by declared capability: a user's structure that changes an oracle gets the
generic path (right answers), and a declared constraint (Chain ``allowed``) runs fused with the
same results as the generic path."""

from __future__ import annotations

import numpy as np
import pytest

import structopt as so
from structopt.solvers import bcfw, casimir_svrg, dual_extragradient, frank_wolfe, sgd, ssg, svrg
from structopt.structures.base import brute_force_topk

S = 3
ALLOWED = np.array([[True, True, False], [False, True, True], [True, False, True]])


class ForbiddingChain(so.Chain):
    """A user's chain that forbids some transitions by overriding the oracles (enumeration-based)."""

    def outputs(self, theta):
        return (y for y in super().outputs(theta) if np.all(ALLOWED[y[:-1], y[1:]]))

    def argmax(self, theta):
        return self.topk(theta, 1)[0][0]

    def topk(self, theta, k):
        outputs, scores = brute_force_topk(self, theta, k)
        return np.array(outputs), scores

    def polytope(self, theta):
        return so.Chain(S, allowed=ALLOWED).polytope(theta)

    def project(self, v):
        return self.project_qp(v)

    def marginals(self, theta):
        raise so.NotSupportedError("this test chain has no log-partition")


def _data(seed=0, n=12):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(1, 5)), 4)) for _ in range(n)]
    Y = []
    for x in X:  # feasible labels
        y = [int(rng.integers(S))]
        for _ in range(len(x) - 1):
            y.append(int(rng.choice(np.flatnonzero(ALLOWED[y[-1]]))))
        Y.append(np.array(y))
    return X, Y


def _user_problem(seed=0):
    X, Y = _data(seed)
    model = so.ChainModel(4, S)
    model.structure = ForbiddingChain(S)
    return so.SSVMProblem(model, X, Y, so.Hamming(), 0.1)


def _declared_problem(seed=0):
    X, Y = _data(seed)
    return so.SSVMProblem(so.ChainModel(4, S, allowed=ALLOWED), X, Y, so.Hamming(), 0.1)


def _true_primal(problem, w):
    # by enumeration of the feasible outputs, independent of every oracle
    total = 0.0
    for i in range(problem.n):
        theta = problem.theta(i, w)
        gold = problem.structure.score(theta, problem.Y[i])
        total += max(problem.loss(problem.Y[i], y) + problem.structure.score(theta, y) - gold
                     for y in problem.structure.enumerate(theta))
    return 0.5 * problem.lam * float(w @ w) + total / problem.n


def test_overridden_oracles_disable_the_fused_kernels():
    user = _user_problem()
    assert "argmax" not in user.structure.kernel_oracles()
    assert user.fused() is None
    assert _declared_problem().fused() is not None


@pytest.mark.parametrize("name,run", [
    ("bcfw", lambda p: bcfw(p, max_passes=3, random_state=0)),
    ("fw", lambda p: frank_wolfe(p, max_passes=3)),
    ("ssg", lambda p: ssg(p, max_passes=3, random_state=0)),
    ("sgd", lambda p: sgd(p, max_passes=3, random_state=0)),
    ("svrg", lambda p: svrg(p, mu=0.1, max_passes=3, random_state=0)),
    ("casimir", lambda p: casimir_svrg(p, max_passes=3, random_state=0)),
    ("extragradient", lambda p: dual_extragradient(p, max_passes=3)),
])
def test_every_solver_reports_the_true_primal_of_a_user_structure(name, run):
    problem = _user_problem()
    result = run(problem)
    assert not result.info.get("fused", False)
    assert result.trace[-1]["primal"] == pytest.approx(_true_primal(problem, result.w), abs=1e-9)
    for y in problem.predict(problem.X, result.w):
        assert np.all(ALLOWED[y[:-1], y[1:]])


@pytest.mark.parametrize("run", [
    lambda p, fused: bcfw(p, max_passes=3, random_state=0, fused=fused),
    lambda p, fused: frank_wolfe(p, max_passes=3, fused=fused),
    lambda p, fused: ssg(p, max_passes=3, random_state=0, fused=fused),
], ids=["bcfw", "fw", "ssg"])
def test_declared_constraints_run_fused_and_equal_the_generic_path(run):
    # the same structure both ways (a user's enumeration-based chain breaks ties differently)
    problem = _declared_problem()
    fast, generic = run(problem, True), run(problem, False)
    assert fast.info["fused"] and not generic.info["fused"]
    np.testing.assert_allclose(fast.w, generic.w, atol=1e-10)
    for a, b in zip(fast.trace, generic.trace, strict=True):
        assert a["primal"] == pytest.approx(b["primal"], abs=1e-10)
    assert fast.trace[-1]["primal"] == pytest.approx(_true_primal(problem, fast.w), abs=1e-9)


def test_extragradient_uses_an_overridden_projection():
    problem = _user_problem()
    result = dual_extragradient(problem, max_passes=4, keep_z=True)
    assert not result.info["fused"]
    forbidden = ~ALLOWED
    for z in result.info["z_bar"]:
        assert np.all(np.asarray(z.pairwise)[:, forbidden] <= 1e-7)


def test_declared_chain_oracles_agree_with_enumeration():
    from structopt.validate import check_structure

    rng = np.random.default_rng(3)
    chain = so.Chain(S, allowed=ALLOWED, allowed_start=np.array([True, False, True]))
    for T in (1, 2, 4):
        theta = so.ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S)))
        assert check_structure(chain, theta).ok
