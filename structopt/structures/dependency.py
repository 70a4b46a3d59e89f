"""Dependency trees over sentences of any length: non-projective (Chu-Liu/Edmonds, matrix-tree) and
projective (Eisner's spans on the dynamic-programming recursion).

**Layout.** A sentence of n words has nodes 0..n, node 0 the root. Potentials and statistics are one
(n + 1, n + 1) matrix ``arcs[h, m]``: the score (or the 0/1 indicator) of the arc from head h to
modifier m. Column 0 (the root has no head) and the diagonal (no self-loops) are unused: their
statistics are always 0 and their potentials are ignored. A flat vector of length (n + 1)² is read
as that matrix row by row (the rule that lets :class:`~structopt.models.feature.FeatureModel`, whose
potentials are flat, serve this structure). The length n is read from the potentials, so one object
serves sentences of every length.

**Outputs** are head arrays of length n (int64): ``heads[m - 1]`` is the head of word m, 0 for the
root. With ``single_root=True`` (the default, the convention of Universal Dependencies) exactly one
word hangs from the root.

**Oracles.**

- non-projective: argmax by Tarjan's O(n²) form of Chu-Liu/Edmonds, single root exactly (scores
  compared as pairs (minus the root arcs, score) in lexicographic order, so the best tree has one root
  arc whenever one exists, with no penalty constant); log Z and marginals by the matrix-tree theorem (Koo et al.,
  2007) with per-column scaling; top-K by Lawler's partition search over the heads (forbidding and
  forcing arcs); max-marginals by one forced-arc argmax per arc; the polytope is the multi-commodity
  flow formulation (Martins et al., 2009; one commodity per word, n³ auxiliary columns), exact.
- projective: Eisner's first-order spans as a hypergraph (built once per length and cached); argmax,
  top-K (k-best semiring), marginals (inside-outside) and max-marginals run on
  :mod:`structopt.structures.dp`; the polytope is the hypergraph's flow polytope, exact.

The Hamming loss over heads uses the per-node hooks: each word is a node taking n + 1 values (its
head), so ``states_per_node`` is a method of the instance (``states_per_node(like) = n + 1``).
**Labelled arcs** (``n_labels=L``): potentials and statistics ``arcs[h, m, l]`` of shape
(n + 1, n + 1, L), outputs (2, n) arrays (heads, then labels). The score being arc-factored, every
oracle runs on the unlabelled arcs reduced over the labels (max for argmax and max-marginals,
log-sum-exp for marginals); top-K partitions over (head, label) pairs; the polytope keeps the arc
indicators as auxiliary columns, each the sum of its labels'. The Hamming loss then counts wrong heads
and wrong labels (2n nodes).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, numeric_array
from structopt.structures import _dependency_kernels as kern
from structopt.structures import _dp_kernels as dp_kern
from structopt.structures._minnorm import project_hull
from structopt.structures._partition_topk import partition_topk
from structopt.structures.base import Polytope, Structure, check_flag, random_like, refuse_nonfinite
from structopt.structures.dp import DPStructure, Hypergraph, dp_marginals, dp_max_marginals, dp_topk
from structopt.structures.registry import register_structure

#: longest sentence :meth:`DependencyTree.outputs` enumerates ((n + 1)**n candidate head arrays)
MAX_ENUMERATION_LENGTH = 7


class DependencyPotentials(NamedTuple):
    """Arc scores (or 0/1 arc indicators) of a sentence of n words.

    Attributes
    ----------
    arcs : ndarray, shape (n + 1, n + 1)
        ``arcs[h, m]``: head h (0 = the root) to modifier m >= 1. Column 0 and the diagonal are unused.
    """

    arcs: np.ndarray


# --------------------------------------------------------------------------- Eisner's hypergraph
@functools.lru_cache(maxsize=64)
def eisner_hypergraph(n: int, single_root: bool) -> tuple[Hypergraph, np.ndarray]:
    """Eisner's first-order spans for n words as a :class:`Hypergraph`, and each hyperedge's arc
    (score index ``h * (n + 1) + m``, -1 for none) in internal order.

    Items: complete spans ``C[i, j, →]`` (head i) and ``C[i, j, ←]`` (head j), axioms when i = j;
    incomplete spans ``I[i, j, →]`` (arc i → j) and ``I[i, j, ←]`` (arc j → i), each from
    ``C[i, k, →] + C[k + 1, j, ←]``; ``C[i, j, →] = I[i, k, →] + C[k, j, →]`` (i < k <= j);
    ``C[i, j, ←] = C[i, k, ←] + I[k, j, ←]`` (i <= k < j). The root (node 0) is never a modifier, so
    no ← item starts at 0. Multi-root: the goal is ``C[0, n, →]``. Single root: the spans that start
    at 0 are not built and the goal is built once per root child m from ``C[1, m, ←]`` and
    ``C[m, n, →]`` with the arc 0 → m. Every projective tree has exactly one derivation, and no
    derivation uses an item twice (the flow polytope is exact). Items are numbered by span length
    (within one length: I→, I←, C→, C←), which is a topological order; built with one vectorised step
    per length.
    """
    N = n + 1
    first = 1 if single_root else 0
    CR, CL, IR, IL = (np.full((N, N), -1, dtype=np.int64) for _ in range(4))
    count = 0

    def number(table: np.ndarray, i: np.ndarray, j: np.ndarray) -> None:
        nonlocal count
        table[i, j] = count + np.arange(i.size)
        count += i.size

    heads, left, right, scores = [], [], [], []

    def add(head: np.ndarray, a: np.ndarray, b: np.ndarray, score: np.ndarray) -> None:
        heads.append(head), left.append(a), right.append(b), scores.append(score)

    diag = np.arange(first, N)
    number(CR, diag, diag)
    number(CL, diag[diag > 0], diag[diag > 0])
    axioms = np.concatenate([CR[diag, diag], CL[diag[diag > 0], diag[diag > 0]]])
    for length in range(1, N):
        i = np.arange(first, N - length)
        j = i + length
        t = np.arange(length)
        ii, tt = np.meshgrid(i, t, indexing="ij")
        jj, kk = ii + length, ii + tt  # split points i <= k < j
        number(IR, i, j)
        add(IR[ii, jj], CR[ii, kk], CL[kk + 1, jj], ii * N + jj)
        lm = ii > 0
        number(IL, i[i > 0], j[i > 0])
        add(IL[ii[lm], jj[lm]], CR[ii[lm], kk[lm]], CL[kk[lm] + 1, jj[lm]], jj[lm] * N + ii[lm])
        number(CR, i, j)
        add(CR[ii, jj], IR[ii, kk + 1], CR[kk + 1, jj], np.full(ii.shape, -1))  # k' = k + 1 in (i, j]
        number(CL, i[i > 0], j[i > 0])
        add(CL[ii[lm], jj[lm]], CL[ii[lm], kk[lm]], IL[kk[lm], jj[lm]], np.full(int(lm.sum()), -1))
    head = np.concatenate([axioms] + [h.ravel() for h in heads])
    pairs = np.column_stack([np.concatenate([a.ravel() for a in left]), np.concatenate([b.ravel() for b in right])])
    score = np.concatenate([np.full(axioms.size, -1)] + [x.ravel() for x in scores])
    if single_root:
        m = np.arange(1, N)
        head = np.concatenate([head, np.full(n, count)])
        pairs = np.vstack([pairs, np.column_stack([CL[1, m], CR[m, n]])])
        score = np.concatenate([score, m])  # the arc 0 -> m
        count += 1
    tail_ptr = np.concatenate([np.zeros(axioms.size + 1, dtype=np.int64),
                               2 * np.arange(1, pairs.shape[0] + 1, dtype=np.int64)])  # axioms have no tails
    graph = Hypergraph.from_csr(count, head, tail_ptr, pairs.ravel(), score, n_scores=N * N)
    return graph, graph.score


# --------------------------------------------------------------------------- the structure
@register_structure("dependency")
class DependencyTree(Structure):
    """Dependency trees of a sentence, the length read from the potentials (see the module docstring).

    Parameters
    ----------
    projective : bool, default False
        Only projective trees (no crossing arcs, the root's included): Eisner's algorithm.
    single_root : bool, default True
        Exactly one arc from the root; False allows any number.
    n_labels : int, optional
        Labelled arcs with L labels: potentials and statistics are (n + 1, n + 1, L) (``arcs[h, m, l]``)
        and an output is a (2, n) int array, heads then labels. The arc-factored score makes the best
        label of each arc independent of the tree: argmax and max-marginals take the best label per arc,
        marginals the log-sum-exp over labels (each arc's label marginals are its arc marginal times a
        softmax), and top-K partitions over (head, label) pairs.

    Examples
    --------
    >>> import numpy as np
    >>> tree = DependencyTree()
    >>> scores = np.zeros((4, 4)); scores[0, 2] = scores[2, 1] = scores[2, 3] = 1.0
    >>> tree.argmax(DependencyPotentials(scores))
    array([2, 0, 2])
    """

    name = "DependencyTree"
    Potentials = DependencyPotentials
    example_variants = ({"n": 1, "projective": False}, {"n": 4, "projective": False},
                        {"n": 4, "projective": False, "single_root": False}, {"n": 4, "projective": True},
                        {"n": 4, "projective": True, "single_root": False}, {"n": 3, "n_labels": 2},
                        {"n": 3, "projective": True, "n_labels": 2})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n: int = 4, projective: bool = False,
                single_root: bool = True, n_labels: int | None = None) -> tuple[DependencyTree, DependencyPotentials]:
        """A random sentence of ``n`` words (the size keyword), projective or not, single-root or not,
        labelled with ``n_labels`` labels or not."""
        n = check_count(n, "n", "DependencyTree.example")
        structure = cls(projective=projective, single_root=single_root, n_labels=n_labels)
        shape = (n + 1, n + 1) + (() if n_labels is None else (int(n_labels),))
        return structure, random_like(DependencyPotentials(np.zeros(shape)), rng, integer=integer)

    def __init__(self, projective: bool = False, single_root: bool = True, n_labels: int | None = None):
        self.projective = check_flag(projective, "projective", "DependencyTree")
        self.single_root = check_flag(single_root, "single_root", "DependencyTree")
        self.n_labels = None if n_labels is None else check_count(n_labels, "n_labels", "DependencyTree")

    def __repr__(self) -> str:
        labels = "" if self.n_labels is None else f", n_labels={self.n_labels}"
        return f"DependencyTree(projective={self.projective}, single_root={self.single_root}{labels})"

    # ----- layout
    def _arcs(self, theta: DependencyPotentials | np.ndarray, index: int | None = None) -> np.ndarray:
        raw = getattr(theta, "arcs", None)
        if type(raw) is np.ndarray and raw.dtype == np.float64 and raw.flags.c_contiguous \
                and isinstance(theta, DependencyPotentials) and raw.ndim == (2 if self.n_labels is None else 3) \
                and raw.shape[0] == raw.shape[1] >= 2 and (self.n_labels is None or raw.shape[2] == self.n_labels) \
                and kern.below_inf(raw):  # the common case in one pass (NaN and +inf fail it)
            return raw
        if isinstance(theta, tuple) and not isinstance(theta, DependencyPotentials):
            raise example_error(index, f"{self.name} potentials must be DependencyPotentials(arcs), got "
                                       f"{type(theta).__name__}")
        raw = theta.arcs if isinstance(theta, DependencyPotentials) else theta
        arcs = numeric_array(raw, f"{self.name} potentials", index, finite=False)
        L = 1 if self.n_labels is None else self.n_labels
        if arcs.ndim == 1:  # the flat layout (row-major), e.g. FeatureModel's potentials
            side = math.isqrt(arcs.size // L)
            if side * side * L != arcs.size:
                raise example_error(index, f"{self.name} flat potentials must have (n + 1)**2"
                                           f"{'' if L == 1 else f' * {L}'} entries, got {arcs.size}")
            arcs = arcs.reshape((side, side) + (() if self.n_labels is None else (L,)))
        expected = "(n + 1, n + 1)" if self.n_labels is None else f"(n + 1, n + 1, {L})"
        if arcs.ndim != (2 if self.n_labels is None else 3) or arcs.shape[0] != arcs.shape[1] or arcs.shape[0] < 2 \
                or (self.n_labels is not None and arcs.shape[2] != L):
            raise example_error(index, f"{self.name} potentials must be an {expected} array with n >= 1 words, "
                                       f"got shape {arcs.shape}")
        refuse_nonfinite((("arcs", arcs),), f"{self.name} potentials", index, allow_neginf=True)
        return np.ascontiguousarray(arcs, dtype=float)

    def expand(self, theta: DependencyPotentials) -> DependencyPotentials:
        """``theta`` checked, as an (n + 1, n + 1[, L]) array (a flat row-major vector is reshaped)."""
        return DependencyPotentials(self._arcs(theta))

    def states_per_node(self, like: DependencyPotentials) -> int:
        """Per-node loss hook, per instance: each of the n words takes one of n + 1 heads (labelled: the
        nodes are the n heads and the n labels, each taking one of max(n + 1, L) values)."""
        N = self._arcs(like).shape[0]
        return N if self.n_labels is None else max(N, self.n_labels)

    def node_potentials(self, costs: np.ndarray, like: DependencyPotentials = None) -> DependencyPotentials:
        """Arc potentials of per-word costs: ``costs[m - 1, h]`` the price of head h for word m; labelled,
        ``costs[0, m - 1, h]`` (heads) and ``costs[1, m - 1, l]`` (labels)."""
        costs = np.asarray(costs, dtype=float)
        if self.n_labels is None:
            n = costs.shape[0]
            arcs = np.zeros((n + 1, n + 1))
            arcs[:, 1:] = costs[:, :n + 1].T
            return DependencyPotentials(arcs)
        n, L = costs.shape[1], self.n_labels
        arcs = np.zeros((n + 1, n + 1, L))
        arcs[:, 1:, :] = costs[0, :, :n + 1].T[:, :, None] + costs[1, :, :L][None, :, :]
        return DependencyPotentials(arcs)

    # ----- outputs
    def _split(self, y) -> tuple[np.ndarray, np.ndarray | None]:
        y = np.asarray(y, dtype=np.int64)
        return (y, None) if self.n_labels is None else (y[0], y[1])

    def validate_output(self, y, like: DependencyPotentials, index: int | None = None) -> np.ndarray:
        n = self._arcs(like, index).shape[0] - 1
        out = np.asarray(y)
        shape = (n,) if self.n_labels is None else (2, n)
        integral = out.dtype.kind in "iu" or (out.dtype.kind == "f" and np.all(out == np.round(out)))
        if out.shape != shape or not integral:
            what = f"{n} heads" if self.n_labels is None else f"shape (2, {n}) (heads, then labels)"
            raise example_error(index, f"{self.name} output must be an int array of {what}, got "
                                       f"{out.dtype} of shape {out.shape}")
        out = out.astype(np.int64)
        heads, labels = self._split(out)
        problem = tree_problem(heads, self.projective, self.single_root)
        if problem:
            raise example_error(index, f"{self.name} output {heads.tolist()} is not a tree: {problem}")
        if labels is not None and np.any((labels < 0) | (labels >= self.n_labels)):
            raise example_error(index, f"{self.name} labels must lie in [0, {self.n_labels}), got {labels.tolist()}")
        return out

    def stats(self, y, like: DependencyPotentials) -> DependencyPotentials:
        heads, labels = self._split(y)
        N = heads.size + 1
        arcs = np.zeros((N, N) + (() if labels is None else (self.n_labels,)))
        index = (heads, np.arange(1, N)) + (() if labels is None else (labels,))
        arcs[index] = 1.0
        return DependencyPotentials(arcs)

    def expected_stats(self, outputs, weights: np.ndarray, like: DependencyPotentials) -> DependencyPotentials:
        arcs = np.zeros(self._arcs(like).shape)
        for u, y in zip(np.asarray(weights, dtype=float), outputs, strict=True):
            heads, labels = self._split(y)
            index = (heads, np.arange(1, heads.size + 1)) + (() if labels is None else (labels,))
            arcs[index] += u
        return DependencyPotentials(arcs)

    def score(self, theta: DependencyPotentials, y) -> float:
        arcs = self._arcs(theta)
        heads, labels = self._split(y)
        index = (heads, np.arange(1, heads.size + 1)) + (() if labels is None else (labels,))
        return float(arcs[index].sum())

    def outputs(self, theta: DependencyPotentials) -> Iterator[np.ndarray]:
        """Every tree, in lexicographic order of the head arrays (n <= 7 words); labelled, each tree with
        every labelling."""
        n = self._arcs(theta).shape[0] - 1
        if n > MAX_ENUMERATION_LENGTH:
            raise NotSupportedError(f"enumerating (n + 1)**n head arrays for n = {n} is too large "
                                    f"(n <= {MAX_ENUMERATION_LENGTH})")
        candidates = np.array(list(itertools.product(range(n + 1), repeat=n)), dtype=np.int64).reshape(-1, n)
        trees = candidates[tree_mask(candidates, self.projective, self.single_root)]
        if self.n_labels is None:
            yield from trees
            return
        labellings = np.array(list(itertools.product(range(self.n_labels), repeat=n)), dtype=np.int64)
        for heads in trees:
            for labels in labellings:
                yield np.stack([heads, labels])

    def polytope(self, theta: DependencyPotentials) -> Polytope:
        """Projective: Eisner's flow polytope. Non-projective: the multi-commodity flow formulation (for
        each word k, one unit of flow from the root to k along chosen arcs, ``0 <= f^k_a <= z_a``), with
        one head per word, exactly one root arc when ``single_root``, and the unused entries at 0.
        Labelled: the same with the arc indicators as auxiliary columns, each the sum of its labels'."""
        N = self._arcs(theta).shape[0]
        like = DependencyPotentials(np.zeros((N, N)))
        if self.projective:
            graph, _ = eisner_hypergraph(N - 1, self.single_root)
            poly = _DPView(graph).polytope()._replace(like=like)
        else:
            poly = _flow_polytope(N, self.single_root, like)
        return poly if self.n_labels is None else _labelled_polytope(poly, N, self.n_labels)

    # ----- oracles on unlabelled arcs
    def _best(self, arcs: np.ndarray) -> np.ndarray | None:
        # the best tree's heads for (N, N) arcs, None when no tree has a finite score
        if self.projective:
            graph, arc_of = eisner_hypergraph(arcs.shape[0] - 1, self.single_root)
            edges, best = _eisner_argmax(graph, arcs)
            return None if best == -np.inf else _edges_to_heads(arc_of[edges], arcs.shape[0])
        heads, ok = kern.best_tree(arcs, self.single_root)
        return heads[1:].copy() if ok else None

    def _infeasible(self) -> InvalidInputError:
        return InvalidInputError(f"{self.name} potentials forbid every output: no "
                                 f"{'single-root ' if self.single_root else ''}tree has a finite score")

    def _reduce(self, arcs: np.ndarray, log: bool) -> np.ndarray:
        # unlabelled arc scores: the best label (max) or the log-sum-exp over labels
        if self.n_labels is None:
            return arcs
        top = arcs.max(axis=2)
        if not log:
            return top
        safe = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            return np.where(np.isfinite(top), safe + np.log(np.exp(arcs - safe[..., None]).sum(axis=2)), -np.inf)

    def _with_labels(self, arcs: np.ndarray, heads: np.ndarray) -> np.ndarray:
        if self.n_labels is None:
            return heads
        return np.stack([heads, np.argmax(arcs[heads, np.arange(1, heads.size + 1)], axis=1)])

    def argmax(self, theta: DependencyPotentials) -> np.ndarray:
        """The best tree: Chu-Liu/Edmonds (non-projective) or Eisner's max-plus recursion (projective);
        labelled, each arc with its best label."""
        arcs = self._arcs(theta)
        heads = self._best(self._reduce(arcs, log=False))
        if heads is None:
            raise self._infeasible()
        return self._with_labels(arcs, heads)

    def topk(self, theta: DependencyPotentials, k: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The k best trees, sorted (fewer when fewer have a finite score): the k-best recursion
        (projective, unlabelled) or the partition search over each word's head (and label), forbidding
        and forcing arcs, with Chu-Liu/Edmonds or Eisner as the solver."""
        k = check_count(k, "k", f"{self.name}.topk")
        arcs = self._arcs(theta)
        N = arcs.shape[0]
        if self.projective and self.n_labels is None:
            graph, arc_of = eisner_hypergraph(N - 1, self.single_root)
            edges, offsets, scores = dp_topk(graph, arcs.ravel(), k, self.name)
            return [_edges_to_heads(arc_of[edges[a:b]], N) for a, b in itertools.pairwise(offsets)], scores
        L = 1 if self.n_labels is None else self.n_labels
        cube = arcs.reshape(N, N, L)  # value of position j (word j + 1): head * L + label

        def solve(allowed: np.ndarray):
            heads = self._best(allowed.max(axis=2))
            if heads is None:
                return None
            m = np.arange(1, N)
            labels = np.argmax(allowed[heads, m], axis=1)
            return float(cube[heads, m, labels].sum()), heads * L + labels

        def forbid(allowed: np.ndarray, j: int, value: int) -> bool:
            allowed[value // L, j + 1, value % L] = -np.inf
            column = np.delete(allowed[:, j + 1], j + 1, axis=0)
            return bool(np.any(column > -np.inf))

        def force(allowed: np.ndarray, j: int, value: int) -> None:
            keep = allowed[value // L, j + 1, value % L]
            allowed[:, j + 1] = -np.inf
            allowed[value // L, j + 1, value % L] = keep

        codes, scores = partition_topk(int(k), cube, N - 1, solve, forbid, force)
        if not codes:
            raise self._infeasible()
        outs = [c // L if self.n_labels is None else np.stack([c // L, c % L]) for c in codes]
        return outs, scores

    def marginals(self, theta: DependencyPotentials) -> tuple[float, DependencyPotentials]:
        """``(log Z, arc marginals)``: the matrix-tree theorem (non-projective) or inside-outside on
        Eisner's spans (projective); labelled, on the log-sum-exp over labels, then split by a softmax."""
        arcs = self._arcs(theta)
        reduced = self._reduce(arcs, log=True)
        N = arcs.shape[0]
        if self.projective:
            graph, _ = eisner_hypergraph(N - 1, self.single_root)
            log_z, mu = dp_marginals(graph, reduced.ravel(), self.name)
            mu = mu.reshape(N, N)
        else:
            log_z, mu = kern.matrix_tree(reduced, self.single_root)
            if log_z == -np.inf:
                raise self._infeasible()
            if not np.isfinite(log_z):
                raise InvalidInputError(f"{self.name}: log Z is beyond the float64 range (potentials too large)")
        if self.n_labels is not None:
            finite = np.isfinite(reduced)
            share = np.exp(arcs - np.where(finite, reduced, 0.0)[..., None])
            mu = np.where(finite[..., None], mu[..., None] * share, 0.0)
        return float(log_z), DependencyPotentials(mu)

    def max_marginals(self, theta: DependencyPotentials) -> np.ndarray:
        """(n + 1, n + 1[, L]): the best score of a tree containing each arc (and label; -inf where none
        does, and on the unused entries). Projective: max-plus inside-outside; non-projective: one argmax
        per arc with the arc forced (n² Chu-Liu/Edmonds calls)."""
        arcs = self._arcs(theta)
        reduced = self._reduce(arcs, log=False)
        N = arcs.shape[0]
        if self.projective:
            graph, _ = eisner_hypergraph(N - 1, self.single_root)
            mm = dp_max_marginals(graph, reduced.ravel(), self.name).reshape(N, N)
        else:
            if self._best(reduced) is None:
                raise self._infeasible()
            mm = np.full((N, N), -np.inf)
            columns = np.arange(1, N)
            for m in range(1, N):
                for h in range(N):
                    if h == m or reduced[h, m] == -np.inf:
                        continue
                    forced = reduced.copy()
                    forced[:, m] = -np.inf
                    forced[h, m] = reduced[h, m]
                    heads = self._best(forced)
                    if heads is not None:
                        mm[h, m] = reduced[heads, columns].sum()
        if self.n_labels is None:
            return mm
        finite = np.isfinite(mm)[..., None] & np.isfinite(arcs)
        return np.where(finite, mm[..., None] + arcs - np.where(np.isfinite(reduced), reduced, 0.0)[..., None],
                        -np.inf)

    def project(self, v: DependencyPotentials, tol: float = 1e-12) -> DependencyPotentials:
        """Euclidean projection onto the hull of the trees, by Wolfe's min-norm point on :meth:`argmax`
        (exact on the unused entries too: their statistics are 0)."""
        target = self._arcs(v)

        def vertex(d: np.ndarray) -> np.ndarray:
            theta = DependencyPotentials(d.reshape(target.shape))
            return self.stats(self.argmax(theta), theta).arcs.ravel()

        p, _ = project_hull(target.ravel(), vertex, tol=tol)
        return DependencyPotentials(p.reshape(target.shape))


def _eisner_argmax(graph: Hypergraph, arcs: np.ndarray) -> tuple[np.ndarray, float]:
    # Eisner's max-plus recursion on (N, N) arcs: the internal hyperedges and the score (-inf: no tree)
    edges, best = dp_kern.argmax(*graph.arrays, np.ascontiguousarray(arcs.ravel()))
    return edges, float(best)


def _labelled_polytope(poly: Polytope, N: int, L: int) -> Polytope:
    # the unlabelled description with its N * N arc columns turned into auxiliary columns y, and the rows
    # y_a = sum_l z_{a, l}; the new statistics z are the (N, N, L) labelled arc indicators
    n_arc = N * N
    n_z = n_arc * L

    def widen(A):
        if A is None:
            return None
        A = sp.csr_matrix(A)
        return sp.hstack([sp.csr_matrix((A.shape[0], n_z)), A]).tocsr()

    link = sp.hstack([-sp.kron(sp.eye(n_arc), np.ones((1, L))), sp.eye(n_arc),
                      sp.csr_matrix((n_arc, poly.n_aux))]).tocsr()
    A_eq = sp.vstack([widen(poly.A_eq), link]).tocsr() if poly.A_eq is not None else link
    b_eq = np.concatenate([poly.b_eq, np.zeros(n_arc)]) if poly.A_eq is not None else np.zeros(n_arc)
    old_aux = np.column_stack([np.zeros(poly.n_aux), np.full(poly.n_aux, np.inf)]) if poly.aux_bounds is None \
        else np.asarray(poly.aux_bounds, dtype=float).reshape(poly.n_aux, 2)
    aux_bounds = np.vstack([np.column_stack([np.zeros(n_arc), np.ones(n_arc)]), old_aux])
    return Polytope(A_eq, b_eq, widen(poly.A_ub), poly.b_ub, DependencyPotentials(np.zeros((N, N, L))),
                    n_aux=n_arc + poly.n_aux, aux_bounds=aux_bounds)


class _DPView(DPStructure):
    # the flow polytope of a hypergraph (DPStructure's), without rebuilding the hypergraph
    def __init__(self, graph: Hypergraph):
        self.graph = graph


def _edges_to_heads(arc_ids: np.ndarray, N: int) -> np.ndarray:
    used = arc_ids[arc_ids >= 0]
    heads = np.zeros(N - 1, dtype=np.int64)
    heads[used % N - 1] = used // N
    return heads


def _flow_polytope(N: int, single_root: bool, like: DependencyPotentials) -> Polytope:
    n = N - 1
    h_idx, m_idx = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    valid = (h_idx != m_idx) & (m_idx >= 1)
    arc_h, arc_m = h_idx[valid], m_idx[valid]  # the arcs, row-major
    arc_col = arc_h * N + arc_m  # their statistics' columns
    n_arcs, n_stats = arc_h.size, N * N
    rows, cols, vals, rhs = [], [], [], []
    row = 0
    for col in np.flatnonzero(~valid.ravel()):  # unused entries are 0
        rows.append(row), cols.append(col), vals.append(1.0), rhs.append(0.0)
        row += 1
    for m in range(1, N):  # one head per word
        at = arc_col[arc_m == m]
        rows += [row] * at.size
        cols += list(at)
        vals += [1.0] * at.size
        rhs.append(1.0)
        row += 1
    if single_root:
        at = arc_col[arc_h == 0]
        rows += [row] * at.size
        cols += list(at)
        vals += [1.0] * at.size
        rhs.append(1.0)
        row += 1
    eq = sp.csr_matrix((vals, (rows, cols)), shape=(row, n_stats + n * n_arcs))
    # flow conservation of commodity k (one unit from the root to word k): inflow - outflow at node v
    k_rep = np.repeat(np.arange(n), n_arcs)
    flow_col = n_stats + np.arange(n * n_arcs)
    a_rep = np.tile(np.arange(n_arcs), n)
    cons_rows = np.concatenate([k_rep * N + arc_m[a_rep], k_rep * N + arc_h[a_rep]])
    cons = sp.csr_matrix((np.concatenate([np.ones(n * n_arcs), -np.ones(n * n_arcs)]),
                          (cons_rows, np.concatenate([flow_col, flow_col]))), shape=(n * N, n_stats + n * n_arcs))
    demand = np.zeros((n, N))
    demand[:, 0] = -1.0
    demand[np.arange(n), np.arange(1, N)] = 1.0
    # f^k_a <= z_a
    ub = sp.csr_matrix((np.concatenate([np.ones(n * n_arcs), -np.ones(n * n_arcs)]),
                        (np.concatenate([np.arange(n * n_arcs)] * 2), np.concatenate([flow_col, arc_col[a_rep]]))),
                       shape=(n * n_arcs, n_stats + n * n_arcs))
    A_eq = sp.vstack([eq, cons]).tocsr()
    b_eq = np.concatenate([np.array(rhs), demand.ravel()])
    return Polytope(A_eq, b_eq, ub, np.zeros(n * n_arcs), like, n_aux=n * n_arcs)


# --------------------------------------------------------------------------- tree checks (vectorised)
def tree_mask(heads: np.ndarray, projective: bool, single_root: bool) -> np.ndarray:
    """Which rows of the (B, n) head arrays are trees (acyclic, rooted at 0; projective and single-root
    where asked)."""
    heads = np.asarray(heads, dtype=np.int64)
    B, n = heads.shape
    table = np.concatenate([np.zeros((B, 1), dtype=np.int64), heads], axis=1)  # table[:, v] = head of v
    ok = np.all((heads >= 0) & (heads <= n), axis=1) & np.all(heads != np.arange(1, n + 1), axis=1)
    table = np.where(ok[:, None], table, 0)
    reach = table.copy()
    for _ in range(max(1, n.bit_length())):  # pointer doubling: after it every node must reach the root
        reach = np.take_along_axis(reach, reach, axis=1)
    ok &= np.all(reach == 0, axis=1)
    if single_root:
        ok &= np.sum(heads == 0, axis=1) == 1
    if projective and n > 1:
        lo = np.minimum(heads, np.arange(1, n + 1))
        hi = np.maximum(heads, np.arange(1, n + 1))
        a_lo, b_lo = lo[:, :, None], lo[:, None, :]
        a_hi, b_hi = hi[:, :, None], hi[:, None, :]
        cross = (a_lo < b_lo) & (b_lo < a_hi) & (a_hi < b_hi)
        ok &= ~np.any(cross, axis=(1, 2))
    return ok


def tree_problem(heads: np.ndarray, projective: bool, single_root: bool) -> str:
    """Why the head array is not an output ("" when it is one)."""
    n = heads.size
    if np.any((heads < 0) | (heads > n)):
        return f"heads must lie in [0, {n}]"
    if np.any(heads == np.arange(1, n + 1)):
        return "a word is its own head"
    if not tree_mask(heads[None, :], False, False)[0]:
        return "the arcs contain a cycle"
    if single_root and np.sum(heads == 0) != 1:
        return f"{int(np.sum(heads == 0))} words hang from the root (single_root=True needs exactly one)"
    if projective and not tree_mask(heads[None, :], True, False)[0]:
        return "it is not projective (two arcs cross)"
    return ""
