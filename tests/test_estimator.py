"""StructuredSVM follows scikit-learn conventions (tested with scikit-learn 1.6+; tags need 1.6)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.utils import estimator_checks

import structopt as so
from structopt.estimator import StructuredSVM


def _data(seed=0, n=20):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(2, 6)), 4)) for _ in range(n)]
    Y = [np.asarray(x[:, 0] > 0, dtype=np.int64) for x in X]  # learnable: label = sign of feature 0
    return X, Y


PYTHON_PATH = {"fused": False}  # tiny problems: skip the numba compilation (seconds per process)


def _estimator(**params):
    return StructuredSVM(**{"model": so.ChainModel(4, 2), "max_passes": 5, "random_state": 0,
                            "solver_options": PYTHON_PATH, **params})


def test_parameters_are_stored_unchanged_and_clone_works():
    model = so.ChainModel(4, 2)
    options = {"line_search": False}
    est = StructuredSVM(model, solver="bcfw", lam=0.05, max_passes=7, random_state=3, solver_options=options)
    params = est.get_params()
    assert params["model"] is model and params["lam"] == 0.05 and params["max_passes"] == 7
    assert params["solver_options"] is options
    assert set(params) == {"model", "solver", "lam", "loss", "max_passes", "tol", "time_limit", "random_state",
                           "solver_options"}
    twin = clone(est)
    assert twin is not est and twin.get_params()["max_passes"] == 7 and twin.lam == 0.05
    assert twin.solver_options == options and twin.model is not model  # clone copies non-estimator params
    est.set_params(lam=0.5, max_passes=2)
    assert est.lam == 0.5 and est.max_passes == 2


def test_set_params_rejects_unknown_names():
    est = _estimator()
    with pytest.raises(so.InvalidInputError, match=r"no parameter 'line_search'.*solver_options"):
        est.set_params(line_search=False)
    with pytest.raises(ValueError, match="no parameter 'bogus'"):  # still a ValueError for scikit-learn
        est.set_params(bogus=1)
    assert est.get_params()["max_passes"] == 5


def test_tags_describe_structured_outputs():
    tags = _estimator().__sklearn_tags__()
    assert tags.estimator_type is None  # not a classifier: no stratified splits of label sequences
    assert tags.target_tags.required and not tags.target_tags.one_d_labels
    assert not tags.input_tags.two_d_array and tags.requires_fit


# The checks of sklearn.utils.estimator_checks that do not fit on generated (n, F) arrays with
# 1-d targets apply to structured outputs; the others feed 2-d numeric X and 1-d y, which a chain
# model rejects (X is a list of (T, F) sequences, Y of label sequences) — their intent (fit returns
# self, leaves parameters alone, is idempotent, pickles) is tested below on structured data.
APPLICABLE_CHECKS = [
    "check_get_params_invariance", "check_set_params", "check_no_attributes_set_in_init",
    "check_parameters_default_constructible", "check_estimator_cloneable", "check_estimator_repr",
    "check_do_not_raise_errors_in_init_or_set_params", "check_estimator_tags_renamed", "check_valid_tag_types",
    "check_mixin_order", "check_estimators_unfitted", "check_requires_y_none",
]


@pytest.mark.parametrize("check", APPLICABLE_CHECKS)
def test_scikit_learn_estimator_checks(check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(estimator_checks, check)("StructuredSVM", _estimator())


@pytest.mark.parametrize("solver", ["bcfw", "fw", "ssg"])
def test_fit_predict_score_and_pickle(solver):
    X, Y = _data()
    random_state = None if solver == "fw" else 0
    est = StructuredSVM(so.ChainModel(4, 2), solver=solver, lam=0.01, max_passes=20, random_state=random_state,
                        solver_options=PYTHON_PATH)
    before = est.get_params()
    assert est.fit(X, Y) is est
    assert est.get_params() == before  # fit leaves the hyper-parameters alone
    assert est.coef_.shape == (so.ChainModel(4, 2).n_params,)
    assert est.trace_ and "primal" in est.trace_[-1]
    assert est.score(X, Y) > 0.9
    predictions = est.predict(X)
    assert all(p.shape == y.shape for p, y in zip(predictions, Y, strict=True))
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.coef_, est.coef_)
    assert restored.score(X, Y) == est.score(X, Y)


def test_fit_is_idempotent_and_deterministic():
    X, Y = _data()
    est = _estimator()
    first = est.fit(X, Y).coef_.copy()
    np.testing.assert_array_equal(est.fit(X, Y).coef_, first)
    np.testing.assert_array_equal(clone(est).fit(X, Y).coef_, first)


def test_solver_options_reach_the_solver():
    X, Y = _data()
    fixed = _estimator(solver_options={**PYTHON_PATH, "line_search": False, "averaging": "none"}).fit(X, Y)
    searched = _estimator().fit(X, Y)
    assert not np.allclose(fixed.coef_, searched.coef_)
    assert len(_estimator(max_passes=2).fit(X, Y).trace_) < len(_estimator(max_passes=4).fit(X, Y).trace_)


def test_cross_val_score_and_grid_search_over_lam():
    X, Y = _data(n=30)
    scores = cross_val_score(_estimator(), X, Y, cv=KFold(3))
    assert scores.shape == (3,) and np.all(scores > 0.8)
    search = GridSearchCV(_estimator(), {"lam": [1e-3, 10.0]}, cv=3).fit(X, Y)
    assert search.best_params_ == {"lam": 1e-3}  # lam = 10 shrinks w towards 0: poor accuracy
    assert search.best_estimator_.lam == 1e-3 and search.best_score_ > 0.9
    assert search.score(X, Y) > 0.9


def test_unfitted_and_mismatched_lengths():
    X, Y = _data()
    with pytest.raises(NotFittedError, match="not fitted"):
        _estimator().predict(X)
    with pytest.raises(so.InvalidInputError, match="not fitted"):
        _estimator().score(X, Y)
    est = _estimator().fit(X, Y)
    with pytest.raises(so.InvalidInputError, match="20 inputs X but 19 outputs Y"):
        est.score(X, Y[:-1])
    with pytest.raises(so.InvalidInputError, match=r"example 2: output Y has shape"):
        est.score(X, [*Y[:2], np.zeros(9, dtype=np.int64), *Y[3:]])


@pytest.mark.parametrize(("params", "match"), [
    ({"lam": "0.01"}, "lam must be a finite number > 0, got '0.01'"),
    ({"lam": -1.0}, "lam must be"),
    ({"lam": float("nan")}, "lam must be"),
    ({"max_passes": 0}, "max_passes must be"),
    ({"max_passes": float("inf")}, "max_passes must be"),
    ({"max_passes": True}, "max_passes must be"),
    ({"tol": -1.0}, "tol must be"),
    ({"time_limit": "10"}, "time_limit must be"),
    ({"random_state": "abc"}, "random_state must be None, an integer >= 0 or a numpy Generator, got 'abc'"),
    ({"random_state": -3}, "random_state must be"),
    ({"solver": "newton"}, "unknown solver 'newton'"),
    ({"solver_options": {"bogus": 1}}, "solver 'bcfw' has no option 'bogus'; its options are: max_passes"),
    ({"solver_options": {"max_passes": 3}}, "set max_passes as estimator parameter"),
    ({"solver_options": [("line_search", False)]}, "solver_options must be a dict"),
    ({"model": None}, "model must be a structopt Model"),
    ({"loss": "hamming"}, "loss must be a structopt Loss"),
])
def test_bad_hyper_parameters_are_named_at_fit(params, match):
    X, Y = _data()
    est = _estimator(**params)  # stored unchanged, no error yet
    with pytest.raises(so.InvalidInputError, match=match):
        est.fit(X, Y)


def test_bad_examples_are_named():
    X, Y = _data()
    bad = [x.copy() for x in X]
    bad[3][0, 0] = np.nan
    with pytest.raises(so.InvalidInputError, match="example 3"):
        _estimator().fit(bad, Y)
    with pytest.raises(so.InvalidInputError, match="requires y"):
        _estimator().fit(X, None)
    with pytest.raises(so.InvalidInputError, match="X must be a sequence of examples"):
        _estimator().fit("abc", Y)


def test_fit_works_without_scikit_learn():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import numpy as np, structopt as so\n"
        "from structopt.estimator import StructuredSVM\n"
        "rng = np.random.default_rng(0)\n"
        "X = [rng.normal(size=(3, 4)) for _ in range(10)]; Y = [np.asarray(x[:, 0] > 0, dtype=np.int64) for x in X]\n"
        "est = StructuredSVM(so.ChainModel(4, 2), max_passes=3, random_state=0, solver_options={'fused': False})\n"
        "assert est.get_params()['max_passes'] == 3 and est.set_params(lam=0.1).lam == 0.1\n"
        "try:\n    est.set_params(bogus=1)\nexcept so.InvalidInputError:\n    pass\nelse:\n    raise SystemExit(3)\n"
        "print(est.fit(X, Y).score(X, Y) > 0.5, repr(est).startswith('StructuredSVM('))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_score_of_structures_without_node_labels_is_minus_the_mean_loss():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(4, 5, 3)) for _ in range(12)]
    Y = [(1, 1, 3, 4), (0, 0, 2, 2), (0, 1, 4, 5)] * 4
    svm = so.StructuredSVM(so.BoxModel(3), loss=so.BoxLoss(), lam=0.1, max_passes=2, random_state=0).fit(X, Y)
    predicted = svm.predict(X)
    expected = -np.mean([so.BoxLoss()(y, p) for y, p in zip(Y, predicted, strict=True)])
    assert svm.score(X, Y) == pytest.approx(expected)
    assert -1.0 <= svm.score(X, Y) <= 0.0


def test_save_and_load_use_the_saved_model_format_and_pickling_still_works(tmp_path):
    from structopt.errors import InvalidInputError
    from structopt.saved_model import load_model

    X, Y = _data()
    est = _estimator(loss=so.Hamming(normalize=True), lam=0.05, tol=0.0, random_state=3).fit(X, Y)
    path = tmp_path / "est.npz"
    assert est.save(path) == path.stat().st_size
    back = StructuredSVM.load(path)
    assert back.get_params().keys() == est.get_params().keys()
    for name in ("solver", "lam", "max_passes", "tol", "time_limit", "random_state", "solver_options"):
        assert back.get_params()[name] == est.get_params()[name], name
    assert repr(back.loss) == repr(est.loss) and repr(back.model) == repr(est.model)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    assert [r["primal"] for r in back.trace_] == [r["primal"] for r in est.trace_]
    assert all(np.array_equal(a, b) for a, b in zip(back.predict(X), est.predict(X), strict=True))
    saved = load_model(path)  # the same format as structopt train's model.npz
    np.testing.assert_array_equal(saved.w, est.coef_)
    refit = clone(back).fit(X, Y)  # the loaded hyper-parameters train the same model again
    np.testing.assert_allclose(refit.coef_, est.coef_)
    restored = pickle.loads(pickle.dumps(back))
    np.testing.assert_array_equal(restored.coef_, est.coef_)
    with pytest.raises(NotFittedError):
        _estimator().save(tmp_path / "unfitted.npz")
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(InvalidInputError, match=r"est\.npz"):
        StructuredSVM.load(path)
