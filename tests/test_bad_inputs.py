"""Bad inputs through every public constructor, oracle and solver option (property-based).

Each bad input must raise a :class:`StructoptError` subclass whose message names the argument
(and the example, where there is one) — never hang, never raise a bare numpy / numba / pickle
error, never return a silent result. Inputs that are accepted on purpose are tested as accepted
(``test_documented_accepted_inputs``): integral floats (``5.0``) and numpy integers as sizes,
``-inf`` nowhere else than where documented, and Python's own ``TypeError`` for a keyword a
solver does not have (it names the keyword; the estimator turns it into a StructoptError).
"""

from __future__ import annotations

import contextlib
import math
import pickle
import signal
import threading

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import structopt as so
from structopt.errors import StructoptError
from structopt.solvers import get_solver

NAN, INF = float("nan"), float("inf")

# a failing input here is already small; shrinking would only replay hangs up to their deadline
no_shrink = settings(phases=[Phase.explicit, Phase.reuse, Phase.generate])


# --------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def deadline(seconds: float):
    """Fail (instead of hanging) when the body runs longer than ``seconds`` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise TimeoutError(f"no answer within {seconds}s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(call, *names: str, seconds: float = 30) -> str:
    """Run ``call``; it must raise a StructoptError whose message contains every one of ``names``."""
    with deadline(seconds):
        try:
            result = call()
        except StructoptError as error:
            message = str(error)
        else:
            raise AssertionError(f"accepted silently, returned {result!r}")
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    return message


def bad_counts(minimum: int, allow_none: bool = False) -> st.SearchStrategy:
    """Anything that is not an integer >= minimum (integral floats count as integers)."""
    not_whole = st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda v: not (math.isfinite(v) and v.is_integer() and v >= minimum))
    options = [st.integers(max_value=minimum - 1), not_whole, st.text(max_size=3), st.booleans(),
               st.lists(st.integers(1, 4), min_size=1, max_size=2), st.just(np.float64(2.5))]
    if not allow_none:
        options.append(st.none())
    return st.one_of(*options)


def bad_reals(low: float | None, inclusive: bool) -> st.SearchStrategy:
    """Anything that is not a finite real number above ``low`` (or equal to it when ``inclusive``)."""
    below = st.floats(max_value=low, exclude_max=inclusive, allow_nan=False) if low is not None else st.nothing()
    return st.one_of(below, st.sampled_from([NAN, INF, -INF, "0.5", None, [0.5], True]))


# --------------------------------------------------------------------------- constructors
SIZE_ARGUMENTS = [
    (so.Chain, "n_states", 1, {}), (so.MultiClass, "n_classes", 1, {}),
    (so.BipartiteMatching, "n_left", 0, {}), (so.BipartiteMatching, "n_right", 0, {"allow_unmatched": True}),
    (so.ChainModel, "n_features", 1, {"n_states": 3}), (so.ChainModel, "n_states", 1, {"n_features": 3}),
    (so.MatchingModel, "n_features", 1, {}),
    (so.MultiClassModel, "n_features", 1, {"n_classes": 3}), (so.MultiClassModel, "n_classes", 1, {"n_features": 3}),
]


@pytest.mark.parametrize(("cls", "name", "minimum", "others"), SIZE_ARGUMENTS,
                         ids=[f"{c.__name__}-{n}" for c, n, _, _ in SIZE_ARGUMENTS])
@no_shrink
@given(data=st.data())
def test_constructor_sizes(cls, name, minimum, others, data):
    value = data.draw(bad_counts(minimum, allow_none=cls is so.BipartiteMatching))
    refused(lambda: cls(**others, **{name: value}), name)


@no_shrink
@given(fp=bad_reals(0.0, True), which=st.sampled_from(["fp_cost", "fn_cost"]))
def test_matching_hamming_costs(fp, which):
    refused(lambda: so.MatchingHamming(**{which: fp}), which)


@no_shrink
@given(cost=st.sampled_from([[["a", "b"], ["c", "d"]], [[0, NAN], [1, 0]], [[0, 1, 2], [1, 0, 2]], [[0, -1], [1, 0]],
                             [[1, 1], [1, 0]], "abc"]))
def test_weighted_hamming_cost(cost):
    refused(lambda: so.WeightedHamming(cost), "cost")


# --------------------------------------------------------------------------- oracles on bad potentials
def _chain_theta(rng, T=4, S=3):
    return so.ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S)))


def _multiclass_theta(rng, S=4):
    return so.MultiClassPotentials(rng.normal(size=S))


def _matching_theta(rng, L=3, R=3):
    return so.MatchingPotentials(rng.normal(size=(L, R)), np.zeros(0), np.zeros(0))


STRUCTURES = {
    "chain": (lambda: so.Chain(3), _chain_theta, ["argmax", "topk", "marginals", "max_marginals", "project", "score"]),
    "multiclass": (lambda: so.MultiClass(4), _multiclass_theta,
                   ["argmax", "topk", "marginals", "max_marginals", "project", "score"]),
    "matching": (lambda: so.BipartiteMatching(), _matching_theta, ["argmax", "topk", "max_marginals", "project",
                                                                   "score"]),
}


def _call_oracle(structure, oracle: str, theta, k=3):
    if oracle == "topk":
        return structure.topk(theta, k)
    if oracle == "score":
        y = np.zeros(np.shape(theta[0])[0], dtype=np.int64) if not isinstance(structure, so.MultiClass) else 0
        if isinstance(structure, so.BipartiteMatching):
            y = np.arange(np.shape(theta[0])[0])
        return structure.score(theta, y)
    return getattr(structure, oracle)(theta)


def _poison(theta, kind: str, where: int, rng):
    field = np.array(theta[0], dtype=float)
    flat = field.reshape(-1)
    if kind in ("nan", "inf"):
        flat[where % flat.size] = NAN if kind == "nan" else INF
        return type(theta)(field, *theta[1:])
    if kind == "strings":
        return type(theta)(field.astype(str), *theta[1:])
    if kind == "wrong_shape":
        return type(theta)(np.zeros((*field.shape, 2)), *theta[1:])
    raise AssertionError(kind)


@pytest.mark.parametrize("structure_name", sorted(STRUCTURES))
@no_shrink
@given(oracle_index=st.integers(0, 5), kind=st.sampled_from(["nan", "inf", "strings", "wrong_shape"]),
       where=st.integers(0, 100), seed=st.integers(0, 2**16))
def test_oracles_refuse_bad_potentials(structure_name, oracle_index, kind, where, seed):
    make, theta_of, oracles = STRUCTURES[structure_name]
    oracle = oracles[oracle_index % len(oracles)]
    rng = np.random.default_rng(seed)
    theta = _poison(theta_of(rng), kind, where, rng)
    refused(lambda: _call_oracle(make(), oracle, theta), "potentials")


@pytest.mark.parametrize("structure_name", sorted(STRUCTURES))
@no_shrink
@given(k=st.one_of(st.integers(max_value=0), st.sampled_from([1.5, NAN, INF, "3", None])))
def test_topk_refuses_bad_k(structure_name, k):
    make, theta_of, _ = STRUCTURES[structure_name]
    refused(lambda: make().topk(theta_of(np.random.default_rng(0)), k), "k")


@pytest.mark.parametrize("structure_name", ["chain", "multiclass"])
@no_shrink
@given(scale=st.sampled_from([1e300, 1e307, 1e308, -1e308]), seed=st.integers(0, 2**16))
def test_marginals_of_huge_potentials_are_finite_or_refused(structure_name, scale, seed):
    make, theta_of, _ = STRUCTURES[structure_name]
    theta = theta_of(np.random.default_rng(seed))
    theta = type(theta)(*(np.clip(f * scale, -1.7e308, 1.7e308) for f in theta))
    with deadline(30):
        try:
            log_z, marginals = make().marginals(theta)
        except StructoptError as error:
            assert "potentials" in str(error)
            return
    assert np.isfinite(log_z), f"log Z = {log_z}"
    for field in marginals:
        assert np.all(np.isfinite(field)) and np.all(field >= -1e-9) and np.all(field <= 1 + 1e-9)


# --------------------------------------------------------------------------- model inputs
MODELS = {
    "chain": (lambda: so.ChainModel(3, 2), lambda rng: rng.normal(size=(4, 3))),
    "multiclass": (lambda: so.MultiClassModel(3, 2), lambda rng: rng.normal(size=3)),
    "matching": (lambda: so.MatchingModel(2), lambda rng: rng.normal(size=(3, 3, 2))),
}


def _bad_input(x, kind: str, where: int):
    if kind in ("nan", "inf", "huge"):
        x = x.copy()
        x.reshape(-1)[where % x.size] = {"nan": NAN, "inf": -INF, "huge": 1e300}[kind]
        return x
    if kind == "strings":
        return x.astype(str)
    if kind == "letters":
        return np.full(x.shape, "a")
    if kind == "extra_feature":
        return np.zeros((*x.shape[:-1], x.shape[-1] + 1))
    if kind == "extra_axis":
        return x[..., None]
    if kind == "empty":
        return np.zeros((0, *x.shape[1:]))
    if kind == "ragged":
        return [[1.0, 2.0], [3.0]]
    if kind == "none":
        return None
    raise AssertionError(kind)


@pytest.mark.parametrize("model_name", sorted(MODELS))
@no_shrink
@given(kind=st.sampled_from(["nan", "inf", "huge", "strings", "letters", "extra_feature", "extra_axis", "empty",
                             "ragged", "none"]),
       where=st.integers(0, 100), index=st.integers(0, 50), seed=st.integers(0, 2**16))
def test_models_refuse_bad_inputs_naming_the_example(model_name, kind, where, index, seed):
    make, x_of = MODELS[model_name]
    if model_name != "chain" and kind == "empty":
        kind = "extra_axis"  # a multiclass input has no length; a matching with no left node is a valid instance
    x = _bad_input(x_of(np.random.default_rng(seed)), kind, where)
    refused(lambda: make().validate_input(x, index), f"example {index}")


@pytest.mark.parametrize("model_name", sorted(MODELS))
@no_shrink
@given(kind=st.sampled_from(["short", "long", "nan", "strings", "matrix"]), seed=st.integers(0, 2**16))
def test_models_refuse_bad_weights(model_name, kind, seed):
    make, x_of = MODELS[model_name]
    model = make()
    x = model.validate_input(x_of(np.random.default_rng(seed)))
    w = {"short": np.zeros(model.n_params - 1), "long": np.zeros(model.n_params + 1),
         "nan": np.full(model.n_params, NAN), "strings": np.full(model.n_params, "a"),
         "matrix": np.zeros((model.n_params, 1))}[kind]
    refused(lambda: model.potentials(x, w), "weight")


# --------------------------------------------------------------------------- problems
def _chain_data(n=5, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(1, 5)), 3)) for _ in range(n)]
    Y = [rng.integers(0, 2, size=len(x)) for x in X]
    return so.ChainModel(3, 2), X, Y


def _multiclass_data(n=6, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=3) for _ in range(n)]
    return so.MultiClassModel(3, 3), X, [int(rng.integers(0, 3)) for _ in range(n)]


def _matching_data(n=4, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(3, 3, 2)) for _ in range(n)]
    return so.MatchingModel(2), X, [rng.permutation(3) for _ in range(n)]


DATA = {"chain": (_chain_data, so.Hamming()), "multiclass": (_multiclass_data, so.Hamming()),
        "matching": (_matching_data, so.MatchingHamming())}


@pytest.mark.parametrize("task", sorted(DATA))
@no_shrink
@given(lam=bad_reals(0.0, False))
def test_problem_refuses_bad_lam(task, lam):
    make, loss = DATA[task]
    model, X, Y = make()
    refused(lambda: so.SSVMProblem(model, X, Y, loss, lam), "lam")


def _bad_label(task: str, y, kind: str):
    if kind == "out_of_range":
        return np.asarray(y) + 7 if task != "multiclass" else 7
    if kind == "negative":
        return np.asarray(y) - 9 if task != "multiclass" else -1
    if kind == "fraction":
        return np.asarray(y) + 0.5 if task != "multiclass" else 1.5
    if kind == "nan":
        return np.full(np.shape(y), NAN) if task != "multiclass" else NAN
    if kind == "strings":
        return np.asarray(y).astype(str) if task != "multiclass" else "a"
    if kind == "wrong_length":
        return np.concatenate([np.atleast_1d(y), [0]]) if task != "multiclass" else [0, 1]
    if kind == "none":
        return None
    raise AssertionError(kind)


@pytest.mark.parametrize("task", sorted(DATA))
@no_shrink
@given(kind=st.sampled_from(["out_of_range", "negative", "fraction", "nan", "strings", "wrong_length", "none"]),
       which=st.integers(0, 3))
def test_problem_refuses_bad_labels_naming_the_example(task, kind, which):
    make, loss = DATA[task]
    model, X, Y = make()
    Y = list(Y)
    Y[which] = _bad_label(task, Y[which], kind)
    refused(lambda: so.SSVMProblem(model, X, Y, loss, 0.1), f"example {which}")


@pytest.mark.parametrize("task", sorted(DATA))
@no_shrink
@given(drop=st.integers(1, 3), side=st.sampled_from(["X", "Y"]))
def test_problem_refuses_mismatched_lengths(task, drop, side):
    make, loss = DATA[task]
    model, X, Y = make()
    X, Y = (X[:-drop], Y) if side == "X" else (X, Y[:-drop])
    refused(lambda: so.SSVMProblem(model, X, Y, loss, 0.1), "inputs", "outputs")


@pytest.mark.parametrize("task", sorted(DATA))
@no_shrink
@given(bad=st.sampled_from([None, 3, "abc", 2.5]))
def test_problem_refuses_non_sequences(task, bad):
    make, loss = DATA[task]
    model, _, Y = make()
    refused(lambda: so.SSVMProblem(model, bad, Y, loss, 0.1), "X")


@no_shrink
@given(task=st.sampled_from(["chain", "matching"]))
def test_loss_that_does_not_fit_the_structure(task):
    make, _ = DATA[task]
    model, X, Y = make()
    loss = so.MatchingHamming() if task == "chain" else so.Hamming()
    refused(lambda: so.SSVMProblem(model, X, Y, loss, 0.1), type(loss).__name__)


@pytest.mark.parametrize("task", sorted(DATA))
@no_shrink
@given(kind=st.sampled_from(["nan", "short", "strings"]), index=st.sampled_from([0, -100, 100, 1.5, "0"]))
def test_problem_oracles_refuse_bad_weights_and_indices(task, kind, index):
    make, loss = DATA[task]
    model, X, Y = make()
    problem = so.SSVMProblem(model, X, Y, loss, 0.1)
    good = np.zeros(model.n_params)
    bad_w = {"nan": np.full(model.n_params, NAN), "short": np.zeros(model.n_params - 1),
             "strings": np.full(model.n_params, "a")}[kind]
    refused(lambda: problem.max_oracle(0, bad_w), "w")
    refused(lambda: problem.primal(bad_w), "w")
    if index != 0:
        refused(lambda: problem.max_oracle(index, good), "example")


@pytest.mark.parametrize("task", ["chain", "multiclass"])
@no_shrink
@given(bad=st.sampled_from(["mu", "kind", "k"]), data=st.data())
def test_smooth_oracles_refuse_bad_parameters(task, bad, data):
    make, loss = DATA[task]
    model, X, Y = make()
    problem = so.SSVMProblem(model, X, Y, loss, 0.1)
    value = data.draw({"mu": bad_reals(0.0, False), "kind": st.sampled_from(["", "TOPK", "l2", None, 3]),
                       "k": bad_counts(1)}[bad])
    options = {"mu": 0.5, "kind": "topk", "k": 3, bad: value}
    refused(lambda: problem.smooth_oracle(0, np.zeros(model.n_params), **options), bad)


# --------------------------------------------------------------------------- solvers
SOLVER_NAMES = ["bcfw", "fw", "ssg", "sgd", "svrg", "casimir", "extragradient"]


@pytest.fixture(scope="module")
def small_problem():
    model, X, Y = _multiclass_data()
    return so.SSVMProblem(model, X, Y, so.Hamming(), 0.1)


BAD_OPTIONS = {
    "max_passes": bad_reals(0.0, False),
    "tol": bad_reals(0.0, True),
    "time_limit": bad_reals(0.0, False).filter(lambda v: v is not None),  # None means no limit
    "random_state": st.one_of(st.text(min_size=1, max_size=3), st.integers(max_value=-1),
                              st.sampled_from([1.5, NAN, [1, "a"]])),
    "eval_every": bad_reals(0.0, False),
}


@pytest.mark.parametrize("solver", SOLVER_NAMES)
@pytest.mark.parametrize("option", sorted(BAD_OPTIONS))
@no_shrink
@given(data=st.data())
def test_solvers_refuse_bad_options(small_problem, solver, option, data):
    value = data.draw(BAD_OPTIONS[option])
    options = {"max_passes": 1, option: value}
    refused(lambda: get_solver(solver)(small_problem, **options), option, seconds=10)


@pytest.mark.parametrize("solver", SOLVER_NAMES)
@no_shrink
@given(kind=st.sampled_from(["nan", "short", "strings"]))
def test_solvers_refuse_bad_w0(small_problem, solver, kind):
    n = small_problem.n_params
    w0 = {"nan": np.full(n, NAN), "short": np.zeros(n - 1), "strings": np.full(n, "a")}[kind]
    refused(lambda: get_solver(solver)(small_problem, max_passes=1, w0=w0), "w0", seconds=10)


STOCHASTIC = ("bcfw", "ssg", "sgd")  # one example per step; the others step a whole pass at a time


@pytest.mark.parametrize("solver", SOLVER_NAMES)
@no_shrink
@given(passes=st.sampled_from([0.51, 1.5, 0.01, 1e-6, 1 / 3, 2.999, 3]))
def test_solvers_stop_on_fractional_budgets(small_problem, solver, passes):
    with deadline(10):
        result = get_solver(solver)(small_problem, max_passes=passes, random_state=0)
    done, step = result.trace[-1]["passes"], 1.0 / small_problem.n
    assert done >= passes - step - 1e-9, f"stopped early at {done} of {passes}"
    limit = passes + step if solver in STOCHASTIC else math.ceil(passes)
    assert done <= limit + 1e-9, f"ran {done} passes for a budget of {passes}"


@pytest.mark.parametrize("solver", SOLVER_NAMES)
@no_shrink
@given(content=st.sampled_from([b"", b"garbage", b"\x80\x05", "truncated", "other_solver"]))
def test_solvers_refuse_bad_checkpoints(small_problem, solver, content, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "state.pkl"
    if content == "truncated":
        path.write_bytes(pickle.dumps({"solver": solver, "trace": [], "state": list(range(1000))})[:50])
    elif content == "other_solver":
        path.write_bytes(pickle.dumps({"solver": "none of them", "trace": []}))
    else:
        path.write_bytes(content)
    refused(lambda: get_solver(solver)(small_problem, max_passes=1, resume=str(path)), str(path), seconds=10)


@no_shrink
@given(bad=st.sampled_from(["lam", "max_passes", "random_state", "tol", "time_limit"]), data=st.data())
def test_estimator_refuses_bad_hyper_parameters(bad, data):
    value = data.draw({"lam": bad_reals(0.0, False), "max_passes": bad_reals(0.0, False),
                       "random_state": BAD_OPTIONS["random_state"],
                       "tol": bad_reals(0.0, True),
                       "time_limit": bad_reals(0.0, False).filter(lambda v: v is not None)}[bad])
    model, X, Y = _multiclass_data()
    params = {"max_passes": 1, "solver_options": {"fused": False}, bad: value}
    estimator = so.StructuredSVM(model, **params)
    refused(lambda: estimator.fit(X, Y), bad)


# --------------------------------------------------------------------------- accepted on purpose
def test_documented_accepted_inputs(small_problem):
    assert so.Chain(np.int64(3)).n_states == 3 and so.MultiClass(4.0).n_classes == 4
    assert so.ChainModel(3.0, np.int32(2)).n_features == 3
    assert so.BipartiteMatching(None, 0).n_right == 0
    assert so.MatchingModel(2).validate_input(np.zeros((0, 3, 2))).shape == (0, 3, 2)  # nothing to align
    with pytest.raises(StructoptError, match="bogus"):  # the solver declaration names the option
        get_solver("bcfw")(small_problem, max_passes=1, bogus=1)
    with pytest.raises(StructoptError, match="bogus"):
        so.StructuredSVM(so.MultiClassModel(3, 3), solver_options={"bogus": 1}).fit(*_multiclass_data()[1:])
