"""OCR's CNN + chain (``structopt.tasks.ocr_net``, issue 35): light checks on a few words.

The batched letters and the random shifts are compared with a per-word / per-image construction in numpy;
the network's per-word chain potentials against its padded-batch CRF (the CRF loss of the potentials equals
the layer's NLL, Chain.argmax equals the layer's Viterbi) for both chain layers; training is checked to repeat
bit for bit with a seed. The error goal (≤ 4%) is measured by ``benchmarks/ocr_net.py``, not here.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchcrf")

from structopt.errors import InvalidInputError  # noqa: E402
from structopt.structures.chain import Chain  # noqa: E402
from structopt.tasks import ocr_net  # noqa: E402
from structopt.tasks.ocr import load_ocr, split  # noqa: E402
from structopt.torch import TorchModel, structured_loss  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data():
    train, test = split(load_ocr(), "bcfw")
    return {"X": train["X"][:24], "y": train["y"][:24], "test_X": test["X"][:16], "test_y": test["y"][:16]}


def _net(crf: str = "structopt", seed: int = 0) -> ocr_net.OCRNet:
    torch.manual_seed(seed)
    return ocr_net.OCRNet(crf=crf).eval()


def test_batch_gathers_each_word_padded(data):
    words = ocr_net.Words(data["X"], data["y"])
    index = np.array([5, 0, 17, 3])
    letters, mask, lengths, tags = words.batch(index)
    T = max(len(data["X"][i]) for i in index)
    assert mask.shape == tags.shape == (4, T) and lengths.tolist() == [len(data["X"][i]) for i in index]
    assert letters.shape == (int(lengths.sum()), 1, 16, 8)
    expected = np.concatenate([data["X"][i] for i in index]).reshape(-1, 1, 16, 8)
    np.testing.assert_array_equal(letters.numpy(), expected)
    for b, i in enumerate(index):
        n = len(data["y"][i])
        assert mask[b].tolist() == [True] * n + [False] * (T - n)
        np.testing.assert_array_equal(tags[b, :n].numpy(), data["y"][i])
        assert not tags[b, n:].any()


def test_shift_letters_moves_each_image_with_a_blank_border():
    images = torch.rand(30, 1, 16, 8)
    assert ocr_net.shift_letters(images, 0, torch.Generator()) is images
    shifted = ocr_net.shift_letters(images, 2, torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape
    g = torch.Generator().manual_seed(1)  # the same draws: offsets in the padded frame, 0..4
    dy = torch.randint(0, 5, (30,), generator=g).numpy()
    dx = torch.randint(0, 5, (30,), generator=g).numpy()
    for k in range(30):
        frame = np.zeros((20, 12), dtype=np.float32)
        frame[2:18, 2:10] = images[k, 0].numpy()
        np.testing.assert_array_equal(shifted[k, 0].numpy(), frame[dy[k]:dy[k] + 16, dx[k]:dx[k] + 8])


@pytest.mark.parametrize("crf", ocr_net.CRF_LAYERS)
def test_word_potentials_match_the_padded_crf(data, crf):
    net = _net(crf)
    words = ocr_net.Words(data["X"][:6], data["y"][:6])
    letters, mask, lengths, tags = words.batch(np.arange(6))
    with torch.no_grad():
        emissions = net.emissions(letters, mask)
        nll = net.nll(emissions, tags, lengths, mask)
        theta = [net(torch.from_numpy(x).float()) for x in data["X"][:6]]
        per_word = structured_loss(Chain(26), theta, list(data["y"][:6]), kind="crf")
    assert theta[0].unary.shape == (len(data["X"][0]), 26) and theta[0].pairwise.shape == (26, 26)
    assert float(nll) == pytest.approx(float(per_word.sum()), rel=1e-5)
    decoded = net.decode(emissions, lengths, mask)
    for th, labels in zip(theta, decoded, strict=True):
        arrays = type(th)(*(f.detach().double().numpy() for f in th))
        np.testing.assert_array_equal(Chain(26).argmax(arrays), labels)


def test_both_layers_start_from_the_same_parameters():
    a, b = _net("structopt", 3), _net("pytorch-crf", 3)
    for p, q in zip(a.chain_scores(), b.chain_scores(), strict=True):
        assert torch.equal(p, q)
    for p, q in zip(a.cnn.parameters(), b.cnn.parameters(), strict=True):
        assert torch.equal(p, q)


def _trained(data, seed: int, loss: str = "crf") -> tuple[ocr_net.OCRNet, dict]:
    net = _net(seed=seed)
    words = ocr_net.Words(data["X"], data["y"])
    info = ocr_net.train(net, words, ocr_net.TrainOptions(epochs=1, batch_size=8, seed=seed, loss=loss))
    return net, info


def test_training_repeats_with_a_seed(data):
    a, info = _trained(data, 0)
    b, _ = _trained(data, 0)
    c, _ = _trained(data, 1)
    assert info["epochs"] == 1 and np.isfinite(info["final_loss"]) and len(info["history"]) == 1
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters(), strict=True))
    assert not a.training  # left in eval mode
    predicted = ocr_net.predict(a, ocr_net.Words(data["test_X"]))
    assert [len(p) for p in predicted] == [len(y) for y in data["test_y"]]
    assert ocr_net.evaluate(a, data["test_X"], data["test_y"]) == ocr_net.evaluate(b, data["test_X"], data["test_y"])


def test_hinge_training_moves_the_weights(data):
    before = [p.detach().clone() for p in _net(seed=0).parameters()]
    net, info = _trained(data, 0, loss="hinge")
    assert info["kind"] == "hinge" and np.isfinite(info["final_loss"]) and info["final_loss"] > 0
    assert not all(torch.equal(p, q) for p, q in zip(before, net.parameters(), strict=True))


def test_torch_model_predicts_what_the_batched_decoder_does(data):
    model = TorchModel(Chain(26), "ocr_cnn", ocr_net.NETWORK_ARGS, seed=0)
    ocr_net.train(model.module, ocr_net.Words(data["X"], data["y"]), ocr_net.TrainOptions(epochs=1, batch_size=8))
    w = model.get_weights()
    assert w.shape == (sum(p.numel() for p in model.module.parameters()),)
    per_word = model.predict_batch(data["test_X"], w)
    batched = ocr_net.predict(model.module, ocr_net.Words(data["test_X"]))
    assert all(np.array_equal(a, b) for a, b in zip(per_word, batched, strict=True))


@pytest.mark.parametrize("args, match", [
    ({"channels": [32]}, "channels"), ({"hidden": 0}, "hidden"), ({"dropout": 1.0}, "dropout"),
    ({"crf": "other"}, "crf"), ({"channels": [8, 2.5]}, "channels"),
])
def test_bad_network_arguments(args, match):
    with pytest.raises(InvalidInputError, match=match):
        ocr_net.ocr_cnn(**args)


def test_bad_inputs_and_options(data):
    with pytest.raises(InvalidInputError, match="word 1"):
        ocr_net.Words([data["X"][0], np.zeros((3, 100))])
    with pytest.raises(InvalidInputError, match="word 0 has"):
        ocr_net.Words(data["X"][:1], [np.zeros(99, dtype=int)])
    with pytest.raises(InvalidInputError, match=r"0\.\.25"):
        ocr_net.Words(data["X"][:1], [np.full(len(data["X"][0]), 26)])
    with pytest.raises(InvalidInputError, match="epochs"):
        ocr_net.TrainOptions(epochs=0)
    with pytest.raises(InvalidInputError, match="loss"):
        ocr_net.TrainOptions(loss="svm")
    with pytest.raises(InvalidInputError, match="labelled"):
        ocr_net.train(_net(), ocr_net.Words(data["X"]))
    with pytest.raises(InvalidInputError, match="hinge"):
        ocr_net.train(_net("pytorch-crf"), ocr_net.Words(data["X"], data["y"]), ocr_net.TrainOptions(loss="hinge"))
    with pytest.raises(InvalidInputError, match="T, 128"):
        _net()(torch.zeros(3, 64))


def test_a_saved_network_predicts_what_it_predicted_before(data, tmp_path):
    from structopt.saved_model import load_model, save_model

    model = TorchModel(Chain(26), "ocr_cnn", ocr_net.NETWORK_ARGS, seed=2)
    ocr_net.train(model.module, ocr_net.Words(data["X"], data["y"]), ocr_net.TrainOptions(epochs=1, batch_size=8))
    w = model.get_weights()
    save_model(tmp_path / "model.npz", model, w, task="ocr")
    saved = load_model(tmp_path / "model.npz")
    assert saved.model.network == "ocr_cnn" and saved.model.network_args == ocr_net.NETWORK_ARGS
    np.testing.assert_array_equal(saved.w, w)
    expected = ocr_net.predict(model.module, ocr_net.Words(data["test_X"]))
    assert all(np.array_equal(a, b) for a, b in zip(saved.predict(data["test_X"]), expected, strict=True))


@pytest.mark.slow
def test_cli_trains_the_cnn_and_predict_prints_the_same_error(tmp_path, capsys):
    import json

    from structopt.cli import main
    from structopt.saved_model import load_model

    out = tmp_path / "run"
    assert main(["train", "ocr", "--net", "cnn", "--n-train", "40", "--epochs", "1", "--out", str(out),
                 "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("ocr --net cnn: 1 epoch") and "test letter error" in line and f"{out}/model.npz" in line
    trained = json.loads((out / "trace.json").read_text())
    assert trained["n_train"] == 40 and trained["epochs"] == 1 and trained["kind"] == "crf"
    assert 0 < trained["test_letter_error"] < 1
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "p.txt"), "--json",
                 str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    assert predicted["n"] == 626 and predicted["test_letter_error"] == trained["test_letter_error"]
    saved = load_model(out / "model.npz")  # the network rebuilt from its declaration, in Python too
    assert saved.model.network == "ocr_cnn" and saved.preprocessing["split"] == "bcfw"
    test = split(load_ocr(), "bcfw")[1]
    words = [w[:4] for w in test["X"][:5]]
    expected = ocr_net.predict(saved.model.module, ocr_net.Words(words))
    assert all(np.array_equal(a, b) for a, b in zip(saved.predict(words), expected, strict=True))
