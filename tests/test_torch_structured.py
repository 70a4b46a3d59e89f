"""structopt.torch on every registered structure family: gradcheck (float64) of each loss kind and of
log_partition / marginals, and values and gradients against enumeration (brute force over the outputs)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import structopt.torch as st  # noqa: E402
from structopt.errors import NotSupportedError  # noqa: E402
from structopt.potentials import add, flatten, inner, unflatten  # noqa: E402
from structopt.smoothing import l2_smoothed_max_sorted, logsumexp  # noqa: E402
from structopt.structures.base import supports  # noqa: E402
from structopt.structures.registry import registered_structures  # noqa: E402
from structopt.torch._autograd import reduce_to  # noqa: E402

FAMILIES = tuple(registered_structures())


def _interior(theta):
    """Keep random potentials off the boundary of the structure's domain, where an oracle refuses them.

    A grid's example raises θ(0,0) of each edge table exactly to supermodularity; gradcheck's perturbations
    would step outside, so every table gets a margin of 0.5 (still a random continuous θ).
    """
    if type(theta).__name__ == "GridPotentials":
        fields = [theta.unary]
        for table in theta[1:]:
            table = np.array(table)
            table[..., 0, 0] += 0.5
            fields.append(table)
        return type(theta)(*fields)
    return theta


def instances(name: str, seed: int = 0):
    """(structure, θ numpy, gold output) for every size variant of a family, continuous θ."""
    cls = registered_structures()[name]
    rng = np.random.default_rng(seed)
    out = []
    for size in cls.example_variants:
        structure, theta = cls.example(rng, integer=False, **size)
        theta = _interior(type(theta)(*(np.array(f, dtype=float) for f in theta)))
        outputs = structure.enumerate(theta)
        if not outputs or flatten(theta).size == 0:
            continue
        gold = outputs[int(rng.integers(len(outputs)))]
        out.append((structure, theta, gold))
    return out


def tensors(theta, dtype=torch.float64, grad=True):
    # fresh tensors with ordinary strides (numpy gives empty arrays zero strides, which gradcheck refuses)
    return type(theta)(*(torch.zeros(np.shape(f), dtype=dtype).copy_(torch.from_numpy(np.array(f)))
                         .requires_grad_(grad) for f in theta))


def grads(value, theta_t):
    got = torch.autograd.grad(value, tuple(theta_t), allow_unused=True)
    return type(theta_t)(*(np.zeros(tuple(t.shape)) if g is None else g.numpy() for g, t in zip(got, theta_t)))


def close(a, b, tol=1e-8):
    return np.allclose(flatten(a), flatten(b), atol=tol, rtol=tol)


def enumeration(structure, theta, gold, loss=None):
    """Every output's statistics (full layout), score and task loss."""
    outs = structure.enumerate(theta)
    stats = [structure.stats(y, theta) for y in outs]
    scores = np.array([inner(theta, mu) for mu in stats])
    task = loss if loss is not None else st.default_loss(structure)
    deltas = np.array([task(gold, y) for y in outs])
    return outs, stats, scores, deltas


def mean_stats(stats, weights, like):
    total = type(like)(*(np.zeros(np.shape(f)) for f in stats[0]))
    for w, mu in zip(weights, stats):
        total = add(total, mu, float(w))
    return reduce_to(total, like)


KINDS = ("hinge", "crf", "topk", "entropy")


def family_supports(family: str, oracle: str) -> bool:
    structure, _, _ = instances(family)[0]
    return supports(structure, oracle)


def _needs(kind: str) -> str | None:
    return {"crf": "marginals", "entropy": "marginals", "topk": "topk"}.get(kind)


def some(family: str, seed: int, sweep: bool):
    """Every size variant for the slow sweep, else the smallest instance with at least 6 potentials."""
    every = instances(family, seed)
    if sweep:
        return every
    sized = sorted(every, key=lambda inst: flatten(inst[1]).size)
    return [next((inst for inst in sized if flatten(inst[1]).size >= 6), sized[-1])]


SWEEP = [pytest.param(False, id="one"), pytest.param(True, id="sweep", marks=pytest.mark.slow)]


