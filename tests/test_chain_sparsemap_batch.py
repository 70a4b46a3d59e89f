"""The batched chain SparseMAP (structopt.torch._chain_sparsemap) against the generic active-set path of
structopt.sparsemap (values, μ*, gradients to 1e-8 on random chains of varied lengths, states, layouts and
masks) and against the exact projection onto the enumerated outputs' hull on tiny chains."""

from __future__ import annotations

import signal
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import structopt.torch as st  # noqa: E402
from structopt import sparsemap as core  # noqa: E402
from structopt.potentials import flatten, unflatten  # noqa: E402
from structopt.structures.chain import Chain, ChainPotentials  # noqa: E402
from structopt.torch import _chain_sparsemap as fast  # noqa: E402
from structopt.torch import _inputs  # noqa: E402
from structopt.torch._autograd import reduce_to  # noqa: E402

ATOL = 1e-8


def _masks(rng: np.random.Generator, S: int) -> dict:
    allowed = rng.random((S, S)) < 0.75
    allowed[np.arange(S), np.arange(S)] = True  # every label may repeat: every length has an allowed sequence
    start = rng.random(S) < 0.7
    start[0] = True
    end = rng.random(S) < 0.7
    end[0] = True
    return {"allowed": allowed, "allowed_start": start, "allowed_end": end}


def _chains(rng: np.random.Generator, n: int, masked: bool = False, tied: bool = False) -> tuple[Chain, list, list]:
    """A chain structure and ``n`` examples of it: (potentials of float64 tensors, gold labels); ``tied``:
    integer potentials in -1..1, whose optimal faces are often not simplices (the face search then adds
    vertices to the backward)."""
    S = int(rng.integers(2, 5))
    structure = Chain(S, **_masks(rng, S)) if masked else Chain(S)
    shared = rng.random() < 0.5

    def draw(*shape):
        return rng.integers(-1, 2, size=shape).astype(float) if tied else rng.normal(size=shape)

    pairwise = draw(S, S)
    thetas, golds = [], []
    for _ in range(n):
        L = int(rng.integers(1, 7))
        scale = 1.0 if tied else rng.choice([0.1, 1.0, 3.0])
        p = pairwise if shared else draw(max(L - 1, 0), S, S)
        thetas.append(ChainPotentials(torch.tensor(scale * draw(L, S), requires_grad=True),
                                      torch.tensor(p, requires_grad=True)))
        gold = rng.integers(0, S, size=L)
        while masked and not structure.feasible(gold):
            gold = rng.integers(0, S, size=L)
        golds.append(gold)
    return structure, thetas, golds


def _numpy(theta: ChainPotentials) -> ChainPotentials:
    return ChainPotentials(*(f.detach().numpy() for f in theta))


@pytest.mark.parametrize("masked", [False, True])
def test_batched_loss_equals_the_generic_path(masked):
    """Values and gradients of structured_loss(kind='sparsemap') on lists (batched) against the numpy core."""
    rng = np.random.default_rng(1 + masked)
    for _ in range(25):
        structure, thetas, golds = _chains(rng, int(rng.integers(1, 6)), masked)
        batch, _ = _inputs.examples(structure, thetas)
        assert all(fast.batchable(ex) for ex in batch)
        values = st.structured_loss(structure, thetas, golds, kind="sparsemap")
        grads = torch.autograd.grad(values.sum(), [f for t in thetas for f in t])
        for j, (theta, gold) in enumerate(zip(thetas, golds)):
            arr = _numpy(theta)
            value, grad, result = core.sparsemap_loss(structure, structure.expand(arr), gold)
            assert result.converged
            assert values[j].item() == pytest.approx(value, abs=ATOL)
            want = reduce_to(unflatten(grad, structure.expand(arr)), arr)
            for got, expected in zip(grads[2 * j:2 * j + 2], want):
                np.testing.assert_allclose(got.numpy(), expected, atol=ATOL)


