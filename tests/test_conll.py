"""CoNLL loaders, hashed features and conlleval-style chunk metrics."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _shared_data import SHARED_DATA, needs_data

from structopt import ChainModel, Hamming, InvalidInputError, SSVMProblem
from structopt.tasks import conll

DATA = SHARED_DATA


# ------------------------------------------------------------------------------------------
# conlleval semantics
# ------------------------------------------------------------------------------------------

def counts(true, pred, tags=None):
    r = conll.chunk_f1(true, pred, tags)
    return r["n_true"], r["n_pred"], r["n_correct"]


def test_identical_sequences_score_one():
    y = [["B-NP", "I-NP", "O", "B-VP"], ["B-PP", "B-NP", "I-NP"]]
    r = conll.chunk_f1(y, y)
    assert (r["n_true"], r["n_pred"], r["n_correct"]) == (4, 4, 4)
    assert r["precision"] == r["recall"] == r["f1"] == r["accuracy"] == 1.0
    assert r["n_tokens"] == 7
    assert set(r["per_type"]) == {"NP", "VP", "PP"}
    assert r["per_type"]["NP"]["n_true"] == 2


def test_exact_span_matching():
    # a predicted chunk that is too short or too long is wrong, even if its tokens overlap
    assert counts([["B-NP", "I-NP", "I-NP"]], [["B-NP", "I-NP", "O"]]) == (1, 1, 0)
    assert counts([["B-NP", "I-NP", "O"]], [["B-NP", "I-NP", "I-NP"]]) == (1, 1, 0)
    assert counts([["O", "B-NP", "I-NP"]], [["B-NP", "I-NP", "I-NP"]]) == (1, 1, 0)
    r = conll.chunk_f1([["B-NP", "I-NP", "O", "B-NP"]], [["B-NP", "I-NP", "O", "O"]])
    assert (r["n_true"], r["n_pred"], r["n_correct"]) == (2, 1, 1)
    assert r["precision"] == 1.0 and r["recall"] == 0.5 and r["f1"] == pytest.approx(2 / 3)
    assert r["accuracy"] == 0.75


def test_type_mismatch_is_wrong_and_counted_per_type():
    r = conll.chunk_f1([["B-NP", "I-NP", "O"]], [["B-VP", "I-VP", "O"]])
    assert (r["n_true"], r["n_pred"], r["n_correct"]) == (1, 1, 0)
    assert r["per_type"]["NP"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "n_true": 1, "n_pred": 0,
                                   "n_correct": 0}
    assert r["per_type"]["VP"]["n_pred"] == 1 and r["per_type"]["VP"]["n_true"] == 0
    # a type switch inside a chunk splits it: B-NP I-VP is NP [0,1) and VP [1,2)
    assert counts([["B-NP", "B-VP"]], [["B-NP", "I-VP"]]) == (2, 2, 2)


def test_i_after_o_or_other_type_starts_a_chunk():
    # IOB1: I-X after O or after another type opens a chunk, equal to the IOB2 B-X chunk
    assert counts([["O", "B-NP", "I-NP"]], [["O", "I-NP", "I-NP"]]) == (1, 1, 1)
    assert counts([["I-NP", "I-NP"]], [["B-NP", "I-NP"]]) == (1, 1, 1)  # sentence start acts as O
    assert counts([["B-PP", "B-NP", "I-NP"]], [["I-PP", "I-NP", "I-NP"]]) == (2, 2, 2)


def test_b_starts_a_new_chunk_of_the_same_type():
    assert counts([["B-NP", "B-NP"]], [["B-NP", "I-NP"]]) == (2, 1, 0)
    assert counts([["B-NP", "B-NP", "I-NP"]], [["B-NP", "I-NP", "B-NP"]]) == (2, 2, 0)
    assert counts([["I-NP", "B-NP"]], [["I-NP", "B-NP"]]) == (2, 2, 2)


def test_chunks_end_at_sentence_end():
    # the second sentence's leading I-NP does not continue the first sentence's chunk
    true = [["B-NP", "I-NP"], ["I-NP", "O"]]
    assert counts(true, true) == (2, 2, 2)
    assert counts(true, [["B-NP", "I-NP"], ["B-NP", "O"]]) == (2, 2, 2)
    assert counts(true, [["B-NP", "O"], ["I-NP", "O"]]) == (2, 2, 1)
    # a chunk running to the very last token is closed and counted
    assert counts([["O", "B-VP", "I-VP"]], [["O", "B-VP", "I-VP"]]) == (1, 1, 1)


def test_hyphenated_types_and_empty_input():
    assert counts([["B-I-PP", "I-I-PP"]], [["B-I-PP", "I-I-PP"]]) == (1, 1, 1)
    r = conll.chunk_f1([["O", "O"]], [["O", "O"]])
    assert (r["n_true"], r["n_pred"], r["f1"], r["accuracy"]) == (0, 0, 0.0, 1.0)
    assert r["per_type"] == {}


def _reference_chunks(seq):
    """Chunks of one IOB1/IOB2 sentence as (start, end, type), from the textbook definition."""
    chunks, start, typ = [], None, None
    for i, tag in enumerate([*seq, "O"]):
        prefix, _, t = tag.partition("-")
        continues = prefix == "I" and start is not None and t == typ
        if start is not None and not continues:
            chunks.append((start, i, typ))
            start = None
        if prefix in "BI" and prefix and not continues:
            start, typ = i, t
    return chunks


def test_matches_span_definition_on_random_iob_sequences(rng):
    labels = ["O", "B-NP", "I-NP", "B-VP", "I-VP", "B-PP", "I-PP"]
    for _ in range(30):
        n = int(rng.integers(1, 6))
        true = [[labels[k] for k in rng.integers(0, len(labels), size=int(rng.integers(1, 9)))] for _ in range(n)]
        # predictions: true with some tags changed, so that some chunks match
        pred = [[labels[rng.integers(0, len(labels))] if rng.random() < 0.3 else t for t in s] for s in true]
        ct = [(k, c) for k, s in enumerate(true) for c in _reference_chunks(s)]
        cp = [(k, c) for k, s in enumerate(pred) for c in _reference_chunks(s)]
        r = conll.chunk_f1(true, pred)
        assert (r["n_true"], r["n_pred"], r["n_correct"]) == (len(ct), len(cp), len(set(ct) & set(cp)))
        for typ, entry in r["per_type"].items():
            assert entry["n_true"] == sum(c[2] == typ for _, c in ct)
            assert entry["n_correct"] == sum(c[2] == typ for _, c in set(ct) & set(cp))
        same = [a == b for s, t in zip(true, pred) for a, b in zip(s, t)]
        assert r["accuracy"] == pytest.approx(np.mean(same))


def test_index_arrays_with_tags_equal_strings(rng):
    tags = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    true = [rng.integers(0, 5, size=int(rng.integers(1, 12))) for _ in range(20)]
    pred = [np.where(rng.random(len(s)) < 0.3, rng.integers(0, 5, size=len(s)), s) for s in true]
    by_index = conll.chunk_f1(true, pred, tags)
    by_string = conll.chunk_f1([conll.decode_tags(s, tags) for s in true],
                               [conll.decode_tags(s, tags) for s in pred])
    assert by_index == by_string
    assert conll.token_accuracy(true, pred) == pytest.approx(by_index["accuracy"])


def test_metric_input_errors():
    with pytest.raises(InvalidInputError, match="sentence 1"):
        conll.chunk_f1([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(InvalidInputError, match="list of sentences"):
        conll.chunk_f1(["B-NP", "I-NP"], ["B-NP", "I-NP"])
    with pytest.raises(InvalidInputError, match="tags="):
        conll.chunk_f1([np.array([0, 1])], [np.array([0, 1])])
    with pytest.raises(InvalidInputError, match="out of range"):
        conll.chunk_f1([np.array([0, 5])], [np.array([0, 1])], ["O", "B-NP"])
    with pytest.raises(InvalidInputError, match="tag indices"):
        conll.decode_tags([0, 3], ["O", "B-NP"])
    assert conll.decode_tags(np.array([1, 0]), ["O", "B-NP"]) == ["B-NP", "O"]


# ------------------------------------------------------------------------------------------
# reading files and hashed features (small hand-made files)
# ------------------------------------------------------------------------------------------

TOY = """-DOCSTART- -DOCSTART- O
Confidence NN B-NP
in IN B-PP
the DT B-NP
pound NN I-NP

