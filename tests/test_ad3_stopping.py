"""AD3's stopping rules: the relative default, the tight 1e-9 option and the others keep every reported bound."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.structures.factor_graph import AD3_TIGHT, FactorGraph, FactorGraphPotentials, brute_force_map
from tests.test_ad3 import random_graph

OPTIONS = [{}, {"tol_gap": AD3_TIGHT, "tol_lp": AD3_TIGHT}, {"tol_gap": 1e-3, "tol_lp": 1e-3},
           {"max_iter": 7}, {"bound_every": 3, "tol_lp": 1e-4}, {"tol_res": 1e-3}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_every_stop_reports_a_bound_above_the_optimum_and_a_labeling_below(options):
    rng = np.random.default_rng(17)
    claimed = 0
    for k in range(25):
        fg, theta = random_graph(rng, tree=False, ties=k % 2 == 1, max_vars=6, max_states=4)
        best, _ = brute_force_map(fg, theta)
        sol, _ = fg.ad3(theta, **options)
        tol = options.get("tol_gap", 1e-6)
        if best == -np.inf:
            assert sol.labels is None or sol.status == "infeasible" or not np.isfinite(sol.score)
            continue
        # the certified bound g(λ) holds whatever stopped the run
        assert sol.upper_bound >= best - 1e-9 * (1 + abs(best)), (k, options, sol.upper_bound, best)
        if sol.labels is not None:
            assert sol.score == pytest.approx(fg.score_labels(theta, sol.labels), abs=1e-12)
            assert sol.score <= best + 1e-12
        if sol.optimal:
            claimed += 1
            assert sol.score >= sol.upper_bound - tol * (1 + abs(sol.upper_bound))
            assert sol.score >= best - tol * (1 + abs(best))
    assert claimed >= (0 if "max_iter" in options else 8)


def _potts_graph(rng: np.random.Generator, side: int, S: int) -> tuple[FactorGraph, FactorGraphPotentials]:
    # a frustrated grid of S-state Potts tables with noise: its LP relaxation is loose, so only LP
    # convergence stops AD3 (the labeling gap stays open)
    n = side * side
    fg = FactorGraph(np.full(n, S))
    edges = [(r * side + c, r * side + c + 1) for r in range(side) for c in range(side - 1)]
    edges += [(r * side + c, (r + 1) * side + c) for r in range(side - 1) for c in range(side)]
    fg.add_pairwise_tables(np.array(edges))
    tables = rng.uniform(-1.5, 1.5, size=(len(edges), 1, 1)) * np.eye(S) + rng.normal(0, 0.3, (len(edges), S, S))
    return fg, FactorGraphPotentials(rng.normal(size=n * S), tables.ravel())


def test_the_relative_default_stops_sooner_with_the_bound_close_to_the_tight_one():
    rng = np.random.default_rng(0)
    loose_lp = 0
    for _ in range(6):
        fg, theta = _potts_graph(rng, 6, 5)
        loose, _ = fg.ad3(theta)
        tight, _ = fg.ad3(theta, tol_gap=AD3_TIGHT, tol_lp=AD3_TIGHT)
        lp = fg.lp(theta).upper_bound
        assert loose.status in ("lp_converged", "optimal") and tight.status in ("lp_converged", "optimal")
        # both bounds hold and sit near the LP optimum (HiGHS, ~1e-7); the tight one nearer
        for sol, gap in ((loose, 1e-5), (tight, 1e-7)):
            assert lp - 1e-7 * (1 + abs(lp)) <= sol.upper_bound <= lp + gap * (1 + abs(lp))
        assert loose.iterations <= tight.iterations
        if tight.status == "lp_converged":  # a loose relaxation: only LP convergence stops the run
            loose_lp += 1
            assert loose.iterations < tight.iterations
    assert loose_lp >= 2
