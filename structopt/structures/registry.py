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
from structopt.registry import Registry, import_public_modules

T = TypeVar("T", bound=type)


def _load_builtins() -> None:
    # import every public module of structopt.structures: a new built-in registers by existing, with no
    # list to edit (those structopt.structures imports come first, in its order; others follow by name)
    import structopt.structures as package

    import_public_modules(package.__name__, package.__path__)


#: name -> structure class, in registration order (filled by the decorators of the modules it imports)
_REGISTRY: Registry[type] = Registry("structure", load=_load_builtins, normalize=lambda name: str(name).lower())


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

    def decorate(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, Structure)):
            raise InvalidInputError(f"register_structure({name!r}) needs a Structure subclass, got {cls!r}")
        if cls.example.__func__ is Structure.example.__func__:  # type: ignore[attr-defined]
            raise InvalidInputError(f"{cls.__name__} must define the classmethod example(rng, *, integer, **size) "
                                    "to be registered (a random small instance for validation)")
        _REGISTRY.add(name, cls)
        cls.registry_name = _REGISTRY.key(name)  # type: ignore[attr-defined]
        return cls

    return decorate


def registered_structures() -> dict[str, type]:
    """Name → class of every registered structure, in registration order (built-ins first)."""
    return _REGISTRY.as_dict()


def structure_class(name: str) -> type:
    """The registered class of ``name`` (case-insensitive), or an error listing the valid names."""
    return _REGISTRY[name]
