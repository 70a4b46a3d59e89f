"""Binary 4-connected grids with supermodular scores: min-cut MAP, max-marginals, K best, projection.

Outputs are (H, W) int64 arrays of labels in {0, 1}. Statistics are node indicators (H, W, 2)
and edge indicators (H, W-1, 2, 2) for horizontal edges ((r, c)-(r, c+1)) and (H-1, W, 2, 2)
for vertical edges ((r, c)-(r+1, c)); ``table[..., a, b]`` scores the first node taking a and
the second taking b.

MAP is an s-t min cut when every edge is supermodular, ``theta(0,0) + theta(1,1) >=
theta(0,1) + theta(1,0)`` (see :mod:`structopt.structures._mincut` for the network). Otherwise
the oracles raise :class:`NotSupportedError` (MAP on such grids is NP-hard in general); the LP
relaxation works on every grid and is tight for supermodular ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, numeric_array
from structopt.structures import _grid_kernels as kern
from structopt.structures import _mincut
from structopt.structures.base import Polytope, Structure, product_outputs, random_like, refuse_nonfinite, unsupported
from structopt.structures.registry import register_structure


class GridPotentials(NamedTuple):
    """Potentials (or statistics) of an H x W binary grid.

    Attributes
    ----------
    unary : ndarray, shape (H, W, 2)
    horizontal : ndarray, shape (2, 2) shared by all horizontal edges, or (H, W-1, 2, 2)
        ``horizontal[r, c, a, b]`` scores y[r, c] = a next to y[r, c+1] = b.
    vertical : ndarray, shape (2, 2) shared by all vertical edges, or (H-1, W, 2, 2)
        ``vertical[r, c, a, b]`` scores y[r, c] = a above y[r+1, c] = b.

    Statistics always use the per-edge layout.
    """

    unary: np.ndarray
    horizontal: np.ndarray
    vertical: np.ndarray



def _supermodular(theta: GridPotentials) -> GridPotentials:
    # raise theta(0, 0) of every edge table just enough for theta00 + theta11 >= theta01 + theta10
    fields = [theta[0]]
    for table in theta[1:]:
        table = np.array(table, dtype=float)
        w = table[..., 0, 0] + table[..., 1, 1] - table[..., 0, 1] - table[..., 1, 0]
        table[..., 0, 0] += np.maximum(-w, 0.0)
        fields.append(table)
    return type(theta)(*fields)


@register_structure("grid")
class BinaryGrid(Structure):
    """Binary labellings of an H x W 4-connected grid; the size is read off the potentials.

    Parameters
    ----------
    backend : {"pymaxflow", "dinic", "ortools", "scipy"}, default "pymaxflow"
        Min-cut solver of :meth:`argmax`. ``pymaxflow`` (Boykov-Kolmogorov on floats) is the
        fastest exact one on segmentation-sized grids; ``dinic`` is this package's numba
        implementation; ``ortools`` and ``scipy`` work on scaled integer capacities and refuse
        (NotSupportedError) any cut they cannot certify optimal to a relative 1e-9 (scipy's int32
        capacities rarely can). Max-marginals and top-K always use the package's own Dinic, whose
        residual network they re-use.
    """

    name = "BinaryGrid"
    Potentials = GridPotentials

    example_variants = (
        {"height": 1, "width": 1},
        {"height": 1, "width": 4},
        {"height": 2, "width": 2, "shared": True},
        {"height": 2, "width": 3},
        {"height": 3, "width": 3, "shared": True},
        {"height": 3, "width": 4},
    )

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, height: int = 2, width: int = 3,
                shared: bool = False) -> tuple[BinaryGrid, GridPotentials]:
        """A random ``height`` x ``width`` grid (``shared``: one (2, 2) table per direction, else one per
        edge); every edge is made supermodular by raising theta(0, 0) where needed."""
        H, W = int(height), int(width)
        like = GridPotentials(np.zeros((H, W, 2)), np.zeros((2, 2) if shared else (H, W - 1, 2, 2)),
                              np.zeros((2, 2) if shared else (H - 1, W, 2, 2)))
        return cls(), _supermodular(random_like(like, rng, integer=integer))

    def __init__(self, backend: str = "pymaxflow"):
        if backend not in _mincut.BACKENDS:
            raise InvalidInputError(f"unknown min-cut backend {backend!r}; choose one of {', '.join(_mincut.BACKENDS)}")
        self.backend = backend

    def __repr__(self) -> str:
        return f"BinaryGrid(backend={self.backend!r})"

    @property
    def states_per_node(self) -> int:
        """Values each pixel takes (the per-node loss hook; see ``Structure``)."""
        return 2

    def node_potentials(self, costs: np.ndarray, like: GridPotentials) -> GridPotentials:
        """Potentials with per-pixel scores ``costs`` (H, W, 2) and no edge scores."""
        return GridPotentials(np.asarray(costs, dtype=float), np.zeros((2, 2)), np.zeros((2, 2)))

    # ------------------------------------------------------------------ validation / layout
    def check_potentials(self, theta: GridPotentials, index: int | None = None) -> GridPotentials:
        """Full-layout float64 potentials, or raise :class:`InvalidInputError` naming the problem."""
        if not isinstance(theta, tuple) or len(theta) != 3:
            raise example_error(index, "grid potentials must be GridPotentials(unary, horizontal, vertical)")
        unary = numeric_array(theta[0], "grid unary potentials", index, finite=False)
        if unary.ndim != 3 or unary.shape[2] != 2 or unary.shape[0] < 1 or unary.shape[1] < 1:
            raise example_error(index, f"grid unary potentials must have shape (H>=1, W>=1, 2), got {unary.shape}")
        H, W = unary.shape[:2]
        fields = [unary]
        for label, arr, shape in (("horizontal", theta[1], (H, W - 1, 2, 2)), ("vertical", theta[2], (H - 1, W, 2, 2))):
            arr = numeric_array(arr, f"grid {label} potentials", index, finite=False)
            if arr.shape == (2, 2):
                arr = np.broadcast_to(arr, shape)
            elif arr.shape != shape:
                raise example_error(index, f"grid {label} potentials must have shape (2, 2) or {shape}, "
                                           f"got {arr.shape}")
            fields.append(arr)
        refuse_nonfinite(zip(GridPotentials._fields, fields), "grid", index)
        return GridPotentials(*fields)

    def expand(self, theta: GridPotentials) -> GridPotentials:
        full = self.check_potentials(theta)
        return GridPotentials(full.unary, np.array(full.horizontal), np.array(full.vertical))

    def _shape(self, like: GridPotentials) -> tuple[int, int]:
        shape = np.shape(like[0])
        return int(shape[0]), int(shape[1])

    def validate_output(self, y, like: GridPotentials, index: int | None = None) -> np.ndarray:
        H, W = self._shape(like)
        arr = np.asarray(y)
        if arr.shape != (H, W):
            raise example_error(index, f"grid output must have shape ({H}, {W}), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer) and not np.issubdtype(arr.dtype, np.bool_):
            if not np.all(np.isfinite(arr)) or not np.all(np.equal(np.mod(arr, 1), 0)):
                raise example_error(index, "grid labels must be integers 0 or 1")
        arr = arr.astype(np.int64)
        bad = (arr < 0) | (arr > 1)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise example_error(index, f"grid labels must be 0 or 1; pixel ({r}, {c}) is {arr[r, c]} "
                                       f"({int(bad.sum())} such pixels)")
        return arr

    # ------------------------------------------------------------------ statistics
    def stats(self, y, like: GridPotentials) -> GridPotentials:
        y = np.asarray(y, dtype=np.int64)
        H, W = y.shape
        unary = np.zeros((H, W, 2))
        np.put_along_axis(unary, y[..., None], 1.0, axis=-1)
        horizontal = np.zeros((H, W - 1, 2, 2))
        vertical = np.zeros((H - 1, W, 2, 2))
        rows, cols = np.indices((H, W - 1))
        horizontal[rows, cols, y[:, :-1], y[:, 1:]] = 1.0
        rows, cols = np.indices((H - 1, W))
        vertical[rows, cols, y[:-1, :], y[1:, :]] = 1.0
        return GridPotentials(unary, horizontal, vertical)

    def expected_stats(self, outputs, weights: np.ndarray, like: GridPotentials) -> GridPotentials:
        """``sum_j weights[j] * stats(outputs[j])`` for a (k, H, W) array of labellings, vectorised."""
        weights = np.asarray(weights, dtype=float)
        labels = np.asarray(outputs, dtype=np.int64).reshape(len(weights), *self._shape(like))
        one = labels.astype(float)
        wk = weights[:, None, None]
        unary = np.stack([np.sum(wk * (1.0 - one), axis=0), np.sum(wk * one, axis=0)], axis=-1)

        def edges(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.empty((*a.shape[1:], 2, 2))
            for p in (0, 1):
                for q in (0, 1):
                    out[..., p, q] = np.sum(wk * ((a == p) & (b == q)), axis=0)
            return out

        return GridPotentials(unary, edges(labels[:, :, :-1], labels[:, :, 1:]),
                              edges(labels[:, :-1, :], labels[:, 1:, :]))

    def score(self, theta: GridPotentials, y) -> float:
        unary, horizontal, vertical = self.check_potentials(theta)
        y = np.asarray(y, dtype=np.int64)
        H, W = y.shape
        value = np.take_along_axis(unary, y[..., None], axis=-1).sum()
        rows, cols = np.indices((H, W - 1))
        value += horizontal[rows, cols, y[:, :-1], y[:, 1:]].sum()
        rows, cols = np.indices((H - 1, W))
        value += vertical[rows, cols, y[:-1, :], y[1:, :]].sum()
        return float(value)

    def outputs(self, theta: GridPotentials) -> Iterator[np.ndarray]:
        H, W = self._shape(theta)
        for labels in product_outputs(H * W, 2):
            yield labels.reshape(H, W)

    def polytope(self, theta: GridPotentials) -> Polytope:
        """Local polytope: node simplices and edge marginalisation (tight for supermodular scores)."""
        H, W = self._shape(theta)
        n_node = H * W * 2
        node = np.arange(n_node).reshape(H, W, 2)
        hor = n_node + np.arange(H * (W - 1) * 4).reshape(H, W - 1, 2, 2)
        ver = n_node + hor.size + np.arange((H - 1) * W * 4).reshape(H - 1, W, 2, 2)
        blocks = [sp.csr_matrix((np.ones(n_node), (np.repeat(np.arange(H * W), 2), node.ravel())),
                                shape=(H * W, n_node + hor.size + ver.size))]
        n_var = n_node + hor.size + ver.size

        def marginalisation(edge: np.ndarray, first: np.ndarray, second: np.ndarray) -> sp.csr_matrix:
            # rows(e)[a] - mu_first[a] = 0 and cols(e)[b] - mu_second[b] = 0 for every edge and value
            n_edge = edge.shape[0] * edge.shape[1]
            e = edge.reshape(n_edge, 2, 2)
            f, s = first.reshape(n_edge, 2), second.reshape(n_edge, 2)
            row_id = np.arange(4 * n_edge).reshape(n_edge, 2, 2)  # (edge, kind, value)
            rows = np.concatenate([np.repeat(row_id[:, 0, :], 2, axis=1).ravel(), row_id[:, 0, :].ravel(),
                                   np.repeat(row_id[:, 1, :], 2, axis=1).ravel(), row_id[:, 1, :].ravel()])
            cols = np.concatenate([e.reshape(n_edge, 4).ravel(), f.ravel(),
                                   e.transpose(0, 2, 1).reshape(n_edge, 4).ravel(), s.ravel()])
            ones, minus = np.ones(4 * n_edge), -np.ones(2 * n_edge)
            vals = np.concatenate([ones, minus, ones, minus])
            return sp.csr_matrix((vals, (rows, cols)), shape=(4 * n_edge, n_var))

        if W > 1:
            blocks.append(marginalisation(hor, node[:, :-1], node[:, 1:]))
        if H > 1:
            blocks.append(marginalisation(ver, node[:-1, :], node[1:, :]))
        A = sp.vstack(blocks, format="csr")
        b = np.zeros(A.shape[0])
        b[:H * W] = 1.0
        like = GridPotentials(np.zeros((H, W, 2)), np.zeros((H, W - 1, 2, 2)), np.zeros((H - 1, W, 2, 2)))
        return Polytope(A, b, None, None, like)

    # ------------------------------------------------------------------ min-cut oracles
    def _network(self, theta: GridPotentials, what: str) -> tuple[GridPotentials, _mincut.GridNetwork]:
        full = self.check_potentials(theta)
        _mincut.check_supermodular(full.horizontal, full.vertical, f"BinaryGrid.{what}")
        return full, _mincut.build_network(full.unary, full.horizontal, full.vertical)

    def argmax(self, theta: GridPotentials) -> np.ndarray:
        """Exact MAP labelling by an s-t min cut (backend chosen at construction)."""
        _, net = self._network(theta, "argmax")
        return _mincut.solve(net, self.backend).reshape(net.shape)

    def _clamped_cut(self, full: GridPotentials, net: _mincut.GridNetwork, clamp: np.ndarray,
                     residual: _mincut.GridNetwork | None = None):
        """MAP under the clamps (``clamp`` -1 free, else the forced label) by the package's Dinic.

        ``residual``: a max-flow residual of ``net`` under fewer clamps; the new clamps' infinite
        terminal arcs are added to it and the flow is augmented from there (a warm start).

        Returns ``(labels, score, residual, clamped network)``.
        """
        clamped = _mincut.clamp_network(net, clamp)
        H, W = net.shape
        if residual is None:
            labels, residual = _mincut.solve_dinic(clamped)
        else:
            nbr = kern.neighbours(H, W)
            residual = _mincut.clamp_network(residual, clamp)
            kern.max_flow(residual.cap, residual.rs, residual.rt, nbr)
            labels = kern.source_side(residual.cap, residual.rs, nbr)
        return labels, self.score(full, labels.reshape(H, W)), residual, clamped

    def max_marginals(self, theta: GridPotentials) -> np.ndarray:
        """(H, W, 2) array: the best score of a labelling with pixel (r, c) set to each label.

        One min cut, then for every pixel the extra flow that forces it to the other side of the
        cut, pushed from the pixel in the residual network and undone (the dynamic graph-cut
        scheme of Kohli and Torr): the pixel's augmenting paths stay local, no cut is re-solved.
        """
        full, net = self._network(theta, "max_marginals")
        H, W = net.shape
        clamp = np.full(H * W, -1, dtype=np.int64)
        labels, best, res, clamped = self._clamped_cut(full, net, clamp)
        extra = kern.flip_costs(res.cap, res.rs, res.rt, kern.neighbours(H, W), labels, clamp,
                                clamped.cap, clamped.rs, clamped.rt)
        mm = np.empty((H * W, 2))
        nodes = np.arange(H * W)
        mm[nodes, labels] = best
        mm[nodes, 1 - labels] = best - extra
        return mm.reshape(H, W, 2)

    def topk(self, theta: GridPotentials, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact K best labellings (best max-marginal first, BMMF-style partitioning).

        A part of the output space is a set of clamped pixels; its best labelling is a clamped
        min cut, and its second best flips the free pixel of highest max-marginal (any other
        labelling of the part differs from the best at some free pixel; ties go to the smallest
        pixel index). Each labelling returned splits its part on that pixel into two parts, so k
        labellings cost about 2k clamped min cuts, each warm-started from its parent part's
        residual network (one more clamp: a few augmentations), and 2k searches for the best
        flip, which only finish the augmentations of pixels that could beat the best so far.

        Returns
        -------
        labels : int64 array (k', H, W), sorted by decreasing score; k' = min(k, 2**(H*W))
        scores : float array (k',)
        """
        k = check_count(k, "k", "BinaryGrid.topk")
        full, net = self._network(theta, "topk")
        H, W = net.shape
        if k == 1:  # plain MAP: no runner-up needed
            y = _mincut.solve(net, self.backend).reshape(1, H, W)
            return y, np.array([self.score(full, y[0])])
        nbr = kern.neighbours(H, W)
        heap: list = []
        counter = 0

        def part(clamp: np.ndarray, labels_of_part: np.ndarray | None, residual: _mincut.GridNetwork | None):
            # solve a part and queue its runner-up (the part's best has been, or is being, output)
            nonlocal counter
            labels, best, residual, clamped = self._clamped_cut(full, net, clamp, residual)
            if labels_of_part is None:
                labels_of_part = labels
            node, cost = kern.best_flip(residual.cap, residual.rs, residual.rt, nbr, labels, clamp,
                                        clamped.cap, clamped.rs, clamped.rt)
            if node >= 0:
                heapq.heappush(heap, (-(best - cost), counter, int(node), clamp, labels_of_part, residual))
                counter += 1
            return labels, best

        clamp = np.full(H * W, -1, dtype=np.int64)
        labels, best = part(clamp, None, None)
        outs, scores = [labels], [best]
        while heap and len(outs) < k:
            _, _, node, part_clamp, part_labels, part_residual = heapq.heappop(heap)
            flip = part_clamp.copy()
            flip[node] = 1 - part_labels[node]
            if len(outs) + 1 == k:  # the last one: no need to queue its part's runner-up
                new_labels, new_best, _, _ = self._clamped_cut(full, net, flip, part_residual)
            else:
                new_labels, new_best = part(flip, None, part_residual)
            outs.append(new_labels)
            scores.append(new_best)
            if len(outs) == k:
                break
            keep = part_clamp.copy()
            keep[node] = part_labels[node]
            part(keep, part_labels, part_residual)
        order = np.argsort(-np.asarray(scores), kind="stable")
        return (np.array([outs[j] for j in order]).reshape(len(outs), H, W),
                np.asarray(scores, dtype=float)[order])

    @unsupported
    def marginals(self, theta: GridPotentials):
        raise NotSupportedError("the log-partition of a binary grid (a planar Ising model with fields) is #P-hard; "
                                "use top-K smoothing instead of entropy smoothing")

    def prox_entropy(self, mu, step, eta):
        raise NotSupportedError("the entropic prox over a grid's marginal polytope needs its log-partition "
                                "(#P-hard); use the Euclidean projection")

    # ------------------------------------------------------------------ projection
    def project(self, v: GridPotentials, tol: float = 1e-9, max_iter: int = 20_000,
                warm: np.ndarray | None = None) -> GridPotentials:
        """Euclidean projection onto the local polytope (dual FISTA on the marginalisation multipliers).

        The marginalisation residual of the result is at most ``tol`` (node simplices and edge
        non-negativity hold exactly); see :mod:`structopt.structures._grid_projection`. Falls back
        to the cvxpy reference :meth:`project_qp` when the residual is not certified.

        Parameters
        ----------
        warm : ndarray, optional
            Flat float64 multipliers of length ``2 * (2 H (W-1) + 2 (H-1) W)`` to start from (those
            of a nearby projection); overwritten in place with the final ones, so a caller that
            projects nearby points repeatedly (the extragradient) can keep one per example.
        """
        from structopt.structures._grid_projection import multiplier_size, project_grid

        full = self.expand(v)
        H, W = full.unary.shape[:2]
        if warm is not None and (np.shape(warm) != (multiplier_size(H, W),) or np.asarray(warm).dtype != np.float64):
            raise InvalidInputError(f"warm multipliers must be a float64 vector of length {multiplier_size(H, W)}, "
                                    f"got shape {np.shape(warm)}")
        mu, eh, ev, residual, _ = project_grid(full.unary, full.horizontal, full.vertical, tol=tol, max_iter=max_iter,
                                               warm=warm)
        if not residual <= tol:
            return self.project_qp(v)
        return GridPotentials(mu, eh, ev)
