"""Chains of labels: Viterbi, top-K Viterbi, forward-backward, max-marginals, entropic prox."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, example_error
from structopt.structures import _chain_kernels as kern
from structopt.structures.base import Polytope, Structure, product_outputs


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


class Chain(Structure):
    """Label sequences ``y in {0..S-1}^T``; outputs are int64 arrays of shape (T,).

    Parameters
    ----------
    n_states : int
        Number of labels S.
    """

    name = "Chain"
    Potentials = ChainPotentials

    def __init__(self, n_states: int):
        if int(n_states) < 1:
            raise InvalidInputError(f"Chain needs n_states >= 1, got {n_states}")
        self.n_states = int(n_states)

    def __repr__(self) -> str:
        return f"Chain(n_states={self.n_states})"

    @property
    def states_per_node(self) -> int:
        """Values each node variable takes (the per-node loss hook; see ``Structure``)."""
        return self.n_states

    def node_potentials(self, costs: np.ndarray, like: ChainPotentials) -> ChainPotentials:
        """Potentials with per-node scores ``costs`` (T, S) and no transition scores."""
        return ChainPotentials(np.asarray(costs, dtype=float), np.zeros((self.n_states, self.n_states)))

    # ------------------------------------------------------------------ validation / layout
    def check_potentials(self, theta: ChainPotentials, index: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(unary, pairwise3d)`` as contiguous float64 arrays for the kernels."""
        unary = np.ascontiguousarray(theta.unary, dtype=np.float64)
        pairwise = np.asarray(theta.pairwise, dtype=np.float64)
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
        if arr.shape != (T,):
            raise example_error(index, f"chain output must have shape ({T},), got {arr.shape}")
        if arr.size and (not np.issubdtype(arr.dtype, np.integer)):
            if not np.all(np.equal(np.mod(arr, 1), 0)):
                raise example_error(index, "chain labels must be integers")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_states):
            raise example_error(index, f"chain label out of range [0, {self.n_states}): "
                                       f"min {arr.min()}, max {arr.max()}")
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
        return product_outputs(np.shape(theta.unary)[0], self.n_states)

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
        A = sp.csr_matrix((vals, (rows, cols)), shape=(r, n_unary + (T - 1) * S * S))
        like = ChainPotentials(np.zeros((T, S)), np.zeros((T - 1, S, S)))
        return Polytope(A, np.array(b), None, None, like)

    # ------------------------------------------------------------------ oracles
    def argmax(self, theta: ChainPotentials) -> np.ndarray:
        """Viterbi decoding; potentials are finite or -inf (forbidden), NaN and +inf are refused."""
        unary, pairwise = self.check_potentials(theta)
        y, status = kern.viterbi_checked(unary, pairwise)
        if status:
            raise InvalidInputError(kern.input_error(status, unary, pairwise))
        return y

    def topk(self, theta: ChainPotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact K best sequences (top-K Viterbi).

        Returns
        -------
        labels : int64 array (k', T), sorted by decreasing score; k' = min(k, S**T)
        scores : float array (k',)
        """
        if int(k) < 1:
            raise InvalidInputError(f"topk needs k >= 1, got {k}")
        unary, pairwise = self.check_potentials(theta)
        if int(k) == 1:  # plain Viterbi: same answer, same tie-breaking, a fraction of the cost
            y, score = kern.viterbi(unary, pairwise)
            return y[None, :], np.array([score])
        return kern.topk_viterbi(unary, pairwise, int(k))

    def marginals(self, theta: ChainPotentials) -> tuple[float, ChainPotentials]:
        """Forward-backward in log space: ``(log Z, marginals)``, marginals in the stats layout.

        Potentials are finite or -inf (forbidden entries get marginal 0). Raises InvalidInputError
        on NaN or +inf potentials, when every sequence is forbidden, and when log Z is beyond the
        float64 range.
        """
        unary, pairwise = self.check_potentials(theta)
        log_z, node, edge, status = kern.forward_backward_checked(unary, pairwise)
        if status:
            raise InvalidInputError(kern.input_error(status, unary, pairwise))
        return float(log_z), ChainPotentials(node, edge)

    def max_marginals(self, theta: ChainPotentials) -> np.ndarray:
        """(T, S) array: best score of a sequence with y_t = s."""
        return kern.max_marginals(*self.check_potentials(theta))

    def project(self, v: ChainPotentials, tol: float = 1e-9) -> ChainPotentials:
        """Euclidean projection onto the chain's marginal polytope (dual FISTA + semismooth Newton).

        The marginalisation residual of the result is at most ``tol`` (node simplices and edge
        non-negativity hold exactly); see :mod:`structopt.structures._chain_projection`.
        :meth:`project_qp` is the cvxpy reference. Falls back to it if the fast method stalls.
        """
        from structopt.structures._chain_projection import project_chain

        full = self.expand(v)
        node, edge, residual, _ = project_chain(full.unary, full.pairwise, tol=tol)
        if not residual <= tol:
            return self.project_qp(v)
        return ChainPotentials(node, edge)

    def prox_entropy(self, mu: ChainPotentials, step: ChainPotentials, eta: float) -> ChainPotentials:
        """Entropic (KL) prox on the chain's marginal polytope.

        Returns the marginals of ``p'(y) ∝ p_mu(y) exp(eta <step, stats(y)>)``, where ``p_mu`` is
        the chain distribution with marginals ``mu`` — i.e. ``argmax_z eta<step, z> - KL(z||mu)``.
        ``mu`` must be strictly positive (entropic iterates are).
        """
        node, edge = np.asarray(mu.unary, dtype=float), np.asarray(mu.pairwise, dtype=float)
        if np.any(node <= 0) or np.any(edge <= 0):
            raise InvalidInputError("prox_entropy needs strictly positive marginals mu")
        T = node.shape[0]
        degree = np.full(T, 2.0)
        degree[[0, -1]] = 1.0
        if T == 1:
            degree[:] = 0.0
        log_unary = -(degree - 1.0)[:, None] * np.log(node)
        step = self.expand(step)
        theta = ChainPotentials(log_unary + eta * step.unary, np.log(edge) + eta * step.pairwise)
        return self.marginals(theta)[1]
