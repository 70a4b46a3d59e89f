"""SSVMProblem oracles against brute force over every output."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import Hamming, Loss, WeightedHamming
from structopt.models import ChainModel, MultiClassModel
from structopt.problem import SSVMProblem

F, S = 3, 3


def chain_problem(rng, loss=None, lengths=(1, 3, 4), sparse=False, integer=False, lam=0.1):
    model = ChainModel(F, S, start_end=True, bias=True)
    X, Y = [], []
    for T in lengths:
        x = rng.integers(-1, 2, (T, F)).astype(float) if integer else rng.normal(size=(T, F))
        X.append(sp.csr_matrix(x) if sparse else x)
        Y.append(rng.integers(0, S, T))
    return SSVMProblem(model, X, Y, loss or Hamming(), lam)


def losses():
    cost = np.array([[0.0, 1.0, 2.0], [0.5, 0.0, 1.0], [3.0, 1.0, 0.0]])
    return [Hamming(), Hamming(normalize=True), WeightedHamming(cost), WeightedHamming(cost, normalize=True)]


def brute(problem, i, w):
    """psi(y) = Delta(y_i, y) + <w, Phi(x_i, y) - Phi(x_i, y_i)> for every output, with features and losses."""
    model, x, yi = problem.model, problem.X[i], problem.Y[i]
    like = model.potentials(x, model.zeros())
    outs = problem.structure.enumerate(like)
    phi_gold = model.joint_feature(x, yi)
    diffs = np.array([model.joint_feature(x, y) - phi_gold for y in outs])
    loss = np.array([problem.loss(yi, y) for y in outs])
    return outs, loss + diffs @ w, diffs, loss


# ----------------------------------------------------------------------------- max oracle and primal
@pytest.mark.parametrize("loss", losses(), ids=repr)
@pytest.mark.parametrize("integer", [True, False])
def test_max_oracle_and_primal_match_brute_force(loss, integer, rng):
    for sparse in (False, True):
        problem = chain_problem(rng, loss, sparse=sparse, integer=integer)
        hinges = []
        for _ in range(3):
            w = rng.integers(-1, 2, problem.n_params).astype(float) if integer else rng.normal(size=problem.n_params)
            hinges = []
            for i in range(problem.n):
                outs, psi, diffs, loss_values = brute(problem, i, w)
                res = problem.max_oracle(i, w)
                assert res.value == pytest.approx(psi.max(), abs=1e-9)
                j = next(j for j, y in enumerate(outs) if np.array_equal(y, res.y))
                assert psi[j] == pytest.approx(psi.max(), abs=1e-9)  # y is a maximiser
                np.testing.assert_allclose(res.grad, diffs[j], atol=1e-12)
                assert res.loss == pytest.approx(loss_values[j])
                assert res.value == pytest.approx(res.loss + w @ res.grad)
                hinges.append(psi.max())
            np.testing.assert_allclose(problem.hinge_losses(w), hinges, atol=1e-9)
            expected = 0.5 * problem.lam * w @ w + np.mean(hinges)
            assert problem.primal(w) == pytest.approx(expected, abs=1e-9)
        assert min(hinges) >= 0  # the gold output is a candidate: H_i >= 0


def test_batch_and_predict(rng):
    problem = chain_problem(rng)
    w = rng.normal(size=problem.n_params)
    batch = problem.max_oracle_batch(w, indices=[2, 0])
    assert [r.value for r in batch] == [problem.max_oracle(2, w).value, problem.max_oracle(0, w).value]
    preds = problem.predict(problem.X, w)
    for i, y in enumerate(preds):
        outs = problem.structure.enumerate(problem.theta(i, w))
        best = max(problem.structure.score(problem.theta(i, w), o) for o in outs)
        assert problem.structure.score(problem.theta(i, w), y) == pytest.approx(best)


def test_multiclass_problem(rng):
    model = MultiClassModel(4, 3)
    X = [rng.normal(size=4) for _ in range(5)]
    Y = [int(v) for v in rng.integers(0, 3, 5)]
    problem = SSVMProblem(model, X, Y, Hamming(), 1.0)
    w = rng.normal(size=model.n_params)
    for i in range(5):
        _, psi, _, _ = brute(problem, i, w)
        assert problem.max_oracle(i, w).value == pytest.approx(psi.max())
        assert problem.smooth_oracle(i, w, 0.5, "entropy").value == pytest.approx(
            0.5 * np.log(np.sum(np.exp(psi / 0.5))))


# ----------------------------------------------------------------------------- smooth oracles
@pytest.mark.parametrize("loss", losses()[:3], ids=repr)
@pytest.mark.parametrize("mu", [0.05, 1.0, 10.0])
def test_smooth_oracles_match_definitions(loss, mu, rng, ref):
    problem = chain_problem(rng, loss)
    for integer_w in (True, False):
        w = rng.integers(-1, 2, problem.n_params).astype(float) if integer_w else rng.normal(size=problem.n_params)
        for i in range(problem.n):
            outs, psi, diffs, loss_values = brute(problem, i, w)
            m = len(outs)
            # top-K with K = |Y| is the full l2-smoothed max
            res = problem.smooth_oracle(i, w, mu, "topk", k=m)
            value, u = ref.l2_max(psi, mu)
            assert res.value == pytest.approx(value, abs=1e-8)
            assert psi.max() - 1e-9 <= res.value <= psi.max() + mu / 2 + 1e-9
            np.testing.assert_allclose(res.grad, u @ diffs, atol=1e-8)
            assert res.loss == pytest.approx(u @ loss_values, abs=1e-8)
            assert len(res.y) == m
            # entropy smoothing
            res = problem.smooth_oracle(i, w, mu, "entropy")
            value, p = ref.entropy_max(psi, mu)
            assert res.value == pytest.approx(value, abs=1e-8)
            assert psi.max() - 1e-9 <= res.value <= psi.max() + mu * np.log(m) + 1e-9
            np.testing.assert_allclose(res.grad, p @ diffs, atol=1e-8)
            assert res.loss == pytest.approx(p @ loss_values, abs=1e-8)


def test_topk_is_exact_when_condition_12_holds(rng, ref):
    """Prop. 4: top-K reproduces the full l2 smoothing when mu <= sum_{i<=K} (z_(i) - z_(K+1))."""
    problem = chain_problem(rng, lengths=(4,))
    checked = 0
    for _ in range(10):
        w = 2 * rng.normal(size=problem.n_params)
        _, psi, diffs, _ = brute(problem, 0, w)
        z = np.sort(psi)[::-1]
        for k in (1, 2, 5, 20):
            bound = np.sum(z[:k] - z[k])
            for mu in (0.5 * bound, bound):
                if mu <= 0:
                    continue
                res = problem.smooth_oracle(0, w, mu, "topk", k=k)
                value, u = ref.l2_max(psi, mu)
                assert res.value == pytest.approx(value, abs=1e-8)
                np.testing.assert_allclose(res.grad, u @ diffs, atol=1e-8)
                checked += 1
    assert checked > 40


@pytest.mark.parametrize(("kind", "k"), [("topk", 3), ("topk", 1000), ("entropy", 0)])
def test_smooth_gradients_match_finite_differences(kind, k, rng):
    problem = chain_problem(rng, lengths=(2, 4))
    h, mu = 1e-5, 0.7
    compared = 0
    for _ in range(3):
        w = rng.normal(size=problem.n_params)
        for i in range(problem.n):
            res = problem.smooth_oracle(i, w, mu, kind, k)
            fd = np.empty(problem.n_params)
            stable = np.ones(problem.n_params, dtype=bool)
            for j in range(problem.n_params):
                e = np.zeros(problem.n_params)
                e[j] = h
                plus, minus = problem.smooth_oracle(i, w + e, mu, kind, k), problem.smooth_oracle(i, w - e, mu, kind, k)
                fd[j] = (plus.value - minus.value) / (2 * h)
                if kind == "topk":  # the top-K set must not change inside the difference
                    same = {tuple(np.ravel(y)) for y in res.y}
                    stable[j] = same == {tuple(np.ravel(y)) for y in plus.y} == {tuple(np.ravel(y)) for y in minus.y}
            np.testing.assert_allclose(res.grad[stable], fd[stable], atol=1e-5)
            compared += stable.sum()
    assert compared > 0.9 * 3 * problem.n * problem.n_params


def test_smooth_oracle_bad_arguments(rng):
    problem = chain_problem(rng)
    w = problem.model.zeros()
    with pytest.raises(InvalidInputError, match="mu"):
        problem.smooth_oracle(0, w, 0.0)
    with pytest.raises(InvalidInputError, match="kind"):
        problem.smooth_oracle(0, w, 1.0, kind="softmax")


# ----------------------------------------------------------------------------- bad input
def test_bad_inputs_name_the_example(rng):
    model = ChainModel(F, S)
    good_x = [rng.normal(size=(3, F)), rng.normal(size=(2, F))]
    good_y = [np.array([0, 1, 2]), np.array([1, 1])]
    SSVMProblem(model, good_x, good_y, Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match=r"example 1.*shape"):
        SSVMProblem(model, [good_x[0], rng.normal(size=(2, F + 1))], good_y, Hamming(), 0.1)
    nan_x = good_x[1].copy()
    nan_x[0, 0] = np.nan
    with pytest.raises(InvalidInputError, match=r"example 1.*NaN"):
        SSVMProblem(model, [good_x[0], nan_x], good_y, Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match=r"example 0.*out of range"):
        SSVMProblem(model, good_x, [np.array([0, 3, 1]), good_y[1]], Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match=r"example 1.*shape"):
        SSVMProblem(model, good_x, [good_y[0], np.array([1, 1, 0])], Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match="X has 2 inputs but Y has 1 outputs"):
        SSVMProblem(model, good_x, good_y[:1], Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match="at least one"):
        SSVMProblem(model, [], [], Hamming(), 0.1)
    for lam in (0.0, -1.0, np.nan):
        with pytest.raises(InvalidInputError, match="lam"):
            SSVMProblem(model, good_x, good_y, Hamming(), lam)
    problem = SSVMProblem(model, good_x, good_y, Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match="example 1"):
        problem.predict([good_x[0], np.zeros((2, F + 2))], model.zeros())
    with pytest.raises(InvalidInputError, match="weights w must have shape"):
        problem.max_oracle(0, np.zeros(3))


def test_non_decomposable_loss_is_refused_by_decoding(rng):
    class ZeroOne(Loss):
        def __call__(self, y_true, y_pred):
            return float(not np.array_equal(y_true, y_pred))

    problem = chain_problem(rng, ZeroOne())
    with pytest.raises(NotSupportedError, match="decomposable"):
        problem.max_oracle(0, problem.model.zeros())


def test_zero_fields_of_examples_are_shared_and_read_only():
    """The potentials at w = 0 and the loss terms' all-zero fields: one read-only array per shape."""
    rng = np.random.default_rng(11)
    problem = chain_problem(rng, lengths=(3, 4, 3, 4, 2))
    likes = [problem.like(i) for i in range(problem.n)]
    assert likes[0].unary is likes[2].unary and likes[1].unary is likes[3].unary
    assert likes[0].unary is not likes[1].unary and likes[0].unary.shape == (3, S)
    for like in likes:
        assert not like.unary.any() and not like.unary.flags.writeable
        with pytest.raises(ValueError):
            like.unary[0, 0] = 1.0
    terms = [problem.loss_terms(i)[0] for i in range(problem.n)]
    assert all(t.pairwise is terms[0].pairwise for t in terms) and not terms[0].pairwise.flags.writeable
    assert all(t.unary.any() and t.unary.flags.writeable for t in terms)  # the Hamming costs stay per example
    # the oracles are those of brute force still
    w = rng.normal(size=problem.n_params)
    for i in range(problem.n):
        _, values, _, _ = brute(problem, i, w)
        assert np.isclose(problem.max_oracle(i, w).value, values.max())


def test_with_lam_shares_the_data_and_drops_what_depends_on_lam():
    rng = np.random.default_rng(3)
    p = chain_problem(rng, lam=0.1)
    w = rng.normal(size=p.n_params)
    fast, print_before = p.fused(), p.fingerprint()
    q = p.with_lam(0.5)
    assert q.lam == 0.5 and p.lam == 0.1 and q.X is p.X and q.Y is p.Y
    assert q.mean_hinge(w) == pytest.approx(p.mean_hinge(w), rel=1e-12)
    assert q.primal(w) - p.primal(w) == pytest.approx(0.5 * 0.4 * float(w @ w), rel=1e-9)
    assert q.fingerprint() != print_before and p.fingerprint() == print_before
    assert (q.fused() is None) == (fast is None) and (fast is None or q.fused() is not fast)
    for bad in (0.0, -1.0, float("nan"), True, "0.1"):
        with pytest.raises(InvalidInputError, match="lam"):
            p.with_lam(bad)
