"""Smoothed chain oracles and the SVRG / SGD passes over them, fused with the chain kernels.

The arithmetic is that of the generic path, step by step:

* the smoothed hinge of example i (:meth:`SSVMProblem.smooth_stats`): top-K Viterbi on the
  loss-augmented potentials and the sorted l2 projection of the scores minus the gold score
  (:func:`structopt.smoothing.l2_smoothed_max_sorted`), or forward-backward on them divided by mu;
  the gradient in compact statistics (expected minus gold), flat in the layout of
  ``SSVMProblem.compact_gold_stats``;
* the SVRG snapshot (:func:`structopt.batch.smooth_snapshot`);
* the lazy sparse step of :class:`structopt.solvers._lazy.LazyIterate`: ``w = a v + b c`` with the
  weighted running sum ``P + B v + C c`` (scalars ``[a, b, B, C, weight]`` in an array), so a step
  touches only the weight rows of the features present in ``x_i``.

The results equal the generic path's up to the order of floating-point sums (tests compare the
iterates). Loops run over the ``order`` they are given; the solvers call them on chunks of a pass,
so that Python (and Ctrl-C) gets control back between calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from structopt.fused._chain_pack import chain_axpy, chain_unary_scores
from structopt.structures._chain_kernels import forward_backward, topk_viterbi, viterbi

_TINY = 1e-12  # as structopt.solvers._lazy: fold the scale into v below this


@njit(cache=True)
def all_unary(w, pack, out):
    """``out[tok[i]:tok[i+1]]`` = the node potentials of every example i at ``w`` ((N, S), all tokens)."""
    tok = pack.tok
    for i in range(tok.shape[0] - 1):
        chain_unary_scores(i, w, pack, out[tok[i]:tok[i + 1]])


@njit(cache=True)
def _lazy_potentials(i, v, a, c, c_unary, b, use_c, pack, unary, pairwise):
    """``A_i (a v + b c)``: unary (T, S) and the shared (S, S) transition block, as LazyIterate.potentials;
    the node potentials of the fixed ``c`` come precomputed (``c_unary``, all tokens)."""
    S, F = pack.n_states, pack.n_features
    p0 = F * S
    chain_unary_scores(i, v, pack, unary)
    unary *= a
    for j in range(S * S):
        pairwise[j] = a * v[p0 + j]
    if use_c and b != 0.0:
        first = pack.tok[i]
        for t in range(unary.shape[0]):
            row = c_unary[first + t]
            for s in range(S):
                unary[t, s] += b * row[s]
        for j in range(S * S):
            pairwise[j] += b * c[p0 + j]


@njit(cache=True)
def _gold_score(unary, pairwise, labels, S):
    score = 0.0
    for t in range(labels.shape[0]):
        score += unary[t, labels[t]]
        if t > 0:
            score += pairwise[labels[t - 1] * S + labels[t]]
    return score


@njit(cache=True)
def _sorted_l2_weights(z, m, mu, u):
    """``u[:m]`` = the weights of :func:`structopt.smoothing.l2_smoothed_max_sorted` for ``z[:m]``
    (sorted non-increasingly); returns the smoothed value ``<u, z> - (mu/2)(||u||^2 - 1)``."""
    k = m
    csum = 0.0
    for j in range(1, m):
        csum += z[j - 1]
        if csum - j * z[j] >= mu:
            k = j
            break
    total = 0.0
    for j in range(k):
        total += z[j]
    mean = total / k
    norm = 0.0
    for j in range(m):
        u[j] = max(0.0, 1.0 / k + (z[j] - mean) / mu) if j < k else 0.0
        norm += u[j]
    value = 0.0
    sq = 0.0
    for j in range(m):
        u[j] /= norm
        value += u[j] * z[j]
        sq += u[j] * u[j]
    return value - 0.5 * mu * (sq - 1.0)


@njit(cache=True)
def smooth_example(i, unary, pairwise, mu, entropic, K, pack, gold, labels, lo, out):
    """Smoothed hinge of example i at potentials ``(unary, pairwise)`` (``A_i w``, without the loss):
    writes the gradient's compact statistics (expected minus gold) to ``out`` and returns the value
    (the generic path's ``SmoothStats.value``)."""
    tok, S = pack.tok, pack.n_states
    a = tok[i]
    T = tok[i + 1] - a
    n_unary = T * S
    augmented = unary + pack.costs[a:a + T]
    augmented[0] += pack.start_bias
    augmented[T - 1] += pack.end_bias
    gold_score = _gold_score(unary, pairwise, labels, S)
    out[:] = 0.0
    if entropic:
        inv = 1.0 / mu
        scaled = augmented * inv  # (theta + c) / mu, then the masks, as Chain.marginals on the scaled potentials
        scaled_pw = np.empty((1, S, S))
        for p in range(S):
            for q in range(S):
                scaled_pw[0, p, q] = pairwise[p * S + q] * inv + pack.transition_bias[p, q]
        log_z, node, edge = forward_backward(scaled, scaled_pw)
        for t in range(T):
            for s in range(S):
                out[t * S + s] = node[t, s]
        for t in range(T - 1):
            for p in range(S):
                for q in range(S):
                    out[n_unary + p * S + q] += edge[t, p, q]
        value = mu * (log_z + pack.const[i] / mu) - gold_score
    else:
        pw = np.empty((1, S, S))
        for p in range(S):
            for q in range(S):
                pw[0, p, q] = pairwise[p * S + q] + pack.transition_bias[p, q]
        if K == 1:
            y, best = viterbi(augmented, pw)
            outputs = y.reshape(1, T)
            scores = np.full(1, best)
        else:
            outputs, scores = topk_viterbi(augmented, pw, K)
        m = 0
        z = np.empty(scores.shape[0])
        for j in range(scores.shape[0]):  # fewer outputs than K: the -inf padding comes last
            if np.isfinite(scores[j]):
                z[m] = scores[j] + pack.const[i] - gold_score
                m += 1
        u = np.empty(m)
        value = _sorted_l2_weights(z, m, mu, u)
        for j in range(m):
            if u[j] > 0.0:
                for t in range(T):
                    out[t * S + outputs[j, t]] += u[j]
                    if t > 0:
                        out[n_unary + outputs[j, t - 1] * S + outputs[j, t]] += u[j]
    for j in range(out.shape[0]):
        out[j] -= gold[lo + j]
    return value


@njit(cache=True)
def smooth_snapshot(w, mu, entropic, K, pack, gold, offsets, labels, inv_n, diffs, grad, start, stop):
    """SVRG snapshot at ``w`` over the examples ``start:stop``: their compact gradient statistics into
    ``diffs`` (flat), ``grad += inv_n sum_i A_i^T diffs_i``; returns ``inv_n sum_i f_i(w)``."""
    S, F = pack.n_states, pack.n_features
    p0 = F * S
    tok = pack.tok
    pairwise = w[p0:p0 + S * S].copy()
    value = 0.0
    for i in range(start, stop):
        lo, hi = offsets[i], offsets[i + 1]
        unary = np.empty((tok[i + 1] - tok[i], S))
        chain_unary_scores(i, w, pack, unary)
        out = diffs[lo:hi]
        value += smooth_example(i, unary, pairwise, mu, entropic, K, pack, gold,
                                labels[tok[i]:tok[i + 1]], lo, out) * inv_n
        chain_axpy(i, out, inv_n, grad, pack)
    return value


@njit(cache=True)
def smooth_oracle_only(order, w, mu, entropic, K, pack, gold, offsets, labels, buf):
    """The smoothed oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
    S, F = pack.n_states, pack.n_features
    p0 = F * S
    pairwise = w[p0:p0 + S * S].copy()
    tok = pack.tok
    total = 0.0
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        unary = np.empty((pack.tok[i + 1] - pack.tok[i], S))
        chain_unary_scores(i, w, pack, unary)
        total += smooth_example(i, unary, pairwise, mu, entropic, K, pack, gold,
                                labels[tok[i]:tok[i + 1]], lo, buf[:hi - lo])
    return total


@njit(cache=True)
def lazy_smooth_steps(order, rho, gamma, omega, mu, entropic, K, pack, gold, offsets, labels, snapshot, use_snapshot,
                      v, c, c_unary, use_c, P, scalars, buf):
    """Steps ``w <- rho w - gamma A_i^T d - gamma c`` on the lazy iterate ``(v, P, scalars = [a, b, B, C,
    weight])`` for i in ``order``, ``d`` = the smoothed gradient statistics at ``w`` (minus the
    snapshot's, ``use_snapshot``); ``c_unary`` = :func:`all_unary` of ``c``; ``omega`` adds ``omega w``
    to the running sum after each step."""
    S, tok = pack.n_states, pack.tok
    a, b, B, C, weight = scalars[0], scalars[1], scalars[2], scalars[3], scalars[4]
    pairwise = np.empty(S * S)
    for i in order:
        lo, hi = offsets[i], offsets[i + 1]
        unary = np.empty((pack.tok[i + 1] - pack.tok[i], S))
        _lazy_potentials(i, v, a, c, c_unary, b, use_c, pack, unary, pairwise)
        d = buf[:hi - lo]
        smooth_example(i, unary, pairwise, mu, entropic, K, pack, gold, labels[tok[i]:tok[i + 1]],
                       lo, d)
        if use_snapshot:
            for j in range(hi - lo):
                d[j] -= snapshot[lo + j]
        new_a = rho * a
        if abs(new_a) < _TINY:  # fold the scale into v (LazyIterate._fold)
            if B != 0.0:
                P += B * v
                B = 0.0
            v *= new_a
            a = 1.0
        else:
            a = new_a
        b = rho * b - (gamma if use_c else 0.0)
        factor = gamma / a
        chain_axpy(i, d, -factor, v, pack)
        if B != 0.0:
            chain_axpy(i, d, B * factor, P, pack)
        if omega != 0.0:
            B += omega * a
            C += omega * b
            weight += omega
    scalars[0], scalars[1], scalars[2], scalars[3], scalars[4] = a, b, B, C, weight
