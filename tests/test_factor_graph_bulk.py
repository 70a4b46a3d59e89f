"""Pairwise tables added in bulk (``FactorGraph.add_pairwise_tables``): the same graph as one ``add_table`` per edge."""

from __future__ import annotations

import re

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.marginals import PairwiseMRF
from structopt.marginals.map import map_inference, mrf_to_factor_graph
from structopt.structures.factor_graph import FactorGraph


def _random_edges(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    pick = rng.choice(len(pairs), size=min(m, len(pairs)), replace=False)
    edges = np.array([pairs[p] for p in pick], dtype=np.int64).reshape(-1, 2)
    flip = rng.random(len(edges)) < 0.5
    edges[flip] = edges[flip, ::-1]
    return edges


@pytest.mark.parametrize("seed", range(6))
def test_bulk_tables_build_the_same_graph_as_one_table_at_a_time(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    states = rng.integers(1, 5, size=n)
    edges = _random_edges(rng, n, int(rng.integers(0, 12)))
    one = FactorGraph(states.tolist())
    for u, v in edges.tolist():
        one.add_table([u, v])
    bulk = FactorGraph(states)
    assert bulk.add_pairwise_tables(edges).tolist() == list(range(len(edges)))
    assert bulk.n_factors == one.n_factors
    for name in one.flat.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(bulk.flat, name), getattr(one.flat, name), err_msg=name)
    theta = one.potentials(unary=[rng.normal(size=int(s)) for s in states],
                           tables={f: rng.normal(size=(int(states[u]), int(states[v])))
                                   for f, (u, v) in enumerate(edges.tolist())})
    a, b = one.map(theta, method="ad3"), bulk.map(theta, method="ad3")
    assert a.score == b.score and a.upper_bound == b.upper_bound
    # the per-factor views, made on demand, agree too
    assert [bulk.factor(f) for f in range(bulk.n_factors)] == [one.factor(f) for f in range(one.n_factors)]
    z = bulk.potentials()
    np.testing.assert_array_equal(z.factors, one.potentials().factors)
    if n >= 3 and edges.shape[0] < n * (n - 1) // 2:  # a later table joins the bulk ones
        have = {frozenset(e) for e in edges.tolist()}
        extra = next([u, v] for u in range(n) for v in range(u + 1, n) if frozenset((u, v)) not in have)
        assert bulk.add_table(extra) == one.add_table(extra)
        np.testing.assert_array_equal(bulk.flat.toff, one.flat.toff)


@pytest.mark.parametrize("edges, message", [
    (np.array([[0, 3]]), "out of range"),
    (np.array([[1, 1]]), "repeated"),
    (np.array([[0, 1], [2, 0], [1, 0]]), "duplicate table"),
    (np.array([[0.0, 1.0]]), "integer array"),
    (np.array([0, 1, 2]), "shape"),
])
def test_bulk_tables_refuse_what_add_table_refuses(edges, message):
    fg = FactorGraph([2, 3, 2])
    with pytest.raises(InvalidInputError, match=message):
        fg.add_pairwise_tables(edges)
    assert fg.n_factors == 0


def test_bulk_tables_after_a_table_refuse_its_pair():
    fg = FactorGraph([2, 2, 2])
    fg.add_table([1, 0])
    with pytest.raises(InvalidInputError, match="duplicate table"):
        fg.add_pairwise_tables(np.array([[1, 2], [0, 1]]))
    assert fg.add_pairwise_tables(np.array([[1, 2], [0, 2]])).tolist() == [1, 2]


def test_mrf_conversion_keeps_the_layout_and_the_answer():
    rng = np.random.default_rng(4)
    cards = [2, 3, 2, 4]
    edges = [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)]
    mrf = PairwiseMRF.from_potentials([rng.normal(size=c) for c in cards], edges,
                                      [rng.normal(size=(cards[i], cards[j])) for i, j in edges])
    fg, _ = mrf_to_factor_graph(mrf)
    assert [fg.factor(f)[1] for f in range(fg.n_factors)] == [tuple(e) for e in mrf.edges.tolist()]
    best = max(mrf.score(np.array(y)) for y in np.ndindex(*cards))
    res = map_inference(mrf, method="bnb")
    assert res.log_score == pytest.approx(best) and res.optimal


def test_bulk_tables_refuse_exactly_the_rows_add_table_refuses():
    # random rows with defects (out of range, a repeated variable, a pair twice in either order): the compiled
    # pass refuses iff one add_table per row does; the message names the first row of the first kind of defect
    # (range, then repeats, then duplicates), checked on the whole array
    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(2, 7))
        edges = rng.integers(-1, n + 1, size=(int(rng.integers(1, 9)), 2))
        one = FactorGraph([2] * n)
        refused = False
        for u, v in edges.tolist():
            try:
                one.add_table([u, v])
            except InvalidInputError:
                refused = True
                break
        bulk = FactorGraph([2] * n)
        if not refused:
            bulk.add_pairwise_tables(edges)
            np.testing.assert_array_equal(bulk.flat.order, one.flat.order)
            continue
        out = np.flatnonzero(((edges < 0) | (edges >= n)).any(axis=1))
        loops = np.flatnonzero(edges[:, 0] == edges[:, 1])
        if out.size:
            expected = f"table factor {out[0]}: a variable of {edges[out[0]].tolist()} is out of range"
        elif loops.size:
            expected = f"table factor {loops[0]}: variable repeated"
        else:
            expected = "duplicate table"
        with pytest.raises(InvalidInputError, match=re.escape(expected)):
            bulk.add_pairwise_tables(edges)
        assert bulk.n_factors == 0 and bulk._flat is None


def test_bulk_tables_do_not_follow_the_callers_array():
    edges = np.array([[0, 1], [1, 2]], dtype=np.int64)
    fg = FactorGraph([2, 3, 2])
    fg.add_pairwise_tables(edges)
    edges[:] = [[2, 0], [0, 1]]
    assert fg.flat.evar.tolist() == [0, 1, 1, 2]
    assert [fg.factor(f)[1] for f in range(fg.n_factors)] == [(0, 1), (1, 2)]


@pytest.mark.parametrize("seed", range(3))
def test_bulk_layout_equals_the_generic_one_on_larger_graphs(seed):
    # several components, isolated variables, mixed state counts: every flat array (breadth-first order included)
    rng = np.random.default_rng(100 + seed)
    n = 60
    states = rng.integers(1, 5, size=n)
    edges = _random_edges(rng, n, 150)
    one = FactorGraph(states.tolist())
    for u, v in edges.tolist():
        one.add_table([u, v])
    bulk = FactorGraph(states)
    bulk.add_pairwise_tables(edges)
    for name in one.flat.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(bulk.flat, name), getattr(one.flat, name), err_msg=name)
