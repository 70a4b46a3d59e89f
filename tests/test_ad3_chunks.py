"""AD3's run does not depend on the chunks (compiled calls) it is cut into: the driver returns to Python between
chunks only to read the clock and honour Ctrl-C; iterates, bounds, η changes and stopping tests are functions of
the iteration count alone. The fused GraphModel passes (their own chunk schedule) equal the generic path."""

from __future__ import annotations

import numpy as np
import pytest

import structopt as so
from structopt.solvers import bcfw
from structopt.structures import _ad3_kernels as K
from structopt.structures.factor_graph import AD3_TIGHT, FactorGraph, FactorGraphPotentials
from tests.test_ad3 import random_graph
from tests.test_ad3_stopping import _potts_graph


def _run(fg, theta, **options):
    sol, state = fg._ad3(theta, **options)
    return sol, state


def _assert_same_run(a, b):
    (sa, ta), (sb, tb) = a, b
    assert (sa.status, sa.iterations) == (sb.status, sb.iterations)
    for x, y in [(ta.p, tb.p), (ta.lam, tb.lam), (ta.qe, tb.qe), (ta.qt, tb.qt), (ta.scal, tb.scal),
                 (ta.acfg, tb.acfg), (ta.aw, tb.aw), (ta.acount, tb.acount)]:
        np.testing.assert_array_equal(x, y)  # bit for bit
    assert (sa.upper_bound, sa.score, sa.lp_value, sa.optimal) == (sb.upper_bound, sb.score, sb.lp_value, sb.optimal)
    np.testing.assert_array_equal(sa.labels, sb.labels)


def _graphs():
    rng = np.random.default_rng(11)
    graphs = [_potts_graph(rng, 6, S) for S in (2, 3, 5)]  # closed-form pairs; pair_qp tables (skipping)
    graphs += [random_graph(rng, tree=False, ties=k % 2 == 1, max_vars=8, max_states=4) for k in range(4)]  # logic
    return graphs


@pytest.mark.parametrize("options", [{"tol_gap": AD3_TIGHT, "tol_lp": AD3_TIGHT}, {},
                                     {"max_iter": 237, "tol_gap": AD3_TIGHT, "tol_lp": AD3_TIGHT},
                                     {"bound_every": 3, "eta_iters": 40}],
                         ids=["tight", "default", "budget", "bound_every"])
def test_the_run_is_the_same_bits_whatever_its_chunks(options):
    iterations = []
    for fg, theta in _graphs():
        base = _run(fg, theta, chunk_iters=10_000, **options)
        iterations.append(base[0].iterations)
        for chunk in (1, 7):
            _assert_same_run(base, _run(fg, theta, chunk_iters=chunk, **options))
        # chunks sized by the clock (about 1 µs: one iteration each; the default)
        _assert_same_run(base, _run(fg, theta, chunk_seconds=1e-6, **options))
        _assert_same_run(base, _run(fg, theta, **options))
    assert max(iterations) > 100  # runs that η rebalancing, skipping resets and many stopping tests shape


def test_a_budget_between_two_evaluations_ends_with_one():
    # max_iter not a multiple of bound_every: the run's last iterate is still bounded and rounded (ad3_finish)
    rng = np.random.default_rng(4)
    fg, theta = _potts_graph(rng, 6, 4)
    sol, state = _run(fg, theta, max_iter=23, bound_every=10, chunk_iters=5)
    assert sol.status == "max_iter" and sol.iterations == 23
    fl = fg.flat
    work = np.zeros(int(fl.eoff[-1]))
    g = K.dual_bound(fl.n_vars, fl.deg, fl.vptr, fl.vedge, fl.voff, np.isfinite(theta.unary), theta.unary, fl.fkind,
                     fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.vstates, theta.factors, fl.toff, state.lam, work,
                     fg._pair_fast(theta))
    assert sol.upper_bound <= g
    assert sol.lp_value == K.primal_value(fl.n_vars, fl.deg, fl.voff, fl.vstates, fl.evar, fl.eoff, theta.unary,
                                          fl.fkind, theta.factors, fl.toff, state.p, state.qe, state.qt)
    assert sol.trace[-1]["iteration"] == 23


