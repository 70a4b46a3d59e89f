"""Check a structure's oracles against enumeration and against its LP description.

:func:`check_structure` runs every oracle of a structure on one small instance and compares it
with brute force over :meth:`Structure.enumerate` and with the linear description of the marginal
polytope (:meth:`Structure.polytope`, solved by :meth:`Structure.lp_relaxation`). It only uses the
:class:`~structopt.structures.base.Structure` interface, so it serves built-in and user-declared
structures alike. :func:`check_model` checks a model's linear map against its adjoint and layouts.

:func:`check_builtin_structures` runs it on random small instances of every built-in structure
(``structopt check``) and aggregates the outcome into one row per (structure, oracle).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.smoothing import logsumexp
from structopt.structures._minnorm import project_hull
from structopt.structures.base import Potentials, Structure, flatten, inner, unflatten

#: names accepted by :func:`random_instance` and :func:`check_builtin_structures`
BUILTIN_STRUCTURES = ("chain", "multiclass", "matching", "grid", "box", "lp", "tree")


# --------------------------------------------------------------------------- report
@dataclass
class CheckRow:
    """Outcome of one oracle.

    Attributes
    ----------
    oracle : str
        Oracle name (``argmax``, ``topk``, ``marginals``, ...).
    agrees_enumeration : bool or None
        Whether the oracle agrees with brute force over all outputs (None: not checked).
    agrees_lp : bool or None
        Whether it agrees with the polytope's linear description (None: not checked).
    seconds : float
        Wall time of the oracle call itself (references excluded).
    detail : str
        Worst deviation found, or why the oracle was skipped.
    """

    oracle: str
    agrees_enumeration: bool | None
    agrees_lp: bool | None
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        """No comparison failed (skipped comparisons count as passed)."""
        return self.agrees_enumeration is not False and self.agrees_lp is not False


@dataclass
class CheckReport:
    """Rows of :func:`check_structure`, one per oracle."""

    structure: str
    n_outputs: int
    rows: list[CheckRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no comparison failed."""
        return all(row.ok for row in self.rows)

    def row(self, oracle: str) -> CheckRow:
        """The row of one oracle (KeyError when absent)."""
        for r in self.rows:
            if r.oracle == oracle:
                return r
        raise KeyError(oracle)

    def failures(self) -> list[CheckRow]:
        """Rows where a comparison failed."""
        return [r for r in self.rows if not r.ok]

    def table(self) -> str:
        """A plain-text table of the rows."""
        def mark(flag: bool | None) -> str:
            return "-" if flag is None else ("yes" if flag else "NO")

        header = ("oracle", "enumeration", "LP", "seconds", "detail")
        body = [(r.oracle, mark(r.agrees_enumeration), mark(r.agrees_lp), f"{r.seconds:.2e}", r.detail)
                for r in self.rows]
        widths = [max(len(str(line[j])) for line in [header, *body]) for j in range(4)]
        lines = [f"{self.structure}: {self.n_outputs} outputs, {'OK' if self.ok else 'FAILED'}"]
        for line in [header, *body]:
            lines.append("  ".join(str(v).ljust(w) for v, w in zip(line[:4], widths)) + "  " + line[4])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------- helpers
def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _gap(a: Any, b: Any) -> float:
    """Largest absolute difference, treating equal infinities as equal."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return np.inf
    if a.size == 0:
        return 0.0
    same_inf = np.isinf(a) & (a == b)
    diff = np.where(same_inf, 0.0, np.abs(np.where(same_inf, 0.0, a) - np.where(same_inf, 0.0, b)))
    return float(np.max(diff)) if not np.any(np.isnan(diff)) else np.inf


def _infeasibility(structure: Structure, theta: Potentials, z: np.ndarray) -> float:
    """Largest violation of the polytope's constraints (and of 0 <= z <= 1) at flat point ``z``."""
    poly = structure.polytope(theta)
    worst = max(0.0, float(np.max(-z, initial=0.0)), float(np.max(z - 1.0, initial=0.0)))
    if poly.A_eq is not None:
        worst = max(worst, float(np.max(np.abs(poly.A_eq @ z - poly.b_eq), initial=0.0)))
    if poly.A_ub is not None:
        worst = max(worst, float(np.max(poly.A_ub @ z - poly.b_ub, initial=0.0)))
    return worst


def random_like(like: Potentials, rng: np.random.Generator, integer: bool = False,
                low: float = -3.0, high: float = 3.0) -> Potentials:
    """Random potentials with the fields' shapes of ``like``.

    Parameters
    ----------
    integer : bool
        Draw integers in ``[low, high]`` (many ties), else uniform floats.
    """
    fields = []
    for x in like:
        shape = np.shape(x)
        if integer:
            fields.append(rng.integers(int(low), int(high) + 1, size=shape).astype(float))
        else:
            fields.append(rng.uniform(low, high, size=shape))
    return type(like)(*fields)


