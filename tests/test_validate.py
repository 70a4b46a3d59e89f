"""check_structure reports agreement on correct structures and catches broken oracles."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures import BipartiteMatching, Chain, ChainPotentials, MatchingPotentials, MultiClass, Polytope
from structopt.structures.base import Structure
from structopt.validate import (
    BUILTIN_STRUCTURES,
    BUILTIN_VARIANTS,
    CheckReport,
    CheckRow,
    SuiteReport,
    check_builtin_structures,
    check_structure,
    random_instance,
    random_like,
)

ORACLES = ["lp_relaxation", "argmax", "topk", "marginals", "max_marginals", "project", "prox_entropy"]


def chain_instance(seed=0, T=4, S=3, shared=False, integer=False):
    return random_instance("chain", seed, length=T, n_states=S, shared=shared, integer=integer)


def test_correct_structures_pass():
    for seed in range(3):
        structure, theta = chain_instance(seed, integer=True)
        report = check_structure(structure, theta, k=10, random_state=seed)
        assert report.ok, report.table()
        assert [r.oracle for r in report.rows] == ORACLES
        assert report.n_outputs == 81
        structure, theta = random_instance("multiclass", seed, n_classes=5)
        assert check_structure(structure, theta).ok


def test_table_and_rows():
    structure, theta = chain_instance()
    report = check_structure(structure, theta)
    text = report.table()
    assert text.startswith("Chain: 81 outputs, OK")
    for name in ORACLES:
        assert name in text
    assert str(report) == text
    assert all(r.seconds >= 0 for r in report.rows)
    with pytest.raises(KeyError):
        report.row("nope")
    assert report.failures() == []


def test_report_ok_logic():
    rows = [CheckRow("a", True, None, 0.0), CheckRow("b", None, None, 0.0, "not supported")]
    assert CheckReport("x", 1, rows).ok
    rows.append(CheckRow("c", True, False, 0.0))
    report = CheckReport("x", 1, rows)
    assert not report.ok and [r.oracle for r in report.failures()] == ["c"]
    assert "NO" in report.table() and "FAILED" in report.table()


# ----------------------------------------------------------------------------- broken structures
class WrongArgmax(Chain):
    def argmax(self, theta):
        return np.zeros(np.shape(theta.unary)[0], dtype=np.int64)


class DuplicateTopK(Chain):
    def topk(self, theta, k):
        labels, scores = super().topk(theta, k)
        labels[1] = labels[0]
        return labels, scores


class ShortTopK(Chain):
    def topk(self, theta, k):
        labels, scores = super().topk(theta, k)
        return labels[:-1], scores[:-1]


class OffMarginals(Chain):
    def marginals(self, theta):
        log_z, marg = super().marginals(theta)
        return log_z + 1e-3, marg


class OffMaxMarginals(Chain):
    def max_marginals(self, theta):
        mm = super().max_marginals(theta)
        mm[0, 0] += 0.5
        return mm


class LoosePolytope(Chain):
    """Drops the marginalisation constraints: the LP becomes a loose relaxation."""

    def polytope(self, theta):
        poly = super().polytope(theta)
        T = np.shape(theta.unary)[0]
        return Polytope(poly.A_eq[:T], poly.b_eq[:T], None, None, poly.like)


class WrongProject(Chain):
    def project(self, v):
        p = self.project_qp(v)
        return ChainPotentials(p.unary * 0.9 + 0.1 / self.n_states, p.pairwise)


class WrongProx(Chain):
    def prox_entropy(self, mu, step, eta):
        return mu


class CrashingTopK(Chain):
    def topk(self, theta, k):
        raise RuntimeError("boom")


@pytest.mark.parametrize(("cls", "oracle", "column"), [
    (WrongArgmax, "argmax", "agrees_enumeration"),
    (DuplicateTopK, "topk", "agrees_enumeration"),
    (ShortTopK, "topk", "agrees_enumeration"),
    (OffMarginals, "marginals", "agrees_enumeration"),
    (OffMaxMarginals, "max_marginals", "agrees_enumeration"),
    (LoosePolytope, "lp_relaxation", "agrees_enumeration"),
    (WrongProject, "project", "agrees_lp"),
    (WrongProject, "project", "agrees_enumeration"),
    (WrongProx, "prox_entropy", "agrees_enumeration"),
    (CrashingTopK, "topk", "agrees_enumeration"),
])
def test_broken_oracle_is_caught(cls, oracle, column):
    _, theta = chain_instance(seed=3)  # float potentials: unique maximiser, argmax != all zeros
    report = check_structure(cls(3), theta)
    assert not report.ok
    assert getattr(report.row(oracle), column) is False, report.table()
    if cls is CrashingTopK:
        assert "boom" in report.row("topk").detail
    # the other oracles are unaffected, except the project row's argmax-driven reference
    others = [r for r in report.rows if r.oracle != oracle and cls is not LoosePolytope
              and not (cls is WrongArgmax and r.oracle == "project")]
    assert all(r.ok for r in others), report.table()
    if cls is WrongArgmax:
        assert report.row("project").agrees_enumeration is True


def test_loose_polytope_also_breaks_lp_comparisons():
    _, theta = chain_instance(seed=3)
    report = check_structure(LoosePolytope(3), theta)
    assert report.row("argmax").agrees_lp is False


# ----------------------------------------------------------------------------- a generic structure
class PairPotentials(NamedTuple):
    node: np.ndarray   # (2, 2): node i takes value v
    edge: np.ndarray   # (2, 2): joint value of the two nodes


class Pair(Structure):
    """Two binary variables joined by one edge, written only against the Structure interface."""

    name = "Pair"

    def argmax(self, theta):
        return max(self.outputs(theta), key=lambda y: self.score(theta, y))

    def stats(self, y, like=None):
        node = np.zeros((2, 2))
        node[0, y[0]] = node[1, y[1]] = 1.0
        edge = np.zeros((2, 2))
        edge[y[0], y[1]] = 1.0
        return PairPotentials(node, edge)

    def outputs(self, theta=None):
        return iter(list(itertools.product(range(2), repeat=2)))

    def polytope(self, theta=None):
        A = np.zeros((6, 8))
        b = np.zeros(6)
        A[0, 0:2] = 1; A[1, 2:4] = 1; b[:2] = 1  # noqa: E702  node normalisation
        for a in range(2):  # edge marginalisation onto both nodes
            A[2 + a, 4 + 2 * a:6 + 2 * a] = 1; A[2 + a, a] = -1  # noqa: E702
            A[4 + a, [4 + a, 6 + a]] = 1; A[4 + a, 2 + a] = -1  # noqa: E702
        return Polytope(sp.csr_matrix(A), b, None, None, PairPotentials(np.zeros((2, 2)), np.zeros((2, 2))))

    def expand(self, theta):
        return theta

    def validate_output(self, y, like=None, index=None):
        return tuple(int(v) for v in y)


def test_generic_structure_skips_unsupported_oracles():
    theta = random_like(PairPotentials(np.zeros((2, 2)), np.zeros((2, 2))), np.random.default_rng(0))
    report = check_structure(Pair(), theta)
    assert report.ok, report.table()
    for oracle in ("topk", "marginals", "max_marginals", "prox_entropy"):
        row = report.row(oracle)
        assert row.agrees_enumeration is None and row.detail.startswith("not supported")
    assert report.row("argmax").agrees_enumeration is True
    assert report.row("project").agrees_lp is True  # certified by the structure's argmax
    assert report.row("project").agrees_enumeration is True  # vertex optimality over the 4 outputs


def test_max_marginals_of_other_shape_not_compared():
    class OtherShape(Chain):
        def max_marginals(self, theta):
            return super().max_marginals(theta).ravel()

    _, theta = chain_instance()
    row = check_structure(OtherShape(3), theta).row("max_marginals")
    assert row.agrees_enumeration is None and "not compared" in row.detail
    assert row.agrees_lp is True


# ----------------------------------------------------------------------------- helpers and guards
def test_random_instance():
    structure, theta = random_instance("chain", 1, length=5, n_states=2, shared=False)
    assert isinstance(structure, Chain) and theta.unary.shape == (5, 2) and theta.pairwise.shape == (4, 2, 2)
    assert np.all(theta.unary == np.round(theta.unary))
    structure, theta = random_instance("multiclass", np.random.default_rng(1), n_classes=3, integer=False)
    assert isinstance(structure, MultiClass) and theta.scores.shape == (3,)
    structure, theta = random_instance("matching", 2, n_left=2, n_right=4)
    assert isinstance(structure, BipartiteMatching) and not structure.allow_unmatched
    assert theta.edge.shape == (2, 4) and theta.unmatched_left.shape == theta.unmatched_right.shape == (0,)
    structure, theta = random_instance("matching", 2, n_left=4, n_right=2, allow_unmatched=True, integer=False)
    assert structure.allow_unmatched and theta.unmatched_left.shape == (4,) and theta.unmatched_right.shape == (2,)
    assert np.any(theta.edge != np.round(theta.edge))
    with pytest.raises(InvalidInputError, match="allow_unmatched=True"):
        random_instance("matching", 0, n_left=3, n_right=2)
    with pytest.raises(InvalidInputError, match=r"no random instance.*'matching'"):
        random_instance("nonexistent")
    with pytest.raises(InvalidInputError, match="unknown size"):
        random_instance("chain", 0, lenght=3)


def test_too_many_outputs_is_refused():
    structure, theta = chain_instance(T=6, S=4)
    with pytest.raises(InvalidInputError, match="too large"):
        check_structure(structure, theta, max_outputs=1000)


def test_not_supported_error_is_reported_with_reason():
    class NoMarginals(Chain):
        def marginals(self, theta):
            raise NotSupportedError("log-partition is #P-hard here")

    _, theta = chain_instance()
    report = check_structure(NoMarginals(3), theta)
    assert report.ok
    assert "#P-hard" in report.row("marginals").detail
    assert report.row("prox_entropy").detail.startswith("not supported")  # needs marginals for its mu


# ----------------------------------------------------------------------------- matchings
@pytest.mark.parametrize(("L", "R", "allow"), [(3, 3, False), (2, 4, False), (3, 3, True), (4, 2, True), (0, 2, True)])
@pytest.mark.parametrize("integer", [True, False])
def test_matching_instances_pass(L, R, allow, integer):
    for seed in range(3):
        structure, theta = random_instance("matching", seed, n_left=L, n_right=R, allow_unmatched=allow,
                                           integer=integer)
        report = check_structure(structure, theta, random_state=seed)
        assert report.ok, report.table()
        assert report.row("marginals").detail.startswith("not supported")


def empty_matching_best():
    """Partial matching instance whose unique best output is the empty matching (score 4)."""
    structure = BipartiteMatching(allow_unmatched=True)
    return structure, MatchingPotentials(np.full((2, 2), -5.0), np.ones(2), np.ones(2))


def test_max_marginals_below_lp_when_empty_matching_is_best():
    structure, theta = empty_matching_best()
    report = check_structure(structure, theta)
    assert report.ok, report.table()
    row = report.row("max_marginals")
    assert row.agrees_enumeration is True and row.agrees_lp is True
    assert "equality not implied" in row.detail
    np.testing.assert_allclose(structure.max_marginals(theta), -3.0)  # one edge, the other nodes unmatched


@pytest.mark.parametrize(("shift", "lp_flag"), [(100.0, False), (7.0, True)])
def test_wrong_matching_max_marginals_are_caught(shift, lp_flag):
    # +7 makes every entry 4 = the LP value (a plausible bug: returning the max); +100 exceeds the LP
    class Shifted(BipartiteMatching):
        def max_marginals(self, theta):
            return super().max_marginals(theta) + shift

    _, theta = empty_matching_best()
    row = check_structure(Shifted(allow_unmatched=True), theta).row("max_marginals")
    assert row.agrees_enumeration is False
    assert row.agrees_lp is lp_flag


def test_max_marginals_must_reach_lp_when_a_maximiser_sets_an_indicator():
    class Low(BipartiteMatching):
        def max_marginals(self, theta):
            return super().max_marginals(theta) - 1.0

    theta = MatchingPotentials(np.array([[5.0, -1.0], [-1.0, 5.0]]), np.zeros(2), np.zeros(2))
    row = check_structure(Low(allow_unmatched=True), theta).row("max_marginals")
    assert row.agrees_enumeration is False and row.agrees_lp is False
    assert "max 9 vs LP 10" in row.detail


# ----------------------------------------------------------------------------- the built-in suite
def test_builtin_suite_rows_and_coverage():
    suite = check_builtin_structures(["matching", "Chain", "matching"], seed=1, n_instances=1)
    assert suite.ok, suite.table()
    assert [name for name in dict.fromkeys(n for n, _, _ in suite.checks)] == ["matching", "chain"]
    assert len(suite.checks) == len(BUILTIN_VARIANTS["matching"]) + len(BUILTIN_VARIANTS["chain"])
    assert {(r.structure, r.oracle) for r in suite.rows} == {(s, o) for s in ("matching", "chain") for o in ORACLES}
    row = suite.row("chain", "marginals")
    assert row.agrees_enumeration is True and row.agrees_lp is True and row.n_instances == 6
    assert row.total_seconds >= row.median_seconds >= 0
    assert suite.row("matching", "marginals").agrees_enumeration is None
    assert suite.row("matching", "marginals").detail.startswith("not supported")
    labels = [label for _, label, _ in suite.checks]
    for needle in ("length=1, n_states=3, shared=True", "length=1, n_states=2, shared=False",
                   "allow_unmatched=True", "n_left=4, n_right=2", "n_left=2, n_right=4, allow_unmatched=False"):
        assert any(needle in label for label in labels), needle
    assert suite.table().splitlines()[-1].endswith("all OK")


def test_builtin_suite_alternates_integer_and_float():
    suite = check_builtin_structures(["multiclass"], n_instances=3)
    assert len(suite.checks) == 3 * len(BUILTIN_VARIANTS["multiclass"])
    kinds = [label.rsplit(", ", 1)[1] for _, label, _ in suite.checks[:3]]
    assert kinds == ["integer", "float", "integer"]
    assert suite.ok


def test_builtin_suite_catches_a_broken_oracle(monkeypatch):
    original = BipartiteMatching.topk

    def bad_topk(self, theta, k):
        outs, scores = original(self, theta, k)
        return outs, scores + 0.25

    monkeypatch.setattr(BipartiteMatching, "topk", bad_topk)
    suite = check_builtin_structures(["matching"], n_instances=1)
    assert not suite.ok
    assert [(r.structure, r.oracle) for r in suite.failures()] == [("matching", "topk")]
    n = len(BUILTIN_VARIANTS["matching"])
    assert suite.row("matching", "topk").detail.startswith(f"{n}/{n} failed; first (n_left=1")
    assert "FAILED: 1 row" in suite.table()


def test_suite_report_aggregation():
    good = CheckReport("X", 3, [CheckRow("argmax", True, True, 1.0),
                                CheckRow("topk", None, None, 0.0, "not supported")])
    bad = CheckReport("X", 5, [CheckRow("argmax", True, False, 3.0, "off by 1"),
                               CheckRow("topk", None, None, 0.0, "not supported")])
    suite = SuiteReport([("x", "a", good), ("x", "b", bad), ("x", "c", good)], seconds=0.5)
    row = suite.row("x", "argmax")
    assert row.agrees_enumeration is True and row.agrees_lp is False and not row.ok
    assert row.total_seconds == 5.0 and row.median_seconds == 1.0
    assert row.detail == "1/3 failed; first (b): off by 1"
    assert suite.row("x", "topk").agrees_enumeration is None and suite.row("x", "topk").detail == "not supported"
    assert not suite.ok and [r.oracle for r in suite.failures()] == ["argmax"]
    table = suite.table()
    assert "NO" in table and table.splitlines()[-1] == "3 instances of 1 structure checked in 0.50s: FAILED: 1 row"
    ok_suite = SuiteReport([("x", "a", good)])
    assert ok_suite.ok and ok_suite.row("x", "argmax").detail == "1 compared (3-3 outputs each)"
    with pytest.raises(KeyError):
        ok_suite.row("x", "marginals")


def test_builtin_suite_bad_arguments():
    with pytest.raises(InvalidInputError, match="unknown structure 'nope'; valid names: chain, multiclass, matching"):
        check_builtin_structures(["chain", "nope"])
    with pytest.raises(InvalidInputError, match="n_instances"):
        check_builtin_structures(["multiclass"], n_instances=0)
    assert set(BUILTIN_VARIANTS) == set(BUILTIN_STRUCTURES)


# ----------------------------------------------------------------------------- project row references
class LooseQP(LoosePolytope):
    """Its default-style projection is the QP over a loose description: wrong, and self-consistent."""

    def project(self, v):
        return self.project_qp(v)


def test_project_row_does_not_compare_the_qp_with_itself():
    _, theta = chain_instance(seed=3)
    row = check_structure(LooseQP(3), theta).row("project")
    assert row.agrees_enumeration is False, row.detail  # off the hull of the enumerated vertices
    assert row.agrees_lp is False, row.detail  # off the hull projection computed with the argmax oracle
    assert "hull reference" in row.detail and "argmax oracle" in row.detail


def test_lp_and_tree_are_builtin():
    assert {"lp", "tree"} <= set(BUILTIN_STRUCTURES)
    suite = check_builtin_structures(["lp", "tree"], n_instances=1)
    assert suite.ok, suite.table()


# --------------------------------------------------------------------------- issue 22
@pytest.mark.parametrize("allow", [False, True])
def test_plain_matching_array_is_checked_like_matching_potentials(allow):
    """A plain (L, R) edge array, which BipartiteMatching accepts, gives the same report as the
    equivalent MatchingPotentials (it used to fail with a broadcast error in the reference scores)."""
    rng = np.random.default_rng(3)
    edge = rng.normal(size=(2, 3))
    structure = BipartiteMatching(allow_unmatched=allow)
    plain = check_structure(structure, edge)
    assert plain.ok, plain.table()
    full = structure.check_potentials(edge)
    named = check_structure(structure, full)
    assert [r.oracle for r in plain.rows] == [r.oracle for r in named.rows]
    assert [(r.agrees_enumeration, r.agrees_lp) for r in plain.rows] == \
        [(r.agrees_enumeration, r.agrees_lp) for r in named.rows]


def test_chain_with_forbidden_entries_is_checked_over_the_allowed_outputs():
    rng = np.random.default_rng(5)
    unary = rng.normal(size=(3, 3))
    unary[1, 0] = -np.inf
    pairwise = rng.normal(size=(3, 3))
    pairwise[2, 1] = -np.inf
    report = check_structure(Chain(3), ChainPotentials(unary, pairwise))
    assert report.ok, report.table()
    assert report.row("topk").agrees_enumeration


def test_every_oracle_must_refuse_when_every_output_is_forbidden():
    unary = np.zeros((3, 2))
    unary[1] = -np.inf
    report = check_structure(Chain(2), ChainPotentials(unary, np.zeros((2, 2))))
    assert report.ok, report.table()
    for oracle in ("lp_relaxation", "argmax", "topk", "marginals", "max_marginals"):
        assert report.row(oracle).detail.startswith("refused"), report.row(oracle).detail

    class Silent(Chain):  # returns a sequence of score -inf instead of refusing
        def argmax(self, theta):
            return np.zeros(np.shape(theta.unary)[0], dtype=np.int64)

    report = check_structure(Silent(2), ChainPotentials(unary, np.zeros((2, 2))))
    assert not report.row("argmax").ok and "must raise" in report.row("argmax").detail
