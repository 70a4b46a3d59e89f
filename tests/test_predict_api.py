"""One prediction API: ``Model.predict(x, w)`` / ``Model.predict_batch(X, w)``, defined once on the base
class, is what ``SSVMProblem.predict``, ``StructuredSVM.predict``, ``SavedModel.predict`` and the executors
call. Every model the library exports predicts an output (never a relaxed point) whose score is the
maximum over the enumerated outputs, equal to the structure's exact argmax, on random weights."""

from __future__ import annotations

import inspect

import cvxpy as cp
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


def _chain(rng):
    allowed = np.ones((3, 3), dtype=bool)
    allowed[0, 2] = False
    return so.ChainModel(4, 3, start_end=True, bias=True, allowed=allowed), \
        [rng.normal(size=(int(rng.integers(1, 5)), 4)) for _ in range(4)]


def _grid(rng):
    X = [so.GridInput(rng.normal(size=(2, 3, 3)), rng.random((2, 2, 2)), rng.random((1, 3, 2))) for _ in range(3)]
    return so.GridModel(3, 2), X


def _box(rng):
    return so.BoxModel(3), [rng.normal(size=(3, 4, 3)) for _ in range(3)]


def _matching(rng):
    return so.MatchingModel(2, allow_unmatched=True), [rng.normal(size=(3, 3, 2)) for _ in range(3)]


def _multiclass(rng):
    return so.MultiClassModel(3, 4), [rng.normal(size=3) for _ in range(4)]


def _tree(rng):
    tree = so.TreeStructure([(0, 1), (0, 2), (1, 3)], n_states=2)
    return so.TreeModel(tree, n_features=3), [rng.normal(size=3) for _ in range(4)]


def _feature(rng):
    z = cp.Variable(6, boolean=True)
    return so.FeatureModel(so.LPStructure(z, [cp.sum(z) <= 3, z[0] + z[1] <= 1]), n_features=3), \
        [rng.normal(size=(6, 3)) for _ in range(3)]


def _dependency(rng):
    import scipy.sparse as sp

    return so.DependencyModel(5), [sp.random((n + 1) ** 2, 5, density=0.5, format="csr", random_state=n)
                                   for n in (2, 5, 3)]


def _graph(rng):
    # a frustrated graph: on a triangle with repulsive edges the LP-MAP point is fractional
    edges = np.array([[0, 1], [1, 2], [2, 0], [2, 3]])
    return so.GraphModel(2, 1, 2), [(rng.normal(size=(4, 2)), edges, rng.random((4, 1))) for _ in range(3)]


def _nonlinear_chain(rng):
    return so.models.nonlinear.NonlinearChainModel(3, 4, 3), [rng.normal(size=(4, 3)) for _ in range(3)]


def _nonlinear_matching(rng):
    return so.models.nonlinear.NonlinearMatchingModel(2, 3), [rng.normal(size=(3, 3, 2)) for _ in range(3)]


def _nonlinear_box(rng):
    return so.models.nonlinear.NonlinearBoxModel(2, 3), [rng.normal(size=(3, 3, 2)) for _ in range(3)]


BUILDERS = {"ChainModel": _chain, "GridModel": _grid, "BoxModel": _box, "MatchingModel": _matching,
            "MultiClassModel": _multiclass, "TreeModel": _tree, "FeatureModel": _feature, "GraphModel": _graph,
            "NonlinearChainModel": _nonlinear_chain, "NonlinearMatchingModel": _nonlinear_matching,
            "NonlinearBoxModel": _nonlinear_box, "DependencyModel": _dependency}


def _exported_models() -> set[str]:
    names = set()
    for module in (structopt.models, structopt.models.nonlinear):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, Model) and not inspect.isabstract(obj):
                names.add(name)
    return names


def test_every_exported_model_has_a_case():
    assert set(BUILDERS) == _exported_models()


def _weights(model, rng):
    w = rng.normal(size=model.n_params) * 2.0
    if model.nonnegative_blocks:  # a grid's pairwise weights stay >= 0
        w = np.abs(w)
    if isinstance(model, so.GraphModel):  # repulsive edges: make the LP relaxation loose
        model.unpack(w)["pairwise"][:] = [[-1.0, 2.0], [2.0, -1.0]]
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
    loss = {so.BoundingBox: so.BoxLoss, so.BipartiteMatching: so.MatchingHamming}.get(type(model.structure),
                                                                                        so.Hamming)()
    problem = so.SSVMProblem(model, X, expected, loss, lam=0.1)
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
    model, X = _box(np.random.default_rng(2))
    y = model.predict(X[0], np.ones(model.n_params))
    assert isinstance(y, type(BoundingBox().argmax(model.potentials(X[0], np.ones(model.n_params)))))
