"""structopt.torch's SparseMAP and perturbed layers and their Fenchel–Young losses on every registered
structure family: gradcheck (float64), equality with the numpy cores and with the QP projection."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import structopt.torch as st  # noqa: E402
from structopt.perturbed import perturbed_argmax, perturbed_vjp  # noqa: E402
from structopt.potentials import add, flatten, unflatten  # noqa: E402
from structopt.sparsemap import sparsemap as sparsemap_core  # noqa: E402
from structopt.sparsemap import sparsemap_vjp  # noqa: E402
from structopt.structures.registry import registered_structures  # noqa: E402
from structopt.torch._autograd import reduce_to  # noqa: E402
from tests.test_torch_structured import SWEEP, grads, instances, some, tensors  # noqa: E402

FAMILIES = tuple(registered_structures())




@pytest.mark.parametrize("sweep", SWEEP)
@pytest.mark.parametrize("family", FAMILIES)
def test_sparsemap_layer_and_loss_gradcheck_and_equal_the_numpy_core(family, sweep):
    rng = np.random.default_rng(12)
    for structure, theta, gold in some(family, 11, sweep):
        t = tensors(theta)
        full = structure.expand(theta)
        out = st.sparsemap(structure, t)
        core = sparsemap_core(structure, full)
        assert np.allclose(flatten(type(full)(*(o.detach().numpy() for o in out))), flatten(core.stats), atol=1e-10)
        # backward = the core's vjp, summed onto θ's layout
        g = [rng.normal(size=tuple(o.shape)) for o in out]
        got = torch.autograd.grad(tuple(out), tuple(t), grad_outputs=tuple(torch.tensor(x) for x in g),
                                  allow_unused=True)
        want = reduce_to(unflatten(sparsemap_vjp(core, np.concatenate([x.ravel() for x in g])), full), theta)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.zeros(b.shape) if a is None else a.numpy(), b, atol=1e-9)
        assert torch.autograd.gradcheck(lambda *f, s=structure, like=theta: st.sparsemap(s, type(like)(*f)),
                                        tuple(t), eps=1e-6, atol=1e-5, rtol=1e-4)
        loss = st.structured_loss(structure, t, gold, kind="sparsemap")
        mu_y = structure.stats(gold, theta)
        np.testing.assert_allclose(flatten(grads(loss, t)), flatten(reduce_to(add(core.stats, mu_y, -1.0), theta)),
                                   atol=1e-9)
        assert loss.item() >= 0
        assert torch.autograd.gradcheck(
            lambda *f, s=structure, like=theta, y=gold: st.structured_loss(s, type(like)(*f), y, kind="sparsemap"),
            tuple(t), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["chain", "matching", "box", "factor_graph"])
def test_sparsemap_layer_is_the_projection_onto_the_hull_of_the_enumerated_outputs(family):
    """μ* equals the QP min ‖Vα − θ‖² over the simplex, V the enumerated outputs' statistics (cvxpy)."""
    import cvxpy as cp

    for structure, theta, _ in instances(family, seed=11)[-2:]:
        full = structure.expand(theta)
        vertices = np.array([flatten(structure.stats(y, full)) for y in structure.enumerate(full)])
        alpha = cp.Variable(len(vertices))
        qp = cp.Problem(cp.Minimize(cp.sum_squares(vertices.T @ alpha - flatten(full))),
                        [alpha >= 0, cp.sum(alpha) == 1])
        qp.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
        out = st.sparsemap(structure, tensors(theta, grad=False))
        np.testing.assert_allclose(flatten(type(full)(*(o.numpy() for o in out))), vertices.T @ alpha.value,
                                   atol=1e-5)


@pytest.mark.parametrize("sweep", SWEEP)
@pytest.mark.parametrize("family", FAMILIES)
def test_perturbed_loss_gradcheck_and_layer_backward_equal_the_numpy_core(family, sweep):
    rng = np.random.default_rng(13)
    for structure, theta, gold in some(family, 11, sweep):
        t = tensors(theta)
        full = structure.expand(theta)
        # for a fixed seed the loss is a sample average of piecewise-linear terms: gradcheck holds off the kinks
        assert torch.autograd.gradcheck(
            lambda *f, s=structure, like=theta, y=gold: st.structured_loss(s, type(like)(*f), y, kind="perturbed",
                                                                           n_samples=8, seed=3),
            tuple(t), eps=1e-6, atol=1e-5, rtol=1e-4)
        out = st.perturbed(structure, t, epsilon=0.5, n_samples=8, seed=4)
        core = perturbed_argmax(structure, full, epsilon=0.5, n_samples=8, seed=4)
        assert np.allclose(flatten(type(full)(*(o.detach().numpy() for o in out))), flatten(core.stats))
        g = [rng.normal(size=tuple(o.shape)) for o in out]
        got = torch.autograd.grad(tuple(out), tuple(t), grad_outputs=tuple(torch.tensor(x) for x in g),
                                  allow_unused=True)
        want = reduce_to(unflatten(perturbed_vjp(core, np.concatenate([x.ravel() for x in g])), full), theta)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.zeros(b.shape) if a is None else a.numpy(), b, atol=1e-9)


def test_relaxed_options_are_checked_before_any_work():
    from structopt.errors import InvalidInputError

    structure, theta, gold = some("chain", 11, False)[0]
    t = tensors(theta)
    for call, match in [
        (lambda: st.sparsemap(structure, t, tol=0), "tol to be a finite number > 0"),
        (lambda: st.perturbed(structure, t, n_samples=0), "integer n_samples >= 1"),
        (lambda: st.structured_loss(structure, t, gold, kind="perturbed", epsilon=-1), "epsilon"),
        (lambda: st.structured_loss(structure, t, gold, kind="sparsemap", mu=1), r"unknown options \['mu'\]"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            call()


def test_an_unconverged_sparsemap_says_so():
    structure, theta, gold = instances("chain", seed=11)[-1]
    t = tensors(theta)
    with pytest.warns(RuntimeWarning, match="stopped at max_iter=1 with Frank–Wolfe gap"):
        st.sparsemap(structure, t, max_iter=1)
    with pytest.warns(RuntimeWarning, match=r"\(example [01]\) stopped at max_iter=1") as caught:
        st.structured_loss(structure, [t, t], [gold, gold], kind="sparsemap", max_iter=1)
    assert sorted(str(w.message)[:20] for w in caught) == ["SparseMAP (example 0", "SparseMAP (example 1"]
