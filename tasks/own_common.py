"""What the own-data tasks share: declared options, the built task, splits and file checks.

An own-data kind (:mod:`structopt.tasks.own_data`) declares its options once, as a dataclass whose
fields carry their command-line flag and help in ``metadata``; :class:`OwnTask` turns them into
argparse options (``add_arguments``) and a namespace back into the dataclass (``build``), so that
the command line and Python read the same declaration. Fields marked ``common`` (``lam``,
``n_train``, ``seed``) are the options every ``structopt train`` task already has: they are added
to a parser only when asked (``common=True``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.options import number_argument

#: image file suffixes the folder readers list (lower case)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".pgm", ".ppm")


class BuiltTask(NamedTuple):
    """What ``structopt train`` runs: a problem, a held-out evaluation, a description, and what a saved
    model must keep to featurise new inputs (``preprocessing``: plain values and arrays, see each kind)."""

    problem: Any
    evaluate: Callable[[np.ndarray], dict[str, float]]
    description: str
    preprocessing: dict[str, Any] | None = None


def option(flag: str, help: str, default: Any = None, *, type: Callable[[str], Any] | None = None,
           choices: Sequence[Any] | None = None, metavar: str | None = None, action: str | None = None,
           common: bool = False) -> Any:
    """A dataclass field with its command-line declaration in ``metadata``."""
    meta = {"flag": flag, "help": help, "type": type, "choices": choices, "metavar": metavar, "action": action,
            "common": common}
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple default")  # dataclasses refuse mutable defaults anyway
    return field(default=default, metadata=meta)


# ------------------------------------------------------------------ argparse value types
# the bounded numbers are structopt.options.number_argument, the one parser of `structopt train`'s own flags too
_positive_int = number_argument(int, 1)
_non_negative_int = number_argument(int, 0)
_non_negative = number_argument(float, 0)
_fraction = number_argument(float, 0, 1, low_open=True, high_open=True)
_COLUMN = "a non-zero column number (1 = first, -1 = last)"
_integer = number_argument(int, what=_COLUMN)


def _column(text: str) -> int:
    value = _integer(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be {_COLUMN}, got {text!r}")
    return value


def _columns(text: str) -> tuple[int, ...]:
    return tuple(_column(part) for part in text.split(",") if part.strip()) if text.strip() else ()


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


positive_int, non_negative_int, column, columns = _positive_int, _non_negative_int, _column, _columns
fraction, non_negative, names = _fraction, _non_negative, _names


@dataclass(kw_only=True)
class CommonOptions:
    """Options of every own-data kind: the held-out split, the training subset, the seed and λ."""

    #: λ when ``lam`` is None (each kind sets its own)
    DEFAULT_LAM: ClassVar[float] = 0.01

    test_fraction: float = option("--test-fraction", "without test files: the fraction of the examples held out "
                                  "for testing, chosen at random with --seed (default 0.25)", 0.25, type=fraction)
    n_train: int | None = option("--n-train", "use only the first N training examples", None, type=positive_int,
                                 common=True)
    seed: int = option("--seed", "seed of the held-out split (and of any k-means codebook)", 0, type=non_negative_int,
                       common=True)
    lam: float | None = option("--lam", "regularisation; 0 means 1/n (default: the kind's own)", None,
                               type=non_negative, common=True)


@dataclass(frozen=True)
class OwnTask:
    """One kind of own data: its options (a dataclass of :func:`option` fields) and its builder.

    Attributes
    ----------
    name : str
        The task name on the command line (``structopt train NAME``).
    summary : str
        One line for ``--help``.
    options : type
        Dataclass of the kind's options (subclass of :class:`CommonOptions`).
    builder : callable
        ``options -> BuiltTask``.
    """

    name: str
    summary: str
    options: type
    builder: Callable[[Any], BuiltTask]

    @property
    def default_lam(self) -> float:
        """λ when ``lam`` is None (the options class's ``DEFAULT_LAM``)."""
        return self.options.DEFAULT_LAM

    def add_arguments(self, parser: argparse.ArgumentParser, *, common: bool = False) -> None:
        """Declare the kind's options on ``parser`` (also ``--lam``, ``--n-train``, ``--seed`` with ``common``)."""
        for f in dataclasses.fields(self.options):
            meta = f.metadata
            if meta["common"] and not common:
                continue
            kwargs: dict[str, Any] = {"dest": f.name, "help": meta["help"], "default": f.default}
            if meta["action"]:
                kwargs["action"] = meta["action"]
            else:
                kwargs.update({key: meta[key] for key in ("type", "choices", "metavar") if meta[key] is not None})
            parser.add_argument(meta["flag"], **kwargs)

    def parse(self, args: Any) -> Any:
        """The options dataclass from ``args`` (a namespace or any object); fields it lacks keep their default."""
        if isinstance(args, self.options):
            return args
        # None means "not given" (flat parsers declare every option with default None): the field's default
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(self.options)
                  if getattr(args, f.name, None) is not None}
        return self.options(**values)

    def flags(self, *, common: bool = False) -> dict[str, str]:
        """The kind's command-line flags and their destinations (with ``common``, also the shared ones)."""
        return {f.metadata["flag"]: f.name for f in dataclasses.fields(self.options)
                if common or not f.metadata["common"]}

    def build(self, args: Any) -> BuiltTask:
        """Read the files named in ``args`` and build ``(problem, evaluate, description)``."""
        return self.builder(self.parse(args))


