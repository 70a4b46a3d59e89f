"""BCFW for expensive oracles (Osokin, Alayrac, Lukasewitz, Dokania, Lacoste-Julien, ICML 2016).

Block gaps, gap sampling, per-block caches of past corners and pairwise / away steps, on top of the
statistics-space :class:`~structopt.solvers._blocks.BlockState` of BCFW (``m_i``, ``l_i``; ``w``
kept as ``sum_i A_i^T (gold_i - m_i) / (lam n)``). A corner of block i is an oracle answer, stored
as its compact statistics ``s`` and loss share ``L / n``; at weights ``w`` (potentials ``theta_i``)
its *score* is ``<s, theta_i> / n + L / n`` and the block gap towards it is its score minus the
score of the iterate, ``<m_i, theta_i> / n + l_i``. The exact block gap (towards the oracle's
answer, the best corner of the whole polytope) is

    g_i = H_i(w) / n + <gold_i - m_i, theta_i> / n - l_i,

the numerator of BCFW's line search; the duality gap is ``sum_i g_i``.

On a visit to block i (:meth:`GapBlockUpdater.step`):

1. *Cache* (``cache_size > 0``): the best cached corner for the current ``w`` costs one dot product
   per corner. Its gap ``g_hat`` is accepted, and the exact oracle skipped, when
   ``g_hat >= max(F g_i, nu G / n)``: ``g_i`` is the block's gap at its last exact oracle call and
   ``G = sum_j g_j`` the global estimate from the stored gaps (the paper's rule, ``F = 0.25``,
   ``nu = 0.01`` by default). Otherwise the oracle is called, its gap stored (with the step number)
   and its answer cached (a copy of an existing corner is not duplicated; past ``cache_size``
   corners the least recently useful inactive one is evicted).
2. *Step*: ``steps="fw"`` moves ``m_i`` towards the chosen corner; ``"pairwise"`` moves weight
   from the away corner (the worst active one) to it; ``"away"`` takes the better of the FW step
   and the step away from the away corner. With ``steps != "fw"`` the block keeps its iterate as
   an explicit convex combination ``m_i = sum_c alpha_c s_c`` of its cached corners (the gold
   output first, weight 1): a corner with weight > 0 is never evicted. Every step is the exact
   line search of the dual quadratic along its direction ``d`` (statistics) with
   ``d_l`` (loss), clipped to the largest step that keeps ``alpha`` in the simplex:

       gamma* = (<d, theta_i> / n + d_l) / (||A_i^T d||^2 / (lam n^2)).

Every step is a feasible ascent step of the dual (a convex combination of corners, exact line
search), so the duality gap reported from an exact evaluation pass stays a certified bound; the
gaps used to *choose* blocks and corners may be stale, and are never reported.

*Gap sampling* (:func:`draw_blocks`) visits the unvisited blocks first, then draws chunks of
:func:`gap_chunk` distinct blocks, each next one with probability proportional to ``(1 - eta) g_i /
G + eta / n`` among those left (``eta =`` :data:`UNIFORM_MIX`: no block starves when its stored gap
is stale-small), each chunk from the gaps as the previous chunk's steps left them. The stored gaps
are refreshed by an exact pass at the current iterate: the evaluation pass itself when it is at
the current iterate (``averaging="none"``; that pass then runs in this process,
:meth:`GapBlockUpdater.exact_pass`), else a counted pass every ``REFRESH_PASSES`` passes
(:mod:`structopt.solvers.bcfw`). Drawing a chunk at a time lets the fused chain pass run it in one
numba call (:class:`FusedGapUpdater`: gap sampling alone, without caches or active sets, whose
steps are BCFW's); both paths draw the same blocks given the same gaps. Corner caches and active
sets stay on the generic operators (``bcfw(fused=True)`` refuses them): where a fused pass exists,
one oracle call (a Viterbi pass) costs about as much as scoring a block's cached corners, so a cache
hit saves little, and the per-block corner lists would have to enter the kernels
(``benchmarks/gap_bcfw_results.md``: on OCR they need 5-9x fewer Viterbi calls but 10x more time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from structopt.archive import state_type
from structopt.errors import InvalidInputError
from structopt.potentials import flatten, unflatten
from structopt.problem import SSVMProblem
from structopt.solvers._blocks import BlockState, FusedBlockUpdater, gamma_line_search

#: share of uniform sampling mixed into gap sampling (a block whose stored gap is stale and small is
#: still drawn about every n / UNIFORM_MIX steps)
UNIFORM_MIX = 0.1
#: gap sampling draws this share of the blocks at a time (at least one), from the gaps of the moment:
#: the fused chain pass runs each chunk in one numba call. On the 300 OCR words (lambda 1, seeds 0-2,
#: averaging="none") chunks of 0.1 / 0.2 / 0.3 / 0.5 / 1 of the blocks reach a 1% gap in 38-39 / 36-38 /
#: 36-40 / 37-39 / 46-47 passes (per-step draws with replacement took 36); a chunk costs a draw (about
#: 16 us) and a numba call (about 5 us) besides its steps.
GAP_CHUNK = 0.5
#: a cached corner counts as a copy of a new answer when its statistics and loss agree to this
_SAME = 1e-12


@state_type
@dataclass
class GapState:
    """What gap sampling, the corner caches and the active sets add to a :class:`BlockState`.

    ``gaps[i]`` is block i's exact gap at its last oracle call (``inf`` before the first one). Block
    i's cache: ``corners[i]`` (one row of compact statistics
    per corner), ``corner_loss[i]`` (loss shares ``L / n``), ``alpha[i]`` (the weights of ``m_i``
    over them when the steps use active sets, else zeros) and ``used[i]`` (the last step at which
    each was chosen). ``calls`` counts exact oracle calls (steps and refresh passes), ``hits`` the
    steps served by a cached corner, ``refreshed`` is the step count at the last refresh pass.
    """

    gaps: np.ndarray
    corners: list
    corner_loss: list
    alpha: list
    used: list
    calls: int = 0
    hits: int = 0
    refreshed: int = 0  # the step count at the last refresh pass (averaging="weighted")

    @classmethod
    def initial(cls, problem: SSVMProblem, blocks: BlockState, active_sets: bool) -> GapState:
        """Empty caches; with ``active_sets`` each block starts at its gold corner (weight 1, loss 0)."""
        n = problem.n
        corners, losses, alpha, used = [], [], [], []
        for i in range(n):
            gold = blocks.m[blocks.offsets[i]:blocks.offsets[i + 1]]
            rows = 1 if active_sets else 0
            corners.append(np.array(gold[None, :] if rows else np.zeros((0, gold.size))))
            losses.append(np.zeros(rows))
            alpha.append(np.ones(rows))
            used.append(np.zeros(rows, dtype=np.int64))
        return cls(gaps=np.full(n, np.inf), corners=corners,
                   corner_loss=losses, alpha=alpha, used=used)

    def check(self, blocks: BlockState, active_sets: bool) -> None:
        """Refuse (one line) a gap state that does not fit ``blocks`` (e.g. a checkpoint's, read back from disk)."""
        n = blocks.ell_i.size
        sizes = np.diff(blocks.offsets)
        problems = []
        if not (isinstance(self.gaps, np.ndarray) and self.gaps.shape == (n,) and self.gaps.dtype == np.float64):
            problems.append(f"gaps are not {n} values")
        elif np.any(np.isnan(self.gaps)) or np.any(self.gaps == -np.inf):
            problems.append("gaps hold NaN or -inf")
        if not (isinstance(self.refreshed, int) and 0 <= self.refreshed <= blocks.k):
            problems.append(f"the last refresh ({self.refreshed!r}) is not a step count up to {blocks.k}")
        lists = (self.corners, self.corner_loss, self.alpha, self.used)
        if not all(isinstance(part, list) and len(part) == n for part in lists):
            problems.append(f"the caches are not {n} blocks")
        else:
            for i in range(n):
                corners, loss, alpha, used = (part[i] for part in lists)
                if not all(isinstance(a, np.ndarray) for a in (corners, loss, alpha, used)):
                    problems.append(f"block {i}'s cache is not arrays")
                elif corners.ndim != 2 or corners.shape[1] != sizes[i] or not (
                        loss.shape == alpha.shape == used.shape == (corners.shape[0],)):
                    problems.append(f"block {i}'s cache has shape {corners.shape}, its statistics {sizes[i]} entries")
                elif not (np.all(np.isfinite(corners)) and np.all(np.isfinite(loss)) and np.all(alpha >= 0.0)):
                    problems.append(f"block {i}'s cache holds non-finite corners or negative weights")
                elif active_sets and abs(float(alpha.sum()) - 1.0) > 1e-9:
                    problems.append(f"block {i}'s active-set weights sum to {float(alpha.sum()):g}, not 1")
                if problems:
                    break
        if problems:
            raise InvalidInputError(f"the gap-BCFW state does not fit this problem: {problems[0]}")

    def restart(self) -> None:
        """Count afresh from step 0 (the regularisation path's warm start at a new lambda, with
        :meth:`BlockState.rescale_restart`): the caches, weights and stored gaps (stale estimates) carry over."""
        self.calls = self.hits = self.refreshed = 0

    def global_gap(self) -> float:
        """Sum of the stored exact block gaps (unvisited blocks count 0)."""
        finite = self.gaps[np.isfinite(self.gaps)]
        return float(np.sum(np.maximum(finite, 0.0)))


def gap_chunk(n: int) -> int:
    """Blocks drawn at once by gap sampling on ``n`` blocks: ``ceil(GAP_CHUNK * n)``."""
    return max(1, math.ceil(GAP_CHUNK * n))


def draw_blocks(gaps: np.ndarray, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count <= n`` distinct blocks drawn by gap sampling from the stored gaps.

    Unvisited blocks (gap ``inf``) come first, in random order; the others are drawn without replacement
    with probabilities ``p_i = (1 - eta) g_i / G + eta / n`` (``eta =`` :data:`UNIFORM_MIX`, ``g_i`` the
    stored gap clipped at 0, ``G`` their sum; uniform when ``G = 0``): sequentially, each next block
    with probability proportional to ``p_i`` among those not yet drawn (Efraimidis-Spirakis keys
    ``E_i / p_i``, ``E_i ~ Exp(1)`` from ``rng``, in increasing order; the numba kernel
    :func:`structopt.solvers._gap_kernels.gap_draw`). Without replacement because the gap of a visited
    block is, after its step, far below its stored value until the next draw.
    """
    from structopt.solvers._gap_kernels import gap_draw  # numba: loaded with the first draw

    out = np.empty(count, dtype=np.int64)
    gap_draw(gaps, rng.standard_exponential(gaps.size), count, UNIFORM_MIX, out)
    return out


def load_draw_kernel() -> None:
    """Load (or compile, once per machine) the draw kernel now, before a run's clock starts."""
    draw_blocks(np.full(2, np.inf), np.random.default_rng(0), 1)
    draw_blocks(np.ones(2), np.random.default_rng(0), 1)


def sampled_steps(updater, count: int, rng: np.random.Generator, line_search: bool, averaging: bool) -> None:
    """``count`` steps of ``updater`` (generic or fused) on blocks drawn by gap sampling, in chunks of
    :func:`gap_chunk` blocks, each chunk drawn from the gaps as they are after the previous one. The
    same draws on both paths given the same gaps: the fused one runs a whole chunk in one call."""
    chunk = gap_chunk(updater.problem.n)
    for start in range(0, count, chunk):
        updater.run(draw_blocks(updater.gap.gaps, rng, min(chunk, count - start)), line_search, averaging)


class GapBlockUpdater:
    """Block steps with gap sampling, corner caches and pairwise / away steps (generic operators).

    Parameters
    ----------
    problem : SSVMProblem
    state : BlockState
        The dual blocks, updated in place (the same arithmetic as BCFW's for its own part).
    gap : GapState
        Caches, gaps and counters, updated in place.
    cache_size : int
        Corners kept per block (0: no cache, every step calls the oracle).
    cache_factor, cache_nu : float
        ``F`` and ``nu`` of the cache-hit rule (see the module docstring).
    steps : {"fw", "pairwise", "away"}
    """

    compiled = False

    def __init__(self, problem: SSVMProblem, state: BlockState, gap: GapState, *, cache_size: int,
                 cache_factor: float, cache_nu: float, steps: str):
        self.problem, self.state, self.gap = problem, state, gap
        self.cache_size, self.factor, self.nu, self.steps = cache_size, cache_factor, cache_nu, steps
        self.active_sets = steps != "fw"

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)``, see :meth:`BlockState.averaged`."""
        return self.state.averaged(self.problem)

    # ------------------------------------------------------------------ block gaps
    def refresh(self, w: np.ndarray) -> None:
        """Store every block's exact gap at the current iterate's feasible weights ``w`` (one oracle pass)."""
        self.exact_pass(w)

    def exact_pass(self, w: np.ndarray) -> np.ndarray:
        """One exact oracle pass at feasible weights ``w``: store every block's exact gap and return the hinge
        losses ``H_i(w)`` (the oracle calls are the caller's to count). The potentials of each example
        are computed once for both (on grids they cost half an oracle call)."""
        p, st = self.problem, self.state
        n = p.n
        gold, offsets = p.compact_gold_stats(stored=True)  # the kept (narrow, exact) array: no copy per pass
        hinge = np.empty(n)
        for i in range(n):
            seg = slice(offsets[i], offsets[i + 1])
            d = p.decode(i, w)
            hinge[i] = p.hinge(i, d)
            self.gap.gaps[i] = hinge[i] / n + float((gold[seg] - st.m[seg]) @ flatten(d.theta)) / n - st.ell_i[i]
        return hinge

    # ------------------------------------------------------------------ steps
    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        """One step on each block of ``order`` in turn."""
        for i in order:
            self.step(int(i), line_search, averaging)

    def run_sampled(self, count: int, rng: np.random.Generator, line_search: bool, averaging: bool = True) -> None:
        """``count`` steps on blocks drawn by gap sampling (:func:`sampled_steps`)."""
        sampled_steps(self, count, rng, line_search, averaging)

    def _cache_answer(self, i: int, stats: np.ndarray, loss_s: float, theta_flat: np.ndarray) -> int:
        """Index of the answer in block i's cache, inserting it (and evicting past the size limit)."""
        g = self.gap
        corners, losses = g.corners[i], g.corner_loss[i]
        if corners.shape[0]:
            # a copy has the same score: compare in full only the corners whose score is within rounding
            scores = corners @ theta_flat
            score = float(stats @ theta_flat)
            close = np.flatnonzero(np.abs(scores - score) <= 1e-9 * (1.0 + abs(score)))
            for c in close:
                if abs(losses[c] - loss_s) <= _SAME and np.max(np.abs(corners[c] - stats)) <= _SAME:
                    return int(c)
        limit = max(self.cache_size, 1)
        keep = np.arange(corners.shape[0])
        excess = corners.shape[0] + 1 - limit
        if excess > 0:
            # evict the least recently chosen corners that carry no weight (active ones stay: m_i is their
            # convex combination), down to the limit where possible
            free = np.flatnonzero(g.alpha[i] <= 0.0) if self.active_sets else keep
            drop = free[np.argsort(g.used[i][free], kind="stable")[:excess]]
            keep = np.setdiff1d(keep, drop)
        g.corners[i] = np.vstack([corners[keep], stats[None, :]])
        g.corner_loss[i] = np.append(losses[keep], loss_s)
        g.alpha[i] = np.append(g.alpha[i][keep], 0.0)
        g.used[i] = np.append(g.used[i][keep], self.state.k)
        return g.corners[i].shape[0] - 1

    def step(self, i: int, line_search: bool, averaging: bool) -> None:
        """One step on block i: a cached corner when good enough, else the oracle's answer (see module)."""
        p, st, g = self.problem, self.state, self.gap
        n = p.n
        seg = slice(st.offsets[i], st.offsets[i + 1])
        w = p.project_weights(st.w)
        theta = p.theta(i, w)
        theta_flat = flatten(theta)
        current = float(st.m[seg] @ theta_flat) / n + st.ell_i[i]
        scores = None
        target = -1
        if self.cache_size and g.corners[i].shape[0] and np.isfinite(g.gaps[i]):
            scores = g.corners[i] @ theta_flat / n + g.corner_loss[i]
            best = int(np.argmax(scores))
            if scores[best] - current >= max(self.factor * g.gaps[i], self.nu * g.global_gap() / n):
                target = best
                g.hits += 1
        if target < 0:  # the exact oracle
            y = p.augmented_argmax(i, theta)
            loss_s = p.loss_of(i, y, theta) / n
            stats = flatten(p.compact_stats(y, theta))
            g.calls += 1
            g.gaps[i] = float(stats @ theta_flat) / n + loss_s - current
            if self.cache_size or self.active_sets:
                target = self._cache_answer(i, stats, loss_s, theta_flat)
                scores = g.corners[i] @ theta_flat / n + g.corner_loss[i]
            else:  # plain BCFW step, nothing kept
                self._move(i, seg, stats - st.m[seg], loss_s - st.ell_i[i], theta, line_search, 1.0, averaging)
                return
        g.used[i][target] = st.k
        s_fw, l_fw = g.corners[i][target], g.corner_loss[i][target]
        if not self.active_sets:
            self._move(i, seg, s_fw - st.m[seg], l_fw - st.ell_i[i], theta, line_search, 1.0, averaging)
            return
        alpha = g.alpha[i]
        active = np.flatnonzero(alpha > 0.0)
        away = int(active[np.argmin(scores[active])])
        s_a, l_a = g.corners[i][away], g.corner_loss[i][away]
        if self.steps == "pairwise":
            gamma = self._move(i, seg, s_fw - s_a, l_fw - l_a, theta, line_search, alpha[away], averaging)
            alpha[target] += gamma
            alpha[away] -= gamma
        elif scores[target] - current >= current - scores[away]:  # FW step
            gamma = self._move(i, seg, s_fw - st.m[seg], l_fw - st.ell_i[i], theta, line_search, 1.0, averaging)
            alpha *= 1.0 - gamma
            alpha[target] += gamma
        else:  # away step: m_i + gamma (m_i - s_a), gamma <= alpha_a / (1 - alpha_a)
            limit = alpha[away] / (1.0 - alpha[away]) if alpha[away] < 1.0 else 0.0
            gamma = self._move(i, seg, st.m[seg] - s_a, st.ell_i[i] - l_a, theta, line_search, limit, averaging)
            alpha *= 1.0 + gamma
            alpha[away] -= gamma
        # a weight driven to (numerically) zero leaves the active set exactly (a pairwise or away step
        # clipped at its limit removes the corner: "drop steps")
        alpha[alpha < 1e-14] = 0.0
        alpha /= alpha.sum()

    def _move(self, i: int, seg: slice, direction: np.ndarray, d_loss: float, theta, line_search: bool,
              limit: float, averaging: bool) -> float:
        """Step block i along ``(direction, d_loss)`` by the exact line search clipped to ``[0, limit]``
        (or BCFW's fixed step); returns the step taken."""
        p, st = self.problem, self.state
        n, lam = p.n, p.lam
        direction_pot = unflatten(direction, theta)
        if line_search:
            slope = float(direction @ flatten(theta)) / n + d_loss
            gamma = gamma_line_search(slope, p.adjoint_sqnorm(i, direction_pot) / (lam * n * n), limit)
        else:
            gamma = min(limit, 2.0 * n / (st.k + 2.0 * n))
        st.k += 1
        if gamma <= 0.0:
            return 0.0
        p.adjoint(i, direction_pot, st.w, -gamma / (lam * n))
        st.move_block(i, seg, direction, d_loss, gamma, 0.5 * st.k * (st.k - 1.0) if averaging else 0.0)
        return gamma


class FusedGapUpdater:
    """Gap sampling on a fused pass (no caches, FW steps): BCFW's fused steps that also store each visited
    block's exact gap, the line-search numerator they compute anyway.

    The same steps and gaps as :class:`GapBlockUpdater` with ``cache_size=0``, ``steps="fw"`` (up to the
    order of floating-point additions), so the same draws given the same gaps (``tests/test_gap_bcfw.py``).

    Parameters
    ----------
    problem : SSVMProblem
    state : BlockState
    gap : GapState
        Its ``gaps`` and ``calls`` are updated in place (``hits`` stays 0: no cache).
    fused : FusedProblem
        The problem's fused view (:func:`structopt.fused.select`).
    """

    compiled = True

    def __init__(self, problem: SSVMProblem, state: BlockState, gap: GapState, fused):
        self.problem, self.state, self.gap, self.fused = problem, state, gap, fused
        self.blocks = FusedBlockUpdater(problem, state, fused)

    def averaged(self) -> tuple[np.ndarray, float]:
        """``(w_bar, l_bar)`` with the adjoint pass fused (see :meth:`BlockState.averaged`)."""
        return self.blocks.averaged()

    def warm_up(self, verbose: bool = False) -> None:
        """Load the kernels (both ``bcfw_steps`` specialisations: with and without stored gaps)."""
        self.fused.warm_up("hinge_terms", "adjoint_sum", verbose=verbose)
        none = np.zeros(0, dtype=np.int64)
        self.blocks.run(none, True, True)
        self.blocks.run(none, True, True, gaps=self.gap.gaps)

    def refresh(self, w: np.ndarray) -> None:
        """Store every block's exact gap at the current iterate ``w`` (one fused pass, no step)."""
        self._check_current(w)
        self.blocks.block_gaps(self.gap.gaps)

    def _check_current(self, w: np.ndarray) -> None:
        if w is not self.state.w and not np.array_equal(w, self.state.w):
            raise RuntimeError("the fused gap pass refreshes the gaps at the current iterate only")

    def exact_pass(self, w: np.ndarray) -> np.ndarray:
        """Store every block's exact gap at the current iterate ``w`` (the state's weights, unconstrained on
        a fused path) and return the hinge losses ``H_i(w)``; the oracle calls are the caller's to count."""
        self.refresh(w)
        return self.fused.hinge_terms(w)[0].copy()

    def run(self, order: np.ndarray, line_search: bool, averaging: bool = True) -> None:
        """One fused step on each block of ``order``, storing the blocks' gaps."""
        self.blocks.run(order, line_search, averaging, gaps=self.gap.gaps)
        self.gap.calls += len(order)

    def run_sampled(self, count: int, rng: np.random.Generator, line_search: bool, averaging: bool = True) -> None:
        """``count`` steps on blocks drawn by gap sampling (:func:`sampled_steps`)."""
        sampled_steps(self, count, rng, line_search, averaging)


__all__ = ["GAP_CHUNK", "UNIFORM_MIX", "FusedGapUpdater", "GapBlockUpdater", "GapState", "draw_blocks", "gap_chunk",
           "load_draw_kernel", "sampled_steps"]
