"""The structure registry: every structure that ``structopt check`` validates, by name.

A structure class joins with :func:`register_structure` and brings its own random small instances
(:meth:`~structopt.structures.base.Structure.example` and ``example_variants``), so validation and
the CLI iterate the registry instead of naming structures. Every public module of
:mod:`structopt.structures` is imported before the registry is read, so a new built-in only needs
its decorator. Registration order is the order of ``structopt check`` (and of the seeded random
instances it draws): the order of the imports in :mod:`structopt.structures`, then module names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from structopt.errors import InvalidInputError

_REGISTRY: dict[str, type] = {}

T = TypeVar("T", bound=type)


def register_structure(name: str) -> Callable[[T], T]:
    """Class decorator registering a :class:`~structopt.structures.base.Structure` subclass as ``name``.

    The class must implement the ``example`` classmethod (a random small instance); ``example_variants``
    lists the size keywords of the instances :func:`structopt.validate.check_builtin_structures` checks.

    Raises
    ------
    InvalidInputError
        For a name already taken by another class, a class that is not a Structure, or one without
        its own ``example``.
    """
    from structopt.structures.base import Structure

    key = str(name).lower()

    def decorate(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, Structure)):
            raise InvalidInputError(f"register_structure({name!r}) needs a Structure subclass, got {cls!r}")
        if cls.example.__func__ is Structure.example.__func__:  # type: ignore[attr-defined]
            raise InvalidInputError(f"{cls.__name__} must define the classmethod example(rng, *, integer, **size) "
                                    "to be registered (a random small instance for validation)")
        taken = _REGISTRY.get(key)
        if taken is not None and taken.__qualname__ != cls.__qualname__:  # re-registering (a reload) is fine
            raise InvalidInputError(f"structure name {key!r} is already registered to {taken.__name__}")
        _REGISTRY[key] = cls
        cls.registry_name = key  # type: ignore[attr-defined]
        return cls

    return decorate


_builtins_loaded = False


def _load_builtins() -> None:
    # import every public module of structopt.structures: a new built-in registers by existing, with no
    # list to edit (those structopt.structures imports come first, in its order; others follow by name)
    global _builtins_loaded
    if _builtins_loaded:
        return
    import importlib
    import pkgutil

    import structopt.structures as package

    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    _builtins_loaded = True


def registered_structures() -> dict[str, type]:
    """Name → class of every registered structure, in registration order (built-ins first)."""
    _load_builtins()
    return dict(_REGISTRY)


def structure_class(name: str) -> type:
    """The registered class of ``name`` (case-insensitive), or an error listing the valid names."""
    registry = registered_structures()
    key = str(name).lower()
    if key not in registry:
        raise InvalidInputError(f"unknown structure {name!r}; valid names: {', '.join(registry)}")
    return registry[key]
