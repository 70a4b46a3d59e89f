"""structopt.torch.ChainCRF: gradients (gradcheck), equality with pytorch-crf and torch-struct, brute force,
Viterbi / top-K against Chain, and bad input. Skipped without torch (and the peers' tests without them)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from structopt.errors import InvalidInputError  # noqa: E402
from structopt.structures import Chain, ChainPotentials  # noqa: E402
from structopt.torch import ChainCRF  # noqa: E402

F64 = torch.float64
PARAMS = ("transitions", "start", "end")


def make(S, seed, boundary=True, **masks):
    torch.manual_seed(seed)
    crf = ChainCRF(S, boundary=boundary, dtype=F64, **masks)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn_like(p))
    return crf


def batch(B, T, S, seed, scale=1.0, min_length=1):
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(B, T, S, dtype=F64, generator=g) * scale
    tags = torch.randint(0, S, (B, T), generator=g)
    lengths = torch.randint(min_length, T + 1, (B,), generator=g)
    lengths[0] = T
    return emissions, tags, lengths


def prefix_mask(lengths, T):
    return torch.arange(T)[None, :] < lengths[:, None]


class _Call(torch.nn.Module):
    """A method of a ChainCRF as a module's forward, so that torch.func.functional_call swaps its parameters."""

    def __init__(self, crf, method):
        super().__init__()
        self.crf, self.method = crf, method

    def forward(self, *args):
        return getattr(self.crf, self.method)(*args)


def functional(crf, method, *args):
    """f(emissions, *parameters) calling ``crf.<method>(emissions, *args)`` with those tensors as parameters."""
    present = [n for n in PARAMS if getattr(crf, n) is not None]
    call = _Call(crf, method)

    def f(emissions, *params):
        swapped = {f"crf.{n}": p for n, p in zip(present, params, strict=True)}
        return torch.func.functional_call(call, swapped, (emissions, *args))

    return f, tuple(getattr(crf, n).detach().clone().requires_grad_(True) for n in present)


@pytest.mark.parametrize("boundary", [True, False])
def test_gradcheck_nll_and_log_partition(boundary):
    S, T = 3, 5
    crf = make(S, 0, boundary=boundary)
    emissions, tags, lengths = batch(4, T, S, 1)
    emissions.requires_grad_(True)
    nll, params = functional(crf, "forward", tags, lengths)
    assert torch.autograd.gradcheck(nll, (emissions, *params))
    log_z, params = functional(crf, "log_partition", lengths)
    assert torch.autograd.gradcheck(log_z, (emissions, *params))


def test_gradcheck_with_transition_constraints():
    S, T = 3, 4
    allowed = np.array([[True, True, False], [True, True, True], [False, True, True]])
    crf = make(S, 2, allowed=allowed, allowed_start=np.array([True, True, False]))
    emissions, _, lengths = batch(3, T, S, 3)
    tags = torch.tensor([[0, 1, 2, 2], [1, 1, 0, 0], [1, 2, 1, 0]])
    emissions.requires_grad_(True)
    nll, params = functional(crf, "forward", tags, lengths)
    assert torch.autograd.gradcheck(nll, (emissions, *params))
    nll(emissions, *params).sum().backward()
    assert not params[0].grad[~torch.from_numpy(allowed)].any()  # forbidden transitions get no gradient


def _pytorch_crf(crf):
    torchcrf = pytest.importorskip("torchcrf")
    ref = torchcrf.CRF(crf.num_tags, batch_first=True).double()
    with torch.no_grad():
        ref.transitions.copy_(crf.transitions)
        ref.start_transitions.copy_(crf.start)
        ref.end_transitions.copy_(crf.end)
    return ref