def random_instance(structure_name: str, rng: np.random.Generator | int | None = None, *,
                    integer: bool = True, **size: Any) -> tuple[Structure, Potentials]:
    """A random small instance of a built-in structure, for tests and :func:`check_structure`.

    Parameters
    ----------
    structure_name : {"chain", "multiclass", "matching", "grid", "box", "lp", "tree"}
    rng : Generator or seed
    integer : bool
        Integer potentials in [-3, 3] (ties) or uniform floats.
    **size
        ``chain``: ``length`` (T, default 4), ``n_states`` (S, default 3), ``shared`` (bool,
        default True: one (S, S) transition matrix); ``multiclass``: ``n_classes`` (default 4);
        ``matching``: ``n_left`` (default 3), ``n_right`` (default 3), ``allow_unmatched`` (default
        False: the unmatched-score fields are empty); ``box``: ``height`` (default 3), ``width``
        (default 3); ``lp``: ``n`` (default 5), an
        :class:`~structopt.structures.lp.LPStructure` selecting between lo and hi of n entries with at
        most a cap in a random window (an exact LP description); ``tree``: ``n_nodes`` (default 4),
        ``n_states`` (default 2), ``shared`` (default False), a random forest (isolated nodes likely);
        ``grid``: ``height`` (default 2), ``width`` (default 3), ``shared`` (bool, default False:
        per-edge tables); grid edges are made supermodular by raising theta(0, 0) where needed.
    """
    from structopt.structures.box import BoundingBox, BoxPotentials
    from structopt.structures.chain import Chain, ChainPotentials
    from structopt.structures.matching import BipartiteMatching, MatchingPotentials
    from structopt.structures.multiclass import MultiClass, MultiClassPotentials

    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    name = structure_name.lower()
    if name == "chain":
        T, S = int(size.pop("length", 4)), int(size.pop("n_states", 3))
        shared = bool(size.pop("shared", True))
        structure: Structure = Chain(S)
        like: Potentials = ChainPotentials(np.zeros((T, S)), np.zeros((S, S) if shared else (max(T - 1, 0), S, S)))
    elif name == "multiclass":
        S = int(size.pop("n_classes", 4))
        structure, like = MultiClass(S), MultiClassPotentials(np.zeros(S))
    elif name == "matching":
        L, R = int(size.pop("n_left", 3)), int(size.pop("n_right", 3))
        allow = bool(size.pop("allow_unmatched", False))
        structure = BipartiteMatching(L, R, allow_unmatched=allow)  # validates the sides
        like = MatchingPotentials(np.zeros((L, R)), np.zeros(L if allow else 0), np.zeros(R if allow else 0))
    elif name == "box":
        H, W = int(size.pop("height", 3)), int(size.pop("width", 3))
        if H < 1 or W < 1:
            raise InvalidInputError(f"a box grid needs height, width >= 1, got {H} x {W}")
        structure, like = BoundingBox(), BoxPotentials(np.zeros((H, W)))
    elif name == "lp":
        structure = _random_lp_structure(rng, int(size.pop("n", 5)))
        like = structure.Potentials(np.zeros(structure.size))
    elif name == "tree":
        structure = _random_forest(rng, int(size.pop("n_nodes", 4)), int(size.pop("n_states", 2)))
        S, m = structure.n_states, structure.n_edges
        like = structure.Potentials(np.zeros((structure.n_nodes, S)),
                                    np.zeros((S, S) if size.pop("shared", False) else (m, S, S)))
    elif name == "grid":
        from structopt.structures.grid import BinaryGrid, GridPotentials

        H, W = int(size.pop("height", 2)), int(size.pop("width", 3))
        shared = bool(size.pop("shared", False))
        structure = BinaryGrid()
        like = GridPotentials(np.zeros((H, W, 2)), np.zeros((2, 2) if shared else (H, W - 1, 2, 2)),
                              np.zeros((2, 2) if shared else (H - 1, W, 2, 2)))
    else:
        raise InvalidInputError(f"no random instance for structure {structure_name!r}; "
                                f"use one of {', '.join(repr(n) for n in BUILTIN_STRUCTURES)}")
    if size:
        raise InvalidInputError(f"unknown size arguments for {name}: {sorted(size)}")
    theta = random_like(like, rng, integer=integer)
    return structure, (_supermodular(theta) if name == "grid" else theta)


def _supermodular(theta: Potentials) -> Potentials:
    # raise theta(0, 0) of every grid edge table just enough for theta00 + theta11 >= theta01 + theta10
    fields = [theta[0]]
    for table in theta[1:]:
        table = np.array(table, dtype=float)
        w = table[..., 0, 0] + table[..., 1, 1] - table[..., 0, 1] - table[..., 1, 0]
        table[..., 0, 0] += np.maximum(-w, 0.0)
        fields.append(table)
    return type(theta)(*fields)


