"""The shared DP recursion (structopt.structures.dp): argmax, top-K, marginals and max-marginals against
enumeration on random hypergraphs (chains, trees, alignment lattices, binary bracketings), with ties and
-inf; Chain.as_dp and TreeStructure against their own oracles; ChainModel(structure=...); the example."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

import structopt as so
import structopt.validate
from structopt.smoothing import logsumexp
from structopt.structures.base import flatten
from structopt.structures.dp import DPPotentials, DPStructure, Hypergraph, LabelDP, path_schedule
from structopt.structures.tree import TreeStructure

ROOT = Path(__file__).resolve().parents[1]


def _lattice(rng: np.random.Generator) -> DPStructure:
    """Monotone alignment of n and m positions: item (i, j), moves match / skip left / skip right."""
    n, m = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    item = {(i, j): i * (m + 1) + j for i in range(n + 1) for j in range(m + 1)}
    heads, tails = [0], [[]]
    for (i, j), v in item.items():
        for di, dj in ((1, 1), (1, 0), (0, 1)):
            if (i - di, j - dj) in item:
                heads.append(v)
                tails.append([item[i - di, j - dj]])
    scores = list(range(len(heads)))
    scores[0] = -1
    return DPStructure(len(item), heads, tails, scores)


def _bracketing(rng: np.random.Generator) -> DPStructure:
    """Binary bracketings of n positions (CKY): item (i, j) from (i, k) and (k, j); score per span, shared."""
    n = int(rng.integers(1, 5))
    spans = sorted(((i, j) for i in range(n) for j in range(i + 1, n + 1)), key=lambda s: (s[1] - s[0], s[0]))
    item = {s: v for v, s in enumerate(spans)}
    heads, tails, scores = [], [], []
    for (i, j), v in item.items():
        splits = [[]] if j == i + 1 else [[item[i, k], item[k, j]] for k in range(i + 1, j)]
        for split in splits:
            heads.append(v)
            tails.append(split)
            scores.append(v if rng.random() < 0.5 else len(spans) + len(heads) - 1)  # shared per span, or own
    used = sorted(set(scores))
    remap = {s: r for r, s in enumerate(used)}
    return DPStructure(len(spans), heads, tails, [remap[s] for s in scores])


def _labels(rng: np.random.Generator) -> DPStructure:
    """A random forest's or chain's labellings (LabelDP), possibly with dropped hyperedges."""
    if rng.random() < 0.5:
        tree, _ = TreeStructure.example(rng, n_nodes=int(rng.integers(1, 5)), n_states=int(rng.integers(1, 4)))
        return tree.as_dp()
    S, T = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    allowed = rng.random((S, S)) < 0.7
    allowed[0, 0] = True
    return so.Chain(S, allowed=allowed).as_dp(T)


def _random_theta(structure: DPStructure, rng: np.random.Generator, kind: int) -> DPPotentials:
    n = structure.graph.n_scores
    score = rng.integers(-2, 3, n).astype(float) if kind % 2 else rng.normal(size=n)
    if kind % 3 == 0:
        score[rng.random(n) < 0.25] = -np.inf
    return DPPotentials(score)


def _brute_force(structure: DPStructure, theta: DPPotentials):
    outs = structure.enumerate(theta)
    stats = np.array([flatten(structure.stats(y)) for y in outs])
    scores = np.array([structure.score(theta, y) for y in outs])
    return outs, stats, scores


@pytest.mark.parametrize("family", [_lattice, _bracketing, _labels])
def test_oracles_match_enumeration(family):
    rng = np.random.default_rng(hash(family.__name__) % 2**32)
    checked = 0
    for trial in range(60):
        structure = family(rng)
        theta = _random_theta(structure, rng, trial)
        _, stats, scores = _brute_force(structure, theta)
        assert stats.max() <= 1.0  # each score index at most once per derivation: 0/1 statistics
        finite = np.isfinite(scores)
        if not finite.any():
            for oracle in (structure.argmax, structure.marginals, structure.max_marginals,
                           lambda t, s=structure: s.topk(t, 3)):
                with pytest.raises(so.InvalidInputError, match="forbid every output"):
                    oracle(theta)
            continue
        best = scores.max()
        y = structure.argmax(theta)
        assert structure.score(theta, y) == pytest.approx(best, abs=1e-9)
        top, top_scores = structure.topk(theta, 6)
        expected = np.sort(scores[finite])[::-1][:6]
        np.testing.assert_allclose(top_scores, expected, atol=1e-9)
        assert [structure.score(theta, o) for o in top] == pytest.approx(list(top_scores), abs=1e-9)
        assert len({flatten(structure.stats(o)).tobytes() for o in top}) == len(top)
        assert structure.score(theta, top[0]) == pytest.approx(structure.score(theta, y))
        log_z, mu = structure.marginals(theta)
        bf_log_z = logsumexp(scores)
        assert log_z == pytest.approx(bf_log_z, abs=1e-9)
        np.testing.assert_allclose(mu.score, np.exp(scores - bf_log_z) @ stats, atol=1e-12)
        mm = structure.max_marginals(theta)
        np.testing.assert_allclose(mm, np.where(stats > 0, scores[:, None], -np.inf).max(axis=0), atol=1e-9)
        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("family", [_lattice, _bracketing, _labels])
def test_check_structure_passes(family):
    rng = np.random.default_rng(7)
    for trial in range(4):
        structure = family(rng)
        report = so.validate.check_structure(structure, _random_theta(structure, rng, trial + 1))
        assert report.ok, report.table()


def test_chain_as_dp_reproduces_chain_oracles():
    """Masks, -inf entries and integer ties: every Chain oracle equals the DP helper's."""
    rng = np.random.default_rng(5)
    compared = 0
    for t in range(150):
        S, T = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        masks = {}
        if t % 3 == 0:
            masks = {"allowed": rng.random((S, S)) < 0.7, "allowed_start": rng.random(S) < 0.8,
                     "allowed_end": rng.random(S) < 0.8}
            for mask in masks.values():
                mask.flat[0] = True
        chain = so.Chain(S, **masks)
        theta = so.ChainPotentials(rng.integers(-2, 3, (T, S)).astype(float) if t % 2 else rng.normal(size=(T, S)),
                                   rng.integers(-2, 3, (S, S)).astype(float))
        if t % 4 == 1:
            theta.unary[rng.random((T, S)) < 0.3] = -np.inf
        dp = chain.as_dp(T)
        w = DPPotentials(flatten(chain.expand(theta)))
        try:
            y = chain.argmax(theta)
        except so.InvalidInputError:
            with pytest.raises(so.InvalidInputError):
                dp.argmax(w)
            continue
        y_dp = dp.argmax(w)
        assert dp.score(w, y_dp) == pytest.approx(chain.score(theta, y))
        if t % 2 == 0 and t % 4 != 1:  # float potentials: a unique maximiser
            np.testing.assert_array_equal(y_dp, y)
        log_z, marg = chain.marginals(theta)
        log_z_dp, marg_dp = dp.marginals(w)
        assert log_z_dp == pytest.approx(log_z, abs=1e-10)
        np.testing.assert_allclose(marg_dp.score, flatten(marg), atol=1e-12)
        np.testing.assert_allclose(dp.max_marginals(w)[:T * S].reshape(T, S), chain.max_marginals(theta))
        _, scores = chain.topk(theta, 7)
        _, scores_dp = dp.topk(w, 7)
        np.testing.assert_allclose(scores_dp, scores, atol=1e-10)
        assert sorted(map(tuple, chain.enumerate(theta))) == sorted(map(tuple, dp.enumerate(w)))
        compared += 1
    assert compared >= 100


