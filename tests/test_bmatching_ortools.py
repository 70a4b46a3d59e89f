"""The OR-Tools min-cost-flow b-matching (FertilityStructure(oracle="ortools")) against the numba flow and
brute force: objective values equal to 1e-9 (relative), never labelings (ties may pick either optimum);
its float certificate under coarse integer scaling; the backend call; Ctrl-C during oracle calls."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.structures import backends
from structopt.structures.factor_graph import FactorGraphPotentials
from structopt.tasks import alignment_fertility as af


def _theta(rng, L, R, fe, ff, penalty, integer=False, scale=1.0):
    model = af.FertilityModel(3, fe, ff, penalty=penalty)
    w = rng.normal(size=model.n_params)
    if penalty:
        w[-2:] = np.abs(w[-2:])  # fertility costs are kept >= 0 by the model
    theta = model.potentials(rng.normal(size=(L, R, 3)), w)
    noise = rng.integers(-2, 3, size=theta.unary.shape).astype(float) if integer else rng.normal(size=theta.unary.shape)
    unary = theta.unary + noise
    if integer:  # many ties: every score an integer
        unary = np.rint(unary)
        if penalty:  # slack scores stay >= 0 (the model's constraint)
            n_links = L * R
            slack = unary.reshape(-1, 2)[n_links:]
            slack[:, 1] = np.maximum(slack[:, 1], slack[:, 0])
    return type(theta)(scale * unary, theta.factors)


def _score(theta, labels):
    return theta.factor_graph.score_labels(FactorGraphPotentials(theta.unary, theta.factors), labels)


def _brute_force_value(theta):
    fg, flat = theta.factor_graph, FactorGraphPotentials(theta.unary, theta.factors)
    return max(fg.score_labels(flat, y) for y in fg.outputs(flat))


def _close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _feasible(theta, full):
    L, R, fe, ff = type(theta).key[:4]
    grid = full[: L * R].reshape(L, R)
    return (grid.sum(axis=1) <= fe).all() and (grid.sum(axis=0) <= ff).all() and np.isfinite(_score(theta, full))


@pytest.mark.parametrize("integer", [False, True])
def test_value_equals_numba_flow_and_brute_force(integer):
    rng = np.random.default_rng(1 if integer else 0)
    checked = 0
    while checked < 120:
        L, R = (int(v) for v in rng.integers(1, 4, size=2))
        fe, ff = (int(v) for v in rng.integers(1, 4, size=2))
        penalty = bool(rng.integers(2))
        theta = _theta(rng, L, R, fe, ff, penalty, integer)
        if theta.factor_graph.n_vars > 14:
            continue  # brute force enumerates 2^n_vars labelings
        got = af.bmatching(theta, "ortools")
        assert _feasible(theta, got)
        value = _score(theta, got)
        assert _close(value, _score(theta, af.bmatching(theta, "numba")))
        assert _close(value, _brute_force_value(theta))
        checked += 1


@pytest.mark.parametrize("integer", [False, True])
def test_value_equals_numba_flow_on_larger_pairs(integer):
    rng = np.random.default_rng(2)
    for _ in range(40):
        L, R = (int(v) for v in rng.integers(1, 25, size=2))
        fe, ff = (int(v) for v in rng.integers(1, 4, size=2))
        theta = _theta(rng, L, R, fe, ff, bool(rng.integers(2)), integer)
        a, b = af.bmatching(theta, "ortools"), af.bmatching(theta, "numba")
        assert _feasible(theta, a)
        assert _close(_score(theta, a), _score(theta, b))


@pytest.mark.parametrize("scale", [1e-12, 1e12])
def test_extreme_magnitudes(scale):
    rng = np.random.default_rng(3)
    for _ in range(20):
        theta = _theta(rng, 8, 9, 2, 2, True, scale=scale)
        a, b = af.bmatching(theta, "ortools"), af.bmatching(theta, "numba")
        assert abs(_score(theta, a) - _score(theta, b)) <= 1e-9 * abs(_score(theta, b))


def test_mixed_magnitudes_keep_small_gains():
    # one huge gain next to tiny ones that differ below the integer resolution of the big one's scale
    gain = np.array([[2.0 ** 40, -1.0, -1.0], [-1.0, 1.000001, 1.000002]])
    row_cost, col_cost = np.zeros((2, 1)), np.zeros((3, 1))
    links = af._ortools_links(gain, row_cost, col_cost)
    best = af.bmatching_value(af._bmatching(gain, row_cost, col_cost), gain, row_cost, col_cost)
    assert links is not None  # certified: within 1e-12 of 2^40
    assert best - af.bmatching_value(links, gain, row_cost, col_cost) <= 1e-12 * 2.0 ** 41
    assert af._ortools_links(gain, row_cost, col_cost, rtol=1e-20) is None  # the rounding is not below 1e-20


@pytest.mark.parametrize("tiny", [1e-300, 1e-310])
def test_tiny_and_denormal_scores(tiny):
    # a matching of a 2 x 2 pair whose gains are next to the underflow (one link scores -1): the optimum
    # takes (0, 0) and (1, 1)
    unary = np.zeros((4, 2))
    unary[:, 1] = [2 * tiny, -1.0, 3 * tiny, 2 * tiny]
    theta = af._potentials_type(2, 2, 1, 1, ())(unary.ravel(), np.zeros(0))
    for solver in ("numba", "ortools"):
        assert af.bmatching(theta, solver).tolist() == [1, 0, 0, 1]
    theta = _theta(np.random.default_rng(10), 2, 2, 1, 1, False)
    theta.unary[0] = np.inf
    with pytest.raises(InvalidInputError, match="finite scores"):
        af.bmatching(theta, "ortools")


def test_certificate_is_sound_under_coarse_scaling(monkeypatch):
    """With integer costs of at most 16 the rounded optimum is often not the float optimum: whatever the
    certificate accepts is within its tolerance of the optimum, what it refuses the numba flow answers."""
    monkeypatch.setattr(backends, "max_cost_magnitude", lambda n: 16)
    rng = np.random.default_rng(4)
    suboptimal = accepted = accepted_suboptimal = 0
    for _ in range(200):
        L, R = (int(v) for v in rng.integers(2, 7, size=2))
        theta = _theta(rng, L, R, int(rng.integers(1, 4)), int(rng.integers(1, 4)), bool(rng.integers(2)))
        gain, row_cost, col_cost, _ = af._degree_problem(theta)
        best = af.bmatching_value(af._bmatching(gain, row_cost, col_cost), gain, row_cost, col_cost)
        biggest = max(np.abs(gain).max(), row_cost.max(), col_cost.max())
        raw = af._ortools_links(gain, row_cost, col_cost, rtol=np.inf)  # the rounded optimum, uncertified
        suboptimal += best - af.bmatching_value(raw, gain, row_cost, col_cost) > 1e-9 * biggest
        for rtol in (1e-12, 0.2):
            links = af._ortools_links(gain, row_cost, col_cost, rtol)
            if links is not None:
                accepted += 1
                value = af.bmatching_value(links, gain, row_cost, col_cost)
                assert best - value <= rtol * (abs(value) + biggest) + 1e-12
                accepted_suboptimal += best - value > 1e-9 * biggest
        # the fallback keeps bmatching exact whatever the scaling
        assert _close(_score(theta, af.bmatching(theta, "ortools")), _score(theta, af.bmatching(theta, "numba")))
    # the scaling does lose optima, and the certificate passes some answers, a few of them within its tolerance only
    assert suboptimal >= 10 and accepted >= 10 and accepted_suboptimal >= 1


def test_structure_oracle_ortools_matches_the_flow():
    rng = np.random.default_rng(5)
    ortools = af.FertilityStructure(oracle="ortools")
    flow = af.FertilityStructure(oracle="flow")
    for _ in range(30):
        L, R = (int(v) for v in rng.integers(1, 8, size=2))
        theta = _theta(rng, L, R, int(rng.integers(1, 4)), int(rng.integers(1, 4)), bool(rng.integers(2)))
        a, b = ortools.argmax(theta), flow.argmax(theta)
        mu_a, mu_b = ortools.stats(a, theta), flow.stats(b, theta)
        assert _close(float(theta.unary @ mu_a.unary), float(theta.unary @ mu_b.unary))
        la, lb = ortools.map_labels(theta), flow.map_labels(theta)
        problem = af._degree_problem(theta)[:3]
        assert la.shape == lb.shape == (L * R,)
        assert _close(af.bmatching_value(la, *problem), af.bmatching_value(lb, *problem))


def test_ortools_oracle_refuses_what_it_cannot_serve():
    rng = np.random.default_rng(6)
    model = af.FertilityModel(3, 2, 2, markov=("diag",), oracle="ortools")
    theta = model.potentials(rng.normal(size=(3, 3, 3)), rng.normal(size=model.n_params))
    with pytest.raises(InvalidInputError, match=r"oracle='ortools'.*budget-only"):
        model.structure.argmax(theta)
    with pytest.raises(InvalidInputError, match="'numba' or 'ortools'"):
        af.bmatching(_theta(rng, 2, 2, 1, 1, False), "cplex")
    with pytest.raises(InvalidInputError, match="'ortools'"):
        af.FertilityStructure(oracle="or-tools")


def test_training_with_the_ortools_oracle_equals_the_flow():
    rng = np.random.default_rng(7)
    X, Y = [], []
    for _ in range(12):
        L, R = (int(v) for v in rng.integers(2, 7, size=2))
        gold = np.zeros((L, R), dtype=np.int64)
        gold[np.arange(L), np.minimum(R - 1, np.arange(L) * R // L)] = 1
        X.append(np.stack([gold + 0.4 * rng.normal(size=(L, R)), rng.normal(size=(L, R))], axis=-1))
        Y.append(gold.ravel())
    results = []
    for oracle in ("flow", "ortools"):
        model = af.FertilityModel(2, 2, 3, penalty=True, oracle=oracle)
        problem = SSVMProblem(model, X, Y, af.link_loss(), 0.05)
        results.append(bcfw(problem, max_passes=4, random_state=0))
    np.testing.assert_allclose(results[0].w, results[1].w, rtol=1e-9, atol=1e-12)
    assert results[0].trace[-1]["gap"] == pytest.approx(results[1].trace[-1]["gap"], rel=1e-9, abs=1e-12)


def test_backend_min_cost_flow():
    # 0 -> 1 -> 3 (cost 1 + 1) and 0 -> 2 -> 3 (cost 3 + 0), 2 units, capacity 1 on 0 -> 1
    tails, heads = np.array([0, 1, 0, 2]), np.array([1, 3, 2, 3])
    flows, cost = backends.ortools_min_cost_flow(tails, heads, np.array([1, 2, 2, 2]), np.array([1, 1, 3, 0]),
                                                 np.array([2, 0, 0, -2]))
    assert flows.tolist() == [1, 1, 1, 1] and cost == 5
    with pytest.raises(RuntimeError, match="status"):
        backends.ortools_min_cost_flow(tails, heads, np.array([1, 2, 0, 2]), np.array([1, 1, 3, 0]),
                                       np.array([2, 0, 0, -2]))  # only one unit can reach the sink
    # the largest costs max_cost_magnitude allows pass OR-Tools' range check on a dense 100 x 100 b-matching
    L = R = 100
    n = L + R + 2
    big = backends.max_cost_magnitude(n)
    j, k = np.divmod(np.arange(L * R), R)
    tails = np.concatenate([np.full(L, L + R), j, L + np.arange(R), [L + R]])
    heads = np.concatenate([np.arange(L), L + k, np.full(R, L + R + 1), [L + R + 1]])
    caps = np.concatenate([np.full(L, 2), np.ones(L * R, dtype=np.int64), np.full(R, 2), [2 * L]])
    costs = np.concatenate([np.full(L, big // 8), -np.random.default_rng(0).integers(big // 2, big + 1, L * R),
                            np.full(R, big // 8), [0]])
    supplies = np.zeros(n, dtype=np.int64)
    supplies[L + R], supplies[L + R + 1] = 2 * L, -2 * L
    flows, cost = backends.ortools_min_cost_flow(tails, heads, caps, costs, supplies)
    assert cost == int(flows @ costs) < 0 and flows[L: L + L * R].sum() == 2 * L  # every word takes 2 links


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not handled by Python's default handler in this test run")
def test_ctrl_c_during_ortools_oracle_calls():
    rng = np.random.default_rng(8)
    thetas = [_theta(rng, 60, 60, 2, 2, True) for _ in range(4)]
    structure = af.FertilityStructure(oracle="ortools")
    structure.argmax(thetas[0])
    sent: list[float] = []

    def fire() -> None:
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.3, fire)
    start = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            while time.perf_counter() - start < 20.0:
                for theta in thetas:
                    structure.argmax(theta)
        caught = time.perf_counter()
    finally:
        timer.cancel()
    assert sent and caught - sent[0] < 2.0


def test_auto_takes_ortools_from_the_measured_size_on(monkeypatch):
    rng = np.random.default_rng(9)
    auto, flow = af.FertilityStructure(), af.FertilityStructure(oracle="flow")
    small, large = _theta(rng, 3, 4, 2, 2, True), _theta(rng, 50, 50, 2, 2, True)
    assert auto._flow_solver(small) == "numba" and auto._flow_solver(large) == "ortools"
    monkeypatch.setattr(af, "AUTO_ORTOOLS_LINKS", 12)
    assert auto._flow_solver(small) == "ortools"
    for _ in range(20):
        theta = _theta(rng, int(rng.integers(3, 9)), int(rng.integers(2, 9)), 2, 2, bool(rng.integers(2)))
        a, b = auto.argmax(theta), flow.argmax(theta)
        assert _close(float(theta.unary @ auto.stats(a, theta).unary), float(theta.unary @ flow.stats(b, theta).unary))
