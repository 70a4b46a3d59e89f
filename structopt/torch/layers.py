"""``nn.Module`` layers over :func:`structopt.torch.structured_loss` with batched shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from structopt.errors import InvalidInputError
from structopt.losses import Loss
from structopt.structures.base import Structure
from structopt.torch import _inputs
from structopt.torch.losses import check_kind, structured_loss

REDUCTIONS = ("mean", "sum", "none")


def split_batch(theta: Any) -> list[Any]:
    """A potentials NamedTuple of batched tensors (every field with the same leading batch size B) as a list of
    B examples' potentials; a list is returned as it is."""
    if not _inputs.is_potentials(theta):
        if not isinstance(theta, (list, tuple)):
            raise InvalidInputError(f"theta must be a potentials NamedTuple of batched tensors (leading batch "
                                    f"dimension) or a list of potentials, got {type(theta).__name__}")
        return list(theta)
    sizes = set()
    for name, field in zip(theta._fields, theta):
        if not isinstance(field, torch.Tensor) or field.dim() == 0:
            raise InvalidInputError(f"theta.{name} must be a tensor with a leading batch dimension, got "
                                    f"{type(field).__name__}{'' if not isinstance(field, torch.Tensor) else ' (0-d)'}")
        sizes.add(field.shape[0])
    if len(sizes) != 1:
        raise InvalidInputError(f"the fields of theta have different batch sizes {sorted(sizes)} (leading dimension)")
    return [type(theta)(*fields) for fields in zip(*(field.unbind(0) for field in theta))]


class StructuredLoss(nn.Module):
    """A structured loss as a module: ``loss(theta, y)`` over a batch.

    The forward takes ``theta``, either the structure's potentials with a leading batch dimension B on every
    field (examples of one size) or a list of per-example potentials (examples of different sizes), and ``y``,
    the B gold outputs (a list, or a tensor whose first dimension is B).

    Parameters
    ----------
    structure : Structure, list of Structure, or callable
        The structure of every example; a list with one per example of each batch; or a factory
        ``structure(i) -> Structure`` giving example i's (e.g. graphs that differ per example).
    kind : str
        A kind of :func:`structopt.torch.structured_loss` (``"hinge"``, ``"crf"``, ``"topk"``, ``"entropy"``,
        ``"sparsemap"``, ``"perturbed"``).
    loss : structopt.losses.Loss, optional
        The task loss of the hinge and smoothed kinds.
    reduction : {"mean", "sum", "none"}
        How the per-example losses are combined.
    **options
        The kind's options (``mu``, ``k``, ...), checked here with the kind and the loss.
    """

    def __init__(self, structure: Structure | list[Structure] | Callable[[int], Structure], kind: str = "hinge",
                 loss: Loss | None = None, reduction: str = "mean", **options: Any):
        super().__init__()
        if not (isinstance(structure, (Structure, list, tuple)) or callable(structure)):
            raise InvalidInputError(f"structure must be a Structure, a list of them or a factory i -> Structure, "
                                    f"got {type(structure).__name__}")
        if not isinstance(reduction, str) or reduction not in REDUCTIONS:
            raise InvalidInputError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        check_kind(kind, loss, options)
        self.structure, self.kind, self.loss, self.reduction, self.options = structure, kind, loss, reduction, options

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, loss={self.loss!r}, reduction={self.reduction!r}"

    def structures(self, n: int) -> Structure | list[Structure]:
        """The structure argument for a batch of ``n`` examples."""
        if isinstance(self.structure, Structure):
            return self.structure
        if isinstance(self.structure, (list, tuple)):
            return list(self.structure)
        return [self.structure(i) for i in range(n)]

    def forward(self, theta: Any, y: Any) -> torch.Tensor:
        examples = split_batch(theta)
        values = structured_loss(self.structures(len(examples)), examples, y, kind=self.kind, loss=self.loss,
                                 **self.options)
        if self.reduction == "mean":
            return values.mean()
        if self.reduction == "sum":
            return values.sum()
        return values
