"""The hook table: every optional attribute that losses, models, solvers and tools look up by name.

A *hook* is an attribute of a structure or a model found with ``hasattr`` (``states_per_node``,
``node_potentials``, ``topk_iou``, ``features_sqnorm``, ...). Each is listed once in :data:`HOOKS`, with its
signature and its callers; :func:`has_hook` is the one lookup (it refuses an undocumented name) and
:func:`check_hooks` checks the hooks an object declares. The contract as a whole (required methods, losses)
is :mod:`structopt.contract`.

This module is on the ground floor: it imports only numpy, :mod:`structopt.errors` and
:mod:`structopt.registry`, so any layer (losses, structures, models, the problem) may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.registry import Registry


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


#: every hook structopt looks up by name, keyed ``(owner, name)``; a ``hasattr`` on a structure or model elsewhere
#: names one of these
HOOKS: Registry[Hook] = Registry("hook", error=KeyError, label=lambda key: f"{key[0]}.{key[1]}")


def declare_hooks(*hooks: Hook) -> None:
    """Add ``hooks`` to :data:`HOOKS` (a name taken by another hook of the same owner is refused)."""
    for h in hooks:
        HOOKS.add((h.owner, h.name), h)


declare_hooks(
    Hook("structure", "Potentials", "Potentials: a NamedTuple type", "FeatureModel, validate.check_model"),
    Hook("structure", "states_per_node", "states_per_node: int >= 1; or, where it depends on the instance's size, "
         "a method taking the potentials `like` and returning it, as a dependency tree's n + 1 heads; read with "
         "node_states",
         "Hamming, WeightedHamming, estimator.score"),
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
    Hook("structure", "complete", "complete(theta, y) -> the best output with y's observed part (its latent part "
         "imputed)", "SSVMProblem.complete, solvers.latent_ssvm (the latent completion oracle)"),
    Hook("model", "features_sqnorm", "features_sqnorm(x, mu) -> float", "BCFW line search, smoothing solvers"),
    Hook("model", "nonnegative_blocks", "nonnegative_blocks: tuple of block names",
         "SSVMProblem.project_weights, every solver"),
    Hook("model", "set_weights", "set_weights(w) -> None: the model keeps weights of its own (a network's module) "
         "and takes the saved ones", "saved_model.load_model (TorchModel)"),
)


def hook(name: str, owner: str = "structure") -> Hook:
    """The documented hook ``name`` of ``owner`` (KeyError for an undocumented one)."""
    found = HOOKS.get((owner, name))
    if found is not None:
        return found
    raise KeyError(f"{name!r} is not a documented {owner} hook (see structopt.hooks.HOOKS)")


def has_hook(obj: Any, name: str, owner: str = "structure") -> bool:
    """Whether ``obj`` declares the documented hook ``name`` (the lookup losses and tools use)."""
    if (owner, name) not in HOOKS:  # a dict lookup: this runs per oracle call
        hook(name, owner)  # raises, naming the undocumented hook
    return hasattr(obj, name)


def check_hooks(obj: Any, owner: str) -> None:
    """Raise :class:`InvalidInputError` if a hook ``obj`` declares is malformed or lacks a companion.

    Methods must be callable, ``states_per_node`` a positive integer, ``Potentials`` a NamedTuple type.
    """
    kind = type(obj).__name__
    for h in HOOKS.values():
        if h.owner != owner or not hasattr(obj, h.name):
            continue
        value = getattr(obj, h.name)
        missing = [r for r in h.requires if not hasattr(obj, r)]
        if missing:
            raise InvalidInputError(f"{kind} declares the hook {h.name} but not {', '.join(missing)}, which must "
                                    "come with it (see structopt.hooks.HOOKS)")
        if h.is_method and not callable(value):
            raise InvalidInputError(f"{kind}.{h.name} must be a method {h.signature}, got {type(value).__name__}")
        if h.name == "states_per_node" and not callable(value) and (
                isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise InvalidInputError(f"{kind}.states_per_node must be an integer >= 1 (or a method of the instance, "
                                    f"states_per_node(like)), got {value!r}")
        if h.name == "Potentials" and not (isinstance(value, type) and issubclass(value, tuple)
                                           and hasattr(value, "_fields")):
            raise InvalidInputError(f"{kind}.Potentials must be a NamedTuple type, got {value!r}")


def node_states(structure: Any, like: Any) -> int:
    """The values each node takes in the instance shaped like ``like``: ``structure.states_per_node``, called
    with ``like`` where it is a method (sizes that vary per instance), checked to be an integer >= 1."""
    value = structure.states_per_node
    if callable(value):
        value = value(like)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInputError(f"{type(structure).__name__}.states_per_node must give an integer >= 1, got "
                                f"{value!r}")
    return int(value)
