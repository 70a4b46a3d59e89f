"""Smoothing helpers: simplex projection, l2- and entropy-smoothed maxima."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from structopt.smoothing import entropy_smoothed_max, l2_smoothed_max, logsumexp, project_simplex

finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)
vectors = arrays(np.float64, st.integers(1, 12), elements=finite)


def kkt_violation(v, u):
    """Largest violation of the simplex-projection KKT system: u = max(v - tau, 0), sum u = 1."""
    support = u > 1e-12
    tau = np.mean(v[support] - u[support])
    return max(abs(u.sum() - 1.0), float(np.max(np.abs(u - np.maximum(v - tau, 0.0)))))


@given(vectors)
def test_project_simplex_kkt(v):
    u = project_simplex(v)
    assert u.shape == v.shape and u.min() >= 0
    assert kkt_violation(v, u) <= 1e-9 * (1 + np.abs(v).max())


@pytest.mark.parametrize("v", [[0.3], [-5.0], [1.0, 1.0, 1.0], [0.2, 0.3, 0.5], [3.0, -1.0, 3.0, 0.0],
                               [10.0, 0.0, 0.0, 0.0, 0.0], [-2.0, -2.0, -7.0]])
def test_project_simplex_vs_cvxpy(v, ref):
    v = np.array(v)
    u = cp.Variable(len(v))
    cp.Problem(cp.Minimize(cp.sum_squares(u - v)), [u >= 0, cp.sum(u) == 1]).solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(project_simplex(v), u.value, atol=1e-6)
    np.testing.assert_allclose(project_simplex(v), ref.simplex(v), atol=1e-10)


def test_project_simplex_random_vs_cvxpy(rng):
    for m in (2, 5, 20):
        v = 3 * rng.normal(size=m)
        u = cp.Variable(m)
        cp.Problem(cp.Minimize(cp.sum_squares(u - v)), [u >= 0, cp.sum(u) == 1]).solve(solver=cp.CLARABEL)
        np.testing.assert_allclose(project_simplex(v), u.value, atol=1e-6)


def test_project_simplex_bad_input():
    for bad in ([], [[1.0, 2.0]]):
        with pytest.raises(ValueError):
            project_simplex(np.array(bad))


@given(vectors, st.floats(0.01, 20))
def test_l2_smoothed_max_bounds_and_reference(ref, z, mu):
    value, u = l2_smoothed_max(z, mu)
    ref_value, _ = ref.l2_max(z, mu)
    m = len(z)
    assert z.max() - 1e-9 <= value <= z.max() + mu * (1 - 1 / m) / 2 + 1e-9
    assert value == pytest.approx(ref_value, abs=1e-8 * (1 + abs(ref_value)))
    assert u.min() >= 0 and u.sum() == pytest.approx(1.0)


@given(vectors, st.floats(0.01, 20))
def test_entropy_smoothed_max_bounds(z, mu):
    value, p = entropy_smoothed_max(z, mu)
    assert z.max() - 1e-9 <= value <= z.max() + mu * np.log(len(z)) + 1e-9
    assert p.min() >= 0 and p.sum() == pytest.approx(1.0)


def test_smoothed_max_gradients_by_finite_differences(rng, ref):
    for fn, reference in ((l2_smoothed_max, ref.l2_max), (entropy_smoothed_max, ref.entropy_max)):
        for mu in (0.3, 2.0):
            z = rng.normal(size=6)
            value, grad = fn(z, mu)
            assert value == pytest.approx(reference(z, mu)[0], abs=1e-9)
            np.testing.assert_allclose(grad, reference(z, mu)[1], atol=1e-8)
            h = 1e-6
            fd = np.array([(fn(z + h * e, mu)[0] - fn(z - h * e, mu)[0]) / (2 * h) for e in np.eye(6)])
            np.testing.assert_allclose(grad, fd, atol=1e-6)


def test_smoothed_max_limits_and_monotonicity(rng):
    z = rng.normal(size=5)
    for fn in (l2_smoothed_max, entropy_smoothed_max):
        values = [fn(z, mu)[0] for mu in (1e-4, 0.1, 1.0, 10.0)]
        assert np.all(np.diff(values) >= -1e-12)  # monotone in mu
        assert values[0] == pytest.approx(z.max(), abs=1e-3)
        np.testing.assert_allclose(fn(z, 1e-6)[1], np.eye(5)[np.argmax(z)], atol=1e-6)
    # mu -> infinity: uniform weights
    np.testing.assert_allclose(l2_smoothed_max(z, 1e6)[1], np.full(5, 0.2), atol=1e-5)
    np.testing.assert_allclose(entropy_smoothed_max(z, 1e6)[1], np.full(5, 0.2), atol=1e-5)


def test_smoothing_rejects_bad_mu():
    for fn in (l2_smoothed_max, entropy_smoothed_max):
        for mu in (0.0, -1.0):
            with pytest.raises(ValueError, match="mu"):
                fn(np.zeros(3), mu)


def test_logsumexp():
    assert logsumexp(np.array([])) == -np.inf
    assert logsumexp(np.array([-np.inf, -np.inf])) == -np.inf
    assert logsumexp(np.array([1000.0, 1000.0])) == pytest.approx(1000 + np.log(2))
    assert logsumexp(np.array([-np.inf, 0.0])) == pytest.approx(0.0)