def test_equal_to_pytorch_crf():
    S, T = 5, 7
    crf = make(S, 4)
    ref = _pytorch_crf(crf)
    emissions, tags, lengths = batch(6, T, S, 5)
    mask = prefix_mask(lengths, T)
    emissions.requires_grad_(True)
    for reduction in ("none", "sum", "mean", "token_mean"):
        ours = crf(emissions, tags, mask=mask, reduction=reduction)
        theirs = -ref(emissions, tags, mask=mask, reduction=reduction)
        torch.testing.assert_close(ours, theirs, rtol=1e-8, atol=1e-10)
    # log Z and its gradients (the marginals) through pytorch-crf's own normaliser
    ref_log_z = ref._compute_normalizer(emissions.transpose(0, 1), mask.t())
    log_z = crf.log_partition(emissions, lengths)
    torch.testing.assert_close(log_z, ref_log_z, rtol=1e-8, atol=1e-10)
    weights = torch.rand(6, dtype=F64)
    ours = torch.autograd.grad((log_z * weights).sum(), (emissions, crf.transitions, crf.start, crf.end))
    theirs = torch.autograd.grad((ref_log_z * weights).sum(),
                                 (emissions, ref.transitions, ref.start_transitions, ref.end_transitions),
                                 retain_graph=True)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    node, pair = crf.marginals(emissions, mask=mask)
    for b in range(6):  # marginals: the gradient of each example's log Z
        marg_em, marg_tr = torch.autograd.grad(ref_log_z[b], (emissions, ref.transitions), retain_graph=True)
        torch.testing.assert_close(node[b], marg_em[b], rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(pair[b], marg_tr, rtol=1e-8, atol=1e-10)
    # the NLL's gradients too
    ours = torch.autograd.grad(crf(emissions, tags, lengths, reduction="sum"), (emissions, crf.transitions))
    theirs = torch.autograd.grad(-ref(emissions, tags, mask=mask), (emissions, ref.transitions))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_viterbi_equal_to_pytorch_crf():
    S, T = 6, 9
    crf = make(S, 6)
    ref = _pytorch_crf(crf)
    emissions, _, lengths = batch(8, T, S, 7)
    mask = prefix_mask(lengths, T)
    tags, scores = crf.decode(emissions, mask=mask)
    expect = ref.decode(emissions, mask=mask)
    for b, seq in enumerate(expect):
        assert tags[b, :lengths[b]].tolist() == seq
        assert (tags[b, lengths[b]:] == -1).all()
    gold = ref._compute_score(emissions.transpose(0, 1), torch.where(tags < 0, 0, tags).t(), mask.t())
    torch.testing.assert_close(scores, gold, rtol=1e-10, atol=1e-10)


@pytest.mark.filterwarnings("ignore:.*arg_constraints")  # torch-struct's distributions predate torch's check
def test_equal_to_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    S, T, B = 4, 6, 5
    crf = make(S, 8)
    emissions, tags, lengths = batch(B, T, S, 9, min_length=2)
    # torch-struct's potentials are edges (B, N-1, C_next, C_prev) holding the transitions, the next
    # position's emission, and on the first / last edge of each example the first emission + start / the end
    edge = crf.transitions.t()[None, None] + emissions[:, 1:, :, None]
    first = (emissions[:, 0] + crf.start)[:, None, None, :]
    last = torch.zeros_like(edge)
    last[torch.arange(B), lengths - 2] = crf.end[:, None].expand(S, S)
    edge = torch.cat([edge[:, :1] + first, edge[:, 1:]], dim=1) + last
    dist = torch_struct.LinearChainCRF(edge, lengths=lengths)
    torch.testing.assert_close(crf.log_partition(emissions, lengths), dist.partition, rtol=1e-8, atol=1e-10)
    edge_marg = dist.marginals  # (B, N-1, next, prev)
    node, pair = crf.marginals(emissions, lengths)
    torch.testing.assert_close(pair, edge_marg.sum(1).transpose(1, 2), rtol=1e-8, atol=1e-10)
    expect = torch.cat([edge_marg[:, :1].sum(2), edge_marg.sum(3)], dim=1)  # position 0: prev of edge 0
    expect = expect * prefix_mask(lengths, T)[..., None]
    torch.testing.assert_close(node, expect, rtol=1e-8, atol=1e-10)
    parts = torch_struct.LinearChainCRF.struct.to_parts(tags, S, lengths=lengths).to(F64)
    torch.testing.assert_close(crf(emissions, tags, lengths), -dist.log_prob(parts), rtol=1e-8, atol=1e-10)


def _sequences(crf, emissions_b, L):
    """All tag sequences of one example with their scores (brute force, masks as -inf)."""
    S = crf.num_tags
    seqs = np.array(list(itertools.product(range(S), repeat=L)))
    tr = crf.transitions.detach().numpy()
    st = crf.start.detach().numpy() if crf.start is not None else np.zeros(S)
    en = crf.end.detach().numpy() if crf.end is not None else np.zeros(S)
    if crf.allowed is not None:
        tr = np.where(crf.allowed, tr, -np.inf)
    if crf.allowed_start is not None:
        st = np.where(crf.allowed_start, st, -np.inf)
    if crf.allowed_end is not None:
        en = np.where(crf.allowed_end, en, -np.inf)
    em = emissions_b[:L].detach().numpy()
    scores = st[seqs[:, 0]] + en[seqs[:, -1]] + em[np.arange(L), seqs].sum(1)
    for t in range(L - 1):
        scores = scores + tr[seqs[:, t], seqs[:, t + 1]]
    return seqs, scores


@pytest.mark.parametrize("masked", [False, True])
def test_brute_force_on_tiny_chains(masked):
    S, T, B = 3, 4, 5
    masks = {}
    if masked:
        masks = {"allowed": np.array([[True, False, True], [True, True, False], [True, True, True]]),
                 "allowed_end": np.array([True, True, False])}
    crf = make(S, 10, **masks)
    emissions, _, lengths = batch(B, T, S, 11)
    log_z = crf.log_partition(emissions, lengths)
    node, pair = crf.marginals(emissions, lengths)
    best, best_scores = crf.decode(emissions, lengths)
    top, top_scores = crf.topk(emissions, 4, lengths)
    for b in range(B):
        L = int(lengths[b])
        seqs, scores = _sequences(crf, emissions[b], L)
        z = np.logaddexp.reduce(scores)
        assert log_z[b].item() == pytest.approx(z, rel=1e-12)
        p = np.exp(scores - z)
        expect = np.zeros((T, S))
        trans = np.zeros((S, S))
        for q, y in zip(p, seqs, strict=True):
            expect[np.arange(L), y] += q
            np.add.at(trans, (y[:-1], y[1:]), q)
        np.testing.assert_allclose(node[b].numpy(), expect, atol=1e-12)
        np.testing.assert_allclose(pair[b].numpy(), trans, atol=1e-12)
        assert best_scores[b].item() == pytest.approx(scores.max(), rel=1e-12)
        assert best[b, :L].tolist() == seqs[np.argmax(scores)].tolist()
        order = np.sort(scores[np.isfinite(scores)])[::-1][:4]
        np.testing.assert_allclose(top_scores[b, :len(order)].numpy(), order, rtol=1e-12)
        tags = top[b, 0:1].clone()
        tags[tags < 0] = 0
        nll = crf(emissions[b:b + 1], tags, lengths[b:b + 1])
        assert nll.item() == pytest.approx(z - scores.max(), rel=1e-10, abs=1e-12)


def test_topk_equals_chain_topk():
    S, T = 4, 6
    crf = make(S, 12, boundary=False)
    emissions, _, lengths = batch(5, T, S, 13)
    emissions = torch.round(emissions * 2)  # ties, broken as Chain.topk breaks them
    with torch.no_grad():
        crf.transitions.copy_(torch.round(crf.transitions * 2))
    top, scores = crf.topk(emissions, 5, lengths)
    for b in range(5):
        L = int(lengths[b])
        ys, vals = Chain(S).topk(ChainPotentials(emissions[b, :L].numpy(), crf.transitions.detach().numpy()), 5)
        np.testing.assert_array_equal(top[b, :len(vals), :L].numpy(), ys)
        np.testing.assert_array_equal(scores[b, :len(vals)].numpy(), vals)


def test_float32_in_float32_out():
    S, T = 4, 5
    crf = make(S, 14)
    emissions, tags, lengths = batch(3, T, S, 15)
    nll64 = crf(emissions, tags, lengths)
    crf32 = make(S, 14).float()
    em32 = emissions.float().requires_grad_(True)
    nll32 = crf32(em32, tags, lengths)
    assert nll32.dtype == torch.float32
    torch.testing.assert_close(nll32.double(), nll64, rtol=1e-5, atol=1e-5)
    nll32.sum().backward()
    assert em32.grad.dtype == torch.float32 and crf32.transitions.grad.dtype == torch.float32
    assert crf32.decode(em32, lengths)[1].dtype == torch.float32


def test_training_lowers_the_nll():
    S, T = 4, 6
    crf = ChainCRF(S, dtype=F64)
    emissions, tags, lengths = batch(8, T, S, 16)
    opt = torch.optim.SGD(crf.parameters(), lr=0.1)
    first = crf(emissions, tags, lengths, reduction="mean")
    for _ in range(5):
        opt.zero_grad()
        loss = crf(emissions, tags, lengths, reduction="mean")
        loss.backward()
        opt.step()
    assert loss.item() < first.item()


def test_infeasible_length_is_refused():
    crf = make(2, 17, allowed=np.array([[False, True], [False, False]]))  # only 0 -> 1: length <= 2
    emissions = torch.zeros(2, 3, 2, dtype=F64)
    assert torch.isfinite(crf.log_partition(emissions, torch.tensor([2, 1]))).all()
    with pytest.raises(InvalidInputError, match="forbid every tag sequence of length 3"):
        crf.log_partition(emissions, torch.tensor([2, 3]))
    with pytest.raises(InvalidInputError, match="forbid every tag sequence"):
        crf.decode(emissions)


def _bad_cases():
    S, T, B = 3, 4, 2
    crf = make(S, 18, allowed=np.array([[True, False, True], [True, True, True], [True, True, True]]))
    em = torch.zeros(B, T, S, dtype=F64)
    tags = torch.zeros(B, T, dtype=torch.long)
    lengths = torch.tensor([4, 2])
    nan_em = em.clone()
    nan_em[1, 1, 0] = float("nan")
    inf_em = em.clone()
    inf_em[0, 0, 1] = float("inf")
    return [
        (lambda: crf(em[0], tags, lengths), "emissions must have shape"),
        (lambda: crf(em.long(), tags, lengths), "emissions must be float32 or float64"),
        (lambda: crf(em.numpy(), tags, lengths), "emissions must be a torch.Tensor"),
        (lambda: crf(nan_em, tags, lengths), r"emissions\[1, 1, 0\] is nan"),
        (lambda: crf(inf_em, tags, lengths), r"emissions\[0, 0, 1\] is inf"),
        (lambda: crf(em, tags, torch.tensor([4, 5])), r"lengths\[1\] = 5 is outside 1..4"),
        (lambda: crf(em, tags, torch.tensor([0, 2])), r"lengths\[0\] = 0"),
        (lambda: crf(em, tags, torch.tensor([4.0, 2.0])), "lengths must be an integer tensor"),
        (lambda: crf(em, tags, torch.tensor([4, 2, 1])), "lengths must have shape"),
        (lambda: crf(em, tags, lengths, mask=prefix_mask(torch.tensor([4, 3]), T)), r"lengths\[1\] = 2 does not match"),
        (lambda: crf(em, tags, mask=torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0]])), r"mask\[0\] must be on"),
        (lambda: crf(em, tags, mask=torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0]])), r"mask\[0\] must be on"),
        (lambda: crf(em, tags, mask=torch.ones(B, T + 1, dtype=torch.bool)), "mask must have shape"),
        (lambda: crf(em, torch.full((B, T), 3), lengths), r"tags\[0, 0\] = 3 is outside 0..2"),
        (lambda: crf(em, tags.float(), lengths), "tags must be an integer tensor"),
        (lambda: crf(em, tags[:, :2], lengths), "tags must have shape"),
        (lambda: crf(em, torch.tensor([[0, 1, 1, 1], [0, 0, 0, 0]]), lengths),
         r"tags\[0\] uses the forbidden transition 0 -> 1"),
        (lambda: crf(em, tags, lengths, reduction="avg"), "reduction must be one of"),
        (lambda: crf.topk(em, 0, lengths), "k must be"),
        (lambda: ChainCRF(0), "num_tags"),
        (lambda: ChainCRF(3, allowed=np.zeros((3, 3), dtype=bool)), "allowed forbids every transition"),
        (lambda: ChainCRF(3, allowed=np.ones((2, 2), dtype=bool)), "allowed must be a boolean array of shape"),
    ]


