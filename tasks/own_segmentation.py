"""Binary segmentation from a user's folder of images and folder of masks, featurised as the horses task.

Images and masks are matched by file stem (``cat.jpg`` with ``cat.png``); an image without a mask
or a mask without an image is refused, naming them. A mask must have its image's size and be
binary: values ``{0, 1}`` or ``{0, 255}`` (a grey mask with other values, such as a JPEG one, needs
``mask_threshold``: foreground where the value exceeds it). Colour images are read as grey.

Features are :mod:`structopt.tasks.horses`'s: the filter bank, intensity histograms and position
on the image downscaled to a grid whose longer side is ``size`` cells, standardised with the
training images' mean and deviation, the contrast-sensitive Potts edges, every feature divided by
the image's number of pixels; the loss is the normalised Hamming loss.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from structopt.errors import InvalidInputError
from structopt.tasks._data import read_image
from structopt.tasks.horses import (
    DEFAULT_EDGE_FEATURES,
    DEFAULT_SIZE,
    EDGE_FEATURE_NAMES,
    _downscale,
    _raw_features,
    grid_input,
    segmentation_scores,
)
from structopt.tasks.own_common import (
    BuiltTask,
    CommonOptions,
    both_or_neither,
    data_split,
    existing_dir,
    first,
    holdout,
    holdout_rule,
    image_files,
    names,
    non_negative,
    option,
    orphans_message,
    positive_int,
    resolve_lam,
)


def paired_files(images: str | os.PathLike, masks: str | os.PathLike) -> list[tuple[str, Path, Path]]:
    """``(stem, image, mask)`` for every image of ``images``, sorted by stem.

    Raises
    ------
    DataNotFoundError
        A folder does not exist.
    InvalidInputError
        A folder has no image file, two files share a stem, an image has no mask or a mask no image.
    """
    images, masks = existing_dir(images, "images"), existing_dir(masks, "masks")
    by_image, by_mask = image_files(images), image_files(masks)
    for have, lack, what, where in ((by_image, by_mask, "image(s) without a mask", masks),
                                    (by_mask, by_image, "mask(s) without an image", images)):
        missing = [have[stem].name for stem in set(have) - set(lack)]
        if missing:
            raise InvalidInputError(orphans_message(missing, what, where) + " (matched by file stem)")
    return [(stem, by_image[stem], by_mask[stem]) for stem in sorted(by_image)]


def gold_on_grid(path: Path, threshold: float | None, grid: tuple[int, int],
                 image_shape: tuple[int, int]) -> np.ndarray:
    """A gold mask file on the model's ``grid``, read as training reads masks (:func:`read_mask`); its
    size must be its image's ``image_shape`` (height, width)."""
    mask = read_mask(path, threshold)
    if mask.shape != tuple(image_shape):
        raise InvalidInputError(f"{path}: mask is {mask.shape[1]}x{mask.shape[0]} pixels but its image is "
                                f"{image_shape[1]}x{image_shape[0]}")
    return (_downscale(mask.astype(np.float64), grid) > 0.5).astype(np.int64)


def read_mask(path: Path, threshold: float | None = None) -> np.ndarray:
    """A mask file as a boolean array (see the module docstring for the accepted values).

    Raises
    ------
    InvalidInputError
        ``FILE: ...`` for a colour mask or values that are not binary (without ``threshold``).
    """
    mask = read_image(path)
    if mask.ndim == 3:
        channels = mask[..., :3] if mask.shape[2] >= 3 else mask[..., :1]
        if np.any(channels != channels[..., :1]):
            raise InvalidInputError(f"{path}: a colour mask; masks must be grey (0/1 or 0/255)")
        mask = channels[..., 0]
    if mask.dtype == bool:
        return mask
    if threshold is not None:
        return mask > threshold
    values = np.unique(mask)
    if np.all(np.isin(values, (0, 1))):
        return mask == 1
    if np.all(np.isin(values, (0, 255))):
        return mask == 255
    shown = ", ".join(f"{v:g}" for v in values[:6]) + (", ..." if values.size > 6 else "")
    raise InvalidInputError(f"{path}: mask values {{{shown}}} are neither 0/1 nor 0/255; pass --mask-threshold T "
                            "to take value > T as foreground")


