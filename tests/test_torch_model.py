"""TorchModel: a declared torch network as a non-linear score map (issue 35).

Its Jacobian products are checked against central finite differences and against each other
(``<J dw, mu> = <dw, J^T mu>``) on chain, grid and matching networks in float64; the strong test trains the
built-in ``chain_mlp`` network and :class:`NonlinearChainModel` (the same function, the same weights) with
``prox_linear`` and ``sgd_nonconvex`` and requires the same traces.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from structopt.errors import InvalidInputError  # noqa: E402
from structopt.losses import Hamming  # noqa: E402
from structopt.models.nonlinear import NonlinearChainModel  # noqa: E402
from structopt.nonconvex import NonconvexProblem  # noqa: E402
from structopt.solvers.prox_linear import prox_linear  # noqa: E402
from structopt.solvers.sgd_nonconvex import sgd_nonconvex  # noqa: E402
from structopt.structures.chain import Chain, ChainPotentials  # noqa: E402
from structopt.structures.grid import BinaryGrid, GridPotentials  # noqa: E402
from structopt.structures.matching import BipartiteMatching, MatchingPotentials  # noqa: E402
from structopt.torch import TorchModel, get_network, network_names, register_network  # noqa: E402

torch.set_num_threads(1)


class _EdgeChain(nn.Module):
    """Chain potentials with per-position transitions from adjacent tokens (T-1, S, S)."""

    def __init__(self, n_features: int, n_states: int):
        super().__init__()
        self.unary = nn.Linear(n_features, n_states)
        self.edge = nn.Bilinear(n_features, n_features, n_states * n_states)
        self.n_states = n_states

    def forward(self, x):
        S = self.n_states
        edge = torch.tanh(self.edge(x[:-1], x[1:])).reshape(-1, S, S)
        return ChainPotentials(torch.tanh(self.unary(x)) * 2.0, edge)


class _GridNet(nn.Module):
    """Grid unaries from a small convolution over an image (C, H, W), shared learned transitions."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)
        self.horizontal = nn.Parameter(0.3 * torch.randn(2, 2))
        self.vertical = nn.Parameter(0.3 * torch.randn(2, 2))

    def forward(self, x):
        unary = self.out(torch.tanh(self.conv(x[None])))[0].permute(1, 2, 0)
        return GridPotentials(unary, self.horizontal * 1.0, self.vertical * 1.0)


class _MatchingNet(nn.Module):
    """Edge scores of edge features (L, R, F) and unmatched scores of each side's mean feature."""

    def __init__(self, n_features: int):
        super().__init__()
        self.edge = nn.Sequential(nn.Linear(n_features, 5), nn.ELU(), nn.Linear(5, 1))
        self.alone = nn.Linear(n_features, 1)

    def forward(self, x):
        return MatchingPotentials(self.edge(x)[..., 0], self.alone(x.mean(1))[:, 0], self.alone(x.mean(0))[:, 0])


class _LSTMChain(nn.Module):
    """A BiLSTM over the tokens (no forward-mode AD in torch's CPU LSTM: the double-vjp path)."""

    def __init__(self, n_features: int, n_states: int):
        super().__init__()
        self.lstm = nn.LSTM(n_features, 3, bidirectional=True, batch_first=True)
        self.out = nn.Linear(6, n_states)
        self.pairwise = nn.Parameter(torch.zeros(n_states, n_states))

    def forward(self, x):
        h, _ = self.lstm(x[None])
        return ChainPotentials(self.out(h[0]), self.pairwise)


class _Bad(nn.Module):
    """Chain potentials, broken in one way (``mode``) on inputs whose first entry exceeds 100."""

    def __init__(self, mode: str):
        super().__init__()
        self.lin = nn.Linear(2, 3)
        self.pairwise = nn.Parameter(torch.zeros(3, 3))
        self.mode = mode

    def forward(self, x):
        unary = self.lin(x)
        if float(x[0, 0]) <= 100:
            return ChainPotentials(unary, self.pairwise)
        if self.mode == "shape":
            return ChainPotentials(unary[:, :2], self.pairwise)
        if self.mode == "dtype":
            return ChainPotentials(unary.float(), self.pairwise.float())
        if self.mode == "nan":
            return ChainPotentials(unary * float("nan"), self.pairwise)
        if self.mode == "tensor":
            return unary
        return GridPotentials(unary, self.pairwise, self.pairwise)


register_network("test_edge_chain")(_EdgeChain)
register_network("test_grid")(_GridNet)
register_network("test_matching")(_MatchingNet)
register_network("test_lstm_chain")(_LSTMChain)
register_network("test_bad")(_Bad)


