"""Message-passing baselines: tree-reweighted BP, loopy BP and naive mean field.

Messages live in the log domain in one flat array; message i→j of edge e (a function of x_j) is
stored at ``msg_off[2e]``, message j→i (a function of x_i) at ``msg_off[2e + 1]``. Each node keeps
S_t = θ_t + Σ_v ρ_vt log m_{v→t}, so the cavity of t towards s is S_t − log m_{s→t} and an update
costs O(|x_s||x_t|) whatever the degree. Sweeps are sequential, alternating edge order.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from structopt.errors import InvalidInputError
from structopt.marginals._options import (
    boolean,
    in_interval,
    inference_method,
    non_negative,
    optional,
    positive,
    positive_int,
    random_state_option,
)
from structopt.marginals.mrf import InferenceInterrupted, InferenceResult, PairwiseMRF
from structopt.marginals.oracles import local_field
from structopt.marginals.trw import check_rho, spanning_tree_rho, trw_objective


def _message_offsets(mrf: PairwiseMRF) -> np.ndarray:
    sizes = np.empty(2 * mrf.n_edges, dtype=np.int64)
    sizes[0::2] = mrf.cards[mrf.edges[:, 1]]
    sizes[1::2] = mrf.cards[mrf.edges[:, 0]]
    off = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    return off


@njit(cache=True)
def _sweep(cards, offsets, edges, theta, rho, logm, msg_off, s_node, damping, reverse):  # pragma: no cover
    """One sequential pass over all directed messages; returns the largest change in probability."""
    n = cards.size
    n_edges = edges.shape[0]
    buf = np.empty(cards.max())
    change = 0.0
    for k in range(2 * n_edges):
        e = n_edges - 1 - k // 2 if reverse else k // 2
        direction = k % 2
        i, j = edges[e, 0], edges[e, 1]
        ci, cj = cards[i], cards[j]
        base = offsets[n + e]
        inv_rho = 1.0 / rho[e]
        if direction == 0:  # i -> j, a function of x_j; cavity of i excludes m_{j->i}
            t, s, ct, cs = i, j, ci, cj
            back = msg_off[2 * e + 1]
            out = msg_off[2 * e]
        else:
            t, s, ct, cs = j, i, cj, ci
            back = msg_off[2 * e]
            out = msg_off[2 * e + 1]
        for b in range(cs):
            best = -np.inf
            for a in range(ct):
                th = theta[base + a * cj + b] if direction == 0 else theta[base + b * cj + a]
                v = th * inv_rho + s_node[offsets[t] + a] - logm[back + a]
                if v > best:
                    best = v
            if best == -np.inf:
                buf[b] = -np.inf
                continue
            acc = 0.0
            for a in range(ct):
                th = theta[base + a * cj + b] if direction == 0 else theta[base + b * cj + a]
                acc += np.exp(th * inv_rho + s_node[offsets[t] + a] - logm[back + a] - best)
            buf[b] = best + np.log(acc)
        # normalise, damp in the log domain, normalise again
        for rounds in range(2):
            top = -np.inf
            for b in range(cs):
                if buf[b] > top:
                    top = buf[b]
            if top == -np.inf:
                for b in range(cs):
                    buf[b] = -np.log(cs)
                top = 0.0
            acc = 0.0
            for b in range(cs):
                acc += np.exp(buf[b] - top)
            norm = top + np.log(acc)
            for b in range(cs):
                buf[b] -= norm
                if rounds == 0 and damping > 0.0:
                    old = logm[out + b]
                    buf[b] = (1.0 - damping) * buf[b] + damping * old if old > -np.inf else buf[b]
            if damping == 0.0:
                break
        for b in range(cs):
            old = logm[out + b]
            diff = abs(np.exp(buf[b]) - np.exp(old))
            if diff > change:
                change = diff
            delta = buf[b] - old
            if delta == delta:  # skip nan from -inf - -inf
                s_node[offsets[s] + b] += rho[e] * delta
            logm[out + b] = buf[b]
    return change


@njit(cache=True)
def _beliefs(cards, offsets, edges, theta, rho, logm, msg_off, s_node, mu):  # pragma: no cover - numba
    """Node and edge beliefs from the messages, written into the flat vector ``mu``."""
    n = cards.size
    for i in range(n):
        top = -np.inf
        for a in range(cards[i]):
            if s_node[offsets[i] + a] > top:
                top = s_node[offsets[i] + a]
        acc = 0.0
        for a in range(cards[i]):
            mu[offsets[i] + a] = np.exp(s_node[offsets[i] + a] - top)
            acc += mu[offsets[i] + a]
        for a in range(cards[i]):
            mu[offsets[i] + a] /= acc
    for e in range(edges.shape[0]):
        i, j = edges[e, 0], edges[e, 1]
        ci, cj = cards[i], cards[j]
        base = offsets[n + e]
        top = -np.inf
        for a in range(ci):
            for b in range(cj):
                v = (theta[base + a * cj + b] / rho[e] + s_node[offsets[i] + a] - logm[msg_off[2 * e + 1] + a]
                     + s_node[offsets[j] + b] - logm[msg_off[2 * e] + b])
                mu[base + a * cj + b] = v
                if v > top:
                    top = v
        acc = 0.0
        for k in range(ci * cj):
            mu[base + k] = np.exp(mu[base + k] - top)
            acc += mu[base + k]
        for k in range(ci * cj):
            mu[base + k] /= acc


def _progress(progress: bool, total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="sweep", disable=not progress, leave=False)


def _iterate(sweep, max_iter: int, tol: float, time_limit: float | None, progress: bool, label: str,
             start: float) -> tuple[list[dict], str]:
    """Run ``sweep(iteration) -> change`` until the change is below ``tol``, ``max_iter`` sweeps or the
    time limit; returns the trace (iteration, change, seconds since ``start``) and the status
    (``converged``, ``max_iter``, ``time_limit``, or ``interrupted`` on Ctrl-C: the state the sweeps
    update is whole between sweeps, numba kernels being uninterruptible, so the caller can use it)."""
    trace: list[dict] = []
    try:
        with _progress(progress, max_iter, label) as bar:
            for it in range(max_iter):
                change = sweep(it)
                trace.append({"iteration": it + 1, "change": float(change), "time": time.perf_counter() - start})
                bar.update(1)
                if change < tol:
                    return trace, "converged"
                if time_limit is not None and time.perf_counter() - start > time_limit:
                    return trace, "time_limit"
    except KeyboardInterrupt:
        return trace, "interrupted"
    return trace, "max_iter"


def _finish(result: InferenceResult, status: str, trace: list[dict]) -> InferenceResult:
    """Set the stop fields of ``result``; raise :class:`InferenceInterrupted` carrying it after Ctrl-C."""
    result.status, result.converged, result.iterations = status, status == "converged", len(trace)
    result.residual = trace[-1]["change"] if trace else None
    if status == "interrupted":
        raise InferenceInterrupted(result)
    return result


_DAMPING = in_interval(0.0, 1.0, True, False)


def _rho_option(name: str, value: object) -> None:
    """None or an array (its shape and entries are checked against the model in the call)."""
    if value is not None and not isinstance(value, (np.ndarray, list, tuple)):
        raise InvalidInputError(f"{name} must be None or an array of edge weights, got {value!r}")


def _label(name: str, value: object) -> None:
    """A method name for the result."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {value!r}")


