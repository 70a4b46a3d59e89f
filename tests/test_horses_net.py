"""Horses with a CNN giving the binary grid's potentials (structopt.tasks.horses_net): shapes, batch independence,
determinism, the hinge through min-cut against enumeration and finite differences, training, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from structopt.errors import DataNotFoundError, InvalidInputError  # noqa: E402
from structopt.losses import Hamming  # noqa: E402
from structopt.structures.grid import BinaryGrid, GridPotentials  # noqa: E402
from structopt.tasks import horses_net as hn  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    # tiny convolutions: a second thread only waits for the first, and on a loaded machine much longer
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _disc_images(n: int, seed: int, sizes=((12, 16), (16, 12), (14, 14))) -> tuple[list, list]:
    """Synthetic (2H, 2W) inputs: a bright noisy disc on a dark background, and its (H, W) grid mask."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for i in range(n):
        H, W = sizes[i % len(sizes)]
        rr, cc = np.mgrid[: 2 * H, : 2 * W] / 2.0
        cy, cx = H / 2 + rng.uniform(-2, 2), W / 2 + rng.uniform(-2, 2)
        inside = (rr - cy) ** 2 + (cc - cx) ** 2 <= (min(H, W) / 3) ** 2
        X.append((np.where(inside, 0.7, 0.3) + rng.normal(0, 0.1, inside.shape)).astype(np.float32))
        Y.append((inside.reshape(H, 2, W, 2).mean(axis=(1, 3)) > 0.5).astype(np.int64))
    return X, Y


def test_potentials_shapes_and_supermodular_potts_edges():
    net = hn.build(size=16, width=8)
    X, _ = _disc_images(3, seed=0)
    for x, theta in zip(X, net.forward_batch(X)):
        H, W = x.shape[0] // 2, x.shape[1] // 2
        assert isinstance(theta, GridPotentials)
        assert theta.unary.shape == (H, W, 2) and theta.horizontal.shape == (H, W - 1, 2, 2)
        assert theta.vertical.shape == (H - 1, W, 2, 2)
        assert torch.all(theta.unary[..., 0] == 0)
        for table in theta[1:]:
            assert torch.all(table[..., 0, 1] == 0) and torch.all(table[..., 1, 0] == 0)
            assert torch.all(table[..., 0, 0] == table[..., 1, 1]) and torch.all(table[..., 0, 0] > 0)
        BinaryGrid().check_potentials(hn.to_numpy(theta))  # float64, finite, supermodular


def test_contrast_edges_match_the_grid_tasks_formula():
    rng = np.random.default_rng(1)
    image = rng.random((5, 7))
    hor, ver = hn.contrast_edges(torch.as_tensor(image))
    dh, dv = np.diff(image, axis=1) ** 2, np.diff(image, axis=0) ** 2
    beta = 1.0 / (2.0 * np.concatenate([dh.ravel(), dv.ravel()]).mean())
    np.testing.assert_allclose(hor.numpy(), np.exp(-beta * dh), rtol=1e-12)
    np.testing.assert_allclose(ver.numpy(), np.exp(-beta * dv), rtol=1e-12)
    flat_h, flat_v = hn.contrast_edges(torch.ones(3, 4, dtype=torch.float64))
    assert torch.all(flat_h == 1) and torch.all(flat_v == 1)


def test_one_image_potentials_do_not_depend_on_the_batch(monkeypatch):
    net = hn.build(size=16, width=8, seed=3)
    X, _ = _disc_images(3, seed=2)
    monkeypatch.setattr(hn, "BATCH_CHUNK", 2)  # two network calls: 2 images, then 1
    batched = net.forward_batch(X)
    assert len(batched) == 3
    for x, theta in zip(X, batched):
        alone = net(x)
        for a, b in zip(alone, theta):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_training_is_deterministic_and_changes_the_weights():
    X, Y = _disc_images(3, seed=4)
    nets = []
    for _ in range(2):
        net = hn.build(size=16, width=8, seed=5)
        before = [p.detach().clone() for p in net.parameters()]
        log = hn.train(net, X, Y, objective="hinge", epochs=1, batch_size=2, seed=6)
        assert log.epochs == 1 and len(log.losses) == 1 and log.oracle_seconds > 0
        assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
        nets.append(net)
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(a, b)


