"""The latent structural SVM: LatentChain's completion and loss-augmented oracles against enumeration, CCCP's
objective (recomputed by enumeration) non-increasing, the inner gap certificate, a task only latent states fit,
and bad input refused before any work."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import structopt as so
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.hooks import has_hook
from structopt.solvers import bcfw, latent_ssvm
from structopt.validate import check_structure


def _outputs(T: int, S: int) -> np.ndarray:
    return np.array(list(itertools.product(range(S), repeat=T)), dtype=np.int64)


def _random_theta(rng, T, S, shared):
    return so.ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S) if shared else (max(T - 1, 0), S, S)))


@pytest.mark.parametrize(("L", "K", "T", "shared"), [(2, 2, 1, True), (2, 2, 4, True), (3, 2, 3, False),
                                                      (2, 3, 3, True), (1, 3, 3, False), (3, 1, 3, True)])
def test_complete_is_the_best_completion_by_enumeration(L, K, T, shared):
    rng = np.random.default_rng(T * 10 + K)
    structure = so.LatentChain(L, K)
    outputs = _outputs(T, L * K)
    for _ in range(12):
        theta = _random_theta(rng, T, L * K, shared)
        y = rng.integers(0, L * K, size=T)
        z = structure.complete(theta, y)
        assert np.array_equal(structure.labels(z), y // K)
        consistent = outputs[np.all(outputs // K == y // K, axis=1)]
        best = max(structure.score(theta, c) for c in consistent)
        assert structure.score(theta, z) == pytest.approx(best, abs=1e-12)


def test_the_loss_augmented_oracle_and_the_label_loss_by_enumeration():
    rng = np.random.default_rng(1)
    L, K, T, F = 2, 2, 4, 3
    structure = so.LatentChain(L, K)
    model = so.ChainModel(F, L * K, structure=structure)
    X = [rng.normal(size=(T, F)) for _ in range(5)]
    Y = [structure.lift(rng.integers(0, L, size=T), rng.integers(0, K, size=T)) for _ in range(5)]
    loss = structure.label_loss()
    problem = so.SSVMProblem(model, X, Y, loss, 0.1)
    outputs = _outputs(T, L * K)
    for _trial in range(4):
        w = rng.normal(size=model.n_params)
        for i in range(problem.n):
            theta = problem.theta(i, w)
            values = [structure.score(theta, z) + np.count_nonzero(z // K != Y[i] // K) for z in outputs]
            decoded = problem.decode(i, w)
            assert structure.score(theta, decoded.y) + decoded.loss == pytest.approx(max(values), abs=1e-10)
            assert decoded.loss == np.count_nonzero(decoded.y // K != Y[i] // K)
    assert loss(Y[0], Y[0] ^ 1) == 0.0  # another sub-state of the same labels costs nothing
    assert problem.fused() is not None, problem.fused_refusal  # the chain kernels serve it


@pytest.mark.parametrize("shared", [True, False])
def test_latent_chain_passes_check_structure(shared):
    structure, theta = so.LatentChain.example(np.random.default_rng(0), length=3, n_labels=2, n_substates=2,
                                              shared=shared)
    report = check_structure(structure, theta)
    assert report.ok, report


def _brute_objective(problem, w, K):
    """The latent SSVM objective by enumeration: lam/2 |w|^2 + mean_i [max_z <theta,mu(z)> + Delta - max_h ...]."""
    total = 0.0
    structure = so.LatentChain(problem.model.structure.n_labels, K)
    for i in range(problem.n):
        theta = problem.theta(i, w)
        T = len(problem.Y[i])
        outputs = _outputs(T, structure.n_states)
        labels = problem.Y[i] // K
        scores = np.array([structure.score(theta, z) for z in outputs])
        losses = np.count_nonzero(outputs // K != labels, axis=1) / (T if problem.loss.normalize else 1)
        consistent = np.all(outputs // K == labels, axis=1)
        total += (scores + losses).max() - scores[consistent].max()
    return 0.5 * problem.lam * float(w @ w) + total / problem.n


def _tiny_problem(seed, n=6, T=4, L=2, K=2, F=3, lam=0.1):
    rng = np.random.default_rng(seed)
    structure = so.LatentChain(L, K)
    model = so.ChainModel(F, L * K, structure=structure)
    X = [rng.normal(size=(T, F)) for _ in range(n)]
    Y = [structure.lift(rng.integers(0, L, size=T), rng.integers(0, K, size=T)) for _ in range(n)]
    return so.SSVMProblem(model, X, Y, structure.label_loss(), lam), rng


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_cccp_objective_is_exact_and_never_increases(seed):
    problem, rng = _tiny_problem(seed)
    w0 = rng.normal(size=problem.n_params)
    brute = [_brute_objective(problem, w0, 2)]
    weights = []
    for outer in (1, 2, 3, 4):  # the same run cut after each step: w_1, w_2, ... (deterministic given the seed)
        result = latent_ssvm(problem, max_outer=outer, tol=0.0, inner_passes=30, w0=w0, random_state=seed)
        weights.append(result.w)
        brute.append(_brute_objective(problem, result.w, 2))
        accepted = [t for t in result.trace if t["accepted"]]
        assert accepted[-1]["objective"] == pytest.approx(brute[-1], abs=1e-9)  # exact, not a bound
    assert result.trace[0]["objective"] == pytest.approx(brute[0], abs=1e-9)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(brute)), brute
    assert brute[-1] < brute[0] - 1e-3  # it does decrease
    objectives = [t["objective"] for t in result.trace]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(objectives))
    for t in result.trace[1:]:
        if t["accepted"]:  # F(w_{t+1}) <= F_t(w_{t+1}) <= F(w_t)
            assert t["objective"] <= t["surrogate"] + 1e-12


def test_each_convex_step_is_certified_by_its_gap():
    problem, _ = _tiny_problem(3)
    result = latent_ssvm(problem, max_outer=3, tol=0.0, inner_passes=40, inner_eps=0.05, random_state=0)
    first = result.trace[0]  # without w0 the first step trains on the problem's outputs: problem is F_0
    reference = bcfw(problem, max_passes=2000, tol=1e-9, random_state=0).trace[-1]
    assert first["inner_dual"] <= reference["primal"] + 1e-12  # a lower bound on min F_0 ...
    assert first["surrogate"] - reference["dual"] <= first["inner_gap"] + 1e-9  # ... and the gap bounds the excess
    for t in result.trace:
        assert t["inner_gap"] >= 0
        assert t["surrogate"] == pytest.approx(t["inner_dual"] + t["inner_gap"], abs=1e-9)
        assert t["inner_gap"] <= t["inner_eps"] * t["surrogate"] + 1e-12 or t["inner_passes"] >= 40
    assert [t["warm"] for t in result.trace] == ["cold"] + ["dual"] * (len(result.trace) - 1)


def test_a_step_without_decrease_is_solved_again_more_accurately():
    X, Y = xor_words(25, 0)
    structure = so.LatentChain(2, 2)
    model = so.ChainModel(3, 4, structure=structure)
    rng = np.random.default_rng(0)
    Y0 = [structure.lift(y, rng.integers(0, 2, size=len(y))) for y in Y]
    problem = so.SSVMProblem(model, X, Y0, structure.label_loss(normalize=True), 1e-3)
    trace = latent_ssvm(problem, max_outer=12, inner_passes=20, random_state=0).trace
    rejected = [j for j, t in enumerate(trace) if not t["accepted"]]
    assert rejected  # this budget leaves steps that cannot certify a decrease
    for j in rejected:
        assert trace[j]["surrogate"] > trace[j]["objective"]  # the convex step's primal is above F(w_t)
        if j + 1 < len(trace):  # the same convex problem again, from its dual, to a tenfold smaller gap
            assert trace[j + 1]["inner_eps"] == pytest.approx(max(trace[j]["inner_eps"] / 10, 1e-6))
            assert trace[j + 1]["warm"] == "dual"
    objectives = [t["objective"] for t in trace]
    assert all(b <= a for a, b in itertools.pairwise(objectives))


def test_other_inner_solvers_warm_start_from_w():
    problem, rng = _tiny_problem(4)
    result = latent_ssvm(problem, "svrg", max_outer=3, tol=0.0, inner_passes=5, w0=rng.normal(size=problem.n_params),
                         random_state=0)
    assert [t["warm"] for t in result.trace[1:]] == ["w0"] * (len(result.trace) - 1)
    objectives = [t["objective"] for t in result.trace]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(objectives))


def xor_words(n: int, seed: int, noise: float = 0.3):
    """Labels and hidden sub-classes uniform in {0, 1}; features (a, b, 1) with a = +-1 by sub-class and b = a
    for label 0, -a for label 1 (plus noise): an XOR no linear unary score separates, while every (label,
    sub-class) pair is one separable cluster (benchmarks/latent_synthetic.py)."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(5, 10))
        y, h = rng.integers(0, 2, size=T), rng.integers(0, 2, size=T)
        a = np.where(h == 0, 1.0, -1.0)
        b = np.where(y == 0, a, -a)
        X.append(np.column_stack([a + noise * rng.normal(size=T), b + noise * rng.normal(size=T), np.ones(T)]))
        Y.append(y)
    return X, Y


