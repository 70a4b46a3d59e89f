"""FeatureModel: theta = x @ w for flat-statistics structures, dense and CSR inputs; check_model."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import structopt as so
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.models.base import Model
from structopt.structures import ChainPotentials, MultiClassPotentials
from structopt.validate import check_model


def k_of_n_model(n=6, F=4):
    z = cp.Variable(n, boolean=True)
    return so.FeatureModel(so.LPStructure(z, [cp.sum(z) == 2]), n_features=F)


def test_feature_model_passes_check_model_dense_and_sparse():
    rng = np.random.default_rng(0)
    model = k_of_n_model()
    X = [rng.normal(size=(6, 4)), sp.random(6, 4, density=0.4, format="csr", random_state=1),
         sp.random(6, 4, density=0.4, format="coo", random_state=2)]
    report = check_model(model, X)
    assert report.ok, report.table()
    assert [r.check for r in report.rows] == ["validate_input", "potentials_type", "linearity", "adjoint",
                                              "reduce_stats", "features_sqnorm"]
    report = check_model(so.FeatureModel(so.MultiClass(3), 2), [rng.normal(size=(3, 2))])
    assert report.ok, report.table()


def test_potentials_and_joint_feature():
    model = k_of_n_model(n=3, F=2)
    x = np.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5]])
    w = np.array([0.5, -1.0])
    theta = model.potentials(model.validate_input(x), w)
    assert isinstance(theta, so.VectorPotentials) and np.allclose(theta.values, x @ w)
    y = np.array([1, 0, 1])
    assert np.allclose(model.joint_feature(x, y), x.T @ y)
    xs = model.validate_input(sp.csr_matrix(x))
    assert np.allclose(model.potentials(xs, w).values, x @ w)
    assert np.allclose(model.features(xs, so.VectorPotentials(y.astype(float))), x.T @ y)


def test_builder_structures_take_inputs_of_any_length():
    def chooser(n):
        z = cp.Variable(n, boolean=True)
        return z, [cp.sum(z) <= 1]

    model = so.FeatureModel(so.LPStructure.from_builder(chooser), n_features=2)
    for n in (1, 4):
        x = model.validate_input(np.ones((n, 2)), 0)
        assert model.potentials(x, np.ones(2)).values.shape == (n,)


def test_bad_inputs_name_the_example():
    model = k_of_n_model()
    with pytest.raises(InvalidInputError, match=r"example 3: .*shape"):
        model.validate_input(np.zeros((6, 5)), 3)
    with pytest.raises(InvalidInputError, match=r"example 1: .*NaN"):
        model.validate_input(np.full((6, 4), np.nan), 1)
    with pytest.raises(InvalidInputError, match=r"example 2: 5 feature rows do not fit"):
        model.validate_input(np.zeros((5, 4)), 2)
    with pytest.raises(InvalidInputError, match="n_features"):
        so.FeatureModel(so.MultiClass(3), 0)
    with pytest.raises(NotSupportedError, match="flat statistics"):
        so.FeatureModel(so.Chain(3), 2)


def test_problem_on_a_feature_model():
    rng = np.random.default_rng(3)
    model = k_of_n_model()
    X = [rng.normal(size=(6, 4)) for _ in range(4)]
    Y = [so.LPStructure.argmax(model.structure, model.potentials(x, np.array([1.0, -1.0, 0.5, 0.0]))) for x in X]
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), lam=0.1)
    w = rng.normal(size=4)
    for i in range(4):
        res = problem.max_oracle(i, w)
        assert res.value >= -1e-9
        # the hinge by enumeration: max over the 15 selections
        theta = model.potentials(X[i], w)
        outs = model.structure.enumerate(theta)
        values = [so.Hamming()(Y[i], y) + theta.values @ (y - Y[i]) for y in outs]
        assert res.value == pytest.approx(max(values))


# ----------------------------------------------------------------------------- check_model catches bugs
class WrongAdjoint(so.MultiClassModel):
    def add_features(self, x, mu, out, scale=1.0):
        super().add_features(x, mu, out, 2.0 * scale)


class WrongReduce(so.ChainModel):
    def reduce_stats(self, mu):
        return mu  # per-position edge statistics: not the potentials' (S, S) layout


class WrongType(Model):
    structure = so.MultiClass(2)
    blocks = (("w", (2,)),)

    def validate_input(self, x, index=None):
        return np.asarray(x, dtype=float)

    def potentials(self, x, w):
        return (x * w,)

    def add_features(self, x, mu, out, scale=1.0):
        out += scale * x * mu[0]


class WrongSqnorm(so.MultiClassModel):
    def features_sqnorm(self, x, mu):
        return 0.0


@pytest.mark.parametrize(("model", "X", "check"), [
    (WrongAdjoint(3, 2), [np.ones(3)], "adjoint"),
    (WrongReduce(3, 2), [np.ones((4, 3))], "reduce_stats"),
    (WrongType(), [np.ones(2)], "potentials_type"),
    (WrongSqnorm(3, 2), [np.ones(3)], "features_sqnorm"),
    (so.MultiClassModel(3, 2), [np.ones(4)], "validate_input"),
])
def test_check_model_catches_broken_models(model, X, check):
    report = check_model(model, X)
    assert not report.ok
    assert not report.row(check).ok, report.table()
    assert "FAILED" in report.table()


def test_check_model_rows_pass_for_builtin_models():
    rng = np.random.default_rng(5)
    for model, X in [(so.ChainModel(3, 2, start_end=True, bias=True), [rng.normal(size=(4, 3))]),
                     (so.MultiClassModel(3, 4), [rng.normal(size=3)])]:
        report = check_model(model, X)
        assert report.ok, report.table()
    assert isinstance(so.MultiClassModel(3, 4).potentials(np.ones(3), np.zeros(12)), MultiClassPotentials)
    assert isinstance(so.ChainModel(3, 2).potentials(np.ones((2, 3)), np.zeros(10)), ChainPotentials)


# ----------------------------------------------------------------------------- per-label weights (n_labels)
def _multilabel_structure(L=5):
    z = cp.Variable(L, boolean=True)
    return so.LPStructure(z, [cp.sum(z) <= 3, z[0] + z[1] <= 1])   # at most 3 labels, 0 and 1 exclusive


def _block_design(x, L, F):
    """The hand-built design: (L, L*F) block-diagonal rows, row l holding label l's features."""
    dense = x.toarray() if sp.issparse(x) else np.asarray(x, dtype=float)
    rows = np.broadcast_to(dense.reshape(-1, F), (L, F))
    out = np.zeros((L, L * F))
    for label in range(L):
        out[label, label * F:(label + 1) * F] = rows[label]
    return out


