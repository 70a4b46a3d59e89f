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
#: what :class:`StructuredLayer` computes, and the options each takes
LAYER_KINDS = {"marginals": (), "sparsemap": ("tol", "max_iter"), "perturbed": ("epsilon", "n_samples", "seed")}


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


def structures_for(structure: Any, n: int) -> Structure | list[Structure]:
    """The structure argument for a batch of ``n`` examples: the structure, the list, or the factory's answers."""
    if isinstance(structure, Structure):
        return structure
    if isinstance(structure, (list, tuple)):
        return list(structure)
    return [structure(i) for i in range(n)]


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
        return structures_for(self.structure, n)

    def forward(self, theta: Any, y: Any) -> torch.Tensor:
        examples = split_batch(theta)
        values = structured_loss(self.structures(len(examples)), examples, y, kind=self.kind, loss=self.loss,
                                 **self.options)
        if self.reduction == "mean":
            return values.mean()
        if self.reduction == "sum":
            return values.sum()
        return values


class StructuredLayer(nn.Module):
    """A structured layer as a module: potentials in, a point of the marginal polytope out, differentiable.

    ``kind`` is ``"marginals"`` (the Gibbs marginals, :func:`structopt.torch.marginals`), ``"sparsemap"``
    (:func:`structopt.torch.sparsemap`, a sparse mixture of a few outputs) or ``"perturbed"``
    (:func:`structopt.torch.perturbed`). The forward takes ``theta`` as :class:`StructuredLoss` does: potentials
    with a leading batch dimension on every field, or a list of per-example potentials. It returns the
    structure's statistics (full layout) in the same form: batched tensors for a batched input (examples of
    one size), a list for a list.

    Parameters
    ----------
    structure : Structure, list of Structure, or callable
        As for :class:`StructuredLoss`.
    kind : {"marginals", "sparsemap", "perturbed"}
    **options
        ``tol``, ``max_iter`` (SparseMAP); ``epsilon``, ``n_samples``, ``seed`` (perturbed).
    """

    def __init__(self, structure: Structure | list[Structure] | Callable[[int], Structure], kind: str = "sparsemap",
                 **options: Any):
        super().__init__()
        if not (isinstance(structure, (Structure, list, tuple)) or callable(structure)):
            raise InvalidInputError(f"structure must be a Structure, a list of them or a factory i -> Structure, "
                                    f"got {type(structure).__name__}")
        if not isinstance(kind, str) or kind not in LAYER_KINDS:
            raise InvalidInputError(f"StructuredLayer kind must be one of {tuple(LAYER_KINDS)}, got {kind!r}")
        unknown = sorted(set(options) - set(LAYER_KINDS[kind]))
        if unknown:
            raise InvalidInputError(f"StructuredLayer(kind={kind!r}) got unknown options {unknown} "
                                    f"(accepted: {', '.join(LAYER_KINDS[kind]) or 'none'})")
        if kind != "marginals":
            from structopt.torch.relaxed import KINDS, check_options

            check_options(kind, {**KINDS[kind], **options})
        self.structure, self.kind, self.options = structure, kind, options

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}" + "".join(f", {k}={v!r}" for k, v in self.options.items())

    def forward(self, theta: Any) -> Any:
        examples = split_batch(theta)
        structures = structures_for(self.structure, len(examples))
        if self.kind == "marginals":
            from structopt.torch.decoding import marginals

            out = marginals(structures, examples)
        else:
            from structopt.torch import relaxed

            out = getattr(relaxed, self.kind)(structures, examples, **self.options)
        if not _inputs.is_potentials(theta):
            return out
        return type(out[0])(*(torch.stack(fields) for fields in zip(*out)))
