"""BoundingBox oracles and BoxLoss against exhaustive enumeration written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.smoothing import logsumexp
from structopt.structures import _box_kernels as kern
from structopt.validate import check_structure


def _boxes(H: int, W: int) -> list[tuple[int, int, int, int]]:
    rows = [(t, b) for t, b in itertools.combinations(range(H + 1), 2)]
    cols = [(l, r) for l, r in itertools.combinations(range(W + 1), 2)]
    return [(t, l, b, r) for (t, b) in rows for (l, r) in cols]


def _reference(cells: np.ndarray, gold=None):
    """All boxes, their indicator masks, scores and (with a gold box) 1 - IoU, by enumeration."""
    H, W = cells.shape
    boxes = _boxes(H, W)
    masks = np.zeros((len(boxes), H, W))
    for j, (t, l, b, r) in enumerate(boxes):
        masks[j, t:b, l:r] = 1.0
    scores = masks.reshape(len(boxes), -1) @ cells.ravel()
    loss = None
    if gold is not None:
        g = np.zeros((H, W))
        g[gold[0]:gold[2], gold[1]:gold[3]] = 1.0
        inter = masks.reshape(len(boxes), -1) @ g.ravel()
        union = masks.sum(axis=(1, 2)) + g.sum() - inter
        loss = 1.0 - inter / union
    return boxes, masks, scores, loss


def _random_cells(rng, H, W, integer):
    return rng.integers(-3, 4, size=(H, W)).astype(float) if integer else rng.normal(size=(H, W))


def _check_topk(structure_values, outputs, values, ref_values, boxes, k):
    expected = np.sort(ref_values)[::-1][:k]
    assert len(outputs) == len(expected)
    np.testing.assert_allclose(values, expected, atol=1e-9)
    assert len(set(outputs)) == len(outputs)
    index = {box: j for j, box in enumerate(boxes)}
    np.testing.assert_allclose(ref_values[[index[y] for y in outputs]], values, atol=1e-9)


@pytest.mark.parametrize("search", ["bnb", "exhaustive"])
@pytest.mark.parametrize("integer", [True, False])
def test_oracles_match_enumeration(search, integer):
    rng = np.random.default_rng(1 + 2 * integer + (search == "bnb"))
    bb = so.BoundingBox(search)
    for _ in range(500):
        H, W = rng.integers(1, 5, size=2)
        cells = _random_cells(rng, H, W, integer)
        theta = so.BoxPotentials(cells)
        boxes, masks, scores, _ = _reference(cells)
        y = bb.argmax(theta)
        assert bb.score(theta, y) == pytest.approx(scores.max(), abs=1e-9)
        k = int(rng.integers(1, len(boxes) + 3))
        outputs, values = bb.topk(theta, k)
        _check_topk(bb, outputs, values, scores, boxes, k)
        log_z, marg = bb.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores), abs=1e-9)
        p = np.exp(scores - logsumexp(scores))
        np.testing.assert_allclose(marg.cells, np.tensordot(p, masks, axes=1), atol=1e-10)
        best_with_cell = np.where(masks > 0.5, scores[:, None, None], -np.inf).max(axis=0)
        np.testing.assert_allclose(bb.max_marginals(theta), best_with_cell, atol=1e-9)


@pytest.mark.parametrize("search", ["bnb", "exhaustive"])
@pytest.mark.parametrize("integer", [True, False])
def test_iou_augmented_oracles_match_enumeration(search, integer):
    rng = np.random.default_rng(11 + 2 * integer + (search == "bnb"))
    bb, loss = so.BoundingBox(search), so.BoxLoss()
    for _ in range(500):
        H, W = rng.integers(1, 5, size=2)
        cells = _random_cells(rng, H, W, integer) * rng.choice([0.1, 1.0])
        theta = so.BoxPotentials(cells)
        boxes, masks, scores, _ = _reference(cells)
        gold = boxes[int(rng.integers(len(boxes)))]
        _, _, _, ref_loss = _reference(cells, gold)
        values = scores + ref_loss
        np.testing.assert_allclose([loss(gold, y) for y in boxes], ref_loss, atol=1e-12)
        y = loss.augmented_argmax(bb, theta, gold)
        assert bb.score(theta, y) + loss(gold, y) == pytest.approx(values.max(), abs=1e-9)
        k = int(rng.integers(1, len(boxes) + 3))
        outputs, top = loss.augmented_topk(bb, theta, gold, k)
        _check_topk(bb, outputs, top, values, boxes, k)
        temperature = float(rng.uniform(0.2, 3.0))
        log_z, marg, expected_loss = loss.augmented_marginals(bb, theta, gold, temperature)
        assert log_z == pytest.approx(logsumexp(values / temperature), abs=1e-9)
        p = np.exp(values / temperature - logsumexp(values / temperature))
        np.testing.assert_allclose(marg.cells, np.tensordot(p, masks, axes=1), atol=1e-10)
        assert expected_loss == pytest.approx(float(p @ ref_loss), abs=1e-10)


def test_bnb_agrees_with_exhaustive_at_task_size():
    rng = np.random.default_rng(5)
    bnb, scan, loss = so.BoundingBox("bnb"), so.BoundingBox("exhaustive"), so.BoxLoss()
    for _ in range(30):
        H, W = rng.integers(10, 25, size=2)
        cells = rng.normal(size=(H, W)) - rng.uniform(0, 0.5)
        theta = so.BoxPotentials(cells)
        gold = scan.argmax(so.BoxPotentials(rng.normal(size=(H, W))))
        assert bnb.score(theta, bnb.argmax(theta)) == pytest.approx(scan.score(theta, scan.argmax(theta)))
        _, a = loss.augmented_topk(bnb, theta, gold, 10)
        _, b = loss.augmented_topk(scan, theta, gold, 10)
        np.testing.assert_allclose(a, b, atol=1e-9)


def test_bnb_prunes():
    # a peaked score map: branch-and-bound pops far fewer sets than there are boxes
    cells = -np.ones((30, 30))
    cells[10:16, 12:20] = 2.0
    boxes, values, popped = kern.bnb_topk(cells, np.zeros(4, dtype=np.int64), False, 1)
    assert tuple(boxes[0]) == (10, 12, 16, 20) and values[0] == pytest.approx(96.0)
    assert popped < 2000 < so.BoundingBox().n_outputs(cells)


def test_expected_stats_and_stats():
    rng = np.random.default_rng(2)
    bb = so.BoundingBox()
    like = so.BoxPotentials(np.zeros((3, 4)))
    boxes = _boxes(3, 4)
    chosen = [boxes[j] for j in rng.choice(len(boxes), 5, replace=False)]
    weights = rng.uniform(size=5)
    expected = sum(u * bb.stats(y, like).cells for u, y in zip(weights, chosen))
    np.testing.assert_allclose(bb.expected_stats(chosen, weights, like).cells, expected, atol=1e-12)
    assert bb.stats((1, 2, 3, 4), like).cells.sum() == 4
    assert len(list(bb.outputs(like))) == bb.n_outputs(like) == len(boxes)


@pytest.mark.parametrize("shape", [(1, 1), (1, 4), (3, 1), (3, 3)])
def test_check_structure(shape):
    theta = so.BoxPotentials(np.random.default_rng(0).integers(-2, 3, shape).astype(float))
    report = check_structure(so.BoundingBox(), theta, k=4)
    assert report.ok, report.table()
    for oracle in ("argmax", "topk", "marginals", "max_marginals"):
        assert report.row(oracle).agrees_enumeration is True, report.table()
    assert "not supported" in report.row("lp_relaxation").detail


def test_bad_input():
    bb = so.BoundingBox()
    with pytest.raises(InvalidInputError, match="search"):
        so.BoundingBox("greedy")
    for bad in (np.zeros(3), np.zeros((0, 2)), np.array([[np.nan]])):
        with pytest.raises(InvalidInputError):
            bb.argmax(so.BoxPotentials(bad))
    like = np.zeros((3, 4))
    for bad in ((0, 0, 0, 1), (1, 0, 0, 1), (0, 0, 4, 1), (0, 0, 1, 5), (-1, 0, 1, 1), (0, 0, 1), (0.5, 0, 1, 1),
                "box", [[0, 1], [2, 3, 4]]):
        with pytest.raises(InvalidInputError, match="example 7"):
            bb.validate_output(bad, like, 7)
    assert bb.validate_output(np.array([0, 1, 2, 3]), like) == (0, 1, 2, 3)
    with pytest.raises(InvalidInputError, match="k >= 1"):
        bb.topk(like, 0)
    with pytest.raises(NotSupportedError, match="compact linear"):
        bb.polytope(like)
    with pytest.raises(InvalidInputError, match="temperature"):
        bb.marginals_iou(like, (0, 0, 1, 1), 0.0)
    with pytest.raises(InvalidInputError, match="empty"):
        so.BoxLoss()((0, 0, 1, 1), (0, 0, 0, 1))
    with pytest.raises(NotSupportedError, match="BoundingBox"):
        so.BoxLoss().augmented_argmax(so.MultiClass(3), so.MultiClassPotentials(np.zeros(3)), 0)


def test_random_instance_box():
    from structopt.validate import random_instance

    structure, theta = random_instance("box", 0, height=2, width=5)
    assert isinstance(structure, so.BoundingBox) and theta.cells.shape == (2, 5)
    assert np.all(theta.cells == np.round(theta.cells))
    with pytest.raises(InvalidInputError, match="height, width >= 1"):
        random_instance("box", 0, height=0)
