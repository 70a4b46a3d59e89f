"""CoNLL features and the chain pack share memory, and sharing changes no result.

``featurize`` gives every sentence of a corpus a window of one int32 column buffer and a window of
one stride-0 array of 1.0; the problem's validated inputs keep those windows (scipy copies a view
much shorter than its base, see ``conll._window``); the chain pack reads the buffer in place and
keeps no values for binary features; gold statistics, Gram triangles and costs are stored in the
narrowest exact dtype. Each is checked here against the copying path (the same examples with
their own float64 arrays), down to identical BCFW weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from structopt import ChainModel, Hamming, SSVMProblem
from structopt.fused import narrowest_exact
from structopt.fused._chain_pack import pack_chain_problem
from structopt.solvers.bcfw import bcfw
from structopt.tasks import conll

WORDS = ["The", "cat", "sat", "on", "a", "mat", "Dogs", "run", "fast", "1.5", "McDonald", "'s", "."]
POS = ["DT", "NN", "VBD", "IN", "DT", "NN", "NNS", "VBP", "RB", "CD", "NNP", "POS", "."]
TAGS = ["B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "B-NP", "B-VP", "B-ADVP", "B-NP", "B-NP", "B-NP", "O"]


def _corpus(tmp_path, n_sentences: int = 40, seed: int = 0) -> conll.Corpus:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_sentences):
        for k in rng.integers(0, len(WORDS), size=rng.integers(1, 9)):
            lines.append(f"{WORDS[k]} {POS[k]} {TAGS[k]}")
        lines.append("")
    path = tmp_path / "toy.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conll.read_conll(path)


def _owner(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _problem(tmp_path, copies: bool) -> SSVMProblem:
    corpus = _corpus(tmp_path)
    (X,) = conll.featurize([corpus], n_features=512)
    if copies:  # every sentence its own writable float64 arrays: the pack's copying path
        X = [sp.csr_matrix((x.data.copy(), x.indices.copy(), x.indptr.copy()), shape=x.shape) for x in X]
    tags = sorted(set(corpus.tags))
    Y = [np.array([tags.index(t) for t in s]) for s in np.split(np.array(corpus.tags), np.cumsum(corpus.lengths)[:-1])]
    return SSVMProblem(ChainModel(512, len(tags), start_end=False, bias=False), X, Y, Hamming(), 0.1)


def test_sentences_are_windows_of_one_buffer(tmp_path):
    (X,) = conll.featurize([_corpus(tmp_path)], n_features=512)
    buffer = _owner(X[0].indices)
    assert buffer.dtype == np.int32 and buffer.size == sum(x.nnz for x in X)
    position = 0
    for x in X:
        assert _owner(x.indices) is buffer
        assert np.array_equal(x.indices, buffer[position:position + x.nnz])
        assert x.data.strides == (0,) and not x.data.flags.writeable and np.all(x.data == 1.0)
        position += x.nnz
    dense = X[3].toarray()
    assert set(np.unique(dense)) <= {0.0, 1.0}
    with pytest.raises(ValueError):
        X[0].data[0] = 2.0  # read-only: a caller cannot change every sentence at once
    writable = X[0].copy()
    writable.data[0] = 2.0
    assert X[0].data[0] == 1.0


def test_validated_inputs_and_the_pack_keep_the_buffer(tmp_path):
    problem = _problem(tmp_path, copies=False)
    buffer = _owner(problem.X[0].indices)
    assert all(_owner(x.indices) is buffer for x in problem.X)  # no per-sentence copy by scipy
    pack = problem.fused().pack
    assert np.shares_memory(pack.indices, buffer) and pack.indices.size == buffer.size
    assert pack.binary and pack.values.size == 0
    assert pack.costs.dtype == np.uint8 and pack.gram.dtype == np.uint8
    assert problem.fused().gold.dtype == np.uint8


def test_in_place_pack_equals_the_copying_pack(tmp_path):
    shared, copied = _problem(tmp_path, copies=False), _problem(tmp_path, copies=True)
    a, b = shared.fused().pack, copied.fused().pack
    assert not np.shares_memory(b.indices, _owner(copied.X[0].indices))
    for field in ("indptr", "indices", "tok", "costs", "gram", "gram_off", "const"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert a.binary and b.binary  # all values 1.0 in both: detected from the values, not from sharing


def test_non_binary_features_keep_their_values(tmp_path):
    problem = _problem(tmp_path, copies=True)
    X = [x.copy() for x in problem.X]
    X[2].data[:] = 0.5
    pack = pack_chain_problem(problem.model, problem.structure, X,
                              [problem.loss_terms(i)[0].unary for i in range(problem.n)],
                              np.array([problem.loss_terms(i)[1] for i in range(problem.n)]))
    assert not pack.binary
    assert np.array_equal(pack.values, np.concatenate([x.data for x in X]))
    assert pack.gram.dtype == np.float32  # 0.25 and 0.5 products: exact in float32, not integers


@pytest.mark.parametrize("line_search", [True, False])
def test_bcfw_weights_identical_on_shared_and_copied_features(tmp_path, line_search):
    runs = [bcfw(_problem(tmp_path, copies=c), max_passes=3, random_state=1, line_search=line_search)
            for c in (False, True)]
    assert np.array_equal(runs[0].w, runs[1].w)
    assert [r["primal"] for r in runs[0].trace] == [r["primal"] for r in runs[1].trace]
    generic = bcfw(_problem(tmp_path, copies=False), max_passes=3, random_state=1, line_search=line_search,
                   fused=False)
    np.testing.assert_allclose(runs[0].w, generic.w, rtol=1e-9, atol=1e-12)


def test_gold_statistics_stored_narrow_returned_float64(tmp_path):
    problem = _problem(tmp_path, copies=False)
    stored, offsets = problem.compact_gold_stats(stored=True)
    fresh, offsets2 = problem.compact_gold_stats()
    assert stored.dtype == np.uint8 and fresh.dtype == np.float64 and offsets is offsets2
    assert np.array_equal(stored, fresh)
    fresh[:] = -1.0  # the caller's own copy
    assert np.array_equal(problem.compact_gold_stats()[0], stored)
    assert problem.compact_gold_stats(stored=True)[0] is stored


@pytest.mark.parametrize(("values", "dtype"), [
    ([0.0, 1.0, 3.0], np.uint8), ([0.0, 300.0], np.uint16), ([0.0, 70000.0], np.float32),
    ([0.5, 2.0], np.float32), ([-1.0, 2.0], np.float32), ([0.1], np.float64), ([np.nan, 1.0], np.float64),
    ([np.inf, 1.0], np.float32), ([-0.0, 1.0], np.float32), ([0.0, 1.5], np.float32), ([], np.float64),
])
def test_narrowest_exact(values, dtype):
    values = np.array(values, dtype=np.float64)
    narrow = narrowest_exact(values)
    assert narrow.dtype == dtype
    back = narrow.astype(np.float64)
    assert np.array_equal(back, values, equal_nan=True)
    assert np.array_equal(np.signbit(back), np.signbit(values))  # -0.0 kept


def test_problem_keeps_the_callers_matrices_and_narrow_loss_terms(tmp_path):
    corpus = _corpus(tmp_path)
    (X,) = conll.featurize([corpus], n_features=512)
    problem = _problem(tmp_path, copies=False)
    same = SSVMProblem(problem.model, X, problem.Y, Hamming(), 0.1)
    assert all(a is b for a, b in zip(same.X, X, strict=True))  # validation only re-wrapped their arrays
    ints = [sp.csr_matrix(x.astype(np.int64)) for x in X[:3]]  # converted by validation: the validated copy
    other = SSVMProblem(problem.model, ints, problem.Y[:3], Hamming(), 0.1)
    assert all(a is not b and a.dtype == np.float64 for a, b in zip(other.X, ints, strict=True))
    for i in range(problem.n):
        c, const = problem.loss_terms(i)
        assert c.unary.dtype == np.float64 and problem._terms[i][0].unary.dtype == np.uint8
        expected, expected_const = Hamming().linear_terms(problem.structure, problem.Y[i], problem.like(i))
        assert np.array_equal(c.unary, expected.unary) and np.array_equal(c.pairwise, expected.pairwise)
        assert const == expected_const
    normalised = SSVMProblem(problem.model, X, problem.Y, Hamming(normalize=True), 0.1)
    assert normalised._terms[0][0].unary.dtype == np.float64  # 1/T: not integers, kept as they are


def test_generic_decode_equal_with_narrow_terms(tmp_path):
    problem = _problem(tmp_path, copies=False)
    w = np.random.default_rng(3).normal(size=problem.n_params)
    for i in range(problem.n):
        c, _ = problem.loss_terms(i)
        theta = problem.theta(i, w)
        decoded = problem.decode(i, w)
        reference = problem.structure.argmax(type(theta)(theta.unary + c.unary, theta.pairwise + c.pairwise))
        assert np.array_equal(decoded.y, reference)
        assert decoded.loss == problem.loss(problem.Y[i], reference)
