"""Exact log Z and marginals: enumeration (tiny models) and variable elimination (small treewidth)."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from structopt.errors import NotSupportedError
from structopt.marginals._options import optional, positive
from structopt.marginals.mrf import InferenceResult, PairwiseMRF

MAX_ENUMERATION_STATES = 1 << 22
MAX_TABLE_ENTRIES = 1 << 22
#: ``exact_inference`` refuses a run estimated longer than this many seconds (its ``max_seconds``)...
EXACT_MAX_SECONDS = 300.0
#: ... and announces on stderr one estimated longer than this
EXACT_WARN_SECONDS = 10.0
#: the cost model of one elimination (measured on the UAI models, 2-core machine: 90-140 ns per table entry
#: on the segmentations, 0.1-0.3 ms per eliminated variable of numpy overhead on the grids; rounded up)
SECONDS_PER_ENTRY, SECONDS_PER_VARIABLE = 150e-9, 150e-6


@dataclass(frozen=True)
class EliminationCost:
    """What variable elimination in a min-fill order costs, computed from the graph alone (no table built).

    Attributes
    ----------
    treewidth : int
        The order's induced width (largest number of neighbours of a variable when it is eliminated).
    largest_table : int
        Entries of the largest table it builds.
    entries : int
        Entries of all the tables one elimination builds.
    eliminations : int
        Eliminations ``exact_inference`` runs: one for Z, one per (variable, state) for the marginals.
    seconds : float
        Estimated wall time of the whole run (``SECONDS_PER_ENTRY``, ``SECONDS_PER_VARIABLE``).
    """

    treewidth: int
    largest_table: int
    entries: int
    eliminations: int
    seconds: float

    def describe(self) -> str:
        return (f"about {self.seconds:.3g} s: {self.eliminations} eliminations over a min-fill order of treewidth "
                f"{self.treewidth}, largest table {self.largest_table:,} entries, {self.entries:,} entries each")


def elimination_cost(mrf: PairwiseMRF, order: list[int] | None = None) -> EliminationCost:
    """The cost of :func:`exact_inference` by elimination (default order: greedy min-fill), before any work."""
    order = elimination_order(mrf) if order is None else order
    adj: list[set[int]] = [set() for _ in range(mrf.n_nodes)]
    for a, b in mrf.edges.tolist():
        adj[a].add(b)
        adj[b].add(a)
    width, largest, entries = 0, 1, 0
    for v in order:
        nb = list(adj[v])
        size = int(mrf.cards[v]) * math.prod(int(mrf.cards[u]) for u in nb)
        width, largest, entries = max(width, len(nb)), max(largest, size), entries + size
        for p in nb:
            adj[p].discard(v)
            adj[p].update(q for q in nb if q != p)
    runs = 1 + int(mrf.cards.sum())
    seconds = runs * (entries * SECONDS_PER_ENTRY + mrf.n_nodes * SECONDS_PER_VARIABLE)
    return EliminationCost(width, largest, entries, runs, seconds)


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


def exact_inference(mrf: PairwiseMRF, method: str = "auto", max_table: int = MAX_TABLE_ENTRIES,
                    max_seconds: float | None = EXACT_MAX_SECONDS) -> InferenceResult:
    """Exact log Z and single-node marginals.

    Parameters
    ----------
    mrf : PairwiseMRF
    method : {"auto", "enumeration", "elimination"}
        ``auto`` enumerates when there are at most 2**16 joint assignments, else eliminates.
        Elimination computes each marginal p(x_i = a) as Z(x_i = a) / Z (one elimination per
        state), with a greedy min-fill order.
    max_table : int
        Largest intermediate table allowed by elimination.
    max_seconds : float or None
        Elimination's cost is estimated first (:func:`elimination_cost`: treewidth, table sizes,
        number of eliminations); a run estimated longer than this is refused before any work (None:
        never), and one estimated longer than ``EXACT_WARN_SECONDS`` is announced on stderr with its estimate.
        On the shipped UAI files: Grids_12 about 5 s; Segmentation_11-13 4-16 minutes (refused by
        default); Grids_11, 13 and 14 need a table of 2**24 entries (refused by ``max_table``).

    Returns
    -------
    InferenceResult
        ``mu`` holds the node marginals and, for enumeration, the edge marginals (zeros otherwise).

    Raises
    ------
    NotSupportedError
        Before any work: a table larger than ``max_table`` or a run estimated longer than
        ``max_seconds``; the message gives the estimate and the methods to use instead.
    """
    optional(positive)("exact: max_seconds", max_seconds)
    total = math.prod(int(c) for c in mrf.cards)
    if method == "enumeration" or (method == "auto" and total <= 1 << 16):
        return enumerate_inference(mrf)
    if method not in ("auto", "elimination"):
        raise ValueError(f"unknown method {method!r}")
    start = time.perf_counter()
    order = elimination_order(mrf)
    cost = elimination_cost(mrf, order)
    instead = ("use barrier_fw (--method bfw: a certified upper bound on log Z) or trbp instead")
    if cost.largest_table > max_table:
        raise NotSupportedError(f"exact inference would build a table of {cost.largest_table:,} entries (> max_table="
                                f"{max_table:,}; min-fill treewidth {cost.treewidth}): {instead}")
    if max_seconds is not None and cost.seconds > max_seconds:
        raise NotSupportedError(f"exact inference is estimated at {cost.describe()}, above max_seconds={max_seconds:g} "
                                f"(Python API); {instead}")
    if cost.seconds > EXACT_WARN_SECONDS:
        print(f"structopt: exact inference estimated at {cost.describe()}", file=sys.stderr, flush=True)
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
