"""Solvers: ``solver(problem, **options) -> Result(w, trace)``.

:func:`get_solver` maps a name to its function; modules are imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from structopt.errors import InvalidInputError
from structopt.solvers.base import Result

#: solver name -> (module, function)
SOLVERS: dict[str, tuple[str, str]] = {
    "bcfw": ("structopt.solvers.bcfw", "bcfw"),
    "fw": ("structopt.solvers.bcfw", "frank_wolfe"),
    "frank_wolfe": ("structopt.solvers.bcfw", "frank_wolfe"),
    "ssg": ("structopt.solvers.bcfw", "ssg"),
    "sgd": ("structopt.solvers.sgd", "sgd"),
    "svrg": ("structopt.solvers.svrg", "svrg"),
    "casimir": ("structopt.solvers.casimir", "casimir_svrg"),
    "casimir_svrg": ("structopt.solvers.casimir", "casimir_svrg"),
    "extragradient": ("structopt.solvers.extragradient", "dual_extragradient"),
}


def get_solver(name: str) -> Callable[..., Result]:
    """The solver function registered under ``name`` (see :data:`SOLVERS`)."""
    if name not in SOLVERS:
        raise InvalidInputError(f"unknown solver {name!r}; choose from {sorted(SOLVERS)}")
    module, function = SOLVERS[name]
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as error:
        raise InvalidInputError(f"solver {name!r} is not available in this installation: {error}") from error


__all__ = ["SOLVERS", "Result", "get_solver"]