@inference_method("trbp", rho=_rho_option, damping=_DAMPING, max_iter=positive_int, tol=non_negative,
                  time_limit=optional(positive), progress=boolean, method=_label)
def trbp(mrf: PairwiseMRF, rho: np.ndarray | None = None, damping: float = 0.5, max_iter: int = 1000,
         tol: float = 1e-8, time_limit: float | None = None, progress: bool = False,
         method: str = "trbp") -> InferenceResult:
    """Tree-reweighted belief propagation (Wainwright, Jaakkola and Willsky).

    At a fixed point the beliefs maximise TRW(μ; θ, ρ) over the local polytope, so the returned
    ``log_z`` (the TRW objective at the beliefs) is then an upper bound on log Z.

    Parameters
    ----------
    mrf : PairwiseMRF
    rho : ndarray of shape (E,), optional
        Edge appearance probabilities; default: the uniform distribution over spanning trees
        (:func:`structopt.marginals.trw.spanning_tree_rho`).
    damping : float in [0, 1)
        New log-message = (1 − damping)·update + damping·old.
    max_iter : int
        Maximum number of sweeps (each updates every message once), ≥ 1.
    tol : float
        Stop when no message changes by more than ``tol`` (max-norm, probability scale), ≥ 0.
    time_limit : float, optional
        Seconds (> 0), checked after each sweep.
    progress : bool
        Show a progress bar over sweeps.

    Returns
    -------
    InferenceResult
        ``converged`` says whether ``tol`` was met, ``status`` why the sweeps stopped (``converged``,
        ``max_iter`` or ``time_limit``; otherwise the beliefs are those of the last sweep),
        ``iterations`` the sweeps run and ``residual`` the last sweep's largest message change;
        ``trace`` holds one record per sweep.

    Raises
    ------
    InvalidInputError
        An option out of range (``max_iter=0``, ``tol=nan``, ``damping=1``, ...), named, before any work.
    InferenceInterrupted
        On Ctrl-C (a KeyboardInterrupt); its ``result`` holds the beliefs of the last finished sweep.
    """
    start = time.perf_counter()
    if rho is None:
        rho = spanning_tree_rho(mrf)
    else:
        rho = check_rho(mrf, rho, method, at_most_one=False)
    msg_off = _message_offsets(mrf)
    logm = -np.log(np.repeat(np.diff(msg_off), np.diff(msg_off)).astype(np.float64))
    # initial messages are uniform: each adds ρ log(1/|x_t|) to S_t
    s_node = mrf.theta[:mrf.n_node_entries] + _initial_incoming(mrf, rho)
    edges = np.ascontiguousarray(mrf.edges)
    trace, status = _iterate(
        lambda it: _sweep(mrf.cards, mrf.offsets, edges, mrf.theta, rho, logm, msg_off, s_node, float(damping),
                          it % 2 == 1),
        max_iter, tol, time_limit, progress, method, start)
    mu = np.zeros(mrf.dim)
    _beliefs(mrf.cards, mrf.offsets, edges, mrf.theta, rho, logm, msg_off, s_node, mu)
    log_z = trw_objective(mrf, mu, rho)
    return _finish(InferenceResult(log_z, mrf.node_marginals(mu), mu, method, seconds=time.perf_counter() - start,
                                   trace=trace, rho=rho), status, trace)


