"""Prox maps of the z-blocks of the dual extragradient (Euclidean and entropic geometries).

Both geometries use the prox-centre as the start point (uniform marginals) and the block
distance-generating function ``beta * h`` with ``h = 1/2 ||.||^2`` (Euclidean) or the negative
tree entropy (entropic). With ``s`` the accumulated (step-weighted) z-direction:

* look-ahead ``v_z = argmax_z <s, z> - beta * d(z, centre)``;
* step ``u_z = argmax_z <eta g, z> - beta * d(z, v_z)``.

Entropic maps are kept in natural parameters (memory-light variant): ``v_z`` is the marginal vector of
the Gibbs distribution with potentials ``s / beta`` and ``u_z`` that of ``(s + eta g) / beta``,
so marginals are never converted back to parameters.
"""

from __future__ import annotations

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.potentials import Potentials, add, flatten, inner, scale, unflatten
from structopt.solvers import _eg_operator as op


class EuclideanBlocks:
    """Euclidean projections ``Pi(centre + s / beta)`` and ``Pi(v + eta g / beta)``.

    A problem whose structure owns a warm-started projector (``SSVMProblem.projector``, e.g. an
    unconstrained :class:`~structopt.structures.chain.Chain`) is projected through it with two
    multiplier sets per example (look-ahead and step), which is what makes the projections cheap;
    other structures (and a chain whose ``project`` is overridden) use their own ``project``.
    """

    name = "euclidean"

    def __init__(self, problem, beta: float, warm: bool = True, tol: float = 1e-8):
        self.problem = problem
        self.beta = float(beta)
        self._warm = warm
        self._projector = problem.projector(tol, warm)

    @property
    def max_residual(self) -> float:
        return 0.0 if self._projector is None else self._projector.max_residual

    def centre(self, like: Potentials) -> Potentials:
        zero = scale(like, 0.0)
        try:
            return self.problem.marginals(zero)[1]
        except NotSupportedError:
            return self._project(zero, None)

    def _project(self, point: Potentials, key: tuple[int, int] | None) -> Potentials:
        if self._projector is None:
            return self.problem.project(point)
        return self._projector.project(point, key)

    def lookahead(self, i: int, centre: Potentials, s: Potentials) -> Potentials:
        return self._project(add(centre, s, 1.0 / self.beta), (i, 0))

    def state(self) -> dict:
        """The projector's warm-start multipliers (they decide the projections' last bits) and residual."""
        if self._projector is None:
            return {"warm": {} if self._warm else None, "max_residual": 0.0}
        return self._projector.state()

    def load_state(self, state: dict) -> None:
        """Inverse of :meth:`state`."""
        if self._projector is not None:
            self._projector.load_state(state)

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self._project(add(v, eta_g, 1.0 / self.beta), (i, 1))


class EntropicBlocks:
    """Entropic (KL) prox in natural parameters: marginals of ``s / beta`` and ``(s + eta g) / beta``."""

    name = "entropic"

    def __init__(self, problem, beta: float):
        if not problem.has_marginals:
            raise NotSupportedError(f"the entropic geometry needs marginals (a tractable log-partition), "
                                    f"which the structure of {problem!r} does not have; use geometry='euclidean'")
        self.problem = problem
        self.beta = float(beta)

    def centre(self, like: Potentials) -> Potentials:
        return scale(like, 0.0)  # natural parameters of the uniform distribution

    def lookahead(self, i: int, centre: Potentials, s: Potentials) -> Potentials:
        self._centre = centre
        return self.problem.marginals(add(centre, s, 1.0 / self.beta))[1]

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self.problem.marginals(add(self._centre, add(s, eta_g), 1.0 / self.beta))[1]

    def state(self) -> dict:
        return {}  # stateless between iterations

    def load_state(self, state: dict) -> None:
        pass


def make_blocks(geometry: str, problem, beta: float, warm: bool, tol: float):
    """The z-block prox maps of a geometry name, through ``problem``'s polytope oracles."""
    if geometry == "euclidean":
        return EuclideanBlocks(problem, beta, warm=warm, tol=tol)
    if geometry == "entropic":
        return EntropicBlocks(problem, beta)
    raise InvalidInputError(f"unknown geometry {geometry!r}; use 'euclidean' or 'entropic'")


def gold_node_potentials(gold: Potentials, centre_potential: float) -> Potentials:
    """Entropic prox-centre in natural parameters: ``centre_potential`` on the gold output's first field (nodes)."""
    return type(gold)(*([np.asarray(gold[0], dtype=float) * float(centre_potential)] + [scale(gold, 0.0)[k]
                                                                            for k in range(1, len(gold))]))


def entropic_sigma(max_sqnorm: float) -> float:
    """Strong convexity of the KL between output distributions w.r.t. the l2 norm of the statistics.

    With ``k = max_y ||stats(y)||^2`` (``2T - 1`` on a chain), ``||dz||_2^2 <= k ||dp||_1^2 <= 2 k KL``
    (Pinsker), so ``KL >= (sigma / 2) ||dz||^2`` with ``sigma = 1 / k``.
    """
    return 1.0 / max(float(max_sqnorm), 1.0)


