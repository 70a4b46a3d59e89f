"""The one stopping rule (``structopt.solvers.base``) for every solver and fractional budgets.

A run stops at the first evaluation where ``passes >= max_passes``, and overshoots by at most its
method's smallest unit of work:

* one oracle call (1/n pass) for the step methods -- bcfw (also in mini-batches: the last batch is
  cut), ssg, sgd, sgd_nonconvex -- which take exactly ``ceil(max_passes * n)`` steps;
* one SVRG step for svrg and casimir_svrg: a step is counted as two oracle calls (the paper's
  counting), so an odd remainder of the budget ends one call past ``ceil(max_passes * n)``; the
  SGD start (one call per step) is cut like an epoch. Snapshot (full-gradient) passes are not in
  ``passes``: they are counted apart in ``full_grad_passes``;
* one iteration (a whole pass) for frank_wolfe and dual_extragradient, whose ``passes`` count
  iterations;
* prox_linear: the unit of its inner solver (the last subproblem gets the rest of the budget).
"""

from __future__ import annotations

import math

import pytest
from _reference import random_chain_problem, random_multiclass_problem
from test_nonlinear import chain_problem

from structopt.solvers import (
    bcfw,
    casimir_svrg,
    dual_extragradient,
    frank_wolfe,
    prox_linear,
    sgd,
    sgd_nonconvex,
    ssg,
    svrg,
)

BUDGETS = (0.3, 0.51, 1.0, 1.5, 2.0)
N = 11  # odd, so that a two-call step can straddle the budget

# name -> (solver, options, unit): "call" = exactly ceil(max_passes n) calls; "svrg-step" = at most one
# call more; "pass" = exactly ceil(max_passes) iterations
CONVEX = {
    "bcfw": (bcfw, {}, "call"),
    "bcfw-fixed-step": (bcfw, {"line_search": False, "averaging": "none", "sampling": "uniform"}, "call"),
    "bcfw-minibatch": (bcfw, {"batch_size": 4}, "call"),
    "ssg": (ssg, {}, "call"),
    "ssg-weighted": (ssg, {"averaging": "weighted"}, "call"),
    "sgd": (sgd, {}, "call"),
    "sgd-smoothed": (sgd, {"mu": 0.1}, "call"),
    "svrg": (svrg, {}, "svrg-step"),
    "svrg-no-sgd-start": (svrg, {"sgd_init": False}, "svrg-step"),
    "casimir": (casimir_svrg, {}, "svrg-step"),
    "casimir-adapt": (casimir_svrg, {"schedule": "adapt"}, "svrg-step"),
    "frank_wolfe": (frank_wolfe, {}, "pass"),
    "dual_extragradient": (dual_extragradient, {}, "pass"),
    "dual_extragradient-entropic": (dual_extragradient, {"geometry": "entropic"}, "pass"),
}
NONCONVEX = {
    "sgd_nonconvex": (sgd_nonconvex, {}, "call"),
    "prox_linear-casimir": (prox_linear, {"inner_passes": 0.7}, "svrg-step"),
    "prox_linear-svrg": (prox_linear, {"inner": "svrg", "inner_passes": 0.7}, "svrg-step"),
    "prox_linear-sgd": (prox_linear, {"inner": "sgd", "inner_passes": 0.7}, "call"),
    "prox_linear-bcfw": (prox_linear, {"inner": "bcfw", "inner_passes": 0.7}, "call"),
}


@pytest.fixture(scope="module")
def problems():
    return {"multiclass": random_multiclass_problem(0, n=N), "chain": random_chain_problem(1, n=N),
            "nonconvex": chain_problem(2, n=N)}


def check_budget(trace: list[dict], n: int, max_passes: float, unit: str) -> None:
    last = trace[-1]
    calls = math.ceil(max_passes * n - 1e-9 * n)
    assert last["passes"] >= max_passes - 1e-12
    # every earlier evaluation was below the budget: the run stopped at the first one that met it
    assert all(r["passes"] < max_passes - 1e-12 for r in trace[:-1])
    if unit == "call":
        assert last["oracle_calls"] == calls
        assert last["passes"] - max_passes < 1.0 / n
    elif unit == "svrg-step":
        assert calls <= last["oracle_calls"] <= calls + 1
        assert last["passes"] - max_passes < 2.0 / n
    else:
        assert last["passes"] == math.ceil(max_passes - 1e-9)
        assert last["passes"] - max_passes < 1.0


@pytest.mark.parametrize("max_passes", BUDGETS)
@pytest.mark.parametrize("name", sorted(CONVEX))
def test_convex_solvers_meet_fractional_budgets(problems, name, max_passes):
    run, options, unit = CONVEX[name]
    kind = "chain" if name.startswith(("bcfw", "ssg", "frank")) else "multiclass"  # chains: the fused paths
    result = run(problems[kind], max_passes=max_passes, random_state=0, **options)
    check_budget(result.trace, N, max_passes, unit)


@pytest.mark.parametrize("max_passes", BUDGETS)
@pytest.mark.parametrize("name", sorted(NONCONVEX))
def test_nonconvex_solvers_meet_fractional_budgets(problems, name, max_passes):
    run, options, unit = NONCONVEX[name]
    result = run(problems["nonconvex"], max_passes=max_passes, random_state=0, **options)
    check_budget(result.trace, N, max_passes, unit)


@pytest.mark.parametrize("name", ["svrg", "casimir"])
def test_snapshot_passes_are_counted_apart(problems, name):
    run, options, _ = CONVEX[name]
    result = run(problems["multiclass"], max_passes=2.0, random_state=0, **options)
    last = result.trace[-1]
    # SGD start (n calls) then SVRG steps of two calls each, one snapshot per epoch
    assert last["passes"] == pytest.approx(last["oracle_calls"] / N)
    assert last["full_grad_passes"] >= 1
