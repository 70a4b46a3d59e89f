"""SparseMAP over every registered structure (and a DP, a user subclass): the forward against a cvxpy QP over
the enumerated outputs and the structures' own projections, the certificate, the backward against finite
differences and Prop. 1's formula, the Fenchel-Young loss, warm starts and bad input."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.potentials import flatten, unflatten
from structopt.sparsemap import SparseMAPResult, sparsemap, sparsemap_loss, sparsemap_vjp
from structopt.structures import BinaryGrid, Chain, ChainPotentials, FactorGraph, MultiClass, Polytope, Structure
from structopt.structures.registry import registered_structures


# --------------------------------------------------------------------------- instances and references
class PairPotentials(NamedTuple):
    items: np.ndarray


class TwoOfN(Structure):
    """A user's structure: choose exactly two of n items (not registered; only argmax / stats / expand)."""

    name = "TwoOfN"

    def argmax(self, theta):
        return np.sort(np.argsort(-theta.items, kind="stable")[:2])

    def stats(self, y, like):
        z = np.zeros(like.items.shape)
        z[np.asarray(y)] = 1.0
        return PairPotentials(z)

    def outputs(self, theta) -> Iterator[np.ndarray]:
        for pair in itertools.combinations(range(theta.items.size), 2):
            yield np.array(pair)

    def polytope(self, theta):
        import scipy.sparse as sp

        n = theta.items.size
        return Polytope(sp.csr_matrix(np.ones((1, n))), np.array([2.0]), None, None, PairPotentials(np.zeros(n)))

    def expand(self, theta):
        return theta

    def validate_output(self, y, like, index=None):
        return np.asarray(y, dtype=np.int64)


#: sizes for the default suite, large enough for several active vertices; a registered structure not listed
#: here runs at its example's own default size (a new built-in needs no entry)
SIZES = {
    "chain": {"length": 3, "n_states": 3, "shared": False}, "multiclass": {"n_classes": 5},
    "matching": {"n_left": 3, "n_right": 3, "allow_unmatched": True}, "grid": {"height": 2, "width": 3},
    "box": {"height": 3, "width": 3}, "lp": {"n": 6}, "tree": {"n_nodes": 4, "n_states": 2},
    "factor_graph": {"n_vars": 3, "n_states": 2}, "dependency": {"n": 3},
}
DEFAULT_SIZES = {name: SIZES.get(name, {}) for name in registered_structures()}


def test_every_listed_size_names_a_registered_structure():
    assert set(SIZES) <= set(registered_structures())


def _instance(name, rng, size, integer=False, scale=0.5):
    """A registered structure's example with potentials in the statistics layout, scaled towards the polytope
    (the examples' potentials in [-3, 3] mostly project onto a single vertex)."""
    structure, theta = registered_structures()[name].example(rng, integer=integer, **size)
    full = structure.expand(theta)
    return structure, type(full)(*(scale * np.asarray(x, dtype=float) for x in full))


def _extra_instances(rng):
    """A dynamic program (a chain as a LabelDP) and the user structure."""
    chain = Chain(3)
    dp = chain.as_dp(3)
    theta = chain.expand(ChainPotentials(rng.normal(size=(3, 3)), rng.normal(size=(2, 3, 3))))
    from structopt.structures import DPPotentials

    yield "dp", dp, DPPotentials(0.5 * flatten(theta))
    yield "user", TwoOfN(), PairPotentials(rng.normal(scale=0.5, size=6))


def _default_cases():
    rng = np.random.default_rng(2024)
    for name, size in DEFAULT_SIZES.items():
        structure, theta = _instance(name, rng, size)
        yield name, structure, theta
    yield from _extra_instances(rng)


DEFAULT_CASES = list(_default_cases())


def _vertices(structure, theta) -> np.ndarray:
    return np.unique(np.array([flatten(structure.stats(y, theta)) for y in structure.enumerate(theta)]), axis=0)


