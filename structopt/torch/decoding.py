"""Decoding and inference on potentials of tensors: argmax, top-K, marginals, log-partition.

Each function takes one structure (or a list, one per example) and the potentials of one example as the
structure's NamedTuple with tensors in place of arrays (or a list of them), calls the structure's own numpy
oracles and returns tensors of the potentials' dtype and device.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from structopt.errors import check_count
from structopt.potentials import Potentials
from structopt.torch import _inputs
from structopt.torch._autograd import LogPartition, Marginals
from structopt.torch._chain_fast import chain_argmax, chain_marginals


class Decoded(NamedTuple):
    """What :func:`argmax` returns.

    For a single example:

    Attributes
    ----------
    stats : Potentials
        ``μ(ŷ)``, the statistics of the decoded output (the structure's full layout) as tensors; constant
        in θ (piecewise), so they carry no gradient.
    output : Any
        ``ŷ`` in the structure's own output type (labels, a matching, a box, ...).
    score : torch.Tensor
        ``<θ, μ(ŷ)>``, a 0-d tensor; differentiable, with gradient ``μ(ŷ)`` (summed onto θ's layout).

    For a list of examples, ``stats`` and ``output`` are lists and ``score`` is a 1-d tensor.
    """

    stats: Any
    output: Any
    score: torch.Tensor


class TopK(NamedTuple):
    """What :func:`topk` returns for one example (a list of these for a list of examples).

    Attributes
    ----------
    stats : list of Potentials
        The statistics of the k best outputs, best first (fewer when fewer outputs exist).
    outputs : list
        Those outputs.
    scores : torch.Tensor
        Their scores ``<θ, μ(y_j)>``, shape (k',), non-increasing; differentiable (gradient of entry j: μ(y_j)).
    """

    stats: list
    outputs: list
    scores: torch.Tensor


def score(theta: Potentials, stats: Potentials) -> torch.Tensor:
    """``<θ, μ>`` with θ of tensors and μ of tensors or arrays (broadcast as in :func:`structopt.potentials.inner`)."""
    total = None
    for t, s in zip(theta, stats):
        s = torch.as_tensor(np.asarray(s, dtype=np.float64), dtype=t.dtype, device=t.device)
        term = (t * s).sum()  # broadcasting, as in Structure.score; the gradient sums onto t's shape
        total = term if total is None else total + term
    return total if total is not None else torch.zeros(())


def argmax(structure: Any, theta: Any) -> Decoded:
    """The highest-scoring output of each example, its statistics and its score.

    Parameters
    ----------
    structure : Structure or list of Structure
        One structure for every example, or one per example.
    theta : Potentials of tensors, or a list of them
        The structure's potentials NamedTuple (e.g. ``ChainPotentials(unary, pairwise)``) with float32 or
        float64 tensors as fields.

    Returns
    -------
    Decoded
        See :class:`Decoded` (lists and a 1-d score tensor for a list of examples).

    Raises
    ------
    InvalidInputError
        A bad argument (type, dtype, shape, non-finite value, list lengths), before any oracle call.
    """
    batch, is_list = _inputs.examples(structure, theta)
    known = chain_argmax(batch) if is_list else {}
    stats, outs, scores = [], [], []
    for j, ex in enumerate(batch):
        y = known[j] if j in known else ex.structure.argmax(ex.array)
        mu = ex.structure.stats(y, ex.array)
        stats.append(_inputs.to_tensors(mu, ex.dtype, ex.device))
        outs.append(y)
        scores.append(score(ex.theta, mu))
    if is_list:
        return Decoded(stats, outs, torch.stack(scores))
    return Decoded(stats[0], outs[0], scores[0])


def topk(structure: Any, theta: Any, k: int) -> TopK | list[TopK]:
    """The ``k`` best outputs of each example (structure's ``topk`` oracle), their statistics and scores.

    Parameters are those of :func:`argmax`, and ``k`` (an integer >= 1). A structure without a top-K oracle
    is refused with :class:`NotSupportedError` before any work.
    """
    k = check_count(k, "k", "structopt.torch.topk")
    batch, is_list = _inputs.examples(structure, theta)
    _inputs.require(batch, "topk", "structopt.torch.topk")
    answers = []
    for ex in batch:
        outs, _ = ex.structure.topk(ex.array, k)
        stats = [ex.structure.stats(y, ex.array) for y in outs]
        scores = [score(ex.theta, mu) for mu in stats]
        answers.append(TopK([_inputs.to_tensors(mu, ex.dtype, ex.device) for mu in stats], list(outs),
                            torch.stack(scores) if scores else ex.theta[0].new_zeros((0,))))
    return answers if is_list else answers[0]


def marginals(structure: Any, theta: Any) -> Potentials | list[Potentials]:
    """The marginals ``E_θ[μ]`` of the Gibbs distribution ``p(y) ∝ exp <θ, μ(y)>``, as potentials of tensors.

    Differentiable: the backward multiplies the upstream gradient by the covariance of μ (the Hessian of
    ``log Z``), obtained by Richardson-extrapolated central differences of the structure's own marginals
    (four marginals calls per backward, about 1e-12 relative error; see
    :func:`structopt.torch._autograd.covariance_product`). Its gradient is not differentiable again.

    Returns the structure's full statistics layout (a chain's (T-1, S, S) transitions even for shared
    (S, S) potentials). A structure without marginals (``supports(structure, "marginals")`` is False:
    matchings, grids, factor graphs, ...) is refused with :class:`NotSupportedError` before any work.
    """
    batch, is_list = _inputs.examples(structure, theta)
    _inputs.require(batch, "marginals", "structopt.torch.marginals")
    out = [type(ex.theta)(*Marginals.apply(ex.structure, type(ex.array), *ex.fields)) for ex in batch]
    return out if is_list else out[0]


def log_partition(structure: Any, theta: Any) -> torch.Tensor:
    """``log Z(θ) = log Σ_y exp <θ, μ(y)>`` per example (a 0-d tensor, or a 1-d tensor for a list).

    Its gradient is the marginals (summed onto θ's layout) and is itself differentiable
    (``create_graph=True``; see :func:`marginals`). A structure without marginals is refused with
    :class:`NotSupportedError` before any work. On a list, unconstrained chains (whose ``marginals`` is
    ``Chain``'s own) run through the batched chain kernel, one compiled call per number of labels.
    """
    batch, is_list = _inputs.examples(structure, theta)
    _inputs.require(batch, "marginals", "structopt.torch.log_partition")
    values = log_partition_of(batch)
    return torch.stack(values) if is_list else values[0]


def log_partition_of(batch: list[_inputs.Example]) -> list[torch.Tensor]:
    """``log Z`` of checked examples (shared by :func:`log_partition` and the CRF loss).

    Chains that the batched chain kernel serves (declared capability, see :mod:`structopt.torch._chain_fast`)
    run in one compiled call per batch; the others call their structure's ``marginals``.
    """
    known = chain_marginals(batch) if len(batch) > 1 else {}
    return [LogPartition.apply(ex.structure, type(ex.array), known.get(j), *ex.fields) for j, ex in enumerate(batch)]
