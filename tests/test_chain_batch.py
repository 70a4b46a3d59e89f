"""Batched chain kernels (structopt.structures._chain_batch) against Chain's per-example oracles, a
log-space recursion written here, and brute-force enumeration. numpy only (no torch)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.structures import Chain, ChainPotentials
from structopt.structures import _chain_batch as cb


def lse(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(m, axis) + np.log(np.sum(np.exp(x - m), axis=axis))


def log_space_reference(u, P, start, end):
    """Log-space forward-backward of one chain (u (L, S), P (S, S) or (L-1, S, S)) with boundary scores.

    The messages are shifted by their max at every position (the shifts add up to log Z separately) and
    the marginals are softmaxes of each position's shifted scores: exp(alpha + beta - log Z) with
    unshifted messages would carry an error of |log Z| * eps in the exponent (1e-11 at log Z ~ 5e4).
    """
    u = u.copy()
    u[0] += start
    u[-1] += end
    L, S = u.shape
    trans = [P if P.ndim == 2 else P[t] for t in range(L - 1)]
    alpha = np.empty((L, S))
    beta = np.zeros((L, S))
    alpha[0] = u[0] - u[0].max()
    log_z = u[0].max()
    for t in range(1, L):
        a = u[t] + lse(alpha[t - 1][:, None] + trans[t - 1], 0)
        alpha[t] = a - a.max()
        log_z += a.max()
    log_z += lse(alpha[-1], 0)
    for t in range(L - 2, -1, -1):
        b = lse(trans[t] + (u[t + 1] + beta[t + 1])[None, :], 1)
        beta[t] = b - b.max()

    def softmax(x):
        return np.exp(x - lse(x.ravel(), 0))

    node = np.array([softmax(alpha[t] + beta[t]) for t in range(L)])
    edge = np.array([softmax(alpha[t][:, None] + trans[t] + (u[t + 1] + beta[t + 1])[None, :])
                     for t in range(L - 1)]).reshape(L - 1, S, S)
    return log_z, node, edge


def random_batch(rng, B, T, S, shared, scale=1.0, min_length=1):
    unary = rng.uniform(-scale, scale, (B, T, S))
    pairwise = rng.uniform(-scale, scale, (S, S) if shared else (B, T - 1, S, S))
    lengths = rng.integers(min_length, T + 1, B)
    lengths[0] = T
    return unary, pairwise, lengths


def example(pairwise, i, L, shared):
    """The transitions of example i in Chain's layout."""
    S = pairwise.shape[-1]
    return pairwise if shared else (pairwise[i, :L - 1] if L > 1 else np.zeros((0, S, S)))


