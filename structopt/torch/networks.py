"""Declared networks: the constructors a :class:`~structopt.torch.TorchModel` may be built from.

A network is declared once under a unique name with :func:`register_network`; a
:class:`~structopt.torch.TorchModel` names it and its JSON arguments, so a saved model rebuilds its module
from the declaration (never from code named in a file). A task module declares its networks at import
(``structopt train`` and ``structopt predict`` import the task before building or loading a model).

Built-in declaration: ``"chain_mlp"`` (:class:`ChainMLP`), a two-layer network over token features giving
a chain's unary potentials and a learned transition block: the function of
:class:`~structopt.models.nonlinear.NonlinearChainModel`, with the same weights in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from structopt.errors import InvalidInputError
from structopt.registry import Registry
from structopt.structures.chain import ChainPotentials

#: the declared networks by name, in declaration order
_NETWORKS: Registry[Callable[..., nn.Module]] = Registry(
    "network", unknown="unknown network {name!r}: declared networks are {names} (declare one with "
                       "structopt.torch.register_network, or import the task module that declares it)")


def _origin(factory: Callable[..., Any]) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


def register_network(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Declare ``factory(**kwargs) -> torch.nn.Module`` under ``name`` (a decorator; returns the factory).

    Parameters
    ----------
    name : str
        Unique, non-empty. Declaring another constructor under a taken name is refused; the same
        constructor again (a module imported twice, or reloaded) replaces its own entry.

    Examples
    --------
    >>> from torch import nn
    >>> @register_network("doc_linear")
    ... def doc_linear(n_in: int, n_out: int) -> nn.Module:
    ...     return nn.Linear(n_in, n_out)
    >>> "doc_linear" in network_names()
    True
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"register_network needs a non-empty name, got {name!r}")

    def declare(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if not callable(factory):
            raise InvalidInputError(f"register_network({name!r}) decorates a callable, got {type(factory).__name__}")
        known = _NETWORKS.get(name)
        if known is not None and _origin(known) != _origin(factory):
            raise InvalidInputError(f"network {name!r} is already declared by {_origin(known)}; "
                                    f"choose another name for {_origin(factory)}")
        return _NETWORKS.add(name, factory, replace=True)  # a clash was refused above, with both origins named

    return declare


def network_names() -> list[str]:
    """The declared network names, in declaration order."""
    return _NETWORKS.names()


def get_network(name: str) -> Callable[..., nn.Module]:
    """The constructor declared under ``name``; an unknown name is an error listing the declared ones."""
    return _NETWORKS[name]


_ACTIVATIONS = {"tanh": torch.tanh, "elu": nn.functional.elu, "relu": torch.relu}


class ChainMLP(nn.Module):
    """Chain potentials from token features ``x`` (T, F): ``unary = act(x W_hidden + b_hidden) W_output +
    b_output`` (T, S) and a shared transition block ``pairwise`` (S, S).

    Parameters, in this order (the layout of :class:`~structopt.models.nonlinear.NonlinearChainModel`'s
    blocks): ``hidden`` (F, H), ``hidden_bias`` (H,), ``output`` (H, S), ``output_bias`` (S,), ``pairwise``
    (S, S). Initialised as that model's ``initial_weights`` are (Glorot-style normal layers, zero biases
    and transitions).
    """

    def __init__(self, n_features: int, n_hidden: int, n_states: int, activation: str = "tanh"):
        super().__init__()
        for key, value in (("n_features", n_features), ("n_hidden", n_hidden), ("n_states", n_states)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"chain_mlp {key} must be an integer >= 1, got {value!r}")
        if activation not in _ACTIVATIONS:
            raise InvalidInputError(f"chain_mlp activation must be one of {', '.join(_ACTIVATIONS)}, "
                                    f"got {activation!r}")
        self.activation = activation
        self.hidden = nn.Parameter(torch.randn(n_features, n_hidden) / n_features ** 0.5)
        self.hidden_bias = nn.Parameter(torch.zeros(n_hidden))
        self.output = nn.Parameter(torch.randn(n_hidden, n_states) / n_hidden ** 0.5)
        self.output_bias = nn.Parameter(torch.zeros(n_states))
        self.pairwise = nn.Parameter(torch.zeros(n_states, n_states))

    def forward(self, x: torch.Tensor) -> ChainPotentials:
        h = _ACTIVATIONS[self.activation](x @ self.hidden + self.hidden_bias)
        return ChainPotentials(h @ self.output + self.output_bias, self.pairwise)


@register_network("chain_mlp")
def chain_mlp(n_features: int, n_hidden: int, n_states: int, activation: str = "tanh") -> ChainMLP:
    """A :class:`ChainMLP` (token features (T, F) -> chain potentials)."""
    return ChainMLP(n_features, n_hidden, n_states, activation)


__all__ = ["ChainMLP", "chain_mlp", "get_network", "network_names", "register_network"]
