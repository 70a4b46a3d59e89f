"""Saved models (structopt.saved_model): every registered model and loss round-trips (the list comes from the
codec registry), and a file that was tampered with, truncated, of another kind or naming an unknown type is
refused on one line."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from structopt.archive import write_archive
from structopt.codecs import codecs, register_codec
from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.losses import BoxLoss, Hamming, MatchingHamming, WeightedHamming
from structopt.models import (
    BoxModel,
    ChainModel,
    FeatureModel,
    GridInput,
    GridModel,
    MatchingModel,
    Model,
    MultiClassModel,
    TreeModel,
)
from structopt.models.graph import GraphModel
from structopt.models.nonlinear import NonlinearBoxModel, NonlinearChainModel, NonlinearMatchingModel
from structopt.saved_model import (
    FORMAT,
    LOSS_TYPES,
    MODEL_TYPES,
    OPTIONAL_MODEL_MODULES,
    describe_model,
    load_model,
    save_model,
)
from structopt.structures import Chain, DependencyTree, MultiClass, MultiClassPotentials, TreeStructure


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


def _tree_case(rng):
    tree = TreeStructure([(0, 1), (0, 2), (2, 3)], n_states=3, n_nodes=5)  # a forest: node 4 alone
    return TreeModel(tree, n_features=3), [rng.normal(size=3) for _ in range(3)], Hamming()


def _feature_case(rng):
    return FeatureModel(MultiClass(4), n_features=3, n_labels=4), [rng.normal(size=3) for _ in range(3)], None


def _feature_dependency_case(rng):
    X = [rng.normal(size=((n + 1) ** 2, 2)) for n in (2, 3)]
    return FeatureModel(DependencyTree(projective=True), n_features=2), X, None


def _nonlinear_chain_case(rng):
    return NonlinearChainModel(3, 4, 3, activation="elu"), [rng.normal(size=(4, 3)) for _ in range(3)], Hamming()


def _nonlinear_matching_case(rng):
    return NonlinearMatchingModel(2, 3), [rng.normal(size=(3, 3, 2)) for _ in range(3)], MatchingHamming()


def _nonlinear_box_case(rng):
    return NonlinearBoxModel(2, 3, search="exhaustive"), [rng.normal(size=(3, 4, 2)) for _ in range(2)], BoxLoss()


CASES = {"ChainModel": _chain_case, "GridModel": _grid_case, "BoxModel": _box_case,
         "MatchingModel": _matching_case, "MultiClassModel": _multiclass_case, "GraphModel": _graph_case,
         "DependencyModel": _dependency_case, "TreeModel": _tree_case, "FeatureModel": _feature_case,
         "FeatureModel/dependency": _feature_dependency_case, "NonlinearChainModel": _nonlinear_chain_case,
         "NonlinearMatchingModel": _nonlinear_matching_case, "NonlinearBoxModel": _nonlinear_box_case}


def _case(name, rng):
    """The test's case of a type, or the example its codec registered (optional types: their module first)."""
    if name in CASES:
        return CASES[name](rng)
    if name in OPTIONAL_MODEL_MODULES:
        pytest.importorskip(OPTIONAL_MODEL_MODULES[name])
    codec = codecs("model")[name]
    assert codec.example is not None, f"model type {name} has neither a case here nor a codec example"
    return (*codec.example(rng), None)


def test_every_registered_type_has_a_case():
    """Every built-in model type has a case here (or its codec's example); a type a user registers is
    round-tripped when its codec brings an example (the guide's, registered without one, is not)."""
    registry = codecs("model")
    for name in MODEL_TYPES:
        if name in OPTIONAL_MODEL_MODULES or name in CASES or registry[name].example is not None:
            continue
        assert not registry[name].cls.__module__.startswith("structopt."), f"built-in {name} has no case"
    losses = {type(CASES[name](np.random.default_rng(0))[2]).__name__ for name in CASES} - {"NoneType"}
    assert losses == set(LOSS_TYPES)


def _registered_and_variants():
    registry = codecs("model")  # the built-in types and the variants here (a user's types: see user_codec)
    return sorted({*(name for name in MODEL_TYPES if name in OPTIONAL_MODEL_MODULES
                     or registry[name].cls.__module__.startswith("structopt.")), *CASES})


