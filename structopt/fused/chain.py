"""The chain kernel family: :class:`~structopt.models.chain.ChainModel` problems in whole fused passes.

Packing (:mod:`structopt.fused._chain_pack`: token features, loss costs, Gram matrices, the
structure's masks), the solver loops over it (:mod:`structopt.fused._chain_passes`) and the dual
extragradient's z-pass (:mod:`structopt.fused._chain_extragradient`). The structure's own kernels
(Viterbi, forward-backward, the projection) are the structures package's, imported downwards.

The family serves a problem only where its kernels compute exactly that problem's oracles: a
ChainModel (registered by exact type) whose kernel methods are ChainModel's own, a structure whose
``kernel_oracles()`` cover Viterbi under its masks, and a decomposable loss that scores nodes only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.fused import FusedInputs, FusedProblem, KernelFamily, register_family
from structopt.fused import _chain_extragradient as zk
from structopt.fused import _chain_passes as passes
from structopt.fused import _chain_smooth as smooth
from structopt.fused._chain_pack import pack_chain_problem
from structopt.models.chain import ChainModel
from structopt.structures.base import unchanged_methods
from structopt.structures.chain import chain_kernels_serve

#: what the kernels reproduce: the model's methods and the structure's oracles
KERNEL_METHODS = ("potentials", "add_features", "reduce_stats", "features_sqnorm", "unpack", "blocks")
KERNEL_ORACLES = frozenset({"argmax", "stats", "score", "expand", "masked_potentials", "transition_bias",
                            "boundary_bias"})
#: structure oracles the z-pass reproduces, per geometry
ZPASS_ORACLES = {"euclidean": frozenset({"project"}), "entropic": frozenset({"prox_entropy", "marginals"})}


class ChainFamily(KernelFamily):
    """Chain models with dense or CSR token features (see the module docstring)."""

    name = "chain"
    hinge_terms = staticmethod(passes.hinge_terms)
    adjoint_sum = staticmethod(passes.adjoint_sum)
    fw_pass = staticmethod(passes.fw_pass)
    oracle_steps = staticmethod(passes.oracle_steps)
    block_index = staticmethod(passes.block_index)
    bcfw_steps = staticmethod(passes.bcfw_steps)
    ssg_steps = staticmethod(passes.ssg_steps)
    smooth_snapshot = staticmethod(smooth.smooth_snapshot)
    lazy_smooth_steps = staticmethod(smooth.lazy_smooth_steps)
    smooth_oracle_only = staticmethod(smooth.smooth_oracle_only)

    def refusal(self, model: Any, structure: Any, loss: Any) -> str | None:
        changed = sorted(set(KERNEL_METHODS) - unchanged_methods(model, ChainModel, KERNEL_METHODS))
        if changed:
            return f"{type(model).__name__} overrides {', '.join(changed)}, which the chain kernels compute"
        missing = sorted(KERNEL_ORACLES - structure.kernel_oracles())
        if missing:
            return f"{structure!r}'s kernel_oracles() do not cover {', '.join(missing)}"
        if not loss.decomposable:
            return f"{loss!r} is not decomposable (linear in the statistics)"
        return None

    def pack(self, inputs: FusedInputs) -> tuple[Any, np.ndarray] | str:
        costs, consts = [], []
        for c, const in inputs.terms:
            if np.any(np.asarray(c.pairwise) != 0):
                return f"{inputs.loss!r} scores transitions; the chain kernels take per-node losses only"
            costs.append(np.asarray(c.unary, dtype=float))
            consts.append(const)
        model = inputs.model
        pack = pack_chain_problem(model, inputs.structure, inputs.X, costs, np.array(consts))
        return pack, np.diff(pack.tok) * model.n_states + model.n_states ** 2

    def smooth_refusal(self, structure: Any, kind: str) -> str | None:
        # top-K: Chain's own top-K Viterbi under the masks; entropy: the marginals the kernels reproduce
        # (unconstrained chains); both as the structure's kernel_oracles() declare them
        if kind == "topk":
            if not chain_kernels_serve(structure, {"topk"}):
                return f"{type(structure).__name__} overrides topk, which the chain kernels compute"
            return None
        if kind == "entropy":
            if not chain_kernels_serve(structure, {"marginals"}):
                return "the chain kernels' marginals need a structure whose kernel_oracles() include marginals"
            return None
        return f"unknown smoothing kind {kind!r}"

    def all_node_potentials(self, view: FusedProblem, w: np.ndarray) -> np.ndarray:
        out = np.empty((int(view.pack.tok[-1]), int(view.pack.n_states)))
        smooth.all_unary(w, view.pack, out)
        return out

    def smooth_pack(self, view: FusedProblem) -> np.ndarray:
        # the gold labels of all tokens, concatenated (at the pack's token offsets): the gold score
        return np.concatenate([np.asarray(y, dtype=np.int64).ravel() for y in view.problem.Y])

    def zpass_refusal(self, structure: Any, geometry: str) -> str | None:
        oracles = ZPASS_ORACLES.get(geometry)
        if oracles is None:
            return f"unknown geometry {geometry!r}"
        if not chain_kernels_serve(structure, oracles):
            return f"the chain z-pass needs a structure whose kernel_oracles() include {sorted(oracles)}"
        return None

    def zpass(self, view: FusedProblem, geometry: str, **options: Any) -> ChainZPass:
        return ChainZPass(view, geometry, **options)


class ChainZPass:
    """z-side of one dual-extragradient iteration in one numba call over all examples
    (:func:`structopt.fused._chain_extragradient.chain_z_pass`), memory-light."""

    compiled = True

    def __init__(self, view: FusedProblem, geometry: str, beta: float, sigma: float, tol: float,
                 centre: str = "gold", centre_potential: float = 0.0, max_iter: int = 200):
        if geometry not in ZPASS_ORACLES:
            raise InvalidInputError(f"unknown geometry {geometry!r}; use 'euclidean' or 'entropic'")
        problem = view.problem
        self.beta = float(beta)
        self.problem = problem
        self.data = view.pack
        self.entropic = geometry == "entropic"
        self.sigma = float(sigma)
        tok, S = self.data.tok, int(self.data.n_states)
        edges = int(tok[-1] - tok[0]) - problem.n
        self.warm = np.zeros((2, 2, max(edges, 0), S))
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.stats = np.zeros(4)
        self.max_residual = 0.0
        self.projection_iterations = 0.0
        self.centre_potential = float(centre_potential)
        self.labels = (np.concatenate([np.asarray(y, dtype=np.int64) for y in problem.Y]) if centre == "gold"
                       else np.zeros(0, dtype=np.int64))

    def run(self, W: np.ndarray, lam_acc: float, v_w: np.ndarray, eta: float):
        """``(sum A_i^T v_i, sum A_i^T u_i, sum <c_i, u_i>, sum ||v_i - u_i||^2)``."""
        r = np.empty(self.problem.n_params)
        q = np.empty(self.problem.n_params)
        zk.chain_z_pass(self.data, W, float(lam_acc), v_w, float(eta), self.beta, 1.0 / self.problem.n,
                        self.entropic, self.labels, self.centre_potential, self.warm, self.tol, self.max_iter, r, q,
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
        """``sum_i ||A_i x||^2`` (full statistics layout)."""
        return float(zk.chain_sum_sq_theta(self.data, np.ascontiguousarray(x, dtype=np.float64)))

    def operator_norm(self, n_iter: int, rng) -> float:
        """``||B||_2`` by power iteration (see :func:`structopt.solvers._eg_operator.operator_norm`)."""
        x = rng.normal(size=self.problem.n_params)
        x /= np.linalg.norm(x)
        y = np.empty_like(x)
        estimate = 0.0
        for _ in range(int(n_iter)):
            estimate = zk.chain_normal_product(self.data, x, y)  # = x^T (B B^T) x for unit x
            norm = np.linalg.norm(y)
            if norm == 0.0:
                return 0.0
            x = y / norm
        return float(np.sqrt(max(estimate, 0.0)))


CHAIN = ChainFamily()
register_family(ChainModel, CHAIN)