def _random_lp_structure(rng: np.random.Generator, n: int) -> Structure:
    # k-of-n selection with a cap on a random window: interval constraint rows are totally
    # unimodular, so the LP description is exact and every row of check_structure applies
    import cvxpy as cp

    from structopt.structures.lp import LPStructure

    if n < 1:
        raise InvalidInputError(f"an lp instance needs n >= 1, got {n}")
    z = cp.Variable(n, boolean=True)
    lo = int(rng.integers(0, n + 1))
    hi = int(rng.integers(lo, n + 1))
    start = int(rng.integers(0, n))
    stop = int(rng.integers(start + 1, n + 1))
    cap = int(rng.integers(max(0, lo - (n - (stop - start))), stop - start + 1))
    return LPStructure(z, [cp.sum(z) >= lo, cp.sum(z) <= hi, cp.sum(z[start:stop]) <= cap])


def _random_forest(rng: np.random.Generator, n_nodes: int, n_states: int) -> Structure:
    # each node after the first joins a random earlier node with probability 0.8 (else starts a new
    # tree), edges in random orientation
    from structopt.structures.tree import TreeStructure

    edges = []
    for v in range(1, n_nodes):
        if rng.random() < 0.8:
            u = int(rng.integers(0, v))
            edges.append((u, v) if rng.random() < 0.5 else (v, u))
    return TreeStructure(edges, n_states, n_nodes=n_nodes)


# --------------------------------------------------------------------------- the check
class _Reference:
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


def _stats_score(full: np.ndarray, stats: np.ndarray) -> float:
    """``<theta, stats>`` over the statistics' non-zero entries (a -inf potential times 0 counts as 0)."""
    used = stats != 0
    return float(np.sum(full[used] * stats[used]))


