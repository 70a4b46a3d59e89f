"""Pairwise MRFs, UAI files, exact inference and the message-passing baselines (TRBP, BP, mean field)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from _marginals_models import LOOPY_EDGES, ising_grid, random_mrf, random_tree_edges
from _shared_data import SHARED_DATA, needs_data

from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.marginals import (
    InferenceInterrupted,
    PairwiseMRF,
    baselines,
    bp,
    enumerate_inference,
    exact_inference,
    mean_field,
    read_mar,
    read_pr,
    read_uai,
    trbp,
    write_mar,
)
from structopt.marginals._options import inference_method, positive
from structopt.marginals.exact import map_elimination
from structopt.marginals.infer import infer


def brute_force(mrf: PairwiseMRF) -> tuple[float, np.ndarray]:
    """log Z and the flat marginal vector by a plain Python loop over assignments (independent reference)."""
    scores, vertices = [], []
    for x in itertools.product(*[range(int(c)) for c in mrf.cards]):
        x = np.array(x)
        score = sum(mrf.unary(i)[x[i]] for i in range(mrf.n_nodes))
        score += sum(mrf.pairwise(e)[x[i], x[j]] for e, (i, j) in enumerate(mrf.edges))
        scores.append(score + mrf.constant)
        vertices.append(mrf.vertex(x))
    scores = np.array(scores)
    top = scores.max()
    weights = np.exp(scores - top)
    log_z = top + math.log(weights.sum())
    return log_z, (weights / weights.sum()) @ np.array(vertices)


# ---------------------------------------------------------------------- PairwiseMRF
def test_from_potentials_orients_and_merges_edges():
    rng = np.random.default_rng(0)
    t01, t10 = rng.normal(size=(2, 3)), rng.normal(size=(3, 2))
    mrf = PairwiseMRF.from_potentials([np.zeros(2), np.zeros(3)], [(0, 1), (1, 0)], [t01, t10])
    assert mrf.n_edges == 1 and mrf.edges.tolist() == [[0, 1]]
    np.testing.assert_allclose(mrf.pairwise(0), t01 + t10.T)
    assert mrf.dim == 2 + 3 + 6


@pytest.mark.parametrize("bad, match", [
    (dict(unary=[np.zeros(2)], edges=[(0, 0)], pairwise=[np.zeros((2, 2))]), "distinct"),
    (dict(unary=[np.zeros(2), np.zeros(2)], edges=[(0, 1)], pairwise=[np.zeros((2, 3))]), "shape"),
    (dict(unary=[np.zeros(2), np.zeros(2)], edges=[(0, 1)], pairwise=[]), "pairwise tables"),
    (dict(unary=[np.array([np.nan, 0.0])]), "NaN"),
    (dict(unary=[]), "at least one"),
])
def test_from_potentials_rejects_bad_input(bad, match):
    with pytest.raises(InvalidInputError, match=match):
        PairwiseMRF.from_potentials(**bad)


def test_vertex_and_score_agree():
    rng = np.random.default_rng(1)
    mrf = random_mrf([2, 3, 2, 4, 2], LOOPY_EDGES, rng)
    for x in itertools.islice(itertools.product(*[range(c) for c in mrf.cards]), 0, None, 7):
        x = np.array(x)
        v = mrf.vertex(x)
        assert v.sum() == mrf.n_nodes + mrf.n_edges
        assert mrf.theta @ v == pytest.approx(mrf.score(x))
    with pytest.raises(InvalidInputError):
        mrf.vertex(np.array([0, 0, 0, 4, 0]))


# ---------------------------------------------------------------------- exact inference
@pytest.mark.parametrize("seed", range(4))
def test_enumeration_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    cards = rng.integers(1, 4, size=5).tolist()
    mrf = random_mrf(cards, LOOPY_EDGES, rng, scale=2.0)
    log_z, mu = brute_force(mrf)
    result = enumerate_inference(mrf, chunk=7)  # several chunks
    assert result.log_z == pytest.approx(log_z, abs=1e-10)
    np.testing.assert_allclose(result.mu, mu, atol=1e-12)
    for i, m in enumerate(result.marginals):
        assert m.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(m, mu[mrf.offsets[i]:mrf.offsets[i + 1]], atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_elimination_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    mrf = ising_grid(3, 4, 2.0, rng)
    reference = enumerate_inference(mrf)
    result = exact_inference(mrf, method="elimination")
    assert result.log_z == pytest.approx(reference.log_z, abs=1e-10)
    for a, b in zip(result.marginals, reference.marginals):
        np.testing.assert_allclose(a, b, atol=1e-10)
    with pytest.raises(NotSupportedError, match="treewidth"):
        exact_inference(mrf, method="elimination", max_table=4)


def test_exact_handles_zero_probability_entries_and_constant():
    table = np.log(np.array([[1.0, 0.0], [0.0, 1.0]]) + 0.0, where=np.eye(2) > 0, out=np.full((2, 2), -np.inf))
    mrf = PairwiseMRF.from_potentials([np.zeros(2), np.array([0.0, 1.0])], [(0, 1)], [table], constant=0.5)
    result = exact_inference(mrf)
    assert result.log_z == pytest.approx(math.log(1 + math.e) + 0.5)
    np.testing.assert_allclose(result.marginals[0], [1 / (1 + math.e), math.e / (1 + math.e)])


@pytest.mark.parametrize("seed", range(3))
def test_map_elimination_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    mrf = random_mrf(rng.integers(1, 4, size=5).tolist(), LOOPY_EDGES, rng, scale=2.0)
    best = max(mrf.score(np.array(x)) for x in itertools.product(*[range(int(c)) for c in mrf.cards]))
    x, value = map_elimination(mrf)
    assert value == pytest.approx(best) and mrf.score(x) == pytest.approx(best)


# ---------------------------------------------------------------------- baselines
@pytest.mark.parametrize("method", [trbp, bp])
@pytest.mark.parametrize("seed", range(3))
def test_message_passing_is_exact_on_trees(method, seed):
    rng = np.random.default_rng(seed)
    n = 7
    cards = rng.integers(1, 4, size=n).tolist()
    mrf = random_mrf(cards, random_tree_edges(n, rng), rng, scale=2.0)
    reference = enumerate_inference(mrf)
    result = method(mrf, tol=1e-12)
    assert result.converged
    np.testing.assert_allclose(result.rho, 1.0)
    assert result.log_z == pytest.approx(reference.log_z, abs=1e-8)
    np.testing.assert_allclose(result.mu, reference.mu, atol=1e-8)  # node and edge marginals


@pytest.mark.parametrize("seed", range(5))
def test_trbp_bounds_above_and_mean_field_below(seed):
    rng = np.random.default_rng(seed)
    mrf = random_mrf(rng.integers(2, 4, size=5).tolist(), LOOPY_EDGES, rng, scale=1.5)
    reference = enumerate_inference(mrf)
    upper = trbp(mrf, tol=1e-10)
    lower = mean_field(mrf, tol=1e-10)
    assert upper.converged and lower.converged
    assert upper.log_z >= reference.log_z - 1e-8
    assert lower.log_z <= reference.log_z + 1e-8
    for result in (upper, lower):
        for m in result.marginals:
            assert m.min() >= 0 and m.sum() == pytest.approx(1.0)


def test_bp_close_on_weak_loopy_model_and_reports_non_convergence():
    rng = np.random.default_rng(3)
    mrf = ising_grid(3, 3, 0.2, rng)
    reference = enumerate_inference(mrf)
    result = bp(mrf)
    assert result.converged
    assert abs(result.log_z - reference.log_z) < 0.01
    short = bp(ising_grid(3, 3, 3.0, rng), max_iter=2, tol=0.0)
    assert not short.converged and len(short.trace) == 2


def test_trbp_rejects_bad_parameters():
    mrf = random_mrf([2, 2, 2], [(0, 1), (1, 2), (0, 2)], np.random.default_rng(0))
    with pytest.raises(InvalidInputError):
        trbp(mrf, damping=1.0)
    with pytest.raises(InvalidInputError):
        trbp(mrf, rho=np.zeros(3))


# ---------------------------------------------------------------------- options, stop reasons, Ctrl-C
def _small_loopy() -> PairwiseMRF:
    return random_mrf([2, 3, 2, 2, 3], LOOPY_EDGES, np.random.default_rng(11))


_COMMON_BAD = [("time_limit", 0), ("time_limit", -1.0), ("time_limit", math.nan), ("time_limit", math.inf),
               ("max_iter", 0), ("max_iter", 2.5), ("max_iter", True), ("max_iter", None), ("tol", -1e-3),
               ("tol", math.nan), ("progress", "yes")]


@pytest.mark.parametrize(("method", "name"), [(trbp, "trbp"), (bp, "bp"), (mean_field, "mean_field")])
@pytest.mark.parametrize(("option", "value"), _COMMON_BAD)
def test_message_passing_refuses_bad_options_naming_them(method, name, option, value):
    with pytest.raises(InvalidInputError, match=rf"^{name}: {option} must be"):
        method(_small_loopy(), **{option: value})


@pytest.mark.parametrize(("method", "option", "value", "match"), [
    (trbp, "damping", 1.0, "trbp: damping must be a number in [0, 1)"),
    (bp, "damping", math.nan, "bp: damping must be a number in [0, 1)"),
    (bp, "damping", -0.1, "bp: damping must be"),
    (trbp, "rho", np.full(7, math.nan), "trbp: rho must have shape (7,) with finite entries in (0, inf)"),
    (trbp, "rho", np.ones(3), "trbp: rho must have shape (7,) with finite entries in (0, inf)"),
    (trbp, "rho", "uniform", "trbp: rho must be None or an array"),
    (mean_field, "random_state", -1, "mean_field: random_state must be"),
    (bp, "rho", np.ones(7), "bp got unknown option(s) rho; it accepts damping"),
    (mean_field, "damping", 0.5, "mean_field got unknown option(s) damping"),
])
def test_method_specific_options_are_validated(method, option, value, match):
    with pytest.raises(InvalidInputError) as info:
        method(_small_loopy(), **{option: value})
    assert match in str(info.value)


@pytest.mark.parametrize("method", [trbp, bp, mean_field])
def test_a_model_that_is_not_an_mrf_is_refused(method):
    with pytest.raises(InvalidInputError, match="needs a PairwiseMRF"):
        method("model.uai")


def test_every_option_needs_a_declared_check():
    with pytest.raises(TypeError, match=r"no check declared for option.*budget"):
        @inference_method("sloppy", tol=positive)
        def sloppy(mrf, tol=1.0, budget=3):
            pass


@pytest.mark.parametrize("method", [trbp, bp, mean_field])
def test_message_passing_says_why_it_stopped(method):
    mrf = _small_loopy()
    done = method(mrf)
    assert done.status == "converged" and done.converged and done.residual < 1e-8
    assert done.iterations == len(done.trace) and done.residual == done.trace[-1]["change"]
    short = method(mrf, max_iter=2, tol=0.0)
    assert (short.status, short.converged, short.iterations) == ("max_iter", False, 2)
    assert short.residual == short.trace[-1]["change"] > 0
    late = method(mrf, time_limit=1e-9, tol=0.0)
    assert (late.status, late.converged, late.iterations) == ("time_limit", False, 1)


@needs_data("uai")
def test_trbp_and_bp_report_non_convergence_on_grids_12():
    """The issue's case: both stopped at their 1000 sweeps with log Z 908 / 824 (exact 698) and said nothing."""
    mrf = read_uai(SHARED_DATA / "uai" / "Grids_12.uai")
    for method, least_change in ((trbp, 1e-6), (bp, 0.1)):
        result = method(mrf)
        assert (result.status, result.converged, result.iterations) == ("max_iter", False, 1000)
        assert result.residual > least_change  # bp oscillates; trbp creeps (1.5e-4 after 1000 sweeps)


