"""Object localization with bounding boxes: Weizmann horses and the raccoon set.

Each image is rescaled so that its longer side is ``image_size`` pixels and
cut into a grid of ``cell_size``-pixel cells (the remainder on the bottom/right is cropped). The
output is one box in cell coordinates, half-open ``(top, left, bottom, right)``; the gold box
is the pixel box rounded to the nearest cell boundaries (clipped to the grid, at least one cell).

- ``horses``: 328 grey images; the box is the bounding box of the figure-ground mask (> 127).
  Split (:func:`held_out_items`): images sorted by name, the first 200 train, the other 128 test.
- ``raccoon``: 200 images with VOC XML; the 184 with exactly one object are kept (the 16 with
  several raccoons are dropped). Split: sorted by their number, the first 120 train, the other 64
  test.

What is read is checked, with errors naming the file (and the object): every image has its mask
or annotation and vice versa, an image has the size its mask or XML declares, masks have a
foreground, VOC boxes have positive width and height and lie in the image (a one-pixel overshoot,
a 0-based/1-based slip, is clipped: :func:`voc_box`), images decode (``cannot read image FILE``).

Cell features (:mod:`structopt.tasks._bow`), one group after another, each scaled so that the
whole image sums to ``sqrt(H W)`` times a distribution (the word groups) or the cell fraction:

1. ``n_words`` HOG words (k-means codebook fitted on the training images only): per-cell counts;
2. the same counts averaged over a ``context`` x ``context`` window of cells around the cell
   (zero padding): a cell's surroundings, which tell object from background far better than
   its own four descriptors;
3. ``n_words`` words of HOG at twice the scale (blocks of 2 x 2 cells, own codebook);
4. ``n_colours`` CIE-Lab colour words (codebook on pixels of the training images);
5. their counts averaged over a ``colour_context`` window (grey images only have lightness words);
6. separable position indicators: the cell's row bin and its column bin out of
   ``position_bins`` each (``2 * position_bins`` features: a spatial prior, the size/shape part
   of which a sum over cells can express through these and the area term);
7. a constant (the per-cell bias: the model's area term).

With ``foreground=True`` (the default) one more feature comes first: a per-cell foreground
score, the log-odds of a logistic regression of "cell inside the gold box" on features 1-7
(:func:`foreground_features`). It is fitted on cells of the training images, and a training
image's own map comes from the fit on the other folds (cross-fitting), so the training features
are out-of-sample like the test features. Cell-level supervision has some 50 000 examples where
the box SVM has a hundred or two, so this stacked score carries most of the discriminative work.

Features 1-5 are cached under ``$STRUCTOPT_CACHE`` (default ``$XDG_CACHE_HOME/structopt`` or
``~/.cache/structopt``) as a sealed archive (:mod:`structopt.archive`), keyed on every parameter
they depend on and on the data directory's files (names, sizes, modification times), so an edited
file is never served from a stale cache; a cache file that fails its checksum is recomputed.

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

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.models.box import BoxModel
from structopt.progress import Progress, as_progress, count
from structopt.structures.box import iou
from structopt.tasks import _bow
from structopt.tasks._data import (
    cache_dir,
    file_listing,
    find_data_dir,
    image_shape,
    read_cache,
    read_image,
    write_cache,
)

DATASETS = ("horses", "raccoon")
SOURCES = {
    "horses": "the Weizmann horse database (Borenstein & Ullman): gray/*.jpg images and figure_ground/*.jpg masks",
    "raccoon": "the raccoon dataset (Dat Tran, 200 images with PASCAL VOC XML): images/*.jpg and annotations/*.xml",
}
REQUIRED = {"horses": ("gray", "figure_ground"), "raccoon": ("images", "annotations")}
N_TRAIN = {"horses": 200, "raccoon": 120}
#: each dataset's train/test split in words (:func:`held_out_items` applies it)
SPLIT_RULES = {"horses": "images sorted by name; the first 200 train, the other 128 test",
               "raccoon": "the single-object images sorted by number; the first 120 train, the other 64 test"}
_CACHE_VERSION = 5  # 5: the codebooks are cached too (saved models keep them)

Box = tuple[int, int, int, int]


# --------------------------------------------------------------------------- raw images and pixel boxes
def _read_grey(path: Path) -> np.ndarray:
    from skimage.color import rgb2gray

    image = read_image(path)
    if image.ndim == 3:
        image = rgb2gray(image[..., :3])
    image = np.asarray(image, dtype=np.float64)
    return image / 255.0 if image.max() > 1.0 else image


def _read_rgb(path: Path) -> np.ndarray:
    from skimage.color import gray2rgb

    image = read_image(path)
    image = gray2rgb(image) if image.ndim == 2 else image[..., :3]
    image = np.asarray(image, dtype=np.float64)
    return image / 255.0 if image.max() > 1.0 else image


#: one item per image: name, image path and pixel box (half-open, 0-based)
Item = tuple[str, Path, Box]


def _check_size(image: Path, declared: tuple[int, int], annotation: Path) -> None:
    # from the image's header: a box on an image of another size lands on the wrong pixels
    actual = image_shape(image)
    if actual != declared:
        raise InvalidInputError(f"{image}: image is {actual[1]}x{actual[0]} pixels but {annotation} describes a "
                                f"{declared[1]}x{declared[0]} image")


def _horse_items(root: Path) -> list[Item]:
    from structopt.tasks.horses import paired_names

    items = []
    for name in paired_names(root):
        mask_path = root / "figure_ground" / name
        mask = read_image(mask_path)
        mask = (mask[..., 0] if mask.ndim == 3 else mask) > 127
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        if rows.size == 0:  # no object, no box: a broken mask, not an image to skip silently
            raise InvalidInputError(f"{mask_path}: the mask has no foreground pixel (> 127), so no box")
        box = (int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1)
        _check_size(root / "gray" / name, mask.shape, mask_path)
        items.append((Path(name).stem, root / "gray" / name, box))
    return items


def _xml_text(element: ET.Element, tag: str, xml_path: Path, where: str) -> str:
    found = element.find(tag)
    if found is None or found.text is None or not found.text.strip():
        raise InvalidInputError(f"{xml_path}: missing or empty element <{where}{tag}>")
    return found.text.strip()


def _xml_number(element: ET.Element, tag: str, xml_path: Path, where: str) -> float:
    text = _xml_text(element, tag, xml_path, where)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise InvalidInputError(f"{xml_path}: <{where}{tag}> must be a finite number, got {text!r}")
    return value


def _parse_xml(xml_path: Path) -> ET.Element:
    try:
        return ET.parse(xml_path).getroot()
    except FileNotFoundError:
        raise DataNotFoundError(f"annotation {xml_path} not found") from None
    except ET.ParseError as error:  # the message carries the line and column
        raise InvalidInputError(f"{xml_path}: bad XML ({error})") from None
    except OSError as error:
        raise InvalidInputError(f"{xml_path}: cannot read ({error})") from None


def voc_box(bndbox: ET.Element, size: tuple[int, int], xml_path: Path, where: str) -> Box:
    """A VOC ``<bndbox>`` as a half-open 0-based pixel box ``(top, left, bottom, right)`` inside the image.

    VOC coordinates are 1-based and inclusive, so the half-open box is ``(ymin - 1, xmin - 1, ymax,
    xmax)``; fractional coordinates are rounded. Rules:

    - ``xmax <= xmin`` or ``ymax <= ymin`` (zero or negative width or height) is refused;
    - a box with no pixel inside the image is refused;
    - a box that overshoots the image by at most one pixel per side (``xmin = 0`` from 0-based
      tools, ``xmax = width + 1``) is clipped to the image: a pixel-convention slip;
    - a box further outside is refused (an annotation for another image size).

    Raises
    ------
    InvalidInputError
        Naming the file, the object (``where``) and the coordinates.
    """
    h, w = size
    x0, y0, x1, y1 = (round(_xml_number(bndbox, tag, xml_path, where)) for tag in ("xmin", "ymin", "xmax", "ymax"))
    coords = f"(xmin {x0}, ymin {y0}, xmax {x1}, ymax {y1})"
    if x1 <= x0 or y1 <= y0:
        raise InvalidInputError(f"{xml_path}: {where.rstrip('/')} has zero or negative width or height {coords}")
    if x1 < 1 or y1 < 1 or x0 > w or y0 > h:
        raise InvalidInputError(f"{xml_path}: {where.rstrip('/')} lies outside the {w}x{h} image {coords}")
    if x0 < 0 or y0 < 0 or x1 > w + 1 or y1 > h + 1:
        raise InvalidInputError(f"{xml_path}: {where.rstrip('/')} extends more than one pixel beyond the {w}x{h} "
                                f"image {coords} (VOC boxes are 1-based: 1 <= xmin < xmax <= width)")
    return max(y0 - 1, 0), max(x0 - 1, 0), min(y1, h), min(x1, w)


def voc_annotation(xml_path: Path, images: Path) -> tuple[Path, tuple[int, int], list[tuple[int, int, int, int]]]:
    """One Pascal VOC XML annotation: the image it names (in the folder ``images``), the (height, width)
    it declares and the box of every object (0-based, end-exclusive), each checked.

    Raises
    ------
    DataNotFoundError
        The named image does not exist.
    InvalidInputError
        Naming the XML file: malformed XML, a missing element, a size that is not positive integers,
        a box outside the image.
    """
    tree = _parse_xml(xml_path)
    image = images / _xml_text(tree, "filename", xml_path, "annotation/")
    if not image.is_file():
        raise DataNotFoundError(f"{xml_path}: its image {image} does not exist")
    width = _xml_number(tree, "size/width", xml_path, "annotation/")
    height = _xml_number(tree, "size/height", xml_path, "annotation/")
    if width < 1 or height < 1 or not float(width).is_integer() or not float(height).is_integer():
        raise InvalidInputError(f"{xml_path}: <annotation/size> must be positive integers, got "
                                f"width {width:g} and height {height:g}")
    size = (int(height), int(width))
    boxes = [voc_box(_xml_find(obj, "bndbox", xml_path, f"object {k}/"), size, xml_path, f"object {k}/")
             for k, obj in enumerate(tree.findall("object"))]
    return image, size, boxes


def _raccoon_items(root: Path) -> tuple[list[Item], int]:
    def number(path: Path) -> int:
        found = re.findall(r"\d+", path.stem)
        return int(found[-1]) if found else -1

    items, dropped, named = [], 0, set()
    for xml_path in sorted((root / "annotations").glob("*.xml"), key=lambda p: (number(p), p.name)):
        # every object is checked, also in images dropped for having several
        image, size, boxes = voc_annotation(xml_path, root / "images")
        named.add(image.name)
        if len(boxes) != 1:
            dropped += 1
            continue
        _check_size(image, size, xml_path)
        items.append((xml_path.stem, image, boxes[0]))
    orphans = sorted({p.name for p in (root / "images").glob("*.jpg")} - named)
    if orphans:
        raise DataNotFoundError(f"raccoon: {len(orphans)} image(s) in {root / 'images'} have no annotation in "
                                f"{root / 'annotations'} (no XML names them): {', '.join(orphans[:3])}"
                                + (f" and {len(orphans) - 3} more" if len(orphans) > 3 else ""))
    return items, dropped


def _xml_find(element: ET.Element, tag: str, xml_path: Path, where: str) -> ET.Element:
    found = element.find(tag)
    if found is None:
        raise InvalidInputError(f"{xml_path}: missing element <{where}{tag}>")
    return found


def load_image(path: Path, image_size: int, colour: bool = False) -> np.ndarray:
    """Grey (or RGB, ``colour=True``) image in [0, 1] rescaled so that its longer side is ``image_size`` pixels."""
    from skimage.transform import resize

    image = _read_rgb(path) if colour else _read_grey(path)
    h, w = image.shape[:2]
    scale = image_size / max(h, w)
    return resize(image, (max(1, round(h * scale)), max(1, round(w * scale)), *image.shape[2:]), anti_aliasing=True)


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
def dataset_items(root: Path) -> list[Item] | None:
    """The images of a folder laid out as a dataset (``gray/`` + ``figure_ground/`` masks, or ``images/`` +
    VOC ``annotations/``) with their gold pixel boxes, or None when it has neither layout.

    Raises
    ------
    DataNotFoundError, InvalidInputError
        As the dataset loaders: an image without its mask or annotation, a bad annotation (naming the file).
    """
    for dataset, needed in REQUIRED.items():
        if all((root / sub).is_dir() for sub in needed):
            return _items(dataset, root)[0]
    return None


def _items(dataset: str, root: Path) -> tuple[list[Item], int]:
    return (_horse_items(root), 0) if dataset == "horses" else _raccoon_items(root)


def _image_descriptors(path: Path, image_size: int, cell_size: int) -> dict[str, Any]:
    """Everything of one image the codebooks quantise: HOG (cell and coarse scale) and Lab pixels, with its grid."""
    image = load_image(path, image_size)
    grid = _bow.grid_shape(image.shape, cell_size)
    desc, cells = _bow.descriptors(image, cell_size)
    desc2, cells2 = _bow.coarse_descriptors(image, cell_size)
    lab = _bow.lab_pixels(load_image(path, image_size, colour=True), cell_size).reshape(-1, 3)
    return {"image": image, "grid": grid, "desc": desc, "cells": cells, "desc2": desc2, "cells2": cells2, "lab": lab}


def _image_counts(d: dict[str, Any], codebooks: dict[str, np.ndarray], cell_size: int) -> dict[str, np.ndarray]:
    """Per-cell word counts of one image (:func:`_image_descriptors`), float32 as the cache stores them."""
    codebook, codebook2, colours = codebooks["codebook"], codebooks["codebook2"], codebooks["colour_codebook"]
    n_words, n_colours, grid = len(codebook), len(colours), d["grid"]
    H, W = grid
    return {"counts": _bow.cell_histograms(_bow.assign(d["desc"], codebook), d["cells"], grid, n_words)
            .reshape(-1, n_words).astype(np.float32),
            "counts2": _bow.spread_histograms(_bow.assign(d["desc2"], codebook2), d["cells2"], grid, n_words)
            .reshape(-1, n_words).astype(np.float32),
            "colours": _bow.colour_histograms(d["lab"].reshape(H * cell_size, W * cell_size, 3), colours, cell_size)
            .reshape(-1, n_colours).astype(np.float32)}


def held_out_items(n: int, dataset: str) -> np.ndarray:
    """The split rule (:data:`SPLIT_RULES`): a boolean mask over a dataset's ``n`` images in its order
    (:func:`dataset_items`), True for the test images (all after the first :data:`N_TRAIN`).
    ``load_boxes`` and ``structopt predict`` both select with it."""
    return np.arange(n) >= N_TRAIN[dataset]


def _compute(dataset: str, root: Path, image_size: int, cell_size: int, n_words: int, n_colours: int,
             random_state: int, progress: bool | Progress = False) -> dict[str, Any]:
    items, dropped = _items(dataset, root)
    n_train = int(np.count_nonzero(~held_out_items(len(items), dataset)))
    if len(items) <= n_train:
        raise InvalidInputError(f"{dataset}: found {len(items)} usable images in {root}, expected more than {n_train}")
    report = as_progress(progress)
    report.stage(f"computing {dataset} cell descriptors of {count(len(items), 'image')} (cached for the next run)")
    rng = np.random.default_rng(random_state)
    described, boxes, samples = [], [], []
    for _name, path, pixel_box in report.items(items, len(items), "image descriptors", "images"):
        original = _read_grey(path).shape
        d = _image_descriptors(path, image_size, cell_size)
        box = rescale_box(pixel_box, original, d["image"].shape)
        boxes.append(cell_box(box, d["grid"], cell_size))
        described.append(d)
        lab = d["lab"]
        samples.append(lab[rng.choice(len(lab), min(len(lab), 500), replace=False)])
        del d["image"]
    report.stage(f"fitting the visual-word codebooks (k-means: {n_words} words twice, {n_colours} colours) on "
                 f"{count(n_train, 'training image')}, then counting them per cell")
    codebooks = {"codebook": _bow.fit_codebook([d["desc"] for d in described[:n_train]], n_words, random_state),
                 "codebook2": _bow.fit_codebook([d["desc2"] for d in described[:n_train]], n_words, random_state),
                 "colour_codebook": _bow.fit_codebook(samples[:n_train], n_colours, random_state)}
    counts = [_image_counts(d, codebooks, cell_size) for d in described]
    return {**{key: np.concatenate([c[key] for c in counts]) for key in ("counts", "counts2", "colours")},
            "grids": np.array([d["grid"] for d in described], dtype=np.int64),
            "boxes": np.array(boxes, dtype=np.int64), "names": np.array([name for name, _, _ in items]),
            "n_dropped": np.int64(dropped), **codebooks}


def _normalised(counts: np.ndarray) -> np.ndarray:
    # scaled so that the whole image sums to sqrt(H W) * (distribution of the counts)
    H, W = counts.shape[:2]
    return counts * (np.sqrt(H * W) / max(float(counts.sum()), 1e-12))


def _context(counts: np.ndarray, size: int) -> np.ndarray:
    from scipy.ndimage import uniform_filter

    return uniform_filter(counts, size=(size, size, 1), mode="constant")


def _cell_features(counts: np.ndarray, counts2: np.ndarray, colours: np.ndarray, bins: int, context: int,
                   colour_context: int) -> np.ndarray:
    # Word groups sum over the image to sqrt(H W) * (a distribution), position indicators and the
    # constant to sqrt(H W) * (cell fraction): the scale does not depend on the number of
    # descriptors and grows like the grid's side, so useful lam sit near 0.01.
    H, W = counts.shape[:2]
    unit = 1.0 / np.sqrt(H * W)
    groups = [_normalised(counts)]
    if context > 1:
        groups.append(_normalised(_context(counts, context)))
    groups.append(_normalised(counts2))
    if colours.shape[2]:
        groups.append(_normalised(colours))
        if colour_context > 1:
            groups.append(_normalised(_context(colours, colour_context)))
    if bins:
        position = np.zeros((H, W, 2 * bins))
        rows, cols = (np.arange(H) * bins) // H, (np.arange(W) * bins) // W
        position[np.arange(H), :, rows] = unit
        position[:, np.arange(W), bins + cols] = unit
        groups.append(position)
    groups.append(np.full((H, W, 1), unit))
    return np.concatenate(groups, axis=2)


def _inside(box: Box, grid: tuple[int, int]) -> np.ndarray:
    mask = np.zeros(grid)
    t, l, b, r = box
    mask[t:b, l:r] = 1.0
    return mask.ravel()


def _cell_rows(X: Sequence[np.ndarray]) -> np.ndarray:
    # cells as rows, rescaled by sqrt(H W) so that cells of grids of any size look alike
    return np.concatenate([x.reshape(-1, x.shape[2]) * np.sqrt(x.shape[0] * x.shape[1]) for x in X])


def _foreground_map(classifier, x: np.ndarray) -> np.ndarray:
    H, W, F = x.shape
    return classifier.decision_function(x.reshape(-1, F) * np.sqrt(H * W)).reshape(H, W)


def _with_map(x: np.ndarray, score: np.ndarray) -> np.ndarray:
    H, W = score.shape
    return np.concatenate([score[..., None] / np.sqrt(H * W), x], axis=2)


def foreground_features(train_X: Sequence[np.ndarray], train_y: Sequence[Box], other_X: Sequence[np.ndarray],
                        n_folds: int = 3, C: float = 1.0, return_classifier: bool = False) -> tuple:
    """Prepend a stacked per-cell foreground score to cell features.

    A logistic regression (``C``) of "cell inside the gold box" on the cells of ``train_X`` scores
    the cells of ``other_X``; each training image gets the scores of the fit on the other
    ``n_folds - 1`` folds (image ``i`` is in fold ``i % n_folds``), so no image's own box shapes its
    feature. The score enters as ``log-odds / sqrt(H W)`` (the scale of the other features).

    Returns
    -------
    train, other : lists of (H, W, F + 1) arrays
    (coef, intercept) : the fit on all training images, when ``return_classifier``
    """
    from sklearn.linear_model import LogisticRegression

    train_X, other_X = list(train_X), list(other_X)
    if n_folds < 2 or len(train_X) < n_folds:
        raise InvalidInputError(f"foreground_features needs n_folds >= 2 and at least n_folds training images, "
                                f"got n_folds={n_folds} and {len(train_X)} images")

    def fit(index: Sequence[int]):
        labels = np.concatenate([_inside(train_y[i], train_X[i].shape[:2]) for i in index])
        return LogisticRegression(C=C, max_iter=3000).fit(_cell_rows([train_X[i] for i in index]), labels)

    fold = np.arange(len(train_X)) % n_folds
    train_out: list[np.ndarray] = [np.empty(0)] * len(train_X)
    for f in range(n_folds):
        classifier = fit(np.flatnonzero(fold != f))
        for i in np.flatnonzero(fold == f):
            train_out[i] = _with_map(train_X[i], _foreground_map(classifier, train_X[i]))
    classifier = fit(range(len(train_X)))
    if return_classifier:
        return train_out, [_with_map(x, _foreground_map(classifier, x)) for x in other_X], \
            (classifier.coef_.copy(), classifier.intercept_.copy())
    return train_out, [_with_map(x, _foreground_map(classifier, x)) for x in other_X]


class _LinearScore:
    """A fitted logistic regression's decision function from its saved coefficients (what sklearn computes)."""

    def __init__(self, coef: np.ndarray, intercept: np.ndarray):
        self.coef, self.intercept = np.asarray(coef, dtype=np.float64), np.asarray(intercept, dtype=np.float64)

    def decision_function(self, rows: np.ndarray) -> np.ndarray:
        return (rows @ self.coef.T + self.intercept).reshape(-1)


