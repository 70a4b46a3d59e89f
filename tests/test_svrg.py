"""SVRG on smoothed oracles: smoothing against enumeration, the lazy sparse step against a dense
reference, oracle counting, and convergence to the exact cvxpy optimum."""

from __future__ import annotations

import numpy as np
import pytest
from _reference import (
    exact_primal,
    random_chain_problem,
    random_multiclass_problem,
    smoothed_optimum,
    smoothed_value,
    sparse_chain_problem,
)

from structopt.errors import InvalidInputError
from structopt.problem import SSVMProblem
from structopt.smoothing import l2_smoothed_max_sorted, logsumexp, project_simplex
from structopt.solvers._smooth import EPOCH_MIN, Counters, epoch_steps
from structopt.solvers.svrg import svrg, svrg_epoch


def enumerated_psi(p: SSVMProblem, i: int, w: np.ndarray):
    """All outputs' psi(y; w) = Delta + <w, Phi(y) - Phi(y_i)> and their feature differences."""
    x, y_i = p.X[i], p.Y[i]
    like = p.model.potentials(x, p.model.zeros())
    gold = p.model.joint_feature(x, y_i)
    rows = [p.model.joint_feature(x, y) - gold for y in p.structure.enumerate(like)]
    psi = np.array([p.loss(y_i, y) for y in p.structure.enumerate(like)]) + np.array(rows) @ w
    return psi, np.array(rows)


