"""Fertility-bounded alignment: the b-matching flow against AD3 and branch-and-bound, the model's
adjoint, targets, bad input, and a few training passes on small synthetic sentence pairs (the real
Hansards run is marked slow)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.structures.factor_graph import FactorGraphPotentials
from structopt.tasks import alignment_fertility as af
from structopt.tasks.alignment import AlignmentTask, SentencePair
from tests._shared_data import needs_data


def _random_theta(rng, markov=(), fe=None, ff=None, penalty=False):
    L, R = (int(v) for v in rng.integers(1, 6, size=2))
    fe = int(rng.integers(1, 4)) if fe is None else fe
    ff = int(rng.integers(1, 4)) if ff is None else ff
    model = af.FertilityModel(3, fe, ff, markov, penalty=penalty)
    theta = model.potentials(rng.normal(size=(L, R, 3)), rng.normal(size=model.n_params))
    # generic scores on both states (as loss-augmented potentials have), no ties
    return model, type(theta)(theta.unary + rng.normal(size=theta.unary.shape), theta.factors)


def _brute_force(theta):
    fg = theta.factor_graph
    flat = FactorGraphPotentials(theta.unary, theta.factors)
    best = max(fg.outputs(flat), key=lambda y: fg.score_labels(flat, y))
    return best, fg.score_labels(flat, best)


@pytest.mark.parametrize("seed", range(4))
def test_flow_equals_branch_and_bound_and_ad3(seed):
    rng = np.random.default_rng(seed)
    flow = af.FertilityStructure(oracle="flow")
    ad3 = af.FertilityStructure(oracle="ad3")
    bnb = af.FertilityStructure(oracle="ad3", exact=True)
    for _ in range(40):
        _, theta = _random_theta(rng)
        y_flow = flow.argmax(theta)
        assert np.array_equal(y_flow, bnb.argmax(theta))
        relaxed = ad3.argmax(theta)  # the budget-only local polytope is integral: AD3 certifies a labeling
        assert isinstance(relaxed, np.ndarray) and np.array_equal(relaxed, y_flow)
        assert np.array_equal(flow.map_labels(theta), y_flow)


@pytest.mark.parametrize("seed", range(3))
def test_flow_with_fertility_costs_equals_branch_and_bound(seed):
    rng = np.random.default_rng(10 + seed)
    for _ in range(30):
        _, theta = _random_theta(rng, penalty=True)
        full = af.bmatching(theta)
        fg, flat = theta.factor_graph, FactorGraphPotentials(theta.unary, theta.factors)
        exact = fg.map_labels(flat, exact=True)
        assert fg.score_labels(flat, full) == pytest.approx(fg.score_labels(flat, exact), abs=1e-9)
        assert np.array_equal(full, exact)
        flow = af.FertilityStructure(oracle="flow")
        bnb = af.FertilityStructure(oracle="ad3", exact=True)
        a, b = flow.argmax(theta), bnb.argmax(theta)  # statistics of the full optimum, slacks included
        np.testing.assert_array_equal(flow.stats(a, theta).unary, bnb.stats(b, theta).unary)
        n_links = type(theta).key[0] * type(theta).key[1]
        assert np.array_equal(flow.map_labels(theta), full[:n_links])


def test_fertility_costs_charge_links_beyond_the_first():
    model = af.FertilityModel(1, 3, 1, penalty=True)
    x = np.ones((1, 3, 1))
    w = np.array([1.0, 0.0, 0.6, 0.0])  # each link gains 1 (no bias); a second or third link costs 0.6
    assert model.predict(x, w).sum() == 3
    w = np.array([1.0, 0.0, 1.5, 0.0])  # extra links cost more than they gain
    assert model.predict(x, w).sum() == 1
    theta = model.potentials(x, w)
    mu = model.structure.stats(np.array([1, 1, 0]), theta)  # two links: one of the two slacks stays on
    assert mu.unary.reshape(-1, 2)[3:, 1].tolist() == [1.0, 0.0]
    assert model.nonnegative_blocks == ("fertility",)


def test_flow_matches_brute_force_on_tiny_graphs():
    rng = np.random.default_rng(7)
    for _ in range(60):
        L, R = (int(v) for v in rng.integers(1, 4, size=2))
        model = af.FertilityModel(2, int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        theta = model.potentials(rng.normal(size=(L, R, 2)), rng.normal(size=model.n_params))
        y, value = _brute_force(theta)
        got = af.bmatching(theta)
        fg = theta.factor_graph
        assert fg.score_labels(FactorGraphPotentials(theta.unary, theta.factors), got) == pytest.approx(value)
        assert np.array_equal(got, y)


@pytest.mark.parametrize("exponent", [-60, 60])
def test_flow_is_scale_free(exponent):
    # the argmax of 2^e θ is the argmax of θ (power-of-two scaling is exact): the flow's stopping test
    # is relative (an absolute 1e-12 stopped it early on scores of 1e-12)
    rng = np.random.default_rng(11)
    for _ in range(40):
        _, theta = _random_theta(rng, penalty=bool(rng.integers(2)))
        scaled = type(theta)(theta.unary * 2.0 ** exponent, theta.factors)
        assert np.array_equal(af.bmatching(scaled), af.bmatching(theta))


def test_auto_oracle_uses_the_flow_only_when_capable():
    rng = np.random.default_rng(3)
    _, theta = _random_theta(rng)
    assert af.FertilityStructure.flow_capable(theta)
    _, markov_theta = _random_theta(rng, markov=("diag",))
    assert not af.FertilityStructure.flow_capable(markov_theta)
    with pytest.raises(InvalidInputError, match="budget-only"):
        af.FertilityStructure(oracle="flow").argmax(markov_theta)
    forced = type(theta)(theta.unary.copy(), theta.factors)
    forced.unary[0] = -np.inf  # variable 0 must be on: a hard constraint, served by branch-and-bound
    assert not af.FertilityStructure.flow_capable(forced)
    assert af.FertilityStructure(exact=True).argmax(forced)[0] == 1


def test_markov_graph_exact_map_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(10):
        L, R = (int(v) for v in rng.integers(2, 4, size=2))
        model = af.FertilityModel(2, 2, 2, markov=("diag", "row", "col"), exact=True)
        theta = model.potentials(rng.normal(size=(L, R, 2)), rng.normal(size=model.n_params))
        _, value = _brute_force(theta)
        got = model.structure.argmax(theta)
        fg = theta.factor_graph
        assert fg.score_labels(FactorGraphPotentials(theta.unary, theta.factors), got) == pytest.approx(value)


def test_graph_layout():
    fg = af.build_graph(3, 4, 2, 5, markov=("col", "diag"))
    # 3 row budgets, 4 column budgets (capped at 3), then diag (2*3) and col (2*4) tables
    assert fg.n_vars == 12 and fg.n_factors == 3 + 4 + 6 + 8
    assert fg.factor(0) == ("budget", (0, 1, 2, 3), 2)
    assert fg.factor(3) == ("budget", (0, 4, 8), 3)
    assert fg.factor(7)[:2] == ("table", (0, 5))
    assert fg.factor(13)[:2] == ("table", (0, 4))


def test_adjoint_matches_potentials():
    rng = np.random.default_rng(2)
    model = af.FertilityModel(4, 3, 2, markov=("diag", "row", "col"), penalty=True)
    x = rng.normal(size=(3, 5, 4))
    w = rng.normal(size=model.n_params)
    theta = model.potentials(x, w)
    mu = type(theta)(rng.normal(size=theta.unary.shape), rng.normal(size=theta.factors.shape))
    out = model.zeros()
    model.add_features(x, mu, out)
    # <theta(w), mu> is linear in w with gradient A^T mu
    assert float(theta.unary @ mu.unary + theta.factors @ mu.factors) == pytest.approx(float(w @ out))


def test_bad_input_and_outputs_are_refused():
    model = af.FertilityModel(2, 1, 1)
    theta = model.potentials(np.zeros((2, 2, 2)), model.zeros())
    with pytest.raises(InvalidInputError, match="fertility bound"):
        model.structure.validate_output(np.array([1, 1, 0, 0]), theta)
    with pytest.raises(InvalidInputError, match="shape"):
        model.structure.validate_output(np.array([1, 0, 0]), theta)
    with pytest.raises(InvalidInputError, match=r"shape \(L>=1, R>=1, 2\)"):
        model.validate_input(np.zeros((2, 2, 3)))
    with pytest.raises(InvalidInputError, match="NaN"):
        model.validate_input(np.full((1, 1, 2), np.nan))
    with pytest.raises(InvalidInputError, match="markov"):
        af.FertilityModel(2, markov=("skip",))
    with pytest.raises(InvalidInputError, match="fertility_en"):
        af.FertilityModel(2, fertility_en=0)
    with pytest.raises(InvalidInputError, match="oracle"):
        af.FertilityStructure(oracle="cplex")
    with pytest.raises(InvalidInputError, match=r"FertilityModel\.potentials"):
        model.structure.argmax(FactorGraphPotentials(np.zeros(8), np.zeros(0)))


def test_fertility_target_is_a_maximum_feasible_subset_of_sure_links():
    rng = np.random.default_rng(4)
    for _ in range(30):
        L, R = (int(v) for v in rng.integers(1, 4, size=2))
        sure = {(j, k) for j in range(L) for k in range(R) if rng.random() < 0.6}
        dice = rng.random((L, R))
        y = af.fertility_target(sure, dice, 2, 1).reshape(L, R)
        assert af.link_set(y.ravel(), (L, R)) <= sure
        assert (y.sum(axis=1) <= 2).all() and (y.sum(axis=0) <= 1).all()
        best = 0
        for r in range(len(sure) + 1):
            for subset in itertools.combinations(sorted(sure), r):
                m = np.zeros((L, R), dtype=int)
                for j, k in subset:
                    m[j, k] = 1
                if (m.sum(axis=1) <= 2).all() and (m.sum(axis=0) <= 1).all():
                    best = max(best, r)
        assert y.sum() == best


def _synthetic_pairs(rng, n):
    """Sentence pairs whose gold links are a noisy diagonal, with a feature that sees them."""
    X, Y, pairs = [], [], []
    for i in range(n):
        L, R = (int(v) for v in rng.integers(2, 6, size=2))
        gold = np.zeros((L, R), dtype=np.int64)
        for j in range(L):
            gold[j, min(R - 1, j * R // L)] = 1
        feats = np.stack([gold + 0.4 * rng.normal(size=(L, R)), np.ones((L, R))], axis=-1)
        X.append(feats)
        Y.append(gold.ravel())
        sure = {(int(j), int(k)) for j, k in zip(*np.nonzero(gold))}
        pairs.append(SentencePair(["e"] * L, ["f"] * R, sure, set(sure), "test", i + 1))
    return X, Y, pairs


def test_training_passes_and_heldout_aer():
    rng = np.random.default_rng(0)
    X, Y, pairs = _synthetic_pairs(rng, 30)
    model = af.FertilityModel(2, 2, 3)  # a French word takes up to ceil(5 / 2) = 3 diagonal links
    Y = [model.structure.validate_output(y, model.potentials(x, model.zeros())) for x, y in zip(X, Y)]
    problem = SSVMProblem(model, X[:20], Y[:20], af.link_loss(), 0.01)
    result = bcfw(problem, max_passes=5, random_state=0)
    assert result.trace[-1]["gap"] < result.trace[0]["gap"]
    base = AlignmentTask(X[:20], Y[:20], X[20:], pairs[:20], pairs[20:], featurizer=None)
    task = af.FertilityTask(X[:20], Y[:20], X[20:], base)
    assert task.evaluate([model.predict(x, result.w) for x in X[20:]]) < 0.2
    assert task.evaluate([y for y in Y[20:]]) == 0.0
    with pytest.raises(InvalidInputError, match="held-out"):
        task.evaluate(Y[20:21])


def test_training_with_markov_factors_runs_on_ad3():
    rng = np.random.default_rng(1)
    X, Y, _ = _synthetic_pairs(rng, 6)
    model = af.FertilityModel(2, 2, 3, markov=("diag",))
    problem = SSVMProblem(model, X, Y, af.link_loss(), 0.1)
    result = bcfw(problem, max_passes=3, random_state=0)
    assert np.isfinite(result.trace[-1]["primal"]) and result.trace[-1]["gap"] >= -1e-6
    assert model.unpack(result.w)["markov"].shape == (1,)


@pytest.mark.slow
@needs_data("hansards")
def test_real_hansards_beats_the_matching_target():
    # benchmarks/alignment_fertility_results.md: 0.185 with fertility costs, 0.166 with diagonal Markov factors
    problem, evaluate, _ = af.build_task(lam=1e-3)
    result = bcfw(problem, max_passes=30, random_state=0)
    assert evaluate(result.w)["heldout_aer"] < 0.18
