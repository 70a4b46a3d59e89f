"""Where numba caches structopt's compiled kernels: a directory keyed on the package's source.

numba keys a cached function on its own file only, so a kernel that calls a kernel in another
module would keep a stale copy after that module changes. Keying the whole cache directory on a
digest of every source file of the package makes any change to a kernel module start a fresh
cache (old directories are pruned). The base directory is ``$NUMBA_CACHE_DIR`` when set, else the user cache directory.
Importing this module configures it; ``structopt/__init__`` imports it before any kernel module.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

_KEEP = 3  # cache directories of other source versions kept besides the current one


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
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]) / "structopt"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "structopt" / "numba"


def _prune(base: Path, current: Path) -> None:
    others = sorted((p for p in base.glob("src-*") if p != current), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def configure() -> Path:
    """Point numba's cache at this source version's directory; return it."""
    import numba

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
        numba.config.CACHE_DIR = str(current)
        return current
    return Path(numba.config.CACHE_DIR or "")


CACHE_DIR = configure()