def _hinge_by_enumeration(theta: GridPotentials, y: np.ndarray) -> float:
    s = BinaryGrid()
    best = max(s.score(theta, z) + np.count_nonzero(z != y)
               for z in (np.array(bits).reshape(y.shape) for bits in itertools.product((0, 1), repeat=y.size)))
    return best - s.score(theta, y)


def test_hinge_through_min_cut_value_and_gradient():
    """The loss :func:`train` minimises on a 3 x 4 grid: its value against enumeration of the 4,096 labellings,
    and its gradient in the network's parameters against central differences (float64; the hinge is linear in
    θ near a θ whose loss-augmented MAP is unique, so the difference is exact up to rounding)."""
    from structopt.torch import structured_loss

    torch.manual_seed(0)
    net = hn.HorseCNN(canvas=4, width=8).double()
    x = np.random.default_rng(7).random((6, 8))
    y = np.array([[0, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 0]])

    def loss() -> torch.Tensor:
        return structured_loss(BinaryGrid(), net(x), y, kind="hinge", loss=Hamming())

    value = loss()
    assert float(value) == pytest.approx(_hinge_by_enumeration(hn.to_numpy(net(x)), y), abs=1e-9)
    value.backward()
    params = list(net.parameters())
    grads = [p.grad.clone() for p in params]
    rng = np.random.default_rng(8)
    directions = [torch.as_tensor(rng.normal(size=p.shape)) for p in params]
    analytic = sum(float((g * d).sum()) for g, d in zip(grads, directions))
    eps = 1e-6
    with torch.no_grad():
        for p, d in zip(params, directions):
            p += eps * d
        up = float(loss())
        for p, d in zip(params, directions):
            p -= 2 * eps * d
        down = float(loss())
    assert analytic == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-7)
    assert any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("objective", ["hinge", "pixel"])
def test_training_fits_synthetic_discs(objective):
    X, Y = _disc_images(6, seed=9)
    net = hn.build(size=16, width=8, seed=10)
    before = hn.evaluate(net, X, Y)["foreground_iou"]
    log = hn.train(net, X, Y, objective=objective, epochs=12, batch_size=3, learning_rate=1e-2, seed=11)
    assert log.losses[-1] < 0.5 * log.losses[0]
    after = hn.evaluate(net, X, Y)
    assert after["foreground_iou"] > 0.8 > before
    weight, scores = hn.choose_pairwise(net, X, Y, grid=(0.0, 1.0))
    assert weight in (0.0, 1.0)
    assert scores == hn.evaluate(net, X, Y, weights=(weight, 0.0))


def test_pixelwise_decoding_is_the_sign_of_the_score_and_grid_decoding_the_min_cut():
    net = hn.build(size=16, width=8, seed=12)
    X, _ = _disc_images(2, seed=13)
    with torch.no_grad():
        scores = net.scores_batch([torch.as_tensor(x) for x in X])
        thetas = net.forward_batch(X)
    for s, theta, pixel, grid in zip(scores, thetas, hn.predict(net, X, grid=False), hn.predict(net, X)):
        np.testing.assert_array_equal(pixel, (s.numpy() > 0).astype(np.int64))
        np.testing.assert_array_equal(grid, BinaryGrid().argmax(hn.to_numpy(theta)))


