"""numba kernels of AD3 (alternating directions dual decomposition) on a flattened factor graph.

The factor graph arrives as flat arrays (see :class:`structopt.structures.factor_graph.FactorGraph`):

- variables ``i``: ``vstates[i]`` states, entries ``voff[i]:voff[i+1]`` of the unary / ``p`` vectors,
  ``deg[i]`` factors, incident edges ``vedge[vptr[i]:vptr[i+1]]``;
- factors ``f``: kind ``fkind[f]`` (``DENSE``, ``XOR``, ``ATMOST1``, ``OR``, ``BUDGET``, ``STRUCT``), budget
  ``fparam[f]``, scope edges ``fptr[f]:fptr[f+1]`` (edge ``e`` joins factor f and variable ``evar[e]``;
  its per-state entries are ``eoff[e]:eoff[e+1]`` of λ and q), table entries ``toff[f]:toff[f+1]``
  (dense factors, row-major, the last scope variable fastest), active-set storage
  ``aoff[f]:aoff[f+1]``.

A ``-inf`` unary entry forbids a state, a ``-inf`` table entry a configuration (branch-and-bound
clamps variables this way). Notation follows the implementation note (docs: /work/shared/specs/ad3.md)
and Martins et al., JMLR 2015: variable marginals ``p``, factor copies ``q_iα`` (``qe``), multipliers
``λ_iα`` (``lam``), penalty ``η``. Everything here maximises.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DENSE, XOR, ATMOST1, OR, BUDGET, STRUCT = 0, 1, 2, 3, 4, 5
# STRUCT: a structured factor (a library Structure over some variables). The kernels never touch it:
# the Python driver (structopt.structures._ad3_structured) solves its local QP by calls to the
# structure's argmax, writes its copies ``qe`` before each iteration, and adds its share of the dual
# bound and of a labeling's score. Here it counts as "no score, no constraint" everywhere.

# indices of the scalar state vector ``scal``
S_ETA, S_UPPER, S_LOWER, S_RP, S_RD, S_PRIMAL, S_ITER = 0, 1, 2, 3, 4, 5, 6
N_SCAL = 7

# status codes returned by ad3_chunk
RUNNING, GAP_CLOSED, LP_CONVERGED, INFEASIBLE, BELOW_TARGET = 0, 1, 2, 3, 4

NEG = -np.inf


# --------------------------------------------------------------------------- small dense algebra
@njit(cache=True)
def _solve_inplace(A, b, n):
    """Solve ``A[:n,:n] x = b[:n]`` by Gaussian elimination with partial pivoting (A, b overwritten).

    Returns False when a pivot vanishes (numerically singular)."""
    for col in range(n):
        piv = col
        best = abs(A[col, col])
        for r in range(col + 1, n):
            if abs(A[r, col]) > best:
                best = abs(A[r, col])
                piv = r
        if best < 1e-13:
            return False
        if piv != col:
            for c in range(n):
                A[col, c], A[piv, c] = A[piv, c], A[col, c]
            b[col], b[piv] = b[piv], b[col]
        inv = 1.0 / A[col, col]
        for r in range(col + 1, n):
            fac = A[r, col] * inv
            if fac != 0.0:
                for c in range(col, n):
                    A[r, c] -= fac * A[col, c]
                b[r] -= fac * b[col]
    for r in range(n - 1, -1, -1):
        acc = b[r]
        for c in range(r + 1, n):
            acc -= A[r, c] * b[c]
        b[r] = acc / A[r, r]
    return True


@njit(cache=True)
def _clip01(x):
    return 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)


# --------------------------------------------------------------------------- logic factors
@njit(cache=True)
def project_box_sum(c, lo, hi, out):
    """Euclidean projection of ``c`` onto ``{0 <= z <= 1, lo <= sum z <= hi}`` written to ``out``.

    One sort of the 2n breakpoints of ``h(τ) = Σ clip(c - τ, 0, 1)`` (non-increasing, piecewise
    linear); the answer is ``clip(c - τ)`` for the τ with ``h(τ)`` equal to the violated side (τ = 0
    when the clipped point already satisfies both sides). XOR is ``lo = hi = 1``, at-most-one
    ``(0, 1)``, OR ``(1, n)``, budget ``(0, k)``.
    """
    n = c.size
    total = 0.0
    for i in range(n):
        out[i] = _clip01(c[i])
        total += out[i]
    if n == 0 or (total >= lo and total <= hi):
        return
    target = lo if total < lo else hi
    if target <= 0.0:  # every coordinate to 0
        for i in range(n):
            out[i] = 0.0
        return
    if target >= n:
        for i in range(n):
            out[i] = 1.0
        return
    # events: at c_i - 1 term i starts decreasing (slope -1), at c_i it stops (slope +1)
    bp = np.empty(2 * n)
    kind = np.empty(2 * n, dtype=np.int64)
    for i in range(n):
        bp[2 * i] = c[i] - 1.0
        kind[2 * i] = 1
        bp[2 * i + 1] = c[i]
        kind[2 * i + 1] = -1
    order = np.argsort(bp, kind="mergesort")
    h = float(n)  # value at the smallest breakpoint: every term equals 1
    active = 0
    tau = bp[order[0]]
    for k in range(2 * n):
        t_k = bp[order[k]]
        h_k = h - active * (t_k - tau)
        if h_k <= target:
            # target lies on the segment [tau, t_k]
            tau = tau + (h - target) / active if active > 0 else t_k
            break
        h, tau = h_k, t_k
        active += kind[order[k]]
    else:
        tau = tau + (h - target) / active if active > 0 else tau
    for i in range(n):
        out[i] = _clip01(c[i] - tau)


@njit(cache=True)
def logic_bounds(kind, param, n):
    """``(lo, hi)``: how many of a logic factor's binary variables may be 1."""
    if kind == XOR:
        return 1.0, 1.0
    if kind == ATMOST1:
        return 0.0, 1.0
    if kind == OR:
        return 1.0, float(n)
    return 0.0, float(param)


# --------------------------------------------------------------------------- binary pairwise closed form
@njit(cache=True)
def _pair_nonneg(c1, c2, c12):
    # min ½(z1-c1)² + ½(z2-c2)² - c12·min(z1, z2) over [0,1]², c12 >= 0 [derived]: either one
    # coordinate sits below the other (the min term only pulls that one) or both are equal
    if c1 > c2 + c12:
        return _clip01(c1), _clip01(c2 + c12)
    if c2 > c1 + c12:
        return _clip01(c1 + c12), _clip01(c2)
    t = _clip01(0.5 * (c1 + c2 + c12))
    return t, t


@njit(cache=True)
def pair_closed_form(c1, c2, c12):
    """argmin ½(z1-c1)² + ½(z2-c2)² - c12·z12 over the marginal polytope of two binary variables.

    With c12 >= 0 the optimum has z12 = min(z1, z2); with c12 < 0, flipping the second variable
    (z2' = 1 - z2, z12' = z1 - z12) gives the same problem with (c1 + c12, 1 - c2, -c12).
    """
    if c12 >= 0.0:
        z1, z2 = _pair_nonneg(c1, c2, c12)
        return z1, z2, min(z1, z2)
    z1, z2f = _pair_nonneg(c1 + c12, 1.0 - c2, -c12)
    return z1, 1.0 - z2f, z1 - min(z1, z2f)


@njit(cache=True, inline="always")
def _store_pair(qt, qe, t0, ta, tb, z1, z2, z12):
    """Write a binary pairwise factor's marginal table and its two variables' copies from (z1, z2, z12)."""
    qt[t0] = 1.0 - z1 - z2 + z12
    qt[t0 + 1] = z2 - z12
    qt[t0 + 2] = z1 - z12
    qt[t0 + 3] = z12
    qe[ta], qe[ta + 1] = 1.0 - z1, z1
    qe[tb], qe[tb + 1] = 1.0 - z2, z2


# --------------------------------------------------------------------------- dense factors: active set
@njit(cache=True)
def _decode(cfg, f, fptr, evar, vstates, out):
    e0, k = fptr[f], fptr[f + 1] - fptr[f]
    for j in range(k - 1, -1, -1):
        S = vstates[evar[e0 + j]]
        out[j] = cfg % S
        cfg //= S


@njit(cache=True)
def _config_allowed(y, f, fptr, evar, voff, vallow):
    e0, k = fptr[f], fptr[f + 1] - fptr[f]
    for j in range(k):
        if not vallow[voff[evar[e0 + j]] + y[j]]:
            return False
    return True


@njit(cache=True)
def _step_towards(aw, a0, n, wstar, wnew):
    """The active-set QP's blocking step: ``wnew`` is the point on the segment from the active weights
    ``aw[a0:a0+n]`` to the equality-constrained optimum ``wstar`` where the first weight reaches 0."""
    alpha = 1.0
    for i in range(n):
        if wstar[i] < 0.0 and wstar[i] < aw[a0 + i]:
            r = aw[a0 + i] / (aw[a0 + i] - wstar[i])
            if r < alpha:
                alpha = r
    for i in range(n):
        wnew[i] = aw[a0 + i] + alpha * (wstar[i] - aw[a0 + i])


@njit(cache=True)
def _renormalise(aw, a0, n):
    """Rescale the active weights ``aw[a0:a0+n]`` to sum to 1 (after compaction dropped the zero ones)."""
    tot = 0.0
    for i in range(n):
        tot += aw[a0 + i]
    for i in range(n):
        aw[a0 + i] /= tot


@njit(cache=True)
def _compact(acfg, aw, ys, a0, n, k, wnew):
    """Give the active members their new weights ``wnew``, dropping those at (numerically) 0; return
    the new size."""
    m_ok = 0
    for a in range(n):
        if wnew[a] > 1e-15:
            acfg[a0 + m_ok] = acfg[a0 + a]
            aw[a0 + m_ok] = wnew[a]
            for j in range(k):
                ys[m_ok, j] = ys[a, j]
            m_ok += 1
    return m_ok


