"""structopt.torch: bad input is refused before any oracle call, naming the argument; dtypes and devices
come back as they went in; a user's own structure works; ``import structopt`` never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import structopt as so  # noqa: E402
import structopt.torch as st  # noqa: E402
from structopt.errors import InvalidInputError, NotSupportedError  # noqa: E402
from structopt.losses import Loss  # noqa: E402
from structopt.structures.multiclass import MultiClass, MultiClassPotentials  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def chain(T=4, S=3, dtype=torch.float64, seed=0):
    rng = np.random.default_rng(seed)
    return so.Chain(S), so.ChainPotentials(torch.tensor(rng.normal(size=(T, S)), dtype=dtype, requires_grad=True),
                                          torch.tensor(rng.normal(size=(S, S)), dtype=dtype, requires_grad=True))


class CountingChain(so.Chain):
    """A chain that counts oracle calls: a refusal must come before any."""

    calls = 0

    def argmax(self, theta):
        CountingChain.calls += 1
        return super().argmax(theta)

    def marginals(self, theta):
        CountingChain.calls += 1
        return super().marginals(theta)


def test_import_structopt_does_not_import_torch():
    code = "import sys, structopt, structopt.solvers, structopt.structures; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(("make", "match"), [
    (lambda th: (th.unary.long(), th.pairwise), r"theta\.unary must be float32 or float64"),
    (lambda th: (th.unary.detach().numpy(), th.pairwise), r"theta\.unary must be a torch tensor"),
    (lambda th: (th.unary, th.pairwise.float()), "share one dtype"),
    (lambda th: (th.unary.detach().clone().index_put_((torch.tensor([1]), torch.tensor([2])),
                                                      torch.tensor(float("nan"), dtype=torch.float64)),
                 th.pairwise), r"theta\.unary contains a non-finite value \(nan\) at \(1, 2\)"),
    (lambda th: (th.unary, th.pairwise.detach() + float("inf")), r"theta\.pairwise contains a non-finite"),
    (lambda th: (th.unary, th.pairwise[:2]), "does not fit"),
])
def test_bad_potentials_are_refused_before_any_oracle(make, match):
    _, theta = chain()
    structure = CountingChain(3)
    CountingChain.calls = 0
    bad = so.ChainPotentials(*make(theta))
    for call in (lambda: st.argmax(structure, bad), lambda: st.log_partition(structure, bad),
                 lambda: st.structured_loss(structure, bad, np.zeros(4, dtype=int), kind="hinge")):
        with pytest.raises(InvalidInputError, match=match):
            call()
    assert CountingChain.calls == 0


def test_wrong_containers_lengths_outputs_and_options_are_named():
    structure, theta = chain()
    CountingChain.calls = 0
    counting = CountingChain(3)
    y = np.array([0, 1, 2, 0])
    cases = [
        (lambda: st.argmax(structure, (theta.unary, theta.pairwise)),
         r"theta\[0\] must be the structure's potentials NamedTuple"),
        (lambda: st.argmax(structure, MultiClassPotentials(theta.unary)), "theta must be ChainPotentials"),
        (lambda: st.argmax(structure, []), "empty list"),
        (lambda: st.argmax([structure, structure], [theta]), "structure has 2 entries but theta has 1"),
        (lambda: st.argmax([structure], theta), "structure is a list but theta is a single"),
        (lambda: st.argmax("chain", theta), "structure must be a structopt Structure"),
        (lambda: st.structured_loss(counting, [theta, theta], [y]), "y has 1 outputs but theta has 2"),
        (lambda: st.structured_loss(counting, [theta, theta], y), r"y has 4 outputs but theta has 2"),
        (lambda: st.structured_loss(counting, theta, np.array([0, 1, 5, 0])), r"y is not a valid output"),
        (lambda: st.structured_loss(counting, theta, np.array([0, 1])), r"y is not a valid output.*shape"),
        (lambda: st.structured_loss(counting, [theta, theta], [y, y[:2]]), r"y\[1\] is not a valid output"),
        (lambda: st.structured_loss(counting, theta, y, kind="svm"), "unknown loss kind 'svm'"),
        (lambda: st.structured_loss(counting, theta, y, kind="topk", mu=0), "mu to be a finite number > 0"),
        (lambda: st.structured_loss(counting, theta, y, kind="topk", k=0), "integer k >= 1"),
        (lambda: st.structured_loss(counting, theta, y, kind="hinge", mu=1.0), r"unknown options \['mu'\]"),
        (lambda: st.structured_loss(counting, theta, y, kind="crf", loss=so.Hamming()), "takes no task loss"),
        (lambda: st.structured_loss(counting, theta, y, loss="hamming"), "loss must be a structopt.losses.Loss"),
        (lambda: st.topk(counting, theta, 0), "integer k >= 1"),
        (lambda: st.StructuredLoss(counting, reduction="avg"), "reduction must be one of"),
        (lambda: st.StructuredLoss(counting, kind="topk", mu=-1), "mu to be a finite number > 0"),
        (lambda: st.StructuredLoss(counting, kind="crf", loss=so.Hamming()), "takes no task loss"),
    ]
    for call, match in cases:
        with pytest.raises(InvalidInputError, match=match):
            call()
    assert CountingChain.calls == 0


def test_missing_oracles_and_unfit_task_losses_are_refused_before_any_work():
    rng = np.random.default_rng(1)
    matching, theta = so.BipartiteMatching.example(rng, integer=False, n_left=3, n_right=3)
    t = type(theta)(*(torch.tensor(np.array(f)) for f in theta))
    y = matching.argmax(theta)
    with pytest.raises(NotSupportedError, match="needs the marginals oracle, which BipartiteMatching does not have"):
        st.structured_loss(matching, t, y, kind="crf")
    with pytest.raises(NotSupportedError, match="MatchingHamming needs a matching"):
        st.structured_loss(chain()[0], chain()[1], np.zeros(4, dtype=int), loss=so.MatchingHamming())
    # a list: the refusal names the example and comes before example 0 is decoded
    CountingChain.calls = 0
    with pytest.raises(NotSupportedError, match=r"Hamming is a per-node loss"):
        st.structured_loss([CountingChain(3), matching], [chain()[1], t], [np.zeros(4, dtype=int), y],
                           loss=so.Hamming())
    assert CountingChain.calls == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_device_come_back_as_they_went_in(dtype):
    structure, theta = chain(dtype=dtype)
    y = np.array([0, 1, 2, 0])
    for value in (st.structured_loss(structure, theta, y, kind=kind) for kind in ("hinge", "crf", "topk", "entropy")):
        assert value.dtype == dtype and value.device == theta.unary.device and value.shape == ()
        value.backward()
        assert theta.unary.grad.dtype == dtype
    assert all(m.dtype == dtype for m in st.marginals(structure, theta))
    assert st.argmax(structure, theta).stats.unary.dtype == dtype


def test_integer_targets_and_tensor_outputs_are_accepted():
    structure, theta = chain()
    a = st.structured_loss(structure, theta, torch.tensor([0, 1, 2, 0]))
    b = st.structured_loss(structure, theta, [0, 1, 2, 0])
    assert a.item() == b.item()


class TopTwo(MultiClass):
    """A user's structure: a multiclass subclass with a different name, no marginals, and its own loss."""

    name = "top-two"

    @so.structures.base.unsupported
    def marginals(self, theta):
        raise NotSupportedError("top-two has no marginals")