@pytest.mark.parametrize("sweep", SWEEP)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_of_every_loss_on_every_family(family, kind, sweep):
    checked = 0
    for structure, theta, gold in some(family, 0, sweep):
        need = _needs(kind)
        t = tensors(theta)
        if need and not supports(structure, need):
            with pytest.raises(NotSupportedError, match=need):
                st.structured_loss(structure, t, gold, kind=kind)
            continue

        def f(*fields, structure=structure, gold=gold, like=theta):
            return st.structured_loss(structure, type(like)(*fields), gold, kind=kind, mu=0.7) if kind in (
                "topk", "entropy") else st.structured_loss(structure, type(like)(*fields), gold, kind=kind)

        assert torch.autograd.gradcheck(f, tuple(t), eps=1e-6, atol=1e-5, rtol=1e-4)
        checked += 1
    if _needs(kind) is None or family_supports(family, _needs(kind)):
        assert checked >= 1


@pytest.mark.parametrize("family", FAMILIES)
def test_hinge_value_and_gradient_equal_enumeration(family):
    for structure, theta, gold in instances(family, seed=1):
        _outs, stats, scores, deltas = enumeration(structure, theta, gold)
        gold_mu = structure.stats(gold, theta)
        best = int(np.argmax(scores + deltas))
        t = tensors(theta)
        value = st.structured_loss(structure, t, gold, kind="hinge")
        assert value.item() == pytest.approx(scores[best] + deltas[best] - inner(theta, gold_mu), abs=1e-9)
        assert value.item() >= -1e-12
        assert close(grads(value, t), reduce_to(add(stats[best], gold_mu, -1.0), theta))


@pytest.mark.parametrize("family", FAMILIES)
def test_smoothed_losses_equal_enumeration(family):
    mu, k = 0.8, 3
    for structure, theta, gold in instances(family, seed=2):
        _outs, stats, scores, deltas = enumeration(structure, theta, gold)
        gold_mu = structure.stats(gold, theta)
        gold_score = inner(theta, gold_mu)
        t = tensors(theta)
        if supports(structure, "topk"):
            order = np.argsort(-(scores + deltas), kind="stable")[:k]
            value, weights = l2_smoothed_max_sorted((scores + deltas)[order] - gold_score, mu)
            got = st.structured_loss(structure, t, gold, kind="topk", mu=mu, k=k)
            assert got.item() == pytest.approx(value, abs=1e-9)
            expected = mean_stats([stats[j] for j in order], weights, theta)
            assert close(grads(got, t), add(expected, reduce_to(gold_mu, theta), -1.0))
        if supports(structure, "marginals"):
            z = (scores + deltas) / mu
            p = np.exp(z - logsumexp(z))
            got = st.structured_loss(structure, t, gold, kind="entropy", mu=mu)
            assert got.item() == pytest.approx(mu * logsumexp(z) - gold_score, abs=1e-9)
            assert close(grads(got, t), add(mean_stats(stats, p, theta), reduce_to(gold_mu, theta), -1.0))


@pytest.mark.parametrize("family", FAMILIES)
def test_crf_log_partition_and_marginals_equal_enumeration(family):
    cls = registered_structures()[family]
    for structure, theta, gold in instances(family, seed=3):
        t = tensors(theta)
        if not supports(structure, "marginals"):
            for call, args in ((st.log_partition, ()), (st.marginals, ()), (st.structured_loss, (gold, "crf"))):
                with pytest.raises(NotSupportedError, match=f"{cls.__name__}.*does not have"):
                    call(structure, t, *args)
            continue
        _outs, stats, scores, _ = enumeration(structure, theta, gold)
        p = np.exp(scores - logsumexp(scores))
        expected = type(theta)(*(sum(w * np.asarray(f) for w, f in zip(p, fields)) for fields in zip(*stats)))
        log_z = st.log_partition(structure, t)
        assert log_z.item() == pytest.approx(logsumexp(scores), abs=1e-9)
        assert close(grads(log_z, t), reduce_to(expected, theta))
        assert close(to_numpy(st.marginals(structure, t)), expected)
        nll = st.structured_loss(structure, t, gold, kind="crf")
        assert nll.item() == pytest.approx(logsumexp(scores) - inner(theta, structure.stats(gold, theta)), abs=1e-9)
        assert torch.autograd.gradcheck(lambda *f, s=structure, like=theta: st.log_partition(s, type(like)(*f)),
                                        tuple(t), eps=1e-6, atol=1e-5)
        assert torch.autograd.gradgradcheck(lambda *f, s=structure, like=theta: st.log_partition(s, type(like)(*f)),
                                            tuple(t), eps=1e-6, atol=1e-4)


