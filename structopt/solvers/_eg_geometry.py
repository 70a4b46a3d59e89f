"""Prox maps of the z-blocks of the dual extragradient (Euclidean and entropic geometries).

Both geometries use the prox-centre as the start point (uniform marginals) and the block
distance-generating function ``beta * h`` with ``h = 1/2 ||.||^2`` (Euclidean) or the negative
tree entropy (entropic). With ``s`` the accumulated (step-weighted) z-direction:

* look-ahead ``v_z = argmax_z <s, z> - beta * d(z, centre)``;
* step ``u_z = argmax_z <eta g, z> - beta * d(z, v_z)``.

Entropic maps are kept in natural parameters (spec section 4): ``v_z`` is the marginal vector of
the Gibbs distribution with potentials ``s / beta`` and ``u_z`` that of ``(s + eta g) / beta``,
so marginals are never converted back to parameters.
"""

from __future__ import annotations

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures.base import Potentials, Structure, add, scale
from structopt.structures.chain import Chain


class EuclideanBlocks:
    """Euclidean projections ``Pi(centre + s / beta)`` and ``Pi(v + eta g / beta)``.

    For chains the fast dual-Newton projection is called with per-example warm-started
    multipliers (two sets per example: look-ahead and step), which is what makes it cheap.
    """

    name = "euclidean"
    sigma = 1.0  # strong convexity of h w.r.t. the l2 norm

    def __init__(self, structure, beta: float, warm: bool = True, tol: float = 1e-8):
        self.structure = structure
        self.beta = float(beta)
        self.tol = float(tol)
        self._fast = isinstance(structure, Chain)
        self._warm: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None = {} if warm else None
        self.max_residual = 0.0

    def centre(self, like: Potentials) -> Potentials:
        zero = scale(like, 0.0)
        try:
            return self.structure.marginals(zero)[1]
        except NotSupportedError:
            return self._project(zero, None)

    def _project(self, point: Potentials, key: tuple[int, int] | None) -> Potentials:
        if not self._fast:
            return self.structure.project(point)
        from structopt.structures._chain_projection import project_chain

        warm = None
        if self._warm is not None and key is not None:
            T, S = np.shape(point.unary)
            warm = self._warm.setdefault(key, (np.zeros((max(T - 1, 0), S)), np.zeros((max(T - 1, 0), S))))
        node, edge, residual, _ = project_chain(point.unary, point.pairwise, tol=self.tol, warm=warm)
        if not residual <= self.tol:  # the fast method stalled: use the reference QP
            return self.structure.project_qp(point)
        self.max_residual = max(self.max_residual, float(residual))
        return type(point)(node, edge)

    def lookahead(self, i: int, centre: Potentials, s: Potentials) -> Potentials:
        return self._project(add(centre, s, 1.0 / self.beta), (i, 0))

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self._project(add(v, eta_g, 1.0 / self.beta), (i, 1))


class EntropicBlocks:
    """Entropic (KL) prox in natural parameters: marginals of ``s / beta`` and ``(s + eta g) / beta``."""

    name = "entropic"

    def __init__(self, structure, beta: float, max_len: int):
        if type(structure).marginals is Structure.marginals:
            raise NotSupportedError(f"the entropic geometry needs marginals (a tractable log-partition), "
                                    f"which {structure.name} does not have; use geometry='euclidean'")
        self.structure = structure
        self.beta = float(beta)
        # KL between chain distributions >= ||dz||_2^2 / (2 (2T - 1)) (Pinsker, per block)
        self.sigma = 1.0 / max(2 * int(max_len) - 1, 1)

    def centre(self, like: Potentials) -> Potentials:
        return self.structure.marginals(scale(like, 0.0))[1]

    def lookahead(self, i: int, centre: Potentials, s: Potentials) -> Potentials:
        return self.structure.marginals(scale(s, 1.0 / self.beta))[1]

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self.structure.marginals(scale(add(s, eta_g), 1.0 / self.beta))[1]


def make_blocks(geometry: str, structure, beta: float, max_len: int, warm: bool, tol: float):
    """The z-block prox maps of a geometry name."""
    if geometry == "euclidean":
        return EuclideanBlocks(structure, beta, warm=warm, tol=tol)
    if geometry == "entropic":
        return EntropicBlocks(structure, beta, max_len)
    raise InvalidInputError(f"unknown geometry {geometry!r}; use 'euclidean' or 'entropic'")
