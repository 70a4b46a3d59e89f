"""Weight constraints (``Model.nonnegative_blocks``): every solver keeps its iterates feasible, and
the certified methods reach the constrained optimum with a valid duality gap."""

from __future__ import annotations

import numpy as np
import pytest
from _reference import exact_primal

import structopt as so
from structopt.solvers import bcfw, casimir_svrg, dual_extragradient, frank_wolfe, sgd, ssg, svrg


class NonNegativeTransitions(so.ChainModel):
    """A chain model whose transition weights must stay >= 0 (attractive pairs only)."""

    nonnegative_blocks = ("pairwise",)


def _problem(seed: int = 0, n: int = 10) -> so.SSVMProblem:
    rng = np.random.default_rng(seed)
    model = NonNegativeTransitions(3, 3)
    X = [rng.normal(size=(int(rng.integers(1, 4)), 3)) for _ in range(n)]
    # labels that switch state often: the unconstrained optimum wants negative self-transition weights
    Y = [np.arange(len(x)) % 3 for x in X]
    return so.SSVMProblem(model, X, Y, so.Hamming(), 0.1)


def _pairwise(problem, w):
    return problem.model.unpack(w)["pairwise"]


def test_problem_exposes_the_constraint():
    problem = _problem()
    assert problem.constrained and problem.nonnegative_indices.size == 9
    assert problem.fused() is None  # the fused kernels do not project
    w = -np.ones(problem.n_params)
    projected = problem.project_weights(w)
    assert np.all(_pairwise(problem, projected) == 0) and np.all(problem.model.unpack(projected)["unary"] == -1)
    free = so.SSVMProblem(so.ChainModel(3, 3), problem.X, problem.Y, so.Hamming(), 0.1)
    assert not free.constrained and free.project_weights(w) is w


def test_the_constraint_is_active_here():
    problem = _problem()
    free = so.SSVMProblem(so.ChainModel(3, 3), problem.X, problem.Y, so.Hamming(), 0.1)
    _, w_free = exact_primal(free)
    assert _pairwise(free, w_free).min() < -0.05  # otherwise the tests below prove nothing


@pytest.mark.parametrize("run", [
    lambda p: bcfw(p, max_passes=8, random_state=0),
    lambda p: bcfw(p, max_passes=8, random_state=0, averaging="none", fused=False),
    lambda p: frank_wolfe(p, max_passes=8),
    lambda p: ssg(p, max_passes=8, random_state=0, averaging="weighted"),
    lambda p: sgd(p, max_passes=8, random_state=0),
    lambda p: sgd(p, mu=0.1, max_passes=8, random_state=0),
    lambda p: svrg(p, mu=0.1, max_passes=8, random_state=0),
    lambda p: casimir_svrg(p, max_passes=8, random_state=0),
    lambda p: dual_extragradient(p, max_passes=8),
], ids=["bcfw", "bcfw-last", "fw", "ssg", "sgd", "sgd-smooth", "svrg", "casimir", "extragradient"])
def test_every_solver_returns_feasible_weights(run):
    problem = _problem()
    result = run(problem)
    assert _pairwise(problem, result.w).min() >= 0.0
    for record in result.trace:
        assert np.isfinite(record["primal"])
        if "gap" in record:
            assert record["gap"] >= -1e-10
            assert record["primal"] - record["dual"] == pytest.approx(record["gap"], abs=1e-10)


@pytest.mark.parametrize("solver", ["bcfw", "fw", "extragradient"])
def test_certified_methods_reach_the_constrained_optimum(solver):
    problem = _problem(seed=1)
    f_star, _ = exact_primal(problem)
    if solver == "bcfw":
        result = bcfw(problem, max_passes=400, eval_every=50, random_state=0)
    elif solver == "fw":
        result = frank_wolfe(problem, max_passes=400)
    else:
        result = dual_extragradient(problem, max_passes=400, eval_every=50)
    last = result.trace[-1]
    assert last["dual"] <= f_star + 1e-7  # weak duality against the exact constrained optimum
    assert last["primal"] >= f_star - 1e-7
    assert last["primal"] - f_star < 2e-2 * max(1.0, f_star)


def test_bad_constraint_declaration_is_refused():
    class Wrong(so.ChainModel):
        nonnegative_blocks = ("transitions",)

    with pytest.raises(so.InvalidInputError, match="transitions"):
        so.SSVMProblem(Wrong(2, 2), [np.ones((2, 2))], [np.array([0, 1])], so.Hamming(), 0.1)
