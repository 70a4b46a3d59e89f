"""CoNLL-2000 chunking and CoNLL-2002 NER as sparse chain problems.

Loaders read the original column files (never downloaded), turn every token into a binary row of
hashed features and return ``{"train", "test"[, "dev"], "tags", "model", "info"}``; the metrics
follow the CoNLL ``conlleval`` script (exact chunks, IOB1/IOB2 semantics).

Split (:data:`SPLIT_FILES`): CoNLL-2000 trains on the distributed ``train.txt`` (8,936 sentences)
and tests on ``test.txt`` (2,012); ``--n-train N`` trains on the first N training sentences.

Features of token ``t`` (all hashed into ``n_features`` dimensions with a stable hash):

* for every offset ``o`` in ``-window..window``: word, lowercase word, word shape, lowercase
  prefixes and suffixes of ``affix_lengths`` characters and, when the corpus has them, the POS tag
  of token ``t + o`` (beyond the sentence edges: a begin/end-of-sentence pseudo-token, which also
  plays the role of start/end features);
* POS bigrams ``(t-1, t)`` and ``(t, t+1)`` when POS tags exist;
* a bias feature.

Values are binary: two features of one token that hash to the same column give a single 1. The
sentences of one corpus share memory: their column numbers are windows of one int32 array and their
values windows of one read-only stride-0 array of 1.0 (about 4 bytes per non-zero in all), which the
chain kernels read in place (:mod:`structopt.fused._chain_pack`).
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import njit

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.models import ChainModel
from structopt.progress import Progress, as_progress, count
from structopt.tasks._data import find_data_dir, read_text_lines

__all__ = [
    "Corpus", "chunk_f1", "decode_tags", "featurize", "load_conll2000", "load_conll2002",
    "read_conll", "resolve_data_dir", "token_accuracy",
]

_SOURCES = {
    "conll2000": "https://www.clips.uantwerpen.be/conll2000/chunking/ (train.txt.gz, test.txt.gz; "
                 "also NLTK's 'conll2000' data package)",
    "conll2002": "https://www.clips.uantwerpen.be/conll2002/ner/ (data/esp.train, esp.testa, esp.testb, "
                 "ned.*; also NLTK's 'conll2002' data package)",
}
_DOCSTART = "-DOCSTART-"
#: display names of the corpora (stage lines)
_NAMES = {"conll2000": "CoNLL-2000", "conll2002": "CoNLL-2002"}
#: the CoNLL-2000 split: the distributed files, training on ``train.txt`` (8,936 sentences) and testing on
#: ``test.txt`` (2,012); ``structopt train`` and ``structopt predict`` both read it from here
SPLIT_FILES = {"train": "train.txt", "test": "test.txt"}
# pseudo-tokens outside the sentence: control characters only, so that none of their templates
# (affixes, shape, ...) can equal a real word's
_BOS, _EOS = "\x02" * 4, "\x03" * 4


# --------------------------------------------------------------------------------------------
# locating and reading the files
# --------------------------------------------------------------------------------------------

def resolve_data_dir(corpus: str, path: str | os.PathLike | None = None) -> Path:
    """Directory holding ``corpus`` (``"conll2000"`` or ``"conll2002"``); see :func:`tasks._data.find_data_dir`."""
    return find_data_dir(corpus, path, source=_SOURCES.get(corpus, "its distributor"))


def _data_file(directory: Path, name: str, corpus: str) -> Path:
    for candidate in (directory / name, directory / (name + ".gz")):
        if candidate.is_file():
            return candidate
    raise DataNotFoundError(f"{corpus}: missing file {directory / name} (or {name}.gz). "
                            f"Get it from {_SOURCES[corpus]}.")


@dataclass
class Corpus:
    """Tokens of one CoNLL file, flattened over sentences.

    Attributes
    ----------
    words, tags : list of str
        One entry per token.
    pos : list of str or None
        POS tags (the middle column) when the file has three columns.
    lengths : ndarray of int64
        Sentence lengths (sum = number of tokens).
    source : str
        File name, for messages.
    """

    words: list[str]
    pos: list[str] | None
    tags: list[str]
    lengths: np.ndarray
    source: str

    @property
    def n_sentences(self) -> int:
        return len(self.lengths)

    @property
    def n_tokens(self) -> int:
        return len(self.words)


def read_conll(path: str | os.PathLike, encoding: str = "utf-8") -> Corpus:
    """Read a CoNLL column file: ``word [POS ...] tag`` per line, blank lines between sentences.

    ``-DOCSTART-`` lines (Dutch CoNLL-2002) are document markers, not tokens: they are dropped and
    act as sentence boundaries. ``.gz`` files are read transparently.

    Raises
    ------
    DataNotFoundError
        The file does not exist.
    InvalidInputError
        Naming the file and the line: undecodable bytes, a token line whose number of columns is
        not 2 or 3 or differs from the file's first token line, or no token at all.
    """
    path = Path(path)
    rows = [line.split() for line in read_text_lines(path, encoding)]
    width = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    is_token = width > 0
    doc = np.array([bool(r) and r[0] == _DOCSTART for r in rows], dtype=bool)
    is_token &= ~doc
    token_lines = np.flatnonzero(is_token)
    if token_lines.size == 0:
        raise InvalidInputError(f"{path}: no tokens")
    first = int(width[token_lines[0]])
    if not 2 <= first <= 3:
        raise InvalidInputError(f"{path}, line {token_lines[0] + 1}: expected 2 or 3 columns (word [POS] tag), "
                                f"found {first}")
    odd = token_lines[width[token_lines] != first]
    if odd.size:  # one column count per file: a missing or extra column shifts the tag column
        raise InvalidInputError(f"{path}, line {odd[0] + 1}: {width[odd[0]]} columns, but the first token line "
                                f"(line {token_lines[0] + 1}) has {first} (word [POS] tag)")
    columns = list(zip(*(rows[i] for i in token_lines)))
    # a sentence starts at a token line whose previous line is not a token line
    prev = np.concatenate([[False], is_token[:-1]])
    sentence_id = np.cumsum(is_token & ~prev)[is_token] - 1
    lengths = np.bincount(sentence_id).astype(np.int64)
    pos = list(columns[1]) if first == 3 else None
    return Corpus(list(columns[0]), pos, list(columns[-1]), lengths, path.name)


def read_tokens(path: str | os.PathLike, use_pos: bool, encoding: str = "utf-8",
                known_tags: Sequence[str] = ()) -> tuple[Corpus, list[list[str]], bool]:
    """Read a CoNLL column file to tag: ``word [POS] [gold tag]`` per line, blank lines between sentences.

    With ``use_pos`` the second column is the POS tag (the model's features use it) and a third
    column, if every token line has one, is the gold tag; without, a second column is the gold tag.
    ``-DOCSTART-`` lines are dropped, as by :func:`read_conll`. ``known_tags`` are the model's chunk
    tags: a two-column file whose second column holds mostly those is a ``word tag`` file missing its
    POS column, refused rather than read as ``word POS`` (its tags would silently become POS features).

    Returns
    -------
    corpus : Corpus
        ``tags`` holds the gold tags, or is empty when the file has none.
    rows : list of list of str
        The columns of each token line, in order (to write back with a predicted tag).
    has_gold : bool

    Raises
    ------
    DataNotFoundError
        No such file.
    InvalidInputError
        Naming the file and line: undecodable bytes, a token line with another number of columns
        than the first one, a number of columns the model cannot read, or no token.
    """
    path = Path(path)
    lines = [line.split() for line in read_text_lines(path, encoding)]
    numbers = [i for i, r in enumerate(lines) if r and r[0] != _DOCSTART]
    if not numbers:
        raise InvalidInputError(f"{path}: no tokens")
    need = 2 if use_pos else 1
    first = len(lines[numbers[0]])
    if first not in (need, need + 1):
        expected = "word POS [tag]" if use_pos else "word [tag]"
        raise InvalidInputError(f"{path}, line {numbers[0] + 1}: expected {need} or {need + 1} columns ({expected}: "
                                f"the model {'uses' if use_pos else 'does not use'} POS features), found {first}")
    odd = [i for i in numbers if len(lines[i]) != first]
    if odd:
        raise InvalidInputError(f"{path}, line {odd[0] + 1}: {len(lines[odd[0]])} columns, but the first token line "
                                f"(line {numbers[0] + 1}) has {first}")
    if use_pos and first == need and known_tags:
        tagged = [lines[i][1] for i in numbers if lines[i][1] in set(known_tags) - {"O"}]
        if 2 * len(tagged) > len(numbers):  # POS tags are never B-NP, I-VP, ...: a column is missing
            raise InvalidInputError(f"{path}, line {numbers[0] + 1}: expected 3 columns (word POS tag, as the model "
                                    f"was trained on) or 2 (word POS), found 2 whose second holds chunk tags "
                                    f"({', '.join(sorted(set(tagged))[:3])}, ...), not POS tags: the POS column "
                                    "is missing")
    token = np.zeros(len(lines), dtype=bool)
    token[numbers] = True
    prev = np.concatenate([[False], token[:-1]])
    lengths = np.bincount(np.cumsum(token & ~prev)[token] - 1).astype(np.int64)
    rows = [lines[i] for i in numbers]
    has_gold = first == need + 1
    corpus = Corpus([r[0] for r in rows], [r[1] for r in rows] if use_pos else None,
                    [r[-1] for r in rows] if has_gold else [], lengths, path.name)
    return corpus, rows, has_gold


def write_tagged(path: str | os.PathLike, rows: Sequence[Sequence[str]], lengths: np.ndarray,
                 predicted: Sequence[str]) -> None:
    """Write CoNLL columns: each token's input columns and its predicted tag, a blank line after each sentence
    (with a gold column this is the input of CoNLL's ``conlleval``)."""
    if len(rows) != len(predicted) or int(np.sum(lengths)) != len(rows):
        raise InvalidInputError(f"{len(rows)} token lines, {len(predicted)} predicted tags and sentence lengths "
                                f"summing to {int(np.sum(lengths))} differ")
    out: list[str] = []
    start = 0
    for length in np.asarray(lengths).tolist():
        out.extend(" ".join([*rows[t], predicted[t]]) for t in range(start, start + length))
        out.append("")
        start += length
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# hashed features
# --------------------------------------------------------------------------------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads (template hash, offset) keys over all 64 bits."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _crc(s: str) -> int:
    # crc32 is stable across processes and platforms, unlike the salted built-in hash()
    return zlib.crc32(s.encode("utf-8"))


def word_shape(word: str) -> str:
    """Capitals → ``X``, lowercase → ``x``, digits → ``d``, other characters kept; runs capped at 2.

    ``"Confidence"`` → ``"Xxx"``, ``"1992"`` → ``"dd"``, ``"1.8"`` → ``"d.d"``, ``"McDonald"`` → ``"XxXxx"``.
    """
    out: list[str] = []
    run = 0
    for ch in word:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        run = run + 1 if out and out[-1] == c else 1
        if run <= 2:
            out.append(c)
    return "".join(out)


class _TypeTable:
    """Template hashes of each distinct string (words or POS tags), computed once per string type."""

    def __init__(self, templates):
        self.templates = templates  # callables: str -> template string
        self.index: dict[str, int] = {}
        self.rows: list[list[int]] = []

    def ids(self, values: Sequence[str]) -> np.ndarray:
        index, rows = self.index, self.rows
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            j = index.get(v)
            if j is None:  # Python work per distinct string, not per token
                j = index[v] = len(rows)
                rows.append([_crc(f(v)) for f in self.templates])
            out[i] = j
        return out

    def table(self) -> np.ndarray:
        return np.asarray(self.rows, dtype=np.uint64).reshape(len(self.rows), len(self.templates))


def _word_templates(affix_lengths: Sequence[int]):
    temps = [lambda w: "w=" + w, lambda w: "lw=" + w.lower(), lambda w: "sh=" + word_shape(w)]
    for k in affix_lengths:
        temps.append(lambda w, k=k: f"p{k}=" + w.lower()[:k])
        temps.append(lambda w, k=k: f"s{k}=" + w.lower()[-k:])
    return temps


@dataclass
class _Featurizer:
    n_features: int
    window: int
    affix_lengths: tuple[int, ...]
    use_pos: bool

    def __post_init__(self):
        # the offset is packed in 8 bits of the hash key
        if self.n_features < 2 or not 0 <= self.window <= 100 or any(k < 1 for k in self.affix_lengths):
            raise InvalidInputError(f"bad feature options: n_features={self.n_features}, window={self.window}, "
                                    f"affix_lengths={self.affix_lengths}")
        self.words = _TypeTable(_word_templates(self.affix_lengths))
        self.pos = _TypeTable([lambda p: "pos=" + p])
        self.bos, self.eos = self.words.ids([_BOS, _EOS])
        self.pos_bos, self.pos_eos = self.pos.ids([_BOS, _EOS])

    def __call__(self, corpus: Corpus) -> list[sp.csr_matrix]:
        if self.use_pos and corpus.pos is None:
            raise InvalidInputError(f"{corpus.source}: POS features requested but the file has no POS column")
        lengths = np.asarray(corpus.lengths, dtype=np.int64)
        wid = self.words.ids(corpus.words)
        pid = self.pos.ids(corpus.pos) if self.use_pos else None
        wtab = self.words.table()
        ptab = self.pos.table()[:, 0] if self.use_pos else None
        # whole sentences in chunks of about CHUNK_TOKENS tokens: the (tokens, ~50) key arrays of a whole
        # corpus and their temporaries cost hundreds of MB at once; every sentence's matrix is the same
        ends = np.cumsum(lengths)
        cuts = np.searchsorted(ends, np.arange(self.CHUNK_TOKENS, int(ends[-1]) if ends.size else 0,
                                               self.CHUNK_TOKENS), side="right")
        indices: list[np.ndarray] = []  # per chunk: the column numbers of its tokens, row after row
        counts: list[np.ndarray] = []  # per chunk: the number of columns of each token
        for a, b in itertools.pairwise([0, *np.unique(cuts).tolist(), lengths.size]):
            if a == b:
                continue
            lo, hi = (int(ends[a - 1]) if a else 0), int(ends[b - 1])
            cols, count = self._sentences(wtab, ptab, wid[lo:hi], None if pid is None else pid[lo:hi], lengths[a:b])
            indices.append(cols)
            counts.append(count)
        return _shared_csr(np.concatenate(indices) if indices else np.zeros(0, np.int32),
                           np.concatenate(counts) if counts else np.zeros(0, np.int64), lengths, self.n_features)

    #: tokens featurised at once (whole sentences): bounds the memory of the hashing temporaries
    CHUNK_TOKENS = 16384

    def _sentences(self, wtab: np.ndarray, ptab: np.ndarray | None, wid: np.ndarray, pid: np.ndarray | None,
                   lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The features of consecutive whole sentences (``wid``/``pid``: their tokens' type ids):
        ``(columns, counts)``, the sorted distinct column numbers (int32) of every token, row after row,
        and how many each token has."""
        n = int(lengths.sum())
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        t = np.arange(n) - starts  # position in the sentence
        size = np.repeat(lengths, lengths)

        def neighbour(ids, o, bos, eos):
            u = t + o
            inside = (u >= 0) & (u < size)
            src = np.clip(np.arange(n) + o, 0, n - 1)
            return np.where(inside, ids[src], np.where(u < 0, bos, eos))

        keys = []
        offsets = range(-self.window, self.window + 1)
        # key = template hash (32 bits) << 8 | offset slot: the same word at two offsets differs
        for o in offsets:
            slot = np.uint64(o + 128)
            keys.append((wtab[neighbour(wid, o, self.bos, self.eos)] << np.uint64(8)) | slot)
            if self.use_pos:
                keys.append(((ptab[neighbour(pid, o, self.pos_bos, self.pos_eos)] << np.uint64(8)) | slot)[:, None])
        if self.use_pos:
            p = [ptab[neighbour(pid, o, self.pos_bos, self.pos_eos)] for o in (-1, 0, 1)]
            # conjunctions: combine the two 32-bit hashes into one 64-bit key, tagged by a slot
            for a, b, tag in ((p[0], p[1], 1), (p[1], p[2], 2)):
                keys.append(((a << np.uint64(32)) ^ _mix64(b ^ np.uint64(tag << 40)))[:, None])
        keys.append(np.full((n, 1), _crc("bias"), dtype=np.uint64))
        cols = (_mix64(np.hstack(keys)) % np.uint64(self.n_features)).astype(np.int32)
        return _distinct_columns(cols)


def _distinct_columns(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's sorted distinct entries of a (tokens, k) array of column numbers, concatenated (int32),
    and their number per row: two features of a token that hash to one column give a single 1."""
    cols = np.sort(cols, axis=1)
    keep = np.ones(cols.shape, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    return cols[keep].astype(np.int32), keep.sum(axis=1)


class _Window(np.ndarray):
    """Marks the end of a window's chain of bases (see :func:`_window`)."""


def _window(buffer: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``buffer[lo:hi]`` as a plain array that scipy keeps as it is.

    A CSR matrix built from (or validated into) ``(data, indices, indptr)`` copies an ``indices`` whose
    ``base`` is more than twice as long as itself (scipy's ``prune``), which would give every sentence
    its own copy of its columns. Two hops through a subclass end numpy's collapsing of the chain of
    bases at this window (a view's base skips arrays that do not own their memory only while they
    are of the view's own type), so the window's ``base`` is as long as the window: no copy is made,
    and every sentence's columns stay in the one buffer (which the chain kernels then read in place).
    """
    return buffer[lo:hi].view(_Window).view(_Window).view(np.ndarray)


def _shared_csr(indices: np.ndarray, counts: np.ndarray, lengths: np.ndarray, n_features: int) -> list[sp.csr_matrix]:
    """Binary CSR matrices, one per sentence, that share memory: each one's column numbers are a
    window of ``indices`` (all tokens' columns, row after row) and its values a window of one
    read-only stride-0 array of 1.0 (no memory per non-zero; the matrices' ``data`` cannot be
    written in place, ``.copy()`` gives a writable matrix)."""
    ones = np.broadcast_to(np.float64(1.0), indices.shape)
    row_ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    bounds = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    out = []
    for a, b in itertools.pairwise(bounds.tolist()):
        lo, hi = int(row_ptr[a]), int(row_ptr[b])
        m = sp.csr_matrix((ones[lo:hi], _window(indices, lo, hi), (row_ptr[a:b + 1] - lo).astype(np.int32)),
                          shape=(b - a, n_features), copy=False)
        m.has_sorted_indices = True
        out.append(m)
    return out


def featurize(corpora: Sequence[Corpus], n_features: int = 2**16, window: int = 2,
              affix_lengths: Sequence[int] = (1, 2, 3), use_pos: bool | None = None) -> list[list[sp.csr_matrix]]:
    """Hashed binary feature matrices for every sentence of every corpus (one shared hashing).

    Parameters
    ----------
    corpora : sequence of Corpus
    n_features : int
        Hashing dimension.
    window : int
        Context offsets ``-window..window``.
    affix_lengths : sequence of int
        Lengths of lowercase prefixes and suffixes.
    use_pos : bool, optional
        Default: use POS features when every corpus has a POS column.

    Returns
    -------
    list (per corpus) of lists of CSR matrices ``(T, n_features)``, float64, values 1, sorted indices.
        A corpus's matrices share memory (see the module docstring): their ``data`` is read-only.
    """
    if use_pos is None:
        use_pos = all(c.pos is not None for c in corpora)
    fz = _Featurizer(int(n_features), int(window), tuple(int(k) for k in affix_lengths), bool(use_pos))
    return [fz(c) for c in corpora]


# --------------------------------------------------------------------------------------------
# tag sets and loaders
# --------------------------------------------------------------------------------------------

def _tag_set(train: Corpus) -> list[str]:
    seen = set(train.tags)
    return (["O"] if "O" in seen else []) + sorted(seen - {"O"})


def _encode_tags(corpus: Corpus, tags: list[str], unseen_tags: str) -> list[np.ndarray]:
    index = {t: i for i, t in enumerate(tags)}
    new = sorted(set(corpus.tags) - set(index))
    if new:
        if unseen_tags == "error":
            raise InvalidInputError(f"{corpus.source}: tags {new} do not occur in the training set "
                                    "(pass unseen_tags='extend' or 'outside')")
        if unseen_tags == "extend":
            for tg in new:
                index[tg] = len(tags)
                tags.append(tg)
        else:  # "outside"
            if "O" not in index:
                raise InvalidInputError(f"{corpus.source}: unseen tags {new} cannot be mapped to 'O': no 'O' tag")
            warnings.warn(f"{corpus.source}: tags {new} unseen in training are mapped to 'O'", stacklevel=3)
            for tg in new:
                index[tg] = index["O"]
    flat = np.fromiter((index[t] for t in corpus.tags), dtype=np.int64, count=corpus.n_tokens)
    return np.split(flat, np.cumsum(corpus.lengths)[:-1])


def _load(corpus_name: str, files: dict[str, Path], n_features: int, window: int,
          affix_lengths: Sequence[int], unseen_tags: str, progress: bool | Progress = False) -> dict:
    if unseen_tags not in ("extend", "error", "outside"):
        raise InvalidInputError(f"unseen_tags must be 'extend', 'error' or 'outside', got {unseen_tags!r}")
    t0 = time.perf_counter()
    corpora = {split: read_conll(f) for split, f in files.items()}
    t_read = time.perf_counter() - t0
    read = ", ".join(f"{split} ({count(c.n_sentences, 'sentence')})" for split, c in corpora.items())
    as_progress(progress).stage(f"read {_NAMES.get(corpus_name, corpus_name)} {read}; computing hashed features")
    order = list(files)
    mats = featurize([corpora[s] for s in order], n_features, window, affix_lengths)
    tags = _tag_set(corpora["train"])
    n_train_tags = len(tags)
    out: dict = {}
    for split, X in zip(order, mats):
        out[split] = {"X": X, "y": _encode_tags(corpora[split], tags, unseen_tags)}
    n_tokens = sum(c.n_tokens for c in corpora.values())
    nnz = sum(m.nnz for X in mats for m in X)
    out["tags"] = tags
    # start/end and bias blocks would duplicate the begin/end-of-sentence and bias features
    out["model"] = ChainModel(n_features, len(tags), start_end=False, bias=False)
    out["info"] = {
        "corpus": corpus_name, "files": {s: str(f) for s, f in files.items()},
        "n_features": int(n_features), "window": int(window), "affix_lengths": [int(k) for k in affix_lengths],
        "n_train_tags": n_train_tags,
        "use_pos": all(c.pos is not None for c in corpora.values()),
        "sizes": {s: (c.n_sentences, c.n_tokens) for s, c in corpora.items()},
        "nnz_per_token": nnz / n_tokens, "read_seconds": t_read,
        "load_seconds": time.perf_counter() - t0,
    }
    return out


def load_conll2000(path: str | os.PathLike | None = None, n_features: int = 2**16, *, window: int = 2,
                   affix_lengths: Sequence[int] = (1, 2, 3), unseen_tags: str = "extend",
                   progress: bool | Progress = False) -> dict:
    """CoNLL-2000 chunking (WSJ; train 8,936 sentences, test 2,012) as a sparse chain problem.

    Parameters
    ----------
    path : path-like, optional
        Directory with ``train.txt`` and ``test.txt`` (or ``.gz``); see :func:`resolve_data_dir`.
    n_features : int, default 2**16
        Hashing dimension of the token features.
    window, affix_lengths
        Feature options, see the module docstring.
    unseen_tags : {"extend", "error", "outside"}
        Tags of the test file absent from training (CoNLL-2000 test has ``I-LST``): ``"extend"``
        appends them to ``tags`` after the training tags (a model never sees them in training);
        ``"error"`` raises; ``"outside"`` maps them to ``O`` with a warning (alters the gold chunks).
    progress : bool or Progress
        Say on stderr what is read and computed (:mod:`~structopt.progress`).

    Returns
    -------
    dict
        ``train``/``test``: ``{"X": list of CSR (T, n_features), "y": list of int64 arrays}``;
        ``tags``: index → tag string (``"O"`` first, then sorted training tags, then unseen ones);
        ``model``: ``ChainModel(n_features, len(tags))`` without start/end or bias blocks (the
        features carry a bias and begin/end-of-sentence indicators); ``info``: sizes and timings.
    """
    d = resolve_data_dir("conll2000", path)
    files = {s: _data_file(d, name, "conll2000") for s, name in SPLIT_FILES.items()}
    return _load("conll2000", files, n_features, window, affix_lengths, unseen_tags, progress)


def load_conll2002(path: str | os.PathLike | None = None, language: str = "esp", n_features: int = 2**16, *,
                   window: int = 2, affix_lengths: Sequence[int] = (1, 2, 3), unseen_tags: str = "extend") -> dict:
    """CoNLL-2002 named entities, Spanish (``"esp"``) or Dutch (``"ned"``), as a sparse chain problem.

    ``train`` = ``<lang>.train``, ``dev`` = ``<lang>.testa``, ``test`` = ``<lang>.testb``. Dutch
    ``-DOCSTART-`` lines are dropped (document boundaries, not tokens). Other parameters and the
    returned dict are as in :func:`load_conll2000`, with an extra ``dev`` split.
    """
    if language not in ("esp", "ned"):
        raise InvalidInputError(f"language must be 'esp' or 'ned', got {language!r}")
    d = resolve_data_dir("conll2002", path)
    names = {"train": "train", "dev": "testa", "test": "testb"}
    files = {s: _data_file(d, f"{language}.{n}", "conll2002") for s, n in names.items()}
    return _load("conll2002", files, n_features, window, affix_lengths, unseen_tags)


# --------------------------------------------------------------------------------------------
# metrics (conlleval)
# --------------------------------------------------------------------------------------------

# chunk-tag prefixes conlleval distinguishes; any other prefix gets its own code >= _OTHER
_O, _B, _I, _E, _DOT, _OPEN, _CLOSE, _OTHER = range(8)
_PREFIX = {"O": _O, "B": _B, "I": _I, "E": _E, ".": _DOT, "[": _OPEN, "]": _CLOSE}


@njit(cache=True)
def _end_of_chunk(prev, cur, prev_type, cur_type):
    if prev == _B and (cur == _B or cur == _O):
        return True
    if prev == _I and (cur == _B or cur == _O):
        return True
    if prev == _E and (cur == _E or cur == _I or cur == _O):
        return True
    if prev != _O and prev != _DOT and prev_type != cur_type:
        return True
    return prev == _CLOSE or prev == _OPEN


@njit(cache=True)
def _start_of_chunk(prev, cur, prev_type, cur_type):
    if cur == _B and (prev == _B or prev == _I or prev == _O):
        return True
    if prev == _O and (cur == _I or cur == _E):
        return True
    if prev == _E and (cur == _E or cur == _I):
        return True
    if cur != _O and cur != _DOT and prev_type != cur_type:
        return True
    return cur == _OPEN or cur == _CLOSE


@njit(cache=True)
def _conlleval_counts(c_pre, c_typ, g_pre, g_typ, bounds, n_types):
    """conlleval's scan; a sentence boundary is an ``O`` pseudo-token for both sequences."""
    correct = np.zeros(n_types, np.int64)
    found_c = np.zeros(n_types, np.int64)
    found_g = np.zeros(n_types, np.int64)
    correct_tags = 0
    in_correct = False
    lc, lct, lg, lgt = _O, 0, _O, 0
    for s in range(bounds.shape[0] - 1):
        for i in range(bounds[s], bounds[s + 1] + 1):
            boundary = i == bounds[s + 1]
            if boundary:
                c, ct, g, gt = _O, 0, _O, 0
            else:
                c, ct, g, gt = c_pre[i], c_typ[i], g_pre[i], g_typ[i]
            end_c = _end_of_chunk(lc, c, lct, ct)
            end_g = _end_of_chunk(lg, g, lgt, gt)
            if in_correct:
                if end_c and end_g and lgt == lct:
                    in_correct = False
                    correct[lct] += 1
                elif end_c != end_g or gt != ct:
                    in_correct = False
            start_c = _start_of_chunk(lc, c, lct, ct)
            start_g = _start_of_chunk(lg, g, lgt, gt)
            if start_c and start_g and gt == ct:
                in_correct = True
            if start_c:
                found_c[ct] += 1
            if start_g:
                found_g[gt] += 1
            if not boundary and c == g and ct == gt:
                correct_tags += 1
            lc, lct, lg, lgt = c, ct, g, gt
    if in_correct:
        correct[lct] += 1
    return correct, found_c, found_g, correct_tags


class _TagCodes:
    """Maps tag strings to (prefix code, type id) as conlleval splits them (at the first hyphen)."""

    def __init__(self):
        self.prefixes = dict(_PREFIX)
        self.types = {"": 0}
        self.cache: dict[str, tuple[int, int]] = {}

    def code(self, tag: str) -> tuple[int, int]:
        got = self.cache.get(tag)
        if got is None:
            prefix, hyphen, typ = tag.partition("-")
            if not hyphen:
                prefix, typ = tag, ""
            p = self.prefixes.setdefault(prefix, _OTHER + len(self.prefixes) - len(_PREFIX))
            got = self.cache[tag] = (p, self.types.setdefault(typ, len(self.types)))
        return got

    def encode(self, seqs: Sequence, tags: Sequence[str] | None, what: str) -> tuple[np.ndarray, np.ndarray]:
        pre: list[np.ndarray] = []
        typ: list[np.ndarray] = []
        table = None
        for k, seq in enumerate(seqs):
            if isinstance(seq, str):
                raise InvalidInputError(f"{what}[{k}] is a string: pass a list of sentences (tag sequences)")
            arr = np.asarray(seq)
            if arr.dtype.kind in "iu":
                if tags is None:
                    raise InvalidInputError(f"{what}[{k}] holds tag indices: pass tags=... to decode them")
                if table is None:
                    table = np.array([self.code(t) for t in tags], dtype=np.int64).reshape(-1, 2)
                if arr.size and (arr.min() < 0 or arr.max() >= len(tags)):
                    raise InvalidInputError(f"{what}[{k}]: tag index out of range [0, {len(tags)})")
                codes = table[arr.ravel()]
            elif arr.size == 0:
                codes = np.zeros((0, 2), dtype=np.int64)
            else:
                codes = np.array([self.code(str(t)) for t in arr.ravel()], dtype=np.int64).reshape(-1, 2)
            pre.append(codes[:, 0])
            typ.append(codes[:, 1])
        if not pre:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(pre), np.concatenate(typ)


def _prf(correct: int, n_true: int, n_pred: int) -> dict:
    p = correct / n_pred if n_pred else 0.0
    r = correct / n_true if n_true else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "n_true": int(n_true), "n_pred": int(n_pred),
            "n_correct": int(correct)}


def chunk_f1(y_true: Sequence, y_pred: Sequence, tags: Sequence[str] | None = None) -> dict:
    """Chunk precision, recall and F1 over exact chunks, as CoNLL's ``conlleval`` computes them.

    A chunk starts at ``B-X``, at ``I-X`` after ``O`` or after a tag of another type (IOB1 style),
    and ends before ``O``, ``B-*``, a type change or a sentence end; a predicted chunk is correct
    when its start, end and type all equal a true chunk's. Tags split at their first hyphen.

    Parameters
    ----------
    y_true, y_pred : list of sentences
        Each sentence a sequence of tag strings or an integer array of indices into ``tags``.
    tags : sequence of str, optional
        Index → tag string; needed for index arrays.

    Returns
    -------
    dict
        ``precision``, ``recall``, ``f1`` (fractions in [0, 1]), ``n_true``, ``n_pred``,
        ``n_correct`` (chunks), ``accuracy`` (token accuracy), ``n_tokens`` and ``per_type``:
        type → the same precision/recall/f1/count entries.
    """
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true sentences but {len(y_pred)} predicted")
    lens_t = np.fromiter((len(s) for s in y_true), dtype=np.int64, count=len(y_true))
    lens_p = np.fromiter((len(s) for s in y_pred), dtype=np.int64, count=len(y_pred))
    if np.any(lens_t != lens_p):
        k = int(np.flatnonzero(lens_t != lens_p)[0])
        raise InvalidInputError(f"sentence {k}: {lens_t[k]} true tags but {lens_p[k]} predicted")
    codes = _TagCodes()
    c_pre, c_typ = codes.encode(y_true, tags, "y_true")
    g_pre, g_typ = codes.encode(y_pred, tags, "y_pred")
    bounds = np.concatenate([[0], np.cumsum(lens_t)]).astype(np.int64)
    n_types = len(codes.types)
    correct, found_c, found_g, correct_tags = _conlleval_counts(c_pre, c_typ, g_pre, g_typ, bounds, n_types)
    out = _prf(int(correct.sum()), int(found_c.sum()), int(found_g.sum()))
    n_tokens = int(bounds[-1])
    out["accuracy"] = correct_tags / n_tokens if n_tokens else 0.0
    out["n_tokens"] = n_tokens
    names = {i: t for t, i in codes.types.items()}
    out["per_type"] = {names[i]: _prf(int(correct[i]), int(found_c[i]), int(found_g[i]))
                       for i in sorted(range(n_types), key=names.__getitem__) if found_c[i] or found_g[i]}
    return out


def token_accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    """Fraction of tokens whose predicted tag equals the true one (strings or indices, not mixed)."""
    if len(y_true) != len(y_pred):
        raise InvalidInputError(f"{len(y_true)} true sentences but {len(y_pred)} predicted")
    hits = total = 0
    for k, (a, b) in enumerate(zip(y_true, y_pred)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            raise InvalidInputError(f"sentence {k}: {a.size} true tags but {b.size} predicted")
        hits += int(np.count_nonzero(a == b))
        total += a.size
    return hits / total if total else 0.0


def decode_tags(indices: Sequence[int] | np.ndarray, tags: Sequence[str]) -> list[str]:
    """Tag strings of one sentence's tag indices."""
    arr = np.asarray(indices)
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= len(tags)):
        raise InvalidInputError(f"tag indices must be integers in [0, {len(tags)})")
    return [tags[i] for i in arr.ravel().tolist()]
