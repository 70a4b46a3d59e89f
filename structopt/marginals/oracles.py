"""Linear maximisation oracles over the marginal polytope 𝓜 (exact MAP) and the local polytope 𝕃 (LP).

Barrier Frank-Wolfe calls them with perturbed potentials θ̃ = ∇TRW(μ), which are arbitrary dense
tables even when θ is submodular, so the 𝓜 oracle checks submodularity at every call:

- binary model whose θ̃ is submodular on every edge: min-cut (OR-Tools ``SimpleMaxFlow``, capacities
  scaled to int64; the float energy of the cut is checked against the flow);
- otherwise, when a greedy min-fill elimination order creates no table larger than
  ``max_elimination_table`` entries (2**16 by default: trees, chains, planar 10×10 grids): max-product
  variable elimination, in floats (tens of milliseconds on a 10×10 grid);
- otherwise, when the local-polytope LP (HiGHS) has an integral optimum: that optimum (it is a
  vertex of 𝓜; it is exact on trees, and occasionally hits on perturbed Potts segmentations);
- otherwise, with ``map_solver="bnb"``: branch-and-bound over AD3 on the factor graph of the
  model (:meth:`~structopt.structures.factor_graph.FactorGraph.bnb`), warm-started from the previous
  call's root iterate, within ``bnb_seconds``; its labeling counts as exact only when proven optimal
  (the certified ``bound`` is then its own upper bound). When it is not proven in time, CP-SAT below
  runs from its labeling (hint) and the smaller of the two proven bounds enters the certificate;
  after such a miss the next 1, 2, 4, ... calls (up to 64) go to CP-SAT directly, so a model whose
  relaxation is loose (frustrated grids) costs little more than CP-SAT alone. Measured on the UAI
  instances (``benchmarks/barrier_fw_map_oracle_results.md``) it changes the MAP calls per second
  by 0.6-2x either way and the ρ updates reached in 60 s not at all, so it is not the default;
- otherwise (``map_solver="cpsat"``, the default): OR-Tools CP-SAT on the 0/1 program (one Boolean per binary
  variable and a product Boolean per edge; one-hot node and edge indicators for larger
  cardinalities), objective scaled to integers, warm-started from the previous solution, one
  worker. Measured on one (shared) core:
  tens of binary variables take milliseconds; the shipped frustrated 10×10 toroidal grids (100
  variables, 200 edges, couplings up to |4.2|) 0.6-1.5 s per call; the 230-variable, 620-edge
  segmentation models with perturbed (non-submodular) potentials 0.4-1 s per call. Beyond a few
  hundred binary variables with frustrated couplings it grows quickly (give ``time_limit``: then
  CP-SAT's proven bound enters the certificate).

Every oracle reports ``value`` = ⟨θ̃, vertex⟩ and a ``bound`` ≥ max over the polytope of ⟨θ̃, μ⟩
(value plus the integer rounding slack, or the solver's proven bound when stopped early).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.sparse import csr_matrix

from structopt.errors import InvalidInputError
from structopt.interrupt import interruptible
from structopt.marginals.mrf import PairwiseMRF
from structopt.structures.backends import highs_solve


@dataclass
class OracleResult:
    """A maximiser of ⟨θ̃, μ⟩ over a polytope.

    Attributes
    ----------
    vertex : ndarray (D,)
        The maximising point (a 0/1 vertex φ(x) for 𝓜; an LP vertex for 𝕃).
    value : float
        ⟨θ̃, vertex⟩.
    bound : float
        A certified upper bound on the maximum (≥ value).
    assignment : ndarray or None
        The joint assignment x for 𝓜 oracles.
    solver : str
        Which solver produced it ("mincut", "elimination", "lp" (an integral LP optimum), "cpsat").
    """

    vertex: np.ndarray
    value: float
    bound: float
    assignment: np.ndarray | None
    solver: str


def _edge_tables_binary(mrf: PairwiseMRF, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Node tables (N, 2) and edge tables (E, 4) = (s00, s01, s10, s11) of a binary model."""
    n = mrf.n_nodes
    return theta[:2 * n].reshape(n, 2), theta[2 * n:].reshape(-1, 4)