def _interrupt_at(monkeypatch, name: str, call: int) -> None:
    """Make ``baselines.<name>`` run normally, then raise KeyboardInterrupt once it returns for the ``call``-th time.

    That is where Ctrl-C lands: the numba sweep cannot be interrupted, Python raises after it returns.
    """
    real = getattr(baselines, name)
    calls = []

    def sweep(*args):
        change = real(*args)
        calls.append(change)
        if len(calls) == call:
            raise KeyboardInterrupt
        return change

    monkeypatch.setattr(baselines, name, sweep)


@pytest.mark.parametrize(("method", "kernel"), [(trbp, "_sweep"), (bp, "_sweep"), (mean_field, "_mean_field_sweep")])
def test_ctrl_c_hands_back_the_last_sweeps_beliefs(monkeypatch, method, kernel):
    mrf = ising_grid(3, 3, 3.0, np.random.default_rng(2))
    _interrupt_at(monkeypatch, kernel, 3)
    with pytest.raises(InferenceInterrupted) as info:
        method(mrf, tol=0.0, max_iter=50)
    assert isinstance(info.value, KeyboardInterrupt)  # code that does not look for the result still stops
    result = info.value.result
    assert (result.status, result.converged, result.iterations) == ("interrupted", False, 2)
    assert math.isfinite(result.log_z) and len(result.marginals) == mrf.n_nodes
    for m in result.marginals:
        assert m.min() >= 0 and m.sum() == pytest.approx(1.0)