def check_structure(structure: Structure, theta: Potentials, k: int = 5, rtol: float = 1e-7,
                    qp_atol: float = 1e-5, max_outputs: int = 20_000,
                    random_state: int | np.random.Generator | None = 0) -> CheckReport:
    """Compare every oracle of ``structure`` on instance ``theta`` with enumeration and the LP.

    Rows (each with the oracle's own wall time):

    - ``argmax``: its score equals the brute-force max and the LP optimum.
    - ``topk``: scores equal the sorted brute-force scores (``min(k, |Y|)`` of them), each
      returned output scores as reported, outputs are distinct; the first equals the LP optimum.
    - ``marginals``: log Z and the marginals equal the Gibbs sums; the marginals satisfy the
      polytope's constraints.
    - ``max_marginals``: equal the best score among outputs having each node indicator, where
      the node indicators are the first statistics field (checked only when the oracle's output
      has that field's shape); the best entry never exceeds the LP optimum and equals it when
      some maximiser sets a node indicator (not implied otherwise, e.g. when the empty partial
      matching is best).
    - ``lp_relaxation``: its value equals the max score; its solution is the statistics of the
      best output when that output is unique.
    - ``project``: the Euclidean projection p of a random point v equals the projection onto the
      hull of the enumerated vertices (Wolfe's min-norm point over that list) and satisfies the
      variational inequality against every vertex; LP column: p equals the min-norm-point
      projection driven by the structure's own ``argmax`` (independent of how ``project``
      computes p), satisfies ``<v - p, s - p> <= qp_atol`` with ``s = argmax(v - p)`` and the
      polytope's constraints.
    - ``prox_entropy``: with ``mu`` the marginals of random potentials ``theta0``, equals the
      marginals of the Gibbs distribution of ``theta0 + eta * step`` by enumeration.

    Potentials may be compact (a plain (L, R) matching array, a chain's shared transitions) and,
    where the structure accepts them, -inf (forbidden entries): outputs of score -inf do not count
    (top-K lists the finite ones). When every output has score -inf, each oracle on ``theta``
    (``lp_relaxation``, ``argmax``, ``topk``, ``marginals``, ``max_marginals``) must raise
    :class:`InvalidInputError`; returning anything is a failure.

    Oracles raising :class:`NotSupportedError` are reported as skipped ("not supported"); any
    other exception counts as a failure and is reported in the detail.

    Parameters
    ----------
    structure : Structure
    theta : Potentials
        A small instance (at most ``max_outputs`` outputs).
    k : int
        K for the top-K oracle.
    rtol : float
        Relative tolerance on scores and probabilities (absolute tolerance ``rtol * scale`` with
        ``scale = 1 + max |score|``).
    qp_atol : float
        Absolute tolerance for solutions of the LP/QP solvers (interior-point accuracy).
    random_state : int, Generator or None
        Seed for the random point of ``project`` and the instance of ``prox_entropy``.

    Returns
    -------
    CheckReport
    """
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    ref = _Reference(structure, theta, max_outputs)
    finite = ref.scores[np.isfinite(ref.scores)]
    atol = rtol * (1.0 + float(np.max(np.abs(finite), initial=0.0)))
    report = CheckReport(getattr(structure, "name", type(structure).__name__), len(ref.outputs))
    lp_value: float | None = None

    def run(oracle: str, fn: Callable[[], tuple[bool | None, bool | None, float, str]],
            on_theta: bool = True) -> None:
        must_refuse = ref.infeasible and on_theta
        try:
            enum_ok, lp_ok, seconds, detail = fn()
        except NotSupportedError as exc:
            report.rows.append(CheckRow(oracle, None, None, 0.0, f"not supported: {exc}"))
        except InvalidInputError as exc:
            if must_refuse:
                report.rows.append(CheckRow(oracle, True, None, 0.0, f"refused (every output forbidden): {exc}"))
            else:
                report.rows.append(CheckRow(oracle, False, False, 0.0, f"raised {type(exc).__name__}: {exc}"))
        except Exception as exc:  # a crash is a failed check, reported with its message
            report.rows.append(CheckRow(oracle, False, False, 0.0, f"raised {type(exc).__name__}: {exc}"))
        else:
            if must_refuse:
                report.rows.append(CheckRow(oracle, False, False, seconds, "returned a result although every output "
                                                                           "has score -inf (must raise)"))
            else:
                report.rows.append(CheckRow(oracle, enum_ok, lp_ok, seconds, detail))

    # ---------------------------------------------------------------- lp_relaxation (first: others use it)
    def lp_relaxation():
        nonlocal lp_value
        (value, z), seconds = _timed(lambda: structure.lp_relaxation(theta))
        lp_value = float(value)
        value_gap = abs(lp_value - ref.best)
        unique = int(np.sum(ref.scores >= ref.best - atol)) == 1
        detail = f"|LP - max| = {value_gap:.1e}"
        integral = None
        if unique:
            int_gap = _gap(flatten(z), ref.flat[ref.order[0]])
            integral = int_gap <= qp_atol
            detail += f", |z - stats(best)| = {int_gap:.1e}"
        else:
            detail += ", max not unique: integrality not checked"
        enum_ok = value_gap <= max(atol, qp_atol) and integral is not False
        return enum_ok, None, seconds, detail

    run("lp_relaxation", lp_relaxation)

    def lp_agrees(value: float) -> bool | None:
        return None if lp_value is None else abs(value - lp_value) <= max(atol, qp_atol)

    # ---------------------------------------------------------------- argmax
    def argmax():
        y, seconds = _timed(lambda: structure.argmax(theta))
        y = structure.validate_output(y, theta)
        value = structure.score(theta, y)
        gap = abs(value - ref.best)
        return gap <= atol, lp_agrees(value), seconds, f"score {value:g} vs max {ref.best:g}"

    run("argmax", argmax)

    # ---------------------------------------------------------------- topk
    def topk():
        (outs, scores), seconds = _timed(lambda: structure.topk(theta, k))
        scores = np.asarray(scores, dtype=float)
        outs = [structure.validate_output(y, theta) for y in outs]
        expected = ref.scores[ref.feasible_order[:k]]  # outputs of score -inf do not exist
        problems = []
        if len(outs) != len(expected) or scores.shape != expected.shape:
            problems.append(f"returned {len(outs)} outputs / {scores.size} scores, expected {len(expected)}")
        else:
            if _gap(scores, expected) > atol:
                problems.append(f"scores off sorted brute force by {_gap(scores, expected):.1e}")
            own = np.array([structure.score(theta, y) for y in outs])
            if _gap(own, scores) > atol:
                problems.append(f"reported scores off the outputs' scores by {_gap(own, scores):.1e}")
            keys = {flatten(structure.stats(y, theta)).tobytes() for y in outs}
            if len(keys) != len(outs):
                problems.append(f"{len(outs) - len(keys)} duplicate outputs")
        lp_ok = lp_agrees(float(scores[0])) if scores.size else False
        detail = "; ".join(problems) or f"{len(outs)} outputs (k={k}) match"
        return not problems, lp_ok, seconds, detail

    run("topk", topk)

    # ---------------------------------------------------------------- marginals
    def marginals():
        (log_z, marg), seconds = _timed(lambda: structure.marginals(theta))
        bf_log_z = logsumexp(ref.scores)
        p = np.exp(ref.scores - bf_log_z)
        bf_marg = p @ ref.flat
        z_gap = abs(float(log_z) - bf_log_z)
        m_gap = _gap(flatten(marg), bf_marg)
        enum_ok = z_gap <= atol and m_gap <= max(rtol, 1e-12)
        detail = f"|log Z - bf| = {z_gap:.1e}, |marginals - bf| = {m_gap:.1e}"
        try:
            infeasible = _infeasibility(structure, theta, flatten(marg))
        except NotSupportedError:  # no linear description (e.g. boxes): feasibility not checked
            return enum_ok, None, seconds, detail + ", no polytope: feasibility not checked"
        return enum_ok, infeasible <= max(rtol, 1e-9), seconds, detail + f", infeasibility {infeasible:.1e}"

    run("marginals", marginals)

    # ---------------------------------------------------------------- max_marginals
    def max_marginals():
        mm, seconds = _timed(lambda: structure.max_marginals(theta))
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
            tol = max(atol, qp_atol)
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
        gap = _gap(mm, bf)  # entrywise, so max(mm) == best_with is covered
        detail = f"|max-marginals - bf| = {gap:.1e}" + (f", {lp_detail}" if lp_detail else "")
        return gap <= atol, lp_ok, seconds, detail

    run("max_marginals", max_marginals)

    # ---------------------------------------------------------------- project
    def project():
        template = structure.expand(theta)
        v = unflatten(rng.normal(scale=1.0, size=ref.flat.shape[1]), template)
        p, seconds = _timed(lambda: structure.project(v))
        p_flat, v_flat = flatten(p), flatten(v)
        # enumeration: the projection onto the hull of the enumerated vertices (min-norm point over
        # that list, no structure oracle involved), and <v - p, m - p> <= 0 for every vertex m
        reference, _ = project_hull(v_flat, lambda d: ref.flat[int(np.argmax(ref.flat @ d))], tol=1e-14)
        ref_gap = _gap(p_flat, reference)
        violation = float(np.max(ref.flat @ (v_flat - p_flat) - (v_flat - p_flat) @ p_flat))
        enum_ok = violation <= qp_atol and ref_gap <= qp_atol
        # the structure's own argmax oracle: the min-norm-point projection it drives (membership in
        # the hull, which an outer description cannot certify) and the certificate
        # <v - p, s - p> <= 0 with s = argmax(v - p); plus feasibility for the polytope's description
        def linear_oracle(d: np.ndarray) -> np.ndarray:
            return flatten(structure.stats(structure.argmax(unflatten(d, template)), theta))

        by_oracle, _ = project_hull(v_flat, linear_oracle, tol=1e-14)
        oracle_gap = _gap(p_flat, by_oracle)
        certificate = float((v_flat - p_flat) @ (linear_oracle(v_flat - p_flat) - p_flat))
        infeasible = _infeasibility(structure, theta, p_flat)
        detail = (f"|p - hull reference| = {ref_gap:.1e}, vertex optimality violation {violation:.1e}, "
                  f"|p - projection by argmax oracle| = {oracle_gap:.1e}, certificate {certificate:.1e}, "
                  f"infeasibility {infeasible:.1e}")
        lp_ok = oracle_gap <= qp_atol and certificate <= qp_atol and infeasible <= qp_atol
        return enum_ok, lp_ok, seconds, detail

    run("project", project, on_theta=False)

    # ---------------------------------------------------------------- prox_entropy
    def prox_entropy():
        theta0 = random_like(structure.expand(theta), rng)
        eta = float(rng.uniform(0.1, 2.0))
        step = random_like(structure.expand(theta), rng)
        _, mu = structure.marginals(theta0)
        out, seconds = _timed(lambda: structure.prox_entropy(mu, step, eta))
        logits = np.array([inner(theta0, m) + eta * inner(step, m) for m in ref.stats])
        bf = np.exp(logits - logsumexp(logits)) @ ref.flat
        gap = _gap(flatten(out), bf)
        return gap <= max(rtol, 1e-9) * 10, None, seconds, f"|prox - bf| = {gap:.1e} (eta={eta:.2f})"

    run("prox_entropy", prox_entropy, on_theta=False)
    return report


