"""GraphModel: pairwise CRFs on each example's own graph, trained with the relaxed LP-MAP oracle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import structopt as so
from structopt.models import GraphPotentials
from structopt.potentials import add
from structopt.solvers import get_solver
from structopt.validate import check_model


def random_graph(rng: np.random.Generator, n: int, F: int, G: int, p: float = 0.4) -> tuple:
    edges = np.array([(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p],
                     dtype=np.int64).reshape(-1, 2)
    return rng.normal(size=(n, F)), edges, rng.normal(size=(len(edges), G))


def planted_potts(rng: np.random.Generator, n_graphs: int, S: int = 3, noise: float = 1.3, beta: float = 1.2,
                  tree: bool = False) -> tuple[list, list]:
    """Graphs on random points (3 nearest neighbours, or a random tree), labels Gibbs-sampled from a
    Potts model (coherent regions), node features = one-hot label + Gaussian noise + a constant."""
    X, Y = [], []
    for _ in range(n_graphs):
        N = int(rng.integers(10, 16))
        if tree:
            edges = np.array([(int(rng.integers(0, v)), v) for v in range(1, N)], dtype=np.int64)
        else:
            pos = rng.random((N, 2))
            nbr = np.argsort(np.linalg.norm(pos[:, None] - pos[None], axis=-1), axis=1)[:, 1:4]
            edges = np.unique(np.sort([(i, j) for i in range(N) for j in nbr[i]], axis=1), axis=0)
        adj = [[] for _ in range(N)]
        for u, v in edges:
            adj[u].append(v)
            adj[v].append(u)
        y = rng.integers(0, S, N)
        for _ in range(30):
            for i in rng.permutation(N):
                e = beta * np.bincount(y[adj[i]], minlength=S)
                prob = np.exp(e - e.max())
                y[i] = rng.choice(S, p=prob / prob.sum())
        nodes = np.hstack([np.eye(S)[y] + noise * rng.normal(size=(N, S)), np.ones((N, 1))])
        X.append((nodes, edges.astype(np.int64), np.ones((len(edges), 1))))
        Y.append(y)
    return X, Y


def accuracy(model: so.GraphModel, X: list, Y: list, w: np.ndarray) -> float:
    return float(np.mean(np.concatenate([model.predict(x, w) == y for x, y in zip(X, Y)])))


@pytest.mark.parametrize("symmetric", [False, True])
def test_check_model_on_random_graphs(symmetric):
    rng = np.random.default_rng(0)
    X = [random_graph(rng, n, 3, 2) for n in (1, 4, 7, 5)]
    report = check_model(so.GraphModel(3, 2, 3, symmetric=symmetric), X)
    assert report.ok, report


def test_unary_only_model_and_blocks():
    model = so.GraphModel(3, 0, 2)
    assert model.blocks == [("unary", (3, 2))]
    assert so.GraphModel(3, 2, 4, symmetric=True).blocks == [("unary", (3, 4)), ("pairwise", (2, 10))]
    x = (np.ones((3, 3)), np.zeros((0, 2), dtype=np.int64), np.zeros((0, 0)))
    assert check_model(model, [x]).ok


def test_symmetric_weights_give_symmetric_tables():
    rng = np.random.default_rng(1)
    model = so.GraphModel(2, 2, 3, symmetric=True)
    x = model.validate_input(random_graph(rng, 5, 2, 2, p=0.8))
    theta = model.potentials(x, rng.normal(size=model.n_params))
    np.testing.assert_allclose(theta.pairwise, theta.pairwise.transpose(0, 2, 1))


def test_potentials_carry_their_graph_through_arithmetic_and_pickling():
    rng = np.random.default_rng(2)
    model = so.GraphModel(2, 1, 2)
    x = model.validate_input(random_graph(rng, 6, 2, 1))
    theta = model.potentials(x, rng.normal(size=model.n_params))
    again = pickle.loads(pickle.dumps(theta))
    assert type(again) is type(theta)
    assert type(add(theta, theta)) is type(theta)
    # the same graph in another example shares the cached factor graph
    assert model.potentials(model.validate_input(tuple(np.copy(a) for a in x)), model.zeros()).factor_graph \
        is theta.factor_graph


def test_relaxed_and_exact_oracles_agree_on_trees():
    rng = np.random.default_rng(3)
    relaxed, exact = so.GraphModel(3, 1, 3), so.GraphModel(3, 1, 3, exact=True)
    for _ in range(20):
        n = int(rng.integers(2, 9))
        edges = np.array([(int(rng.integers(0, v)), v) for v in range(1, n)], dtype=np.int64).reshape(-1, 2)
        x = relaxed.validate_input((rng.normal(size=(n, 3)), edges, rng.normal(size=(n - 1, 1))))
        theta = relaxed.potentials(x, rng.normal(size=relaxed.n_params))
        y_relaxed = relaxed.structure.argmax(theta)
        y_exact = exact.structure.argmax(theta)
        best = max(relaxed.structure.score(theta, y) for y in relaxed.structure.outputs(theta))
        assert isinstance(y_relaxed, np.ndarray)  # the local polytope is exact on a tree: a labeling
        assert relaxed.structure.score(theta, y_relaxed) == pytest.approx(best, abs=1e-7)
        assert relaxed.structure.score(theta, y_exact) == pytest.approx(best, abs=1e-7)


def test_relaxed_oracle_is_a_local_polytope_point_on_a_frustrated_cycle():
    model = so.GraphModel(1, 1, 2)
    # a triangle whose edges all reward disagreement: every labeling breaks one edge, the LP takes 1/2s
    x = model.validate_input((np.zeros((3, 1)), np.array([[0, 1], [1, 2], [0, 2]]), np.ones((3, 1))))
    w = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    mu = model.structure.argmax(model.potentials(x, w))
    assert isinstance(mu, GraphPotentials)
    np.testing.assert_allclose(mu.unary, 0.5, atol=1e-6)
    assert model.predict(x, w).shape == (3,)


def test_bcfw_on_a_planted_potts_task_beats_the_unary_baseline():
    rng = np.random.default_rng(0)
    X, Y = planted_potts(rng, 20)
    model = so.GraphModel(4, 1, 3, symmetric=True)
    result = get_solver("bcfw")(so.SSVMProblem(model, X, Y, so.Hamming(), 1.0), max_passes=60, random_state=0)
    last = result.trace[-1]
    assert last["gap"] <= 0.05 * last["primal"]
    X_unary = [(x[0], np.zeros((0, 2), dtype=np.int64), np.zeros((0, 0))) for x in X]
    unary = so.GraphModel(4, 0, 3)
    w_unary = get_solver("bcfw")(so.SSVMProblem(unary, X_unary, Y, so.Hamming(), 1.0), max_passes=25,
                                 random_state=0).w
    acc, acc_unary = accuracy(model, X, Y, result.w), accuracy(unary, X_unary, Y, w_unary)
    assert acc >= acc_unary + 0.15, (acc, acc_unary)


def test_bcfw_gap_on_trees_certifies_the_exact_ssvm():
    rng = np.random.default_rng(1)
    X, Y = planted_potts(rng, 10, tree=True)
    model = so.GraphModel(4, 1, 3, symmetric=True)
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), 1.0)
    result = get_solver("bcfw")(problem, max_passes=20, random_state=0)
    # on trees the relaxed hinge is the exact one: the exact oracle gives the same primal value
    exact = so.SSVMProblem(so.GraphModel(4, 1, 3, symmetric=True, exact=True), X, Y, so.Hamming(), 1.0)
    assert exact.primal(result.w) == pytest.approx(problem.primal(result.w), rel=1e-6)
    assert result.trace[-1]["gap"] <= 0.05 * result.trace[-1]["primal"]


@pytest.mark.parametrize("name", ["frank_wolfe", "ssg", "sgd"])  # sgd without smoothing: subgradients
def test_other_max_oracle_solvers_train_it(name):
    rng = np.random.default_rng(4)
    X, Y = planted_potts(rng, 6)
    result = get_solver(name)(so.SSVMProblem(so.GraphModel(4, 1, 3), X, Y, so.Hamming(), 1.0), max_passes=3)
    assert np.isfinite(result.trace[-1]["primal"])


@pytest.mark.parametrize("name, options", [("sgd", {"mu": 0.1}), ("svrg", {}), ("casimir", {})])
def test_smoothing_solvers_refuse_with_the_reason(name, options):
    rng = np.random.default_rng(5)
    X, Y = planted_potts(rng, 3)
    problem = so.SSVMProblem(so.GraphModel(4, 1, 3), X, Y, so.Hamming(), 1.0)
    with pytest.raises(so.NotSupportedError, match="no top-K oracle: MAP on a graph with cycles is NP-hard"):
        get_solver(name)(problem, max_passes=1, **options)


GOOD = (np.zeros((3, 2)), np.array([[0, 1], [1, 2]]), np.ones((2, 1)))


@pytest.mark.parametrize("x, message", [
    ((GOOD[0], np.array([[0, 3], [1, 2]]), GOOD[2]), r"edge 0 \(0, 3\) names a node outside 0..2"),
    ((GOOD[0], np.array([[0, -1], [1, 2]]), GOOD[2]), "outside 0..2"),
    ((GOOD[0], np.array([[0, 1], [2, 2]]), GOOD[2]), "edge 1 is a self-loop on node 2"),
    ((GOOD[0], np.array([[0, 1], [1, 0]]), GOOD[2]), r"edges 0 and 1 join the same nodes \(0, 1\)"),
    ((GOOD[0], np.array([[0, 1], [0, 1]]), GOOD[2]), "duplicate edge"),
    ((GOOD[0], np.array([0, 1, 1, 2]), GOOD[2]), r"edges must have shape \(E, 2\)"),
    ((GOOD[0], np.array([[0.0, 1.0], [1.0, 2.0]]), GOOD[2]), "integer node indices"),
    ((np.zeros((3, 4)), GOOD[1], GOOD[2]), r"node features must have shape \(N>=1, 2\)"),
    ((np.zeros((0, 2)), np.zeros((0, 2), dtype=int), np.zeros((0, 1))), "N>=1"),
    ((GOOD[0], GOOD[1], np.ones((3, 1))), r"edge features must have shape \(2, 1\)"),
    ((np.full((3, 2), np.nan), GOOD[1], GOOD[2]), "node features contain NaN"),
    ((GOOD[0], GOOD[1], np.array([[1.0], [np.nan]])), "edge features contain NaN"),
    ((GOOD[0], GOOD[1]), "must be a tuple"),
])
def test_bad_inputs_raise_one_clear_error_naming_the_example(x, message):
    model = so.GraphModel(2, 1, 3)
    with pytest.raises(so.InvalidInputError, match="example 1: .*" + message):
        so.SSVMProblem(model, [GOOD, x], [np.zeros(3, dtype=int)] * 2, so.Hamming(), 1.0)


@pytest.mark.parametrize("y, message", [
    (np.zeros(4, dtype=int), r"shape \(3,\) \(one per node\)"),
    (np.array([0, 3, 1]), "node 1 has label 3, outside 0..2"),
    (np.array([0, -1, 1]), "node 1 has label -1"),
    (np.array([0.0, 1.0, 1.0]), "integer array"),
])
def test_bad_labels_raise_one_clear_error_naming_the_example(y, message):
    with pytest.raises(so.InvalidInputError, match="example 1: .*" + message):
        so.SSVMProblem(so.GraphModel(2, 1, 3), [GOOD, GOOD], [np.zeros(3, dtype=int), y], so.Hamming(), 1.0)


def test_bad_model_arguments():
    with pytest.raises(so.InvalidInputError, match="n_states"):
        so.GraphModel(2, 1, 0)
    with pytest.raises(so.InvalidInputError, match="symmetric"):
        so.GraphModel(2, 1, 2, symmetric="yes")
    with pytest.raises(so.InvalidInputError, match=r"come from GraphModel\.potentials"):
        so.GraphModel(2, 1, 2).structure.argmax(GraphPotentials(np.zeros((2, 2)), np.zeros((1, 2, 2))))


def test_factor_graph_per_node_hooks():
    fg = so.FactorGraph([2, 3])
    fg.add_table([0, 1])
    assert fg.states_per_node == 3
    c = np.array([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0]])
    theta = fg.node_potentials(c)
    np.testing.assert_allclose(theta.unary, [1, 2, 3, 4, 5])
    assert theta.factors.shape == (6,) and not theta.factors.any()
    # Hamming through the hooks: loss-augmented MAP of zero scores flips every variable
    terms, const = so.Hamming().linear_terms(fg, np.array([1, 2]), fg.potentials())
    y = fg.map_labels(terms)
    assert y[0] == 0 and y[1] != 2 and const == 0.0


@pytest.mark.parametrize("name, options, oracle", [
    ("svrg", {}, "topk"), ("casimir_svrg", {"kind": "entropy"}, "marginals"), ("sgd", {"mu": 0.1}, "topk")])
def test_smoothed_solvers_refuse_before_the_run_naming_the_missing_oracle(name, options, oracle):
    rng = np.random.default_rng(0)
    X = [random_graph(rng, 5, 3, 1) for _ in range(3)]
    problem = so.SSVMProblem(so.GraphModel(3, 1, 2), X, [rng.integers(0, 2, size=5) for _ in X], so.Hamming(), 1.0)
    assert not problem.has_topk and not problem.has_marginals
    with pytest.raises(so.NotSupportedError, match=f"needs a {oracle} oracle"):
        get_solver(name)(problem, max_passes=1, **options)


def test_warm_started_relaxed_oracle_matches_cold_starts():
    # drifting weights, as in training: the warm-started oracle's point is LP-optimal like a cold one's
    rng = np.random.default_rng(8)
    x = random_graph(rng, 9, 3, 2, p=0.5)
    cold, warm = so.GraphModel(3, 2, 2), so.GraphModel(3, 2, 2, warm_start=True)
    w = rng.normal(size=cold.n_params)
    for _ in range(6):
        w = w + 0.05 * rng.normal(size=w.size)
        theta = cold.potentials(cold.validate_input(x), w)
        values = []
        for model in (cold, warm):
            point = model.structure.argmax(theta)
            values.append(so.potentials.inner(theta, model.structure.stats(point, theta)))
        assert values[1] == pytest.approx(values[0], abs=1e-6)
    assert type(theta)._warm is not None
    with pytest.raises(so.InvalidInputError, match="warm_start"):
        so.GraphModel(3, 2, 2, warm_start="yes")