@njit(cache=True)
def dense_qp(f, fptr, evar, eoff, voff, vstates, vallow, tab, toff, target, eta, acfg, aw, aoff, acount,
             qe, qt, max_inner):
    """AD3's local QP of a dense table factor by a primal active-set method over its configurations.

    Maximises ``θ_α·q + η Σ_i a_i·q_i - (η/2) Σ_i ‖q_i‖²`` (i.e. the spec's step 1 with targets
    ``a_i = target[eoff[e]...]``) over the simplex of allowed configurations. The active set (kept
    between calls: the warm start) holds configurations whose variable-marginal images are affinely
    independent, so the KKT system ``[ηG 1; 1ᵀ 0]`` on it is non-singular. A configuration to add whose
    image is an affine combination of the active ones is brought in along the ray that keeps the
    marginals fixed (its objective rises linearly there), dropping the first member that reaches 0.
    Returns False when the factor has no allowed configuration.
    """
    e0, k = fptr[f], fptr[f + 1] - fptr[f]
    t0, K = toff[f], toff[f + 1] - toff[f]
    a0, cap = aoff[f], aoff[f + 1] - aoff[f]
    y = np.empty(k, dtype=np.int64)
    # scores s(c) = θ(c) + η Σ_j a_j[y_j]; forbidden configurations get -inf
    s = np.empty(K)
    any_ok = False
    for c in range(K):
        _decode(c, f, fptr, evar, vstates, y)
        if not np.isfinite(tab[t0 + c]) or not _config_allowed(y, f, fptr, evar, voff, vallow):
            s[c] = NEG
            continue
        v = tab[t0 + c]
        for j in range(k):
            v += eta * target[eoff[e0 + j] + y[j]]
        s[c] = v
        any_ok = True
    if not any_ok:
        return False
    n = acount[f]
    # drop members that became forbidden (new masks) and renormalise
    m_ok = 0
    tot = 0.0
    for a in range(n):
        if np.isfinite(s[acfg[a0 + a]]) and aw[a0 + a] > 0.0:
            acfg[a0 + m_ok] = acfg[a0 + a]
            aw[a0 + m_ok] = aw[a0 + a]
            tot += aw[a0 + a]
            m_ok += 1
    n = m_ok
    if n == 0:
        best = 0
        for c in range(K):
            if s[c] > s[best]:
                best = c
        acfg[a0] = best
        aw[a0] = 1.0
        n = 1
    else:
        for a in range(n):
            aw[a0 + a] /= tot
    ys = np.empty((cap, k), dtype=np.int64)
    for a in range(n):
        _decode(acfg[a0 + a], f, fptr, evar, vstates, ys[a])
    KK = np.empty((cap + 1, cap + 1))
    rhs = np.empty(cap + 1)
    wstar = np.empty(cap)
    wnew = np.empty(cap)
    marg_len = eoff[e0 + k] - eoff[e0]
    m = np.empty(marg_len)
    tol = 1e-12
    for _ in range(max_inner):
        # equality-constrained QP on the active set
        for a in range(n):
            for b in range(n):
                agree = 0
                for j in range(k):
                    if ys[a, j] == ys[b, j]:
                        agree += 1
                KK[a, b] = eta * agree
            KK[a, n] = 1.0
            KK[n, a] = 1.0
            rhs[a] = s[acfg[a0 + a]]
        KK[n, n] = 0.0
        rhs[n] = 1.0
        if not _solve_inplace(KK, rhs, n + 1):
            break  # cannot happen with an affinely independent set; keep the current feasible point
        neg = False
        for a in range(n):
            wstar[a] = rhs[a]
            if rhs[a] < -1e-14:
                neg = True
        tau = rhs[n]
        if neg:
            _step_towards(aw, a0, n, wstar, wnew)
            n = _compact(acfg, aw, ys, a0, n, k, wnew)
            _renormalise(aw, a0, n)
            continue
        for a in range(n):
            aw[a0 + a] = wstar[a]
        # marginals of the current point and the most violating configuration
        m[:] = 0.0
        for a in range(n):
            for j in range(k):
                m[eoff[e0 + j] - eoff[e0] + ys[a, j]] += aw[a0 + a]
        best = -1
        best_g = np.inf
        scale = 1.0
        for c in range(K):
            if not np.isfinite(s[c]):
                continue
            _decode(c, f, fptr, evar, vstates, y)
            g = -s[c]
            for j in range(k):
                g += eta * m[eoff[e0 + j] - eoff[e0] + y[j]]
            if abs(g) > scale:
                scale = abs(g)
            if g < best_g:
                best_g = g
                best = c
        if best < 0 or best_g >= -tau - tol * scale:
            break
        already = False
        for a in range(n):
            if acfg[a0 + a] == best:
                already = True
        if already:
            break  # numerical tie with an active member: optimal to tolerance
        _decode(best, f, fptr, evar, vstates, y)
        # affine dependence of the new image on the active ones: least squares via normal equations
        for a in range(n):
            for b in range(n):
                agree = 0
                for j in range(k):
                    if ys[a, j] == ys[b, j]:
                        agree += 1
                KK[a, b] = agree + 1.0
            agree = 0
            for j in range(k):
                if ys[a, j] == y[j]:
                    agree += 1
            rhs[a] = agree + 1.0
        btb = np.empty(n)
        for a in range(n):
            btb[a] = rhs[a]
        dependent = False
        if n >= 1 and _solve_inplace(KK, rhs, n):
            # residual² = cᵀ(BᵀB)c - 2cᵀBᵀb + bᵀb; recompute BᵀB·c directly
            res = float(k + 1)
            for a in range(n):
                acc = 0.0
                for b in range(n):
                    agree = 0
                    for j in range(k):
                        if ys[a, j] == ys[b, j]:
                            agree += 1
                    acc += (agree + 1.0) * rhs[b]
                res += rhs[a] * acc - 2.0 * rhs[a] * btb[a]
            dependent = res < 1e-9
        if dependent:
            alpha = np.inf
            for a in range(n):
                if rhs[a] > 1e-12:
                    r = aw[a0 + a] / rhs[a]
                    if r < alpha:
                        alpha = r
            if not np.isfinite(alpha):
                break
            for a in range(n):
                wnew[a] = aw[a0 + a] - alpha * rhs[a]
            n = _compact(acfg, aw, ys, a0, n, k, wnew)
            if n >= cap:
                break
            acfg[a0 + n] = best
            aw[a0 + n] = alpha
            for j in range(k):
                ys[n, j] = y[j]
            n += 1
            tot = 0.0
            for a in range(n):
                tot += aw[a0 + a]
            for a in range(n):
                aw[a0 + a] /= tot
        else:
            if n >= cap:
                break
            acfg[a0 + n] = best
            aw[a0 + n] = 0.0
            for j in range(k):
                ys[n, j] = y[j]
            n += 1
    acount[f] = n
    # write the factor marginal and its variable marginals
    for c in range(K):
        qt[t0 + c] = 0.0
    for e in range(e0, e0 + k):
        for t in range(eoff[e], eoff[e + 1]):
            qe[t] = 0.0
    for a in range(n):
        w = aw[a0 + a]
        if w <= 0.0:
            continue
        qt[t0 + acfg[a0 + a]] += w
        for j in range(k):
            qe[eoff[e0 + j] + ys[a, j]] += w
    return True


# --------------------------------------------------------------------------- dense pairwise tables: lean active set
#: the carried inverse of a table's KKT matrix is rebuilt from scratch after this many rank-one updates
#: (bordering or deletion), so that rounding errors never accumulate (see :func:`pair_qp`)
INV_REFRESH = 64
#: a configuration whose image lies within this squared distance of the active images' affine hull is
#: dependent (images are 0/1 vectors, so an independent one lies at least ~1/(members+1) away)
DEPENDENT = 1e-9


@njit(cache=True)
def inverse_layout(fkind, fptr, aoff):
    """Offsets into the carried-inverse array ``ainv`` of the AD3 state: per table over two variables a header
    ``(members, updates since the last rebuild, the members' configurations)`` then the ``(cap+1)²`` inverse
    of its KKT matrix (``cap`` its active-set capacity); other factors take no room."""
    n_f = fkind.size
    ioff = np.zeros(n_f + 1, dtype=np.int64)
    for f in range(n_f):
        size = 0
        if fkind[f] == DENSE and fptr[f + 1] - fptr[f] == 2:
            cap = aoff[f + 1] - aoff[f]
            size = 2 + cap + (cap + 1) * (cap + 1)
        ioff[f + 1] = ioff[f] + size
    return ioff


# rows of pair_workspace's float scratch: scores, right-hand side, w*, new weights, bordering vector u
R_S, R_RHS, R_WSTAR, R_WNEW, R_U = 0, 1, 2, 3, 4


@njit(cache=True)
def pair_workspace(fkind, fptr, toff, aoff):
    """Scratch arrays for :func:`pair_core`, sized for the largest pairwise table and active set of the graph:
    ``(wsf, wsi)``: floats by row (``R_S``... ``R_U``) and the members' states (rows ``ya``, ``yb``). Few
    array arguments: a compiled call costs ~4 ns per
    array it passes (measured, numba 0.68), more than a small table's inner step."""
    kmax = 1
    cmax = 1
    for f in range(fkind.size):
        if fkind[f] == DENSE and fptr[f + 1] - fptr[f] == 2:
            kmax = max(kmax, toff[f + 1] - toff[f])
            cmax = max(cmax, aoff[f + 1] - aoff[f])
    return np.empty((5, max(kmax, cmax + 2))), np.empty((2, cmax + 1), dtype=np.int64)


@njit(cache=True)
def pair_inverse(ainv, m0, m, wsi, n):
    """Write at ``ainv[m0:]`` (row stride ``m``) the inverse of the KKT matrix ``[0 1ᵀ; 1 G]`` of ``n`` members
    (states ``wsi[0, :n]``, ``wsi[1, :n]``; ``G`` their Gram matrix, the number of states two members share):
    ``[-2 1; 1 0]`` for one member (a cold start), else by Gauss-Jordan elimination with partial pivoting.
    Returns False when the matrix is numerically singular (the members are affinely dependent)."""
    if n == 1:
        ainv[m0], ainv[m0 + 1], ainv[m0 + m], ainv[m0 + m + 1] = -2.0, 1.0, 1.0, 0.0
        return True
    k = n + 1
    work = np.empty((k, 2 * k))
    for i in range(k):
        for j in range(k):
            if i == 0 and j == 0:
                work[i, j] = 0.0
            elif i == 0 or j == 0:
                work[i, j] = 1.0
            else:
                work[i, j] = (wsi[0, i - 1] == wsi[0, j - 1]) + (wsi[1, i - 1] == wsi[1, j - 1])
            work[i, k + j] = 1.0 if i == j else 0.0
    for col in range(k):
        piv = col
        best = abs(work[col, col])
        for r in range(col + 1, k):
            if abs(work[r, col]) > best:
                best = abs(work[r, col])
                piv = r
        if best < 1e-13:
            return False
        if piv != col:
            for c in range(2 * k):
                work[col, c], work[piv, c] = work[piv, c], work[col, c]
        inv = 1.0 / work[col, col]
        for c in range(2 * k):
            work[col, c] *= inv
        for r in range(k):
            fac = work[r, col]
            if r != col and fac != 0.0:
                for c in range(2 * k):
                    work[r, c] -= fac * work[col, c]
    for i in range(k):
        for j in range(k):
            ainv[m0 + i * m + j] = work[i, k + j]
    return True


