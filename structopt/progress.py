"""What a long loader says while it works: stage lines and per-item progress bars, both on stderr.

A loader takes ``progress``: ``False`` (a library call: silent), ``True`` (stage lines and bars) or a
:class:`Progress` (the command line's: ``--no-progress`` keeps the stage lines and drops the bars).
One helper for every loader, so that a stage line reads the same wherever it comes from.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """Where a long stage is reported.

    Attributes
    ----------
    lines : bool
        Print one line on stderr as each stage starts (e.g. "computing features of 328 images").
    bars : bool
        Show a progress bar over a stage's items (tqdm, on stderr).
    """

    lines: bool = True
    bars: bool = True

    def stage(self, text: str) -> None:
        """Say on one stderr line what starts now."""
        if self.lines:
            print(text, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def if_long(self, text: str, after: float = 2.0) -> Iterator[None]:
        """Say ``text`` (:meth:`stage`) once the block has run for ``after`` seconds; a shorter block says nothing.

        For a stage that is quick on small inputs and minutes on large ones (a short run's output stays its
        result lines). The line comes from a timer thread, at ``after`` seconds, whatever the block is doing.
        """
        if not self.lines:
            yield
            return
        timer = threading.Timer(after, self.stage, args=(text,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def items(self, iterable: Iterable[T], total: int, what: str, unit: str = "it") -> Iterator[T]:
        """``iterable``, with a bar ``what: i/total unit`` when bars are on."""
        if not self.bars:
            yield from iterable
            return
        from tqdm.auto import tqdm

        with tqdm(iterable, total=total, desc=what, unit=f" {unit}", file=sys.stderr, leave=False) as bar:
            yield from bar


#: a library call's default: nothing printed
QUIET = Progress(lines=False, bars=False)


def as_progress(progress: bool | Progress) -> Progress:
    """``progress`` as a :class:`Progress`: True prints stage lines and bars, False nothing."""
    if isinstance(progress, Progress):
        return progress
    return Progress() if progress else QUIET


def count(number: int, noun: str) -> str:
    """``number`` with thousands separators and ``noun`` (plural "s" added unless it is 1): "8,936 sentences"."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