# ------------------------------------------------------------------ helpers for the readers
def existing_file(path: str | os.PathLike | None, what: str) -> Path:
    """``path`` as a Path, refusing a missing option, a missing file or a directory (naming them)."""
    if path is None or str(path) == "":
        raise InvalidInputError(f"{what}: no file given")
    path = Path(path)
    if path.is_dir():
        raise InvalidInputError(f"{path}: a directory, but {what} must be a file")
    if not path.is_file():
        raise DataNotFoundError(f"{path}: no such file ({what})")
    return path


def existing_dir(path: str | os.PathLike | None, what: str) -> Path:
    """``path`` as a Path, refusing a missing option or directory (naming them)."""
    if path is None or str(path) == "":
        raise InvalidInputError(f"{what}: no directory given")
    path = Path(path)
    if not path.is_dir():
        raise DataNotFoundError(f"{path}: no such directory ({what})")
    return path


def image_files(directory: Path) -> dict[str, Path]:
    """Image files of ``directory`` by file stem (sorted); two files with one stem are refused."""
    out: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
            if path.stem in out:
                raise InvalidInputError(f"{path}: another image has the same name stem ({out[path.stem].name}); "
                                        "images are matched by stem, so each stem must be unique")
            out[path.stem] = path
    if not out:
        raise InvalidInputError(f"{directory}: no image files ({', '.join(IMAGE_SUFFIXES)})")
    return out


def orphans_message(names: Sequence[str], what: str, where: Path) -> str:
    """``"3 images without a mask in DIR: a, b, c and 1 more"``."""
    names = sorted(names)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} {what} in {where}: {shown}"


def holdout(n: int, fraction: float, seed: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)``: a seeded random ``fraction`` of ``n`` examples is held out (both sorted)."""
    if not 0.0 < fraction < 1.0:
        raise InvalidInputError(f"test_fraction must be strictly between 0 and 1, got {fraction}")
    n_test = round(fraction * n)
    if n_test < 1 or n - n_test < 1:
        raise InvalidInputError(f"{what}: {n} example(s) are too few to hold out a fraction {fraction:g} for "
                                "testing; give separate test files or more examples")
    test = np.sort(np.random.default_rng(seed).choice(n, size=n_test, replace=False))
    train = np.setdiff1d(np.arange(n), test)
    return train, test


def data_split(data: str | os.PathLike | Sequence[str | os.PathLike], rule: str, n_train: int, n_test: int,
               **details: Any) -> dict[str, Any]:
    """What a saved model records of the data train read and how it split them (``preprocessing["data_split"]``,
    which ``structopt predict`` reads to score the same held-out examples).

    Parameters
    ----------
    data : path or sequence of paths
        What train read (a file or folder; several files are recorded comma-separated, as ``predict`` takes
        them), resolved.
    rule : str
        The split rule in words.
    n_train, n_test : int
        The training examples used (after ``--n-train``) and the test examples.
    **details
        The task's parameters of the rule (a split name, a seed, a fraction, test files, ...).
    """
    paths = [data] if isinstance(data, str | os.PathLike) else list(data)
    return {"data": ",".join(str(Path(p).resolve()) for p in paths), "rule": rule, "n_train": int(n_train),
            "n_test": int(n_test), **details}


def holdout_rule(fraction: float, seed: int, n: int, unit: str) -> str:
    """The held-out split of the own-data kinds, in words."""
    return f"a seeded random fraction {fraction:g} of the {n:,} {unit} held out for testing (--seed {seed})"


def first(values: list, n_train: int | None) -> list:
    """The first ``n_train`` training examples (all with None)."""
    if n_train is not None and n_train < 1:
        raise InvalidInputError(f"n_train must be >= 1, got {n_train}")
    return values if n_train is None else values[:n_train]


def resolve_lam(lam: float | None, n: int, default: float) -> float:
    """``lam``, where None means ``default`` and 0 means 1/n."""
    if lam is None:
        return default
    if not (math.isfinite(lam) and lam >= 0):
        raise InvalidInputError(f"lam must be a finite number >= 0, got {lam}")
    return lam if lam > 0 else 1.0 / n


def both_or_neither(options: Any, names: Sequence[str], what: str) -> bool:
    """Whether the test files ``names`` are all given (True) or none (False); refuses a partial set."""
    given = [getattr(options, name) is not None for name in names]
    if any(given) and not all(given):
        flag = {f.name: f.metadata["flag"] for f in dataclasses.fields(options)}
        flags = [flag[name] for name in names]
        raise InvalidInputError(f"{what}: give all of {', '.join(flags)} or none of them")
    return all(given)