def test_tree_oracles_match_enumeration():
    rng = np.random.default_rng(11)
    for t in range(40):
        tree, theta = TreeStructure.example(rng, n_nodes=int(rng.integers(1, 6)), n_states=int(rng.integers(1, 4)),
                                            integer=bool(t % 2), shared=bool(t % 3 == 0))
        outs = list(tree.outputs(theta))
        scores = np.array([tree.score(theta, y) for y in outs])
        assert tree.score(theta, tree.argmax(theta)) == pytest.approx(scores.max())
        labels, top = tree.topk(theta, 5)
        np.testing.assert_allclose(top, np.sort(scores)[::-1][:5], atol=1e-9)
        np.testing.assert_allclose([tree.score(theta, y) for y in labels], top, atol=1e-9)
        log_z, marg = tree.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores))
        probs = np.exp(scores - logsumexp(scores))
        node = sum(p * tree.stats(y).unary for p, y in zip(probs, outs, strict=True))
        np.testing.assert_allclose(marg.unary, node, atol=1e-12)
        mm = tree.max_marginals(theta)
        for v, s in itertools.product(range(tree.n_nodes), range(tree.n_states)):
            assert mm[v, s] == pytest.approx(max(sc for sc, y in zip(scores, outs, strict=True) if y[v] == s))


