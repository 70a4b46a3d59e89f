"""Structured losses of potentials of tensors: hinge, CRF, smoothed (top-K, entropy), SparseMAP, perturbed.

Every loss is ``L(θ) = (a convex function of θ) − <θ, μ_y>`` with gradient ``(a point of the marginal
polytope) − μ_y`` (``../specs/structured_layers.md`` §1). Loss-augmented decoding goes through the task
loss's own hooks (``Loss.augmented_argmax`` / ``augmented_topk`` / ``augmented_marginals``, whose defaults
add ``Loss.linear_terms`` to θ and call the structure's oracle), the code path ``SSVMProblem`` takes, so a
non-decomposable loss such as ``BoxLoss`` works unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from structopt.contract import has_hook
from structopt.errors import InvalidInputError, NotSupportedError, check_count
from structopt.losses import BoxLoss, Hamming, Loss, MatchingHamming
from structopt.potentials import Potentials, add, inner
from structopt.smoothing import l2_smoothed_max_sorted
from structopt.torch import _inputs
from structopt.torch._autograd import ValueAndGrad, reduce_to
from structopt.torch._chain_fast import chain_argmax
from structopt.torch.decoding import log_partition_of, score

#: the loss kinds of :func:`structured_loss` and the options each accepts (with their defaults)
KINDS: dict[str, dict[str, Any]] = {
    "hinge": {},
    "crf": {},
    "topk": {"mu": 1.0, "k": 5},
    "entropy": {"mu": 1.0},
}
#: kinds whose value involves a task loss Δ (``loss=``)
TASK_LOSS_KINDS = ("hinge", "topk", "entropy")


def default_loss(structure: Any) -> Loss:
    """The task loss used when ``loss=None``: Hamming on structures with per-node labels (``states_per_node``),
    else the structure's own loss by its declared hooks (``MatchingHamming`` for ``edge_potentials``,
    ``BoxLoss`` for ``topk_iou``)."""
    if has_hook(structure, "states_per_node"):
        return Hamming()
    if has_hook(structure, "edge_potentials"):
        return MatchingHamming()
    if has_hook(structure, "topk_iou"):
        return BoxLoss()
    raise NotSupportedError(f"{structure.name} has no per-node labels, so it has no default task loss; "
                            "pass loss= (a structopt.losses.Loss)")


def _options(kind: Any, loss: Any, options: dict[str, Any]) -> dict[str, Any]:
    kinds = {**KINDS, **_relaxed_kinds()}
    if not isinstance(kind, str) or kind not in kinds:
        raise InvalidInputError(f"unknown loss kind {kind!r}; use one of {', '.join(repr(k) for k in kinds)}")
    unknown = sorted(set(options) - set(kinds[kind]))
    if unknown:
        accepted = ", ".join(kinds[kind]) or "none"
        raise InvalidInputError(f"structured_loss(kind={kind!r}) got unknown options {unknown} (accepted: {accepted})")
    if loss is not None and kind not in TASK_LOSS_KINDS:
        raise InvalidInputError(f"structured_loss(kind={kind!r}) takes no task loss (loss= is used by "
                                f"{', '.join(TASK_LOSS_KINDS)})")
    if loss is not None and not isinstance(loss, Loss):
        raise InvalidInputError(f"loss must be a structopt.losses.Loss, got {type(loss).__name__}")
    chosen = {**kinds[kind], **options}
    if "mu" in chosen:
        chosen["mu"] = _inputs.positive(chosen["mu"], "mu", f"structured_loss(kind={kind!r})")
    if "k" in chosen:
        chosen["k"] = check_count(chosen["k"], "k", f"structured_loss(kind={kind!r})")
    if kind not in KINDS:
        from structopt.torch import relaxed

        chosen = relaxed.check_options(kind, chosen)
    return chosen


def check_kind(kind: Any, loss: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` of loss ``kind`` with the defaults filled in, or an :class:`InvalidInputError` naming the bad
    one (an unknown kind or option, a bad value, a task loss where the kind takes none)."""
    return _options(kind, loss, options)


