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


def check_count(value: object, name: str, owner: str, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum``, or an :class:`InvalidInputError` naming ``owner``'s argument ``name``.

    Integers (Python or numpy) and integral floats such as ``5.0`` are accepted; fractions, NaN,
    infinities, booleans, strings and other types are not.
    """
    import numbers

    import numpy as np

    ok = isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and np.isfinite(value)
                                                 and float(value).is_integer())
    if isinstance(value, (bool, np.bool_)) or not ok or int(value) < minimum:
        raise InvalidInputError(f"{owner} needs an integer {name} >= {minimum}, got {value!r}")
    return int(value)


#: feature magnitudes above this overflow when squared (sqrt of the largest float is ~1.3e154)
MAX_ABS_FEATURE = 1e150


def numeric_array(value: object, what: str, index: int | None = None, finite: bool = True):
    """``value`` as a contiguous float64 array, or an :class:`InvalidInputError` naming ``what`` (and the example).

    Strings, bytes, objects and ragged nesting are refused even when numpy could parse them
    (``"0.5"`` is not a number here); with ``finite``, NaN and infinities are refused too.
    """
    import numpy as np

    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as error:  # ragged nesting
        raise example_error(index, f"{what} must be a numeric array, got {type(value).__name__} ({error})") from None
    if raw.dtype.kind not in "biuf":
        raise example_error(index, f"{what} must be a numeric array, got dtype {raw.dtype}")
    array = np.ascontiguousarray(raw, dtype=np.float64)
    if finite and not np.all(np.isfinite(array)):
        raise example_error(index, f"{what} contains NaN or infinite values")
    return array


def refuse_nonfinite(fields, what: str, index: int | None = None, allow_neginf: bool = False) -> None:
    """Raise an :class:`InvalidInputError` naming the first NaN or infinite entry of ``fields``.

    ``fields`` is an iterable of ``(label, array)``; ``what`` names the potentials (and ``index`` the
    example) in the message. With ``allow_neginf``, ``-inf`` is accepted (a forbidden entry, for
    structures that honour it) and only NaN and ``+inf`` are refused. The scan is one ``isfinite``
    per field; locating the entry is done on the error path only.
    """
    import numpy as np

    for label, arr in fields:
        arr = np.asarray(arr)
        if not arr.size or np.isfinite(arr).all():
            continue
        bad_mask = np.isnan(arr) | (np.isposinf(arr) if allow_neginf else np.isinf(arr))
        if not bad_mask.any():
            continue  # only -inf, which is allowed
        bad = np.argwhere(bad_mask)[0]
        value = arr[tuple(bad)]
        kind = "NaN" if np.isnan(value) else ("+inf" if value > 0 else "-inf")
        where = ", ".join(str(int(i)) for i in bad)
        if allow_neginf:
            rule = "NaN and +inf are refused; -inf forbids an entry"
        else:
            rule = "NaN or infinite values are not accepted" + (
                " (-inf, a forbidden entry, is accepted by Chain only; use a large negative finite score)"
                if kind == "-inf" else "")
        raise example_error(index, f"{what} potentials contain {kind} ({label}[{where}] is {value}); {rule}")
