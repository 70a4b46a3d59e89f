"""The ``structopt`` console command's entry point: Ctrl-C during start-up exits 130 with one line.

Importing the command line (numpy, numba, scipy, the solvers) takes a noticeable fraction of a
second; a Ctrl-C in that window would otherwise print the traceback of whichever import it hit.
This module imports nothing of structopt's but the (light) package itself, installs a SIGINT handler
that prints one line and exits with status 130 (128 + SIGINT, the shell's convention), imports the
command line and makes every numba compilation say so on stderr (a kernel's first call may compile for
minutes: :func:`structopt._numba_cache.announce_compiles`), then restores Python's own handler so that the
running command handles Ctrl-C as it always does (``structopt.interrupt``: a clean stop at the next safe point).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

#: exit status of a command stopped by Ctrl-C (128 + SIGINT)
INTERRUPTED = 130
MESSAGE = b"structopt: interrupted during start-up\n"


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    # os.write and os._exit: no Python-level I/O or clean-up that a second Ctrl-C could interrupt
    os.write(2, MESSAGE)
    os._exit(INTERRUPTED)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``structopt`` command (:func:`structopt.cli.main`) with Ctrl-C-safe start-up."""
    try:
        previous = signal.signal(signal.SIGINT, _exit_at_once)
        installed = True
    except ValueError:  # not the main thread: signal handlers cannot be set there; start as is
        previous, installed = None, False
    try:
        from structopt._numba_cache import announce_compiles
        from structopt.cli import main as cli_main

        announce_compiles()  # any command: a kernel compiling on its first call (up to minutes) says so on stderr
    finally:
        if installed:  # None: the previous handler was not set from Python; SIG_DFL is the closest
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    return cli_main(argv)


def console() -> int:
    """The console script and ``python -m structopt``: :func:`main`, then a cheap interpreter exit.

    The command's objects (numba's in particular) would otherwise be walked by the garbage
    collections of interpreter shutdown, about 0.3–0.5 s of CPU per command
    (``benchmarks/pystruct_compare_results.md``). The command has closed its files by then; the
    standard streams are flushed before the heap is frozen. Library callers of :func:`main` (tests,
    notebooks) keep Python's normal collection.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to flush
            pass
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(console())
