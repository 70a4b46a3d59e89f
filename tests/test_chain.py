"""Chain oracles against enumeration, the LP relaxation and the cvxpy projection."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from structopt.errors import InvalidInputError
from structopt.smoothing import logsumexp
from structopt.structures import Chain, ChainPotentials, flatten
from structopt.validate import check_structure

SIZES = [(T, S) for T in range(1, 7) for S in range(1, 5)]  # up to 4**6 = 4096 outputs
SMALL = [(T, S) for T, S in SIZES if S**T <= 81]


def make_theta(T, S, shared, rng, integer=True, low=-3, high=3):
    pshape = (S, S) if shared else (max(T - 1, 0), S, S)
    if integer:  # few distinct values: many ties
        return ChainPotentials(rng.integers(low, high + 1, (T, S)).astype(float),
                               rng.integers(low, high + 1, pshape).astype(float))
    return ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=pshape))


def seeded(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def direct_score(theta, y):
    """Score written out position by position (independent of Chain.score)."""
    value = sum(theta.unary[t, y[t]] for t in range(len(y)))
    for t in range(len(y) - 1):
        pw = theta.pairwise if theta.pairwise.ndim == 2 else theta.pairwise[t]
        value += pw[y[t], y[t + 1]]
    return float(value)


# ----------------------------------------------------------------------------- enumeration
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(("T", "S"), SIZES)
def test_oracles_match_enumeration(T, S, shared, ref):
    chain = Chain(S)
    rng = seeded("enum", T, S, shared)
    for integer in (True, False):
        theta = make_theta(T, S, shared, rng, integer=integer)
        b = ref.brute(chain, theta)
        n = len(b.outputs)
        assert n == S**T
        assert np.allclose(b.scores, [direct_score(theta, y) for y in b.outputs])
        best = b.scores.max()

        y = chain.argmax(theta)
        assert y.dtype == np.int64 and y.shape == (T,)
        assert chain.score(theta, y) == pytest.approx(best, abs=1e-9)

        sorted_scores = np.sort(b.scores)[::-1]
        for k in sorted({1, 5, 64, n, n + 3}):
            labels, scores = chain.topk(theta, k)
            kk = min(k, n)
            assert labels.shape == (kk, T) and scores.shape == (kk,)
            np.testing.assert_allclose(scores, sorted_scores[:kk], atol=1e-9)
            np.testing.assert_allclose([direct_score(theta, lab) for lab in labels], scores, atol=1e-9)
            assert len({tuple(lab) for lab in labels}) == kk
            assert np.all((labels >= 0) & (labels < S))
        # the first of top-K is a maximiser
        assert direct_score(theta, chain.topk(theta, 3)[0][0]) == pytest.approx(best)

        log_z, marg = chain.marginals(theta)
        p = np.exp(b.scores - logsumexp(b.scores))
        assert log_z == pytest.approx(np.log(np.sum(np.exp(b.scores - best))) + best, abs=1e-10)
        assert marg.unary.shape == (T, S) and marg.pairwise.shape == (T - 1, S, S)
        np.testing.assert_allclose(flatten(marg), p @ b.flat, atol=1e-12)

        mm = chain.max_marginals(theta)
        labels = np.array(b.outputs)
        expected = np.array([[b.scores[labels[:, t] == s].max() for s in range(S)] for t in range(T)])
        np.testing.assert_allclose(mm, expected, atol=1e-9)


def test_topk_orders_ties_deterministically():
    chain = Chain(3)
    theta = ChainPotentials(np.zeros((3, 3)), np.zeros((3, 3)))
    labels, scores = chain.topk(theta, 64)
    assert len(labels) == 27 and np.all(scores == 0)
    again, _ = chain.topk(theta, 64)
    np.testing.assert_array_equal(labels, again)
    assert len({tuple(lab) for lab in labels}) == 27


def test_forbidden_transitions():
    """-inf pairwise scores (forbidden transitions) are never used by a finite-scoring output."""
    chain = Chain(3)
    rng = np.random.default_rng(0)
    pairwise = rng.normal(size=(3, 3))
    pairwise[0, 1] = pairwise[2, 2] = -np.inf
    theta = ChainPotentials(rng.normal(size=(5, 3)), pairwise)
    scores = np.array([chain.score(theta, y) for y in chain.enumerate(theta)])
    finite = np.sort(scores[np.isfinite(scores)])[::-1]
    y = chain.argmax(theta)
    assert chain.score(theta, y) == pytest.approx(finite[0])
    _, top = chain.topk(theta, 10)
    np.testing.assert_allclose(top, finite[:10])
    log_z, marg = chain.marginals(theta)
    assert log_z == pytest.approx(logsumexp(finite))
    assert np.all(marg.pairwise[:, 0, 1] == 0) and np.all(marg.pairwise[:, 2, 2] == 0)
    assert np.isfinite(chain.max_marginals(theta)).all()


@given(T=st.integers(1, 5), S=st.integers(1, 3), shared=st.booleans(), seed=st.integers(0, 2**31))
def test_property_argmax_topk_logz(T, S, shared, seed):
    chain = Chain(S)
    theta = make_theta(T, S, shared, np.random.default_rng(seed), low=-2, high=2)
    scores = np.array([direct_score(theta, y) for y in itertools.product(range(S), repeat=T)])
    assert chain.score(theta, chain.argmax(theta)) == scores.max()
    _, top = chain.topk(theta, 7)
    np.testing.assert_allclose(top, np.sort(scores)[::-1][:7])
    assert chain.marginals(theta)[0] == pytest.approx(logsumexp(scores), abs=1e-10)


# ----------------------------------------------------------------------------- LP relaxation
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(("T", "S"), SMALL)
def test_lp_relaxation_is_tight_and_integral(T, S, shared, ref):
    chain = Chain(S)
    rng = seeded("lp", T, S, shared)
    for integer in (True, True, False):
        theta = make_theta(T, S, shared, rng, integer=integer)
        b = ref.brute(chain, theta)
        value, z = chain.lp_relaxation(theta)
        assert value == pytest.approx(b.scores.max(), abs=1e-7)
        winners = np.flatnonzero(b.scores >= b.scores.max() - 1e-9)
        if len(winners) == 1:  # the vertex found by the LP must be the unique best output
            np.testing.assert_allclose(flatten(z), b.flat[winners[0]], atol=1e-6)


def test_polytope_vertices_are_feasible(ref):
    chain = Chain(3)
    theta = make_theta(4, 3, False, np.random.default_rng(1))
    poly = chain.polytope(theta)
    b = ref.brute(chain, theta)
    np.testing.assert_allclose(poly.A_eq @ b.flat.T, np.repeat(poly.b_eq[:, None], len(b.flat), axis=1))


# ----------------------------------------------------------------------------- projection
@pytest.mark.parametrize(("T", "S", "shared"), [(1, 1, True), (1, 3, False), (2, 2, True), (3, 2, False),
                                                (3, 3, True), (4, 2, True)])
def test_project_matches_cvxpy_qp(T, S, shared, ref):
    chain = Chain(S)
    rng = seeded("proj", T, S, shared)
    theta = make_theta(T, S, shared, rng)
    b = ref.brute(chain, theta)
    for scale in (0.3, 3.0):
        v = chain.expand(ChainPotentials(scale * rng.normal(size=(T, S)),
                                         scale * rng.normal(size=(S, S) if shared else (max(T - 1, 0), S, S))))
        p, q = flatten(chain.project(v)), flatten(chain.project_qp(v))
        np.testing.assert_allclose(p, q, atol=1e-6)
        # optimality against every vertex of the marginal polytope: <v - p, m - p> <= 0
        g = flatten(v) - p
        assert np.max(b.flat @ g - g @ p) <= 1e-6
        # p lies in the polytope
        poly = chain.polytope(theta)
        np.testing.assert_allclose(poly.A_eq @ p, poly.b_eq, atol=1e-7)
        assert p.min() >= -1e-7 and p.max() <= 1 + 1e-7


def test_project_of_a_vertex_is_itself(ref):
    chain = Chain(2)
    theta = make_theta(3, 2, True, np.random.default_rng(2))
    y = np.array([1, 0, 1])
    m = chain.stats(y, theta)
    # interior-point accuracy at a degenerate (zero-residual) point is about sqrt(solver tolerance)
    np.testing.assert_allclose(flatten(chain.project(m)), flatten(m), atol=1e-5)


# ----------------------------------------------------------------------------- entropic prox
def p_mu(mu, y):
    """Probability of y under the chain distribution with marginals mu (tree factorisation)."""
    T = len(y)
    if T == 1:
        return mu.unary[0, y[0]]
    value = np.prod([mu.pairwise[t, y[t], y[t + 1]] for t in range(T - 1)])
    return value / np.prod([mu.unary[t, y[t]] for t in range(1, T - 1)])


@pytest.mark.parametrize(("T", "S"), [(1, 1), (1, 3), (2, 2), (3, 1), (3, 3), (4, 2), (5, 3)])
def test_prox_entropy_matches_brute_force(T, S, ref):
    chain = Chain(S)
    rng = seeded("prox", T, S)
    _, mu = chain.marginals(make_theta(T, S, False, rng, integer=False))
    b = ref.brute(chain, mu)
    prior = np.array([p_mu(mu, y) for y in b.outputs])
    assert prior.sum() == pytest.approx(1.0)
    for shared in (True, False):
        step = make_theta(T, S, shared, rng, integer=False)
        for eta in (0.0, 0.7, 3.0):
            weights = prior * np.exp(eta * np.array([direct_score(step, y) for y in b.outputs]))
            expected = (weights / weights.sum()) @ b.flat
            out = chain.prox_entropy(mu, step, eta)
            np.testing.assert_allclose(flatten(out), expected, atol=1e-10)
    # T(mu, 0) = mu
    np.testing.assert_allclose(flatten(chain.prox_entropy(mu, make_theta(T, S, True, rng), 0.0)), flatten(mu),
                               atol=1e-12)


def test_prox_entropy_rejects_non_positive_mu():
    chain = Chain(2)
    mu = chain.stats(np.array([0, 1, 1]), ChainPotentials(np.zeros((3, 2)), np.zeros((2, 2))))
    with pytest.raises(InvalidInputError, match="strictly positive"):
        chain.prox_entropy(mu, mu, 1.0)


# ----------------------------------------------------------------------------- check_structure
@pytest.mark.parametrize(("T", "S", "shared"), [(1, 1, True), (1, 4, False), (2, 3, False), (3, 2, True),
                                                (4, 3, False), (5, 2, True)])
def test_check_structure_passes(T, S, shared):
    theta = make_theta(T, S, shared, seeded("check", T, S, shared))
    report = check_structure(Chain(S), theta, k=64, random_state=T * 10 + S)
    assert report.ok, report.table()
    assert {r.oracle for r in report.rows} >= {"argmax", "topk", "marginals", "max_marginals", "lp_relaxation",
                                                "project", "prox_entropy"}
    assert report.row("max_marginals").agrees_enumeration is True  # (T, S) node indicators were compared


# ----------------------------------------------------------------------------- bad input
def test_bad_potentials_and_outputs():
    chain = Chain(3)
    with pytest.raises(InvalidInputError):
        Chain(0)
    with pytest.raises(InvalidInputError, match="unary"):
        chain.argmax(ChainPotentials(np.zeros((4, 2)), np.zeros((3, 3))))
    with pytest.raises(InvalidInputError, match="pairwise"):
        chain.marginals(ChainPotentials(np.zeros((4, 3)), np.zeros((2, 3, 3))))
    with pytest.raises(InvalidInputError, match="k >= 1"):
        chain.topk(ChainPotentials(np.zeros((4, 3)), np.zeros((3, 3))), 0)
    like = ChainPotentials(np.zeros((4, 3)), np.zeros((3, 3)))
    with pytest.raises(InvalidInputError, match="example 7"):
        chain.validate_output([0, 1, 3, 0], like, 7)
    with pytest.raises(InvalidInputError, match="shape"):
        chain.validate_output([0, 1, 2], like, 0)
    with pytest.raises(InvalidInputError, match="integers"):
        chain.validate_output([0, 1.5, 2, 0], like, 0)
    assert chain.validate_output([0.0, 1.0, 2.0, 0.0], like).dtype == np.int64


@pytest.mark.slow
def test_check_structure_many_random_chains():
    """A wider sweep than the default run: many seeds, sizes, both layouts, ties and floats."""
    rng = np.random.default_rng(2024)
    failures = []
    for trial in range(150):
        T, S = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        if S**T > 1024:
            continue
        theta = make_theta(T, S, bool(rng.integers(2)), rng, integer=bool(rng.integers(2)))
        report = check_structure(Chain(S), theta, k=int(rng.choice([1, 5, 64, S**T + 2])), random_state=trial)
        if not report.ok:
            failures.append(report.table())
    assert not failures, "\n\n".join(failures[:3])


@pytest.mark.parametrize("scale", [1e-3, 1.0, 50.0, 1e3, 1e5])
@pytest.mark.parametrize("shared", [True, False])
def test_scaled_forward_backward_matches_log_space_at_extreme_scales(scale, shared):
    # the scaled sum-product must agree with a plain log-space recursion whatever the dynamic range
    from scipy.special import logsumexp

    rng = np.random.default_rng(int(scale) % 97 + shared)
    T, S = 7, 5
    unary = scale * rng.normal(size=(T, S))
    pairwise = scale * rng.normal(size=(S, S) if shared else (T - 1, S, S))
    pairwise[..., 0, 1] = -np.inf  # a forbidden transition
    pw = np.broadcast_to(pairwise, (T - 1, S, S))
    alpha = [unary[0]]
    for t in range(1, T):
        alpha.append(unary[t] + logsumexp(alpha[-1][:, None] + pw[t - 1], axis=0))
    beta = [np.zeros(S)]
    for t in range(T - 2, -1, -1):
        beta.insert(0, logsumexp(pw[t] + (unary[t + 1] + beta[0])[None, :], axis=1))
    alpha, beta = np.array(alpha), np.array(beta)
    log_z = logsumexp(alpha[-1])
    log_z_fast, marg = Chain(S).marginals(ChainPotentials(unary, pairwise))
    assert log_z_fast == pytest.approx(log_z, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(marg.unary, np.exp(alpha + beta - log_z), atol=1e-10)
    edge = np.exp(alpha[:-1, :, None] + pw + (unary[1:] + beta[1:])[:, None, :] - log_z)
    np.testing.assert_allclose(marg.pairwise, edge, atol=1e-10)
