"""Grid s-t networks from supermodular potentials, and the min-cut backends that solve them.

Maximising ``score(y) = sum_i u_i(y_i) + sum_ij p_ij(y_i, y_j)`` is minimising the energy
``E = -score``. Per edge (i, j) with energies ``e_ab = -p_ij(a, b)``,

    e(y_i, y_j) = e00 + (e10 - e00) y_i + (e11 - e10) y_j + w_ij (1 - y_i) y_j,
    w_ij = e01 + e10 - e00 - e11 = p00 + p11 - p01 - p10 >= 0   (supermodular scores),

so ``E(y) = const + sum_i d_i y_i + sum_ij w_ij (1 - y_i) y_j``. Label 1 is the sink side:
arc s -> i of capacity ``max(d_i, 0)`` (cut when y_i = 1), arc i -> t of capacity ``max(-d_i, 0)``
(cut when y_i = 0) and arc i -> j of capacity ``w_ij`` (cut when y_i = 0, y_j = 1); then
``E(y) = const - sum_i max(-d_i, 0) + cut(y)``.

Backends (``BACKENDS``): ``"dinic"`` (this package's numba Dinic on floats, keeps the residual for
max-marginals and top-K), ``"pymaxflow"`` (Boykov-Kolmogorov on floats, C++), ``"ortools"`` and
``"scipy"`` (integer capacities: see :func:`_integer_capacities` for the scaling, its error bound
and the certificate that every returned labelling is checked against).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from structopt.errors import NotSupportedError
from structopt.structures import _grid_kernels as kern

#: relative tolerance below which a negative w_ij is round-off of a modular edge (clipped to 0)
SUPERMODULAR_RTOL = 1e-12


class GridNetwork(NamedTuple):
    """The s-t network of one grid instance (see the module docstring).

    Attributes
    ----------
    cap : (H*W, 4) float64 arc capacities (right, left, down, up)
    rs, rt : (H*W,) float64 source and sink arc capacities
    offset : float
        ``E(y) = offset + cut(y)``, so the best score is ``-(offset + max_flow)``.
    shape : (H, W)
    """

    cap: np.ndarray
    rs: np.ndarray
    rt: np.ndarray
    offset: float
    shape: tuple[int, int]

    def copy(self) -> GridNetwork:
        return GridNetwork(self.cap.copy(), self.rs.copy(), self.rt.copy(), self.offset, self.shape)


def edge_weights(table: np.ndarray) -> np.ndarray:
    """``p00 + p11 - p01 - p10`` of (..., 2, 2) edge tables (>= 0 iff supermodular)."""
    return table[..., 0, 0] + table[..., 1, 1] - table[..., 0, 1] - table[..., 1, 0]


def check_supermodular(horizontal: np.ndarray, vertical: np.ndarray, what: str = "BinaryGrid min-cut") -> None:
    """Raise NotSupportedError naming the number of violating edges and the worst one."""
    bad = []
    for name, table in (("horizontal", horizontal), ("vertical", vertical)):
        w = edge_weights(table)
        tol = SUPERMODULAR_RTOL * (1.0 + np.max(np.abs(table), initial=0.0))
        mask = w < -tol
        if mask.any():
            worst = np.unravel_index(np.argmin(np.where(mask, w, np.inf)), w.shape)
            bad.append((int(mask.sum()), float(w[worst]), name, tuple(int(k) for k in worst)))
    if bad:
        count = sum(b[0] for b in bad)
        _, value, name, (r, c) = min(bad, key=lambda b: b[1])
        other = (r, c + 1) if name == "horizontal" else (r + 1, c)
        total = horizontal[..., 0, 0].size + vertical[..., 0, 0].size
        raise NotSupportedError(
            f"{what} needs supermodular edges, theta(0,0) + theta(1,1) >= theta(0,1) + theta(1,0); {count} of "
            f"{total} edges violate it, worst the {name} edge ({r}, {c})-{other} by {-value:.6g}. "
            "MAP on such a grid is NP-hard in general; the LP relaxation (lp_relaxation) still works.")


def build_network(unary: np.ndarray, horizontal: np.ndarray, vertical: np.ndarray) -> GridNetwork:
    """The s-t network of full-layout potentials (vectorised); edges must be supermodular."""
    H, W = unary.shape[:2]
    d = unary[..., 0] - unary[..., 1]
    offset = -float(unary[..., 0].sum())
    cap = np.zeros((H, W, 4))
    if W > 1:
        h = horizontal
        d[:, :-1] += h[..., 0, 0] - h[..., 1, 0]
        d[:, 1:] += h[..., 1, 0] - h[..., 1, 1]
        cap[:, :-1, 0] = np.maximum(edge_weights(h), 0.0)
        offset -= float(h[..., 0, 0].sum())
    if H > 1:
        v = vertical
        d[:-1, :] += v[..., 0, 0] - v[..., 1, 0]
        d[1:, :] += v[..., 1, 0] - v[..., 1, 1]
        cap[:-1, :, 2] = np.maximum(edge_weights(v), 0.0)
        offset -= float(v[..., 0, 0].sum())
    d = d.ravel()
    rs, rt = np.maximum(d, 0.0), np.maximum(-d, 0.0)
    offset -= float(rt.sum())
    return GridNetwork(cap.reshape(H * W, 4), rs, rt, offset, (H, W))


def clamp_network(net: GridNetwork, clamp: np.ndarray) -> GridNetwork:
    """A copy of ``net`` whose nodes with ``clamp`` 0 / 1 are forced to that label (infinite terminal arcs)."""
    out = net.copy()
    out.rs[clamp == 0] = np.inf
    out.rt[clamp == 1] = np.inf
    return out


def cut_value(net: GridNetwork, labels: np.ndarray) -> float:
    """Capacity of the cut given by 0/1 labels (label 1 = sink side), from the original capacities."""
    y = labels.reshape(net.shape)
    cap = net.cap.reshape(*net.shape, 4)
    value = float(net.rs[labels.ravel() == 1].sum() + net.rt[labels.ravel() == 0].sum())
    value += float(np.sum(cap[:, :-1, 0] * ((y[:, :-1] == 0) & (y[:, 1:] == 1))))
    value += float(np.sum(cap[:-1, :, 2] * ((y[:-1, :] == 0) & (y[1:, :] == 1))))
    return value


# --------------------------------------------------------------------------- backends
def solve_dinic(net: GridNetwork) -> tuple[np.ndarray, GridNetwork]:
    """Min cut by the numba Dinic; returns labels (H*W,) and the residual network."""
    res = net.copy()
    H, W = net.shape
    kern.max_flow(res.cap, res.rs, res.rt, kern.neighbours(H, W))
    return kern.source_side(res.cap, res.rs, kern.neighbours(H, W)), res


def solve_pymaxflow(net: GridNetwork) -> np.ndarray:
    """Min cut by PyMaxflow (Boykov-Kolmogorov, float capacities)."""
    import maxflow

    H, W = net.shape
    g = maxflow.Graph[float](H * W, 2 * H * W)
    nodes = g.add_grid_nodes((H, W))
    cap = net.cap.reshape(H, W, 4)
    right = np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0]])
    down = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 0]])
    g.add_grid_edges(nodes, weights=cap[..., 0], structure=right, symmetric=False)
    g.add_grid_edges(nodes, weights=cap[..., 2], structure=down, symmetric=False)
    g.add_grid_tedges(nodes, net.rs.reshape(H, W), net.rt.reshape(H, W))
    g.maxflow()
    return g.get_grid_segments(nodes).astype(np.int64).ravel()


def _integer_capacities(net: GridNetwork, max_total: float) -> tuple[float, dict[str, np.ndarray]]:
    """Scale capacities to integers whose total stays below ``max_total``.

    Every capacity c becomes ``round(c * scale)``, off by at most 1/2 unit, so for every cut K
    ``|cut_int(K) / scale - cut(K)| <= |K| / (2 scale)``; the labelling of an integer min cut is
    therefore within ``n_arcs / scale`` of the float optimum, which :func:`_certify` checks.
    """
    total = float(net.cap.sum() + net.rs.sum() + net.rt.sum())
    # a power of two (exact in float); all-zero capacities need no scaling
    scale = 2.0 ** min(np.floor(np.log2(max_total / total)), 1000.0) if total > 0 else 1.0
    return scale, {"cap": np.rint(net.cap * scale).astype(np.int64), "rs": np.rint(net.rs * scale).astype(np.int64),
                   "rt": np.rint(net.rt * scale).astype(np.int64)}


def _certify(net: GridNetwork, labels: np.ndarray, flow_int: float, scale: float, backend: str,
             rtol: float) -> np.ndarray:
    # a lower bound on the float min cut from the integer max flow; the labelling must be within rtol of it
    n_arcs = int(np.count_nonzero(net.cap) + np.count_nonzero(net.rs) + np.count_nonzero(net.rt))
    lower = flow_int / scale - 0.5 * n_arcs / scale
    value = cut_value(net, labels)
    if value - lower > rtol * (1.0 + abs(value) + abs(net.offset)):
        raise NotSupportedError(
            f"{backend} min cut on integer capacities (scale {scale:g}) is not certified optimal: its float cut "
            f"{value!r} exceeds the lower bound {lower!r} by {value - lower:.3g}; use a float backend")
    return labels


def ortools_min_cut(tails: np.ndarray, heads: np.ndarray, capacities: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """Min s-t cut with OR-Tools on integer arcs over nodes ``0..n-1``, source ``n`` and sink ``n+1``.

    Returns the labels (0 on the source side, 1 on the sink side) and the integer flow value; the
    callers certify the cut in floats.
    """
    from ortools.graph.python import max_flow

    solver = max_flow.SimpleMaxFlow()
    solver.add_arcs_with_capacity(np.asarray(tails, dtype=np.int64), np.asarray(heads, dtype=np.int64),
                                  np.asarray(capacities, dtype=np.int64))
    status = solver.solve(n, n + 1)
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-Tools max flow failed with status {status}")
    source = np.asarray(solver.get_source_side_min_cut(), dtype=np.int64)
    labels = np.ones(n, dtype=np.int64)
    labels[source[source < n]] = 0
    return labels, float(solver.optimal_flow())


def solve_ortools(net: GridNetwork, rtol: float = 1e-9) -> np.ndarray:
    """Min cut by OR-Tools ``SimpleMaxFlow`` on capacities scaled to int64 (certified, see above)."""
    H, W = net.shape
    N = H * W
    scale, ints = _integer_capacities(net, 2.0 ** 60)
    nodes = np.arange(N)
    nbr = kern.neighbours(H, W)
    tails, heads, caps = [], [], []
    for d in (0, 2):
        keep = ints["cap"][:, d] > 0
        tails.append(nodes[keep])
        heads.append(nbr[keep, d])
        caps.append(ints["cap"][keep, d])
    keep = ints["rs"] > 0
    tails.append(np.full(int(keep.sum()), N))
    heads.append(nodes[keep])
    caps.append(ints["rs"][keep])
    keep = ints["rt"] > 0
    tails.append(nodes[keep])
    heads.append(np.full(int(keep.sum()), N + 1))
    caps.append(ints["rt"][keep])
    # zero-capacity arcs so that both terminals exist in the graph whatever the capacities
    tails.append(np.array([N, 0]))
    heads.append(np.array([0, N + 1]))
    caps.append(np.zeros(2, dtype=np.int64))
    labels, flow = ortools_min_cut(np.concatenate(tails), np.concatenate(heads), np.concatenate(caps), N)
    return _certify(net, labels, flow, scale, "ortools", rtol)


def solve_scipy(net: GridNetwork, rtol: float = 1e-9) -> np.ndarray:
    """Min cut by scipy's ``maximum_flow`` (Dinic) on capacities scaled to int32 (certified)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    H, W = net.shape
    N = H * W
    scale, ints = _integer_capacities(net, 2.0 ** 30)
    nodes = np.arange(N)
    nbr = kern.neighbours(H, W)
    rows = np.concatenate([nodes, nodes, np.full(N, N), nodes])
    cols = np.concatenate([np.maximum(nbr[:, 0], 0), np.maximum(nbr[:, 2], 0), nodes, np.full(N, N + 1)])
    vals = np.concatenate([ints["cap"][:, 0], ints["cap"][:, 2], ints["rs"], ints["rt"]])
    keep = vals > 0
    graph = sp.csr_array((vals[keep].astype(np.int32), (rows[keep], cols[keep])), shape=(N + 2, N + 2))
    result = maximum_flow(graph, N, N + 1)
    residual = graph - result.flow
    residual = sp.csr_array((residual > 0).astype(np.int8))
    residual.eliminate_zeros()
    reach = breadth_first_order(residual, N, directed=True, return_predecessors=False)
    labels = np.ones(N, dtype=np.int64)
    reach = reach[reach < N]
    labels[reach] = 0
    return _certify(net, labels, float(result.flow_value), scale, "scipy", rtol)


BACKENDS = ("dinic", "pymaxflow", "ortools", "scipy")


def solve(net: GridNetwork, backend: str) -> np.ndarray:
    """Labels (H*W,) of a min cut of ``net`` by the named backend."""
    if backend == "dinic":
        return solve_dinic(net)[0]
    if backend == "pymaxflow":
        return solve_pymaxflow(net)
    if backend == "ortools":
        return solve_ortools(net)
    if backend == "scipy":
        return solve_scipy(net)
    raise NotSupportedError(f"unknown min-cut backend {backend!r}; choose one of {', '.join(BACKENDS)}")