class PythonZPass:
    """z-side of one iteration by a per-example Python loop (any structure with project / marginals).

    ``memory_light`` recomputes ``s_{z_i} = (A_i W + Lambda c_i) / n`` from the w-side sums;
    otherwise ``s_{z_i}`` is stored and advanced lazily by the previous w-iterate.
    """

    compiled = False

    def __init__(self, problem, geometry: str, beta: float, sigma: float, memory_light: bool, warm: bool,
                 tol: float, keep_z: bool = False, centre: str = "gold", centre_potential: float = 0.0):
        self.problem = problem
        self.blocks = make_blocks(geometry, problem, beta, warm, tol)
        self.sigma = float(sigma)
        self.terms = [op.loss_vector(problem, i)[0] for i in range(problem.n)]
        if centre == "gold":  # Euclidean: the gold vertex; entropic: natural parameters centre_potential * stats(y_i)
            gold = [problem.gold_stats(i, t) for i, t in enumerate(self.terms)]
            self.centres = (gold if geometry == "euclidean"
                            else [gold_node_potentials(z, centre_potential) for z in gold])
        else:
            self.centres = [self.blocks.centre(t) for t in self.terms]
        self.s_z = None if memory_light else [scale(t, 0.0) for t in self.terms]
        self._pending: tuple[np.ndarray, float] | None = None  # (u_w, eta) not yet folded into s_z
        self.max_residual = 0.0
        self.z_sum = [scale(t, 0.0) for t in self.terms] if keep_z else None  # sum_t eta_t u_{z_i}^t

    def run(self, W: np.ndarray, lam_acc: float, v_w: np.ndarray, eta: float):
        """``(sum A_i^T v_i, sum A_i^T u_i, sum <c_i, u_i>, sum ||v_i - u_i||^2)``; commit with :meth:`commit`."""
        p, n = self.problem, self.problem.n
        r = np.zeros(p.n_params)
        q = np.zeros(p.n_params)
        lin = dz = 0.0
        new_s = [] if self.s_z is not None else None
        self._u = [] if self.z_sum is not None else None
        for i in range(n):
            if self.s_z is None:
                s_i = add(op.block_theta(p, i, W / n), self.terms[i], lam_acc / n)
            else:
                s_i = self.s_z[i]
                if self._pending is not None:
                    u_prev, eta_prev = self._pending
                    s_i = add(s_i, add(op.block_theta(p, i, u_prev / n), self.terms[i], 1.0 / n), eta_prev)
                new_s.append(s_i)
            v_i = self.blocks.lookahead(i, self.centres[i], s_i)
            p.adjoint(i, v_i, r)
            g_i = add(op.block_theta(p, i, v_w / n), self.terms[i], 1.0 / n)
            u_i = self.blocks.step(i, v_i, s_i, scale(g_i, eta))
            p.adjoint(i, u_i, q)
            if self._u is not None:
                self._u.append(u_i)
            lin += inner(self.terms[i], u_i)
            dz += op.diff_sq_norm(v_i, u_i)
        self._candidate = new_s
        self.max_residual = getattr(self.blocks, "max_residual", 0.0)
        return r, q, lin, dz

    def state(self) -> dict:
        """What a resume needs to continue bit for bit: the stored ``s_{z_i}`` (accumulated step by
        step, so not equal to a rebuild from the w-side sums in the last bits), the pending w-step,
        the z averages and the prox maps' warm starts. Plain arrays, lists and floats only."""
        pending = None if self._pending is None else {"u_w": self._pending[0], "eta": float(self._pending[1])}
        return {"s_z": None if self.s_z is None else [flatten(z) for z in self.s_z], "pending": pending,
                "z_sum": None if self.z_sum is None else [flatten(z) for z in self.z_sum],
                "blocks": self.blocks.state(), "max_residual": self.max_residual}

    def load_state(self, state: dict) -> None:
        """Inverse of :meth:`state` (for the same problem and options: the checkpoint's fingerprint)."""
        if self.s_z is not None:
            self.s_z = [unflatten(np.asarray(z, dtype=float), t) for z, t in zip(state["s_z"], self.terms, strict=True)]
            pending = state["pending"]
            self._pending = None if pending is None else (np.array(pending["u_w"], dtype=float), float(pending["eta"]))
        if self.z_sum is not None:
            self.z_sum = [unflatten(np.asarray(z, dtype=float), t) for z, t in zip(state["z_sum"], self.terms,
                                                                                  strict=True)]
        self.blocks.load_state(state["blocks"])
        self.max_residual = float(state["max_residual"])

    def commit(self, u_w: np.ndarray, eta: float) -> None:
        """Accept the last :meth:`run` (stored mode: keep its ``s_z`` and remember ``u_w``)."""
        if self.s_z is not None:
            self.s_z = self._candidate
            self._pending = (u_w.copy(), eta)
        if self.z_sum is not None:
            self.z_sum = [add(a, u, eta) for a, u in zip(self.z_sum, self._u, strict=True)]

    def sum_sq_theta(self, x: np.ndarray) -> float:
        """``sum_i ||A_i x||^2`` (full statistics layout)."""
        return float(sum(op.sq_norm(op.block_theta(self.problem, i, x)) for i in range(self.problem.n)))

    def operator_norm(self, n_iter: int, rng) -> float:
        return op.operator_norm(self.problem, n_iter, rng)
