"""Arc-factored dependency parsing: arc scores linear in sparse arc features (McDonald et al., 2005)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, check_count, example_error
from structopt.models.base import Model, feature_matrix, model_structure
from structopt.models.feature import FeatureInput
from structopt.structures.dependency import DependencyPotentials, DependencyTree

#: the hashed first-order templates of :func:`arc_features` (McDonald et al., 2005, without in-between tags)
TEMPLATES = ("hw", "ht", "mw", "mt", "hw,ht", "mw,mt", "hw,mw", "ht,mt", "hw,ht,mt", "ht,mw,mt", "ht,mt,dist",
             "ht,ht+1,mt-1,mt", "ht-1,ht,mt,mt+1", "bias,dist")


class DependencyModel(Model):
    """``scores[h, m] = <features(h, m), w>``: one sparse feature row per (head, modifier) pair.

    The input of a sentence of n words is an ((n + 1)², F) CSR (or dense) matrix whose row
    ``h * (n + 1) + m`` holds the features of the arc h → m (rows of column 0 and of the diagonal are
    unused and may be empty); :func:`arc_features` builds them from word and tag ids. The potentials are
    the (n + 1, n + 1) arc scores of a :class:`~structopt.structures.dependency.DependencyTree`; the
    adjoint is ``x^T mu`` over the arc statistics. Unlabelled, this is
    ``FeatureModel(DependencyTree(), F)`` (the same weights and potentials) with the input's shape checked.

    **Labelled arcs** (``n_labels=L``): the same input, one weight vector per label, an (F, L) block
    ``W``: ``scores[h, m, l] = <features(h, m), W[:, l]>``. The adjoint touches only the arcs with
    non-zero statistics (a corner has n), so the (F, L) block is never built per example.

    Parameters
    ----------
    n_features : int
        F.
    projective, single_root : bool
        The tree structure's options (ignored when ``structure`` is given).
    n_labels : int, optional
        L, for labelled arcs (ignored when ``structure`` is given: its own ``n_labels`` counts).
    structure : DependencyTree, optional
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[DependencyModel, list[sp.csr_matrix]]:
        """Sentences of 2, 5 and 3 words with random sparse arc features (see :meth:`Model.example`)."""
        return cls(5), [sp.random((n + 1) ** 2, 5, density=0.5, format="csr", random_state=rng) for n in (2, 5, 3)]

    def __init__(self, n_features: int, projective: bool = False, single_root: bool = True,
                 n_labels: int | None = None, *, structure: DependencyTree | None = None):
        self.structure = model_structure("DependencyModel", DependencyTree, structure,
                                         lambda: DependencyTree(projective=projective, single_root=single_root,
                                                                n_labels=n_labels))
        self.n_features = check_count(n_features, "n_features", "DependencyModel")
        self.n_labels = self.structure.n_labels

    def __repr__(self) -> str:
        return f"DependencyModel(n_features={self.n_features}, structure={self.structure!r})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("weights", (self.n_features,) if self.n_labels is None else (self.n_features, self.n_labels))]

    def validate_input(self, x: FeatureInput, index: int | None = None) -> FeatureInput:
        x = feature_matrix(x, self.n_features, index, "DependencyModel input", "(n + 1)**2")
        side = math.isqrt(x.shape[0])
        if side * side != x.shape[0] or side < 2:
            raise example_error(index, f"DependencyModel input needs (n + 1)**2 feature rows (one per head and "
                                       f"modifier of a sentence of n >= 1 words), got {x.shape[0]}")
        return x

    def potentials(self, x: FeatureInput, w: np.ndarray) -> DependencyPotentials:
        W = self.unpack(w)["weights"]
        N = math.isqrt(x.shape[0])
        scores = np.asarray(x @ W, dtype=float)  # W (F,) or (F, L), contiguous: no copy of the weights
        return DependencyPotentials(scores.reshape((N, N) if self.n_labels is None else (N, N, self.n_labels)))

    def _features(self, x: FeatureInput, mu: DependencyPotentials) -> np.ndarray:
        arcs = np.asarray(mu.arcs if isinstance(mu, DependencyPotentials) else mu[0], dtype=float)
        rows = x.shape[0]
        if arcs.size != rows * (self.n_labels or 1):
            raise InvalidInputError(f"DependencyModel: statistics of shape {arcs.shape} do not match {rows} feature "
                                    "rows")
        if self.n_labels is None:
            return np.asarray(x.T @ arcs.ravel()).ravel()
        return np.asarray(x.T @ arcs.reshape(rows, self.n_labels))

    def _sparse_features(self, x: FeatureInput, mu: DependencyPotentials) -> tuple[np.ndarray, np.ndarray]:
        # labelled: A_x^T mu as (feature indices, their rows of the (F, L) block), indices unique, touching only
        # the arcs with statistics (a corner has n of them): the dense (F, L) block is never built
        arcs = np.asarray(mu.arcs if isinstance(mu, DependencyPotentials) else mu[0], dtype=float)
        rows = x.shape[0]
        if arcs.size != rows * self.n_labels:
            raise InvalidInputError(f"DependencyModel: statistics of shape {arcs.shape} do not match {rows} feature "
                                    "rows")
        M = arcs.reshape(rows, self.n_labels)
        used = np.flatnonzero(np.any(M != 0, axis=1))
        if not sp.issparse(x):
            block = x[used].T @ M[used]
            keep = np.flatnonzero(np.any(block != 0, axis=1))
            return keep, block[keep]
        starts, ends = x.indptr[used], x.indptr[used + 1]
        lengths = ends - starts
        total = int(lengths.sum())
        # the stored entries of the used rows, read straight from the CSR arrays (no scipy call per step)
        entry = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(total)
        cols = x.indices[entry]
        values = x.data[entry, None] * M[np.repeat(used, lengths)]
        order = np.argsort(cols, kind="stable")
        cols, values = cols[order], values[order]
        first = np.flatnonzero(np.concatenate([[True], cols[1:] != cols[:-1]])) if total else np.zeros(0, np.int64)
        return cols[first], np.add.reduceat(values, first, axis=0) if total else values

    def add_features(self, x: FeatureInput, mu: DependencyPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        if self.n_labels is None:
            out += scale * self._features(x, mu)
            return
        cols, values = self._sparse_features(x, mu)
        out.reshape(self.n_features, self.n_labels)[cols] += scale * values

    def features_sqnorm(self, x: FeatureInput, mu: DependencyPotentials) -> float:
        if self.n_labels is None:
            g = self._features(x, mu)
            return float(g @ g)
        _, values = self._sparse_features(x, mu)
        return float(np.sum(values * values))


def _hash(parts: np.ndarray, template: int, n_features: int) -> np.ndarray:
    # a deterministic hash of integer tuples (rows of `parts`) and the template id into [0, n_features)
    h = np.full(parts.shape[0], (template + 1) * 0x9E3779B1, dtype=np.uint64)
    for col in parts.T:
        h = (h ^ col.astype(np.uint64)) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    return (h % np.uint64(n_features)).astype(np.int64)


def arc_features(words: Sequence[int], tags: Sequence[int], n_features: int = 2 ** 18) -> sp.csr_matrix:
    """First-order arc features of one sentence, hashed into ``n_features`` binary columns.

    ``words`` and ``tags`` are the n tokens' non-negative integer ids (the root gets its own id, -1 →
    reserved). For each arc h → m (h in 0..n, m in 1..n, h != m) the templates :data:`TEMPLATES` of
    McDonald et al. (2005): head and modifier word and tag unigrams and their pairs, the tag pair with
    the direction and distance bucket, and the surrounding tags of both ends (in-between tags left out).

    Returns
    -------
    csr_matrix, shape ((n + 1)**2, n_features)
        Row ``h * (n + 1) + m``; rows of unused pairs are empty.
    """
    w = np.asarray(words, dtype=np.int64).ravel()
    t = np.asarray(tags, dtype=np.int64).ravel()
    n_features = check_count(n_features, "n_features", "arc_features")
    if w.shape != t.shape or w.size < 1:
        raise InvalidInputError(f"arc_features needs as many word ids as tag ids (n >= 1), got {w.size} and {t.size}")
    if w.min() < 0 or t.min() < 0:
        raise InvalidInputError("arc_features needs non-negative word and tag ids")
    N = w.size + 1
    W = np.concatenate([[-1], w]) + 2  # 1: root, 0: outside the sentence
    T = np.concatenate([[-1], t]) + 2
    Tpad = np.concatenate([[0], T, [0]])  # Tpad[i + 1] = T[i]
    h, m = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    keep = (h != m) & (m >= 1)
    h, m = h[keep], m[keep]
    direction = (h < m).astype(np.int64)
    dist = np.minimum(np.abs(h - m), 10) * 2 + direction
    columns = {
        "hw": [W[h]], "ht": [T[h]], "mw": [W[m]], "mt": [T[m]], "hw,ht": [W[h], T[h]], "mw,mt": [W[m], T[m]],
        "hw,mw": [W[h], W[m]], "ht,mt": [T[h], T[m]], "hw,ht,mt": [W[h], T[h], T[m]],
        "ht,mw,mt": [T[h], W[m], T[m]], "ht,mt,dist": [T[h], T[m], dist],
        "ht,ht+1,mt-1,mt": [T[h], Tpad[h + 2], Tpad[m], T[m]],
        "ht-1,ht,mt,mt+1": [Tpad[h], T[h], T[m], Tpad[m + 2]], "bias,dist": [dist],
    }
    rows = h * N + m
    cols = [_hash(np.column_stack(columns[name]), j, n_features) for j, name in enumerate(TEMPLATES)]
    cols = np.concatenate(cols)
    all_rows = np.tile(rows, len(TEMPLATES))
    x = sp.csr_matrix((np.ones(cols.size), (all_rows, cols)), shape=(N * N, n_features))
    x.sum_duplicates()
    x.data[:] = np.minimum(x.data, 1.0)  # binary: two templates hashing to one column count once
    return x



# ----- saving (structopt.saved_model): the codecs of DependencyModel and of its structure
def _describe_dependency_model(model: DependencyModel) -> dict:
    exact_type(model.structure, DependencyTree, "a DependencyModel whose structure is")
    s = model.structure
    return {"n_features": model.n_features, "projective": s.projective, "single_root": s.single_root,
            "n_labels": s.n_labels}


register_codec("DependencyModel", DependencyModel, _describe_dependency_model,
               ("n_features", "projective", "single_root", "n_labels"))
register_codec("DependencyTree", DependencyTree,
               lambda s: {"projective": s.projective, "single_root": s.single_root, "n_labels": s.n_labels},
               ("projective", "single_root", "n_labels"), kind="structure")
