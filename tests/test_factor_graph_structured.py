"""Structured factors of a FactorGraph (a library Structure over some variables): AD3 against brute
force (bounds always valid, exact when the relaxation is tight), branch-and-bound exact, the LP value
against HiGHS on the same polytope, check_structure on tree-shaped graphs, the local QP (active set on
argmax) against the projection onto the hull of the enumerated vertices, the projection fast path
equal to the active set, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.potentials import flatten
from structopt.structures._ad3_structured import solve_qp
from structopt.structures.chain import Chain, ChainPotentials
from structopt.structures.factor_graph import FactorGraph, brute_force_map
from structopt.structures.grid import BinaryGrid, GridPotentials
from structopt.structures.matching import BipartiteMatching, MatchingPotentials
from structopt.structures.tree import TreePotentials, TreeStructure
from structopt.validate import check_structure


def _supermodular(rng, shape):
    t = rng.normal(size=shape)
    t[..., 0, 0] += np.abs(t).sum(axis=(-1, -2)) + 0.1
    return t


def loopy_graph(rng: np.random.Generator, kind: str, use_project: bool = True):
    """A small loopy factor graph mixing one structured factor, tables and logic factors."""
    if kind == "chain":
        fg = FactorGraph([3, 3, 3, 2, 2])
        fg.add_structure(Chain(3), [2, 0, 1], ChainPotentials(rng.normal(size=(3, 3)), rng.normal(size=(2, 3, 3))))
        fg.add_table([1, 3], rng.normal(size=(3, 2)))
        fg.add_table([0, 4], rng.normal(size=(3, 2)))
        fg.add_logic("or", [3, 4])
    elif kind in ("matching", "matching_unmatched"):
        fg = FactorGraph([2] * 6)
        un = kind == "matching_unmatched"
        pot = MatchingPotentials(rng.normal(size=(2, 3)), rng.normal(size=2) if un else np.zeros(0),
                                 rng.normal(size=3) if un else np.zeros(0))
        fg.add_structure(BipartiteMatching(2, 3, allow_unmatched=un), rng.permutation(6), pot,
                         use_project=use_project)
        fg.add_table([0, 1], rng.normal(size=(2, 2)))
        fg.add_table([2, 5], rng.normal(size=(2, 2)))
        fg.add_budget([1, 3, 5], 1)
    elif kind == "tree":
        fg = FactorGraph([3, 3, 3, 3])
        fg.add_structure(TreeStructure(np.array([[0, 1], [1, 2], [1, 3]]), 3), [3, 1, 0, 2],
                         TreePotentials(rng.normal(size=(4, 3)), rng.normal(size=(3, 3, 3))))
        fg.add_table([0, 3], rng.normal(size=(3, 3)))
    else:  # grid
        fg = FactorGraph([2] * 6)
        fg.add_structure(BinaryGrid(), [0, 1, 2, 3], GridPotentials(rng.normal(size=(2, 2, 2)),
                                                                   _supermodular(rng, (2, 1, 2, 2)),
                                                                   _supermodular(rng, (1, 2, 2, 2))))
        fg.add_table([3, 4], rng.normal(size=(2, 2)))
        fg.add_table([4, 5], rng.normal(size=(2, 2)))
        fg.add_table([5, 0], rng.normal(size=(2, 2)))
    theta = fg.potentials(unary=[rng.normal(size=int(s)) for s in fg.n_states])
    if rng.random() < 0.3:  # integer scores: ties
        theta = type(theta)(np.round(2 * theta.unary), np.round(2 * theta.factors))
    return fg, theta


KINDS = ("chain", "matching", "matching_unmatched", "tree", "grid")


@pytest.mark.parametrize("kind", KINDS)
def test_ad3_and_bnb_against_brute_force(kind):
    tight = 0
    for seed in range(12):
        fg, theta = loopy_graph(np.random.default_rng(seed), kind)
        best, _ = brute_force_map(fg, theta)
        sol = fg.map(theta, method="ad3", max_iter=3000)
        lp = fg.lp(theta)
        # always: a valid upper bound and an exactly scored labeling
        assert sol.upper_bound >= best - 1e-7, seed
        assert sol.score <= best + 1e-9 and sol.score == pytest.approx(fg.score_labels(theta, sol.labels))
        assert lp.upper_bound >= best - 1e-7
        if sol.optimal:
            assert sol.score == pytest.approx(best, abs=1e-7)
        if sol.status == "lp_converged":  # the LP value equals HiGHS' on the same polytope
            assert sol.upper_bound == pytest.approx(lp.upper_bound, abs=1e-5 * (1 + abs(best)))
        if lp.upper_bound <= best + 1e-7:  # tight relaxation: AD3 certifies the MAP
            tight += 1
            assert sol.optimal and sol.score == pytest.approx(best), seed
        exact = fg.map(theta, method="bnb")
        assert exact.optimal and exact.score == pytest.approx(best), seed
    assert tight >= 6  # the instances exercise the certified case


def test_clamped_structured_factors_forbid_states():
    # branch-and-bound's clamps (-inf unaries) reach the structured factor: a forced state is used
    fg, theta = loopy_graph(np.random.default_rng(5), "chain")
    unary = theta.unary.copy()
    unary[fg.unary_slice(0)] = [-np.inf, 0.0, -np.inf]
    clamped = type(theta)(unary, theta.factors)
    best, _ = brute_force_map(fg, clamped)
    sol = fg.map(clamped, method="bnb")
    assert sol.optimal and sol.score == pytest.approx(best) and sol.labels[0] == 1
    assert fg.map(clamped, method="ad3").upper_bound >= best - 1e-7


def tree_shaped(rng: np.random.Generator, kind: str, exact: bool):
    """A structured factor plus tables that each add one new variable: the factor graph is a tree,
    so its local polytope is the marginal polytope."""
    if kind == "chain":
        fg = FactorGraph([3, 3, 3, 2, 3], exact=exact)
        fg.add_structure(Chain(3), [0, 1, 2], ChainPotentials(rng.normal(size=(3, 3)), rng.normal(size=(2, 3, 3))))
        fg.add_table([1, 3], rng.normal(size=(3, 2)))
        fg.add_table([2, 4], rng.normal(size=(3, 3)))
    else:
        fg = FactorGraph([2] * 5, exact=exact)
        fg.add_structure(BipartiteMatching(2, 2), [0, 1, 2, 3], MatchingPotentials(rng.normal(size=(2, 2)),
                                                                                   np.zeros(0), np.zeros(0)))
        fg.add_table([3, 4], rng.normal(size=(2, 2)))
    return fg, fg.potentials(unary=[rng.normal(size=int(s)) for s in fg.n_states])


@pytest.mark.parametrize("kind", ["chain", pytest.param("matching", marks=pytest.mark.slow)])
@pytest.mark.parametrize("exact", [False, True])
def test_check_structure_with_structured_factors(kind, exact):
    # (matching: minutes, its projection check calls the Python-driven AD3 hundreds of times)
    fg, theta = tree_shaped(np.random.default_rng(11), kind, exact)
    report = check_structure(fg, theta)
    for oracle in ("lp_relaxation", "argmax", "project"):
        assert report.row(oracle).ok, report.table()


def test_statistics_and_polytope_of_structured_factors():
    fg, theta = loopy_graph(np.random.default_rng(2), "chain")
    poly = fg.polytope(theta)
    for y in fg.enumerate(theta):
        z = flatten(fg.stats(y, theta))
        assert poly.violation(z) < 1e-9
        assert float(flatten(theta) @ z) == pytest.approx(fg.score_labels(theta, y))
    assert fg.factor(0) == ("structure", (2, 0, 1), 0)
    with pytest.raises(InvalidInputError, match="not an output of structured factor 0"):
        fgm, _ = loopy_graph(np.random.default_rng(2), "matching")
        fgm.stats(np.ones(6, dtype=np.int64))


def _hull_qp(sf, block, a, eta):
    # reference: the local QP over the convex hull of the enumerated vertices (cvxpy)
    import cvxpy as cp

    verts, imgs = [], []
    for labels in itertools.product(range(sf.S), repeat=sf.k):
        z = sf.stats_of(np.array(labels))
        if z is not None:
            verts.append(z)
            imgs.append(sf.image(z))
    V, M = np.array(verts), np.array(imgs)
    w = cp.Variable(len(verts), nonneg=True)
    obj = (block @ V.T) @ w + eta * (a @ M.T) @ w - eta / 2 * cp.sum_squares(M.T @ w)
    cp.Problem(cp.Maximize(obj), [cp.sum(w) == 1]).solve(solver=cp.CLARABEL)
    return M.T @ w.value


@pytest.mark.parametrize("kind", ["chain", "matching_unmatched", "tree"])
def test_active_set_qp_against_the_hull_projection(kind):
    rng = np.random.default_rng(7)
    fg, theta = loopy_graph(rng, kind)
    sf = fg.structured(0)
    block = theta.factors[fg.table_slice(0)]
    for _ in range(5):
        a, eta = rng.normal(size=sf.k * sf.S), float(rng.uniform(0.3, 3.0))
        mu, z, act = solve_qp(sf, block, a, np.ones(a.size, dtype=bool), eta, sf.new_active_set(), 200)
        assert np.allclose(mu, _hull_qp(sf, block, a, eta), atol=1e-5)
        assert np.allclose(mu, sf.image(z), atol=1e-9) and act.weights.sum() == pytest.approx(1.0)


def test_projection_fast_path_equals_the_active_set():
    # a perfect matching's statistics are its edge variables' indicators: the local QP is its projection
    rng = np.random.default_rng(3)
    fg_fast, theta = loopy_graph(np.random.default_rng(3), "matching", use_project=True)
    fg_slow, _ = loopy_graph(np.random.default_rng(3), "matching", use_project=False)
    fast, slow = fg_fast.structured(0), fg_slow.structured(0)
    assert fast.projectable and not slow.projectable
    block = theta.factors[fg_fast.table_slice(0)]
    for _ in range(5):
        a, eta = rng.normal(size=12), float(rng.uniform(0.3, 3.0))
        ok = np.ones(12, dtype=bool)
        mu_fast, *_ = solve_qp(fast, block, a, ok, eta, fast.new_active_set(), 200)
        mu_slow, *_ = solve_qp(slow, block, a, ok, eta, slow.new_active_set(), 200)
        assert np.allclose(mu_fast, mu_slow, atol=1e-6)
    a = fg_fast.map(theta, max_iter=2000)
    b = fg_slow.map(theta, max_iter=2000)
    assert a.score == pytest.approx(b.score) and a.upper_bound == pytest.approx(b.upper_bound, abs=1e-5)


@pytest.mark.parametrize("build, message", [
    (lambda fg: fg.add_structure(Chain(3), [0, 1], ChainPotentials(np.zeros((3, 3)), np.zeros((3, 3)))),
     "Chain has 3 nodes; got 2 variables"),
    (lambda fg: fg.add_structure(Chain(2), [0, 1, 2], ChainPotentials(np.zeros((3, 2)), np.zeros((2, 2)))),
     "needs variables with 2 states; variable 0 has 3"),
    (lambda fg: fg.add_structure(Chain(3), [0, 1, 9], ChainPotentials(np.zeros((3, 3)), np.zeros((3, 3)))),
     "variable 9 is out of range"),
    (lambda fg: fg.add_structure(Chain(3), [0, 1, 1], ChainPotentials(np.zeros((3, 3)), np.zeros((3, 3)))),
     "variable repeated"),
    (lambda fg: fg.add_structure("chain", [0, 1, 2], ChainPotentials(np.zeros((3, 3)), np.zeros((3, 3)))),
     "needs a structopt Structure"),
    (lambda fg: fg.add_structure(Chain(3), [0, 1, 2], ChainPotentials(np.full((3, 3), np.nan), np.zeros((3, 3)))),
     "structured factor 0"),
    (lambda fg: fg.add_structure(BipartiteMatching(2, 2), [0, 1, 2, 3],
                                 MatchingPotentials(np.zeros((2, 2)), np.zeros(0), np.zeros(0))),
     "needs variables with 2 states"),
])
def test_bad_structured_factors_raise_one_clear_error(build, message):
    fg = FactorGraph([3, 3, 3, 2])
    with pytest.raises(InvalidInputError, match=message):
        build(fg)


def test_refusals_with_structured_factors():
    fg, theta = loopy_graph(np.random.default_rng(1), "chain")
    with pytest.raises(NotSupportedError, match="CP-SAT has no model of structured factors"):
        fg.map(theta, method="cpsat")
    bad = theta.factors.copy()
    bad[fg.table_slice(0)][0] = -np.inf
    with pytest.raises(InvalidInputError, match="structured factor 0 has -inf scores"):
        fg.check_theta(type(theta)(theta.unary, bad))


def test_a_dependency_tree_is_a_structured_factor_over_head_variables():
    """Its per-node states depend on the sentence (n + 1 heads per word, ``hooks.node_states``): exact MAP over
    the factor alone is the tree's own argmax."""
    import structopt as so
    from structopt.structures import DependencyPotentials, DependencyTree

    rng = np.random.default_rng(5)
    for n in (2, 3, 4):
        tree, theta = DependencyTree(), DependencyPotentials(rng.normal(size=(n + 1, n + 1)))
        fg = so.FactorGraph([n + 1] * n)
        fg.add_structure(tree, list(range(n)), theta)
        solution = fg.map(method="bnb")
        np.testing.assert_array_equal(solution.labels, tree.argmax(theta))
        assert solution.optimal and np.isclose(solution.score, tree.score(theta, tree.argmax(theta)))
