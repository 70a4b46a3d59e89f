"""Chain oracles against enumeration, the LP relaxation and the cvxpy projection."""

from __future__ import annotations

import itertools
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from structopt.errors import InvalidInputError
from structopt.smoothing import logsumexp
from structopt.structures import Chain, ChainPotentials, flatten
from structopt.structures import _chain_kernels as kern
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


# ----------------------------------------------------------------------------- -inf entries
def all_sequences(T, S):
    return np.array(list(itertools.product(range(S), repeat=T)), dtype=np.int64).reshape(S**T, T)


def sequence_scores(unary, pairwise, seqs):
    """Scores of every row of ``seqs`` (pairwise (P, S, S), P == 1 shared), -inf where forbidden."""
    T = seqs.shape[1]
    with np.errstate(invalid="ignore"):
        total = unary[np.arange(T), seqs].sum(axis=1)
        if T > 1:
            index = np.arange(T - 1) if pairwise.shape[0] > 1 else np.zeros(T - 1, dtype=np.int64)
            total = total + pairwise[index, seqs[:, :-1], seqs[:, 1:]].sum(axis=1)
    return total


def masked_instance(rng, T, S, p_forbid):
    """Integer potentials (many ties) with forbidden (-inf) transitions, start and end states."""
    P = 1 if (T == 1 or rng.integers(2)) else T - 1
    unary = rng.integers(-2, 3, (T, S)).astype(float)
    pairwise = rng.integers(-2, 3, (P, S, S)).astype(float)
    pairwise[rng.random(pairwise.shape) < p_forbid] = -np.inf
    for t in (0, T - 1):  # forbidden start / end states, as a constrained chain folds them in
        unary[t, rng.random(S) < p_forbid / 2] = -np.inf
    if T == 1:
        pairwise = np.zeros((1, S, S))
    return unary, pairwise


