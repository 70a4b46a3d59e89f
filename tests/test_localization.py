"""Localization task: box conversions, metrics, bag-of-words features, loaders (real data when present)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import structopt as so
from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.tasks import _bow
from structopt.tasks import localization as loc

DATA = Path(__file__).resolve().parent.parent / ".." / "shared" / "data"
HORSES = DATA / "horses"
RACCOON = DATA / "raccoon"
needs_horses = pytest.mark.skipif(not (HORSES / "gray").is_dir(), reason="horses data not present")
needs_raccoon = pytest.mark.skipif(not (RACCOON / "annotations").is_dir(), reason="raccoon data not present")


def test_cell_box_rounds_and_clips():
    assert loc.cell_box((3.0, 5.0, 60.0, 41.0), (10, 8), 8) == (0, 1, 8, 5)
    assert loc.cell_box((0.0, 0.0, 200.0, 200.0), (10, 8), 8) == (0, 0, 10, 8)
    assert loc.cell_box((77.0, 63.0, 78.0, 64.0), (10, 8), 8) == (9, 7, 10, 8)  # at least one cell
    assert loc.rescale_box((10, 20, 110, 220), (200, 400), (100, 200)) == (5.0, 10.0, 55.0, 110.0)


def test_metrics_and_prior():
    gold = [(0, 0, 4, 4), (0, 0, 2, 2), (1, 1, 3, 3)]
    pred = [(0, 0, 4, 4), (0, 0, 2, 1), (3, 3, 4, 4)]
    assert loc.detection_rate(gold, pred) == pytest.approx(2 / 3)
    assert loc.mean_iou(gold, pred) == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert loc.detection_rate(gold, pred, threshold=0.6) == pytest.approx(1 / 3)
    prior = loc.mean_box_prior([(0, 0, 5, 5), (5, 5, 10, 10)], [(10, 10), (10, 10)], [(20, 10), (1, 1)])
    assert prior == [(5, 2, 15, 8), (0, 0, 1, 1)]


def test_bow_descriptors_cover_every_cell():
    rng = np.random.default_rng(0)
    image = rng.uniform(size=(48, 40))
    desc, cells = _bow.descriptors(image, 8)
    H, W = _bow.grid_shape(image.shape, 8)
    assert (H, W) == (6, 5) and desc.shape[1] == 4 * _bow.ORIENTATIONS
    counts = np.zeros((H, W), dtype=int)
    np.add.at(counts, (cells[:, 0], cells[:, 1]), 1)
    # 2 x 2 block centres per cell, fewer in the first row and column (no block starts half a cell before)
    assert counts[1:, 1:].min() == 4 and counts.max() == 4 and counts.min() >= 1
    codebook = _bow.fit_codebook([desc], n_words=5, random_state=0)
    words = _bow.assign(desc, codebook)
    d2 = ((desc[:, None, :] - codebook[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(words, np.argmin(d2, axis=1))
    hist = _bow.cell_histograms(words, cells, (H, W), 5)
    np.testing.assert_array_equal(hist.sum(axis=2), counts)


def test_cell_features_scaling():
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 3, size=(4, 6, 7)).astype(float)
    counts2 = rng.integers(0, 3, size=(4, 6, 7)).astype(float)
    colours = rng.integers(0, 9, size=(4, 6, 3)).astype(float)
    x = loc._cell_features(counts, counts2, colours, bins=2, context=3, colour_context=3)
    assert x.shape == (4, 6, 7 + 7 + 7 + 3 + 3 + 4 + 1)
    total = x.sum(axis=(0, 1))
    root = np.sqrt(24)
    np.testing.assert_allclose(total[:7], root * counts.sum(axis=(0, 1)) / counts.sum())
    for start, size in ((7, 7), (14, 7), (21, 3), (24, 3)):  # every word group sums to sqrt(H W)
        assert total[start:start + size].sum() == pytest.approx(root)
    np.testing.assert_allclose(total[27:31], root * np.full(4, 0.5))  # row bins, then column bins
    assert total[-1] == pytest.approx(root)
    assert np.all(x[:2, :, 27] > 0) and np.all(x[2:, :, 27] == 0)  # top row band
    assert np.all(x[:, :3, 29] > 0) and np.all(x[:, 3:, 29] == 0)  # left column band


def test_coarse_descriptors_and_colour_words():
    rng = np.random.default_rng(2)
    image = rng.uniform(size=(48, 40))
    desc, cells = _bow.coarse_descriptors(image, 8)
    assert desc.shape == (5 * 4, 4 * _bow.ORIENTATIONS) and cells.max(axis=0).tolist() == [4, 3]
    hist = _bow.spread_histograms(np.zeros(len(desc), dtype=int), cells, (6, 5), 2)
    assert hist[..., 0].sum() == 4 * len(desc) and hist[0, 0, 0] == 1 and hist[2, 2, 0] == 4
    lab = _bow.lab_pixels(np.stack([image] * 3, axis=2), 8)
    assert lab.shape == (48, 40, 3)
    codebook = np.array([[0.0, 0, 0], [100.0, 0, 0]], dtype=np.float32)
    colours = _bow.colour_histograms(lab, codebook, 8)
    assert colours.shape == (6, 5, 2) and np.all(colours.sum(axis=2) == 64)


def test_foreground_features_are_cross_fitted():
    # cells inside the gold box carry feature 0, the others feature 1: the stacked score separates them
    rng = np.random.default_rng(3)
    X, Y = [], []
    for _ in range(9):
        t, l = rng.integers(0, 3, size=2)
        box = (int(t), int(l), int(t) + 3, int(l) + 3)
        x = np.zeros((6, 6, 3))
        x[..., 1] = 1.0
        x[box[0]:box[2], box[1]:box[3], 0], x[box[0]:box[2], box[1]:box[3], 1] = 1.0, 0.0
        x[..., 2] = rng.normal(size=(6, 6))
        X.append(x / 6.0)
        Y.append(box)
    train, other = loc.foreground_features(X[:6], Y[:6], X[6:])
    assert len(train) == 6 and len(other) == 3 and train[0].shape == (6, 6, 4)
    for x, stacked, (t, l, b, r) in zip(X, train + other, Y):
        np.testing.assert_array_equal(stacked[..., 1:], x)
        inside = np.zeros((6, 6), dtype=bool)
        inside[t:b, l:r] = True
        assert stacked[..., 0][inside].min() > stacked[..., 0][~inside].max()
    with pytest.raises(InvalidInputError, match="n_folds"):
        loc.foreground_features(X[:2], Y[:2], X[2:])


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTOPT_CACHE", str(tmp_path / "c"))
    assert loc.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("STRUCTOPT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert loc.cache_dir() == tmp_path / "structopt"


def test_bad_parameters_and_missing_data(tmp_path):
    with pytest.raises(InvalidInputError, match="dataset"):
        loc.load_boxes(dataset="cats")
    with pytest.raises(InvalidInputError, match="cell_size"):
        loc.load_boxes(dataset="horses", cell_size=5)
    with pytest.raises(InvalidInputError, match="n_words"):
        loc.load_boxes(dataset="horses", n_words=1)
    with pytest.raises(DataNotFoundError, match="--data"):
        loc.load_boxes(tmp_path, dataset="raccoon")


@needs_horses
def test_horse_boxes_from_masks():
    items = loc._horse_items(HORSES)
    assert len(items) == 328
    names = [name for name, _, _ in items]
    assert names == sorted(names)
    for _, path, (t, l, b, r) in items[:20]:
        assert 0 <= t < b and 0 <= l < r
        assert path.exists()


@needs_raccoon
def test_raccoon_keeps_single_box_images():
    items, dropped = loc._raccoon_items(RACCOON)
    assert len(items) == 184 and dropped == 16
    numbers = [int(name.split("-")[-1]) for name, _, _ in items]
    assert numbers == sorted(numbers)
    assert all(path.exists() for _, path, _ in items)
    _, _, box = next(item for item in items if item[0] == "raccoon-1")
    assert box == (87, 80, 408, 522)  # VOC (xmin 81, ymin 88, xmax 522, ymax 408), 1-based inclusive


@pytest.mark.slow
@needs_horses
def test_horses_bcfw_ten_passes():
    from structopt.solvers.bcfw import bcfw

    data = loc.load_boxes(HORSES, dataset="horses")
    train, test = data["train"], data["test"]
    assert len(train["X"]) == 200 and len(test["X"]) == 128
    assert data["model"].n_features == train["X"][0].shape[2] == 1 + 3 * 100 + 2 * 32 + 2 * 12 + 1
    for x, y in zip(train["X"], train["y"]):
        so.BoundingBox().validate_output(y, x[..., 0])
    problem = so.SSVMProblem(data["model"], train["X"], train["y"], so.BoxLoss(), lam=0.01)
    result = bcfw(problem, max_passes=10, random_state=0)
    pred = problem.predict(test["X"], result.w)
    prior = loc.mean_box_prior(train["y"], [x.shape[:2] for x in train["X"]], [x.shape[:2] for x in test["X"]])
    assert loc.detection_rate(test["y"], pred) >= 0.9
    assert loc.mean_iou(test["y"], pred) > loc.mean_iou(test["y"], prior)


@pytest.mark.slow
@needs_horses
def test_cli_localization_writes_png(tmp_path, capsys):
    from structopt.cli import main

    out = tmp_path / "run"
    assert main(["train", "localization", "--dataset", "horses", "--passes", "2", "--n-train", "60",
                 "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "trace.json").read_text())
    assert 0.0 <= summary["test_detection_rate"] <= 1.0 and summary["n_train"] == 60
    assert (out / "boxes.png").stat().st_size > 10_000
    assert "test detection rate" in capsys.readouterr().out


def test_feature_cache_is_sealed_and_keyed_on_the_files(tmp_path):
    from structopt.archive import write_archive

    root = tmp_path / "data"
    root.mkdir()
    (root / "a.xml").write_text("<annotation/>")
    before = loc.file_listing(root)
    (root / "a.xml").write_text("<annotation></annotation>")  # edited: another size
    assert loc.file_listing(root) != before
    file = tmp_path / "cache.npz"
    assert loc.read_cache(file) is None
    write_archive(file, {"kind": "x"}, {"boxes": np.arange(4)}, compress=True)
    assert np.array_equal(loc.read_cache(file)["boxes"], np.arange(4))
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="fails its checksum"):
        assert loc.read_cache(file) is None  # recomputed, never trusted
