"""Arithmetic on potentials and statistics: the ground floor every layer may import.

Potentials and statistics share one NamedTuple type per structure (a tuple of numpy arrays), so
``theta + c`` and ``<theta, mu>`` are defined field by field; numpy broadcasting allows compact
potentials (e.g. a chain's shared (S, S) transition block against per-position (T-1, S, S)
statistics). This module imports nothing from structopt but its errors, so structures, models, the
problem, fused families and solvers all use the same functions without importing each other
(``structopt.structures.base`` re-exports them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from structopt.errors import InvalidInputError

Potentials = Any  # a NamedTuple of numpy arrays; each structure defines its own type


def inner(a: Potentials, b: Potentials) -> float:
    """Inner product ``<a, b>`` summed over fields (fields broadcast against each other)."""
    return float(sum(np.sum(x * y) for x, y in zip(a, b, strict=True)))


def add(a: Potentials, b: Potentials, scale: float = 1.0) -> Potentials:
    """Field-wise ``a + scale * b``."""
    return type(a)(*(x + scale * y for x, y in zip(a, b, strict=True)))


def scale(a: Potentials, factor: float) -> Potentials:
    """Field-wise ``factor * a``."""
    return type(a)(*(factor * x for x in a))


def flatten(p: Potentials) -> np.ndarray:
    """Concatenate the raveled fields into one float vector."""
    return np.concatenate([np.asarray(x, dtype=float).ravel() for x in p])


def unflatten(vector: np.ndarray, like: Potentials) -> Potentials:
    """Inverse of :func:`flatten`, taking the field shapes from ``like``."""
    fields, start = [], 0
    for x in like:
        size = int(np.size(x))
        fields.append(np.asarray(vector[start:start + size], dtype=float).reshape(np.shape(x)))
        start += size
    if start != len(vector):
        raise InvalidInputError(f"vector of length {len(vector)} does not match layout of size {start}")
    return type(like)(*fields)


def sq_norm(p: Potentials) -> float:
    """``||p||^2`` summed over fields."""
    return inner(p, p)


__all__ = ["Potentials", "add", "flatten", "inner", "narrowest_exact", "scale", "sq_norm", "unflatten"]


def narrowest_exact(values: np.ndarray) -> np.ndarray:
    """``values`` (float64) in the narrowest of uint8, uint16, float32 that holds every one exactly, else as
    they are.

    Statistics, counts and 0/1 costs are stored so (a uint8 entry is an eighth of a float64); a kernel
    reads an entry back into float64 arithmetic exactly, so its results are those on the float64 array.
    Integer types are taken only without negative zeros (they would come back as +0.0).
    """
    values = np.asarray(values, dtype=np.float64)
    if not values.size:
        return values
    if np.isfinite(values).all() and values.min() >= 0.0 and not np.signbit(values).any():
        top = values.max()
        for dtype in (np.uint8, np.uint16):
            if top <= np.iinfo(dtype).max:
                narrow = values.astype(dtype)
                if np.array_equal(narrow, values):
                    return narrow
                break  # not integers: a wider integer type would not hold them either
    narrow = values.astype(np.float32)
    return narrow if np.array_equal(narrow, values) else values
