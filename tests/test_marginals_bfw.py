"""TRW objective, MAP/LP oracles, spanning-tree ρ and Barrier Frank-Wolfe (spec barrier_fw.md §13)."""

from __future__ import annotations

import importlib
import itertools

import networkx as nx
import numpy as np
import pytest
from _marginals_models import LOOPY_EDGES, ising_grid, random_mrf, random_tree_edges

from structopt.errors import InvalidInputError
from structopt.marginals import (
    InferenceInterrupted,
    LocalPolytopeOracle,
    MarginalPolytopeOracle,
    PairwiseMRF,
    barrier_fw,
    enumerate_inference,
    read_uai,
    spanning_tree_rho,
    trbp,
    trw_objective,
)
from structopt.marginals.barrier_fw import _ActiveSet, _correction
from structopt.marginals.oracles import icm
from structopt.marginals.trw import (
    entropy_coefficients,
    line_search,
    max_spanning_tree,
    mutual_information,
    trw_gradient,
    trw_value,
)
from tests._shared_data import SHARED_DATA, needs_data


def best_vertex_value(mrf: PairwiseMRF, theta: np.ndarray) -> float:
    return max(float(theta @ mrf.vertex(np.array(x))) for x in itertools.product(*[range(int(c)) for c in mrf.cards]))


def random_interior_point(mrf: PairwiseMRF, rng: np.random.Generator) -> np.ndarray:
    mu = rng.uniform(0.1, 1.0, size=mrf.dim)
    return mu / np.add.reduceat(mu, mrf.offsets[:-1])[mrf.block_of]


# ---------------------------------------------------------------------- objective
def test_trw_gradient_matches_finite_differences_with_negative_coefficients():
    rng = np.random.default_rng(0)
    mrf = random_mrf([2, 3, 2, 2], [(0, 1), (1, 2), (2, 3)], rng)  # a chain: K_1 = K_2 = −1
    k_flat = entropy_coefficients(mrf, np.ones(mrf.n_edges))
    assert (k_flat < 0).any()
    mu = random_interior_point(mrf, rng)
    grad = np.empty_like(mu)
    trw_gradient(mrf.theta, k_flat, mu, grad)
    eps = 1e-6
    for e in range(mrf.dim):
        step = np.zeros_like(mu)
        step[e] = eps
        numeric = (trw_value(mrf.theta, k_flat, mu + step) - trw_value(mrf.theta, k_flat, mu - step)) / (2 * eps)
        assert numeric == pytest.approx(grad[e], rel=1e-5, abs=1e-6)


def test_trw_value_handles_zeros_and_is_exact_entropy_on_a_tree():
    rng = np.random.default_rng(1)
    mrf = random_mrf([2, 2, 3], [(0, 1), (1, 2)], rng)
    x = np.array([1, 0, 2])
    assert trw_objective(mrf, mrf.vertex(x), np.ones(2)) == pytest.approx(mrf.score(x))  # 0 log 0 = 0
    exact = enumerate_inference(mrf)
    assert trw_objective(mrf, exact.mu, np.ones(2)) == pytest.approx(exact.log_z, abs=1e-10)


def test_line_search_minimises_along_the_segment():
    rng = np.random.default_rng(2)
    mrf = random_mrf([2, 3, 2], [(0, 1), (1, 2), (0, 2)], rng, scale=2.0)
    k_flat = entropy_coefficients(mrf, spanning_tree_rho(mrf))
    x = random_interior_point(mrf, rng)
    d = 0.9 * (random_interior_point(mrf, rng) - x)
    gamma = line_search(mrf.theta, k_flat, x, d, 1.0)
    grid = np.linspace(0, 1, 2001)
    values = [-trw_value(mrf.theta, k_flat, x + g * d) for g in grid]
    assert -trw_value(mrf.theta, k_flat, x + gamma * d) <= min(values) + 1e-9


