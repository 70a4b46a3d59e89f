"""The chain family's packing and model kernels: a ChainModel over a whole problem (dense or CSR tokens).

The kernels work on a :class:`ChainPack`: the token features of all examples concatenated as one
CSR matrix (dense inputs too: the products then skip zero features), token offsets, the per-node
loss costs concatenated the same way, the constant loss terms, each example's token Gram matrix,
and the structure's masks (0 / -inf biases of a constrained chain).
Flat potentials and compact statistics of example i share one layout: the (T, S) unary block,
then the shared (S, S) transition block (start/end/bias weights are folded into the unary block,
whose statistics they read).

``chain_oracle(i, w, pack, theta_out, stats_out) -> loss``
    loss-augmented Viterbi of example i: writes ``A_i w`` (flat) and the compact statistics of the
    maximiser, returns its loss.
``chain_node_sqnorm(i, d, labels, n_labels, pack)``
    ``||A_i^T d||^2`` without the transition block, for ``d`` sparse per token.
``chain_axpy(i, d, scale, out, pack)``
    ``out += scale A_i^T d``, touching only the weights of features present in example i
    (``chain_node_axpy``: the same without the transition block, for ``d`` sparse per token).

Solver loops over these kernels are in :mod:`structopt.fused._chain_passes`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from structopt.structures._chain_kernels import viterbi


class ChainPack(NamedTuple):
    """A chain problem packed for the kernels (numba reads the fields by name)."""

    indptr: np.ndarray        # (N+1,) int64, CSR rows = all tokens of all examples
    indices: np.ndarray       # int32 feature indices (column numbers; scipy's own dtype, not copied)
    values: np.ndarray        # float64 feature values
    tok: np.ndarray           # (n+1,) int64 token offsets of the examples
    costs: np.ndarray         # (N, S) per-node loss costs
    const: np.ndarray         # (n,) constant loss terms
    n_states: int
    n_features: int
    start_end: bool           # start/end weight blocks present
    bias: bool                # bias weight block present
    gram: np.ndarray          # concatenated flattened token Gram matrices x_i x_i^T
    gram_off: np.ndarray      # (n+1,) offsets into gram
    transition_bias: np.ndarray  # (S, S): 0 allowed, -inf forbidden
    start_bias: np.ndarray    # (S,) first-label bias (0 / -inf)
    end_bias: np.ndarray      # (S,) last-label bias (0 / -inf)


# ----------------------------------------------------------------------------- shared pieces
@njit(cache=True, fastmath=True)
def chain_unary_scores(i, w, pack, out):
    """``out`` (T, S) = node potentials of example i: token scores plus start/end and bias."""
    indptr, indices, values, tok = pack.indptr, pack.indices, pack.values, pack.tok
    S, F, start_end, bias = pack.n_states, pack.n_features, pack.start_end, pack.bias
    a = tok[i]
    T = tok[i + 1] - a
    table = w[:F * S].reshape(F, S)
    for t in range(T):
        row_out = out[t]
        row_out[:] = 0.0
        for j in range(indptr[a + t], indptr[a + t + 1]):
            row = table[indices[j]]
            v = values[j]
            for s in range(S):
                row_out[s] += v * row[s]
    extra = F * S + S * S
    if start_end:
        for s in range(S):
            out[0, s] += w[extra + s]
            out[T - 1, s] += w[extra + S + s]
        extra += 2 * S
    if bias:
        for t in range(T):
            for s in range(S):
                out[t, s] += w[extra + s]


@njit(cache=True)
def chain_oracle(i, w, pack, theta_out, stats_out):
    # loss-augmented Viterbi under the masks: writes theta and the statistics of the maximiser, returns its loss
    tok, costs, const, S, F = pack.tok, pack.costs, pack.const, pack.n_states, pack.n_features
    a = tok[i]
    T = tok[i + 1] - a
    unary = np.empty((T, S))
    chain_unary_scores(i, w, pack, unary)
    p0 = F * S
    pairwise = (w[p0:p0 + S * S].reshape(S, S) + pack.transition_bias).reshape(1, S, S)
    augmented = unary + costs[a:a + T]
    augmented[0] += pack.start_bias
    augmented[T - 1] += pack.end_bias
    y, _ = viterbi(augmented, pairwise)
    n_unary = T * S
    theta_out[:n_unary] = unary.ravel()
    theta_out[n_unary:] = w[p0:p0 + S * S]
    stats_out[:] = 0.0
    loss = const[i]
    for t in range(T):
        stats_out[t * S + y[t]] = 1.0
        loss += costs[a + t, y[t]]
        if t > 0:
            stats_out[n_unary + y[t - 1] * S + y[t]] += 1.0
    return loss


@njit(cache=True)
def _extras_sqnorm(d, T, S, start_end, bias):
    # start/end and bias blocks (the transition block is summed by the callers)
    value = 0.0
    if start_end:
        for s in range(S):
            value += d[s] ** 2 + d[(T - 1) * S + s] ** 2
    if bias:
        for s in range(S):
            total = 0.0
            for t in range(T):
                total += d[t * S + s]
            value += total * total
    return value


@njit(cache=True)
def _boundary_axpy(d, T, S, F, start_end, bias, scale, out):
    # start/end and bias blocks of A_i^T d (they read the node block)
    extra = F * S + S * S
    if start_end:
        for s in range(S):
            out[extra + s] += scale * d[s]
            out[extra + S + s] += scale * d[(T - 1) * S + s]
        extra += 2 * S
    if bias:
        for t in range(T):
            for s in range(S):
                out[extra + s] += scale * d[t * S + s]


# ----------------------------------------------------------------------------- shared adjoint side
# the pack holds each example's token Gram matrix x x^T, so ||A_i^T d||^2 costs O(T^2 S) instead of
# a feature-sized product
@njit(cache=True, fastmath=True)
def chain_node_sqnorm(i, d, labels, n_labels, pack):
    """``||A_i^T d||^2`` without the transition block's ``||d_pair||^2`` (callers that build ``d``
    sum that part on the fly). ``labels[t, :n_labels[t]]`` lists the labels where ``d_t`` is
    non-zero (statistics differences are sparse per token), so a token pair costs that many
    products, not S."""
    tok, S, start_end, bias, gram, gram_off = (pack.tok, pack.n_states, pack.start_end, pack.bias, pack.gram,
                                               pack.gram_off)
    T = tok[i + 1] - tok[i]
    g = gram[gram_off[i]:gram_off[i + 1]]
    value = 0.0
    for t1 in range(T):
        k = n_labels[t1]
        if k == 0:
            continue
        own = labels[t1]
        first = t1 * S
        diagonal = 0.0
        for q in range(k):
            diagonal += d[first + own[q]] ** 2
        off_diagonal = 0.0
        for t2 in range(t1 + 1, T):
            other = t2 * S
            dot = 0.0
            for q in range(k):
                s = own[q]
                dot += d[first + s] * d[other + s]
            off_diagonal += g[t1 * T + t2] * dot
        value += g[t1 * T + t1] * diagonal + 2.0 * off_diagonal
    return value + _extras_sqnorm(d, T, S, start_end, bias)


@njit(cache=True, fastmath=True)
def _scatter(indptr, indices, values, a, T, S, F, d, labels, n_labels, scale, out):
    # out[:F*S] viewed as (F, S): row f += scale * x_tf * d_t, visiting the labels[t, :n_labels[t]]
    # where d_t is non-zero, or the whole row when most are (then the S-loop vectorises)
    table = out[:F * S].reshape(F, S)
    coeff = np.empty(S)
    for t in range(T):
        k = n_labels[t]
        if k == 0:
            continue
        for s in range(S):
            coeff[s] = scale * d[t * S + s]
        if 2 * k > S:
            for j in range(indptr[a + t], indptr[a + t + 1]):
                row = table[indices[j]]
                v = values[j]
                for s in range(S):
                    row[s] += v * coeff[s]
        else:
            own = labels[t]
            for j in range(indptr[a + t], indptr[a + t + 1]):
                base = indices[j] * S
                v = values[j]
                for q in range(k):
                    s = own[q]
                    out[base + s] += v * coeff[s]


@njit(cache=True)
def nonzero_labels(d, T, S, labels, n_labels):
    """``labels[t, :n_labels[t]]`` = the labels where the node block of ``d`` is non-zero at token t."""
    for t in range(T):
        c = 0
        for s in range(S):
            if d[t * S + s] != 0.0:
                labels[t, c] = s
                c += 1
        n_labels[t] = c


@njit(cache=True)
def chain_node_axpy(i, d, labels, n_labels, scale, out, pack):
    """``out += scale A_i^T d`` without the transition block (callers that keep it sparse add it),
    for ``d`` whose non-zero node entries ``labels``/``n_labels`` list (see :func:`nonzero_labels`)."""
    S, F = pack.n_states, pack.n_features
    a = pack.tok[i]
    T = pack.tok[i + 1] - a
    _scatter(pack.indptr, pack.indices, pack.values, a, T, S, F, d, labels, n_labels, scale, out)
    _boundary_axpy(d, T, S, F, pack.start_end, pack.bias, scale, out)


@njit(cache=True)
def chain_axpy(i, d, scale, out, pack):
    S, F = pack.n_states, pack.n_features
    T = pack.tok[i + 1] - pack.tok[i]
    n_unary = T * S
    p0 = F * S
    for j in range(S * S):
        out[p0 + j] += scale * d[n_unary + j]
    labels = np.empty((T, S), dtype=np.int64)
    n_labels = np.empty(T, dtype=np.int64)
    nonzero_labels(d, T, S, labels, n_labels)
    chain_node_axpy(i, d, labels, n_labels, scale, out, pack)


def pack_chain_problem(model, structure, X: list, node_costs: list[np.ndarray], consts: np.ndarray) -> ChainPack:
    """Pack a problem's examples (dense or CSR token features) and the structure's masks for the kernels."""
    S, F = model.n_states, model.n_features
    lengths = np.array([x.shape[0] for x in X], dtype=np.int64)
    tok = np.zeros(len(X) + 1, dtype=np.int64)
    tok[1:] = np.cumsum(lengths)
    if any(sp.issparse(x) for x in X):
        stacked = sp.vstack([sp.csr_matrix(x) for x in X], format="csr")
    else:  # one conversion for all dense tokens
        stacked = sp.csr_matrix(np.vstack(X))
    stacked.sort_indices()
    grams = [np.asarray((x @ x.T).todense() if sp.issparse(x) else x @ x.T).ravel() for x in X]
    gram_off = np.zeros(len(X) + 1, dtype=np.int64)
    gram_off[1:] = np.cumsum(lengths * lengths)
    start, end = structure.boundary_bias()
    return ChainPack(
        # copy=False: the stacked matrix is this function's own, so its column numbers and float data are
        # kept as they are (on CoNLL-2000 a widened int64 copy of the indices was 110 MB)
        indptr=stacked.indptr.astype(np.int64), indices=stacked.indices.astype(np.int32, copy=False),
        values=stacked.data.astype(np.float64, copy=False), tok=tok,
        costs=np.ascontiguousarray(np.concatenate(node_costs), dtype=np.float64),
        const=np.asarray(consts, dtype=np.float64), n_states=S, n_features=F, start_end=bool(model.start_end),
        bias=bool(model.bias), gram=np.concatenate(grams), gram_off=gram_off,
        transition_bias=np.ascontiguousarray(structure.transition_bias(), dtype=np.float64),
        start_bias=np.ascontiguousarray(start, dtype=np.float64), end_bias=np.ascontiguousarray(end, dtype=np.float64))
