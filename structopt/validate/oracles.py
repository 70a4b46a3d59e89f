"""One check per oracle, listed in :data:`ORACLE_CHECKS`, which :func:`check_structure` runs in order.

A check takes the :class:`Case` (the instance, its brute-force :class:`Reference` and the
tolerances) and returns ``(agrees_enumeration, agrees_lp, seconds, detail)``; ``None`` for a
comparison means "not checked". A check raising :class:`~structopt.errors.NotSupportedError` is
reported as skipped. Adding an oracle to the validation is one function and one table entry.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.registry import Registry
from structopt.smoothing import logsumexp
from structopt.structures.backends import project_hull
from structopt.structures.base import Potentials, Structure, flatten, inner, random_like, unflatten

#: what a check returns: agreement with enumeration, with the LP description, seconds, detail
Outcome = tuple[bool | None, bool | None, float, str]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def gap(a: Any, b: Any) -> float:
    """Largest absolute difference, treating equal infinities as equal (inf when the shapes differ)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return np.inf
    if a.size == 0:
        return 0.0
    same_inf = np.isinf(a) & (a == b)
    diff = np.where(same_inf, 0.0, np.abs(np.where(same_inf, 0.0, a) - np.where(same_inf, 0.0, b)))
    return float(np.max(diff)) if not np.any(np.isnan(diff)) else np.inf


def _stats_score(full: np.ndarray, stats: np.ndarray) -> float:
    """``<theta, stats>`` over the statistics' non-zero entries (a -inf potential times 0 counts as 0)."""
    used = stats != 0
    return float(np.sum(full[used] * stats[used]))


class Reference:
    """Brute-force quantities of one instance, computed once."""

    def __init__(self, structure: Structure, theta: Potentials, max_outputs: int):
        outs = list(itertools.islice(structure.outputs(theta), max_outputs + 1))
        if len(outs) > max_outputs:
            raise InvalidInputError(f"instance has more than {max_outputs} outputs: too large to enumerate")
        if not outs:
            raise InvalidInputError("instance has no outputs")
        self.outputs = outs
        self.stats = [structure.stats(y, theta) for y in outs]
        self.flat = np.array([flatten(m) for m in self.stats])
        # scores in the full layout: compact potentials (a plain (L, R) matching array, a chain's shared
        # transitions) need not broadcast against the statistics
        full = flatten(structure.expand(theta))
        self.scores = np.array([_stats_score(full, row) for row in self.flat])
        self.best = float(np.max(self.scores))
        self.order = np.argsort(-self.scores, kind="stable")
        #: every output has score -inf (its -inf potentials forbid them all): every oracle must refuse
        self.infeasible = self.best == -np.inf
        self.feasible_order = self.order[np.isfinite(self.scores[self.order])]


@dataclass
class Case:
    """One instance under check: the structure, its potentials, the reference and the tolerances."""

    structure: Structure
    theta: Potentials
    ref: Reference
    k: int
    rtol: float
    qp_atol: float
    rng: np.random.Generator
    #: the LP optimum, set by the ``lp_relaxation`` check (run first) for the checks after it
    lp_value: float | None = None

    @property
    def atol(self) -> float:
        """Absolute tolerance on scores: ``rtol * (1 + max |finite score|)``."""
        finite = self.ref.scores[np.isfinite(self.ref.scores)]
        return self.rtol * (1.0 + float(np.max(np.abs(finite), initial=0.0)))

    def lp_agrees(self, value: float) -> bool | None:
        """Whether ``value`` equals the LP optimum (None when the LP row did not produce one)."""
        return None if self.lp_value is None else abs(value - self.lp_value) <= max(self.atol, self.qp_atol)

    def violation(self, z: np.ndarray) -> float:
        """Largest violation of the instance's polytope description at the flat point ``z``."""
        return self.structure.polytope(self.theta).violation(z)


@dataclass(frozen=True)
class OracleCheck:
    """A row of :func:`check_structure`: the oracle's name and its check.

    ``on_theta``: the check calls the oracle on the instance's own potentials, so it must refuse
    (raise :class:`InvalidInputError`) when they forbid every output.
    """

    oracle: str
    run: Callable[[Case], Outcome]
    on_theta: bool = True


#: the rows of :func:`check_structure`, in declaration order (``lp_relaxation`` first: later rows compare with
#: it), each declared by :func:`oracle_check` on its function below
ORACLE_CHECKS: Registry[OracleCheck] = Registry("oracle check")


CheckFunction = Callable[[Case], Outcome]


def oracle_check(oracle: str, *, on_theta: bool = True) -> Callable[[CheckFunction], CheckFunction]:
    """Decorator declaring the check of ``oracle`` (a row of :func:`check_structure`, after those declared before)."""
    def declare(run: CheckFunction) -> CheckFunction:
        ORACLE_CHECKS.add(oracle, OracleCheck(oracle, run, on_theta))
        return run
    return declare


