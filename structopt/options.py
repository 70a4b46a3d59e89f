"""Option checks shared by the solvers, the inference methods and the command line.

Each check is ``check(name, value) -> None`` and raises an
:class:`~structopt.errors.InvalidInputError` naming the option, so ``time_limit=0`` or ``tol=nan``
get the same message from every entry point. Its docstring is the option's description in the
generated option tables.

:func:`number_argument` is the command line's side of the same rules: one ``argparse`` value
parser for every bounded number flag (``structopt train``'s, ``infer``'s, the own-data kinds'),
whose message names the same interval the checks do.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError


def _real(value: Any) -> float | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def positive(name: str, value: Any) -> None:
    """A finite real number > 0."""
    v = _real(value)
    if v is None or not (math.isfinite(v) and v > 0):
        raise InvalidInputError(f"{name} must be a finite number > 0, got {value!r}")


def non_negative(name: str, value: Any) -> None:
    """A finite real number >= 0."""
    v = _real(value)
    if v is None or not (math.isfinite(v) and v >= 0):
        raise InvalidInputError(f"{name} must be a finite number >= 0, got {value!r}")


def at_least(low: float) -> Callable[[str, Any], None]:
    """A finite real number >= ``low``."""
    def run(name: str, value: Any) -> None:
        v = _real(value)
        if v is None or not (math.isfinite(v) and v >= low):
            raise InvalidInputError(f"{name} must be a finite number >= {low:g}, got {value!r}")
    run.__doc__ = f"A finite real number >= {low:g}."
    return run


def open_unit(name: str, value: Any) -> None:
    """A real number in the open interval (0, 1)."""
    v = _real(value)
    if v is None or not 0.0 < v < 1.0:
        raise InvalidInputError(f"{name} must be a number in (0, 1), got {value!r}")


def optional(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    """``check``, or None."""
    def run(name: str, value: Any) -> None:
        if value is not None:
            check(name, value)
    doc = (check.__doc__ or "a valid value.").strip()
    run.__doc__ = f"None or {doc[0].lower()}{doc[1:]}"
    return run


def boolean(name: str, value: Any) -> None:
    """True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")


def positive_int(name: str, value: Any) -> None:
    """An integer >= 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")


def non_negative_int(name: str, value: Any) -> None:
    """An integer >= 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidInputError(f"{name} must be an integer >= 0, got {value!r}")


def one_of(*choices: Any) -> Callable[[str, Any], None]:
    """One of a fixed set of values."""
    def run(name: str, value: Any) -> None:
        if not any(value == c and type(value) is type(c) for c in choices):
            raise InvalidInputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    run.__doc__ = f"One of {', '.join(map(repr, choices))}."
    return run


def random_state_option(name: str, value: Any) -> None:
    """None, a non-negative int seed, or a numpy Generator."""
    if value is None or isinstance(value, np.random.Generator):
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 0:
        raise InvalidInputError(f"{name} must be None, a non-negative integer seed or a numpy Generator, "
                                f"got {value!r}")


def path_option(name: str, value: Any) -> None:
    """None or a file path."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise InvalidInputError(f"{name} must be a file path, got {value!r}")


def callable_option(name: str, value: Any) -> None:
    """None or a callable."""
    if value is not None and not callable(value):
        raise InvalidInputError(f"{name} must be callable (w -> dict), got {value!r}")


def array_option(name: str, value: Any) -> None:
    """None or a finite float vector."""
    if value is None:
        return
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a float vector, got {type(value).__name__}") from None
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise InvalidInputError(f"{name} must be a finite 1-D float vector, got shape {arr.shape}")


def _interval(kind: type, low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    # the wording of the checks above: "a finite number > 0", "an integer >= 1", "a number in (0, 1)"
    if low is not None and high is not None:
        noun = "an integer" if kind is int else "a number"
        return f"{noun} in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    noun = "an integer" if kind is int else "a finite number"
    if low is not None:
        return f"{noun} {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{noun} {'<' if high_open else '<='} {high:g}"
    return noun


def number_argument(kind: type, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                    high_open: bool = False, what: str | None = None) -> Callable[[str], Any]:
    """An argparse ``type=``: the text as a finite ``kind`` number within the bounds.

    Parameters
    ----------
    kind : int or float
        ``int`` reads integers only (``"1.5"`` and ``"1e3"`` are refused); ``float`` refuses NaN and
        infinities.
    low, high : float, optional
        Bounds (None: unbounded on that side).
    low_open, high_open : bool, default False
        Exclude the bound itself (``low=0, low_open=True``: > 0).
    what : str, optional
        The description in the message; default the interval (``"a finite number > 0"``,
        ``"an integer >= 1"``, ``"a number in (0, 1)"``).

    Returns
    -------
    callable
        ``parse(text) -> int | float``, raising ``argparse.ArgumentTypeError("must be WHAT, got 'TEXT'")``,
        which argparse prints as one line naming the flag.

    Examples
    --------
    >>> number_argument(float, 0, 1, low_open=True, high_open=True)("0.25")
    0.25
    >>> number_argument(int, 1)("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1, got '0'
    """
    if kind is not int and kind is not float:
        raise TypeError(f"number_argument reads int or float, not {kind!r}")
    description = what or _interval(kind, low, high, low_open, high_open)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        # an int is finite (and math.isfinite would overflow on one of 400 digits)
        if (value is None or (kind is float and not math.isfinite(value))
                or (low is not None and (value < low or (low_open and value == low)))
                or (high is not None and (value > high or (high_open and value == high)))):
            raise argparse.ArgumentTypeError(f"must be {description}, got {text!r}")
        return value

    parse.__doc__ = f"{description[0].upper()}{description[1:]} (an argparse value parser)."
    return parse


__all__ = ["array_option", "at_least", "boolean", "callable_option", "non_negative", "non_negative_int",
           "number_argument", "one_of", "open_unit", "optional", "path_option", "positive", "positive_int",
           "random_state_option"]
