"""Safe files that structopt writes and reads back: numpy arrays and JSON, sealed by a checksum.

Anything a user reads back (a checkpoint, a saved model) is untrusted input. An archive is a plain
``.npz`` zip (``numpy.load`` opens it) whose members are ``.npy`` arrays, loaded with
``allow_pickle=False``, and one ``meta.json``. The zip comment holds ``structopt-sha256:`` and the
SHA-256 of every byte before it, so any change to the file — a flipped byte, a truncation, an
appended tail — is refused before a single member is parsed. Nothing in an archive is ever
unpickled or executed.

Python values that are not plain JSON (arrays, numpy scalars, tuples, random generators, the
solvers' state objects) travel through :func:`encode` / :func:`decode`: arrays become members,
everything else becomes tagged JSON, and objects are rebuilt only for classes registered with
:func:`state_type` — never from a name found in the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from structopt.errors import InvalidInputError, OutputError
from structopt.registry import Registry

#: the zip comment: this prefix and 64 hex digits of the SHA-256 of all bytes before them
SEAL_PREFIX = b"structopt-sha256:"
_SEAL_LENGTH = len(SEAL_PREFIX) + 64
_META = "meta.json"
#: the deepest nesting of lists and objects an archive's metadata may have: what structopt writes stays
#: below 20 levels, and the decoders that walk it recurse (a deeper file would hit Python's recursion limit)
MAX_META_DEPTH = 100

T = TypeVar("T", bound=type)

#: classes whose instances may travel in an archive, by the name written into it (their qualified name)
_STATE_TYPES: Registry[type] = Registry("state type", error=KeyError,  # a KeyError: a file naming another class
                                        unknown="{name!r} is not a registered {kind}")  # is refused as corrupt
#: numpy bit generators a random Generator may be rebuilt with
_BIT_GENERATORS: dict[str, Callable[[], np.random.BitGenerator]] = {
    "PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
    "Philox": np.random.Philox, "SFC64": np.random.SFC64}


def state_type(cls: T) -> T:
    """Class decorator: instances may be stored by :func:`encode` and rebuilt by :func:`decode`.

    The instance's ``__getstate__()`` is stored (attributes that are the problem or its model are
    stored as references and re-attached on loading) and restored with ``__setstate__`` or by
    updating ``__dict__`` of an instance made without calling ``__init__``.
    """
    return _STATE_TYPES.register(cls.__qualname__)(cls)


# --------------------------------------------------------------------------- encoding
class _Encoder:
    def __init__(self, refs: dict[str, Any]):
        self.refs = refs
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, value: np.ndarray) -> str:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = value
        return name

    def __call__(self, value: Any, where: str) -> Any:
        for name, ref in self.refs.items():
            if value is ref:
                return {"$ref": name}
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise InvalidInputError(f"cannot store {where}: an array of Python objects")
            return {"$array": self.array(value)}
        if isinstance(value, np.generic):
            return {"$scalar": self.array(np.asarray(value))}
        if isinstance(value, tuple):
            return {"$tuple": [self(item, f"{where}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, list):
            return [self(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            if all(isinstance(key, str) for key in value):
                return {"$dict": {key: self(item, f"{where}[{key!r}]") for key, item in value.items()}}
            return {"$items": [[self(key, f"{where} key"), self(item, f"{where}[{key!r}]")]
                               for key, item in value.items()]}
        if isinstance(value, np.random.Generator):
            bit_generator = type(value.bit_generator).__name__
            if bit_generator not in _BIT_GENERATORS:
                raise InvalidInputError(f"cannot store {where}: a Generator on {bit_generator}")
            return {"$rng": self(value.bit_generator.state, f"{where} state")}
        name = type(value).__qualname__
        if _STATE_TYPES.get(name) is type(value):
            return {"$object": name, "state": self(value.__getstate__(), f"{where}.{name}")}
        raise InvalidInputError(f"cannot store {where}: values of type {type(value).__module__}.{name} "
                                "are not supported in structopt archives")


def encode(value: Any, refs: dict[str, Any] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
    """Split ``value`` into JSON-able data and the arrays it refers to.

    Parameters
    ----------
    value : object
        None, bool, int, float, str, numpy arrays (not of objects) and scalars, tuples, lists,
        dicts, numpy random Generators and instances of :func:`state_type` classes, nested.
    refs : dict, optional
        Objects stored by name instead of by value (e.g. ``{"model": problem.model}``).

    Returns
    -------
    data : JSON-able object
    arrays : dict of str to ndarray
    """
    encoder = _Encoder(refs or {})
    return encoder(value, "value"), encoder.arrays


def decode(data: Any, arrays: dict[str, np.ndarray], refs: dict[str, Any] | None = None) -> Any:
    """Inverse of :func:`encode` (``refs`` supplies the objects stored by name)."""
    refs = refs or {}

    def walk(item: Any) -> Any:
        if isinstance(item, list):
            return [walk(x) for x in item]
        if not isinstance(item, dict) or not item:
            return item
        tag = next(iter(item))  # every encoded dict starts with its tag
        body = item[tag]
        if tag == "$dict":
            return {key: walk(x) for key, x in body.items()}
        if tag == "$array":
            return arrays[body]
        if tag == "$scalar":
            return arrays[body][()]
        if tag == "$tuple":
            return tuple(walk(x) for x in body)
        if tag == "$items":
            return {_hashable(walk(key)): walk(x) for key, x in body}
        if tag == "$ref":
            if body not in refs:
                raise KeyError(f"reference {body!r}")
            return refs[body]
        if tag == "$rng":
            state = walk(body)
            bit_generator = _BIT_GENERATORS[state["bit_generator"]]()
            bit_generator.state = state
            return np.random.Generator(bit_generator)
        if tag == "$object":
            cls = _STATE_TYPES[body]
            obj = cls.__new__(cls)
            state = walk(item["state"])
            if hasattr(obj, "__setstate__"):
                obj.__setstate__(state)
            else:
                obj.__dict__.update(state)
            return obj
        raise KeyError(f"unknown tag {tag!r}")

    return walk(data)


def _hashable(key: Any) -> Any:
    return key.item() if isinstance(key, np.ndarray) and key.ndim == 0 else key


# --------------------------------------------------------------------------- files
def _remove_quietly(path: Path) -> None:
    # the temporary file of a failed write; a path that cannot exist (its parent is a file) is no error
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def write_archive(path: str | os.PathLike, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                  what: str = "file", compress: bool = False) -> int:
    """Atomically write ``meta`` (JSON) and ``arrays`` as a sealed archive; return its size in bytes.

    The file is written beside ``path`` and renamed over it, so a kill at any moment leaves the
    previous file or the new one, never a torn one. ``what`` names the file in messages;
    ``compress`` deflates the members (smaller, slower).

    Raises
    ------
    OutputError
        The file cannot be written.
    """
    path = Path(path)
    buffer = io.BytesIO()
    compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", compression=compression, allowZip64=True) as zf:
        zf.writestr(_META, json.dumps(meta, separators=(",", ":")))
        for name, array in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
        zf.comment = SEAL_PREFIX + b"0" * 64
    view = buffer.getbuffer()
    body = view[: len(view) - _SEAL_LENGTH]
    seal = SEAL_PREFIX + hashlib.sha256(body).hexdigest().encode()
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.write(seal)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as error:
        _remove_quietly(tmp)
        raise OutputError(f"cannot write {what} {path}: {error.strerror or error}") from error
    except BaseException:  # Ctrl-C mid-write: leave no temporary file behind
        _remove_quietly(tmp)
        raise
    finally:
        del body, view
    return buffer.getbuffer().nbytes


def _depth(value: Any) -> int:
    """The nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            level += 1
            deepest = max(deepest, level)
            if level > MAX_META_DEPTH:  # no need to look further
                return level
            stack.extend((x, level) for x in item)
    return deepest