# --------------------------------------------------------------------------- the checks
@oracle_check("lp_relaxation")
def check_lp_relaxation(case: Case) -> Outcome:
    """Its value equals the max score; its solution is the statistics of the best output when unique."""
    ref = case.ref
    (value, z), seconds = timed(lambda: case.structure.lp_relaxation(case.theta))
    case.lp_value = float(value)
    value_gap = abs(case.lp_value - ref.best)
    unique = int(np.sum(ref.scores >= ref.best - case.atol)) == 1
    detail = f"|LP - max| = {value_gap:.1e}"
    integral = None
    if unique:
        int_gap = gap(flatten(z), ref.flat[ref.order[0]])
        integral = int_gap <= case.qp_atol
        detail += f", |z - stats(best)| = {int_gap:.1e}"
    else:
        detail += ", max not unique: integrality not checked"
    enum_ok = value_gap <= max(case.atol, case.qp_atol) and integral is not False
    return enum_ok, None, seconds, detail


@oracle_check("argmax")
def check_argmax(case: Case) -> Outcome:
    """Its score equals the brute-force max and the LP optimum."""
    structure, theta = case.structure, case.theta
    y, seconds = timed(lambda: structure.argmax(theta))
    y = structure.validate_output(y, theta)
    value = structure.score(theta, y)
    diff = abs(value - case.ref.best)
    return diff <= case.atol, case.lp_agrees(value), seconds, f"score {value:g} vs max {case.ref.best:g}"


@oracle_check("topk")
def check_topk(case: Case) -> Outcome:
    """Scores equal the sorted brute-force scores, each output scores as reported, outputs are distinct;
    the first equals the LP optimum."""
    structure, theta, ref, atol = case.structure, case.theta, case.ref, case.atol
    (outs, scores), seconds = timed(lambda: structure.topk(theta, case.k))
    scores = np.asarray(scores, dtype=float)
    outs = [structure.validate_output(y, theta) for y in outs]
    expected = ref.scores[ref.feasible_order[:case.k]]  # outputs of score -inf do not exist
    problems = []
    if len(outs) != len(expected) or scores.shape != expected.shape:
        problems.append(f"returned {len(outs)} outputs / {scores.size} scores, expected {len(expected)}")
    else:
        if gap(scores, expected) > atol:
            problems.append(f"scores off sorted brute force by {gap(scores, expected):.1e}")
        own = np.array([structure.score(theta, y) for y in outs])
        if gap(own, scores) > atol:
            problems.append(f"reported scores off the outputs' scores by {gap(own, scores):.1e}")
        keys = {flatten(structure.stats(y, theta)).tobytes() for y in outs}
        if len(keys) != len(outs):
            problems.append(f"{len(outs) - len(keys)} duplicate outputs")
    lp_ok = case.lp_agrees(float(scores[0])) if scores.size else False
    detail = "; ".join(problems) or f"{len(outs)} outputs (k={case.k}) match"
    return not problems, lp_ok, seconds, detail


@oracle_check("marginals")
def check_marginals(case: Case) -> Outcome:
    """log Z and the marginals equal the Gibbs sums; the marginals satisfy the polytope's constraints."""
    ref, rtol = case.ref, case.rtol
    (log_z, marg), seconds = timed(lambda: case.structure.marginals(case.theta))
    bf_log_z = logsumexp(ref.scores)
    bf_marg = np.exp(ref.scores - bf_log_z) @ ref.flat
    z_gap = abs(float(log_z) - bf_log_z)
    m_gap = gap(flatten(marg), bf_marg)
    enum_ok = z_gap <= case.atol and m_gap <= max(rtol, 1e-12)
    detail = f"|log Z - bf| = {z_gap:.1e}, |marginals - bf| = {m_gap:.1e}"
    try:
        infeasible = case.violation(flatten(marg))
    except NotSupportedError:  # no linear description (e.g. boxes): feasibility not checked
        return enum_ok, None, seconds, detail + ", no polytope: feasibility not checked"
    return enum_ok, infeasible <= max(rtol, 1e-9), seconds, detail + f", infeasibility {infeasible:.1e}"


