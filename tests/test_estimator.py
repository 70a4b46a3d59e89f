"""StructuredSVM follows scikit-learn conventions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone

import structopt as so
from structopt.estimator import StructuredSVM


def _data(seed=0, n=20):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(2, 6)), 4)) for _ in range(n)]
    Y = [np.asarray(x[:, 0] > 0, dtype=np.int64) for x in X]  # learnable: label = sign of feature 0
    return X, Y


def test_parameters_are_stored_unchanged_and_clone_works():
    model = so.ChainModel(4, 2)
    est = StructuredSVM(model, solver="bcfw", lam=0.05, max_passes=7, random_state=3)
    params = est.get_params()
    assert params["model"] is model and params["lam"] == 0.05 and params["max_passes"] == 7
    twin = clone(est)
    assert twin is not est and twin.get_params()["max_passes"] == 7 and twin.lam == 0.05
    est.set_params(lam=0.5, max_passes=2)
    assert est.lam == 0.5 and est.solver_options["max_passes"] == 2


@pytest.mark.parametrize("solver", ["bcfw", "fw", "ssg"])
def test_fit_predict_score_and_pickle(solver):
    X, Y = _data()
    options = {"random_state": 0} if solver != "fw" else {}
    est = StructuredSVM(so.ChainModel(4, 2), solver=solver, lam=0.01, max_passes=20, **options).fit(X, Y)
    assert est.coef_.shape == (so.ChainModel(4, 2).n_params,)
    assert est.trace_ and "primal" in est.trace_[-1]
    assert est.score(X, Y) > 0.9
    predictions = est.predict(X)
    assert all(p.shape == y.shape for p, y in zip(predictions, Y, strict=True))
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.coef_, est.coef_)
    assert restored.score(X, Y) == est.score(X, Y)


def test_errors_are_clear():
    X, Y = _data()
    with pytest.raises(so.InvalidInputError, match="not fitted"):
        StructuredSVM(so.ChainModel(4, 2)).predict(X)
    with pytest.raises(so.InvalidInputError, match="unknown solver"):
        StructuredSVM(so.ChainModel(4, 2), solver="newton").fit(X, Y)
    with pytest.raises(so.InvalidInputError, match="example 3"):
        bad = [x.copy() for x in X]
        bad[3][0, 0] = np.nan
        StructuredSVM(so.ChainModel(4, 2), max_passes=1).fit(bad, Y)