@njit(cache=True)
def _border(ainv, m0, m, wsi, n, wsf):
    """Border the inverse of ``n`` members' KKT matrix with member ``n`` (states ``wsi[:, n]``):
    ``u = B r`` (in ``wsf[R_U]``) with ``r = [1; G[:n, n]]``, ``d = G[n, n] - r·u`` (the squared distance of
    the new image from the members' affine hull), then ``B' = [B + u uᵀ/d, -u/d; -uᵀ/d, 1/d]``. Returns 0
    when bordered, 1 (nothing written) when ``d < DEPENDENT`` (``u[1:n+1]`` then holds the affine
    coefficients of the new image), 2 (nothing written) when independent but the block has no room."""
    k = n + 1
    na, nb = wsi[0, n], wsi[1, n]
    d = 2.0
    for i in range(k):
        row = m0 + i * m
        acc = ainv[row]
        for j in range(n):
            acc += ainv[row + j + 1] * ((wsi[0, j] == na) + (wsi[1, j] == nb))
        wsf[R_U, i] = acc
        d -= acc if i == 0 else acc * ((wsi[0, i - 1] == na) + (wsi[1, i - 1] == nb))
    if d < DEPENDENT:
        return 1
    if n + 2 > m:
        return 2
    inv_d = 1.0 / d
    for i in range(k):
        ui = wsf[R_U, i] * inv_d
        for j in range(k):
            ainv[m0 + i * m + j] += ui * wsf[R_U, j]
        ainv[m0 + i * m + k] = -ui
        ainv[m0 + k * m + i] = -ui
    ainv[m0 + k * m + k] = inv_d
    return 0


@njit(cache=True)
def _delete(ainv, m0, m, k, idx):
    """Remove row and column ``idx`` of the ``k × k`` inverse at ``ainv[m0:]`` (stride ``m``) by Schur
    deletion, ``B' = B₋₋ - B₋ᵢ Bᵢ₋ / Bᵢᵢ`` (the inverse of the matrix less that row and column), then close
    the gap (the other rows and columns keep their order)."""
    piv = ainv[m0 + idx * m + idx]
    for i in range(k):
        if i == idx:
            continue
        fac = ainv[m0 + i * m + idx] / piv
        if fac != 0.0:
            for j in range(k):
                if j != idx:
                    ainv[m0 + i * m + j] -= fac * ainv[m0 + idx * m + j]
    for i in range(k):
        r = i if i < idx else i + 1
        if r >= k:
            break
        for j in range(k - 1):
            c = j if j < idx else j + 1
            ainv[m0 + i * m + j] = ainv[m0 + r * m + c]


@njit(cache=True)
def _compact_pair(acfg, aw, wsi, a0, n, wsf, ainv, m0, m, keep):
    """:func:`_compact` for :func:`pair_core`'s members: those with new weights ``wsf[R_WNEW]`` above ``keep``
    stay (in order), the others are deleted from the carried inverse at ``ainv[m0:]`` too (``m0 < 0``: no
    inverse to keep); returns (new size, deletions)."""
    dropped = 0
    for i in range(n - 1, -1, -1):  # from the last: the indices still to visit do not move
        if not wsf[R_WNEW, i] > keep:
            if m0 >= 0 and n - dropped > 1:  # (the last member out leaves nothing to invert: rebuilt after)
                _delete(ainv, m0, m, n + 1 - dropped, i + 1)
            dropped += 1
    m_ok = 0
    for i in range(n):
        if wsf[R_WNEW, i] > keep:
            acfg[a0 + m_ok] = acfg[a0 + i]
            aw[a0 + m_ok] = wsf[R_WNEW, i]
            wsi[0, m_ok] = wsi[0, i]
            wsi[1, m_ok] = wsi[1, i]
            m_ok += 1
    return m_ok, dropped


@njit(cache=True)
def _best_single(wsf, wsi, acfg, aw, a0, K, Sb):
    """The best-scoring configuration alone (the active set of a cold start), at weight 1."""
    best = 0
    for c in range(K):
        if wsf[R_S, c] > wsf[R_S, best]:
            best = c
    acfg[a0] = best
    aw[a0] = 1.0
    wsi[0, 0] = best // Sb
    wsi[1, 0] = best - wsi[0, 0] * Sb


@njit(cache=True, inline="always")
def pair_core(Sa, Sb, ta, tb, va, vb, t0, a0, cap, i0, n, eta, max_inner, vallow, tab, xw, acfg, aw, qe, qt,
              wsf, wsi, ainv):
    """The local QP of a table over two variables with its carried KKT inverse; returns (term of g, members).

    :func:`dense_qp`'s primal active-set method and warm start (the same iterates, to rounding), specialised
    to a table of ``Sa × Sb`` configurations ``c = a·S_b + b`` (entries ``tab[t0:]``; the variables' copies
    at ``qe[ta:]``, ``qe[tb:]``, their allowed states ``vallow[va:]``, ``vallow[vb:]``; ``n`` members stored at
    ``acfg[a0:]`` / ``aw[a0:]``, room for ``cap``). Scores ``s(c) = θ(c) + xw[0, a] + xw[1, b]`` (``xw[:2]`` =
    η × the targets); the returned term of the dual g(λ) is ``max_c θ(c) + xw[2, a] + xw[3, b]`` over the
    allowed configurations (``-inf`` when none is allowed: nothing written).

    As in the C++ AD3, the inverse of the active set's KKT matrix ``[0 1ᵀ; 1 G]`` (``G`` the Gram matrix of
    the members' images, ``[a = a'] + [b = b']``; η-free, the system is solved for ``[τ/η; w]`` against
    ``[1; s/η]``) is carried with the active set from call to call in ``ainv[i0:]`` (layout
    :func:`inverse_layout`): bordered when a member enters (:func:`_border`, whose Schur complement is also
    the affine-dependence test), shrunk by Schur deletion when one leaves (:func:`_delete`), so an inner
    step costs one O(n²) product, no factorisation. It is rebuilt from scratch (:func:`pair_inverse`) when
    its header does not describe the stored active set (a fresh or externally reset state) and after
    ``INV_REFRESH`` updates, so rounding errors never accumulate.
    """
    K = Sa * Sb
    m = cap + 1
    m0 = i0 + 2 + cap  # the inverse, after the header (members, updates, configurations)
    gmax = NEG
    c = 0
    for a in range(Sa):
        oka = vallow[va + a]
        for b in range(Sb):
            th = tab[t0 + c]
            if oka and vallow[vb + b] and th != NEG:
                wsf[R_S, c] = th + xw[0, a] + xw[1, b]
                v = th + xw[2, a] + xw[3, b]
                if v > gmax:
                    gmax = v
            else:
                wsf[R_S, c] = NEG
            c += 1
    if gmax == NEG:
        return NEG, n
    # the carried inverse describes the stored active set when its header says so
    valid = int(ainv[i0]) == n
    for i in range(n):
        cf = acfg[a0 + i]
        if valid and int(ainv[i0 + 2 + i]) != cf:
            valid = False
        wsi[0, i] = cf // Sb
        wsi[1, i] = cf - wsi[0, i] * Sb
    updates = int(ainv[i0 + 1]) if valid else INV_REFRESH
    # warm start: the previous active set, less the members now forbidden or at weight 0
    tot = 0.0
    kept = 0
    for i in range(n):
        w = aw[a0 + i]
        if wsf[R_S, acfg[a0 + i]] != NEG and w > 0.0:
            wsf[R_WNEW, i] = w
            tot += w
            kept += 1
        else:
            wsf[R_WNEW, i] = 0.0
    if kept < n:
        n, dropped = _compact_pair(acfg, aw, wsi, a0, n, wsf, ainv, m0 if valid else -1, m, 0.0)
        updates += dropped
    if n == 0:
        _best_single(wsf, wsi, acfg, aw, a0, K, Sb)
        n = 1
        updates = INV_REFRESH
    else:
        for i in range(n):
            aw[a0 + i] /= tot
    if updates >= INV_REFRESH:
        if not pair_inverse(ainv, m0, m, wsi, n):
            # cannot happen with an affinely independent set: restart from the best single member
            _best_single(wsf, wsi, acfg, aw, a0, K, Sb)
            n = 1
            pair_inverse(ainv, m0, m, wsi, n)
        updates = 0
    tol = 1e-12
    inv_eta = 1.0 / eta
    for _ in range(max_inner):
        # equality-constrained QP on the active set: [0 1ᵀ; 1 G] [τ/η; w] = [1; s/η], by the carried inverse
        for j in range(n):
            wsf[R_RHS, j] = wsf[R_S, acfg[a0 + j]] * inv_eta
        neg = False
        acc = ainv[m0]
        for j in range(n):
            acc += ainv[m0 + j + 1] * wsf[R_RHS, j]
        tau = eta * acc
        for i in range(n):
            row = m0 + (i + 1) * m
            acc = ainv[row]
            for j in range(n):
                acc += ainv[row + j + 1] * wsf[R_RHS, j]
            wsf[R_WSTAR, i] = acc
            if acc < -1e-14:
                neg = True
        if neg:  # blocking step towards w*, dropping the first member that reaches 0
            alpha = 1.0
            for i in range(n):
                ws, wo = wsf[R_WSTAR, i], aw[a0 + i]
                if ws < 0.0 and ws < wo:
                    r = wo / (wo - ws)
                    if r < alpha:
                        alpha = r
            for i in range(n):
                wsf[R_WNEW, i] = aw[a0 + i] + alpha * (wsf[R_WSTAR, i] - aw[a0 + i])
            n, dropped = _compact_pair(acfg, aw, wsi, a0, n, wsf, ainv, m0, m, 1e-15)
            updates += dropped
            _renormalise(aw, a0, n)
            continue
        for i in range(n):
            aw[a0 + i] = wsf[R_WSTAR, i]
        # the current marginals, in the factor's own slots of qe (rewritten at the end)
        for r in range(Sa):
            qe[ta + r] = 0.0
        for r in range(Sb):
            qe[tb + r] = 0.0
        for i in range(n):
            qe[ta + wsi[0, i]] += aw[a0 + i]
            qe[tb + wsi[1, i]] += aw[a0 + i]
        # the most violating configuration: largest reduced score s(c) - η(m_a[a] + m_b[b])
        best = -1
        best_g = np.inf
        scale = 1.0
        c = 0
        for a in range(Sa):
            ma = eta * qe[ta + a]
            for b in range(Sb):
                sc = wsf[R_S, c]
                if sc != NEG:
                    g = ma + eta * qe[tb + b] - sc
                    if abs(g) > scale:
                        scale = abs(g)
                    if g < best_g:
                        best_g = g
                        best = c
                c += 1
        if best < 0 or best_g >= -tau - tol * scale:
            break
        already = False
        for i in range(n):
            if acfg[a0 + i] == best:
                already = True
        if already:
            break  # numerical tie with an active member: optimal to tolerance
        nya = best // Sb
        nyb = best - nya * Sb
        wsi[0, n], wsi[1, n] = nya, nyb
        code = _border(ainv, m0, m, wsi, n, wsf)
        if code == 2:
            break
        if code == 0:
            acfg[a0 + n] = best
            aw[a0 + n] = 0.0
            n += 1
            updates += 1
            continue
        # dependent (the image is the affine combination wsf[R_U, 1:] of the active ones): along the ray that
        # keeps the marginals, the new member in, the first to reach 0 out
        alpha = np.inf
        for i in range(n):
            if wsf[R_U, i + 1] > 1e-12:
                r = aw[a0 + i] / wsf[R_U, i + 1]
                if r < alpha:
                    alpha = r
        if not np.isfinite(alpha):
            break
        for i in range(n):
            wsf[R_WNEW, i] = aw[a0 + i] - alpha * wsf[R_U, i + 1]
        n, dropped = _compact_pair(acfg, aw, wsi, a0, n, wsf, ainv, m0, m, 1e-15)
        updates += dropped
        wsi[0, n], wsi[1, n] = nya, nyb
        if _border(ainv, m0, m, wsi, n, wsf) != 0:
            _renormalise(aw, a0, n)  # cannot happen: the member dropped carried the dependence
            break
        acfg[a0 + n] = best
        aw[a0 + n] = alpha
        n += 1
        updates += 1
        _renormalise(aw, a0, n)
    ainv[i0] = n
    ainv[i0 + 1] = updates
    for i in range(n):
        ainv[i0 + 2 + i] = acfg[a0 + i]
    # write the factor marginal and its variable marginals
    for c in range(K):
        qt[t0 + c] = 0.0
    for r in range(Sa):
        qe[ta + r] = 0.0
    for r in range(Sb):
        qe[tb + r] = 0.0
    for i in range(n):
        w = aw[a0 + i]
        if w <= 0.0:
            continue
        qt[t0 + acfg[a0 + i]] += w
        qe[ta + wsi[0, i]] += w
        qe[tb + wsi[1, i]] += w
    return gmax, n