def train_error(K: int, X, Y, seed: int, restarts: int = 1) -> float:
    """Training letter error of the plain chain (K = 1, BCFW) or of the best of ``restarts`` CCCP runs (lowest
    objective) from random initial sub-states."""
    structure = so.LatentChain(2, K)
    model = so.ChainModel(3, 2 * K, structure=structure)
    loss = structure.label_loss(normalize=True)
    if K == 1:
        w = bcfw(so.SSVMProblem(model, X, [structure.lift(y) for y in Y], loss, 1e-3), max_passes=100,
                 random_state=seed).w
    else:
        runs = []
        for restart in range(restarts):
            rng = np.random.default_rng([seed, restart])
            Y0 = [structure.lift(y, rng.integers(0, K, size=len(y))) for y in Y]
            result = latent_ssvm(so.SSVMProblem(model, X, Y0, loss, 1e-3), max_outer=15, inner_passes=50,
                                 random_state=seed)
            runs.append(([t for t in result.trace if t["accepted"]][-1]["objective"], result.w))
        w = min(runs, key=lambda run: run[0])[1]
    predicted = [structure.labels(z) for z in model.predict_batch(X, w)]
    return float(np.mean(np.concatenate([p != y for p, y in zip(predicted, Y, strict=True)])))


def test_latent_states_fit_what_the_plain_chain_cannot():
    X, Y = xor_words(25, 0)
    assert train_error(1, X, Y, 0) > 0.3
    assert train_error(2, X, Y, 0, restarts=2) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_latent_states_fit_what_the_plain_chain_cannot_on_more_seeds(seed):
    X, Y = xor_words(40, seed)
    assert train_error(1, X, Y, seed) > 0.3
    assert train_error(2, X, Y, seed, restarts=4) < 0.02


