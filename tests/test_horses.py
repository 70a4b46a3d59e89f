"""Weizmann horses loader, metrics and a short training run (skipped when the data is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.losses import Hamming
from structopt.models.grid import GridInput
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.tasks.horses import FEATURE_NAMES, load_horses, segmentation_scores


@pytest.fixture(scope="module")
def horses():
    try:
        return load_horses(max_images=12, size=24)
    except DataNotFoundError as exc:
        pytest.skip(f"horses data not available: {exc}")


def test_loader_shapes_split_and_features(horses):
    train, test = horses["train"], horses["test"]
    assert len(train["X"]) == 8 and len(test["X"]) == 4  # every third image is a test image
    assert test["names"] == ["horse003.jpg", "horse006.jpg", "horse009.jpg", "horse012.jpg"]
    for x, y in zip(train["X"] + test["X"], train["y"] + test["y"]):
        assert isinstance(x, GridInput)
        H, W = y.shape
        assert max(H, W) == 24 and y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
        assert x.pixels.shape == (H, W, len(FEATURE_NAMES))
        assert x.horizontal.shape == (H, W - 1, 1) and x.vertical.shape == (H - 1, W, 1)
        assert np.all(np.isfinite(x.pixels)) and x.horizontal.min() >= 0 and x.vertical.min() >= 0
        np.testing.assert_allclose(x.pixels[..., 0], 1.0 / (H * W))  # the bias, scaled per pixel
    assert 0.05 < np.mean([y.mean() for y in train["y"]]) < 0.8  # horses are foreground, not all of it
    model, unary = horses["model"], horses["unary_model"]
    assert model.pairwise and not unary.pairwise
    assert model.validate_input(train["X"][0]) is not None and unary.validate_input(train["X"][0]) is not None


def test_two_edge_features(horses):
    data = load_horses(max_images=3, size=16, edge_features=("constant", "contrast"))
    x = data["train"]["X"][0]
    H, W = data["train"]["y"][0].shape
    np.testing.assert_allclose(x.horizontal[..., 0], 1.0 / (H * W))
    assert data["model"].n_edge_features == 2


def test_loader_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="--data"):
        load_horses(tmp_path)
    with pytest.raises(InvalidInputError, match="edge_features"):
        load_horses(tmp_path, edge_features=("colour",))


def test_segmentation_scores():
    y_true = [np.array([[1, 1, 0], [0, 0, 0]]), np.array([[0, 1]])]
    y_pred = [np.array([[1, 0, 0], [0, 1, 0]]), np.array([[0, 1]])]
    scores = segmentation_scores(y_true, y_pred)
    assert scores["pixel_accuracy"] == pytest.approx(6 / 8)
    assert scores["foreground_iou"] == pytest.approx(2 / 4)
    assert scores["mean_image_iou"] == pytest.approx((1 / 3 + 1) / 2)
    with pytest.raises(InvalidInputError, match="example 1"):
        segmentation_scores(y_true, [y_pred[0], np.zeros((2, 2))])


def test_short_bcfw_run_learns_something(horses):
    train, test = horses["train"], horses["test"]
    problem = SSVMProblem(horses["model"], train["X"], train["y"], Hamming(normalize=True), lam=1e-3)
    result = bcfw(problem, max_passes=3, random_state=0)
    assert result.trace[-1]["primal"] < problem.primal(problem.model.zeros())
    assert result.trace[-1]["gap"] >= -1e-9
    scores = segmentation_scores(test["y"], problem.predict(test["X"], result.w))
    assert scores["pixel_accuracy"] > 0.6


@pytest.mark.slow
def test_grid_beats_unary_only_by_two_iou_points():
    try:
        data = load_horses()
    except DataNotFoundError as exc:
        pytest.skip(f"horses data not available: {exc}")
    ious = {}
    for name in ("unary_model", "model"):
        problem = SSVMProblem(data[name], data["train"]["X"], data["train"]["y"], Hamming(normalize=True), lam=1e-3)
        result = bcfw(problem, max_passes=10, random_state=0)
        pred = problem.predict(data["test"]["X"], result.w)
        ious[name] = segmentation_scores(data["test"]["y"], pred)["foreground_iou"]
    assert ious["model"] >= ious["unary_model"] + 0.02, ious


def test_cli_train_horses_writes_masks_png(horses, tmp_path, capsys, monkeypatch):
    import json

    import structopt.tasks.horses as module
    from structopt.cli import main

    monkeypatch.setattr(module, "load_horses", lambda path=None, **_: horses)  # the 12-image subset
    out = tmp_path / "run"
    assert main(["train", "horses", "--passes", "2", "--lam", "0.001", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "trace.json").read_text())
    assert summary["n_train"] == 8 and 0.0 <= summary["test_foreground_iou"] <= 1.0
    assert summary["test_pixel_accuracy"] > 0.5
    assert (out / "test_masks.png").stat().st_size > 1000 and (out / "convergence.png").exists()
    assert "test foreground iou" in capsys.readouterr().out