@pytest.mark.parametrize("seed", range(6))
def test_smoothed_values_and_gradients_match_enumeration(seed):
    p = random_chain_problem(seed, n=3, max_len=3, n_states=2)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=p.n_params)
    for i in range(p.n):
        psi, rows = enumerated_psi(p, i, w)
        for mu in (0.05, 0.7, 5.0):
            # entropy: mu log sum exp(psi / mu), gradient under the Gibbs weights
            res = p.smooth_oracle(i, w, mu, "entropy")
            q = np.exp(psi / mu - logsumexp(psi / mu))
            assert res.value == pytest.approx(mu * logsumexp(psi / mu), rel=1e-9, abs=1e-9)
            np.testing.assert_allclose(res.grad, q @ rows, atol=1e-9)
            # top-K with K = |Y|: exact l2 smoothing
            u = project_simplex(psi / mu)
            res = p.smooth_oracle(i, w, mu, "topk", k=len(psi))
            assert res.value == pytest.approx(u @ psi - 0.5 * mu * (u @ u - 1), abs=1e-9)
            np.testing.assert_allclose(res.grad, u @ rows, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_topk_exact_when_condition_12_holds(seed):
    p = random_chain_problem(seed, n=4, max_len=3, n_states=3)
    rng = np.random.default_rng(100 + seed)
    w = 3 * rng.normal(size=p.n_params)
    K = 3
    checked = 0
    for i in range(p.n):
        psi, rows = enumerated_psi(p, i, w)
        if len(psi) <= K:
            continue
        z = np.sort(psi)[::-1]
        bound = np.sum(z[:K] - z[K])  # (12): mu <= sum_{i<=K} (z_(i) - z_(K+1))
        for mu in (0.5 * bound, bound):
            if mu <= 0:
                continue
            u = project_simplex(psi / mu)
            res = p.smooth_oracle(i, w, mu, "topk", k=K)
            assert res.value == pytest.approx(u @ psi - 0.5 * mu * (u @ u - 1), abs=1e-8)
            np.testing.assert_allclose(res.grad, u @ rows, atol=1e-8)
            checked += 1
    assert checked > 0


def test_smoothed_value_tends_to_max():
    p = random_chain_problem(3, n=4)
    w = np.random.default_rng(0).normal(size=p.n_params)
    for i in range(p.n):
        hinge = p.max_oracle(i, w).value
        gaps = []
        for mu in (1.0, 0.1, 0.01, 1e-4, 1e-12):
            for kind in ("topk", "entropy"):
                v = p.smooth_oracle(i, w, mu, kind).value
                assert v >= hinge - 1e-9
                gaps.append(v - hinge)
            assert p.smooth_oracle(i, w, mu, "topk").value - hinge <= mu / 2 + 1e-12
        assert gaps[-1] < 1e-9 and gaps[-2] < 1e-9


def test_sorted_l2_max_matches_generic_projection_and_is_stable():
    rng = np.random.default_rng(0)
    for _ in range(500):
        z = np.sort(rng.integers(-3, 4, size=rng.integers(1, 8)) * rng.choice([0.1, 1.0]))[::-1]
        mu = float(rng.choice([1e-3, 0.1, 1.0, 10.0]))
        value, u = l2_smoothed_max_sorted(z, mu)
        np.testing.assert_allclose(u, project_simplex(z / mu), atol=1e-9)
        assert value == pytest.approx(u @ z - 0.5 * mu * (u @ u - 1), abs=1e-9)
    # far below the gaps: one-hot (or uniform over exact ties), where z / mu would overflow precision
    _, u = l2_smoothed_max_sorted(np.array([2.0, 2.0, 1.0]), 1e-300)
    np.testing.assert_array_equal(u, [0.5, 0.5, 0.0])


def dense_reference_epoch(p, w0, mu, kind, k, gamma, idx, kappa=0.0, z=None):
    """Textbook SVRG epoch with dense gradients from ``smooth_oracle``."""
    snap = [p.smooth_oracle(i, w0, mu, kind, k).grad for i in range(p.n)]
    gbar = np.mean(snap, axis=0)
    w, total = w0.copy(), np.zeros_like(w0)
    for i in idx:
        v = p.smooth_oracle(i, w, mu, kind, k).grad - snap[i] + gbar + p.lam * w
        if kappa:
            v += kappa * (w - z)
        w = w - gamma * v
        total += w
    return total / len(idx)


@pytest.mark.parametrize("kind", ["topk", "entropy"])
@pytest.mark.parametrize("kappa", [0.0, 0.3])
def test_lazy_epoch_equals_dense_reference(kind, kappa):
    p = sparse_chain_problem(1)
    rng = np.random.default_rng(5)
    w0, z = rng.normal(size=p.n_params), rng.normal(size=p.n_params)
    gamma = 0.2
    idx = np.random.default_rng(7).integers(0, p.n, size=3 * p.n)
    counters = Counters()
    w_avg, memory = svrg_epoch(p, w0, mu=0.5, kind=kind, k=3, gamma=gamma, rng=np.random.default_rng(7),
                               counters=counters, n_steps=3 * p.n, kappa=kappa, z=z)
    ref = dense_reference_epoch(p, w0, 0.5, kind, 3, gamma, idx, kappa, z)
    np.testing.assert_allclose(w_avg, ref, rtol=1e-9, atol=1e-10)
    assert counters.oracle_calls == 6 * p.n and counters.oracle_calls_made == 3 * p.n
    assert counters.full_grad_passes == 1 and memory["snapshot_cache_bytes"] > 0


def test_oracle_counting_and_trace():
    p = random_chain_problem(0)  # constant mu: the paper's epochs of n steps
    r = svrg(p, mu=0.1, mu_schedule="constant", max_passes=6, random_state=0, iterate="average", sgd_init=False)
    epochs = [t["epoch"] for t in r.trace]
    assert epochs == [0, 1, 2, 3]
    for t in r.trace:
        assert t["oracle_calls"] == 2 * p.n * t["epoch"]
        assert t["oracle_calls_made"] == p.n * t["epoch"]
        assert t["full_grad_passes"] == t["epoch"]
        assert t["passes"] == pytest.approx(t["oracle_calls"] / p.n)
        assert t["primal"] >= 0
    assert r.trace[-1]["primal"] == pytest.approx(p.primal(r.w))


def test_decreasing_schedule_epochs_are_at_least_epoch_min_steps():
    assert epoch_steps(3) == EPOCH_MIN and epoch_steps(10 * EPOCH_MIN) == 10 * EPOCH_MIN
    p = random_chain_problem(0)  # n = 8 < EPOCH_MIN: epochs of EPOCH_MIN steps, 2 calls each; the last one shortened
    r = svrg(p, max_passes=30, random_state=0, sgd_init=False)
    assert [t["oracle_calls"] for t in r.trace] == [0, 2 * EPOCH_MIN, 4 * EPOCH_MIN, 30 * p.n]
    assert [t["full_grad_passes"] for t in r.trace] == [0, 1, 2, 3]
    # the schedule follows the steps: mu / (1 + t / n) after t accepted steps
    assert [t["mu"] for t in r.trace[1:]] == pytest.approx([1.0 / (1.0 + e * EPOCH_MIN / p.n) for e in range(3)])


def test_the_guard_shortens_the_step_the_epoch_took():
    # the schedule's Pegasos cap 1/(lam n) is far below the given step and still too long at this lam: the
    # shortened step is 4 times below the cap (it was 4 times below the given step, the cap kept it unchanged,
    # and every epoch was rejected)
    p = random_multiclass_problem(0, n=10, lam=1e-3)
    r = svrg(p, learning_rate=1e6, max_passes=40, random_state=0, sgd_init=False)
    rejected = [t for t in r.trace if "rejected" in t]
    cap = 1.0 / (p.lam * p.n)
    assert rejected and rejected[0]["learning_rate"] <= cap / 4
    assert r.info["rejected_epochs"] < r.info["epochs"]
    assert p.primal(r.w) < p.primal(np.zeros(p.n_params))


def test_converges_to_smoothed_optimum_entropy():
    p = random_chain_problem(0, lam=0.1)
    mu = 0.5
    f_mu, _ = smoothed_optimum(p, mu)
    r = svrg(p, mu=mu, mu_schedule="constant", kind="entropy", learning_rate=0.3, max_passes=300, random_state=0,
             iterate="average", sgd_init=False)
    assert smoothed_value(p, r.w, mu) - f_mu < 1e-8


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_reaches_exact_optimum(seed):
    # mu small enough for a smoothing bias below 1e-3 relative; default step 1/(L + lam)
    p = random_multiclass_problem(seed, lam=3.0)
    f_star, _ = exact_primal(p)
    assert p.primal(np.zeros(p.n_params)) > f_star * 1.03  # learning matters at this tolerance
    r = svrg(p, mu=0.01, mu_schedule="constant", k=4, max_passes=800, random_state=0, iterate="average",
             sgd_init=False)
    assert (r.trace[-1]["primal"] - f_star) / f_star < 1e-3


# epochs of EPOCH_MIN = 50 steps, 12.5 passes at n = 8: a budget ending mid-epoch shortens that epoch (and so
# differs from the longer run), so the first run stops at an epoch's end
@pytest.mark.parametrize(("options", "first", "total"), [({"iterate": "average", "sgd_init": False}, 25, 50),
                                                        ({}, 13.5, 26),  # defaults: an SGD pass, then epochs
                                                        ({"mu_schedule": "constant"}, 5, 9)])  # epochs of n
def test_checkpoint_resume_and_determinism(tmp_path, options, first, total):
    p = random_chain_problem(2)
    full = svrg(p, mu=0.1, max_passes=total, random_state=3, **options)
    again = svrg(p, mu=0.1, max_passes=total, random_state=3, **options)
    assert [t["primal"] for t in full.trace] == [t["primal"] for t in again.trace]
    ck = tmp_path / "svrg.pkl"
    svrg(p, mu=0.1, max_passes=first, random_state=3, checkpoint=ck, **options)
    resumed = svrg(p, mu=0.1, max_passes=total, resume=ck, **options)
    np.testing.assert_allclose(resumed.w, full.w, rtol=1e-12, atol=1e-14)
    assert [t["passes"] for t in resumed.trace] == [t["passes"] for t in full.trace]


def test_bad_arguments():
    p = random_chain_problem(0)
    with pytest.raises(InvalidInputError):
        svrg(p, mu=0.0)
    with pytest.raises(InvalidInputError):
        svrg(p, kind="hinge")
    with pytest.raises(InvalidInputError):
        svrg(p, learning_rate=-1.0)


@pytest.mark.parametrize("seed", range(4))
def test_local_curvature_is_the_hessian_norm_on_the_topk_support(seed):
    # Hessian of the top-K l2-smoothed hinge on a fixed support: A_K^T (I - 11^T/K) A_K / mu over the
    # K best rows (K = |Y| here, so every support lies inside them): compare with dense rows, and
    # check that gradient differences along random small moves stay below it
    from structopt.solvers._smooth import local_curvature

    p = random_chain_problem(seed, n=3, max_len=3, n_states=2)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=p.n_params)
    mu = 2.0
    for i in range(p.n):
        psi, rows = enumerated_psi(p, i, w)
        m = len(psi)
        centred = rows - rows.mean(axis=0)
        expected = np.linalg.eigvalsh(centred @ centred.T)[-1] / mu
        got = local_curvature(p, i, w, mu, k=m)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
        g0 = p.smooth_oracle(i, w, mu, "topk", k=m).grad
        for _ in range(5):
            d = rng.normal(size=p.n_params) * 1e-3
            g1 = p.smooth_oracle(i, w + d, mu, "topk", k=m).grad
            assert np.linalg.norm(g1 - g0) <= got * np.linalg.norm(d) * (1 + 1e-6) + 1e-12