#: the feature options a localization model's preprocessing records (with the codebooks and the foreground fit)
FEATURE_OPTIONS = ("dataset", "image_size", "cell_size", "context", "colour_context", "position_bins", "foreground")


def image_cells(path: Path, preprocessing: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Cell features of a new image with a trained model's preprocessing (options, codebooks, foreground fit).

    Returns
    -------
    x : (H, W, F) float64 cell features, as :func:`load_boxes` computes them for its test images
    original : (height, width) of the image file
    rescaled : (height, width) of the image after rescaling to ``image_size``

    Raises
    ------
    DataNotFoundError, InvalidInputError
        The image is missing or cannot be decoded (naming the file).
    """
    p = preprocessing
    cell_size = int(p["cell_size"])
    original = _read_grey(path).shape
    d = _image_descriptors(path, int(p["image_size"]), cell_size)
    H, W = d["grid"]
    counts = _image_counts(d, p, cell_size)
    x = _cell_features(*(counts[key].astype(np.float64).reshape(H, W, -1) for key in ("counts", "counts2", "colours")),
                       int(p["position_bins"]), int(p["context"]), int(p["colour_context"]))
    if p["foreground"]:
        x = _with_map(x, _foreground_map(_LinearScore(p["foreground_coef"], p["foreground_intercept"]), x))
    return x, original, d["image"].shape[:2]


def pixel_box(box: Box, cell_size: int, original: tuple[int, int], rescaled: tuple[int, int]) -> Box:
    """A box in cells as a half-open 0-based pixel box ``(top, left, bottom, right)`` of the original image."""
    t, l, b, r = box
    (h, w), (sh, sw) = original, rescaled
    return (round(t * cell_size * h / sh), round(l * cell_size * w / sw),
            min(h, round(b * cell_size * h / sh)), min(w, round(r * cell_size * w / sw)))


def load_boxes(path: str | os.PathLike | None = None, dataset: str = "horses", *, image_size: int = 192,
               cell_size: int = 8, n_words: int = 100, n_colours: int = 32, context: int = 5,
               colour_context: int = 9, position_bins: int = 12, foreground: bool = True, random_state: int = 0,
               cache: bool = True, progress: bool | Progress = False) -> dict[str, Any]:
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
        Size of each HOG codebook (the cell-scale and the coarse one).
    n_colours : int
        Size of the colour codebook (0: no colour features).
    context, colour_context : int
        Side, in cells, of the window over which the HOG (colour) word counts are averaged for
        the context features (1: none).
    position_bins : int
        Cells also get the indicators of their row bin and column bin out of ``position_bins``
        equal bands each (0: none), so the model can learn a spatial prior.
    foreground : bool
        Prepend the cross-fitted per-cell foreground score (:func:`foreground_features`).
    random_state : int
        Seed of the codebook's k-means.
    cache : bool
        Read/write the features in the cache directory (see :func:`cache_dir`).
    progress : bool or Progress
        Say on stderr what is computed (:mod:`~structopt.progress`).

    Returns
    -------
    dict
        ``{"train": {"X", "y"}, "test": {"X", "y"}, "model", "info"}``: X are (H, W, F) float64
        arrays (the foreground score if any, then the groups of the module notes with the
        constant last), y boxes ``(top, left, bottom, right)``
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
    if int(n_colours) != n_colours or n_colours < 0 or n_colours == 1:
        raise InvalidInputError(f"n_colours must be 0 or an integer >= 2, got {n_colours!r}")
    for name, size in (("context", context), ("colour_context", colour_context)):
        if int(size) != size or size < 1:
            raise InvalidInputError(f"{name} must be an integer >= 1, got {size!r}")
    root = find_data_dir(dataset, path, required=REQUIRED[dataset], source=SOURCES[dataset])
    params = {"dataset": dataset, "root": str(root), "image_size": int(image_size), "cell_size": int(cell_size),
              "n_words": int(n_words), "n_colours": int(n_colours), "random_state": int(random_state),
              "version": _CACHE_VERSION,
              "orientations": _bow.ORIENTATIONS, "n_train": N_TRAIN[dataset]}
    params["files"] = file_listing(root)  # an edited, added or removed file makes a new key: never a stale cache
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    file = cache_dir() / "localization" / f"{dataset}-{key}.npz"
    data = read_cache(file) if cache else None
    if data is None:
        data = _compute(dataset, root, int(image_size), int(cell_size), int(n_words), int(n_colours), int(random_state),
                        progress)
        if cache:
            write_cache(file, {"kind": "structopt localization features", "params": params}, data)
    sizes = data["grids"].prod(axis=1)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    n_words, n_colours = int(n_words), int(n_colours)

    def cells(name: str, i: int, H: int, W: int) -> np.ndarray:
        return data[name][starts[i]:starts[i + 1]].astype(np.float64).reshape(H, W, -1)

    X = [_cell_features(cells("counts", i, H, W), cells("counts2", i, H, W), cells("colours", i, H, W),
                        int(position_bins), int(context), int(colour_context))
         for i, (H, W) in enumerate(data["grids"])]
    y = [tuple(int(v) for v in box) for box in data["boxes"]]
    n_train = int(np.count_nonzero(~held_out_items(len(X), dataset)))  # the first n_train: the split rule
    train_X, test_X = X[:n_train], X[n_train:]
    preprocessing = {"dataset": dataset, "image_size": int(image_size), "cell_size": int(cell_size),
                     "context": int(context), "colour_context": int(colour_context),
                     "position_bins": int(position_bins), "foreground": bool(foreground),
                     **{key: data[key] for key in ("codebook", "codebook2", "colour_codebook")}}
    if foreground:
        as_progress(progress).stage(f"fitting the foreground cell classifier on {count(n_train, 'training image')}")
        train_X, test_X, (coef, intercept) = foreground_features(train_X, y[:n_train], test_X, return_classifier=True)
        preprocessing.update(foreground_coef=coef, foreground_intercept=intercept)
    names = [str(name) for name in data["names"]]
    info = {"dataset": dataset, "path": str(root), "cell_size": int(cell_size), "image_size": int(image_size),
            "n_words": n_words, "n_colours": n_colours, "context": int(context),
            "colour_context": int(colour_context), "position_bins": int(position_bins),
            "foreground": bool(foreground), "train_names": names[:n_train], "test_names": names[n_train:],
            "n_dropped": int(data["n_dropped"]), "cache_file": str(file) if cache else None,
            "preprocessing": preprocessing}
    return {"train": {"X": train_X, "y": y[:n_train]}, "test": {"X": test_X, "y": y[n_train:]},
            "model": BoxModel(train_X[0].shape[2]), "info": info}


def image_path(info: dict[str, Any], name: str) -> Path:
    """Path of image ``name`` of a loaded dataset (for plots)."""
    root = Path(info["path"])
    if info["dataset"] == "horses":
        return root / "gray" / f"{name}.jpg"
    xml_path = root / "annotations" / f"{name}.xml"
    return root / "images" / _xml_text(_parse_xml(xml_path), "filename", xml_path, "annotation/")
