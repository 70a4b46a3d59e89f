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
from structopt.solvers import bcfw
from structopt.solvers._blocks import BlockState, PythonBlockUpdater
from structopt.solvers._gap_blocks import GapBlockUpdater, GapState


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


def test_refreshed_gaps_are_the_exact_block_gaps():
    problem = chain()
    result = bcfw(problem, max_passes=3, sampling="gap", averaging="none", random_state=0)
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


def test_counts_oracle_calls_and_cache_hits():
    problem = multiclass()
    n = problem.n
    result = bcfw(problem, max_passes=6, cache_size=5, averaging="none", random_state=0)
    last = result.trace[-1]
    assert last["cache_hits"] > 0
    assert last["oracle_calls"] + last["cache_hits"] == 6 * n  # one per step, no refresh passes
    # gap sampling with the weighted average refreshes its gaps by a counted exact pass per evaluation
    # interval after the first (the blocks are all visited once by then)
    result = bcfw(problem, max_passes=4, sampling="gap", random_state=0)
    calls = [r["oracle_calls"] for r in result.trace]
    assert calls == [n, 2 * n + n, 3 * n + 2 * n, 4 * n + 3 * n]


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
    {"sampling": "gap", "cache_size": 4, "steps": "pairwise"},
    {"sampling": "gap", "cache_size": 3, "steps": "away", "averaging": "none"},
    {"sampling": "uniform", "cache_size": 2},
])
def test_resume_equals_uninterrupted(tmp_path, options):
    problem = chain()
    first = bcfw(problem, max_passes=5, eval_every=0.5, random_state=7, **options)
    ckpt = tmp_path / "gap.npz"
    bcfw(problem, max_passes=2, eval_every=0.5, random_state=7, checkpoint=ckpt, **options)
    resumed = bcfw(problem, max_passes=5, eval_every=0.5, random_state=7, resume=ckpt, **options)
    assert strip(resumed.trace) == strip(first.trace)
    np.testing.assert_array_equal(resumed.w, first.w)
    a, b = resumed.info["gap"], first.info["gap"]
    np.testing.assert_array_equal(a.gaps, b.gaps)
    for i in range(problem.n):
        np.testing.assert_array_equal(a.corners[i], b.corners[i])
        np.testing.assert_array_equal(a.alpha[i], b.alpha[i])


def test_a_resumed_gap_state_that_does_not_fit_is_refused():
    import copy

    from structopt.solvers.bcfw import BCFWMethod, BCFWState

    problem = chain()
    result = bcfw(problem, max_passes=2, cache_size=3, steps="pairwise", random_state=0)
    options = {"cache_size": 3, "cache_factor": 0.25, "cache_nu": 0.01, "steps": "pairwise"}
    method = BCFWMethod(problem, None, line_search=True, averaging="weighted", sampling="perm", batch_size=1,
                        eval_every=1, fused=None, progress=False, random_state=0, gap_options=options)
    good = BCFWState(result.info["state"], np.random.default_rng(0), result.info["gap"])
    assert method.resume(good) is good

    def broken(edit):
        state = copy.deepcopy(good)
        edit(state.gap)
        return state

    cases = {"corners": lambda g: g.corners.__setitem__(1, g.corners[1][:, :-1]),
             "blocks": lambda g: g.alpha.pop(),
             "weights": lambda g: g.alpha.__setitem__(0, g.alpha[0] * 2.0),
             "values": lambda g: setattr(g, "gaps", g.gaps[:-1])}
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
