"""Object localization with bounding boxes: Weizmann horses and the raccoon set.

Each image is converted to grey, rescaled so that its longer side is ``image_size`` pixels and
cut into a grid of ``cell_size``-pixel cells (the remainder on the bottom/right is cropped). The
output is one box in cell coordinates, half-open ``(top, left, bottom, right)``; the gold box
is the pixel box rounded to the nearest cell boundaries (clipped to the grid, at least one cell).

- ``horses``: 328 grey images; the box is the bounding box of the figure-ground mask (> 127).
  Split: images sorted by name, the first 200 train, the other 128 test.
- ``raccoon``: 200 images with VOC XML; the 184 with exactly one object are kept (the 16 with
  several raccoons are dropped). Split: sorted by their number, the first 120 train, the other 64
  test.

Cell features (:mod:`structopt.problems._bow`): bag of visual words of dense HOG descriptors, a
codebook of ``n_words`` k-means centres fitted on the training images only, per-cell word counts,
the indicator of the cell's coarse position (a spatial prior the model can learn) and a constant
feature (a per-cell bias: the model's area term), scaled so that the whole image sums to
``sqrt(H W) * (word distribution, position-bin fractions, 1)``. Features are cached under
``$STRUCTOPT_CACHE`` (default ``$XDG_CACHE_HOME/structopt`` or ``~/.cache/structopt``), keyed on
every parameter and the data directory.

Metrics: detection rate (fraction of test images with IoU >= 0.5, as in PASCAL VOC) and mean IoU,
both with areas in cells; :func:`mean_box_prior` is the baseline that ignores the image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.models.box import BoxModel
from structopt.problems import _bow
from structopt.problems._data import find_data_dir
from structopt.structures.box import iou

DATASETS = ("horses", "raccoon")
SOURCES = {
    "horses": "the Weizmann horse database (Borenstein & Ullman): gray/*.jpg images and figure_ground/*.jpg masks",
    "raccoon": "the raccoon dataset (Dat Tran, 200 images with PASCAL VOC XML): images/*.jpg and annotations/*.xml",
}
REQUIRED = {"horses": ("gray", "figure_ground"), "raccoon": ("images", "annotations")}
N_TRAIN = {"horses": 200, "raccoon": 120}
_CACHE_VERSION = 2

Box = tuple[int, int, int, int]


# --------------------------------------------------------------------------- raw images and pixel boxes
def _read_grey(path: Path) -> np.ndarray:
    from skimage import io
    from skimage.color import rgb2gray

    image = io.imread(path)
    if image.ndim == 3:
        image = rgb2gray(image[..., :3])
    image = np.asarray(image, dtype=np.float64)
    return image / 255.0 if image.max() > 1.0 else image


def _horse_items(root: Path) -> list[tuple[str, Path, Box]]:
    from skimage import io

    items = []
    for image_path in sorted((root / "gray").glob("*.jpg")):
        mask = io.imread(root / "figure_ground" / image_path.name)
        mask = (mask[..., 0] if mask.ndim == 3 else mask) > 127
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        if rows.size == 0:
            continue  # no object in the mask: no box to learn
        items.append((image_path.stem, image_path, (int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1)))
    return items


def _raccoon_items(root: Path) -> tuple[list[tuple[str, Path, Box]], int]:
    def number(path: Path) -> int:
        found = re.findall(r"\d+", path.stem)
        return int(found[-1]) if found else -1

    items, dropped = [], 0
    for xml_path in sorted((root / "annotations").glob("*.xml"), key=lambda p: (number(p), p.name)):
        tree = ET.parse(xml_path).getroot()
        objects = tree.findall("object")
        if len(objects) != 1:
            dropped += 1
            continue
        bb = objects[0].find("bndbox")
        x0, y0, x1, y1 = (round(float(bb.find(tag).text)) for tag in ("xmin", "ymin", "xmax", "ymax"))
        # VOC boxes are 1-based and inclusive: half-open 0-based is (y0 - 1, x0 - 1, y1, x1)
        items.append((xml_path.stem, root / "images" / tree.find("filename").text, (y0 - 1, x0 - 1, y1, x1)))
    return items, dropped


def load_image(path: Path, image_size: int) -> np.ndarray:
    """Grey image in [0, 1] rescaled so that its longer side is ``image_size`` pixels."""
    from skimage.transform import resize

    image = _read_grey(path)
    h, w = image.shape
    scale = image_size / max(h, w)
    return resize(image, (max(1, round(h * scale)), max(1, round(w * scale))), anti_aliasing=True)


def rescale_box(pixel_box: Box, original: tuple[int, int], shape: tuple[int, int]) -> tuple[float, float, float, float]:
    """A pixel box of an image of shape ``original`` in the pixels of its rescaled ``shape`` (clipped)."""
    (h, w), (sh, sw) = original, shape
    t, l, b, r = pixel_box
    t, b, l, r = max(0, t), min(h, b), max(0, l), min(w, r)
    return t * sh / h, l * sw / w, b * sh / h, r * sw / w


def cell_box(box: tuple[float, float, float, float], grid: tuple[int, int], cell_size: int) -> Box:
    """A pixel box rounded to the nearest cell boundaries, clipped to the grid, at least one cell."""
    H, W = grid

    def span(lo: float, hi: float, n: int) -> tuple[int, int]:
        a = min(max(round(lo / cell_size), 0), n - 1)
        b = min(max(round(hi / cell_size), a + 1), n)
        return a, b

    t, b = span(box[0], box[2], H)
    l, r = span(box[1], box[3], W)
    return t, l, b, r


# --------------------------------------------------------------------------- metrics and baseline
def detection_rate(y_true: Sequence[Box], y_pred: Sequence[Box], threshold: float = 0.5) -> float:
    """Fraction of images whose predicted box has IoU >= ``threshold`` with the gold box."""
    return float(np.mean([iou(a, b) >= threshold for a, b in zip(y_true, y_pred, strict=True)]))


def mean_iou(y_true: Sequence[Box], y_pred: Sequence[Box]) -> float:
    """Mean IoU of predicted and gold boxes."""
    return float(np.mean([iou(a, b) for a, b in zip(y_true, y_pred, strict=True)]))


def mean_box_prior(train_y: Sequence[Box], train_grids: Sequence[tuple[int, int]],
                   grids: Sequence[tuple[int, int]]) -> list[Box]:
    """The mean training box in relative coordinates, placed on each grid of ``grids``."""
    rel = np.array([(t / H, l / W, b / H, r / W) for (t, l, b, r), (H, W) in zip(train_y, train_grids, strict=True)])
    mt, ml, mb, mr = rel.mean(axis=0)
    out = []
    for H, W in grids:
        t = min(round(mt * H), H - 1)
        l = min(round(ml * W), W - 1)
        out.append((t, l, max(round(mb * H), t + 1), max(round(mr * W), l + 1)))
    return out


# --------------------------------------------------------------------------- loader
def cache_dir() -> Path:
    """``$STRUCTOPT_CACHE``, else ``$XDG_CACHE_HOME/structopt``, else ``~/.cache/structopt``."""
    if os.environ.get("STRUCTOPT_CACHE"):
        return Path(os.environ["STRUCTOPT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "structopt"


def _items(dataset: str, root: Path) -> tuple[list[tuple[str, Path, Box]], int]:
    return (_horse_items(root), 0) if dataset == "horses" else _raccoon_items(root)


def _compute(dataset: str, root: Path, image_size: int, cell_size: int, n_words: int,
             random_state: int) -> dict[str, Any]:
    items, dropped = _items(dataset, root)
    n_train = N_TRAIN[dataset]
    if len(items) <= n_train:
        raise InvalidInputError(f"{dataset}: found {len(items)} usable images in {root}, expected more than {n_train}")
    grids, boxes, descs, where = [], [], [], []
    for _name, path, pixel_box in items:
        original = _read_grey(path).shape
        image = load_image(path, image_size)
        box = rescale_box(pixel_box, original, image.shape)
        grid = _bow.grid_shape(image.shape, cell_size)
        desc, cells = _bow.descriptors(image, cell_size)
        grids.append(grid)
        boxes.append(cell_box(box, grid, cell_size))
        descs.append(desc)
        where.append(cells)
    codebook = _bow.fit_codebook(descs[:n_train], n_words, random_state)
    features = []
    for desc, cells, grid in zip(descs, where, grids, strict=True):
        hist = _bow.cell_histograms(_bow.assign(desc, codebook), cells, grid, n_words)
        features.append(hist.reshape(-1, n_words))
    return {"counts": np.concatenate(features).astype(np.float32), "grids": np.array(grids, dtype=np.int64),
            "boxes": np.array(boxes, dtype=np.int64), "names": np.array([name for name, _, _ in items]),
            "n_dropped": np.int64(dropped)}


def _cell_features(counts: np.ndarray, bins: int) -> np.ndarray:
    # The whole image's joint feature is sqrt(H W) * (word distribution, bin fractions, 1): the
    # scale does not depend on the number of descriptors, and grows like the grid's side so that
    # useful lam for a few BCFW passes sit near 0.01 (the command line's default).
    H, W, n_words = counts.shape
    unit = 1.0 / np.sqrt(H * W)
    x = np.zeros((H, W, n_words + bins * bins + 1))
    x[..., :n_words] = counts * (np.sqrt(H * W) / max(counts.sum(), 1.0))
    if bins:
        rows, cols = (np.arange(H) * bins) // H, (np.arange(W) * bins) // W
        x[np.arange(H)[:, None], np.arange(W)[None, :], n_words + rows[:, None] * bins + cols[None, :]] = unit
    x[..., -1] = unit
    return x


def load_boxes(path: str | os.PathLike | None = None, dataset: str = "horses", *, image_size: int = 192,
               cell_size: int = 8, n_words: int = 100, position_bins: int = 4, random_state: int = 0,
               cache: bool = True) -> dict[str, Any]:
    """Load a localization dataset as cell-feature arrays and gold boxes in cell coordinates.

    Parameters
    ----------
    path : path, optional
        The dataset's directory (default: ``$STRUCTOPT_DATA/<dataset>`` or ``../shared/data/<dataset>``).
    dataset : {"horses", "raccoon"}
    image_size : int
        Longer image side after rescaling, in pixels.
    cell_size : int
        Cell side in pixels (even, >= 4).
    n_words : int
        Codebook size.
    position_bins : int
        Cells also get the indicator of their coarse position in a ``position_bins`` x
        ``position_bins`` partition of the image (0: none), so the model can learn a spatial prior.
    random_state : int
        Seed of the codebook's k-means.
    cache : bool
        Read/write the features in the cache directory (see :func:`cache_dir`).

    Returns
    -------
    dict
        ``{"train": {"X", "y"}, "test": {"X", "y"}, "model", "info"}``: X are
        (H, W, n_words + position_bins**2 + 1) float64 arrays (word counts, position indicators
        and the constant last, scaled as in the module notes), y boxes ``(top, left, bottom, right)``
        in cells, ``model`` a :class:`~structopt.models.box.BoxModel`, ``info`` the dataset,
        data directory, cell and image size in pixels, names of the train/test images and the
        number of images dropped.

    Raises
    ------
    DataNotFoundError
        When the data directory is missing (the message names ``--data``).
    """
    if dataset not in DATASETS:
        raise InvalidInputError(f"unknown localization dataset {dataset!r}; use one of {DATASETS}")
    if int(cell_size) != cell_size or cell_size < 4 or cell_size % 2:
        raise InvalidInputError(f"cell_size must be an even integer >= 4, got {cell_size!r}")
    if image_size < 4 * cell_size:
        raise InvalidInputError(f"image_size {image_size} is too small for cells of {cell_size} pixels")
    if int(n_words) != n_words or n_words < 2:
        raise InvalidInputError(f"n_words must be an integer >= 2, got {n_words!r}")
    if int(position_bins) != position_bins or position_bins < 0:
        raise InvalidInputError(f"position_bins must be an integer >= 0, got {position_bins!r}")
    root = find_data_dir(dataset, path, required=REQUIRED[dataset], source=SOURCES[dataset])
    params = {"dataset": dataset, "root": str(root), "image_size": int(image_size), "cell_size": int(cell_size),
              "n_words": int(n_words), "random_state": int(random_state), "version": _CACHE_VERSION,
              "orientations": _bow.ORIENTATIONS, "n_train": N_TRAIN[dataset]}
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    file = cache_dir() / "localization" / f"{dataset}-{key}.npz"
    if cache and file.exists():
        with np.load(file) as npz:
            data = {name: npz[name] for name in npz.files}
    else:
        data = _compute(dataset, root, int(image_size), int(cell_size), int(n_words), int(random_state))
        if cache:
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_suffix(".tmp.npz")
            np.savez_compressed(tmp, **data)
            tmp.replace(file)
    sizes = data["grids"].prod(axis=1)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    n_words = int(n_words)
    F = n_words + int(position_bins) ** 2 + 1
    X = [_cell_features(data["counts"][starts[i]:starts[i + 1]].astype(np.float64).reshape(H, W, n_words),
                        int(position_bins)) for i, (H, W) in enumerate(data["grids"])]
    y = [tuple(int(v) for v in box) for box in data["boxes"]]
    n_train = N_TRAIN[dataset]
    names = [str(name) for name in data["names"]]
    info = {"dataset": dataset, "path": str(root), "cell_size": int(cell_size), "image_size": int(image_size),
            "n_words": n_words, "position_bins": int(position_bins), "train_names": names[:n_train],
            "test_names": names[n_train:],
            "n_dropped": int(data["n_dropped"]), "cache_file": str(file) if cache else None}
    return {"train": {"X": X[:n_train], "y": y[:n_train]}, "test": {"X": X[n_train:], "y": y[n_train:]},
            "model": BoxModel(F), "info": info}


def image_path(info: dict[str, Any], name: str) -> Path:
    """Path of image ``name`` of a loaded dataset (for plots)."""
    root = Path(info["path"])
    if info["dataset"] == "horses":
        return root / "gray" / f"{name}.jpg"
    tree = ET.parse(root / "annotations" / f"{name}.xml").getroot()
    return root / "images" / tree.find("filename").text
