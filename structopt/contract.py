"""The extension contract: what a user's structure, model and loss must provide, checked early.

**Structure** (subclass :class:`~structopt.structures.base.Structure`)

- required: ``argmax(theta)``, ``stats(y, like)``, ``outputs(theta)`` (enumeration, tiny instances),
  ``polytope(theta)``, ``expand(theta)``, ``validate_output(y, like, index)``;
- optional oracles, each raising :class:`~structopt.errors.NotSupportedError` by default:
  ``topk`` (top-K smoothing, Casimir), ``marginals`` (entropy smoothing, entropic extragradient),
  ``max_marginals``, ``project`` (Euclidean extragradient; defaults to a cvxpy QP),
  ``prox_entropy``;
- optional *hooks* (attributes that losses, models and tools look up by name; the table
  :data:`HOOKS` lists each with its signature and callers, and :func:`check_hooks` checks the ones
  an object declares):

  - ``Potentials`` (class attribute): the NamedTuple type of the potentials and statistics; read by
    :class:`~structopt.models.feature.FeatureModel` (one field required) and
    :func:`~structopt.validate.check_model` (the potentials type);
  - ``states_per_node`` (int) and ``node_potentials(costs, like) -> Potentials``: per-node labels, for
    :class:`~structopt.losses.Hamming` and ``WeightedHamming`` (``costs`` has shape
    ``y.shape + (states_per_node,)``) and the estimator's per-position accuracy;
  - ``node_constant(costs) -> float``: with the per-node hooks, when the encoding has no statistic
    per (node, value) (``LPStructure``'s 0/1 vector: the loss is
    ``<node_potentials(costs), stats> + node_constant(costs)``);
  - ``edge_potentials(costs, like) -> Potentials`` (and an ``edge`` field in the statistics):
    per-edge costs, for :class:`~structopt.losses.MatchingHamming`;
  - ``topk_iou(theta, y_true, k) -> (outputs, scores)`` and
    ``marginals_iou(theta, y_true, temperature) -> (log_z, marginals, expected_loss)``: decoding
    augmented by ``1 - IoU``, for :class:`~structopt.losses.BoxLoss`;
  - ``projector(tol, warm)``: a stateful, warm-started Euclidean projector (``project(point, key)``,
    ``state()``, ``load_state(state)``, ``max_residual``) or None, for the dual extragradient
    (an unconstrained ``Chain``'s); without it the extragradient calls ``project``;
  - ``map_labels(theta, exact) -> output``: an exact (``exact=True``) or fast labeling, for a structure
    whose ``argmax`` is a relaxation (a factor graph's AD3 oracle may return a fractional point);
    :meth:`~structopt.models.base.Model.predict` calls it instead of ``argmax``, so prediction
    always returns an output;
  - ``example(rng, *, integer, **size) -> (structure, theta)`` (classmethod) and
    ``example_variants``: random small instances, required by
    :func:`~structopt.structures.registry.register_structure` (``structopt check``);
- ``kernel_oracles()``: the oracles that the library's fused kernels reproduce exactly for this
  object (empty by default). Fast paths are taken only for those.
- bad potentials: NaN is refused by every oracle with :class:`~structopt.errors.InvalidInputError`.
  -inf means a forbidden entry only where a structure says so (``Chain``; elsewhere it is refused
  like NaN); when the -inf entries (or masks) forbid every output, every oracle on those
  potentials (``argmax``, ``topk``, ``marginals``, ``max_marginals``, ``project``,
  ``lp_relaxation``) raises ``InvalidInputError`` saying so, rather than returning an output of
  score -inf or an empty list. :func:`structopt.validate.check_structure` checks this.

**Model** (subclass :class:`~structopt.models.base.Model`)

- required: ``structure``, ``blocks``, ``validate_input(x, index)``, ``potentials(x, w)`` (returns
  the structure's potentials type), ``add_features(x, mu, out, scale)`` (the adjoint, in place);
- ``reduce_stats(mu)``: statistics in the layout of the potentials the model produces (default:
  unchanged), so that ``flatten(reduce_stats(stats(y)))`` pairs entry by entry with
  ``flatten(potentials(x, w))``;
- optional hooks: ``features_sqnorm(x, mu)`` (speed; BCFW's line search and the smoothing
  solvers' curvature), ``nonnegative_blocks`` (weight constraints; :func:`nonnegative_indices`,
  the problem's ``project_weights``).

**Loss** (subclass :class:`~structopt.losses.Loss`): ``__call__``; either ``decomposable = True``
with ``linear_terms``, or the ``augmented_argmax`` (and for smoothing ``augmented_topk`` /
``augmented_marginals``) hooks.

:func:`structopt.validate.check_structure` and :func:`structopt.validate.check_model` test an
implementation numerically.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.structures.base import Structure, flatten

_STRUCTURE_REQUIRED = ("argmax", "stats", "outputs", "polytope", "expand", "validate_output")
_MODEL_REQUIRED = ("blocks", "validate_input", "potentials", "add_features", "reduce_stats", "zeros")


@dataclass(frozen=True)
class Hook:
    """An optional attribute looked up by name (``hasattr``) on a structure or a model.

    Attributes
    ----------
    owner : {"structure", "model"}
    name : str
    signature : str
        How it is called (or, for a plain attribute, what it holds).
    called_by : str
        Who looks it up.
    requires : tuple of str
        Hooks that must come with it.
    """

    owner: str
    name: str
    signature: str
    called_by: str
    requires: tuple[str, ...] = ()

    @property
    def is_method(self) -> bool:
        """Whether the hook is called (its signature has an argument list)."""
        return "(" in self.signature


#: every hook structopt looks up by name; a ``hasattr`` on a structure or model elsewhere names one of these
HOOKS: tuple[Hook, ...] = (
    Hook("structure", "Potentials", "Potentials: a NamedTuple type", "FeatureModel, validate.check_model"),
    Hook("structure", "states_per_node", "states_per_node: int >= 1", "Hamming, WeightedHamming, estimator.score"),
    Hook("structure", "node_potentials", "node_potentials(costs, like) -> Potentials", "Hamming, WeightedHamming",
         ("states_per_node",)),
    Hook("structure", "node_constant", "node_constant(costs) -> float", "Hamming, WeightedHamming",
         ("states_per_node", "node_potentials")),
    Hook("structure", "projector", "projector(tol, warm) -> None or an object with project(point, key), state(), "
         "load_state(state), max_residual", "dual extragradient (solvers/_eg_geometry.EuclideanBlocks)"),
    Hook("structure", "edge_potentials", "edge_potentials(costs, like) -> Potentials", "MatchingHamming"),
    Hook("structure", "topk_iou", "topk_iou(theta, y_true, k) -> (outputs, scores)", "BoxLoss",
         ("marginals_iou",)),
    Hook("structure", "marginals_iou", "marginals_iou(theta, y_true, temperature) -> (log_z, marginals, loss)",
         "BoxLoss", ("topk_iou",)),
    Hook("structure", "map_labels", "map_labels(theta, exact) -> an output (labels), never a relaxed point",
         "Model.predict (every prediction: SSVMProblem, StructuredSVM, SavedModel)"),
    Hook("model", "features_sqnorm", "features_sqnorm(x, mu) -> float", "BCFW line search, smoothing solvers"),
    Hook("model", "nonnegative_blocks", "nonnegative_blocks: tuple of block names",
         "SSVMProblem.project_weights, every solver"),
)


_DOCUMENTED = frozenset((h.owner, h.name) for h in HOOKS)


def hook(name: str, owner: str = "structure") -> Hook:
    """The documented hook ``name`` of ``owner`` (KeyError for an undocumented one)."""
    for h in HOOKS:
        if h.owner == owner and h.name == name:
            return h
    raise KeyError(f"{name!r} is not a documented {owner} hook (see structopt.contract.HOOKS)")


def has_hook(obj: Any, name: str, owner: str = "structure") -> bool:
    """Whether ``obj`` declares the documented hook ``name`` (the lookup losses and tools use)."""
    if (owner, name) not in _DOCUMENTED:  # a set lookup: this runs per oracle call
        hook(name, owner)  # raises, naming the undocumented hook
    return hasattr(obj, name)


def check_hooks(obj: Any, owner: str) -> None:
    """Raise :class:`InvalidInputError` if a hook ``obj`` declares is malformed or lacks a companion.

    Methods must be callable, ``states_per_node`` a positive integer, ``Potentials`` a NamedTuple type.
    """
    kind = type(obj).__name__
    for h in HOOKS:
        if h.owner != owner or not hasattr(obj, h.name):
            continue
        value = getattr(obj, h.name)
        missing = [r for r in h.requires if not hasattr(obj, r)]
        if missing:
            raise InvalidInputError(f"{kind} declares the hook {h.name} but not {', '.join(missing)}, which must "
                                    "come with it (see structopt.contract.HOOKS)")
        if h.is_method and not callable(value):
            raise InvalidInputError(f"{kind}.{h.name} must be a method {h.signature}, got {type(value).__name__}")
        if h.name == "states_per_node" and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                           or value < 1):
            raise InvalidInputError(f"{kind}.states_per_node must be an integer >= 1, got {value!r}")
        if h.name == "Potentials" and not (isinstance(value, type) and issubclass(value, tuple)
                                           and hasattr(value, "_fields")):
            raise InvalidInputError(f"{kind}.Potentials must be a NamedTuple type, got {value!r}")


def check_contract(model: Any, loss: Any) -> None:
    """Raise :class:`InvalidInputError` naming the first missing piece of the contract."""
    from structopt.losses import Loss

    missing = [name for name in _MODEL_REQUIRED if not hasattr(model, name)]
    if missing:
        raise InvalidInputError(f"{type(model).__name__} is not a structopt Model: it lacks {', '.join(missing)} "
                                "(subclass structopt.Model; see structopt.contract)")
    structure = getattr(model, "structure", None)
    if not isinstance(structure, Structure):
        raise InvalidInputError(f"{type(model).__name__}.structure must be a structopt Structure, got "
                                f"{type(structure).__name__}")
    missing = [name for name in _STRUCTURE_REQUIRED if not callable(getattr(structure, name, None))]
    if missing:
        raise InvalidInputError(f"{type(structure).__name__} lacks {', '.join(missing)} (see structopt.contract)")
    check_hooks(structure, "structure")
    check_hooks(model, "model")
    if not isinstance(loss, Loss):
        raise InvalidInputError(f"loss must be a structopt Loss (e.g. structopt.Hamming()), got {type(loss).__name__}")
    for name in getattr(model, "nonnegative_blocks", ()):
        if name not in dict(model.blocks):
            raise InvalidInputError(f"{type(model).__name__}.nonnegative_blocks names {name!r}, which is not one of "
                                    f"its weight blocks {[b for b, _ in model.blocks]}")


def check_layout(model: Any, theta: Any, stats: Any) -> None:
    """Check on one example that potentials and reduced statistics pair up entry by entry."""
    if not isinstance(theta, tuple):
        raise InvalidInputError(f"{type(model).__name__}.potentials must return the structure's potentials "
                                f"(a NamedTuple of arrays), got {type(theta).__name__}")
    reduced = model.reduce_stats(stats)
    if type(reduced) is not type(theta):
        raise InvalidInputError(f"{type(model).__name__}.reduce_stats returns {type(reduced).__name__}, but the "
                                f"potentials are {type(theta).__name__}")
    n_theta, n_stats = flatten(theta).size, flatten(reduced).size
    if n_theta != n_stats:
        raise InvalidInputError(f"{type(model).__name__}.reduce_stats gives {n_stats} statistics for potentials "
                                f"with {n_theta} entries; it must return the layout of the model's potentials")


def nonnegative_indices(model: Any) -> np.ndarray:
    """Flat indices of the weights in ``model.nonnegative_blocks``."""
    names = set(getattr(model, "nonnegative_blocks", ()))
    index, start = [], 0
    for name, shape in model.blocks:
        size = int(np.prod(shape))
        if name in names:
            index.append(np.arange(start, start + size))
        start += size
    return np.concatenate(index).astype(np.int64) if index else np.zeros(0, dtype=np.int64)
