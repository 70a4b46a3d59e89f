"""Linear joint feature maps, each paired with one structure.

This package imports every public model module and exports the public classes each one defines (a module
that declares its own ``__all__``, such as :mod:`structopt.models.nonlinear`, is its own namespace): a new
built-in model joins the package and ``import structopt`` by existing, with no list to edit.
"""

from __future__ import annotations

import importlib
import inspect

from structopt.registry import import_public_modules


def _defined_classes() -> dict[str, type]:
    """The public classes defined by each public module without an ``__all__``, by name, in module order."""
    names: dict[str, type] = {}
    for module_name in import_public_modules(__name__, __path__):
        module = importlib.import_module(f"{__name__}.{module_name}")
        if hasattr(module, "__all__"):
            continue
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_"):
                names[name] = obj
    return names


globals().update(_defined_classes())

__all__ = sorted(_defined_classes())