@njit(cache=True)
def pair_qp(f, fptr, evar, eoff, voff, vstates, vallow, tab, toff, aoff, xa, xb, eta, acfg, aw, acount, qe, qt,
            max_inner, ainv, i0, wa, wb):
    """:func:`pair_core` for table ``f`` of a flat layout (scratch allocated here: the AD3 loop calls the core
    with its own); ``xa``/``xb`` = η × the targets, ``wa``/``wb`` the multipliers of the returned term of g.
    ``ainv[i0:]``: the table's carried inverse (:func:`inverse_layout`; a header matching no active set, e.g.
    ``ainv[i0] = -1``, has it rebuilt)."""
    ea = fptr[f]
    ia, ib = evar[ea], evar[ea + 1]
    Sa, Sb = vstates[ia], vstates[ib]
    xw = np.zeros((4, max(Sa, Sb)))
    xw[0, :Sa] = xa[:Sa]
    xw[1, :Sb] = xb[:Sb]
    xw[2, :Sa] = wa[:Sa]
    xw[3, :Sb] = wb[:Sb]
    cap = aoff[f + 1] - aoff[f]
    wsf = np.empty((5, max(Sa * Sb, cap + 2)))
    wsi = np.empty((2, cap + 1), dtype=np.int64)
    g, n = pair_core(Sa, Sb, eoff[ea], eoff[ea + 1], voff[ia], voff[ib], toff[f], aoff[f], cap, i0, acount[f], eta,
                     max_inner, vallow, tab, xw, acfg, aw, qe, qt, wsf, wsi, ainv)
    acount[f] = n
    return g


# --------------------------------------------------------------------------- one factor's local QP
@njit(cache=True)
def binary_pairs(fkind, fptr, evar, voff, vstates, vallow, tab, toff):
    """Flags of the dense tables whose local QP has the closed form: two binary variables with both
    states allowed and no forbidden entry (computed once per run: the flags depend on θ only)."""
    n_f = fkind.size
    out = np.zeros(n_f, dtype=np.bool_)
    for f in range(n_f):
        if fkind[f] != DENSE or fptr[f + 1] - fptr[f] != 2:
            continue
        ok = True
        for j in range(2):
            i = evar[fptr[f] + j]
            if vstates[i] != 2 or not (vallow[voff[i]] and vallow[voff[i] + 1]):
                ok = False
        for c in range(toff[f], toff[f + 1]):
            x = tab[c]
            if not x - x == 0.0:  # not finite (inline: a call per factor costs more than the test)
                ok = False
        out[f] = ok
    return out


@njit(cache=True)
def local_qp(f, fkind, fparam, fptr, evar, eoff, voff, vstates, vallow, tab, toff, target, eta,
             acfg, aw, aoff, acount, qe, qt, max_inner, pair_fast):
    """Solve factor ``f``'s local QP for the given targets; write ``qe`` (and ``qt`` for tables)."""
    e0, k = fptr[f], fptr[f + 1] - fptr[f]
    kind = fkind[f]
    if kind == STRUCT:
        return True  # solved by the Python driver
    if kind == DENSE:
        if pair_fast[f]:
            ea, eb = e0, e0 + 1
            ta, tb = eoff[ea], eoff[eb]
            c1 = 0.5 * (1.0 - target[ta] + target[ta + 1])
            c2 = 0.5 * (1.0 - target[tb] + target[tb + 1])
            t0 = toff[f]
            th00, th01, th10, th11 = tab[t0], tab[t0 + 1], tab[t0 + 2], tab[t0 + 3]
            # ‖(1-z, z) - a‖² = 2(z - c)² + const, so the objective is -η Σ(z - c)² + θ·q [derived]
            c1 += (th10 - th00) / (2.0 * eta)
            c2 += (th01 - th00) / (2.0 * eta)
            c12 = (th00 - th01 - th10 + th11) / (2.0 * eta)
            z1, z2, z12 = pair_closed_form(c1, c2, c12)
            _store_pair(qt, qe, t0, ta, tb, z1, z2, z12)
            return True
        if k == 2:
            ta, tb = eoff[e0], eoff[e0 + 1]
            xa = eta * target[ta:tb]
            xb = eta * target[tb:eoff[e0 + 2]]
            # no carried inverse here (a header that matches no active set: rebuilt for this call)
            cap = aoff[f + 1] - aoff[f]
            ainv = np.empty(2 + cap + (cap + 1) * (cap + 1))
            ainv[0] = -1.0
            return pair_qp(f, fptr, evar, eoff, voff, vstates, vallow, tab, toff, aoff, xa, xb, eta, acfg, aw, acount,
                           qe, qt, max_inner, ainv, 0, xa, xb) != NEG
        return dense_qp(f, fptr, evar, eoff, voff, vstates, vallow, tab, toff, target, eta, acfg, aw, aoff,
                        acount, qe, qt, max_inner)
    # logic factor on binary variables: z_i = q_i(1); fixed variables leave the projection
    lo, hi = logic_bounds(kind, fparam[f], k)
    cfree = np.empty(k)
    idx = np.empty(k, dtype=np.int64)
    nfree = 0
    ones = 0
    for j in range(k):
        e = e0 + j
        i = evar[e]
        t = eoff[e]
        ok0, ok1 = vallow[voff[i]], vallow[voff[i] + 1]
        if ok0 and ok1:
            cfree[nfree] = 0.5 * (1.0 - target[t] + target[t + 1])
            idx[nfree] = j
            nfree += 1
        elif ok1:
            qe[t], qe[t + 1] = 0.0, 1.0
            ones += 1
        else:
            qe[t], qe[t + 1] = 1.0, 0.0
    lo_f = max(lo - ones, 0.0)
    hi_f = min(hi - ones, float(nfree))
    if lo_f > hi_f:
        hi_f = lo_f  # infeasible under the clamps; the dual bound reports it (-inf)
    z = np.empty(nfree)
    project_box_sum(cfree[:nfree], lo_f, hi_f, z)
    for r in range(nfree):
        t = eoff[e0 + idx[r]]
        qe[t], qe[t + 1] = 1.0 - z[r], z[r]
    return True


