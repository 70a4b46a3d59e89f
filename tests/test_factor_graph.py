"""FactorGraph as a data structure and a Structure: builder, validation (one clear error each), layout,
statistics, polytope, the relaxed and exact oracles, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures.base import flatten, inner
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials, brute_force_map
from structopt.validate import check_structure


def small_graph() -> FactorGraph:
    fg = FactorGraph(n_states=[2, 3, 2, 2])
    fg.add_table([0, 1], np.arange(6.0).reshape(2, 3))
    fg.add_table([1, 2], np.zeros((3, 2)))
    fg.add_logic("xor", [0, 2, 3])
    fg.add_budget([2, 3], 1)
    return fg


# --------------------------------------------------------------------------- bad input, one error each
@pytest.mark.parametrize("build, message", [
    (lambda fg: fg.add_table([0, 7], np.zeros((2, 2))), "variable 7 is out of range"),
    (lambda fg: fg.add_table([-1, 0], np.zeros((2, 2))), "variable -1 is out of range"),
    (lambda fg: fg.add_table([1, 1], np.zeros((3, 3))), "variable repeated"),
    (lambda fg: fg.add_table([0, 1], np.zeros((3, 2))), "does not match the variables' state counts"),
    (lambda fg: fg.add_table([0, 1], np.full((2, 3), np.nan)), "contains NaN"),
    (lambda fg: fg.add_table([0, 1], np.full((2, 3), np.inf)), "contains +inf"),
    (lambda fg: fg.add_table([0, 1, 2, 3], np.zeros((2, 3, 2, 2))), "at most 3 variables"),
    (lambda fg: fg.add_table([], np.zeros(())), "at least one variable"),
    (lambda fg: fg.add_table([0, 1.5], np.zeros((2, 3))), "must be an integer"),
    (lambda fg: fg.add_table([0, 1], "abc"), "not a numeric array"),
    (lambda fg: fg.add_budget([0, 2, 3], 4), "budget 4 is outside 0..3"),
    (lambda fg: fg.add_budget([0, 2], -1), "budget -1 is outside 0..2"),
    (lambda fg: fg.add_budget([0, 2], 1.5), "budget must be an integer"),
    (lambda fg: fg.add_logic("xor", [0, 1]), "logic factors need binary variables; variable 1 has 3 states"),
    (lambda fg: fg.add_budget([1, 2], 1), "logic factors need binary variables"),
    (lambda fg: fg.add_logic("nand", [0, 2]), "unknown logic factor 'nand'"),
    (lambda fg: fg.add_logic("or", [0, 0]), "variable repeated"),
    (lambda fg: fg.set_unary(0, [1.0, np.nan]), "contains NaN"),
    (lambda fg: fg.set_unary(5, [1.0, 0.0]), "out of range"),
])
def test_bad_factors_raise_one_clear_error(build, message):
    fg = FactorGraph([2, 3, 2, 2])
    with pytest.raises(InvalidInputError, match=message.replace("+", r"\+").replace("(", r"\(")):
        build(fg)


def test_duplicate_tables_are_refused_in_either_order():
    fg = FactorGraph([2, 3])
    fg.add_table([0, 1], np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match=r"duplicate table over variables \[0, 1\]"):
        fg.add_table([1, 0], np.zeros((3, 2)))


def test_logic_factors_may_repeat():
    # repeated logic factors are the same constraint twice: harmless, so accepted
    fg = FactorGraph([2, 2])
    fg.add_logic("xor", [0, 1])
    fg.add_logic("xor", [1, 0])
    assert fg.n_factors == 2


@pytest.mark.parametrize("n_states, message", [
    ([], "at least one variable"),
    ([2, 0], "variable 1 has 0 states"),
    ([2, 2.5], "must be an integer"),
    (5, "must be a sequence"),
])
def test_bad_state_counts(n_states, message):
    with pytest.raises(InvalidInputError, match=message):
        FactorGraph(n_states)


def test_bad_potentials_and_labelings():
    fg = small_graph()
    theta = fg.potentials()
    with pytest.raises(InvalidInputError, match="unary has 8 entries, expected 9"):
        fg.check_theta(FactorGraphPotentials(np.zeros(8), theta.factors))
    with pytest.raises(InvalidInputError, match=r"factors\[2\] is nan"):
        bad = theta.factors.copy()
        bad[2] = np.nan
        fg.check_theta(FactorGraphPotentials(theta.unary, bad))
    with pytest.raises(InvalidInputError, match="FactorGraphPotentials"):
        fg.check_theta(np.zeros(9))
    with pytest.raises(InvalidInputError, match="variable 1 has state 3"):
        fg.validate_output(np.array([0, 3, 0, 0]))
    with pytest.raises(InvalidInputError, match="integer array of shape"):
        fg.validate_output(np.array([0.0, 1.0, 0.0, 0.0]))
    with pytest.raises(InvalidInputError, match="unknown MAP method"):
        fg.map(theta, method="gibbs")
    with pytest.raises(InvalidInputError, match="time_limit"):
        fg.map(theta, time_limit=0)
    with pytest.raises(InvalidInputError, match="time_limit"):
        FactorGraph([2], time_limit=-1)


def test_map_checks_its_options_before_any_work():
    # FactorGraph.map used to pass its options on unchecked: a raw TypeError for an unknown one, a bad value
    # reaching the method; now every method's options are checked against the one table map_inference uses
    fg = small_graph()
    theta = fg.potentials()
    with pytest.raises(InvalidInputError, match=r"FactorGraph.map: method 'ad3' does not take option\(s\) bogus; "
                                                r"it takes time_limit, max_iter"):
        fg.map(theta, "ad3", bogus=1)
    with pytest.raises(InvalidInputError, match=r"method 'lp' does not take option\(s\) tol; it takes time_limit$"):
        fg.map(theta, "lp", tol=1e-3)
    bad = {"ad3": {"max_iter": 0, "tol_gap": -1.0, "tau": 2.0, "adapt_eta": 1, "state": "warm", "stop_upper": np.nan},
           "bnb": {"node_iter": 0, "max_nodes": True, "tol": np.inf, "state": 3},
           "auto": {"tol": -1.0, "num_workers": 0},
           "cpsat": {"resolution_bits": 53, "relative_gap": -0.1, "hint": np.zeros(4)}}
    for method, options in bad.items():
        for key, value in options.items():
            with pytest.raises(InvalidInputError, match=f"FactorGraph.map: {key} must be"):
                fg.map(theta, method, **{key: value})
    # the options an earlier call hands on (an AD3 iterate, a target bound) are accepted
    sol = fg.map(theta, "ad3", max_iter=200, state=fg.new_state(theta), stop_upper=-np.inf)
    assert sol.labels is not None


def test_one_time_limit_check_refuses_booleans_everywhere():
    import structopt as so
    from structopt.marginals import PairwiseMRF, map_inference

    fg = small_graph()
    theta = fg.potentials()
    calls = [lambda: FactorGraph([2], time_limit=True), lambda: fg.map(theta, time_limit=True),
             lambda: fg.ad3(theta, time_limit=True), lambda: fg.bnb(theta, time_limit=True),
             lambda: fg.cpsat(theta, time_limit=True), lambda: fg.map_labels(theta, time_limit=True),
             lambda: so.GraphModel(2, 1, 2, time_limit=True),
             lambda: map_inference(PairwiseMRF.from_potentials([np.zeros(2)], [], []), time_limit=True)]
    for call in calls:
        with pytest.raises(InvalidInputError, match="time_limit must be a finite number > 0, got True"):
            call()


# --------------------------------------------------------------------------- layout, statistics, scores
def test_layout_potentials_and_scores():
    fg = small_graph()
    assert fg.n_vars == 4 and fg.n_factors == 4
    assert fg.factor(2) == ("xor", (0, 2, 3), 0) and fg.factor(3) == ("budget", (2, 3), 1)
    theta = fg.potentials(unary=[[0, 1], [0, 0, 2], [1, 0], [0, 0]])
    assert theta.unary.shape == (9,) and theta.factors.shape == (12,)
    assert np.array_equal(theta.factors[fg.table_slice(0)], np.arange(6.0))
    assert fg.table_slice(2) == slice(12, 12)  # logic factors hold no scores
    y = np.array([1, 2, 0, 0])
    stats = fg.stats(y, theta)
    assert inner(theta, stats) == pytest.approx(fg.score_labels(theta, y)) == pytest.approx(1 + 2 + 1 + 5 + 0)
    assert fg.score_labels(theta, np.array([0, 2, 0, 0])) == -np.inf  # breaks the xor
    assert fg.score_labels(theta, np.array([0, 2, 1, 1])) == -np.inf  # breaks the xor and the budget


def test_outputs_are_exactly_the_labelings_satisfying_the_logic():
    fg = small_graph()
    outs = fg.enumerate(fg.potentials())
    for y in outs:
        assert y[0] + y[2] + y[3] == 1 and y[2] + y[3] <= 1
    assert len(outs) == 3 * 3  # one of (0, 2, 3) on, times 3 states of variable 1


def test_forbidden_entries_remove_outputs():
    fg = FactorGraph([2, 2])
    fg.add_table([0, 1], [[0.0, -np.inf], [-np.inf, 0.0]])
    assert len(fg.enumerate(fg.potentials())) == 2


# --------------------------------------------------------------------------- the Structure contract
def tree_graph(rng: np.random.Generator, exact: bool) -> tuple[FactorGraph, FactorGraphPotentials]:
    fg = FactorGraph([2, 3, 2, 3], exact=exact)
    fg.add_table([0, 1], rng.normal(size=(2, 3)))
    fg.add_table([1, 2], rng.normal(size=(3, 2)))
    fg.add_table([1, 3], rng.normal(size=(3, 3)))
    return fg, fg.potentials(unary=[rng.normal(size=s) for s in fg.n_states])


@pytest.mark.parametrize("exact", [False, True])
def test_check_structure_on_a_tree(exact):
    fg, theta = tree_graph(np.random.default_rng(3), exact)
    report = check_structure(fg, theta)
    for oracle in ("lp_relaxation", "argmax", "project"):
        assert report.row(oracle).ok, report.table()
    assert report.row("topk").ok, report.table()
    assert "not supported" in report.row("marginals").detail


def test_marginals_are_refused_pointing_to_the_marginals_module():
    fg = small_graph()
    with pytest.raises(NotSupportedError, match=r"#P-hard.*structopt.marginals"):
        fg.marginals(fg.potentials())


def _enumerated_scores(fg, theta):
    return np.sort([fg.score_labels(theta, y) for y in fg.outputs(theta)])[::-1]


@pytest.mark.parametrize("seed", range(6))
def test_topk_against_enumeration(seed):
    # loopy graphs with logic factors, integer scores (ties) half of the time, -inf entries
    rng = np.random.default_rng(seed)
    fg = FactorGraph([2, 3, 2, 2, 3])
    for scope in ([0, 1], [1, 2], [2, 3], [3, 0], [1, 4], [4, 3]):
        fg.add_table(scope, rng.normal(size=tuple(int(fg.n_states[v]) for v in scope)))
    fg.add_logic("or", [0, 2, 3])
    theta = fg.potentials(unary=[rng.normal(size=int(s)) for s in fg.n_states])
    if seed % 2:
        theta = FactorGraphPotentials(np.round(theta.unary), np.round(theta.factors))
    theta.factors[3] = -np.inf
    ref = _enumerated_scores(fg, theta)
    for k in (1, 4, 9, len(ref) + 3):
        outs, scores = fg.topk(theta, k)
        assert len(outs) == min(k, len(ref))
        assert np.allclose(scores, ref[:len(outs)])
        assert len({tuple(y) for y in outs}) == len(outs)  # distinct labelings
        for y, s in zip(outs, scores, strict=True):
            assert fg.score_labels(theta, y) == pytest.approx(s)


def test_topk_with_a_structured_factor_and_its_refusals():
    from structopt.structures.chain import Chain, ChainPotentials

    rng = np.random.default_rng(1)
    fg = FactorGraph([3, 3, 3, 2])
    fg.add_structure(Chain(3), [0, 1, 2], ChainPotentials(rng.normal(size=(3, 3)), rng.normal(size=(2, 3, 3))))
    fg.add_table([2, 3], rng.normal(size=(3, 2)))
    fg.add_table([0, 3], rng.normal(size=(3, 2)))
    theta = fg.potentials(unary=[rng.normal(size=int(s)) for s in fg.n_states])
    _, scores = fg.topk(theta, 7)
    assert np.allclose(scores, _enumerated_scores(fg, theta)[:7])
    with pytest.raises(NotSupportedError, match="beyond the limit"):
        fg.topk(theta, 10_000)
    for k in (0, 2.5, True):
        with pytest.raises(InvalidInputError, match="positive integer k"):
            fg.topk(theta, k)


def test_relaxed_argmax_returns_a_local_polytope_point_on_a_frustrated_cycle():
    # three binary variables that each want to differ from both neighbours: the LP optimum is the
    # fractional point (1/2, 1/2) with disagreeing edges, strictly above the MAP
    fg = FactorGraph([2, 2, 2])
    for i, j in ((0, 1), (1, 2), (0, 2)):
        fg.add_table([i, j], [[0.0, 1.0], [1.0, 0.0]])
    theta = fg.potentials()
    point = fg.argmax(theta)
    assert isinstance(point, FactorGraphPotentials)
    assert np.allclose(point.unary, 0.5, atol=1e-4)
    value = inner(theta, point)
    assert value == pytest.approx(3.0, abs=1e-4)
    assert brute_force_map(fg, theta)[0] == 2.0
    lp_value, _ = fg.lp_relaxation(theta)
    assert lp_value == pytest.approx(3.0)
    poly = fg.polytope(theta)
    assert np.allclose(poly.A_eq @ flatten(point), poly.b_eq, atol=1e-4)
    fg.exact = True
    y = fg.argmax(theta)
    assert fg.score_labels(theta, y) == 2.0


def test_structure_argmax_exact_respects_logic_factors():
    rng = np.random.default_rng(4)
    fg = small_graph()
    fg.exact = True
    for _ in range(20):
        theta = fg.potentials(unary=[rng.normal(size=s) for s in fg.n_states],
                              tables={0: rng.normal(size=(2, 3)), 1: rng.normal(size=(3, 2))})
        best, _ = brute_force_map(fg, theta)
        y = fg.argmax(theta)
        assert fg.score_labels(theta, y) == pytest.approx(best)


def test_all_methods_agree_on_a_small_graph():
    fg = small_graph()
    theta = fg.potentials(unary=[[0, 1], [0, 0, 2], [1, 0], [0, 3]])
    best, _ = brute_force_map(fg, theta)
    for method in ("ad3", "bnb", "cpsat", "lp"):
        sol = fg.map(theta, method=method)
        assert sol.upper_bound >= best - 1e-7
        assert sol.optimal and sol.score == pytest.approx(best), method


def test_variables_in_no_factor_and_single_variable_tables():
    fg = FactorGraph([3, 2, 4])
    fg.add_table([1], [2.0, -1.0])
    theta = fg.potentials(unary=[[0, 5, 1], [0, 1], [1, 2, 3, 0]])
    for method in ("ad3", "bnb", "cpsat", "lp"):
        sol = fg.map(theta, method=method)
        assert list(sol.labels) == [1, 0, 2] and sol.score == pytest.approx(5 + 2 + 3) and sol.optimal, method


def test_three_variable_tables():
    rng = np.random.default_rng(9)
    for _ in range(10):
        fg = FactorGraph([2, 3, 2, 2])
        fg.add_table([0, 1, 2], rng.normal(size=(2, 3, 2)))
        fg.add_table([2, 3], rng.normal(size=(2, 2)))
        fg.add_table([1, 3], rng.normal(size=(3, 2)))
        theta = fg.potentials(unary=[rng.normal(size=s) for s in fg.n_states])
        best, _ = brute_force_map(fg, theta)
        assert fg.map(theta, method="bnb").score == pytest.approx(best)
        ad3 = fg.map(theta)
        assert ad3.upper_bound >= best - 1e-7
        assert ad3.upper_bound == pytest.approx(fg.lp(theta).upper_bound, abs=1e-6) or ad3.status == "max_iter"
