"""Fused numba kernels of a ChainModel over a whole problem (dense or CSR token features).

A kernel set works on a *packed* problem: the token features of all examples concatenated as one
CSR matrix (dense inputs too: the products then skip zero features), with token offsets, the
per-node loss costs concatenated the same way, and the constant loss terms.
Flat potentials and compact statistics of example i share one layout: the (T, S) unary block,
then the shared (S, S) transition block (start/end/bias weights are folded into the unary block,
whose statistics they read).

Three jitted functions, all with the signature convention used by the solvers' compiled drivers:

``oracle(i, w, data, theta_out, stats_out) -> loss``
    loss-augmented Viterbi of example i: writes ``A_i w`` (flat) and the compact statistics of the
    maximiser, returns its loss.
``sqnorm(i, d, data) -> ||A_i^T d||^2``
``axpy(i, d, scale, out, data)``
    ``out += scale A_i^T d``, touching only the weights of features present in example i.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from structopt.structures._chain_kernels import viterbi


class CompiledKernels(NamedTuple):
    """Packed data plus the jitted oracle / sqnorm / axpy functions (see module docstring)."""

    data: tuple
    oracle: Any
    sqnorm: Any
    axpy: Any
    sizes: np.ndarray  # flat size of example i's potentials


# ----------------------------------------------------------------------------- shared pieces
@njit(cache=True, fastmath=True)
def chain_unary_scores(i, w, data, out):
    """``out`` (T, S) = node potentials of example i: token scores plus start/end and bias."""
    (indptr, indices, values), tok, S, F, start_end, bias = data[0], data[1], data[4], data[5], data[6], data[7]
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
def chain_oracle(i, w, data, theta_out, stats_out):
    # loss-augmented Viterbi: writes theta and the statistics of the maximiser, returns its loss
    tok, costs, const, S, F = data[1], data[2], data[3], data[4], data[5]
    a = tok[i]
    T = tok[i + 1] - a
    unary = np.empty((T, S))
    chain_unary_scores(i, w, data, unary)
    p0 = F * S
    pairwise = w[p0:p0 + S * S].reshape(1, S, S)
    augmented = unary + costs[a:a + T]
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
    n_unary = T * S
    value = 0.0
    for j in range(S * S):
        value += d[n_unary + j] ** 2
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
def _extras_axpy(d, T, S, F, start_end, bias, scale, out):
    n_unary = T * S
    p0 = F * S
    for j in range(S * S):
        out[p0 + j] += scale * d[n_unary + j]
    extra = p0 + S * S
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
# data[8], data[9] hold each example's token Gram matrix x x^T, flattened, and its offsets, so
# ||A_i^T d||^2 costs O(T^2 S) instead of a feature-sized product.
@njit(cache=True, fastmath=True)
def chain_sqnorm(i, d, data):
    tok, S, start_end, bias, gram, gram_off = data[1], data[4], data[6], data[7], data[8], data[9]
    T = tok[i + 1] - tok[i]
    g = gram[gram_off[i]:gram_off[i + 1]]
    node = d[:T * S].reshape(T, S)
    value = 0.0
    for t1 in range(T):
        row1 = node[t1]
        for t2 in range(t1, T):
            weight = g[t1 * T + t2] if t1 == t2 else 2.0 * g[t1 * T + t2]
            if weight != 0.0:
                row2 = node[t2]
                dot = 0.0
                for s in range(S):
                    dot += row1[s] * row2[s]
                value += weight * dot
    return value + _extras_sqnorm(d, T, S, start_end, bias)


@njit(cache=True, fastmath=True)
def _scatter(indptr, indices, values, a, T, S, F, d, scale, out):
    # out[:F*S] viewed as (F, S): row f += scale * x_tf * d_t; rows as views so the S-loop vectorises
    table = out[:F * S].reshape(F, S)
    coeff = np.empty(S)
    for t in range(T):
        for s in range(S):
            coeff[s] = scale * d[t * S + s]
        for j in range(indptr[a + t], indptr[a + t + 1]):
            row = table[indices[j]]
            v = values[j]
            for s in range(S):
                row[s] += v * coeff[s]


@njit(cache=True)
def chain_axpy(i, d, scale, out, data):
    (indptr, indices, values), tok, S, F, start_end, bias = data[0], data[1], data[4], data[5], data[6], data[7]
    a = tok[i]
    T = tok[i + 1] - a
    _scatter(indptr, indices, values, a, T, S, F, d, scale, out)
    _extras_axpy(d, T, S, F, start_end, bias, scale, out)


def build_chain_kernels(model, X: list, node_costs: list[np.ndarray], consts: np.ndarray) -> CompiledKernels | None:
    """Pack a problem's examples (dense or CSR token features) for the fused kernels."""
    S, F = model.n_states, model.n_features
    lengths = np.array([x.shape[0] for x in X], dtype=np.int64)
    tok = np.zeros(len(X) + 1, dtype=np.int64)
    tok[1:] = np.cumsum(lengths)
    costs = np.ascontiguousarray(np.concatenate(node_costs), dtype=np.float64)
    stacked = sp.vstack([sp.csr_matrix(x) for x in X], format="csr")
    stacked.sort_indices()
    csr = (stacked.indptr.astype(np.int64), stacked.indices.astype(np.int64), stacked.data.astype(np.float64))
    grams = [np.asarray((x @ x.T).todense() if sp.issparse(x) else x @ x.T).ravel() for x in X]
    gram_off = np.zeros(len(X) + 1, dtype=np.int64)
    gram_off[1:] = np.cumsum(lengths * lengths)
    data = (csr, tok, costs, np.asarray(consts, dtype=np.float64), np.int64(S), np.int64(F),
            bool(model.start_end), bool(model.bias), np.concatenate(grams), gram_off)
    return CompiledKernels(data, chain_oracle, chain_sqnorm, chain_axpy, lengths * S + S * S)
