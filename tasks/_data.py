"""Locating a task's data directory (nothing is ever downloaded) and reading its files with errors that name them."""

from __future__ import annotations

import codecs
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from structopt.archive import read_archive, write_archive
from structopt.errors import DataNotFoundError, InvalidInputError, OutputError, StructoptError


def find_data_dir(corpus: str, path: str | os.PathLike | None = None, required: Sequence[str] = (),
                  source: str = "its distributor") -> Path:
    """Directory holding ``corpus`` (e.g. ``"conll2000"``, ``"horses"``).

    ``path`` if given; else ``$STRUCTOPT_DATA/<corpus>`` if that variable is set; else
    ``../shared/data/<corpus>`` relative to the current directory, then relative to the repository
    root (the directory above the installed ``tasks/`` package). A candidate counts only if every
    name in ``required`` (files or folders, relative to it) exists.

    Raises
    ------
    DataNotFoundError
        Naming the places tried, what was missing and where to obtain the data.
    """
    if path is not None:
        candidates = [Path(path)]
    elif os.environ.get("STRUCTOPT_DATA"):
        candidates = [Path(os.environ["STRUCTOPT_DATA"]) / corpus]
    else:
        root = Path(__file__).resolve().parent.parent
        # run from the repository root, both are one place: try (and name) it once
        candidates = list(dict.fromkeys((base / ".." / "shared" / "data" / corpus).resolve()
                                        for base in (Path.cwd(), root)))
    missing: list[str] = []
    for candidate in candidates:
        absent = [name for name in required if not (candidate / name).exists()]
        if candidate.is_dir() and not absent:
            return candidate.resolve()
        missing.append(f"{candidate} ({'missing ' + ', '.join(absent) if candidate.is_dir() else 'no such directory'})")
    raise DataNotFoundError(
        f"{corpus} data not found (tried: {'; '.join(missing)}). Get the files from {source}, put them in one "
        f"directory and pass it as --data DIR on the command line (path=DIR in Python), or set STRUCTOPT_DATA to "
        f"its parent directory.")


#: the UTF-8 byte-order mark, which some editors write at the start of a file
_UTF8_BOM = b"\xef\xbb\xbf"


def read_text_lines(path: str | os.PathLike, encoding: str = "utf-8") -> list[str]:
    """The lines of a text file (``.gz`` read transparently), with errors that name the file and line.

    A UTF-8 byte-order mark at the start is dropped: it would otherwise glue itself to the first
    token (``\ufeff-DOCSTART-`` read as a word).

    Raises
    ------
    DataNotFoundError
        The file does not exist.
    InvalidInputError
        It cannot be read or decompressed, or a byte sequence is not valid ``encoding``: the message
        names the file and the line (1-based) holding the first undecodable byte.
    """
    import gzip
    import zlib

    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except FileNotFoundError:
        raise DataNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path} is a directory; a text file is read here") from None
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise InvalidInputError(f"{path}: cannot read ({error})") from None
    if raw.startswith(_UTF8_BOM) and codecs.lookup(encoding).name == "utf-8":
        raw = raw[len(_UTF8_BOM):]  # a byte-order mark (Windows editors write one) is no part of the first line
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise InvalidInputError(f"{path}, line {line}: bytes {raw[error.start:error.end]!r} are not valid "
                                f"{encoding} ({error.reason})") from None
    return text.splitlines()


def read_image(path: str | os.PathLike, mode: str | None = None) -> np.ndarray:
    """Decode an image file into an array (``(h, w)`` grey or ``(h, w, c)``), as Pillow stores it.

    With ``mode`` (a Pillow mode such as ``"L"``) the image is converted to it first.

    Decoding goes straight to Pillow (the library scikit-image's reader uses for JPEG and PNG, so the
    pixels are the same), so that a corrupt file gives Pillow's reason rather than advice to
    install another image plugin.

    Raises
    ------
    DataNotFoundError
        The file does not exist.
    InvalidInputError
        ``cannot read image FILE: <reason>`` when it cannot be decoded (truncated, not an image, ...).
    """
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"image {path} not found")
    try:
        with Image.open(path) as image:
            image.load()  # decode now: a truncated file fails here, not later
            array = np.asarray(image.convert(mode) if mode else image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        # Pillow raises OSError (truncated, unidentified), ValueError or SyntaxError (broken headers)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InvalidInputError(f"cannot read image {path}: {reason}") from None
    if array.ndim not in (2, 3) or 0 in array.shape[:2] or array.dtype.kind not in "biuf":
        raise InvalidInputError(f"cannot read image {path}: decoded to an array of shape {array.shape} "
                                f"and dtype {array.dtype}, not an image")
    return array


def image_shape(path: str | os.PathLike) -> tuple[int, int]:
    """``(height, width)`` of an image from its header alone (nothing is decoded): cheap size checks.

    Raises
    ------
    DataNotFoundError, InvalidInputError
        As :func:`read_image`.
    """
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"image {path} not found")
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (OSError, ValueError, SyntaxError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InvalidInputError(f"cannot read image {path}: {reason}") from None
    return height, width


def check_cross_validation(n: int, n_folds: int, unit: str, lams: Sequence[float] | None = None) -> list[float]:
    """Refuse ``n_folds``-fold cross-validation over ``n`` training ``unit`` (e.g. "images") that cannot run,
    and candidate λ values that are not positive and finite; returns the λ values as floats (``[]`` without)."""
    if n_folds < 2 or n < n_folds:
        raise InvalidInputError(f"cross-validation needs n_folds >= 2 and at least n_folds training {unit}, got "
                                f"n_folds={n_folds} and {n} {unit}")
    if lams is None:
        return []
    values = [float(v) for v in lams]
    if not values or any(not (np.isfinite(v) and v > 0) for v in values):
        raise InvalidInputError(f"candidate λ values must be positive and finite, got {values}")
    return values


# --------------------------------------------------------------------------- caches of computed features
def file_listing(root: Path) -> list[list]:
    """Every file below ``root`` with its size and modification time (what the cache key depends on)."""
    return sorted([str(p.relative_to(root)), st.st_size, st.st_mtime_ns]
                  for p in root.rglob("*") if p.is_file() and (st := p.stat()))


def read_cache(file: Path) -> dict[str, np.ndarray] | None:
    """The cached arrays (a sealed archive), or None when there are none or the file fails its checksum (the
    caller computes them again)."""
    if not file.exists():
        return None
    try:
        _, arrays = read_archive(file, "feature cache")
    except StructoptError as error:
        warnings.warn(f"{error}; computing the features again", stacklevel=3)
        return None
    return arrays


def write_cache(file: Path, meta: dict, arrays: dict[str, np.ndarray], what: str = "feature cache",
                redo: str = "the features will be computed again next time", stacklevel: int = 3) -> None:
    """Write a cache as a sealed archive; a cache that cannot be written only costs time (a warning saying
    ``redo``, attributed ``stacklevel`` frames up)."""
    try:
        write_archive(file, meta, arrays, what, compress=True)
    except OutputError as error:
        warnings.warn(f"{error}; {redo}", stacklevel=stacklevel)


def cache_dir() -> Path:
    """``$STRUCTOPT_CACHE``, else ``$XDG_CACHE_HOME/structopt``, else ``~/.cache/structopt``."""
    if os.environ.get("STRUCTOPT_CACHE"):
        return Path(os.environ["STRUCTOPT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "structopt"