def close(a, b, rtol=1e-10, floor=0.0):
    """Relative agreement entry by entry (exact zeros must agree exactly); entries below ``floor`` agree
    to ``floor`` absolute."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.all(np.abs(a - b) <= rtol * np.abs(b) + floor), np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))


@pytest.mark.parametrize("shared", [True, False])
def test_marginals_equal_chain_per_example(shared):
    rng = np.random.default_rng(1)
    for S in (1, 2, 5):
        unary, pairwise, lengths = random_batch(rng, 6, 7, S, shared, scale=3.0)
        log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths)
        assert pair.shape == ((6, S, S) if shared else (6, 6, S, S))
        for i, L in enumerate(lengths):
            z, m = Chain(S).marginals(ChainPotentials(unary[i, :L], example(pairwise, i, L, shared)))
            assert log_z[i] == pytest.approx(z, rel=1e-12)
            np.testing.assert_allclose(node[i, :L], m.unary, rtol=1e-11, atol=1e-14)
            assert not node[i, L:].any()
            if shared:
                np.testing.assert_allclose(pair[i], m.pairwise.sum(axis=0), rtol=1e-11, atol=1e-14)
            else:
                np.testing.assert_allclose(pair[i, :L - 1], m.pairwise, rtol=1e-11, atol=1e-14)
                assert not pair[i, L - 1:].any()


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("scale", [1.0, 50.0, 1000.0])
def test_marginals_match_log_space_to_1e10_relative(shared, scale):
    """Random potentials of magnitude up to ±50 take the scaled path, ±1000 the log-space fallback;
    both agree with a plain log-space recursion to 1e-10 relative, entry by entry (the fallback, Chain's
    kernel, may flush marginals below ~1e-280 to zero: there the agreement is absolute)."""
    rng = np.random.default_rng(int(scale))
    S = 4
    unary, pairwise, lengths = random_batch(rng, 5, 9, S, shared, scale=scale)
    start, end = rng.uniform(-scale, scale, S), rng.uniform(-scale, scale, S)
    log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths, start=start, end=end)
    assert np.all(took_log_space(unary, pairwise, lengths, start, end) == (scale > 100))
    floor = 1e-280 if scale > 100 else 0.0
    for i, L in enumerate(lengths):
        z, n, e = log_space_reference(unary[i, :L], example(pairwise, i, L, shared), start, end)
        close(log_z[i], z)
        close(node[i, :L], n, floor=floor)
        close(pair[i] if shared else pair[i, :L - 1], e.sum(axis=0) if shared else e, floor=floor)


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False])
def test_long_chains_match_log_space(shared):
    rng = np.random.default_rng(7)
    S, T = 5, 1000
    for scale in (1.0, 50.0):
        unary, pairwise, lengths = random_batch(rng, 2, T, S, shared, scale=scale, min_length=T - 3)
        log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths)
        assert not took_log_space(unary, pairwise, lengths).any()
        for i, L in enumerate(lengths):
            z, n, e = log_space_reference(unary[i, :L], example(pairwise, i, L, shared), np.zeros(S), np.zeros(S))
            close(log_z[i], z)
            close(node[i, :L], n)
            close(pair[i] if shared else pair[i, :L - 1], e.sum(axis=0) if shared else e)


def test_long_chain_shared_matches_log_space():
    """One T = 1000 chain at ±50 (the scaled path all the way)."""
    rng = np.random.default_rng(8)
    unary, pairwise, lengths = random_batch(rng, 1, 1000, 3, True, scale=50.0)
    log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths)
    assert not took_log_space(unary, pairwise, lengths).any()
    z, n, e = log_space_reference(unary[0], pairwise, np.zeros(3), np.zeros(3))
    close(log_z[0], z)
    close(node[0], n)
    close(pair[0], e.sum(axis=0))


def test_mixed_batch_fallback_and_scaled_agree():
    """One example needs the log-space fallback (potentials ~1e3), the others not: each is exact."""
    rng = np.random.default_rng(3)
    unary, pairwise, lengths = random_batch(rng, 4, 6, 3, False, scale=2.0)
    unary[2] *= 800.0
    pairwise[2] *= 800.0
    log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths)
    np.testing.assert_array_equal(took_log_space(unary, pairwise, lengths), [False, False, True, False])
    for i, L in enumerate(lengths):
        z, n, e = log_space_reference(unary[i, :L], example(pairwise, i, L, False), np.zeros(3), np.zeros(3))
        close(log_z[i], z)
        close(node[i, :L], n, floor=1e-280)
        close(pair[i, :L - 1], e, floor=1e-280)


def took_log_space(unary, pairwise, lengths, start=None, end=None):
    """Which examples the kernel recomputed in log space (the scaled path's guard failed)."""
    S = unary.shape[2]
    shared = pairwise.ndim == 2
    zeros = np.zeros(S)
    return cb.marginals_kernel(unary, pairwise.reshape(1, 1, S, S) if shared else pairwise, shared,
                               zeros if start is None else start, zeros if end is None else end, lengths,
                               np.zeros((1, 1), dtype=np.int64), False)[4]


def enumerate_chains(u, P, start, end):
    """All label sequences of one chain with their scores and statistics (brute force)."""
    L, S = u.shape
    seqs = np.array(list(itertools.product(range(S), repeat=L)))
    scores = start[seqs[:, 0]] + end[seqs[:, -1]] + u[np.arange(L), seqs].sum(axis=1)
    for t in range(L - 1):
        scores = scores + (P if P.ndim == 2 else P[t])[seqs[:, t], seqs[:, t + 1]]
    return seqs, scores


@pytest.mark.parametrize("shared", [True, False])
def test_brute_force_on_tiny_chains(shared):
    rng = np.random.default_rng(11)
    for B, T, S in ((3, 1, 3), (4, 3, 2), (3, 4, 3)):
        unary, pairwise, lengths = random_batch(rng, B, T, S, shared, scale=2.0)
        start, end = rng.normal(size=S), rng.normal(size=S)
        if not shared and T > 1:
            pairwise[0, 0, 1, 0] = -np.inf  # a forbidden transition
        log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths, start=start, end=end)
        labels, best = cb.batch_viterbi(unary, pairwise, lengths, start=start, end=end)
        top, top_scores = cb.batch_topk(unary, pairwise, lengths, 5, start=start, end=end)
        for i, L in enumerate(lengths):
            P = example(pairwise, i, L, shared)
            seqs, scores = enumerate_chains(unary[i, :L], P, start, end)
            assert log_z[i] == pytest.approx(np.logaddexp.reduce(scores), rel=1e-12)
            p = np.exp(scores - log_z[i])
            expect = np.zeros((L, S))
            edges = np.zeros((max(L - 1, 0), S, S))
            for q, y in zip(p, seqs, strict=True):
                expect[np.arange(L), y] += q
                edges[np.arange(L - 1), y[:-1], y[1:]] += q
            np.testing.assert_allclose(node[i, :L], expect, atol=1e-12)
            np.testing.assert_allclose(pair[i] if shared else pair[i, :L - 1], edges.sum(0) if shared else edges,
                                       atol=1e-12)
            assert best[i] == pytest.approx(scores.max(), rel=1e-12)
            assert cb.batch_score(unary[i:i + 1], P if shared else pairwise[i:i + 1], lengths[i:i + 1],
                                  labels[i:i + 1], start=start, end=end)[0] == pytest.approx(scores.max(), rel=1e-12)
            order = np.sort(scores[np.isfinite(scores)])[::-1][:5]
            np.testing.assert_allclose(top_scores[i, :len(order)], order, rtol=1e-12)
            assert np.all(top_scores[i, len(order):] == -np.inf) and np.all(top[i, len(order):] == -1)


