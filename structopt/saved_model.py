"""Trained models on disk: weights, the model's description, the task's preprocessing, no pickle.

A saved model is a sealed archive (:mod:`structopt.archive`: ``.npz`` of ``.npy`` members plus
one ``meta.json``, with a SHA-256 seal in the zip comment). It holds

- the weights ``w``;
- the model's description: its type, as a name from :data:`MODEL_TYPES`, and its constructor
  arguments (arrays such as a chain's transition masks travel as members). A
  :class:`~structopt.models.graph.GraphModel` keeps its whole configuration: feature counts, states,
  ``symmetric``, and its oracle's ``exact``, ``time_limit`` and ``warm_start`` (an AD3 warm start's
  iterates belong to the process and are not saved);
- optionally the loss it was trained with (a name from :data:`LOSS_TYPES` and its arguments);
- the task and its preprocessing (e.g. CoNLL's feature-hashing options and tag names, the
  horses' feature standardisation, a superpixel task's texton centres and boosted-tree node
  arrays), JSON and numeric arrays (any int, float or bool dtype, kept as it is; no object
  arrays) through :func:`structopt.archive.encode`;
- free-form ``info`` (solver, λ, passes, metrics) and the structopt version that wrote it.

Reading is refused with one line naming the file when the seal does not match (a flipped byte,
a truncation, an appended tail), when the file is another kind of archive or not an archive at
all, when it was written by a newer format, when a model or loss type is not one of the
registered ones, when its description lacks one of the arguments its type is described by or has
another, when the constructor refuses a value (a wrong type or range: the constructor's own check,
so a file is held to what ``GraphModel(...)`` accepts in Python), or when the weights do not fit
the model. Models and losses are rebuilt only from those registries, never from a name found in
the file.

Examples
--------
>>> import tempfile, numpy as np
>>> from structopt.models.graph import GraphModel
>>> model = GraphModel(n_node_features=2, n_edge_features=1, n_states=2, symmetric=True)
>>> path = tempfile.mkdtemp() + "/graph.npz"
>>> _ = save_model(path, model, np.ones(model.n_params), preprocessing={"centres": np.zeros((4, 2))})
>>> saved = load_model(path)
>>> saved.model.symmetric, saved.preprocessing["centres"].shape
(True, (4, 2))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.archive import decode, encode, read_archive, write_archive
from structopt.codecs import build, codecs, describe, register_codec
from structopt.errors import InvalidInputError, StructoptError
from structopt.hooks import has_hook
from structopt.losses import BoxLoss, Hamming, MatchingHamming, WeightedHamming

#: ``meta["format"]`` of a saved model, and the newest layout this code reads
FORMAT = "structopt saved model"
FORMAT_VERSION = 1


#: optional model types whose codec registers when their module is imported: a file naming one imports it
#: (``TorchModel``'s module imports torch, which ``import structopt`` never does)
OPTIONAL_MODEL_MODULES: dict[str, str] = {"TorchModel": "structopt.torch.model"}


def _builtin_codecs() -> None:
    """Import the modules whose import registers the built-in codecs (models register theirs beside them)."""
    import structopt.models
    import structopt.models.nonlinear  # noqa: F401


def _model_codecs() -> dict[str, Any]:
    _builtin_codecs()
    return codecs("model")


def _optional_model(description: Any) -> None:
    """Import the module of an optional model type a description names (its codec registers on import)."""
    name = description.get("type") if isinstance(description, dict) else None
    module = OPTIONAL_MODEL_MODULES.get(name) if isinstance(name, str) else None
    if module is not None and name not in codecs("model"):
        import importlib

        try:
            importlib.import_module(module)
        except ImportError as error:
            raise InvalidInputError(f"a {name} needs {module}, which cannot be imported ({error})") from None


# the losses' codecs
register_codec("Hamming", Hamming, lambda loss: {"normalize": loss.normalize}, ("normalize",), kind="loss")
register_codec("WeightedHamming", WeightedHamming, lambda loss: {"cost": loss.cost, "normalize": loss.normalize},
               ("cost", "normalize"), kind="loss")
register_codec("MatchingHamming", MatchingHamming, lambda loss: {"fp_cost": loss.fp_cost, "fn_cost": loss.fn_cost},
               ("fp_cost", "fn_cost"), kind="loss")
register_codec("BoxLoss", BoxLoss, lambda loss: {}, (), kind="loss")


class _RegisteredNames(SequenceABC):
    """The names of the registered codecs of one kind, read when used (a type registered later is in it)."""

    def __init__(self, kind: str):
        self._kind = kind

    def _names(self) -> tuple[str, ...]:
        if self._kind != "model":
            return tuple(codecs(self._kind))
        _builtin_codecs()  # the optional types are named without importing their dependency
        return tuple(dict.fromkeys([*codecs("model"), *OPTIONAL_MODEL_MODULES]))

    def __getitem__(self, index):  # type: ignore[override]
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


#: model types a saved model may name (the only ones :func:`load_model` rebuilds): the registered model codecs
MODEL_TYPES = _RegisteredNames("model")
#: loss types a saved model may name: the registered loss codecs
LOSS_TYPES = _RegisteredNames("loss")


def describe_model(model: Any) -> dict[str, Any]:
    """``{"type": name, "args": constructor keywords}`` of a model whose type has a registered codec
    (:data:`MODEL_TYPES`; :func:`~structopt.codecs.register_codec` for a model of your own).

    Raises
    ------
    InvalidInputError
        A type without a codec, a subclass, or a built-in model on a custom structure subclass.
    """
    _builtin_codecs()
    return describe(model, "model")


def build_model(description: dict[str, Any]) -> Any:
    """The model :func:`describe_model` described (only registered types)."""
    _builtin_codecs()
    _optional_model(description)
    return build(description, "model")


@dataclass
class SavedModel:
    """A trained model read back by :func:`load_model`.

    Attributes
    ----------
    model : Model
        The model, rebuilt from its description.
    w : ndarray
        Its weights (``model.n_params`` of them).
    loss : Loss or None
        The training loss, when it was saved.
    task : str or None
        The task the model was trained on (a ``structopt train`` task name), if any.
    preprocessing : dict
        What the task needs to turn new raw inputs into model inputs (task-specific).
    info : dict
        Training provenance (solver, λ, passes, metrics, ...).
    version : str
        The structopt version that wrote the file.
    path : str
        Where it was read from.
    """

    model: Any
    w: np.ndarray
    loss: Any = None
    task: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    path: str = ""

    def predict(self, X: Sequence[Any]) -> list[Any]:
        """The best output of each input: ``model.predict_batch(X, w)``
        (:meth:`~structopt.models.Model.predict_batch`), the code path of ``SSVMProblem.predict``
        and ``StructuredSVM.predict``. Outputs always, never relaxed points: a
        :class:`~structopt.models.GraphModel` gives MAP labels whatever its training oracle (AD3 with its
        certificate, then branch-and-bound within a budget while a gap remains; ``exact=True``: exact MAP)."""
        return self.model.predict_batch(X, self.w)


def save_model(path: str | os.PathLike, model: Any, w: np.ndarray, *, loss: Any = None, task: str | None = None,
               preprocessing: dict[str, Any] | None = None, info: dict[str, Any] | None = None) -> int:
    """Write a trained model as a sealed archive; return the file's size in bytes.

    Parameters
    ----------
    path : path
        The file (conventionally ``model.npz``); written atomically.
    model : Model
        A model of a type in :data:`MODEL_TYPES` (the class itself, on its own structure class;
        subclasses are refused since they would be rebuilt as the base class).
    w : ndarray
        Its weights, ``model.n_params`` finite numbers.
    loss : Loss, optional
        The training loss (a type in :data:`LOSS_TYPES`).
    task : str, optional
        The task name (``structopt predict`` reads it to find the task's input and output formats).
    preprocessing : dict, optional
        Task preprocessing: None, bool, int, float, str, numpy arrays (numeric; their dtype is
        kept), tuples, lists and dicts, nested. Object arrays are refused.
    info : dict, optional
        Provenance, of the same kinds of values.

    Raises
    ------
    InvalidInputError
        A model or loss that cannot be described, weights of the wrong size or not finite, or a
        value that an archive cannot hold.
    OutputError
        The file cannot be written.
    """
    from structopt import __version__

    description = describe_model(model)
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (model.n_params,):
        raise InvalidInputError(f"save_model: the model has {model.n_params} weights but w has shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise InvalidInputError("save_model: the weights are not all finite")
    body = {"model": description, "loss": None if loss is None else describe(loss, "loss"),
            "task": task, "preprocessing": preprocessing or {}, "info": info or {}}
    data, arrays = encode(body)
    arrays["w"] = w
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "structopt_version": __version__, "body": data}
    return write_archive(path, meta, arrays, "model", compress=True)


def _read(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The sealed archive of a saved model (its metadata and arrays), checked to be one this code reads."""
    meta, arrays = read_archive(path, "model")
    kind = meta.get("format")
    if kind != FORMAT:
        what = f"a {kind}" if isinstance(kind, str) else "another kind of structopt archive"
        raise InvalidInputError(f"model {path} is not a saved model ({what})")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InvalidInputError(f"model {path} has format version {version!r}; this structopt reads up to "
                                f"{FORMAT_VERSION} (upgrade structopt)")
    return meta, arrays


def read_header(path: str | os.PathLike) -> tuple[str | None, str | None]:
    """``(task, model type)`` of a saved model, read without building anything (``structopt predict`` imports
    the task's networks before :func:`load_model` rebuilds a network). Refused like :func:`load_model` when
    the file is not an intact saved model; a field of the wrong kind reads as None."""
    meta, _ = _read(path)
    body = meta.get("body")
    fields = body.get("$dict") if isinstance(body, dict) else None
    if not isinstance(fields, dict):
        return None, None
    task, model = fields.get("task"), fields.get("model")
    model = model.get("$dict") if isinstance(model, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    return (task if isinstance(task, str) else None), (kind if isinstance(kind, str) else None)


def load_model(path: str | os.PathLike) -> SavedModel:
    """Read a model written by :func:`save_model` (or ``structopt train``, or ``StructuredSVM.save``).

    Raises
    ------
    DataNotFoundError
        No such file.
    InvalidInputError
        One line naming the file: not a structopt archive, a failed checksum (tampered, truncated,
        corrupted), another kind of structopt archive (e.g. a checkpoint), a newer format, an
        unknown model or loss type, a description with a missing or unknown argument or a value
        its constructor refuses, or weights that do not fit the model.
    """
    meta, arrays = _read(path)
    try:
        body = decode(meta["body"], arrays)
        model = build_model(body["model"])
        loss = None if body["loss"] is None else build(body["loss"], "loss")
        w = arrays["w"]
        task, preprocessing, info = body["task"], body["preprocessing"], body["info"]
    except StructoptError as error:
        raise InvalidInputError(f"model {path}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InvalidInputError(f"model {path} is malformed ({type(error).__name__}: {error})") from None
    if w.dtype != np.float64 or w.shape != (model.n_params,) or not np.all(np.isfinite(w)):
        raise InvalidInputError(f"model {path}: its weights (shape {w.shape}, dtype {w.dtype}) do not fit the model "
                                f"({model.n_params} finite float64 weights)")
    if has_hook(model, "set_weights", "model"):
        model.set_weights(w)  # a network's module holds the saved weights, as it did when saved
    if (task is not None and not isinstance(task, str)) or not isinstance(preprocessing, dict):
        raise InvalidInputError(f"model {path} is malformed (task or preprocessing of the wrong kind)")
    return SavedModel(model, w, loss, task, preprocessing, info if isinstance(info, dict) else {},
                      str(meta.get("structopt_version", "")), str(path))


__all__ = ["LOSS_TYPES", "MODEL_TYPES", "SavedModel", "build_model", "describe_model", "load_model", "read_header",
           "register_codec", "save_model"]