# ---------------------------------------------------------------------- oracles
@pytest.mark.parametrize("seed", range(6))
def test_marginal_oracle_paths_match_enumeration(seed):
    rng = np.random.default_rng(seed)
    binary = seed % 2 == 0
    cards = [2] * 5 if binary else rng.integers(1, 4, size=5).tolist()
    mrf = random_mrf(cards, LOOPY_EDGES, rng)
    theta = rng.normal(size=mrf.dim) * 2
    best = best_vertex_value(mrf, theta)
    paths = [({}, {"elimination"}),
             ({"max_elimination_table": 0, "try_lp": False, "map_solver": "cpsat"}, {"cpsat"}),
             ({"max_elimination_table": 0, "map_solver": "cpsat"}, {"lp", "cpsat"}),
             ({"max_elimination_table": 0, "map_solver": "bnb"}, {"bnb", "cpsat"})]
    for kwargs, solvers in paths:
        result = MarginalPolytopeOracle(mrf, **kwargs)(theta)
        assert result.value == pytest.approx(best, abs=1e-6)
        assert result.bound >= best - 1e-6
        if not (binary and MarginalPolytopeOracle(mrf).is_submodular(theta)):
            assert result.solver in solvers
        np.testing.assert_array_equal(result.vertex, mrf.vertex(result.assignment))


@pytest.mark.parametrize("seed", range(4))
def test_mincut_path_on_submodular_models(seed):
    rng = np.random.default_rng(seed)
    n = 6
    edges = [(i, (i + 1) % n) for i in range(n)] + [(0, 3)]
    attractive = [np.array([[a, 0.0], [0.0, b]]) + rng.normal(size=(2, 1)) + rng.normal(size=(1, 2))
                  for a, b in rng.uniform(0, 2, size=(len(edges), 2))]  # row/column shifts keep submodularity
    mrf = PairwiseMRF.from_potentials([rng.normal(size=2) for _ in range(n)], edges, attractive)
    oracle = MarginalPolytopeOracle(mrf)
    assert oracle.is_submodular(mrf.theta)
    result = oracle(mrf.theta)
    assert result.solver == "mincut"
    assert result.value == pytest.approx(best_vertex_value(mrf, mrf.theta), abs=1e-9)


def test_bnb_oracle_is_exact_only_when_proven_and_backs_off():
    # frustrated couplings on a loopy graph: the local polytope is loose, so branch-and-bound must
    # branch; with no time it proves nothing and CP-SAT answers, the certificate keeps proven bounds
    rng = np.random.default_rng(4)
    mrf = ising_grid(3, 4, 3.0, rng)
    starved = MarginalPolytopeOracle(mrf, max_elimination_table=0, map_solver="bnb", bnb_seconds=1e-9)
    roomy = MarginalPolytopeOracle(mrf, max_elimination_table=0, map_solver="bnb", bnb_seconds=30.0)
    for _ in range(6):
        # the model's frustrated couplings, perturbed as Barrier FW perturbs them (fully random potentials
        # on 3x4 are mostly tight at the root, which AD3 proves within its first chunk of iterations)
        theta = mrf.theta + 0.5 * rng.normal(size=mrf.dim)
        best = best_vertex_value(mrf, theta)
        for oracle in (starved, roomy):
            result = oracle(theta)
            assert result.value == pytest.approx(best, abs=1e-6)
            assert result.bound >= best - 1e-9
    assert starved.calls["cpsat"] >= 1  # missed (or skipped after a miss): CP-SAT answered
    assert roomy.calls["bnb"] == 6 and roomy.calls["cpsat"] == 0


def test_bfw_certificate_with_either_map_solver():
    rng = np.random.default_rng(2)
    mrf = ising_grid(3, 3, 3.0, rng)
    exact = enumerate_inference(mrf)
    for map_solver in ("bnb", "cpsat"):
        result = barrier_fw(mrf, polytope="marginal", rho="uniform", tol=1e-2, map_solver=map_solver)
        assert result.upper_bound >= exact.log_z - 1e-9


def test_integral_lp_is_used_as_map_on_trees():
    rng = np.random.default_rng(9)
    tree = random_mrf([2, 3, 2, 2, 3, 2], random_tree_edges(6, rng), rng)  # 𝕃 = 𝓜 on a tree
    theta = rng.normal(size=tree.dim)
    result = MarginalPolytopeOracle(tree, max_elimination_table=0, map_solver="cpsat")(theta)
    assert result.solver == "lp"
    assert result.value == pytest.approx(best_vertex_value(tree, theta), abs=1e-7)
    assert result.bound >= result.value