# --------------------------------------------------------------------------- the built-in suite
#: size variants checked by :func:`check_builtin_structures`, as ``random_instance`` keyword arguments
BUILTIN_VARIANTS: dict[str, tuple[dict[str, Any], ...]] = {
    "chain": (
        {"length": 1, "n_states": 3, "shared": True},
        {"length": 1, "n_states": 2, "shared": False},
        {"length": 2, "n_states": 3, "shared": False},
        {"length": 4, "n_states": 3, "shared": True},
        {"length": 4, "n_states": 3, "shared": False},
        {"length": 5, "n_states": 2, "shared": True},
    ),
    "multiclass": ({"n_classes": 1}, {"n_classes": 2}, {"n_classes": 5}),
    "matching": (
        {"n_left": 1, "n_right": 1, "allow_unmatched": False},
        {"n_left": 3, "n_right": 3, "allow_unmatched": False},
        {"n_left": 2, "n_right": 4, "allow_unmatched": False},
        {"n_left": 3, "n_right": 5, "allow_unmatched": False},
        {"n_left": 0, "n_right": 2, "allow_unmatched": True},
        {"n_left": 3, "n_right": 3, "allow_unmatched": True},
        {"n_left": 2, "n_right": 4, "allow_unmatched": True},
        {"n_left": 4, "n_right": 2, "allow_unmatched": True},
    ),
    "box": ({"height": 1, "width": 1}, {"height": 1, "width": 4}, {"height": 3, "width": 2}, {"height": 4, "width": 4}),
    "lp": ({"n": 1}, {"n": 4}, {"n": 7}),
    "tree": (
        {"n_nodes": 1, "n_states": 3},
        {"n_nodes": 4, "n_states": 2},
        {"n_nodes": 5, "n_states": 2, "shared": True},
        {"n_nodes": 4, "n_states": 3},
    ),
    "grid": (
        {"height": 1, "width": 1},
        {"height": 1, "width": 4},
        {"height": 2, "width": 2, "shared": True},
        {"height": 2, "width": 3},
        {"height": 3, "width": 3, "shared": True},
        {"height": 3, "width": 4},
    ),
}