# --------------------------------------------------------------------------- dual bound
@njit(cache=True)
def factor_max(f, fkind, fparam, fptr, evar, eoff, voff, vstates, vallow, tab, toff, v):
    """max over allowed configurations y_α of θ_α(y_α) + Σ_i v_iα(y_i) (``v`` laid out like λ)."""
    e0, k = fptr[f], fptr[f + 1] - fptr[f]
    kind = fkind[f]
    if kind == STRUCT:
        return 0.0  # added by the Python driver
    if kind == DENSE:
        t0, K = toff[f], toff[f + 1] - toff[f]
        y = np.empty(k, dtype=np.int64)
        best = NEG
        for c in range(K):
            if not np.isfinite(tab[t0 + c]):
                continue
            _decode(c, f, fptr, evar, vstates, y)
            if not _config_allowed(y, f, fptr, evar, voff, vallow):
                continue
            val = tab[t0 + c]
            for j in range(k):
                val += v[eoff[e0 + j] + y[j]]
            if val > best:
                best = val
        return best
    lo, hi = logic_bounds(kind, fparam[f], k)
    base = 0.0
    ones = 0
    d = np.empty(k)
    nfree = 0
    for j in range(k):
        e = e0 + j
        i = evar[e]
        t = eoff[e]
        ok0, ok1 = vallow[voff[i]], vallow[voff[i] + 1]
        if ok0 and ok1:
            base += v[t]
            d[nfree] = v[t + 1] - v[t]
            nfree += 1
        elif ok1:
            base += v[t + 1]
            ones += 1
        elif ok0:
            base += v[t]
        else:
            return NEG
    kmin = max(int(np.ceil(lo - ones - 1e-9)), 0)
    kmax = min(int(np.floor(hi - ones + 1e-9)), nfree)
    if kmin > kmax:
        return NEG
    ds = -np.sort(-d[:nfree])
    acc = 0.0
    for r in range(kmin):
        acc += ds[r]
    for r in range(kmin, kmax):
        if ds[r] <= 0.0:
            break
        acc += ds[r]
    return base + acc


@njit(cache=True)
def dual_bound(n_vars, deg, vptr, vedge, voff, vallow, uz, fkind, fparam, fptr, evar, eoff, vstates, tab, toff,
               lam, work, pair_fast):
    """g(λ) of the note's §3 with λ re-centred per variable (so Σ_α λ_iα = 0 holds exactly)."""
    total = 0.0
    for i in range(n_vars):
        d = deg[i]
        S = voff[i + 1] - voff[i]
        if d == 0:
            best = NEG
            for s in range(S):
                if vallow[voff[i] + s] and uz[voff[i] + s] > best:
                    best = uz[voff[i] + s]
            total += best
            continue
        for s in range(S):
            mean = 0.0
            for r in range(vptr[i], vptr[i + 1]):
                mean += lam[eoff[vedge[r]] + s]
            mean /= d
            share = uz[voff[i] + s] / d
            for r in range(vptr[i], vptr[i + 1]):
                t = eoff[vedge[r]] + s
                work[t] = share + lam[t] - mean
    for f in range(fkind.size):
        if pair_fast[f]:
            ta, tb = eoff[fptr[f]], eoff[fptr[f] + 1]
            t0 = toff[f]
            best = NEG
            for c in range(4):
                val = tab[t0 + c] + work[ta + (c >> 1)] + work[tb + (c & 1)]
                if val > best:
                    best = val
            total += best
        else:
            total += factor_max(f, fkind, fparam, fptr, evar, eoff, voff, vstates, vallow, tab, toff, work)
    return total


# --------------------------------------------------------------------------- labelings
@njit(cache=True)
def bfs_order(n, fptr, evar, vptr, vedge, efac):
    """Variables breadth-first over the factor graph (neighbours through shared factors, in incidence and
    scope order; a new component from the smallest unseen variable): the order of sequential rounding."""
    seen = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        order[tail] = root
        tail += 1
        while head < tail:
            i = order[head]
            head += 1
            for r in range(vptr[i], vptr[i + 1]):
                f = efac[vedge[r]]
                for e in range(fptr[f], fptr[f + 1]):
                    v = evar[e]
                    if not seen[v]:
                        seen[v] = True
                        order[tail] = v
                        tail += 1
    return order