def _initial_incoming(mrf: PairwiseMRF, rho: np.ndarray) -> np.ndarray:
    """Σ_v ρ_vt log(1/|x_t|) per node entry: the contribution of uniform initial messages to S_t."""
    node_weight = np.bincount(mrf.edges.ravel(), weights=np.repeat(rho, 2), minlength=mrf.n_nodes)
    per_node = -node_weight * np.log(mrf.cards.astype(np.float64))
    return per_node[mrf.block_of[:mrf.n_node_entries]]


@inference_method("bp", damping=_DAMPING, max_iter=positive_int, tol=non_negative, time_limit=optional(positive),
                  progress=boolean)
def bp(mrf: PairwiseMRF, damping: float = 0.5, max_iter: int = 1000, tol: float = 1e-8,
       time_limit: float | None = None, progress: bool = False) -> InferenceResult:
    """Loopy sum-product belief propagation; ``log_z`` is the Bethe free energy at the beliefs.

    Exact on trees. Parameters as in :func:`trbp` (BP is TRBP with ρ ≡ 1).
    """
    return trbp(mrf, np.ones(mrf.n_edges), damping=damping, max_iter=max_iter, tol=tol,
                time_limit=time_limit, progress=progress, method="bp")


@njit(cache=True)
def _mean_field_sweep(cards, offsets, edges, theta, indptr, adj_edge, adj_first, q):  # pragma: no cover
    """One sequential pass of naive mean-field updates; returns the largest change of q."""
    n = cards.size
    buf = np.empty(cards.max())
    no_x = np.empty(0, dtype=np.int64)
    change = 0.0
    for i in range(n):
        ci = cards[i]
        local_field(i, cards, offsets, edges, theta, indptr, adj_edge, adj_first, no_x, q, buf)
        top = -np.inf
        for a in range(ci):
            if buf[a] > top:
                top = buf[a]
        acc = 0.0
        for a in range(ci):
            buf[a] = np.exp(buf[a] - top)
            acc += buf[a]
        for a in range(ci):
            new = buf[a] / acc
            if abs(new - q[offsets[i] + a]) > change:
                change = abs(new - q[offsets[i] + a])
            q[offsets[i] + a] = new
    return change


