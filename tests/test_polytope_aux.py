"""Polytope with auxiliary variables: a monotone alignment, whose cell-indicator hull has a compact
description only through edge flows, validates with check_structure like any built-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError
from structopt.smoothing import logsumexp
from structopt.structures.base import Polytope, Structure, flatten, unflatten
from structopt.validate import check_structure

MOVES = ((1, 0), (0, 1), (1, 1))


class AlignPotentials(NamedTuple):
    cells: np.ndarray  # (m, n) score of aligning position i of one sequence with position j of the other


class MonotoneAlignment(Structure):
    """Monotone paths from cell (0, 0) to (m-1, n-1) by steps down, right or diagonal; the statistics
    are the path's cell indicators. Their hull is the projection of the (integral) path-flow polytope
    of the cell DAG: flow variables on the steps are the auxiliary columns."""

    name = "MonotoneAlignment"
    Potentials = AlignPotentials

    @staticmethod
    def _steps(m: int, n: int) -> list[tuple[int, int]]:
        return [(i * n + j, (i + di) * n + j + dj) for i in range(m) for j in range(n)
                for di, dj in MOVES if i + di < m and j + dj < n]

    def outputs(self, theta: AlignPotentials) -> Iterator[np.ndarray]:
        m, n = np.shape(theta.cells)

        def walk(i: int, j: int, cells: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
            if (i, j) == (m - 1, n - 1):
                yield cells
            for di, dj in MOVES:
                if i + di < m and j + dj < n:
                    yield from walk(i + di, j + dj, [*cells, (i + di, j + dj)])

        for cells in walk(0, 0, [(0, 0)]):
            mask = np.zeros((m, n), dtype=np.int64)
            mask[tuple(zip(*cells, strict=True))] = 1
            yield mask

    def argmax(self, theta: AlignPotentials) -> np.ndarray:
        c = np.asarray(theta.cells, dtype=float)
        m, n = c.shape
        best = np.full((m, n), -np.inf)
        for i in range(m):
            for j in range(n):
                prev = [best[i - di, j - dj] for di, dj in MOVES if i >= di and j >= dj]
                best[i, j] = c[i, j] + (max(prev) if (i, j) != (0, 0) else 0.0)
        mask, (i, j) = np.zeros((m, n), dtype=np.int64), (m - 1, n - 1)
        mask[i, j] = 1
        while (i, j) != (0, 0):
            i, j = max(((i - di, j - dj) for di, dj in MOVES if i >= di and j >= dj), key=lambda p: best[p])
            mask[i, j] = 1
        return mask

    def marginals(self, theta: AlignPotentials) -> tuple[float, AlignPotentials]:
        # by enumeration (the instances here are tiny): exercises the membership LP of the marginals row
        outs = self.enumerate(theta)
        scores = np.array([self.score(theta, y) for y in outs])
        log_z = logsumexp(scores)
        return log_z, AlignPotentials(np.tensordot(np.exp(scores - log_z), np.array(outs, dtype=float), axes=1))

    def stats(self, y: np.ndarray, like: AlignPotentials) -> AlignPotentials:
        return AlignPotentials(np.asarray(y, dtype=float))

    def polytope(self, theta: AlignPotentials) -> Polytope:
        m, n = np.shape(theta.cells)
        N, steps = m * n, self._steps(m, n)
        E = len(steps)
        # per cell c: mu_c = inflow(c) + [c is the start] and mu_c = outflow(c) + [c is the end]
        A = sp.lil_matrix((2 * N, N + E))
        b = np.zeros(2 * N)
        for c in range(N):
            A[c, c] = A[N + c, c] = 1.0
        for e, (a, z) in enumerate(steps):
            A[z, N + e] = -1.0  # into z
            A[N + a, N + e] = -1.0  # out of a
        b[0] = b[N + N - 1] = 1.0
        return Polytope(A.tocsr(), b, None, None, AlignPotentials(np.zeros((m, n))), n_aux=E)

    def expand(self, theta: AlignPotentials) -> AlignPotentials:
        return AlignPotentials(np.asarray(theta.cells, dtype=float))

    def validate_output(self, y: np.ndarray, like: AlignPotentials, index: int | None = None) -> np.ndarray:
        mask = np.asarray(y, dtype=np.int64)
        if not any(np.array_equal(mask, path) for path in self.outputs(like)):
            raise InvalidInputError(f"not a monotone alignment: {mask.tolist()}")
        return mask


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 3), (3, 4)])
def test_monotone_alignment_with_auxiliary_flows_passes_check_structure(shape):
    rng = np.random.default_rng(sum(shape))
    for integer in (True, False):
        cells = rng.integers(-3, 4, size=shape).astype(float) if integer else rng.normal(size=shape)
        report = check_structure(MonotoneAlignment(), AlignPotentials(cells))
        assert report.ok, report.table()
        for oracle in ("lp_relaxation", "argmax", "marginals", "project"):
            assert report.row(oracle).agrees_enumeration is True, report.table()
        assert report.row("marginals").agrees_lp is True and report.row("project").agrees_lp is True


def test_membership_needs_the_auxiliary_columns():
    structure, like = MonotoneAlignment(), AlignPotentials(np.zeros((3, 3)))
    poly = structure.polytope(like)
    assert poly.n_aux == len(MonotoneAlignment._steps(3, 3)) and poly.A_eq.shape[1] == 9 + poly.n_aux
    paths = np.array([flatten(structure.stats(y, like)) for y in structure.outputs(like)])
    assert poly.violation(paths.mean(axis=0)) <= 1e-9  # a convex combination of paths: inside
    outside = np.zeros(9)
    outside[[0, 2, 8]] = 1.0  # (0, 0) -> (0, 2) is no step: the cells of no path
    assert poly.violation(outside) >= 0.5
    # the QP projection keeps the auxiliary variables inside its constraints
    z = flatten(structure.project(unflatten(np.full(9, 0.5), like)))
    assert poly.violation(z) <= 1e-6


def test_builtin_polytopes_auxiliary_columns_are_consistent():
    """Built-ins may use auxiliary columns (a dependency tree's multi-commodity flows: the arborescence
    polytope has no compact description in the arcs alone); every matrix then has one column per statistic
    and per auxiliary variable, and the statistics of the argmax are a member (an LP over u when n_aux > 0)."""
    from structopt.structures.base import flatten
    from structopt.structures.registry import registered_structures

    rng = np.random.default_rng(0)
    with_aux = []
    for name, cls in registered_structures().items():
        if name == "box":  # no linear description
            continue
        structure, theta = cls.example(rng)
        poly = structure.polytope(structure.expand(theta))
        width = poly.n_stats + poly.n_aux
        assert poly.bounds().shape == (width, 2), name
        for A in (poly.A_eq, poly.A_ub):
            assert A is None or A.shape[1] == width, name
        assert poly.violation(flatten(structure.stats(structure.argmax(theta), theta))) <= 1e-7, name
        if poly.n_aux:
            with_aux.append(name)
    assert "dependency" in with_aux
