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

A kernel missing from the cache is compiled on its first call, which can take from a second to minutes
(under load) with nothing else to show. :func:`announce_compiles` (the command line calls it once) makes
every such compilation say so on stderr, whatever path triggers it: numba announces each compilation (a
cache miss, never a load) as a ``numba:compile`` event, and one listener turns those into stage lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_KEEP = 3  # cache directories of other source versions kept besides the current one
_MARK = "STRUCTOPT_NUMBA_CACHE_DIR"  # the NUMBA_CACHE_DIR value this module set (a parent process's included)


#: a line importing numba: the modules that define kernels (or intrinsics) have one
_IMPORTS_NUMBA = re.compile(rb"^[ \t]*(?:import|from)[ \t]+numba\b", re.M)


def _source_digest(package_dir: Path) -> str:
    # only the modules that import numba (kernels, intrinsics): editing anything else, a module that merely
    # names numba in a comment or calls this one included, keeps the cache
    h = hashlib.blake2b(digest_size=8)
    for path in sorted(package_dir.rglob("*.py")):
        source = path.read_bytes()
        if _IMPORTS_NUMBA.search(source):
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

#: seconds between two lines about compilation: at most one per new kernel, and while one kernel takes long
COMPILE_NOTICE_EVERY = 10.0


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


class CompileNotice:
    """Stage lines while numba compiles (see :func:`announce_compiles`); ``say`` writes one line.

    The first compilation of the process is announced with what it is and where the result is cached; later
    ones get a line when ``every`` seconds have passed since the last line (so a run of many small kernels
    prints about one line per ``every`` seconds, naming the kernel in hand), and a kernel still compiling
    after ``every`` seconds gets a line per ``every`` seconds from a watcher thread. Only the outermost
    compilation counts: a kernel compiling the kernels it calls is one stage.
    """

    def __init__(self, say: Callable[[str], None], every: float = COMPILE_NOTICE_EVERY):
        self.say, self.every = say, float(every)
        self.depth = 0  # nested compilations in progress (the kernels a kernel calls)
        self.kernels = 0  # outermost compilations started
        self.first: float | None = None  # when the first one started
        self.last_line = -float("inf")
        self.current = ""  # the outermost kernel compiling now
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._watcher: threading.Thread | None = None

    # numba's Listener interface (duck-typed here; :func:`announce_compiles` wraps it)
    def on_start(self, event: Any) -> None:
        with self._lock:
            self.depth += 1
            if self.depth > 1:
                return
            now = time.monotonic()
            self.kernels += 1
            self.current = _kernel_name(event.data.get("dispatcher") if isinstance(event.data, dict) else None)
            if self.first is None:
                self.first = now
                self._line(now, "structopt: compiling numba kernels on their first use (seconds to minutes, once "
                                f"per machine and version; later runs load them from {CACHE_DIR}): {self.current}")
            elif now - self.last_line >= self.every:
                self._line(now, f"structopt: compiling numba kernel {self.current} ({self._so_far(now)})")
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="structopt-compile-notice", daemon=True)
                self._watcher.start()

    def on_end(self, event: Any) -> None:
        with self._lock:
            self.depth = max(self.depth - 1, 0)

    def _so_far(self, now: float) -> str:
        assert self.first is not None
        return f"kernel {self.kernels} of this run, the first began {_minutes(now - self.first)} ago"

    def _line(self, now: float, text: str) -> None:
        self.last_line = now
        self.say(text)

    def _watch(self) -> None:
        """Between compilation events: a line per ``every`` seconds while one kernel keeps compiling."""
        while not self._wake.wait(self.every / 4):
            with self._lock:
                now = time.monotonic()
                if self.depth > 0 and now - self.last_line >= self.every:
                    self._line(now, f"structopt: still compiling numba kernel {self.current} ({self._so_far(now)})")

    def close(self) -> None:
        """Stop the watcher thread."""
        self._wake.set()


def _kernel_name(dispatcher: Any) -> str:
    function = getattr(dispatcher, "py_func", None)
    module = getattr(function, "__module__", "") or ""
    return f"{module.removeprefix('structopt.')}.{getattr(function, '__qualname__', '?')}".lstrip(".")


_NOTICE: tuple[CompileNotice, Any] | None = None


def announce_compiles(say: Callable[[str], None] | None = None, *, every: float = COMPILE_NOTICE_EVERY
                      ) -> CompileNotice:
    """From now on in this process, say on stderr (or through ``say``) when numba compiles a kernel.

    Called once by each command-line run before any work; a second call replaces the first listener. A
    library call installs nothing (it prints nothing unasked). Imports numba.
    """
    global _NOTICE
    from numba.core import event

    if say is None:
        from structopt.progress import Progress

        say = Progress(bars=False).stage  # the one writer of stage lines (with --no-progress too)
    stop_announcing()
    notice = CompileNotice(say, every)

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            notice.on_start(ev)

        def on_end(self, ev: Any) -> None:
            notice.on_end(ev)

    listener = _Listener()
    event.register("numba:compile", listener)
    _NOTICE = (notice, listener)
    return notice


def stop_announcing() -> None:
    """Remove the listener :func:`announce_compiles` installed (if any)."""
    global _NOTICE
    if _NOTICE is None:
        return
    notice, listener = _NOTICE
    _NOTICE = None
    notice.close()
    from numba.core import event

    event.unregister("numba:compile", listener)