@pytest.mark.parametrize("case", range(22))
def test_bad_input_is_named(case):
    call, message = _bad_cases()[case]
    with pytest.raises(InvalidInputError, match=message):
        call()


def test_nonfinite_parameters_are_named():
    crf = make(3, 19)
    with torch.no_grad():
        crf.transitions[1, 2] = float("nan")
    with pytest.raises(InvalidInputError, match=r"transitions\[1, 2\] is nan"):
        crf(torch.zeros(1, 2, 3, dtype=F64), torch.zeros(1, 2, dtype=torch.long))


def test_padding_is_ignored():
    S, T = 3, 5
    crf = make(S, 20)
    emissions, tags, lengths = batch(4, T, S, 21)
    other = emissions.clone()
    other_tags = tags.clone()
    pad = ~prefix_mask(lengths, T)
    other[pad] = float("nan")  # never read
    other_tags[pad] = 7  # out of range past the length: ignored
    torch.testing.assert_close(crf(other, other_tags, lengths), crf(emissions, tags, lengths), rtol=0, atol=0)
    torch.testing.assert_close(crf.decode(other, lengths)[1], crf.decode(emissions, lengths)[1], rtol=0, atol=0)
    other.requires_grad_(True)
    crf(other, other_tags, lengths).sum().backward()
    assert not other.grad[pad].any()


def test_import_structopt_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, structopt, structopt.structures._chain_batch; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_noncontiguous_emissions():
    S, T = 3, 5
    crf = make(S, 22)
    emissions, tags, lengths = batch(4, T, S, 23)
    view = emissions.transpose(0, 1).contiguous().transpose(0, 1)  # same values, strided
    assert not view.is_contiguous()
    torch.testing.assert_close(crf(view, tags, lengths), crf(emissions, tags, lengths), rtol=0, atol=0)