def _relaxed_kinds() -> dict[str, dict[str, Any]]:
    from structopt.torch import relaxed

    return relaxed.KINDS


def structured_loss(structure: Any, theta: Any, y: Any, kind: str = "hinge", loss: Loss | None = None,
                    **options: Any) -> torch.Tensor:
    """A structured loss of each example, differentiable in θ.

    Parameters
    ----------
    structure : Structure or list of Structure
        One structure for every example, or one per example.
    theta : Potentials of tensors, or a list of them
        The structure's potentials NamedTuple with float32/float64 tensors as fields.
    y : output, or a list of outputs
        The gold output(s), in the structure's output type (checked by ``structure.validate_output``).
    kind : {"hinge", "crf", "topk", "entropy", "sparsemap", "perturbed"}
        - ``"hinge"``: ``max_y [<θ, μ(y)> + Δ(y_gold, y)] − <θ, μ_y>``; gradient ``μ(ŷ) − μ_y``.
        - ``"crf"``: ``log Z(θ) − <θ, μ_y>``; gradient ``E_θ[μ] − μ_y`` (twice differentiable).
        - ``"topk"``: the ℓ2-smoothed hinge over the ``k`` best loss-augmented outputs (smoothing ``mu``);
          gradient the smoothed argmax minus ``μ_y``.
        - ``"entropy"``: ``mu log Σ_y exp((<θ, μ(y)> + Δ) / mu) − <θ, μ_y>``; gradient the loss-augmented
          marginals at temperature ``mu`` minus ``μ_y``.
        - ``"sparsemap"`` / ``"perturbed"``: the Fenchel–Young losses of :mod:`structopt.torch.relaxed`.
    loss : structopt.losses.Loss, optional
        The task loss Δ of ``"hinge"``, ``"topk"`` and ``"entropy"``; default :func:`default_loss`.
    **options
        ``mu`` (default 1) and ``k`` (default 5) for the smoothed losses; ``tol`` (1e-9), ``max_iter`` (1000) and
        ``relaxation`` (``"marginal"``, or ``"local"`` for LP-SparseMAP) for ``"sparsemap"``; ``epsilon`` (1),
        ``n_samples`` (32) and ``seed`` (0) for ``"perturbed"``.

    Returns
    -------
    torch.Tensor
        A 0-d tensor for one example, a 1-d tensor for a list; dtype and device of θ. The smoothed and
        relaxed losses are differentiable once (their gradient has no graph); the hinge's gradient is
        piecewise constant.

    Raises
    ------
    InvalidInputError
        A bad argument (theta, y, kind, options, list lengths), before any oracle call.
    NotSupportedError
        The structure lacks an oracle the kind needs (marginals for ``"crf"`` / ``"entropy"``, top-K for
        ``"topk"``) or the task loss does not fit it, before any oracle call.
    """
    kind_options = _options(kind, loss, options)
    batch, is_list = _inputs.examples(structure, theta)
    gold = _inputs.outputs(batch, y, is_list)
    if kind in ("crf", "entropy"):
        _inputs.require(batch, "marginals", f"structured_loss(kind={kind!r})")
    if kind == "topk":
        _inputs.require(batch, "topk", "structured_loss(kind='topk')")
    losses: list[Any] = [None] * len(batch)
    terms: list[Any] = [None] * len(batch)
    if kind in TASK_LOSS_KINDS:
        losses = [loss if loss is not None else default_loss(ex.structure) for ex in batch]
        # the terms exist for this structure and output: refuse before any oracle
        terms = [task.linear_terms(ex.structure, y_ex, ex.array)[0] if task.decomposable else None
                 for ex, task, y_ex in zip(batch, losses, gold)]
    if kind == "crf":
        values = _crf(batch, gold)
    elif kind == "hinge":
        # a loss decoding by the default hook is argmax(θ + c): batched where the chain kernels serve it
        shifts = [c if type(task).augmented_argmax is Loss.augmented_argmax else None for c, task in zip(terms, losses)]
        decoded = chain_argmax(batch, shifts) if is_list else {}
        values = [_hinge(ex, y_ex, task, decoded.get(j)) for j, (ex, y_ex, task) in enumerate(zip(batch, gold, losses))]
    elif kind in KINDS:
        core = _CORES[kind]
        values = [core(ex, y_ex, task, kind_options) for ex, y_ex, task in zip(batch, gold, losses)]
    else:
        from structopt.torch import relaxed

        values = relaxed.fenchel_young(kind, batch, gold, kind_options)
    return torch.stack(values) if is_list else values[0]


