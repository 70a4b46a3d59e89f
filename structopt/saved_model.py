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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.archive import decode, encode, read_archive, write_archive
from structopt.errors import InvalidInputError, StructoptError

#: ``meta["format"]`` of a saved model, and the newest layout this code reads
FORMAT = "structopt saved model"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class _Codec:
    """How one class is described (``describe(obj) -> kwargs``) and rebuilt (``cls(**kwargs)``).

    ``keys`` are the keywords ``describe`` writes: a description read back must hold exactly
    these (a missing one would silently take the constructor's default, an unknown one would be a
    file that is not ours); their values are checked by the constructor itself.
    """

    cls: type
    describe: Callable[[Any], dict[str, Any]]
    keys: tuple[str, ...]


def _plain(obj: Any, cls: type, what: str) -> None:
    # a subclass may override anything: rebuilding it as the base class would change the predictions
    if type(obj) is not cls:
        raise InvalidInputError(f"cannot save {what} of type {type(obj).__qualname__}: only the built-in "
                                f"{cls.__qualname__} itself can be described (subclasses are not rebuilt)")


def _chain(model: Any) -> dict[str, Any]:
    from structopt.structures.chain import Chain

    _plain(model.structure, Chain, "a ChainModel whose structure is")
    s = model.structure
    return {"n_features": model.n_features, "n_states": model.n_states, "start_end": model.start_end,
            "bias": model.bias, "allowed": s.allowed, "allowed_start": s.allowed_start, "allowed_end": s.allowed_end}


def _grid(model: Any) -> dict[str, Any]:
    from structopt.structures.grid import BinaryGrid

    _plain(model.structure, BinaryGrid, "a GridModel whose structure is")
    return {"n_features": model.n_features, "n_edge_features": model.n_edge_features, "pairwise": model.pairwise}


def _box(model: Any) -> dict[str, Any]:
    from structopt.structures.box import BoundingBox

    _plain(model.structure, BoundingBox, "a BoxModel whose structure is")
    return {"n_features": model.n_features, "search": model.structure.search}


def _matching(model: Any) -> dict[str, Any]:
    from structopt.structures.matching import BipartiteMatching

    _plain(model.structure, BipartiteMatching, "a MatchingModel whose structure is")
    return {"n_features": model.n_features, "allow_unmatched": model.allow_unmatched}


def _multiclass(model: Any) -> dict[str, Any]:
    from structopt.structures.multiclass import MultiClass

    _plain(model.structure, MultiClass, "a MultiClassModel whose structure is")
    return {"n_features": model.n_features, "n_classes": model.n_classes}


def _dependency(model: Any) -> dict[str, Any]:
    from structopt.structures.dependency import DependencyTree

    _plain(model.structure, DependencyTree, "a DependencyModel whose structure is")
    s = model.structure
    return {"n_features": model.n_features, "projective": s.projective, "single_root": s.single_root,
            "n_labels": s.n_labels}


def _graph(model: Any) -> dict[str, Any]:
    from structopt.models.graph import GraphStructure

    _plain(model.structure, GraphStructure, "a GraphModel whose structure is")
    s = model.structure
    # the whole configuration: the oracle options change what training and SSVMProblem.predict compute
    return {"n_node_features": model.n_node_features, "n_edge_features": model.n_edge_features,
            "n_states": model.n_states, "symmetric": model.symmetric, "exact": s.exact,
            "time_limit": s.time_limit, "warm_start": s.warm_start}


def _model_types() -> dict[str, _Codec]:
    from structopt.models import BoxModel, ChainModel, DependencyModel, GridModel, MatchingModel, MultiClassModel
    from structopt.models.graph import GraphModel

    return {"ChainModel": _Codec(ChainModel, _chain, ("n_features", "n_states", "start_end", "bias", "allowed",
                                                      "allowed_start", "allowed_end")),
            "GridModel": _Codec(GridModel, _grid, ("n_features", "n_edge_features", "pairwise")),
            "BoxModel": _Codec(BoxModel, _box, ("n_features", "search")),
            "MatchingModel": _Codec(MatchingModel, _matching, ("n_features", "allow_unmatched")),
            "MultiClassModel": _Codec(MultiClassModel, _multiclass, ("n_features", "n_classes")),
            "GraphModel": _Codec(GraphModel, _graph, ("n_node_features", "n_edge_features", "n_states", "symmetric",
                                                      "exact", "time_limit", "warm_start")),
            "DependencyModel": _Codec(DependencyModel, _dependency, ("n_features", "projective", "single_root",
                                                                     "n_labels"))}