@pytest.mark.parametrize("masked, tied", [(False, False), (True, False), (False, True)])
def test_batched_layer_and_its_backward_equal_the_generic_path(masked, tied):
    """μ* of the sparsemap layer on lists and its vector-Jacobian products against sparsemap / sparsemap_vjp
    (the optimal face's further vertices included)."""
    rng = np.random.default_rng(11 + masked + 2 * tied)
    faces = 0
    for _ in range(20):
        structure, thetas, _ = _chains(rng, int(rng.integers(1, 5)), masked, tied)
        out = st.sparsemap(structure, thetas)
        upstream = [tuple(torch.tensor(rng.normal(size=tuple(f.shape))) for f in o) for o in out]
        grads = torch.autograd.grad([f for o in out for f in o], [f for t in thetas for f in t],
                                    grad_outputs=[g for u in upstream for g in u], allow_unused=True)
        for j, theta in enumerate(thetas):
            arr = _numpy(theta)
            full = structure.expand(arr)
            result = core.sparsemap(structure, full)
            faces += result.face is not None
            np.testing.assert_allclose(flatten(_numpy(out[j])), flatten(result.stats), atol=ATOL)
            vjp = core.sparsemap_vjp(result, np.concatenate([u.numpy().ravel() for u in upstream[j]]))
            want = reduce_to(unflatten(vjp, full), arr)
            for got, expected in zip(grads[2 * j:2 * j + 2], want):
                np.testing.assert_allclose(np.zeros(expected.shape) if got is None else got.numpy(), expected,
                                           atol=ATOL)
    assert faces or not tied  # the tied draws do reach faces that are not simplices


def test_batched_forward_is_the_projection_onto_the_enumerated_outputs_hull():
    """μ* against the QP ``min ‖Vα − θ‖²`` over the simplex, V every output's statistics (brute force)."""
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(5)
    for _ in range(12):
        structure, thetas, _ = _chains(rng, 3)
        out = st.sparsemap(structure, [ChainPotentials(*(f.detach() for f in t)) for t in thetas])
        for theta, mu in zip(thetas, out):
            full = structure.expand(_numpy(theta))
            if full.unary.shape[0] > 3:
                continue  # enumeration: S^T outputs
            V = np.array([flatten(structure.stats(y, full)) for y in structure.outputs(full)])
            alpha = cp.Variable(len(V))
            qp = cp.Problem(cp.Minimize(cp.sum_squares(V.T @ alpha - flatten(full))), [alpha >= 0, cp.sum(alpha) == 1])
            qp.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
            np.testing.assert_allclose(flatten(_numpy(mu)), V.T @ alpha.value, atol=1e-6)