def _inputs(rng, L, F):
    return [rng.normal(size=F), rng.normal(size=(1, F)), rng.normal(size=(L, F)),
            sp.random(1, F, density=0.6, format="csr", random_state=int(rng.integers(1000))),
            sp.random(L, F, density=0.5, format="csr", random_state=int(rng.integers(1000)))]


def test_per_label_weights_equal_a_hand_built_block_design():
    L, F = 5, 3
    structure = _multilabel_structure(L)
    model = so.FeatureModel(structure, n_features=F, n_labels=L)
    block = so.FeatureModel(structure, n_features=L * F)
    assert model.blocks == [("weights", (L, F))] and model.n_params == block.n_params
    for seed in range(5):
        rng = np.random.default_rng(seed)
        w = rng.normal(size=L * F)
        for x in _inputs(rng, L, F):
            xb = _block_design(x, L, F)
            xm = model.validate_input(x, 0)
            np.testing.assert_allclose(model.potentials(xm, w).values, block.potentials(xb, w).values, atol=1e-12)
            mu = so.VectorPotentials(rng.random(L))
            np.testing.assert_allclose(model.features(xm, mu), block.features(xb, mu), atol=1e-12)
            assert model.features_sqnorm(xm, mu) == pytest.approx(block.features_sqnorm(xb, mu), abs=1e-12)
            y = model.predict(x, w)
            np.testing.assert_array_equal(y, block.predict(xb, w))
            np.testing.assert_allclose(model.joint_feature(xm, y), block.joint_feature(xb, y), atol=1e-12)
    report = check_model(model, [xs for xs in _inputs(np.random.default_rng(9), L, F)])
    assert report.ok, report.table()


def test_per_label_training_equals_the_block_design():
    from structopt.solvers import bcfw

    L, F = 5, 3
    rng = np.random.default_rng(7)
    structure = _multilabel_structure(L)
    truth = rng.normal(size=(L, F))
    X = [rng.normal(size=F) for _ in range(12)]
    Y = [structure.argmax(so.VectorPotentials(truth @ x)) for x in X]
    model = so.FeatureModel(structure, n_features=F, n_labels=L)
    block = so.FeatureModel(structure, n_features=L * F)
    runs = [bcfw(so.SSVMProblem(m, inputs, Y, so.Hamming(), lam=0.05), max_passes=6, random_state=0)
            for m, inputs in ((model, X), (block, [_block_design(x, L, F) for x in X]))]
    np.testing.assert_allclose(runs[0].w, runs[1].w, atol=1e-10)
    for a, b in zip(runs[0].trace, runs[1].trace, strict=True):
        assert a["primal"] == pytest.approx(b["primal"], abs=1e-10) and a["gap"] == pytest.approx(b["gap"], abs=1e-10)
    assert model.unpack(runs[0].w)["weights"].shape == (L, F)  # label l's weights are row l


def test_per_label_multiclass_is_the_multiclass_model_transposed():
    rng = np.random.default_rng(3)
    K, F = 4, 3
    model = so.FeatureModel(so.MultiClass(K), n_features=F, n_labels=K)
    reference = so.MultiClassModel(F, K)
    W = rng.normal(size=(K, F))
    for _ in range(5):
        x = rng.normal(size=F)
        np.testing.assert_allclose(model.potentials(model.validate_input(x), W.ravel()).scores,
                                   reference.potentials(x, W.T.ravel()).scores, atol=1e-12)
        assert model.predict(x, W.ravel()) == reference.predict(x, W.T.ravel())


def test_per_label_bad_arguments_name_the_problem():
    structure = _multilabel_structure(5)
    with pytest.raises(InvalidInputError, match=r"n_labels=4 does not fit"):
        so.FeatureModel(structure, n_features=3, n_labels=4)
    with pytest.raises(InvalidInputError, match="n_labels"):
        so.FeatureModel(structure, n_features=3, n_labels=0)
    model = so.FeatureModel(structure, n_features=3, n_labels=5)
    with pytest.raises(InvalidInputError, match=r"example 2: a per-label FeatureModel input has one feature row .* "
                                                r"got 3"):
        model.validate_input(np.zeros((3, 3)), 2)
    with pytest.raises(InvalidInputError, match=r"example 1: .*shape"):
        model.validate_input(np.zeros(4), 1)
    with pytest.raises(InvalidInputError, match=r"do not match 5 labels"):
        model.features(model.validate_input(np.zeros(3)), so.VectorPotentials(np.ones(4)))
    assert "n_labels=5" in repr(model)
