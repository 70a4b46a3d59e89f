"""Codecs: how a model, a loss or a structure is described in a saved model and rebuilt from it.

Each savable class registers one codec beside its definition (the built-in models at the bottom of their
modules, :class:`~structopt.torch.TorchModel` in ``structopt/torch/model.py``); a user's model registers its
own with :func:`register_codec`. :mod:`structopt.saved_model` writes ``{"type": name, "args": describe(obj)}``
and rebuilds only classes registered here, never from a name found in a file: the description read back must
hold exactly the codec's ``keys`` (a missing one would silently take a default, an unknown one would be a
file that is not ours) and the values are checked by the constructor (or ``build``) itself.

The codecs of each kind are a :class:`~structopt.registry.Registry` (``_CODECS[kind]``), like every table of
built-ins. A ground-floor module: it imports only :mod:`structopt.errors` and :mod:`structopt.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from structopt.errors import InvalidInputError
from structopt.registry import Registry

KINDS = ("model", "loss", "structure")


@dataclass(frozen=True)
class Codec:
    """How instances of exactly ``cls`` are described and rebuilt.

    Attributes
    ----------
    name : str
        The type name written into a file.
    cls : type
        The class (its subclasses are not this codec's: rebuilding one as the base would change it).
    describe : callable
        ``describe(obj) -> dict`` of JSON values, numpy arrays and nested descriptions.
    keys : tuple of str
        The keys ``describe`` writes, exactly.
    build : callable
        ``build(args) -> obj`` (default ``cls(**args)``).
    example : callable or None
        ``example(rng) -> (obj, inputs)``: a small instance and a few of its inputs, for the test that every
        registered model round-trips (models without one are checked from the test's own table).
    """

    name: str
    cls: type
    describe: Callable[[Any], dict[str, Any]]
    keys: tuple[str, ...]
    build: Callable[[dict[str, Any]], Any]
    example: Callable[[Any], tuple[Any, list[Any]]] | None = None


#: the codecs of each kind by type name, in registration order
_CODECS: dict[str, Registry[Codec]] = {kind: Registry(kind, unknown="unknown {kind} type {name!r} (known: {names})")
                                       for kind in KINDS}


def register_codec(name: str, cls: type, describe: Callable[[Any], dict[str, Any]], keys: tuple[str, ...], *,
                   kind: str = "model", build: Callable[[dict[str, Any]], Any] | None = None,
                   example: Callable[[Any], tuple[Any, list[Any]]] | None = None) -> Codec:
    """Declare how ``cls`` is saved (see :class:`Codec`); returns the codec.

    Parameters
    ----------
    name : str
        Unique per kind; re-registering the same class under its name replaces the entry (a reloaded
        module), another class under a taken name is refused.
    cls, describe, keys, build, example
        As in :class:`Codec`.
    kind : {"model", "loss", "structure"}
        A structure codec lets a model that takes any structure (:class:`~structopt.models.FeatureModel`,
        :class:`~structopt.torch.TorchModel`) describe the one it holds (:func:`describe_structure`).

    Examples
    --------
    >>> from structopt.models import MultiClassModel
    >>> codec = codecs("model")["MultiClassModel"]
    >>> codec.describe(MultiClassModel(n_features=3, n_classes=4))
    {'n_features': 3, 'n_classes': 4}
    """
    if kind not in KINDS:
        raise InvalidInputError(f"register_codec kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"register_codec needs a non-empty name, got {name!r}")
    if not isinstance(cls, type) or not callable(describe):
        raise InvalidInputError(f"register_codec({name!r}) needs a class and a describe callable")
    keys = tuple(keys)
    if not all(isinstance(key, str) for key in keys) or len(set(keys)) != len(keys):
        raise InvalidInputError(f"register_codec({name!r}) keys must be distinct strings, got {keys!r}")
    known = _CODECS[kind].get(name)
    if known is not None and (known.cls.__module__, known.cls.__qualname__) != (cls.__module__, cls.__qualname__):
        raise InvalidInputError(f"a {kind} codec named {name!r} is already registered for "
                                f"{known.cls.__module__}.{known.cls.__qualname__}")
    for other in _CODECS[kind].values():
        if other.cls is cls and other.name != name:
            raise InvalidInputError(f"{cls.__qualname__} already has the {kind} codec {other.name!r}")
    codec = Codec(name, cls, describe, keys, build if build is not None else (lambda args: cls(**args)), example)
    return _CODECS[kind].add(name, codec, replace=True)  # a clash was refused above, with the class named


def codecs(kind: str = "model") -> dict[str, Codec]:
    """The registered codecs of ``kind`` by name, in registration order (a copy)."""
    if kind not in KINDS:
        raise InvalidInputError(f"codec kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return _CODECS[kind].as_dict()


def exact_type(obj: Any, cls: type, what: str) -> None:
    """Refuse ``obj`` unless its type is exactly ``cls`` (a subclass may override anything: rebuilding it as
    the base class would change the predictions)."""
    if type(obj) is not cls:
        raise InvalidInputError(f"cannot save {what} of type {type(obj).__qualname__}: only the built-in "
                                f"{cls.__qualname__} itself can be described (subclasses are not rebuilt)")


def describe(obj: Any, kind: str) -> dict[str, Any]:
    """``{"type": name, "args": codec.describe(obj)}`` by the codec of exactly ``type(obj)``."""
    for name, codec in _CODECS[kind].items():
        if type(obj) is codec.cls:
            return {"type": name, "args": codec.describe(obj)}
    raise InvalidInputError(f"cannot save a {kind} of type {type(obj).__qualname__}: saved models hold only the "
                            f"{kind} types with a registered codec ({', '.join(_CODECS[kind]) or 'none'}), not their "
                            f"subclasses; a {kind} of your own registers one with "
                            f"structopt.register_codec(..., kind={kind!r})")


def build(description: Any, kind: str) -> Any:
    """The object a :func:`describe` description names, rebuilt by its registered codec only."""
    if not isinstance(description, dict) or not isinstance(description.get("args"), dict):
        raise InvalidInputError(f"the {kind} description is not a {{type, args}} object")
    name = description.get("type")
    codec = _CODECS[kind][name]  # an unknown name (or a non-string) is one error listing the known ones
    args = description["args"]
    missing = [key for key in codec.keys if key not in args]
    if missing:
        raise InvalidInputError(f"the {name} description lacks {', '.join(map(repr, missing))}")
    unknown = [repr(key) for key in args if key not in codec.keys]
    if unknown:
        raise InvalidInputError(f"the {name} description has unknown argument(s) {', '.join(unknown)} "
                                f"(a {name} is described by {', '.join(codec.keys)})")
    return codec.build(dict(args))


def describe_structure(structure: Any) -> dict[str, Any]:
    """A structure's ``{"type", "args"}`` description (for models that take any structure)."""
    return describe(structure, "structure")


def build_structure(description: Any) -> Any:
    """The structure :func:`describe_structure` described."""
    return build(description, "structure")


__all__ = ["KINDS", "Codec", "build", "build_structure", "codecs", "describe", "describe_structure", "exact_type",
           "register_codec"]
