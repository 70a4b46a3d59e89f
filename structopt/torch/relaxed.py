"""SparseMAP and the perturbed argmax as layers, and their Fenchel–Young losses, for any structure.

The numpy cores are :mod:`structopt.sparsemap` (the active-set method calling only ``argmax``, Niculae
et al. 2018, with its backward through the active set) and :mod:`structopt.perturbed` (Berthet et al.
2020, Gaussian noise, seeded); this module wraps them in autograd functions. Both work in the structure's
full statistics layout: a compact θ (a shared transition block) is expanded for them and their gradients
are summed back onto θ's layout; the layers return the full layout, as :func:`structopt.torch.marginals`.
SparseMAP takes ``relaxation="local"`` for LP-SparseMAP, the projection onto the structure's polytope
description (a factor graph's local polytope), :func:`structopt.sparsemap.lp_sparsemap`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from structopt.errors import InvalidInputError, check_count
from structopt.potentials import Potentials, flatten, unflatten
from structopt.torch import _inputs
from structopt.torch._autograd import ValueAndGrad, reduce_to

#: SparseMAP's polytopes: the marginal polytope (active set over argmax) or the structure's ``polytope()``
#: description (LP-SparseMAP: a factor graph's local polytope)
RELAXATIONS = ("marginal", "local")
#: the relaxed kinds of :func:`structopt.torch.structured_loss` and their options (defaults)
KINDS: dict[str, dict[str, Any]] = {
    "sparsemap": {"tol": 1e-9, "max_iter": 1000, "relaxation": "marginal"},
    "perturbed": {"epsilon": 1.0, "n_samples": 32, "seed": 0},
}


def check_options(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options of a relaxed kind (``"sparsemap"`` or ``"perturbed"``) checked, or an error naming one."""
    owner = f"structopt.torch {kind}"
    out = dict(options)
    if kind == "sparsemap":
        out["tol"] = _inputs.positive(out["tol"], "tol", owner)
        out["max_iter"] = check_count(out["max_iter"], "max_iter", owner)
        if not isinstance(out["relaxation"], str) or out["relaxation"] not in RELAXATIONS:
            raise InvalidInputError(f"{owner} relaxation must be one of {', '.join(map(repr, RELAXATIONS))}, "
                                    f"got {out['relaxation']!r}")
    else:
        out["epsilon"] = _inputs.positive(out["epsilon"], "epsilon", owner)
        out["n_samples"] = check_count(out["n_samples"], "n_samples", owner)
        out["seed"] = check_count(out["seed"], "seed", owner, minimum=0)
    return out


