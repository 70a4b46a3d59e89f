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
  - ``states_per_node`` (int, or ``states_per_node(like) -> int`` when it depends on the instance) and
    ``node_potentials(costs, like) -> Potentials``: per-node labels, for
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
  - ``complete(theta, y) -> output``: the latent completion oracle, the best output whose observed part is
    ``y``'s (its latent part imputed), for :func:`~structopt.solvers.latent_ssvm` (``LatentChain``'s);
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
  the problem's ``project_weights``), ``set_weights(w)`` (a model that keeps weights of its own, as a
  network's module: a saved model's weights are handed to it on loading).

**Loss** (subclass :class:`~structopt.losses.Loss`): ``__call__``; either ``decomposable = True``
with ``linear_terms``, or the ``augmented_argmax`` (and for smoothing ``augmented_topk`` /
``augmented_marginals``) hooks.

:func:`structopt.validate.check_structure` and :func:`structopt.validate.check_model` test an
implementation numerically.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.hooks import HOOKS, Hook, check_hooks, has_hook, hook
from structopt.losses import Loss
from structopt.structures.base import Structure, flatten

__all__ = ["HOOKS", "Hook", "check_contract", "check_hooks", "check_layout", "has_hook", "hook",
           "nonnegative_indices"]

_STRUCTURE_REQUIRED = ("argmax", "stats", "outputs", "polytope", "expand", "validate_output")
_MODEL_REQUIRED = ("blocks", "validate_input", "potentials", "add_features", "reduce_stats", "zeros")


def check_contract(model: Any, loss: Any) -> None:
    """Raise :class:`InvalidInputError` naming the first missing piece of the contract."""
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