def read_archive(path: str | os.PathLike, what: str = "file") -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a sealed archive written by :func:`write_archive`: ``(meta, arrays)``.

    The checksum is verified before anything is parsed; arrays are loaded with
    ``allow_pickle=False``.

    Parameters
    ----------
    path : str or PathLike
    what : str
        What the file is, for messages (``"checkpoint"``, ``"model"``).

    Raises
    ------
    DataNotFoundError
        No such file.
    InvalidInputError
        One line naming the file: not a structopt archive (e.g. an old pickle checkpoint), or its
        checksum does not match (corrupted, truncated or edited).
    """
    from structopt.errors import DataNotFoundError

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataNotFoundError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{what} {path} is a directory, not a file") from None
    except OSError as error:
        raise InvalidInputError(f"cannot read {what} {path}: {error.strerror or error}") from None
    seal = data[-_SEAL_LENGTH:]
    if len(data) < _SEAL_LENGTH or not seal.startswith(SEAL_PREFIX):
        if data[:1] == b"\x80":
            raise InvalidInputError(f"{what} {path} is in the old pickle format, which structopt no longer reads "
                                    "(loading it could run code); delete it and start afresh")
        raise InvalidInputError(f"{what} {path} is not a structopt archive, or it is truncated or corrupted")
    if hashlib.sha256(memoryview(data)[: len(data) - _SEAL_LENGTH]).hexdigest().encode() != seal[len(SEAL_PREFIX):]:
        raise InvalidInputError(f"{what} {path} fails its checksum: it is corrupted, truncated or was edited")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            meta = json.loads(zf.read(_META))
            arrays = {}
            for name in zf.namelist():
                if name.endswith(".npy"):
                    with zf.open(name) as member:
                        arrays[name[:-4]] = np.lib.format.read_array(member, allow_pickle=False)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as error:
        # a valid seal over a malformed body: written by something other than structopt
        raise InvalidInputError(f"{what} {path} is malformed ({error})") from None
    except RecursionError:  # json's decoder recurses per nesting level
        raise InvalidInputError(f"{what} {path} is malformed (its metadata nests deeper than structopt writes, "
                                f"more than {MAX_META_DEPTH} levels)") from None
    if _depth(meta) > MAX_META_DEPTH:
        raise InvalidInputError(f"{what} {path} is malformed (its metadata nests deeper than structopt writes, "
                                f"more than {MAX_META_DEPTH} levels)")
    if not isinstance(meta, dict):
        raise InvalidInputError(f"{what} {path} is malformed (its metadata is not a JSON object)")
    return meta, arrays
