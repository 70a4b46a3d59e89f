"""Word alignment with fertility constraints on the Hansards, as a factor graph solved by AD3.

The matching task (:mod:`structopt.tasks.alignment`) links each word to at most one word. Here a
sentence pair of L English and R French words is a factor graph (:class:`FactorGraph`) with one
binary variable per word pair ``(j, k)`` (variable ``j * R + k``, 1 = linked) and

- **budget factors** (hard): at most ``fertility_en`` links per English word (one budget over each
  row) and at most ``fertility_fr`` per French word (each column);
- optional **Markov factors**: a pairwise table between neighbouring links, scored only when both
  are on (a learned weight per kind): ``"diag"`` joins ``(j, k)`` and ``(j+1, k+1)`` (monotone
  continuation of the alignment), ``"row"`` joins ``(j, k)`` and ``(j, k+1)`` (an English word
  linked to two adjacent French words) and ``"col"`` joins ``(j, k)`` and ``(j+1, k)``.

With the budgets alone the relaxation is exact: row and column degree bounds of a bipartite graph
form a totally unimodular system, so every vertex of the local polytope is a b-matching and AD3's
LP-MAP answer is integral (up to ties); the max oracle then solves the b-matching directly as a
min-cost flow (:func:`bmatching`: successive shortest paths in numba, or OR-Tools' min-cost flow on
integer-scaled costs certified in floats). Markov factors add cycles: training then solves the
relaxed structural SVM (as :class:`~structopt.models.graph.GraphModel` documents) and prediction
takes the exact MAP by branch-and-bound.

Link scores are linear in the edge features of :class:`~structopt.tasks.alignment.AlignmentFeaturizer`
plus a bias (``<f_jk, w_link> + b`` for state 1, 0 for state 0); a Markov table's (1, 1) entry is its kind's
weight. Outputs are 0/1 labels of the ``L * R`` variables (:func:`link_matrix` reshapes them). The
training target is a maximum subset of the sure links that meets the fertility bounds (ties broken
by larger Dice, then nearness to the diagonal, as the matching task does), computed exactly on the
budget-only graph. The loss is :class:`~structopt.losses.WeightedHamming` with false-positive cost 1
and false-negative cost 3 (the matching task's MatchingHamming(1, 3) on links). Held-out AER uses
the full gold (sure and possible links) on the same split as the matching task.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from structopt.errors import InvalidInputError, example_error
from structopt.losses import WeightedHamming
from structopt.models.base import Model
from structopt.structures.base import Polytope, Structure, unsupported
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials
from structopt.tasks._data import check_cross_validation
from structopt.tasks.alignment import AlignmentTask, aer, load_alignment

MARKOV_KINDS = ("diag", "row", "col")
DEFAULT_FERTILITY = 2


class FertilityPotentials(NamedTuple):
    """Scores (or statistics) of one sentence pair's factor graph: ``unary`` (L*R*2,) states of
    every link variable, ``factors`` the Markov tables' entries (4 per table). Made by
    :meth:`FertilityModel.potentials`, whose per-shape subclass carries its factor graph."""

    unary: np.ndarray
    factors: np.ndarray


# per-shape potentials classes, keyed by (L, R, fertility_en, fertility_fr, markov): one factor graph each
_TYPES: dict[tuple, type] = {}


@njit(cache=True)
def _bmatching(gain: np.ndarray, row_cost: np.ndarray, col_cost: np.ndarray) -> np.ndarray:
    """Max-weight b-matching of an (L, R) gain matrix with convex per-unit degree costs, by successive
    shortest paths with Bellman-Ford.

    Source -> row j: ``row_cost.shape[1]`` units, the u-th (0-based) costing ``row_cost[j, u]``
    (non-decreasing in u); row j -> column k: capacity 1, cost -gain (only gain > 0); column k ->
    sink: the same with ``col_cost``. Each augmentation sends one unit along a cheapest residual
    path; min-cost flow cost is convex in the flow value (convex unit costs), so stopping at the
    first path of cost >= 0 gives the maximum-weight b-matching (exact up to floating-point path sums:
    a path must cost below -1e-12 times the largest arc cost (positive gain or degree cost) to count as
    negative, a scale-free test).
    """
    L, R = gain.shape
    tiny = -1e-12 * max(gain.max(), np.abs(row_cost).max(), np.abs(col_cost).max()) if gain.size else 0.0
    cap_row, cap_col = row_cost.shape[1], col_cost.shape[1]
    x = np.zeros((L, R), dtype=np.int64)
    row = np.zeros(L, dtype=np.int64)
    col = np.zeros(R, dtype=np.int64)
    V = L + R + 1  # rows 0..L-1, columns L..L+R-1, sink L+R (the source is implicit)
    dist = np.empty(V)
    pred = np.empty(V, dtype=np.int64)
    for _ in range(min(cap_row * L, cap_col * R)):
        dist[:] = np.inf
        pred[:] = -1
        for j in range(L):
            if row[j] < cap_row:
                dist[j] = row_cost[j, row[j]]
        changed = True
        rounds = 0
        while changed and rounds <= V:
            changed = False
            rounds += 1
            for j in range(L):
                for k in range(R):
                    g = gain[j, k]
                    if x[j, k] == 0:
                        if g > 0.0 and dist[j] - g < dist[L + k]:
                            dist[L + k] = dist[j] - g
                            pred[L + k] = j
                            changed = True
                    elif dist[L + k] + g < dist[j]:
                        dist[j] = dist[L + k] + g
                        pred[j] = L + k
                        changed = True
            for k in range(R):
                if col[k] < cap_col and dist[L + k] + col_cost[k, col[k]] < dist[L + R]:
                    dist[L + R] = dist[L + k] + col_cost[k, col[k]]
                    pred[L + R] = L + k
                    changed = True
        if not dist[L + R] < tiny:
            break
        k = pred[L + R] - L
        col[k] += 1
        node = L + k
        while True:
            j = pred[node]
            x[j, node - L] = 1
            if pred[j] < 0:  # a path starts at a row with spare capacity (from the source)
                row[j] += 1
                break
            node = pred[j]
            x[j, node - L] = 0
    return x.ravel()


def _markov_pairs(L: int, R: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Variables ``(a, b)`` of every Markov table of ``kind`` on an L x R grid of links (vectorised)."""
    idx = np.arange(L * R).reshape(L, R)
    if kind == "diag":
        return idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()
    if kind == "row":
        return idx[:, :-1].ravel(), idx[:, 1:].ravel()
    return idx[:-1, :].ravel(), idx[1:, :].ravel()


