"""Exceptions raised by structopt."""

from __future__ import annotations


class StructoptError(Exception):
    """Base class of every error structopt raises on purpose."""


class NotSupportedError(StructoptError, NotImplementedError):
    """An operation that a structure (or solver) cannot provide, with the reason why.

    Example: the log-partition of bipartite matchings is a permanent, which is #P-hard.
    """


class InvalidInputError(StructoptError, ValueError):
    """Bad user input: a wrong shape, a NaN, a label out of range, ...

    The message always names the offending example (when there is one) and the problem.
    """


class DataNotFoundError(StructoptError, FileNotFoundError):
    """A task's data files are not where the loader looked; the message says where to put them."""


def example_error(index: int | None, message: str) -> InvalidInputError:
    """Build an :class:`InvalidInputError` whose message names example ``index``."""
    where = f"example {index}: " if index is not None else ""
    return InvalidInputError(where + message)


class OutputError(StructoptError, OSError):
    """An output path (results directory, checkpoint) cannot be written; the message names it."""
