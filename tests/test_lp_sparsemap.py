"""LP-SparseMAP (structopt.sparsemap.lp_sparsemap): the projection onto a structure's polytope description.

Checked against the reference QP (``project_qp``), against SparseMAP where the description is exact (a tree
of tables, a chain), on a frustrated triangle where the local polytope is loose, its backward against
central finite differences, its torch layer and loss by gradcheck, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.potentials import flatten, unflatten
from structopt.sparsemap import LPSparseMAPResult, lp_sparsemap, lp_sparsemap_loss, lp_sparsemap_vjp, sparsemap
from structopt.structures import Chain, FactorGraph


def _graph(rng: np.random.Generator, n_states, edges, scale: float = 2.0):
    """A factor graph of dense pairwise tables over ``edges`` with Gaussian potentials (generic: no ties)."""
    fg = FactorGraph(list(n_states))
    for i, j in edges:
        fg.add_table([i, j])
    n_unary = int(np.sum(n_states))
    n_pair = sum(int(n_states[i] * n_states[j]) for i, j in edges)
    theta = fg.check_theta(fg.Potentials(scale * rng.normal(size=n_unary), scale * rng.normal(size=n_pair)))
    return fg, theta


def _objective(theta, stats) -> float:
    diff = flatten(theta) - flatten(stats)
    return 0.5 * float(diff @ diff)


LOOPY = ((0, 1), (1, 2), (2, 3), (0, 3))
TREE = ((0, 1), (1, 2), (1, 3))


def test_forward_is_the_reference_qp_with_a_certificate():
    rng = np.random.default_rng(0)
    cases = [_graph(rng, (2, 2, 3, 2), LOOPY) for _ in range(4)] + [_graph(rng, (3, 2, 2, 2), TREE) for _ in range(2)]
    cases += [Chain.example(rng, integer=False, length=3, n_states=3, shared=False) for _ in range(2)]
    for structure, theta in cases:
        theta = structure.expand(theta)
        result = lp_sparsemap(structure, theta)
        assert isinstance(result, LPSparseMAPResult)
        reference = flatten(structure.project_qp(theta))
        np.testing.assert_allclose(flatten(result.stats), reference, atol=1e-6)
        assert structure.polytope(theta).violation(flatten(result.stats)) <= 1e-8
        assert result.violation <= 1e-8 and result.kkt <= 1e-6 and abs(result.gap) <= 1e-6


def test_equals_sparsemap_where_the_description_is_exact():
    rng = np.random.default_rng(1)
    cases = [_graph(rng, (3, 2, 2, 2), TREE) for _ in range(2)]
    cases += [Chain.example(rng, integer=False, length=4, n_states=2, shared=False)]
    for structure, theta in cases:
        theta = structure.expand(theta)
        local, exact = lp_sparsemap(structure, theta), sparsemap(structure, theta)
        np.testing.assert_allclose(flatten(local.stats), flatten(exact.stats), atol=1e-6)


def test_frustrated_triangle_is_fractional_outside_the_marginal_polytope():
    # every edge rewards disagreement: at most 2 of 3 edges can disagree on a labeling, the local polytope
    # lets all three disagree at μ_i = ½
    fg = FactorGraph([2, 2, 2])
    for edge in ((0, 1), (1, 2), (0, 2)):
        fg.add_table(list(edge))
    rng = np.random.default_rng(2)
    table = np.array([0.0, 3.0, 3.0, 0.0])
    theta = fg.check_theta(fg.Potentials(0.1 * rng.normal(size=6), np.tile(table, 3) + 0.1 * rng.normal(size=12)))
    local, exact = lp_sparsemap(fg, theta), sparsemap(fg, theta)
    mu = flatten(local.stats)
    assert fg.polytope(theta).violation(mu) <= 1e-8
    assert _objective(theta, local.stats) < _objective(theta, exact.stats) - 1e-3
    disagree = local.stats.factors.reshape(3, 4)[:, [1, 2]].sum()
    assert disagree > 2.0 + 1e-2  # no mixture of labelings reaches it
    assert np.any((local.stats.unary > 0.05) & (local.stats.unary < 0.95))
    assert local.stats.factors.reshape(3, 4)[:, [1, 2]].sum() > exact.stats.factors.reshape(3, 4)[:, [1, 2]].sum()


def _fd_jacobian(structure, theta, eps=1e-6):
    flat = flatten(theta)
    columns = []
    for i in range(flat.size):
        step = np.zeros(flat.size)
        step[i] = eps
        up = flatten(lp_sparsemap(structure, unflatten(flat + step, theta)).stats)
        down = flatten(lp_sparsemap(structure, unflatten(flat - step, theta)).stats)
        columns.append((up - down) / (2 * eps))
    return np.array(columns).T


def test_vjp_matches_central_finite_differences_and_is_symmetric():
    rng = np.random.default_rng(3)
    cases = [_graph(rng, (2, 3, 2), ((0, 1), (1, 2), (0, 2))) for _ in range(2)]
    cases += [Chain.example(rng, integer=False, length=3, n_states=2, shared=False)]
    for structure, theta in cases:
        theta = structure.expand(theta)
        result = lp_sparsemap(structure, theta)
        d = flatten(theta).size
        jac = np.array([lp_sparsemap_vjp(result, e) for e in np.eye(d)])  # rows: Jᵀ e_i
        np.testing.assert_allclose(jac, jac.T, atol=1e-12)
        np.testing.assert_allclose(jac @ jac, jac, atol=1e-10)  # a projector
        np.testing.assert_allclose(jac, _fd_jacobian(structure, theta), atol=2e-4)
        assert 0 < np.trace(jac) < d  # neither locally constant nor unconstrained: the test can fail


def test_loss_is_the_fenchel_young_loss():
    rng = np.random.default_rng(4)
    fg, theta = _graph(rng, (2, 2, 3, 2), LOOPY)
    labelings = list(fg.enumerate(theta))
    gold = labelings[int(np.argmin([fg.score(theta, y) for y in labelings]))]  # the worst: far from μ*
    value, grad, result = lp_sparsemap_loss(fg, theta, gold)
    mu_y = flatten(fg.stats(gold, theta))
    flat = flatten(theta)
    assert value == pytest.approx(0.5 * np.sum((flat - mu_y) ** 2) - _objective(theta, result.stats), abs=1e-12)
    assert value > 0
    np.testing.assert_allclose(grad, flatten(result.stats) - mu_y)
    # 0 at a θ whose projection is the gold labeling itself
    value, _, _ = lp_sparsemap_loss(fg, unflatten(10.0 * mu_y, theta), gold)
    assert value == pytest.approx(0.0, abs=1e-6)


class _NoSolve(FactorGraph):
    """A factor graph whose description must not be asked for (the checks come first)."""

    def polytope(self, theta):
        raise AssertionError("polytope() called before the input checks")


class _NoPolytope:
    name = "NoPolytope"

    def expand(self, theta):
        return theta


def test_bad_input_is_refused_before_any_work():
    fg = _NoSolve([2, 2])
    fg.add_table([0, 1])
    good = fg.check_theta(fg.Potentials(np.zeros(4), np.zeros(4)))
    bad = fg.Potentials(np.array([0.0, np.nan, 0.0, 0.0]), np.zeros(4))
    with pytest.raises(InvalidInputError, match=r"NaN|finite"):
        lp_sparsemap(fg, bad)
    with pytest.raises(InvalidInputError, match="tol"):
        lp_sparsemap(fg, good, tol=0.0)
    with pytest.raises(InvalidInputError, match="-inf"):
        lp_sparsemap(fg, fg.Potentials(np.array([0.0, -np.inf, 0.0, 0.0]), np.zeros(4)))
    with pytest.raises(NotSupportedError, match="polytope"):
        lp_sparsemap(_NoPolytope(), good)
    with pytest.raises(InvalidInputError, match="LPSparseMAPResult"):
        lp_sparsemap_vjp(sparsemap(FactorGraph([2]), FactorGraph([2]).Potentials(np.zeros(2), np.zeros(0))),
                         np.zeros(2))


# --------------------------------------------------------------------------- torch
def test_torch_layer_and_loss_gradcheck_on_a_loopy_graph():
    torch = pytest.importorskip("torch")
    import structopt.torch as st

    rng = np.random.default_rng(5)
    fg, theta = _graph(rng, (2, 2, 2), ((0, 1), (1, 2), (0, 2)))
    t = tuple(torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in theta)
    out = st.sparsemap(fg, fg.Potentials(*t), relaxation="local")
    np.testing.assert_allclose(np.concatenate([o.detach().numpy().ravel() for o in out]),
                               flatten(lp_sparsemap(fg, theta).stats), atol=1e-10)
    assert torch.autograd.gradcheck(lambda *f: tuple(st.sparsemap(fg, fg.Potentials(*f), relaxation="local")),
                                    t, eps=1e-6, atol=1e-4, rtol=1e-3)
    gold = np.array([0, 1, 1])
    loss = st.structured_loss(fg, fg.Potentials(*t), gold, kind="sparsemap", relaxation="local")
    assert loss.item() == pytest.approx(lp_sparsemap_loss(fg, theta, gold)[0], abs=1e-10)
    assert torch.autograd.gradcheck(
        lambda *f: st.structured_loss(fg, fg.Potentials(*f), gold, kind="sparsemap", relaxation="local"),
        t, eps=1e-6, atol=1e-4, rtol=1e-3)
    with pytest.raises(InvalidInputError, match="relaxation"):
        st.sparsemap(fg, fg.Potentials(*t), relaxation="marginals")
    with pytest.raises(InvalidInputError, match="relaxation"):
        st.structured_loss(fg, fg.Potentials(*t), gold, kind="sparsemap", relaxation=1)


def test_auxiliary_columns_are_eliminated_on_a_flow_polytope():
    # a chain as a hypergraph DP: its polytope has one auxiliary flow column per hyperedge
    from structopt.structures.dp import DPPotentials

    rng = np.random.default_rng(6)
    chain, theta = Chain.example(rng, integer=False, length=3, n_states=2, shared=False)
    full = chain.expand(theta)
    dp = chain.as_dp(3)
    dp_theta = DPPotentials(flatten(full))
    assert dp.polytope(dp_theta).n_aux > 0
    result = lp_sparsemap(dp, dp_theta)
    np.testing.assert_allclose(flatten(result.stats), flatten(lp_sparsemap(chain, full).stats), atol=1e-6)
    assert result.violation <= 1e-8 and result.kkt <= 1e-6 and abs(result.gap) <= 1e-6
    d = flatten(dp_theta).size
    jac = np.array([lp_sparsemap_vjp(result, e) for e in np.eye(d)])
    np.testing.assert_allclose(jac, _fd_jacobian(dp, dp_theta), atol=2e-4)
    np.testing.assert_allclose(jac, np.array([lp_sparsemap_vjp(lp_sparsemap(chain, full), e) for e in np.eye(d)]),
                               atol=1e-6)


def test_a_structure_without_a_linear_description_is_refused():
    from tests.test_torch_structured import instances

    box, theta, _ = instances("box", seed=0)[0]
    with pytest.raises(NotSupportedError, match=r"polytope|description"):
        lp_sparsemap(box, box.expand(theta))
