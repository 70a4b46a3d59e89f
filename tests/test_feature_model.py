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
