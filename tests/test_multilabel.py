"""Multi-label outputs (structopt.structures.multilabel, structopt.models.multilabel): every oracle against
enumeration of the 2**L labelings (independent, chain and full label graphs; ties and -inf), the exact polytope
against the LP, check_structure and check_model, the Hamming loss, bad input, and BCFW on a task whose labels
interact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
import structopt.validate
from structopt.models.multilabel import MultiLabelModel
from structopt.structures.multilabel import MultiLabel, MultiLabelPotentials, label_edges


def _theta(rng: np.random.Generator, L: int, E: int, kind: int) -> MultiLabelPotentials:
    if kind % 2:
        unary, pairwise = rng.integers(-1, 2, (L, 2)).astype(float), rng.integers(-1, 2, (E, 2, 2)).astype(float)
    else:
        unary, pairwise = rng.normal(size=(L, 2)), rng.normal(size=(E, 2, 2))
    if kind % 3 == 0:
        unary[rng.random(unary.shape) < 0.2] = -np.inf
        pairwise[rng.random(pairwise.shape) < 0.2] = -np.inf
    return MultiLabelPotentials(unary, pairwise)


@pytest.mark.parametrize("graph", ["none", "chain", "full"])
def test_oracles_match_enumeration(graph):
    rng = np.random.default_rng({"none": 1, "chain": 2, "full": 3}[graph])
    checked = refused = 0
    for trial in range(18):
        L = 1 + trial % 5
        ml = MultiLabel(L, label_edges(L, graph))
        theta = _theta(rng, L, ml.n_edges, trial)
        Y = np.array(list(itertools.product((0, 1), repeat=L)), dtype=np.int64)
        scores = np.array([ml.score(theta, y) for y in Y])
        if not np.isfinite(scores).any():
            for oracle in (ml.argmax, ml.marginals, lambda t, ml=ml: ml.topk(t, 2)):
                with pytest.raises(so.InvalidInputError, match="forbid every output"):
                    oracle(theta)
            refused += 1
            continue
        assert ml.score(theta, ml.argmax(theta)) == pytest.approx(scores.max(), abs=1e-9)
        top, top_scores = ml.topk(theta, 5)
        finite = np.isfinite(scores)
        np.testing.assert_allclose(top_scores, np.sort(scores[finite])[::-1][:5], atol=1e-9)
        assert [ml.score(theta, y) for y in top] == pytest.approx(list(top_scores), abs=1e-9)
        log_z, mu = ml.marginals(theta)
        p = np.exp(scores[finite] - scores[finite].max())
        assert log_z == pytest.approx(scores[finite].max() + np.log(p.sum()), abs=1e-9)
        p /= p.sum()
        expected = sum(w * ml.stats(y, theta).unary for w, y in zip(p, Y[finite], strict=True))
        np.testing.assert_allclose(mu.unary, expected, atol=1e-9)
        if ml.n_edges:
            expected = sum(w * ml.stats(y, theta).pairwise for w, y in zip(p, Y[finite], strict=True))
            np.testing.assert_allclose(mu.pairwise, expected, atol=1e-9)
        np.testing.assert_array_equal(np.array(list(ml.outputs(theta))), Y)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("graph", ["none", "chain", "full"])
def test_check_structure_and_exact_polytope(graph):
    # the polytope is exact: the LP over it equals the best labeling, also on the full graph's frustrated cycles
    # (where the local polytope alone is loose)
    rng = np.random.default_rng(9)
    L = 4
    ml = MultiLabel(L, label_edges(L, graph))
    assert ml.forest == (graph != "full")
    for trial in range(3):
        theta = _theta(rng, L, ml.n_edges, (1, 2, 4, 5)[trial % 4])  # no -inf: ties and continuous
        report = so.validate.check_structure(ml, theta)
        assert report.ok, report.table()
    # frustrated triangle: every edge prefers disagreement; the local polytope's optimum is fractional (1.5)
    tri = MultiLabel(3, label_edges(3, "full"))
    pairwise = np.zeros((3, 2, 2))
    pairwise[:, 0, 1] = pairwise[:, 1, 0] = 1.0
    theta = MultiLabelPotentials(np.zeros((3, 2)), pairwise)
    value, _ = tri.lp_relaxation(theta)
    assert value == pytest.approx(2.0) and tri.score(theta, tri.argmax(theta)) == pytest.approx(2.0)


def test_registered_and_checked_by_the_suite():
    report = so.validate.check_builtin_structures(["multilabel"], n_instances=1)
    assert report.ok, report.table()


def test_model_features_and_hamming():
    rng = np.random.default_rng(4)
    L, F = 4, 3
    edges = label_edges(L, "chain")
    model = MultiLabelModel(F, L, edges)
    assert [name for name, _ in model.blocks] == ["unary", "pairwise"]
    X = [rng.normal(size=F) for _ in range(3)]
    report = so.validate.check_model(model, X)
    assert report.ok, report.table()
    w = rng.normal(size=model.n_params)
    W, P = model.unpack(w)["unary"], model.unpack(w)["pairwise"]
    for x in X:
        theta = model.potentials(x, w)
        for y in itertools.product((0, 1), repeat=L):
            y = np.array(y)
            direct = float(y @ (W @ x) + sum(P[e, y[a], y[b]] for e, (a, b) in enumerate(edges)))
            assert model.structure.score(theta, y) == pytest.approx(direct)
            feat = np.zeros(model.n_params)
            model.add_features(x, model.structure.stats(y, theta), feat)
            assert feat @ w == pytest.approx(direct)
    gold = np.array([1, 0, 1, 1])
    c, const = so.Hamming().linear_terms(model.structure, gold, model.potentials(X[0], w))
    for y in itertools.product((0, 1), repeat=L):
        assert model.structure.score(c, np.array(y)) + const == pytest.approx(np.sum(np.array(y) != gold))
    independent = MultiLabelModel(F, L)
    assert [name for name, _ in independent.blocks] == ["unary"] and independent.n_params == L * F


def test_bad_input_is_refused():
    with pytest.raises(so.InvalidInputError, match="out of range"):
        MultiLabel(3, [[0, 3]])
    with pytest.raises(so.InvalidInputError, match="duplicate"):
        MultiLabel(3, [[0, 1], [1, 0]])
    with pytest.raises(so.InvalidInputError, match="repeated"):
        MultiLabel(3, [[1, 1]])
    with pytest.raises(so.InvalidInputError, match="n_labels"):
        MultiLabel(0)
    ml = MultiLabel(3, [[0, 1]])
    with pytest.raises(so.InvalidInputError, match=r"shapes \(3, 2\) and \(1, 2, 2\)"):
        ml.argmax(MultiLabelPotentials(np.zeros((3, 2)), np.zeros((2, 2, 2))))
    with pytest.raises(so.InvalidInputError, match="NaN"):
        ml.argmax(MultiLabelPotentials(np.full((3, 2), np.nan), np.zeros((1, 2, 2))))
    with pytest.raises(so.InvalidInputError, match="0/1 array of 3 labels"):
        ml.validate_output(np.array([0, 2, 1]))
    with pytest.raises(so.InvalidInputError, match="multi-label input must have shape"):
        MultiLabelModel(2, 3).validate_input(np.zeros(3))
    with pytest.raises(so.NotSupportedError, match="2\\*\\*13"):
        MultiLabel(13, label_edges(13, "full")).polytope(
            MultiLabelPotentials(np.zeros((13, 2)), np.zeros((78, 2, 2))))


def _interacting_task(rng: np.random.Generator, n: int, F: int = 5):
    # labels 0 and 1 follow one feature each; label 2 is their AND: a quadrant, which no linear score of x fits,
    # but label 2's unary with the pairwise tables (0, 2) and (1, 2) does
    X = np.column_stack([rng.uniform(-3, 3, size=(4 * n, F - 1)), np.ones(4 * n)])
    X = X[(np.abs(X[:, 0]) > 0.5) & (np.abs(X[:, 1]) > 0.5)][:n]  # a margin for labels 0 and 1
    a = (X[:, 0] > 0).astype(np.int64)
    b = (X[:, 1] > 0).astype(np.int64)
    return list(X), [np.array([u, v, u & v]) for u, v in zip(a, b, strict=True)]


def test_bcfw_learns_label_interactions():
    rng = np.random.default_rng(0)
    X, Y = _interacting_task(rng, 60)
    errors = {}
    for graph in ("none", "star", "full"):
        edges = np.array([[0, 2], [1, 2]]) if graph == "star" else label_edges(3, graph)
        model = MultiLabelModel(5, 3, edges)
        problem = so.SSVMProblem(model, X, Y, so.Hamming(), lam=1e-4)
        result = so.solvers.bcfw(problem, max_passes=30, random_state=0)
        errors[graph] = np.mean([np.sum(model.predict(x, result.w) != y) for x, y in zip(X, Y, strict=True)]) / 3
    assert errors["star"] == errors["full"] == 0.0 < errors["none"]


def test_small_argmax_agrees_with_branch_and_bound():
    # the vectorised argmax of L <= 8 interacting labels against the factor graph's exact MAP (same score)
    rng = np.random.default_rng(12)
    for trial in range(20):
        L = 2 + trial % 7
        ml = MultiLabel(L, label_edges(L, "full" if trial % 2 else "chain"))
        theta = _theta(rng, L, ml.n_edges, (1, 2, 4, 5)[trial % 4])  # no -inf: ties and continuous
        fg_labels = ml._graph.map_labels(ml._factor_graph_potentials(ml.expand(theta)), exact=True)
        assert ml.score(theta, ml.argmax(theta)) == pytest.approx(ml.score(theta, fg_labels), abs=1e-9)


def test_max_marginals_beyond_enumeration_match_clamped_maps():
    # L = 17 > 16 interacting labels: one exact MAP per clamped value, against the closed form of the same
    # scores written without edges (a zero-score chain adds nothing)
    rng = np.random.default_rng(5)
    L = 17
    unary = rng.normal(size=(L, 2))
    chained = MultiLabel(L, label_edges(L, "chain"))
    mm = chained.max_marginals(MultiLabelPotentials(unary, np.zeros((L - 1, 2, 2))))
    np.testing.assert_allclose(mm, MultiLabel(L).max_marginals(MultiLabelPotentials(unary, np.zeros((0, 2, 2)))))
