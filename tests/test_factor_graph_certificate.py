"""Every MAP method's certificate on general factor graphs, against exact optima by enumeration: the bound is
at least the optimum, the optimum at least the labeling's score (for max), over a sweep of tolerances, budgets
and methods; and prediction's default (AD3, then branch-and-bound while a gap remains, within a budget)."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.structures.factor_graph import FactorGraph, brute_force_map


def random_loopy(rng: np.random.Generator) -> tuple[FactorGraph, object]:
    """3-6 variables of 2-4 states, a cycle plus chords (a frustrated relaxation now and then), a table
    over three variables sometimes, a few -inf entries, sometimes a logic factor on binary variables."""
    n = int(rng.integers(3, 7))
    states = rng.integers(2, 5, n)
    fg = FactorGraph(states)
    pairs = {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    pairs |= {tuple(sorted(rng.choice(n, 2, replace=False).tolist())) for _ in range(int(rng.integers(0, 3)))}
    tables = {}
    for u, v in sorted(pairs):
        f = fg.add_table([u, v])
        t = rng.normal(scale=2.0, size=(int(states[u]), int(states[v])))
        if rng.random() < 0.2:
            t[rng.integers(states[u]), rng.integers(states[v])] = -np.inf
        tables[f] = t
    if n >= 4 and rng.random() < 0.3:
        scope = [0, 2, 3] if (0, 2) not in pairs and (2, 3) not in pairs and (0, 3) not in pairs else None
        if scope is not None:
            tables[fg.add_table(scope)] = rng.normal(size=tuple(int(states[v]) for v in scope))
    binary = [i for i in range(n) if states[i] == 2]
    if len(binary) >= 2 and rng.random() < 0.3:
        fg.add_logic("atmost1", binary[:2])
    unary = [rng.normal(size=int(s)) for s in states]
    return fg, fg.potentials(unary=unary, tables=tables)


SWEEP = [
    ("ad3", {}), ("ad3", {"tol_gap": 1e-2, "tol_lp": 1e-2}), ("ad3", {"tol_gap": 1e-9, "tol_lp": 1e-9}),
    ("ad3", {"max_iter": 5}), ("ad3", {"max_iter": 30, "adapt_eta": False}),
    ("bnb", {}), ("bnb", {"max_nodes": 1}), ("bnb", {"max_nodes": 3, "node_iter": 20}), ("bnb", {"tol": 1e-3}),
    ("ad3_bnb", {}), ("ad3_bnb", {"tol": 1e-2}), ("ad3_bnb", {"max_nodes": 1}), ("ad3_bnb", {"budget": None}),
    ("ad3_bnb", {"tol": 1e-9, "max_nodes": 4}),
    ("auto", {}), ("lp", {}), ("cpsat", {"resolution_bits": 12}),
]


@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow) for s in range(2, 8))])
def test_certificates_hold_against_enumeration(seed):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(6):
        fg, theta = random_loopy(rng)
        optimum, _ = brute_force_map(fg, theta)
        scale = 1.0 + abs(optimum)
        for method, options in SWEEP:
            sol = fg.map(theta, method=method, **options)
            if optimum == -np.inf:
                assert sol.labels is None and sol.status == "infeasible"
                continue
            assert sol.labels is not None, (method, options)
            assert sol.score == pytest.approx(fg.score_labels(theta, sol.labels), abs=1e-12)
            assert sol.score <= optimum + 1e-9 * scale  # a labeling's value never beats the optimum
            # the bound holds: exactly for AD3's dual values and branch-and-bound's; to HiGHS' tolerance (lp);
            # CP-SAT's includes its rounding slack
            assert sol.upper_bound >= optimum - 1e-7 * scale, (method, options, sol.upper_bound, optimum)
            if sol.optimal:  # the certificate: the bound meets the labeling's score
                tol = max(options.get("tol", options.get("tol_gap", 1e-6)), 1e-9)
                assert sol.score >= optimum - 2 * tol * scale - 1e-7 * scale, (method, options)
            checked += 1
    assert checked > 0


def test_prediction_default_is_certified_and_exact_on_small_graphs():
    rng = np.random.default_rng(11)
    for _ in range(12):
        fg, theta = random_loopy(rng)
        optimum, _ = brute_force_map(fg, theta)
        if optimum == -np.inf:
            with pytest.raises(InvalidInputError, match="forbid every labeling"):
                fg.map_labels(theta)
            continue
        sol = fg.map(theta, method="ad3_bnb")
        assert sol.method == "ad3_bnb" and sol.optimal and sol.upper_bound >= optimum - 1e-9 * (1 + abs(optimum))
        y = fg.map_labels(theta)  # the default: this procedure's labeling
        assert fg.score_labels(theta, y) >= optimum - 1e-5 * (1.0 + abs(optimum))
        assert fg.score_labels(theta, fg.map_labels(theta, exact=True)) == pytest.approx(optimum, abs=1e-9)
        assert fg.score_labels(theta, fg.map_labels(theta, exact=False)) <= optimum + 1e-12
    with pytest.raises(InvalidInputError, match="exact must be True, False or None"):
        fg.map_labels(theta, exact="yes")


def test_a_spent_budget_reports_the_gap_it_leaves():
    # a frustrated 4-cycle of binary variables: the local polytope's optimum is fractional (a gap after AD3);
    # with no branch-and-bound nodes to spend the answer is AD3's labeling with an open, valid bound
    fg = FactorGraph([2, 2, 2, 2])
    repel = np.array([[0.0, 1.0], [1.0, 0.0]])
    tables = {fg.add_table([i, (i + 1) % 4]): repel for i in range(3)}
    tables[fg.add_table([3, 0])] = -repel + 1.0  # attract: an odd cycle of repulsions
    theta = fg.potentials(tables=tables)
    optimum, _ = brute_force_map(fg, theta)
    ad3 = fg.map(theta, method="ad3")
    assert not ad3.optimal and ad3.upper_bound > optimum + 0.1
    tight = fg.map(theta, method="ad3_bnb", max_nodes=1)
    assert not tight.optimal and tight.upper_bound >= optimum and tight.score <= optimum
    full = fg.map(theta, method="ad3_bnb")
    assert full.optimal and full.score == pytest.approx(optimum)
