"""Localization (one box per image) from a user's folder of images and a CSV of boxes or Pascal VOC XML files.

Boxes come from either

- a CSV file with a header naming (at least) the columns ``image,x_min,y_min,x_max,y_max``: one row
  per image, ``image`` a file name relative to the images folder, coordinates in pixels from the
  top-left corner, ``x_max`` and ``y_max`` exclusive (the box covers columns ``x_min .. x_max - 1``),
  fractional values rounded; or
- a folder of Pascal VOC XML files (``<filename>``, ``<size>``, ``<object><bndbox>``, 1-based
  inclusive coordinates; read by :func:`structopt.tasks.localization.voc_box`, whose rules apply).

The model predicts exactly one box per image: an image with several boxes is refused, as is an
image without a box, a box without an image, a box with no width or height or reaching outside its
image. Errors name the file and, for the CSV, the line.

Features are :mod:`structopt.tasks.localization`'s cell features (HOG and colour words with
codebooks fitted on the training images, context, position, the cross-fitted foreground score);
the loss is the box loss (1 - IoU); metrics are the detection rate (IoU >= 0.5) and the mean IoU.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.tasks import _bow
from structopt.tasks._data import image_shape, read_text_lines
from structopt.tasks.localization import (
    _cell_features,
    _check_size,
    _image_counts,
    _image_descriptors,
    _read_grey,
    cell_box,
    detection_rate,
    foreground_features,
    mean_box_prior,
    mean_iou,
    rescale_box,
    voc_annotation,
)
from structopt.tasks.own_common import (
    BuiltTask,
    CommonOptions,
    data_split,
    existing_dir,
    existing_file,
    first,
    holdout,
    holdout_rule,
    image_files,
    non_negative_int,
    option,
    orphans_message,
    positive_int,
    resolve_lam,
)

CSV_COLUMNS = ("image", "x_min", "y_min", "x_max", "y_max")

#: one item per image: name, image path and pixel box (half-open, 0-based: top, left, bottom, right)
Item = tuple[str, Path, tuple[int, int, int, int]]


def _unlisted(images: Path, listed: set[Path], source: Path) -> None:
    on_disk = {p.resolve() for p in image_files(images).values()}
    missing = [p.name for p in on_disk - listed]
    if missing:
        raise InvalidInputError(orphans_message(missing, "image(s) without a box", images) + f" (none in {source})")


def read_csv_boxes(path: str | os.PathLike, images: str | os.PathLike) -> list[Item]:
    """Items of a boxes CSV (see the module docstring), in file order.

    Raises
    ------
    DataNotFoundError
        The CSV file, the images folder or an image named in the CSV does not exist.
    InvalidInputError
        ``FILE:LINE: problem``: empty file, a header without the required columns, a row with
        another number of fields, a coordinate that is not a finite number, an empty box, a box
        outside its image, a second box for one image; or an image of the folder without a box.
    """
    path, images = existing_file(path, "boxes CSV"), existing_dir(images, "images")
    lines = read_text_lines(path)
    numbered = [(k, line) for k, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise InvalidInputError(f"{path}: empty file (expected the header {','.join(CSV_COLUMNS)})")
    try:
        rows = [(k, next(csv.reader([line]))) for k, line in numbered]
    except csv.Error as error:
        raise InvalidInputError(f"{path}: malformed CSV ({error})") from None
    head_line, header = rows[0]
    header = [name.strip().lower() for name in header]
    header[0] = header[0].removeprefix("\ufeff")  # a byte-order mark some spreadsheet programs write
    absent = [name for name in CSV_COLUMNS if name not in header]
    if absent:
        raise InvalidInputError(f"{path}:{head_line}: the header must name the columns {','.join(CSV_COLUMNS)} "
                                f"(missing {', '.join(absent)}; found {','.join(header)})")
    where = {name: header.index(name) for name in CSV_COLUMNS}
    items: list[Item] = []
    seen: dict[Path, int] = {}
    for k, fields in rows[1:]:
        if len(fields) != len(header):
            raise InvalidInputError(f"{path}:{k}: expected {len(header)} fields (as the header), found {len(fields)}")
        coords = {}
        for name in CSV_COLUMNS[1:]:
            text = fields[where[name]].strip()
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise InvalidInputError(f"{path}:{k}: {name} must be a finite number, got {text!r}")
            coords[name] = round(value)
        name = fields[where["image"]].strip()
        image = images / name
        if not name or not image.is_file():
            raise DataNotFoundError(f"{path}:{k}: image {name!r} not found in {images}")
        key = image.resolve()
        if key in seen:
            raise InvalidInputError(f"{path}:{k}: a second box for {name} (the first is on line {seen[key]}); the "
                                    "model predicts exactly one box per image")
        seen[key] = k
        x0, y0, x1, y1 = coords["x_min"], coords["y_min"], coords["x_max"], coords["y_max"]
        shown = f"(x_min {x0}, y_min {y0}, x_max {x1}, y_max {y1})"
        if x1 <= x0 or y1 <= y0:
            raise InvalidInputError(f"{path}:{k}: box {shown} has zero or negative width or height")
        h, w = image_shape(image)
        if x0 < 0 or y0 < 0 or x1 > w or y1 > h:
            raise InvalidInputError(f"{path}:{k}: box {shown} reaches outside the {w}x{h} image {name} (pixels from "
                                    f"0; x_max <= width and y_max <= height)")
        items.append((Path(name).stem, image, (y0, x0, y1, x1)))
    if not items:
        raise InvalidInputError(f"{path}: a header but no box")
    _unlisted(images, set(seen), path)
    return items


def read_voc_boxes(annotations: str | os.PathLike, images: str | os.PathLike) -> list[Item]:
    """Items of a folder of Pascal VOC XML files (one per image), sorted by file name.

    Raises
    ------
    DataNotFoundError
        A folder, or the image an XML file names, does not exist.
    InvalidInputError
        Naming the XML file: malformed XML (with its line and column), a missing element, a size
        that differs from the image's, a box outside the image, not exactly one object; or an image
        without an XML file.
    """
    annotations, images = existing_dir(annotations, "annotations"), existing_dir(images, "images")
    files = sorted(annotations.glob("*.xml"))
    if not files:
        raise InvalidInputError(f"{annotations}: no .xml annotation files")
    items: list[Item] = []
    listed: set[Path] = set()
    for xml_path in files:
        image, size, boxes = voc_annotation(xml_path, images)
        if len(boxes) != 1:
            raise InvalidInputError(f"{xml_path}: {len(boxes)} objects; the model predicts exactly one box per image")
        _check_size(image, size, xml_path)
        if image.resolve() in listed:
            raise InvalidInputError(f"{xml_path}: a second annotation for {image.name}")
        listed.add(image.resolve())
        items.append((xml_path.stem, image, boxes[0]))
    _unlisted(images, listed, annotations)
    return items


@dataclass(kw_only=True)
class BoxesOptions(CommonOptions):
    """Options of the ``boxes`` kind (see the module docstring)."""

    DEFAULT_LAM: ClassVar[float] = 0.01

    images: str | None = option("--images", "folder of training images (required)", None, metavar="DIR")
    boxes: str | None = option("--boxes", "CSV of boxes (header image,x_min,y_min,x_max,y_max); or --annotations",
                               None, metavar="FILE")
    annotations: str | None = option("--annotations", "folder of Pascal VOC XML files; or --boxes", None,
                                     metavar="DIR")
    test_images: str | None = option("--test-images", "folder of test images (default: hold out --test-fraction)",
                                     None, metavar="DIR")
    test_boxes: str | None = option("--test-boxes", "CSV of the test boxes", None, metavar="FILE")
    test_annotations: str | None = option("--test-annotations", "VOC XML folder of the test boxes", None,
                                          metavar="DIR")
    image_size: int = option("--image-size", "longer image side after rescaling, in pixels (default 192)", 192,
                             type=positive_int)
    cell_size: int = option("--cell-size", "cell side in pixels, even, >= 4 (default 8)", 8, type=positive_int)
    n_words: int = option("--n-words", "size of each HOG codebook (default 100)", 100, type=positive_int)
    n_colours: int = option("--n-colours", "size of the colour codebook, >= 2 (default 32)", 32, type=positive_int)
    context: int = option("--context", "side in cells of the HOG context window (default 5)", 5, type=positive_int)
    colour_context: int = option("--colour-context", "side in cells of the colour context window (default 9)", 9,
                                 type=positive_int)
    position_bins: int = option("--position-bins", "row and column bands of the position features (default 12)",
                                12, type=non_negative_int)
    foreground: bool = option("--no-foreground", "leave out the cross-fitted foreground score", True,
                              action="store_false")


def _items(options: BoxesOptions, images: str | None, boxes: str | None, annotations: str | None,
           prefix: str) -> list[Item]:
    if images is None:
        raise InvalidInputError(f"boxes: --{prefix}images DIR is required")
    if (boxes is None) == (annotations is None):
        raise InvalidInputError(f"boxes: give exactly one of --{prefix}boxes FILE and --{prefix}annotations DIR")
    return read_csv_boxes(boxes, images) if boxes is not None else read_voc_boxes(annotations, images)


def _check(options: BoxesOptions) -> None:
    if options.cell_size < 4 or options.cell_size % 2:
        raise InvalidInputError(f"cell_size must be an even integer >= 4, got {options.cell_size}")
    if options.image_size < 4 * options.cell_size:
        raise InvalidInputError(f"image_size {options.image_size} is too small for cells of {options.cell_size} "
                                "pixels (at least 4 cells)")
    if options.n_words < 2 or options.n_colours < 2:
        raise InvalidInputError(f"n_words and n_colours must be >= 2, got {options.n_words} and {options.n_colours}")


def load_localization(options: BoxesOptions) -> dict:
    """Read the boxes and images and compute the cell features:
    ``{"train", "test": {"X", "y", "names"}, "model", "info"}`` (X (H, W, F) arrays, y cell boxes).

    The k-means and logistic fits run on one thread: on small arrays, thread pools cost far more
    than they give (the codebooks of eight small images took 12 s on a loaded 2-core machine, under
    0.3 s on one thread).
    """
    import importlib

    from threadpoolctl import threadpool_limits

    for name in ("sklearn.cluster", "sklearn.linear_model"):  # threadpoolctl limits only libraries already loaded
        importlib.import_module(name)
    with threadpool_limits(limits=1):
        return _load_localization(options)


def _load_localization(options: BoxesOptions) -> dict:
    from structopt.models.box import BoxModel

    _check(options)
    items = _items(options, options.images, options.boxes, options.annotations, "")
    test_given = any(v is not None for v in (options.test_images, options.test_boxes, options.test_annotations))
    if test_given:
        test_items = _items(options, options.test_images, options.test_boxes, options.test_annotations, "test-")
        train_index, test_index = np.arange(len(items)), np.arange(len(items), len(items) + len(test_items))
        items = items + test_items
        split = {"rule": f"train on the images of {options.images}, test on those of {options.test_images}",
                 "test": _box_source(options.test_images, options.test_boxes, options.test_annotations)}
    else:
        train_index, test_index = holdout(len(items), options.test_fraction, options.seed, str(options.images))
        split = {"rule": holdout_rule(options.test_fraction, options.seed, len(items), "images"),
                 "test_fraction": float(options.test_fraction), "seed": int(options.seed)}
    train_index = np.asarray(first(list(train_index), options.n_train), dtype=np.int64)
    order = np.concatenate([train_index, test_index])
    cell, n_train = options.cell_size, len(train_index)
    rng = np.random.default_rng(options.seed)
    described, boxes, samples = [], [], []
    for i in order.tolist():
        _, path, pixel_box = items[i]
        original = _read_grey(path).shape
        d = _image_descriptors(path, options.image_size, cell)
        boxes.append(cell_box(rescale_box(pixel_box, original, d.pop("image").shape), d["grid"], cell))
        described.append(d)
        samples.append(d["lab"][rng.choice(len(d["lab"]), min(len(d["lab"]), 500), replace=False)])
    train_d = described[:n_train]
    codebooks = {"codebook": _bow.fit_codebook([d["desc"] for d in train_d], options.n_words, options.seed),
                 "codebook2": _bow.fit_codebook([d["desc2"] for d in train_d], options.n_words, options.seed),
                 "colour_codebook": _bow.fit_codebook(samples[:n_train], options.n_colours, options.seed)}
    X = []
    for d in described:
        H, W = d["grid"]
        counts = _image_counts(d, codebooks, cell)  # float32, as the localization task's cache (and predict) has them
        X.append(_cell_features(*(counts[key].astype(np.float64).reshape(H, W, -1)
                                  for key in ("counts", "counts2", "colours")),
                                options.position_bins, options.context, options.colour_context))
    train_X, test_X = X[:n_train], X[n_train:]
    preprocessing = {"image_size": int(options.image_size), "cell_size": cell, "context": int(options.context),
                     "colour_context": int(options.colour_context), "position_bins": int(options.position_bins),
                     "foreground": bool(options.foreground), **codebooks}
    if options.foreground:
        if n_train < 3:
            raise InvalidInputError(f"boxes: the foreground score needs at least 3 training images, got {n_train} "
                                    "(pass --no-foreground)")
        train_X, test_X, (coef, intercept) = foreground_features(train_X, boxes[:n_train], test_X,
                                                                 return_classifier=True)
        preprocessing.update(foreground_coef=coef, foreground_intercept=intercept)
    names = [items[i][0] for i in order.tolist()]
    return {"train": {"X": train_X, "y": boxes[:n_train], "names": names[:n_train]},
            "test": {"X": test_X, "y": boxes[n_train:], "names": names[n_train:]},
            "model": BoxModel(train_X[0].shape[2]),
            "info": {"cell_size": cell, "image_size": options.image_size,
                     "images": {"train": n_train, "test": len(test_X)}, "preprocessing": preprocessing,
                     "split": {**split, "train": _box_source(options.images, options.boxes, options.annotations)}}}


def build_localization(options: BoxesOptions) -> BuiltTask:
    """The ``boxes`` task: a box problem with the box loss; test detection rate and mean IoU (and the
    mean-box prior's, the baseline that ignores the image). Preprocessing: the feature options, the
    three codebooks (``codebook``, ``codebook2``, ``colour_codebook``) and the foreground classifier
    (``foreground_coef``, ``foreground_intercept``), the layout of the localization task's."""
    from structopt.losses import BoxLoss
    from structopt.problem import SSVMProblem

    data = load_localization(options)
    X, Y, test = data["train"]["X"], data["train"]["y"], data["test"]
    problem = SSVMProblem(data["model"], X, Y, BoxLoss(), resolve_lam(options.lam, len(X), options.DEFAULT_LAM))
    prior = mean_box_prior(Y, [x.shape[:2] for x in X], [x.shape[:2] for x in test["X"]])

    def evaluate(w: np.ndarray) -> dict[str, float]:
        predicted = problem.predict(test["X"], w)
        return {"test_detection_rate": detection_rate(test["y"], predicted),
                "test_mean_iou": mean_iou(test["y"], predicted),
                "prior_detection_rate": detection_rate(test["y"], prior), "prior_mean_iou": mean_iou(test["y"], prior)}

    record = data_split(options.images, n_train=problem.n, n_test=len(test["X"]), **data["info"]["split"])
    return BuiltTask(problem, evaluate, f"localization of {Path(str(options.images)).name}",
                     {**data["info"]["preprocessing"], "data_split": record})


def _box_source(images: str | None, boxes: str | None, annotations: str | None) -> dict[str, str | None]:
    """Where a split's images and boxes were read (resolved), to read them again (:func:`box_items`)."""
    return {"images": str(Path(str(images)).resolve()),
            "boxes": None if boxes is None else str(Path(boxes).resolve()),
            "annotations": None if annotations is None else str(Path(annotations).resolve())}


def box_items(source: dict[str, str | None]) -> list[Item]:
    """The images of a recorded :func:`_box_source` with their gold pixel boxes, as training read them."""
    if source.get("boxes"):
        return read_csv_boxes(source["boxes"], source["images"])
    return read_voc_boxes(source["annotations"], source["images"])


__all__ = ["CSV_COLUMNS", "BoxesOptions", "box_items", "build_localization", "load_localization", "read_csv_boxes",
           "read_voc_boxes"]
