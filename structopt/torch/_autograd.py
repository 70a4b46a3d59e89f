"""The autograd functions under :mod:`structopt.torch`: every one calls the structure's numpy oracles.

- :class:`ValueAndGrad`: a scalar whose gradient the oracle computed with it (the smoothed and
  Fenchel–Young losses); its own gradient is not differentiable again.
- :class:`LogPartition`: ``log Z(θ)``; backward = the marginals, through :class:`Marginals`, so that
  ``log Z`` is twice differentiable (``create_graph=True`` gives its Hessian-vector products).
- :class:`Marginals`: ``E_θ[μ]``; its backward is the covariance of μ times the upstream gradient
  (the Hessian of ``log Z``), a directional derivative of the structure's own marginals computed by
  Richardson-extrapolated central differences (four marginals calls; see :func:`covariance_product`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from structopt.potentials import Potentials
from structopt.structures.base import Structure

#: step of the central differences in :func:`covariance_product`, in units of the direction's largest entry
FD_STEP = 1e-3


def sum_to_shape(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of numpy broadcasting ``shape`` to ``array.shape``: sum over the broadcast axes.

    Scores are ``<θ, μ>`` with θ broadcast against μ (a chain's shared (S, S) transitions against
    (T-1, S, S) statistics), so the gradient in θ of a linear function of the statistics is this sum.
    """
    array = np.asarray(array, dtype=np.float64)
    extra = array.ndim - len(shape)
    if extra > 0:
        array = array.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, (want, have) in enumerate(zip(shape, array.shape)) if want == 1 and have != 1)
    if axes:
        array = array.sum(axis=axes, keepdims=True)
    return np.broadcast_to(array, shape).copy() if array.shape != tuple(shape) else array


def reduce_to(stats: Potentials, like: Potentials) -> Potentials:
    """Statistics ``stats`` (the structure's full layout) summed onto the shapes of the potentials ``like``."""
    return type(like)(*(sum_to_shape(s, np.shape(t)) for s, t in zip(stats, like)))


def covariance_product(structure: Structure, theta: Potentials, direction: Potentials) -> Potentials:
    """``Cov_θ[μ] · v``, the derivative of the marginals along ``v`` (both in the full statistics layout).

    It is the Hessian of ``log Z`` applied to ``v``. structopt's structures compute marginals but no
    second-order quantities, so it is differentiated numerically: central differences of
    ``structure.marginals`` at steps h and h/2 combined by Richardson extrapolation (error O(h⁴), about
    1e-12 relative at h = 1e-3 on the built-in structures, checked against the covariance by enumeration
    in the tests), with ``v`` scaled to a largest entry of 1.
    """
    flat_v = np.concatenate([np.ravel(v) for v in direction]) if len(direction) else np.zeros(0)
    size = float(np.max(np.abs(flat_v))) if flat_v.size else 0.0
    if size == 0.0:
        return type(theta)(*(np.zeros(np.shape(v)) for v in direction))

    def central(h: float) -> list[np.ndarray]:
        plus = structure.marginals(type(theta)(*(t + (h / size) * v for t, v in zip(theta, direction))))[1]
        minus = structure.marginals(type(theta)(*(t - (h / size) * v for t, v in zip(theta, direction))))[1]
        return [(np.asarray(p, dtype=float) - np.asarray(m, dtype=float)) / (2 * h) for p, m in zip(plus, minus)]

    coarse, fine = central(FD_STEP), central(FD_STEP / 2)
    return type(theta)(*((4.0 * f - c) / 3.0 * size for f, c in zip(fine, coarse)))


def _tensor(value: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=like.dtype, device=like.device)


class ValueAndGrad(torch.autograd.Function):
    """A scalar ``value`` of the potentials ``fields`` whose gradient ``grads`` (θ's layout) is already known."""

    @staticmethod
    def forward(ctx, value: float, grads: Potentials, *fields: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads
        return _tensor(value, fields[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, upstream: torch.Tensor):
        return (None, None, *(upstream * _tensor(g, upstream) for g in ctx.grads))


class Marginals(torch.autograd.Function):
    """``E_θ[μ]`` in the structure's full statistics layout; backward = covariance products."""

    @staticmethod
    def forward(ctx, structure: Structure, theta_type: type, *fields: torch.Tensor):
        theta = theta_type(*(f.detach().to("cpu", torch.float64).numpy() for f in fields))
        marg = structure.marginals(theta)[1]
        ctx.structure, ctx.theta = structure, theta
        return tuple(_tensor(m, fields[0]) for m in marg)

    @staticmethod
    @once_differentiable
    def backward(ctx, *upstream: torch.Tensor):
        structure, theta = ctx.structure, ctx.theta
        full = structure.expand(theta)
        direction = type(theta)(*(np.zeros(np.shape(f)) if g is None else g.detach().to("cpu", torch.float64).numpy()
                                  for g, f in zip(upstream, full)))
        product = reduce_to(covariance_product(structure, full, direction), theta)
        like = next(g for g in upstream if g is not None)
        return (None, None, *(_tensor(p, like) for p in product))


class LogPartition(torch.autograd.Function):
    """``log Z(θ)``; backward = the marginals (summed onto θ's layout), itself differentiable.

    ``known`` is ``(log Z, marginals in θ's layout)`` when a batched kernel computed them already, else None.
    """

    @staticmethod
    def forward(ctx, structure: Structure, theta_type: type, known: tuple[float, Potentials] | None,
                *fields: torch.Tensor) -> torch.Tensor:
        theta = theta_type(*(f.detach().to("cpu", torch.float64).numpy() for f in fields))
        if known is None:
            log_z, marg = structure.marginals(theta)
            known = (float(log_z), reduce_to(marg, theta))
        ctx.structure, ctx.theta_type, ctx.marg = structure, theta_type, known[1]
        ctx.save_for_backward(*fields)
        return _tensor(float(known[0]), fields[0])

    @staticmethod
    def backward(ctx, upstream: torch.Tensor):
        fields = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the marginals must be differentiable in turn
            full = Marginals.apply(ctx.structure, ctx.theta_type, *fields)
            marg = tuple(m.sum_to_size(f.shape) for m, f in zip(full, fields))
        else:
            marg = tuple(_tensor(m, upstream) for m in ctx.marg)
        return (None, None, None, *(upstream * m for m in marg))