@pytest.mark.parametrize("name", _registered_and_variants())
def test_round_trip_rebuilds_the_model_and_predicts_the_same(tmp_path, name):
    rng = np.random.default_rng(1)
    model, X, loss = _case(name, rng)
    w = np.abs(rng.normal(size=model.n_params))  # non-negative: a grid's pairwise weights must be
    preprocessing = {"tags": ["O", "B-NP"], "mean": np.arange(3.0), "nested": {"k": (1, 2)}}
    size = save_model(tmp_path / "m.npz", model, w, loss=loss, task="demo", preprocessing=preprocessing,
                      info={"lam": 0.1})
    assert size == (tmp_path / "m.npz").stat().st_size
    saved = load_model(tmp_path / "m.npz")
    assert type(saved.model) is type(model) and describe_model(saved.model).keys() == describe_model(model).keys()
    assert repr(saved.model) == repr(model) and repr(saved.loss) == repr(loss)
    if hasattr(model, "set_weights"):  # a network's module takes the saved weights on loading
        model.set_weights(w)
    assert _same_description(describe_model(saved.model), describe_model(model))
    np.testing.assert_array_equal(saved.w, w)
    assert saved.task == "demo" and saved.info == {"lam": 0.1} and saved.preprocessing["tags"] == ["O", "B-NP"]
    np.testing.assert_array_equal(saved.preprocessing["mean"], np.arange(3.0))
    assert saved.preprocessing["nested"] == {"k": (1, 2)}
    import structopt

    assert saved.version == structopt.__version__
    expected = [model.predict_output(model.potentials(model.validate_input(x, i), w)) for i, x in enumerate(X)]
    for got, want in zip(saved.predict(X), expected, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    if name == "ChainModel":  # the transition mask came back as an array, not a list
        np.testing.assert_array_equal(saved.model.structure.allowed, model.structure.allowed)


def _same_description(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_description(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
    return a == b and type(a) is type(b)


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


class MyMultiClass(MultiClass):
    pass


class _UnsavedModel(Model):
    """A user's model: ``theta = x * w`` over three classes."""

    def __init__(self, scale: float = 1.0):
        self.structure = MultiClass(3)
        self.scale = scale

    @property
    def blocks(self):
        return [("w", (3,))]

    def validate_input(self, x, index=None):
        return np.asarray(x, dtype=float)

    def potentials(self, x, w):
        return MultiClassPotentials(self.scale * x * w)

    def add_features(self, x, mu, out, scale=1.0):
        out += scale * self.scale * x * mu.scores


class _SavedUserModel(_UnsavedModel):
    pass


@pytest.fixture
def user_codec(monkeypatch):
    """A user's model registered for one test (the registry is restored after it: the other tests' lists of
    registered types stay the built-in ones)."""
    from structopt import codecs as registry

    monkeypatch.setitem(registry._CODECS, "model", registry._CODECS["model"].copy())
    return register_codec("test_saved_model.UserModel", _SavedUserModel, lambda m: {"scale": m.scale}, ("scale",),
                          example=lambda rng: (_SavedUserModel(2.0), [rng.normal(size=3) for _ in range(3)]))


def test_a_users_model_registers_its_codec(tmp_path, user_codec):
    assert "test_saved_model.UserModel" in MODEL_TYPES  # registered after import: the list is derived
    test_every_registered_type_has_a_case()  # through its example
    model, X, _ = _case("test_saved_model.UserModel", np.random.default_rng(0))
    w = np.array([1.0, -2.0, 0.5])
    save_model(tmp_path / "u.npz", model, w)
    saved = load_model(tmp_path / "u.npz")
    assert type(saved.model) is _SavedUserModel and saved.model.scale == 2.0
    assert saved.predict(X) == model.predict_batch(X, w)
    with pytest.raises(InvalidInputError, match="already registered"):
        register_codec("test_saved_model.UserModel", _UnsavedModel, lambda m: {}, ())
    with pytest.raises(InvalidInputError, match="already has the model codec"):
        register_codec("another name", _SavedUserModel, lambda m: {}, ())
    with pytest.raises(InvalidInputError, match="kind must be one of"):
        register_codec("x", _UnsavedModel, lambda m: {}, (), kind="solver")


def test_models_that_cannot_be_described_are_refused_when_saving(tmp_path):
    class MyChain(Chain):
        pass

    with pytest.raises(InvalidInputError, match="subclasses are not rebuilt"):
        save_model(tmp_path / "m.npz", ChainModel(2, 2, structure=MyChain(2)), np.zeros(8))
    other = FeatureModel(MyMultiClass(3), 2)
    with pytest.raises(InvalidInputError, match="saved models hold only the structure types with a registered codec"):
        save_model(tmp_path / "m.npz", other, np.zeros(other.n_params))
    mine = _UnsavedModel()
    with pytest.raises(InvalidInputError, match=r"saved models hold only the model types .*register_codec"):
        save_model(tmp_path / "m.npz", mine, np.zeros(mine.n_params))
    model = MultiClassModel(2, 3)
    with pytest.raises(InvalidInputError, match="weights"):
        save_model(tmp_path / "m.npz", model, np.zeros(4))
    with pytest.raises(InvalidInputError, match="not all finite"):
        save_model(tmp_path / "m.npz", model, np.full(6, np.nan))
    assert not (tmp_path / "m.npz").exists()


def test_the_codec_keys_are_what_describe_writes():
    registry = codecs("model")
    for case in CASES.values():
        model, _, loss = case(np.random.default_rng(0))
        description = describe_model(model)
        assert tuple(description["args"]) == registry[description["type"]].keys
        if loss is not None:
            codec = codecs("loss")[type(loss).__name__]
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
    assert set(MODEL_TYPES) == set(codecs("model")) | set(OPTIONAL_MODEL_MODULES)
    assert set(LOSS_TYPES) == set(codecs("loss"))
    assert {"TreeModel", "FeatureModel", "NonlinearChainModel", "TorchModel"} <= set(MODEL_TYPES)
