"""BipartiteMatching oracles against enumeration, LPs and cvxpy; MatchingHamming; MatchingModel."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import MatchingHamming
from structopt.models.matching import MatchingModel
from structopt.structures.base import add, flatten, inner, scale, unflatten
from structopt.structures.matching import BipartiteMatching, MatchingPotentials

SIZES = [(1, 1), (1, 3), (2, 2), (2, 4), (3, 3), (3, 5), (4, 4), (2, 1), (4, 2), (0, 2), (5, 3)]


def instances(n_seeds: int = 4, integer: bool = True):
    """Random tiny instances: square and rectangular, with and without unmatched nodes."""
    rng = np.random.default_rng(1234)
    for (L, R), allow, seed in itertools.product(SIZES, (False, True), range(n_seeds)):
        if not allow and L > R:
            continue
        draw = ((lambda shape: rng.integers(-2, 3, size=shape).astype(float)) if integer
                else (lambda shape: rng.normal(size=shape)))
        theta = MatchingPotentials(draw((L, R)), draw(L) if allow else np.zeros(0), draw(R) if allow else np.zeros(0))
        yield BipartiteMatching(allow_unmatched=allow), theta, (L, R, allow, seed)


def brute(structure, theta):
    outs = structure.enumerate(theta)
    scores = np.array([inner(theta, structure.stats(y, theta)) for y in outs])
    return outs, scores


def n_matchings(L: int, R: int, allow: bool) -> int:
    from math import comb, factorial
    if not allow:
        return factorial(R) // factorial(R - L)
    return sum(comb(L, m) * comb(R, m) * factorial(m) for m in range(min(L, R) + 1))


@pytest.mark.parametrize("integer", [True, False])
def test_enumeration_counts_and_outputs_valid(integer):
    for s, theta, (L, R, allow, _) in instances(1, integer):
        outs, _ = brute(s, theta)
        assert len(outs) == n_matchings(L, R, allow)
        assert len({tuple(y) for y in outs}) == len(outs)
        for y in outs:
            assert s.validate_output(y, theta).dtype == np.int64
            st = s.stats(y, theta)
            assert st.edge.sum(axis=1).max(initial=0) <= 1 and st.edge.sum(axis=0).max(initial=0) <= 1
            if not allow:
                assert np.all(st.edge.sum(axis=1) == 1)


@pytest.mark.parametrize("integer", [True, False])
def test_argmax_score_and_stats_match_enumeration(integer):
    for s, theta, _ in instances(integer=integer):
        outs, scores = brute(s, theta)
        y = s.argmax(theta)
        assert y.dtype == np.int64 and y.shape == (theta.edge.shape[0],)
        s.validate_output(y, theta)
        assert s.score(theta, y) == pytest.approx(scores.max(), abs=1e-9)
        for out, sc in zip(outs, scores):
            assert s.score(theta, out) == pytest.approx(sc, abs=1e-12)


@pytest.mark.parametrize("integer", [True, False])
def test_max_marginals_match_enumeration(integer):
    for s, theta, _ in instances(integer=integer):
        outs, scores = brute(s, theta)
        L, R = theta.edge.shape
        expected = np.full((L, R), -np.inf)
        for y, sc in zip(outs, scores):
            for j in np.flatnonzero(y >= 0):
                expected[j, y[j]] = max(expected[j, y[j]], sc)
        mm = s.max_marginals(theta)
        assert mm.shape == (L, R)
        np.testing.assert_allclose(mm, expected, atol=1e-9)


@pytest.mark.parametrize("integer", [True, False])
def test_topk_matches_enumeration(integer):
    for s, theta, _ in instances(integer=integer):
        outs, scores = brute(s, theta)
        ref = np.sort(scores)[::-1]
        for k in (1, 3, 8, len(outs) + 2):
            top, top_scores = s.topk(theta, k)
            n = min(k, len(outs))
            assert len(top) == n and top_scores.shape == (n,)
            np.testing.assert_allclose(top_scores, ref[:n], atol=1e-9)
            assert np.all(np.diff(top_scores) <= 1e-12)
            assert len({tuple(y) for y in top}) == n  # distinct
            for y, sc in zip(top, top_scores):
                s.validate_output(y, theta)
                assert s.score(theta, y) == pytest.approx(sc, abs=1e-12)
    s, theta, _ = next(instances())
    assert [tuple(y) for y in s.topk(theta, 3)[0]] == [tuple(y) for y in s.topk(theta, 3)[0]]  # deterministic


def test_lp_relaxation_is_integral_and_equals_max():
    for s, theta, _ in instances(n_seeds=2, integer=False):  # floats: a unique optimum, so a unique LP vertex
        _, scores = brute(s, theta)
        value, z = s.lp_relaxation(theta)
        assert value == pytest.approx(scores.max(), abs=1e-7)
        flat = flatten(z)
        assert np.all(np.minimum(np.abs(flat), np.abs(flat - 1)) < 1e-7)  # integral
        assert np.allclose(flat, flatten(s.stats(s.argmax(theta), theta)), atol=1e-7)
    for s, theta, _ in instances(n_seeds=2, integer=True):  # ties: the value still equals the max
        _, scores = brute(s, theta)
        assert s.lp_relaxation(theta)[0] == pytest.approx(scores.max(), abs=1e-7)


def test_polytope_vertices_feasible():
    for s, theta, _ in instances(n_seeds=1):
        poly = s.polytope(theta)
        outs, _ = brute(s, theta)
        for y in outs:
            z = flatten(s.stats(y, theta))
            if poly.A_eq is not None:
                np.testing.assert_allclose(poly.A_eq @ z, poly.b_eq)
            if poly.A_ub is not None:
                assert np.all(poly.A_ub @ z <= poly.b_ub + 1e-12)


def test_project_equals_cvxpy_qp():
    rng = np.random.default_rng(7)
    for s, theta, (L, R, _, seed) in instances(n_seeds=2, integer=False):
        if L * R == 0 or seed > 1:
            continue
        for factor in (0.3, 3.0):
            v = scale(theta, factor)
            p, info = s.project(v, return_info=True)
            assert info.certified and info.kkt_residual <= 1e-9
            q = s.project_qp(v)
            np.testing.assert_allclose(flatten(p), flatten(q), atol=1e-5)  # interior-point accuracy
            # ours is certified to 1e-9: never farther from v than the QP solution
            assert np.sum((flatten(p) - flatten(v)) ** 2) <= np.sum((flatten(q) - flatten(v)) ** 2) + 1e-9
            # variational inequality against every vertex: <v - p, m - p> <= 0
            outs, _ = brute(s, theta)
            diff = flatten(v) - flatten(p)
            verts = np.array([flatten(s.stats(y, theta)) for y in outs])
            assert np.max(verts @ diff - diff @ flatten(p)) <= 1e-8
            # idempotent
            np.testing.assert_allclose(flatten(s.project(p)), flatten(p), atol=1e-8)
    # a vertex projects onto itself; a random point lands in the polytope
    s = BipartiteMatching(allow_unmatched=True)
    theta = MatchingPotentials(rng.normal(size=(3, 4)), rng.normal(size=3), rng.normal(size=4))
    y = s.argmax(theta)
    st = s.stats(y, theta)
    np.testing.assert_allclose(flatten(s.project(st)), flatten(st), atol=1e-9)


def test_project_30x30_certified():
    rng = np.random.default_rng(3)
    for allow, (L, R) in ((False, (30, 30)), (False, (24, 30)), (True, (30, 27))):
        s = BipartiteMatching(allow_unmatched=allow)
        for factor in (0.1, 1.0, 10.0):
            v = MatchingPotentials(factor * rng.normal(size=(L, R)), factor * rng.normal(size=L) if allow else
                                   np.zeros(0), factor * rng.normal(size=R) if allow else np.zeros(0))
            p, info = s.project(v, return_info=True)
            assert info.certified, info
            assert p.edge.min() >= 0
            rows = p.edge.sum(axis=1) + (p.unmatched_left if allow else 0)
            np.testing.assert_allclose(rows, 1.0, atol=1e-9)
            cols = p.edge.sum(axis=0) + (p.unmatched_right if allow else 0)
            assert np.all(cols <= 1 + 1e-9)


def test_argmax_is_exact_below_any_integer_scaling():
    # scores that differ by far less than any fixed integer resolution (e.g. 1e-6 * 2**20 scaling)
    s = BipartiteMatching()
    eps = 1e-12
    base = np.array([[1.0, 1.0], [1.0, 1.0]])
    for sign in (1, -1):
        theta = base.copy()
        theta[0, 1] += sign * eps  # anti-diagonal better by 2*eps when sign > 0... or worse
        theta[1, 0] += sign * eps
        y = s.argmax(theta)
        expected = np.array([1, 0]) if sign > 0 else np.array([0, 1])
        np.testing.assert_array_equal(y, expected)
    # scores of size ~1e3 where the runner-up is lifted to beat the best by ~1e-10 (an integer
    # scaling at resolution 1e-6 would tie them and could return either)
    rng = np.random.default_rng(0)
    theta = s.expand(np.round(rng.uniform(0, 1000, size=(6, 6))))
    outs, scores = brute(s, theta)
    order = np.argsort(-scores, kind="stable")
    first, second = outs[order[0]], outs[order[1]]
    differ = np.flatnonzero(first != second)
    bumped = theta.edge.copy()
    bumped[differ, second[differ]] += (scores[order[0]] - scores[order[1]] + 1e-10) / len(differ)
    outs, scores = brute(s, s.expand(bumped))
    best = int(np.argmax(scores))
    margin = scores[best] - np.max(np.delete(scores, best))
    assert 0 < margin < 1e-9
    np.testing.assert_array_equal(s.argmax(bumped), outs[best])


def test_marginals_not_supported_and_errors():
    s = BipartiteMatching()
    with pytest.raises(NotSupportedError, match="permanent"):
        s.marginals(np.zeros((2, 2)))
    with pytest.raises(InvalidInputError, match="allow_unmatched"):
        BipartiteMatching(3, 2)
    with pytest.raises(InvalidInputError, match="allow_unmatched"):
        s.argmax(np.zeros((3, 2)))
    with pytest.raises(InvalidInputError, match="shape"):
        BipartiteMatching(2, 2).argmax(np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="NaN"):
        s.argmax(np.array([[np.nan, 0.0], [0.0, 0.0]]))
    with pytest.raises(InvalidInputError, match="one-to-one"):
        s.validate_output([1, 1], np.zeros((2, 2)))
    with pytest.raises(InvalidInputError, match=r"example 4.*not in"):
        s.validate_output([0, -1], np.zeros((2, 2)), index=4)
    with pytest.raises(InvalidInputError, match="shape"):
        s.validate_output([0, 1, 2], np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="k >= 1"):
        s.topk(np.zeros((2, 2)), 0)
    partial = BipartiteMatching(allow_unmatched=True)
    np.testing.assert_array_equal(partial.validate_output([-1, 0, -1], np.zeros((3, 2))), [-1, 0, -1])
    # plain arrays are accepted as potentials (zero unmatched scores)
    assert partial.argmax(-np.ones((3, 2))).tolist() == [-1, -1, -1]


def test_generic_field_ops_on_matching_potentials():
    rng = np.random.default_rng(5)
    for allow in (False, True):
        s = BipartiteMatching(allow_unmatched=allow)
        theta = s.expand(rng.normal(size=(3, 4)))
        c = s.edge_potentials(rng.normal(size=(3, 4)), theta)
        both = add(theta, c)
        assert isinstance(both, MatchingPotentials)
        for y in s.enumerate(theta):
            st = s.stats(y, theta)
            assert inner(both, st) == pytest.approx(s.score(theta, y) + s.score(c, y))
        np.testing.assert_array_equal(flatten(unflatten(flatten(theta), theta)), flatten(theta))


def test_matching_hamming_linear_terms_equal_loss():
    rng = np.random.default_rng(11)
    for s, theta, (*_, seed) in instances(n_seeds=1):
        loss = MatchingHamming(fp_cost=1.0 + seed, fn_cost=3.0)
        outs = s.enumerate(theta)
        for gold in outs[:: max(1, len(outs) // 5)]:
            c, const = loss.linear_terms(s, gold, theta)
            assert loss(gold, gold) == 0
            for y in outs:
                assert inner(c, s.stats(y, theta)) + const == pytest.approx(loss(gold, y))
    assert MatchingHamming()(np.array([0, 1, -1]), np.array([1, 0, 2])) == 3 * 1 + 3 * 2  # 3 fp, 2 fn
    with pytest.raises(InvalidInputError):
        MatchingHamming(fp_cost=-1)
    del rng


def test_model_adjoint_identity():
    rng = np.random.default_rng(2)
    for allow in (False, True):
        model = MatchingModel(n_features=5, allow_unmatched=allow)
        s = model.structure
        for L, R in ((1, 1), (3, 4), (4, 4)) + (((4, 2),) if allow else ()):
            x = model.validate_input(rng.normal(size=(L, R, 5)))
            w = rng.normal(size=model.n_params)
            theta = model.potentials(x, w)
            mu = unflatten(rng.normal(size=flatten(theta).size), theta)
            assert inner(theta, mu) == pytest.approx(float(w @ model.features(x, mu)))
            for y in s.enumerate(theta)[:10]:
                assert s.score(theta, y) == pytest.approx(float(w @ model.joint_feature(x, y)))
    with pytest.raises(InvalidInputError, match="allow_unmatched"):
        MatchingModel(3).validate_input(np.zeros((3, 2, 3)))
    with pytest.raises(InvalidInputError, match="shape"):
        MatchingModel(3).validate_input(np.zeros((3, 3)))


def test_ssvm_problem_oracles_on_matchings():
    from structopt.problem import SSVMProblem

    rng = np.random.default_rng(9)
    model = MatchingModel(n_features=3, allow_unmatched=True)
    X = [rng.normal(size=(L, R, 3)) for L, R in ((3, 4), (4, 3), (2, 2))]
    Y = [model.structure.argmax(model.potentials(x, rng.normal(size=model.n_params))) for x in X]
    problem = SSVMProblem(model, X, Y, MatchingHamming(1, 3), lam=0.1)
    w = rng.normal(size=model.n_params)
    for i in range(problem.n):
        res = problem.max_oracle(i, w)
        theta = problem.theta(i, w)
        outs = model.structure.enumerate(theta)
        hinge = max(problem.loss(Y[i], y) + model.structure.score(theta, y) - model.structure.score(theta, Y[i])
                    for y in outs)
        assert res.value == pytest.approx(hinge)
        assert res.value >= -1e-12
        smooth = problem.smooth_oracle(i, w, mu=0.5, kind="topk", k=4)
        assert smooth.value >= res.value - 1e-9