def build_graph(L: int, R: int, fertility_en: int, fertility_fr: int, markov: Sequence[str] = (),
                penalty: bool = False) -> FactorGraph:
    """The factor graph of an L x R sentence pair: binary link variables ``0..L*R-1``, a budget per row
    and per column, and the Markov tables of the kinds in ``markov`` in the order of
    :data:`MARKOV_KINDS` (kind by kind, pairs in row-major order).

    With ``penalty``, each English word also has ``fertility_en - 1`` binary *slack* variables
    (after the links, row by row), then each French word ``fertility_fr - 1`` (column by column),
    inside its budget: ``links + slacks on <= fertility``. A slack scores when on, so each link
    beyond a word's first switches one off and pays its score: a learned per-link fertility cost
    expressed with budget factors only. Without slacks a budget is capped at its scope size."""
    fe, ff = int(fertility_en), int(fertility_fr)
    n_links = L * R
    rs, cs = (fe - 1, ff - 1) if penalty else (0, 0)
    fg = FactorGraph([2] * (n_links + L * rs + R * cs))
    idx = np.arange(n_links).reshape(L, R)
    row_slack = n_links + np.arange(L * rs).reshape(L, rs)
    col_slack = n_links + L * rs + np.arange(R * cs).reshape(R, cs)
    for j in range(L):
        scope = idx[j].tolist() + row_slack[j].tolist()
        fg.add_budget(scope, min(fe, len(scope)))
    for k in range(R):
        scope = idx[:, k].tolist() + col_slack[k].tolist()
        fg.add_budget(scope, min(ff, len(scope)))
    for kind in MARKOV_KINDS:
        if kind in markov:
            for a, b in zip(*_markov_pairs(L, R, kind)):
                fg.add_table([int(a), int(b)])
    return fg


def _potentials_type(L: int, R: int, fertility_en: int, fertility_fr: int, markov: tuple[str, ...],
                     penalty: bool = False) -> type:
    key = (int(L), int(R), int(fertility_en), int(fertility_fr), tuple(markov), bool(penalty))
    cls = _TYPES.get(key)
    if cls is None:
        cls = type("FertilityPotentials", (FertilityPotentials,), {
            "__slots__": (), "key": key, "_fg": None, "factor_graph": property(_factor_graph),
            "__reduce_ex__": _reduce})
        _TYPES[key] = cls
    return cls


def _factor_graph(theta: FertilityPotentials) -> FactorGraph:
    cls = type(theta)
    if cls._fg is None:
        cls._fg = build_graph(*cls.key)
    return cls._fg


def _rebuild(key: tuple, fields: tuple) -> FertilityPotentials:
    return _potentials_type(*key)(*fields)


def _reduce(self: FertilityPotentials, protocol: int) -> tuple:
    return _rebuild, (type(self).key, tuple(self))


def _graph_of(theta: Any, index: int | None = None) -> FactorGraph:
    if not isinstance(theta, FertilityPotentials) or type(theta) is FertilityPotentials:
        raise example_error(index, f"FertilityStructure potentials must come from FertilityModel.potentials (they "
                                   f"carry their graph), got {type(theta).__name__}")
    return theta.factor_graph


def _layout(key: tuple) -> tuple[int, int, int, int]:
    """``(links, row slacks per English word, column slacks per French word, variables)`` of a graph key."""
    L, R, fe, ff, _, penalty = key
    rs, cs = (fe - 1, ff - 1) if penalty else (0, 0)
    return L * R, rs, cs, L * R + L * rs + R * cs


def _slack_costs(gains: np.ndarray, cap: int) -> np.ndarray:
    """Per-unit degree costs of words whose slacks have ``gains`` (n, cap - 1): the first link is free,
    the c-th (c >= 2) switches off the slack of the (cap - c + 1)-th largest positive gain."""
    costs = np.zeros((gains.shape[0], cap))
    if cap > 1:
        top = -np.sort(-np.maximum(gains, 0.0), axis=1)  # descending
        costs[:, 1:] = top[:, ::-1][:, : cap - 1]  # unit 2 pays the smallest kept gain, unit cap the largest
    return costs