def test_infer_refuses_unknown_methods_options_and_models():
    mrf = _small_loopy()
    with pytest.raises(InvalidInputError, match="unknown method 'lbp'"):
        infer(mrf, "lbp")
    with pytest.raises(InvalidInputError, match=r"'exact' does not take option\(s\) time_limit; it takes method"):
        infer(mrf, "exact", time_limit=5.0)
    with pytest.raises(InvalidInputError, match=r"method 'bp' does not take option\(s\) rho"):
        infer("no-such-file.uai", "bp", rho=None)  # refused before the file is read
    with pytest.raises(InvalidInputError, match="model must be a PairwiseMRF or the path"):
        infer(42, "bp")
    with pytest.raises(InvalidInputError, match=r"^trbp: tol must be a finite number >= 0"):
        infer(mrf, "trbp", tol=-1.0)


# ---------------------------------------------------------------------- UAI files
UAI_TEXT = """MARKOV
3
2 3 2
5
1 0
2 0 1
2 2 1
0
1 2

2
0.5 1.5

6
1 2 3 4 5 6

6
0.1 0.2 0.3 0.4 0.5 0.6

1
2.0

2
1.0 3.0
"""


def test_read_uai_builds_the_model(tmp_path):
    path = tmp_path / "m.uai"
    path.write_text(UAI_TEXT)
    mrf = read_uai(path)
    assert mrf.cards.tolist() == [2, 3, 2] and mrf.edges.tolist() == [[0, 1], [1, 2]]
    np.testing.assert_allclose(mrf.unary(0), np.log([0.5, 1.5]))
    np.testing.assert_allclose(mrf.unary(2), np.log([1.0, 3.0]))
    np.testing.assert_allclose(mrf.pairwise(0), np.log(np.arange(1, 7).reshape(2, 3)))
    # factor over (2, 1): 2 rows (x2) by 3 columns (x1), stored transposed as (x1, x2)
    np.testing.assert_allclose(mrf.pairwise(1), np.log(np.arange(1, 7).reshape(2, 3) / 10).T)
    assert mrf.constant == pytest.approx(math.log(2.0))
    # Z by direct product of the factors
    z = 0.0
    for x0, x1, x2 in itertools.product(range(2), range(3), range(2)):
        z += [0.5, 1.5][x0] * (np.arange(1, 7).reshape(2, 3)[x0, x1]) * (np.arange(1, 7).reshape(2, 3)[x2, x1] / 10) \
            * 2.0 * [1.0, 3.0][x2]
    assert exact_inference(mrf).log_z == pytest.approx(math.log(z))


