"""Every reported duality gap is a certificate: ``dual <= F* <= primal`` under every option.

``F*`` is the exact optimum of the n-slack SSVM primal (the QP over enumerated outputs, solved by
Clarabel: ``_reference.exact_primal``), so a reported dual above it, or a primal below it, is a
wrong certificate whatever the method's convergence. Swept: every gap-reporting solver
(``bcfw``, ``frank_wolfe``, ``dual_extragradient``) over its trajectory options, on multiclass,
chain (the fused paths), matching and binary-grid problems (the grid's pairwise weights are
constrained >= 0, the cone-constrained dual). Checked at every trace record: ``dual``
(and BCFW's ``dual_iterate``) ``<= F* + tol``, ``primal >= F* - tol``, ``gap >= -tol`` and
``gap = primal - dual``.

BCFW's options for expensive oracles (``sampling="gap"``, ``cache_size``, ``steps="pairwise"``/``"away"``)
are swept with the paper's cache-hit rule and with an eager one (most steps on cached corners): the
gaps that choose blocks and corners are stale estimates, the reported one comes from an exact pass.
Gap sampling alone runs on the fused chain pass (and is swept with ``fused=False`` too).

Found this way: mini-batch BCFW without line search took the step ``2 n tau / (tau k + 2 n)`` > 1
for its first ``2n (1 - 1/tau)`` calls, which carried blocks out of their simplices (dual 1.26
above F* = 0.917 on a multiclass problem).

The default part sweeps every option on two problems and a sample on a constrained grid;
``-m slow`` sweeps every option on four random problems of each kind and prints the counts
(``pytest -m slow -s``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from _reference import exact_primal, random_chain_problem, random_multiclass_problem
from test_grid_model import small_problem as grid_problem

from structopt.errors import NotSupportedError
from structopt.losses import MatchingHamming
from structopt.models.matching import MatchingModel
from structopt.problem import SSVMProblem
from structopt.solvers import bcfw, dual_extragradient, frank_wolfe

TOL = 1e-7  # absolute, on objectives of order 0.1-1 (Clarabel solves to 1e-10; chain projections to 1e-8)


# --------------------------------------------------------------------------- problems
def matching_problem(seed: int, n: int = 4, lam: float = 0.05) -> SSVMProblem:
    """Small partial matchings (at most 3 x 3) with asymmetric Hamming loss, labels from a planted model."""
    rng = np.random.default_rng(seed)
    model = MatchingModel(n_features=3, allow_unmatched=True)
    w_true = rng.normal(size=model.n_params)
    X = [rng.normal(size=(int(rng.integers(1, 4)), int(rng.integers(1, 4)), 3)) for _ in range(n)]
    Y = []
    for x in X:
        theta = model.potentials(x, w_true)
        noisy = type(theta)(theta[0] + 0.5 * rng.normal(size=np.shape(theta[0])), *theta[1:])
        Y.append(model.structure.argmax(noisy))
    return SSVMProblem(model, X, Y, MatchingHamming(1, 3), lam)


#: kind -> builder from a seed; lam small enough that the optimum is far from w = 0, or large
KINDS: dict[str, Callable[[int], SSVMProblem]] = {
    "multiclass-3": lambda seed: random_multiclass_problem(seed, n=10, n_classes=3, lam=0.05),
    "multiclass-5": lambda seed: random_multiclass_problem(seed, n=7, n_classes=5, lam=0.01, noise=1.0),
    # strong regularisation: an overshooting step gains more loss than it pays in lam/2 ||w||^2
    "multiclass-3-strong": lambda seed: random_multiclass_problem(seed, n=10, n_classes=3, lam=1.0, noise=1.0),
    "chain-3-strong": lambda seed: random_chain_problem(seed, n=6, n_states=3, max_len=3, lam=1.0, noise=1.0),
    "chain-2": lambda seed: random_chain_problem(seed, n=6, n_states=2, max_len=4, lam=0.05),
    "chain-3": lambda seed: random_chain_problem(seed, n=5, n_states=3, max_len=3, lam=0.02),
    "matching": lambda seed: matching_problem(seed),
    "grid-constrained": lambda seed: grid_problem(np.random.default_rng(seed), n=4, lam=0.05),
}
SLOW_SEEDS = (0, 1, 2, 3)
#: name "kind/seed" -> builder
PROBLEMS: dict[str, Callable[[], SSVMProblem]] = {
    f"{kind}/{seed}": (lambda build=build, seed=seed: build(seed))
    for kind, build in KINDS.items() for seed in SLOW_SEEDS}
DEFAULT_PROBLEMS = ("multiclass-3-strong/0", "chain-2/0")


_cache: dict[str, tuple[SSVMProblem, float]] = {}


def problem_and_optimum(name: str) -> tuple[SSVMProblem, float]:
    if name not in _cache:
        problem = PROBLEMS[name]()
        _cache[name] = (problem, exact_primal(problem)[0])
    return _cache[name]


# --------------------------------------------------------------------------- option sweeps
def grid(**axes) -> Iterator[dict]:
    keys = list(axes)
    for values in itertools.product(*(axes[k] for k in keys)):
        yield dict(zip(keys, values, strict=True))


def bcfw_runs(full: bool) -> Iterator[tuple[Callable, dict]]:
    for options in grid(batch_size=(1, 2, 3, 5, 64) if full else (1, 3), line_search=(True, False),
                        averaging=("weighted", "none"), sampling=("perm", "uniform") if full else ("perm",),
                        fused=(None, False) if full else (None,)):
        if options["batch_size"] > 1 and options["fused"] is False:
            continue  # mini-batches have no fused path: the same run as fused=None
        yield bcfw, {"max_passes": 4 if full else 3, "eval_every": 0.25, **options}


def gap_bcfw_runs(full: bool) -> Iterator[tuple[Callable, dict]]:
    """BCFW's options for expensive oracles (gap sampling, corner caches, pairwise / away steps)."""
    for options in grid(sampling=("perm", "uniform", "gap") if full else ("gap",), cache_size=(0, 1, 3),
                        steps=("fw", "pairwise", "away"), averaging=("weighted", "none"),
                        hits=("paper", "eager") if full else ("eager",)):
        hits = options.pop("hits")
        if options["sampling"] != "gap" and options["cache_size"] == 0 and options["steps"] == "fw":
            continue  # plain BCFW, swept above
        if options["cache_size"] == 0 and hits == "eager":
            continue  # no cache, no hits: the same run
        if hits == "eager":  # accept almost any cached corner: the most steps without the oracle
            options.update(cache_factor=0.01, cache_nu=0.001)
        yield bcfw, {"max_passes": 4 if full else 3, "eval_every": 0.5, **options}
        if options["cache_size"] == 0 and options["steps"] == "fw":  # gap sampling alone: fused where possible
            yield bcfw, {"max_passes": 4 if full else 3, "eval_every": 0.5, **options, "fused": False}
    for sampling in ("perm", "gap") if full else ("gap",):  # the fixed step over cached corners
        yield bcfw, {"max_passes": 3, "eval_every": 0.5, "sampling": sampling, "cache_size": 3, "line_search": False}
    for fused in (None, False):  # gap sampling alone with the fixed step (the fused pass on chains)
        yield bcfw, {"max_passes": 3, "eval_every": 0.5, "sampling": "gap", "line_search": False, "fused": fused}


