"""Boosted trees exported as arrays (tasks/_boosted_trees.py): equal to scikit-learn's decision_function,
round trip through arrays, and refusal of arrays that do not form trees."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from structopt.errors import InvalidInputError
from structopt.tasks._boosted_trees import BoostedTrees, export_hist_gradient_boosting
from tests._synthetic_horses import write_synthetic_horses


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


# --------------------------------------------------------------------------- the superpixel task's new images
def _synthetic(root, n: int = 9) -> None:
    write_synthetic_horses(root, n, seed=3, height=40, width=52, foreground=0.7, background=0.35, noise=0.06)


def test_image_graph_rebuilds_the_loaders_test_graphs(tmp_path):
    from PIL import Image

    from structopt.tasks import horses_superpixels as hs

    _synthetic(tmp_path, n=6)
    data = hs.load_superpixel_horses(tmp_path, cache=False, n_segments=40, n_textons=4, n_folds=2, context_stages=1)
    p = data["info"]["preprocessing"]
    assert p["stages"] == 2  # the stacked score and one auto-context stage (the CLI test runs the default, 0)
    for name, x, seg in zip(data["test"]["names"], data["test"]["X"], data["test"]["segments"]):
        got, segments = hs.read_image_graph(tmp_path / "gray" / name, p)
        np.testing.assert_array_equal(segments, seg)
        np.testing.assert_array_equal(got.edges, x.edges)
        np.testing.assert_allclose(got.nodes, x.nodes, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.edge_features, x.edge_features, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(hs.read_gold_mask(tmp_path / "figure_ground" / name, seg.shape),
                                      data["test"]["masks"][data["test"]["names"].index(name)])
    broken = dict(p, node_mean=p["node_mean"][:-1])
    with pytest.raises(InvalidInputError, match=r"horse002\.jpg: the saved standardisation does not fit"):
        hs.read_image_graph(tmp_path / "gray" / "horse002.jpg", broken)
    Image.fromarray(np.zeros((5, 5), dtype=np.uint8)).save(tmp_path / "small.png")
    with pytest.raises(InvalidInputError, match=r"small\.png: mask is 5x5 pixels but its image is 52x44"):
        hs.read_gold_mask(tmp_path / "small.png", (44, 52))
    with pytest.raises(InvalidInputError, match="lacks 'stages'"):
        hs.stage_trees({k: v for k, v in p.items() if k != "stages"})


@pytest.mark.slow
def test_cli_predict_reproduces_train_metrics(tmp_path, monkeypatch, capsys):
    import json
    import shutil

    from structopt.cli import main
    from structopt.saved_model import load_model

    monkeypatch.setenv("STRUCTOPT_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "horses"
    _synthetic(data)
    out = tmp_path / "run"
    assert main(["train", "horses", "--graph", "superpixels", "--data", str(data), "--passes", "2", "--out", str(out),
                 "--no-progress"]) == 0
    trained = json.loads((out / "trace.json").read_text())
    saved = load_model(out / "model.npz")
    assert saved.task == "horses" and saved.preprocessing["graph"] == "superpixels"
    # the test split (every third image) as predict's input: the same images, the same metric
    test = tmp_path / "test"
    for sub in ("gray", "figure_ground"):
        (test / sub).mkdir(parents=True)
        for i in (2, 5, 8):
            shutil.copy(data / sub / f"horse{i:03d}.jpg", test / sub / f"horse{i:03d}.jpg")
    capsys.readouterr()
    masks = tmp_path / "masks"
    assert main(["predict", str(out / "model.npz"), str(test), "--out", str(masks), "--json",
                 str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    for key in ("test_pixel_accuracy", "test_foreground_iou", "test_mean_image_iou"):
        assert predicted[key] == pytest.approx(trained[key], abs=1e-12)
    assert sorted(p.name for p in masks.iterdir()) == ["horse002.png", "horse005.png", "horse008.png"]
    # images without masks: masks written, no metric
    capsys.readouterr()
    assert main(["predict", str(out / "model.npz"), str(test / "gray"), "--out", str(tmp_path / "m2")]) == 0
    assert "accuracy" not in capsys.readouterr().out
    from PIL import Image

    for name in ("horse002", "horse005", "horse008"):
        a = np.asarray(Image.open(masks / f"{name}.png"))
        assert a.shape == (44 if name == "horse002" else 50 if name == "horse005" else 56, 52)
        np.testing.assert_array_equal(a, np.asarray(Image.open(tmp_path / "m2" / f"{name}.png")))


def _brute_map(unary: np.ndarray, pairwise: np.ndarray, edges: np.ndarray) -> np.ndarray:
    # every labeling of a tiny graph, scored one by one
    import itertools

    best, arg = -np.inf, None
    for y in itertools.product(range(unary.shape[1]), repeat=unary.shape[0]):
        y = np.array(y)
        s = unary[np.arange(len(y)), y].sum() + sum(pairwise[e, y[u], y[v]] for e, (u, v) in enumerate(edges))
        if s > best + 1e-12:
            best, arg = s, y
    return arg


@pytest.mark.parametrize("seed", range(6))
def test_foreground_bias_on_a_tiny_graph(seed):
    from structopt.models.graph import GraphInput, GraphModel
    from structopt.tasks import horses_superpixels as hs

    rng = np.random.default_rng(seed)
    # 5 superpixels of unequal areas on a 4 x 5 image, a chain and one chord
    segments = np.array([[0, 0, 0, 1, 1], [0, 0, 2, 1, 1], [3, 3, 2, 2, 4], [3, 3, 3, 2, 4]])
    area = np.bincount(segments.ravel()) / segments.size
    np.testing.assert_allclose(hs.node_bias(segments, 0.7, "uniform"), np.full(5, 0.7 / 5))
    np.testing.assert_allclose(hs.node_bias(segments, 0.7, "area"), 0.7 * area)
    assert hs.node_bias(segments, 0.7, "area").sum() == pytest.approx(0.7)
    edges = np.array([[0, 1], [0, 2], [1, 2], [2, 3], [2, 4], [3, 4]])
    x = GraphInput(rng.normal(size=(5, 3)), edges, rng.normal(size=(6, 2)))
    model = GraphModel(3, 2, 2, symmetric=True)
    w = rng.normal(size=model.n_params)
    theta = model.potentials(x, w)
    np.testing.assert_array_equal(hs.biased_labels(model, w, x, segments, 0.0), model.predict(x, w))
    changed = 0
    for mode in hs.BIAS_MODES:
        for b in (-3.0, -1.0, 0.5, 2.0, 6.0):
            unary = theta.unary.copy()
            unary[:, 1] += hs.node_bias(segments, b, mode)
            want = _brute_map(unary, theta.pairwise, edges)
            got = hs.biased_labels(model, w, x, segments, b, mode, exact=True)
            np.testing.assert_array_equal(got, want)
            changed += not np.array_equal(got, model.predict(x, w))
        # a large enough bias labels everything foreground (background for a negative one)
        assert hs.biased_labels(model, w, x, segments, 1e4, mode).tolist() == [1] * 5
        assert hs.biased_labels(model, w, x, segments, -1e4, mode).tolist() == [0] * 5
    assert changed  # the bias moves the MAP somewhere on this graph
    with pytest.raises(InvalidInputError, match="bias mode must be one of"):
        hs.biased_labels(model, w, x, segments, 1.0, "pixels")
    with pytest.raises(InvalidInputError, match="finite number"):
        hs.node_bias(segments, float("nan"))
    with pytest.raises(InvalidInputError, match="one superpixel per node"):
        hs.biased_labels(model, w, x, segments[:, :3], 1.0)
