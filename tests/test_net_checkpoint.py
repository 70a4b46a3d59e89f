"""Network training never loses its state (structopt.net_checkpoint, issue 35): a run interrupted after an epoch,
mid-epoch (a KeyboardInterrupt between batches, a real SIGINT during a batch) or by Ctrl-C in a real
``structopt train`` process resumes to the very weights (bit for bit, one torch thread) of the uninterrupted run;
tampered, truncated, resealed-inconsistent, linear and other-run checkpoints are refused on one line naming the
file; ``--loss`` is declared per network and refused otherwise. Tiny OCR runs (24-40 words, 2-3 epochs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from structopt.cli import main  # noqa: E402
from structopt.errors import InvalidInputError  # noqa: E402
from structopt.net_checkpoint import SOLVER, NetCheckpoint  # noqa: E402
from structopt.progress import Progress  # noqa: E402
from structopt.saved_model import load_model  # noqa: E402
from structopt.solvers._checkpoints import load_checkpoint, save_checkpoint  # noqa: E402
from structopt.tasks import ocr_net  # noqa: E402
from structopt.tasks.ocr import load_ocr, split  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FINGERPRINT = {"task": "ocr", "loss": "crf", "seed": "0"}
OPTIONS = ocr_net.TrainOptions(epochs=3, batch_size=8)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def words():
    train, _ = split(load_ocr(), "bcfw")
    return ocr_net.Words(train["X"][:28], train["y"][:28])  # 4 batches of 8, the last of 4


def _net() -> ocr_net.OCRNet:
    torch.manual_seed(0)
    return ocr_net.OCRNet()


def _weights(net) -> dict[str, np.ndarray]:
    return {name: value.detach().numpy().copy() for name, value in net.state_dict().items()}


@pytest.fixture(scope="module")
def uninterrupted(words):
    net = _net()
    info = ocr_net.train(net, words, OPTIONS)
    return _weights(net), [r["loss"] for r in info["history"]]


def _assert_same(net, uninterrupted, info) -> None:
    weights, losses = uninterrupted
    for name, value in _weights(net).items():
        assert np.array_equal(value, weights[name]), name  # bit for bit
    assert [r["loss"] for r in info["history"]] == losses


class _StopAt(Progress):
    """A progress whose bar raises KeyboardInterrupt (a simulated Ctrl-C) before handing out batch ``k`` of the
    ``epoch``-th epoch (1-based; counted over calls), or sends this process a real SIGINT then (``real``)."""

    def __init__(self, epoch: int, k: int, real: bool = False):
        super().__init__(lines=False, bars=False)
        object.__setattr__(self, "at", (epoch, k, real))
        object.__setattr__(self, "calls", [0])

    def items(self, iterable, total, what, unit="it"):
        epoch, k, real = self.at
        self.calls[0] += 1
        for i, item in enumerate(iterable):
            if self.calls[0] == epoch and i == k:
                if not real:
                    raise KeyboardInterrupt
                signal.raise_signal(signal.SIGINT)  # recorded; honoured at the end of this batch
            yield item


def test_resumed_after_epoch_one_ends_with_the_uninterrupted_weights(words, uninterrupted, tmp_path):
    path = tmp_path / "ck.npz"

    def stop(epoch, record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, on_epoch=stop, checkpoint=NetCheckpoint(path, FINGERPRINT))
    state = load_checkpoint(path, SOLVER)
    assert state["state"]["epoch"] == 1 and state["state"]["plan"] is None and len(state["trace"]) == 1
    net = _net()
    info = ocr_net.train(net, words, OPTIONS, checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))
    assert info["resumed"] and info["epochs"] == 3
    _assert_same(net, uninterrupted, info)


def test_resumed_mid_epoch_ends_with_the_uninterrupted_weights(words, uninterrupted, tmp_path):
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, progress=_StopAt(2, 2), checkpoint=NetCheckpoint(path, FINGERPRINT))
    state = load_checkpoint(path, SOLVER)["state"]
    assert state["epoch"] == 1 and state["batch"] == 2 and state["acc"]["letters"] > 0  # two batches of epoch 2
    # resumed twice: first stopped again one batch later (the plan and sums survive a second interruption)
    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, progress=_StopAt(1, 1),
                      checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))
    assert load_checkpoint(path, SOLVER)["state"]["batch"] == 3
    net = _net()
    info = ocr_net.train(net, words, OPTIONS, checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))
    _assert_same(net, uninterrupted, info)


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not handled by Python's default handler in this test run")
def test_a_real_sigint_during_a_batch_stops_after_it_and_resumes(words, uninterrupted, tmp_path):
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, progress=_StopAt(3, 1, real=True),
                      checkpoint=NetCheckpoint(path, FINGERPRINT))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    state = load_checkpoint(path, SOLVER)["state"]
    assert (state["epoch"], state["batch"]) == (2, 2)  # the batch under way when SIGINT came was finished
    net = _net()
    info = ocr_net.train(net, words, OPTIONS, checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))
    _assert_same(net, uninterrupted, info)


def test_train_network_interrupted_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    """The shared loop of ``--net mlp`` (structopt.cli_net.train_network), CRF loss, 3 epochs of 4 batches."""
    from structopt.cli_net import train_network
    from structopt.structures.chain import Chain
    from structopt.torch import TorchModel

    rng = np.random.default_rng(3)
    X = [rng.normal(size=(int(rng.integers(2, 6)), 4)) for _ in range(14)]
    Y = [rng.integers(0, 3, len(x)) for x in X]

    def model():
        return TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3}, seed=2)

    reference = model()
    expected = train_network(reference, X, Y, epochs=3, kind="crf", batch_size=4, seed=1)
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        train_network(model(), X, Y, epochs=3, kind="crf", batch_size=4, seed=1, progress=_StopAt(2, 3),
                      checkpoint=NetCheckpoint(path))
    assert load_checkpoint(path, SOLVER)["state"]["batch"] == 3
    resumed = model()
    info = train_network(resumed, X, Y, epochs=3, kind="crf", batch_size=4, seed=1,
                         checkpoint=NetCheckpoint(path, resume=True))
    assert info["resumed"] and info["losses"] == expected["losses"] and info["steps"] == expected["steps"] == 12
    assert np.array_equal(resumed.get_weights(), reference.get_weights())


def test_a_finished_run_resumes_to_its_weights_without_training(words, uninterrupted, tmp_path):
    path = tmp_path / "ck.npz"
    ocr_net.train(_net(), words, OPTIONS, checkpoint=NetCheckpoint(path, FINGERPRINT))
    net = _net()
    info = ocr_net.train(net, words, OPTIONS, checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))
    assert info["resumed"] and sum(r["seconds"] for r in info["history"]) == info["seconds"]
    _assert_same(net, uninterrupted, info)


@pytest.fixture(scope="module")
def saved(words, tmp_path_factory):
    """A checkpoint written mid-epoch (epoch 2, batch 1) and its bytes."""
    path = tmp_path_factory.mktemp("ck") / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, progress=_StopAt(2, 1), checkpoint=NetCheckpoint(path, FINGERPRINT))
    return path.read_bytes()


def _resume(path, fingerprint=FINGERPRINT, options=OPTIONS, words=None):
    train, _ = split(load_ocr(), "bcfw")
    words = words or ocr_net.Words(train["X"][:28], train["y"][:28])
    return ocr_net.train(_net(), words, options, checkpoint=NetCheckpoint(path, fingerprint, resume=True))


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_tampered_and_truncated_checkpoints_are_refused_naming_the_file(saved, tmp_path):
    path = tmp_path / "ck.npz"
    flipped = bytearray(saved)
    flipped[len(saved) // 2] ^= 0x01
    for data, match in ((bytes(flipped), "fails its checksum"), (saved[: len(saved) // 3], "truncated|checksum"),
                        (saved + b"tail", "not a structopt archive|checksum"), (b"\x80\x04junk", "pickle")):
        path.write_bytes(data)
        with pytest.raises(InvalidInputError, match=match) as error:
            _resume(path)
        assert str(path) in _one_line(error)


def test_a_checkpoint_of_another_run_is_refused_naming_what_differs(saved, tmp_path):
    path = tmp_path / "ck.npz"
    path.write_bytes(saved)
    with pytest.raises(InvalidInputError, match=r"belongs to another run: its loss crf \(this run: hinge\)") as error:
        _resume(path, {**FINGERPRINT, "loss": "hinge"})
    assert str(path) in _one_line(error)
    with pytest.raises(InvalidInputError, match=r"its seed 0 \(this run: 1\), task ocr \(this run: ner\) differ"):
        _resume(path, {**FINGERPRINT, "seed": "1", "task": "ner"})
    with pytest.raises(InvalidInputError, match="its network differs"):  # another architecture, same fingerprint
        ocr_net.train(ocr_net.OCRNet(hidden=16), ocr_net.Words([np.zeros((2, 128))], [np.zeros(2, int)]), OPTIONS,
                      checkpoint=NetCheckpoint(path, FINGERPRINT, resume=True))


def test_resealed_checkpoints_with_inconsistent_contents_are_refused(saved, tmp_path):
    """A file rewritten with a valid seal (by hand, or a bug) is still checked against the live run."""
    path = tmp_path / "ck.npz"
    path.write_bytes(saved)
    good = load_checkpoint(path, SOLVER)

    def variant(change) -> str:
        data = {key: good[key] for key in ("solver", "fingerprint", "trace", "w")}
        state = {**good["state"], "module": dict(good["state"]["module"]), "acc": dict(good["state"]["acc"]),
                 "plan": None if good["state"]["plan"] is None else dict(good["state"]["plan"])}
        change(data, state)
        save_checkpoint(path, {**data, "state": state})
        with pytest.raises(InvalidInputError) as error:
            _resume(path)
        return _one_line(error)

    def shape(data, state):
        state["module"]["crf.transitions"] = np.zeros((3, 3), np.float32)

    def moment(data, state):
        opt = state["optimiser"]
        first = dict(opt["state"][0])
        first["exp_avg"] = np.zeros(5, np.float32)
        state["optimiser"] = {**opt, "state": {**opt["state"], 0: first}}

    def plan(data, state):
        state["plan"] = {**state["plan"], "batches": state["plan"]["batches"] + 1000}

    def weights(data, state):
        data["w"] = data["w"] + 1.0

    def epoch(data, state):
        state["epoch"] = 7

    def schedule(data, state):
        state["scheduler"] = {**state["scheduler"], "optimizer": "anything"}

    for change, match in ((shape, "weight crf.transitions"), (moment, "optimiser state 0 exp_avg"),
                          (plan, "batch plan"), (weights, "weights and its state_dict disagree"),
                          (epoch, "epoch 7"), (schedule, "learning-rate schedule")):
        message = variant(change)
        assert str(path) in message and match in message, (change.__name__, message)


def test_a_linear_checkpoint_is_refused(tmp_path):
    path = tmp_path / "linear.npz"
    save_checkpoint(path, {"solver": "bcfw", "fingerprint": {}, "state": {}, "trace": [], "w": np.zeros(3)})
    with pytest.raises(InvalidInputError, match="written by bcfw, not network"):
        _resume(path)


# --------------------------------------------------------------------------- the command line
ARGS = ["train", "ocr", "--net", "cnn", "--n-train", "24", "--no-progress"]


def test_cli_resume_continues_and_the_loss_is_recorded(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*ARGS, "--epochs", "2", "--loss", "hinge", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "(hinge loss)" in text.out and (out / "checkpoint.npz").is_file()
    model = load_model(out / "model.npz")
    assert model.info["loss"] == "hinge"
    fingerprint = load_checkpoint(out / "checkpoint.npz", SOLVER)["fingerprint"]
    assert (fingerprint["loss"], fingerprint["net"], fingerprint["epochs"]) == ("hinge", "cnn", "2")
    # the finished run resumes to the same weights; another loss is refused, naming the checkpoint
    assert main([*ARGS, "--epochs", "2", "--loss", "hinge", "--out", str(out), "--resume"]) == 0
    assert "resuming from" in capsys.readouterr().err
    np.testing.assert_array_equal(load_model(out / "model.npz").w, model.w)
    assert main([*ARGS, "--epochs", "2", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run: its loss hinge (this run: crf)" in err and str(out / "checkpoint.npz") in err
    # a new run over a finished run's checkpoint replaces it, saying so; --checkpoint FILE puts it elsewhere
    assert main([*ARGS, "--epochs", "1", "--out", str(out)]) == 0
    assert "replacing" in capsys.readouterr().err
    elsewhere = tmp_path / "elsewhere" / "ck.npz"
    assert main([*ARGS, "--epochs", "1", "--out", str(tmp_path / "other"), "--checkpoint", str(elsewhere)]) == 0
    assert elsewhere.is_file() and not (tmp_path / "other" / "checkpoint.npz").exists()


@pytest.mark.parametrize("argv, match", [
    ([*ARGS, "--loss", "sparsemap"], "--loss sparsemap: ocr --net cnn trains with crf or hinge only"),
    (["train", "horses", "--net", "cnn", "--loss", "crf"], "--loss crf: horses --net cnn trains with hinge only"),
    (["train", "ocr", "--loss", "crf"], "--loss applies to network training: give --net NAME"),
    (["train", "ocr", "--resume"], "--resume applies to network training"),
    ([*ARGS, "--resume"], "--resume: no checkpoint at"),
])
def test_cli_refuses_bad_loss_and_resume_before_any_work(tmp_path, capsys, argv, match):
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_cli_refuses_to_overwrite_an_unfinished_run(words, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.npz").write_bytes(b"not a checkpoint")
    assert main([*ARGS, "--out", str(out)]) == 2
    assert "delete it, or choose another --out" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        ocr_net.train(_net(), words, OPTIONS, progress=_StopAt(1, 1), checkpoint=NetCheckpoint(out / "checkpoint.npz"))
    assert main([*ARGS, "--out", str(out)]) == 2
    assert "holds an unfinished run (0 of 3 epochs done): --resume continues it" in capsys.readouterr().err


@pytest.mark.slow  # two torch process starts and three short runs: about 15 s
def test_ctrl_c_in_a_real_train_process_exits_130_promptly_and_resumes(tmp_path, capsys):
    out, reference = tmp_path / "run", tmp_path / "reference"
    argv = [*ARGS, "--epochs", "40"]
    process = subprocess.Popen([sys.executable, "-m", "structopt", *argv, "--out", str(out)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for line in process.stderr:  # wait for the first epoch's line: training is under way
            if line.startswith("epoch 1/40"):
                break
        sent = time.perf_counter()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        elapsed = time.perf_counter() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130 and elapsed < 2.0, (process.returncode, elapsed, err)
    assert f"checkpoint kept at {out / 'checkpoint.npz'}" in err
    state = load_checkpoint(out / "checkpoint.npz", SOLVER)["state"]
    assert 1 <= state["epoch"] < 40
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert main([*argv, "--out", str(reference)]) == 0
    np.testing.assert_array_equal(load_model(out / "model.npz").w, load_model(reference / "model.npz").w)


def test_an_interrupt_while_an_epoch_is_planned_keeps_the_last_whole_state(tmp_path):
    """A KeyboardInterrupt after the plan's draws moved the random stream, before the plan was kept: writing the
    state then would make the resumed run draw another plan; the last whole state (epoch 1's end) is kept."""
    from structopt.net_checkpoint import TrainingRun

    X, y = torch.linspace(-1, 1, 12)[:, None], torch.linspace(0, 2, 12)[:, None]

    def train(path, resume=False, stop_planning_epoch=None):
        torch.manual_seed(0)
        module = torch.nn.Linear(1, 1)
        optimiser = torch.optim.Adam(module.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        run = TrainingRun(module, optimiser, 3, 12, rngs=(rng,), checkpoint=NetCheckpoint(path, resume=resume))
        run.restore()

        def plan(epoch):
            order = rng.permutation(12)
            if epoch == stop_planning_epoch:
                raise KeyboardInterrupt
            return {"batches": [order[:5], order[5:]]}

        def step(batch, plan, sums):
            optimiser.zero_grad()
            ((module(X[batch]) - y[batch]) ** 2).mean().backward()
            optimiser.step()

        run.run(plan, step, lambda epoch, sums: {})
        return module.weight.detach().clone(), module.bias.detach().clone()

    expected = train(tmp_path / "a.npz")
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / "b.npz", stop_planning_epoch=2)
    assert load_checkpoint(tmp_path / "b.npz", SOLVER)["state"]["epoch"] == 1
    resumed = train(tmp_path / "b.npz", resume=True)
    assert all(torch.equal(a, b) for a, b in zip(resumed, expected))
