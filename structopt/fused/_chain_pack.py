"""The chain family's packing and model kernels: a ChainModel over a whole problem (dense or CSR tokens).

The kernels work on a :class:`ChainPack`: the token features of all examples concatenated as one
CSR matrix (dense inputs too: the products then skip zero features), token offsets, the per-node
loss costs concatenated the same way, the constant loss terms, each example's token Gram matrix,
and the structure's masks (0 / -inf biases of a constrained chain).

The pack holds no second copy of what the problem already holds when it can avoid one: CSR
examples whose column numbers are consecutive windows of one buffer (as
:func:`structopt.tasks.conll.featurize` makes them) are read in place; binary features (every
value 1.0) keep no values at all (``binary``: the products skip the multiplication by 1.0, which
is exact, so the sums are the same); the Gram matrices are stored as their upper triangles, and
they and the loss costs in the narrowest dtype that holds every value exactly
(:func:`structopt.fused.narrowest_exact`: uint8 for small counts and 0/1 costs). Every kernel
reads them into float64 arithmetic: the results are those of the float64 pack.
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

from structopt.fused import narrowest_exact
from structopt.structures._chain_kernels import viterbi


class ChainPack(NamedTuple):
    """A chain problem packed for the kernels (numba reads the fields by name)."""

    indptr: np.ndarray        # (N+1,) int64, CSR rows = all tokens of all examples
    indices: np.ndarray       # int32 feature indices (column numbers; the examples' own buffer when shared)
    values: np.ndarray        # float64 feature values (empty when binary)
    binary: bool              # every feature value is 1.0 (values not stored)
    tok: np.ndarray           # (n+1,) int64 token offsets of the examples
    costs: np.ndarray         # (N, S) per-node loss costs (narrowest exact dtype)
    const: np.ndarray         # (n,) constant loss terms
    n_states: int
    n_features: int
    start_end: bool           # start/end weight blocks present
    bias: bool                # bias weight block present
    gram: np.ndarray          # concatenated upper triangles (row after row) of the token Gram matrices
    #                           x_i x_i^T (narrowest exact dtype)
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
        if pack.binary:  # v = 1.0: v * row[s] is row[s] exactly
            for j in range(indptr[a + t], indptr[a + t + 1]):
                row = table[indices[j]]
                for s in range(S):
                    row_out[s] += row[s]
        else:
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
# the pack holds each example's token Gram matrix x x^T (its upper triangle), so ||A_i^T d||^2 costs
# O(T^2 S) instead of a feature-sized product
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
    row = 0  # start of row t1 of the upper triangle: entries (t1, t1), (t1, t1 + 1), ..., (t1, T - 1)
    for t1 in range(T):
        k = n_labels[t1]
        if k == 0:
            row += T - t1
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
            off_diagonal += float(g[row + t2 - t1]) * dot
        value += float(g[row]) * diagonal + 2.0 * off_diagonal
        row += T - t1
    return value + _extras_sqnorm(d, T, S, start_end, bias)


@njit(cache=True, fastmath=True)
def _scatter(indptr, indices, values, binary, a, T, S, F, d, labels, n_labels, scale, out):
    # out[:F*S] viewed as (F, S): row f += scale * x_tf * d_t, visiting the labels[t, :n_labels[t]]
    # where d_t is non-zero, or the whole row when most are (then the S-loop vectorises); binary
    # features (x_tf = 1.0) skip the product, which is exact
    table = out[:F * S].reshape(F, S)
    coeff = np.empty(S)
    for t in range(T):
        k = n_labels[t]
        if k == 0:
            continue
        for s in range(S):
            coeff[s] = scale * d[t * S + s]
        if 2 * k > S:
            if binary:
                for j in range(indptr[a + t], indptr[a + t + 1]):
                    row = table[indices[j]]
                    for s in range(S):
                        row[s] += coeff[s]
            else:
                for j in range(indptr[a + t], indptr[a + t + 1]):
                    row = table[indices[j]]
                    v = values[j]
                    for s in range(S):
                        row[s] += v * coeff[s]
        else:
            own = labels[t]
            if binary:
                for j in range(indptr[a + t], indptr[a + t + 1]):
                    base = indices[j] * S
                    for q in range(k):
                        s = own[q]
                        out[base + s] += coeff[s]
            else:
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
    _scatter(pack.indptr, pack.indices, pack.values, pack.binary, a, T, S, F, d, labels, n_labels, scale, out)
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


def _owner(array: np.ndarray) -> np.ndarray:
    """The array at the end of ``array``'s chain of ndarray bases (the one whose memory it views)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _in_place(arrays: list[np.ndarray]) -> np.ndarray | None:
    """One array over the memory of ``arrays`` laid end to end, when they are consecutive windows of one
    contiguous 1-D buffer (in order, nothing between them); else None."""
    first = arrays[0]
    owner = _owner(first)
    if owner.ndim != 1 or not owner.flags.c_contiguous or owner.dtype != first.dtype:
        return None
    item = owner.itemsize
    start, rest = divmod(_address(first) - _address(owner), item)
    if rest or start < 0:
        return None
    position = start
    for a in arrays:
        if (a.dtype != owner.dtype or a.ndim != 1 or (a.size > 1 and a.strides[0] != item)
                or (a.size and (_address(a) != _address(owner) + position * item or _owner(a) is not owner))):
            return None
        position += a.size
    if position > owner.size:
        return None
    return owner[start:position]