def image_features(image_path: Path, mask_path: Path, size: int,
                   threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw pixel features (H, W, F-1: not standardised, no bias) and the mask on the grid, (H, W) int64.

    Raises
    ------
    InvalidInputError
        Image and mask differ in size (naming both), or as :func:`read_mask` and ``read_image``.
    """
    image = read_image(image_path, "L").astype(np.float64) / 255.0
    mask = read_mask(mask_path, threshold)
    if image.shape != mask.shape:
        raise InvalidInputError(f"{mask_path}: mask is {mask.shape[1]}x{mask.shape[0]} pixels but its image "
                                f"{image_path} is {image.shape[1]}x{image.shape[0]}")
    feats = _raw_features(image, size)
    small_mask = _downscale(mask.astype(np.float64), feats.shape[:2]) > 0.5
    return feats, small_mask.astype(np.int64)


@dataclass(kw_only=True)
class SegmentationOptions(CommonOptions):
    """Options of the ``segmentation`` kind (see the module docstring)."""

    #: as the horses task (``benchmarks/horses.py``)
    DEFAULT_LAM: ClassVar[float] = 0.001

    images: str | None = option("--images", "folder of training images (required)", None, metavar="DIR")
    masks: str | None = option("--masks", "folder of their masks, matched by file stem (required)", None,
                               metavar="DIR")
    test_images: str | None = option("--test-images", "folder of test images (default: hold out --test-fraction)",
                                     None, metavar="DIR")
    test_masks: str | None = option("--test-masks", "folder of the test masks", None, metavar="DIR")
    size: int = option("--size", f"longer side of the grids in cells (default {DEFAULT_SIZE})", DEFAULT_SIZE,
                       type=positive_int)
    mask_threshold: float | None = option("--mask-threshold", "foreground where a mask value exceeds T (default: "
                                          "masks must be 0/1 or 0/255)", None, type=non_negative, metavar="T")
    edge_features: tuple[str, ...] = option("--edge-features", "comma-separated among constant, contrast (default "
                                            "contrast)", DEFAULT_EDGE_FEATURES, type=names, metavar="NAMES")


def load_segmentation(options: SegmentationOptions) -> dict:
    """Read and featurise the folders: ``{"train", "test": {"X", "y", "names"}, "model", "info"}``."""
    from structopt.models.grid import GridModel

    edge_features = tuple(options.edge_features)
    if not edge_features or any(name not in EDGE_FEATURE_NAMES for name in edge_features):
        raise InvalidInputError(f"edge_features must be a non-empty subset of {EDGE_FEATURE_NAMES}, "
                                f"got {edge_features}")
    if options.size < 2:
        raise InvalidInputError(f"size must be >= 2 cells, got {options.size}")
    if options.images is None or options.masks is None:
        raise InvalidInputError("segmentation: --images DIR and --masks DIR are required")
    pairs = paired_files(options.images, options.masks)
    if both_or_neither(options, ("test_images", "test_masks"), "segmentation"):
        test_pairs = paired_files(options.test_images, options.test_masks)
        train_index, test_index = np.arange(len(pairs)), np.arange(len(pairs), len(pairs) + len(test_pairs))
        pairs = pairs + test_pairs
        split = {"rule": f"train on the images of {options.images}, test on those of {options.test_images}",
                 "test": str(Path(options.test_images).resolve()),
                 "test_masks": str(Path(options.test_masks).resolve())}
    else:
        train_index, test_index = holdout(len(pairs), options.test_fraction, options.seed, str(options.images))
        split = {"rule": holdout_rule(options.test_fraction, options.seed, len(pairs), "images"),
                 "test_fraction": float(options.test_fraction), "seed": int(options.seed)}
    train_index = np.asarray(first(list(train_index), options.n_train), dtype=np.int64)
    loaded = {i: image_features(pairs[i][1], pairs[i][2], options.size, options.mask_threshold)
              for i in np.concatenate([train_index, test_index]).tolist()}
    train_pixels = np.concatenate([loaded[i][0].reshape(-1, loaded[i][0].shape[-1]) for i in train_index])
    mean, std = train_pixels.mean(axis=0), train_pixels.std(axis=0)
    std[std == 0] = 1.0  # a constant feature (e.g. a flat image set) stays constant
    # the smoothed image (gauss1) gives the contrast edges, as for the horses
    X = {i: grid_input(feats, feats[..., 1], mean, std, edge_features) for i, (feats, _) in loaded.items()}

    def pick(index: np.ndarray) -> dict[str, list]:
        return {"X": [X[i] for i in index], "y": [loaded[i][1] for i in index], "names": [pairs[i][0] for i in index]}

    F = X[int(train_index[0])].pixels.shape[-1]
    return {"train": pick(train_index), "test": pick(test_index), "model": GridModel(F, len(edge_features)),
            "info": {"size": int(options.size), "edge_feature_names": list(edge_features), "mean": mean, "std": std,
                     "mask_threshold": options.mask_threshold,
                     "images": {"train": len(train_index), "test": len(test_index)}, "split": split}}


def build_segmentation(options: SegmentationOptions) -> BuiltTask:
    """The ``segmentation`` task: a grid problem with the normalised Hamming loss; test pixel accuracy and
    IoU. Preprocessing: the grid size, the edge features, the training pixels' mean and deviation (the
    keys :func:`structopt.tasks.horses.image_input` reads to featurise a new image)."""
    from structopt.losses import Hamming
    from structopt.problem import SSVMProblem

    data = load_segmentation(options)
    X, Y = data["train"]["X"], data["train"]["y"]
    lam = resolve_lam(options.lam, len(X), options.DEFAULT_LAM)
    problem = SSVMProblem(data["model"], X, Y, Hamming(normalize=True), lam)
    test = data["test"]

    def evaluate(w: np.ndarray) -> dict[str, float]:
        scores = segmentation_scores(test["y"], problem.predict(test["X"], w))
        return {f"test_{name}": value for name, value in scores.items()}

    info = data["info"]
    record = data_split(options.images, n_train=problem.n, n_test=len(test["X"]),
                        masks=str(Path(options.masks).resolve()), **info["split"])
    preprocessing = {"size": info["size"], "edge_features": info["edge_feature_names"], "mean": info["mean"],
                     "std": info["std"], "mask_threshold": info["mask_threshold"], "data_split": record}
    return BuiltTask(problem, evaluate, f"segmentation of {Path(str(options.images)).name}", preprocessing)


__all__ = ["SegmentationOptions", "build_segmentation", "gold_on_grid", "image_features", "load_segmentation",
           "paired_files",
           "read_mask"]
