"""The pieces the regularisation path stands on: the run loop's relative stopping rule (``rel_tol``),
the warm restart of the dual blocks at a new lambda, and the path with gap sampling on chains (the fused pass).

The path's certificates against exact optima at every lambda are in ``tests/test_gap_bcfw.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _reference import exact_primal, random_chain_problem, random_multiclass_problem

from structopt.parallel import SerialExecutor
from structopt.potentials import unflatten
from structopt.solvers import bcfw
from structopt.solvers.base import FinishedRun, RunOptions, run
from structopt.solvers.bcfw import BCFWMethod, BCFWOptions
from structopt.solvers.reg_path import regularization_path


def method(problem, **run_options) -> BCFWMethod:
    return BCFWMethod(problem, BCFWOptions(), RunOptions(random_state=0, **run_options), SerialExecutor(problem))


def strip(trace):
    return [{k: v for k, v in r.items() if k != "time"} for r in trace]


def test_rel_tol_stops_at_the_first_record_within_the_relative_gap(tmp_path):
    problem = random_multiclass_problem(3, n=10, n_classes=3, lam=1.0)
    full = bcfw(problem, max_passes=40, random_state=0)
    eps = 0.005
    first = next(k for k, r in enumerate(full.trace) if r["gap"] <= eps * r["primal"])
    assert 0 < first < len(full.trace) - 1  # the rule bites inside the budget
    path = tmp_path / "rel.npz"
    stopped = run(problem, method(problem, max_passes=40, checkpoint=path), rel_tol=eps)
    assert strip(stopped.trace) == strip(full.trace[:first + 1])
    assert "rel_tol" in stopped.info["stop_reason"]
    # a resume whose checkpoint already meets the relative rule returns it unchanged
    with pytest.raises(FinishedRun) as finished:  # (the @solver declaration returns its result)
        run(problem, method(problem, max_passes=40, resume=path), rel_tol=eps)
    again = finished.value.result
    assert again.info["resumed_finished"] and strip(again.trace) == strip(stopped.trace)
    # rel_tol is run control: without it the same checkpoint continues to the budget
    longer = run(problem, method(problem, max_passes=40, resume=path))
    assert strip(longer.trace) == strip(full.trace)


def test_rescale_restart_keeps_the_dual_iterate_at_the_new_lambda():
    problem = random_chain_problem(4, n=8, lam=0.5)
    blocks = bcfw(problem, max_passes=3, random_state=0).info["state"]
    m = blocks.m.copy()
    blocks.rescale_restart(0.5 / 0.05)
    assert (blocks.k, blocks.v, blocks.perm, blocks.fused_index) == (0, 0.0, None, None)
    assert not np.any(blocks.r)
    np.testing.assert_array_equal(blocks.m, m)
    # w = sum_i A_i^T (gold_i - m_i) / (lam n) at the new lambda
    sub = problem.with_lam(0.05)
    gold, offsets = sub.compact_gold_stats()
    w = sub.zeros()
    for i in range(sub.n):
        seg = slice(offsets[i], offsets[i + 1])
        sub.adjoint(i, unflatten(gold[seg] - m[seg], sub.like(i)), w, 1.0 / (sub.lam * sub.n))
    np.testing.assert_allclose(blocks.w, w, rtol=1e-10, atol=1e-12)


def test_the_path_with_gap_sampling_on_chains_is_certified():
    problem = random_chain_problem(5, n=8, n_states=3, max_len=4, lam=1.0)
    lams = [1.0, 0.2, 0.05]
    points = regularization_path(problem, lams, eps=0.01, max_passes=150, random_state=0, sampling="gap",
                                 averaging="none")
    for point in points:
        optimum = exact_primal(problem.with_lam(point.lam))[0]
        assert point.dual <= optimum + 1e-9 <= point.primal + 2e-9
        assert point.reached and point.cache_hits == 0
        assert problem.with_lam(point.lam).primal(point.w) == pytest.approx(point.primal, rel=1e-12)
