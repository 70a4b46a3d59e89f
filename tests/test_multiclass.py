"""MultiClass structure against enumeration, the simplex projection and the LP."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.smoothing import logsumexp
from structopt.structures import MultiClass, MultiClassPotentials
from structopt.validate import check_structure


@pytest.mark.parametrize("S", [1, 2, 3, 7])
@pytest.mark.parametrize("integer", [True, False])
def test_oracles_match_enumeration(S, integer, ref):
    rng = np.random.default_rng(S + 10 * integer)
    mc = MultiClass(S)
    for _ in range(5):
        scores = rng.integers(-2, 3, S).astype(float) if integer else rng.normal(size=S)
        theta = MultiClassPotentials(scores)
        b = ref.brute(mc, theta)
        assert b.outputs == list(range(S))
        assert mc.score(theta, mc.argmax(theta)) == scores.max()
        for k in (1, 3, S, S + 4):
            labels, top = mc.topk(theta, k)
            assert len(labels) == min(k, S) and len(set(labels.tolist())) == len(labels)
            np.testing.assert_array_equal(top, np.sort(scores)[::-1][:k])
            np.testing.assert_array_equal(scores[labels], top)
        log_z, marg = mc.marginals(theta)
        assert log_z == pytest.approx(np.log(np.exp(scores).sum()))
        np.testing.assert_allclose(marg.scores, np.exp(scores - logsumexp(scores)))
        np.testing.assert_array_equal(mc.max_marginals(theta), scores)
        value, z = mc.lp_relaxation(theta)
        assert value == pytest.approx(scores.max())
        if np.sum(scores == scores.max()) == 1:
            np.testing.assert_allclose(z.scores, np.eye(S)[np.argmax(scores)], atol=1e-9)


@pytest.mark.parametrize("S", [1, 2, 5])
def test_project_and_prox(S, ref):
    rng = np.random.default_rng(S)
    mc = MultiClass(S)
    for scale in (0.1, 1.0, 10.0):
        v = MultiClassPotentials(scale * rng.normal(size=S))
        p = mc.project(v).scores
        np.testing.assert_allclose(p, ref.simplex(v.scores), atol=1e-9)
        np.testing.assert_allclose(p, mc.project_qp(v).scores, atol=1e-6)
    mu = MultiClassPotentials(np.exp(rng.normal(size=S)))
    mu = MultiClassPotentials(mu.scores / mu.scores.sum())
    step = MultiClassPotentials(rng.normal(size=S))
    for eta in (0.0, 0.5, 4.0):
        w = mu.scores * np.exp(eta * step.scores)
        np.testing.assert_allclose(mc.prox_entropy(mu, step, eta).scores, w / w.sum(), atol=1e-12)


@pytest.mark.parametrize("S", [1, 2, 4])
def test_check_structure_passes(S):
    theta = MultiClassPotentials(np.random.default_rng(S).integers(-1, 2, S).astype(float))
    report = check_structure(MultiClass(S), theta, k=S + 2)
    assert report.ok, report.table()
    assert report.row("max_marginals").agrees_enumeration is True


def test_bad_input():
    with pytest.raises(InvalidInputError):
        MultiClass(0)
    mc = MultiClass(3)
    with pytest.raises(InvalidInputError, match="shape"):
        mc.argmax(MultiClassPotentials(np.zeros(4)))
    for bad in (3, -1, 1.5, [1]):
        with pytest.raises(InvalidInputError, match="example 2"):
            mc.validate_output(bad, None, 2)
    assert mc.validate_output(np.int64(2)) == 2
    with pytest.raises(InvalidInputError, match="strictly positive"):
        mc.prox_entropy(MultiClassPotentials(np.array([1.0, 0.0, 0.0])), MultiClassPotentials(np.zeros(3)), 1.0)
