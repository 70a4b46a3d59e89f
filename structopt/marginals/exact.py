"""Exact log Z and marginals: enumeration (tiny models) and variable elimination (small treewidth)."""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.special import logsumexp

from structopt.errors import NotSupportedError
from structopt.marginals.mrf import InferenceResult, PairwiseMRF

MAX_ENUMERATION_STATES = 1 << 22
MAX_TABLE_ENTRIES = 1 << 22


def enumerate_inference(mrf: PairwiseMRF, max_states: int = MAX_ENUMERATION_STATES,
                        chunk: int = 1 << 15) -> InferenceResult:
    """Exact log Z, node and edge marginals by summing over every joint assignment.

    Parameters
    ----------
    mrf : PairwiseMRF
    max_states : int
        Refuse models with more joint assignments than this.
    chunk : int
        Assignments scored per vectorised batch.

    Returns
    -------
    InferenceResult
        ``mu`` holds the exact node and edge marginals.
    """
    start = time.perf_counter()
    total = math.prod(int(c) for c in mrf.cards)
    if total > max_states:
        raise NotSupportedError(f"enumeration of {total} joint assignments exceeds max_states={max_states}")
    n = mrf.n_nodes
    i, j = mrf.edges[:, 0], mrf.edges[:, 1]
    # mixed radix: the last variable changes fastest
    radix = np.ones(n, dtype=np.int64)
    radix[:-1] = np.cumprod(mrf.cards[::-1])[::-1][1:]
    scores, flats = [], []
    for lo in range(0, total, chunk):
        idx = np.arange(lo, min(lo + chunk, total), dtype=np.int64)
        x = (idx[:, None] // radix[None, :]) % mrf.cards[None, :]
        flat = np.concatenate([mrf.offsets[:n][None, :] + x,
                               mrf.offsets[n:-1][None, :] + x[:, i] * mrf.cards[j][None, :] + x[:, j]], axis=1)
        scores.append(mrf.theta[flat].sum(axis=1))
        flats.append(flat)
    score = np.concatenate(scores)
    log_z = float(logsumexp(score))
    mu = np.zeros(mrf.dim)
    for s, flat in zip(np.split(np.exp(score - log_z), np.cumsum([f.shape[0] for f in flats])[:-1]), flats):
        mu += np.bincount(flat.ravel(), weights=np.repeat(s, flat.shape[1]), minlength=mrf.dim)
    return InferenceResult(log_z + mrf.constant, mrf.node_marginals(mu), mu, "enumeration",
                           seconds=time.perf_counter() - start)


def elimination_order(mrf: PairwiseMRF) -> list[int]:
    """Greedy min-fill elimination order of the interaction graph (ties: smaller degree, index)."""
    adj: list[set[int]] = [set() for _ in range(mrf.n_nodes)]
    for a, b in mrf.edges.tolist():
        adj[a].add(b)
        adj[b].add(a)
    remaining = set(range(mrf.n_nodes))
    order = []
    while remaining:
        def fill(v: int) -> tuple[int, int, int]:
            nb = list(adj[v])
            missing = sum(1 for p in range(len(nb)) for q in range(p + 1, len(nb)) if nb[q] not in adj[nb[p]])
            return missing, len(nb), v
        v = min(remaining, key=fill)
        nb = list(adj[v])
        for p in nb:
            adj[p].discard(v)
            adj[p].update(q for q in nb if q != p)
        remaining.discard(v)
        order.append(v)
    return order


def elimination_width(mrf: PairwiseMRF, order: list[int]) -> int:
    """Entries of the largest table that eliminating in ``order`` creates (before summing out)."""
    adj: list[set[int]] = [set() for _ in range(mrf.n_nodes)]
    for a, b in mrf.edges.tolist():
        adj[a].add(b)
        adj[b].add(a)
    largest = 1
    for v in order:
        nb = list(adj[v])
        largest = max(largest, int(mrf.cards[v]) * math.prod(int(mrf.cards[u]) for u in nb))
        for p in nb:
            adj[p].discard(v)
            adj[p].update(q for q in nb if q != p)
    return largest


def _eliminate(mrf: PairwiseMRF, theta: np.ndarray, order: list[int], unary: list[np.ndarray] | None,
               max_table: int, maximize: bool) -> tuple[float, list[tuple[int, tuple[int, ...], np.ndarray]]]:
    """Sum (log-sum-exp) or max out the variables in ``order``; factors are (sorted scope, log-table).

    Returns the total and, when maximising, per eliminated variable its remaining scope and the
    table of its best state given that scope (for backtracking).
    """
    n = mrf.n_nodes
    if unary is None:
        unary = [theta[mrf.offsets[v]:mrf.offsets[v + 1]] for v in range(n)]
    factors: list[tuple[tuple[int, ...], np.ndarray]] = [((v,), unary[v]) for v in range(n)]
    for e, (a, b) in enumerate(mrf.edges.tolist()):
        factors.append(((a, b), theta[mrf.offsets[n + e]:mrf.offsets[n + e + 1]].reshape(mrf.cards[a], mrf.cards[b])))
    by_var: dict[int, list[int]] = {v: [] for v in range(n)}
    for k, (scope, _) in enumerate(factors):
        for v in scope:
            by_var[v].append(k)
    alive = [True] * len(factors)
    total = 0.0
    backtrack = []
    for v in order:
        ks = [k for k in by_var[v] if alive[k]]
        scope = sorted({u for k in ks for u in factors[k][0]})
        size = math.prod(int(mrf.cards[u]) for u in scope)
        if size > max_table:
            raise NotSupportedError(f"variable elimination needs a table of {size} entries "
                                    f"(> max_table={max_table}); the model's treewidth is too large")
        table = np.zeros([int(mrf.cards[u]) for u in scope])
        for k in ks:
            fs, ft = factors[k]
            table = table + ft.reshape([int(mrf.cards[u]) if u in fs else 1 for u in scope])
            alive[k] = False
        axis = scope.index(v)
        new_scope = tuple(u for u in scope if u != v)
        if maximize:
            best = np.argmax(table, axis=axis)
            reduced = np.take_along_axis(table, np.expand_dims(best, axis), axis=axis).squeeze(axis)
            backtrack.append((v, new_scope, best))
        else:
            reduced = logsumexp(table, axis=axis)
        if new_scope:
            factors.append((new_scope, reduced))
            alive.append(True)
            for u in new_scope:
                by_var[u].append(len(factors) - 1)
        else:
            total += float(reduced)
    return total, backtrack


def _log_z_elimination(mrf: PairwiseMRF, order: list[int], unary: list[np.ndarray], max_table: int) -> float:
    return _eliminate(mrf, mrf.theta, order, unary, max_table, maximize=False)[0]


def map_elimination(mrf: PairwiseMRF, theta: np.ndarray | None = None, order: list[int] | None = None,
                    max_table: int = MAX_TABLE_ENTRIES) -> tuple[np.ndarray, float]:
    """Exact MAP by max-product variable elimination (small treewidth).

    Parameters
    ----------
    mrf : PairwiseMRF
        Supplies the graph (and the potentials when ``theta`` is None).
    theta : ndarray (D,), optional
        Potentials to maximise in the flat layout.
    order : list of int, optional
        Elimination order (default: greedy min-fill).
    max_table : int
        Refuse orders that create larger tables.

    Returns
    -------
    x : ndarray of int64 (N,)
        A maximiser of Σ θ_i(x_i) + Σ θ_ij(x_i, x_j).
    value : float
        Its score (without the model's constant).
    """
    theta = mrf.theta if theta is None else np.asarray(theta, dtype=np.float64)
    order = elimination_order(mrf) if order is None else order
    value, backtrack = _eliminate(mrf, theta, order, None, max_table, maximize=True)
    x = np.zeros(mrf.n_nodes, dtype=np.int64)
    for v, scope, best in reversed(backtrack):
        x[v] = best[tuple(int(x[u]) for u in scope)] if scope else int(best)
    return x, value


def exact_inference(mrf: PairwiseMRF, method: str = "auto", max_table: int = MAX_TABLE_ENTRIES) -> InferenceResult:
    """Exact log Z and single-node marginals.

    Parameters
    ----------
    mrf : PairwiseMRF
    method : {"auto", "enumeration", "elimination"}
        ``auto`` enumerates when there are at most 2**16 joint assignments, else eliminates.
        Elimination computes each marginal p(x_i = a) as Z(x_i = a) / Z (one elimination per
        state), with a greedy min-fill order; it refuses models whose tables exceed ``max_table``.
    max_table : int
        Largest intermediate table allowed by elimination.

    Returns
    -------
    InferenceResult
        ``mu`` holds the node marginals and, for enumeration, the edge marginals (zeros otherwise).
    """
    total = math.prod(int(c) for c in mrf.cards)
    if method == "enumeration" or (method == "auto" and total <= 1 << 16):
        return enumerate_inference(mrf)
    if method not in ("auto", "elimination"):
        raise ValueError(f"unknown method {method!r}")
    start = time.perf_counter()
    order = elimination_order(mrf)
    unary = [mrf.unary(v) for v in range(mrf.n_nodes)]
    log_z = _log_z_elimination(mrf, order, unary, max_table)
    mu = np.zeros(mrf.dim)
    with np.errstate(invalid="ignore"):
        for v in range(mrf.n_nodes):
            for a in range(int(mrf.cards[v])):
                clamped = list(unary)
                mask = np.full(int(mrf.cards[v]), -np.inf)
                mask[a] = unary[v][a]
                clamped[v] = mask
                mu[mrf.offsets[v] + a] = math.exp(_log_z_elimination(mrf, order, clamped, max_table) - log_z)
    return InferenceResult(log_z + mrf.constant, mrf.node_marginals(mu), mu, "elimination",
                           seconds=time.perf_counter() - start)