def _qp_over_vertices(vertices: np.ndarray, target: np.ndarray) -> np.ndarray:
    """min 1/2 ||V^T a - target||^2 over the simplex, by cvxpy (Clarabel)."""
    import cvxpy as cp

    a = cp.Variable(len(vertices))
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(vertices.T @ a - target)), [a >= 0, cp.sum(a) == 1])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    assert problem.status == "optimal"
    return vertices.T @ a.value


def _own_projection(structure, theta) -> np.ndarray | None:
    """The structure's own Euclidean projection where it is onto the marginal polytope, else None (a box has
    no polytope; a grid with a cycle projects onto its local polytope, a strict superset)."""
    if isinstance(structure, BinaryGrid) and min(theta.unary.shape[:2]) >= 2:
        return None
    try:
        return flatten(structure.project(theta))
    except NotSupportedError:
        return None


def _check_result(structure, theta, result: SparseMAPResult, tol: float) -> None:
    assert isinstance(result, SparseMAPResult) and result.converged and 0.0 <= result.gap <= tol
    assert type(result.stats) is type(structure.expand(theta))
    k, d = result.vertices.shape
    assert d == flatten(theta).size and result.weights.shape == (k,) and len(result.outputs) == k
    assert np.all(result.weights > 0) and result.weights.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(flatten(result.stats), result.weights @ result.vertices, atol=1e-12)
    for y, row in zip(result.outputs, result.vertices, strict=True):  # each vertex is its output's statistics
        np.testing.assert_array_equal(flatten(structure.stats(y, theta)), row)
    if k > 1:  # affinely independent
        diff = result.vertices[1:] - result.vertices[0]
        assert np.linalg.matrix_rank(diff) == k - 1
    # the certificate is what it says: the gap of the oracle's best vertex, here over every output
    mu = flatten(result.stats)
    vertices = _vertices(structure, theta)
    normal = flatten(theta) - mu
    assert np.max(vertices @ normal) - normal @ mu <= tol + 1e-12
    if result.face is not None:  # further vertices of the optimal face, beyond the active set's hull
        assert all(np.any(np.all(vertices == v, axis=1)) for v in result.face)
        np.testing.assert_allclose(result.face @ normal, normal @ mu, atol=1e-9)
        spanning = np.vstack([result.vertices, result.face])
        assert np.linalg.matrix_rank(spanning[1:] - spanning[0]) == len(spanning) - 1


def _assert_forward(name, structure, theta, qp_atol=1e-6, own=True):
    result = sparsemap(structure, theta, tol=1e-10)
    _check_result(structure, theta, result, 1e-10)
    mu = flatten(result.stats)
    reference = _qp_over_vertices(_vertices(structure, theta), flatten(theta))
    np.testing.assert_allclose(mu, reference, atol=qp_atol, err_msg=name)
    own = _own_projection(structure, theta) if own else None
    if own is not None:
        np.testing.assert_allclose(mu, own, atol=1e-6, err_msg=name)
    return result


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=[c[0] for c in DEFAULT_CASES])
def test_forward_equals_the_qp_over_the_outputs_and_the_own_projection(case):
    name, structure, theta = case
    result = _assert_forward(name, structure, theta)
    if name not in ("multiclass",):  # scaled potentials reach the interior of a face: a real mixture
        assert len(result.weights) >= 2, name


@pytest.mark.slow
def test_forward_on_every_variant_integer_and_float():
    rng = np.random.default_rng(7)
    n = 0
    for name, cls in registered_structures().items():
        for size in cls.example_variants:
            for integer, scale in ((True, 0.5), (False, 0.5), (False, 2.0)):
                structure, theta = _instance(name, rng, size, integer=integer, scale=scale)
                # integer potentials put the projection on degenerate points (a vertex reached exactly at the
                # boundary of its normal cone), where the interior-point reference is only ~1e-6 accurate; the
                # certificate over every output (in _check_result) stays exact there
                _assert_forward(name, structure, theta, qp_atol=2e-5 if integer else 1e-6)
                n += 1
    assert n > 100