def test_stops_on_a_small_decrease_and_passes_ctrl_c_through():
    problem, rng = _tiny_problem(6)
    w0 = rng.normal(size=problem.n_params)
    result = latent_ssvm(problem, max_outer=20, tol=10.0, inner_passes=10, w0=w0, random_state=0)
    accepted = [t for t in result.trace if t["accepted"]]
    assert len(accepted) == 2 and result.info["stop_reason"].startswith("objective decrease")  # start + one step

    def interrupt(w):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # the inner solver's interrupt ends the whole run
        latent_ssvm(problem, max_outer=5, inner_passes=10, callback=interrupt)


def test_the_completion_hook_is_documented_and_declared():
    assert has_hook(so.LatentChain(2, 2), "complete")
    assert not has_hook(so.Chain(2), "complete")


def test_with_outputs_equals_a_fresh_problem():
    problem, rng = _tiny_problem(5)
    Y = [problem.model.structure.lift(rng.integers(0, 2, size=4), rng.integers(0, 2, size=4)) for _ in range(6)]
    fresh = so.SSVMProblem(problem.model, problem.X, Y, problem.loss, problem.lam)
    w = rng.normal(size=problem.n_params)
    assert problem.with_outputs(Y).primal(w) == pytest.approx(fresh.primal(w), abs=1e-12)
    assert not problem.with_outputs(Y).same_loss_terms(problem)  # other labels: another loss
    structure = problem.model.structure
    resampled = [structure.lift(y // 2, rng.integers(0, 2, size=len(y))) for y in problem.Y]
    assert problem.with_outputs(resampled).same_loss_terms(problem)  # the label loss ignores the sub-states


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"inner": "nope"}, InvalidInputError, "unknown inner solver 'nope'"),
    ({"inner": "prox_linear"}, InvalidInputError, "unknown inner solver"),
    ({"max_outer": 0}, InvalidInputError, "max_outer"),
    ({"tol": -1.0}, InvalidInputError, "tol"),
    ({"inner_eps": 1.5}, InvalidInputError, "inner_eps"),
    ({"max_passes": 3}, InvalidInputError, "max_passes may not be given"),
    ({"line_serch": True}, InvalidInputError, "bcfw has no option line_serch"),
    ({"sampling": "bad"}, InvalidInputError, "sampling"),
    ({"w0": np.zeros(3)}, InvalidInputError, "w0 must have shape"),
])
def test_bad_options_are_refused_before_any_work(kwargs, error, match, monkeypatch):
    problem, _ = _tiny_problem(0)

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(type(problem), "complete", no_work)
    monkeypatch.setattr(type(problem), "primal", no_work)
    with pytest.raises(error, match=match):
        latent_ssvm(problem, **kwargs)