def _inner(a, b) -> float:
    return float(sum(np.sum(np.asarray(x) * np.asarray(y)) for x, y in zip(a, b)))


def _cases(rng):
    """(model, inputs) of every network under test, float64."""
    f64 = {"dtype": torch.float64}
    return [
        (TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3}, **f64),
         [rng.normal(size=(T, 4)) for T in (1, 3, 6)]),
        (TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3, "activation": "elu"},
                    **f64), [rng.normal(size=(T, 4)) for T in (2, 5)]),
        (TorchModel(Chain(3), "test_edge_chain", {"n_features": 2, "n_states": 3}, **f64),
         [rng.normal(size=(T, 2)) for T in (1, 2, 5)]),
        (TorchModel(BinaryGrid(), "test_grid", {"channels": 2}, **f64),
         [rng.normal(size=(2, h, w)) for h, w in ((1, 1), (3, 4))]),
        (TorchModel(BipartiteMatching(allow_unmatched=True), "test_matching", {"n_features": 3}, **f64),
         [rng.normal(size=(L, R, 3)) for L, R in ((1, 2), (3, 3))]),
        (TorchModel(Chain(3), "test_lstm_chain", {"n_features": 2, "n_states": 3}, **f64),
         [rng.normal(size=(T, 2)) for T in (1, 4)]),
    ]


def test_jacobian_products_match_finite_differences_and_each_other():
    rng = np.random.default_rng(0)
    for model, inputs in _cases(rng):
        for seed in range(2):
            w = model.initial_weights(seed)
            w += 0.3 * rng.normal(size=w.size)  # biases and transitions away from zero
            for x in inputs:
                x = model.validate_input(x, 0)
                t = model.tangent(x, w)
                dw = rng.normal(size=w.size)
                jv = model.tangent_jvp(t, dw)
                h = 1e-6
                plus, minus = model.potentials(x, w + h * dw), model.potentials(x, w - h * dw)
                for name, a, b, c in zip(jv._fields, jv, plus, minus):
                    fd = (np.asarray(b) - np.asarray(c)) / (2 * h)
                    assert np.allclose(a, fd, rtol=1e-6, atol=1e-7), (model.network, name)
                # statistics in the structure's full layout: reduce_stats / the vjp sum shared blocks' positions
                full = model.structure.expand(t.theta)
                mu = type(full)(*(rng.normal(size=np.shape(f)) for f in full))
                out = np.zeros(w.size)
                model.tangent_vjp(t, mu, out, scale=0.5)
                lhs = _inner(jv, model.reduce_stats(mu))
                assert np.isclose(0.5 * lhs, dw @ out, rtol=1e-9, atol=1e-9), model.network
                assert np.isclose(lhs, _inner(model.structure.expand(jv), mu), rtol=1e-9, atol=1e-9)
                assert np.isclose(model.tangent_vjp_sqnorm(t, mu), 4 * out @ out)


def test_jvp_without_forward_mode_equals_forward_mode():
    rng = np.random.default_rng(1)
    for model, inputs in _cases(rng)[:5]:
        w = model.initial_weights(3) + 0.1
        t = model.tangent(inputs[-1], w)
        dw = rng.normal(size=w.size)
        forward = model.tangent_jvp(t, dw)
        assert model._forward_ad
        model._forward_ad = False
        reverse = model.tangent_jvp(t, dw)
        for a, b in zip(forward, reverse):
            assert np.allclose(a, b, rtol=1e-12, atol=1e-12)
    # torch's float32 CPU LSTM (mkldnn) has no forward-mode AD: the model switches on torch's refusal
    lstm = TorchModel(Chain(3), "test_lstm_chain", {"n_features": 2, "n_states": 3})
    w = lstm.get_weights()
    t = lstm.tangent(rng.normal(size=(3, 2)), w)
    dw = rng.normal(size=w.size)
    got = lstm.tangent_jvp(t, dw)
    assert not lstm._forward_ad
    h = 1e-2
    fd = (lstm.potentials(t.x, w + h * dw).unary - lstm.potentials(t.x, w - h * dw).unary) / (2 * h)
    assert np.allclose(got.unary, fd, rtol=1e-2, atol=1e-3)


def _chain_pair(F=4, H=5, S=3):
    ref = NonlinearChainModel(F, H, S)
    net = TorchModel(Chain(S), "chain_mlp", {"n_features": F, "n_hidden": H, "n_states": S}, dtype=torch.float64)
    return ref, net