def _core(kind: str, options: dict[str, Any], loss: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """``(forward or loss, vjp, its options)`` of a relaxed kind: SparseMAP (marginal or local relaxation) or
    the perturbed argmax. The local relaxation's QP has its own tolerances (``tol``/``max_iter`` are the
    active-set method's)."""
    from structopt import perturbed as perturbed_core
    from structopt import sparsemap as sparsemap_core

    if kind == "perturbed":
        return (perturbed_core.perturbed_loss if loss else perturbed_core.perturbed_argmax,
                perturbed_core.perturbed_vjp, options)
    if options["relaxation"] == "local":
        return (sparsemap_core.lp_sparsemap_loss if loss else sparsemap_core.lp_sparsemap,
                sparsemap_core.lp_sparsemap_vjp, {})
    return (sparsemap_core.sparsemap_loss if loss else sparsemap_core.sparsemap, sparsemap_core.sparsemap_vjp,
            {"tol": options["tol"], "max_iter": options["max_iter"]})


def _warn_unconverged(result: Any, ex: _inputs.Example, options: dict[str, Any], stacklevel: int = 3) -> None:
    """SparseMAP stopped at ``max_iter`` before its certificate met ``tol``: said, not silent."""
    if not getattr(result, "converged", True):
        where = "" if ex.index is None else f" (example {ex.index})"
        warnings.warn(f"SparseMAP{where} stopped at max_iter={options['max_iter']} with Frank–Wolfe gap "
                      f"{result.gap:.3g} > tol={options['tol']:g}: μ* and its gradient are approximate",
                      RuntimeWarning, stacklevel=stacklevel)


def _full_grad(ex: _inputs.Example, upstream: tuple[torch.Tensor | None, ...]) -> np.ndarray:
    """The upstream gradient of a full-layout output, flattened (None for an unused field: zeros)."""
    full = ex.structure.expand(ex.array)
    return flatten(type(full)(*(np.zeros(np.shape(f)) if g is None else g.detach().to("cpu", torch.float64).numpy()
                                for g, f in zip(upstream, full))))


def _to_theta(flat_full: np.ndarray, ex: _inputs.Example) -> Potentials:
    """A flat full-layout gradient summed onto θ's (possibly compact) layout."""
    return reduce_to(unflatten(np.asarray(flat_full, dtype=float), ex.structure.expand(ex.array)), ex.array)


class _Relaxed(torch.autograd.Function):
    """A relaxed argmax (SparseMAP or perturbed) in the full statistics layout; backward = the core's vjp."""

    @staticmethod
    def forward(ctx, ex: _inputs.Example, kind: str, options: dict[str, Any], *fields: torch.Tensor):
        full = ex.structure.expand(ex.array)
        core, vjp, core_options = _core(kind, options)
        result = core(ex.structure, full, **core_options)
        _warn_unconverged(result, ex, options)
        ctx.result, ctx.ex, ctx.vjp = result, ex, vjp
        return tuple(_inputs.to_tensors(result.stats, ex.dtype, ex.device))

    @staticmethod
    @once_differentiable
    def backward(ctx, *upstream: torch.Tensor):
        ex = ctx.ex
        grad = _to_theta(ctx.vjp(ctx.result, _full_grad(ex, upstream)), ex)
        return (None, None, None, *_inputs.to_tensors(grad, ex.dtype, ex.device))


def sparsemap(structure: Any, theta: Any, *, tol: float = 1e-9, max_iter: int = 1000,
              relaxation: str = "marginal") -> Any:
    """SparseMAP ``μ* = argmax_{μ ∈ M} <θ, μ> − ½‖μ‖²`` as a differentiable layer (potentials of tensors).

    μ* is a sparse combination of a few vertices found by an active-set method that calls only the
    structure's ``argmax``, to the Frank–Wolfe gap ``tol``; the backward is the Jacobian on the final active
    set (Niculae et al., 2018, Prop. 1). Works for every structure (on a ``FactorGraph``: SparseMAP over its
    marginal polytope with exact MAP). ``relaxation="local"``: LP-SparseMAP, the projection onto the
    structure's ``polytope()`` description (a ``FactorGraph``'s local polytope; fractional on loopy graphs)
    by one QP, backward through its tight constraints (:func:`structopt.sparsemap.lp_sparsemap`; ``tol`` and
    ``max_iter`` do not apply). Returns potentials of tensors in the structure's full statistics layout (a
    list for a list).
    """
    options = check_options("sparsemap", {"tol": tol, "max_iter": max_iter, "relaxation": relaxation})
    batch, is_list = _inputs.examples(structure, theta)
    out: list[Any] = [None] * len(batch)
    if options["relaxation"] == "marginal":  # chains the compiled kernels serve: one call per group
        from structopt.torch import _chain_sparsemap as fast

        for members in fast.groups(batch, [j for j, ex in enumerate(batch) if fast.batchable(ex)]):
            fields = _ChainSparseMAP.apply(batch, members, options, *(f for j in members for f in batch[j].fields))
            for b, j in enumerate(members):
                out[j] = type(batch[j].theta)(*fields[2 * b:2 * b + 2])
    for j, ex in enumerate(batch):
        if out[j] is None:
            out[j] = type(ex.theta)(*_Relaxed.apply(ex, "sparsemap", options, *ex.fields))
    return out if is_list else out[0]


def perturbed(structure: Any, theta: Any, *, epsilon: float = 1.0, n_samples: int = 32, seed: int = 0) -> Any:
    """The perturbed argmax ``E_Z[μ(argmax <θ + εZ, μ(y)>)]``, Z ~ N(0, I), as a differentiable layer.

    A Monte Carlo estimate over ``n_samples`` seeded draws; its backward is the Gaussian-noise estimator
    ``(1/ε) E[μ Zᵀ]`` with a control variate (Berthet et al., 2020), the numpy core's
    :func:`structopt.perturbed.perturbed_vjp`. For a fixed ``seed`` the forward is piecewise constant in θ:
    the backward is the gradient of the smoothed expectation, not of this sample average. Returns
    potentials of tensors in the structure's full statistics layout.
    """
    options = check_options("perturbed", {"epsilon": epsilon, "n_samples": n_samples, "seed": seed})
    batch, is_list = _inputs.examples(structure, theta)
    out = [type(ex.theta)(*_Relaxed.apply(ex, "perturbed", options, *ex.fields)) for ex in batch]
    return out if is_list else out[0]


def fenchel_young(kind: str, batch: list[_inputs.Example], gold: list[Any], options: dict[str, Any]) -> list[Any]:
    """The SparseMAP or perturbed Fenchel–Young loss of each example (values and gradients from the numpy cores)."""
    options = check_options(kind, options)
    core, _, core_options = _core(kind, options, loss=True)
    values: list[Any] = [None] * len(batch)
    if kind == "sparsemap" and options["relaxation"] == "marginal":
        _chain_losses(batch, gold, options, values)
    for j, (ex, y) in enumerate(zip(batch, gold)):
        if values[j] is not None:
            continue
        value, grad, result = core(ex.structure, ex.structure.expand(ex.array), y, **core_options)
        _warn_unconverged(result, ex, options)
        values[j] = ValueAndGrad.apply(float(value), _to_theta(grad, ex), *ex.fields)
    return values


def _chain_losses(batch: list[_inputs.Example], gold: list[Any], options: dict[str, Any], values: list[Any]) -> None:
    """The SparseMAP Fenchel–Young losses of the chains the batched kernel serves, into ``values``: the generic
    ``sparsemap_loss``'s value ``½‖θ − μ(y)‖² − ½‖θ − μ*‖² = <θ, μ* − μ(y)> + ½‖μ(y)‖² − ½‖μ*‖²`` clipped at 0,
    gradient ``μ* − μ(y)``; one autograd node per group."""
    from structopt.torch import _chain_sparsemap as fast

    for members in fast.groups(batch, [j for j, ex in enumerate(batch) if fast.batchable(ex)]):
        result = fast.solve_group(batch, members, options["tol"], options["max_iter"])
        g_node, g_pair = fast.gold_stats(result.lengths, [gold[j] for j in members], result.node.shape[2])
        d_node, d_pair = result.node - g_node, result.pair - g_pair
        summed = d_pair.sum(axis=1)  # (B, S, S): the gradient of a shared transition table
        inner = np.einsum("bts,bts->b", result.unary, d_node)
        inner += (np.einsum("ij,bij->b", result.pairwise[0, 0], summed) if result.shared
                  else np.einsum("btij,btij->b", result.pairwise[:, :d_pair.shape[1]], d_pair))
        squares = (np.einsum("bts,bts->b", g_node, g_node) - np.einsum("bts,bts->b", result.node, result.node)
                   + np.einsum("btij,btij->b", g_pair, g_pair) - np.einsum("btij,btij->b", result.pair, result.pair))
        value = inner + 0.5 * squares
        for b in np.flatnonzero(~(result.gaps <= options["tol"])):
            _warn_unconverged(_Certificate(float(result.gaps[b]), options["tol"]), batch[members[b]], options,
                              stacklevel=4)
        grads = []
        for b, j in enumerate(members):
            L, like = int(result.lengths[b]), batch[j].array
            pair = summed[b] if np.ndim(like[1]) == 2 else d_pair[b, :L - 1]
            grads.append(type(like)(d_node[b, :L], pair))
        fields = [f for j in members for f in batch[j].fields]
        out = _GroupValues.apply(np.maximum(value, 0.0), grads, *fields)
        for j, v in zip(members, out.unbind(0)):
            values[j] = v


class _GroupValues(torch.autograd.Function):
    """The losses ``values`` (B,) of a group of examples whose gradients ``grads`` (one potentials tuple per
    example, θ's layout) are already known; ``fields`` are the examples' fields in turn."""

    @staticmethod
    def forward(ctx, values: np.ndarray, grads: list[Potentials], *fields: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads
        return torch.as_tensor(values, dtype=fields[0].dtype, device=fields[0].device)

    @staticmethod
    @once_differentiable
    def backward(ctx, upstream: torch.Tensor):
        out = []
        for b, grad in enumerate(ctx.grads):
            scale = upstream[b]
            out.extend(scale * torch.as_tensor(g, dtype=upstream.dtype, device=upstream.device) for g in grad)
        return (None, None, *out)


class _Certificate:
    """A batched forward's certificate, as :func:`_warn_unconverged` reads it off a ``SparseMAPResult``."""

    def __init__(self, gap: float, tol: float):
        self.gap, self.converged = gap, gap <= tol


class _ChainSparseMAP(torch.autograd.Function):
    """SparseMAP of a group of chains (:mod:`structopt.torch._chain_sparsemap`) in the full statistics layout;
    the outputs are each member's (unary, pairwise) statistics in turn; backward = the batched Jacobian-vector
    product through each active set, completed by the optimal face's further vertices as the generic
    :func:`structopt.sparsemap.sparsemap` finds them (``face_tries=2``)."""

    @staticmethod
    def forward(ctx, batch: list[_inputs.Example], members: list[int], options: dict[str, Any], *fields: torch.Tensor):
        from structopt.torch import _chain_sparsemap as fast

        result = fast.solve_group(batch, members, options["tol"], options["max_iter"])
        outs = []
        for b, j in enumerate(members):
            ex = batch[j]
            _warn_unconverged(_Certificate(float(result.gaps[b]), options["tol"]), ex, options)
            L = int(result.lengths[b])
            stats = type(ex.array)(result.node[b, :L], result.pair[b, :L - 1])
            outs.extend(_inputs.to_tensors(stats, ex.dtype, ex.device))
        ctx.batch, ctx.result = [batch[j] for j in members], result
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *upstream: torch.Tensor):
        from structopt.torch import _chain_sparsemap as fast

        result, examples = ctx.result, ctx.batch
        g_node, g_pair = np.zeros_like(result.node), np.zeros_like(result.pair)
        for b in range(len(examples)):
            L = int(result.lengths[b])
            for grad, target in ((upstream[2 * b], g_node[b, :L]), (upstream[2 * b + 1], g_pair[b, :L - 1])):
                if grad is not None:
                    target[...] = grad.detach().to("cpu", torch.float64).numpy()
        extra = [_face_labels(ex, result, b, g_node.shape[2]) for b, ex in enumerate(examples)]
        d_node, d_pair = fast.vjp_group(result, g_node, g_pair, extra)
        grads = []
        for b, ex in enumerate(examples):
            theta_grad = fast.onto_theta(d_node[b], d_pair[b], int(result.lengths[b]), ex.array)
            grads.extend(_inputs.to_tensors(theta_grad, ex.dtype, ex.device))
        return (None, None, None, *grads)


def _face_labels(ex: _inputs.Example, result: Any, b: int, S: int) -> np.ndarray | None:
    """The optimal face's vertices outside the active set's affine hull (label sequences), found as the generic
    forward finds them (:func:`structopt.sparsemap.face_directions`, two tries); None when it stopped early."""
    from structopt import sparsemap as core

    if result.status[b] == 2:  # stopped by max_iter: no optimal face to complete
        return None
    full = ex.structure.expand(ex.array)
    flat = flatten(full)
    labels = result.labels(b)
    vertices = np.array([flatten(ex.structure.stats(y, full)) for y in labels])
    mu = result.weights[result.offsets[b]:result.offsets[b + 1]] @ vertices
    vertex = core.vertex_oracle(ex.structure, full, full, "sparsemap")
    face = core.face_directions(vertex, flat, mu, vertices, float(result.gaps[b]), 2)
    if face is None:
        return None
    L = int(result.lengths[b])
    return np.argmax(face[:, :L * S].reshape(len(face), L, S), axis=2)