def test_a_structure_without_completion_and_bad_sizes_are_refused():
    with pytest.raises(InvalidInputError, match="n_substates"):
        so.LatentChain(3, 0)
    with pytest.raises(InvalidInputError, match="n_labels"):
        so.LatentChain(0, 2)
    rng = np.random.default_rng(0)
    plain = so.SSVMProblem(so.ChainModel(2, 2), [rng.normal(size=(3, 2))], [np.array([0, 1, 0])], so.Hamming(), 0.1)
    with pytest.raises(NotSupportedError, match="latent completion oracle"):
        latent_ssvm(plain)
    with pytest.raises(NotSupportedError, match="latent completion oracle"):
        plain.complete(0, plain.theta(0, plain.zeros()))
    structure = so.LatentChain(2, 2)
    with pytest.raises(InvalidInputError, match="positions"):
        structure.complete(so.ChainPotentials(np.zeros((3, 4)), np.zeros((4, 4))), np.array([0, 1]))
    with pytest.raises(InvalidInputError, match="sub-states"):
        structure.lift(np.array([0, 1]), np.array([0, 2]))
    with pytest.raises(InvalidInputError, match="labels"):
        structure.lift(np.array([0, 2]))


def _without_time(trace):
    return [{key: value for key, value in t.items() if key != "time"} for t in trace]


@pytest.mark.parametrize("start", ["w0", "outputs"])
def test_checkpoint_and_resume_give_the_uninterrupted_trace(tmp_path, start):
    problem, rng = _tiny_problem(7, n=8)
    w0 = rng.normal(size=problem.n_params) if start == "w0" else None
    options = {"tol": 0.0, "inner_passes": 20, "inner_eps": 0.01, "w0": w0, "random_state": 3}
    whole = latent_ssvm(problem, max_outer=5, **options)
    path = tmp_path / "cccp.ckpt"
    first = latent_ssvm(problem, max_outer=2, checkpoint=path, **options)
    assert _without_time(first.trace) == _without_time(whole.trace[:len(first.trace)])
    resumed = latent_ssvm(problem, max_outer=5, resume=path, checkpoint=path, **options)
    assert _without_time(resumed.trace) == _without_time(whole.trace)
    np.testing.assert_array_equal(resumed.w, whole.w)
    assert resumed.info["stop_reason"] == whole.info["stop_reason"]
    again = latent_ssvm(problem, max_outer=5, resume=path, **options)  # a finished run comes back as it was
    assert again.info.get("resumed_finished") or _without_time(again.trace) == _without_time(whole.trace)
    np.testing.assert_array_equal(again.w, whole.w)
    # another problem or other path options are refused, naming what differs; a damaged file is refused
    other, _ = _tiny_problem(8, n=8)
    with pytest.raises(InvalidInputError, match="belongs to another run: its inputs"):
        latent_ssvm(other, max_outer=5, resume=path, **options)
    with pytest.raises(InvalidInputError, match="solver options differs"):
        latent_ssvm(problem, max_outer=5, resume=path, **{**options, "inner_passes": 21})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidInputError, match="checkpoint"):
        latent_ssvm(problem, max_outer=5, resume=path, **options)