def _chain_data(rng, n=12, F=4, S=3):
    X = [rng.normal(size=(int(rng.integers(1, 7)), F)) for _ in range(n)]
    Y = [rng.integers(0, S, size=len(x)) for x in X]
    return X, Y


def _same_traces(a, b, keys):
    assert len(a.trace) == len(b.trace)
    for ra, rb in zip(a.trace, b.trace):
        assert ra.keys() == rb.keys()
        for key in keys:
            if key not in ra:  # the start's record has no step yet
                continue
            assert ra[key] == pytest.approx(rb[key], rel=1e-8, abs=1e-10), key
    assert np.allclose(a.w, b.w, rtol=1e-7, atol=1e-9)


@pytest.fixture(scope="module")
def chain_problems():
    rng = np.random.default_rng(2)
    ref, net = _chain_pair()
    X, Y = _chain_data(rng)
    w0 = ref.initial_weights(5)
    w0[-9:] = 0.2 * rng.normal(size=9)
    for x in X[:3]:
        a, b = ref.potentials(x, w0), net.potentials(x, w0)
        assert np.allclose(a.unary, b.unary, rtol=1e-13, atol=1e-13) and np.array_equal(a.pairwise, b.pairwise)
    return [NonconvexProblem(m, X, Y, Hamming(), 0.05) for m in (ref, net)], w0


_KEYS = ("passes", "primal", "oracle_calls")


@pytest.mark.parametrize("options", [
    {"inner": "casimir"},
    pytest.param({"inner": "svrg", "inner_passes": 4.0}, marks=pytest.mark.slow),
    pytest.param({"inner": "bcfw"}, marks=pytest.mark.slow)])
def test_prox_linear_trains_the_torch_chain_exactly_as_the_numpy_mlp(chain_problems, options):
    problems, w0 = chain_problems
    runs = [prox_linear(p, max_passes=30, w0=w0, random_state=3, eta=0.5, **options) for p in problems]
    _same_traces(*runs, (*_KEYS, "candidate_primal", "model_value", "step_norm"))
    assert runs[0].trace[-1]["primal"] < runs[0].trace[0]["primal"] and len(runs[0].trace) >= 3


@pytest.mark.parametrize("schedule", ["sqrt", pytest.param("const", marks=pytest.mark.slow)])
def test_sgd_nonconvex_trains_the_torch_chain_exactly_as_the_numpy_mlp(chain_problems, schedule):
    problems, w0 = chain_problems
    runs = [sgd_nonconvex(p, max_passes=4, eval_every=1, w0=w0, random_state=4, schedule=schedule)
            for p in problems]
    _same_traces(*runs, (*_KEYS, "step"))


def test_weights_round_trip_and_initialisation():
    _, net = _chain_pair()
    w = np.arange(net.n_params, dtype=float) / 100
    net.set_weights(w)
    assert np.array_equal(net.get_weights(), w)
    assert [name for name, _ in net.blocks] == [name for name, _ in net.module.named_parameters()]
    assert np.array_equal(net.initial_weights(7), net.initial_weights(7))
    assert not np.array_equal(net.initial_weights(7), net.initial_weights(8))
    # the module trained by a torch optimiser is the model's weights
    x = torch.randn(4, 4, dtype=torch.float64)
    theta = net.module(x)
    loss = theta.unary.square().sum() + theta.pairwise.sum()
    loss.backward()
    with torch.no_grad():
        for p in net.module.parameters():
            p -= 0.1 * p.grad
    assert not np.array_equal(net.get_weights(), w)
    assert np.allclose(net.potentials(x.numpy(), net.get_weights()).unary, net.module(x).unary.detach().numpy())
    # float32 computes the same function to single precision
    f32 = TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3})
    xs = np.random.default_rng(0).normal(size=(5, 4))
    assert np.allclose(f32.potentials(xs, w).unary, net.potentials(xs, w).unary, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, message", [
    ("shape", "do not fit"), ("dtype", "dtype torch.float32"), ("nan", "non-finite|NaN"),
    ("tensor", "not the potentials NamedTuple"), ("grid", "takes ChainPotentials")])
def test_bad_network_output_names_the_example(mode, message):
    model = TorchModel(Chain(3), "test_bad", {"mode": mode}, dtype=torch.float64)
    X = [np.ones((3, 2)), np.ones((2, 2)), np.full((4, 2), 200.0)]
    with pytest.raises(InvalidInputError, match=f"example 2: .*({message})"):
        NonconvexProblem(model, X, [np.zeros(len(x), dtype=int) for x in X], Hamming(), 0.1)
    with pytest.raises(InvalidInputError, match=f"example 2: .*({message})"):
        model.predict_batch(X, model.get_weights())