def masked_instances(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        T, S = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        yield (T, S, *masked_instance(rng, T, S, float(rng.choice([0.0, 0.3, 0.6, 0.9]))))


def test_topk_with_forbidden_entries_matches_enumeration():
    """The K best scores (finite ones first, then -inf padding made of distinct forbidden
    sequences), nested in K, the first one Viterbi's, on many small chains with ties and masks."""
    n_checked = n_partial = 0
    for T, S, unary, pairwise in masked_instances(250, 11):
        seqs = all_sequences(T, S)
        scores = sequence_scores(unary, pairwise, seqs)
        expected = np.sort(scores)[::-1]
        n_finite = int(np.isfinite(scores).sum())
        y, _ = kern.viterbi(unary, pairwise)
        if n_finite:
            assert sequence_scores(unary, pairwise, y[None])[0] == expected[0]
        previous = None
        for K in (1, 2, 3, 7, 16, 17, 30):
            labels, values = kern.topk_viterbi(unary, pairwise, K)
            kk = min(K, S**T)
            assert labels.shape == (kk, T) and values.shape == (kk,)
            np.testing.assert_array_equal(values, expected[:kk])
            np.testing.assert_array_equal(sequence_scores(unary, pairwise, labels), values)
            assert len({tuple(lab) for lab in labels}) == kk
            np.testing.assert_array_equal(labels[0], y)  # same tie-breaking as Viterbi
            if previous is not None:  # deterministic order: the K best extend the K' < K best
                np.testing.assert_array_equal(labels[:len(previous)], previous)
            previous = labels
            n_partial += 0 < n_finite < kk
        n_checked += 1
    assert n_checked == 250 and n_partial > 20  # padding was exercised


def eager_topk(unary, pairwise, K):
    """Reference K best (values and labels): every cell sorts all S * K extended partial sequences,
    ordered by value, then previous state, then previous rank (the documented tie-breaking)."""
    T, S = unary.shape
    pw = np.broadcast_to(pairwise, (max(T - 1, 1), S, S))
    cells = [[[(unary[0, b], (b,))] for b in range(S)]]
    for t in range(1, T):
        row = []
        for b in range(S):
            cand = [(v + pw[t - 1, a, b], a, r, seq) for a in range(S) for r, (v, seq) in enumerate(cells[-1][a])]
            cand.sort(key=lambda e: (-e[0], e[1], e[2]))
            row.append([(v + unary[t, b], (*seq, b)) for v, _, _, seq in cand[:K]])
        cells.append(row)
    final = [(v, b, r, seq) for b in range(S) for r, (v, seq) in enumerate(cells[-1][b])]
    final.sort(key=lambda e: (-e[0], e[1], e[2]))
    return np.array([e[3] for e in final[:K]]), np.array([e[0] for e in final[:K]])


def test_topk_matches_eager_reference_on_longer_chains():
    rng = np.random.default_rng(5)
    for trial in range(8):
        T, S = int(rng.integers(8, 16)), int(rng.integers(3, 8))
        unary, pairwise = masked_instance(rng, T, S, 0.3 * (trial % 2))
        if trial >= 6:  # heavy ties
            unary[np.isfinite(unary)], pairwise[np.isfinite(pairwise)] = 0.0, 0.0
        for K in (5, 40):
            labels, values = kern.topk_viterbi(unary, pairwise, K)
            ref_labels, ref_values = eager_topk(unary, pairwise, K)
            np.testing.assert_array_equal(values, ref_values)
            np.testing.assert_array_equal(labels, ref_labels)


def test_viterbi_marginals_max_marginals_with_forbidden_entries():
    n_infeasible = 0
    chain_cache = {}
    for T, S, unary, pairwise in masked_instances(250, 12):
        chain = chain_cache.setdefault(S, Chain(S))
        theta = ChainPotentials(unary, pairwise if pairwise.shape[0] > 1 else pairwise[0])
        seqs = all_sequences(T, S)
        scores = sequence_scores(unary, pairwise, seqs)
        feasible = np.isfinite(scores)
        log_z, node, edge = kern.forward_backward(unary, pairwise)
        assert not np.isnan(node).any() and not np.isnan(edge).any()
        if not feasible.any():  # every oracle refuses (issue 22): no sequence of score -inf is returned
            n_infeasible += 1
            assert log_z == -np.inf and not node.any() and not edge.any()
            for oracle in (chain.argmax, chain.marginals, chain.max_marginals, lambda th, c=chain: c.topk(th, 3)):
                with pytest.raises(InvalidInputError, match=r"forbid every output.*score -inf"):
                    oracle(theta)
            continue
        y = chain.argmax(theta)
        assert sequence_scores(unary, pairwise, y[None])[0] == scores.max()
        mm = chain.max_marginals(theta)
        expected_mm = np.array([[scores[seqs[:, t] == s].max() for s in range(S)] for t in range(T)])
        np.testing.assert_array_equal(mm, expected_mm)
        log_z, marg = chain.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores[feasible]), abs=1e-12)
        p = np.exp(scores[feasible] - log_z)
        f = seqs[feasible]
        expected_node = np.array([[p[f[:, t] == s].sum() for s in range(S)] for t in range(T)])
        np.testing.assert_allclose(marg.unary, expected_node, atol=1e-12)
        for t in range(T - 1):
            expected_edge = np.zeros((S, S))
            np.add.at(expected_edge, (f[:, t], f[:, t + 1]), p)
            np.testing.assert_allclose(marg.pairwise[t], expected_edge, atol=1e-12)
            forbidden = np.isneginf(pairwise[t if pairwise.shape[0] > 1 else 0])
            assert np.all(marg.pairwise[t][forbidden] == 0.0)  # exactly zero, not tiny
        assert np.all(marg.unary[np.isneginf(unary)] == 0.0)
    assert n_infeasible > 5


# ----------------------------------------------------------------------------- range and bad values
def exact_scores(unary, pairwise, seqs):
    """Scores as exact rationals (no overflow or rounding), for potentials near the float64 limit."""
    T = seqs.shape[1]
    pw = np.broadcast_to(pairwise, (max(T - 1, 1), *pairwise.shape[1:]))
    return [sum(Fraction(unary[t, y[t]]) for t in range(T))
            + sum(Fraction(pw[t, y[t], y[t + 1]]) for t in range(T - 1)) for y in seqs]