def _complete(key: tuple, links: np.ndarray, gains: np.ndarray | None = None) -> np.ndarray:
    """Full labels (links, then slacks) from link labels: each word's allowed slacks (its fertility
    minus its links, at most all of them) are on; with ``gains`` only those of gain >= 0, largest first."""
    L, R, fe, ff, _, _ = key
    n_links, rs, cs, n_vars = _layout(key)
    out = np.zeros(n_vars, dtype=np.int64)
    out[:n_links] = links
    grid = np.asarray(links).reshape(L, R)
    start = n_links
    for count, slacks, cap, n in ((grid.sum(axis=1), rs, fe, L), (grid.sum(axis=0), cs, ff, R)):
        if slacks:
            allowed = np.minimum(slacks, cap - count)
            rank = np.arange(slacks)[None, :]
            if gains is None:
                on = rank < allowed[:, None]
            else:
                g = gains[start - n_links: start - n_links + n * slacks].reshape(n, slacks)
                order = np.argsort(-g, axis=1, kind="stable")
                on_sorted = (rank < allowed[:, None]) & (np.take_along_axis(g, order, axis=1) >= 0)
                on = np.zeros_like(on_sorted)
                np.put_along_axis(on, order, on_sorted, axis=1)
            out[start: start + n * slacks] = on.ravel()
            start += n * slacks
    return out


