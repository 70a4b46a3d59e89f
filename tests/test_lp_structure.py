"""LPStructure: constraint extraction, exact ILP oracles vs enumeration, LP relaxation, projection, loss."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures._ilp import ILP, solve_cpsat
from structopt.structures.base import brute_force_topk, flatten
from structopt.structures.lp import LPStructure, VectorPotentials
from structopt.validate import check_structure, random_instance


def random_constraints(rng: np.random.Generator, n: int) -> tuple[cp.Variable, list]:
    """Random small integer constraint sets (often infeasible or non-integral)."""
    z = cp.Variable(n, boolean=True)
    constraints = []
    for _ in range(int(rng.integers(0, 4))):
        a = rng.integers(-2, 3, size=n)
        constraints.append(a @ z <= int(rng.integers(-1, 4)))
    if rng.random() < 0.3:
        constraints.append(cp.sum(z) == int(rng.integers(0, n + 1)))
    if rng.random() < 0.2:
        constraints.append(z[0] >= z[n - 1])
    return z, constraints


def random_structures(seed: int, count: int, max_n: int = 7, solver: str = "auto"):
    rng = np.random.default_rng(seed)
    made = 0
    while made < count:
        z, constraints = random_constraints(rng, int(rng.integers(1, max_n + 1)))
        try:
            structure = LPStructure(z, constraints, solver=solver)
        except InvalidInputError:  # infeasible draw
            continue
        made += 1
        yield rng, structure


def random_potentials(rng, n, i):
    # alternate integer potentials (many ties) and floats
    values = rng.integers(-3, 4, size=n).astype(float) if i % 2 == 0 else rng.normal(size=n)
    return VectorPotentials(values)


def check_topk_against_enumeration(n_structures, per_structure, seed, solver="auto", k=4):
    checked = 0
    for rng, structure in random_structures(seed, n_structures, solver=solver):
        for i in range(per_structure):
            theta = random_potentials(rng, structure.size, i)
            outs, scores = structure.topk(theta, k)
            _, expected = brute_force_topk(structure, theta, k)
            assert np.allclose(scores, expected, atol=1e-9), (scores, expected)
            assert np.allclose(outs @ theta.values, scores)
            assert len({o.tobytes() for o in outs}) == len(outs)
            for o in outs:
                structure.validate_output(o, theta)  # feasible 0/1 vectors
            y = structure.argmax(theta)
            assert structure.score(theta, y) == pytest.approx(expected[0], abs=1e-9)
            checked += 1
    return checked


def test_argmax_topk_match_enumeration_on_many_instances():
    assert check_topk_against_enumeration(50, 6, seed=0, k=3) == 300


@pytest.mark.slow
def test_argmax_topk_match_enumeration_thorough():
    assert check_topk_against_enumeration(500, 8, seed=1) == 4000


@pytest.mark.parametrize("solver", ["highs", "scip"])
def test_other_backends_match_enumeration(solver):
    assert check_topk_against_enumeration(10, 3, seed=2, solver=solver, k=3) == 30


def test_max_marginals_match_enumeration():
    for rng, structure in random_structures(3, 40):
        theta = random_potentials(rng, structure.size, int(rng.integers(2)))
        outs = np.array(structure.enumerate(theta))
        scores = outs @ theta.values
        expected = np.where(outs.T > 0, scores[None, :], -np.inf).max(axis=1)
        assert np.allclose(structure.max_marginals(theta), expected, atol=1e-9)


def test_topk_returns_all_outputs_when_k_is_large():
    z = cp.Variable(4, boolean=True)
    structure = LPStructure(z, [cp.sum(z) == 2])
    theta = VectorPotentials(np.array([0.5, -1.0, 2.0, 0.25]))
    outs, scores = structure.topk(theta, 10)
    assert outs.shape == (6, 4) and np.all(outs.sum(axis=1) == 2)
    assert np.all(np.diff(scores) <= 1e-12)


# ----------------------------------------------------------------------------- relaxation and projection
def triangle_independent_set():
    z = cp.Variable(3, boolean=True)
    return LPStructure(z, [z[0] + z[1] <= 1, z[1] + z[2] <= 1, z[0] + z[2] <= 1])


def test_lp_relaxation_is_fractional_on_an_odd_cycle():
    structure = triangle_independent_set()
    theta = VectorPotentials(np.ones(3))
    value, z = structure.lp_relaxation(theta)
    assert value == pytest.approx(1.5)
    assert np.allclose(z.values, 0.5)
    assert structure.score(theta, structure.argmax(theta)) == 1.0  # the integral optimum is below the bound
    report = check_structure(structure, theta)
    assert report.row("lp_relaxation").agrees_enumeration is False  # the description is not exact
    assert report.row("argmax").agrees_enumeration and report.row("topk").agrees_enumeration


def test_lp_relaxation_is_an_upper_bound():
    for rng, structure in random_structures(4, 40):
        theta = random_potentials(rng, structure.size, 1)
        value, _ = structure.lp_relaxation(theta)
        assert value >= structure.score(theta, structure.argmax(theta)) - 1e-9


def test_check_structure_passes_on_integral_instances():
    for seed in range(6):
        structure, theta = random_instance("lp", seed, integer=seed % 2 == 0)
        report = check_structure(structure, theta, random_state=seed)
        assert report.ok, report.table()
        assert report.row("marginals").detail.startswith("not supported")


def test_project_onto_the_hull_of_an_odd_cycle():
    structure = triangle_independent_set()
    rng = np.random.default_rng(0)
    vertices = np.array(structure.enumerate(VectorPotentials(np.zeros(3))), dtype=float)
    for _ in range(20):
        v = VectorPotentials(rng.normal(scale=1.5, size=3))
        p = structure.project(v).values
        # optimality against every vertex, and p lies in the hull (sum <= 1 on this hull)
        assert np.max(vertices @ (v.values - p) - (v.values - p) @ p) <= 1e-9
        assert p.min() >= -1e-9 and p.sum() <= 1 + 1e-9
    v = VectorPotentials(np.full(3, 0.6))  # inside the LP polytope's box, outside the hull
    assert np.allclose(structure.project(v).values, 1 / 3)
    assert np.allclose(structure.project_qp(v).values, 0.5, atol=1e-6)  # the relaxation's projection


def test_project_equals_qp_on_integral_instances():
    rng = np.random.default_rng(5)
    for seed in range(5):
        structure, _ = random_instance("lp", seed)
        v = VectorPotentials(rng.normal(size=structure.size))
        assert np.allclose(structure.project(v).values, structure.project_qp(v).values, atol=1e-6)


# ----------------------------------------------------------------------------- sizes and builder
def test_builder_varies_size_and_compiles_each_size_once():
    calls = []

    def k_of_n(n):
        calls.append(n)
        z = cp.Variable(n, boolean=True)
        return z, [cp.sum(z) == min(2, n)]

    structure = LPStructure.from_builder(k_of_n)
    for n in (1, 3, 5, 3, 5):
        theta = VectorPotentials(np.arange(n, dtype=float))
        y = structure.argmax(theta)
        assert y.shape == (n,) and y.sum() == min(2, n)
        assert y[-min(2, n):].sum() == min(2, n)  # the largest entries
    assert calls == [1, 3, 5]
    assert "from_builder" in repr(structure)


def test_a_single_constraint_and_parameters_are_accepted():
    z = cp.Variable(4, boolean=True)
    k = cp.Parameter(value=2)
    structure = LPStructure(z, cp.sum(z) <= k)
    outs = structure.enumerate(VectorPotentials(np.zeros(4)))
    assert len(outs) == 11 and max(o.sum() for o in outs) == 2
    with pytest.raises(InvalidInputError, match="without a value"):
        LPStructure(z, [cp.sum(z) <= cp.Parameter()])


def test_builder_returning_the_wrong_size_is_refused():
    structure = LPStructure.from_builder(lambda n: (cp.Variable(n + 1, boolean=True), []))
    with pytest.raises(InvalidInputError, match="length 4"):
        structure.argmax(VectorPotentials(np.zeros(3)))


# ----------------------------------------------------------------------------- errors
def test_bad_declarations_are_refused_clearly():
    z = cp.Variable(3, boolean=True)
    with pytest.raises(InvalidInputError, match="boolean"):
        LPStructure(cp.Variable(3), [])
    with pytest.raises(InvalidInputError, match="1-D"):
        LPStructure(cp.Variable((2, 2), boolean=True), [])
    with pytest.raises(InvalidInputError, match="not linear"):
        LPStructure(z, [cp.square(z[0] - z[1]) <= 1])
    w = cp.Variable(2)
    with pytest.raises(InvalidInputError, match="besides z"):
        LPStructure(z, [z[0] + w[0] <= 1])
    with pytest.raises(InvalidInputError, match="no 0/1 point"):
        LPStructure(z, [cp.sum(z) == 4])
    with pytest.raises(InvalidInputError, match="no 0/1 point"):
        LPStructure(z, [z[0] + z[1] == 1.5])
    with pytest.raises(InvalidInputError, match="linear equalities"):
        LPStructure(z, [cp.SOC(z[0], z[1:])])
    with pytest.raises(InvalidInputError, match="unknown ILP solver"):
        LPStructure(z, [], solver="gurobi")


def test_bad_potentials_and_outputs_name_the_example():
    z = cp.Variable(3, boolean=True)
    structure = LPStructure(z, [cp.sum(z) <= 1])
    with pytest.raises(InvalidInputError, match=r"example 7.*shape \(3,\)"):
        structure._values(VectorPotentials(np.zeros(4)), 7)
    with pytest.raises(InvalidInputError, match="NaN"):
        structure.argmax(VectorPotentials(np.array([0.0, np.nan, 1.0])))
    like = VectorPotentials(np.zeros(3))
    with pytest.raises(InvalidInputError, match=r"example 2: .*0 and 1"):
        structure.validate_output(np.array([0, 2, 0]), like, 2)
    with pytest.raises(InvalidInputError, match=r"example 4: .*violates"):
        structure.validate_output(np.array([1, 1, 0]), like, 4)
    with pytest.raises(InvalidInputError, match="shape"):
        structure.validate_output(np.array([1, 0]), like, 0)
    with pytest.raises(NotSupportedError, match="#P-hard"):
        structure.marginals(like)


def test_cpsat_scales_rational_rows_and_refuses_others():
    ilp = ILP(2, None, None, np.array([[0.5, 0.25]]), np.array([0.5]))  # 2 x0 + x1 <= 2
    assert solve_cpsat(ilp, np.array([1.0, 1.5])).tolist() == [0, 1]
    assert solve_cpsat(ilp, np.array([2.0, 1.5])).tolist() == [1, 0]
    with pytest.raises(NotSupportedError, match="rational"):
        solve_cpsat(ILP(2, None, None, np.array([[np.pi, 1.0]]), np.array([3.5])), np.ones(2))


def test_auto_backend_falls_back_to_highs_on_irrational_rows():
    z = cp.Variable(3, boolean=True)
    structure = LPStructure(z, [np.array([np.pi, np.e, 1.0]) @ z <= 4.0])  # only e + 1 of the pairs fits
    theta = VectorPotentials(np.array([1.0, 1.0, 0.5]))
    assert structure.argmax(theta).tolist() == [0, 1, 1]
    _, scores = structure.topk(theta, 8)
    _, expected = brute_force_topk(structure, theta, 8)
    assert np.allclose(scores, expected)
    with pytest.raises(NotSupportedError, match="rational"):
        LPStructure(z, [np.array([np.pi, np.e, 1.0]) @ z <= 4.0], solver="cpsat")


# ----------------------------------------------------------------------------- loss
def test_hamming_is_linear_in_the_binary_statistics():
    rng = np.random.default_rng(6)
    for normalize in (False, True):
        loss = so.Hamming(normalize=normalize)
        for _, structure in random_structures(7, 20):
            like = VectorPotentials(np.zeros(structure.size))
            outs = structure.enumerate(like)
            truth = outs[int(rng.integers(len(outs)))]
            c, const = loss.linear_terms(structure, truth, like)
            for y in outs:
                expected = loss(truth, y)
                assert expected == pytest.approx(np.count_nonzero(truth != y) / (truth.size if normalize else 1))
                assert float(flatten(c) @ flatten(structure.stats(y, like))) + const == pytest.approx(expected)


def test_weighted_hamming_is_linear_too():
    cost = np.array([[0.0, 2.0], [0.5, 0.0]])
    loss = so.WeightedHamming(cost)
    z = cp.Variable(4, boolean=True)
    structure = LPStructure(z, [cp.sum(z) <= 3])
    like = VectorPotentials(np.zeros(4))
    truth = np.array([1, 0, 1, 1])
    c, const = loss.linear_terms(structure, truth, like)
    for y in structure.enumerate(like):
        assert c.values @ y + const == pytest.approx(loss(truth, y))


def test_cpsat_objective_is_exact_when_integral_and_bounded_otherwise():
    from structopt.structures._ilp import OBJECTIVE_RESOLUTION, cpsat_objective

    ints, factor = cpsat_objective(np.array([3.0, -2.0, 0.0]))
    assert factor == 1.0 and ints.tolist() == [3, -2, 0]
    c = np.random.default_rng(0).normal(size=50)
    ints, factor = cpsat_objective(c)
    assert np.max(np.abs(ints / factor - c)) <= 0.5 / factor
    assert factor == pytest.approx(OBJECTIVE_RESOLUTION / np.max(np.abs(c)))


def test_structures_pickle():
    import pickle

    z = cp.Variable(4, boolean=True)
    structure = LPStructure(z, [cp.sum(z) <= 2])
    copy = pickle.loads(pickle.dumps(structure))
    theta = VectorPotentials(np.array([1.0, -1.0, 2.0, 0.5]))
    assert copy.argmax(theta).tolist() == structure.argmax(theta).tolist() == [1, 0, 1, 0]