def test_bad_input_is_refused_naming_it():
    net = hn.build(size=16, width=8)
    X, Y = _disc_images(2, seed=14)
    with pytest.raises(InvalidInputError, match="image 0 must be a 2-d grey image"):
        net.forward_batch([np.zeros((4, 4, 3))])
    with pytest.raises(InvalidInputError, match="image 1 has non-finite"):
        net.forward_batch([X[0], np.full((8, 8), np.nan)])
    with pytest.raises(InvalidInputError, match="larger than the 32x32 canvas"):
        net(np.zeros((40, 20)))
    with pytest.raises(InvalidInputError, match="objective must be one of"):
        hn.train(net, X, Y, objective="crf")
    with pytest.raises(InvalidInputError, match="image 1 has grid"):
        hn.train(net, X, [Y[0], Y[0][:-1]])
    with pytest.raises(InvalidInputError, match="epochs must be a positive integer"):
        hn.train(net, X, Y, epochs=0)
    with pytest.raises(InvalidInputError, match="two non-negative numbers"):
        hn.predict(net, X, weights=(-1.0, 0.0))
    with pytest.raises(InvalidInputError, match="canvas must be a positive multiple of 4"):
        hn.HorseCNN(canvas=10)


def test_real_horses_load_on_the_grid_tasks_grid_and_split():
    from structopt.tasks.horses import load_horses

    try:
        data = hn.load(max_images=6, size=24)
    except DataNotFoundError as exc:
        pytest.skip(f"horses data not available: {exc}")
    grid_task = load_horses(max_images=6, size=24)
    assert data["test"]["names"] == grid_task["test"]["names"] == ["horse003.jpg", "horse006.jpg"]
    for part in ("train", "test"):
        for x, y, gold in zip(data[part]["X"], data[part]["y"], grid_task[part]["y"]):
            assert x.dtype == np.float32 and x.shape == (2 * y.shape[0], 2 * y.shape[1])
            np.testing.assert_array_equal(y, gold)  # the grid task's gold masks
    net = hn.build(size=24, width=8)
    log = hn.train(net, data["train"]["X"][:3], data["train"]["y"][:3], epochs=1, batch_size=3)
    assert np.isfinite(log.losses[0])
    assert set(hn.evaluate(net, data["test"]["X"], data["test"]["y"])) == {
        "pixel_accuracy", "foreground_iou", "mean_image_iou"}


def test_declared_network_in_a_torch_model_predicts_as_the_module():
    """``TorchModel(BinaryGrid(), "horses_cnn", ...)`` builds the same seeded network as :func:`build`, predicts the
    min-cut masks :func:`predict` gives, and its Jacobian products (torch.func through the canvas padding and
    GroupNorm) are adjoint: ``<J dw, v> = <dw, J^T v>``."""
    from structopt.torch import TorchModel

    X, _ = _disc_images(2, seed=15)
    model = TorchModel(BinaryGrid(), hn.NETWORK, hn.network_args(16, 8), seed=16)
    net = hn.build(size=16, width=8, seed=16)
    for a, b in zip(model.module.parameters(), net.parameters()):
        assert torch.equal(a, b)
    w = model.get_weights()
    for mine, theirs in zip(model.predict_batch(X, w), hn.predict(net, X)):
        np.testing.assert_array_equal(mine, theirs)
    rng = np.random.default_rng(17)
    t = model.tangent(X[0], w)
    dw = rng.normal(size=w.size)
    v = GridPotentials(*(rng.normal(size=np.shape(f)) for f in t.theta))
    jvp = model.tangent_jvp(t, dw)
    back = np.zeros(w.size)
    model.tangent_vjp(t, v, back)
    lhs = sum(float(np.sum(a * b)) for a, b in zip(jvp, v))
    assert lhs == pytest.approx(float(dw @ back), rel=1e-4)


