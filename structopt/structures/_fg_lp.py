"""The local polytope of a factor graph as sparse rows, and MAP by its LP with HiGHS (``FactorGraph.lp``)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.structures import _ad3_kernels as K
from structopt.structures._fg_types import LP_AD3_ITERATIONS, LP_AD3_SECONDS, FactorGraphPotentials, Graph, MAPSolution


def local_polytope(fg: Graph, theta: FactorGraphPotentials | None = None
                   ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    fl = fg.flat
    nu, nt = int(fl.voff[-1]), int(fl.toff[-1])
    rows, cols, vals, lower, upper = [], [], [], [], []
    aux_bounds = [np.zeros((0, 2))]
    n_aux = 0
    r = 0
    # simplex per variable
    for i in range(fl.n_vars):
        idx = np.arange(fl.voff[i], fl.voff[i + 1])
        rows.append(np.full(idx.size, r))
        cols.append(idx)
        vals.append(np.ones(idx.size))
        lower.append(1.0)
        upper.append(1.0)
        r += 1
    for f in range(fl.fkind.size):
        scope = fl.evar[fl.fptr[f]:fl.fptr[f + 1]]
        kind = int(fl.fkind[f])
        if kind == K.STRUCT:
            sf = fg._structs[f]
            base = nu + int(fl.toff[f])
            poly = sf.structure.polytope(sf.like)
            aux0 = nu + nt + n_aux
            for Am, bm, eq in ((poly.A_eq, poly.b_eq, True), (poly.A_ub, poly.b_ub, False)):
                if Am is None or Am.shape[0] == 0:
                    continue
                Am = sp.coo_matrix(Am)
                stat = Am.col < sf.n_stats
                rows.append(r + Am.row)
                cols.append(np.where(stat, base + Am.col, aux0 + Am.col - sf.n_stats))
                vals.append(Am.data)
                bm = np.asarray(bm, dtype=float)
                lower += (bm if eq else np.full(bm.size, -np.inf)).tolist()
                upper += bm.tolist()
                r += Am.shape[0]
            if poly.n_aux:
                aux_bounds.append(poly.bounds()[poly.n_stats:])
                n_aux += poly.n_aux
            # agreement: Aᵀ z_α + b - z_i = 0, one row per (variable, state)
            Am = sp.coo_matrix(sf.A.T)
            rows.append(r + Am.row)
            cols.append(base + Am.col)
            vals.append(Am.data)
            ent = np.concatenate([np.arange(fl.voff[v], fl.voff[v + 1]) for v in scope])
            rows.append(r + np.arange(ent.size))
            cols.append(ent)
            vals.append(-np.ones(ent.size))
            lower += (-sf.b).tolist()
            upper += (-sf.b).tolist()
            r += ent.size
            continue
        if kind != K.DENSE:
            lo, hi = map(int, K.logic_bounds(kind, int(fl.fparam[f]), scope.size))
            rows.append(np.full(scope.size, r))
            cols.append(fl.voff[scope] + 1)
            vals.append(np.ones(scope.size))
            lower.append(float(lo))
            upper.append(float(hi))
            r += 1
            continue
        shape = tuple(int(fl.vstates[v]) for v in scope)
        grid = np.indices(shape).reshape(len(shape), -1)
        base = nu + int(fl.toff[f])
        for j, v in enumerate(scope):
            # Σ_{c: y_j = s} z_α(c) - z_v(s) = 0
            rr = r + grid[j]
            rows += [rr, r + np.arange(shape[j])]
            cols += [base + np.arange(grid.shape[1]), fl.voff[v] + np.arange(shape[j])]
            vals += [np.ones(grid.shape[1]), -np.ones(shape[j])]
            lower += [0.0] * shape[j]
            upper += [0.0] * shape[j]
            r += shape[j]
    if theta is not None:
        forbidden = np.flatnonzero(~np.isfinite(np.concatenate([theta.unary, theta.factors])))
        rows.append(r + np.arange(forbidden.size))
        cols.append(forbidden)
        vals.append(np.ones(forbidden.size))
        lower += [0.0] * forbidden.size
        upper += [0.0] * forbidden.size
        r += forbidden.size
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(r, nu + nt + n_aux))
    return A, np.array(lower), np.array(upper), np.vstack(aux_bounds)


def with_aux_bounds(A: Any, lo: np.ndarray, hi: np.ndarray, c: np.ndarray, aux_bounds: np.ndarray
                     ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    # highs_solve keeps every column >= 0: a free auxiliary column becomes u = u⁺ - u⁻, and finite
    # bounds other than [0, inf) become rows
    n_aux = aux_bounds.shape[0]
    n_main = A.shape[1] - n_aux
    A = sp.csr_matrix(A)
    aux = A[:, n_main:]
    neg = np.flatnonzero(aux_bounds[:, 0] < 0)
    A = sp.hstack([A, -aux[:, neg]]).tocsr()
    c = np.concatenate([c, np.zeros(neg.size)])
    rows = []
    for j in range(n_aux):
        l, u = aux_bounds[j]
        if l == 0.0 and u == np.inf:
            continue
        row = np.zeros(A.shape[1])
        row[n_main + j] = 1.0
        if j in neg:
            row[A.shape[1] - neg.size + int(np.searchsorted(neg, j))] = -1.0
        rows.append((row, l, u))
    if rows:
        A = sp.vstack([A, sp.csr_matrix(np.array([r for r, _, _ in rows]))]).tocsr()
        lo = np.concatenate([lo, [r[1] for r in rows]])
        hi = np.concatenate([hi, [r[2] for r in rows]])
    return A, lo, hi, c


def lp(fg: Graph, theta: FactorGraphPotentials) -> MAPSolution:
    from structopt.structures._ilp import highs_solve

    t0 = time.perf_counter()
    theta = fg.check_theta(theta)
    A, lo, hi, aux_bounds = fg.local_polytope(theta)
    c = -np.where(np.isfinite(np.concatenate([theta.unary, theta.factors])),
                  np.concatenate([theta.unary, theta.factors]), 0.0)
    if aux_bounds.shape[0]:
        A, lo, hi, c = fg._with_aux_bounds(A, lo, hi, c, aux_bounds)
    status, x, obj = highs_solve(c, A, lo, hi, False, {})
    if status == "infeasible":
        return MAPSolution(None, -np.inf, -np.inf, True, "infeasible", "lp", time.perf_counter() - t0)
    if status != "optimal":
        raise RuntimeError(f"HiGHS failed on the local polytope: {status}")
    value = -float(obj)
    fl = fg.flat
    nu = int(fl.voff[-1])
    p = np.clip(x[:nu], 0.0, 1.0)
    qt = np.clip(x[nu:nu + int(fl.toff[-1])], 0.0, 1.0)
    y, score = fg._round(theta, p, qt)
    if not score >= value - 1e-7 * (1.0 + abs(value)):
        # a loose LP (on the frustrated grids its optimum is 1/2 almost everywhere): AD3's roundings of
        # its many iterates, improved by ICM, find far better labelings in milliseconds
        rival = fg._ad3(theta, max_iter=LP_AD3_ITERATIONS, time_limit=LP_AD3_SECONDS)[0]
        if rival.labels is not None and rival.score > score:
            y, score = rival.labels, rival.score
    labels = y if np.isfinite(score) else None
    optimal = bool(np.isfinite(score) and score >= value - 1e-7 * (1.0 + abs(value)))
    sol = MAPSolution(labels, score, value, optimal, "optimal" if optimal else "lp_solved", "lp",
                      time.perf_counter() - t0, lp_value=value,
                      marginals=FactorGraphPotentials(x[:nu], x[nu:nu + int(fl.toff[-1])]))
    return fg._repair(theta, sol, None)
