"""BinaryGrid oracles against enumeration, LPs and cvxpy; errors on bad and non-supermodular input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.losses import Hamming
from structopt.structures import _mincut
from structopt.structures.base import flatten, inner, unflatten
from structopt.structures.grid import BinaryGrid, GridPotentials

SHAPES = [(H, W) for H in (1, 2, 3) for W in (1, 2, 3, 4)]  # every grid up to 3 x 4


def make_supermodular(table: np.ndarray) -> np.ndarray:
    """Raise theta(0, 0) where needed so that every edge is supermodular (keeps integers integral)."""
    table = table.copy()
    w = table[..., 0, 0] + table[..., 1, 1] - table[..., 0, 1] - table[..., 1, 0]
    table[..., 0, 0] += np.maximum(-w, 0.0)
    return table


def random_grid(H: int, W: int, rng: np.random.Generator, integer: bool, shared: bool = False) -> GridPotentials:
    def draw(shape):
        return rng.integers(-3, 4, size=shape).astype(float) if integer else rng.normal(size=shape)

    hor_shape = (2, 2) if shared else (H, W - 1, 2, 2)
    ver_shape = (2, 2) if shared else (H - 1, W, 2, 2)
    return GridPotentials(draw((H, W, 2)), make_supermodular(draw(hor_shape)), make_supermodular(draw(ver_shape)))


def instances(n_seeds: int, seed: int = 0):
    """Random supermodular instances on every shape, integer (many ties) and float, per-edge and shared."""
    rng = np.random.default_rng(seed)
    for (H, W), s in itertools.product(SHAPES, range(n_seeds)):
        yield random_grid(H, W, rng, integer=s % 2 == 0, shared=s % 4 == 3), (H, W, s)


def all_labellings(H: int, W: int) -> np.ndarray:
    """(2**(H*W), H, W) array of every labelling."""
    bits = (np.arange(2 ** (H * W))[:, None] >> np.arange(H * W)[None, :]) & 1
    return bits.reshape(-1, H, W)


def brute_scores(theta: GridPotentials, Y: np.ndarray) -> np.ndarray:
    """Scores of labellings Y (M, H, W), written independently of BinaryGrid.score."""
    _, H, W = Y.shape
    h = np.broadcast_to(theta.horizontal, (H, W - 1, 2, 2))
    v = np.broadcast_to(theta.vertical, (H - 1, W, 2, 2))
    r, c = np.indices((H, W))
    total = theta.unary[r, c, Y].sum(axis=(1, 2))
    r, c = np.indices((H, W - 1))
    total = total + h[r, c, Y[:, :, :-1], Y[:, :, 1:]].sum(axis=(1, 2))
    r, c = np.indices((H - 1, W))
    return total + v[r, c, Y[:, :-1, :], Y[:, 1:, :]].sum(axis=(1, 2))


@pytest.fixture(scope="module")
def grid():
    return BinaryGrid("dinic")


def test_enumeration_stats_and_score(grid, rng):
    for H, W in SHAPES[:8]:
        theta = random_grid(H, W, rng, integer=False)
        outs = grid.enumerate(theta)
        assert len(outs) == 2 ** (H * W) and len({y.tobytes() for y in outs}) == len(outs)
        scores = brute_scores(theta, np.array(outs))
        for y, value in zip(outs, scores):
            st = grid.stats(y, theta)
            assert st.unary.shape == (H, W, 2) and st.horizontal.shape == (H, W - 1, 2, 2)
            assert st.vertical.shape == (H - 1, W, 2, 2)
            assert grid.score(theta, y) == pytest.approx(value, abs=1e-12)
            assert inner(grid.expand(theta), st) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("backend", ["dinic", "pymaxflow", "ortools"])
def test_argmax_matches_enumeration(backend):
    structure = BinaryGrid(backend)
    for theta, (H, W, s) in instances(25):
        Y = all_labellings(H, W)
        best = brute_scores(theta, Y).max()
        y = structure.argmax(theta)
        assert y.shape == (H, W) and y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
        assert structure.score(theta, y) == pytest.approx(best, abs=1e-9), (H, W, s)


def test_scipy_backend_is_certified_or_refuses():
    # int32 capacities: the labelling is returned only when certified within 1e-9 of the optimum
    structure = BinaryGrid("scipy")
    answered = refused = 0
    for theta, (H, W, _) in instances(4):
        best = brute_scores(theta, all_labellings(H, W)).max()
        try:
            y = structure.argmax(theta)
        except NotSupportedError as exc:
            assert "not certified" in str(exc)
            refused += 1
        else:
            assert structure.score(theta, y) >= best - 1e-9 * (1 + abs(best))
            answered += 1
    assert answered > 0


def test_integer_backend_refuses_when_the_scale_cannot_certify():
    # capacities spanning 1e-3 .. 1e15: int64 scaling rounds the small ones away, so no certificate
    theta = GridPotentials(np.array([[[0.0, 1e15], [0.0, -1e-3], [1e-3, 0.0]]]), np.eye(2) * 1e-3, np.zeros((2, 2)))
    net = _mincut.build_network(*BinaryGrid().check_potentials(theta))
    with pytest.raises(NotSupportedError, match="not certified"):
        _mincut.solve_ortools(net, rtol=1e-30)


def test_max_marginals_match_enumeration(grid):
    for theta, (H, W, s) in instances(20, seed=1):
        Y = all_labellings(H, W)
        scores = brute_scores(theta, Y)
        mm = grid.max_marginals(theta)
        assert mm.shape == (H, W, 2)
        ref = np.stack([np.where(Y == a, scores[:, None, None], -np.inf).max(axis=0) for a in (0, 1)], axis=-1)
        np.testing.assert_allclose(mm, ref, atol=1e-9, err_msg=str((H, W, s)))


def test_topk_matches_enumeration(grid):
    for theta, (H, W, s) in instances(12, seed=2):
        Y = all_labellings(H, W)
        scores = np.sort(brute_scores(theta, Y))[::-1]
        for k in (1, 3, 7, 2 ** (H * W) + 2 if H * W <= 6 else 30):  # all of them, or 30
            outs, values = grid.topk(theta, k)
            expected = scores[:k]
            assert outs.shape == (len(expected), H, W) and values.shape == expected.shape, (H, W, s, k)
            np.testing.assert_allclose(values, expected, atol=1e-9, err_msg=str((H, W, s, k)))
            np.testing.assert_allclose(brute_scores(theta, outs), values, atol=1e-9)
            assert len({y.tobytes() for y in outs}) == len(outs)


def test_best_flip_is_the_argmin_of_all_flip_costs():
    from structopt.structures import _grid_kernels as kern

    rng = np.random.default_rng(5)
    for _ in range(60):
        H, W = rng.integers(1, 7, size=2)
        theta = random_grid(H, W, rng, integer=bool(rng.integers(2)))
        net = _mincut.build_network(*BinaryGrid().check_potentials(theta))
        clamp = np.where(rng.uniform(size=H * W) < 0.2, rng.integers(0, 2, size=H * W), -1)
        clamped = _mincut.clamp_network(net, clamp)
        labels, res = _mincut.solve_dinic(clamped)
        args = (res.cap, res.rs, res.rt, kern.neighbours(H, W), labels, clamp, clamped.cap, clamped.rs, clamped.rt)
        costs = kern.flip_costs(*args)
        node, cost = kern.best_flip(*args)
        if np.all(clamp >= 0):
            assert node == -1 and cost == np.inf
        else:
            assert node == int(np.argmin(costs)) and cost == costs.min()


def test_topk_with_ties_is_deterministic(grid):
    theta = GridPotentials(np.zeros((2, 3, 2)), np.zeros((2, 2)), np.zeros((2, 2)))  # all 64 labellings tie
    first = grid.topk(theta, 10)
    second = grid.topk(theta, 10)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(first[1], 0.0)
    assert len({y.tobytes() for y in first[0]}) == 10


def test_lp_relaxation_is_tight_for_supermodular(grid):
    for theta, (H, W, s) in instances(2, seed=3):
        best = brute_scores(theta, all_labellings(H, W)).max()
        value, z = grid.lp_relaxation(theta)
        assert value == pytest.approx(best, abs=1e-6), (H, W, s)
        assert isinstance(z, GridPotentials) and z.horizontal.shape == (H, W - 1, 2, 2)


def test_lp_relaxation_of_a_frustrated_cycle_is_not_integral(grid):
    # a 2 x 2 cycle with one repulsive edge: the local polytope's optimum is fractional and above MAP
    attract = np.array([[1.0, 0.0], [0.0, 1.0]])
    theta = GridPotentials(np.zeros((2, 2, 2)), np.stack([attract, 1 - attract])[:, None], attract)
    value, _ = grid.lp_relaxation(theta)
    best = brute_scores(theta, all_labellings(2, 2)).max()
    assert value > best + 0.5


def test_polytope_contains_vertices_and_describes_the_local_polytope(grid, rng):
    theta = random_grid(2, 3, rng, integer=False)
    poly = grid.polytope(theta)
    for y in all_labellings(2, 3):
        z = flatten(grid.stats(y, theta))
        np.testing.assert_allclose(poly.A_eq @ z, poly.b_eq, atol=1e-12)
    assert poly.A_eq.shape[1] == flatten(grid.expand(theta)).size


def test_project_matches_qp_and_certifies(grid, rng):
    for H, W in [(1, 1), (1, 4), (2, 2), (3, 3), (2, 4)]:
        v = unflatten(rng.normal(scale=1.5, size=flatten(grid.expand(random_grid(H, W, rng, False))).size),
                      grid.expand(random_grid(H, W, rng, False)))
        p = grid.project(v, tol=1e-9)
        q = grid.project_qp(v)
        np.testing.assert_allclose(flatten(p), flatten(q), atol=2e-5)
        poly = grid.polytope(v)
        assert np.max(np.abs(poly.A_eq @ flatten(p) - poly.b_eq)) <= 1e-8
        assert flatten(p).min() >= 0.0
        # variational inequality against every vertex: <v - p, m - p> <= 0
        flat = np.array([flatten(grid.stats(y, v)) for y in all_labellings(H, W)])
        d = flatten(v) - flatten(p)
        assert np.max(flat @ d - d @ flatten(p)) <= 1e-6


def test_project_warm_start(grid, rng):
    from structopt.structures._grid_projection import multiplier_size, project_grid

    v = grid.expand(random_grid(4, 5, rng, integer=False))
    warm = np.zeros(multiplier_size(4, 5))
    cold = project_grid(*v, tol=1e-9)
    first = grid.project(v, warm=warm)
    assert np.any(warm != 0.0)  # the final multipliers were written back
    nearby = GridPotentials(*(f + 0.01 * rng.normal(size=f.shape) for f in v))
    again = project_grid(*nearby, tol=1e-9, warm=warm.copy())
    assert again[4] < project_grid(*nearby, tol=1e-9)[4]  # fewer iterations from nearby multipliers
    np.testing.assert_allclose(flatten(first), flatten(GridPotentials(*cold[:3])), atol=1e-7)
    np.testing.assert_allclose(flatten(GridPotentials(*again[:3])), flatten(grid.project(nearby)), atol=1e-7)
    with pytest.raises(InvalidInputError, match="warm multipliers"):
        grid.project(v, warm=np.zeros(3))


def test_project_falls_back_to_qp_when_not_certified(grid, rng):
    v = grid.expand(random_grid(2, 3, rng, integer=False))
    p = grid.project(v, max_iter=1)  # one dual step cannot certify: the cvxpy QP answers
    np.testing.assert_allclose(flatten(p), flatten(grid.project_qp(v)), atol=1e-7)


def test_expected_stats_vectorised(grid, rng):
    theta = random_grid(3, 2, rng, integer=False)
    Y = all_labellings(3, 2)[rng.choice(64, size=5, replace=False)]
    weights = rng.uniform(size=5)
    got = grid.expected_stats(Y, weights, theta)
    ref = sum(u * flatten(grid.stats(y, theta)) for u, y in zip(weights, Y))
    np.testing.assert_allclose(flatten(got), ref, atol=1e-12)


def test_hamming_loss_terms_on_grids(grid, rng):
    theta = random_grid(2, 3, rng, integer=False)
    y_true = rng.integers(0, 2, size=(2, 3))
    for normalize in (False, True):
        loss = Hamming(normalize=normalize)
        c, const = loss.linear_terms(grid, y_true, theta)
        for y in all_labellings(2, 3):
            assert inner(c, grid.stats(y, theta)) + const == pytest.approx(loss(y_true, y))


# ------------------------------------------------------------------ errors
def non_supermodular() -> GridPotentials:
    vertical = np.zeros((1, 3, 2, 2))
    vertical[0, 2] = [[0.0, 2.0], [0.5, 0.0]]  # w = -2.5
    vertical[0, 0] = [[0.0, 1.0], [0.0, 0.0]]  # w = -1
    return GridPotentials(np.zeros((2, 3, 2)), np.eye(2), vertical)


@pytest.mark.parametrize("oracle", ["argmax", "max_marginals", "topk"])
def test_non_supermodular_edges_are_refused(grid, oracle):
    call = {"argmax": lambda t: grid.argmax(t), "max_marginals": lambda t: grid.max_marginals(t),
            "topk": lambda t: grid.topk(t, 3)}[oracle]
    with pytest.raises(NotSupportedError, match=r"2 of 7 edges violate it, worst the vertical edge \(0, 2\)-\(1, 2\) "
                                                r"by 2\.5"):
        call(non_supermodular())


def test_lp_relaxation_still_works_on_non_supermodular(grid):
    theta = non_supermodular()
    value, _ = grid.lp_relaxation(theta)
    assert value >= brute_scores(theta, all_labellings(2, 3)).max() - 1e-9


def test_marginals_and_entropic_prox_are_refused(grid, rng):
    theta = random_grid(2, 2, rng, integer=False)
    with pytest.raises(NotSupportedError, match="#P-hard"):
        grid.marginals(theta)
    with pytest.raises(NotSupportedError, match="#P-hard"):
        grid.prox_entropy(theta, theta, 1.0)


@pytest.mark.parametrize("theta, message", [
    (GridPotentials(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros((2, 2))), r"unary potentials must have shape"),
    (GridPotentials(np.zeros((2, 3, 3)), np.zeros((2, 2)), np.zeros((2, 2))), r"unary potentials must have shape"),
    (GridPotentials(np.zeros((0, 3, 2)), np.zeros((2, 2)), np.zeros((2, 2))), r"unary potentials must have shape"),
    (GridPotentials(np.zeros((2, 3, 2)), np.zeros((2, 3, 2, 2)), np.zeros((2, 2))), r"horizontal potentials"),
    (GridPotentials(np.zeros((2, 3, 2)), np.zeros((2, 2)), np.zeros((2, 3, 2, 2))), r"vertical potentials"),
    (GridPotentials(np.full((2, 3, 2), np.nan), np.zeros((2, 2)), np.zeros((2, 2))), r"NaN"),
    (GridPotentials(np.zeros((2, 3, 2)), np.array([[0.0, np.inf], [0.0, 0.0]]), np.zeros((2, 2))), r"NaN"),
    ((np.zeros((2, 3, 2)),), r"GridPotentials"),
])
def test_bad_potentials_give_clear_errors(grid, theta, message):
    with pytest.raises(InvalidInputError, match=message):
        grid.argmax(theta)


def test_validate_output(grid):
    theta = GridPotentials(np.zeros((2, 3, 2)), np.zeros((2, 2)), np.zeros((2, 2)))
    assert grid.validate_output(np.ones((2, 3), dtype=bool), theta).dtype == np.int64
    with pytest.raises(InvalidInputError, match=r"example 4: grid output must have shape \(2, 3\)"):
        grid.validate_output(np.zeros((3, 2)), theta, 4)
    with pytest.raises(InvalidInputError, match=r"pixel \(1, 2\) is 2"):
        grid.validate_output(np.array([[0, 1, 0], [1, 1, 2]]), theta)
    with pytest.raises(InvalidInputError, match="integers"):
        grid.validate_output(np.full((2, 3), 0.5), theta)


def test_unknown_backend():
    with pytest.raises(InvalidInputError, match="pymaxflow"):
        BinaryGrid("magic")


@pytest.mark.slow
def test_thousands_of_instances_all_oracles(grid):
    # the "thousands of random instances" claim: argmax on every backend, max-marginals and top-5
    structures = [BinaryGrid(b) for b in ("dinic", "pymaxflow", "ortools")]
    n = 0
    for theta, (H, W, _) in instances(100, seed=7):
        Y = all_labellings(H, W)
        scores = brute_scores(theta, Y)
        for structure in structures:
            assert structure.score(theta, structure.argmax(theta)) == pytest.approx(scores.max(), abs=1e-9)
        ref = np.stack([np.where(Y == a, scores[:, None, None], -np.inf).max(axis=0) for a in (0, 1)], axis=-1)
        np.testing.assert_allclose(grid.max_marginals(theta), ref, atol=1e-9)
        np.testing.assert_allclose(grid.topk(theta, 5)[1], np.sort(scores)[::-1][:5], atol=1e-9)
        n += 1
    assert n == 1200


def test_structopt_check_grid(capsys):
    from structopt.cli import main

    assert main(["check", "grid"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].endswith("all OK")
    rows = {tuple(line.split()[:2]): line.split() for line in out.strip().splitlines()[1:-1]}
    for oracle in ("lp_relaxation", "argmax", "topk", "max_marginals", "project"):
        assert rows[("grid", oracle)][3] == "yes", rows[("grid", oracle)]
    assert rows[("grid", "marginals")][3:5] == ["-", "-"]