def frank_wolfe_runs(full: bool) -> Iterator[tuple[Callable, dict]]:
    for options in grid(line_search=(True, False), fused=(None, False) if full else (None,)):
        yield frank_wolfe, {"max_passes": 6, **options}


def extragradient_runs(full: bool) -> Iterator[tuple[Callable, dict]]:
    paths = ({}, {"fused": False}, {"fused": False, "memory_light": True}) if full else ({},)
    for options, path in itertools.product(
            grid(geometry=("euclidean", "entropic"), backtracking=(True, False), w_block=("saddle", "exact"),
                 centre=("gold", "uniform") if full else ("gold",)), paths):
        yield dual_extragradient, {"max_passes": 6 if full else 4, **options, **path}
    if full:  # steps far from 1/L (no backtracking: the certificate must hold along any trajectory)
        for geometry, step, z_weight in itertools.product(("euclidean", "entropic"), (0.05, 0.5), (None, 0.1)):
            yield dual_extragradient, {"max_passes": 6, "geometry": geometry, "backtracking": False, "step": step,
                                       "z_weight": z_weight}


def all_runs(full: bool) -> list[tuple[Callable, dict]]:
    return [*bcfw_runs(full), *gap_bcfw_runs(full), *frank_wolfe_runs(full), *extragradient_runs(full)]