def _loopy_problem(seed: int, S: int, lam: float) -> so.SSVMProblem:
    # loopy graphs (3 nearest neighbours, 25-34 nodes) whose edge features say whether the labels agree: the
    # learnt tables frustrate the LP, and AD3 at the training tolerance runs up to thousands of iterations
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(6):
        N = int(rng.integers(25, 35))
        pos = rng.random((N, 2))
        nbr = np.argsort(np.linalg.norm(pos[:, None] - pos[None], axis=-1), axis=1)[:, 1:4]
        edges = np.unique(np.sort([(i, j) for i in range(N) for j in nbr[i]], axis=1), axis=0).astype(np.int64)
        y = rng.integers(0, S, N)
        nodes = np.hstack([np.eye(S)[y] + rng.normal(size=(N, S)), np.ones((N, 1))])
        agree = 2.0 * (y[edges[:, 0]] == y[edges[:, 1]]) - 1.0
        X.append((nodes, edges, np.stack([agree + rng.normal(size=len(edges)), np.ones(len(edges))], axis=1)))
        Y.append(y)
    return so.SSVMProblem(so.GraphModel(S + 1, 2, S, symmetric=False), X, Y, so.Hamming(), lam=lam)


@pytest.mark.parametrize("case", [(0, 3, 1e-2), (0, 4, 1e-2)])
def test_fused_bcfw_equals_the_generic_path_when_ad3_runs_several_chunks(monkeypatch, case):
    # the generic path forced to 3-iteration chunks; the fused oracle runs its own schedule (the first chunk by
    # K.first_chunk, then 4x + 10): the passes agree, and several AD3 calls outlast the first fused chunk (one
    # the second as well)
    problem = _loopy_problem(*case)
    fused = bcfw(problem, max_passes=3, random_state=0, fused=True)
    runs = []
    original = FactorGraph._ad3

    def three_iteration_chunks(self, theta, **options):
        sol, state = original(self, theta, chunk_iters=3, **options)
        first = int(K.first_chunk(self._pair_fast(theta), self.flat.toff, self.flat.n_vars, 0.1))
        runs.append(int(sol.iterations > first) + int(sol.iterations > first + 4 * first + 10))
        return sol, state

    monkeypatch.setattr(FactorGraph, "_ad3", three_iteration_chunks)
    generic = bcfw(problem, max_passes=3, random_state=0, fused=False)
    assert fused.info["fused"] and not generic.info["fused"]
    assert sum(r > 0 for r in runs) >= 3 and max(runs) == 2, runs
    np.testing.assert_allclose(fused.w, generic.w, rtol=1e-9, atol=1e-9)
    for a, b in zip(fused.trace, generic.trace, strict=True):
        assert a["primal"] == pytest.approx(b["primal"], rel=1e-9, abs=1e-9)
        assert a["gap"] == pytest.approx(b["gap"], rel=1e-7, abs=1e-8)


def test_settled_tables_bound_terms_kept_between_sweeps_are_the_sweeps_bits():
    # strongly attractive 5-state grids: most tables settle, and one long call keeps their terms of g between
    # sweeps (from the best entry while the multipliers' drift stays below its margin), where one-iteration
    # calls sweep every time; the certified bound after each budget, the min of the iterations' g, and the
    # whole run are the same bits
    rng = np.random.default_rng(5)
    for _ in range(2):
        side, S = 5, 5
        n = side * side
        fg = FactorGraph(np.full(n, S))
        edges = [(r * side + c, r * side + c + 1) for r in range(side) for c in range(side - 1)]
        edges += [(r * side + c, (r + 1) * side + c) for r in range(side - 1) for c in range(side)]
        fg.add_pairwise_tables(np.array(edges))
        tables = rng.uniform(0.5, 2.0, size=(len(edges), 1, 1)) * np.eye(S) + rng.normal(0, 0.3, (len(edges), S, S))
        theta = FactorGraphPotentials(rng.normal(size=n * S), tables.ravel())
        for budget in (40, 97, 160, 233):
            options = {"max_iter": budget, "tol_gap": -1.0, "tol_lp": -1.0}
            base = _run(fg, theta, chunk_iters=10_000, **options)
            assert base[0].iterations == budget
            _assert_same_run(base, _run(fg, theta, chunk_iters=1, **options))