He PRP B-NP
reckons VBZ B-VP
the DT B-NP
pound NN I-NP
1.8 CD I-NP
.

-DOCSTART- -DOCSTART- O

-DOCSTART- -DOCSTART- O
Rockwell NNP B-NP
"""


def write(path: Path, text: str, compress: bool = False) -> Path:
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_read_conll_sentences_docstart_and_gzip(tmp_path):
    good = TOY.replace("\n.\n", "\n. . O\n")
    for compress in (False, True):
        c = conll.read_conll(write(tmp_path / ("toy.gz" if compress else "toy"), good, compress))
        assert c.lengths.tolist() == [4, 6, 1]
        assert c.words[0] == "Confidence" and c.words[-1] == "Rockwell" and "-DOCSTART-" not in c.words
        assert c.pos[4] == "PRP" and c.tags[4] == "B-NP"
    two = conll.read_conll(write(tmp_path / "two", "a O\nb B-X\n\nc O\n"))
    assert two.pos is None and two.lengths.tolist() == [2, 1]
    with pytest.raises(InvalidInputError, match="line 12"):
        conll.read_conll(write(tmp_path / "bad", TOY))


def toy_corpus(tmp_path) -> conll.Corpus:
    return conll.read_conll(write(tmp_path / "toy", TOY.replace("\n.\n", "\n. . O\n")))


def test_features_binary_sorted_csr(tmp_path):
    c = toy_corpus(tmp_path)
    (X,) = conll.featurize([c], n_features=2**12)
    assert [m.shape for m in X] == [(4, 2**12), (6, 2**12), (1, 2**12)]
    # 5 offsets x (word, lower, shape, 3 prefixes, 3 suffixes, POS) + 2 POS bigrams + bias
    k = 5 * 10 + 2 + 1
    for m in X:
        assert sp.isspmatrix_csr(m) and m.dtype == np.float64
        assert np.all(m.data == 1.0)
        assert np.all(np.diff(m.indptr) <= k) and np.all(np.diff(m.indptr) >= k - 3)
        for r in range(m.shape[0]):
            row = m.indices[m.indptr[r]:m.indptr[r + 1]]
            assert np.all(np.diff(row) > 0)  # sorted, duplicates merged
    assert np.mean([np.diff(m.indptr).mean() for m in X]) > k - 1  # collisions are rare at 2^12
    # no POS column: 5 x 9 + bias
    (Xn,) = conll.featurize([c], n_features=2**20, use_pos=False)
    assert np.diff(Xn[0].indptr).tolist() == [46] * 4


def test_features_depend_on_context(tmp_path):
    c = toy_corpus(tmp_path)
    (X,) = conll.featurize([c], n_features=2**20)
    # "pound" (NN) ends sentence 0 and is followed by "1.8" in sentence 1: shared offset-0 features only
    a = set(X[0][3].indices)
    b = set(X[1][3].indices)
    assert 20 <= len(a & b) < len(a)
    # "the" appears after different words: same word features, different left context
    assert set(X[0][2].indices) != set(X[1][2].indices)


def test_hashing_is_deterministic_across_processes(tmp_path):
    path = write(tmp_path / "toy", TOY.replace("\n.\n", "\n. . O\n"))
    code = ("import hashlib,sys,numpy as np; from structopt.tasks import conll; "
            f"X=conll.featurize([conll.read_conll({str(path)!r})], n_features=1000)[0]; "
            "print(hashlib.sha1(np.concatenate([m.indices for m in X]).tobytes()).hexdigest())")
    # a child process with another string-hash salt than this one must produce the same columns
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    digests = {out.stdout.strip()}
    (X,) = conll.featurize([conll.read_conll(path)], n_features=1000)
    digests.add(hashlib.sha1(np.concatenate([m.indices for m in X]).tobytes()).hexdigest())
    assert len(digests) == 1
    (Y,) = conll.featurize([conll.read_conll(path)], n_features=1001)
    assert any(not np.array_equal(a.indices, b.indices) for a, b in zip(X, Y))


def test_word_shape():
    assert conll.word_shape("Confidence") == "Xxx"
    assert conll.word_shape("1992") == "dd"
    assert conll.word_shape("1.8") == "d.d"
    assert conll.word_shape("McDonald") == "XxXxx"
    assert conll.word_shape("U.S.") == "X.X."


# ------------------------------------------------------------------------------------------
# loaders on small fake corpora: paths, errors, tag sets
# ------------------------------------------------------------------------------------------

def fake_conll2000(root: Path, test_text: str = "a DT B-NP\nb NN I-NP\n\nc VB B-VP\n") -> Path:
    d = root / "conll2000"
    d.mkdir(parents=True)
    write(d / "train.txt", "a DT B-NP\nb NN I-NP\nc VB B-VP\n\nd IN B-PP\ne DT O\n")
    write(d / "test.txt", test_text)
    return d


def test_loader_with_env_and_path(tmp_path, monkeypatch):
    d = fake_conll2000(tmp_path)
    monkeypatch.setenv("STRUCTOPT_DATA", str(tmp_path))
    data = conll.load_conll2000(n_features=256)
    assert data["tags"] == ["O", "B-NP", "B-PP", "B-VP", "I-NP"]
    assert [y.tolist() for y in data["train"]["y"]] == [[1, 4, 3], [2, 0]]
    assert all(y.dtype == np.int64 for y in data["train"]["y"])
    assert [m.shape for m in data["test"]["X"]] == [(2, 256), (1, 256)]
    model = data["model"]
    assert isinstance(model, ChainModel) and (model.n_features, model.n_states) == (256, 5)
    assert not model.start_end and not model.bias
    again = conll.load_conll2000(d, n_features=256)
    for a, b in zip(data["train"]["X"], again["train"]["X"]):
        assert (a != b).nnz == 0


def test_missing_data_error_names_source(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTOPT_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="conll2000/chunking"):
        conll.load_conll2000()
    with pytest.raises(FileNotFoundError, match="conll2002"):
        conll.load_conll2002(tmp_path / "nowhere")
    (tmp_path / "conll2002").mkdir()
    with pytest.raises(FileNotFoundError, match=r"esp\.train"):
        conll.load_conll2002(language="esp")
    with pytest.raises(InvalidInputError, match="language"):
        conll.load_conll2002(language="eng")


def test_unseen_test_tags(tmp_path):
    d = fake_conll2000(tmp_path, test_text="a DT B-NP\nb NN I-NP\n\nc LS B-LST\nd LS I-LST\n")
    data = conll.load_conll2000(d, n_features=64)
    assert data["tags"][:5] == ["O", "B-NP", "B-PP", "B-VP", "I-NP"]
    assert data["tags"][5:] == ["B-LST", "I-LST"] and data["info"]["n_train_tags"] == 5
    assert data["model"].n_states == 7 and data["test"]["y"][1].tolist() == [5, 6]
    with pytest.raises(InvalidInputError, match="LST"):
        conll.load_conll2000(d, unseen_tags="error")
    with pytest.warns(UserWarning, match="mapped to 'O'"):
        mapped = conll.load_conll2000(d, unseen_tags="outside")
    assert mapped["test"]["y"][1].tolist() == [0, 0] and len(mapped["tags"]) == 5


# ------------------------------------------------------------------------------------------
# the real corpora
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, sentences, tokens", [
    ("conll2002/esp.train", 8323, 264715), ("conll2002/esp.testa", 1915, None),
    ("conll2002/esp.testb", 1517, None),
])
def test_real_file_sizes(name, sentences, tokens):
    if not (DATA / name).is_file():
        pytest.skip(f"{name} not in {DATA}")
    c = conll.read_conll(DATA / name)
    assert c.n_sentences == sentences and c.lengths.min() >= 1
    if tokens is not None:
        assert c.n_tokens == tokens
    assert c.pos is not None and len(c.pos) == len(c.tags) == c.n_tokens


@pytest.fixture(scope="module")
def chunking():
    if not (DATA / "conll2000").is_dir():
        pytest.skip(f"conll2000 data not in {DATA}")
    return conll.load_conll2000(DATA / "conll2000")


def test_conll2000_loaded(chunking):
    tr, te = chunking["train"], chunking["test"]
    assert len(tr["X"]) == len(tr["y"]) == 8936 and len(te["X"]) == 2012
    assert sum(m.shape[0] for m in tr["X"]) == 211727 and sum(len(y) for y in te["y"]) == 47377
    assert all(m.shape == (len(y), 2**16) for m, y in zip(tr["X"][:200], tr["y"][:200]))
    tags = chunking["tags"]
    assert tags[0] == "O" and len(tags) == 23 and tags[-1] == "I-LST"  # I-LST occurs only in test
    assert chunking["model"].n_states == len(tags) and chunking["model"].n_features == 2**16
    assert conll.decode_tags(tr["y"][0][:3], tags) == ["B-NP", "B-PP", "B-NP"]
    assert 45 < chunking["info"]["nnz_per_token"] <= 53
    # the gold tags scored against themselves: every chunk found
    r = conll.chunk_f1(te["y"], te["y"], tags)
    assert r["f1"] == 1.0 and r["n_true"] > 20000


def test_conll2000_plugs_into_ssvm_problem(chunking):
    tr = chunking["train"]
    problem = SSVMProblem(chunking["model"], tr["X"][:20], tr["y"][:20], Hamming(), 0.1)
    w = np.zeros(problem.n_params)
    # at w = 0 the hinge is the maximal Hamming loss: every token wrong
    assert problem.primal(w) == pytest.approx(np.mean([len(y) for y in tr["y"][:20]]))


def test_per_token_linear_classifier_learns(chunking):
    # a few averaged-perceptron epochs on 1,500 sentences: hashed features must separate the tags well
    tr, te = chunking["train"], chunking["test"]
    Xtr, ytr = sp.vstack(tr["X"][:1500]).tocsr(), np.concatenate(tr["y"][:1500])
    Xte, yte = sp.vstack(te["X"][:300]).tocsr(), np.concatenate(te["y"][:300])
    W = np.zeros((Xtr.shape[1], len(chunking["tags"])))
    W_sum = np.zeros_like(W)
    for _ in range(3):  # averaged mini-batch multiclass perceptron, vectorised over tokens
        for lo in range(0, Xtr.shape[0], 500):
            xb, yb = Xtr[lo:lo + 500], ytr[lo:lo + 500]
            guess = np.asarray(xb @ W).argmax(axis=1)
            wrong = np.flatnonzero(guess != yb)
            signs = np.r_[np.ones(wrong.size), -np.ones(wrong.size)]
            rows, cols = np.r_[wrong, wrong], np.r_[yb[wrong], guess[wrong]]
            upd = sp.csr_matrix((signs, (rows, cols)), shape=(len(yb), W.shape[1]))
            W += (xb.T @ upd).toarray()
            W_sum += W
    acc = float(np.mean(np.asarray(Xte @ W_sum).argmax(axis=1) == yte))
    assert acc > 0.88  # most frequent tag (I-NP) alone gets about 0.3


@pytest.mark.slow
@pytest.mark.parametrize("language, sizes", [
    ("esp", {"train": (8323, 264715), "dev": (1915, 52923), "test": (1517, 51533)}),
    ("ned", {"train": (15806, 202644), "dev": (2895, 37687), "test": (5195, 68875)}),
])
@needs_data("conll2002")
def test_conll2002_loaded(language, sizes):
    data = conll.load_conll2002(DATA / "conll2002", language=language)
    for split, (n_sent, n_tok) in sizes.items():
        X, y = data[split]["X"], data[split]["y"]
        assert len(X) == len(y) == n_sent
        assert sum(m.shape[0] for m in X) == sum(len(v) for v in y) == n_tok
    assert data["tags"] == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    assert data["model"].n_states == 9


def test_a_byte_order_mark_before_docstart_adds_no_token(tmp_path):
    """Windows editors write a UTF-8 BOM first: it glued itself to ``-DOCSTART-``, which became a word."""
    good = TOY.replace("\n.\n", "\n. . O\n")
    plain = conll.read_conll(write(tmp_path / "plain", good))
    for compress in (False, True):
        path = tmp_path / ("bom.gz" if compress else "bom")
        raw = b"\xef\xbb\xbf" + good.encode("utf-8")
        path.write_bytes(gzip.compress(raw) if compress else raw)
        c = conll.read_conll(path)
        assert c.lengths.tolist() == plain.lengths.tolist() == [4, 6, 1]
        assert c.words == plain.words and not any("\ufeff" in w for w in c.words)
        corpus, rows, has_gold = conll.read_tokens(path, use_pos=True)
        assert corpus.lengths.tolist() == [4, 6, 1] and rows[0] == ["Confidence", "NN", "B-NP"] and has_gold
    # the mark is a UTF-8 thing: a file read as Latin-1 keeps its bytes (no silent change of another encoding)
    latin = tmp_path / "latin"
    latin.write_bytes(b"\xef\xbb\xbfa O\n")
    assert conll.read_conll(latin, encoding="latin-1").words == ["\xef\xbb\xbfa"]


def test_read_tokens_refuses_a_word_tag_file_missing_its_pos_column(tmp_path):
    """A model with POS features given ``word tag`` lines read the tags as POS and said nothing."""
    path = write(tmp_path / "word_tag.txt", "Confidence B-NP\nin B-PP\nthe B-NP\npound I-NP\n\nHe B-NP\n")
    with pytest.raises(InvalidInputError) as info:
        conll.read_tokens(path, use_pos=True, known_tags=["O", "B-NP", "I-NP", "B-PP"])
    message = str(info.value)
    assert f"{path}, line 1" in message and "expected 3 columns" in message and "found 2" in message
    assert "B-NP" in message and "POS column is missing" in message
    # word POS lines (no gold) are what predict reads without a metric: accepted
    ok = write(tmp_path / "word_pos.txt", "Confidence NN\nin IN\n\nHe PRP\n")
    corpus, _, has_gold = conll.read_tokens(ok, use_pos=True, known_tags=["O", "B-NP", "I-NP", "B-PP"])
    assert not has_gold and corpus.pos == ["NN", "IN", "PRP"]
