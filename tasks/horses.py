"""Weizmann horses: figure-ground segmentation of 328 grey images, a binary grid task.

Data: ``gray/horseNNN.jpg`` and ``figure_ground/horseNNN.jpg`` (masks stored as JPEG, foreground
where the value exceeds 127), read from a path, ``$STRUCTOPT_DATA/horses`` or
``../shared/data/horses``; nothing is downloaded or cached.

Images are downscaled so that their longer side is ``size`` pixels (default 48, about 36 x 48
pixels for a typical horse): there one min-cut MAP call takes about a millisecond (0.6 ms
with PyMaxflow on the loss-augmented potentials of a trained model). Pixel features are computed with scipy.ndimage /
scikit-image filters on the image resized (anti-aliased) to twice the grid's resolution, then
averaged over 2 x 2 blocks onto the grid:

- a bias, the intensity, Gaussian smoothings (sigma 1, 2, 4), gradient magnitudes (1, 2, 4),
  Laplacians of Gaussian (1, 2, 4), local standard deviations (2, 4), the two Hessian
  eigenvalues (sigma 2) — the filter bank;
- soft histograms of the smoothed intensity (8 Gaussian bins over [0, 1]) — a linear model
  cannot threshold intensity by itself;
- position: row and column in [0, 1], their squares, the squared distance to the centre.

All but the bias are standardised with the training split's mean and deviation. Edge features
are chosen among ``constant`` (1) and ``contrast`` (``exp(-beta (I_p - I_q)^2)`` on the
downscaled smoothed image, with beta the inverse of twice the image's mean squared neighbour
difference: the contrast-sensitive Potts term of Boykov and Jolly). Both are non-negative, so
non-negative pairwise weights keep every edge supermodular (``GridModel.nonnegative_blocks``).
The default is ``contrast`` alone: with ``constant`` too, BCFW's constrained weight for the
constant sits at 0 (it would go negative: boundaries pay at strong edges) and the test IoU after
10 passes is the same to 0.1 point.

Every feature of an image is divided by its number of pixels, so that a joint feature is a
per-pixel average: with the normalised Hamming loss (the fraction of wrong pixels) the
regularisation ``lam`` then means the same for every image size (features summed over ~1,700
pixels would make ``lam`` about 1700^2 times weaker and the dual badly conditioned).

Split (:func:`held_out_images`, :data:`SPLIT_RULE`): images sorted by name; every third one (index 2,
5, 8, ...) is a test image (109 test, 219 training images). ``--n-train N`` trains on the first N
training images; the test images stay the same. The superpixel task uses the same split.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.models.grid import GridInput, GridModel
from structopt.progress import Progress, as_progress, count
from structopt.tasks._data import find_data_dir, read_image

SOURCE = ("the Weizmann Horse Database (Borenstein and Ullman): grey images in gray/ and masks in "
          "figure_ground/, same file names")
DEFAULT_SIZE = 48
N_BINS = 8
FEATURE_NAMES = (
    ["bias", "intensity"] + [f"gauss{s}" for s in (1, 2, 4)] + [f"gradmag{s}" for s in (1, 2, 4)]
    + [f"log{s}" for s in (1, 2, 4)] + [f"localstd{s}" for s in (2, 4)] + ["hessian_max", "hessian_min"]
    + [f"bin{b}" for b in range(N_BINS)] + ["row", "col", "row2", "col2", "centre_dist2"])
EDGE_FEATURE_NAMES = ("constant", "contrast")

#: the horses' train/test split in words (:func:`held_out_images` applies it)
SPLIT_RULE = "images sorted by name; every third one (index 2, 5, 8, ...) is a test image"


def held_out_images(n: int) -> np.ndarray:
    """The split rule: a boolean mask over ``n`` images sorted by name, True for the test images (index
    % 3 == 2). ``load_horses``, the superpixel loader and ``structopt predict`` all select with it."""
    return np.arange(n) % 3 == 2
DEFAULT_EDGE_FEATURES = ("contrast",)


def _filter_bank(image: np.ndarray) -> np.ndarray:
    """(h, w, n) filter responses of a full-resolution grey image in [0, 1] (no position, no bias)."""
    from scipy import ndimage as ndi
    from skimage.feature import hessian_matrix, hessian_matrix_eigvals

    out = [image]
    out += [ndi.gaussian_filter(image, s) for s in (1, 2, 4)]
    out += [ndi.gaussian_gradient_magnitude(image, s) for s in (1, 2, 4)]
    out += [ndi.gaussian_laplace(image, s) for s in (1, 2, 4)]
    for s in (2, 4):
        mean = ndi.gaussian_filter(image, s)
        out.append(np.sqrt(np.maximum(ndi.gaussian_filter(image * image, s) - mean * mean, 0.0)))
    eig = hessian_matrix_eigvals(hessian_matrix(image, sigma=2, order="rc", use_gaussian_derivatives=False))
    out += [eig[0], eig[1]]
    smooth = out[2]
    centres = np.linspace(0.0, 1.0, N_BINS)
    width = 0.5 / (N_BINS - 1)
    out += [np.exp(-0.5 * ((smooth - c) / width) ** 2) for c in centres]
    return np.stack(out, axis=-1)


def _downscale(array: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    from skimage.transform import resize

    return resize(array, shape, order=1, anti_aliasing=True, preserve_range=True, mode="reflect")


def _block_mean(array: np.ndarray) -> np.ndarray:
    # (2H, 2W, ...) -> (H, W, ...) by averaging 2 x 2 blocks
    H, W = array.shape[0] // 2, array.shape[1] // 2
    return array.reshape(H, 2, W, 2, *array.shape[2:]).mean(axis=(1, 3))


def _grid_shape(h: int, w: int, size: int) -> tuple[int, int]:
    factor = size / max(h, w)
    return max(2, round(h * factor)), max(2, round(w * factor))


def _position(H: int, W: int) -> np.ndarray:
    rows, cols = np.meshgrid(np.linspace(0, 1, H), np.linspace(0, 1, W), indexing="ij")
    return np.stack([rows, cols, rows**2, cols**2, (rows - 0.5) ** 2 + (cols - 0.5) ** 2], axis=-1)


def _edge_features(small: np.ndarray, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    dh = np.diff(small, axis=1) ** 2
    dv = np.diff(small, axis=0) ** 2
    mean = (dh.sum() + dv.sum()) / max(dh.size + dv.size, 1)
    beta = 1.0 / (2.0 * mean) if mean > 0 else 0.0

    def feats(diff: np.ndarray) -> np.ndarray:
        table = {"constant": np.ones_like(diff), "contrast": np.exp(-beta * diff)}
        return np.stack([table[name] for name in names], axis=-1)

    return feats(dh), feats(dv)


def load_image(gray_path: Path, mask_path: Path, size: int = DEFAULT_SIZE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw (not standardised) pixel features (H, W, F-1 without bias), mask (H, W) and the small image.

    Raises
    ------
    InvalidInputError
        An image cannot be decoded (``cannot read image FILE: reason``), or image and mask differ
        in size (naming both files).
    """
    image = read_image(gray_path, "L").astype(np.float64) / 255.0
    mask = read_image(mask_path, "L") > 127
    if image.shape != mask.shape:
        raise InvalidInputError(f"{gray_path}: image is {image.shape[1]}x{image.shape[0]} pixels but its mask "
                                f"{mask_path} is {mask.shape[1]}x{mask.shape[0]}")
    feats = _raw_features(image, size)
    small_mask = _downscale(mask.astype(np.float64), feats.shape[:2]) > 0.5
    return feats, small_mask.astype(np.int64), feats[..., 1]  # gauss1 as the smoothed small image