class Zero(Loss):
    def __call__(self, y_true, y_pred):
        return 0.0 if int(y_true) == int(y_pred) else 2.0

    def augmented_argmax(self, structure, theta, y_true):
        scores = np.asarray(theta.scores, dtype=float) + 2.0
        scores[int(y_true)] -= 2.0
        return int(np.argmax(scores))


def test_a_users_subclass_and_loss_go_through_the_generic_path():
    structure = TopTwo(3)
    theta = MultiClassPotentials(torch.tensor([0.3, 1.0, -0.5], dtype=torch.float64, requires_grad=True))
    value = st.structured_loss(structure, theta, 0, kind="hinge", loss=Zero())
    assert value.item() == pytest.approx(1.0 + 2.0 - 0.3)
    value.backward()
    np.testing.assert_allclose(theta.scores.grad.numpy(), [-1.0, 1.0, 0.0])
    with pytest.raises(NotSupportedError, match="TopTwo does not have"):
        st.log_partition(structure, theta)


def test_structured_layer_returns_the_batch_in_the_form_it_came():
    rng = np.random.default_rng(5)
    structure = so.BipartiteMatching()
    edge = torch.tensor(rng.normal(size=(4, 3, 3)), requires_grad=True)
    empty = torch.zeros(4, 0, dtype=torch.float64)
    batched = so.MatchingPotentials(edge, empty, empty)
    for kind, options in (("sparsemap", {}), ("perturbed", {"n_samples": 4, "seed": 1})):
        layer = st.StructuredLayer(structure, kind=kind, **options)
        out = layer(batched)
        assert out.edge.shape == (4, 3, 3)
        singles = [getattr(st, kind)(structure, so.MatchingPotentials(edge[i], empty[i], empty[i]), **options)
                   for i in range(4)]
        torch.testing.assert_close(out.edge, torch.stack([p.edge for p in singles]))
        assert torch.allclose(out.edge.sum(-1), torch.ones(4, 3, dtype=torch.float64))  # rows of a matching
        (out.edge * torch.tensor(rng.normal(size=(4, 3, 3)))).sum().backward()
        assert edge.grad is not None and torch.isfinite(edge.grad).all()
    chain_structure, theta = chain()
    listed = st.StructuredLayer(chain_structure, kind="marginals")([theta, theta])
    assert isinstance(listed, list) and len(listed) == 2
    with pytest.raises(InvalidInputError, match="unknown options"):
        st.StructuredLayer(structure, kind="marginals", tol=1e-3)
    with pytest.raises(InvalidInputError, match="kind must be one of"):
        st.StructuredLayer(structure, kind="argmax")
