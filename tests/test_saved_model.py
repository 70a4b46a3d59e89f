"""Saved models (structopt.saved_model): every registered model and loss round-trips, and a file that
was tampered with, truncated, of another kind or naming an unknown type is refused on one line."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from structopt.archive import write_archive
from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.losses import BoxLoss, Hamming, MatchingHamming, WeightedHamming
from structopt.models import BoxModel, ChainModel, FeatureModel, GridInput, GridModel, MatchingModel, MultiClassModel
from structopt.models.graph import GraphModel
from structopt.saved_model import FORMAT, LOSS_TYPES, MODEL_TYPES, describe_model, load_model, save_model
from structopt.structures import Chain, MultiClass


def _chain_case(rng):
    allowed = np.ones((3, 3), dtype=bool)
    allowed[0, 2] = False
    model = ChainModel(4, 3, start_end=True, bias=True, allowed=allowed)
    return model, [rng.normal(size=(5, 4)) for _ in range(3)], Hamming(normalize=True)


def _grid_case(rng):
    model = GridModel(3, 2)
    X = [GridInput(rng.normal(size=(4, 5, 3)), rng.random((4, 4, 2)), rng.random((3, 5, 2))) for _ in range(2)]
    return model, X, WeightedHamming(np.array([[0.0, 1.0], [2.0, 0.0]]))


def _box_case(rng):
    return BoxModel(3), [rng.normal(size=(5, 6, 3)) for _ in range(2)], BoxLoss()


def _matching_case(rng):
    return MatchingModel(2, allow_unmatched=True), [rng.normal(size=(3, 4, 2)) for _ in range(2)], \
        MatchingHamming(1.0, 2.0)


def _multiclass_case(rng):
    return MultiClassModel(3, 4), [rng.normal(size=3) for _ in range(4)], Hamming()


def _graph_case(rng):
    # a 4-cycle with a chord; exact=True so that the oracle's answers are labels (tests/test_saved_graph_model.py
    # covers the relaxed oracle and every option)
    edges = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]])
    X = [(rng.normal(size=(4, 3)), edges, rng.random((5, 1))) for _ in range(2)]
    return GraphModel(3, 1, 3, symmetric=True, exact=True), X, Hamming()


def _dependency_case(rng):
    import scipy.sparse as sp

    from structopt.models import DependencyModel

    X = [sp.random((n + 1) ** 2, 5, density=0.5, format="csr", random_state=n) for n in (2, 4)]
    return DependencyModel(5, projective=True, n_labels=2), X, Hamming()


CASES = {"ChainModel": _chain_case, "GridModel": _grid_case, "BoxModel": _box_case,
         "MatchingModel": _matching_case, "MultiClassModel": _multiclass_case, "GraphModel": _graph_case,
         "DependencyModel": _dependency_case}


def test_every_registered_type_has_a_case():
    assert set(CASES) == set(MODEL_TYPES)
    losses = {type(CASES[name](np.random.default_rng(0))[2]).__name__ for name in CASES}
    assert losses == set(LOSS_TYPES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_rebuilds_the_model_and_predicts_the_same(tmp_path, name):
    rng = np.random.default_rng(1)
    model, X, loss = CASES[name](rng)
    w = np.abs(rng.normal(size=model.n_params))  # non-negative: a grid's pairwise weights must be
    preprocessing = {"tags": ["O", "B-NP"], "mean": np.arange(3.0), "nested": {"k": (1, 2)}}
    size = save_model(tmp_path / "m.npz", model, w, loss=loss, task="demo", preprocessing=preprocessing,
                      info={"lam": 0.1})
    assert size == (tmp_path / "m.npz").stat().st_size
    saved = load_model(tmp_path / "m.npz")
    assert type(saved.model) is type(model) and describe_model(saved.model).keys() == describe_model(model).keys()
    assert repr(saved.model) == repr(model) and repr(saved.loss) == repr(loss)
    np.testing.assert_array_equal(saved.w, w)
    assert saved.task == "demo" and saved.info == {"lam": 0.1} and saved.preprocessing["tags"] == ["O", "B-NP"]
    np.testing.assert_array_equal(saved.preprocessing["mean"], np.arange(3.0))
    assert saved.preprocessing["nested"] == {"k": (1, 2)}
    import structopt

    assert saved.version == structopt.__version__
    structure = model.structure
    expected = [structure.argmax(model.potentials(model.validate_input(x, i), w)) for i, x in enumerate(X)]
    for got, want in zip(saved.predict(X), expected, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if name == "ChainModel":  # the transition mask came back as an array, not a list
        np.testing.assert_array_equal(saved.model.structure.allowed, model.structure.allowed)


def test_the_file_is_plain_npz_and_json_without_pickle(tmp_path):
    model, _, _ = _chain_case(np.random.default_rng(0))
    save_model(tmp_path / "m.npz", model, np.zeros(model.n_params))
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:  # numpy opens it as a plain .npz
        assert data["w"].shape == (model.n_params,)
    with zipfile.ZipFile(tmp_path / "m.npz") as zf:
        meta = json.loads(zf.read("meta.json"))
    assert meta["format"] == FORMAT and meta["body"]["$dict"]["model"]["$dict"]["type"] == "ChainModel"


def _one_line(error: pytest.ExceptionInfo, path) -> str:
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    return message


@pytest.fixture
def saved_file(tmp_path):
    model, _, loss = _chain_case(np.random.default_rng(0))
    path = tmp_path / "model.npz"
    save_model(path, model, np.ones(model.n_params), loss=loss, task="ocr")
    return path


def test_a_flipped_byte_truncation_or_tail_is_refused(saved_file):
    data = saved_file.read_bytes()
    for bad in (data[:100] + bytes([data[100] ^ 1]) + data[101:], data[: len(data) // 2], data + b"tail"):
        saved_file.write_bytes(bad)
        with pytest.raises(InvalidInputError) as error:
            load_model(saved_file)
        message = _one_line(error, saved_file)
        assert "checksum" in message or "not a structopt archive" in message


def test_foreign_files_are_refused(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.zeros(3))
    text = tmp_path / "notes.npz"
    text.write_text("not a model\n")
    pickled = tmp_path / "old.pkl"
    pickled.write_bytes(b"\x80\x04\x95 pickle")
    for path in (plain, text, pickled):
        with pytest.raises(InvalidInputError) as error:
            load_model(path)
        _one_line(error, path)
    checkpoint = tmp_path / "checkpoint.npz"
    write_archive(checkpoint, {"format": "structopt checkpoint", "version": 4}, {"w": np.zeros(2)})
    with pytest.raises(InvalidInputError) as error:
        load_model(checkpoint)
    assert "not a saved model (a structopt checkpoint)" in _one_line(error, checkpoint)
    with pytest.raises(DataNotFoundError):
        load_model(tmp_path / "missing.npz")


def _sealed(path, body, w, version=1):
    write_archive(path, {"format": FORMAT, "format_version": version, "structopt_version": "0", "body": body},
                  {"w": w}, "model")


def test_unknown_types_and_misfit_weights_are_refused_without_importing_anything(tmp_path):
    path = tmp_path / "evil.npz"
    body = {"$dict": {"model": {"$dict": {"type": "os.system", "args": {"$dict": {"command": "echo hi"}}}},
                      "loss": None, "task": None, "preprocessing": {"$dict": {}}, "info": {"$dict": {}}}}
    _sealed(path, body, np.zeros(3))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown model type 'os.system'" in _one_line(error, path)
    body["$dict"]["model"] = {"$dict": {"type": "MultiClassModel",
                                        "args": {"$dict": {"n_features": 2, "n_classes": 3}}}}
    _sealed(path, body, np.zeros(5))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "do not fit the model" in _one_line(error, path)
    body["$dict"]["loss"] = {"$dict": {"type": "subprocess.run", "args": {"$dict": {}}}}
    _sealed(path, body, np.zeros(6))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown loss type" in _one_line(error, path)
    body["$dict"]["loss"] = None
    _sealed(path, body, np.zeros(6), version=99)
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "format version 99" in _one_line(error, path)
    body["$dict"]["model"] = {"$dict": {"type": "MultiClassModel", "args": {"$dict": {"n_features": -1}}}}
    _sealed(path, body, np.zeros(6))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    _one_line(error, path)


def test_models_that_cannot_be_described_are_refused_when_saving(tmp_path):
    class MyChain(Chain):
        pass

    with pytest.raises(InvalidInputError, match="subclasses are not rebuilt"):
        save_model(tmp_path / "m.npz", ChainModel(2, 2, structure=MyChain(2)), np.zeros(8))
    other = FeatureModel(MultiClass(3), 2)
    with pytest.raises(InvalidInputError, match="saved models hold only"):
        save_model(tmp_path / "m.npz", other, np.zeros(other.n_params))
    model = MultiClassModel(2, 3)
    with pytest.raises(InvalidInputError, match="weights"):
        save_model(tmp_path / "m.npz", model, np.zeros(4))
    with pytest.raises(InvalidInputError, match="not all finite"):
        save_model(tmp_path / "m.npz", model, np.full(6, np.nan))
    assert not (tmp_path / "m.npz").exists()


def test_the_codec_keys_are_what_describe_writes():
    from structopt import saved_model

    codecs = saved_model._model_types()
    for name, case in CASES.items():
        model = case(np.random.default_rng(0))[0]
        assert tuple(describe_model(model)["args"]) == codecs[name].keys
        loss = case(np.random.default_rng(0))[2]
        codec = saved_model._loss_types()[type(loss).__name__]
        assert tuple(codec.describe(loss)) == codec.keys


def test_missing_and_unknown_constructor_arguments_are_refused(tmp_path):
    path = tmp_path / "m.npz"
    body = {"$dict": {"model": {"$dict": {"type": "MultiClassModel", "args": {"$dict": {"n_features": 2}}}},
                      "loss": None, "task": None, "preprocessing": {"$dict": {}}, "info": {"$dict": {}}}}
    _sealed(path, body, np.zeros(6))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "MultiClassModel description lacks 'n_classes'" in _one_line(error, path)
    body["$dict"]["model"]["$dict"]["args"]["$dict"].update(n_classes=3, structure="os.system")
    _sealed(path, body, np.zeros(6))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown argument(s) 'structure'" in _one_line(error, path)
    body["$dict"]["model"]["$dict"]["args"]["$dict"].pop("structure")
    body["$dict"]["loss"] = {"$dict": {"type": "Hamming", "args": {"$dict": {}}}}
    _sealed(path, body, np.zeros(6))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "Hamming description lacks 'normalize'" in _one_line(error, path)


def test_the_declared_type_lists_are_the_codecs():
    from structopt import saved_model

    assert set(saved_model.MODEL_TYPES) == set(saved_model._model_types())
    assert set(saved_model.LOSS_TYPES) == set(saved_model._loss_types())
