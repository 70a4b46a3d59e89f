"""Linear models: joint features against a direct computation, adjoint identity, input checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError
from structopt.models import ChainModel, MultiClassModel
from structopt.structures import ChainPotentials, MultiClassPotentials, inner

CONFIGS = [(False, False), (True, False), (False, True), (True, True)]


def sparse_input(rng, T, F, density=0.4):
    x = rng.normal(size=(T, F)) * (rng.random((T, F)) < density)
    return x, sp.csr_matrix(x)


def direct_phi(x, y, S, start_end, bias):
    """Phi(x, y) block by block, straight from the model's definition."""
    x = np.asarray(x.todense() if sp.issparse(x) else x)
    T, F = x.shape
    unary = np.zeros((F, S))
    for t in range(T):
        unary[:, y[t]] += x[t]
    pairwise = np.zeros((S, S))
    for t in range(T - 1):
        pairwise[y[t], y[t + 1]] += 1
    blocks = [unary.ravel(), pairwise.ravel()]
    if start_end:
        blocks += [np.eye(S)[y[0]], np.eye(S)[y[-1]]]
    if bias:
        blocks += [np.bincount(y, minlength=S).astype(float)]
    return np.concatenate(blocks)


@pytest.mark.parametrize(("start_end", "bias"), CONFIGS)
@pytest.mark.parametrize("T", [1, 2, 5])
def test_joint_feature_matches_direct(T, start_end, bias, rng):
    F, S = 4, 3
    model = ChainModel(F, S, start_end=start_end, bias=bias)
    dense, csr = sparse_input(rng, T, F)
    for _ in range(4):
        y = rng.integers(0, S, T)
        expected = direct_phi(dense, y, S, start_end, bias)
        like = model.potentials(dense, model.zeros())
        np.testing.assert_allclose(model.features(dense, model.structure.stats(y, like)), expected, atol=1e-12)
        np.testing.assert_allclose(model.features(csr, model.structure.stats(y, like)), expected, atol=1e-12)
        np.testing.assert_allclose(model.joint_feature(csr, y), expected, atol=1e-12)
        # score = <w, Phi>
        w = rng.normal(size=model.n_params)
        for x in (dense, csr):
            assert model.structure.score(model.potentials(x, w), y) == pytest.approx(w @ expected)


@pytest.mark.parametrize(("start_end", "bias"), CONFIGS)
def test_adjoint_identity_and_sparse_dense_agree(start_end, bias, rng):
    F, S, T = 5, 4, 6
    model = ChainModel(F, S, start_end=start_end, bias=bias)
    dense, csr = sparse_input(rng, T, F)
    for edge_shape in ((T - 1, S, S), (S, S)):
        w = rng.normal(size=model.n_params)
        mu = ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=edge_shape))
        for x in (dense, csr):
            assert inner(model.potentials(x, w), mu) == pytest.approx(w @ model.features(x, mu), rel=1e-12)
        np.testing.assert_allclose(model.potentials(dense, w).unary, model.potentials(csr, w).unary, atol=1e-12)
        np.testing.assert_allclose(model.features(dense, mu), model.features(csr, mu), atol=1e-12)
    # add_features accumulates with a scale, in place
    out = np.ones(model.n_params)
    model.add_features(csr, mu, out, scale=-2.0)
    np.testing.assert_allclose(out, 1.0 - 2.0 * model.features(dense, mu), atol=1e-12)


def test_unpack_blocks():
    model = ChainModel(3, 2, start_end=True, bias=True)
    assert [name for name, _ in model.blocks] == ["unary", "pairwise", "start", "end", "bias"]
    assert model.n_params == 3 * 2 + 4 + 2 + 2 + 2
    w = np.arange(model.n_params, dtype=float)
    blocks = model.unpack(w)
    assert blocks["unary"].shape == (3, 2) and blocks["bias"].shape == (2,)
    blocks["pairwise"][0, 0] = -1.0  # views, not copies
    assert w[6] == -1.0
    with pytest.raises(InvalidInputError, match="shape"):
        model.unpack(np.zeros(3))


def test_chain_input_validation():
    model = ChainModel(3, 2)
    with pytest.raises(InvalidInputError, match="example 4"):
        model.validate_input(np.zeros((5, 2)), 4)
    with pytest.raises(InvalidInputError, match=r"example 1.*NaN"):
        model.validate_input(np.array([[0.0, np.nan, 1.0]]), 1)
    with pytest.raises(InvalidInputError, match="NaN or infinite"):
        model.validate_input(sp.csr_matrix(np.array([[0.0, np.inf, 1.0]])), 0)
    with pytest.raises(InvalidInputError, match="T>=1"):
        model.validate_input(np.zeros((0, 3)), 0)
    assert sp.issparse(model.validate_input(sp.coo_matrix(np.ones((2, 3)))))
    with pytest.raises(InvalidInputError, match="statistics"):
        model.features(np.zeros((4, 3)), ChainPotentials(np.zeros((3, 2)), np.zeros((2, 2))))


def test_multiclass_model(rng):
    model = MultiClassModel(4, 3)
    x = rng.normal(size=4)
    w = rng.normal(size=model.n_params)
    for y in range(3):
        expected = np.outer(x, np.eye(3)[y]).ravel()
        np.testing.assert_allclose(model.joint_feature(x, y), expected)
        assert model.structure.score(model.potentials(x, w), y) == pytest.approx(w @ expected)
    mu = MultiClassPotentials(rng.normal(size=3))
    assert inner(model.potentials(x, w), mu) == pytest.approx(w @ model.features(x, mu))
    with pytest.raises(InvalidInputError, match="example 3"):
        model.validate_input(np.zeros(5), 3)
    with pytest.raises(InvalidInputError, match="NaN"):
        model.validate_input(np.array([0, np.nan, 0, 0]), 0)
    with pytest.raises(InvalidInputError):
        model.features(x, MultiClassPotentials(np.zeros(4)))
