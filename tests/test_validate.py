"""check_structure reports agreement on correct structures and catches broken oracles."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import pytest
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures import Chain, ChainPotentials, MultiClass, Polytope
from structopt.structures.base import Structure
from structopt.validate import CheckReport, CheckRow, check_structure, random_instance, random_like

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
    # the other oracles are unaffected
    others = [r for r in report.rows if r.oracle != oracle and cls is not LoosePolytope]
    assert all(r.ok for r in others), report.table()


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
    assert report.row("project").agrees_lp is True  # default project is the QP itself
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
    with pytest.raises(InvalidInputError, match="no random instance"):
        random_instance("matching")
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
