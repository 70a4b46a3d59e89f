"""BCFW for expensive oracles (structopt.solvers._gap_blocks): caches, gap sampling, pairwise/away steps.

The certificates of every option combination against exact optima are swept in
``tests/test_certificates.py``; here: the no-hit cache is plain BCFW, the active sets stay exact
convex combinations, the stored gaps are the exact block gaps, counts, resume and refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
from _reference import exact_primal, random_chain_problem, random_multiclass_problem

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.fused import select
from structopt.solvers import bcfw
from structopt.solvers._blocks import BlockState, PythonBlockUpdater
from structopt.solvers._gap_blocks import (
    UNIFORM_MIX,
    FusedGapUpdater,
    GapBlockUpdater,
    GapState,
    draw_blocks,
    gap_chunk,
)


def chain():
    return random_chain_problem(0, n=6, n_states=3, max_len=4, lam=0.05)


def multiclass():
    return random_multiclass_problem(1, n=12, n_classes=4, lam=0.02)


def assert_same_blocks(a: BlockState, b: BlockState) -> None:
    for key in ("w", "m", "ell_i", "r"):
        np.testing.assert_allclose(getattr(a, key), getattr(b, key), rtol=1e-12, atol=1e-13, err_msg=key)
    assert a.ell == pytest.approx(b.ell, rel=1e-12, abs=1e-14)
    assert a.v == pytest.approx(b.v, rel=1e-12, abs=1e-14)
    assert a.k == b.k


@pytest.mark.parametrize("make", [chain, multiclass])
@pytest.mark.parametrize("cache_size", [0, 5])
def test_a_cache_without_hits_is_plain_bcfw(make, cache_size):
    problem = make()
    order = np.random.default_rng(3).integers(0, problem.n, size=5 * problem.n)
    plain = BlockState.initial(problem)
    PythonBlockUpdater(problem, plain).run(order, line_search=True, averaging=True)
    mine = BlockState.initial(problem)
    gap = GapState.initial(problem, mine, active_sets=False)
    # a hit needs a cached gap of at least 1e9 times the last exact one and 1e9 G / n: never
    updater = GapBlockUpdater(problem, mine, gap, cache_size=cache_size, cache_factor=1e9, cache_nu=1e9, steps="fw")
    updater.run(order, line_search=True, averaging=True)
    assert gap.hits == 0 and gap.calls == order.size
    assert_same_blocks(mine, plain)
    assert all(corners.shape[0] <= cache_size for corners in gap.corners)  # FW steps: evicted at the limit


@pytest.mark.parametrize("steps", ["pairwise", "away"])
def test_active_sets_stay_exact_convex_combinations(steps):
    problem = multiclass()
    blocks = BlockState.initial(problem)
    gap = GapState.initial(problem, blocks, active_sets=True)
    updater = GapBlockUpdater(problem, blocks, gap, cache_size=2, cache_factor=0.01, cache_nu=0.001, steps=steps)
    updater.run_sampled(8 * problem.n, np.random.default_rng(0), line_search=True, averaging=False)
    assert gap.hits > 0
    for i in range(problem.n):
        alpha = gap.alpha[i]
        assert np.all(alpha >= 0.0) and alpha.sum() == pytest.approx(1.0, abs=1e-12)
        seg = slice(blocks.offsets[i], blocks.offsets[i + 1])
        np.testing.assert_allclose(alpha @ gap.corners[i], blocks.m[seg], atol=1e-10)
        assert alpha @ gap.corner_loss[i] == pytest.approx(blocks.ell_i[i], abs=1e-10)
    # w is the adjoint of the blocks' statistics
    w = problem.zeros()
    gold, offsets = problem.compact_gold_stats()
    from structopt.potentials import unflatten
    for i in range(problem.n):
        seg = slice(offsets[i], offsets[i + 1])
        problem.adjoint(i, unflatten(gold[seg] - blocks.m[seg], problem.like(i)), w, 1.0 / (problem.lam * problem.n))
    np.testing.assert_allclose(blocks.w, w, atol=1e-10)


@pytest.mark.parametrize("fused", [None, False])
def test_refreshed_gaps_are_the_exact_block_gaps(fused):
    problem = chain()
    result = bcfw(problem, max_passes=3, sampling="gap", averaging="none", random_state=0, fused=fused)
    assert result.info["fused"] == (fused is None)  # the chain's fused pass stores the gaps it computes
    state, gap = result.info["state"], result.info["gap"]
    w = problem.project_weights(state.w)
    # refreshed by the last evaluation at the current iterate: they sum to its duality gap
    assert gap.gaps.sum() == pytest.approx(result.trace[-1]["gap"], rel=1e-9, abs=1e-12)
    assert np.all(gap.gaps >= -1e-12)
    # and each is the line-search numerator of BCFW at w towards the oracle's answer
    for i in range(problem.n):
        d = problem.decode(i, w)
        stats = problem.compact_stats(d.y, d.theta)
        from structopt.potentials import flatten
        seg = slice(state.offsets[i], state.offsets[i + 1])
        g = float((flatten(stats) - state.m[seg]) @ flatten(d.theta)) / problem.n - state.ell_i[i] + d.loss / problem.n
        assert gap.gaps[i] == pytest.approx(g, rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------- gap sampling's draws
def test_draws_visit_unvisited_blocks_first_and_are_distinct():
    rng = np.random.default_rng(0)
    gaps = np.array([np.inf, 0.5, np.inf, 0.0, 2.0, np.inf, 1e-3])
    order = draw_blocks(gaps, rng, 5)
    assert sorted(order[:3]) == [0, 2, 5]  # the unvisited ones first
    assert len(set(order.tolist())) == 5 and set(order[3:]) <= {1, 3, 4, 6}
    assert sorted(draw_blocks(gaps, rng, 7)) == list(range(7))  # a whole chunk: every block once
    assert set(draw_blocks(gaps, rng, 2)) <= {0, 2, 5}
    # the draws are a function of the gaps and the generator's state
    np.testing.assert_array_equal(draw_blocks(gaps, np.random.default_rng(4), 6),
                                  draw_blocks(gaps.copy(), np.random.default_rng(4), 6))


def test_draws_follow_the_gaps_mixed_with_uniform():
    rng = np.random.default_rng(1)
    gaps = np.array([0.0, 1.0, 3.0, -1e-15, 6.0])  # a rounding-negative gap counts 0
    n, total = gaps.size, 10.0
    expected = (1.0 - UNIFORM_MIX) * np.maximum(gaps, 0.0) / total + UNIFORM_MIX / n
    draws = 40000
    first = np.bincount([draw_blocks(gaps, rng, 1)[0] for _ in range(draws)], minlength=n) / draws
    # 5 standard deviations of a binomial frequency
    assert np.all(np.abs(first - expected) <= 5 * np.sqrt(expected * (1 - expected) / draws)), (first, expected)
    assert np.all(first > 0)  # no block starves: a zero gap is still drawn (uniform mixing)
    # without replacement: the second block of a chunk is drawn among the others in proportion to p
    second = np.bincount([draw_blocks(gaps, rng, 2)[1] for _ in range(draws)], minlength=n) / draws
    p = expected / expected.sum()
    want = np.array([sum(p[j] * p[i] / (1 - p[j]) for j in range(n) if j != i) for i in range(n)])
    assert np.all(np.abs(second - want) <= 5 * np.sqrt(want * (1 - want) / draws)), (second, want)
    # all gaps zero: uniform
    zero = np.bincount([draw_blocks(np.zeros(n), rng, 1)[0] for _ in range(draws // 4)], minlength=n) / (draws // 4)
    np.testing.assert_allclose(zero, 1.0 / n, atol=5 * np.sqrt(0.16 / (draws // 4)))


def test_chunks_are_a_share_of_the_blocks():
    assert [gap_chunk(n) for n in (1, 2, 6, 300)] == [1, 1, 3, 150]


# --------------------------------------------------------------------------- the fused gap path
def test_fused_gap_steps_equal_the_generic_ones_with_the_same_draws():
    problem = random_chain_problem(2, n=14, n_states=3, max_len=5, lam=0.05)
    view = select(problem, True)
    runs = {}
    for name in ("generic", "fused"):
        blocks = BlockState.initial(problem)
        gap = GapState.initial(problem, blocks, active_sets=False)
        updater = (FusedGapUpdater(problem, blocks, gap, view) if name == "fused" else
                   GapBlockUpdater(problem, blocks, gap, cache_size=0, cache_factor=0.25, cache_nu=0.01, steps="fw"))
        drawn = []
        step = updater.run

        def spy(order, *args, step=step, drawn=drawn):
            drawn.append(np.array(order))
            step(order, *args)

        updater.run = spy
        rng = np.random.default_rng(5)
        for line_search, averaging in ((True, True), (False, True), (True, False)):
            updater.run_sampled(3 * problem.n, rng, line_search, averaging)
        updater.refresh(blocks.w)
        runs[name] = (blocks, gap, drawn, updater.averaged())
    (a, ga, da, avg_a), (b, gb, db, avg_b) = runs["generic"], runs["fused"]
    assert len(da) == len(db) > 9
    for x, y in zip(da, db, strict=True):  # the same draws, chunk by chunk
        np.testing.assert_array_equal(x, y)
    for key in ("w", "m", "ell_i"):
        np.testing.assert_allclose(getattr(b, key), getattr(a, key), rtol=1e-10, atol=1e-12, err_msg=key)
    assert (a.k, a.ell) == (b.k, pytest.approx(b.ell, rel=1e-11))
    np.testing.assert_allclose(gb.gaps, ga.gaps, rtol=1e-9, atol=1e-12)
    assert ga.calls == gb.calls == 9 * problem.n and ga.hits == gb.hits == 0
    np.testing.assert_allclose(avg_b[0], avg_a[0], rtol=1e-9, atol=1e-12)  # the weighted average


@pytest.mark.parametrize("averaging", ["weighted", "none"])
@pytest.mark.parametrize("line_search", [True, False])
def test_fused_gap_sampling_runs_equal_the_generic_runs(averaging, line_search):
    problem = random_chain_problem(3, n=12, n_states=3, max_len=5, lam=0.05)
    options = {"sampling": "gap", "averaging": averaging, "line_search": line_search, "max_passes": 14,
               "eval_every": 0.5, "random_state": 1}
    fused, generic = bcfw(problem, **options), bcfw(problem, fused=False, **options)
    assert fused.info["fused"] and not generic.info["fused"]
    assert len(fused.trace) == len(generic.trace) == 28
    for a, b in zip(fused.trace, generic.trace, strict=True):
        assert (a["passes"], a["oracle_calls"], a["cache_hits"]) == (b["passes"], b["oracle_calls"], b["cache_hits"])
        for key in ("primal", "dual", "gap", "dual_iterate"):
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    np.testing.assert_allclose(fused.w, generic.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fused.info["gap"].gaps, generic.info["gap"].gaps, rtol=1e-8, atol=1e-12)


def test_counts_oracle_calls_and_cache_hits():
    problem = multiclass()
    n = problem.n
    result = bcfw(problem, max_passes=6, cache_size=5, averaging="none", random_state=0)
    last = result.trace[-1]
    assert last["cache_hits"] > 0
    assert last["oracle_calls"] + last["cache_hits"] == 6 * n  # one per step, no refresh passes
    # gap sampling with the weighted average refreshes its gaps by a counted exact pass at the first
    # evaluation REFRESH_PASSES (10) passes after the last refresh (the start)
    result = bcfw(problem, max_passes=13, sampling="gap", random_state=0)
    calls = [r["oracle_calls"] for r in result.trace]
    assert calls == [k * n for k in range(1, 11)] + [12 * n, 13 * n, 14 * n]
    assert result.info["gap"].refreshed == 10 * n


def test_gap_bcfw_reaches_the_exact_optimum():
    problem = multiclass()
    optimum = exact_primal(problem)[0]
    for options in ({"sampling": "gap", "cache_size": 10, "steps": "pairwise"},
                    {"sampling": "gap", "cache_size": 10, "steps": "away"}):
        result = bcfw(problem, max_passes=60, averaging="none", random_state=0, **options)
        last = result.trace[-1]
        assert last["dual"] <= optimum + 1e-9 <= last["primal"] + 2e-9
        assert last["gap"] < 1e-4 * optimum, options
        assert last["oracle_calls"] < 60 * problem.n  # the cache served some steps


def strip(trace):
    return [{k: v for k, v in r.items() if k != "time"} for r in trace]


@pytest.mark.parametrize("options", [
    {"sampling": "gap"},  # the fused chain pass
    {"sampling": "gap", "averaging": "none", "line_search": False},
    {"sampling": "gap", "fused": False},
    {"sampling": "gap", "cache_size": 4, "steps": "pairwise"},
    {"sampling": "gap", "cache_size": 3, "steps": "away", "averaging": "none"},
    {"sampling": "uniform", "cache_size": 2},
])
def test_resume_equals_uninterrupted(tmp_path, options):
    problem = chain()
    first = bcfw(problem, max_passes=14, eval_every=0.5, random_state=7, **options)
    ckpt = tmp_path / "gap.npz"
    bcfw(problem, max_passes=2, eval_every=0.5, random_state=7, checkpoint=ckpt, **options)
    bcfw(problem, max_passes=11, eval_every=0.5, random_state=3, resume=ckpt, checkpoint=ckpt, **options)
    resumed = bcfw(problem, max_passes=14, eval_every=0.5, random_state=9, resume=ckpt, **options)
    assert strip(resumed.trace) == strip(first.trace)
    np.testing.assert_array_equal(resumed.w, first.w)
    a, b = resumed.info["gap"], first.info["gap"]
    np.testing.assert_array_equal(a.gaps, b.gaps)
    for i in range(problem.n):
        np.testing.assert_array_equal(a.corners[i], b.corners[i])
        np.testing.assert_array_equal(a.alpha[i], b.alpha[i])


def test_a_resumed_gap_state_that_does_not_fit_is_refused():
    import copy

    from structopt.solvers.base import RunOptions
    from structopt.solvers.bcfw import BCFWMethod, BCFWOptions, BCFWState

    problem = chain()
    result = bcfw(problem, max_passes=2, cache_size=3, steps="pairwise", random_state=0)
    options = BCFWOptions(cache_size=3, cache_factor=0.25, cache_nu=0.01, steps="pairwise")
    method = BCFWMethod(problem, options, RunOptions(random_state=0))
    good = BCFWState(result.info["state"], np.random.default_rng(0), result.info["gap"])
    assert method.resume(good) is good

    def broken(edit):
        state = copy.deepcopy(good)
        edit(state.gap)
        return state

    cases = {"corners": lambda g: g.corners.__setitem__(1, g.corners[1][:, :-1]),
             "blocks": lambda g: g.alpha.pop(),
             "weights": lambda g: g.alpha.__setitem__(0, g.alpha[0] * 2.0),
             "values": lambda g: setattr(g, "gaps", g.gaps[:-1]),
             "nan": lambda g: g.gaps.__setitem__(2, np.nan),
             "refresh": lambda g: setattr(g, "refreshed", 10 ** 9)}
    for edit in cases.values():
        with pytest.raises(InvalidInputError, match="does not fit this problem"):
            method.resume(broken(edit))
    plain = BCFWState(result.info["state"], np.random.default_rng(0), None)
    with pytest.raises(InvalidInputError, match="without the options"):
        method.resume(plain)


def test_plain_checkpoints_unchanged_and_options_fingerprinted(tmp_path):
    problem = chain()
    plain = tmp_path / "plain.npz"
    bcfw(problem, max_passes=1, random_state=0, checkpoint=plain)
    # the new options at their defaults are plain BCFW: same fingerprint, the resume is accepted
    bcfw(problem, max_passes=2, resume=plain, cache_size=0, steps="fw", cache_factor=0.25, cache_nu=0.01)
    cached = tmp_path / "cached.npz"
    bcfw(problem, max_passes=1, random_state=0, checkpoint=cached, cache_size=3)
    with pytest.raises(InvalidInputError, match="solver options"):
        bcfw(problem, max_passes=2, resume=cached)
    with pytest.raises(InvalidInputError, match="solver options"):
        bcfw(problem, max_passes=2, resume=cached, cache_size=3, cache_factor=0.5)


def test_refusals():
    problem = chain()
    with pytest.raises(NotSupportedError, match="line_search"):
        bcfw(problem, steps="pairwise", line_search=False)
    with pytest.raises(NotSupportedError, match="fused=True"):
        bcfw(problem, cache_size=3, fused=True)
    with pytest.raises(NotSupportedError, match="fused=True"):
        bcfw(problem, sampling="gap", steps="away", fused=True)
    assert bcfw(problem, sampling="gap", fused=True, max_passes=1).info["fused"]  # gap sampling alone
    with pytest.raises(NotSupportedError, match="no fused"):
        bcfw(multiclass(), sampling="gap", fused=True, max_passes=1)
    with pytest.raises(NotSupportedError, match="batch_size"):
        bcfw(problem, sampling="gap", batch_size=2)
    for key, value in (("cache_size", -1), ("cache_size", 1.5), ("cache_factor", 1.0), ("cache_nu", 0.0),
                       ("steps", "frank"), ("sampling", "gaps")):
        with pytest.raises(InvalidInputError, match=key):
            bcfw(problem, **{key: value})


# --------------------------------------------------------------------------- regularisation path
def test_regularization_path_certified_at_every_lambda():
    from structopt.solvers.reg_path import regularization_path

    problem = random_multiclass_problem(2, n=10, n_classes=3, lam=1.0)
    lams = [1.0, 0.3, 0.1, 0.03]
    optima = {lam: exact_primal(problem.with_lam(lam))[0] for lam in lams}
    for options in ({}, {"averaging": "none"},
                    {"sampling": "gap", "cache_size": 5, "steps": "pairwise", "averaging": "none"}):
        points = regularization_path(problem, lams, eps=0.01, max_passes=150, random_state=0,
                                     validate=lambda w: float(w @ w), **options)
        assert [p.lam for p in points] == lams
        assert [p.validation for p in points] == [float(p.w @ p.w) for p in points]
        for point in points:
            assert point.dual <= optima[point.lam] + 1e-9 <= point.primal + 2e-9, (options, point.lam)
            assert problem.with_lam(point.lam).primal(point.w) == pytest.approx(point.primal, rel=1e-12)
            assert point.reached == (point.gap <= 0.01 * point.primal)
            if options:  # the last iterate reaches 1% within the budget at every lambda
                assert point.reached, (options, point.lam)
        if options:  # the warm start pays: the last lambda costs fewer calls than a cold start there
            cold = regularization_path(problem, lams[-1:], eps=0.01, max_passes=150, random_state=0, **options)
            assert points[-1].oracle_calls < cold[0].oracle_calls, options
    assert problem.lam == 1.0  # the caller's problem is untouched


def test_regularization_path_refuses_bad_grids():
    from structopt.solvers.reg_path import regularization_path

    problem = multiclass()
    for lams in ([], [0.1, 0.1], [0.1, 1.0], [1.0, -1.0], [float("nan")]):
        with pytest.raises(InvalidInputError, match="lams"):
            regularization_path(problem, lams)
    with pytest.raises(InvalidInputError, match="eps"):
        regularization_path(problem, [1.0], eps=0.0)
    with pytest.raises(InvalidInputError, match="batch_size"):
        regularization_path(problem, [1.0], batch_size=2)
    with pytest.raises(InvalidInputError, match="steps"):
        regularization_path(problem, [1.0], steps="fast")