def _raw_features(image: np.ndarray, size: int) -> np.ndarray:
    """(H, W, F-1) raw pixel features of a grey image in [0, 1] on its ``size`` grid (no bias, not standardised)."""
    H, W = _grid_shape(*image.shape, size)
    feats = _block_mean(_filter_bank(_downscale(image, (2 * H, 2 * W))))
    return np.concatenate([feats, _position(H, W)], axis=-1)


def grid_input(feats: np.ndarray, small: np.ndarray, mean: np.ndarray, std: np.ndarray,
               edge_features: tuple[str, ...]) -> GridInput:
    """The model input of one image: bias and standardised raw features, edge features, all per pixel."""
    hor, ver = _edge_features(small, tuple(edge_features))
    pixels = np.concatenate([np.ones((*feats.shape[:2], 1)), (feats - mean) / std], axis=-1)
    n_pixels = feats.shape[0] * feats.shape[1]
    return GridInput(pixels / n_pixels, hor / n_pixels, ver / n_pixels)


def image_input(gray_path: Path, preprocessing: dict[str, Any]) -> tuple[GridInput, tuple[int, int]]:
    """The model input of a new grey image with a trained model's preprocessing (``size``,
    ``edge_features``, the training ``mean`` and ``std``), and the image's own (height, width).

    Raises
    ------
    DataNotFoundError, InvalidInputError
        The image is missing or cannot be decoded (naming the file).
    """
    image = read_image(gray_path, "L").astype(np.float64) / 255.0
    feats = _raw_features(image, int(preprocessing["size"]))
    x = grid_input(feats, feats[..., 1], preprocessing["mean"], preprocessing["std"],
                   tuple(preprocessing["edge_features"]))
    return x, image.shape