def test_hypergraph_and_outputs_refused():
    with pytest.raises(so.InvalidInputError, match="topological"):
        Hypergraph(2, [0, 1], [[1], [0]], [0, 1])
    with pytest.raises(so.InvalidInputError, match="goal"):
        Hypergraph(2, [0], [[]], [0])
    dp = so.Chain(2).as_dp(3)
    theta = DPPotentials(np.zeros(dp.graph.n_scores))
    with pytest.raises(so.InvalidInputError):
        dp.validate_output(np.array([0, 2, 1]), theta)
    with pytest.raises(so.InvalidInputError, match="shape"):
        dp.argmax(DPPotentials(np.zeros(3)))
    with pytest.raises(so.InvalidInputError, match="nan"):
        dp.argmax(DPPotentials(np.full(dp.graph.n_scores, np.nan)))
    lattice = _lattice(np.random.default_rng(0))
    with pytest.raises(so.InvalidInputError, match="not a derivation"):
        lattice.validate_output(np.array([0]))


def _chain_data(seed: int = 0, n: int = 10):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(rng.integers(1, 5)), 4)) for _ in range(n)]
    Y = [rng.integers(0, 3, len(x)) for x in X]
    return X, Y


class _TopkOverride(so.Chain):
    """A user's Chain subclass overriding an oracle the fused kernels compute."""

    def argmax(self, theta):
        return self.topk(theta, 1)[0][0]


def test_chain_model_structure_argument():
    X, Y = _chain_data()
    allowed = np.ones((3, 3), dtype=bool)
    allowed[2, 0] = False
    Y = [np.zeros(len(y), dtype=np.int64) for y in Y]
    by_masks = so.SSVMProblem(so.ChainModel(4, 3, allowed=allowed), X, Y, so.Hamming(), 0.1)
    by_structure = so.SSVMProblem(so.ChainModel(4, 3, structure=so.Chain(3, allowed=allowed)), X, Y, so.Hamming(), 0.1)
    assert by_structure.fused() is not None  # a configured Chain keeps the fused kernels
    w = np.random.default_rng(1).normal(size=by_masks.model.n_params)
    assert by_structure.primal(w) == pytest.approx(by_masks.primal(w))
    from structopt.solvers import bcfw

    a, b = bcfw(by_masks, max_passes=3, random_state=0), bcfw(by_structure, max_passes=3, random_state=0)
    np.testing.assert_allclose(a.w, b.w)

    model = so.ChainModel(4, 3, structure=_TopkOverride(3))
    assert "_TopkOverride" in repr(model)
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), 0.1)
    assert problem.fused() is None and "argmax" not in model.structure.kernel_oracles()
    generic = bcfw(problem, max_passes=3, random_state=0)
    plain = bcfw(so.SSVMProblem(so.ChainModel(4, 3), X, Y, so.Hamming(), 0.1), max_passes=3, random_state=0)
    np.testing.assert_allclose(generic.w, plain.w, atol=1e-9)
    with pytest.raises(so.NotSupportedError):
        bcfw(problem, max_passes=1, fused=True)

    with pytest.raises(so.InvalidInputError, match="n_states"):
        so.ChainModel(4, 3, structure=so.Chain(2))
    with pytest.raises(so.InvalidInputError, match="Chain instance"):
        so.ChainModel(4, 3, structure=so.TreeStructure([(0, 1)], 3))
    with pytest.raises(so.InvalidInputError, match="not both"):
        so.ChainModel(4, 3, allowed=allowed, structure=so.Chain(3))


def test_label_dp_path_schedule_matches_chain():
    schedule = path_schedule(4)
    dp = LabelDP(np.array([[0, 1], [1, 2], [2, 3]]), 2, schedule)
    assert len(list(dp.outputs())) == 16


