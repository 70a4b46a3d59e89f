"""Option checks of the inference methods: every keyword is validated before any work, with errors naming it.

The checks are the solvers' (:mod:`structopt.options`), so ``time_limit=0`` or ``tol=nan`` get
the same message from ``barrier_fw`` as from ``bcfw`` and from the command line.
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.marginals.mrf import PairwiseMRF
from structopt.options import (
    boolean,
    non_negative,
    non_negative_int,
    one_of,
    optional,
    positive,
    positive_int,
    random_state_option,
)

Check = Callable[[str, Any], None]

__all__ = ["Check", "boolean", "count", "in_interval", "inference_method", "non_negative", "one_of", "optional",
           "positive", "positive_int", "random_state_option"]


#: an integer >= 0
count = non_negative_int


def in_interval(low: float, high: float, low_closed: bool, high_closed: bool) -> Check:
    """A real number between ``low`` and ``high`` (each end included when closed)."""
    text = f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"

    def check(name: str, value: Any) -> None:
        ok = (not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real)
              and (low <= value if low_closed else low < value) and (value <= high if high_closed else value < high))
        if not ok:  # NaN fails every comparison, so it lands here too
            raise InvalidInputError(f"{name} must be a number in {text}, got {value!r}")
    check.__doc__ = f"A number in {text}."
    return check


def inference_method(name: str, **checks: Check) -> Callable[[Callable], Callable]:
    """Declare an inference method ``f(mrf, **options)``: validate every option on each call, before any work.

    Every keyword parameter of ``f`` must have a check (a missing one is a programming error, raised
    at import). An unknown option is an :class:`InvalidInputError` naming it and the accepted ones
    (not Python's TypeError), and a bad value one naming ``"{name}: {option}"``.
    """
    def wrap(function: Callable) -> Callable:
        signature = inspect.signature(function)
        accepted = list(signature.parameters)[1:]  # the first parameter is the model
        missing = sorted(set(accepted) - set(checks))
        if missing:
            raise TypeError(f"{name}: no check declared for option(s) {', '.join(missing)}")

        @functools.wraps(function)
        def run(mrf, *args, **options):
            if not isinstance(mrf, PairwiseMRF):
                raise InvalidInputError(f"{name} needs a PairwiseMRF (structopt.marginals.read_uai reads one), "
                                        f"got {type(mrf).__name__}")
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise InvalidInputError(f"{name} got unknown option(s) {', '.join(unknown)}; it accepts "
                                        f"{', '.join(accepted)}")
            try:
                bound = signature.bind(mrf, *args, **options)
            except TypeError as error:  # too many positional arguments, or one given twice
                raise InvalidInputError(f"{name}: {error}") from None
            bound.apply_defaults()
            for key in accepted:
                checks[key](f"{name}: {key}", bound.arguments[key])
            return function(*bound.args, **bound.kwargs)

        run.options = dict(checks)
        return run
    return wrap