def _variant_label(size: dict[str, Any], integer: bool) -> str:
    return ", ".join(f"{key}={value}" for key, value in size.items()) + (", integer" if integer else ", float")


def _combine(flags: list[bool | None]) -> bool | None:
    """False if any instance failed, None if none was compared, else True."""
    if any(f is False for f in flags):
        return False
    return True if any(f is True for f in flags) else None


@dataclass
class SuiteRow:
    """One oracle of one structure, aggregated over random instances.

    Attributes
    ----------
    structure, oracle : str
    n_instances : int
        Instances checked.
    agrees_enumeration, agrees_lp : bool or None
        False if any instance disagreed, None if no instance was compared, else True.
    total_seconds, median_seconds : float
        Wall time of the oracle calls (the median is robust to a first call that compiles).
    detail : str
        The first failure (with its instance), the reason for skipping, or a summary.
    """

    structure: str
    oracle: str
    n_instances: int
    agrees_enumeration: bool | None
    agrees_lp: bool | None
    total_seconds: float
    median_seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        """No instance failed a comparison."""
        return self.agrees_enumeration is not False and self.agrees_lp is not False


@dataclass
class SuiteReport:
    """Outcome of :func:`check_builtin_structures`: one :class:`CheckReport` per random instance.

    Attributes
    ----------
    checks : list of (structure, instance label, CheckReport)
    seconds : float
        Wall time of the whole suite (references, LPs and QPs included).
    """

    checks: list[tuple[str, str, CheckReport]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no comparison failed on any instance."""
        return all(report.ok for _, _, report in self.checks)

    @property
    def rows(self) -> list[SuiteRow]:
        """One row per (structure, oracle), in the order checked."""
        groups: dict[tuple[str, str], list[tuple[str, CheckRow]]] = {}
        sizes: dict[str, list[int]] = {}
        for name, label, report in self.checks:
            sizes.setdefault(name, []).append(report.n_outputs)
            for row in report.rows:
                groups.setdefault((name, row.oracle), []).append((label, row))
        rows = []
        for (name, oracle), items in groups.items():
            checked = [r for _, r in items]
            times = np.array([r.seconds for r in checked])
            failed = [(label, r) for label, r in items if not r.ok]
            skipped = [r for r in checked if r.agrees_enumeration is None and r.agrees_lp is None]
            if failed:
                label, first = failed[0]
                detail = f"{len(failed)}/{len(items)} failed; first ({label}): {first.detail}"
            elif len(skipped) == len(items):
                detail = skipped[0].detail
            else:
                detail = (f"{len(items) - len(skipped)} compared" + (f", {len(skipped)} skipped" if skipped else "")
                          + f" ({min(sizes[name])}-{max(sizes[name])} outputs each)")
            rows.append(SuiteRow(name, oracle, len(items), _combine([r.agrees_enumeration for r in checked]),
                                 _combine([r.agrees_lp for r in checked]), float(times.sum()),
                                 float(np.median(times)), detail))
        return rows

    def row(self, structure: str, oracle: str) -> SuiteRow:
        """The aggregated row of one structure and oracle (KeyError when absent)."""
        for r in self.rows:
            if r.structure == structure and r.oracle == oracle:
                return r
        raise KeyError((structure, oracle))

    def failures(self) -> list[SuiteRow]:
        """Aggregated rows where some instance failed."""
        return [r for r in self.rows if not r.ok]

    def table(self) -> str:
        """A plain-text table: structure, oracle, agreement with enumeration and LP, time."""
        def mark(flag: bool | None) -> str:
            return "-" if flag is None else ("yes" if flag else "NO")

        header = ("structure", "oracle", "instances", "enumeration", "LP", "total s", "median s", "detail")
        body = [(r.structure, r.oracle, str(r.n_instances), mark(r.agrees_enumeration), mark(r.agrees_lp),
                 f"{r.total_seconds:.2e}", f"{r.median_seconds:.2e}", r.detail) for r in self.rows]
        widths = [max(len(line[j]) for line in [header, *body]) for j in range(7)]
        lines = ["  ".join(v.ljust(w) for v, w in zip(line[:7], widths)) + "  " + line[7]
                 for line in [header, *body]]
        n_fail = len(self.failures())
        verdict = "all OK" if self.ok else f"FAILED: {n_fail} row{'s' if n_fail != 1 else ''}"
        structures = list(dict.fromkeys(name for name, _, _ in self.checks))
        lines.append(f"{len(self.checks)} instances of {len(structures)} structure"
                     f"{'s' if len(structures) != 1 else ''} checked in {self.seconds:.2f}s: {verdict}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def check_builtin_structures(names: Sequence[str] | None = None, seed: int = 0, n_instances: int = 2,
                             k: int = 5) -> SuiteReport:
    """Run :func:`check_structure` on random small instances of the built-in structures.

    Each structure is checked on every size variant of :data:`BUILTIN_VARIANTS` (chains of length
    1 with both pairwise layouts, square and rectangular matchings, with and without unmatched
    nodes, ...), ``n_instances`` random instances per variant, alternating integer potentials in
    [-3, 3] (many ties) and float potentials. This is ``structopt check [STRUCTURE ...]``.

    Parameters
    ----------
    names : sequence of str, optional
        Structures among :data:`BUILTIN_STRUCTURES` (case-insensitive); all of them by default.
    seed : int
        Seed of the instances and of the random points used by ``project`` / ``prox_entropy``.
    n_instances : int
        Random instances per size variant (the first integer, then float, alternating).
    k : int
        K for the top-K oracle.

    Returns
    -------
    SuiteReport
        ``.table()`` has one row per (structure, oracle); ``.ok`` is False if any instance failed.

    Raises
    ------
    InvalidInputError
        For an unknown structure name (the message lists the valid ones) or ``n_instances < 1``.
    """
    if isinstance(names, str):
        names = [names]
    chosen = list(BUILTIN_STRUCTURES) if not names else []
    for name in names or ():
        key = str(name).lower()
        if key not in BUILTIN_STRUCTURES:
            raise InvalidInputError(f"unknown structure {name!r}; valid names: {', '.join(BUILTIN_STRUCTURES)}")
        if key not in chosen:
            chosen.append(key)
    if int(n_instances) != n_instances or int(n_instances) < 1:
        raise InvalidInputError(f"n_instances must be a positive integer, got {n_instances!r}")
    rng = np.random.default_rng(seed)
    suite = SuiteReport()
    start = time.perf_counter()
    for name in chosen:
        for size in BUILTIN_VARIANTS[name]:
            for i in range(int(n_instances)):
                integer = i % 2 == 0
                structure, theta = random_instance(name, rng, integer=integer, **size)
                report = check_structure(structure, theta, k=k, random_state=rng)
                suite.checks.append((name, _variant_label(size, integer), report))
    suite.seconds = time.perf_counter() - start
    return suite


# --------------------------------------------------------------------------- models
@dataclass
class ModelCheckRow:
    """Outcome of one check of :func:`check_model` (worst case over the examples checked)."""

    check: str
    ok: bool
    detail: str = ""


@dataclass
class ModelCheckReport:
    """Rows of :func:`check_model`, one per check."""

    model: str
    n_examples: int
    rows: list[ModelCheckRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return all(row.ok for row in self.rows)

    def row(self, check: str) -> ModelCheckRow:
        """The row of one check (KeyError when absent)."""
        for r in self.rows:
            if r.check == check:
                return r
        raise KeyError(check)

    def failures(self) -> list[ModelCheckRow]:
        """Rows that failed."""
        return [r for r in self.rows if not r.ok]

    def table(self) -> str:
        """A plain-text table of the rows."""
        width = max(len(r.check) for r in self.rows) if self.rows else 5
        lines = [f"{self.model}: {self.n_examples} examples, {'OK' if self.ok else 'FAILED'}"]
        lines += [f"{r.check.ljust(width)}  {'yes' if r.ok else 'NO '}  {r.detail}" for r in self.rows]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def check_model(model: Any, X: Sequence[Any], n_trials: int = 3, max_examples: int = 5, rtol: float = 1e-9,
                random_state: int | np.random.Generator | None = 0) -> ModelCheckReport:
    """Check a model's linear map against its adjoint and its declared layouts on a few inputs.

    Rows (each the worst case over the first ``max_examples`` inputs and ``n_trials`` random draws):

    - ``validate_input``: every input is accepted (the error message otherwise).
    - ``potentials_type``: ``potentials(x, w)`` is the structure's potentials type (its declared
      ``Potentials`` NamedTuple when it has one) and ``structure.expand`` accepts it.
    - ``linearity``: ``potentials(x, a w1 + b w2) = a potentials(x, w1) + b potentials(x, w2)``.
    - ``adjoint``: ``<A_x w, mu> = <w, A_x^T mu>`` for random w and random statistics-shaped mu
      (the full layout of ``structure.expand``), i.e. ``potentials`` and ``features`` agree.
    - ``reduce_stats``: ``reduce_stats(mu)`` flattens to the potentials' size, has the same inner
      product with the potentials (flat, no broadcasting) and the same ``features``.
    - ``features_sqnorm``: equals ``||features(x, mu)||^2``.

    Exceptions raised by the model are reported as failures with their message.

    Parameters
    ----------
    model : Model
    X : sequence of inputs
    n_trials : int
        Random (w, mu) draws per input.
    max_examples : int
        Inputs checked (the first ones).
    rtol : float
        Relative tolerance (scaled by the magnitudes of the products compared).
    random_state : int, Generator or None

    Returns
    -------
    ModelCheckReport
    """
    from structopt.structures.base import add, scale

    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    structure = model.structure
    examples = list(X)[: int(max_examples)]
    report = ModelCheckReport(repr(model), len(examples))
    worst: dict[str, tuple[bool, str]] = {}

    def record(check: str, ok: bool, detail: str) -> None:
        if check not in worst or (worst[check][0] and not ok):
            worst[check] = (ok, detail)

    def close(a: float, b: float, magnitude: float) -> bool:
        return abs(a - b) <= rtol * (1.0 + magnitude)

    declared = getattr(structure, "Potentials", None)
    for i, raw in enumerate(examples):
        try:
            x = model.validate_input(raw, i)
        except Exception as exc:  # reported, then the other checks of this input are meaningless
            record("validate_input", False, f"example {i}: {type(exc).__name__}: {exc}")
            continue
        record("validate_input", True, f"{len(examples)} inputs accepted")
        checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = []

        def potentials_type(x=x, i=i) -> tuple[bool, str]:
            theta = model.potentials(x, rng.normal(size=model.n_params))
            if not (isinstance(theta, tuple) and hasattr(theta, "_fields")):
                return False, f"example {i}: potentials are a {type(theta).__name__}, not a NamedTuple of arrays"
            if declared is not None and type(theta) is not declared:
                return False, (f"example {i}: potentials are {type(theta).__name__}, "
                               f"structure declares {declared.__name__}")
            structure.expand(theta)
            return True, type(theta).__name__

        def linearity(x=x, i=i) -> tuple[bool, str]:
            w1, w2 = rng.normal(size=model.n_params), rng.normal(size=model.n_params)
            a, b = rng.normal(size=2)
            lhs = flatten(structure.expand(model.potentials(x, a * w1 + b * w2)))
            rhs = flatten(structure.expand(add(scale(model.potentials(x, w1), a), model.potentials(x, w2), b)))
            gap = _gap(lhs, rhs)
            return gap <= rtol * (1.0 + float(np.max(np.abs(rhs), initial=0.0))), f"max deviation {gap:.1e}"

        def adjoint(x=x, i=i) -> tuple[bool, str]:
            w = rng.normal(size=model.n_params)
            theta = model.potentials(x, w)
            mu = random_like(structure.expand(theta), rng)
            lhs, rhs = inner(theta, mu), float(w @ model.features(x, mu))
            ok = close(lhs, rhs, abs(lhs) + abs(rhs))
            return ok, f"<A w, mu> = {lhs:.6g}, <w, A^T mu> = {rhs:.6g}" + ("" if ok else f" (example {i})")

        def reduce_stats(x=x, i=i) -> tuple[bool, str]:
            theta = model.potentials(x, rng.normal(size=model.n_params))
            mu = random_like(structure.expand(theta), rng)
            reduced = flatten(model.reduce_stats(mu))
            flat_theta = flatten(theta)
            if reduced.size != flat_theta.size:
                return False, (f"example {i}: reduce_stats flattens to {reduced.size} entries, the potentials to "
                               f"{flat_theta.size}")
            lhs, rhs = inner(theta, mu), float(flat_theta @ reduced)
            if not close(lhs, rhs, abs(lhs) + abs(rhs)):
                return False, f"example {i}: <theta, mu> = {lhs:.6g} but <theta, reduce_stats(mu)> = {rhs:.6g}"
            g_full, g_red = model.features(x, mu), model.features(x, model.reduce_stats(mu))
            gap = _gap(g_full, g_red)
            ok = gap <= rtol * (1.0 + float(np.max(np.abs(g_full), initial=0.0)))
            return ok, f"same size, inner product and features (deviation {gap:.1e})" if ok else \
                f"example {i}: features of reduce_stats(mu) differ by {gap:.1e}"

        def features_sqnorm(x=x, i=i) -> tuple[bool, str]:
            mu = random_like(structure.expand(model.potentials(x, model.zeros())), rng)
            g = model.features(x, mu)
            lhs, rhs = float(model.features_sqnorm(x, mu)), float(g @ g)
            ok = close(lhs, rhs, rhs)
            return ok, f"{lhs:.6g} vs ||features||^2 = {rhs:.6g}" + ("" if ok else f" (example {i})")

        checks += [("potentials_type", potentials_type), ("linearity", linearity), ("adjoint", adjoint),
                   ("reduce_stats", reduce_stats), ("features_sqnorm", features_sqnorm)]
        for name, fn in checks:
            for _ in range(int(n_trials) if name != "potentials_type" else 1):
                try:
                    ok, detail = fn()
                except Exception as exc:  # a crash is a failed check, reported with its message
                    ok, detail = False, f"example {i}: {type(exc).__name__}: {exc}"
                record(name, ok, detail)
    report.rows = [ModelCheckRow(name, ok, detail) for name, (ok, detail) in worst.items()]
    return report