def test_example_dp_structure():
    """The example: a semi-Markov segmenter in <= 45 lines of user code, checked and trained by every solver."""
    path = ROOT / "examples" / "dp_structure.py"
    source = path.read_text().split("\n")
    start = next(i for i, line in enumerate(source) if "user code starts here" in line)
    end = next(i for i, line in enumerate(source) if "user code ends here" in line)
    assert sum(1 for line in source[start + 1:end] if line.strip()) <= 45
    spec = importlib.util.spec_from_file_location("dp_structure_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = module.main(passes=2, n=12, verbose=False)
    assert len(values) == len(module.SOLVERS)
    assert all(np.isfinite(v) for v in values.values())


def _eisner_builder(size: int):
    """A user's builder: the potentials' length (n + 1)**2 gives the sentence length n (Eisner's spans)."""
    from structopt.structures.dependency import eisner_hypergraph

    n = round(size ** 0.5) - 1
    if (n + 1) ** 2 != size:
        raise so.InvalidInputError(f"{size} is not a square")
    return eisner_hypergraph(n, False)[0]


def test_from_builder_serves_every_size():
    """One DPStructure.from_builder object for sentences of lengths 1..4: every oracle against enumeration,
    each size built once, and the same answers as the built-in projective DependencyTree."""
    calls = []

    def builder(size: int):
        calls.append(size)
        return _eisner_builder(size)

    family = DPStructure.from_builder(builder)
    tree = so.DependencyTree(projective=True, single_root=False)
    rng = np.random.default_rng(11)
    for trial in range(12):
        n = 1 + trial % 4
        theta = DPPotentials(rng.normal(size=(n + 1) ** 2))
        outs = family.enumerate(theta)
        stats = np.array([flatten(family.stats(y, theta)) for y in outs])
        scores = np.array([family.score(theta, y) for y in outs])
        assert len(outs) == len(tree.enumerate(so.DependencyPotentials(theta.score.reshape(n + 1, n + 1))))
        assert family.score(theta, family.argmax(theta)) == pytest.approx(scores.max())
        log_z, mu = family.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores))
        np.testing.assert_allclose(mu.score, np.exp(scores - log_z) @ stats, atol=1e-12)
        _, top_scores = family.topk(theta, 4)
        np.testing.assert_allclose(top_scores, np.sort(scores)[::-1][:4], atol=1e-9)
        np.testing.assert_allclose(family.max_marginals(theta),
                                   np.where(stats > 0, scores[:, None], -np.inf).max(axis=0), atol=1e-9)
        assert log_z == pytest.approx(tree.marginals(so.DependencyPotentials(theta.score.reshape(n + 1, n + 1)))[0])
    assert sorted(calls) == [4, 9, 16, 25]  # each size built once
    report = so.validate.check_structure(family, DPPotentials(rng.normal(size=16)))
    assert report.ok, report.table()


def test_from_builder_refusals():
    with pytest.raises(so.InvalidInputError, match="builder"):
        DPStructure.from_builder(3)
    family = DPStructure.from_builder(_eisner_builder)
    with pytest.raises(so.InvalidInputError, match="not a square"):
        family.argmax(DPPotentials(np.zeros(5)))
    with pytest.raises(so.InvalidInputError, match="like="):
        family.stats(np.array([0]), None)
    wrong = DPStructure.from_builder(lambda size: _eisner_builder(4))
    with pytest.raises(so.InvalidInputError, match="4 score indices"):
        wrong.argmax(DPPotentials(np.zeros(16)))
    bad = DPStructure.from_builder(lambda size: "a graph")
    with pytest.raises(so.InvalidInputError, match="Hypergraph or a DPStructure"):
        bad.argmax(DPPotentials(np.zeros(4)))


def test_from_builder_per_node_loss_per_size():
    """Chains of every length as one family (each length's LabelDP): the Hamming loss's linear terms equal the
    loss on every output, with states_per_node read per instance; a builder of plain hypergraphs says why not."""
    S = 2

    def chains(size: int):
        T = (size + S * S) // (S + S * S)  # size = T * S + (T - 1) * S * S
        return so.Chain(S).as_dp(T)

    family = DPStructure.from_builder(chains)
    rng = np.random.default_rng(5)
    for T in (1, 2, 3):
        theta = DPPotentials(rng.normal(size=T * S + (T - 1) * S * S))
        assert family.states_per_node(theta) == S
        gold = family.argmax(DPPotentials(rng.normal(size=theta.score.size)))
        c, const = so.Hamming().linear_terms(family, gold, theta)
        for y in family.outputs(theta):
            assert family.score(c, y) + const == pytest.approx(so.Hamming()(gold, y))
    with pytest.raises(so.NotSupportedError, match="states_per_node"):
        so.Hamming().linear_terms(DPStructure.from_builder(_eisner_builder), np.array([0]), DPPotentials(np.zeros(4)))