@oracle_check("max_marginals")
def check_max_marginals(case: Case) -> Outcome:
    """Equal the best score among outputs having each node indicator (the first statistics field);
    the best entry never exceeds the LP optimum and equals it when a maximiser sets a node indicator."""
    ref, atol, lp_value = case.ref, case.atol, case.lp_value
    mm, seconds = timed(lambda: case.structure.max_marginals(case.theta))
    mm = np.asarray(mm, dtype=float)
    node_shape = np.shape(ref.stats[0][0])
    indicators = np.array([np.asarray(m[0], dtype=float).ravel() for m in ref.stats]).reshape(len(ref.stats), -1)
    indicators = indicators > 0.5
    # Max-marginals only range over outputs that set some node indicator (a partial matching's
    # empty matching sets none), so their max is the best score among those outputs: it never
    # exceeds the LP optimum and equals it only when such an output is a maximiser.
    with_node = indicators.any(axis=1)
    best_with = float(np.max(ref.scores[with_node])) if with_node.any() else -np.inf
    lp_ok, lp_detail = None, ""
    if mm.size and lp_value is not None:
        top = float(np.max(mm))
        tol = max(atol, case.qp_atol)
        lp_ok = top <= lp_value + tol
        if best_with >= ref.best - atol:
            lp_ok = lp_ok and abs(top - lp_value) <= tol
            lp_detail = f"max {top:g} vs LP {lp_value:g}"
        else:
            lp_detail = (f"max {top:g} <= LP {lp_value:g} (equality not implied: an output without "
                         "node indicators scores best)")
    if mm.shape != node_shape:
        return None, lp_ok, seconds, (f"shape {mm.shape} is not the node-indicator shape {node_shape}: "
                                      f"not compared; {lp_detail}")
    masked = np.where(indicators, ref.scores[:, None], -np.inf)
    bf = masked.max(axis=0).reshape(node_shape)
    diff = gap(mm, bf)  # entrywise, so max(mm) == best_with is covered
    detail = f"|max-marginals - bf| = {diff:.1e}" + (f", {lp_detail}" if lp_detail else "")
    return diff <= atol, lp_ok, seconds, detail


@oracle_check("project", on_theta=False)
def check_project(case: Case) -> Outcome:
    """The projection p of a random point v equals the projection onto the hull of the enumerated
    vertices and satisfies the variational inequality against each; LP column: p equals the
    min-norm-point projection driven by the structure's own argmax, with its certificate, and is
    feasible for the polytope's description."""
    structure, theta, ref, qp_atol = case.structure, case.theta, case.ref, case.qp_atol
    template = structure.expand(theta)
    v = unflatten(case.rng.normal(scale=1.0, size=ref.flat.shape[1]), template)
    p, seconds = timed(lambda: structure.project(v))
    p_flat, v_flat = flatten(p), flatten(v)
    # enumeration: the projection onto the hull of the enumerated vertices (min-norm point over that
    # list, no structure oracle involved), and <v - p, m - p> <= 0 for every vertex m
    reference, _ = project_hull(v_flat, lambda d: ref.flat[int(np.argmax(ref.flat @ d))], tol=1e-14)
    ref_gap = gap(p_flat, reference)
    violation = float(np.max(ref.flat @ (v_flat - p_flat) - (v_flat - p_flat) @ p_flat))
    enum_ok = violation <= qp_atol and ref_gap <= qp_atol

    # the structure's own argmax oracle: the min-norm-point projection it drives (membership in the
    # hull, which an outer description cannot certify) and the certificate <v - p, s - p> <= 0 with
    # s = argmax(v - p); plus feasibility for the polytope's description
    def linear_oracle(d: np.ndarray) -> np.ndarray:
        return flatten(structure.stats(structure.argmax(unflatten(d, template)), theta))

    by_oracle, _ = project_hull(v_flat, linear_oracle, tol=1e-14)
    oracle_gap = gap(p_flat, by_oracle)
    certificate = float((v_flat - p_flat) @ (linear_oracle(v_flat - p_flat) - p_flat))
    infeasible = case.violation(p_flat)
    detail = (f"|p - hull reference| = {ref_gap:.1e}, vertex optimality violation {violation:.1e}, "
              f"|p - projection by argmax oracle| = {oracle_gap:.1e}, certificate {certificate:.1e}, "
              f"infeasibility {infeasible:.1e}")
    lp_ok = oracle_gap <= qp_atol and certificate <= qp_atol and infeasible <= qp_atol
    return enum_ok, lp_ok, seconds, detail


@oracle_check("prox_entropy", on_theta=False)
def check_prox_entropy(case: Case) -> Outcome:
    """With ``mu`` the marginals of random potentials ``theta0``, equals the marginals of the Gibbs
    distribution of ``theta0 + eta * step`` by enumeration."""
    structure, ref, rng = case.structure, case.ref, case.rng
    theta0 = random_like(structure.expand(case.theta), rng)
    eta = float(rng.uniform(0.1, 2.0))
    step = random_like(structure.expand(case.theta), rng)
    _, mu = structure.marginals(theta0)
    out, seconds = timed(lambda: structure.prox_entropy(mu, step, eta))
    logits = np.array([inner(theta0, m) + eta * inner(step, m) for m in ref.stats])
    bf = np.exp(logits - logsumexp(logits)) @ ref.flat
    diff = gap(flatten(out), bf)
    return diff <= max(case.rtol, 1e-9) * 10, None, seconds, f"|prox - bf| = {diff:.1e} (eta={eta:.2f})"
