"""The perturbed argmax (Berthet, Blondel, Teboul, Cuturi, Vert, Bach, NeurIPS 2020) over any structure.

``y_ε(θ) = E_Z[μ*(θ + εZ)]`` with ``Z ~ N(0, I)`` and ``μ*(θ) = μ(argmax_y <θ, μ(y)>)`` is the gradient
of the smoothed max ``F_ε(θ) = E_Z[max_y <θ + εZ, μ(y)>]``; its Jacobian is
``(1/ε) E_Z[μ*(θ + εZ) Zᵀ]`` (integration by parts against the Gaussian density, whose score is
``−z``). Both are estimated by Monte Carlo from M seeded samples, calling only the structure's exact
argmax (the same oracle as :func:`structopt.sparsemap.sparsemap`: a factor graph's exact MAP, a
grid's exact MAP at non-supermodular perturbations). numpy only, in the flat layout of
:func:`structopt.potentials.flatten`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.options import positive, positive_int, random_state_option
from structopt.potentials import Potentials, flatten, unflatten
from structopt.sparsemap import check_theta, flat_gradient, gold_stats, vertex_oracle

__all__ = ["PerturbedResult", "perturbed_argmax", "perturbed_loss", "perturbed_vjp"]


@dataclass(frozen=True)
class PerturbedResult:
    """Monte Carlo samples of the perturbed argmax and their mean.

    Attributes
    ----------
    stats : Potentials
        ``(1/M) Σ_m μ*(θ + εZ_m)`` in the structure's statistics type.
    samples : (M, d) array
        ``flatten(μ*(θ + εZ_m))``.
    noise : (M, d) array
        The ``Z_m``.
    epsilon : float
    value : float
        ``(1/M) Σ_m max_y <θ + εZ_m, μ(y)>``, the estimate of ``F_ε(θ)``.
    """

    stats: Potentials
    samples: np.ndarray
    noise: np.ndarray
    epsilon: float
    value: float


def _check_options(owner: str, epsilon: Any, n_samples: Any, seed: Any) -> None:
    positive(f"{owner} epsilon", epsilon)
    positive_int(f"{owner} n_samples", n_samples)
    random_state_option(f"{owner} seed", seed)


def perturbed_argmax(structure: Any, theta: Potentials, *, epsilon: float = 1.0, n_samples: int = 32,
                     seed: int | np.random.Generator | None = 0,
                     oracle: Callable[[Potentials], Any] | None = None) -> PerturbedResult:
    """Monte Carlo estimate of the perturbed argmax ``E_Z[μ*(θ + εZ)]`` and of ``F_ε(θ)``.

    Parameters
    ----------
    structure : Structure
        Any structure; its exact argmax is called ``n_samples`` times.
    theta : Potentials
        Finite potentials in the full statistics layout.
    epsilon : float
        Noise scale ε > 0.
    n_samples : int
        M >= 1 samples.
    seed : int, Generator or None
        The noise's source: a seed (the same seed gives the same samples) or a Generator (advanced).
    oracle : callable, optional
        An exact oracle ``theta -> output`` replacing the default (as for :func:`~structopt.sparsemap.sparsemap`).

    Returns
    -------
    PerturbedResult

    Raises
    ------
    InvalidInputError
        For ``epsilon`` not > 0, ``n_samples`` < 1, a bad seed or bad ``theta``, before any oracle call.
    """
    _check_options("perturbed_argmax", epsilon, n_samples, seed)
    flat, template = check_theta(structure, theta, "perturbed_argmax")
    vertex = vertex_oracle(structure, theta, template, "perturbed_argmax", oracle)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    noise = rng.standard_normal((int(n_samples), flat.size))
    samples = np.empty_like(noise)
    scores = np.empty(len(noise))
    for m, z in enumerate(noise):  # one oracle call per sample; Ctrl-C lands between them
        perturbed = flat + epsilon * z
        samples[m] = vertex(perturbed)[0]
        scores[m] = perturbed @ samples[m]
    return PerturbedResult(stats=unflatten(samples.mean(axis=0), template), samples=samples, noise=noise,
                           epsilon=float(epsilon), value=float(scores.mean()))


def perturbed_vjp(result: PerturbedResult, grad: np.ndarray) -> np.ndarray:
    """Monte Carlo vector-Jacobian product of the perturbed argmax: ``(∂y_ε/∂θ)ᵀ g``.

    ``(1/ε) E[<g, μ*(θ + εZ)> Z]``, estimated with the sample mean of ``<g, μ*>`` as a control variate
    (``E[Z] = 0``): ``(1 / (ε (M − 1))) Σ_m (<g, μ_m> − mean) Z_m``, which is unbiased (the factor
    ``M − 1`` accounts for the mean containing the sample itself; a leave-one-out baseline is the same
    estimator). With one sample, no control variate: ``<g, μ_1> Z_1 / ε``.

    Parameters
    ----------
    result : PerturbedResult
    grad : (d,) array (or the structure's potentials, flattened here)

    Returns
    -------
    (d,) array
    """
    if not isinstance(result, PerturbedResult):
        raise InvalidInputError(f"perturbed_vjp needs a PerturbedResult, got {type(result).__name__}")
    g = flat_gradient(grad, result.samples.shape[1], "perturbed_vjp")
    weights = result.samples @ g
    M = len(weights)
    if M == 1:
        return weights[0] * result.noise[0] / result.epsilon
    return (weights - weights.mean()) @ result.noise / (result.epsilon * (M - 1))


def perturbed_loss(structure: Any, theta: Potentials, y_true: Any, **options: Any
                   ) -> tuple[float, np.ndarray, PerturbedResult]:
    """The perturbed Fenchel–Young loss ``F_ε(θ) − <θ, μ(y)>`` and its gradient ``E[μ*(θ + εZ)] − μ(y)``.

    The Fenchel–Young loss is ``F_ε(θ) + Ω_ε(μ(y)) − <θ, μ(y)>`` with ``Ω_ε = F_ε*``; for 0/1 statistics
    every ``μ(y)`` is a vertex of the polytope, where ``Ω_ε(μ(y)) = 0`` (``F_ε(θ) − <θ, μ(y)> >= 0`` by
    Jensen and tends to 0 as θ favours y without bound), so no constant is added. The value is
    estimated as ``(1/M) Σ_m [max_y <θ + εZ_m, μ(y)> − <θ + εZ_m, μ(y_true)>]``: ``−ε<Z_m, μ(y)>`` has mean
    0, so the estimate is unbiased, and every term is >= 0 (each sample's maximum is at least the gold
    output's score), so the estimate is >= 0 and 0 exactly when y_true wins every sample. (For
    integer statistics with a μ(y) that is not a vertex, ``Ω_ε(μ(y)) > 0`` is not added.)

    Parameters
    ----------
    structure, theta
        As for :func:`perturbed_argmax`.
    y_true
        The gold output (checked by ``structure.validate_output``).
    **options
        ``epsilon``, ``n_samples``, ``seed``, ``oracle`` of :func:`perturbed_argmax`.

    Returns
    -------
    value : float
    gradient : (d,) array
        ``flatten(result.stats) − flatten(μ(y_true))``.
    result : PerturbedResult
    """
    unknown = sorted(set(options) - {"epsilon", "n_samples", "seed", "oracle"})
    if unknown:
        raise InvalidInputError(f"perturbed_loss got unknown options {unknown}; it takes epsilon, n_samples, "
                                "seed and oracle")
    _check_options("perturbed_loss", options.get("epsilon", 1.0), options.get("n_samples", 32),
                   options.get("seed", 0))
    flat, _ = check_theta(structure, theta, "perturbed_loss")
    gold = gold_stats(structure, theta, y_true, flat.size, "perturbed_loss")
    result = perturbed_argmax(structure, theta, **options)
    perturbed = flat + result.epsilon * result.noise
    # one sum per sample over the difference: exactly 0 where the sample is the gold output, and >= 0 up to
    # rounding elsewhere (the oracle's output scores at least the gold's)
    margins = np.einsum("md,md->m", perturbed, result.samples - gold)
    return max(float(margins.mean()), 0.0), flatten(result.stats) - gold, result
