"""Potentials that forbid every output (issue 22, item 8): every oracle refuses the same way.

A chain accepts -inf potentials (a forbidden label or transition) and masks; when they forbid every
label sequence, argmax, topk, marginals, max_marginals, project, prox_entropy and the LP
relaxation raise one :class:`InvalidInputError` saying so. When some sequence is allowed, each
oracle agrees with enumeration over the allowed sequences. The other structures do not accept
-inf at all: they refuse it (and NaN) naming the entry, never answering with NaN.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError, StructoptError
from structopt.smoothing import logsumexp
from structopt.structures import flatten
from structopt.structures._minnorm import project_hull

REFUSAL = "forbid every output"


def random_chain_instance(rng: np.random.Generator):
    """A small chain (sometimes with masks) and potentials with a random -inf pattern."""
    T, S = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    masks = {}
    if S > 1 and rng.random() < 0.3:
        allowed = rng.random((S, S)) < 0.7
        allowed[0, 0] = True  # the constructor refuses a mask that forbids every transition
        masks["allowed"] = allowed
        if rng.random() < 0.5:
            masks["allowed_start"] = rng.random(S) < 0.7
            masks["allowed_start"][int(rng.integers(S))] = True  # an empty start mask is refused
    chain = so.Chain(S, **masks)
    p = float(rng.choice([0.2, 0.5, 0.8]))
    unary = rng.integers(-2, 3, (T, S)).astype(float)
    unary[rng.random((T, S)) < p] = -np.inf
    shape = (S, S) if rng.random() < 0.5 else (max(T - 1, 0), S, S)
    pairwise = rng.integers(-2, 3, shape).astype(float)
    pairwise[rng.random(shape) < p / 2] = -np.inf
    return chain, so.ChainPotentials(unary, pairwise)


def enumerate_allowed(chain: so.Chain, theta: so.ChainPotentials):
    """The sequences the masks allow, their scores (-inf where a -inf entry is used) and statistics."""
    outs = chain.enumerate(theta)
    scores = np.array([chain.score(theta, y) for y in outs])
    T, S = np.shape(theta.unary)
    size = T * S + max(T - 1, 0) * S * S
    stats = np.array([flatten(chain.stats(y, theta)) for y in outs]).reshape(len(outs), size)
    return outs, scores, stats


def all_chain_oracles(chain: so.Chain, theta: so.ChainPotentials):
    """Every oracle that reads the potentials (the projection reads them as its target point)."""
    full = chain.expand(theta)
    uniform = so.ChainPotentials(np.ones_like(full.unary) / chain.n_states,
                                 np.ones_like(full.pairwise) / chain.n_states ** 2)
    return {
        "argmax": lambda: chain.argmax(theta),
        "topk": lambda: chain.topk(theta, 3),
        "topk1": lambda: chain.topk(theta, 1),
        "marginals": lambda: chain.marginals(theta),
        "max_marginals": lambda: chain.max_marginals(theta),
        "project": lambda: chain.project(theta),
        "lp_relaxation": lambda: chain.lp_relaxation(theta),
        # the prox's potentials are log(mu) + eta * step: -inf steps forbid entries the same way
        "prox_entropy": lambda: chain.prox_entropy(uniform, full, 1.0) if not chain.constrained else
        chain.marginals(theta),
    }


def test_chain_oracles_against_enumeration_with_random_neg_inf_masks():
    rng = np.random.default_rng(2024)
    n_feasible = n_infeasible = 0
    for trial in range(160):
        chain, theta = random_chain_instance(rng)
        outs, scores, stats = enumerate_allowed(chain, theta)
        finite = np.isfinite(scores)
        oracles = all_chain_oracles(chain, theta)
        if not finite.any():
            n_infeasible += 1
            for name, call in oracles.items():
                if name in ("project", "lp_relaxation") and trial % 4:
                    continue  # the QP / LP are slow: a quarter of the instances suffice
                with pytest.raises(InvalidInputError, match=REFUSAL):
                    call()
            continue
        n_feasible += 1
        best = scores.max()
        assert chain.score(theta, oracles["argmax"]()) == best
        labels, values = oracles["topk"]()
        expected = np.sort(scores[finite])[::-1][:3]
        np.testing.assert_array_equal(values, expected)
        np.testing.assert_array_equal([chain.score(theta, y) for y in labels], values)
        log_z, marg = oracles["marginals"]()
        assert log_z == pytest.approx(logsumexp(scores[finite]), abs=1e-12)
        p = np.exp(scores[finite] - log_z)
        np.testing.assert_allclose(flatten(marg), p @ stats[finite], atol=1e-12)
        mm = oracles["max_marginals"]()
        T, S = mm.shape
        for t, s in itertools.product(range(T), range(S)):
            with_ts = np.array([y[t] == s for y in outs])
            assert mm[t, s] == (scores[with_ts].max() if with_ts.any() else -np.inf)
        if trial % 4 == 0:  # the LP relaxation (exact on chains) fixes the forbidden statistics at 0
            value, _ = oracles["lp_relaxation"]()
            assert value == pytest.approx(best, abs=1e-7)
    assert n_feasible > 40 and n_infeasible > 20


def test_chain_projection_of_a_point_with_neg_inf_entries():
    """-inf entries of the target force their statistics to 0: the projection onto that face,
    checked against the min-norm point over the enumerated sequences that avoid them."""
    rng = np.random.default_rng(7)
    n_checked = 0
    for _ in range(16):
        chain, theta = random_chain_instance(rng)
        full = chain.expand(theta)
        v = so.ChainPotentials(np.where(np.isinf(full.unary), -np.inf, rng.normal(size=full.unary.shape)),
                               np.where(np.isinf(full.pairwise), -np.inf, rng.normal(size=full.pairwise.shape)))
        _, scores, stats = enumerate_allowed(chain, v)
        finite = np.isfinite(scores)
        if not finite.any():
            with pytest.raises(InvalidInputError, match=REFUSAL):
                chain.project(v)
            continue
        target = flatten(v)
        target[np.isneginf(target)] = 0.0
        vertices = stats[finite]
        reference, _ = project_hull(target, lambda d, m=vertices: m[int(np.argmax(m @ d))], tol=1e-14)
        np.testing.assert_allclose(flatten(chain.project(v)), reference, atol=1e-5)
        n_checked += 1
    assert n_checked > 4


def test_masks_alone_can_forbid_every_sequence_of_a_length():
    # 0 -> 1 is the only transition: no sequence of length 3 exists, every oracle says why
    chain = so.Chain(2, allowed=np.array([[False, True], [False, False]]))
    theta = so.ChainPotentials(np.zeros((3, 2)), np.zeros((2, 2)))
    for name, call in all_chain_oracles(chain, theta).items():
        with pytest.raises(InvalidInputError, match=REFUSAL) as info:
            call()
        if name not in ("lp_relaxation",):
            assert "masks" in str(info.value) or "forbid every output" in str(info.value)
    assert chain.argmax(so.ChainPotentials(np.zeros((2, 2)), np.zeros((2, 2)))).tolist() == [0, 1]
    with pytest.raises(InvalidInputError, match="position 2 of 3"):
        chain.argmax(theta)


def test_infeasibility_is_named_at_its_position():
    chain = so.Chain(3)
    unary = np.zeros((5, 3))
    unary[3] = -np.inf
    with pytest.raises(InvalidInputError, match="position 3 of 5"):
        chain.argmax(so.ChainPotentials(unary, np.zeros((3, 3))))
    unary = np.full((2, 3), -np.inf)
    with pytest.raises(InvalidInputError, match="every label at position 0"):
        chain.topk(so.ChainPotentials(unary, np.zeros((3, 3))), 2)


def test_huge_finite_potentials_are_not_called_infeasible():
    # argmax scales the potentials so sums cannot overflow: the best sequence is found, not refused
    chain = so.Chain(2)
    theta = so.ChainPotentials(np.full((4, 2), -1e308), np.zeros((2, 2)))
    assert chain.argmax(theta).tolist() == [0, 0, 0, 0]
    log_z, _ = chain.marginals(so.ChainPotentials(np.full((2, 2), -1e300), np.zeros((2, 2))))
    assert np.isfinite(log_z)


# --------------------------------------------------------------------------- structures without -inf
def _lp_structure():
    import cvxpy as cp

    z = cp.Variable(3, boolean=True)
    return so.LPStructure(z, [cp.sum(z) == 1]), so.VectorPotentials(np.zeros(3))


NO_NEG_INF = {
    "tree": lambda: (so.TreeStructure([[0, 1], [1, 2]], 2), so.TreePotentials(np.zeros((3, 2)), np.zeros((2, 2)))),
    "grid": lambda: (so.BinaryGrid(), so.GridPotentials(np.zeros((2, 2, 2)), np.zeros((2, 2)), np.zeros((2, 2)))),
    "matching": lambda: (so.BipartiteMatching(), so.MatchingPotentials(np.zeros((2, 2)), np.zeros(0), np.zeros(0))),
    "matching_plain": lambda: (so.BipartiteMatching(allow_unmatched=True), np.zeros((2, 3))),
    "box": lambda: (so.BoundingBox(), so.BoxPotentials(np.zeros((2, 3)))),
    "multiclass": lambda: (so.MultiClass(3), so.MultiClassPotentials(np.zeros(3))),
    "lp": _lp_structure,
}
ORACLES = ("argmax", "topk", "marginals", "max_marginals", "project", "score", "expand")


def _poisoned(theta, value: float, field: int):
    if isinstance(theta, np.ndarray):
        bad = theta.copy()
        bad.flat[0] = value
        return bad
    fields = [np.array(f, dtype=float) for f in theta]
    field = field % len(fields)
    if fields[field].size == 0:
        field = 0
    fields[field].flat[-1] = value
    return type(theta)(*fields)


@pytest.mark.parametrize("name", sorted(NO_NEG_INF))
@pytest.mark.parametrize("value", [-np.inf, np.nan, np.inf])
def test_structures_without_forbidden_entries_refuse_nonfinite_potentials(name, value):
    structure, theta = NO_NEG_INF[name]()
    for field in range(3):
        bad = _poisoned(theta, value, field)
        for oracle in ORACLES:
            if name == "lp" and oracle == "project":
                continue  # its -inf handling belongs to lp.py (same check as argmax; covered there)
            call = {"topk": lambda bad=bad: structure.topk(bad, 2),
                    "score": lambda bad=bad: structure.score(bad, structure.argmax(theta))}.get(
                oracle, lambda oracle=oracle, bad=bad: getattr(structure, oracle)(bad))
            with pytest.raises(StructoptError) as info:
                call()
            if isinstance(info.value, InvalidInputError) and name != "lp":
                kind = "NaN" if np.isnan(value) else ("-inf" if value < 0 else "+inf")
                assert kind in str(info.value) and "potentials" in str(info.value), str(info.value)
