"""Chains of labels: Viterbi, top-K Viterbi, forward-backward, max-marginals, entropic prox."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, NoReturn

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, check_count, example_error, numeric_array
from structopt.structures import _chain_kernels as kern
from structopt.structures.base import Polytope, Structure, check_eta, product_outputs, random_like, unchanged_methods
from structopt.structures.registry import register_structure


class ChainPotentials(NamedTuple):
    """Potentials (or statistics) of a chain of length T over S states.

    Attributes
    ----------
    unary : ndarray, shape (T, S)
    pairwise : ndarray, shape (S, S) shared by all positions, or (T-1, S, S) per position;
        ``pairwise[..., a, b]`` scores y_t = a followed by y_{t+1} = b. Statistics always use
        the per-position layout.
    """

    unary: np.ndarray
    pairwise: np.ndarray


_F8 = np.dtype(np.float64)


def _kernel_ready(array: object) -> bool:
    """Whether ``array`` is one the compiled per-call path takes as it is: a writeable, C-contiguous float64
    ndarray (one kernel specialisation each for 2-d and 3-d; anything else is converted by the generic path)."""
    if type(array) is not np.ndarray or array.dtype is not _F8:
        return False
    flags = array.flags
    return flags.c_contiguous and flags.writeable


def _mask(name: str, value, shape: tuple[int, ...]) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.shape != shape or arr.dtype != bool:
        raise InvalidInputError(f"{name} must be a boolean array of shape {shape}, got {arr.dtype} {arr.shape}")
    return None if arr.all() else arr.copy()


@register_structure("chain")
class Chain(Structure):
    """Label sequences ``y in {0..S-1}^T``; outputs are int64 arrays of shape (T,).

    Parameters
    ----------
    n_states : int
        Number of labels S.
    allowed : (S, S) bool array, optional
        ``allowed[a, b]`` says whether label b may follow label a (e.g. BIO tagging forbids
        O -> I-X). Every oracle and the polytope honour it; forbidden outputs do not exist.
    allowed_start, allowed_end : (S,) bool arrays, optional
        Labels allowed at the first / last position.
    """

    name = "Chain"
    Potentials = ChainPotentials

    example_variants = (
        {"length": 1, "n_states": 3, "shared": True},
        {"length": 1, "n_states": 2, "shared": False},
        {"length": 2, "n_states": 3, "shared": False},
        {"length": 4, "n_states": 3, "shared": True},
        {"length": 4, "n_states": 3, "shared": False},
        {"length": 5, "n_states": 2, "shared": True},
    )

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, length: int = 4, n_states: int = 3,
                shared: bool = True) -> tuple[Chain, ChainPotentials]:
        """A random chain of ``length`` positions over ``n_states`` labels; ``shared``: one (S, S)
        transition matrix, else one per position pair."""
        T, S = int(length), int(n_states)
        like = ChainPotentials(np.zeros((T, S)), np.zeros((S, S) if shared else (max(T - 1, 0), S, S)))
        return cls(S), random_like(like, rng, integer=integer)

    def __init__(self, n_states: int, allowed: np.ndarray | None = None, allowed_start: np.ndarray | None = None,
                 allowed_end: np.ndarray | None = None):
        self.n_states = S = check_count(n_states, "n_states", "Chain")
        self.allowed = _mask("allowed", allowed, (S, S))
        self.allowed_start = _mask("allowed_start", allowed_start, (S,))
        self.allowed_end = _mask("allowed_end", allowed_end, (S,))
        if self.allowed is not None and not self.allowed.any():
            raise InvalidInputError("allowed forbids every transition: only length-1 chains would exist")
        for name, mask in (("allowed_start", self.allowed_start), ("allowed_end", self.allowed_end)):
            if mask is not None and not mask.any():
                raise InvalidInputError(f"{name} forbids every label: no label sequence of any length would exist")

    @property
    def constrained(self) -> bool:
        """Whether some transitions, first or last labels are forbidden."""
        return self.allowed is not None or self.allowed_start is not None or self.allowed_end is not None

    def __repr__(self) -> str:
        masks = "".join(f", {name}=<{int(np.count_nonzero(~m))} forbidden>" for name, m in
                        (("allowed", self.allowed), ("allowed_start", self.allowed_start),
                         ("allowed_end", self.allowed_end)) if m is not None)
        return f"{type(self).__name__}(n_states={self.n_states}{masks})"

    def kernel_oracles(self) -> frozenset[str]:
        """Oracles the fused chain kernels reproduce: Viterbi, top-K Viterbi and statistics always (masks
        included); the projection and entropic prox only for unconstrained chains."""
        names = ("argmax", "topk", "stats", "score", "expand", "check_potentials", "masked_potentials",
                 "transition_bias", "boundary_bias")
        if not self.constrained:
            names += ("project", "prox_entropy", "marginals")
        return unchanged_methods(self, Chain, names)

    def transition_bias(self) -> np.ndarray:
        """(S, S) array: 0 where a transition is allowed, -inf where it is forbidden."""
        S = self.n_states
        return np.zeros((S, S)) if self.allowed is None else np.where(self.allowed, 0.0, -np.inf)

    def boundary_bias(self) -> tuple[np.ndarray, np.ndarray]:
        """(S,) arrays for the first and last position: 0 where allowed, -inf where forbidden."""
        S = self.n_states
        start = np.zeros(S) if self.allowed_start is None else np.where(self.allowed_start, 0.0, -np.inf)
        end = np.zeros(S) if self.allowed_end is None else np.where(self.allowed_end, 0.0, -np.inf)
        return start, end

    def masked_potentials(self, theta: ChainPotentials, index: int | None = None, *,
                          scan: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``check_potentials`` plus -inf on forbidden transitions and boundary labels (what the kernels get)."""
        unary, pairwise = self.check_potentials(theta, index, scan=scan)
        if not self.constrained:
            return unary, pairwise
        start, end = self.boundary_bias()
        unary = unary.copy()
        unary[0] += start
        unary[-1] += end
        return unary, pairwise + self.transition_bias()

    def feasible(self, y: np.ndarray) -> bool:
        """Whether label sequence ``y`` respects the masks."""
        y = np.asarray(y, dtype=np.int64)
        if self.allowed_start is not None and not self.allowed_start[y[0]]:
            return False
        if self.allowed_end is not None and not self.allowed_end[y[-1]]:
            return False
        return self.allowed is None or bool(np.all(self.allowed[y[:-1], y[1:]]))

    @property
    def states_per_node(self) -> int:
        """Values each node variable takes (the per-node loss hook; see ``Structure``)."""
        return self.n_states

    def node_potentials(self, costs: np.ndarray, like: ChainPotentials) -> ChainPotentials:
        """Potentials with per-node scores ``costs`` (T, S) and no transition scores."""
        return ChainPotentials(np.asarray(costs, dtype=float), np.zeros((self.n_states, self.n_states)))

    # ------------------------------------------------------------------ validation / layout
    def check_potentials(self, theta: ChainPotentials, index: int | None = None, *,
                         scan: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(unary, pairwise3d)`` as contiguous float64 arrays for the kernels.

        ``scan=False`` skips the NaN / +inf scan, for callers whose compiled kernel reports them
        (a status code) in the same pass as its work: the scan in numpy costs more than Viterbi on
        a short chain.
        """
        if not isinstance(theta, tuple) or len(theta) != 2:
            raise example_error(index, f"chain potentials must be ChainPotentials(unary, pairwise), got "
                                       f"{type(theta).__name__}")
        unary = numeric_array(theta.unary, "chain potentials (unary)", index, finite=False)
        pairwise = numeric_array(theta.pairwise, "chain potentials (pairwise)", index, finite=False)
        if unary.ndim < 1 or pairwise.ndim < 2:
            raise example_error(index, f"chain potentials must be (T, {self.n_states}) unary and ({self.n_states}, "
                                       f"{self.n_states}) or (T-1, {self.n_states}, {self.n_states}) pairwise arrays, "
                                       f"got shapes {unary.shape} and {pairwise.shape}")
        for name, arr in (("unary", unary), ("pairwise", pairwise.reshape((-1, *pairwise.shape[-2:])))):
            if not scan:
                break
            bad = np.isnan(arr) | (arr == np.inf)  # -inf is allowed: a forbidden entry
            if bad.any():
                where = tuple(int(v) for v in np.argwhere(bad)[0])
                kind = "NaN" if np.isnan(arr[where]) else "+inf"
                raise example_error(index, f"chain potentials contain {kind} ({name}[{', '.join(map(str, where))}])")
        S = self.n_states
        if unary.ndim != 2 or unary.shape[1] != S or unary.shape[0] < 1:
            raise example_error(index, f"chain unary potentials must have shape (T>=1, {S}), got {unary.shape}")
        T = unary.shape[0]
        if pairwise.shape == (S, S):
            pairwise = pairwise.reshape(1, S, S)
        elif pairwise.shape != (T - 1, S, S):
            raise example_error(index, f"chain pairwise potentials must have shape ({S}, {S}) or "
                                       f"({T - 1}, {S}, {S}), got {pairwise.shape}")
        if T == 1:
            pairwise = np.zeros((1, S, S))
        return unary, np.ascontiguousarray(pairwise)

    def expand(self, theta: ChainPotentials) -> ChainPotentials:
        unary, pairwise = self.check_potentials(theta)
        T, S = unary.shape
        return ChainPotentials(unary, np.broadcast_to(pairwise, (T - 1, S, S)).copy() if T > 1
                               else np.zeros((0, S, S)))

    def validate_output(self, y, like: ChainPotentials, index: int | None = None) -> np.ndarray:
        T = np.shape(like.unary)[0]
        arr = np.asarray(y)
        if arr.dtype.kind not in "biuf":
            raise example_error(index, f"chain output must be an array of integer labels, got dtype {arr.dtype}")
        if arr.shape != (T,):
            raise example_error(index, f"chain output must have shape ({T},), got {arr.shape}")
        if arr.size and (not np.issubdtype(arr.dtype, np.integer)):
            if not np.all(np.equal(np.mod(arr, 1), 0)):
                raise example_error(index, "chain labels must be integers")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_states):
            raise example_error(index, f"chain label out of range [0, {self.n_states}): "
                                       f"min {arr.min()}, max {arr.max()}")
        if self.constrained and arr.size and not self.feasible(arr):
            raise example_error(index, "chain output uses a forbidden transition, first or last label "
                                       "(see Chain.allowed / allowed_start / allowed_end)")
        return arr

    # ------------------------------------------------------------------ statistics
    def stats(self, y, like: ChainPotentials) -> ChainPotentials:
        y = np.asarray(y, dtype=np.int64)
        T, S = len(y), self.n_states
        unary = np.zeros((T, S))
        unary[np.arange(T), y] = 1.0
        pairwise = np.zeros((max(T - 1, 0), S, S))
        pairwise[np.arange(T - 1), y[:-1], y[1:]] = 1.0
        return ChainPotentials(unary, pairwise)

    def expected_stats(self, outputs, weights: np.ndarray, like: ChainPotentials) -> ChainPotentials:
        """``sum_j weights[j] * stats(outputs[j])`` for a (k, T) array of label sequences, vectorised."""
        labels = np.asarray(outputs, dtype=np.int64).reshape(len(weights), -1)
        T, S = labels.shape[1], self.n_states
        node = np.zeros((T, S))
        edge = np.zeros((max(T - 1, 0), S, S))
        pos = np.broadcast_to(np.arange(T), labels.shape)
        np.add.at(node, (pos, labels), weights[:, None])
        if T > 1:
            np.add.at(edge, (pos[:, :-1], labels[:, :-1], labels[:, 1:]), weights[:, None])
        return ChainPotentials(node, edge)

    def score(self, theta: ChainPotentials, y) -> float:
        unary, pairwise = self.check_potentials(theta)
        y = np.asarray(y, dtype=np.int64)
        T = len(y)
        value = unary[np.arange(T), y].sum()
        if T > 1:
            index = np.arange(T - 1) if pairwise.shape[0] > 1 else np.zeros(T - 1, dtype=np.int64)
            value += pairwise[index, y[:-1], y[1:]].sum()
        return float(value)

    def outputs(self, theta: ChainPotentials) -> Iterator[np.ndarray]:
        outputs = product_outputs(np.shape(theta.unary)[0], self.n_states)
        return (y for y in outputs if self.feasible(y)) if self.constrained else outputs

    def polytope(self, theta: ChainPotentials) -> Polytope:
        """Local polytope of the chain (equal to its marginal polytope, since a chain is a tree)."""
        T, S = np.shape(theta.unary)
        n_unary = T * S
        u = np.arange(n_unary).reshape(T, S)
        p = n_unary + np.arange((T - 1) * S * S).reshape(T - 1, S, S)
        rows, cols, vals, b = [], [], [], []
        r = 0
        for t in range(T):  # normalisation of each node
            rows += [r] * S
            cols += list(u[t])
            vals += [1.0] * S
            b.append(1.0)
            r += 1
        for t in range(T - 1):  # marginalisation of each edge onto both end nodes
            for a in range(S):
                rows += [r] * (S + 1)
                cols += [*list(p[t, a, :]), u[t, a]]
                vals += [1.0] * S + [-1.0]
                b.append(0.0)
                r += 1
            for c in range(S):
                rows += [r] * (S + 1)
                cols += [*list(p[t, :, c]), u[t + 1, c]]
                vals += [1.0] * S + [-1.0]
                b.append(0.0)
                r += 1
        if self.constrained:  # forbidden edges and boundary labels carry no mass
            start, end = self.boundary_bias()
            forbidden = [u[0, s] for s in np.flatnonzero(np.isinf(start))]
            forbidden += [u[T - 1, s] for s in np.flatnonzero(np.isinf(end))]
            if T > 1:
                forbidden += list(p[:, np.isinf(self.transition_bias())].ravel())
            for col in forbidden:
                rows.append(r)
                cols.append(col)
                vals.append(1.0)
                b.append(0.0)
                r += 1
        A = sp.csr_matrix((vals, (rows, cols)), shape=(r, n_unary + (T - 1) * S * S))
        like = ChainPotentials(np.zeros((T, S)), np.zeros((T - 1, S, S)))
        return Polytope(A, np.array(b), None, None, like)

    def as_dp(self, length: int):
        """Chains of ``length`` positions as a :class:`~structopt.structures.dp.LabelDP` (the shared DP
        recursion; masks drop hyperedges). Its potentials are ``DPPotentials(flatten(expand(theta)))``
        and its oracles equal this chain's (tests hold them so); the Viterbi and forward-backward
        kernels stay on the hot path."""
        from structopt.structures.dp import LabelDP, path_schedule

        T, S = check_count(length, "length", "Chain.as_dp"), self.n_states
        if T < 1:
            raise InvalidInputError("Chain.as_dp needs length >= 1")
        unary = np.ones((T, S), dtype=bool)
        start, end = self.boundary_bias()
        unary[0] &= np.isfinite(start)
        unary[-1] &= np.isfinite(end)
        pair = np.broadcast_to(np.isfinite(self.transition_bias()), (T - 1, S, S))
        edges = np.column_stack([np.arange(T - 1), np.arange(1, T)])
        return LabelDP(edges, S, path_schedule(T), unary, pair)

    # ------------------------------------------------------------------ oracles
    def _refuse(self, theta: ChainPotentials, status: int, unary: np.ndarray, pairwise: np.ndarray) -> NoReturn:
        """Raise the InvalidInputError of a kernel's non-zero status (error path only)."""
        if status in (kern.HAS_NAN, kern.HAS_POS_INF):
            self.check_potentials(theta)  # names the entry in the caller's own layout
        note = "; the chain's masks (allowed / allowed_start / allowed_end) apply" if self.constrained else ""
        raise InvalidInputError(kern.input_error(status, unary, pairwise, note))

    def argmax(self, theta: ChainPotentials) -> np.ndarray:
        """Viterbi decoding; potentials are finite or -inf (forbidden), NaN and +inf are refused.

        Raises
        ------
        InvalidInputError
            On NaN or +inf potentials, and when the -inf entries (and masks) forbid every label
            sequence (read off the best score inside the kernel: no extra pass over the inputs).
        """
        if type(theta) is ChainPotentials and self.allowed is None and self.allowed_start is None \
                and self.allowed_end is None:
            # per-call path: arrays the kernel takes as they are go straight to one compiled call that
            # checks the shapes, scans for NaN / +inf and decodes; anything else (other dtypes, views,
            # lists, masks, a bad status) takes the generic path below, which converts or names the problem
            unary, pairwise = theta
            if _kernel_ready(unary) and _kernel_ready(pairwise) and unary.ndim == 2 and 2 <= pairwise.ndim <= 3:
                y, status = kern.argmax_entry(unary, pairwise, self.n_states)
                if not status:
                    return y
        unary, pairwise = self.masked_potentials(theta, scan=False)  # the kernel scans
        y, status = kern.viterbi_checked(unary, pairwise)
        if status:
            self._refuse(theta, status, unary, pairwise)
        return y

    def topk(self, theta: ChainPotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact K best sequences (top-K Viterbi).

        Returns
        -------
        labels : int64 array (k', T), sorted by decreasing score; k' = min(k, number of outputs)
        scores : float array (k',)
        """
        k = check_count(k, "k", "Chain.topk")
        unary, pairwise = self.masked_potentials(theta, scan=False)
        status, _ = kern.input_status(unary, pairwise)
        if status:
            self._refuse(theta, status, unary, pairwise)
        if int(k) == 1:  # plain Viterbi: same answer, same tie-breaking, a fraction of the cost
            y, score = kern.viterbi(unary, pairwise)
            labels, scores = y[None, :], np.array([score])
        else:
            labels, scores = kern.topk_viterbi(unary, pairwise, int(k))
        if not scores[0] > -np.inf:  # the best is forbidden: so is every output
            self._refuse(theta, kern.INFEASIBLE, unary, pairwise)
        feasible = np.isfinite(scores)  # masks: fewer outputs may exist than asked for
        return (labels, scores) if feasible.all() else (labels[feasible], scores[feasible])

    def marginals(self, theta: ChainPotentials) -> tuple[float, ChainPotentials]:
        """Forward-backward in log space: ``(log Z, marginals)``, marginals in the stats layout.

        Potentials are finite or -inf (forbidden entries get marginal 0). Raises InvalidInputError
        on NaN or +inf potentials, when every sequence is forbidden, and when log Z is beyond the
        float64 range.
        """
        unary, pairwise = self.masked_potentials(theta, scan=False)  # the kernel scans
        log_z, node, edge, status = kern.forward_backward_checked(unary, pairwise)
        if status:
            self._refuse(theta, status, unary, pairwise)
        return float(log_z), ChainPotentials(node, edge)

    def max_marginals(self, theta: ChainPotentials) -> np.ndarray:
        """(T, S) array: best score of a sequence with y_t = s (-inf where every such sequence is forbidden).

        Raises InvalidInputError when every sequence is forbidden, like the other oracles.
        """
        unary, pairwise = self.masked_potentials(theta, scan=False)
        status, _ = kern.input_status(unary, pairwise)
        if status:
            self._refuse(theta, status, unary, pairwise)
        mm = kern.max_marginals(unary, pairwise)
        if not mm[0].max() > -np.inf:  # position 0's best is the overall best
            self._refuse(theta, kern.INFEASIBLE, unary, pairwise)
        return mm

    def project(self, v: ChainPotentials, tol: float = 1e-9) -> ChainPotentials:
        """Euclidean projection onto the chain's marginal polytope (dual FISTA + semismooth Newton).

        The marginalisation residual of the result is at most ``tol`` (node simplices and edge
        non-negativity hold exactly); see :mod:`structopt.structures._chain_projection`.
        :meth:`project_qp` is the cvxpy reference. Falls back to it if the fast method stalls.
        """
        from structopt.structures._chain_projection import project_chain

        full = self.expand(v)
        forbidden = bool(np.isneginf(full.unary).any() or np.isneginf(full.pairwise).any())
        if self.constrained or forbidden:
            # -inf entries of v (and masks) force those statistics to 0: the projection is onto that
            # face (the limit of the projection as the entries go to -inf), which exists only when
            # some label sequence avoids them all. The fast method has no zero-forced entries.
            unary, pairwise = self.masked_potentials(full)
            _, status = kern.viterbi_checked(unary, pairwise)
            if status:
                self._refuse(v, status, unary, pairwise)
            return self.project_qp(v)
        node, edge, residual, _ = project_chain(full.unary, full.pairwise, tol=tol)
        if not residual <= tol:
            return self.project_qp(v)
        return ChainPotentials(node, edge)

    def projector(self, tol: float = 1e-8, warm: bool = True) -> ChainProjector | None:
        """A stateful Euclidean projector with warm-started multipliers (:class:`ChainProjector`), or None
        where the chain kernels do not compute this structure's :meth:`project` (masks, an override):
        callers then use :meth:`project`."""
        return ChainProjector(self, tol, warm) if chain_kernels_serve(self, ("project",)) else None

    def prox_entropy(self, mu: ChainPotentials, step: ChainPotentials, eta: float) -> ChainPotentials:
        """Entropic (KL) prox on the chain's marginal polytope.

        Returns the marginals of ``p'(y) ∝ p_mu(y) exp(eta <step, stats(y)>)``, where ``p_mu`` is
        the chain distribution with marginals ``mu`` — i.e. ``argmax_z eta<step, z> - KL(z||mu)``.
        ``mu`` must be strictly positive (entropic iterates are), except, on a constrained chain, on
        entries that no feasible output reaches, which stay zero.
        """
        eta = check_eta(eta, "Chain.prox_entropy")
        if not isinstance(mu, tuple) or len(mu) != 2:
            raise InvalidInputError(f"prox_entropy needs marginals mu as ChainPotentials, got {type(mu).__name__}")
        node = numeric_array(mu[0], "prox_entropy marginals mu (unary)")
        edge = numeric_array(mu[1], "prox_entropy marginals mu (pairwise)")
        T = node.shape[0] if node.ndim == 2 else -1
        if node.shape != (T, self.n_states) or T < 1 or edge.shape != (T - 1, self.n_states, self.n_states):
            raise InvalidInputError(f"prox_entropy needs marginals mu in the statistics layout (T, {self.n_states}) "
                                    f"and (T-1, {self.n_states}, {self.n_states}), got {node.shape} and {edge.shape}")
        if np.any(node < 0) or np.any(edge < 0) or (not self.constrained and (np.any(node == 0) or np.any(edge == 0))):
            raise InvalidInputError("prox_entropy needs strictly positive marginals mu")
        degree = np.full(T, 2.0)
        degree[[0, -1]] = 1.0
        if T == 1:
            degree[:] = 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            log_node, log_edge = np.log(node), np.log(edge)
            # p(y) = prod edge marginals / prod node marginals^(degree-1); a zero node's edges are zero too
            log_unary = np.where(node > 0, -(degree - 1.0)[:, None] * log_node, -np.inf if T == 1 else 0.0)
        step = self.expand(step)
        theta = ChainPotentials(log_unary + eta * step.unary, log_edge + eta * step.pairwise)
        return self.marginals(theta)[1]


def chain_kernels_serve(structure, oracles: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether the chain kernels compute ``oracles`` of ``structure`` exactly.

    The projection and prox kernels (:mod:`structopt.structures._chain_projection`, the fused
    z-pass) reproduce :class:`Chain`'s own ``project``, ``prox_entropy`` and ``marginals``. They
    serve a structure that has those very methods (not overrides, not another structure's) and
    declares, through ``kernel_oracles()``, that the kernels reproduce them there (an unconstrained
    chain). Listing the names alone is not enough: a grid's ``project`` is not the chain's.
    """
    return (frozenset(oracles) <= structure.kernel_oracles()
            and all(getattr(type(structure), name, None) is getattr(Chain, name) for name in oracles))


class ChainProjector:
    """Euclidean projections onto a chain's marginal polytope, warm-started per slot.

    Each slot (a hashable key, e.g. ``(example, phase)``) keeps the dual multipliers of its last
    projection, which makes the next nearby projection cheap. The multipliers decide the last bits
    of every projection, so :meth:`state` / :meth:`load_state` carry them through checkpoints.

    Parameters
    ----------
    structure : Chain
        An unconstrained chain (see :meth:`Chain.projector`).
    tol : float
        Marginalisation residual certified by each projection; the cvxpy reference QP
        (``structure.project_qp``) answers when the fast method stalls above it.
    warm : bool
        Keep the multipliers per slot (otherwise every projection starts from zero).
    """

    def __init__(self, structure: Chain, tol: float = 1e-8, warm: bool = True):
        self.structure = structure
        self.tol = float(tol)
        self._warm: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] | None = {} if warm else None
        self.max_residual = 0.0

    def project(self, point: ChainPotentials, key: tuple[int, ...] | None = None) -> ChainPotentials:
        """Projection of ``point`` (full statistics layout), warm-started from slot ``key`` (None: cold)."""
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

    def state(self) -> dict:
        """The warm-start multipliers per slot (``"i,j"`` keys) and the largest residual so far."""
        warm = None if self._warm is None else {",".join(map(str, key)): list(pair)
                                                for key, pair in self._warm.items()}
        return {"warm": warm, "max_residual": self.max_residual}

    def load_state(self, state: dict) -> None:
        """Inverse of :meth:`state`."""
        if self._warm is not None and state["warm"] is not None:
            self._warm = {tuple(int(k) for k in key.split(",")): (np.array(lo, dtype=float), np.array(hi, dtype=float))
                          for key, (lo, hi) in state["warm"].items()}
        self.max_residual = float(state["max_residual"])
