"""SparseMAP and the perturbed argmax as layers, and their Fenchel–Young losses, for any structure.

The numpy cores are :mod:`structopt.sparsemap` (the active-set method calling only ``argmax``, Niculae
et al. 2018, with its backward through the active set) and :mod:`structopt.perturbed` (Berthet et al.
2020, Gaussian noise, seeded); this module wraps them in autograd functions. Both work in the flat
layout of θ (:func:`structopt.potentials.flatten`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from structopt.errors import check_count
from structopt.potentials import flatten, unflatten
from structopt.torch import _inputs
from structopt.torch._autograd import ValueAndGrad

#: the relaxed kinds of :func:`structopt.torch.structured_loss` and their options (defaults)
KINDS: dict[str, dict[str, Any]] = {
    "sparsemap": {"tol": 1e-9, "max_iter": 1000},
    "perturbed": {"epsilon": 1.0, "n_samples": 32, "seed": 0},
}


def _check(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    owner = f"structopt.torch {kind}"
    out = dict(options)
    if kind == "sparsemap":
        out["tol"] = _inputs.positive(out["tol"], "tol", owner)
        out["max_iter"] = check_count(out["max_iter"], "max_iter", owner)
    else:
        out["epsilon"] = _inputs.positive(out["epsilon"], "epsilon", owner)
        out["n_samples"] = check_count(out["n_samples"], "n_samples", owner)
        out["seed"] = check_count(out["seed"], "seed", owner, minimum=0)
    return out


def _tensor(flat: np.ndarray, like: _inputs.Example) -> Any:
    return _inputs.to_tensors(unflatten(np.asarray(flat, dtype=float), like.array), like.dtype, like.device)


class _SparseMAP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ex: _inputs.Example, options: dict[str, Any], *fields: torch.Tensor):
        from structopt.sparsemap import sparsemap as core

        result = core(ex.structure, ex.array, tol=options["tol"], max_iter=options["max_iter"])
        ctx.result, ctx.ex = result, ex
        return tuple(_tensor(flatten(result.stats), ex))

    @staticmethod
    @once_differentiable
    def backward(ctx, *upstream: torch.Tensor):
        from structopt.sparsemap import sparsemap_vjp

        ex = ctx.ex
        grad = flatten(type(ex.array)(*(np.zeros(np.shape(a)) if g is None else g.detach().to("cpu", torch.float64)
                                         .numpy() for g, a in zip(upstream, ex.array))))
        return (None, None, *_tensor(sparsemap_vjp(ctx.result, grad), ex))


class _Perturbed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ex: _inputs.Example, options: dict[str, Any], *fields: torch.Tensor):
        from structopt.perturbed import perturbed_argmax

        result = perturbed_argmax(ex.structure, ex.array, epsilon=options["epsilon"],
                                  n_samples=options["n_samples"], seed=options["seed"])
        ctx.result, ctx.ex = result, ex
        return tuple(_tensor(flatten(result.stats), ex))

    @staticmethod
    @once_differentiable
    def backward(ctx, *upstream: torch.Tensor):
        from structopt.perturbed import perturbed_vjp

        ex = ctx.ex
        grad = flatten(type(ex.array)(*(np.zeros(np.shape(a)) if g is None else g.detach().to("cpu", torch.float64)
                                         .numpy() for g, a in zip(upstream, ex.array))))
        return (None, None, *_tensor(perturbed_vjp(ctx.result, grad), ex))


def sparsemap(structure: Any, theta: Any, *, tol: float = 1e-9, max_iter: int = 1000) -> Any:
    """SparseMAP ``μ* = argmax_{μ ∈ M} <θ, μ> − ½‖μ‖²`` as a differentiable layer (potentials of tensors).

    μ* is a sparse combination of a few vertices found by an active-set method that calls only the
    structure's ``argmax``; the backward is the Jacobian on the final active set (Niculae et al., 2018,
    Prop. 1). Works for every structure. Returns potentials of tensors in θ's layout (a list for a list).
    """
    options = _check("sparsemap", {"tol": tol, "max_iter": max_iter})
    batch, is_list = _inputs.examples(structure, theta)
    out = [type(ex.theta)(*_SparseMAP.apply(ex, options, *ex.fields)) for ex in batch]
    return out if is_list else out[0]


def perturbed(structure: Any, theta: Any, *, epsilon: float = 1.0, n_samples: int = 32, seed: int = 0) -> Any:
    """The perturbed argmax ``E_Z[μ(argmax <θ + εZ, μ(y)>)]``, Z ~ N(0, I), as a differentiable layer.

    A Monte Carlo estimate over ``n_samples`` seeded draws; its backward is the Gaussian-noise estimator
    ``(1/ε) E[μ Zᵀ]`` (Berthet et al., 2020). Returns potentials of tensors in θ's layout.
    """
    options = _check("perturbed", {"epsilon": epsilon, "n_samples": n_samples, "seed": seed})
    batch, is_list = _inputs.examples(structure, theta)
    out = [type(ex.theta)(*_Perturbed.apply(ex, options, *ex.fields)) for ex in batch]
    return out if is_list else out[0]


def fenchel_young(kind: str, batch: list[_inputs.Example], gold: list[Any], options: dict[str, Any]) -> list[Any]:
    """The SparseMAP or perturbed Fenchel–Young loss of each example (values and gradients from the numpy cores)."""
    options = _check(kind, options)
    if kind == "sparsemap":
        from structopt.sparsemap import sparsemap_loss as core
    else:
        from structopt.perturbed import perturbed_loss as core
    values = []
    for ex, y in zip(batch, gold):
        value, grad, _ = core(ex.structure, ex.array, y, **options)
        values.append(ValueAndGrad.apply(float(value), unflatten(np.asarray(grad, dtype=float), ex.array), *ex.fields))
    return values
