"""Boosted trees exported as arrays (tasks/_boosted_trees.py): equal to scikit-learn's decision_function,
round trip through arrays, and refusal of arrays that do not form trees."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from structopt.errors import InvalidInputError
from structopt.tasks._boosted_trees import BoostedTrees, export_hist_gradient_boosting


def _fitted(seed: int, missing: bool, **options):
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 6))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 - X[:, 3] + rng.normal(0, 0.3, 400) > 0.3).astype(int)
    if missing:
        X[rng.random(X.shape) < 0.1] = np.nan
    with threadpool_limits(1):  # OpenMP threads only contend on a shared machine
        clf = HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=15, early_stopping=False,
                                             random_state=seed, **options).fit(X, y)
    return clf, rng


def _sklearn_scores(clf, X: np.ndarray) -> np.ndarray:
    with threadpool_limits(1):
        return clf.decision_function(X)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("missing", [False, True])
def test_exported_trees_equal_sklearn(seed, missing):
    clf, rng = _fitted(seed, missing)
    trees = export_hist_gradient_boosting(clf)
    X = rng.normal(size=(9000, 6)) * 1.5  # more rows than one block, values outside the training range
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values where training had none too
    X[:50, 2] = X[50:100, 2].round(1)  # ties with thresholds are as likely as anywhere
    np.testing.assert_allclose(trees.decision_function(X), _sklearn_scores(clf, X), rtol=0, atol=1e-10)
    again = BoostedTrees.from_arrays(trees.to_arrays())
    np.testing.assert_array_equal(again.decision_function(X), trees.decision_function(X))
    assert again.depth == trees.depth and trees.n_trees == 30


def test_exact_thresholds_follow_sklearn():
    clf, _ = _fitted(0, False)
    trees = export_hist_gradient_boosting(clf)
    inner = trees.feature >= 0
    X = np.zeros((int(inner.sum()), 6))  # each row sits exactly on one split's threshold
    X[np.arange(X.shape[0]), trees.feature[inner]] = trees.threshold[inner]
    np.testing.assert_allclose(trees.decision_function(X), _sklearn_scores(clf, X), rtol=0, atol=1e-10)


def test_bad_arrays_are_refused():
    clf, _ = _fitted(1, False)
    good = export_hist_gradient_boosting(clf).to_arrays()
    with pytest.raises(InvalidInputError, match=r"model\.npz.*'left'"):
        BoostedTrees.from_arrays({k: v for k, v in good.items() if k != "left"}, "model.npz")
    loop = dict(good, left=good["left"].copy())
    loop["left"][0] = 0  # a node that is its own child: the walk would never end
    with pytest.raises(InvalidInputError, match="child is not a later node"):
        BoostedTrees.from_arrays(loop)
    far = dict(good, feature=good["feature"].copy())
    far["feature"][0] = 99
    with pytest.raises(InvalidInputError, match="outside"):
        BoostedTrees.from_arrays(far)
    bad = dict(good, value=good["value"].copy())
    bad["value"][-1] = np.inf
    with pytest.raises(InvalidInputError, match="finite"):
        BoostedTrees.from_arrays(bad)
    with pytest.raises(InvalidInputError, match="rows of 6 features"):
        BoostedTrees.from_arrays(good).decision_function(np.zeros((3, 5)))
    with pytest.raises(InvalidInputError, match="binary HistGradientBoostingClassifier"):
        export_hist_gradient_boosting(object())
