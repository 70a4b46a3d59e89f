"""GridModel: adjoint identities, compact statistics, input validation, supermodularity, a small SSVM."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import Hamming
from structopt.models.grid import GridInput, GridModel
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.structures.base import flatten, inner, unflatten
from structopt.structures.grid import GridPotentials

F, E = 4, 2


def random_input(H: int, W: int, rng: np.random.Generator) -> GridInput:
    return GridInput(rng.normal(size=(H, W, F)), rng.uniform(size=(H, W - 1, E)), rng.uniform(size=(H - 1, W, E)))


def random_weights(model: GridModel, rng: np.random.Generator) -> np.ndarray:
    w = rng.normal(size=model.n_params)
    if model.pairwise:
        model.unpack(w)["pairwise"][:] = np.abs(model.unpack(w)["pairwise"])
    return w


@pytest.mark.parametrize("pairwise", [True, False])
def test_adjoint_identity_and_sqnorm(pairwise, rng):
    model = GridModel(F, E, pairwise=pairwise)
    for H, W in [(1, 1), (2, 3), (4, 2)]:
        x = model.validate_input(random_input(H, W, rng))
        w = rng.normal(size=model.n_params)
        theta = model.structure.expand(model.potentials(x, w))
        mu = unflatten(rng.normal(size=flatten(theta).size), theta)
        g = model.features(x, mu)
        assert inner(theta, mu) == pytest.approx(float(w @ g), rel=1e-10, abs=1e-10)
        assert model.features_sqnorm(x, mu) == pytest.approx(float(g @ g), rel=1e-10)


@pytest.mark.parametrize("pairwise", [True, False])
def test_reduce_stats_has_the_potentials_layout(pairwise, rng):
    model = GridModel(F, E, pairwise=pairwise)
    x = model.validate_input(random_input(3, 2, rng))
    w = random_weights(model, rng)
    theta = model.potentials(x, w)
    y = rng.integers(0, 2, size=(3, 2))
    stats = model.structure.stats(y, theta)
    reduced = model.reduce_stats(stats)
    assert flatten(reduced).size == flatten(theta).size
    assert inner(theta, reduced) == pytest.approx(model.structure.score(theta, y))
    np.testing.assert_allclose(model.features(x, reduced), model.joint_feature(x, y))


def test_blocks_and_nonnegative_declaration():
    model = GridModel(F, E)
    assert model.blocks == [("unary", (F, 2)), ("pairwise", (E,))]
    assert model.nonnegative_blocks == ("pairwise",)
    unary_only = GridModel(F, E, pairwise=False)
    assert unary_only.blocks == [("unary", (F, 2))] and unary_only.nonnegative_blocks == ()


def test_nonnegative_pairwise_weights_give_supermodular_potentials(rng):
    model = GridModel(F, E)
    x = model.validate_input(random_input(3, 4, rng))
    w = random_weights(model, rng)
    y = model.structure.argmax(model.potentials(x, w))
    assert y.shape == (3, 4)
    model.unpack(w)["pairwise"][:] = [-1.0, -2.0]
    with pytest.raises(NotSupportedError, match="17 of 17 edges violate it"):
        model.structure.argmax(model.potentials(x, w))


@pytest.mark.parametrize("x, message", [
    ((np.zeros((2, 3, F)),), "GridInput"),
    (GridInput(np.zeros((2, 3, F + 1)), np.zeros((2, 2, E)), np.zeros((1, 3, E))), r"pixel features must have shape"),
    (GridInput(np.zeros((2, 3, F)), np.zeros((2, 3, E)), np.zeros((1, 3, E))), r"horizontal edge features"),
    (GridInput(np.zeros((2, 3, F)), np.zeros((2, 2, E)), np.zeros((2, 3, E))), r"vertical edge features"),
    (GridInput(np.zeros((2, 3, F)), -np.ones((2, 2, E)), np.zeros((1, 3, E))), r">= 0"),
    (GridInput(np.full((2, 3, F), np.nan), np.zeros((2, 2, E)), np.zeros((1, 3, E))), r"NaN"),
])
def test_bad_inputs_name_the_example(x, message):
    with pytest.raises(InvalidInputError, match="example 7: .*" + message):
        GridModel(F, E).validate_input(x, 7)


def test_bad_constructor_arguments():
    with pytest.raises(InvalidInputError, match="n_features"):
        GridModel(0, E)
    with pytest.raises(InvalidInputError, match="n_edge_features"):
        GridModel(F, -1)


def small_problem(rng: np.random.Generator, n: int = 6, lam: float = 0.1) -> SSVMProblem:
    model = GridModel(F, E)
    X, Y = [], []
    for _ in range(n):
        H, W = rng.integers(1, 4), rng.integers(2, 4)
        x = random_input(H, W, rng)
        y = (x.pixels[..., 0] + 0.3 * rng.normal(size=(H, W)) > 0).astype(np.int64)
        X.append(x)
        Y.append(y)
    return SSVMProblem(model, X, Y, Hamming(), lam)


def test_max_oracle_matches_enumeration(rng):
    problem = small_problem(rng)
    w = random_weights(problem.model, rng)
    loss = Hamming()
    for i in range(problem.n):
        theta = problem.theta(i, w)
        H, W = problem.Y[i].shape
        gold = problem.structure.score(theta, problem.Y[i])
        best = max(loss(problem.Y[i], y) + problem.structure.score(theta, y) - gold
                   for y in (np.array(bits).reshape(H, W) for bits in itertools.product((0, 1), repeat=H * W)))
        result = problem.max_oracle(i, w)
        assert result.value == pytest.approx(best, abs=1e-9)


def test_bcfw_trains_a_grid_model_with_nonnegative_pairwise_weights(rng):
    # on these random labels smoothing does not pay: unconstrained, the pairwise weights would go
    # negative and the min-cut oracle would refuse the iterate
    problem = small_problem(rng, n=8)
    result = bcfw(problem, max_passes=8, random_state=0)
    assert np.all(problem.model.unpack(result.w)["pairwise"] >= 0)
    trace = result.trace
    assert all(r["gap"] >= -1e-9 for r in trace)
    assert trace[-1]["primal"] < trace[0]["primal"]
    assert trace[-1]["primal"] - trace[-1]["dual"] == pytest.approx(trace[-1]["gap"], abs=1e-9)


def test_shared_tables_are_accepted_by_the_adjoint(rng):
    # loss terms come with shared zero (2, 2) tables; the adjoint broadcasts them over the edges
    model = GridModel(F, E)
    x = model.validate_input(random_input(2, 3, rng))
    mu = GridPotentials(rng.normal(size=(2, 3, 2)), np.eye(2), np.zeros((2, 2)))
    full = model.structure.expand(mu)
    np.testing.assert_allclose(model.features(x, mu), model.features(x, full))