def test_saved_network_model_predicts_the_same_masks(tmp_path):
    """Train one epoch, save the TorchModel (declared network, JSON args, state_dict arrays), load it back:
    the same weights and the same min-cut masks."""
    import structopt as so
    from structopt.torch import TorchModel

    X, Y = _disc_images(3, seed=18)
    model = TorchModel(BinaryGrid(), hn.NETWORK, hn.network_args(16, 8), seed=19)
    hn.train(model.module, X, Y, epochs=1, batch_size=3, seed=20)
    w = model.get_weights()
    path = tmp_path / "model.npz"
    so.save_model(path, model, w, task="horses", preprocessing={"net": "cnn", "size": 16})
    saved = so.load_model(path)
    np.testing.assert_array_equal(saved.w, w)
    assert saved.preprocessing["net"] == "cnn" and saved.model.network == hn.NETWORK
    for a, b in zip(saved.predict(X), hn.predict(model.module, X)):
        np.testing.assert_array_equal(a, b)


def test_predict_refuses_a_network_model_without_its_grid_size(tmp_path, capsys):
    import structopt as so
    from structopt.cli import main
    from structopt.torch import TorchModel

    model = TorchModel(BinaryGrid(), hn.NETWORK, hn.network_args(16, 8))
    path = tmp_path / "model.npz"
    so.save_model(path, model, model.get_weights(), task="horses", preprocessing={"net": "cnn", "size": "48"})
    assert main(["predict", str(path), str(tmp_path), "--out", str(tmp_path / "masks")]) == 2
    assert "lacks an integer 'size' >= 2 (got '48')" in capsys.readouterr().err


def test_cli_train_net_then_predict_gives_the_same_scores(tmp_path, capsys):
    """``structopt train horses --net cnn`` on a synthetic horses folder, then ``structopt predict`` on the saved
    model (the test split of the data train read): the same IoU and accuracy as train printed."""
    import json

    from _synthetic_horses import write_synthetic_horses

    from structopt.cli import main

    root = tmp_path / "horses"
    write_synthetic_horses(root, 9, seed=21, height=36, width=48, foreground=0.75, background=0.3, noise=0.08)
    out = tmp_path / "run"
    assert main(["train", "horses", "--net", "cnn", "--data", str(root), "--epochs", "2", "--out", str(out),
                 "--no-progress"]) == 0
    trained = json.loads((out / "trace.json").read_text())
    metrics = tmp_path / "metrics.json"
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "masks"), "--json", str(metrics)]) == 0
    predicted = json.loads(metrics.read_text())
    assert predicted["n"] == 3  # images 2, 5, 8 of 9 are the test split
    for name in ("test_foreground_iou", "test_pixel_accuracy", "test_mean_image_iou"):
        assert predicted[name] == pytest.approx(trained[name], abs=1e-12), name
    assert sorted(p.name for p in (tmp_path / "masks").iterdir()) == ["horse002.png", "horse005.png", "horse008.png"]
    capsys.readouterr()


def test_training_interrupted_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    """The flips and the order of an epoch, Adam's moments and the cosine schedule survive a simulated Ctrl-C
    inside epoch 2: the resumed run ends with the uninterrupted run's weights, bit for bit."""
    from structopt.net_checkpoint import NetCheckpoint
    from structopt.progress import Progress

    class StopAt(Progress):
        def items(self, iterable, total, what, unit="it"):
            for i, item in enumerate(iterable):
                if what.startswith("epoch 2/") and i == 1:
                    raise KeyboardInterrupt
                yield item

    X, Y = _disc_images(5, seed=4)
    reference = hn.build(size=16, width=8, seed=5)
    expected = hn.train(reference, X, Y, epochs=2, batch_size=2, seed=6)
    path = tmp_path / "ck.npz"
    with pytest.raises(KeyboardInterrupt):
        hn.train(hn.build(size=16, width=8, seed=5), X, Y, epochs=2, batch_size=2, seed=6,
                 progress=StopAt(lines=False, bars=False), checkpoint=NetCheckpoint(path))
    net = hn.build(size=16, width=8, seed=5)
    log = hn.train(net, X, Y, epochs=2, batch_size=2, seed=6, checkpoint=NetCheckpoint(path, resume=True))
    assert log.resumed and log.losses == expected.losses and log.epochs == 2
    for (name, a), b in zip(reference.state_dict().items(), net.state_dict().values()):
        assert torch.equal(a, b), name
