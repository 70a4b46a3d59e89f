"""Every solver on an LPStructure problem: runs and approaches the exact optimum, or refuses clearly."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from _reference import exact_primal

import structopt as so
from structopt.errors import NotSupportedError
from structopt.solvers import get_solver


@pytest.fixture(scope="module")
def problem():
    # independent sets of a 5-cycle (an odd cycle: the LP description is fractional), 2 features per entry
    rng = np.random.default_rng(0)
    z = cp.Variable(5, boolean=True)
    structure = so.LPStructure(z, [z[j] + z[(j + 1) % 5] <= 1 for j in range(5)])
    model = so.FeatureModel(structure, n_features=2)
    w_true = np.array([1.0, -0.5])
    X = [rng.normal(size=(5, 2)) for _ in range(6)]
    Y = [structure.argmax(model.potentials(x, w_true + rng.normal(scale=0.8, size=2))) for x in X]
    return so.SSVMProblem(model, X, Y, so.Hamming(), lam=0.1)


@pytest.fixture(scope="module")
def optimum(problem):
    return exact_primal(problem)[0]


@pytest.mark.parametrize(("name", "options", "passes", "slack"), [
    ("bcfw", {"random_state": 0}, 30, 0.02),
    ("fw", {}, 30, 0.1),
    ("ssg", {"random_state": 0, "averaging": "weighted"}, 30, 0.2),
    ("sgd", {"random_state": 0}, 10, 0.5),
    ("svrg", {"random_state": 0, "mu": 0.1, "learning_rate": 0.3}, 10, 0.1),  # default step 1/L is slow here
    ("casimir", {"random_state": 0}, 6, 0.5),
    ("extragradient", {}, 10, 0.5),
])
def test_solver_runs_on_lp_structure(problem, optimum, name, options, passes, slack):
    result = get_solver(name)(problem, max_passes=passes, **options)
    final = result.trace[-1]["primal"]
    assert np.isfinite(final) and final == pytest.approx(problem.primal(result.w))
    assert optimum - 1e-6 <= final <= optimum + slack, (final, optimum)
    if "gap" in result.trace[-1] and result.trace[-1]["gap"] is not None:
        assert result.trace[-1]["gap"] >= -1e-9


@pytest.mark.parametrize(("name", "options"), [
    ("casimir", {"kind": "entropy", "random_state": 0}),
    ("sgd", {"mu": 0.1, "kind": "entropy", "random_state": 0}),
    ("svrg", {"kind": "entropy", "random_state": 0}),
    ("extragradient", {"geometry": "entropic"}),
])
def test_entropy_smoothing_is_refused_with_the_reason(problem, name, options):
    with pytest.raises(NotSupportedError, match="#P-hard"):
        get_solver(name)(problem, max_passes=1, **options)
