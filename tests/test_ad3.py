"""AD3 on factor graphs: brute force on random graphs, local QPs against cvxpy, LP against HiGHS, UAI MAP."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

from structopt.structures import _ad3_kernels as K
from structopt.structures.factor_graph import AD3_TIGHT, FactorGraph, FactorGraphPotentials, brute_force_map
from tests._shared_data import SHARED_DATA, needs_data

TOL = 1e-7


def random_graph(rng: np.random.Generator, *, tree: bool, ties: bool, logic: bool = True,
                 max_vars: int = 6, max_states: int = 3) -> tuple[FactorGraph, FactorGraphPotentials]:
    """A random small factor graph: a tree of pairwise tables, or a loopy mix of pairwise tables, an
    occasional 3-variable table and logic factors (xor / atmost1 / or / budget) on the binary variables.
    ``ties``: small integer scores (many tied optima)."""
    n = int(rng.integers(2, max_vars + 1))
    states = [2 if (logic and rng.random() < 0.6) else int(rng.integers(2, max_states + 1)) for _ in range(n)]
    fg = FactorGraph(states)

    def scores(shape):
        return rng.integers(-2, 3, size=shape).astype(float) if ties else rng.normal(size=shape)

    if tree:
        for v in range(1, n):
            u = int(rng.integers(0, v))
            fg.add_table([u, v], scores((states[u], states[v])))
    else:
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        rng.shuffle(pairs)
        for i, j in pairs[:int(rng.integers(1, len(pairs) + 1))]:
            fg.add_table([i, j], scores((states[i], states[j])))
        if n >= 3 and rng.random() < 0.3:
            scope = rng.choice(n, 3, replace=False).tolist()
            if frozenset(scope) not in fg._table_scopes:
                fg.add_table(scope, scores(tuple(states[v] for v in scope)))
        binary = [i for i in range(n) if states[i] == 2]
        if logic:
            for _ in range(int(rng.integers(0, 3))):
                if len(binary) < 2:
                    break
                scope = rng.choice(binary, int(rng.integers(2, len(binary) + 1)), replace=False).tolist()
                kind = str(rng.choice(["xor", "atmost1", "or", "budget"]))
                if kind == "budget":
                    fg.add_budget(scope, int(rng.integers(0, len(scope) + 1)))
                else:
                    fg.add_logic(kind, scope)
    return fg, fg.potentials(unary=[scores(s) for s in states])


def check_against_brute_force(seed: int, count: int, bnb_every: int, cpsat_every: int) -> dict:
    rng = np.random.default_rng(seed)
    tally = {"instances": 0, "claimed_optimal": 0, "trees": 0, "lp_checked": 0, "lp_max_diff": 0.0,
             "bnb": 0, "cpsat": 0, "infeasible": 0}
    for k in range(count):
        tree = k % 3 == 0
        fg, theta = random_graph(rng, tree=tree, ties=k % 2 == 1)
        best, _ = brute_force_map(fg, theta)
        # the tight tolerances: the LP value is compared to HiGHS' at 1e-6 below (the default's relative 1e-6
        # leaves the bound up to about that far above it; tests/test_ad3_stopping.py checks the default)
        sol, _ = fg.ad3(theta, max_iter=20_000, tol_gap=AD3_TIGHT, tol_lp=AD3_TIGHT)
        tally["instances"] += 1
        tally["infeasible"] += best == -np.inf
        # the certified bound is never below the true max
        assert sol.upper_bound >= best - TOL * (1 + abs(best)), (seed, k, sol.upper_bound, best)
        if sol.optimal:
            tally["claimed_optimal"] += 1
            assert sol.score == pytest.approx(best, abs=TOL), (seed, k)
            assert fg.score_labels(theta, sol.labels) == pytest.approx(sol.score, abs=1e-12)
        if tree:
            tally["trees"] += 1
            assert sol.optimal and sol.score == pytest.approx(best, abs=TOL), (seed, k, sol.status)
        if sol.status in ("lp_converged", "optimal"):
            lp = fg.lp(theta)
            tally["lp_checked"] += 1
            diff = abs(sol.upper_bound - lp.upper_bound)
            tally["lp_max_diff"] = max(tally["lp_max_diff"], diff)
            assert diff <= 1e-6 * (1 + abs(lp.upper_bound)), (seed, k, sol.upper_bound, lp.upper_bound)
        if k % bnb_every == 0:
            tally["bnb"] += 1
            b = fg.bnb(theta, time_limit=20)
            if best == -np.inf:
                assert b.status == "infeasible" and b.labels is None
            else:
                assert b.optimal and b.score == pytest.approx(best, abs=TOL), (seed, k, b.status)
        if k % cpsat_every == 0:
            tally["cpsat"] += 1
            c = fg.cpsat(theta, time_limit=20)
            if best == -np.inf:
                assert c.status == "infeasible"
            else:
                assert c.optimal and c.score == pytest.approx(best, abs=TOL), (seed, k, c.status)
                assert c.upper_bound >= best - TOL
    return tally


def test_brute_force_random_factor_graphs():
    tally = check_against_brute_force(seed=2024, count=1000, bnb_every=3, cpsat_every=10)
    assert tally["instances"] == 1000 and tally["claimed_optimal"] > 800 and tally["lp_checked"] > 800
    print(tally)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_brute_force_random_factor_graphs_thorough(seed):
    tally = check_against_brute_force(seed=seed, count=1000, bnb_every=1, cpsat_every=4)
    assert tally["instances"] == 1000
    print(tally)


def test_exact_structure_argmax_equals_brute_force():
    rng = np.random.default_rng(7)
    for k in range(40):
        fg, theta = random_graph(rng, tree=False, ties=k % 2 == 0)
        fg.exact = True
        best, maximisers = brute_force_map(fg, theta)
        if best == -np.inf:
            continue
        y = fg.argmax(theta)
        assert any((y == m).all() for m in maximisers)


# --------------------------------------------------------------------------- local QPs against cvxpy
def cvxpy_box_sum(c: np.ndarray, lo: float, hi: float) -> np.ndarray:
    import cvxpy as cp

    z = cp.Variable(c.size)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(z - c)), [z >= 0, z <= 1, cp.sum(z) >= lo, cp.sum(z) <= hi])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return np.asarray(z.value)


@pytest.mark.parametrize("kind", ["xor", "atmost1", "or", "budget"])
def test_logic_projection_against_cvxpy(kind):
    rng = np.random.default_rng({"xor": 0, "atmost1": 1, "or": 2, "budget": 3}[kind])
    for _ in range(40):
        n = int(rng.integers(1, 9))
        c = rng.normal(scale=rng.choice([0.3, 1.0, 3.0]), size=n) + rng.choice([-1.0, 0.0, 0.5, 1.0])
        if kind == "xor":
            lo, hi = 1.0, 1.0
        elif kind == "atmost1":
            lo, hi = 0.0, 1.0
        elif kind == "or":
            lo, hi = 1.0, float(n)
        else:
            lo, hi = 0.0, float(rng.integers(0, n + 1))
        out = np.empty(n)
        K.project_box_sum(c, lo, hi, out)
        assert np.allclose(out, cvxpy_box_sum(c, lo, hi), atol=1e-6)
        assert lo - 1e-12 <= out.sum() <= hi + 1e-12 and (out >= 0).all() and (out <= 1).all()


def test_binary_pairwise_closed_form_against_cvxpy():
    import cvxpy as cp

    rng = np.random.default_rng(5)
    for _ in range(60):
        c1, c2 = rng.normal(0.5, 1.0, size=2)
        c12 = rng.normal(scale=rng.choice([0.1, 1.0, 3.0]))
        z = cp.Variable(3)  # z1, z2, z12
        constraints = [z[2] >= 0, z[2] <= z[0], z[2] <= z[1], z[2] >= z[0] + z[1] - 1, z[0] <= 1, z[1] <= 1]
        objective = cp.Minimize(0.5 * cp.square(z[0] - c1) + 0.5 * cp.square(z[1] - c2) - c12 * z[2])
        cp.Problem(objective, constraints).solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11)
        got = np.array(K.pair_closed_form(c1, c2, c12))
        value = 0.5 * (got[0] - c1) ** 2 + 0.5 * (got[1] - c2) ** 2 - c12 * got[2]
        assert value <= objective.value + 1e-7
        assert np.allclose(got[:2], z.value[:2], atol=1e-5)


def dense_qp_reference(states: list[int], table: np.ndarray, targets: list[np.ndarray], eta: float) -> np.ndarray:
    """argmax θ·q - (η/2) Σ_i ‖M_i q - a_i‖² over the simplex of configurations (cvxpy)."""
    import cvxpy as cp

    grid = np.indices(states).reshape(len(states), -1)
    q = cp.Variable(grid.shape[1])
    terms = []
    for j, S in enumerate(states):
        M = (grid[j][None, :] == np.arange(S)[:, None]).astype(float)
        terms.append(cp.sum_squares(M @ q - targets[j]))
    problem = cp.Problem(cp.Maximize(table.ravel() @ q - eta / 2 * sum(terms)), [q >= 0, cp.sum(q) == 1])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    marginals = [((grid[j][None, :] == np.arange(S)[:, None]).astype(float) @ q.value) for j, S in enumerate(states)]
    return np.concatenate(marginals), float(problem.value)


@pytest.mark.parametrize("states", [[3, 2], [2, 2, 2], [3, 3], [2, 3, 4]])
def test_dense_active_set_qp_against_cvxpy(states):
    rng = np.random.default_rng(sum(states) * 10 + len(states))
    fg = FactorGraph(states)
    fg.add_table(list(range(len(states))))
    fl = fg.flat
    vallow = np.ones(int(fl.voff[-1]), dtype=bool)
    pair_fast = np.zeros(1, dtype=bool)
    acfg = np.zeros(int(fl.aoff[-1]), dtype=np.int64)
    aw = np.zeros(int(fl.aoff[-1]))
    acount = np.zeros(1, dtype=np.int64)
    for trial in range(25):  # successive calls warm-start from the previous active set, as in AD3
        table = rng.normal(scale=rng.choice([0.2, 1.0, 4.0]), size=states)
        eta = float(rng.choice([0.1, 1.0, 10.0]))
        targets = [rng.normal(0.3, 0.8, size=S) for S in states]
        target = np.concatenate(targets)
        qe = np.zeros(int(fl.eoff[-1]))
        qt = np.zeros(int(fl.toff[-1]))
        K.local_qp(0, fl.fkind, fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow, table.ravel(),
                   fl.toff, target, eta, acfg, aw, fl.aoff, acount, qe, qt, 500, pair_fast)
        ref_marg, ref_value = dense_qp_reference(states, table, targets, eta)
        value = table.ravel() @ qt - eta / 2 * np.sum((qe - target) ** 2)
        assert value >= ref_value - 1e-6 * (1 + abs(ref_value)), (trial, value, ref_value)
        assert np.allclose(qe, ref_marg, atol=1e-4), trial
        assert qt.min() >= 0 and qt.sum() == pytest.approx(1.0)


# --------------------------------------------------------------------------- certificates and chunks
def test_lp_value_matches_highs_on_loopy_multistate_graphs():
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(30):
        fg, theta = random_graph(rng, tree=False, ties=False, logic=False, max_vars=7, max_states=4)
        sol, _ = fg.ad3(theta, max_iter=50_000, tol_lp=1e-10)
        lp = fg.lp(theta)
        assert sol.upper_bound >= lp.upper_bound - 1e-7 * (1 + abs(lp.upper_bound))
        if sol.status in ("lp_converged", "optimal"):  # optimal: the bound met an integral point
            checked += 1
            assert sol.upper_bound == pytest.approx(lp.upper_bound, abs=1e-6)
    assert checked >= 20


def test_infeasible_hard_factors_are_reported():
    # contradictory logic factors: each is satisfiable alone, the local polytope is empty. AD3's dual
    # then decreases without bound (no finite certificate): it finds no labeling and claims nothing;
    # branch-and-bound (clamped leaves have bound -inf) and CP-SAT prove infeasibility
    fg = FactorGraph([2, 2])
    fg.add_logic("xor", [0, 1])
    fg.add_budget([0, 1], 0)
    theta = fg.potentials()
    sol, _ = fg.ad3(theta, max_iter=2000)
    assert sol.labels is None and not sol.optimal and sol.status == "max_iter"
    assert fg.bnb(theta).status == "infeasible"
    assert fg.cpsat(theta).status == "infeasible"
    # a variable with every state forbidden: g(λ) = -inf certifies it at once
    theta = FactorGraphPotentials(np.array([-np.inf, -np.inf, 0.0, 0.0]), theta.factors)
    sol, _ = fg.ad3(theta)
    assert sol.status == "infeasible" and sol.upper_bound == -np.inf


def test_forbidden_entries_are_respected():
    fg = FactorGraph([3, 3])
    fg.add_table([0, 1], np.where(np.eye(3) > 0, -np.inf, 0.0))  # the two variables must differ
    theta = fg.potentials(unary=[[5.0, 0.0, 0.0], [5.0, 0.0, 1.0]])
    for method in ("ad3", "bnb", "cpsat", "lp"):
        sol = fg.map(theta, method=method)
        assert sol.labels[0] != sol.labels[1] and sol.score == pytest.approx(6.0), method


def test_eta_schedules_and_warm_starts_reach_the_highs_lp_value():
    # η balanced throughout, frozen early, never balanced, and warm starts from another problem's
    # iterate: every bound is valid and the converged ones equal HiGHS' LP value
    rng = np.random.default_rng(5)
    fg, theta = big_grid(5, rng)
    lp = fg.lp(theta).upper_bound
    other = FactorGraphPotentials(theta.unary + rng.normal(size=theta.unary.size),
                                  theta.factors + rng.normal(size=theta.factors.size))
    _, warm = fg.ad3(other, max_iter=300)
    for kwargs in ({"eta_iters": 10**9}, {}, {"eta_iters": 20}, {"adapt_eta": False}, {"state": warm}):
        sol, _ = fg.ad3(theta, max_iter=50_000, **kwargs)
        assert sol.upper_bound >= lp - 1e-7 * (1 + abs(lp)), kwargs
        assert sol.score == pytest.approx(fg.score_labels(theta, sol.labels))
        if sol.status in ("lp_converged", "optimal"):
            assert sol.upper_bound == pytest.approx(lp, abs=1e-6) or sol.status == "optimal", kwargs


def big_grid(n: int, rng: np.random.Generator) -> tuple[FactorGraph, FactorGraphPotentials]:
    fg = FactorGraph([2] * (n * n))
    for r in range(n):
        for c in range(n):
            v = r * n + c
            if c + 1 < n:
                fg.add_table([v, v + 1], rng.normal(size=(2, 2)) * 2)
            if r + 1 < n:
                fg.add_table([v, v + n], rng.normal(size=(2, 2)) * 2)
    return fg, fg.potentials(unary=[rng.normal(size=2) for _ in range(n * n)])


def test_ad3_returns_to_python_in_chunks_and_honours_time_limits():
    fg, theta = big_grid(30, np.random.default_rng(0))
    start = time.perf_counter()
    sol, _ = fg.ad3(theta, time_limit=0.6, tol_gap=-1.0, tol_lp=-1.0)  # never stops by itself
    elapsed = time.perf_counter() - start
    assert sol.status == "time_limit" and elapsed < 1.5
    times = [0.0] + [t["time"] for t in sol.trace]
    assert max(np.diff(times)) < 0.5  # the compiled loop came back at least every half second


def test_lp_value_is_the_last_iterates_when_the_bound_closes_early():
    # a run stopped by the bound (an integral labeling meets it) before the chunk's end still reports the
    # LP objective of its last iterate, never the previous chunk's value or the initial 0
    checked = 0
    for seed in range(8):
        fg, theta = FactorGraph.example(np.random.default_rng(seed), integer=False, n_vars=8, n_states=3)
        sol, _ = fg.ad3(theta)
        if sol.status != "optimal":
            continue
        checked += 1
        # every pairwise table gives its term of g at every iteration, so the bound can close a few iterations
        # after a rounding found the optimum, before the copies agree closely (seed 3: 19 iterations, 2e-3 off)
        assert sol.lp_value == pytest.approx(fg.lp(theta).upper_bound, rel=1e-2)
        assert sol.lp_value == pytest.approx(sol.trace[-1]["primal"])
    assert checked >= 4


def test_first_chunk_is_short_on_large_tables():
    # the first chunk is sized by the tables' entries: 200-state pairs get a few iterations, not hundreds
    fg = FactorGraph([200] * 4)
    for i in range(4):
        for j in range(i + 1, 4):
            fg.add_table([i, j])
    theta = FactorGraphPotentials(np.zeros(800), np.random.default_rng(0).normal(size=6 * 200 * 200))
    sol, _ = fg.ad3(theta, max_iter=60, tol_gap=-1.0, tol_lp=-1.0)
    assert sol.trace[0]["iteration"] <= 5


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not handled by Python's default handler in this test run")
def test_ctrl_c_during_ad3_raises_promptly():
    fg, theta = big_grid(30, np.random.default_rng(1))
    fg.ad3(theta, max_iter=20)  # compiled already; now interrupt a long run
    main = threading.get_ident()
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        # negative tolerances: no stopping test can pass (with η frozen AD3 may close a gap of 0 exactly)
        fg.ad3(theta, time_limit=30, tol_gap=-1.0, tol_lp=-1.0)
    assert time.perf_counter() - start < 1.5
    timer.join()


def test_a_graph_without_factors():
    fg = FactorGraph([3, 2])
    theta = fg.potentials(unary=[[0.0, 2.0, 1.0], [1.0, -np.inf]])
    for method in ("ad3", "bnb", "cpsat", "lp"):
        sol = fg.map(theta, method=method)
        assert list(sol.labels) == [1, 0] and sol.score == 3.0 and sol.optimal, method


def test_map_inference_refuses_bad_input():
    from structopt.errors import InvalidInputError
    from structopt.marginals.map import map_inference
    from structopt.marginals.mrf import PairwiseMRF

    mrf = PairwiseMRF.from_potentials([np.zeros(2), np.zeros(3)], [(0, 1)], [np.ones((2, 3))])
    with pytest.raises(InvalidInputError, match="unknown MAP method 'icm'"):
        map_inference(mrf, "icm")
    with pytest.raises(InvalidInputError, match="time_limit"):
        map_inference(mrf, "ad3", time_limit=-1)
    with pytest.raises(InvalidInputError, match="needs a PairwiseMRF"):
        map_inference(np.zeros(3))
    result = map_inference(mrf, "ad3")
    assert result.optimal and result.log_score == pytest.approx(1.0) and result.gap == pytest.approx(0, abs=1e-8)


# --------------------------------------------------------------------------- UAI
@needs_data("uai")
def test_map_inference_methods_agree_within_certificates_on_uai():
    from structopt.marginals import read_uai
    from structopt.marginals.map import map_inference

    mrf = read_uai(SHARED_DATA / "uai" / "Segmentation_12.uai")
    results = {m: map_inference(mrf, m, time_limit=20) for m in ("ad3", "bnb", "lp", "cpsat")}
    for m, r in results.items():
        assert r.log_score == pytest.approx(mrf.score(r.labels)), m
        assert r.upper_bound >= r.log_score - 1e-6, m
    best = max(r.log_score for r in results.values())
    for m, r in results.items():
        assert r.upper_bound >= best - 1e-6, m  # every bound covers every labeling found
        if r.optimal:
            assert r.log_score == pytest.approx(best, abs=1e-6), m
    assert results["bnb"].optimal and results["cpsat"].optimal
    # AD3's dual bound and HiGHS' LP value are the same LP optimum
    assert results["ad3"].upper_bound == pytest.approx(results["lp"].upper_bound, abs=1e-5)


@needs_data("uai")
def test_map_inference_on_a_frustrated_grid_gives_valid_bounds():
    from structopt.marginals import read_uai
    from structopt.marginals.map import map_inference

    mrf = read_uai(SHARED_DATA / "uai" / "Grids_12.uai")
    exact = map_inference(mrf, "cpsat", time_limit=20)
    ad3 = map_inference(mrf, "ad3", time_limit=10)
    assert exact.optimal
    assert ad3.upper_bound >= exact.log_score - 1e-6 and ad3.log_score <= exact.log_score + 1e-6


# --------------------------------------------------------------------------- shared definitions, fast paths
def _never_stop(fg: FactorGraph, theta: FactorGraphPotentials, max_iter: int, structured: bool):
    # tolerances no run meets: both drivers run exactly max_iter iterations
    opts = {"max_iter": max_iter, "time_limit": None, "tol_gap": -1.0, "tol_lp": -1.0, "tol_res": 1e-14,
            "bound_every": 10, "max_inner": 50, "tau": 1.0, "adapt_eta": True, "eta_iters": 500,
            "stop_upper": -np.inf}
    if structured:
        return fg._ad3_structured(theta, fg.new_state(theta), time.perf_counter(), **opts)
    return fg._ad3(theta, state=fg.new_state(theta), chunk_seconds=0.1, **opts)


@pytest.mark.parametrize("seed", range(4))
def test_structured_driver_equals_the_kernel_on_graphs_without_structured_factors(seed):
    # the Python driver of structured factors shares the kernel's iteration, η schedule, primal value and
    # stopping tests: on a graph without structured factors its iterates are the kernel's, bit for bit
    rng = np.random.default_rng(seed)
    fg, theta = random_graph(rng, tree=False, ties=seed % 2 == 1, max_vars=7)
    if seed == 0:  # an all-binary-pairwise grid: the kernel's fused bound (every iteration) is on
        fg, theta = big_grid(4, rng)
    best, _ = brute_force_map(fg, theta)
    plain, s_plain = _never_stop(fg, theta, 137, structured=False)
    drv, s_drv = _never_stop(fg, theta, 137, structured=True)
    assert plain.iterations == drv.iterations == 137
    for name in ("p", "lam", "qe", "qt", "scal"):
        if name == "scal":  # η, residuals, primal value, iteration count (bounds compared below)
            idx = [K.S_ETA, K.S_RP, K.S_RD, K.S_PRIMAL, K.S_ITER]
            np.testing.assert_array_equal(s_plain.scal[idx], s_drv.scal[idx])
        else:
            np.testing.assert_array_equal(getattr(s_plain, name), getattr(s_drv, name), err_msg=name)
    fused = bool(K.binary_pairs(fg.flat.fkind, fg.flat.fptr, fg.flat.evar, fg.flat.voff, fg.flat.vstates,
                                np.isfinite(theta.unary), theta.factors, fg.flat.toff).all())
    if fused:  # the kernel bounds every iteration: never above the driver's every-10 bound
        assert plain.upper_bound <= drv.upper_bound + 1e-12 * (1 + abs(drv.upper_bound))
    else:  # both evaluate g(λ) at the same iterations
        assert plain.upper_bound == pytest.approx(drv.upper_bound, rel=1e-12, abs=1e-12)
    for sol in (plain, drv):
        assert sol.upper_bound >= best - TOL * (1 + abs(best))
        if sol.labels is not None:
            assert sol.score <= best + TOL and sol.score == pytest.approx(fg.score_labels(theta, sol.labels))


def finish(fg, theta, state, pf):
    # the evaluation closing a run that stopped RUNNING (K.ad3_finish)
    fl = fg.flat
    y = np.zeros(fl.n_vars, dtype=np.int64)
    return K.ad3_finish(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam, fl.fptr,
                        fl.evar, fl.eoff, fl.toff, fl.order, fl.efac, theta.unary, theta.factors, pf, state.p,
                        state.lam, state.qe, state.qt, state.scal, y, y.copy(), 1e-14, -1.0, -1.0, -np.inf)


def test_fused_bound_equals_the_dual_bound_at_every_iterate():
    # on a binary pairwise graph the kernel evaluates g(λ) inside the local-QP loop; the best of those
    # equals the best of dual_bound evaluated at every iterate separately
    rng = np.random.default_rng(3)
    fg, theta = big_grid(5, rng)
    fl = fg.flat
    vallow = np.isfinite(theta.unary)
    pf = K.binary_pairs(fl.fkind, fl.fptr, fl.evar, fl.voff, fl.vstates, vallow, theta.factors, fl.toff)
    assert pf.all()

    def chunk(state, n_iter, bound_every):
        y = np.zeros(fl.n_vars, dtype=np.int64)
        return K.ad3_chunk(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam, fl.fptr,
                           fl.evar, fl.eoff, fl.toff, fl.aoff, fl.order, fl.efac, theta.unary, theta.factors, pf,
                           state.p, state.lam, state.qe, state.qt, state.acfg, state.aw, state.acount, state.ainv,
                           state.scal, y, y.copy(), n_iter, bound_every, 1.0, 1e-14, -1.0, -1.0, 50, 0, -np.inf,
                           np.ones(fl.fkind.size, dtype=bool))

    fused = fg.new_state(theta)
    assert chunk(fused, 40, 10**9) == K.RUNNING
    finish(fg, theta, fused, pf)  # the bound at the last multipliers (the kernel bounds each iteration's start)
    step = fg.new_state(theta)
    work = np.zeros(int(fl.eoff[-1]))
    bounds = []
    for _ in range(41):
        bounds.append(K.dual_bound(fl.n_vars, fl.deg, fl.vptr, fl.vedge, fl.voff, vallow, theta.unary, fl.fkind,
                                   fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.vstates, theta.factors, fl.toff, step.lam,
                                   work, pf))
        if len(bounds) <= 40:
            chunk(step, 1, 0)  # bound_every = 0: the same iteration, no bound at all
    np.testing.assert_array_equal(fused.lam, step.lam)
    assert fused.scal[K.S_UPPER] == pytest.approx(min(bounds), rel=1e-12)
    assert step.scal[K.S_UPPER] == np.inf


def test_fused_bound_on_multistate_pairwise_tables_equals_the_dual_bound():
    # tables over two variables of 3-4 states (some entries -inf, one state clamped): the lean active set
    # (pair_qp) gives each table's term of g in its sweep; the best of those equals dual_bound's best
    rng = np.random.default_rng(5)
    fg = FactorGraph([3, 4, 3, 3, 4, 3])
    for u, v in [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4)]:
        fg.add_table([u, v])
    tables = {f: rng.normal(size=(int(fg.n_states[fg.factor(f)[1][0]]), int(fg.n_states[fg.factor(f)[1][1]])))
              for f in range(fg.n_factors)}
    tables[2][0, 1] = tables[6][2, 2] = -np.inf
    unary = [rng.normal(size=int(s)) for s in fg.n_states]
    unary[4][3] = -np.inf
    theta = fg.potentials(unary=unary, tables=tables)
    fl = fg.flat
    vallow = np.isfinite(theta.unary)
    pf = K.binary_pairs(fl.fkind, fl.fptr, fl.evar, fl.voff, fl.vstates, vallow, theta.factors, fl.toff)
    assert not pf.any()

    def chunk(state, n_iter, bound_every):
        y = np.zeros(fl.n_vars, dtype=np.int64)
        return K.ad3_chunk(fl.n_vars, fl.vstates, fl.voff, fl.deg, fl.vptr, fl.vedge, fl.fkind, fl.fparam, fl.fptr,
                           fl.evar, fl.eoff, fl.toff, fl.aoff, fl.order, fl.efac, theta.unary, theta.factors, pf,
                           state.p, state.lam, state.qe, state.qt, state.acfg, state.aw, state.acount, state.ainv,
                           state.scal, y, y.copy(), n_iter, bound_every, 1.0, 1e-14, -1.0, -1.0, 50, 0, -np.inf,
                           np.ones(fl.fkind.size, dtype=bool))

    fused = fg.new_state(theta)
    chunk(fused, 30, 10**9)
    finish(fg, theta, fused, pf)
    step = fg.new_state(theta)
    work = np.zeros(int(fl.eoff[-1]))
    bounds = []
    for _ in range(31):
        bounds.append(K.dual_bound(fl.n_vars, fl.deg, fl.vptr, fl.vedge, fl.voff, vallow, theta.unary, fl.fkind,
                                   fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.vstates, theta.factors, fl.toff, step.lam,
                                   work, pf))
        if len(bounds) <= 30:
            chunk(step, 1, 0)
    np.testing.assert_allclose(fused.lam, step.lam, rtol=0, atol=1e-12)
    assert fused.scal[K.S_UPPER] == pytest.approx(min(bounds), rel=1e-10)
    assert min(bounds) >= brute_force_map(fg, theta)[0] - 1e-9


def test_pairwise_active_set_reproduces_the_generic_dense_one():
    # pair_qp (tables over two variables) against dense_qp (any arity) on warm-started call sequences: the
    # same algorithm, so the same marginals and active sets to rounding
    rng = np.random.default_rng(8)
    for states in ([3, 3], [4, 2], [5, 4], [2, 5]):
        fg = FactorGraph(states)
        fg.add_table([0, 1])
        fl = fg.flat
        vallow = np.ones(int(fl.voff[-1]), dtype=bool)
        sets = [(np.zeros(int(fl.aoff[-1]), dtype=np.int64), np.zeros(int(fl.aoff[-1])), np.zeros(1, dtype=np.int64))
                for _ in range(2)]
        for _ in range(30):
            table = rng.normal(scale=rng.choice([0.2, 1.0, 4.0]), size=states).ravel()
            if rng.random() < 0.3:
                table[rng.integers(table.size)] = -np.inf
            eta = float(rng.choice([0.1, 1.0, 10.0]))
            target = rng.normal(0.3, 0.8, size=sum(states))
            out = []
            for lean, (acfg, aw, acount) in zip((True, False), sets):
                qe, qt = np.zeros(int(fl.eoff[-1])), np.zeros(int(fl.toff[-1]))
                if lean:
                    ok = K.local_qp(0, fl.fkind, fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow,
                                    table, fl.toff, target, eta, acfg, aw, fl.aoff, acount, qe, qt, 50,
                                    np.zeros(1, dtype=bool))
                else:
                    ok = K.dense_qp(0, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow, table, fl.toff, target,
                                    eta, acfg, aw, fl.aoff, acount, qe, qt, 50)
                out.append((ok, qe, qt))
            assert out[0][0] and out[1][0]
            np.testing.assert_allclose(out[0][1], out[1][1], atol=1e-9)
            np.testing.assert_allclose(out[0][2], out[1][2], atol=1e-9)


def _icm_full_sweeps(fg: FactorGraph, theta: FactorGraphPotentials, y: np.ndarray, max_sweeps: int) -> np.ndarray:
    # reference ICM: every variable in every sweep, a move only for a strict gain keeping the logic factors
    y = y.copy()
    if not np.isfinite(fg.score_labels(theta, y)):
        return y
    for _ in range(max_sweeps):
        improved = False
        for i in range(fg.n_vars):
            cur = int(y[i])
            best_s, best_v = cur, -np.inf
            for s in range(int(fg.n_states[i])):
                y[i] = s
                v = fg.score_labels(theta, y)
                if not np.isfinite(v):
                    continue
                if (s == cur and v > best_v) or (s != cur and v > best_v + 1e-12 * (1.0 + abs(v))):
                    best_s, best_v = s, v
            y[i] = best_s
            improved |= best_s != cur
        if not improved:
            break
    return y


def test_incremental_local_search_equals_full_sweeps():
    rng = np.random.default_rng(11)
    checked = 0
    for k in range(60):
        fg, theta = random_graph(rng, tree=False, ties=k % 2 == 1, max_vars=7)
        fl = fg.flat
        y = np.array([rng.integers(0, s) for s in fg.n_states], dtype=np.int64)
        for sweeps in (1, 2, 20):
            ref = _icm_full_sweeps(fg, theta, y, sweeps)
            got = y.copy()
            K.local_search(got, fl.n_vars, fl.vstates, fl.voff, fl.vptr, fl.vedge, fl.efac, theta.unary, fl.fkind,
                           fl.fparam, fl.fptr, fl.evar, theta.factors, fl.toff, sweeps)
            np.testing.assert_array_equal(got, ref, err_msg=f"graph {k}, {sweeps} sweeps")
            checked += not np.array_equal(ref, y)
    assert checked > 20  # the searches did move
