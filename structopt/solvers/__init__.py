"""Solvers: ``solver(problem, **options) -> Result(w, trace)``, one vocabulary of options for all
(see :mod:`structopt.solvers.base`).

Every solver is declared once, by its ``@solver`` decorator, which registers it in :data:`SOLVERS` (a
:class:`~structopt.registry.Registry`: its declared name, its function's name and its aliases); this package
imports every public solver module, so a new solver joins by existing. :func:`get_solver` maps a name to its
function.
"""

from __future__ import annotations

from collections.abc import Callable

# isort: off
# declaration order is the order of the generated option tables (README): these modules first, the others by name
from structopt.solvers.base import COMMON_OPTIONS, SOLVERS, Result
from structopt.solvers._checkpoints import load_checkpoint, save_checkpoint  # the file format network runs share too
from structopt.solvers import bcfw as _bcfw, sgd as _sgd, svrg as _svrg, casimir as _casimir  # noqa: F401
from structopt.solvers import extragradient as _extragradient, prox_linear as _prox_linear  # noqa: F401
from structopt.solvers.latent import latent_ssvm
from structopt.solvers.reg_path import PathPoint, regularization_path
from structopt.registry import import_public_modules
# isort: on

import_public_modules(__name__, __path__)


def get_solver(name: str) -> Callable[..., Result]:
    """The solver function registered under ``name`` (see :data:`SOLVERS`).

    Its ``options`` attribute maps each option name to its :class:`~structopt.solvers.base.Option`
    (default, check, ``description``), and ``needs`` lists the oracles it needs from the problem.
    """
    return SOLVERS[name]


def option_table() -> str:
    """The README's table of each solver's own options (beyond :data:`COMMON_OPTIONS`), from the declarations."""
    rows = ["| solver | its own options (default) |", "| --- | --- |"]
    for function in SOLVERS.unique():
        own = [f"`{o.name}={o.default!r}`" for o in function.options.values() if not o.common]
        rows.append(f"| `{function.solver_name}` | {', '.join(own)} |")
    return "\n".join(rows)


#: each declared solver under its function's own name (``structopt.solvers.bcfw``, ...), as the modules define them
_FUNCTIONS = {function.__name__: function for function in SOLVERS.unique()}
globals().update(_FUNCTIONS)

__all__ = ["COMMON_OPTIONS", "SOLVERS", "PathPoint", "Result", "get_solver", "latent_ssvm", "load_checkpoint",
           "option_table", "regularization_path", "save_checkpoint"]
__all__ += sorted(_FUNCTIONS)  # each declared solver (bcfw, frank_wolfe, ...)
