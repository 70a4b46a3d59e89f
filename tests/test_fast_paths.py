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


# --------------------------------------------------------------------------- smoothed passes (SVRG, Casimir)
def _smooth_problems():
    from _reference import random_chain_problem, sparse_chain_problem
    return {"dense": random_chain_problem(0), "sparse": sparse_chain_problem(1), "declared": _declared_problem(2)}


@pytest.mark.parametrize("kind", ["topk", "entropy"])
@pytest.mark.parametrize("name", ["dense", "sparse", "declared"])
@pytest.mark.parametrize("solver", [svrg, casimir_svrg])
def test_fused_smoothed_passes_equal_the_generic_path(solver, name, kind):
    problem = _smooth_problems()[name]
    if kind == "entropy" and name == "declared":  # the kernels' marginals serve unconstrained chains only
        with pytest.raises(so.NotSupportedError, match="marginals"):
            solver(problem, kind=kind, max_passes=1, fused=True)
        return
    generic = solver(problem, kind=kind, k=3, max_passes=12, random_state=1, fused=False)
    fused = solver(problem, kind=kind, k=3, max_passes=12, random_state=1, fused=True)
    np.testing.assert_allclose(fused.w, generic.w, rtol=0, atol=1e-10)
    assert len(fused.trace) == len(generic.trace)
    for a, b in zip(fused.trace, generic.trace, strict=True):
        assert a["primal"] == pytest.approx(b["primal"], abs=1e-10)


@pytest.mark.parametrize("kind", ["topk", "entropy"])
@pytest.mark.parametrize("lazy", [True, False])
def test_fused_epoch_and_sgd_pass_equal_the_generic_ones(kind, lazy):
    # lazy=False: steps rho = 0 (gamma = 1/lam), which fold the scale into v at every step
    from structopt.solvers._smooth import Counters, sgd_pass, smooth_view
    from structopt.solvers.svrg import svrg_epoch
    problem = _smooth_problems()["sparse"]
    view = smooth_view(problem, True, kind)
    w0 = np.random.default_rng(3).normal(size=problem.n_params)
    gamma = 0.05 if lazy else 1.0 / problem.lam
    z = np.random.default_rng(4).normal(size=problem.n_params)
    for v in (None, view):
        rng = np.random.default_rng(5)
        counters = Counters()
        w_sgd = sgd_pass(problem, w0, gamma=gamma, mu=0.3, kind=kind, k=4, rng=rng, counters=counters, view=v)
        w_svrg, _ = svrg_epoch(problem, w0, mu=0.3, kind=kind, k=4, gamma=gamma, rng=rng, counters=counters,
                               kappa=0.2, z=z, view=v)
        if v is None:
            reference = (w_sgd, w_svrg, counters)
        else:
            np.testing.assert_allclose(w_sgd, reference[0], rtol=0, atol=1e-10)
            np.testing.assert_allclose(w_svrg, reference[1], rtol=0, atol=1e-10)
            assert counters == reference[2]


def test_fused_snapshot_equals_the_batch_pass():
    from structopt.batch import smooth_snapshot
    from structopt.potentials import flatten
    problem = _smooth_problems()["dense"]
    view = problem.fused()
    w = np.random.default_rng(0).normal(size=problem.n_params)
    for kind in ("topk", "entropy"):
        diffs, grad, value = smooth_snapshot(problem, w, 0.4, kind, 3, problem.n)
        f_diffs, f_grad, f_value = view.smooth_snapshot(w, 0.4, kind, 3)
        np.testing.assert_allclose(f_diffs, np.concatenate([flatten(d) for d in diffs]), atol=1e-12)
        np.testing.assert_allclose(f_grad, grad, atol=1e-12)
        assert f_value == pytest.approx(value, abs=1e-12)
        assert view.smooth_oracle_only(np.arange(problem.n), w, 0.4, kind, 3) == pytest.approx(value * problem.n)


def test_overridden_topk_takes_the_generic_smoothed_path():
    problem = _user_problem()
    with pytest.raises(so.NotSupportedError):
        svrg(problem, max_passes=1, fused=True)
    assert svrg(problem, max_passes=2, random_state=0).trace[-1]["primal"] > 0
