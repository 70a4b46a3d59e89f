"""Latent graph model (structopt.models.latent_graph): the completion oracle against enumeration on small graphs
with cycles, the label loss, CCCP's exact objective never increasing (by enumeration), and hidden sub-states fitting
an XOR grid task that the plain graph model cannot fit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.models.latent_graph import LatentGraphModel
from structopt.solvers import bcfw, latent_ssvm


def grid_edges(rows: int, cols: int) -> np.ndarray:
    index = np.arange(rows * cols).reshape(rows, cols)
    return np.vstack([np.column_stack([index[:, :-1].ravel(), index[:, 1:].ravel()]),
                      np.column_stack([index[:-1].ravel(), index[1:].ravel()])]).astype(np.int64)


def xor_grids(n: int, seed: int, rows: int = 3, cols: int = 3, noise: float = 0.3):
    """Grids whose node label is a rectangle (label 1 inside) and whose features are (a, b, 1): a = +-1 by a hidden
    sub-class per node, b = a for label 0 and -a for label 1 (an XOR no linear unary score separates)."""
    rng = np.random.default_rng(seed)
    edges = grid_edges(rows, cols)
    X, Y = [], []
    for _ in range(n):
        r0, c0 = rng.integers(0, rows), rng.integers(0, cols)
        r1, c1 = rng.integers(r0, rows) + 1, rng.integers(c0, cols) + 1
        y = np.zeros((rows, cols), dtype=np.int64)
        y[r0:r1, c0:c1] = 1
        y = y.ravel()
        h = rng.integers(0, 2, size=y.size)
        a = np.where(h == 0, 1.0, -1.0)
        b = np.where(y == 0, a, -a)
        nodes = np.column_stack([a + noise * rng.normal(size=y.size), b + noise * rng.normal(size=y.size),
                                 np.ones(y.size)])
        X.append(so.GraphInput(nodes, edges, np.ones((len(edges), 1))))
        Y.append(y)
    return X, Y


def _all(N: int, S: int) -> np.ndarray:
    return np.array(list(itertools.product(range(S), repeat=N)), dtype=np.int64)


def test_complete_is_the_best_completion_by_enumeration():
    rng = np.random.default_rng(0)
    model = LatentGraphModel(3, 1, 2, 2)
    structure = model.structure
    X, _ = xor_grids(4, 1, rows=2, cols=3)  # 6 nodes, a cycle of 4
    outputs = _all(6, 4)
    for x in X:
        for _ in range(3):
            theta = model.potentials(x, rng.normal(size=model.n_params))
            y = rng.integers(0, 4, size=6)
            z = structure.complete(theta, y)
            assert np.array_equal(structure.labels(z), y // 2)
            consistent = outputs[np.all(outputs // 2 == y // 2, axis=1)]
            best = max(structure.score(theta, c) for c in consistent)
            assert structure.score(theta, z) == pytest.approx(best, abs=1e-9)
    assert so.hooks.has_hook(structure, "complete")


def _objective(problem, w) -> float:
    # the CCCP objective by enumeration: max over outputs of score + label loss, minus the best completion
    structure, K = problem.model.structure, problem.model.n_substates
    total = 0.0
    for i in range(problem.n):
        theta = problem.theta(i, w)
        N = theta.unary.shape[0]
        outputs = _all(N, structure.n_states)
        scores = np.array([structure.score(theta, z) for z in outputs])
        labels = problem.Y[i] // K
        losses = np.count_nonzero(outputs // K != labels, axis=1)
        total += (scores + losses).max() - scores[np.all(outputs // K == labels, axis=1)].max()
    return 0.5 * problem.lam * float(w @ w) + total / problem.n


def test_cccp_objective_is_exact_and_never_increases():
    X, Y = xor_grids(5, 2, rows=2, cols=2)
    model = LatentGraphModel(3, 1, 2, 2)
    rng = np.random.default_rng(3)
    Y0 = [model.structure.lift(y, rng.integers(0, 2, size=y.size)) for y in Y]
    problem = so.SSVMProblem(model, X, Y0, model.structure.label_loss(), 0.1)
    w0 = rng.normal(size=model.n_params)
    result = latent_ssvm(problem, max_outer=4, tol=0.0, inner_passes=30, w0=w0, random_state=0)
    objectives = [t["objective"] for t in result.trace]
    assert objectives[0] == pytest.approx(_objective(problem, w0), abs=1e-9)
    assert objectives[-1] == pytest.approx(_objective(problem, result.w), abs=1e-9)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(objectives)), objectives
    assert objectives[-1] < objectives[0] - 1e-3


def _error(model, w, X, Y) -> float:
    predicted = [model.structure.labels(z) for z in model.predict_batch(X, w)]
    return float(np.mean(np.concatenate([p != y for p, y in zip(predicted, Y, strict=True)])))


@pytest.mark.slow
def test_hidden_substates_fit_the_xor_grids_the_plain_graph_cannot():
    # CCCP finds local minima: the restart of lowest objective (the training criterion) is kept
    X, Y = xor_grids(12, 4)
    plain = LatentGraphModel(3, 1, 2, 1)
    w = bcfw(so.SSVMProblem(plain, X, Y, so.Hamming(), 1e-3), max_passes=30, random_state=0).w
    plain_error = _error(plain, w, X, Y)
    latent = LatentGraphModel(3, 1, 2, 2)
    best = None
    for restart in range(3):
        rng = np.random.default_rng([4, restart])
        Y0 = [latent.structure.lift(y, rng.integers(0, 2, size=y.size)) for y in Y]
        problem = so.SSVMProblem(latent, X, Y0, latent.structure.label_loss(normalize=True), 1e-3)
        result = latent_ssvm(problem, max_outer=15, inner_passes=50, random_state=0)
        objective = [t for t in result.trace if t["accepted"]][-1]["objective"]
        if best is None or objective < best[0]:
            best = (objective, result.w)
    latent_error = _error(latent, best[1], X, Y)
    assert plain_error > 0.1 and latent_error < 0.02, (plain_error, latent_error)


def test_bad_input_is_refused():
    structure = LatentGraphModel(3, 1, 2, 2).structure
    with pytest.raises(so.InvalidInputError, match="labels must be a 1-D integer array"):
        structure.lift(np.array([0, 2]))
    with pytest.raises(so.InvalidInputError, match="sub-states must be integers"):
        structure.lift(np.array([0, 1]), np.array([0, 2]))
    with pytest.raises(so.InvalidInputError, match="n_substates"):
        LatentGraphModel(3, 1, 2, 0)
    model = LatentGraphModel(3, 1, 2, 2)
    X, _ = xor_grids(1, 0, rows=2, cols=2)
    theta = model.potentials(X[0], model.zeros())
    with pytest.raises(so.InvalidInputError, match="the graph has 4 nodes"):
        structure.complete(theta, np.array([0, 1, 2]))
