"""Validation: every oracle of a structure against enumeration and its LP description, models'
linear maps against their adjoints, and the suite of registered structures (``structopt check``).

- :func:`check_structure` (:mod:`~structopt.validate.structure`) runs the table of per-oracle checks
  :data:`~structopt.validate.oracles.ORACLE_CHECKS` on one instance;
- :func:`check_builtin_structures` (:mod:`~structopt.validate.suite`) runs it on the random
  instances every registered structure brings (:mod:`structopt.structures.registry`);
- :func:`check_model` (:mod:`~structopt.validate.model`) checks a model;
- every outcome is a :class:`~structopt.validate.report.Report`.

``BUILTIN_STRUCTURES`` and ``BUILTIN_VARIANTS`` are read from the registry when accessed.
"""

from __future__ import annotations

from typing import Any

from structopt.structures.base import random_like
from structopt.validate.model import check_model
from structopt.validate.report import CheckReport, CheckRow, ModelCheckReport, ModelCheckRow, SuiteReport, SuiteRow
from structopt.validate.structure import check_structure
from structopt.validate.suite import builtin_structures, builtin_variants, check_builtin_structures, random_instance

__all__ = [
    "BUILTIN_STRUCTURES", "BUILTIN_VARIANTS", "CheckReport", "CheckRow", "ModelCheckReport", "ModelCheckRow",
    "SuiteReport", "SuiteRow", "check_builtin_structures", "check_model", "check_structure", "random_instance",
    "random_like",
]


def __getattr__(name: str) -> Any:
    # live views of the registry, so that a structure registered after import is listed too
    if name == "BUILTIN_STRUCTURES":
        return builtin_structures()
    if name == "BUILTIN_VARIANTS":
        return builtin_variants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