def test_local_oracle_dominates_and_is_tight_on_trees():
    rng = np.random.default_rng(3)
    loopy = random_mrf([2, 3, 2, 2, 3], LOOPY_EDGES, rng)
    theta = rng.normal(size=loopy.dim) * 3
    lp = LocalPolytopeOracle(loopy)(theta)
    assert lp.bound >= best_vertex_value(loopy, theta) - 1e-7
    tree = random_mrf([2, 3, 2, 2, 3], random_tree_edges(5, rng), rng)
    theta = rng.normal(size=tree.dim)
    assert LocalPolytopeOracle(tree)(theta).value == pytest.approx(MarginalPolytopeOracle(tree)(theta).value, abs=1e-6)


def test_icm_never_decreases_the_score():
    rng = np.random.default_rng(4)
    mrf = ising_grid(4, 4, 2.0, rng)
    x0 = rng.integers(0, 2, size=16)
    x = icm(mrf, mrf.theta, x0)
    assert mrf.score(x) >= mrf.score(x0)
    flips = [mrf.score(np.where(np.arange(16) == i, 1 - x, x)) for i in range(16)]
    assert max(flips) <= mrf.score(x) + 1e-12  # a local optimum


# ---------------------------------------------------------------------- spanning trees
def spanning_tree_frequencies(mrf: PairwiseMRF) -> np.ndarray:
    graph = nx.Graph()
    graph.add_nodes_from(range(mrf.n_nodes))
    counts, total = np.zeros(mrf.n_edges), 0
    for subset in itertools.combinations(range(mrf.n_edges), mrf.n_nodes - 1):
        tree = nx.Graph()
        tree.add_nodes_from(range(mrf.n_nodes))
        tree.add_edges_from(mrf.edges[list(subset)].tolist())
        if nx.is_tree(tree):
            counts[list(subset)] += 1
            total += 1
    return counts / total


