"""Casimir-SVRG: the Catalyst recurrences (27)-(29), schedules, warm starts, checkpoints, and
convergence to the exact cvxpy optimum with decaying smoothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _reference import exact_primal, random_chain_problem, random_multiclass_problem, smoothed_optimum, smoothed_value

from structopt.errors import InvalidInputError
from structopt.solvers._smooth import estimate_lipschitz
from structopt.solvers.casimir import (
    WARM_STARTS,
    adapt_mu,
    casimir_svrg,
    catalyst_alpha,
    catalyst_beta,
    const_kappa,
)


def test_alpha_solves_27_and_beta_is_29():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lam, kappa, kappa_next = rng.uniform(1e-4, 2, size=3)
        alpha_prev = rng.uniform(0.01, 0.99)
        a = catalyst_alpha(alpha_prev, kappa, kappa_next, lam)
        assert 0 <= a <= 1
        lhs = a * a * (kappa_next + lam)
        rhs = (1 - a) * alpha_prev ** 2 * (kappa + lam) + a * lam
        assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-15)
        b = catalyst_beta(alpha_prev, a, kappa, kappa_next, lam)
        expected = alpha_prev * (1 - alpha_prev) * (kappa + lam) / (
            alpha_prev ** 2 * (kappa + lam) + a * (kappa_next + lam))
        assert b == pytest.approx(expected, rel=1e-12)


def test_constant_kappa_keeps_alpha_at_sqrt_q():
    for lam, kappa in [(1e-3, 0.5), (1.0, 1.0), (1e-5, 3.0)]:
        q = lam / (lam + kappa)
        a = math.sqrt(q)
        for _ in range(50):
            a_next = catalyst_alpha(a, kappa, kappa, lam)
            assert a_next == pytest.approx(math.sqrt(q), rel=1e-10)
            beta = catalyst_beta(a, a_next, kappa, kappa, lam)
            assert beta == pytest.approx((1 - math.sqrt(q)) / (1 + math.sqrt(q)), rel=1e-10)
            a = a_next


def test_lemma_21_monotone_alpha():
    lam, kappa = 0.01, 0.3
    a = 0.9  # alpha_0^2 >= lam / (lam + kappa)
    for _ in range(100):
        a_next = catalyst_alpha(a, kappa, kappa, lam)
        assert 0 < a_next <= a < 1
        assert a_next ** 2 >= lam / (lam + kappa) - 1e-15
        a = a_next


def test_schedules_in_trace():
    p = random_chain_problem(0, lam=0.1)
    r = casimir_svrg(p, schedule="adapt", mu=1.0, max_passes=12, random_state=0, sgd_init=False)
    steps = r.trace[1:]
    kappa = steps[0]["kappa"]
    assert kappa == pytest.approx(p.lam)  # adapt: kappa = lam, q = 1/2
    for t in steps:
        assert t["mu"] == pytest.approx(1.0 * (1 - math.sqrt(0.5) / 2) ** (t["outer_iter"] / 2))
        assert t["alpha"] == pytest.approx(math.sqrt(0.5))
    assert adapt_mu(2.0, 0.5, 2) == pytest.approx(2.0 * (1 - math.sqrt(0.5) / 2))
    L = 40.0
    r = casimir_svrg(p, schedule="const", mu=0.5, L=L, max_passes=4, random_state=0, sgd_init=False)
    kappa = const_kappa(L, p.lam, p.n)
    assert kappa == pytest.approx(L / p.n - p.lam if L / p.n > 4 * p.lam else p.lam)
    for t in r.trace[1:]:
        assert t["kappa"] == pytest.approx(kappa) and t["mu"] == 0.5
        assert t["learning_rate"] == pytest.approx(1 / (L + p.lam + kappa))
        assert t["alpha"] == pytest.approx(math.sqrt(p.lam / (p.lam + kappa)))
        assert t["oracle_calls"] == 2 * p.n * t["outer_iter"] and t["full_grad_passes"] == t["outer_iter"]


@pytest.mark.parametrize("warm_start", WARM_STARTS)
def test_warm_starts_decrease_objective(warm_start):
    p = random_multiclass_problem(0, lam=0.1)
    r = casimir_svrg(p, warm_start=warm_start, mu=0.3, max_passes=40, random_state=0)
    assert r.trace[-1]["primal"] < 0.8 * r.trace[0]["primal"]
    assert r.trace[-1]["primal"] == pytest.approx(p.primal(r.w))


def test_catalyst_accelerates_over_svrg_on_smoothed_problem():
    from structopt.solvers.svrg import svrg
    p = random_chain_problem(0, lam=0.1)
    mu = 0.5
    f_mu, _ = smoothed_optimum(p, mu)
    L = estimate_lipschitz(p, mu)
    paper = {"iterate": "average", "sgd_init": False}  # the paper's comparison
    cas = casimir_svrg(p, schedule="const", mu=mu, kind="entropy", L=L, max_passes=400, random_state=0,
                       warm_start="prox-center", **paper)
    plain = svrg(p, mu=mu, mu_schedule="constant", kind="entropy", L=L, max_passes=400, random_state=0, **paper)
    gap_cas, gap_plain = smoothed_value(p, cas.w, mu) - f_mu, smoothed_value(p, plain.w, mu) - f_mu
    assert gap_cas < 1e-8 and gap_cas < 1e-3 * gap_plain


@pytest.mark.parametrize("make,seed,k", [
    (random_chain_problem, 0, 27),
    pytest.param(random_chain_problem, 3, 27, marks=pytest.mark.slow),
    pytest.param(random_multiclass_problem, 0, 4, marks=pytest.mark.slow),
    pytest.param(random_multiclass_problem, 2, 4, marks=pytest.mark.slow),
])
def test_decaying_mu_reaches_exact_optimum(make, seed, k):
    # adapt schedule (mu_k = mu (1 - sqrt(q)/2)^(k/2)) with a floor, the step following the
    # subproblem's smoothness and Prop. 29's kappa at the floor
    p = make(seed, lam=1.0)
    f_star, _ = exact_primal(p)
    assert p.primal(np.zeros(p.n_params)) > f_star * 1.03
    L = estimate_lipschitz(p, 1.0)
    mu_min = 0.005
    r = casimir_svrg(p, schedule="adapt", mu=1.0, mu_min=mu_min, L=L, kappa=const_kappa(L / mu_min, p.lam, p.n),
                     k=k, learning_rate="theory", max_passes=1500, random_state=0)
    assert mu_min <= r.trace[-1]["mu"] < 0.1 * r.trace[1]["mu"]
    assert (r.trace[-1]["primal"] - f_star) / f_star < 1e-3


@pytest.mark.parametrize(("options", "first", "total"), [
    ({"warm_start": "extrapolation", "iterate": "average", "sgd_init": False}, 4, 10),
    ({}, 5, 11)])  # defaults: an SGD pass, then outer iterations of 2 passes
def test_checkpoint_resume_and_determinism(tmp_path, options, first, total):
    p = random_chain_problem(1)
    kw = {"schedule": "const", "mu": 0.2, "random_state": 4, **options}
    full = casimir_svrg(p, max_passes=total, **kw)
    again = casimir_svrg(p, max_passes=total, **kw)
    assert [t["primal"] for t in full.trace] == [t["primal"] for t in again.trace]
    ck = tmp_path / "cas.pkl"
    casimir_svrg(p, max_passes=first, checkpoint=ck, **kw)
    resumed = casimir_svrg(p, max_passes=total, resume=ck, **kw)
    np.testing.assert_allclose(resumed.w, full.w, rtol=1e-12, atol=1e-14)
    assert [t["outer_iter"] for t in resumed.trace] == [t["outer_iter"] for t in full.trace]


def test_bad_arguments():
    p = random_chain_problem(0)
    with pytest.raises(InvalidInputError):
        casimir_svrg(p, schedule="fast")
    with pytest.raises(InvalidInputError):
        casimir_svrg(p, warm_start="random")
    with pytest.raises(InvalidInputError):
        casimir_svrg(p, mu=-1.0)
    with pytest.raises(InvalidInputError):
        casimir_svrg(p, alpha0=1.5)


def test_sgd_init_and_last_iterate():
    p = random_chain_problem(2, lam=0.1)
    r = casimir_svrg(p, mu=0.3, iterate="last", sgd_init=True, inner_steps=p.n, max_passes=5, random_state=0)
    assert [t["oracle_calls"] for t in r.trace] == [0, p.n, 3 * p.n, 5 * p.n]
    assert [t["outer_iter"] for t in r.trace] == [0, 0, 1, 2]
    assert r.trace[-1]["primal"] < r.trace[0]["primal"]
    with pytest.raises(InvalidInputError):
        casimir_svrg(p, iterate="median")


def test_the_guard_raises_L_from_the_step_taken_and_lets_it_come_back_down():
    # L = 1e-6 asks for a step of ~500; the decreasing schedule caps it at 1/(lam n) = 100, still too long at this
    # lam: the rejection raises L from the capped step (before, from L = 1e-6: the cap kept the step at 100 and
    # every retry diverged), and accepted iterations lower it again (the step doubles)
    p = random_multiclass_problem(0, n=10, lam=1e-3)
    r = casimir_svrg(p, L=1e-6, max_passes=60, random_state=0, sgd_init=False)
    cap = 1.0 / (p.lam * p.n)
    steps = [t["learning_rate"] for t in r.trace[1:]]
    first = next(j for j, t in enumerate(r.trace[1:]) if "rejected" in t)
    assert steps[first] == pytest.approx(cap)
    assert steps[first + 1] <= cap / 4 and "rejected" not in r.trace[first + 2]
    assert steps[first + 2] == pytest.approx(2 * steps[first + 1], rel=1e-2)  # REGROWTH: L halves
    assert p.primal(r.w) < 0.1 * p.primal(np.zeros(p.n_params))


def test_theory_rate_keeps_L_at_mu_after_a_rejection(monkeypatch):
    # learning_rate="theory" steps with L * mu / mu_k; a rejection's larger estimate is made at mu_k (the step's
    # scale) and must be stored back at mu, so that the next step's smoothness is the estimate, not mu/mu_k times it
    import structopt.solvers.casimir as casimir

    seen = []
    original_larger, original_evaluate = casimir.larger_smoothness, casimir._Casimir.evaluate

    def larger(problem, L, before, after, w_far, mu, k):
        out = original_larger(problem, L, before, after, w_far, mu, k)
        seen.append(out)
        return out

    def evaluate(self, state):
        before = len(seen)
        out = original_evaluate(self, state)
        if len(seen) > before:  # a rejection: the stored L times the step's factor is the new estimate
            checked.append((state.L * self.L_factor, seen[-1]))
        return out

    checked = []
    monkeypatch.setattr(casimir, "larger_smoothness", larger)
    monkeypatch.setattr(casimir._Casimir, "evaluate", evaluate)
    problem = random_chain_problem(0, n=30, lam=0.01)
    casimir_svrg(problem, schedule="adapt", learning_rate="theory", L=1e-2, mu=1.0, max_passes=60, random_state=0,
                 sgd_init=False)
    assert len(checked) >= 2
    for stored, estimate in checked:
        assert stored == pytest.approx(estimate)


def test_a_rejected_sgd_start_is_counted_like_svrg_counts_it():
    """A step far too long (L tiny): the SGD start raises the primal and is rejected; with the budget spent on
    it, info says the one epoch judged was rejected (the CLI's 'ALL ... REJECTED' reads these counts)."""
    from structopt.solvers.svrg import svrg

    p = random_chain_problem(0)
    r = casimir_svrg(p, L=1e-8, sgd_init=True, max_passes=0.5, random_state=0)
    assert [t for t in r.trace if "rejected" in t]
    assert r.info["epochs"] == r.info["rejected_epochs"] == 1
    assert np.array_equal(r.w, np.zeros(p.n_params))
    s = svrg(p, learning_rate=1.0 / (1e-8 + p.lam), sgd_init=True, max_passes=0.5, random_state=0)
    assert (s.info["epochs"], s.info["rejected_epochs"]) == (r.info["epochs"], r.info["rejected_epochs"])
    # an accepted SGD start is judged too: every record after the start point's is one judged epoch
    for sgd_init in (True, False):
        a = casimir_svrg(p, sgd_init=sgd_init, max_passes=3, random_state=0)
        assert a.info["epochs"] == len(a.trace) - 1 and a.info["rejected_epochs"] == 0