def test_truncation_matches_the_generic_path_and_warns_per_example():
    """max_iter stops both paths at the same point, and each unconverged example says so."""
    rng = np.random.default_rng(3)
    S, L = 4, 6
    structure = Chain(S)
    thetas = [ChainPotentials(torch.tensor(0.1 * rng.normal(size=(L, S))), torch.tensor(0.1 * rng.normal(size=(S, S))))
              for _ in range(3)]
    golds = [rng.integers(0, S, size=L) for _ in range(3)]
    for max_iter in (1, 2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            values = st.structured_loss(structure, thetas, golds, kind="sparsemap", max_iter=max_iter)
        messages = sorted(str(w.message) for w in caught)
        expected = []
        for j, (theta, gold) in enumerate(zip(thetas, golds)):
            value, _, result = core.sparsemap_loss(structure, structure.expand(_numpy(theta)), gold,
                                                   max_iter=max_iter)
            assert values[j].item() == pytest.approx(value, abs=ATOL)
            if not result.converged:
                expected.append(f"SparseMAP (example {j}) stopped at max_iter={max_iter} with Frank–Wolfe gap "
                                f"{result.gap:.3g} > tol=1e-09: μ* and its gradient are approximate")
        assert expected and messages == sorted(expected)


def test_warm_start_from_a_vertex_equals_the_generic_warm_start():
    """solve_group's ``warm`` (one label sequence per example) is the generic warm_start with that vertex."""
    rng = np.random.default_rng(8)
    structure, thetas, golds = _chains(rng, 4)
    batch, _ = _inputs.examples(structure, thetas)
    result = fast.solve_group(batch, list(range(4)), 1e-9, 1000, warm=golds)
    for b, (ex, gold) in enumerate(zip(batch, golds)):
        full = structure.expand(ex.array)
        start = core.SparseMAPResult(stats=structure.stats(gold, full), outputs=[gold], weights=np.ones(1),
                                     vertices=flatten(structure.stats(gold, full))[None, :], gap=np.inf,
                                     iterations=0, converged=False)
        generic = core.sparsemap(structure, full, warm_start=start, face_tries=0)
        L = len(gold)
        np.testing.assert_allclose(result.node[b, :L], generic.stats.unary, atol=ATOL)
        np.testing.assert_allclose(result.pair[b, :L - 1], generic.stats.pairwise, atol=ATOL)


def test_long_batches_are_split_into_calls_between_which_ctrl_c_is_honoured(monkeypatch):
    """With a budget of one oracle call, every example is its own compiled call; the answers do not change."""
    from structopt.structures import _chain_sparsemap_kernels as ker

    rng = np.random.default_rng(4)
    structure, thetas, _ = _chains(rng, 5)
    batch, _ = _inputs.examples(structure, thetas)
    whole = fast.solve_group(batch, list(range(5)), 1e-9, 1000)
    calls = []
    chunk = ker.sparsemap_chunk

    def counted(*args):
        calls.append(args[12])  # the first example of the call
        return chunk(*args)

    monkeypatch.setattr(fast, "BUDGET", 1)
    monkeypatch.setattr(ker, "sparsemap_chunk", counted)
    split = fast.solve_group(batch, list(range(5)), 1e-9, 1000)
    assert calls == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(split.node, whole.node)
    np.testing.assert_array_equal(split.offsets, whole.offsets)


def test_a_chain_overriding_its_argmax_keeps_the_generic_path():
    """Chosen by declared capability: a subclass with its own argmax is not batched, and its argmax is used."""
    seen = []

    class Counting(Chain):
        def argmax(self, theta):
            seen.append(1)
            return super().argmax(theta)

    rng = np.random.default_rng(6)
    structure = Counting(3)
    thetas = [ChainPotentials(torch.tensor(rng.normal(size=(4, 3))), torch.tensor(rng.normal(size=(3, 3))))
              for _ in range(2)]
    batch, _ = _inputs.examples(structure, thetas)
    assert not any(fast.batchable(ex) for ex in batch)
    st.structured_loss(structure, thetas, [np.zeros(4, dtype=int)] * 2, kind="sparsemap")
    assert seen


def test_sparsemap_loss_makes_no_face_search_by_default():
    """The loss needs μ* only: the oracle is called for the first vertex, each added one and the certificate."""
    rng = np.random.default_rng(9)
    structure = Chain(3)
    theta = structure.expand(ChainPotentials(rng.normal(size=(5, 3)), rng.normal(size=(3, 3))))
    calls = []

    def oracle(t):
        calls.append(1)
        return structure.argmax(t)

    _, _, result = core.sparsemap_loss(structure, theta, np.zeros(5, dtype=int), oracle=oracle)
    assert result.face is None and len(calls) == result.iterations + 2


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not handled by Python's default handler in this test run")
def test_ctrl_c_stops_a_long_batched_call_promptly():
    """SIGINT during a batch that takes minutes raises KeyboardInterrupt within two seconds."""
    from tests.test_interrupts import sigint_during

    rng = np.random.default_rng(10)
    structure = Chain(9)
    transitions = torch.tensor(0.01 * rng.normal(size=(9, 9)))
    # near-zero potentials: dense solutions, hundreds of cycles each
    thetas = [ChainPotentials(torch.tensor(0.01 * rng.normal(size=(60, 9))), transitions) for _ in range(2000)]
    golds = [np.zeros(60, dtype=np.int64)] * len(thetas)
    with pytest.warns(RuntimeWarning, match="stopped at max_iter=2"):  # the kernels loaded before the clock
        st.structured_loss(structure, thetas[:1], golds[:1], kind="sparsemap", max_iter=2)
    with sigint_during(0.5) as record:
        st.structured_loss(structure, thetas, golds, kind="sparsemap", max_iter=1000)
    assert record["caught"] - record["sent"] < 2.0