def to_numpy(p):
    return type(p)(*(f.detach().numpy() for f in p))


@pytest.mark.parametrize("family", [f for f in FAMILIES if family_supports(f, "marginals")])
def test_marginals_backward_is_the_covariance(family):
    """The marginals' vector-Jacobian product equals Cov[μ] g by enumeration, and log Z's Hessian too."""
    rng = np.random.default_rng(4)
    for structure, theta, gold in instances(family, seed=4):
        _outs, stats, scores, _ = enumeration(structure, theta, gold)
        p = np.exp(scores - logsumexp(scores))
        full = np.array([flatten(mu) for mu in stats])           # (n_outputs, d_full)
        mean = p @ full
        cov = (full * p[:, None]).T @ full - np.outer(mean, mean)
        t = tensors(theta)
        marg = st.marginals(structure, t)
        g = [rng.normal(size=tuple(m.shape)) for m in marg]
        got = torch.autograd.grad(tuple(marg), tuple(t), grad_outputs=tuple(torch.tensor(x) for x in g),
                                  allow_unused=True)
        got = type(theta)(*(np.zeros(np.shape(f)) if x is None else x.numpy() for x, f in zip(got, theta)))
        like_full = stats[0]
        want = reduce_to(unflatten(cov @ np.concatenate([x.ravel() for x in g]), like_full), theta)
        assert close(got, want, tol=1e-7)
        # Hessian-vector product of log Z through double backward
        first = torch.autograd.grad(st.log_partition(structure, t), tuple(t), create_graph=True)
        v = [rng.normal(size=tuple(f.shape)) for f in t]
        hv = torch.autograd.grad(sum((a * torch.tensor(b)).sum() for a, b in zip(first, v)), tuple(t),
                                 allow_unused=True)
        b = type(theta)(*v)  # the broadcast map B: θ → full layout, then H = Bᵀ Cov B
        b_full = structure.expand(b)
        want = reduce_to(unflatten(cov @ flatten(b_full), like_full), theta)
        hv = type(theta)(*(np.zeros(np.shape(f)) if x is None else x.numpy() for x, f in zip(hv, theta)))
        assert close(hv, want, tol=1e-7)


@pytest.mark.parametrize("family", FAMILIES)
def test_argmax_and_topk_return_tensors_with_differentiable_scores(family):
    for structure, theta, gold in instances(family, seed=5):
        outs, _stats, scores, _ = enumeration(structure, theta, gold)
        t = tensors(theta, dtype=torch.float32)
        decoded = st.argmax(structure, t)
        assert decoded.score.dtype == torch.float32 and all(s.dtype == torch.float32 for s in decoded.stats)
        assert decoded.score.item() == pytest.approx(scores.max(), abs=1e-4)
        assert close(to_numpy(decoded.stats), structure.stats(decoded.output, theta), tol=0)
        assert close(grads(decoded.score, t), reduce_to(structure.stats(decoded.output, theta), theta), tol=0)
        if supports(structure, "topk"):
            k = min(3, len(outs))
            best = st.topk(structure, tensors(theta), k)
            np.testing.assert_allclose(best.scores.detach().numpy(), np.sort(scores)[::-1][:k], atol=1e-9)
            assert len(best.outputs) == len(best.stats) == k


def test_a_list_of_examples_of_different_sizes_equals_one_at_a_time():
    pairs = [inst for family in ("chain", "tree", "box") for inst in instances(family, seed=6)]
    structures = [s for s, _, _ in pairs]
    thetas = [tensors(th) for _, th, _ in pairs]
    golds = [g for _, _, g in pairs]
    for kind in KINDS:
        batch = st.structured_loss(structures, thetas, golds, kind=kind)
        assert batch.shape == (len(pairs),)
        single = torch.stack([st.structured_loss(s, th, g, kind=kind) for s, th, g in zip(structures, thetas, golds)])
        torch.testing.assert_close(batch, single)
    np.testing.assert_allclose(st.log_partition(structures, thetas).detach().numpy(),
                               [st.log_partition(s, th).item() for s, th in zip(structures, thetas)])
    decoded = st.argmax(structures, thetas)
    assert decoded.score.shape == (len(pairs),) and len(decoded.output) == len(pairs)


