"""One prediction API: ``Model.predict(x, w)`` / ``Model.predict_batch(X, w)``, defined once on the base
class, is what ``SSVMProblem.predict``, ``StructuredSVM.predict``, ``SavedModel.predict`` and the executors
call. Every model the library exports predicts an output (never a relaxed point) whose score is the
maximum over the enumerated outputs, equal to the structure's exact argmax, on random weights."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import structopt as so
import structopt.models
import structopt.models.nonlinear
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.models.base import Model
from structopt.models.graph import GraphPotentials
from structopt.parallel import _ModelOnly
from structopt.saved_model import MODEL_TYPES, load_model, save_model
from structopt.structures import BoundingBox, MultiClassPotentials


def _exported_models() -> dict[str, type]:
    """Every concrete model class the library exports (structopt.models and structopt.models.nonlinear)."""
    found = {}
    for module in (structopt.models, structopt.models.nonlinear):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, Model) and not inspect.isabstract(obj):
                found[name] = obj
    return found


#: one case per exported model: its own example (Model.example), so a new model needs no entry here
BUILDERS = {name: cls.example for name, cls in _exported_models().items()}


def _graph(rng):
    return so.GraphModel.example(rng)


def _chain(rng):
    return so.ChainModel.example(rng)


def _loss(model):
    """A loss the model's structure takes, chosen by the hooks the loss needs (per-node labels first)."""
    from structopt.hooks import has_hook

    structure = model.structure
    if has_hook(structure, "states_per_node") and has_hook(structure, "node_potentials"):
        return so.Hamming()
    if has_hook(structure, "edge_potentials"):
        return so.MatchingHamming()
    if has_hook(structure, "topk_iou"):
        return so.BoxLoss()
    raise AssertionError(f"no built-in loss for {type(structure).__name__}")


def test_every_exported_model_has_a_case():
    for name, cls in _exported_models().items():
        model, X = cls.example(np.random.default_rng(0))
        assert type(model) is cls and len(X) >= 2, name


def _weights(model, rng):
    w = rng.normal(size=model.n_params) * 2.0
    if model.nonnegative_blocks:  # a grid's pairwise weights stay >= 0
        w = np.abs(w)
    if isinstance(model, so.GraphModel):  # repulsive edges: make the LP relaxation loose
        pairwise = model.unpack(w)["pairwise"]
        pairwise[:] = np.where(np.eye(pairwise.shape[-1], dtype=bool), -1.0, 2.0)
    return w


def _same(a, b) -> bool:
    return a == b if isinstance(a, (int, np.integer, tuple)) and not isinstance(a, np.ndarray) else \
        np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_predict_is_an_enumerated_maximiser_equal_to_the_exact_argmax(name):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        model, X = BUILDERS[name](rng)
        w = _weights(model, rng)
        predicted = model.predict_batch(X, w)
        assert len(predicted) == len(X)
        for i, (x, y) in enumerate(zip(X, predicted, strict=True)):
            assert _same(model.predict(x, w), y)  # one input, the same answer
            theta = model.potentials(model.validate_input(x, i), w)
            structure = model.structure
            assert not isinstance(y, type(theta)), f"{name}: a relaxed point, not an output"
            structure.validate_output(y, theta)  # an output of the structure, integral
            best = max(structure.score(theta, out) for out in structure.outputs(theta))
            assert structure.score(theta, y) == pytest.approx(best, abs=1e-9), name
            if isinstance(model, so.GraphModel):
                assert _same(y, structure.map_labels(theta, exact=True))
            else:
                assert _same(y, structure.argmax(theta)), name


def test_a_graph_model_predicts_labels_where_its_training_oracle_is_fractional(tmp_path):
    rng = np.random.default_rng(0)
    model, X = _graph(rng)
    w = _weights(model, rng)
    relaxed = [model.structure.argmax(model.potentials(model.validate_input(x), w)) for x in X]
    assert any(isinstance(r, GraphPotentials) for r in relaxed)  # the old prediction's answers were these
    expected = model.predict_batch(X, w)
    problem = so.SSVMProblem(model, X, expected, so.Hamming(), lam=0.1)
    svm = so.StructuredSVM(model)
    svm.coef_ = w
    save_model(tmp_path / "g.npz", model, w)
    for got in (problem.predict(X, w), svm.predict(X), load_model(tmp_path / "g.npz").predict(X),
                _ModelOnly(model).predict(X, w)):
        assert all(isinstance(y, np.ndarray) and y.dtype == np.int64 for y in got)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def _savable(name, rng):
    """A savable instance of every model type (a FeatureModel on a structure with a codec; an optional type's
    own codec example)."""
    if name == "FeatureModel":
        return so.FeatureModel(so.MultiClass(4), n_features=3), [rng.normal(size=(4, 3)) for _ in range(3)]
    if name in BUILDERS:
        return BUILDERS[name](rng)
    from structopt.codecs import codecs
    from structopt.saved_model import OPTIONAL_MODEL_MODULES

    pytest.importorskip(OPTIONAL_MODEL_MODULES[name])
    return codecs("model")[name].example(rng)


@pytest.mark.parametrize("name", sorted(set(MODEL_TYPES)))
def test_every_entry_point_predicts_through_the_model(tmp_path, name):
    rng = np.random.default_rng(4)
    model, X = _savable(name, rng)
    w = _weights(model, rng)
    expected = model.predict_batch(X, w)
    save_model(tmp_path / "m.npz", model, w)
    saved = load_model(tmp_path / "m.npz")
    problem = so.SSVMProblem(model, X, expected, _loss(model), lam=0.1)
    svm = so.StructuredSVM.load(tmp_path / "m.npz")
    for got in (saved.predict(X), problem.predict(X, w), svm.predict(X), _ModelOnly(saved.model).predict(X, w)):
        assert len(got) == len(expected)
        assert all(_same(a, b) for a, b in zip(got, expected, strict=True)), name


def test_bad_arguments_are_refused_before_any_oracle_naming_them():
    model, X = _chain(np.random.default_rng(0))
    w = model.zeros()
    with pytest.raises(InvalidInputError, match=r"weights w must have shape"):
        model.predict(X[0], np.zeros(3))
    with pytest.raises(InvalidInputError, match=r"weights w contains NaN"):
        model.predict_batch(X, np.full(model.n_params, np.nan))
    with pytest.raises(InvalidInputError, match=r"example 2: chain input"):
        model.predict_batch([X[0], X[1], np.zeros((3, 7))], w)
    with pytest.raises(InvalidInputError, match=r"X must be a sequence"):
        model.predict_batch(5, w)
    with pytest.raises(InvalidInputError, match=r"exact"):
        model.predict(X[0], w, exact="no")
    assert model.predict_batch([], w) == []


class _RelaxedMultiClass(so.MultiClass):
    def argmax(self, theta):  # a relaxation that answers statistics
        return MultiClassPotentials(np.full(self.n_classes, 1.0 / self.n_classes))


def test_a_relaxed_argmax_without_map_labels_is_refused():
    model = so.MultiClassModel(2, structure=_RelaxedMultiClass(3))
    with pytest.raises(NotSupportedError, match="relaxed point"):
        model.predict(np.ones(2), model.zeros())


def test_the_box_output_is_a_box():
    model, X = so.BoxModel.example(np.random.default_rng(2))
    y = model.predict(X[0], np.ones(model.n_params))
    assert isinstance(y, type(BoundingBox().argmax(model.potentials(X[0], np.ones(model.n_params)))))