# --------------------------------------------------------------------------- backward
def _jacobian_by_vjp(result: SparseMAPResult) -> np.ndarray:
    d = result.vertices.shape[1]
    return np.array([sparsemap_vjp(result, e) for e in np.eye(d)])


def _prop1_jacobian(result: SparseMAPResult) -> np.ndarray:
    """V (Z - s 1^T Z) V^T with Z = (V^T V)^-1, s = Z 1 / 1^T Z 1 (Niculae et al. 2018, Prop. 1), V the active
    vertices and those of ``result.face``."""
    V = (result.vertices if result.face is None else np.vstack([result.vertices, result.face])).T
    Z = np.linalg.inv(V.T @ V)
    one = np.ones(V.shape[1])
    s = Z @ one / (one @ Z @ one)
    return V @ (Z - np.outer(s, one @ Z)) @ V.T


def _same_affine_hull(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two active sets span one affine subspace (a face that is not a simplex has several active sets
    with the same hull, e.g. two triangles of a square; the Jacobian is the same)."""
    both = np.vstack([a, b])
    rank = [np.linalg.matrix_rank(x[1:] - x[0], tol=1e-8) if len(x) > 1 else 0 for x in (a, b, both)]
    return rank[0] == rank[1] == rank[2]


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=[c[0] for c in DEFAULT_CASES])
def test_vjp_equals_central_differences_and_is_symmetric(case):
    name, structure, theta = case
    rng = np.random.default_rng(5)
    result = sparsemap(structure, theta, tol=1e-12)
    d = result.vertices.shape[1]
    J = _jacobian_by_vjp(result)
    np.testing.assert_allclose(J, J.T, atol=1e-10)  # symmetric
    np.testing.assert_allclose(J @ J, J, atol=1e-9)  # a projector (onto the active face's directions)
    face = 0 if result.face is None else len(result.face)
    assert np.trace(J) == pytest.approx(len(result.weights) + face - 1, abs=1e-8)
    u, v = rng.normal(size=d), rng.normal(size=d)
    assert u @ sparsemap_vjp(result, v) == pytest.approx(sparsemap_vjp(result, u) @ v, abs=1e-10)
    h = 1e-6
    flat = flatten(theta)
    checked = 0
    for direction in (v, u, rng.normal(size=d)):
        plus = sparsemap(structure, unflatten(flat + h * direction, theta), tol=1e-13)
        minus = sparsemap(structure, unflatten(flat - h * direction, theta), tol=1e-13)
        if not _same_affine_hull(plus.vertices, minus.vertices):  # a face change inside [θ - h v, θ + h v]
            continue
        fd = (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
        np.testing.assert_allclose(sparsemap_vjp(result, direction), fd, atol=2e-6, err_msg=name)
        checked += 1
    assert checked >= 2, name


@pytest.mark.slow
def test_vjp_equals_central_differences_on_every_variant():
    rng = np.random.default_rng(21)
    checked = skipped = 0
    for name, cls in registered_structures().items():
        for size in cls.example_variants:
            for scale in (0.3, 0.6):
                structure, theta = _instance(name, rng, size, scale=scale)
                result = sparsemap(structure, theta, tol=1e-12)
                J = _jacobian_by_vjp(result)
                np.testing.assert_allclose(J, J.T, atol=1e-10)
                flat, h = flatten(theta), 1e-6
                for direction in rng.normal(size=(2, flat.size)):
                    plus = sparsemap(structure, unflatten(flat + h * direction, theta), tol=1e-13)
                    minus = sparsemap(structure, unflatten(flat - h * direction, theta), tol=1e-13)
                    if not _same_affine_hull(plus.vertices, minus.vertices):
                        skipped += 1
                        continue
                    fd = (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
                    np.testing.assert_allclose(J @ direction, fd, atol=2e-6, err_msg=f"{name} {size}")
                    checked += 1
    assert checked > 100 and skipped < checked / 10, (checked, skipped)


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=[c[0] for c in DEFAULT_CASES])
def test_vjp_equals_prop1_where_the_gram_matrix_is_invertible(case):
    name, structure, theta = case
    result = sparsemap(structure, theta, tol=1e-12)
    V = (result.vertices if result.face is None else np.vstack([result.vertices, result.face])).T
    if np.linalg.matrix_rank(V.T @ V) < V.shape[1]:
        pytest.skip("the origin's affine hull: Z = (V^T V)^-1 does not exist")
    np.testing.assert_allclose(_jacobian_by_vjp(result), _prop1_jacobian(result), atol=1e-9, err_msg=name)


def test_tied_potentials_whose_projection_is_on_a_slice_of_the_face():
    # a 2 x 2 grid with shared pairwise tables: μ* can sit on a lower-dimensional slice through the inside of a
    # face that is not a simplex, spanned by the active set alone; the derivative in every direction is the
    # projector onto the whole face, which the face search supplies (without it: errors ~0.1-1, 8 of 60 here)
    rng = np.random.default_rng(0)
    n_sliced = 0
    for _ in range(30):
        grid, compact = BinaryGrid.example(rng, integer=False, height=2, width=2, shared=True)
        theta = grid.expand(type(compact)(*(0.3 * x for x in compact)))
        result = sparsemap(grid, theta, tol=1e-12)
        bare = sparsemap(grid, theta, tol=1e-12, face_tries=0)
        assert bare.face is None and np.array_equal(bare.vertices, result.vertices)
        if result.face is None:
            continue
        n_sliced += 1
        _check_result(grid, theta, result, 1e-12)
        flat, h = flatten(theta), 1e-6
        for direction in rng.normal(size=(2, flat.size)):
            plus = sparsemap(grid, unflatten(flat + h * direction, theta), tol=1e-13)
            minus = sparsemap(grid, unflatten(flat - h * direction, theta), tol=1e-13)
            fd = (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
            np.testing.assert_allclose(sparsemap_vjp(result, direction), fd, atol=2e-6)
            assert np.abs(sparsemap_vjp(bare, direction) - fd).max() > 1e-3  # the active set's slice alone
    assert n_sliced >= 2


@pytest.mark.slow
def test_large_matching_backward_spans_the_face_the_active_set_misses():
    # 20 x 20 matchings stop at tol=1e-9 with an active set spanning only part of the optimal face (the
    # vertices it misses would enter with weights below the tolerance): μ* is right, the face search makes
    # its derivative right
    from structopt.structures import BipartiteMatching, MatchingPotentials

    matching, rng = BipartiteMatching(), np.random.default_rng(0)
    errors_with, errors_without = [], []
    for _ in range(3):
        theta = matching.expand(MatchingPotentials(rng.normal(scale=0.3, size=(20, 20)), np.zeros(0), np.zeros(0)))
        result, bare = sparsemap(matching, theta), sparsemap(matching, theta, face_tries=0)
        flat, h, direction = flatten(theta), 1e-7, rng.normal(size=400)
        plus = sparsemap(matching, unflatten(flat + h * direction, theta), tol=1e-12, face_tries=0)
        minus = sparsemap(matching, unflatten(flat - h * direction, theta), tol=1e-12, face_tries=0)
        fd = (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
        errors_with.append(np.abs(sparsemap_vjp(result, direction) - fd).max())
        errors_without.append(np.abs(sparsemap_vjp(bare, direction) - fd).max())
    assert max(errors_with) < 1e-5 and max(errors_without) > 0.05, (errors_with, errors_without)


def test_active_set_engine_drops_affinely_dependent_vertices_keeping_the_point():
    # a warm start with all four corners of the unit square (affinely dependent) and a point inside
    from structopt.structures.backends import min_norm_active_set

    square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])

    def oracle(d):
        j = int(np.argmax(square @ d))
        return square[j], j

    target = np.array([0.3, 0.6])  # inside: its own projection
    result = min_norm_active_set(target, oracle, tol=1e-12, max_iter=50,
                                 start=(square, np.full(4, 0.25), [0, 1, 2, 3]))
    np.testing.assert_allclose(result.point, target, atol=1e-12)
    assert len(result.weights) == 3 and np.all(result.weights > 0) and result.status == "optimal"
    assert np.linalg.matrix_rank(result.vertices[1:] - result.vertices[0]) == 2
    assert sorted(result.labels) == sorted(int(np.flatnonzero((square == v).all(axis=1))[0])
                                           for v in result.vertices)


def test_vjp_with_the_origin_as_an_active_vertex():
    # two of three 0/1 points (0, 0) and (1, 0): V^T V is singular, the affine hull is the first axis
    import cvxpy as cp

    from structopt.structures import LPStructure, VectorPotentials

    z = cp.Variable(2, boolean=True)
    lp = LPStructure(z, [z[1] <= 0])  # outputs (0, 0), (1, 0)
    theta = VectorPotentials(np.array([0.3, 0.7]))
    result = sparsemap(lp, theta)
    np.testing.assert_allclose(flatten(result.stats), [0.3, 0.0], atol=1e-12)
    assert len(result.weights) == 2 and np.linalg.matrix_rank(result.vertices.T @ result.vertices) == 1
    np.testing.assert_allclose(_jacobian_by_vjp(result), [[1.0, 0.0], [0.0, 0.0]], atol=1e-12)


def test_single_vertex_has_zero_jacobian():
    structure = MultiClass(4)
    theta = structure.Potentials(np.array([5.0, 0.0, -1.0, 0.5]))
    result = sparsemap(structure, theta)
    assert result.outputs == [0] and result.weights.tolist() == [1.0] and result.iterations == 0
    np.testing.assert_array_equal(sparsemap_vjp(result, np.ones(4)), np.zeros(4))


# --------------------------------------------------------------------------- loss
@pytest.mark.parametrize("case", DEFAULT_CASES, ids=[c[0] for c in DEFAULT_CASES])
def test_fenchel_young_loss_value_gradient_and_zero(case):
    name, structure, theta = case
    rng = np.random.default_rng(11)
    outputs = structure.enumerate(theta)
    y = outputs[int(rng.integers(len(outputs)))]
    gold = flatten(structure.stats(y, theta))
    value, grad, result = sparsemap_loss(structure, theta, y, tol=1e-12)
    flat, mu = flatten(theta), flatten(result.stats)
    assert value >= 0.0
    expected = flat @ mu - 0.5 * mu @ mu - flat @ gold + 0.5 * gold @ gold
    assert value == pytest.approx(max(expected, 0.0), abs=1e-9)
    np.testing.assert_allclose(grad, mu - gold, atol=1e-12)
    h = 1e-5
    for direction in (rng.normal(size=flat.size), gold - 0.5):
        plus = sparsemap_loss(structure, unflatten(flat + h * direction, theta), y, tol=1e-13)[0]
        minus = sparsemap_loss(structure, unflatten(flat - h * direction, theta), y, tol=1e-13)[0]
        assert (plus - minus) / (2 * h) == pytest.approx(grad @ direction, abs=1e-6), name
    # potentials favouring y strongly (in the normal cone of M at μ(y)): μ* = μ(y) and the loss is 0
    strong = unflatten(gold + 3.0 * (2.0 * gold - 1.0), theta)
    value, grad, result = sparsemap_loss(structure, strong, y)
    assert value == 0.0 and not grad.any() and len(result.weights) == 1
    np.testing.assert_array_equal(flatten(result.stats), gold)


def test_loss_on_the_simplex_by_hand():
    # MultiClass: M is the simplex; θ = (0.2, 0.1, 0) projects to θ - τ with τ = (Σθ - 1) / 3 (all positive)
    structure = MultiClass(3)
    theta = np.array([0.2, 0.1, 0.0])
    value, grad, result = sparsemap_loss(structure, structure.Potentials(theta), 2)
    mu = theta - (theta.sum() - 1.0) / 3.0
    np.testing.assert_allclose(flatten(result.stats), mu, atol=1e-12)
    gold = np.array([0.0, 0.0, 1.0])
    assert value == pytest.approx(0.5 * np.sum((theta - gold) ** 2) - 0.5 * np.sum((theta - mu) ** 2), abs=1e-12)
    np.testing.assert_allclose(grad, mu - gold, atol=1e-12)
    np.testing.assert_allclose(_jacobian_by_vjp(result), np.eye(3) - 1.0 / 3.0, atol=1e-12)


# --------------------------------------------------------------------------- oracles, warm starts, limits
def test_factor_graph_relaxed_argmax_is_replaced_by_exact_map():
    rng = np.random.default_rng(3)
    fg, theta = FactorGraph.example(rng, integer=False, n_vars=4, n_states=2, exact=False)
    theta = type(theta)(*(0.4 * x for x in theta))
    assert not fg.exact
    result = _assert_forward("factor_graph relaxed", fg, theta)
    assert all(isinstance(y, np.ndarray) and y.dtype == np.int64 for y in result.outputs)


def test_graph_model_structure_with_a_cycle_uses_exact_map():
    # a triangle: the relaxed (local polytope) oracle could return a fractional point; SparseMAP asks exact MAP
    from structopt.models import GraphModel

    rng = np.random.default_rng(6)
    model = GraphModel(2, 1, 1)
    assert not model.structure.exact
    edges = np.array([[0, 1], [1, 2], [0, 2]], dtype=np.int64)
    x = model.validate_input((rng.normal(size=(3, 2)), edges, rng.normal(size=(3, 1))))
    theta = model.potentials(x, rng.normal(scale=0.5, size=model.n_params))
    # (its own project is onto the local polytope, larger than M on a cycle: not compared)
    result = _assert_forward("graph", model.structure, model.structure.expand(theta), own=False)
    assert all(isinstance(y, np.ndarray) and y.shape == (3,) for y in result.outputs)


class RefusalCountingGrid(BinaryGrid):
    refused = 0

    def argmax(self, theta):
        try:
            return super().argmax(theta)
        except NotSupportedError:
            RefusalCountingGrid.refused += 1
            raise


def test_grid_directions_that_are_not_supermodular_use_exact_map():
    # zero pairwise potentials: θ − μ is not supermodular after the first vertex (μ's agreeing edges)
    grid = RefusalCountingGrid()
    rng = np.random.default_rng(4)
    theta = grid.Potentials(rng.normal(scale=0.3, size=(2, 3, 2)), np.zeros((2, 2, 2, 2)), np.zeros((1, 3, 2, 2)))
    RefusalCountingGrid.refused = 0
    result = _assert_forward("grid", grid, theta)
    assert RefusalCountingGrid.refused > 0 and len(result.weights) >= 2


def test_chain_with_forbidden_transitions_projects_onto_the_allowed_sequences():
    allowed = np.array([[True, True, False], [False, True, True], [True, False, True]])
    chain = Chain(3, allowed=allowed)
    rng = np.random.default_rng(10)
    theta = ChainPotentials(rng.normal(scale=0.4, size=(4, 3)), rng.normal(scale=0.4, size=(3, 3, 3)))
    result = _assert_forward("masked chain", chain, theta)
    assert len(result.weights) >= 3 and all(chain.feasible(y) for y in result.outputs)


def test_an_oracle_returning_a_relaxed_point_is_refused():
    class Relaxed(TwoOfN):
        def argmax(self, theta):
            return PairPotentials(np.full(theta.items.shape, 2.0 / theta.items.size))

    with pytest.raises(NotSupportedError, match="relaxed point"):
        sparsemap(Relaxed(), PairPotentials(np.arange(4.0)))
    # an explicit exact oracle replaces it
    result = sparsemap(Relaxed(), PairPotentials(np.arange(4.0) / 4), oracle=TwoOfN().argmax)
    assert result.converged


def test_warm_start_reaches_the_same_point_with_fewer_oracle_calls():
    rng = np.random.default_rng(8)
    structure, theta = _instance("chain", rng, {"length": 6, "n_states": 4, "shared": False})
    first = sparsemap(structure, theta, tol=1e-12)
    moved = unflatten(flatten(theta) + rng.normal(scale=1e-3, size=flatten(theta).size), theta)
    cold = sparsemap(structure, moved, tol=1e-12)
    warm = sparsemap(structure, moved, tol=1e-12, warm_start=first)
    assert warm.converged and cold.converged and len(first.weights) >= 3
    np.testing.assert_allclose(flatten(warm.stats), flatten(cold.stats), atol=1e-8)
    assert warm.iterations < cold.iterations


def test_max_iter_caps_the_loop_and_reports_not_converged():
    rng = np.random.default_rng(9)
    structure, theta = _instance("chain", rng, {"length": 6, "n_states": 4, "shared": False})
    full = sparsemap(structure, theta, tol=1e-12)
    assert full.iterations > 2
    capped = sparsemap(structure, theta, tol=1e-12, max_iter=1)
    assert capped.iterations == 1 and not capped.converged and capped.gap > 1e-12
    # the gap still certifies the distance: ||μ − μ*||^2 <= gap
    assert np.sum((flatten(capped.stats) - flatten(full.stats)) ** 2) <= capped.gap + 1e-12


# --------------------------------------------------------------------------- bad input
class CountingMultiClass(MultiClass):
    calls = 0

    def argmax(self, theta):
        CountingMultiClass.calls += 1
        return super().argmax(theta)


@pytest.mark.parametrize(("theta", "options", "match"), [
    (np.array([0.0, np.nan, 1.0]), {}, "NaN"),
    (np.array([0.0, np.inf, 1.0]), {}, r"\+inf"),
    (np.array([0.0, -np.inf, 1.0]), {}, "-inf entries"),
    (np.zeros(3), {"tol": 0.0}, "tol"),
    (np.zeros(3), {"tol": -1.0}, "tol"),
    (np.zeros(3), {"tol": float("nan")}, "tol"),
    (np.zeros(3), {"max_iter": 0}, "max_iter"),
    (np.zeros(3), {"max_iter": 2.5}, "max_iter"),
    (np.zeros(3), {"warm_start": "previous"}, "warm_start"),
    (np.zeros(3), {"face_tries": -1}, "face_tries"),
])
def test_bad_input_is_refused_before_any_oracle_call(theta, options, match):
    structure = CountingMultiClass(3)
    CountingMultiClass.calls = 0
    with pytest.raises(InvalidInputError, match=match):
        sparsemap(structure, structure.Potentials(theta), **options)
    assert CountingMultiClass.calls == 0


def test_bad_theta_layouts_and_gradients():
    chain = Chain(3)
    rng = np.random.default_rng(0)
    compact = ChainPotentials(rng.normal(size=(4, 3)), rng.normal(size=(3, 3)))  # a shared transition block
    with pytest.raises(InvalidInputError, match=r"expand\(theta\)"):
        sparsemap(chain, compact)
    result = sparsemap(chain, chain.expand(compact))
    assert result.converged
    with pytest.raises(InvalidInputError, match="NamedTuple"):
        sparsemap(chain, np.zeros(3))
    with pytest.raises(InvalidInputError, match="numeric"):
        sparsemap(MultiClass(2), MultiClass(2).Potentials(np.array(["a", "b"])))
    with pytest.raises(InvalidInputError, match="shape"):
        sparsemap_vjp(result, np.zeros(5))
    with pytest.raises(InvalidInputError, match="NaN"):
        sparsemap_vjp(result, np.full(result.vertices.shape[1], np.nan))
    with pytest.raises(InvalidInputError, match="another instance"):
        sparsemap(Chain(3), ChainPotentials(np.zeros((2, 3)), np.zeros((1, 3, 3))), warm_start=result)
    with pytest.raises(InvalidInputError, match="unknown options"):
        sparsemap_loss(chain, chain.expand(compact), np.zeros(4, dtype=int), epsilon=1.0)
    with pytest.raises(InvalidInputError):
        sparsemap_loss(chain, chain.expand(compact), np.array([0, 1, 7, 0]))  # label out of range