def test_the_task_loss_reaches_the_hinge_and_a_nondecomposable_loss_decodes_through_its_hook():
    from structopt.losses import BoxLoss, WeightedHamming

    (structure, theta, gold), *_ = instances("chain", seed=7)[3:]
    S = theta.unary.shape[1]
    cost = np.full((S, S), 2.5) - 2.5 * np.eye(S)
    got = st.structured_loss(structure, tensors(theta), gold, kind="hinge", loss=WeightedHamming(cost))
    _, _, scores, deltas = enumeration(structure, theta, gold, loss=WeightedHamming(cost))
    assert got.item() == pytest.approx(np.max(scores + deltas) - structure.score(theta, gold), abs=1e-9)
    for structure, theta, gold in instances("box", seed=8):
        _outs, _stats, scores, deltas = enumeration(structure, theta, gold, loss=BoxLoss())
        got = st.structured_loss(structure, tensors(theta), gold, kind="hinge", loss=BoxLoss())
        assert got.item() == pytest.approx(np.max(scores + deltas) - structure.score(theta, gold), abs=1e-9)


def test_structured_loss_module_on_batched_tensors_lists_and_factories():
    (structure, theta, _), = [inst for inst in instances("chain", seed=9) if inst[1].unary.shape == (4, 3)
                              and inst[1].pairwise.shape == (3, 3)]
    rng = np.random.default_rng(9)
    unary = torch.tensor(rng.normal(size=(5, 4, 3)), requires_grad=True)
    pairwise = torch.tensor(rng.normal(size=(5, 3, 3)), requires_grad=True)
    y = torch.tensor(rng.integers(0, 3, size=(5, 4)))
    batched = type(theta)(unary, pairwise)
    per_example = [type(theta)(unary[i], pairwise[i]) for i in range(5)]
    for kind in KINDS:
        mean = st.StructuredLoss(structure, kind=kind)(batched, y)
        none = st.StructuredLoss(structure, kind=kind, reduction="none")(per_example, list(y.numpy()))
        total = st.StructuredLoss(lambda i: structure, kind=kind, reduction="sum")(batched, y)
        torch.testing.assert_close(mean, none.mean())
        torch.testing.assert_close(total, none.sum())
    loss = st.StructuredLoss(structure, kind="crf")(batched, y)
    loss.backward()
    assert unary.grad.shape == unary.shape and torch.isfinite(unary.grad).all()


def test_chain_batches_take_the_batched_kernel_and_equal_the_generic_path(monkeypatch):
    """A list of unconstrained chains runs through one batched forward-backward (chosen by capability), with
    the generic path's values and gradients; a masked chain or an override stays on the generic path."""
    import structopt as so
    from structopt.torch import _chain_fast

    rng = np.random.default_rng(21)
    lengths = [1, 4, 2, 5, 3]

    class Mine(so.Chain):  # an override of marginals: its own answer, never the kernel's
        def marginals(self, theta):
            return super().marginals(theta)

    def batch(shared: bool, same: bool, structures):
        common = rng.normal(size=(3, 3))
        thetas = []
        for T in lengths:
            pairwise = common if same else rng.normal(size=(3, 3) if shared else (T - 1, 3, 3))
            thetas.append(tensors(so.ChainPotentials(rng.normal(size=(T, 3)), pairwise)))
        return structures, thetas, [rng.integers(0, 3, size=T) for T in lengths]

    calls = []
    original = _chain_fast._group
    monkeypatch.setattr(_chain_fast, "_group", lambda examples: calls.append(len(examples)) or original(examples))
    plain, masked = so.Chain(3), so.Chain(3, allowed=np.ones((3, 3), dtype=bool) & ~np.eye(3, k=1, dtype=bool))
    for shared, same in ((True, True), (True, False), (False, False)):
        structures, thetas, golds = batch(shared, same, plain)
        for fast, generic in (
                (st.log_partition(structures, thetas), torch.stack([st.log_partition(structures, t) for t in thetas])),
                (st.structured_loss(structures, thetas, golds, kind="crf"),
                 torch.stack([st.structured_loss(structures, t, g, kind="crf") for t, g in zip(thetas, golds)]))):
            torch.testing.assert_close(fast, generic, rtol=1e-12, atol=1e-12)
            got = torch.autograd.grad(fast.sum(), [f for t in thetas for f in t])
            want = torch.autograd.grad(generic.sum(), [f for t in thetas for f in t])
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert calls and all(n == len(lengths) for n in calls)
    calls.clear()
    for structures in ([masked] * len(lengths), [Mine(3)] * len(lengths)):
        _, thetas, golds = batch(True, True, None)
        st.structured_loss(structures, thetas, golds, kind="crf")
    assert calls == []