def _degree_problem(theta: FertilityPotentials) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The b-matching of budget-only potentials: ``(gain (L, R), row_cost, col_cost, slack gains)``.

    A variable's gain is its state-1 minus its state-0 score; a word's slacks become convex per-unit costs
    of its degree (:func:`_slack_costs`), truncated to the other sentence's length (a word cannot take
    more links than it has words to link to).
    """
    key = type(theta).key
    L, R, fe, ff, markov, _ = key
    if markov:
        raise InvalidInputError("the b-matching oracle serves fertility graphs without Markov tables")
    n_links, rs, cs, _ = _layout(key)
    unary = np.asarray(theta.unary, dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(unary).all():
        raise InvalidInputError("the b-matching oracle needs finite scores (a -inf state is a hard constraint it "
                                "does not model; FertilityStructure serves those by branch-and-bound)")
    gains = unary[:, 1] - unary[:, 0]
    row_cost = _slack_costs(gains[n_links: n_links + L * rs].reshape(L, rs), fe) if rs else np.zeros((L, fe))
    col_cost = _slack_costs(gains[n_links + L * rs:].reshape(R, cs), ff) if cs else np.zeros((R, ff))
    return (np.ascontiguousarray(gains[:n_links].reshape(L, R)), np.ascontiguousarray(row_cost[:, : min(fe, R)]),
            np.ascontiguousarray(col_cost[:, : min(ff, L)]), gains[n_links:])


def bmatching_value(links: np.ndarray, gain: np.ndarray, row_cost: np.ndarray, col_cost: np.ndarray) -> float:
    """The b-matching objective of 0/1 ``links`` (L * R,): their gains minus every word's degree costs
    (the sum of its first ``degree`` unit costs, which are non-decreasing)."""
    grid = np.asarray(links).reshape(gain.shape)
    deg_r, deg_c = grid.sum(axis=1), grid.sum(axis=0)
    if (deg_r > row_cost.shape[1]).any() or (deg_c > col_cost.shape[1]).any():
        return -np.inf
    prefix_r = np.concatenate([np.zeros((row_cost.shape[0], 1)), np.cumsum(row_cost, axis=1)], axis=1)
    prefix_c = np.concatenate([np.zeros((col_cost.shape[0], 1)), np.cumsum(col_cost, axis=1)], axis=1)
    return float(gain[grid == 1].sum() - prefix_r[np.arange(grid.shape[0]), deg_r].sum()
                 - prefix_c[np.arange(grid.shape[1]), deg_c].sum())


#: relative tolerance of the OR-Tools b-matching's float certificate (:func:`_ortools_links`)
ORTOOLS_RTOL = 1e-12
#: word pairs (L * R) from which ``FertilityStructure(oracle="auto")`` takes OR-Tools' flow over the numba
#: one: the crossover measured in ``benchmarks/alignment_fertility_results.md`` (numba's successive shortest
#: paths with Bellman-Ford grow about as links x L x R; OR-Tools' cost scaling has a ~0.1 ms set-up)
AUTO_ORTOOLS_LINKS = 2500


def _ortools_links(gain: np.ndarray, row_cost: np.ndarray, col_cost: np.ndarray,
                   rtol: float = ORTOOLS_RTOL) -> np.ndarray | None:
    """Max-weight b-matching by OR-Tools' min-cost flow on integer-scaled costs, certified in floats.

    The network of :func:`_bmatching` (source -> row j: one unit arc per unit of ``row_cost[j]``; row ->
    column: capacity 1, cost -gain, only gain > 0; column -> sink likewise) plus a zero-cost source -> sink
    arc that carries the flow the matching does not want, so that a min-cost flow of the full supply is a
    maximum-weight b-matching. Costs ``c`` become ``round(c * s)`` with ``s`` a power of two (exact
    scaling) as large as OR-Tools accepts; with ``d`` the largest rounding error ``|round(c s)/s - c|``,
    every flow of at most ``U`` units (3 U arcs) changes cost by at most ``3 U d``, so the float optimum
    is at most ``-opt_int / s + 3 U d``.

    Returns
    -------
    The link labels (L * R,) when their float objective is within ``rtol * (|value| + max |c|)`` of that
    bound (certified), else None (the caller answers with the exact float flow).
    """
    from structopt.structures.backends import max_cost_magnitude, ortools_min_cost_flow

    L, R = gain.shape
    cap_r, cap_c = row_cost.shape[1], col_cost.shape[1]
    pos = np.flatnonzero(gain.ravel() > 0.0)
    if pos.size == 0 or cap_r == 0 or cap_c == 0:
        return np.zeros(L * R, dtype=np.int64)
    src, snk = L + R, L + R + 1
    units = min(L * cap_r, R * cap_c, pos.size)  # the most flow a b-matching carries
    tails = np.concatenate([np.full(L * cap_r, src), pos // R, L + np.repeat(np.arange(R), cap_c), [src]])
    heads = np.concatenate([np.repeat(np.arange(L), cap_r), L + pos % R, np.full(R * cap_c, snk), [snk]])
    caps = np.ones(tails.size, dtype=np.int64)
    caps[-1] = units
    costs = np.concatenate([row_cost.ravel(), -gain.ravel()[pos], col_cost.ravel(), [0.0]])
    biggest = float(np.abs(costs).max())
    # a power of two (exact scaling); the exponent is capped so that denormal scores cannot overflow it
    scale = 2.0 ** min(np.floor(np.log2(max_cost_magnitude(L + R + 2)) - np.log2(biggest)), 1000.0)
    icosts = np.rint(costs * scale)
    rounding = float(np.abs(icosts / scale - costs).max())
    supplies = np.zeros(L + R + 2, dtype=np.int64)
    supplies[src], supplies[snk] = units, -units
    flows, cost = ortools_min_cost_flow(tails, heads, caps, icosts.astype(np.int64), supplies)
    links = np.zeros(L * R, dtype=np.int64)
    links[pos] = flows[L * cap_r: L * cap_r + pos.size]
    value = bmatching_value(links, gain, row_cost, col_cost)
    # an upper bound on the float optimum (the last term covers the int -> float conversion of the cost)
    upper = -cost / scale + 3 * units * rounding + 4 * np.finfo(float).eps * abs(cost / scale)
    return links if upper - value <= rtol * (abs(value) + biggest) else None


def bmatching(theta: FertilityPotentials, solver: str = "numba", rtol: float = ORTOOLS_RTOL) -> np.ndarray:
    """Exact MAP of budget-only fertility potentials (all variables: links, then slacks) by
    max-weight b-matching (min-cost flow).

    A variable's gain is its state-1 minus its state-0 score; a labeling's score is the sum of the
    state-0 scores plus the gains of the variables on. A word's slacks (``penalty``) become convex
    per-unit costs of its degree (:func:`_slack_costs`), so the MAP is a b-matching of maximum gain
    minus degree costs, completed by the best slacks its degrees allow.

    Parameters
    ----------
    theta : FertilityPotentials
        From :meth:`FertilityModel.potentials` without Markov factors.
    solver : {"numba", "ortools"}
        ``"numba"``: successive shortest paths in floats (:func:`_bmatching`); ``"ortools"``: OR-Tools'
        min-cost flow on integer-scaled costs (:func:`_ortools_links`), its answer kept when certified
        within ``rtol`` in floats, else the numba flow's.
    rtol : float
        The OR-Tools certificate's relative tolerance.
    """
    if solver not in ("numba", "ortools"):
        raise InvalidInputError(f"bmatching solver must be 'numba' or 'ortools', got {solver!r}")
    key = type(theta).key
    gain, row_cost, col_cost, slack_gains = _degree_problem(theta)
    links = _ortools_links(gain, row_cost, col_cost, rtol) if solver == "ortools" else None
    if links is None:
        links = _bmatching(gain, row_cost, col_cost)
    _, rs, cs, _ = _layout(key)
    return _complete(key, links, slack_gains) if rs or cs else links


class FertilityStructure(Structure):
    """Alignments of a sentence pair with bounded fertility: 0/1 labels of its L*R link variables
    that meet every budget (the graph comes with the potentials, see :class:`FertilityModel`).

    Parameters
    ----------
    exact : bool, default False
        False: :meth:`argmax` is AD3's LP-MAP point (integral without Markov factors); True: exact
        MAP by branch-and-bound.
    time_limit : float, optional
        Seconds per oracle call.
    oracle : {"auto", "flow", "ortools", "ad3"}
        ``"auto"``: the b-matching flow (:func:`bmatching`, exact) whenever the graph declares it
        can (:meth:`flow_capable`: budgets only, finite scores), else AD3 / branch-and-bound;
        ``"ad3"``: always the factor-graph path; ``"flow"``: the numba flow, refusing potentials it
        cannot serve; ``"ortools"``: the same with OR-Tools' min-cost flow (certified in floats, see
        :func:`_ortools_links`). ``"auto"`` takes the faster flow of the two as measured in
        ``benchmarks/alignment_fertility_results.md``: the numba flow below
        :data:`AUTO_ORTOOLS_LINKS` word pairs (every Hansards pair), OR-Tools from there on.
    """

    name = "FertilityStructure"

    def __init__(self, exact: bool = False, time_limit: float | None = None, oracle: str = "auto"):
        if oracle not in ("auto", "flow", "ortools", "ad3"):
            raise InvalidInputError(f"FertilityStructure oracle must be 'auto', 'flow', 'ortools' or 'ad3', got "
                                    f"{oracle!r}")
        if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
            raise InvalidInputError(f"FertilityStructure needs time_limit > 0 seconds or None, got {time_limit!r}")
        self.exact = bool(exact)
        self.time_limit = time_limit
        self.oracle = oracle

    def __repr__(self) -> str:
        return f"FertilityStructure(exact={self.exact}, oracle={self.oracle!r})"

    @staticmethod
    def _flat(theta: FertilityPotentials) -> FactorGraphPotentials:
        return FactorGraphPotentials(theta.unary, theta.factors)

    @staticmethod
    def flow_capable(theta: FertilityPotentials) -> bool:
        """Whether the b-matching flow computes the exact MAP of ``theta``: no Markov tables and
        finite unary scores (a -inf state would be a hard constraint the flow does not model)."""
        return not type(theta).key[4] and bool(np.isfinite(theta.unary).all())

    @staticmethod
    def _output(theta: FertilityPotentials, labels: np.ndarray) -> Any:
        # link labels without slacks; with slacks the statistics of the full labeling (an output's
        # own statistics complete it with every allowed slack on, which only an optimum with
        # non-negative slack scores does)
        if _layout(type(theta).key)[3] == _layout(type(theta).key)[0]:
            return labels
        mu = theta.factor_graph.stats(labels)
        return type(theta)(mu.unary, mu.factors)

    def _flow_solver(self, theta: FertilityPotentials) -> str | None:
        """The :func:`bmatching` solver serving ``theta``, or None for the factor-graph path."""
        if self.oracle == "ad3":
            return None
        capable = self.flow_capable(theta)
        if self.oracle != "auto" and not capable:
            raise InvalidInputError(f"FertilityStructure(oracle={self.oracle!r}) serves budget-only graphs with finite "
                                    f"scores; these potentials have Markov tables or -inf scores")
        if not capable:
            return None
        if self.oracle == "auto":
            L, R = type(theta).key[:2]
            return "ortools" if L * R >= AUTO_ORTOOLS_LINKS else "numba"
        return "ortools" if self.oracle == "ortools" else "numba"

    def argmax(self, theta: FertilityPotentials) -> Any:
        """Link labels when AD3 certifies them (or with ``exact=True``, or from the flow), else the
        fractional LP-MAP point; with slack variables the statistics of the full optimum."""
        theta = self.expand(theta)
        fg = _graph_of(theta)
        solver = self._flow_solver(theta)
        if solver is not None:
            return self._output(theta, bmatching(theta, solver))
        if self.exact:
            return self._output(theta, fg.map_labels(self._flat(theta), exact=True, time_limit=self.time_limit))
        sol, _ = fg.ad3(self._flat(theta), time_limit=self.time_limit)
        if sol.status == "infeasible":
            raise InvalidInputError("fertility potentials forbid every alignment (no feasible output)")
        if sol.optimal:
            return self._output(theta, sol.labels)
        return type(theta)(sol.marginals.unary, sol.marginals.factors)

    def map_labels(self, theta: FertilityPotentials, exact: bool = True) -> np.ndarray:
        """Link labels ``(L * R,)`` of the MAP: the flow when capable, else branch-and-bound (or AD3's
        best rounding with ``exact=False``)."""
        theta = self.expand(theta)
        solver = self._flow_solver(theta)
        if solver is not None:
            full = bmatching(theta, solver)
        else:
            full = _graph_of(theta).map_labels(self._flat(theta), exact=exact, time_limit=self.time_limit)
        return full[: _layout(type(theta).key)[0]]

    def stats(self, y: Any, like: FertilityPotentials) -> FertilityPotentials:
        """Statistics of link labels (completed with every allowed slack on), or a relaxed point unchanged."""
        if isinstance(y, FertilityPotentials):
            return type(like)(np.asarray(y.unary, dtype=float), np.asarray(y.factors, dtype=float))
        full = _complete(type(like).key, self.validate_output(y, like))
        mu = _graph_of(like).stats(full)
        return type(like)(mu.unary, mu.factors)

    def outputs(self, theta: FertilityPotentials) -> Iterator[np.ndarray]:
        """Every link labeling within the bounds whose statistics score finitely (tiny pairs only)."""
        theta = self.expand(theta)
        fg, flat = _graph_of(theta), self._flat(theta)
        key = type(theta).key
        L, R, fe, ff = key[:4]
        for bits in itertools.product((0, 1), repeat=L * R):
            y = np.array(bits, dtype=np.int64)
            grid = y.reshape(L, R)
            if (grid.sum(axis=1) <= fe).all() and (grid.sum(axis=0) <= ff).all() and \
                    np.isfinite(fg.score_labels(flat, _complete(key, y))):
                yield y

    def polytope(self, theta: FertilityPotentials) -> Polytope:
        """The local polytope of the graph (exact without Markov factors and slacks; with slacks it
        also holds labelings whose slacks are off where they could be on)."""
        theta = self.expand(theta)
        poly = _graph_of(theta).polytope(self._flat(theta))
        return poly._replace(like=type(theta)(np.zeros_like(theta.unary), np.zeros_like(theta.factors)))

    def expand(self, theta: FertilityPotentials, index: int | None = None) -> FertilityPotentials:
        fg = _graph_of(theta, index)
        checked = fg.check_theta(self._flat(theta), index)
        return type(theta)(checked.unary, checked.factors)

    def validate_output(self, y: Any, like: FertilityPotentials, index: int | None = None) -> np.ndarray:
        _graph_of(like, index)
        key = type(like).key
        L, R, fe, ff = key[:4]
        arr = np.asarray(y)
        if arr.shape != (L * R,) or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise example_error(index, f"an alignment must be an integer array of shape ({L * R},) (one 0/1 label "
                                       f"per word pair, English-major), got {arr.dtype} {arr.shape}")
        if ((arr != 0) & (arr != 1)).any():
            raise example_error(index, "alignment labels must be 0 or 1")
        links = arr.astype(np.int64).reshape(L, R)
        rows, cols = np.flatnonzero(links.sum(axis=1) > fe), np.flatnonzero(links.sum(axis=0) > ff)
        if rows.size or cols.size:
            what = f"English word {int(rows[0])}" if rows.size else f"French word {int(cols[0])}"
            raise example_error(index, f"alignment links {what} to more words than its fertility bound "
                                       f"({fe} per English, {ff} per French word)")
        return links.ravel()

    # ----- per-node loss hooks (Hamming, WeightedHamming)
    @property
    def states_per_node(self) -> int:
        """Two states per link variable (the per-node loss hook)."""
        return 2

    def node_potentials(self, costs: np.ndarray, like: FertilityPotentials) -> FertilityPotentials:
        """Potentials with per-link-state scores ``costs`` (L*R, 2), no slack or table scores."""
        costs = np.asarray(costs, dtype=float)
        n_links = _layout(type(like).key)[0]
        if costs.shape != (n_links, 2):
            raise InvalidInputError(f"node costs of shape {costs.shape} for {n_links} link variables")
        unary = np.zeros_like(like.unary)
        unary[: 2 * n_links] = costs.ravel()
        return type(like)(unary, np.zeros_like(like.factors))

    @unsupported
    def topk(self, theta: FertilityPotentials, k: int) -> tuple[list[Any], np.ndarray]:
        from structopt.errors import NotSupportedError

        raise NotSupportedError("FertilityStructure has no top-K oracle (its max oracle is AD3's LP-MAP); train "
                                "with bcfw, frank_wolfe or ssg")

    @unsupported
    def marginals(self, theta: FertilityPotentials) -> tuple[float, FertilityPotentials]:
        from structopt.errors import NotSupportedError

        raise NotSupportedError("FertilityStructure has no marginals (counting b-matchings is #P-hard); train "
                                "with bcfw, frank_wolfe or ssg")


class FertilityModel(Model):
    """Linear link scores ``<f_jk, w_link> + b`` and one weight per Markov kind on the fertility factor graph
    (the bias ``b`` sets how good a link must be to be made: the matching model's unmatched scores).

    Inputs are (L, R, F) edge-feature arrays (:class:`~structopt.tasks.alignment.AlignmentFeaturizer`);
    outputs are 0/1 labels ``(L * R,)`` meeting the fertility bounds.

    Parameters
    ----------
    n_features : int
        F.
    fertility_en, fertility_fr : int
        Most links per English / French word.
    markov : sequence of str
        Markov kinds among :data:`MARKOV_KINDS`.
    exact : bool
        Exact MAP as the training oracle (default: AD3's LP-MAP, exact without Markov factors).
    time_limit : float, optional
        Seconds per AD3 / branch-and-bound call.
    penalty : bool
        Learned fertility costs: every link beyond a word's first costs a weight per side (``fertility``
        block, kept >= 0), through slack variables inside the budgets (see :func:`build_graph`).
    oracle : {"auto", "flow", "ortools", "ad3"}
        See :class:`FertilityStructure` (default: the exact b-matching flow when there are no Markov factors).
    """

    def __init__(self, n_features: int, fertility_en: int = DEFAULT_FERTILITY, fertility_fr: int = DEFAULT_FERTILITY,
                 markov: Sequence[str] = (), *, penalty: bool = False, exact: bool = False,
                 time_limit: float | None = None, oracle: str = "auto"):
        for label, value in (("n_features", n_features), ("fertility_en", fertility_en),
                             ("fertility_fr", fertility_fr)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InvalidInputError(f"FertilityModel {label} must be an integer >= 1, got {value!r}")
        markov = tuple(markov)
        bad = [m for m in markov if m not in MARKOV_KINDS]
        if bad or len(set(markov)) != len(markov):
            raise InvalidInputError(f"FertilityModel markov must be distinct kinds among {MARKOV_KINDS}, got {markov}")
        self.n_features = int(n_features)
        self.fertility_en, self.fertility_fr = int(fertility_en), int(fertility_fr)
        self.markov = tuple(k for k in MARKOV_KINDS if k in markov)
        if not isinstance(penalty, (bool, np.bool_)):
            raise InvalidInputError(f"FertilityModel penalty must be True or False, got {penalty!r}")
        self.penalty = bool(penalty) and (self.fertility_en > 1 or self.fertility_fr > 1)
        # a slack's score is a reward for a word's unused fertility: kept >= 0, so that the slacks an
        # output's statistics switch on (every allowed one) are the best ones for every weight vector
        self.nonnegative_blocks = ("fertility",) if self.penalty else ()
        self.structure = FertilityStructure(exact, time_limit, oracle)

    def __repr__(self) -> str:
        return (f"FertilityModel(n_features={self.n_features}, fertility_en={self.fertility_en}, "
                f"fertility_fr={self.fertility_fr}, markov={self.markov}, penalty={self.penalty})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        blocks = [("link", (self.n_features,)), ("bias", (1,))]
        if self.markov:
            blocks.append(("markov", (len(self.markov),)))
        if self.penalty:
            blocks.append(("fertility", (2,)))
        return blocks

    def validate_input(self, x: Any, index: int | None = None) -> np.ndarray:
        try:
            arr = np.ascontiguousarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise example_error(index, "alignment features must be a numeric (L, R, F) array") from None
        if arr.ndim != 3 or arr.shape[2] != self.n_features or min(arr.shape[:2]) < 1:
            raise example_error(index, f"alignment features must have shape (L>=1, R>=1, {self.n_features}), got "
                                       f"{arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise example_error(index, "alignment features contain NaN or infinite values")
        return arr

    def _table_counts(self, L: int, R: int) -> list[int]:
        return [_markov_pairs(L, R, kind)[0].size for kind in self.markov]

    def potentials(self, x: np.ndarray, w: np.ndarray) -> FertilityPotentials:
        blocks = self.unpack(w)
        L, R, _ = x.shape
        cls = _potentials_type(L, R, self.fertility_en, self.fertility_fr, self.markov, self.penalty)
        n_links, rs, _, n_vars = _layout(cls.key)
        unary = np.zeros((n_vars, 2))
        unary[:n_links, 1] = x.reshape(L * R, -1) @ blocks["link"] + blocks["bias"][0]
        if self.penalty:
            unary[n_links: n_links + L * rs, 1] = blocks["fertility"][0]
            unary[n_links + L * rs:, 1] = blocks["fertility"][1]
        tables = [np.zeros((n, 4)) for n in self._table_counts(L, R)]
        for t, weight in zip(tables, blocks.get("markov", ())):
            t[:, 3] = weight  # entry (1, 1), row-major
        factors = np.concatenate([t.ravel() for t in tables]) if tables else np.zeros(0)
        return cls(unary.ravel(), factors)

    def add_features(self, x: np.ndarray, mu: FertilityPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        L, R, F = x.shape
        unary = np.asarray(mu[0], dtype=float).reshape(-1, 2)
        blocks["link"] += scale * (x.reshape(L * R, F).T @ unary[: L * R, 1])
        blocks["bias"] += scale * unary[: L * R, 1].sum()
        if self.penalty:
            rs = self.fertility_en - 1
            blocks["fertility"] += scale * np.array([unary[L * R: L * R + L * rs, 1].sum(),
                                                     unary[L * R + L * rs:, 1].sum()])
        if self.markov:
            counts = self._table_counts(L, R)
            on = np.asarray(mu[1], dtype=float).reshape(-1, 4)[:, 3]
            blocks["markov"] += scale * np.add.reduceat(on, np.r_[0, np.cumsum(counts)[:-1]]) \
                if on.size else 0.0

    def predict(self, x: Any, w: np.ndarray, exact: bool = True) -> np.ndarray:
        """0/1 link labels ``(L * R,)``: exact MAP, or AD3's rounding with ``exact=False``."""
        x = self.validate_input(x)
        return self.structure.map_labels(self.potentials(x, np.asarray(w, dtype=float)), exact=exact)


def link_matrix(y: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """0/1 labels ``(L * R,)`` as an (L, R) link matrix."""
    return np.asarray(y).reshape(shape)


def link_set(y: np.ndarray, shape: tuple[int, int]) -> set[tuple[int, int]]:
    """The links ``(j, k)`` of 0/1 labels."""
    return {(int(j), int(k)) for j, k in zip(*np.nonzero(link_matrix(y, shape)))}


def fertility_target(sure: set[tuple[int, int]], dice: np.ndarray, fertility_en: int, fertility_fr: int
                     ) -> np.ndarray:
    """Training labels: a maximum subset of the sure links within the fertility bounds (ties: larger
    Dice, then nearer the diagonal), exact MAP on the budget-only graph."""
    L, R = dice.shape
    pos = np.abs((np.arange(L)[:, None] + 0.5) / L - (np.arange(R)[None, :] + 0.5) / R)
    scores = np.full((L, R), -1.0)
    for j, k in sure:
        scores[j, k] = 1.0 + 0.1 * dice[j, k] + 0.01 * (1.0 - pos[j, k])
    fg = build_graph(L, R, fertility_en, fertility_fr)
    unary = np.zeros((L * R, 2))
    unary[:, 1] = scores.ravel()
    return fg.map_labels(FactorGraphPotentials(unary.ravel(), np.zeros(0)), exact=True)


def link_loss(fp_cost: float = 1.0, fn_cost: float = 3.0) -> WeightedHamming:
    """The training loss: ``fp_cost`` per predicted link not in the target, ``fn_cost`` per missed one."""
    return WeightedHamming(np.array([[0.0, fp_cost], [fn_cost, 0.0]]))


class FertilityTask(NamedTuple):
    """The matching task's split with fertility targets.

    Attributes
    ----------
    X_train, Y_train, X_test : features and 0/1 targets ``(L * R,)``
    base : the underlying :class:`~structopt.tasks.alignment.AlignmentTask` (pairs, featurizer,
        matching targets)
    """

    X_train: list[np.ndarray]
    Y_train: list[np.ndarray]
    X_test: list[np.ndarray]
    base: AlignmentTask

    def evaluate(self, predictions: Sequence[np.ndarray]) -> float:
        """Held-out AER of 0/1 link labels (one per held-out pair)."""
        if len(predictions) != len(self.base.test_pairs):
            raise InvalidInputError(f"{len(predictions)} predictions for {len(self.base.test_pairs)} held-out pairs")
        return aer([link_set(y, p.shape) for y, p in zip(predictions, self.base.test_pairs)], self.base.test_pairs)


def load_fertility_alignment(path: str | os.PathLike | None = None, n_heldout: int = 200, random_state: int = 0,
                             fertility_en: int = DEFAULT_FERTILITY, fertility_fr: int = DEFAULT_FERTILITY
                             ) -> FertilityTask:
    """The Hansards split of :func:`~structopt.tasks.alignment.load_alignment` (same held-out pairs for
    the same ``n_heldout`` and ``random_state``) with fertility-bounded targets."""
    base = load_alignment(path, n_heldout=n_heldout, random_state=random_state)
    Y = [fertility_target(p.sure, base.featurizer.dice(p), fertility_en, fertility_fr) for p in base.train_pairs]
    return FertilityTask(base.X_train, Y, base.X_test, base)


# --------------------------------------------------------------------------- training task
DEFAULT_LAMS = (1e-4, 1e-3, 1e-2)


def _train(model: FertilityModel, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], lam: float, passes: float,
           seed: int, loss: WeightedHamming | None = None) -> np.ndarray:
    from structopt.problem import SSVMProblem
    from structopt.solvers.bcfw import bcfw

    problem = SSVMProblem(model, list(X), list(Y), link_loss() if loss is None else loss, lam)
    return bcfw(problem, max_passes=passes, random_state=seed).w


def select_lam(task: FertilityTask, model: FertilityModel, lams: Sequence[float] = DEFAULT_LAMS, n_folds: int = 3,
               passes: float = 10, n_train: int | None = None, seed: int = 0,
               loss: WeightedHamming | None = None) -> dict[str, Any]:
    """λ by ``n_folds``-fold cross-validation on the training pairs only (pair ``t`` in fold ``t % n_folds``),
    scored by the AER of the held-out fold against its full gold.

    Returns
    -------
    dict with ``lam`` (the best; ties: the larger) and ``scores`` ({λ: mean CV AER}).
    """
    n = len(task.X_train) if n_train is None else min(int(n_train), len(task.X_train))
    lams = check_cross_validation(n, n_folds, "pairs", lams)
    fold = np.arange(n) % n_folds
    pairs = task.base.train_pairs
    scores = {}
    for lam in lams:
        values = []
        for f in range(n_folds):
            fit, held = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
            w = _train(model, [task.X_train[i] for i in fit], [task.Y_train[i] for i in fit], lam, passes, seed,
                       loss)
            pred = [link_set(model.predict(task.X_train[i], w), pairs[i].shape) for i in held]
            values.append(aer(pred, [pairs[i] for i in held]))
        scores[lam] = float(np.mean(values))
    best = min(scores, key=lambda v: (scores[v], -v))
    return {"lam": best, "scores": scores}


def build_task(data_dir: str | os.PathLike | None = None, n_train: int | None = None, lam: float | None = None,
               seed: int = 0, *, fertility_en: int = DEFAULT_FERTILITY, fertility_fr: int = DEFAULT_FERTILITY,
               markov: Sequence[str] = ("diag",), penalty: bool = True, fn_cost: float = 3.0,
               lams: Sequence[float] = DEFAULT_LAMS, cv_folds: int = 3, cv_passes: float = 10,
               n_heldout: int = 200) -> tuple[Any, Any, str]:
    """Fertility-bounded Hansards alignment as a training task: ``(problem, evaluate, description)``.

    Parameters
    ----------
    data_dir : path, optional
        The Hansards directory (default: see :func:`~structopt.tasks.alignment.resolve_data_dir`).
    n_train : int, optional
        Train on the first ``n_train`` training pairs (the held-out pairs are unchanged).
    lam : float, optional
        λ; None chooses it by :func:`select_lam` on the training pairs.
    seed : int
        Seed of the held-out choice (0: the matching task's split) and of the CV runs.
    fertility_en, fertility_fr, markov, penalty
        See :class:`FertilityModel`. The defaults (at most 2 links per word, learned fertility costs,
        diagonal Markov factors) gave the best held-out AER in ``benchmarks/alignment_fertility.py``;
        with Markov factors the training oracle is AD3's LP-MAP (relaxed) and predictions are exact
        (branch-and-bound); ``markov=()`` trains with the exact b-matching flow.
    fn_cost : float
        Price of a missed target link in the loss (a wrong link costs 1; :func:`link_loss`).
    n_heldout : int
        Held-out pairs (200 as in the matching task).

    Returns
    -------
    problem : SSVMProblem
        :class:`FertilityModel`, :func:`link_loss` (false positive 1, false negative ``fn_cost``).
    evaluate : callable
        ``evaluate(w)`` -> ``{"heldout_aer"}`` (exact MAP predictions).
    description : str
    """
    from structopt.problem import SSVMProblem

    if n_train is not None and (isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer))
                                or n_train < 1):
        raise InvalidInputError(f"n_train must be a positive integer or None, got {n_train!r}")
    if lam is not None and not (isinstance(lam, (int, float)) and np.isfinite(lam) and lam > 0):
        raise InvalidInputError(f"lam must be a positive number or None, got {lam!r}")
    task = load_fertility_alignment(data_dir, n_heldout=n_heldout, random_state=seed, fertility_en=fertility_en,
                                    fertility_fr=fertility_fr)
    model = FertilityModel(task.base.n_features, fertility_en, fertility_fr, markov, penalty=penalty)
    loss = link_loss(1.0, fn_cost)
    n = len(task.X_train) if n_train is None else min(int(n_train), len(task.X_train))
    cv = ""
    if lam is None:
        chosen = select_lam(task, model, lams, cv_folds, cv_passes, n, seed, loss)
        lam = chosen["lam"]
        cv = " (cross-validated AER: " + ", ".join(f"{k:g}: {v:.4f}" for k, v in chosen["scores"].items()) + ")"
    problem = SSVMProblem(model, task.X_train[:n], task.Y_train[:n], loss, float(lam))

    def evaluate(w: np.ndarray) -> dict[str, float]:
        return {"heldout_aer": task.evaluate([model.predict(x, w) for x in task.X_test])}

    description = (f"Hansards word alignment with fertility <= {fertility_en} (English) / {fertility_fr} (French)"
                   f"{', learned fertility costs' if model.penalty else ''}"
                   f"{', Markov ' + '+'.join(model.markov) if model.markov else ''} ({n} training / "
                   f"{len(task.X_test)} held-out pairs), λ={float(lam):g}{cv}")
    return problem, evaluate, description
