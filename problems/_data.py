"""Locating a task's data directory (nothing is ever downloaded)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from structopt.errors import DataNotFoundError


def find_data_dir(corpus: str, path: str | os.PathLike | None = None, required: Sequence[str] = (),
                  source: str = "its distributor") -> Path:
    """Directory holding ``corpus`` (e.g. ``"conll2000"``, ``"horses"``).

    ``path`` if given; else ``$STRUCTOPT_DATA/<corpus>`` if that variable is set; else
    ``../shared/data/<corpus>`` relative to the current directory, then relative to the repository
    root (the directory above the installed ``problems/`` package). A candidate counts only if every
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
        candidates = [Path.cwd() / ".." / "shared" / "data" / corpus, root / ".." / "shared" / "data" / corpus]
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
