"""One registry type for every table of named built-ins a user can extend.

A :class:`Registry` holds named entries in registration order (the order listings, ``structopt check`` and the
generated docs follow), registers through a decorator, refuses a name taken by another entry, and answers an
unknown name with one error listing the valid ones. A registry may *autoload*: a ``load`` function run once
before the first read imports the modules whose decorators fill it, so a new built-in registers by existing.

Every registry of built-ins is one of these: structures (``structures.registry``), solvers
(``solvers.SOLVERS``), fused kernel families (``fused``), archive state types (``archive.state_type``), hooks
(``hooks.HOOKS``), oracle checks (``validate.oracles.ORACLE_CHECKS``), command-line tasks
(``cli_registry.TASKS``) and the public names of ``import structopt`` (``structopt.__init__``).

This module is on the ground floor: it imports only :mod:`structopt.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from structopt.errors import InvalidInputError

V = TypeVar("V")
T = TypeVar("T")


def _describe(value: Any) -> str:
    return getattr(value, "__name__", None) or getattr(type(value), "__name__", repr(value))


def _same_definition(old: Any, new: Any) -> bool:
    """A reload defines a class or function anew under the same qualified name: that is no clash."""
    return getattr(old, "__qualname__", object()) == getattr(new, "__qualname__", None) and \
        getattr(old, "__module__", None) == getattr(new, "__module__", None)


class Registry(Generic[V]):
    """Named entries in registration order, with a decorator, a clash check and a lookup error.

    Parameters
    ----------
    kind : str
        What an entry is (``"structure"``, ``"solver"``, ...), used in error messages.
    load : callable, optional
        Run once before the first read (not before a registration): imports the modules that register the
        built-ins. Reads during loading see what is registered so far.
    normalize : callable, optional
        Maps a name to its key (e.g. ``str.lower`` for case-insensitive names). Default: the name itself.
    unknown : str
        The lookup error's message, formatted with ``kind``, ``name`` (the name asked for) and ``names`` (the
        valid names joined by ", ").
    sort_names : bool
        List the valid names sorted in the lookup error (default: in registration order).
    error : type
        The exception class of a failed lookup and of a clash (default :class:`InvalidInputError`).
    label : callable, optional
        How a key is written in messages (default ``str``; a registry keyed by classes lists their names).
    """

    def __init__(self, kind: str, *, load: Callable[[], None] | None = None,
                 normalize: Callable[[Any], Hashable] | None = None,
                 unknown: str = "unknown {kind} {name!r}; valid names: {names}", sort_names: bool = False,
                 error: type[Exception] = InvalidInputError, label: Callable[[Any], str] = str):
        self.kind = kind
        self._load = load
        self._loaded = load is None
        self._normalize = normalize
        self._unknown = unknown
        self._sort_names = sort_names
        self._error = error
        self._label = label
        self._entries: dict[Hashable, V] = {}

    # ------------------------------------------------------------------ registration
    def key(self, name: Any) -> Hashable:
        """The key ``name`` is stored under."""
        return self._normalize(name) if self._normalize is not None else name

    def add(self, name: Any, value: V, *, replace: bool = False) -> V:
        """Register ``value`` as ``name`` and return it.

        A name already registered to another entry is refused (:attr:`error`, naming the holder) unless
        ``replace``; the same definition registered again (a module reloaded) replaces the old one.
        """
        key = self.key(name)
        taken = self._entries.get(key)
        if taken is not None and not replace and taken is not value and not _same_definition(taken, value):
            raise self._error(f"{self.kind} name {self._label(key)!r} is already registered to {_describe(taken)}")
        self._entries[key] = value
        return value

    def register(self, name: Any = None, *, aliases: tuple[Any, ...] = ()) -> Callable[[T], T]:
        """Decorator registering the decorated object as ``name`` (default: its ``__name__``) and ``aliases``."""
        def decorate(value: T) -> T:
            for each in (value.__name__ if name is None else name, *aliases):  # type: ignore[attr-defined]
                self.add(each, value)  # type: ignore[arg-type]
            return value
        return decorate

    def remove(self, name: Any) -> None:
        """Unregister ``name`` (no error when absent)."""
        self._entries.pop(self.key(name), None)

    # ------------------------------------------------------------------ reading
    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True  # first: reads during loading see the entries registered so far
            assert self._load is not None
            self._load()

    def names(self) -> list[Any]:
        """The registered names (keys), in registration order."""
        self._ensure_loaded()
        return list(self._entries)

    def values(self) -> list[V]:
        """The registered entries, in registration order (an entry under several names appears once per name)."""
        self._ensure_loaded()
        return list(self._entries.values())

    def items(self) -> list[tuple[Any, V]]:
        """``(name, entry)`` pairs in registration order."""
        self._ensure_loaded()
        return list(self._entries.items())

    def keys(self) -> list[Any]:
        """The same as :meth:`names` (so ``dict(registry)`` and ``{**registry}`` work)."""
        return self.names()

    def unique(self) -> list[V]:
        """Each entry once, in the order of its first name."""
        return list({id(v): v for v in self.values()}.values())

    def as_dict(self) -> dict[Any, V]:
        """A plain dict copy of the entries, in registration order."""
        self._ensure_loaded()
        return dict(self._entries)

    def lookup_error(self, name: Any) -> Exception:
        """The error of a lookup of ``name`` that failed: it lists the valid names."""
        names = [self._label(k) for k in self.names()]
        if self._sort_names:
            names = sorted(names)
        return self._error(self._unknown.format(kind=self.kind, name=name, names=", ".join(names)))

    def __getitem__(self, name: Any) -> V:
        self._ensure_loaded()
        try:
            return self._entries[self.key(name)]
        except (KeyError, TypeError, AttributeError):
            raise self.lookup_error(name) from None

    def get(self, name: Any, default: Any = None) -> Any:
        """The entry of ``name``, or ``default``."""
        self._ensure_loaded()
        try:
            return self._entries.get(self.key(name), default)
        except (TypeError, AttributeError):
            return default

    def __contains__(self, name: object) -> bool:
        if not self._loaded:
            self._ensure_loaded()
        try:  # hooks.has_hook asks this per oracle call: no more than a dict lookup when names are keys
            return (name if self._normalize is None else self._normalize(name)) in self._entries
        except (TypeError, AttributeError):
            return False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.names())

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._entries)

    def __bool__(self) -> bool:
        return len(self) > 0

    # item assignment and deletion: for tests that patch an entry (``monkeypatch.setitem``)
    def __setitem__(self, name: Any, value: V) -> None:
        self._ensure_loaded()
        self._entries[self.key(name)] = value

    def __delitem__(self, name: Any) -> None:
        self._ensure_loaded()
        del self._entries[self.key(name)]

    def copy(self) -> Registry[V]:
        """A registry with the same settings and entries (loaded first), independent of this one."""
        self._ensure_loaded()
        other: Registry[V] = Registry(self.kind, normalize=self._normalize, unknown=self._unknown,
                                      sort_names=self._sort_names, error=self._error, label=self._label)
        other._entries = dict(self._entries)
        return other

    def __repr__(self) -> str:
        shown = ", ".join(self._label(k) for k in self._entries)
        return f"Registry({self.kind!r}: {shown}{'' if self._loaded else ' (not loaded)'})"


def import_public_modules(package: str, path: Any) -> list[str]:
    """Import every public module (no leading underscore) of ``package`` (whose ``__path__`` is ``path``), in
    the order of their names, and return their names: the autoload of a registry whose entries register
    themselves on import, so a new built-in joins by existing, with no list to edit."""
    import importlib
    import pkgutil

    names = sorted(info.name for info in pkgutil.iter_modules(path) if not info.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names


__all__ = ["Registry", "import_public_modules"]
