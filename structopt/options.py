"""Option checks shared by the solvers, the inference methods and the command line.

Each check is ``check(name, value) -> None`` and raises an
:class:`~structopt.errors.InvalidInputError` naming the option, so ``time_limit=0`` or ``tol=nan``
get the same message from every entry point. Its docstring is the option's description in the
generated option tables.
"""

from __future__ import annotations

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


__all__ = ["array_option", "at_least", "boolean", "callable_option", "non_negative", "non_negative_int", "one_of",
           "open_unit", "optional", "path_option", "positive", "positive_int", "random_state_option"]
