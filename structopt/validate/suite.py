"""The built-in suite (``structopt check``): :func:`check_structure` on random small instances of
every registered structure (:mod:`structopt.structures.registry`); nothing here names a structure."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.structures.base import Potentials, Structure
from structopt.structures.registry import registered_structures, structure_class
from structopt.validate.report import SuiteReport
from structopt.validate.structure import check_structure


def builtin_structures() -> tuple[str, ...]:
    """Names of the registered structures, in check order (``BUILTIN_STRUCTURES``)."""
    return tuple(registered_structures())


def builtin_variants() -> dict[str, tuple[dict[str, Any], ...]]:
    """Each registered structure's ``example_variants`` (``BUILTIN_VARIANTS``)."""
    return {name: tuple(cls.example_variants) for name, cls in registered_structures().items()}


def random_instance(structure_name: str, rng: np.random.Generator | int | None = None, *,
                    integer: bool = True, **size: Any) -> tuple[Structure, Potentials]:
    """A random small instance of a registered structure, for tests and :func:`check_structure`.

    Parameters
    ----------
    structure_name : str
        A name of :data:`BUILTIN_STRUCTURES` (case-insensitive).
    rng : Generator or seed
    integer : bool
        Integer potentials in [-3, 3] (ties) or uniform floats.
    **size
        The structure's size keywords: those of its ``example`` classmethod (e.g. ``Chain.example``:
        ``length``, ``n_states``, ``shared``).
    """
    names = builtin_structures()
    if str(structure_name).lower() not in names:
        raise InvalidInputError(f"no random instance for structure {structure_name!r}; "
                                f"use one of {', '.join(repr(n) for n in names)}")
    cls = structure_class(structure_name)
    accepted = set(inspect.signature(cls.example).parameters) - {"rng", "integer"}
    unknown = sorted(set(size) - accepted)
    if unknown:
        raise InvalidInputError(f"unknown size arguments for {str(structure_name).lower()}: {unknown} "
                                f"(accepted: {sorted(accepted)})")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return cls.example(rng, integer=integer, **size)


def _variant_label(size: dict[str, Any], integer: bool) -> str:
    return ", ".join(f"{key}={value}" for key, value in size.items()) + (", integer" if integer else ", float")


def check_builtin_structures(names: Sequence[str] | None = None, seed: int = 0, n_instances: int = 2,
                             k: int = 5) -> SuiteReport:
    """Run :func:`check_structure` on random small instances of the registered structures.

    Each structure is checked on every size variant it declares (``example_variants``: chains of
    length 1 with both pairwise layouts, square and rectangular matchings, with and without
    unmatched nodes, ...), ``n_instances`` random instances per variant, alternating integer
    potentials in [-3, 3] (many ties) and float potentials. This is ``structopt check [STRUCTURE ...]``.

    Parameters
    ----------
    names : sequence of str, optional
        Structures among :data:`BUILTIN_STRUCTURES` (case-insensitive); all of them by default.
    seed : int
        Seed of the instances and of the random points used by ``project`` / ``prox_entropy``.
    n_instances : int
        Random instances per size variant (the first integer, then float, alternating).
    k : int
        K for the top-K oracle.

    Returns
    -------
    SuiteReport
        ``.table()`` has one row per (structure, oracle); ``.ok`` is False if any instance failed.

    Raises
    ------
    InvalidInputError
        For an unknown structure name (the message lists the valid ones) or ``n_instances < 1``.
    """
    if isinstance(names, str):
        names = [names]
    available = builtin_structures()
    chosen = list(available) if not names else []
    for name in names or ():
        key = str(name).lower()
        if key not in available:
            raise InvalidInputError(f"unknown structure {name!r}; valid names: {', '.join(available)}")
        if key not in chosen:
            chosen.append(key)
    if int(n_instances) != n_instances or int(n_instances) < 1:
        raise InvalidInputError(f"n_instances must be a positive integer, got {n_instances!r}")
    rng = np.random.default_rng(seed)
    suite = SuiteReport()
    start = time.perf_counter()
    for name in chosen:
        cls = structure_class(name)
        for size in cls.example_variants:
            for i in range(int(n_instances)):
                integer = i % 2 == 0
                structure, theta = cls.example(rng, integer=integer, **size)
                report = check_structure(structure, theta, k=k, random_state=rng)
                suite.checks.append((name, _variant_label(size, integer), report))
    suite.seconds = time.perf_counter() - start
    return suite
