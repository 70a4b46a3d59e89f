"""The options of a factor graph's MAP methods, declared once and checked before any work.

:meth:`~structopt.structures.factor_graph.FactorGraph.map` and
:func:`structopt.marginals.map_inference` both check their options here, so a bad value gets the
same message from either. ``state``, ``stop_upper`` and ``hint`` carry objects of an earlier call
on the same graph (an AD3 iterate, a target bound, a labeling): the structure-level entry point
takes them; an MRF's ``map_inference`` has no such objects and does not.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.options import boolean, non_negative, non_negative_int, optional, positive, positive_int

Check = Callable[[str, Any], None]

#: MAP methods of :meth:`FactorGraph.map`
MAP_METHODS = ("auto", "ad3", "bnb", "cpsat", "lp", "ad3_bnb")
#: the golden ratio: AD3's multiplier step factor ``tau`` lies in (0, (1 + √5) / 2)
_TAU_MAX = (1.0 + 5 ** 0.5) / 2


def tau_check(name: str, value: Any) -> None:
    """A number in (0, (1 + √5) / 2)."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real) and 0.0 < value < _TAU_MAX
    if not ok:  # NaN fails the comparisons too
        raise InvalidInputError(f"{name} must be a number in (0, {_TAU_MAX:g}), got {value!r}")


def resolution_bits_check(name: str, value: Any) -> None:
    """An integer in [1, 52] (a float's mantissa holds the scaled scores exactly)."""
    positive_int(name, value)
    if value > 52:
        raise InvalidInputError(f"{name} must be an integer in [1, 52], got {value!r}")


def _ad3_state(name: str, value: Any) -> None:
    """None or an AD3State (the final iterate of an earlier call on the same graph)."""
    from structopt.structures._fg_types import AD3State

    if value is not None and not isinstance(value, AD3State):
        raise InvalidInputError(f"{name} must be None or an AD3State (an earlier call's iterate), got "
                                f"{type(value).__name__}")


def _bound(name: str, value: Any) -> None:
    """A real number or -inf (not NaN, not +inf)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or math.isnan(value) or \
            value == math.inf:
        raise InvalidInputError(f"{name} must be a number or -inf, got {value!r}")


def _labels(name: str, value: Any) -> None:
    """None or a 1-D integer array (a labeling; its length is checked by the method)."""
    if value is None:
        return
    arr = np.asarray(value)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"{name} must be None or a 1-D integer array (a labeling), got {arr.dtype} "
                                f"{arr.shape}")


#: the options each method takes beside ``time_limit``, and their checks
MAP_OPTIONS: dict[str, dict[str, Check]] = {
    "auto": {"tol": non_negative, "num_workers": positive_int},
    "ad3": {"max_iter": positive_int, "tol_gap": non_negative, "tol_lp": non_negative,
            "tol_res": optional(non_negative), "bound_every": positive_int, "max_inner": positive_int,
            "tau": tau_check, "adapt_eta": boolean, "eta_iters": non_negative_int, "chunk_seconds": positive,
            "state": _ad3_state, "stop_upper": _bound},
    "bnb": {"node_iter": positive_int, "max_nodes": positive_int, "tol": non_negative, "state": _ad3_state},
    "lp": {},
    "ad3_bnb": {"tol": non_negative, "budget": optional(positive), "max_nodes": positive_int},
    "cpsat": {"resolution_bits": resolution_bits_check, "num_workers": positive_int, "tol": non_negative,
              "relative_gap": optional(non_negative), "hint": _labels},
}
#: options that carry an earlier call's objects on the same graph (structure level only)
CARRIED = frozenset({"state", "stop_upper", "hint"})


def accepted_options(method: str, carried: bool = True) -> dict[str, Check]:
    """The options ``method`` takes (without those in :data:`CARRIED` when ``carried`` is False)."""
    return {k: c for k, c in MAP_OPTIONS[method].items() if carried or k not in CARRIED}


def check_map_options(method: Any, options: dict[str, Any], where: str, *, methods: tuple[str, ...] = MAP_METHODS,
                      carried: bool = True) -> None:
    """Refuse an unknown method, an option ``method`` does not take (naming the ones it takes) or a bad value."""
    if not isinstance(method, str) or method not in methods:
        raise InvalidInputError(f"unknown MAP method {method!r}; use one of {', '.join(methods)}")
    accepted = accepted_options(method, carried)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise InvalidInputError(f"{where}: method {method!r} does not take option(s) {', '.join(unknown)}; it takes "
                                f"{', '.join(['time_limit', *accepted])}")
    for key, value in options.items():
        accepted[key](f"{where}: {key}", value)
