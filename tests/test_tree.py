"""TreeStructure oracles against enumeration on random forests; TreeModel; forest validation."""

from __future__ import annotations

import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError
from structopt.smoothing import logsumexp
from structopt.structures.base import flatten
from structopt.structures.tree import TreePotentials, TreeStructure, forest_schedule
from structopt.validate import check_model, check_structure, random_instance


def random_forest_instance(rng, integer):
    n = int(rng.integers(1, 7))
    S = int(rng.integers(1, 4))
    while S ** n > 800:
        n -= 1
    structure, theta = random_instance("tree", rng, integer=integer, n_nodes=n, n_states=S,
                                       shared=bool(rng.random() < 0.3))
    return structure, theta


def brute(structure, theta):
    outs = np.array(structure.enumerate(theta))
    scores = np.array([structure.score(theta, y) for y in outs])
    flat = np.array([flatten(structure.stats(y)) for y in outs])
    return outs, scores, flat


def test_oracles_match_enumeration_on_random_forests():
    rng = np.random.default_rng(0)
    for trial in range(200):
        structure, theta = random_forest_instance(rng, integer=trial % 2 == 0)
        outs, scores, flat = brute(structure, theta)
        best = scores.max()
        y = structure.argmax(theta)
        assert structure.score(theta, y) == pytest.approx(best, abs=1e-9)
        k = int(rng.integers(1, 12))
        top, top_scores = structure.topk(theta, k)
        expected = np.sort(scores)[::-1][:k]
        assert np.allclose(top_scores, expected, atol=1e-9)
        assert np.allclose([structure.score(theta, t) for t in top], top_scores, atol=1e-9)
        assert len({t.tobytes() for t in top}) == len(top)
        log_z, marg = structure.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores), abs=1e-9)
        p = np.exp(scores - logsumexp(scores))
        assert np.allclose(flatten(marg), p @ flat, atol=1e-10)
        mm = structure.max_marginals(theta)
        expected_mm = np.full((structure.n_nodes, structure.n_states), -np.inf)
        for out, score in zip(outs, scores):
            idx = np.arange(structure.n_nodes)
            expected_mm[idx, out] = np.maximum(expected_mm[idx, out], score)
        assert np.allclose(mm, expected_mm, atol=1e-9)


def test_ties_are_broken_deterministically():
    structure = TreeStructure([(0, 1), (1, 2)], n_states=2, n_nodes=4)  # node 3 isolated
    theta = TreePotentials(np.zeros((4, 2)), np.zeros((2, 2)))
    assert structure.argmax(theta).tolist() == [0, 0, 0, 0]
    labels, scores = structure.topk(theta, 16)
    assert labels.shape == (16, 4) and np.all(scores == 0)
    assert len({row.tobytes() for row in labels}) == 16
    again, _ = structure.topk(theta, 16)
    assert np.array_equal(labels, again)


def test_single_node_and_single_state():
    structure = TreeStructure([], n_states=3, n_nodes=1)
    theta = TreePotentials(np.array([[0.5, 2.0, -1.0]]), np.zeros((0, 3, 3)))
    assert structure.argmax(theta).tolist() == [1]
    labels, scores = structure.topk(theta, 5)
    assert labels[:, 0].tolist() == [1, 0, 2] and np.allclose(scores, [2.0, 0.5, -1.0])
    one_state = TreeStructure([(0, 1), (1, 2)], n_states=1)
    theta = TreePotentials(np.ones((3, 1)), np.full((2, 1, 1), 2.0))
    labels, scores = one_state.topk(theta, 4)
    assert labels.tolist() == [[0, 0, 0]] and scores.tolist() == [7.0]
    assert one_state.marginals(theta)[0] == pytest.approx(7.0)


def test_log_partition_is_numerically_safe():
    rng = np.random.default_rng(1)
    structure, theta = random_instance("tree", rng, integer=False, n_nodes=5, n_states=3)
    big = TreePotentials(theta.unary * 1e4, theta.pairwise * 1e4)
    _, scores, flat = brute(structure, big)
    log_z, marg = structure.marginals(big)
    assert np.isfinite(log_z) and log_z == pytest.approx(logsumexp(scores), rel=1e-12)
    assert np.all(np.isfinite(flatten(marg)))
    assert np.allclose(flatten(marg), np.exp(scores - logsumexp(scores)) @ flat, atol=1e-9)


def test_check_structure_passes_on_forests():
    for seed in range(4):
        structure, theta = random_instance("tree", seed, integer=seed % 2 == 0, n_nodes=4, n_states=2)
        report = check_structure(structure, theta, k=6, random_state=seed)
        assert report.ok, report.table()