def test_matrix_tree_rho_equals_spanning_tree_frequencies():
    mrf = random_mrf([2] * 5, LOOPY_EDGES, np.random.default_rng(0))
    rho = spanning_tree_rho(mrf)
    assert rho.sum() == pytest.approx(mrf.n_nodes - 1)
    assert (rho > 0).all() and (rho <= 1).all()
    np.testing.assert_allclose(rho, spanning_tree_frequencies(mrf), atol=1e-10)
    tree = random_mrf([2] * 6, random_tree_edges(6, np.random.default_rng(1)), np.random.default_rng(1))
    np.testing.assert_allclose(spanning_tree_rho(tree), 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_max_spanning_tree_with_zero_and_negative_weights(seed):
    rng = np.random.default_rng(seed)
    mrf = random_mrf([2] * 5, LOOPY_EDGES, rng)
    weights = rng.choice([-1.0, 0.0, 0.5, 2.0], size=mrf.n_edges)
    chosen = max_spanning_tree(mrf, weights)
    assert chosen.sum() == mrf.n_nodes - 1
    assert nx.is_tree(nx.Graph(mrf.edges[chosen > 0].tolist()))
    best = max(weights[list(s)].sum() for s in itertools.combinations(range(mrf.n_edges), mrf.n_nodes - 1)
               if nx.is_tree(nx.Graph(mrf.edges[list(s)].tolist())) and len(set(mrf.edges[list(s)].ravel())) == 5)
    assert weights @ chosen == pytest.approx(best)


def test_mutual_information_is_zero_for_products():
    rng = np.random.default_rng(5)
    mrf = random_mrf([2, 3], [(0, 1)], rng)
    p, q = np.array([0.3, 0.7]), np.array([0.2, 0.5, 0.3])
    mu = np.concatenate([p, q, np.outer(p, q).ravel()])
    assert mutual_information(mrf, mu)[0] == pytest.approx(0.0, abs=1e-12)


# ---------------------------------------------------------------------- active set
def test_delta_remap_keeps_the_point():
    rng = np.random.default_rng(6)
    mrf = random_mrf([2, 3, 2], [(0, 1), (1, 2)], rng)
    state = _ActiveSet.start(mrf.uniform(), 0.2)
    for _ in range(4):
        row = state.index(mrf.vertex(rng.integers(0, mrf.cards)), rng.bytes(8))
        state.alpha[:state.size] *= 0.6
        state.alpha[row] += 0.4
    before = state.point()
    state.shrink_delta(0.05)
    np.testing.assert_allclose(state.point(), before, atol=1e-14)
    assert state.alpha[:state.size].min() >= 0 and state.alpha[:state.size].sum() == pytest.approx(1.0)


def test_away_step_correction_keeps_a_convex_combination_and_improves():
    rng = np.random.default_rng(11)
    mrf = ising_grid(2, 3, 2.0, rng)
    k_flat = entropy_coefficients(mrf, spanning_tree_rho(mrf))
    state = _ActiveSet.start(mrf.uniform(), 0.01)
    for x in itertools.islice(itertools.product(range(2), repeat=6), 0, 64, 5):
        state.index(mrf.vertex(np.array(x)), bytes(x))
    state.alpha[:state.size] = rng.dirichlet(np.ones(state.size))
    x0 = state.point()
    x, steps = _correction(mrf.theta, k_flat, state, x0, 1e-6, 500)
    alpha = state.alpha[:state.size]
    assert alpha.min() >= 0 and alpha.sum() == pytest.approx(1.0)
    assert (alpha == 0).any()  # away steps dropped atoms
    np.testing.assert_allclose(x, state.point(), atol=1e-12)
    assert trw_value(mrf.theta, k_flat, x) > trw_value(mrf.theta, k_flat, x0)
    grad = mrf.theta - k_flat * (1 + np.log(x))  # optimal over the hull: no atom improves by more than tol
    atoms = (1 - state.delta) * state.atoms[:state.size] + state.delta * state.atoms[0]
    assert (atoms @ grad).max() - grad @ x <= 1e-6 and steps < 500


# ---------------------------------------------------------------------- barrier Frank-Wolfe
@pytest.mark.parametrize("seed", range(3))
def test_bfw_on_chains_reaches_log_z_within_100_map_calls(seed):
    rng = np.random.default_rng(seed)
    n = 8
    cards = rng.integers(2, 4, size=n).tolist()
    mrf = random_mrf(cards, [(i, i + 1) for i in range(n - 1)], rng)
    exact = enumerate_inference(mrf)
    result = barrier_fw(mrf, tol=1e-4, max_iter=100)
    assert result.converged and len(result.trace) <= 100
    np.testing.assert_allclose(result.rho, 1.0)
    assert 0 <= result.upper_bound - exact.log_z <= 1e-3
    assert abs(result.log_z - exact.log_z) <= 1e-3
    for a, b in zip(result.marginals, exact.marginals):
        np.testing.assert_allclose(a, b, atol=1e-2)


@pytest.mark.parametrize("seed", range(3))
def test_bfw_bounds_are_upper_bounds_and_marginal_is_tighter_than_local(seed):
    rng = np.random.default_rng(seed)
    mrf = ising_grid(3, 3, 3.0, rng)
    exact = enumerate_inference(mrf)
    over_m = barrier_fw(mrf, polytope="marginal", rho="uniform", tol=1e-3)
    over_l = barrier_fw(mrf, polytope="local", rho="uniform", tol=1e-3)
    for result in (over_m, over_l):
        bounds = [t["upper_bound"] for t in result.trace]
        assert min(bounds) >= exact.log_z - 1e-9  # at every iteration
        assert np.all(np.diff(bounds) <= 1e-12)  # running minimum
        deltas = np.array([t["delta"] for t in result.trace])
        changed = np.flatnonzero(np.diff(deltas) != 0)
        assert np.all(deltas[changed + 1] <= deltas[changed] / 2 + 1e-18)  # shrinks by at least 2x
        assert (result.mu >= deltas[-1] / mrf.block_size * (1 - 1e-9)).all()
    assert over_m.upper_bound <= over_l.upper_bound + 1e-3


@pytest.mark.parametrize("seed", range(2))
def test_bfw_local_uniform_matches_converged_trbp(seed):
    rng = np.random.default_rng(seed)
    mrf = random_mrf([2, 3, 2, 3, 2], LOOPY_EDGES, rng, scale=1.5)
    reference = trbp(mrf, tol=1e-12, max_iter=5000)
    assert reference.converged
    result = barrier_fw(mrf, polytope="local", rho="uniform", tol=1e-5)
    assert result.log_z == pytest.approx(reference.log_z, abs=1e-6)
    np.testing.assert_allclose(result.mu, reference.mu, atol=1e-3)


def test_bfw_rho_optimisation_tightens_the_bound():
    rng = np.random.default_rng(7)
    mrf = ising_grid(3, 3, 3.0, rng)
    exact = enumerate_inference(mrf)
    uniform = barrier_fw(mrf, rho="uniform", tol=1e-2)
    tuned = barrier_fw(mrf, rho="optimize", tol=1e-2, rho_iters=5)
    assert exact.log_z - 1e-9 <= tuned.upper_bound <= uniform.upper_bound
    assert abs(tuned.log_z - exact.log_z) < abs(uniform.log_z - exact.log_z)
    rho = tuned.rho
    assert rho.sum() == pytest.approx(mrf.n_nodes - 1) and (rho > 0).all() and (rho < 1).all()
    assert max(t["rho_iter"] for t in tuned.trace) == 5


def test_bfw_local_search_adds_icm_vertices_and_keeps_the_bound():
    rng = np.random.default_rng(10)
    mrf = ising_grid(3, 4, 3.0, rng)
    exact = enumerate_inference(mrf)
    plain = barrier_fw(mrf, rho="uniform", tol=1e-2)
    searched = barrier_fw(mrf, rho="uniform", tol=1e-2, local_search=5)
    assert searched.converged and searched.upper_bound >= exact.log_z - 1e-9
    assert searched.log_z == pytest.approx(plain.log_z, abs=2e-2)
    assert len(searched.trace) <= len(plain.trace)


def test_bfw_budget_and_input_checks():
    rng = np.random.default_rng(8)
    mrf = ising_grid(3, 3, 2.0, rng)
    short = barrier_fw(mrf, tol=0.0, max_iter=3)
    assert len(short.trace) == 3 and not short.converged
    fixed = barrier_fw(mrf, rho=spanning_tree_rho(mrf), fixed_delta=1e-4, max_iter=5)
    assert fixed.upper_bound is None and {t["delta"] for t in fixed.trace} == {1e-4}
    with pytest.raises(InvalidInputError):
        barrier_fw(mrf, polytope="cycle")
    with pytest.raises(InvalidInputError):
        barrier_fw(mrf, rho="random")
    with pytest.raises(InvalidInputError):
        barrier_fw(mrf, delta_init=0.5)
    zero = mrf.with_theta(np.where(np.arange(mrf.dim) == 0, -np.inf, mrf.theta))
    with pytest.raises(InvalidInputError, match="finite"):
        barrier_fw(zero)


@pytest.mark.parametrize(("option", "value", "match"), [
    ("time_limit", 0, "time_limit must be a finite number > 0, got 0"),  # returned the starting point
    ("time_limit", -1, "time_limit must be a finite number > 0"),
    ("time_limit", float("nan"), "time_limit must be a finite number > 0, got nan"),  # an obscure CP-SAT error
    ("max_iter", 0, "max_iter must be an integer >= 1"), ("max_iter", 1.5, "max_iter must be an integer >= 1"),
    ("tol", -0.1, "tol must be a finite number >= 0"), ("tol", float("nan"), "tol must be a finite number >= 0"),
    ("rho_iters", -1, "rho_iters must be an integer >= 0"), ("delta_init", 0.0, "delta_init must be a number in"),
    ("delta_init", float("nan"), "delta_init must be a number in (0, 0.25]"),
    ("fixed_delta", 0.5, "fixed_delta must be a number in (0, 0.25]"), ("correction", 1, "correction must be True"),
    ("correction_steps", 0, "correction_steps must be an integer >= 1"),
    ("local_search", -2, "local_search must be an integer >= 0"),
    ("oracle_time_limit", 0.0, "oracle_time_limit must be a finite number > 0"),
    ("progress", None, "progress must be True or False"), ("polytope", "cycle", "polytope must be one of"),
    ("rho", "random", "rho must be 'optimize', 'uniform' or an array"),
    ("rho", np.full(12, np.nan), "rho must have shape (12,) with finite entries in (0, 1]"),
    ("rho", np.ones(5), "rho must have shape (12,)"), ("rhoo", "uniform", "got unknown option(s) rhoo"),
])
def test_bfw_refuses_every_bad_option_naming_it(option, value, match):
    mrf = ising_grid(3, 3, 2.0, np.random.default_rng(8))
    with pytest.raises(InvalidInputError) as info:
        barrier_fw(mrf, **{option: value})
    assert str(info.value).startswith("barrier_fw") and match in str(info.value)


def test_bfw_says_why_it_stopped():
    rng = np.random.default_rng(4)
    chain = random_mrf([2, 3, 2, 2], [(0, 1), (1, 2), (2, 3)], rng)
    done = barrier_fw(chain, tol=1e-3, max_iter=200)
    assert (done.status, done.converged) == ("converged", True) and done.residual <= 1e-3
    assert done.iterations == len(done.trace) and done.residual == done.trace[-1]["certified_gap"]
    grid = ising_grid(3, 3, 2.0, rng)
    short = barrier_fw(grid, tol=0.0, max_iter=3)
    assert (short.status, short.converged, short.iterations) == ("max_iter", False, 3) and short.residual > 0
    late = barrier_fw(grid, tol=0.0, time_limit=1e-6)
    assert (late.status, late.converged, late.iterations) == ("time_limit", False, 1)


def test_bfw_ctrl_c_hands_back_the_current_iterate(monkeypatch):
    mrf = ising_grid(3, 3, 2.0, np.random.default_rng(5))
    calls = []

    def interrupted_search(*args):  # Ctrl-C in the 4th line search: x is still the iterate of the 3rd step
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return line_search(*args)

    # the package's barrier_fw attribute is the function: take the module it lives in
    monkeypatch.setattr(importlib.import_module("structopt.marginals.barrier_fw"), "line_search", interrupted_search)
    with pytest.raises(InferenceInterrupted) as info:
        barrier_fw(mrf, tol=0.0, max_iter=100, correction=False, rho="uniform")
    assert isinstance(info.value, KeyboardInterrupt)
    result = info.value.result
    assert (result.status, result.converged) == ("interrupted", False) and result.iterations == len(result.trace) == 4
    k_flat = entropy_coefficients(mrf, result.rho)
    assert result.log_z == pytest.approx(trw_value(mrf.theta, k_flat, result.mu))  # the bound at that very point
    assert result.upper_bound >= enumerate_inference(mrf).log_z  # still a certified bound
    for m in result.marginals:
        assert m.min() > 0 and m.sum() == pytest.approx(1.0)


def test_cpsat_out_of_time_before_any_solution_returns_a_vertex_without_bound():
    # issue 32: the first CP-SAT call timing out before a solution raised a bare RuntimeError in barrier_fw
    from structopt.marginals.oracles import _CpSatMap

    mrf = ising_grid(6, 6, 3.0, np.random.default_rng(3))
    x, slack, proven = _CpSatMap(mrf, time_limit=1e-9)(mrf.theta)
    assert x.shape == (mrf.n_nodes,) and slack == 0.0 and proven == np.inf
    assert x.tolist() == [int(np.argmax(m)) for m in mrf.node_marginals(mrf.theta)]  # the best node entries


@needs_data("uai")
def test_barrier_fw_whose_first_cpsat_call_times_out_returns_its_iterate_without_a_bound():
    mrf = read_uai(SHARED_DATA / "uai" / "Grids_14.uai")  # served by CP-SAT (neither min-cut nor elimination)
    result = barrier_fw(mrf, polytope="marginal", time_limit=0.5, oracle_time_limit=1e-9)
    assert result.status == "time_limit" and not result.converged and result.trace[0]["solver"] == "cpsat"
    assert result.upper_bound is None  # no proven bound: none is claimed
    assert len(result.marginals) == mrf.n_nodes and np.isfinite(result.log_z)
