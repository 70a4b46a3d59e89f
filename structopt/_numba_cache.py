"""Where numba caches structopt's compiled kernels: a directory keyed on the package's source.

numba keys a cached function on its own file only, so a kernel that calls a kernel in another
module would keep a stale copy after that module changes. Keying the whole cache directory on a
digest of every source file of the package makes any change to a kernel module start a fresh
cache (old directories are pruned). The base directory is ``$NUMBA_CACHE_DIR`` when set, else the user cache directory.
Importing this module configures it; ``structopt/__init__`` imports it before any kernel module.

numba itself is not imported here (it costs a quarter of a second and ``import structopt`` alone
needs none of it): the directory goes into ``NUMBA_CACHE_DIR``, which numba reads when it is first
imported, and into ``numba.config`` directly when it already is. Child processes inherit the
variable; ``STRUCTOPT_NUMBA_CACHE_DIR`` marks it as set here, so that a child importing structopt
derives the same base directory instead of nesting a new one inside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

_KEEP = 3  # cache directories of other source versions kept besides the current one
_MARK = "STRUCTOPT_NUMBA_CACHE_DIR"  # the NUMBA_CACHE_DIR value this module set (a parent process's included)


def _source_digest(package_dir: Path) -> str:
    # only the modules that mention numba (kernels, intrinsics): editing anything else keeps the cache
    h = hashlib.blake2b(digest_size=8)
    for path in sorted(package_dir.rglob("*.py")):
        source = path.read_bytes()
        if b"numba" in source:
            h.update(str(path.relative_to(package_dir)).encode())
            h.update(source)
    return h.hexdigest()


def _base_dir() -> Path:
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        if chosen == os.environ.get(_MARK):  # set by structopt (here or in a parent process): its base
            return Path(chosen).parent
        return Path(chosen) / "structopt"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "structopt" / "numba"


def _prune(base: Path, current: Path) -> None:
    others = sorted((p for p in base.glob("src-*") if p != current), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def _point_numba_at(directory: Path) -> None:
    os.environ["NUMBA_CACHE_DIR"] = os.environ[_MARK] = str(directory)
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before structopt: its configuration has already read the environment
        numba.config.CACHE_DIR = str(directory)


def configure() -> Path:
    """Point numba's cache at this source version's directory; return it."""
    package_dir = Path(__file__).resolve().parent
    for base in (_base_dir(), Path(tempfile.gettempdir()) / "structopt-numba"):
        current = base / f"src-{_source_digest(package_dir)}"
        try:
            current.mkdir(parents=True, exist_ok=True)
            probe = current / ".writable"
            probe.touch()
        except OSError:
            continue
        _prune(base, current)
        _point_numba_at(current)
        return current
    return Path(os.environ.get("NUMBA_CACHE_DIR", ""))  # nowhere writable: numba's own choice


CACHE_DIR = configure()
