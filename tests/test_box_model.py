"""BoxModel, SSVMProblem with BoxLoss (oracles vs enumeration) and every solver on a box problem."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.solvers import get_solver


def _boxes(H, W):
    return [(t, l, b, r) for t, b in itertools.combinations(range(H + 1), 2)
            for l, r in itertools.combinations(range(W + 1), 2)]


def _box_problem(n=24, F=5, lam=0.05, seed=0, noise=0.0):
    rng = np.random.default_rng(seed)
    model = so.BoxModel(F)
    w_true = rng.normal(size=F)
    X, Y = [], []
    for _ in range(n):
        H, W = rng.integers(3, 7, size=2)
        x = rng.normal(size=(H, W, F))
        X.append(x)
        Y.append(model.structure.argmax(model.potentials(x + noise * rng.normal(size=x.shape), w_true)))
    return so.SSVMProblem(model, X, Y, so.BoxLoss(), lam=lam)


def test_model_adjoint_and_sqnorm():
    rng = np.random.default_rng(0)
    model = so.BoxModel(4)
    x, w = rng.normal(size=(5, 3, 4)), rng.normal(size=4)
    mu = so.BoxPotentials(rng.normal(size=(5, 3)))
    theta = model.potentials(x, w)
    np.testing.assert_allclose(theta.cells, np.einsum("hwf,f->hw", x, w))
    g = model.features(x, mu)
    assert float(g @ w) == pytest.approx(float(np.sum(theta.cells * mu.cells)))
    assert model.features_sqnorm(x, mu) == pytest.approx(float(g @ g))
    assert model.unpack(w)["cell"].shape == (4,) and model.n_params == 4
    box = (1, 0, 4, 2)
    np.testing.assert_allclose(model.joint_feature(x, box), x[1:4, 0:2].sum(axis=(0, 1)))
    assert model.reduce_stats(mu) is mu


def test_model_bad_input():
    model = so.BoxModel(3)
    with pytest.raises(InvalidInputError, match="n_features"):
        so.BoxModel(0)
    for bad in (np.zeros((4, 3)), np.zeros((2, 2, 4)), np.zeros((0, 2, 3))):
        with pytest.raises(InvalidInputError, match="example 4"):
            model.validate_input(bad, 4)
    with pytest.raises(InvalidInputError, match="example 1: box input contains NaN"):
        so.SSVMProblem(model, [np.zeros((2, 2, 3)), np.full((2, 2, 3), np.nan)], [(0, 0, 1, 1)] * 2, so.BoxLoss(), 0.1)
    with pytest.raises(InvalidInputError, match=r"example 1: box .* does not fit"):
        so.SSVMProblem(model, [np.zeros((2, 2, 3))] * 2, [(0, 0, 1, 1), (0, 0, 3, 1)], so.BoxLoss(), 0.1)
    with pytest.raises(InvalidInputError, match="do not match"):
        model.features(np.zeros((2, 2, 3)), so.BoxPotentials(np.zeros((3, 2))))


def test_problem_oracles_match_enumeration(ref):
    problem = _box_problem(n=12, seed=3)
    rng = np.random.default_rng(1)
    loss = so.BoxLoss()
    for _ in range(3):
        w = rng.normal(size=problem.n_params)
        for i in range(problem.n):
            x, gold = problem.X[i], problem.Y[i]
            cells = problem.model.potentials(x, w).cells
            boxes = _boxes(*cells.shape)
            gold_score = cells[gold[0]:gold[2], gold[1]:gold[3]].sum()
            psi = np.array([loss(gold, y) + cells[y[0]:y[2], y[1]:y[3]].sum() - gold_score for y in boxes])
            feats = np.array([problem.model.joint_feature(x, y) - problem.model.joint_feature(x, gold) for y in boxes])
            res = problem.max_oracle(i, w)
            assert res.value == pytest.approx(psi.max(), abs=1e-9)
            np.testing.assert_allclose(res.grad, feats[boxes.index(res.y)])
            mu = float(rng.uniform(0.1, 2.0))
            top = problem.smooth_oracle(i, w, mu, kind="topk", k=5)
            order = np.argsort(-psi, kind="stable")[:5]
            value, _ = ref.l2_max(psi[order], mu)
            assert top.value == pytest.approx(value, abs=1e-8)
            ent = problem.smooth_oracle(i, w, mu, kind="entropy")
            value, p = ref.entropy_max(psi, mu)
            assert ent.value == pytest.approx(value, abs=1e-8)
            np.testing.assert_allclose(ent.grad, p @ feats, atol=1e-8)
            assert ent.loss == pytest.approx(float(p @ [loss(gold, y) for y in boxes]), abs=1e-10)


@pytest.mark.parametrize("name", ["bcfw", "fw", "ssg", "sgd", "svrg", "casimir"])
def test_solvers_run_on_boxes(name):
    problem = _box_problem()
    start = problem.primal(problem.model.zeros())
    options = {"max_passes": 30 if name == "ssg" else 8}
    if name != "fw":
        options["random_state"] = 0
    result = get_solver(name)(problem, **options)
    last = result.trace[-1]
    assert np.isfinite(last["primal"]) and last["primal"] == pytest.approx(problem.primal(result.w))
    if name == "fw":  # batch FW: the dual rises monotonically under line search, the primal need not
        duals = [r["dual"] for r in result.trace]
        assert np.all(np.diff(duals) >= -1e-12) and duals[-1] > duals[0]
    else:
        assert last["primal"] < start, (name, start, last)
    if "gap" in last:
        assert last["gap"] >= -1e-9
        assert last["primal"] - last["dual"] == pytest.approx(last["gap"], abs=1e-9)


def test_sgd_without_smoothing_uses_the_iou_branch_and_bound():
    problem = _box_problem()
    result = get_solver("sgd")(problem, mu=None, max_passes=5, random_state=0)
    assert result.trace[-1]["primal"] < problem.primal(problem.model.zeros())


def test_extragradient_refuses_box_loss():
    with pytest.raises(NotSupportedError, match="decomposable"):
        get_solver("extragradient")(_box_problem(n=4), max_passes=1)


@pytest.mark.parametrize("name", ["svrg", "casimir_svrg", "sgd"])
def test_guard_rejects_epochs_that_raise_the_primal(name, tmp_path):
    # far too long steps, as the local curvature estimate gives on grids and boxes
    problem = _box_problem(n=20, F=6, lam=0.01, seed=2, noise=0.5)
    solver = get_solver(name)

    def solve(*args, **kwargs):
        if name == "sgd":
            kwargs["gamma0"] = 1.0 / (kwargs.pop("L") + problem.lam)
        return solver(*args, **kwargs)

    wild = solve(problem, L=1e-2, max_passes=20, random_state=0, guard=False)
    start = wild.trace[0]["primal"]
    assert max(r["primal"] for r in wild.trace) > 1.5 * start  # the premise: unguarded, it blows up
    guarded = solve(problem, L=1e-2, max_passes=20, random_state=0)
    primals = [r["primal"] for r in guarded.trace]
    assert any("rejected" in r for r in guarded.trace)
    assert all(b <= a + 0.01 * abs(a) for a, b in itertools.pairwise(primals))
    assert primals[-1] < start
    assert guarded.trace[-1]["oracle_calls"] == wild.trace[-1]["oracle_calls"]  # rejected epochs are paid for
    # a resume after a rejection continues as the uninterrupted run (stopped where that run recorded)
    rejection = next(j for j, r in enumerate(guarded.trace) if "rejected" in r)
    first = guarded.trace[min(rejection + 1, len(guarded.trace) - 2)]["passes"]
    solve(problem, L=1e-2, max_passes=first, random_state=0, checkpoint=tmp_path / "run.pkl")
    resumed = solve(problem, L=1e-2, max_passes=20, random_state=0, resume=tmp_path / "run.pkl")
    assert resumed.trace[-1]["primal"] == pytest.approx(guarded.trace[-1]["primal"], rel=1e-12)