def _mincut_map(mrf: PairwiseMRF, theta: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact MAP of a binary model with submodular θ by one s-t min-cut.

    Returns the assignment and the rounding slack (a bound on its suboptimality). Energy
    E = −score; per edge E(xi, xj) = A + (C−A)xi + (D−C)xj + (B+C−A−D)(1−xi)xj with A..D the energies of
    00, 01, 10, 11; x_i = 1 puts i on the sink side.
    """
    from structopt.structures.backends import ortools_min_cut

    n = mrf.n_nodes
    node, edge = _edge_tables_binary(mrf, theta)
    a, b, c, d = (-edge[:, k] for k in range(4))
    lin = -(node[:, 1] - node[:, 0])
    np.add.at(lin, mrf.edges[:, 0], c - a)
    np.add.at(lin, mrf.edges[:, 1], d - c)
    pair = np.maximum(b + c - a - d, 0.0)  # callers pass submodular θ: only round-off is clipped
    const = float(-node[:, 0].sum() + a.sum() + np.minimum(lin, 0.0).sum())
    src = np.flatnonzero(lin > 0)
    snk = np.flatnonzero(lin < 0)
    tails = np.concatenate([np.full(src.size, n), snk, mrf.edges[:, 0]])
    heads = np.concatenate([src, np.full(snk.size, n + 1), mrf.edges[:, 1]])
    caps = np.concatenate([lin[src], -lin[snk], pair])
    total = float(caps.sum())
    scale = float(2.0 ** 52 / total) if total > 0 else 1.0
    icaps = np.rint(caps * scale).astype(np.int64)
    x, flow_int = ortools_min_cut(tails, heads, icaps, n)
    slack = caps.size / scale + 1e-12 * total
    # float verification: the cut's energy must equal the flow value up to the rounding
    energy = -float(mrf.with_theta(theta, 0.0).score(x))
    flow = flow_int / scale + const
    if abs(energy - flow) > slack + 1e-9 * (1.0 + abs(energy)):
        raise RuntimeError(f"min-cut verification failed: energy {energy} vs flow {flow}")
    return x, slack


class _CpSatMap:
    """Exact MAP by CP-SAT on an integer-scaled 0/1 program (warm-started from the last solution)."""

    def __init__(self, mrf: PairwiseMRF, time_limit: float | None, resolution_bits: int = 31) -> None:
        self.mrf = mrf
        self.time_limit = time_limit
        self.resolution_bits = resolution_bits
        self.hint: np.ndarray | None = None

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, float, float | None]:
        """Return (assignment, rounding slack, how far the proven bound exceeds it: None when optimal)."""
        from ortools.sat.python import cp_model

        mrf = self.mrf
        n = mrf.n_nodes
        model = cp_model.CpModel()
        if mrf.is_binary():
            node, edge = _edge_tables_binary(mrf, theta)
            lin = node[:, 1] - node[:, 0]
            s00, s01, s10, s11 = (edge[:, k] for k in range(4))
            np.add.at(lin, mrf.edges[:, 0], s10 - s00)
            np.add.at(lin, mrf.edges[:, 1], s01 - s00)
            quad = s11 - s10 - s01 + s00
            coefs = np.concatenate([lin, quad])
            scale = self._scale(coefs)
            icoef = np.rint(coefs * scale).astype(np.int64).tolist()
            xs = [model.new_bool_var(f"x{i}") for i in range(n)]
            terms = list(zip(icoef[:n], xs))
            for e, (i, j) in enumerate(mrf.edges.tolist()):
                q = icoef[n + e]
                if q == 0:
                    continue
                p = model.new_bool_var(f"p{e}")
                if q > 0:  # maximisation pushes p up: p ≤ x_i, p ≤ x_j suffice
                    model.add_implication(p, xs[i])
                    model.add_implication(p, xs[j])
                else:  # p ≥ x_i + x_j − 1
                    model.add_bool_or([xs[i].Not(), xs[j].Not(), p])
                terms.append((q, p))
            model.maximize(sum(c * v for c, v in terms if c != 0))
            if self.hint is not None:
                for i in range(n):
                    model.add_hint(xs[i], int(self.hint[i]))
            n_terms = len(terms)
        else:
            coefs = theta - np.repeat(np.maximum.reduceat(theta, mrf.offsets[:-1]), np.diff(mrf.offsets))
            coefs = np.where(np.isfinite(coefs), coefs, -1e6 * (np.abs(coefs[np.isfinite(coefs)]).max() + 1))
            scale = self._scale(coefs)
            icoef = np.rint(coefs * scale).astype(np.int64).tolist()
            z = [model.new_bool_var(f"z{k}") for k in range(mrf.dim)]
            for i in range(n):
                model.add_exactly_one(z[mrf.offsets[i]:mrf.offsets[i + 1]])
            for e, (i, j) in enumerate(mrf.edges.tolist()):
                ci, cj = int(mrf.cards[i]), int(mrf.cards[j])
                base = int(mrf.offsets[n + e])
                for a in range(ci):
                    model.add(sum(z[base + a * cj + b] for b in range(cj)) == z[mrf.offsets[i] + a])
                for b in range(cj):
                    model.add(sum(z[base + a * cj + b] for a in range(ci)) == z[mrf.offsets[j] + b])
            model.maximize(sum(c * v for c, v in zip(icoef, z) if c != 0))
            if self.hint is not None:
                for i in range(n):
                    for a in range(int(mrf.cards[i])):
                        model.add_hint(z[mrf.offsets[i] + a], int(self.hint[i] == a))
            n_terms = mrf.dim
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        # the LP relaxation inside the search is what makes frustrated grids and Potts models fast
        solver.parameters.linearization_level = 2
        if self.time_limit is not None:
            solver.parameters.max_time_in_seconds = float(self.time_limit)
        # Ctrl-C: stop the search and raise KeyboardInterrupt (CP-SAT's own handler would only cut this
        # call short, and the run would go on with the hint as if out of time)
        solver.parameters.catch_sigint_signal = False
        with interruptible(solver.stop_search):
            status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if status == cp_model.UNKNOWN:
                # out of time before a solution: the last vertex (or, at the first call, the labeling of the
                # best node entries), a vertex of 𝓜 all the same, with no bound (the certificate stays open)
                if self.hint is not None:
                    return self.hint.copy(), 0.0, np.inf
                return np.array([int(np.argmax(theta[mrf.offsets[i]:mrf.offsets[i + 1]])) for i in range(n)],
                                dtype=np.int64), 0.0, np.inf
            raise RuntimeError(f"CP-SAT found no solution (status {solver.status_name(status)})")
        if mrf.is_binary():
            x = np.array([solver.value(v) for v in xs], dtype=np.int64)
        else:
            zv = np.array([solver.value(v) for v in z[:mrf.n_node_entries]])
            x = np.array([int(np.argmax(zv[mrf.offsets[i]:mrf.offsets[i + 1]])) for i in range(n)], dtype=np.int64)
        self.hint = x
        slack = n_terms / scale
        proven = None
        if status != cp_model.OPTIMAL:
            proven = (solver.best_objective_bound - solver.objective_value) / scale
        return x, slack, proven

    def _scale(self, coefs: np.ndarray) -> float:
        top = float(np.abs(coefs).max()) if coefs.size else 0.0
        return float(2.0 ** self.resolution_bits / top) if top > 0 else 1.0


class MarginalPolytopeOracle:
    """Exact MAP: argmax_x ⟨θ̃, φ(x)⟩ over the vertices of the marginal polytope 𝓜.

    Parameters
    ----------
    mrf : PairwiseMRF
        Supplies the graph and cardinalities; the potentials come with each call.
    time_limit : float, optional
        Per-call limit for CP-SAT; when hit, ``bound`` is CP-SAT's proven bound.
    max_elimination_table : int
        Use variable elimination when its largest table has at most this many entries.
    try_lp : bool
        Before CP-SAT, solve the local-polytope LP and keep its solution when it is integral
        (``map_solver="cpsat"`` only: AD3 solves the same LP faster on the ``"bnb"`` path).
    map_solver : {"cpsat", "bnb"}
        The MAP solver when neither min-cut nor elimination applies: CP-SAT alone (default), or
        branch-and-bound over AD3 first (CP-SAT only when it is not proven optimal within ``bnb_seconds``).
    bnb_seconds : float
        Per-call budget of branch-and-bound before CP-SAT takes over.
    """

    #: after a branch-and-bound miss, skip it for 1, 2, 4, ... calls, at most this many
    MAX_BNB_SKIP = 64

    polytope = "marginal"

    def __init__(self, mrf: PairwiseMRF, time_limit: float | None = None,
                 max_elimination_table: int = 1 << 16, try_lp: bool = True, map_solver: str = "cpsat",
                 bnb_seconds: float = 0.5) -> None:
        from structopt.marginals.exact import elimination_order, elimination_width

        if map_solver not in ("bnb", "cpsat"):
            raise InvalidInputError(f"map_solver must be 'bnb' or 'cpsat', got {map_solver!r}")
        self.map_solver = map_solver
        self.bnb_seconds = float(bnb_seconds)
        self._fg = None
        self._warm = None
        self._skip = 0  # calls left before branch-and-bound is tried again
        self._backoff = 1

        self.mrf = mrf
        self._cpsat = _CpSatMap(mrf, time_limit)
        self._order = elimination_order(mrf)
        self._use_elimination = elimination_width(mrf, self._order) <= max_elimination_table
        self.try_lp = try_lp
        self._lp = LocalPolytopeOracle(mrf) if try_lp else None
        self.calls = {"mincut": 0, "elimination": 0, "lp": 0, "bnb": 0, "cpsat": 0}

    @property
    def time_limit(self) -> float | None:
        """Per-call CP-SAT limit in seconds (None: solve to optimality)."""
        return self._cpsat.time_limit

    @time_limit.setter
    def time_limit(self, seconds: float | None) -> None:
        self._cpsat.time_limit = seconds

    def is_submodular(self, theta: np.ndarray, tol: float = 1e-10) -> bool:
        """True for a binary model whose every edge satisfies s00 + s11 ≥ s01 + s10 (maximisation)."""
        if not self.mrf.is_binary():
            return False
        if self.mrf.n_edges == 0:
            return True
        _, edge = _edge_tables_binary(self.mrf, theta)
        excess = edge[:, 0] + edge[:, 3] - edge[:, 1] - edge[:, 2]
        return bool((excess >= -tol * (1.0 + np.abs(edge).max(axis=1))).all())

    def __call__(self, theta: np.ndarray) -> OracleResult:
        """Maximise ⟨θ̃, μ⟩ over 𝓜 for finite ``theta`` (shape (D,))."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.mrf.dim,) or np.isnan(theta).any():
            raise InvalidInputError(f"oracle potentials must have shape ({self.mrf.dim},) and no NaN")
        if np.isfinite(theta).all() and self.is_submodular(theta):
            x, slack = _mincut_map(self.mrf, theta)
            proven, solver = None, "mincut"
        elif self._use_elimination:
            from structopt.marginals.exact import map_elimination

            x, _ = map_elimination(self.mrf, theta, self._order)
            slack, proven, solver = 1e-9 * (1.0 + float(np.abs(theta[np.isfinite(theta)]).sum())), None, "elimination"
        else:
            x, slack, proven, solver = None, 0.0, None, "lp"
            bnb_bound = np.inf
            if self.map_solver == "bnb" and self._skip > 0:
                self._skip -= 1
            elif self.map_solver == "bnb":
                x, slack, bnb_bound = self._bnb(theta)
                solver = "bnb"
                if x is None:  # missed: back off exponentially
                    self._skip, self._backoff = self._backoff, min(2 * self._backoff, self.MAX_BNB_SKIP)
                else:
                    self._backoff = 1
            elif self.try_lp and np.isfinite(theta).all():
                # an integral optimum of the local-polytope LP is a MAP (𝓜 ⊆ 𝕃), and a cheap one
                relaxed = self._lp(theta)
                if np.abs(relaxed.vertex - np.round(relaxed.vertex)).max() <= 1e-7:
                    x = np.array([int(np.argmax(relaxed.vertex[self.mrf.offsets[i]:self.mrf.offsets[i + 1]]))
                                  for i in range(self.mrf.n_nodes)], dtype=np.int64)
                    slack = relaxed.bound - float(theta @ self.mrf.vertex(x))
                    self._cpsat.hint = x
            if x is None:
                x, slack, proven = self._cpsat(theta)
                solver = "cpsat"
        self.calls[solver] += 1
        vertex = self.mrf.vertex(x)
        value = float(theta @ vertex) if np.isfinite(theta).all() else float(theta[vertex > 0].sum())
        bound = value + slack + (proven if proven is not None else 0.0)
        if solver == "cpsat" and self.map_solver == "bnb":
            bound = min(bound, bnb_bound)  # both are proven upper bounds
        return OracleResult(vertex, value, bound, x, solver)

    def _bnb(self, theta: np.ndarray) -> tuple[np.ndarray | None, float, float]:
        """Branch-and-bound over AD3: ``(labels, slack, upper bound)``, labels None unless proven optimal
        (CP-SAT then starts from the best labeling found, as its hint)."""
        from structopt.marginals.map import mrf_to_factor_graph
        from structopt.structures.factor_graph import FactorGraphPotentials

        if self._fg is None:
            self._fg, _ = mrf_to_factor_graph(self.mrf)
        nn = self.mrf.n_node_entries
        limit = self.bnb_seconds if self.time_limit is None else min(self.bnb_seconds, self.time_limit)
        sol = self._fg.bnb(FactorGraphPotentials(theta[:nn], theta[nn:]), time_limit=limit, state=self._warm)
        self._warm = sol.root_state
        if sol.labels is not None:
            self._cpsat.hint = sol.labels
        if not sol.optimal:
            return None, 0.0, float(sol.upper_bound)
        # optimal: every open bound closed to within 1e-9·(1 + |bound|) of the incumbent
        slack = max(float(sol.upper_bound) - float(sol.score), 0.0) + 2e-9 * (1.0 + abs(float(sol.score)))
        return sol.labels, slack, float(sol.upper_bound)


class LocalPolytopeOracle:
    """argmax of ⟨θ̃, μ⟩ over the local polytope 𝕃 by an LP (scipy's HiGHS, interruptible by Ctrl-C).

    𝕃: μ ≥ 0, each node block sums to one, each edge block's row and column sums equal its two
    node blocks.
    """

    polytope = "local"

    def __init__(self, mrf: PairwiseMRF) -> None:
        self.mrf = mrf
        self.a_eq, self.b_eq = local_polytope_constraints(mrf)
        self.calls = {"lp": 0}

    def __call__(self, theta: np.ndarray) -> OracleResult:
        """Maximise ⟨θ̃, μ⟩ over 𝕃 for finite ``theta`` (shape (D,))."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.mrf.dim,) or not np.isfinite(theta).all():
            raise InvalidInputError(f"LP potentials must be finite with shape ({self.mrf.dim},)")
        # HiGHS through scipy, stopped by Ctrl-C (a plain linprog call would ignore it until it returned)
        status, x, fun = highs_solve(-theta, self.a_eq, self.b_eq, self.b_eq, False, {})
        if x is None:
            raise RuntimeError(f"local-polytope LP failed: {status}")
        vertex = np.clip(x, 0.0, 1.0)
        self.calls["lp"] += 1
        value = float(theta @ vertex)
        # HiGHS' default feasibility and optimality tolerances are 1e-7
        bound = max(value, -float(fun)) + 1e-7 * (1.0 + np.abs(theta).sum() / max(self.mrf.dim, 1))
        return OracleResult(vertex, value, bound, None, "lp")


@njit(cache=True)
def local_field(i, cards, offsets, edges, theta, indptr, adj_edge, adj_first, x, q, buf):  # pragma: no cover
    """``buf[a] = θ_i(a) + Σ_{edges e at i} θ_e(a, ·)`` taken at each neighbour's label ``x`` (ICM) when
    ``q`` is empty, else in expectation under its marginal ``q`` (mean field)."""
    n = cards.size
    ci = cards[i]
    for a in range(ci):
        buf[a] = theta[offsets[i] + a]
    for k in range(indptr[i], indptr[i + 1]):
        e = adj_edge[k]
        u, v = edges[e, 0], edges[e, 1]
        cv = cards[v]
        base = offsets[n + e]
        first = adj_first[k] == 1  # i is u: θ(a, b) over the neighbour's b, else θ(b, a)
        other = v if first else u
        for a in range(ci):
            if q.size == 0:
                buf[a] += theta[base + a * cv + x[v]] if first else theta[base + x[u] * cv + a]
                continue
            acc = 0.0
            for b in range(cards[other]):
                acc += (theta[base + a * cv + b] if first else theta[base + b * cv + a]) * q[offsets[other] + b]
            buf[a] += acc


@njit(cache=True)
def _icm_kernel(cards, offsets, edges, theta, indptr, adj_edge, adj_first, x, max_sweeps):  # pragma: no cover
    """Iterated conditional modes: set each x_i to its best state given its neighbours until stable."""
    n = cards.size
    buf = np.empty(cards.max())
    no_q = np.empty(0)
    for _ in range(max_sweeps):
        changed = False
        for i in range(n):
            local_field(i, cards, offsets, edges, theta, indptr, adj_edge, adj_first, x, no_q, buf)
            best = x[i]
            for a in range(cards[i]):
                if buf[a] > buf[best]:
                    best = a
            if best != x[i]:
                x[i] = best
                changed = True
        if not changed:
            break
    return x


def icm(mrf: PairwiseMRF, theta: np.ndarray, x0: np.ndarray, max_sweeps: int = 100) -> np.ndarray:
    """Approximate MAP by iterated conditional modes from ``x0``; the score never decreases.

    Parameters
    ----------
    mrf : PairwiseMRF
        Supplies the graph.
    theta : ndarray (D,)
        Potentials to maximise.
    x0 : ndarray (N,)
        Starting assignment.
    max_sweeps : int
        Maximum number of passes over the variables.
    """
    indptr, adj_edge, adj_first = mrf.adjacency()
    x = mrf.validate_assignment(x0).copy()
    return _icm_kernel(mrf.cards, mrf.offsets, np.ascontiguousarray(mrf.edges), np.asarray(theta, dtype=np.float64),
                       indptr, adj_edge, adj_first, x, max_sweeps)


def local_polytope_constraints(mrf: PairwiseMRF) -> tuple[csr_matrix, np.ndarray]:
    """Equality constraints A μ = b of the local polytope (node normalisation, edge marginalisation)."""
    n = mrf.n_nodes
    rows, cols, vals = [], [], []
    # node normalisation: rows 0..N-1
    node_entries = np.arange(mrf.n_node_entries)
    rows.append(mrf.block_of[node_entries])
    cols.append(node_entries)
    vals.append(np.ones(node_entries.size))
    row = n
    edge_entries = np.arange(mrf.n_node_entries, mrf.dim)
    e_of = mrf.block_of[edge_entries] - n
    local = edge_entries - mrf.offsets[n + e_of]
    cj = mrf.cards[mrf.edges[e_of, 1]]
    a_idx, b_idx = local // cj, local % cj
    # row-sum constraints: one row per (edge, a); column-sum: one per (edge, b)
    row_a_off = np.zeros(mrf.n_edges + 1, dtype=np.int64)
    np.cumsum(mrf.cards[mrf.edges[:, 0]], out=row_a_off[1:])
    row_b_off = np.zeros(mrf.n_edges + 1, dtype=np.int64)
    np.cumsum(mrf.cards[mrf.edges[:, 1]], out=row_b_off[1:])
    ra = row + row_a_off[e_of] + a_idx
    rb = row + row_a_off[-1] + row_b_off[e_of] + b_idx
    rows += [ra, rb]
    cols += [edge_entries, edge_entries]
    vals += [np.ones(edge_entries.size), np.ones(edge_entries.size)]
    # minus the node entries, once per constraint row
    e_a = np.repeat(np.arange(mrf.n_edges), mrf.cards[mrf.edges[:, 0]])
    a_local = np.arange(row_a_off[-1]) - row_a_off[e_a]
    rows.append(row + np.arange(row_a_off[-1]))
    cols.append(mrf.offsets[mrf.edges[e_a, 0]] + a_local)
    vals.append(-np.ones(e_a.size))
    e_b = np.repeat(np.arange(mrf.n_edges), mrf.cards[mrf.edges[:, 1]])
    b_local = np.arange(row_b_off[-1]) - row_b_off[e_b]
    rows.append(row + row_a_off[-1] + np.arange(row_b_off[-1]))
    cols.append(mrf.offsets[mrf.edges[e_b, 1]] + b_local)
    vals.append(-np.ones(e_b.size))
    n_rows = row + row_a_off[-1] + row_b_off[-1]
    a_eq = csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, mrf.dim))
    b_eq = np.zeros(n_rows)
    b_eq[:n] = 1.0
    return a_eq, b_eq