# --------------------------------------------------------------------------- the kinds
def gold_stats(ex: _inputs.Example, y: Any) -> Potentials:
    """``μ_y`` in the structure's full statistics layout."""
    return ex.structure.stats(y, ex.array)


def task_value(ex: _inputs.Example, task: Loss, y: Any, y_hat: Any) -> float:
    """``Δ(y, ŷ)``; a relaxed oracle's fractional point (statistics of θ's type, e.g. a factor graph's LP-MAP
    vertex) is valued linearly, ``<c, ŷ> + const``, as ``SSVMProblem.loss_of`` does."""
    if isinstance(y_hat, type(ex.array)) and task.decomposable:
        c, const = task.linear_terms(ex.structure, y, ex.array)
        return inner(c, y_hat) + const
    return float(task(y, y_hat))


def _hinge(ex: _inputs.Example, y: Any, task: Loss, y_hat: Any = None) -> torch.Tensor:
    # y_hat: the loss-augmented argmax when a batched kernel decoded it already (the same output)
    if y_hat is None:
        y_hat = task.augmented_argmax(ex.structure, ex.array, y)
    mu_hat = y_hat if isinstance(y_hat, type(ex.array)) else ex.structure.stats(y_hat, ex.array)
    delta = task_value(ex, task, y, y_hat)
    # <θ, μ(ŷ) − μ_y> + Δ: autograd gives μ(ŷ) − μ_y summed onto θ's layout; its second derivative is 0, as it should
    return score(ex.theta, add(mu_hat, gold_stats(ex, y), -1.0)) + delta


def _topk(ex: _inputs.Example, y: Any, task: Loss, options: dict[str, Any]) -> torch.Tensor:
    s, theta = ex.structure, ex.array
    outputs, values = task.augmented_topk(s, theta, y, options["k"])
    keep = np.flatnonzero(np.isfinite(values))  # fewer than k outputs exist: -inf padding
    outputs, values = [outputs[j] for j in keep], np.asarray(values, dtype=float)[keep]
    gold = gold_stats(ex, y)
    value, weights = l2_smoothed_max_sorted(values - inner(theta, gold), options["mu"])
    used = np.flatnonzero(weights > 0)
    expected = s.expected_stats([outputs[j] for j in used], weights[used], theta)
    return ValueAndGrad.apply(value, reduce_to(add(expected, gold, -1.0), theta), *ex.fields)


def _entropy(ex: _inputs.Example, y: Any, task: Loss, options: dict[str, Any]) -> torch.Tensor:
    s, theta, mu = ex.structure, ex.array, options["mu"]
    log_z, marg, _ = task.augmented_marginals(s, theta, y, mu)
    gold = gold_stats(ex, y)
    value = mu * float(log_z) - inner(theta, gold)
    return ValueAndGrad.apply(value, reduce_to(add(marg, gold, -1.0), theta), *ex.fields)


def _crf(batch: list[_inputs.Example], gold: list[Any]) -> list[torch.Tensor]:
    log_z = log_partition_of(batch)
    return [lz - score(ex.theta, gold_stats(ex, y)) for lz, ex, y in zip(log_z, batch, gold)]


_CORES: dict[str, Callable[..., torch.Tensor]] = {"topk": _topk, "entropy": _entropy}
