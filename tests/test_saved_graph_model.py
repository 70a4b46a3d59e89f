"""Saved GraphModels (structopt.saved_model): the whole configuration (symmetric pairwise weights, the
exact or relaxed oracle, its time limit, warm starts) and the weights come back, predictions on random
graphs are the same before and after, preprocessing arrays (texton centres, boosted-tree node arrays)
keep their dtypes, and a corrupted file, misfit weights or a bad configuration are refused on one line
naming the file."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from structopt.archive import encode, write_archive
from structopt.errors import InvalidInputError
from structopt.losses import Hamming
from structopt.models.graph import GraphModel, GraphPotentials, GraphStructure
from structopt.saved_model import FORMAT, describe_model, load_model, save_model


def _random_graph(rng: np.random.Generator, n_features: int, n_edge_features: int) -> tuple:
    """A connected graph with cycles: a random spanning tree plus a few random chords."""
    n = int(rng.integers(4, 8))
    order = rng.permutation(n)
    edges = {tuple(sorted((int(order[k]), int(order[rng.integers(0, k)])))) for k in range(1, n)}
    for u, v in rng.integers(0, n, size=(n, 2)):
        if u != v:
            edges.add(tuple(sorted((int(u), int(v)))))
    edges = np.array(sorted(edges), dtype=np.int64)
    edges = np.where(rng.random(len(edges))[:, None] < 0.5, edges, edges[:, ::-1])  # both directions occur
    return rng.normal(size=(n, n_features)), edges, rng.random((len(edges), n_edge_features))


def _graphs(rng: np.random.Generator, model: GraphModel, count: int = 4) -> list[tuple]:
    return [_random_graph(rng, model.n_node_features, model.n_edge_features) for _ in range(count)]


def _same_output(got, want) -> None:
    # the relaxed oracle answers labels, or a fractional point (GraphPotentials) when AD3 certifies none
    assert isinstance(got, GraphPotentials) == isinstance(want, GraphPotentials)
    if isinstance(want, GraphPotentials):
        np.testing.assert_array_equal(got.unary, want.unary)
        np.testing.assert_array_equal(got.pairwise, want.pairwise)
    else:
        np.testing.assert_array_equal(got, want)


OPTIONS = [dict(symmetric=symmetric, exact=exact, time_limit=time_limit, warm_start=warm_start)
           for symmetric, exact, (time_limit, warm_start) in itertools.product(
               (False, True), (False, True), ((None, False), (30.0, True)))]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("n_edge_features", [0, 2])
def test_round_trip_keeps_the_configuration_and_the_predictions(tmp_path, options, n_edge_features):
    rng = np.random.default_rng(10 * OPTIONS.index(options) + n_edge_features)
    model = GraphModel(3, n_edge_features, 3, **options)
    w = rng.normal(size=model.n_params)
    X = _graphs(rng, model)
    save_model(tmp_path / "g.npz", model, w, loss=Hamming(normalize=True), task="demo")
    saved = load_model(tmp_path / "g.npz")
    assert type(saved.model) is GraphModel and type(saved.model.structure) is GraphStructure
    assert describe_model(saved.model) == describe_model(model)
    assert saved.model.blocks == model.blocks
    structure = saved.model.structure
    assert (structure.exact, structure.time_limit, structure.warm_start) == \
        (options["exact"], options["time_limit"], options["warm_start"])
    np.testing.assert_array_equal(saved.w, w)
    assert repr(saved.loss) == repr(Hamming(normalize=True)) and saved.task == "demo"
    # the model's training oracle comes back as it was (labels, or a relaxed point with exact=False) ...
    thetas = [model.potentials(model.validate_input(x, i), w) for i, x in enumerate(X)]
    for theta in thetas:
        _same_output(saved.model.structure.argmax(theta), model.structure.argmax(theta))
    # ... while prediction gives labels whatever the oracle: the exact MAP (never a relaxed point), the same
    # through SavedModel.predict, Model.predict and the factor graph's branch-and-bound
    predicted = saved.predict(X)
    for x, theta, got in zip(X, thetas, predicted, strict=True):
        assert isinstance(got, np.ndarray) and got.dtype == np.int64
        np.testing.assert_array_equal(got, model.structure.map_labels(theta, exact=True))
        for exact in (True, False):
            want = model.predict(x, w, exact=exact)
            np.testing.assert_array_equal(saved.model.predict(x, saved.w, exact=exact), want)


def test_preprocessing_arrays_keep_their_dtypes_and_values(tmp_path):
    rng = np.random.default_rng(3)
    model = GraphModel(4, 1, 2, symmetric=True)
    preprocessing = {
        "textons": {"centres": rng.normal(size=(32, 17)), "filter_bank": "MR8", "k": 32},
        "boosted_trees": {"feature": rng.integers(0, 17, size=(50, 7)).astype(np.int32),
                          "threshold": rng.normal(size=(50, 7)).astype(np.float32),
                          "children": rng.integers(-1, 7, size=(50, 7, 2)).astype(np.int64),
                          "value": rng.normal(size=(50, 7)), "learning_rate": 0.1},
        "edge_features": ["constant", "contrast"],
        "superpixels": {"n_segments": 200, "compactness": 10.0}}
    save_model(tmp_path / "g.npz", model, rng.normal(size=model.n_params), task="horses superpixels",
               preprocessing=preprocessing)
    got = load_model(tmp_path / "g.npz").preprocessing
    for group in ("textons", "boosted_trees"):
        for key, value in preprocessing[group].items():
            if isinstance(value, np.ndarray):
                assert got[group][key].dtype == value.dtype
                np.testing.assert_array_equal(got[group][key], value)
            else:
                assert got[group][key] == value
    assert got["edge_features"] == ["constant", "contrast"] and got["superpixels"] == preprocessing["superpixels"]
    with pytest.raises(InvalidInputError, match="an array of Python objects"):
        save_model(tmp_path / "bad.npz", model, np.zeros(model.n_params),
                   preprocessing={"trees": np.array([{"split": 1}], dtype=object)})
    assert not (tmp_path / "bad.npz").exists()


def _one_line(error: pytest.ExceptionInfo, path) -> str:
    message = str(error.value)
    assert "\n" not in message and str(path) in message
    return message


GOOD_ARGS = {"n_node_features": 3, "n_edge_features": 2, "n_states": 3, "symmetric": True, "exact": False,
             "time_limit": None, "warm_start": False}


def _sealed(path, args: dict, w: np.ndarray) -> None:
    """A correctly sealed saved model whose GraphModel description is ``args`` (written by hand)."""
    body = {"model": {"type": "GraphModel", "args": args}, "loss": None, "task": None, "preprocessing": {},
            "info": {}}
    data, arrays = encode(body)
    write_archive(path, {"format": FORMAT, "format_version": 1, "structopt_version": "0", "body": data},
                  {**arrays, "w": w}, "model")


def test_the_hand_written_file_of_good_arguments_loads(tmp_path):
    # the refusal tests below change one thing of this file
    n_params = GraphModel(**GOOD_ARGS).n_params
    _sealed(tmp_path / "g.npz", GOOD_ARGS, np.arange(float(n_params)))
    saved = load_model(tmp_path / "g.npz")
    assert describe_model(saved.model)["args"] == GOOD_ARGS and saved.w.shape == (n_params,)


def test_a_corrupted_truncated_or_extended_file_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    model = GraphModel(3, 2, 3, symmetric=True, warm_start=True)
    path = tmp_path / "g.npz"
    save_model(path, model, rng.normal(size=model.n_params), preprocessing={"centres": rng.normal(size=(8, 3))})
    data = path.read_bytes()
    flips = [data[:k] + bytes([data[k] ^ 0x10]) + data[k + 1:] for k in (0, 40, len(data) // 2, len(data) - 30)]
    for bad in (*flips, data[: len(data) // 3], data + b"\0"):
        path.write_bytes(bad)
        with pytest.raises(InvalidInputError) as error:
            load_model(path)
        message = _one_line(error, path)
        assert "checksum" in message or "not a structopt archive" in message


@pytest.mark.parametrize("w", [np.zeros(5), np.zeros((2, 5)), np.zeros(0), "nan", "int"])
def test_weights_that_do_not_fit_the_model_are_refused(tmp_path, w):
    n_params = GraphModel(**GOOD_ARGS).n_params
    if isinstance(w, str):  # the right length but not finite float64
        w = np.full(n_params, np.nan) if w == "nan" else np.zeros(n_params, dtype=np.int64)
    path = tmp_path / "g.npz"
    _sealed(path, GOOD_ARGS, w)
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "do not fit the model" in _one_line(error, path)


BAD_VALUES = [("n_node_features", 0), ("n_node_features", "3"), ("n_node_features", 2.5), ("n_node_features", None),
              ("n_edge_features", -1), ("n_edge_features", True), ("n_states", 0), ("n_states", [3]),
              ("symmetric", "yes"), ("symmetric", 2), ("symmetric", None), ("exact", "false"), ("exact", 0.5),
              ("time_limit", -1.0), ("time_limit", 0), ("time_limit", "60"), ("time_limit", float("inf")),
              ("warm_start", "no"), ("warm_start", {"on": True})]


def test_a_file_without_weights_is_refused(tmp_path):
    path = tmp_path / "g.npz"
    body = {"model": {"type": "GraphModel", "args": GOOD_ARGS}, "loss": None, "task": None, "preprocessing": {},
            "info": {}}
    data, arrays = encode(body)
    write_archive(path, {"format": FORMAT, "format_version": 1, "structopt_version": "0", "body": data}, arrays,
                  "model")
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "malformed" in _one_line(error, path)


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_a_configuration_value_of_the_wrong_type_or_range_is_refused(tmp_path, key, value):
    path = tmp_path / "g.npz"
    _sealed(path, {**GOOD_ARGS, key: value}, np.zeros(GraphModel(**GOOD_ARGS).n_params))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert key in _one_line(error, path)


@pytest.mark.parametrize("key", sorted(GOOD_ARGS))
def test_a_missing_configuration_key_is_refused(tmp_path, key):
    path = tmp_path / "g.npz"
    args = {k: v for k, v in GOOD_ARGS.items() if k != key}
    _sealed(path, args, np.zeros(GraphModel(**GOOD_ARGS).n_params))
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert f"GraphModel description lacks {key!r}" in _one_line(error, path)


def test_an_unknown_configuration_key_or_model_type_is_refused(tmp_path):
    path = tmp_path / "g.npz"
    w = np.zeros(GraphModel(**GOOD_ARGS).n_params)
    _sealed(path, {**GOOD_ARGS, "structure": "GraphStructure"}, w)
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown argument(s) 'structure'" in _one_line(error, path)
    body = {"model": {"type": "structopt.models.graph.GraphModel", "args": GOOD_ARGS}, "loss": None, "task": None,
            "preprocessing": {}, "info": {}}
    data, arrays = encode(body)
    write_archive(path, {"format": FORMAT, "format_version": 1, "structopt_version": "0", "body": data},
                  {**arrays, "w": w}, "model")
    with pytest.raises(InvalidInputError) as error:
        load_model(path)
    assert "unknown model type" in _one_line(error, path)


def test_subclasses_are_refused_when_saving(tmp_path):
    class MyGraph(GraphModel):
        pass

    class MyStructure(GraphStructure):
        pass

    with pytest.raises(InvalidInputError, match="saved models hold only"):
        save_model(tmp_path / "g.npz", MyGraph(2, 1, 2), np.zeros(MyGraph(2, 1, 2).n_params))
    model = GraphModel(2, 1, 2)
    model.structure = MyStructure(2)
    with pytest.raises(InvalidInputError, match="subclasses are not rebuilt"):
        save_model(tmp_path / "g.npz", model, np.zeros(model.n_params))
    assert not (tmp_path / "g.npz").exists()


def test_structured_svm_saves_and_loads_a_graph_model(tmp_path):
    from structopt.estimator import StructuredSVM

    rng = np.random.default_rng(7)
    model = GraphModel(3, 2, 2, symmetric=True, exact=True)
    X = _graphs(rng, model, 6)
    truth = rng.normal(size=(3, 2))  # labels a linear rule of the node features gives
    Y = [np.argmax(x[0] @ truth, axis=1).astype(np.int64) for x in X]
    estimator = StructuredSVM(model, solver="bcfw", lam=0.1, max_passes=3, random_state=0).fit(X, Y)
    estimator.save(tmp_path / "svm.npz")
    loaded = StructuredSVM.load(tmp_path / "svm.npz")
    assert describe_model(loaded.model) == describe_model(model)
    np.testing.assert_array_equal(loaded.coef_, estimator.coef_)
    assert loaded.get_params()["lam"] == 0.1 and loaded.get_params()["max_passes"] == 3
    assert len(loaded.trace_) == len(estimator.trace_)
    for got, want in zip(loaded.predict(X), estimator.predict(X), strict=True):
        np.testing.assert_array_equal(got, want)
    assert loaded.score(X, Y) == estimator.score(X, Y)