@pytest.mark.parametrize("scale", [1e8, 1e15, 1e100, 1e300, 1e307, 1.7e308])
def test_marginals_and_argmax_at_huge_magnitudes(scale):
    """Finite log Z and valid marginals wherever log Z is representable; the exact maximiser."""
    rng = np.random.default_rng(int(np.log10(scale)))
    n_checked = 0
    for trial in range(40):
        T, S = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        unary = scale * rng.uniform(-1, 1, (T, S))
        pairwise = scale * rng.uniform(-1, 1, (T - 1 if T > 1 and trial % 2 else 1, S, S))
        if trial % 3 == 0:
            pairwise[rng.random(pairwise.shape) < 0.3] = -np.inf
        theta = ChainPotentials(unary, pairwise if pairwise.shape[0] > 1 else pairwise[0])
        seqs = all_sequences(T, S)
        exact = exact_scores(np.where(np.isinf(unary), 0, unary), np.where(np.isinf(pairwise), 0, pairwise), seqs)
        allowed = np.isfinite(sequence_scores(np.where(np.isinf(unary), -np.inf, 0),
                                              np.where(np.isinf(pairwise), -np.inf, 0), seqs))
        if not allowed.any():
            continue
        exact = [s if ok else None for s, ok in zip(exact, allowed)]
        best = max(s for s in exact if s is not None)
        chain = Chain(S)
        y = chain.argmax(theta)
        assert exact[int(np.flatnonzero((seqs == y).all(axis=1))[0])] == best
        largest = Fraction(np.finfo(float).max)
        if abs(best) > largest * Fraction(1 + 1e-9):  # log Z beyond float64 (log S**T is negligible)
            with pytest.raises(InvalidInputError, match="float64 range"):
                chain.marginals(theta)
            continue
        if abs(best) > largest * Fraction(1 - 1e-9):
            continue  # rounding decides
        log_z, marg = chain.marginals(theta)
        assert np.isfinite(log_z)
        assert log_z == pytest.approx(float(best), rel=1e-12, abs=np.log(S**T) + 1e-9)
        for m in (marg.unary, marg.pairwise):
            assert np.all((m >= 0) & (m <= 1 + 1e-12))
        np.testing.assert_allclose(marg.unary.sum(axis=1), 1.0, atol=1e-12)
        if T > 1:
            np.testing.assert_allclose(marg.pairwise.sum(axis=2), marg.unary[:-1], atol=1e-9)
        ranked = sorted((s for s in exact if s is not None), reverse=True)
        if len(ranked) == 1 or ranked[0] - ranked[1] > 40:  # a clear winner takes all the mass
            winner = seqs[exact.index(best)]
            np.testing.assert_allclose(flatten(marg), flatten(chain.stats(winner, theta)), atol=1e-12)
            n_checked += 1
    assert n_checked > 10


def test_marginals_when_partial_sums_overflow_but_log_z_does_not():
    chain = Chain(2)
    unary = np.array([[1.5e308, 1.4e308], [1.5e308, 1.5e308], [-1.6e308, -1.7e308]])
    log_z, marg = chain.marginals(ChainPotentials(unary, np.zeros((2, 2))))
    assert log_z == pytest.approx(1.4e308, rel=1e-12)
    np.testing.assert_allclose(marg.unary, [[1, 0], [0.5, 0.5], [1, 0]], atol=1e-12)
    with pytest.raises(InvalidInputError, match="float64 range"):
        chain.marginals(ChainPotentials(np.full((3, 2), 1e308), np.zeros((2, 2))))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("where", ["unary", "pairwise"])
def test_nan_and_positive_inf_potentials_are_refused(bad, where):
    chain = Chain(3)
    unary, pairwise = np.zeros((4, 3)), np.zeros((3, 3))
    (unary if where == "unary" else pairwise)[1, 2] = bad
    theta = ChainPotentials(unary, pairwise)
    what = "NaN" if np.isnan(bad) else r"\+inf"
    index = r"unary\[1, 2\]" if where == "unary" else r"pairwise\[0, 1, 2\]"
    for oracle in (chain.argmax, chain.marginals):
        with pytest.raises(InvalidInputError, match=f"{what} \\({index}\\)"):
            oracle(theta)


# ----------------------------------------------------------------------------- argmax: per-call path
class _Routed(ChainPotentials):
    """Same potentials, another type: ``Chain.argmax`` sends them down its generic path."""


def _generic_argmax(chain, theta):
    """``Chain.argmax`` through its generic path (the per-call kernel entry takes ChainPotentials only)."""
    return chain.argmax(_Routed(*theta))


def _outcome(oracle, theta):
    try:
        return oracle(theta).tolist()
    except InvalidInputError as error:
        return f"error: {error}"


@pytest.mark.parametrize("T,S", [(1, 1), (1, 3), (2, 2), (5, 3), (8, 26)])
@pytest.mark.parametrize("shared", [True, False])
def test_argmax_entry_equals_generic_path(T, S, shared):
    rng = seeded("entry", T, S, shared)
    chain = Chain(S)
    for trial in range(30):
        theta = make_theta(T, S, shared, rng, integer=trial % 2 == 0)  # integer entries: many ties
        if trial % 3 == 0:  # forbidden entries (possibly every output)
            theta.unary[rng.random(theta.unary.shape) < 0.3] = -np.inf
            theta.pairwise[rng.random(theta.pairwise.shape) < 0.3] = -np.inf
        if trial % 7 == 0:  # huge magnitudes: the kernel scales them
            theta = ChainPotentials(theta.unary * 1e306, theta.pairwise * 1e306)
        assert _outcome(chain.argmax, theta) == _outcome(lambda th: _generic_argmax(chain, th), theta)