def _stack_features(X: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(indptr, indices, values, binary)`` of the examples' token rows stacked in one CSR matrix with
    sorted column numbers (``values`` empty when every value is 1.0); the examples' own buffers when
    they are CSR with sorted int32 column numbers laid end to end in one buffer (no copy)."""
    if all(sp.issparse(x) and x.format == "csr" and x.has_sorted_indices and x.indices.dtype == np.int32 for x in X):
        indices = _in_place([x.indices[:x.nnz] for x in X])
        if indices is not None:
            nnz = np.array([x.nnz for x in X], dtype=np.int64)
            first = np.zeros(len(X), dtype=np.int64)
            np.cumsum(nnz[:-1], out=first[1:])
            rows = np.array([x.shape[0] for x in X], dtype=np.int64)
            indptr = np.zeros(int(rows.sum()) + 1, dtype=np.int64)
            indptr[1:] = np.concatenate([x.indptr[1:] for x in X]) + np.repeat(first, rows)
            binary = all(bool(np.all(x.data[:x.nnz] == 1.0)) for x in X)
            if binary:
                values = np.zeros(0)
            else:
                values = _in_place([x.data[:x.nnz] for x in X])
                if values is None:
                    values = np.concatenate([np.asarray(x.data[:x.nnz], dtype=np.float64) for x in X])
            return indptr, indices, values, binary
    if any(sp.issparse(x) for x in X):
        stacked = sp.vstack([sp.csr_matrix(x) for x in X], format="csr")
    else:  # one conversion for all dense tokens
        stacked = sp.csr_matrix(np.vstack(X))
    stacked.sort_indices()
    binary = bool(np.all(stacked.data == 1.0))
    # copy=False: the stacked matrix is this function's own (a widened int64 copy of the indices would
    # double their memory)
    return (stacked.indptr.astype(np.int64), stacked.indices.astype(np.int32, copy=False),
            np.zeros(0) if binary else stacked.data.astype(np.float64, copy=False), binary)


def _gram_triangles(X: list, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The upper triangles (row after row) of the examples' token Gram matrices ``x x^T``, concatenated,
    and their offsets."""
    sizes = lengths * (lengths + 1) // 2
    offsets = np.zeros(len(X) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]))
    upper: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i, x in enumerate(X):
        gram = x @ x.T
        gram = gram.toarray() if sp.issparse(gram) else np.asarray(gram)
        T = gram.shape[0]
        if T not in upper:
            upper[T] = np.triu_indices(T)
        out[offsets[i]:offsets[i + 1]] = gram[upper[T]]
    return narrowest_exact(out), offsets


def pack_chain_problem(model, structure, X: list, node_costs: list[np.ndarray], consts: np.ndarray) -> ChainPack:
    """Pack a problem's examples (dense or CSR token features) and the structure's masks for the kernels
    (in place where the examples allow, see the module docstring)."""
    S, F = model.n_states, model.n_features
    lengths = np.array([x.shape[0] for x in X], dtype=np.int64)
    tok = np.zeros(len(X) + 1, dtype=np.int64)
    tok[1:] = np.cumsum(lengths)
    indptr, indices, values, binary = _stack_features(X)
    gram, gram_off = _gram_triangles(X, lengths)
    costs = np.empty((int(tok[-1]), S))
    for i, c in enumerate(node_costs):
        costs[tok[i]:tok[i + 1]] = c
    start, end = structure.boundary_bias()
    return ChainPack(
        indptr=indptr, indices=indices, values=values, binary=binary, tok=tok, costs=narrowest_exact(costs),
        const=np.asarray(consts, dtype=np.float64), n_states=S, n_features=F, start_end=bool(model.start_end),
        bias=bool(model.bias), gram=gram, gram_off=gram_off,
        transition_bias=np.ascontiguousarray(structure.transition_bias(), dtype=np.float64),
        start_bias=np.ascontiguousarray(start, dtype=np.float64), end_bias=np.ascontiguousarray(end, dtype=np.float64))
