"""Dependency trees (structopt.structures.dependency): every oracle against enumeration of all head arrays for
n <= 5 (non-projective and projective, single- and multi-root, ties and -inf), the tree counts, check_structure,
the n = 100 matrix-tree theorem against a long-double reference, the Hamming loss over heads, DependencyModel and
arc_features, bad input, and a BCFW training smoke test."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit

import structopt as so
import structopt.validate
from structopt.models.dependency import arc_features
from structopt.smoothing import logsumexp
from structopt.structures import _dependency_kernels as kern
from structopt.structures.dependency import DependencyPotentials, DependencyTree, tree_mask

VARIANTS = [(p, s) for p in (False, True) for s in (True, False)]


def _theta(rng: np.random.Generator, n: int, kind: int) -> DependencyPotentials:
    arcs = rng.integers(-2, 3, (n + 1, n + 1)).astype(float) if kind % 2 else rng.normal(scale=2.0, size=(n + 1, n + 1))
    if kind % 3 == 0:
        arcs[rng.random(arcs.shape) < 0.3] = -np.inf
    return DependencyPotentials(arcs)


def _brute(tree: DependencyTree, theta: DependencyPotentials):
    outs = tree.enumerate(theta)
    stats = np.array([tree.stats(y, theta).arcs for y in outs])
    scores = np.array([tree.score(theta, y) for y in outs])
    return outs, stats, scores


@pytest.mark.parametrize("projective,single_root", VARIANTS)
def test_oracles_match_enumeration(projective, single_root):
    tree = DependencyTree(projective=projective, single_root=single_root)
    rng = np.random.default_rng(17 + 2 * projective + single_root)
    checked = refused = 0
    for trial in range(24):
        n = 1 + trial % 5
        theta = _theta(rng, n, trial)
        _, stats, scores = _brute(tree, theta)
        finite = np.isfinite(scores)
        if not finite.any():
            for oracle in (tree.argmax, tree.marginals, tree.max_marginals, lambda t: tree.topk(t, 3)):
                with pytest.raises(so.InvalidInputError, match="forbid every output"):
                    oracle(theta)
            refused += 1
            continue
        y = tree.argmax(theta)
        assert tree.score(theta, y) == pytest.approx(scores.max(), abs=1e-9)
        top, top_scores = tree.topk(theta, 7)
        np.testing.assert_allclose(top_scores, np.sort(scores[finite])[::-1][:7], atol=1e-9)
        assert [tree.score(theta, o) for o in top] == pytest.approx(list(top_scores), abs=1e-9)
        assert len({o.tobytes() for o in top}) == len(top)
        log_z, mu = tree.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores), abs=1e-9)
        np.testing.assert_allclose(mu.arcs, np.tensordot(np.exp(scores - log_z), stats, axes=1), atol=1e-10)
        mm = tree.max_marginals(theta)
        np.testing.assert_allclose(mm, np.where(stats > 0, scores[:, None, None], -np.inf).max(axis=0), atol=1e-9)
        checked += 1
    assert checked >= 12


@pytest.mark.parametrize("projective,single_root", VARIANTS)
def test_labelled_oracles_match_enumeration(projective, single_root):
    tree = DependencyTree(projective=projective, single_root=single_root, n_labels=2)
    rng = np.random.default_rng(29 + 2 * projective + single_root)
    checked = 0
    for trial in range(8):
        n = 1 + trial % 3
        arcs = rng.integers(-2, 3, (n + 1, n + 1, 2)).astype(float) if trial % 2 else rng.normal(size=(n + 1, n + 1, 2))
        if trial % 3 == 0:
            arcs[rng.random(arcs.shape) < 0.3] = -np.inf
        theta = DependencyPotentials(arcs)
        outs, stats, scores = _brute(tree, theta)
        assert all(o.shape == (2, n) for o in outs)
        finite = np.isfinite(scores)
        if not finite.any():
            with pytest.raises(so.InvalidInputError, match="forbid every output"):
                tree.argmax(theta)
            continue
        assert tree.score(theta, tree.argmax(theta)) == pytest.approx(scores.max(), abs=1e-9)
        top, top_scores = tree.topk(theta, 6)
        np.testing.assert_allclose(top_scores, np.sort(scores[finite])[::-1][:6], atol=1e-9)
        assert [tree.score(theta, o) for o in top] == pytest.approx(list(top_scores), abs=1e-9)
        assert len({o.tobytes() for o in top}) == len(top)
        log_z, mu = tree.marginals(theta)
        assert log_z == pytest.approx(logsumexp(scores), abs=1e-9)
        np.testing.assert_allclose(mu.arcs, np.tensordot(np.exp(scores - log_z), stats, axes=1), atol=1e-10)
        np.testing.assert_allclose(tree.max_marginals(theta),
                                   np.where(stats > 0, scores[:, None, None, None], -np.inf).max(axis=0), atol=1e-9)
        for loss in (so.Hamming(), so.Hamming(normalize=True)):  # heads and labels: 2n nodes
            gold = outs[int(rng.integers(len(outs)))]
            c, const = loss.linear_terms(tree, gold, theta)
            assert [tree.score(c, y) + const for y in outs] == pytest.approx([loss(gold, y) for y in outs])
        checked += 1
    assert checked >= 4
    report = so.validate.check_structure(tree, DependencyPotentials(rng.normal(size=(4, 4, 2))))
    assert report.ok, report.table()


def test_tree_counts_and_nesting():
    for n in range(1, 6):
        theta = DependencyPotentials(np.zeros((n + 1, n + 1)))
        sets = {(p, s): {y.tobytes() for y in DependencyTree(p, s).outputs(theta)} for p, s in VARIANTS}
        assert len(sets[False, True]) == n ** (n - 1)  # rooted labelled trees on n nodes (Cayley)
        assert len(sets[False, False]) == (n + 1) ** (n - 1)  # spanning trees of n + 1 nodes rooted at 0
        assert len(sets[True, False]) == math.comb(3 * n, n) // (2 * n + 1)  # projective trees with a root
        for s in (True, False):
            assert sets[True, s] <= sets[False, s]
        assert sets[False, True] <= sets[False, False] and sets[True, True] <= sets[True, False]
    # the vectorised filter against a plain recursive check of every head array of n = 4
    n = 4
    heads = np.array(list(itertools.product(range(n + 1), repeat=n)))

    def plain(h: np.ndarray) -> bool:
        for m in range(1, n + 1):
            seen, v = set(), m
            while v != 0:
                if v in seen or h[v - 1] == v:
                    return False
                seen.add(v)
                v = h[v - 1]
        return True

    np.testing.assert_array_equal(tree_mask(heads, False, False), [plain(h) for h in heads])


def test_projective_argmax_differs_when_best_tree_crosses():
    # 0 -> 2, 2 -> 4, 4 -> 1, 1 -> 3 crosses (2, 4) x (1, 3): the non-projective argmax; projective must differ
    arcs = np.full((5, 5), -5.0)
    for h, m in ((0, 2), (2, 4), (4, 1), (1, 3)):
        arcs[h, m] = 5.0
    theta = DependencyPotentials(arcs)
    best = DependencyTree().argmax(theta)
    np.testing.assert_array_equal(best, [4, 0, 1, 2])
    projective = DependencyTree(projective=True).argmax(theta)
    assert not np.array_equal(projective, best)
    with pytest.raises(so.InvalidInputError, match="not projective"):
        DependencyTree(projective=True).validate_output(best, theta)


@pytest.mark.parametrize("projective,single_root", VARIANTS)
def test_check_structure_passes(projective, single_root):
    rng = np.random.default_rng(3)
    tree = DependencyTree(projective=projective, single_root=single_root)
    for trial, n in enumerate((1, 3, 4)):
        theta = _theta(rng, n, trial + 1)
        report = so.validate.check_structure(tree, theta)
        assert report.ok, report.table()


def test_registered_and_checked_by_the_suite():
    report = so.validate.check_builtin_structures(["dependency"], n_instances=1)
    assert report.ok, report.table()


@functools.cache
def _all_trees(n: int, single_root: bool) -> np.ndarray:
    heads = np.array(list(itertools.product(range(n + 1), repeat=n)), dtype=np.int64).reshape(-1, n)
    return heads[tree_mask(heads, False, single_root)]


@pytest.mark.parametrize("single_root", [False, True])
def test_tarjan_chu_liu_edmonds_against_enumeration(single_root):
    # 1,200 random sentences of 1-6 words: heavy ties (scores in {-1, 0, 1}), continuous scores, -inf arcs,
    # and root arcs far larger than the rest; the kernel's tree is a tree of the best score, and it reports
    # infeasibility exactly when no tree has a finite score
    rng = np.random.default_rng(40 + single_root)
    columns = {n: np.arange(1, n + 1) for n in range(1, 7)}
    infeasible = 0
    for trial in range(1200):
        n = 1 + trial % 6
        kind = trial % 4
        s = rng.integers(-1, 2, (n + 1, n + 1)).astype(float) if kind < 2 else rng.normal(size=(n + 1, n + 1))
        if kind % 2:
            s[rng.random(s.shape) < 0.35] = -np.inf
        if trial % 7 == 0:
            s[0] += 50.0
        trees = _all_trees(n, single_root)
        scores = s[trees, columns[n]].sum(axis=1)
        heads, ok = kern.best_tree(s, single_root)
        if not np.isfinite(scores.max()):
            assert not ok
            infeasible += 1
            continue
        assert ok
        assert tree_mask(heads[None, 1:], False, single_root)[0]
        assert kern.tree_score(s, heads) == pytest.approx(scores.max(), abs=1e-12)
    assert 10 <= infeasible <= 300


def test_tarjan_chu_liu_edmonds_against_networkx():
    # longer sentences: multi-root against networkx's Edmonds; single root against the best of n multi-root
    # problems, each with one root arc allowed
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(11)
    for trial in range(5):
        n = 6 + 2 * trial
        s = rng.integers(-3, 4, (n + 1, n + 1)).astype(float) if trial % 2 else rng.normal(size=(n + 1, n + 1))

        def reference(arcs: np.ndarray) -> float:
            N = arcs.shape[0]
            graph = nx.DiGraph()
            graph.add_weighted_edges_from((h, m, arcs[h, m]) for h in range(N) for m in range(1, N)
                                          if h != m and arcs[h, m] > -np.inf)
            tree = nx.maximum_spanning_arborescence(graph)
            return sum(arcs[h, m] for h, m in tree.edges())

        heads, ok = kern.best_tree(s, False)
        assert ok and kern.tree_score(s, heads) == pytest.approx(reference(s), abs=1e-9)
        best = -np.inf
        for r in range(1, n + 1):
            one = s.copy()
            one[0, 1:][np.arange(1, n + 1) != r] = -np.inf
            best = max(best, reference(one))
        heads, ok = kern.best_tree(s, True)
        assert ok and np.sum(heads[1:] == 0) == 1
        assert kern.tree_score(s, heads) == pytest.approx(best, abs=1e-9)


def test_single_root_is_exact_with_large_root_scores():
    # the earlier kernel penalised root arcs by a constant ~4e15 here, which rounded 4e15 + 1 to 4e15's
    # neighbour and chose the worse root arc; the lexicographic order needs no constant
    s = np.zeros((3, 3))
    s[0, 1], s[0, 2] = 4e15, 4e15 + 1
    heads, ok = kern.best_tree(s, True)
    assert ok
    np.testing.assert_array_equal(heads[1:], [2, 0])


@njit(cache=True, inline="always")
def _old_better(k, w, bk, bw):
    # (k, w) > (bk, bw) in the lexicographic order (root-arc count first, then score)
    return k > bk or (k == bk and w > bw)


@njit(cache=True)
def _old_best_tree(s, single_root):
    # the kernel before issue 36 (Tarjan's form, single root by (minus root arcs, score) pairs compared
    # lexicographically in every comparison): the reference the faster kernel must agree with
    N = s.shape[0]
    heads = np.full(N, -1, dtype=np.int64)
    cap = 2 * N
    # rows of contracted super-nodes (c - N), grown by doubling: a leaf's row is its column of s (no copy)
    Wc = np.empty((min(N, 8), N))
    Kc = np.empty((min(N, 8), N), dtype=np.int64)  # minus the root arcs behind W (single root; else 0)
    Mc = np.empty((min(N, 8), N), dtype=np.int64)  # the original modifier of the arc behind W
    rep = np.arange(N)  # the outermost super-node holding each original node
    fpar = np.full(cap, -1, dtype=np.int64)  # the super-node each one was contracted into
    status = np.zeros(cap, dtype=np.int8)  # 0 untouched, 1 on the path, 2 finished (hangs from the root)
    status[0] = 2
    enter_u = np.empty(cap, dtype=np.int64)
    enter_m = np.empty(cap, dtype=np.int64)
    enter_w = np.zeros(cap)
    enter_k = np.zeros(cap, dtype=np.int64)
    path = np.empty(cap, dtype=np.int64)
    root_k = -1 if single_root else 0
    nxt = N
    for start in range(1, N):
        if status[rep[start]] != 0:
            continue
        a = start
        top = 0
        path[0] = a
        status[a] = 1
        while True:
            bu, bk, bw = -1, 0, -np.inf
            if a < N:  # a leaf: its column of s
                for u in range(N):
                    w = s[u, a]
                    if w == -np.inf or rep[u] == a:
                        continue
                    k = root_k if u == 0 else 0
                    if bu < 0 or _old_better(k, w, bk, bw):
                        bu, bk, bw = u, k, w
                bm = a
            else:
                r = a - N
                for u in range(N):
                    w = Wc[r, u]
                    if w == -np.inf or rep[u] == a:
                        continue
                    k = Kc[r, u]
                    if bu < 0 or _old_better(k, w, bk, bw):
                        bu, bk, bw = u, k, w
                bm = Mc[r, bu] if bu >= 0 else -1
            if bu < 0:
                return heads, False
            enter_u[a], enter_m[a], enter_w[a], enter_k[a] = bu, bm, bw, bk
            b = rep[bu]
            if status[b] == 2:  # the path hangs from the root now
                for i in range(top + 1):
                    status[path[i]] = 2
                break
            if status[b] == 0:
                top += 1
                path[top] = b
                status[b] = 1
                a = b
                continue
            # b is on the path: contract path[j..top] into c
            c = nxt
            nxt += 1
            r = c - N
            if r >= Wc.shape[0]:
                rows = min(2 * Wc.shape[0], N)
                Wc2, Kc2, Mc2 = np.empty((rows, N)), np.empty((rows, N), np.int64), np.empty((rows, N), np.int64)
                Wc2[:r], Kc2[:r], Mc2[:r] = Wc[:r], Kc[:r], Mc[:r]
                Wc, Kc, Mc = Wc2, Kc2, Mc2
            j = top
            while path[j] != b:
                j -= 1
            for u in range(N):
                Wc[r, u] = -np.inf
                Kc[r, u] = 0
                Mc[r, u] = -1
            for i in range(j, top + 1):
                x = path[i]
                fpar[x] = c
                ew, ek = enter_w[x], enter_k[x]
                if x < N:
                    for u in range(N):
                        w = s[u, x]
                        if w == -np.inf:
                            continue
                        w -= ew
                        k = (root_k if u == 0 else 0) - ek
                        if Wc[r, u] == -np.inf or _old_better(k, w, Kc[r, u], Wc[r, u]):
                            Wc[r, u], Kc[r, u], Mc[r, u] = w, k, x
                else:
                    q = x - N
                    for u in range(N):
                        w = Wc[q, u]
                        if w == -np.inf:
                            continue
                        w -= ew
                        k = Kc[q, u] - ek
                        if Wc[r, u] == -np.inf or _old_better(k, w, Kc[r, u], Wc[r, u]):
                            Wc[r, u], Kc[r, u], Mc[r, u] = w, k, Mc[q, u]
            for u in range(N):
                if fpar[rep[u]] == c:
                    rep[u] = c
                    Wc[r, u] = -np.inf  # arcs inside c
            status[c] = 1
            top = j
            path[top] = c
            a = c
    # expansion, newest super-node first (a super-node is newer than its members)
    dropped = np.zeros(cap, dtype=np.bool_)
    for v in range(nxt - 1, 0, -1):
        if dropped[v]:
            continue
        m = enter_m[v]
        heads[m] = enter_u[v]
        x = m
        while x != v:  # the super-nodes this arc enters through lose their own entering arcs
            dropped[x] = True
            x = fpar[x]
    if single_root:
        roots = 0
        for m in range(1, N):
            if heads[m] == 0:
                roots += 1
        if roots != 1:
            return heads, False
    return heads, True


def _agrees_with_the_previous_kernel(reference, single_root: bool, count: int, max_n: int, seed: int) -> None:
    # random sentences of 1-8 and of up to max_n words (ties, -inf arcs, root arcs raised or lowered): the same
    # feasibility and the same tree score as the previous kernel (`reference`)
    rng = np.random.default_rng(seed)
    several_roots = 0
    for trial in range(count):
        n = 1 + int(rng.integers(max_n)) if trial % 2 else 1 + trial % 8
        kind = trial % 5
        s = rng.integers(-2, 3, (n + 1, n + 1)).astype(float) if kind < 2 else rng.normal(size=(n + 1, n + 1))
        if trial % 4 == 1:
            s[rng.random(s.shape) < rng.uniform(0.2, 0.8)] = -np.inf
        if trial % 3 == 0:
            s[0] += rng.choice([-5.0, 3.0, 50.0])
        several_roots += int(np.sum(kern.best_tree(s, False)[0][1:] == 0) > 1)
        heads, ok = kern.best_tree(s, single_root)
        ref, ref_ok = reference(s, single_root)
        assert ok == ref_ok, trial
        if ok:
            assert tree_mask(heads[None, 1:], False, single_root)[0]
            assert kern.tree_score(s, heads) == pytest.approx(kern.tree_score(s, ref), abs=1e-9)
    assert several_roots >= count // 8  # the root-last continuation ran


@pytest.mark.parametrize("single_root", [True, False])
def test_kernel_agrees_with_the_previous_kernel(single_root):
    # issue 36: single root now starts as multi-root and continues in the root-last order only when the multi-root
    # tree has several root arcs, and contracted rows are reused; the previous kernel interpreted (no compilation)
    # on 80 sentences of up to 20 words
    _agrees_with_the_previous_kernel(_old_best_tree.py_func, single_root, 80, 20, 36 + single_root)


@pytest.mark.slow
@pytest.mark.parametrize("single_root", [True, False])
def test_kernel_agrees_with_the_previous_kernel_compiled(single_root):
    # the same, compiled, on 400 sentences of up to 60 words
    _agrees_with_the_previous_kernel(_old_best_tree, single_root, 400, 60, 136 + single_root)


def _longdouble_laplacian_logdet(s: np.ndarray, single_root: bool) -> float:
    # Gaussian elimination with partial pivoting in long double on the unscaled exp(s): an independent
    # reference (long double's range holds det for n = 100 at |s| <= 20, float64's does not)
    N = s.shape[0]
    A = np.exp(s.astype(np.longdouble))
    A[np.arange(N), np.arange(N)] = 0
    A[:, 0] = 0
    L = -A[1:, 1:].copy()
    diag = A[1:, 1:].sum(axis=0) + (0 if single_root else A[0, 1:])
    L[np.arange(N - 1), np.arange(N - 1)] = diag
    if single_root:
        L[0, :] = A[0, 1:]
    logdet = np.longdouble(0)
    for j in range(N - 1):
        p = j + int(np.argmax(np.abs(L[j:, j])))
        L[[j, p]] = L[[p, j]]
        logdet += np.log(np.abs(L[j, j]))
        L[j + 1:, j:] -= np.outer(L[j + 1:, j] / L[j, j], L[j, j:])
    return float(logdet)


@pytest.mark.parametrize("single_root", [True, False])
def test_matrix_tree_long_sentences_are_stable(single_root):
    rng = np.random.default_rng(5)
    s = rng.uniform(-20, 20, (101, 101))
    log_z, mu = kern.matrix_tree(s, single_root)
    with np.errstate(over="ignore"):  # the unscaled determinant overflows float64
        naive = np.linalg.det(np.exp(s[1:, 1:]))
    assert not np.isfinite(naive)
    reference = _longdouble_laplacian_logdet(s, single_root)
    assert log_z == pytest.approx(reference, rel=1e-11)
    assert np.all(mu >= -1e-12)
    np.testing.assert_allclose(mu[:, 1:].sum(axis=0), 1.0, atol=1e-9)  # one head per word
    if single_root:
        assert mu[0].sum() == pytest.approx(1.0, abs=1e-9)
    # marginals are the gradient of log Z: a directional finite difference
    d = rng.normal(size=s.shape)
    eps = 1e-6
    fd = (kern.matrix_tree(s + eps * d, single_root)[0] - kern.matrix_tree(s - eps * d, single_root)[0]) / (2 * eps)
    assert fd == pytest.approx(float(np.sum(mu * d)), rel=1e-6)


def test_long_sentence_argmax_is_a_tree_and_beats_perturbations():
    rng = np.random.default_rng(8)
    arcs = rng.uniform(-20, 20, (101, 101))
    for single_root in (True, False):
        tree = DependencyTree(single_root=single_root)
        theta = DependencyPotentials(arcs)
        heads = tree.validate_output(tree.argmax(theta), theta)
        best = tree.score(theta, heads)
        _, scores = tree.topk(theta, 3)
        assert scores[0] == pytest.approx(best) and np.all(np.diff(scores) <= 1e-9)
        # the matrix-tree log Z bounds the best score from above, and the best tree's probability is at most 1
        log_z, _ = tree.marginals(theta)
        assert best <= log_z + 1e-9


def test_hamming_over_heads_per_instance():
    tree = DependencyTree()
    rng = np.random.default_rng(2)
    for n in (1, 3, 5):
        theta = _theta(rng, n, 1)
        assert tree.states_per_node(theta) == n + 1
        gold = tree.argmax(DependencyPotentials(rng.normal(size=(n + 1, n + 1))))
        for loss in (so.Hamming(), so.Hamming(normalize=True)):
            c, const = loss.linear_terms(tree, gold, theta)
            for y in tree.outputs(theta):
                assert tree.score(c, y) + const == pytest.approx(loss(gold, y))
    with pytest.raises(so.InvalidInputError, match="cost matrix is 2x2"):
        so.WeightedHamming(1.0 - np.eye(2)).linear_terms(tree, np.array([0, 1]), _theta(rng, 2, 1))


def test_bad_input_is_refused():
    tree = DependencyTree()
    with pytest.raises(so.InvalidInputError, match=r"\(n \+ 1, n \+ 1\) array"):
        tree.argmax(DependencyPotentials(np.zeros((3, 4))))
    with pytest.raises(so.InvalidInputError, match="NaN"):
        tree.argmax(DependencyPotentials(np.full((3, 3), np.nan)))
    with pytest.raises(so.InvalidInputError, match=r"\(n \+ 1\)\*\*2 entries"):
        tree.expand(DependencyPotentials(np.zeros(5)))
    like = DependencyPotentials(np.zeros((4, 4)))
    with pytest.raises(so.InvalidInputError, match="cycle"):
        tree.validate_output(np.array([2, 3, 1]), like)
    with pytest.raises(so.InvalidInputError, match="2 words hang from the root"):
        tree.validate_output(np.array([0, 0, 1]), like)
    with pytest.raises(so.InvalidInputError, match="its own head"):
        tree.validate_output(np.array([0, 2, 1]), like)
    with pytest.raises(so.InvalidInputError, match="3 heads"):
        tree.validate_output(np.array([0, 1]), like)
    with pytest.raises(so.InvalidInputError, match="projective"):
        DependencyTree(projective="yes")


def test_feature_model_and_dependency_model():
    rng = np.random.default_rng(4)
    X = [sp.random((n + 1) ** 2, 7, density=0.4, format="csr", random_state=n) for n in (2, 4, 6)]
    for model in (so.FeatureModel(DependencyTree(), 7), so.DependencyModel(7), so.DependencyModel(7, projective=True)):
        report = so.validate.check_model(model, X)
        assert report.ok, report.table()
        w = rng.normal(size=7)
        theta = model.potentials(X[1], w)
        assert theta.arcs.shape == (5, 5)
        np.testing.assert_allclose(theta.arcs.ravel(), X[1] @ w)
        heads = model.predict(X[1], w)
        assert heads.shape == (4,)
    with pytest.raises(so.InvalidInputError, match=r"\(n \+ 1\)\*\*2 feature rows"):
        so.DependencyModel(7).validate_input(sp.random(10, 7, format="csr"), 3)
    # FeatureModel's layout rule in check_model's one line
    report = so.validate.check_model(so.FeatureModel(DependencyTree(), 7), X[:1])
    assert "flat vector" in report.table()


def test_arc_features():
    x = arc_features([5, 3, 5], [1, 2, 1], n_features=1024)
    assert x.shape == (16, 1024)
    rows = np.diff(x.indptr)
    unused = [h * 4 + m for h in range(4) for m in range(4) if h == m or m == 0]
    assert np.all(rows[unused] == 0) and np.all(np.delete(rows, unused) > 0)
    assert set(np.unique(x.data)) == {1.0}
    # the same (head, modifier) words and tags give the same unigram features: arcs 1->2 and 3->2 share "mw,mt"
    assert set(x[1 * 4 + 2].indices) & set(x[3 * 4 + 2].indices)
    with pytest.raises(so.InvalidInputError, match="as many word ids as tag ids"):
        arc_features([1, 2], [1])


def _synthetic(rng: np.random.Generator, n_sentences: int, n_features: int):
    w_true = rng.normal(size=n_features)
    X, Y = [], []
    tree = DependencyTree()
    for _ in range(n_sentences):
        n = int(rng.integers(3, 9))
        x = sp.random((n + 1) ** 2, n_features, density=0.15, format="csr", random_state=rng)
        X.append(x)
        Y.append(tree.argmax(DependencyPotentials((x @ w_true).reshape(n + 1, n + 1))))
    return X, Y


def _uas(model, X, Y, w) -> float:
    pred = model.predict_batch(X, w)
    return float(np.mean(np.concatenate([p == y for p, y in zip(pred, Y, strict=True)])))


def test_bcfw_learns_synthetic_trees():
    from structopt.solvers import bcfw

    rng = np.random.default_rng(0)
    X, Y = _synthetic(rng, 30, 20)
    model = so.DependencyModel(20)
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), 0.01)
    before = _uas(model, X, Y, model.zeros())
    result = bcfw(problem, max_passes=15, random_state=0)
    after = _uas(model, X, Y, result.w)
    assert after >= 0.9 and after > before + 0.3


def test_labelled_model():
    rng = np.random.default_rng(6)
    model = so.DependencyModel(6, n_labels=3)
    X = [sp.random((n + 1) ** 2, 6, density=0.4, format="csr", random_state=n) for n in (2, 4)]
    report = so.validate.check_model(model, X)
    assert report.ok, report.table()
    W = rng.normal(size=(6, 3))
    theta = model.potentials(X[1], W.ravel())  # scores[h, m, l] = <x_hm, W[:, l]>
    np.testing.assert_allclose(theta.arcs, (X[1] @ W).reshape(5, 5, 3))
    y = model.predict(X[1], W.ravel())
    assert y.shape == (2, 4) and y[1].max() < 3
    # trains: gold from a random labelled scorer
    X = [sp.random((n + 1) ** 2, 6, density=0.5, format="csr", random_state=n) for n in range(2, 12)]
    Y = model.predict_batch(X, W.ravel())
    from structopt.solvers import bcfw

    result = bcfw(so.SSVMProblem(model, X, Y, so.Hamming(), 0.01), max_passes=10, random_state=0)
    right = np.mean(np.concatenate([(p == y).ravel() for p, y in zip(model.predict_batch(X, result.w), Y)]))
    assert right >= 0.8


def test_non_projective_gold_refused_by_the_projective_problem():
    X = [sp.random(25, 3, density=0.5, format="csr", random_state=1)] * 2
    crossing = np.array([4, 0, 1, 2])  # 0 -> 2, 2 -> 4, 4 -> 1, 1 -> 3: arcs (2, 4) and (1, 3) cross
    so.SSVMProblem(so.DependencyModel(3), X, [np.array([0, 1, 2, 3]), crossing], so.Hamming(), 0.1)
    with pytest.raises(so.InvalidInputError, match=r"example 1: .*not projective"):
        so.SSVMProblem(so.DependencyModel(3, projective=True), X, [np.array([0, 1, 2, 3]), crossing], so.Hamming(),
                       0.1)