def _loss_types() -> dict[str, _Codec]:
    from structopt.losses import BoxLoss, Hamming, MatchingHamming, WeightedHamming

    return {"Hamming": _Codec(Hamming, lambda loss: {"normalize": loss.normalize}, ("normalize",)),
            "WeightedHamming": _Codec(WeightedHamming, lambda loss: {"cost": loss.cost, "normalize": loss.normalize},
                                      ("cost", "normalize")),
            "MatchingHamming": _Codec(MatchingHamming,
                                      lambda loss: {"fp_cost": loss.fp_cost, "fn_cost": loss.fn_cost},
                                      ("fp_cost", "fn_cost")),
            "BoxLoss": _Codec(BoxLoss, lambda loss: {}, ())}


#: model classes a saved model may name (the only ones :func:`load_model` rebuilds)
MODEL_TYPES: tuple[str, ...] = ("ChainModel", "GridModel", "BoxModel", "MatchingModel", "MultiClassModel",
                                "GraphModel", "DependencyModel")
#: loss classes a saved model may name
LOSS_TYPES: tuple[str, ...] = ("Hamming", "WeightedHamming", "MatchingHamming", "BoxLoss")


def _describe(obj: Any, registry: dict[str, _Codec], kind: str) -> dict[str, Any]:
    for name, codec in registry.items():
        if type(obj) is codec.cls:
            return {"type": name, "args": codec.describe(obj)}
    raise InvalidInputError(f"cannot save a {kind} of type {type(obj).__qualname__}: saved models hold only "
                            f"{', '.join(registry)} (and not their subclasses)")


def describe_model(model: Any) -> dict[str, Any]:
    """``{"type": name, "args": constructor keywords}`` of a model of a type in :data:`MODEL_TYPES`.

    Raises
    ------
    InvalidInputError
        Another model type, a subclass, or a built-in model on a custom structure subclass.
    """
    return _describe(model, _model_types(), "model")


def build_model(description: dict[str, Any]) -> Any:
    """The model :func:`describe_model` described (only types in :data:`MODEL_TYPES`)."""
    return _build(description, _model_types(), "model")


def _build(description: Any, registry: dict[str, _Codec], kind: str) -> Any:
    if not isinstance(description, dict) or not isinstance(description.get("args"), dict):
        raise InvalidInputError(f"the {kind} description is not a {{type, args}} object")
    name = description.get("type")
    if not isinstance(name, str) or name not in registry:
        raise InvalidInputError(f"unknown {kind} type {name!r} (known: {', '.join(registry)})")
    codec, args = registry[name], description["args"]
    missing = [key for key in codec.keys if key not in args]
    if missing:
        raise InvalidInputError(f"the {name} description lacks {', '.join(map(repr, missing))}")
    unknown = [repr(key) for key in args if key not in codec.keys]
    if unknown:
        raise InvalidInputError(f"the {name} description has unknown argument(s) {', '.join(unknown)} "
                                f"(a {name} is described by {', '.join(codec.keys)})")
    return codec.cls(**args)


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
        :class:`~structopt.models.GraphModel` gives its exact MAP labels whatever its training
        oracle (``saved.model.predict(x, saved.w, exact=False)``: AD3's rounded labeling)."""
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
    body = {"model": description, "loss": None if loss is None else _describe(loss, _loss_types(), "loss"),
            "task": task, "preprocessing": preprocessing or {}, "info": info or {}}
    data, arrays = encode(body)
    arrays["w"] = w
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "structopt_version": __version__, "body": data}
    return write_archive(path, meta, arrays, "model", compress=True)


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
    meta, arrays = read_archive(path, "model")
    kind = meta.get("format")
    if kind != FORMAT:
        what = f"a {kind}" if isinstance(kind, str) else "another kind of structopt archive"
        raise InvalidInputError(f"model {path} is not a saved model ({what})")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InvalidInputError(f"model {path} has format version {version!r}; this structopt reads up to "
                                f"{FORMAT_VERSION} (upgrade structopt)")
    try:
        body = decode(meta["body"], arrays)
        model = build_model(body["model"])
        loss = None if body["loss"] is None else _build(body["loss"], _loss_types(), "loss")
        w = arrays["w"]
        task, preprocessing, info = body["task"], body["preprocessing"], body["info"]
    except StructoptError as error:
        raise InvalidInputError(f"model {path}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InvalidInputError(f"model {path} is malformed ({type(error).__name__}: {error})") from None
    if w.dtype != np.float64 or w.shape != (model.n_params,) or not np.all(np.isfinite(w)):
        raise InvalidInputError(f"model {path}: its weights (shape {w.shape}, dtype {w.dtype}) do not fit the model "
                                f"({model.n_params} finite float64 weights)")
    if (task is not None and not isinstance(task, str)) or not isinstance(preprocessing, dict):
        raise InvalidInputError(f"model {path} is malformed (task or preprocessing of the wrong kind)")
    return SavedModel(model, w, loss, task, preprocessing, info if isinstance(info, dict) else {},
                      str(meta.get("structopt_version", "")), str(path))


__all__ = ["LOSS_TYPES", "MODEL_TYPES", "SavedModel", "build_model", "describe_model", "load_model", "save_model"]