def gold_mask(mask_path: Path, grid: tuple[int, int], image_shape: tuple[int, int]) -> np.ndarray:
    """A figure-ground mask (> 127) on the model's grid, as training reads it; its size must be the image's."""
    mask = read_image(mask_path, "L") > 127
    if mask.shape != tuple(image_shape):
        raise InvalidInputError(f"{mask_path}: mask is {mask.shape[1]}x{mask.shape[0]} pixels but its image is "
                                f"{image_shape[1]}x{image_shape[0]}")
    return (_downscale(mask.astype(np.float64), grid) > 0.5).astype(np.int64)


def write_mask(path: Path, mask: np.ndarray, image_shape: tuple[int, int]) -> None:
    """A predicted grid mask as a PNG at the image's own size (nearest neighbour; 255 = foreground)."""
    from PIL import Image

    rows = (np.arange(image_shape[0]) * mask.shape[0]) // image_shape[0]
    cols = (np.arange(image_shape[1]) * mask.shape[1]) // image_shape[1]
    full = (np.asarray(mask)[rows][:, cols] > 0).astype(np.uint8) * 255
    Image.fromarray(full, mode="L").save(path, format="PNG")


def resolve_data_dir(path: str | os.PathLike | None = None) -> Path:
    """The horses directory: ``path``, ``$STRUCTOPT_DATA/horses`` or ``../shared/data/horses`` (see
    :func:`~structopt.tasks._data.find_data_dir`), holding ``gray/`` and ``figure_ground/``."""
    return find_data_dir("horses", path, required=["gray", "figure_ground"], source=SOURCE)


def paired_names(root: Path) -> list[str]:
    """Sorted names of the ``gray/*.jpg`` images of ``root``, each with a mask of the same name in ``figure_ground/``.

    Raises
    ------
    DataNotFoundError
        An image has no mask, or a mask no image (naming the first few files): a missing
        companion is a broken copy of the data, not an image to skip silently.
    """
    gray = {p.name for p in (root / "gray").glob("*.jpg")}
    masks = {p.name for p in (root / "figure_ground").glob("*.jpg")}
    for have, lack in (("gray", "figure_ground"), ("figure_ground", "gray")):
        orphans = sorted((gray - masks) if have == "gray" else (masks - gray))
        if orphans:
            what = "image" if have == "gray" else "mask"
            shown = ", ".join(str(root / have / name) for name in orphans[:3])
            more = f" and {len(orphans) - 3} more" if len(orphans) > 3 else ""
            raise DataNotFoundError(f"horses: {len(orphans)} {what}(s) without a file of the same name in "
                                    f"{root / lack}: {shown}{more}")
    if not gray:
        raise DataNotFoundError(f"horses: no image in {root / 'gray'} (expected gray/*.jpg and figure_ground/*.jpg)")
    return sorted(gray)