@njit(cache=True)
def _product_edges(cards, offsets, edges, mu):  # pragma: no cover - numba
    """Edge blocks of μ as outer products of the node blocks (the mean-field joint)."""
    n = cards.size
    for e in range(edges.shape[0]):
        i, j = edges[e, 0], edges[e, 1]
        for a in range(cards[i]):
            for b in range(cards[j]):
                mu[offsets[n + e] + a * cards[j] + b] = mu[offsets[i] + a] * mu[offsets[j] + b]


@inference_method("mean_field", max_iter=positive_int, tol=non_negative, time_limit=optional(positive),
                  progress=boolean, random_state=random_state_option)
def mean_field(mrf: PairwiseMRF, max_iter: int = 1000, tol: float = 1e-8, time_limit: float | None = None,
               progress: bool = False, random_state: int | None = 0) -> InferenceResult:
    """Naive mean field: a fully factorised q maximising ⟨θ, μ(q)⟩ + Σ_i H(q_i) by coordinate ascent.

    ``log_z`` is that objective, a lower bound on log Z (for -inf potentials it may be -inf).

    Parameters
    ----------
    mrf : PairwiseMRF
    max_iter, tol, time_limit, progress
        As in :func:`trbp` (``tol`` on the node marginals).
    random_state : int or None
        Seed of the random initial q (a symmetric start can sit on a saddle point).
    """
    start = time.perf_counter()
    rng = np.random.default_rng(random_state)
    q = rng.uniform(0.5, 1.5, size=mrf.dim)
    q[:mrf.n_node_entries] /= np.add.reduceat(q[:mrf.n_node_entries], mrf.offsets[:mrf.n_nodes])[
        mrf.block_of[:mrf.n_node_entries]]
    indptr, adj_edge, adj_first = mrf.adjacency()
    edges = np.ascontiguousarray(mrf.edges)
    trace, status = _iterate(
        lambda it: _mean_field_sweep(mrf.cards, mrf.offsets, edges, mrf.theta, indptr, adj_edge, adj_first, q),
        max_iter, tol, time_limit, progress, "mean field", start)
    _product_edges(mrf.cards, mrf.offsets, edges, q)
    # with the product edge blocks the Bethe (ρ ≡ 1) entropy equals Σ_i H(q_i)
    log_z = trw_objective(mrf, q, np.ones(mrf.n_edges))
    return _finish(InferenceResult(log_z, mrf.node_marginals(q), q, "mf", seconds=time.perf_counter() - start,
                                   trace=trace), status, trace)