@pytest.mark.parametrize("shared", [True, False])
def test_viterbi_and_topk_equal_chain(shared):
    rng = np.random.default_rng(5)
    S = 4
    unary, pairwise, lengths = random_batch(rng, 8, 9, S, shared, scale=3.0)
    unary = np.round(unary)  # integers: ties, broken the same way
    pairwise = np.round(pairwise)
    labels, scores = cb.batch_viterbi(unary, pairwise, lengths)
    top, top_scores = cb.batch_topk(unary, pairwise, lengths, 3)
    for i, L in enumerate(lengths):
        theta = ChainPotentials(unary[i, :L], example(pairwise, i, L, shared))
        np.testing.assert_array_equal(labels[i, :L], Chain(S).argmax(theta))
        assert np.all(labels[i, L:] == -1)
        assert scores[i] == Chain(S).score(theta, labels[i, :L])
        ys, vals = Chain(S).topk(theta, 3)
        np.testing.assert_array_equal(top[i, :, :L], ys)
        np.testing.assert_array_equal(top_scores[i], vals)
    np.testing.assert_allclose(cb.batch_score(unary, pairwise, lengths, labels), scores, rtol=1e-13)


def test_masked_transitions_equal_constrained_chain():
    rng = np.random.default_rng(9)
    S = 4
    allowed = rng.random((S, S)) < 0.6
    np.fill_diagonal(allowed, True)
    unary, pairwise, lengths = random_batch(rng, 6, 8, S, True, scale=2.0)
    masked = np.where(allowed, pairwise, -np.inf)
    chain = Chain(S, allowed=allowed)
    log_z, node, pair = cb.batch_marginals(unary, masked, lengths)
    labels, _ = cb.batch_viterbi(unary, masked, lengths)
    assert not pair[:, ~allowed].any()
    for i, L in enumerate(lengths):
        theta = ChainPotentials(unary[i, :L], pairwise)
        z, m = chain.marginals(theta)
        assert log_z[i] == pytest.approx(z, rel=1e-12)
        np.testing.assert_allclose(node[i, :L], m.unary, atol=1e-12)
        np.testing.assert_allclose(pair[i], m.pairwise.sum(0), atol=1e-12)
        np.testing.assert_array_equal(labels[i, :L], chain.argmax(theta))


def test_infeasible_example_has_minus_inf_log_z():
    S = 2
    pairwise = np.array([[-np.inf, 0.0], [-np.inf, -np.inf]])  # only 0 -> 1, then nothing
    unary = np.zeros((2, 3, S))
    log_z, node, pair = cb.batch_marginals(unary, pairwise, np.array([2, 3]))
    assert log_z[0] == pytest.approx(0.0) and log_z[1] == -np.inf
    assert not node[1].any() and not pair[1].any()
    np.testing.assert_array_equal(node[0, :2], [[1, 0], [0, 1]])
    _, scores = cb.batch_viterbi(unary, pairwise, np.array([2, 3]))
    assert scores[0] == 0.0 and scores[1] == -np.inf


def test_nll_and_gradient_statistics():
    rng = np.random.default_rng(4)
    S = 3
    for shared in (True, False):
        unary, pairwise, lengths = random_batch(rng, 5, 6, S, shared, scale=2.0)
        labels = rng.integers(0, S, (5, 6))
        start, end = rng.normal(size=S), rng.normal(size=S)
        nll, gnode, gpair = cb.batch_nll(unary, pairwise, lengths, labels, start=start, end=end)
        log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths, start=start, end=end)
        score = cb.batch_score(unary, pairwise, lengths, labels, start=start, end=end)
        np.testing.assert_allclose(nll, log_z - score, rtol=1e-12)
        for i, L in enumerate(lengths):
            gold = np.zeros((6, S))
            gold[np.arange(L), labels[i, :L]] = 1.0
            np.testing.assert_allclose(gnode[i], node[i] - gold, atol=1e-13)
            edges = np.zeros((5, S, S))
            edges[np.arange(L - 1), labels[i, :L - 1], labels[i, 1:L]] = 1.0
            np.testing.assert_allclose(gpair[i], pair[i] - (edges.sum(0) if shared else edges), atol=1e-13)