def test_project_equals_the_cvxpy_qp():
    rng = np.random.default_rng(7)
    for seed in range(6):
        n, S = int(rng.integers(1, 7)), int(rng.integers(2, 4))
        structure, theta = random_instance("tree", seed, n_nodes=n, n_states=S)
        like = structure.expand(theta)
        v = TreePotentials(rng.normal(scale=1.5, size=(n, S)), rng.normal(scale=1.5, size=like.pairwise.shape))
        assert np.allclose(flatten(structure.project(v)), flatten(structure.project_qp(v)), atol=1e-6)
    vertex = structure.stats(structure.argmax(theta))
    assert np.allclose(flatten(structure.project(vertex)), flatten(vertex), atol=1e-9)


def test_large_tree_runs_without_recursion():
    rng = np.random.default_rng(2)
    n = 3000
    edges = [(int(rng.integers(0, v)), v) for v in range(1, n)]
    structure = TreeStructure(edges, n_states=3)
    theta = TreePotentials(rng.normal(size=(n, 3)), rng.normal(size=(n - 1, 3, 3)))
    y = structure.argmax(theta)
    mm = structure.max_marginals(theta)
    assert np.max(mm) == pytest.approx(structure.score(theta, y))
    _, scores = structure.topk(theta, 3)
    assert scores[0] == pytest.approx(structure.score(theta, y)) and np.all(np.diff(scores) <= 1e-9)
    log_z, marg = structure.marginals(theta)
    assert np.isfinite(log_z) and np.allclose(marg.unary.sum(axis=1), 1.0)


def test_schedule_orients_edges():
    schedule = forest_schedule(5, np.array([[1, 0], [1, 2], [4, 3]]))
    assert schedule.order.tolist() == [0, 1, 2, 3, 4]
    assert schedule.parent.tolist() == [-1, 0, 1, -1, 3]
    assert schedule.forward.tolist() == [False, False, True, False, False]


def test_bad_forests_and_potentials_are_refused():
    with pytest.raises(InvalidInputError, match="cycle"):
        TreeStructure([(0, 1), (1, 2), (2, 0)], n_states=2)
    with pytest.raises(InvalidInputError, match="cycle"):
        TreeStructure([(0, 1), (1, 0)], n_states=2)
    with pytest.raises(InvalidInputError, match="self-loop"):
        TreeStructure([(0, 0)], n_states=2)
    with pytest.raises(InvalidInputError, match="endpoints"):
        TreeStructure([(0, 3)], n_states=2, n_nodes=3)
    with pytest.raises(InvalidInputError, match="n_nodes"):
        TreeStructure([], n_states=2)
    structure = TreeStructure([(0, 1)], n_states=2)
    with pytest.raises(InvalidInputError, match=r"example 3: .*unary"):
        structure.check_potentials(TreePotentials(np.zeros((3, 2)), np.zeros((2, 2))), 3)
    with pytest.raises(InvalidInputError, match="pairwise"):
        structure.argmax(TreePotentials(np.zeros((2, 2)), np.zeros((2, 2, 2))))
    with pytest.raises(InvalidInputError, match="NaN"):
        structure.argmax(TreePotentials(np.array([[0.0, np.nan], [0.0, 0.0]]), np.zeros((2, 2))))
    with pytest.raises(InvalidInputError, match=r"example 1: .*out of range"):
        structure.validate_output(np.array([0, 2]), None, 1)


def test_hamming_on_a_tree_counts_differing_nodes():
    structure, theta = random_instance("tree", 3, n_nodes=4, n_states=3)
    loss = so.Hamming()
    truth = np.array([0, 2, 1, 1])
    c, const = loss.linear_terms(structure, truth, theta)
    for y in structure.enumerate(theta):
        assert so.structures.inner(c, structure.stats(y)) + const == pytest.approx(np.count_nonzero(y != truth))


# ----------------------------------------------------------------------------- model
def test_tree_model_passes_check_model():
    structure = TreeStructure([(0, 1), (0, 2), (2, 3)], n_states=2, n_nodes=5)
    model = so.TreeModel(structure, n_features=6)
    rng = np.random.default_rng(4)
    report = check_model(model, [rng.normal(size=6) for _ in range(3)])
    assert report.ok, report.table()
    assert model.n_params == 6 * 5 * 2 + 3 * 2 * 2


def test_tree_model_errors_name_the_example():
    model = so.TreeModel(TreeStructure([(0, 1)], n_states=2), n_features=3)
    with pytest.raises(InvalidInputError, match=r"example 2: .*shape"):
        model.validate_input(np.zeros(4), 2)
    with pytest.raises(InvalidInputError, match=r"example 0: .*NaN"):
        model.validate_input(np.array([0.0, np.inf, 1.0]), 0)
    with pytest.raises(InvalidInputError, match="TreeStructure"):
        so.TreeModel(so.Chain(2), 3)