@pytest.mark.parametrize("text, error, match", [
    ("", InvalidInputError, "ends early"),
    ("BAYESIAN\n1\n2\n0\n", InvalidInputError, "header"),
    ("MARKOV\n2\n2 2\n1\n2 0 5\n", InvalidInputError, "variable 5"),
    ("MARKOV\n2\n2 x\n", InvalidInputError, "integer"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n3\n1 1 1\n", InvalidInputError, "3 entries, expected 4"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n4\n1 1 -1 1\n", InvalidInputError, "negative"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n4\n1 1 a 1\n", InvalidInputError, "non-numeric"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n4\n1 1 1 1 7\n", InvalidInputError, "unexpected tokens"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n4\n1 1\n", InvalidInputError, "ends early"),
    ("MARKOV\n2\n2 2\n1\n2 1 1\n", InvalidInputError, "repeats"),
    ("MARKOV\n3\n2 2 2\n1\n3 0 1 2\n", NotSupportedError, "3 variables"),
])
def test_read_uai_errors_are_clear(tmp_path, text, error, match):
    path = tmp_path / "bad.uai"
    path.write_text(text)
    with pytest.raises(error, match=match) as info:
        read_uai(path)
    assert isinstance(info.value, StructoptError)
    assert str(path) in str(info.value)


def test_read_uai_missing_file(tmp_path):
    with pytest.raises(InvalidInputError, match="no such file"):
        read_uai(tmp_path / "nothing.uai")


def test_pr_is_log10_and_mar_round_trips(tmp_path):
    (tmp_path / "a.PR").write_text("PR\n2.0\n")
    assert read_pr(tmp_path / "a.PR") == pytest.approx(2.0 * math.log(10.0))
    marginals = [np.array([0.25, 0.75]), np.array([0.1, 0.2, 0.7])]
    write_mar(tmp_path / "a.MAR", marginals)
    for a, b in zip(read_mar(tmp_path / "a.MAR"), marginals):
        np.testing.assert_allclose(a, b)
    (tmp_path / "b.MAR").write_text("MAR\n2 2 0.5 0.5\n")
    with pytest.raises(InvalidInputError, match="ends early"):
        read_mar(tmp_path / "b.MAR")