def test_bad_arguments():
    with pytest.raises(InvalidInputError, match=r"unknown network 'nope'.*chain_mlp"):
        TorchModel(Chain(3), "nope")
    with pytest.raises(InvalidInputError, match="already declared"):
        register_network("chain_mlp")(lambda: nn.Linear(1, 1))
    with pytest.raises(InvalidInputError, match="JSON"):
        TorchModel(Chain(3), "chain_mlp", {"n_features": np.int64(2), "n_hidden": 2, "n_states": 3})
    with pytest.raises(InvalidInputError, match="refused its arguments"):
        TorchModel(Chain(3), "chain_mlp", {"n_feature": 2})
    with pytest.raises(InvalidInputError, match="dtype"):
        TorchModel(Chain(3), "chain_mlp", {"n_features": 2, "n_hidden": 2, "n_states": 3}, dtype=torch.int64)
    with pytest.raises(InvalidInputError, match="Structure"):
        TorchModel("chain", "chain_mlp", {"n_features": 2, "n_hidden": 2, "n_states": 3})
    model = TorchModel(Chain(3), "chain_mlp", {"n_features": 2, "n_hidden": 2, "n_states": 3})
    with pytest.raises(InvalidInputError, match="example 1: input contains NaN"):
        model.predict_batch([np.ones((2, 2)), np.full((2, 2), np.nan)], model.get_weights())
    with pytest.raises(InvalidInputError, match="example 0: network 'chain_mlp' failed"):
        model.predict_batch([np.ones((2, 5))], model.get_weights())
    with pytest.raises(InvalidInputError, match="must be numeric"):
        model.validate_input(np.array([["a", "b"]]), 0)
    assert get_network("chain_mlp") is not None and "test_grid" in network_names()


class _Normalised(nn.Module):
    """chain_mlp after a fixed standardisation held in buffers (saved with the state_dict, not trained)."""

    def __init__(self, n_features: int, n_states: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.lin = nn.Linear(n_features, n_states)
        self.pairwise = nn.Parameter(torch.zeros(n_states, n_states))

    def forward(self, x):
        return ChainPotentials(self.lin(x - self.mean), self.pairwise)


register_network("test_normalised")(_Normalised)


def _rewrite(path, edit):
    from structopt.archive import read_archive, write_archive

    meta, arrays = read_archive(path, "model")
    edit(meta["body"]["$dict"]["model"]["$dict"]["args"]["$dict"])
    write_archive(path, meta, arrays, "model")


def test_saved_network_round_trips_with_its_buffers_and_refuses_what_does_not_match(tmp_path):
    from structopt.saved_model import load_model, save_model

    rng = np.random.default_rng(6)
    model = TorchModel(Chain(3), "test_normalised", {"n_features": 2, "n_states": 3}, dtype=torch.float64)
    with torch.no_grad():
        model.module.mean.copy_(torch.tensor([3.0, -1.0]))
        model.module.steps.fill_(7)
    w = rng.normal(size=model.n_params)
    X = [rng.normal(size=(4, 2)) + 3 for _ in range(3)]
    path = tmp_path / "net.npz"
    save_model(path, model, w, loss=Hamming(), task="demo")
    saved = load_model(path)
    assert saved.model.network == "test_normalised" and saved.model.dtype == torch.float64
    assert torch.equal(saved.model.module.mean, model.module.mean) and int(saved.model.module.steps) == 7
    assert np.array_equal(saved.model.get_weights(), w)  # the module holds the saved weights
    for got, want in zip(saved.predict(X), model.predict_batch(X, w), strict=True):
        assert np.array_equal(got, want)

    def one_line(error) -> str:
        message = str(error.value)
        assert "\n" not in message and str(path) in message
        return message

    _rewrite(path, lambda args: args.update(network="os.system"))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown network 'os.system'" in one_line(error)
    save_model(path, model, w)
    _rewrite(path, lambda args: args["network_args"]["$dict"].update(n_features=5))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "state_dict does not match" in one_line(error) and "mean has shape (2,)" in one_line(error)
    save_model(path, model, w)
    _rewrite(path, lambda args: args["state"]["$dict"].pop("steps"))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "missing steps" in one_line(error)
    save_model(path, model, w)
    _rewrite(path, lambda args: args.update(dtype="float16"))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "dtype" in one_line(error)


def test_cli_trains_saves_and_predicts_a_network_with_the_same_metric(tmp_path, capsys):
    import json

    from structopt.cli import main

    out = tmp_path / "run"
    assert main(["train", "ocr", "--net", "mlp", "--n-train", "30", "--epochs", "1", "--out", str(out),
                 "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("ocr --net mlp: 1 epoch") and f"{out}/model.npz" in line
    trained = json.loads((out / "trace.json").read_text())
    assert trained["n_train"] == 30 and trained["epochs"] == 1 and len(trained["losses"]) == 1
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "p.txt"), "--json",
                 str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    assert predicted["n"] == 626 and predicted["test_letter_error"] == trained["test_letter_error"]
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 626


@pytest.mark.parametrize("argv, message", [
    (["conll", "--net", "mlp"], r"--net: task conll has no networks \(tasks with networks: ocr \(mlp"),
    (["ocr", "--net", "resnet"], "--net 'resnet': task ocr declares the networks mlp"),
    (["ocr", "--epochs", "3"], "--epochs applies to network training"),
    (["ocr", "--net", "mlp", "--solver", "sgd"], "--solver applies to the linear model's solvers"),
    (["ocr", "--net", "mlp", "--passes", "3"], "--passes applies to the linear model's solvers"),
])
def test_cli_network_flags_are_refused_where_they_do_not_apply(tmp_path, capsys, argv, message):
    import re

    from structopt.cli import main

    assert main(["train", *argv, "--out", str(tmp_path / "run"), "--no-progress"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "run").exists()


def test_a_checkpointed_prox_linear_run_on_a_network_resumes_to_the_uninterrupted_result(tmp_path):
    rng = np.random.default_rng(8)
    X, Y = _chain_data(rng, n=8)
    model = TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 3, "n_states": 3}, dtype=torch.float64)
    problem = NonconvexProblem(model, X, Y, Hamming(), 0.05)
    w0 = model.initial_weights(2)
    straight = prox_linear(problem, max_passes=30, w0=w0, random_state=1, inner_passes=5.0)
    path = tmp_path / "pl.npz"
    prox_linear(problem, max_passes=15, w0=w0, random_state=1, inner_passes=5.0, checkpoint=path)
    again = TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 3, "n_states": 3}, dtype=torch.float64)
    resumed = prox_linear(NonconvexProblem(again, X, Y, Hamming(), 0.05), max_passes=30, w0=w0, random_state=1,
                          inner_passes=5.0, resume=path)
    assert np.array_equal(resumed.w, straight.w)
    assert [r["primal"] for r in resumed.trace] == [r["primal"] for r in straight.trace]