# --------------------------------------------------------------------------- the check
def invalid_records(trace: list[dict], optimum: float, tol: float = TOL) -> list[str]:
    """What is wrong with each record's certificate, as readable strings."""
    bad = []
    for r in trace:
        where = f"passes {r['passes']:g}"
        if r["primal"] < optimum - tol:
            bad.append(f"{where}: primal {r['primal']:.10g} < F* {optimum:.10g}")
        for key in ("dual", "dual_iterate"):
            if key in r and r[key] > optimum + tol:
                bad.append(f"{where}: {key} {r[key]:.10g} > F* {optimum:.10g}")
        if "gap" in r:
            if r["gap"] < -tol:
                bad.append(f"{where}: gap {r['gap']:.3g} < 0")
            if abs(r["gap"] - (r["primal"] - r["dual"])) > 1e-12 * max(1.0, abs(r["primal"])):
                bad.append(f"{where}: gap {r['gap']:.10g} != primal - dual")
    return bad


def sweep(problem_names: tuple[str, ...], runs: list[tuple[Callable, dict]]) -> dict:
    """Run every (solver, options) on every problem; count runs, records and invalid certificates."""
    counts = {"runs": 0, "skipped": 0, "records": 0, "invalid_runs": 0, "invalid_records": 0, "failures": []}
    for name in problem_names:
        problem, optimum = problem_and_optimum(name)
        for run, options in runs:
            try:
                result = run(problem, random_state=0, **options)
            except NotSupportedError:  # e.g. the entropic geometry without marginals (matchings, grids)
                counts["skipped"] += 1
                continue
            counts["runs"] += 1
            counts["records"] += len(result.trace)
            bad = invalid_records(result.trace, optimum)
            if bad:
                counts["invalid_runs"] += 1
                counts["invalid_records"] += len(bad)
                counts["failures"].append(f"{name} {run.solver_name} {options}: {bad[0]}")
    return counts


def report(counts: dict) -> str:
    head = (f"{counts['runs']} runs ({counts['skipped']} skipped: not supported), {counts['records']} records, "
            f"{counts['invalid_runs']} runs with {counts['invalid_records']} invalid certificates")
    return "\n".join([head, *counts["failures"][:20]])


# --------------------------------------------------------------------------- tests
def test_exact_optimum_is_below_every_primal_and_above_a_long_bcfw_dual():
    # the reference itself: a long BCFW run brackets F* from both sides
    problem, optimum = problem_and_optimum("multiclass-3/0")
    result = bcfw(problem, max_passes=100, averaging="none", random_state=0)
    last = result.trace[-1]
    assert last["dual"] - 1e-9 <= optimum <= last["primal"] + 1e-9
    assert last["gap"] < 0.05 * optimum  # the bracket is tight: the exact optimum is the right one


@pytest.mark.parametrize("name", DEFAULT_PROBLEMS)
def test_gaps_are_certificates_under_every_option(name):
    counts = sweep((name,), all_runs(full=True))
    assert counts["runs"] > 0
    assert counts["invalid_runs"] == 0, report(counts)


def test_constrained_gaps_are_certificates_on_a_sample_of_options():
    counts = sweep(("grid-constrained/0",), all_runs(full=False))
    assert counts["runs"] > 0
    assert counts["invalid_runs"] == 0, report(counts)


def test_minibatch_fixed_step_stays_in_the_simplex():
    # the reported case: tau > 1 without line search, checked from the first records on
    problem, optimum = problem_and_optimum("multiclass-3-strong/1")
    for tau in (2, 4, 10):
        result = bcfw(problem, batch_size=tau, line_search=False, max_passes=2, eval_every=0.2,
                      averaging="none", random_state=0)
        assert not invalid_records(result.trace, optimum), (tau, invalid_records(result.trace, optimum))
        state = result.info["state"]
        assert np.all(state.ell_i >= -1e-12)  # loss shares of convex combinations of outputs


@pytest.mark.slow
def test_gaps_are_certificates_under_every_option_on_every_problem():
    counts = sweep(tuple(PROBLEMS), all_runs(full=True))
    print(f"\ncertificate sweep over {len(PROBLEMS)} problems: {report(counts)}")
    assert counts["invalid_runs"] == 0, report(counts)
