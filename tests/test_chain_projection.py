"""Fast chain projection and the entropic prox against direct convex optimisation (cvxpy)."""

import itertools

import cvxpy as cp
import numpy as np
import pytest

from structopt.structures._chain_projection import project_chain
from structopt.structures.base import flatten
from structopt.structures.chain import Chain, ChainPotentials


def _random_point(rng, T, S, scale):
    v = rng.normal(size=(T, S)) * scale
    w = rng.normal(size=(max(T - 1, 0), S, S)) * scale
    if rng.random() < 0.3:  # integer targets: ties and degenerate active sets
        v, w = np.round(v), np.round(w)
    return ChainPotentials(v, w)


def _residual(z):
    res = [abs(z.unary.sum(axis=1) - 1).max()]
    if len(z.pairwise):
        res.append(abs(z.pairwise.sum(axis=2) - z.unary[:-1]).max())
        res.append(abs(z.pairwise.sum(axis=1) - z.unary[1:]).max())
    return max(res)


@pytest.mark.parametrize("seed", range(12))
def test_projection_matches_cvxpy(seed):
    rng = np.random.default_rng(seed)
    T, S = int(rng.integers(1, 5)), int(rng.integers(2, 5))
    chain = Chain(S)
    x = _random_point(rng, T, S, scale=[0.1, 1.0, 3.0][seed % 3])
    z = chain.project(x)
    ref = chain.project_qp(x)
    assert np.min(flatten(z)) >= 0 and _residual(z) <= 1e-8
    assert np.max(abs(flatten(z) - flatten(ref))) < 1e-6
    # idempotence
    assert np.max(abs(flatten(chain.project(z)) - flatten(z))) < 1e-7
    # non-expansiveness against a second point
    y = _random_point(rng, T, S, 1.0)
    assert np.linalg.norm(flatten(chain.project(y)) - flatten(z)) <= np.linalg.norm(flatten(y) - flatten(x)) + 1e-7
    # variational inequality <x - Pi(x), q - Pi(x)> <= 0 for feasible q (vertices and their mixtures)
    outs = list(itertools.islice(chain.outputs(x), 50))
    d = flatten(x) - flatten(z)
    for _ in range(10):
        lam = rng.dirichlet(np.ones(len(outs)))
        q = sum(l * flatten(chain.stats(o, x)) for l, o in zip(lam, outs))
        assert d @ (q - flatten(z)) <= 1e-6


def test_projection_shared_pairwise_and_warm_start():
    rng = np.random.default_rng(5)
    chain = Chain(4)
    x = ChainPotentials(rng.normal(size=(5, 4)), rng.normal(size=(4, 4)))
    z = chain.project(x)
    ref = chain.project_qp(x)
    assert np.max(abs(flatten(z) - flatten(ref))) < 1e-6
    full = chain.expand(x)
    warm = (np.zeros((4, 4)), np.zeros((4, 4)))
    project_chain(full.unary, full.pairwise, warm=warm)
    node, edge, res, _ = project_chain(full.unary + 1e-3, full.pairwise, warm=warm)
    cold = chain.project(ChainPotentials(full.unary + 1e-3, full.pairwise))
    assert res <= 1e-9 and np.max(abs(node - cold.unary)) < 1e-7 and np.max(abs(edge - cold.pairwise)) < 1e-7


@pytest.mark.parametrize("seed", range(4))
def test_prox_entropy_matches_cvxpy(seed):
    # argmax_z eta <g, z> - KL(z || mu) over the chain polytope == over distributions p on outputs
    rng = np.random.default_rng(seed)
    T, S = int(rng.integers(1, 4)), int(rng.integers(2, 4))
    chain = Chain(S)
    mu = chain.marginals(ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(max(T - 1, 0), S, S))))[1]
    g = ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(max(T - 1, 0), S, S)))
    eta = float(rng.uniform(0.3, 2.0))
    z = chain.prox_entropy(mu, g, eta)
    outs = chain.enumerate(mu)
    stats = np.array([flatten(chain.stats(o, mu)) for o in outs])
    # p_mu(y) = prod edges / prod nodes^(deg-1) — the chain distribution with marginals mu
    deg = np.full(T, 2.0)
    deg[[0, -1]] = 1.0
    if T == 1:
        deg[:] = 0.0
    log_pmu = np.array([np.log(mu.pairwise[np.arange(T - 1), o[:-1], o[1:]]).sum()
                        - ((deg - 1) * np.log(mu.unary[np.arange(T), o])).sum() for o in outs])
    assert abs(np.exp(log_pmu).sum() - 1) < 1e-8
    p = cp.Variable(len(outs))
    objective = eta * (stats @ flatten(g)) @ p + cp.sum(cp.entr(p)) + log_pmu @ p
    cp.Problem(cp.Maximize(objective), [cp.sum(p) == 1, p >= 0]).solve(solver=cp.CLARABEL)
    ref = stats.T @ p.value
    assert np.max(abs(flatten(z) - ref)) < 1e-4  # exponential-cone solver accuracy
    scores = log_pmu + eta * stats @ flatten(g)  # brute-force normalisation of p_mu exp(eta <g, z>)
    exact = stats.T @ np.exp(scores - np.logaddexp.reduce(scores))
    assert np.max(abs(flatten(z) - exact)) < 1e-10
    assert np.min(flatten(z)) > 0 and _residual(z) < 1e-9
    # T_eta(u, 0) = u
    assert np.max(abs(flatten(chain.prox_entropy(mu, g._replace(unary=g.unary * 0, pairwise=g.pairwise * 0), eta))
                      - flatten(mu))) < 1e-10


@pytest.mark.parametrize("seed", range(6))
def test_projection_certified_under_large_node_shifts(seed):
    # the projection is invariant to adding a constant to a node's targets (mu_t sums to 1); a
    # shift of 1e6 makes the dual *value* ~1e12, far beyond the gains of the last Newton steps,
    # which stalled a value-based (Armijo) line search above tol. The derivative line search is
    # unaffected: same point, residual certified.
    rng = np.random.default_rng(100 + seed)
    T, S = int(rng.integers(2, 8)), int(rng.integers(2, 8))
    v, w = rng.normal(size=(T, S)), rng.normal(size=(T - 1, S, S))
    node, edge, res, _ = project_chain(v, w, tol=1e-9)
    shifted, edge2, res2, _ = project_chain(v + 1e6 * rng.normal(size=(T, 1)), w, tol=1e-9)
    assert res <= 1e-9 and res2 <= 1e-9
    assert np.min(shifted) >= 0 and np.min(edge2) >= 0
    assert np.max(abs(shifted - node)) < 1e-6 and np.max(abs(edge2 - edge)) < 1e-6