class _BatchedChain(nn.Module):
    """chain_mlp's function with a forward_batch over every word at once (one matrix product for all tokens)."""

    def __init__(self, broken: bool = False):
        super().__init__()
        self.hidden = nn.Linear(4, 5)
        self.output = nn.Linear(5, 3)
        self.pairwise = nn.Parameter(0.3 * torch.randn(3, 3))
        self.broken = broken
        self.batches = 0

    def forward(self, x):
        return ChainPotentials(self.output(torch.tanh(self.hidden(x))), self.pairwise)

    def forward_batch(self, xs):
        self.batches += 1
        unary = self.output(torch.tanh(self.hidden(torch.cat(xs)))).split([len(x) for x in xs])
        out = [ChainPotentials(u, self.pairwise) for u in unary]
        return out[:-1] if self.broken else out


register_network("test_batched_chain")(_BatchedChain)


def test_forward_batch_predicts_as_the_per_example_forward():
    rng = np.random.default_rng(9)
    model = TorchModel(Chain(3), "test_batched_chain", {}, dtype=torch.float64)
    X = [rng.normal(size=(int(rng.integers(1, 6)), 4)) for _ in range(7)]
    w = model.get_weights() + rng.normal(size=model.n_params)
    per_example = [model.predict_output(model.potentials(x, w)) for x in X]
    got = model.predict_batch(X, w)
    assert model.module.batches == 1 and all(np.array_equal(a, b) for a, b in zip(got, per_example, strict=True))
    assert model.predict_batch([], w) == []
    with pytest.raises(InvalidInputError, match="example 2: input contains NaN"):
        model.predict_batch([X[0], X[1], np.full((2, 4), np.nan)], w)
    broken = TorchModel(Chain(3), "test_batched_chain", {"broken": True}, dtype=torch.float64)
    with pytest.raises(InvalidInputError, match=r"forward_batch must return a list with one potentials NamedTuple "
                                                r"per input \(7\), got list of 6"):
        broken.predict_batch(X, w)