def test_local_lipschitz_estimate_is_below_the_row_norm_bound_on_long_chains():
    from structopt.solvers._smooth import estimate_lipschitz

    p = sparse_chain_problem(0)
    local, bound = estimate_lipschitz(p, 1.0), estimate_lipschitz(p, 1.0, method="bound")
    assert 0 < local < bound
    with pytest.raises(InvalidInputError):
        estimate_lipschitz(p, 1.0, method="guess")


def test_last_iterate_and_sgd_init_options():
    p = random_chain_problem(2, lam=0.1)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    w0 = np.zeros(p.n_params)
    avg, _ = svrg_epoch(p, w0, mu=0.5, kind="topk", k=3, gamma=0.05, rng=rng_a, counters=Counters())
    last, _ = svrg_epoch(p, w0, mu=0.5, kind="topk", k=3, gamma=0.05, rng=rng_b, counters=Counters(),
                         iterate="last")
    assert not np.allclose(avg, last)
    r = svrg(p, mu=0.5, mu_schedule="constant", iterate="last", sgd_init=True, max_passes=7, random_state=0)
    # one SGD pass (1 call per step), then epochs of n steps, 2 calls per step
    assert [t["oracle_calls"] for t in r.trace] == [0, p.n, 3 * p.n, 5 * p.n, 7 * p.n]
    assert [t["full_grad_passes"] for t in r.trace] == [0, 0, 1, 2, 3]
    assert r.trace[-1]["primal"] < r.trace[0]["primal"]
    with pytest.raises(InvalidInputError):
        svrg(p, iterate="median")