def test_huge_potentials_viterbi_scales():
    """Scores near the float64 limit: Viterbi scales down (like Chain.argmax) and scales the score back."""
    rng = np.random.default_rng(2)
    unary = rng.uniform(-1, 1, (2, 5, 3)) * 1e306
    pairwise = rng.uniform(-1, 1, (3, 3)) * 1e306
    lengths = np.array([5, 3])
    labels, _ = cb.batch_viterbi(unary, pairwise, lengths)
    for i, L in enumerate(lengths):
        np.testing.assert_array_equal(labels[i, :L], Chain(3).argmax(ChainPotentials(unary[i, :L], pairwise)))


def test_underflowed_exponentials_are_not_forbidden_entries():
    """An exponential that underflows to 0 in the scaled tables (a score 800 below the best of its row) is
    not a -inf entry: the example goes to the log-space recursion. Before the guard looked at finite
    entries only, label 1 at position 1 got marginal 0 here instead of ~1/2, and the transition 0 -> 1
    at position 0 marginal 0 instead of ~1e-174 (and an exact 0 in the log-space reference would not pass
    ``close``)."""
    unary = np.array([[[0.0, 0.0], [0.0, -800.0], [0.0, 0.0]],
                      [[400.0, 0.0], [0.0, 400.0], [0.0, 0.0]]])
    lengths = np.array([3, 2])
    pairwise = np.array([[[[0.0, 400.0], [400.0, 800.0]]] * 2,  # label 1 pays its unary -800 back
                         [[[0.0, -800.0], [-800.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]])
    log_z, node, pair = cb.batch_marginals(unary, pairwise, lengths)
    assert took_log_space(unary, pairwise, lengths).all()
    for i, L in enumerate(lengths):
        z, n, e = log_space_reference(unary[i, :L], pairwise[i, :L - 1], np.zeros(2), np.zeros(2))
        close(log_z[i], z)
        close(node[i, :L], n)
        close(pair[i, :L - 1], e)
    assert node[0, 1, 1] > 0.4 and 1e-175 < pair[1, 0, 0, 1] < 1e-173
    shared = pairwise[1, 0]  # the same 800-below transition, shared
    log_z, node, pair = cb.batch_marginals(unary[1:], shared, lengths[1:])
    assert took_log_space(unary[1:], shared, lengths[1:]).all()
    assert 1e-175 < pair[0, 0, 1] < 1e-173


def test_padding_is_never_read():
    rng = np.random.default_rng(12)
    unary, pairwise, lengths = random_batch(rng, 4, 6, 3, True, scale=2.0)
    padded = unary.copy()
    padded[np.arange(6)[None, :] >= lengths[:, None]] = np.nan
    for fn in (cb.batch_marginals, cb.batch_viterbi):
        for a, b in zip(fn(padded, pairwise, lengths), fn(unary, pairwise, lengths), strict=True):
            np.testing.assert_array_equal(a, b)


def test_deterministic():
    rng = np.random.default_rng(6)
    unary, pairwise, lengths = random_batch(rng, 7, 10, 5, True, scale=5.0)
    first = cb.batch_marginals(unary, pairwise, lengths)
    again = cb.batch_marginals(unary.copy(), pairwise.copy(), lengths.copy())
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("call, message", [
    (lambda: cb.batch_marginals(np.zeros((2, 3)), np.zeros((3, 3)), [1, 1]), "unary must be"),
    (lambda: cb.batch_marginals(np.zeros((2, 3, 3)), np.zeros((3, 2)), np.array([1, 1])), "pairwise must be"),
    (lambda: cb.batch_marginals(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([1, 4])), r"lengths\[1\] = 4"),
    (lambda: cb.batch_marginals(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([0, 1])), r"lengths\[0\] = 0"),
    (lambda: cb.batch_marginals(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([1.0, 1.0])), "lengths must be"),
    (lambda: cb.batch_marginals(np.full((2, 3, 3), np.nan), np.zeros((3, 3)), np.array([1, 1])), "NaN"),
    (lambda: cb.batch_marginals(np.zeros((2, 3, 3)), np.full((3, 3), np.inf), np.array([1, 1])), r"\+inf"),
    (lambda: cb.batch_viterbi(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([1, 1]), start=np.zeros(2)), "start"),
    (lambda: cb.batch_score(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([3, 1]), np.full((2, 3), 3)),
     r"labels\[0, 0\] = 3"),
    (lambda: cb.batch_topk(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.array([3, 1]), 0), "k must be"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(InvalidInputError, match=message):
        call()