@pytest.mark.parametrize("kind", [*KINDS, "sparsemap"])
def test_a_dynamic_program_goes_through_the_generic_path(kind):
    """DPStructure (a chain's hypergraph, Chain.as_dp): every loss kind gradchecks and equals the chain's."""
    import structopt as so

    rng = np.random.default_rng(31)
    chain = so.Chain(3)
    theta = so.ChainPotentials(rng.normal(size=(4, 3)), rng.normal(size=(3, 3, 3)))
    dp = chain.as_dp(4)
    dp_theta = type(dp.Potentials(np.zeros(1)))(flatten(theta))
    gold = np.array([0, 2, 1, 1])
    t = tensors(dp_theta)
    value = st.structured_loss(dp, t, dp.validate_output(gold, dp_theta), kind=kind)
    assert value.item() == pytest.approx(st.structured_loss(chain, tensors(theta), gold, kind=kind).item(), abs=1e-8)
    assert torch.autograd.gradcheck(
        lambda f: st.structured_loss(dp, type(dp_theta)(f), dp.validate_output(gold, dp_theta), kind=kind),
        tuple(t), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_chain_lists_decode_through_the_batched_viterbi_with_the_generic_answers(monkeypatch):
    """argmax and the hinge's loss-augmented decoding of a list of chains: one batched Viterbi per structure
    (masks included), the generic path's outputs, values and gradients; a loss with its own decoding hook and a
    chain that overrides argmax stay on the generic path."""
    import structopt as so
    from structopt.losses import Hamming, WeightedHamming
    from structopt.torch import _chain_fast

    rng = np.random.default_rng(22)
    lengths = [1, 4, 2, 5, 3]
    calls = []
    original = _chain_fast._viterbi
    monkeypatch.setattr(_chain_fast, "_viterbi",
                        lambda structure, potentials: calls.append(len(potentials)) or original(structure, potentials))

    class Mine(so.Chain):
        def argmax(self, theta):
            return super().argmax(theta)

    class OwnHook(Hamming):
        def augmented_argmax(self, structure, theta, y_true):
            return super().augmented_argmax(structure, theta, y_true)

    masked = so.Chain(3, allowed=~np.eye(3, k=1, dtype=bool), allowed_start=np.array([True, True, False]))
    cost = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [3.0, 1.0, 0.0]])
    for structure, loss in ((so.Chain(3), None), (masked, WeightedHamming(cost)), (so.Chain(3), Hamming(True))):
        for shared in (True, False):
            common = rng.normal(size=(3, 3))
            thetas = [tensors(so.ChainPotentials(rng.normal(size=(T, 3)),
                                                 common if shared else rng.normal(size=(T - 1, 3, 3))))
                      for T in lengths]
            golds = [structure.argmax(so.ChainPotentials(rng.normal(size=(T, 3)), np.zeros((3, 3)))) for T in lengths]
            calls.clear()
            fast = st.structured_loss(structure, thetas, golds, kind="hinge", loss=loss)
            decoded = st.argmax(structure, thetas)
            assert calls == [len(lengths), len(lengths)]
            generic = torch.stack([st.structured_loss(structure, t, g, kind="hinge", loss=loss)
                                   for t, g in zip(thetas, golds)])
            torch.testing.assert_close(fast, generic, rtol=1e-12, atol=1e-12)
            fields = [f for t in thetas for f in t]
            for a, b in zip(torch.autograd.grad(fast.sum(), fields), torch.autograd.grad(generic.sum(), fields)):
                torch.testing.assert_close(a, b)
            for y, t in zip(decoded.output, thetas):
                np.testing.assert_array_equal(y, structure.argmax(type(t)(*(f.detach().numpy() for f in t))))
    calls.clear()
    st.structured_loss(so.Chain(3), thetas, golds, kind="hinge", loss=OwnHook())
    st.argmax(Mine(3), thetas)
    assert calls == []