@njit(cache=True)
def pairwise_layout(vstates, edges):
    """The flat arrays of a graph of pairwise tables (rows ``(u, v)`` of ``edges``), in one compiled pass.

    Returns ``(ok, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, efac, order)``; ``ok`` is
    False (the arrays then meaningless) when a variable is out of range, a scope repeats a variable or two rows
    cover the same pair: the caller's array checks then name the first such row. The arrays equal those of
    ``FactorGraph._build_flat`` (``vedge``: a counting sort, which is the stable argsort of ``evar``)."""
    n = vstates.size
    E = edges.shape[0]
    m = 2 * E
    voff = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        voff[i + 1] = voff[i] + vstates[i]
    fkind = np.full(E, DENSE, dtype=np.int64)
    fparam = np.zeros(E, dtype=np.int64)
    fptr = np.arange(0, m + 1, 2).astype(np.int64)
    evar = np.empty(m, dtype=np.int64)
    deg = np.zeros(n, dtype=np.int64)
    ok = True
    for f in range(E):
        a = edges[f, 0]
        b = edges[f, 1]
        if a < 0 or a >= n or b < 0 or b >= n or a == b:
            ok = False
            break
        evar[2 * f] = a
        evar[2 * f + 1] = b
        deg[a] += 1
        deg[b] += 1
    vptr = np.zeros(n + 1, dtype=np.int64)
    vedge = np.empty(m, dtype=np.int64)
    eoff = np.zeros(m + 1, dtype=np.int64)
    toff = np.zeros(E + 1, dtype=np.int64)
    aoff = np.zeros(E + 1, dtype=np.int64)
    efac = np.empty(m, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    if not ok:
        return ok, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, efac, order
    for i in range(n):
        vptr[i + 1] = vptr[i] + deg[i]
    fill = vptr[:n].copy()
    for r in range(m):
        v = evar[r]
        vedge[fill[v]] = r
        fill[v] += 1
    # a pair covered twice: each variable stamps its neighbours
    stamp = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        for k in range(vptr[i], vptr[i + 1]):
            r = vedge[k]
            other = evar[r ^ 1]
            if stamp[other] == i:
                ok = False
                return ok, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, efac, order
            stamp[other] = i
    for r in range(m):
        eoff[r + 1] = eoff[r] + vstates[evar[r]]
        efac[r] = r >> 1
    for f in range(E):
        sa = vstates[evar[2 * f]]
        sb = vstates[evar[2 * f + 1]]
        toff[f + 1] = toff[f] + sa * sb
        aoff[f + 1] = aoff[f] + sa + sb - 1
    order = bfs_order(n, fptr, evar, vptr, vedge, efac)
    return ok, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, efac, order


@njit(cache=True)
def score_labels(y, n_vars, voff, u, fkind, fparam, fptr, evar, vstates, tab, toff):
    """Exact score of labeling ``y``: -inf when it breaks a logic factor or hits a forbidden entry."""
    total = 0.0
    for i in range(n_vars):
        total += u[voff[i] + y[i]]
    for f in range(fkind.size):
        e0, k = fptr[f], fptr[f + 1] - fptr[f]
        if fkind[f] == DENSE:
            c = 0
            for j in range(k):
                c = c * vstates[evar[e0 + j]] + y[evar[e0 + j]]
            total += tab[toff[f] + c]
        elif fkind[f] != STRUCT:
            ones = 0
            for j in range(k):
                ones += y[evar[e0 + j]]
            lo, hi = logic_bounds(fkind[f], fparam[f], k)
            if ones < lo or ones > hi:
                return NEG
    return total


@njit(cache=True)
def repair_logic(p, voff, vallow, fkind, fparam, fptr, evar, y):
    """Greedily repair the logic factors broken by labeling ``y`` (in place).

    Keeps the variables with the largest P(y_i = 1) (turning on the largest when too few are on);
    clamped variables are never changed. A few passes; the caller scores the result, so a labeling
    left infeasible only scores -inf.
    """
    for _ in range(4):
        changed = False
        for f in range(fkind.size):
            if fkind[f] == DENSE or fkind[f] == STRUCT:
                continue
            e0, k = fptr[f], fptr[f + 1] - fptr[f]
            lo, hi = logic_bounds(fkind[f], fparam[f], k)
            ones = 0
            for j in range(k):
                ones += y[evar[e0 + j]]
            if ones > hi:
                # keep the hi most likely among the ones (clamped ones first)
                prio = np.empty(k)
                for j in range(k):
                    i = evar[e0 + j]
                    free = vallow[voff[i]]
                    prio[j] = (p[voff[i] + 1] if free else 2.0) if y[i] == 1 else -1.0
                order = np.argsort(-prio)
                keep = int(hi)
                for r in range(keep, k):
                    i = evar[e0 + order[r]]
                    if y[i] == 1 and vallow[voff[i]]:
                        y[i] = 0
                        changed = True
            elif ones < lo:
                prio = np.empty(k)
                for j in range(k):
                    i = evar[e0 + j]
                    prio[j] = p[voff[i] + 1] if (y[i] == 0 and vallow[voff[i] + 1]) else -1.0
                order = np.argsort(-prio)
                need = int(lo) - ones
                for r in range(k):
                    if need <= 0 or prio[order[r]] < 0.0:
                        break
                    y[evar[e0 + order[r]]] = 1
                    need -= 1
                    changed = True
        if not changed:
            break


@njit(cache=True)
def round_and_repair(p, n_vars, voff, vallow, fkind, fparam, fptr, evar, y):
    """Round ``p`` (argmax per variable over allowed states), then repair the logic factors."""
    for i in range(n_vars):
        best = -1
        for s in range(voff[i + 1] - voff[i]):
            if vallow[voff[i] + s] and (best < 0 or p[voff[i] + s] > p[voff[i] + best]):
                best = s
        y[i] = max(best, 0)
    repair_logic(p, voff, vallow, fkind, fparam, fptr, evar, y)


@njit(cache=True)
def round_sequential(p, qt, order, efac, n_vars, vstates, voff, vptr, vedge, vallow, fkind, fparam, fptr, evar,
                     toff, y):
    """Decode variables in ``order`` (breadth-first over the factor graph), each consistent with the
    table marginals' support given the variables already decided, then repair the logic factors.

    At an LP optimum every configuration in a table marginal's support attains its reparametrised
    maximum (complementary slackness), so on a tree this picks an optimal labeling even when the
    optimum is a mixture of tied labelings (where per-variable rounding can fail).
    """
    decided = np.zeros(n_vars, dtype=np.bool_)
    sub = np.empty(8, dtype=np.int64)
    mass = np.empty(vstates.max())
    for r in range(n_vars):
        i = order[r]
        S = vstates[i]
        mass[:S] = 0.0
        for q in range(vptr[i], vptr[i + 1]):
            e = vedge[q]
            f = efac[e]
            if fkind[f] != DENSE:
                continue
            e0, k = fptr[f], fptr[f + 1] - fptr[f]
            others = False
            for j in range(k):
                if evar[e0 + j] != i and decided[evar[e0 + j]]:
                    others = True
            if not others:
                continue
            if k == 2 and evar[e0] != evar[e0 + 1]:
                # a table over two variables: configuration c = a·S_b + b, no mixed-radix decoding (the
                # same entries in the same order as the general loop below)
                ia, ib = evar[e0], evar[e0 + 1]
                Sb = vstates[ib]
                t0 = toff[f]
                for c in range(toff[f + 1] - t0):
                    w = qt[t0 + c]
                    if w <= 0.0:
                        continue
                    a = c // Sb
                    b = c - a * Sb
                    if ia == i:
                        if not decided[ib] or b == y[ib]:
                            mass[a] += w
                    elif not decided[ia] or a == y[ia]:
                        mass[b] += w
                continue
            for c in range(toff[f + 1] - toff[f]):
                w = qt[toff[f] + c]
                if w <= 0.0:
                    continue
                _decode(c, f, fptr, evar, vstates, sub)
                ok = True
                s_i = 0
                for j in range(k):
                    v = evar[e0 + j]
                    if v == i:
                        s_i = sub[j]
                    elif decided[v] and sub[j] != y[v]:
                        ok = False
                if ok:
                    mass[s_i] += w
        best = -1
        for s in range(S):
            if not vallow[voff[i] + s]:
                continue
            if best < 0 or mass[s] > mass[best] + 1e-9 or (abs(mass[s] - mass[best]) <= 1e-9
                                                            and p[voff[i] + s] > p[voff[i] + best]):
                best = s
        y[i] = max(best, 0)
        decided[i] = True
    repair_logic(p, voff, vallow, fkind, fparam, fptr, evar, y)


@njit(cache=True)
def local_search(y, n_vars, vstates, voff, vptr, vedge, efac, u, fkind, fparam, fptr, evar, tab, toff, max_sweeps):
    """Iterated conditional modes on labeling ``y`` (in place): each variable in turn takes its best
    state given the others (exact local score: unary plus its tables), a move counted only when it
    keeps every logic factor on the variable satisfied. Stops after a sweep without a strict gain.

    Only improves a feasible labeling's score; a labeling that breaks a logic factor is left as it is.
    A sweep visits only the variables that moved or had a neighbour (a variable sharing a factor)
    move since their last visit: the others would evaluate exactly as before and stay, so the result
    and the number of sweeps are those of full sweeps.
    """
    ones = np.zeros(fkind.size, dtype=np.int64)
    for f in range(fkind.size):
        if fkind[f] != DENSE and fkind[f] != STRUCT:
            for e in range(fptr[f], fptr[f + 1]):
                ones[f] += y[evar[e]]
            lo, hi = logic_bounds(fkind[f], fparam[f], fptr[f + 1] - fptr[f])
            if ones[f] < lo or ones[f] > hi:
                return
    dirty = np.ones(n_vars, dtype=np.bool_)
    for _ in range(max_sweeps):
        improved = False
        for i in range(n_vars):
            if not dirty[i]:
                continue
            dirty[i] = False
            S = vstates[i]
            cur = y[i]
            best_s = cur
            best_v = NEG
            for s in range(S):
                v = u[voff[i] + s]
                if not np.isfinite(v):
                    continue
                ok = True
                for r in range(vptr[i], vptr[i + 1]):
                    f = efac[vedge[r]]
                    e0, k = fptr[f], fptr[f + 1] - fptr[f]
                    if fkind[f] == DENSE:
                        c = 0
                        for j in range(k):
                            w = evar[e0 + j]
                            c = c * vstates[w] + (s if w == i else y[w])
                        v += tab[toff[f] + c]
                    elif fkind[f] == STRUCT:
                        # a structured factor's feasibility is unknown here: its variables stay put
                        if s != cur:
                            ok = False
                    else:
                        lo, hi = logic_bounds(fkind[f], fparam[f], k)
                        n1 = ones[f] - cur + s
                        if n1 < lo or n1 > hi:
                            ok = False
                if not ok or not np.isfinite(v):
                    continue
                if s == cur:
                    if v > best_v:
                        best_v = v
                        best_s = s
                elif v > best_v + 1e-12 * (1.0 + abs(v)):
                    best_v = v
                    best_s = s
            if best_s != cur:
                for r in range(vptr[i], vptr[i + 1]):
                    f = efac[vedge[r]]
                    if fkind[f] != DENSE and fkind[f] != STRUCT:
                        ones[f] += best_s - cur
                    for e in range(fptr[f], fptr[f + 1]):
                        dirty[evar[e]] = True  # i itself included: full sweeps revisit it too
                y[i] = best_s
                improved = True
        if not improved:
            break


# --------------------------------------------------------------------------- step size and stopping
# One definition of AD3's η schedule and stopping tests, used by the compiled loop below and by the
# Python driver of graphs with structured factors (factor_graph.FactorGraph._ad3_structured).
#: residual balancing threshold on the ratio of the *squared* residuals: 100, i.e. Boyd et al.'s factor
#: μ = 10 on the residual norms (a factor 10 on the squares, used before, toggled η more often: measured
#: up to 30% more iterations to a 1e-4 bound on the UAI instances and 25-40% more to full LP convergence
#: on their grids, benchmarks/ad3_uai_results.md)
ETA_RATIO = 100.0
#: settled tables (see ad3_chunk): copies within CACHE_TOL of integral, of their previous value and of the
#: consensus; every table is solved again every CACHE_RESET iterations
CACHE_TOL = 1e-12
CACHE_RESET = 50
ETA_MIN, ETA_MAX = 1e-8, 1e8


@njit(cache=True)
def rebalance_eta(eta, r_p, r_d):
    """η after one residual-balancing step (Boyd et al. 2011, §3.4.1, as AD3 adapts its penalty): doubled
    when the primal residual (disagreement of the factor copies) dominates, halved when the dual one
    (movement of the consensus) does."""
    if r_p > ETA_RATIO * r_d and eta < ETA_MAX:
        return 2.0 * eta
    if r_d > ETA_RATIO * r_p and eta > ETA_MIN:
        return 0.5 * eta
    return eta


@njit(cache=True)
def bound_status(upper, lower, tol_gap, stop_upper):
    """The stopping tests that need only the bounds: INFEASIBLE when g = -inf, BELOW_TARGET when the bound
    reaches ``stop_upper``, GAP_CLOSED when lower >= upper - tol_gap·(1+|upper|), else RUNNING."""
    if upper == NEG:
        return INFEASIBLE
    if upper <= stop_upper:
        return BELOW_TARGET
    if lower >= upper - tol_gap * (1.0 + abs(upper)):
        return GAP_CLOSED
    return RUNNING


@njit(cache=True)
def lp_status(upper, lower, primal, r_p, r_d, tol_res, tol_lp):
    """LP_CONVERGED when both residuals are below ``tol_res``, the bound meets the primal objective to
    ``tol_lp·(1+|upper|)`` and the rounding stays genuinely worse (a converged LP with a tiny open gap
    usually means the bound still lags a tied integral optimum: the run goes on, the gap closes), else
    RUNNING."""
    if (r_p < tol_res and r_d < tol_res and abs(upper - primal) <= tol_lp * (1.0 + abs(upper))
            and upper - lower > 1e-6 * (1.0 + abs(upper))):
        return LP_CONVERGED
    return RUNNING


@njit(cache=True)
def primal_value(n_vars, deg, voff, vstates, evar, eoff, uz, fkind, tab, toff, p, qe, qt):
    """The primal objective of the factor copies: Σ_α [θ_α·q_α + Σ_i θ_i/deg_i·q_iα] plus the isolated
    variables' θ_i·p_i (the LP-MAP value at convergence). Structured factors' blocks are not included."""
    prim = 0.0
    for i in range(n_vars):
        if deg[i] == 0:
            for s in range(vstates[i]):
                prim += uz[voff[i] + s] * p[voff[i] + s]
    for e in range(evar.size):
        i = evar[e]
        for s in range(vstates[i]):
            prim += uz[voff[i] + s] / deg[i] * qe[eoff[e] + s]
    for f in range(fkind.size):
        if fkind[f] == DENSE:
            for c in range(toff[f], toff[f + 1]):
                if qt[c] != 0.0 and np.isfinite(tab[c]):
                    prim += tab[c] * qt[c]
    return prim


@njit(cache=True)
def initial_eta(vals):
    """η of a fresh iterate: 0.3 × the mean absolute deviation of the finite scores ``vals`` (0.1 when they
    do not spread; η has the units of a score, and residual balancing adapts it). One definition for
    ``FactorGraph.new_state`` and the fused graph family, so both start from the same bits."""
    total = 0.0
    count = 0
    for x in vals:
        if np.isfinite(x):
            total += x
            count += 1
    if count == 0:
        return 0.3
    mean = total / count
    dev = 0.0
    for x in vals:
        if np.isfinite(x):
            dev += abs(x - mean)
    spread = dev / count
    return 0.3 * spread if spread > 0 else 0.1


@njit(cache=True)
def first_chunk(pair_fast, toff, n_vars, chunk_seconds):
    """Iterations of the driver's first compiled chunk: about ``chunk_seconds`` by a pessimistic estimate of an
    iteration's cost (a closed-form pair ~100 ns, measured 25 ns; another factor ~5 µs, a 3-state table's
    active set, or ~100 ns per table entry for large tables, measured ~35 ns), 1 to 500 iterations, so that a
    time limit and Ctrl-C are honoured on large tables too. One definition for ``FactorGraph.ad3`` and the
    fused graph family, so that both run the same chunks."""
    n_pair = 0
    rest = 0.0
    for f in range(pair_fast.size):
        if pair_fast[f]:
            n_pair += 1
        else:
            rest += max(5e-6, 1e-7 * (toff[f + 1] - toff[f]))
    estimate = 1e-7 * n_pair + rest + 1e-8 * n_vars
    return int(min(max(chunk_seconds / max(estimate, 1e-9), 1.0), 500.0))


@njit(cache=True)
def _roundings(p, qt, order, efac, n_vars, vstates, voff, vptr, vedge, vallow, u, fkind, fparam, fptr, evar, tab,
               toff, scal, best_y, y_work, y_prev, have_prev):
    """The two roundings of the iterate (per variable + repair, and sequential along ``order`` from the table
    marginals), each improved by local search and scored exactly; the best kept in ``scal[S_LOWER]`` /
    ``best_y``. ``y_prev`` / ``have_prev``: each rounding's previous labeling (a repeat is skipped: it
    cannot improve the best)."""
    for rounding in range(2):
        if rounding == 0:
            round_and_repair(p, n_vars, voff, vallow, fkind, fparam, fptr, evar, y_work)
        else:
            round_sequential(p, qt, order, efac, n_vars, vstates, voff, vptr, vedge, vallow, fkind, fparam,
                             fptr, evar, toff, y_work)
        # the roundings settle long before the bound does: skip the local search and the
        # scoring when this rounding repeats its previous labeling
        same = have_prev[rounding]
        for i in range(n_vars):
            if y_prev[rounding, i] != y_work[i]:
                same = False
                y_prev[rounding, i] = y_work[i]
        have_prev[rounding] = True
        if same:
            continue
        local_search(y_work, n_vars, vstates, voff, vptr, vedge, efac, u, fkind, fparam, fptr, evar, tab,
                     toff, 20)
        val = score_labels(y_work, n_vars, voff, u, fkind, fparam, fptr, evar, vstates, tab, toff)
        if val > scal[S_LOWER]:
            scal[S_LOWER] = val
            best_y[:] = y_work


@njit(cache=True)
def ad3_finish(n_vars, vstates, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, order, efac, u, tab,
               pair_fast, p, lam, qe, qt, scal, best_y, y_work, tol_res, tol_gap, tol_lp, stop_upper):
    """The evaluation closing a run that stopped RUNNING (its budget or time limit, between two evaluations of
    :func:`ad3_chunk`): the bound g at the last multipliers, the roundings, the primal objective, then the
    stopping tests; returns their status. It changes no iterate, so a run's iterates never depend on it."""
    vallow = np.isfinite(u)
    uz = np.where(vallow, u, 0.0)
    work = np.empty(eoff[evar.size])
    g = dual_bound(n_vars, deg, vptr, vedge, voff, vallow, uz, fkind, fparam, fptr, evar, eoff, vstates, tab, toff,
                   lam, work, pair_fast)
    if g < scal[S_UPPER]:
        scal[S_UPPER] = g
    _roundings(p, qt, order, efac, n_vars, vstates, voff, vptr, vedge, vallow, u, fkind, fparam, fptr, evar, tab,
               toff, scal, best_y, y_work, np.zeros((2, n_vars), dtype=np.int64), np.zeros(2, dtype=np.bool_))
    scal[S_PRIMAL] = primal_value(n_vars, deg, voff, vstates, evar, eoff, uz, fkind, tab, toff, p, qe, qt)
    status = bound_status(scal[S_UPPER], scal[S_LOWER], tol_gap, stop_upper)
    if status == RUNNING:
        status = lp_status(scal[S_UPPER], scal[S_LOWER], scal[S_PRIMAL], scal[S_RP], scal[S_RD], tol_res, tol_lp)
    return status


# --------------------------------------------------------------------------- the AD3 loop
@njit(cache=True)
def ad3_chunk(n_vars, vstates, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff,
              order, efac, u, tab, pair_fast, p, lam, qe, qt, acfg, aw, acount, ainv, scal, best_y, y_work,
              n_iter, bound_every, tau_step, tol_res, tol_gap, tol_lp, max_inner, adapt_until, stop_upper, settled):
    """Run up to ``n_iter`` AD3 iterations in place; return a status code.

    State (``p, lam, qe, qt``, active sets and their carried inverses ``ainv`` (:func:`inverse_layout`),
    ``scal``, ``best_y``, ``settled``) persists across calls, so the
    caller runs the loop in chunks (returning to Python keeps Ctrl-C and time limits honoured). Everything a
    call does is a function of the iteration count ``scal[S_ITER]`` alone, never of where a chunk ends: the
    iterates, bounds, roundings, η changes and stopping tests of a run are the same bits whatever its chunk
    lengths (the caller ends a run that stops RUNNING with :func:`ad3_finish`). ``settled`` (one flag per
    factor, all True at a run's start) carries the skipping of settled tables from one call to the next.
    ``pair_fast`` flags the tables solved in closed form (:func:`binary_pairs`).

    The dual value g(λ) (the best kept in ``scal[S_UPPER]``): when every factor is such a table, at
    every iteration, fused into the local-QP loop (each table's maximum at the multipliers the
    iteration starts from, re-centred per variable by means kept by the multiplier update); else
    every ``bound_every`` iterations by :func:`dual_bound`.
    Every ``bound_every`` iterations: two roundings (per variable, and sequential along ``order`` from
    the table marginals) + repair + local search, scored exactly (the best kept in ``scal[S_LOWER]`` /
    ``best_y``), the primal objective (when the residuals are below ``tol_res``), and η rebalanced
    (:func:`rebalance_eta`) while fewer than
    ``adapt_until`` iterations have run (then frozen: ADMM converges for a fixed η, and balancing
    that never stops can keep toggling η and stall, measured on 100-node loopy graphs).
    Returns (see :func:`bound_status`, :func:`lp_status`) GAP_CLOSED, LP_CONVERGED, INFEASIBLE,
    BELOW_TARGET (the bound reached ``stop_upper``: branch-and-bound pruning, time-to-precision
    benchmarks), else RUNNING. ``bound_every <= 0``: no bounds, roundings or η changes at all (the
    caller evaluates them: graphs with structured factors).
    """
    n_f = fkind.size
    vallow = np.isfinite(u)
    uz = np.where(vallow, u, 0.0)
    # each factor's share of the unary scores, θ_i / deg(i), per state
    share = np.empty(p.size)
    for i in range(n_vars):
        for s in range(voff[i], voff[i + 1]):
            share[s] = uz[s] / deg[i] if deg[i] > 0 else uz[s]
    # the fused bound: every factor is a table over two variables (closed-form pairs and the lean active set
    # both give their term of g in the local-QP sweep; structured factors: the caller bounds)
    fused = bound_every > 0
    for f in range(n_f):
        if not pair_fast[f] and not (fkind[f] == DENSE and fptr[f + 1] - fptr[f] == 2):
            fused = False
    wsf, wsi = pair_workspace(fkind, fptr, toff, aoff)
    ioff = inverse_layout(fkind, fptr, aoff)
    if ainv.size < ioff[n_f]:
        raise ValueError("ad3_chunk: ainv is smaller than inverse_layout's size")
    smax = 1
    for i in range(n_vars):
        smax = max(smax, vstates[i])
    xw = np.zeros((4, smax))  # per table: η × the targets of its two variables (rows 0, 1), g's multipliers (2, 3)
    old_ws = np.zeros(2 * smax)
    # skipping settled tables (as the C++ AD3 caches factors): a table solved by pair_qp whose copies are
    # integral and equal, to CACHE_TOL, to their previous values and to the consensus leaves its variables
    # inactive; a table none of whose variables is active next iteration has the same inputs (p and λ move
    # by at most η·CACHE_TOL) and keeps its answer, its term of g still computed exactly. Every variable of
    # another kind of factor counts as active; everything is solved after η changes and every CACHE_RESET
    # iterations (the first of a run included). ``settled[f]`` False: table f must be solved next iteration.
    vact = np.ones(n_vars, dtype=np.bool_)
    fact = settled
    reset = False
    caching = False  # no table for pair_qp (binary pairs only, say): no bookkeeping at all
    for f in range(n_f):
        if not pair_fast[f] and fkind[f] == DENSE and fptr[f + 1] - fptr[f] == 2:
            caching = True
    n_e = evar.size
    target = np.empty(eoff[n_e])
    work = np.empty(eoff[n_e])
    # per incidence r of a variable, the first entry of its edge's copy (one indirection less)
    vent = np.empty(vedge.size, dtype=np.int64)
    for r in range(vedge.size):
        vent[r] = eoff[vedge[r]]
    # isolated variables: decided alone; their best allowed score is their share of g
    g_iso = 0.0
    for i in range(n_vars):
        if deg[i] == 0:
            best = -1
            for s in range(voff[i + 1] - voff[i]):
                p[voff[i] + s] = 0.0
                if vallow[voff[i] + s] and (best < 0 or uz[voff[i] + s] > uz[voff[i] + best]):
                    best = s
            if best >= 0:
                p[voff[i] + best] = 1.0
                g_iso += uz[voff[i] + best]
            else:
                g_iso = NEG
    # off = θ_i/deg_i - mean_α λ_iα per (variable, state): with it, θ_i/deg_i + λ_iα - mean is the
    # re-centred multiplier of g (Σ_α λ_iα = 0 then holds exactly); kept finite even when unused (pair_qp
    # skips configurations by comparing their terms)
    off = np.empty(p.size)
    for i in range(n_vars):
        d = deg[i]
        for s in range(vstates[i]):
            acc = 0.0
            for r in range(vptr[i], vptr[i + 1]):
                acc += lam[eoff[vedge[r]] + s]
            off[voff[i] + s] = share[voff[i] + s] - (acc / d if d > 0 else 0.0)
    # the settled tables' terms of g, kept between sweeps: the best entry (-1: none), its margin over the
    # second best, the size of the entries' parts (for the rounding allowance), and the cumulated drifts
    # wdrift of the two variables' multipliers at the sweep (a function of this call's iterates only, so
    # chunks stay the same bits: a new call sweeps again)
    gm_arg = np.full(n_f, -1, dtype=np.int64)
    gm_slack = np.zeros(n_f)
    gm_scale = np.zeros(n_f)
    gm_da = np.zeros(n_f)
    gm_db = np.zeros(n_f)
    wdrift = np.zeros(n_vars)
    track = caching and fused  # the drifts serve the settled tables' terms of g only
    y_prev = np.zeros((2, n_vars), dtype=np.int64)
    have_prev = np.zeros(2, dtype=np.bool_)
    eta = scal[S_ETA]
    status = RUNNING
    for _ in range(n_iter):
        half_inv = 0.5 / eta
        g = g_iso
        if int(scal[S_ITER]) % CACHE_RESET == 0:
            reset = True
            # every table is solved: the drifts restart from zero (a sum of few terms keeps its rounding
            # within the allowance) and each settled table sweeps again
            wdrift[:] = 0.0
            gm_arg[:] = -1
        if caching:
            vact[:] = False
        # 1. local QPs, targets a_iα = p_i + (θ_i/deg_i + λ_iα)/η
        for f in range(n_f):
            if pair_fast[f]:
                # binary pairwise table: the closed form inline (the commonest factor; a call with
                # every array argument costs more than the arithmetic)
                ea = fptr[f]
                ia, ib = evar[ea], evar[ea + 1]
                ta, tb = eoff[ea], eoff[ea + 1]
                va, vb = voff[ia], voff[ib]
                t0 = toff[f]
                th00, th01, th10, th11 = tab[t0], tab[t0 + 1], tab[t0 + 2], tab[t0 + 3]
                la0, la1, lb0, lb1 = lam[ta], lam[ta + 1], lam[tb], lam[tb + 1]
                if fused:
                    # this table's term of g at the λ the iteration starts from
                    wa0, wa1 = off[va] + la0, off[va + 1] + la1
                    wb0, wb1 = off[vb] + lb0, off[vb + 1] + lb1
                    g += max(max(th00 + wa0 + wb0, th01 + wa0 + wb1), max(th10 + wa1 + wb0, th11 + wa1 + wb1))
                # c = ½(1 - a(0) + a(1)) with a = p + (θ_i/deg + λ)/η, plus the table's own linear part
                c1 = 0.5 * (1.0 - p[va] + p[va + 1]) + half_inv * (share[va + 1] - share[va] + la1 - la0
                                                                   + th10 - th00)
                c2 = 0.5 * (1.0 - p[vb] + p[vb + 1]) + half_inv * (share[vb + 1] - share[vb] + lb1 - lb0
                                                                   + th01 - th00)
                c12 = half_inv * (th00 - th01 - th10 + th11)
                z1, z2, z12 = pair_closed_form(c1, c2, c12)
                _store_pair(qt, qe, t0, ta, tb, z1, z2, z12)
                if caching:
                    vact[ia] = True
                    vact[ib] = True
                continue
            if fkind[f] == DENSE and fptr[f + 1] - fptr[f] == 2:
                # any other pairwise table: the lean active set, scores η·a = η·p + θ_i/deg_i + λ directly
                ea = fptr[f]
                ia, ib = evar[ea], evar[ea + 1]
                ta, tb = eoff[ea], eoff[ea + 1]
                va, vb = voff[ia], voff[ib]
                Sa, Sb = vstates[ia], vstates[ib]
                if not reset and not fact[f]:  # settled: its answer stands
                    if fused:
                        # its term of g, max_c θ(c) + w_a[a] + w_b[b]. The entries move by at most the drifts
                        # of w_a and w_b since the last sweep: while twice that stays below the sweep's margin
                        # (best - second best, less a rounding allowance), the best entry is the same and its
                        # value, computed by the same expression, the same bits; else the sweep (inline: most
                        # tables at many states are settled, and a call costs more than a small table's sweep)
                        ca = gm_arg[f]
                        if ca >= 0 and (2.0 * ((wdrift[ia] - gm_da[f]) + (wdrift[ib] - gm_db[f]))
                                        + 1e-12 * (gm_scale[f] + wdrift[ia] + wdrift[ib]) < gm_slack[f]):
                            a = ca // Sb
                            b = ca - a * Sb
                            g += tab[toff[f] + ca] + (off[va + a] + lam[ta + a]) + (off[vb + b] + lam[tb + b])
                            continue
                        wmax = 0.0
                        for s in range(Sa):
                            xw[2, s] = off[va + s] + lam[ta + s]
                            wmax = max(wmax, abs(off[va + s]) + abs(lam[ta + s]))
                        wbmax = 0.0
                        for s in range(Sb):
                            xw[3, s] = off[vb + s] + lam[tb + s]
                            wbmax = max(wbmax, abs(off[vb + s]) + abs(lam[tb + s]))
                        gmax = NEG
                        second = NEG
                        thmax = 0.0
                        arg = -1
                        c = toff[f]
                        for a in range(Sa):
                            oka = vallow[va + a]
                            wa = xw[2, a]
                            for b in range(Sb):
                                th = tab[c]
                                c += 1
                                if oka and vallow[vb + b] and th != NEG:
                                    v = th + wa + xw[3, b]
                                    thmax = max(thmax, abs(th))
                                    if v > gmax:
                                        second = gmax
                                        gmax = v
                                        arg = c - 1 - toff[f]
                                    elif v > second:
                                        second = v
                        g += gmax
                        if gmax != NEG:
                            gm_arg[f] = arg
                            gm_da[f] = wdrift[ia]
                            gm_db[f] = wdrift[ib]
                            gm_slack[f] = gmax - second if second != NEG else np.inf
                            # the allowance covers the rounding of every entry (a few ulps of its parts' size)
                            # while w drifts by up to half the margin
                            gm_scale[f] = 1.0 + thmax + wmax + wbmax + (gm_slack[f] if second != NEG else 0.0)
                        else:
                            gm_arg[f] = -1
                    continue
                for s in range(Sa):
                    xw[2, s] = off[va + s] + lam[ta + s]
                for s in range(Sb):
                    xw[3, s] = off[vb + s] + lam[tb + s]
                for s in range(Sa):
                    xw[0, s] = eta * p[va + s] + share[va + s] + lam[ta + s]
                    old_ws[s] = qe[ta + s]
                for s in range(Sb):
                    xw[1, s] = eta * p[vb + s] + share[vb + s] + lam[tb + s]
                    old_ws[Sa + s] = qe[tb + s]
                gf, acount[f] = pair_core(Sa, Sb, ta, tb, va, vb, toff[f], aoff[f], aoff[f + 1] - aoff[f], ioff[f],
                                          acount[f], eta, max_inner, vallow, tab, xw, acfg, aw, qe, qt, wsf, wsi,
                                          ainv)
                fact[f] = False
                for s in range(Sa):
                    x = qe[ta + s]
                    if (abs(x - old_ws[s]) > CACHE_TOL or abs(x - p[va + s]) > CACHE_TOL
                            or (x > CACHE_TOL and x < 1.0 - CACHE_TOL)):
                        vact[ia] = True
                for s in range(Sb):
                    x = qe[tb + s]
                    if (abs(x - old_ws[Sa + s]) > CACHE_TOL or abs(x - p[vb + s]) > CACHE_TOL
                            or (x > CACHE_TOL and x < 1.0 - CACHE_TOL)):
                        vact[ib] = True
                if gf == NEG:
                    vact[ia] = True
                    vact[ib] = True
                if fused:
                    g += gf
                continue
            for e in range(fptr[f], fptr[f + 1]):
                vact[evar[e]] = True
            if fkind[f] == STRUCT:
                continue  # solved by the Python driver, which wrote its copies qe
            for e in range(fptr[f], fptr[f + 1]):
                i = evar[e]
                for s in range(vstates[i]):
                    t = eoff[e] + s
                    target[t] = p[voff[i] + s] + (share[voff[i] + s] + lam[t]) / eta
            local_qp(f, fkind, fparam, fptr, evar, eoff, voff, vstates, vallow, tab, toff, target, eta,
                     acfg, aw, aoff, acount, qe, qt, max_inner, pair_fast)
        if fused and g < scal[S_UPPER]:
            scal[S_UPPER] = g
        reset = False
        if caching:
            for i in range(n_vars):
                if vact[i]:
                    for r in range(vptr[i], vptr[i + 1]):
                        fact[efac[vedge[r]]] = True
        # 2. consensus (λ sums to zero per variable, so it drops out) and 3. multipliers
        r_d = 0.0
        r_p = 0.0
        step = tau_step * eta
        for i in range(n_vars):
            d = deg[i]
            if d == 0:
                continue
            drift = 0.0  # the largest change of a multiplier of g, off + λ, at this variable (for gm_*)
            for s in range(vstates[i]):
                acc = 0.0
                for r in range(vptr[i], vptr[i + 1]):
                    acc += qe[vent[r] + s]
                new = acc / d
                diff = new - p[voff[i] + s]
                r_d += d * diff * diff
                p[voff[i] + s] = new
                lsum = 0.0
                if track:
                    dl = 0.0
                    for r in range(vptr[i], vptr[i + 1]):
                        t = vent[r] + s
                        gap = qe[t] - new
                        r_p += gap * gap
                        lo = lam[t]
                        lam[t] -= step * gap
                        lsum += lam[t]
                        dl = max(dl, abs(lam[t] - lo))
                    o = share[voff[i] + s] - lsum / d
                    drift = max(drift, dl + abs(o - off[voff[i] + s]))
                    off[voff[i] + s] = o
                else:
                    for r in range(vptr[i], vptr[i + 1]):
                        t = vent[r] + s
                        gap = qe[t] - new
                        r_p += gap * gap
                        lam[t] -= step * gap
                        lsum += lam[t]
                    off[voff[i] + s] = share[voff[i] + s] - lsum / d
            wdrift[i] += drift
        r_d *= eta * eta
        scal[S_RP] = r_p
        scal[S_RD] = r_d
        scal[S_ITER] += 1
        if bound_every <= 0:
            continue
        full = int(scal[S_ITER]) % bound_every == 0
        if full and not fused:
            g = dual_bound(n_vars, deg, vptr, vedge, voff, vallow, uz, fkind, fparam, fptr, evar, eoff, vstates,
                           tab, toff, lam, work, pair_fast)
            if g < scal[S_UPPER]:
                scal[S_UPPER] = g
        if full:
            _roundings(p, qt, order, efac, n_vars, vstates, voff, vptr, vedge, vallow, u, fkind, fparam, fptr, evar,
                       tab, toff, scal, best_y, y_work, y_prev, have_prev)
            if r_p < tol_res and r_d < tol_res:  # lp_status needs it only then
                scal[S_PRIMAL] = primal_value(n_vars, deg, voff, vstates, evar, eoff, uz, fkind, tab, toff, p, qe, qt)
        if full or fused:
            status = bound_status(scal[S_UPPER], scal[S_LOWER], tol_gap, stop_upper)
            if status != RUNNING:  # the run ends here: report the LP value of this iterate, not a stale one
                scal[S_PRIMAL] = primal_value(n_vars, deg, voff, vstates, evar, eoff, uz, fkind, tab, toff, p, qe, qt)
                break
        if full:
            status = lp_status(scal[S_UPPER], scal[S_LOWER], scal[S_PRIMAL], r_p, r_d, tol_res, tol_lp)
            if status != RUNNING:
                break
            if scal[S_ITER] < adapt_until:
                new_eta = rebalance_eta(eta, r_p, r_d)
                if new_eta != eta:
                    fact[:] = True  # every table is solved at the new η
                eta = new_eta
                scal[S_ETA] = eta
    scal[S_ETA] = eta
    return status
