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
from structopt.solvers import _eg_operator as op
from structopt.structures.base import Potentials, Structure, add, flatten, inner, scale, unflatten


def chain_kernels_serve(structure, oracles: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether the chain kernels compute ``oracles`` of ``structure`` exactly.

    The chain projection and prox kernels (:func:`structopt.structures._chain_projection.project_chain`,
    :mod:`structopt.models._chain_extragradient`) reproduce the chain's own methods
    (:class:`~structopt.structures.chain.Chain`'s ``project``, ``prox_entropy``, ``marginals``). They
    serve a structure that has those very methods (not overrides, not another structure's) and
    declares, through ``kernel_oracles()``, that the library's kernels reproduce them there (an
    unconstrained chain; a subclass that overrides one drops out). Listing the names alone is not
    enough: a grid's ``project`` is not the chain's.
    """
    from structopt.structures.chain import Chain

    return (frozenset(oracles) <= structure.kernel_oracles()
            and all(getattr(type(structure), name, None) is getattr(Chain, name) for name in oracles))


class EuclideanBlocks:
    """Euclidean projections ``Pi(centre + s / beta)`` and ``Pi(v + eta g / beta)``.

    Where the chain projection kernel serves the structure (:func:`chain_kernels_serve`) it is
    called with per-example warm-started multipliers (two sets per example: look-ahead and step),
    which is what makes it cheap; other structures use their own ``project``.
    """

    name = "euclidean"

    def __init__(self, structure, beta: float, warm: bool = True, tol: float = 1e-8):
        self.structure = structure
        self.beta = float(beta)
        self.tol = float(tol)
        self._fast = chain_kernels_serve(structure, ("project",))
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

    def state(self) -> dict:
        """The warm-start multipliers (they decide the projections' last bits) and the residual."""
        warm = None if self._warm is None else {f"{i},{j}": list(pair) for (i, j), pair in self._warm.items()}
        return {"warm": warm, "max_residual": self.max_residual}

    def load_state(self, state: dict) -> None:
        """Inverse of :meth:`state`."""
        if self._warm is not None and state["warm"] is not None:
            self._warm = {tuple(int(k) for k in key.split(",")): (np.array(lo, dtype=float), np.array(hi, dtype=float))
                          for key, (lo, hi) in state["warm"].items()}
        self.max_residual = float(state["max_residual"])

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self._project(add(v, eta_g, 1.0 / self.beta), (i, 1))


class EntropicBlocks:
    """Entropic (KL) prox in natural parameters: marginals of ``s / beta`` and ``(s + eta g) / beta``."""

    name = "entropic"

    def __init__(self, structure, beta: float):
        if type(structure).marginals is Structure.marginals:
            raise NotSupportedError(f"the entropic geometry needs marginals (a tractable log-partition), "
                                    f"which {structure.name} does not have; use geometry='euclidean'")
        self.structure = structure
        self.beta = float(beta)

    def centre(self, like: Potentials) -> Potentials:
        return scale(like, 0.0)  # natural parameters of the uniform distribution

    def lookahead(self, i: int, centre: Potentials, s: Potentials) -> Potentials:
        self._centre = centre
        return self.structure.marginals(add(centre, s, 1.0 / self.beta))[1]

    def step(self, i: int, v: Potentials, s: Potentials, eta_g: Potentials) -> Potentials:
        return self.structure.marginals(add(self._centre, add(s, eta_g), 1.0 / self.beta))[1]

    def state(self) -> dict:
        return {}  # stateless between iterations

    def load_state(self, state: dict) -> None:
        pass


def make_blocks(geometry: str, structure, beta: float, warm: bool, tol: float):
    """The z-block prox maps of a geometry name."""
    if geometry == "euclidean":
        return EuclideanBlocks(structure, beta, warm=warm, tol=tol)
    if geometry == "entropic":
        return EntropicBlocks(structure, beta)
    raise InvalidInputError(f"unknown geometry {geometry!r}; use 'euclidean' or 'entropic'")


def gold_node_potentials(gold: Potentials, kappa: float) -> Potentials:
    """Entropic prox-centre in natural parameters: ``kappa`` on the gold output's first field (nodes)."""
    return type(gold)(*([np.asarray(gold[0], dtype=float) * float(kappa)] + [scale(gold, 0.0)[k]
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
                 tol: float, keep_z: bool = False, centre: str = "gold", kappa: float = 0.0):
        self.problem = problem
        self.blocks = make_blocks(geometry, problem.structure, beta, warm, tol)
        self.sigma = float(sigma)
        self.terms = [op.loss_vector(problem, i)[0] for i in range(problem.n)]
        if centre == "gold":  # Euclidean: the gold vertex; entropic: natural parameters kappa * stats(y_i)
            gold = [problem.gold_stats(i, t) for i, t in enumerate(self.terms)]
            self.centres = gold if geometry == "euclidean" else [gold_node_potentials(z, kappa) for z in gold]
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
            op.add_features(p, i, v_i, r)
            g_i = add(op.block_theta(p, i, v_w / n), self.terms[i], 1.0 / n)
            u_i = self.blocks.step(i, v_i, s_i, scale(g_i, eta))
            op.add_features(p, i, u_i, q)
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


class ChainZPass:
    """z-side of one iteration in one numba call over all examples (chain models with packed data)."""

    compiled = True

    def __init__(self, problem, fused, geometry: str, beta: float, sigma: float, tol: float, centre: str = "gold",
                 kappa: float = 0.0, max_iter: int = 200):
        if geometry not in ("euclidean", "entropic"):
            raise InvalidInputError(f"unknown geometry {geometry!r}; use 'euclidean' or 'entropic'")
        from structopt.models import _chain_extragradient

        self._k = _chain_extragradient
        self.beta = float(beta)
        self.problem = problem
        self.data = fused.pack
        self.entropic = geometry == "entropic"
        self.sigma = float(sigma)
        tok, S = self.data.tok, int(self.data.n_states)
        edges = int(tok[-1] - tok[0]) - problem.n
        self.warm = np.zeros((2, 2, max(edges, 0), S))
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.stats = np.zeros(4)
        self.max_residual = 0.0
        self.projection_iterations = 0.0
        self.kappa = float(kappa)
        self.labels = (np.concatenate([np.asarray(y, dtype=np.int64) for y in problem.Y]) if centre == "gold"
                       else np.zeros(0, dtype=np.int64))

    def run(self, W: np.ndarray, lam_acc: float, v_w: np.ndarray, eta: float):
        r = np.empty(self.problem.n_params)
        q = np.empty(self.problem.n_params)
        self._k.chain_z_pass(self.data, W, float(lam_acc), v_w, float(eta), self.beta, 1.0 / self.problem.n,
                             self.entropic, self.labels, self.kappa, self.warm, self.tol, self.max_iter, r, q,
                             self.stats)
        if not self.entropic and self.stats[2] > 100.0 * self.tol:  # stalls just above tol are round-off
            raise RuntimeError(f"chain projection not certified: residual {self.stats[2]:.2e} > 100 x {self.tol:.1e}")
        self.max_residual = max(self.max_residual, float(self.stats[2]))
        self.projection_iterations += float(self.stats[3])
        return r, q, float(self.stats[0]), float(self.stats[1])

    def commit(self, u_w: np.ndarray, eta: float) -> None:
        pass

    def state(self) -> dict:
        """The projections' warm-start multipliers (they decide the last bits of every projection)
        and the run's projection statistics."""
        return {"warm": self.warm, "max_residual": self.max_residual,
                "projection_iterations": self.projection_iterations}

    def load_state(self, state: dict) -> None:
        """Inverse of :meth:`state`."""
        warm = np.asarray(state["warm"], dtype=float)
        if warm.shape != self.warm.shape:
            raise InvalidInputError(f"checkpoint's extragradient warm starts have shape {warm.shape}, "
                                    f"this problem's {self.warm.shape}")
        self.warm = np.array(warm, dtype=float)  # a fresh, writable, contiguous copy
        self.max_residual = float(state["max_residual"])
        self.projection_iterations = float(state["projection_iterations"])

    def sum_sq_theta(self, x: np.ndarray) -> float:
        return float(self._k.chain_sum_sq_theta(self.data, np.ascontiguousarray(x, dtype=np.float64)))

    def operator_norm(self, n_iter: int, rng) -> float:
        x = rng.normal(size=self.problem.n_params)
        x /= np.linalg.norm(x)
        y = np.empty_like(x)
        estimate = 0.0
        for _ in range(int(n_iter)):
            estimate = self._k.chain_normal_product(self.data, x, y)  # = x^T (B B^T) x for unit x
            norm = np.linalg.norm(y)
            if norm == 0.0:
                return 0.0
            x = y / norm
        return float(np.sqrt(max(estimate, 0.0)))
