"""Solvers: ``solver(problem, **options) -> Result(w, trace)``, one vocabulary of options for all
(see :mod:`structopt.solvers.base`).

:func:`get_solver` maps a name (short or the function's own) to its function.
"""

from __future__ import annotations

from collections.abc import Callable

from structopt.errors import InvalidInputError
from structopt.solvers.base import COMMON_OPTIONS, Result
from structopt.solvers.bcfw import bcfw, frank_wolfe, ssg
from structopt.solvers.casimir import casimir_svrg
from structopt.solvers.extragradient import dual_extragradient
from structopt.solvers.latent import latent_ssvm
from structopt.solvers.prox_linear import prox_linear
from structopt.solvers.reg_path import PathPoint, regularization_path
from structopt.solvers.sgd import sgd
from structopt.solvers.sgd_nonconvex import sgd_nonconvex
from structopt.solvers.svrg import svrg

#: solver name -> function (short names and the functions' own names)
SOLVERS: dict[str, Callable[..., Result]] = {
    "bcfw": bcfw, "fw": frank_wolfe, "frank_wolfe": frank_wolfe, "ssg": ssg, "sgd": sgd, "svrg": svrg,
    "casimir": casimir_svrg, "casimir_svrg": casimir_svrg, "extragradient": dual_extragradient,
    "dual_extragradient": dual_extragradient,
    "prox_linear": prox_linear, "sgd_nonconvex": sgd_nonconvex,
}


def get_solver(name: str) -> Callable[..., Result]:
    """The solver function registered under ``name`` (see :data:`SOLVERS`).

    Its ``options`` attribute maps each option name to its :class:`~structopt.solvers.base.Option`
    (default, check, ``description``), and ``needs`` lists the oracles it needs from the problem.
    """
    if not isinstance(name, str) or name not in SOLVERS:
        raise InvalidInputError(f"unknown solver {name!r}; choose from {', '.join(sorted(SOLVERS))}")
    return SOLVERS[name]


def option_table() -> str:
    """The README's table of each solver's own options (beyond :data:`COMMON_OPTIONS`), from the declarations."""
    rows = ["| solver | its own options (default) |", "| --- | --- |"]
    for function in dict.fromkeys(SOLVERS.values()):
        own = [f"`{o.name}={o.default!r}`" for o in function.options.values() if not o.common]
        rows.append(f"| `{function.solver_name}` | {', '.join(own)} |")
    return "\n".join(rows)


__all__ = ["COMMON_OPTIONS", "SOLVERS", "PathPoint", "Result", "bcfw", "casimir_svrg", "dual_extragradient",
           "frank_wolfe", "get_solver", "latent_ssvm", "option_table", "prox_linear", "regularization_path", "sgd",
           "sgd_nonconvex", "ssg", "svrg"]