def test_argmax_entry_refuses_like_the_generic_path():
    chain = Chain(3)
    good = ChainPotentials(np.zeros((4, 3)), np.zeros((3, 3)))
    cases = [
        ChainPotentials(np.zeros((4, 2)), np.zeros((3, 3))),          # wrong S in unary
        ChainPotentials(np.zeros((4, 3)), np.zeros((2, 3, 3))),       # wrong number of transitions
        ChainPotentials(np.zeros((4, 3)), np.zeros((3, 2))),          # wrong S in pairwise
        ChainPotentials(np.zeros((0, 3)), np.zeros((3, 3))),          # empty chain
        ChainPotentials(np.zeros((1, 3)), np.zeros((1, 3, 3))),       # one position: (0, S, S) or (S, S)
        ChainPotentials(np.full((4, 3), np.nan), good.pairwise),      # NaN
        ChainPotentials(good.unary, np.full((3, 3), np.inf)),         # +inf
        ChainPotentials(np.full((4, 3), -np.inf), good.pairwise),     # every output forbidden
        ChainPotentials(np.zeros(4), good.pairwise),                  # 1-d unary
        ChainPotentials(np.zeros((4, 3, 1)), good.pairwise),          # 3-d unary
        ChainPotentials(good.unary, np.zeros(3)),                     # 1-d pairwise
        ChainPotentials(good.unary, np.zeros((1, 3, 3, 3))),          # 4-d pairwise
        ChainPotentials(np.zeros(()), np.zeros(())),                  # scalars
    ]
    for theta in cases:
        fast, generic = _outcome(chain.argmax, theta), _outcome(lambda th: _generic_argmax(chain, th), theta)
        assert fast.startswith("error: ") and fast == generic, (theta, fast, generic)
    # a one-position chain ignores its transitions, as the generic path does (NaN there included)
    theta = ChainPotentials(np.array([[0.0, 2.0, 1.0]]), np.full((3, 3), np.nan))
    assert chain.argmax(theta).tolist() == _generic_argmax(chain, theta).tolist() == [1]


def test_argmax_converts_what_the_kernel_does_not_take():
    chain = Chain(4)
    theta = make_theta(6, 4, True, seeded("convert"), integer=False)
    expected = chain.argmax(theta).tolist()
    readonly = ChainPotentials(theta.unary.copy(), theta.pairwise.copy())
    readonly.unary.flags.writeable = False
    variants = [
        ChainPotentials(np.asfortranarray(theta.unary), theta.pairwise),   # not C-contiguous
        ChainPotentials(theta.unary.tolist(), theta.pairwise.tolist()),    # lists
        ChainPotentials(theta.unary[:, ::1], theta.pairwise.T.copy().T),   # views
        readonly,
    ]
    for variant in variants:
        assert chain.argmax(variant).tolist() == expected
    ints = ChainPotentials(np.arange(24).reshape(6, 4) % 3, np.eye(4, dtype=np.int64))
    assert chain.argmax(ints).tolist() == _generic_argmax(chain, ChainPotentials(
        ints.unary.astype(float), ints.pairwise.astype(float))).tolist()


def test_masked_chain_keeps_the_masks():
    allowed = np.ones((3, 3), dtype=bool)
    allowed[0, 1] = False
    chain = Chain(3, allowed=allowed, allowed_start=np.array([False, True, True]))
    theta = ChainPotentials(np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 0]]), np.zeros((3, 3)))
    y = chain.argmax(theta)
    assert chain.feasible(y) and y[0] != 0


def test_argmax_routes_by_input_kind(monkeypatch):
    calls = []
    entry = kern.argmax_entry

    def counted(*args):
        calls.append(args[0].shape)
        return entry(*args)

    monkeypatch.setattr(kern, "argmax_entry", counted)
    chain = Chain(3)
    theta = make_theta(4, 3, False, seeded("route"))
    chain.argmax(theta)
    assert calls == [(4, 3)]  # ChainPotentials of float64 C arrays: the one-call kernel entry
    chain.argmax(_Routed(*theta))
    chain.argmax(ChainPotentials(theta.unary.tolist(), theta.pairwise))
    Chain(3, allowed_end=np.array([True, False, True])).argmax(theta)
    assert calls == [(4, 3)]  # the rest: the generic path