def load_horses(path: str | os.PathLike | None = None, size: int = DEFAULT_SIZE, max_images: int | None = None,
                edge_features: tuple[str, ...] = DEFAULT_EDGE_FEATURES, progress: bool | Progress = False
                ) -> dict[str, Any]:
    """Load the Weizmann horses as a grid segmentation task.

    Parameters
    ----------
    path : path, optional
        Directory with ``gray/`` and ``figure_ground/`` (default: see the module docstring).
    size : int
        Longer side of the downscaled grids.
    max_images : int, optional
        Use only the first images (sorted by name) — for quick tests; the split rule is unchanged.
    edge_features : tuple of str
        Names among :data:`EDGE_FEATURE_NAMES` (see the module docstring).
    progress : bool or Progress
        Say on stderr what is computed (a bar over the images; :mod:`~structopt.progress`).

    Returns
    -------
    dict
        ``train`` and ``test``: ``{"X": list of GridInput, "y": list of (H, W) int64 masks}``;
        ``model``: :class:`GridModel` with the contrast-sensitive Potts edges; ``unary_model``: the
        same features without pairwise terms; ``info``: names, sizes, split, feature names.

    Raises
    ------
    DataNotFoundError
        The directory, an image's mask or a mask's image is missing.
    InvalidInputError
        Bad options; an image that cannot be decoded or whose mask differs in size (naming the files).
    """
    edge_features = tuple(edge_features)
    unknown = [name for name in edge_features if name not in EDGE_FEATURE_NAMES]
    if unknown or not edge_features:
        raise InvalidInputError(f"edge_features must be a non-empty subset of {EDGE_FEATURE_NAMES}, "
                                f"got {edge_features}")
    root = resolve_data_dir(path)
    names = paired_names(root)
    if max_images is not None:
        names = names[: int(max_images)]
    if int(size) < 2:
        raise InvalidInputError(f"size must be >= 2 pixels, got {size}")
    raw, masks = [], []
    report = as_progress(progress)
    report.stage(f"computing pixel features of {count(len(names), 'image')}")
    for name in report.items(names, len(names), "pixel features", "images"):
        feats, mask, _ = load_image(root / "gray" / name, root / "figure_ground" / name, int(size))
        raw.append(feats)
        masks.append(mask)
    is_test = held_out_images(len(names))
    train_pixels = np.concatenate([raw[i].reshape(-1, raw[i].shape[-1]) for i in np.flatnonzero(~is_test)])
    mean, std = train_pixels.mean(axis=0), train_pixels.std(axis=0)
    std[std == 0] = 1.0
    X = [grid_input(feats, feats[..., 1], mean, std, edge_features) for feats in raw]
    F = X[0].pixels.shape[-1]

    def pick(mask: np.ndarray) -> dict[str, list]:
        index = np.flatnonzero(mask)
        return {"X": [X[i] for i in index], "y": [masks[i] for i in index], "names": [names[i] for i in index]}

    return {"train": pick(~is_test), "test": pick(is_test),
            "model": GridModel(F, len(edge_features)),
            "unary_model": GridModel(F, len(edge_features), pairwise=False),
            "info": {"root": str(root), "size": int(size), "n_images": len(names),
                     "feature_names": list(FEATURE_NAMES), "edge_feature_names": list(edge_features),
                     "mean": mean, "std": std,
                     "split": SPLIT_RULE}}


def _image_counts(i: int, y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
    a, b = np.asarray(y_true) == 1, np.asarray(y_pred) == 1
    if a.shape != b.shape:
        raise InvalidInputError(f"example {i}: true mask {a.shape} and prediction {b.shape} differ in shape")
    tp, fp, fn = np.count_nonzero(a & b), np.count_nonzero(~a & b), np.count_nonzero(a & ~b)
    return np.array([tp, fp, fn, a.size - tp - fp - fn], dtype=np.int64)


def pixel_counts(y_true: Sequence[np.ndarray], y_pred: Sequence[np.ndarray]) -> np.ndarray:
    """Foreground (label 1) ``[true positives, false positives, false negatives, true negatives]`` pooled over
    all pixels of all images; :func:`count_metrics` turns counts (summed over folds, say) into scores."""
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true masks but {len(y_pred)} predictions")
    out = np.zeros(4, dtype=np.int64)
    for i, (a, b) in enumerate(zip(y_true, y_pred)):
        out += _image_counts(i, a, b)
    return out


def count_metrics(counts: np.ndarray) -> dict[str, float]:
    """Pixel accuracy, foreground IoU, precision and recall of :func:`pixel_counts`' counts."""
    tp, fp, fn, tn = (int(v) for v in counts)
    return {"pixel_accuracy": (tp + tn) / max(tp + fp + fn + tn, 1), "foreground_iou": tp / max(tp + fp + fn, 1),
            "precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1)}


def segmentation_scores(y_true: Sequence[np.ndarray], y_pred: Sequence[np.ndarray]) -> dict[str, float]:
    """Pixel accuracy and foreground IoU, pooled over all pixels of all images, and the mean per-image IoU."""
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true masks but {len(y_pred)} predictions")
    per_image = [_image_counts(i, a, b) for i, (a, b) in enumerate(zip(y_true, y_pred))]
    pooled = count_metrics(np.sum(per_image, axis=0) if per_image else np.zeros(4, dtype=np.int64))
    ious = [tp / (tp + fp + fn) if tp + fp + fn else 1.0 for tp, fp, fn, _ in per_image]
    return {"pixel_accuracy": pooled["pixel_accuracy"], "foreground_iou": pooled["foreground_iou"],
            "mean_image_iou": float(np.mean(ious)) if ious else 0.0}
