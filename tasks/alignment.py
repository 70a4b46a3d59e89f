"""Word alignment on the English-French Hansards (HLT-NAACL 2003 gold) as bipartite matching.

English words are the left nodes, French words the right nodes; a partial matching
(``allow_unmatched=True``) is predicted per sentence pair. No large bitext is available, so every
feature is computed from the 484 gold sentence pairs themselves (37 trial + 447 test): Dice
co-occurrence is counted over all their sentences (unsupervised: it never looks at the links).

Training targets are one-to-one: the gold has many-to-one *sure* links (about 80 English words
have several), so the target is a maximum-cardinality one-to-one subset of the sure links, ties
broken by larger Dice and then by closeness to the diagonal (a max-weight matching restricted to
sure links). Evaluation uses the full gold: AER = 1 - ``(|A∩S| + |A∩P|) / (|A| + |S|)``, with S the
sure links and P the sure plus possible links, summed over the evaluated sentence pairs.

Split (:func:`heldout_indices`, :data:`SPLIT_RULE`): a seeded random 200 of the 447 test pairs are
held out for testing; the other 247 test pairs and the 37 trial pairs train (``--n-train N``: the
first N of those).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import njit

from structopt.errors import InvalidInputError
from structopt.structures.matching import BipartiteMatching, MatchingPotentials
from structopt.tasks._data import find_data_dir, read_text_lines

SOURCE = ("the HLT-NAACL 2003 shared-task English-French Hansards word-alignment gold "
          "(trial.en-fr.* and test.en-fr.*: .en, .fr and .naacl files; Mihalcea & Pedersen 2003)")
PARTS = ("trial", "test")

FEATURE_NAMES = [
    "dice", "dice_sq", "dice_row_best", "dice_col_best", "dice_mutual_best",
    "rel_pos_diff", "rel_pos_diff_sq", "near_diagonal",
    "exact_match", "prefix_len", "prefix4", "edit_ratio",
    "both_punct", "same_punct", "punct_mismatch", "same_number", "number_mismatch",
    "log_freq_en", "log_freq_fr", "len_diff_ratio", "both_short",
    "dice_diag_mean", "dice_diag_max", "dice_antidiag_max", "dice_x_near",
]


@dataclass
class SentencePair:
    """One gold sentence pair. Links are 0-based ``(english_position, french_position)``."""

    en: list[str]
    fr: list[str]
    sure: set[tuple[int, int]]
    possible: set[tuple[int, int]]  # sure links included
    part: str
    number: int  # sentence number in its file (1-based)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.en), len(self.fr)


# --------------------------------------------------------------------------- loading
def resolve_data_dir(path: str | os.PathLike | None = None) -> Path:
    """The Hansards directory (``path``, ``$STRUCTOPT_DATA/hansards`` or ``../shared/data/hansards``)."""
    required = [f"{part}.en-fr.{ext}" for part in PARTS for ext in ("en", "fr", "naacl")]
    return find_data_dir("hansards", path, required, SOURCE)


def _sentences(path: Path) -> list[list[str]]:
    sentences = [line.split() for line in read_text_lines(path)]
    empty = [i for i, words in enumerate(sentences) if not words]
    if empty:  # a node set must be non-empty; an empty line would also shift every later sentence
        raise InvalidInputError(f"{path}, line {empty[0] + 1}: empty sentence")
    return sentences


def _links(path: Path, en: list[list[str]], fr: list[list[str]]) -> tuple[list[set], list[set]]:
    """Sure and possible (sure included) links per sentence of a ``.naacl`` file, 0-based."""
    sure: list[set[tuple[int, int]]] = [set() for _ in en]
    possible: list[set[tuple[int, int]]] = [set() for _ in en]
    for lineno, line in enumerate(read_text_lines(path), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) not in (3, 4) or (len(fields) == 4 and fields[3] not in ("S", "P")):
            raise InvalidInputError(f"{path}, line {lineno}: expected 'sentence english french [S|P]', got {line!r}")
        try:
            s, e, f = (int(v) for v in fields[:3])
        except ValueError:
            raise InvalidInputError(f"{path}, line {lineno}: positions must be integers, got {line!r}") from None
        if not 1 <= s <= len(en):
            raise InvalidInputError(f"{path}, line {lineno}: sentence {s} out of range 1..{len(en)}")
        if not (1 <= e <= len(en[s - 1]) and 1 <= f <= len(fr[s - 1])):
            raise InvalidInputError(f"{path}, line {lineno}: link ({e}, {f}) out of range for sentence {s} "
                                    f"({len(en[s - 1])} English, {len(fr[s - 1])} French words; 1-based)")
        link = (e - 1, f - 1)
        possible[s - 1].add(link)
        if len(fields) == 3 or fields[3] == "S":
            sure[s - 1].add(link)
    return sure, possible


def load_hansards(path: str | os.PathLike | None = None) -> list[SentencePair]:
    """All gold sentence pairs: the 37 trial pairs, then the 447 test pairs.

    Raises
    ------
    DataNotFoundError
        A file is missing (the message says where to get them).
    InvalidInputError
        Naming the file and line: undecodable bytes, an empty sentence, English and French files
        with different numbers of sentences, a malformed ``.naacl`` line or a link out of range.
    """
    directory = resolve_data_dir(path)
    pairs: list[SentencePair] = []
    for part in PARTS:
        files = {ext: directory / f"{part}.en-fr.{ext}" for ext in ("en", "fr", "naacl")}
        en, fr = _sentences(files["en"]), _sentences(files["fr"])
        if len(en) != len(fr):
            raise InvalidInputError(f"{files['en']} has {len(en)} sentences but {files['fr']} has {len(fr)}")
        sure, possible = _links(files["naacl"], en, fr)
        for i, (e, f) in enumerate(zip(en, fr, strict=True)):
            pairs.append(SentencePair(e, f, sure[i], possible[i], part, i + 1))
    return pairs


# --------------------------------------------------------------------------- features
def _is_punct(word: str) -> bool:
    return all(unicodedata.category(ch).startswith("P") or unicodedata.category(ch).startswith("S") for ch in word)


def _is_number(word: str) -> bool:
    return any(ch.isdigit() for ch in word) and all(ch.isdigit() or ch in ".,:-/" for ch in word)


@njit(cache=True)
def _string_features(ce, le, cf, lf):
    """Common prefix length and normalised edit distance for all word pairs (code-point arrays)."""
    L, R = le.shape[0], lf.shape[0]
    prefix = np.zeros((L, R))
    edit = np.zeros((L, R))
    row = np.empty(ce.shape[1] + 1)
    prev = np.empty(ce.shape[1] + 1)
    for j in range(L):
        for k in range(R):
            m, n = le[j], lf[k]
            p = 0
            while p < m and p < n and ce[j, p] == cf[k, p]:
                p += 1
            prefix[j, k] = p
            for a in range(m + 1):
                prev[a] = a
            for b in range(1, n + 1):
                row[0] = b
                for a in range(1, m + 1):
                    cost = 0.0 if ce[j, a - 1] == cf[k, b - 1] else 1.0
                    row[a] = min(prev[a] + 1.0, row[a - 1] + 1.0, prev[a - 1] + cost)
                for a in range(m + 1):
                    prev[a] = row[a]
            edit[j, k] = prev[m] / max(m, n, 1)
    return prefix, edit


def _codes(words: list[str], width: int) -> tuple[np.ndarray, np.ndarray]:
    codes = np.zeros((len(words), width), dtype=np.int32)
    lens = np.zeros(len(words), dtype=np.int64)
    for i, w in enumerate(words):
        w = w[:width]
        codes[i, :len(w)] = [ord(ch) for ch in w]
        lens[i] = len(w)
    return codes, lens


def _shift(D: np.ndarray, dj: int, dk: int) -> np.ndarray:
    """``out[j, k] = D[j + dj, k + dk]`` (0 outside)."""
    out = np.zeros_like(D)
    L, R = D.shape
    js, ks = slice(max(0, -dj), min(L, L - dj)), slice(max(0, -dk), min(R, R - dk))
    jd, kd = slice(max(0, dj), min(L, L + dj)), slice(max(0, dk), min(R, R + dk))
    out[js, ks] = D[jd, kd]
    return out


@dataclass
class AlignmentFeaturizer:
    """Edge features of English-French word pairs, with corpus statistics from ``pairs``.

    Dice(e, f) = 2 C(e, f) / (C(e) + C(f)), with C counting sentence pairs (lower-cased words).
    """

    pairs: list[SentencePair]
    en_vocab: dict[str, int] = field(init=False)
    fr_vocab: dict[str, int] = field(init=False)

    def __post_init__(self):
        self.en_vocab, self.fr_vocab = {}, {}
        rows_e, cols_e, rows_f, cols_f = [], [], [], []
        for i, p in enumerate(self.pairs):
            for w in {w.lower() for w in p.en}:
                rows_e.append(i)
                cols_e.append(self.en_vocab.setdefault(w, len(self.en_vocab)))
            for w in {w.lower() for w in p.fr}:
                rows_f.append(i)
                cols_f.append(self.fr_vocab.setdefault(w, len(self.fr_vocab)))
        n = len(self.pairs)
        Se = sp.csr_matrix((np.ones(len(rows_e)), (rows_e, cols_e)), shape=(n, len(self.en_vocab)))
        Sf = sp.csr_matrix((np.ones(len(rows_f)), (rows_f, cols_f)), shape=(n, len(self.fr_vocab)))
        self.co = (Se.T @ Sf).tocsr()
        self.count_en = np.asarray(Se.sum(axis=0)).ravel()
        self.count_fr = np.asarray(Sf.sum(axis=0)).ravel()
        self.n_sentences = n

    @property
    def n_features(self) -> int:
        return len(FEATURE_NAMES)

    def state(self) -> dict[str, Any]:
        """The corpus statistics (vocabularies, co-occurrence counts), to rebuild with :meth:`from_state`."""
        return {"en_vocab": list(self.en_vocab), "fr_vocab": list(self.fr_vocab), "co_data": self.co.data,
                "co_indices": self.co.indices, "co_indptr": self.co.indptr, "count_en": self.count_en,
                "count_fr": self.count_fr, "n_sentences": int(self.n_sentences)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AlignmentFeaturizer:
        """A featurizer with saved statistics (:meth:`state`); words it never saw get Dice 0 and frequency 0."""
        self = cls.__new__(cls)
        self.pairs = []
        self.en_vocab = {w: i for i, w in enumerate(state["en_vocab"])}
        self.fr_vocab = {w: i for i, w in enumerate(state["fr_vocab"])}
        shape = (len(self.en_vocab), len(self.fr_vocab))
        self.co = sp.csr_matrix((state["co_data"], state["co_indices"], state["co_indptr"]), shape=shape)
        self.count_en, self.count_fr = np.asarray(state["count_en"]), np.asarray(state["count_fr"])
        self.n_sentences = int(state["n_sentences"])
        if self.count_en.shape != (shape[0],) or self.count_fr.shape != (shape[1],):
            raise InvalidInputError("alignment statistics: word counts do not match the vocabularies")
        return self

    def _counts(self, words: list[str], vocab: dict[str, int], counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array([vocab.get(w, -1) for w in words], dtype=np.int64)
        return ids, np.where(ids >= 0, counts[np.maximum(ids, 0)], 0.0)

    def dice(self, pair: SentencePair) -> np.ndarray:
        """(L, R) Dice coefficients of the pair's words (0 for a word outside the statistics)."""
        e, ce = self._counts([w.lower() for w in pair.en], self.en_vocab, self.count_en)
        f, cf = self._counts([w.lower() for w in pair.fr], self.fr_vocab, self.count_fr)
        co = np.zeros((len(e), len(f)))
        known_e, known_f = np.flatnonzero(e >= 0), np.flatnonzero(f >= 0)
        co[np.ix_(known_e, known_f)] = self.co[e[known_e]][:, f[known_f]].toarray()
        total = ce[:, None] + cf[None, :]
        return np.where(total > 0, 2.0 * co / np.where(total > 0, total, 1.0), 0.0)

    def __call__(self, pair: SentencePair) -> np.ndarray:
        """(L, R, F) edge features (see :data:`FEATURE_NAMES`)."""
        en = [w.lower() for w in pair.en]
        fr = [w.lower() for w in pair.fr]
        L, R = len(en), len(fr)
        D = self.dice(pair)
        row_best = D >= D.max(axis=1, keepdims=True)
        col_best = D >= D.max(axis=0, keepdims=True)
        pos = np.abs((np.arange(L)[:, None] + 0.5) / L - (np.arange(R)[None, :] + 0.5) / R)
        width = max(max(map(len, en)), max(map(len, fr)))
        ce, le = _codes(en, width)
        cf, lf = _codes(fr, width)
        prefix, edit = _string_features(ce, le, cf, lf)
        exact = np.array(en, dtype=object)[:, None] == np.array(fr, dtype=object)[None, :]
        len_e, len_f = le.astype(float)[:, None], lf.astype(float)[None, :]
        punct_e = np.array([_is_punct(w) for w in en])[:, None]
        punct_f = np.array([_is_punct(w) for w in fr])[None, :]
        num_e = np.array([_is_number(w) for w in en])[:, None]
        num_f = np.array([_is_number(w) for w in fr])[None, :]
        log_n = np.log(1.0 + self.n_sentences)
        freq_e = np.log1p(self._counts(en, self.en_vocab, self.count_en)[1])[:, None] / log_n
        freq_f = np.log1p(self._counts(fr, self.fr_vocab, self.count_fr)[1])[None, :] / log_n
        diag = np.stack([_shift(D, -1, -1), _shift(D, 1, 1)])
        anti = np.stack([_shift(D, -1, 1), _shift(D, 1, -1)])
        near = np.maximum(0.0, 1.0 - 5.0 * pos)
        feats = [
            D, D ** 2, row_best, col_best, row_best & col_best,
            pos, pos ** 2, near,
            exact, np.minimum(prefix, 6.0) / 6.0, (prefix >= 4) & (len_e >= 4) & (len_f >= 4), 1.0 - edit,
            punct_e & punct_f, (punct_e & punct_f) & exact, punct_e ^ punct_f, (num_e & num_f) & exact,
            (num_e | num_f) & ~exact,
            np.broadcast_to(freq_e, (L, R)), np.broadcast_to(freq_f, (L, R)),
            np.abs(len_e - len_f) / np.maximum(len_e, len_f), (len_e <= 3) & (len_f <= 3),
            diag.mean(axis=0), diag.max(axis=0), anti.max(axis=0), D * near,
        ]
        X = np.stack([np.broadcast_to(np.asarray(f, dtype=float), (L, R)) for f in feats], axis=-1)
        return np.ascontiguousarray(X)


# --------------------------------------------------------------------------- targets, metric, baseline
def gold_matching(pair: SentencePair, dice: np.ndarray) -> np.ndarray:
    """One-to-one training target from the sure links (see the module docstring), int64 (L,) with -1."""
    L, R = pair.shape
    pos = np.abs((np.arange(L)[:, None] + 0.5) / L - (np.arange(R)[None, :] + 0.5) / R)
    scores = np.full((L, R), -1.0)
    for j, k in pair.sure:
        scores[j, k] = 1.0 + 0.1 * dice[j, k] + 0.01 * (1.0 - pos[j, k])
    return BipartiteMatching(allow_unmatched=True).argmax(scores)


def links(y: np.ndarray) -> set[tuple[int, int]]:
    """The links ``(j, y[j])`` of a matching."""
    return {(int(j), int(k)) for j, k in enumerate(y) if k >= 0}


def aer(predicted: list[set[tuple[int, int]]], pairs: list[SentencePair]) -> float:
    """Alignment error rate summed over the pairs: 1 - ``(|A∩S| + |A∩P|) / (|A| + |S|)``."""
    if len(predicted) != len(pairs):
        raise InvalidInputError(f"{len(predicted)} predicted alignments for {len(pairs)} sentence pairs")
    a_s = a_p = n_a = n_s = 0
    for A, p in zip(predicted, pairs, strict=True):
        a_s += len(A & p.sure)
        a_p += len(A & p.possible)
        n_a += len(A)
        n_s += len(p.sure)
    if n_a + n_s == 0:
        return 0.0
    return 1.0 - (a_s + a_p) / (n_a + n_s)


def competitive_linking(dice: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy one-to-one linking by decreasing Dice (ties: nearer the diagonal, then lower indices);
    pairs with Dice below ``threshold`` stay unlinked (Melamed 2000)."""
    L, R = dice.shape
    pos = np.abs((np.arange(L)[:, None] + 0.5) / L - (np.arange(R)[None, :] + 0.5) / R)
    order = np.lexsort((pos.ravel(), -dice.ravel()))
    y = np.full(L, -1, dtype=np.int64)
    used_e, used_f = np.zeros(L, dtype=bool), np.zeros(R, dtype=bool)
    for flat in order:
        j, k = divmod(int(flat), R)
        if dice[j, k] < threshold or dice[j, k] <= 0:
            break
        if not used_e[j] and not used_f[k]:
            y[j], used_e[j], used_f[k] = k, True, True
    return y


def dice_baseline(task: AlignmentTask, thresholds: np.ndarray | None = None) -> dict:
    """Dice + competitive linking, its threshold chosen by AER on the training pairs (no other learning).

    Returns
    -------
    dict with ``threshold``, ``train_aer`` and ``test_aer`` (on ``task.test_pairs``).
    """
    thresholds = np.linspace(0.0, 0.95, 20) if thresholds is None else np.asarray(thresholds)
    train_dice = [task.featurizer.dice(p) for p in task.train_pairs]
    train_aers = [aer([links(competitive_linking(d, t)) for d in train_dice], task.train_pairs) for t in thresholds]
    best = float(thresholds[int(np.argmin(train_aers))])
    test = [links(competitive_linking(task.featurizer.dice(p), best)) for p in task.test_pairs]
    return {"threshold": best, "train_aer": float(min(train_aers)), "test_aer": aer(test, task.test_pairs)}


# --------------------------------------------------------------------------- the task
@dataclass
class AlignmentTask:
    """A train / held-out split with features and targets.

    Attributes
    ----------
    X_train, Y_train : lists of (L, R, F) feature arrays and int64 (L,) target matchings
    X_test : list of feature arrays of the held-out pairs
    train_pairs, test_pairs : the gold sentence pairs (for AER)
    featurizer : AlignmentFeaturizer
    """

    X_train: list[np.ndarray]
    Y_train: list[np.ndarray]
    X_test: list[np.ndarray]
    train_pairs: list[SentencePair]
    test_pairs: list[SentencePair]
    featurizer: AlignmentFeaturizer

    @property
    def n_features(self) -> int:
        return self.featurizer.n_features

    def evaluate(self, predictions: list[np.ndarray]) -> float:
        """Held-out AER of predicted matchings (one int64 (L,) array per held-out pair)."""
        return aer([links(y) for y in predictions], self.test_pairs)


#: the Hansards split in words (:func:`heldout_indices` applies it)
SPLIT_RULE = ("a seeded random 200 of the 447 test pairs are held out for testing; the other 247 and the 37 "
              "trial pairs train")


def heldout_indices(pairs: Sequence[SentencePair], n_heldout: int = 200, random_state: int | None = 0) -> np.ndarray:
    """The split rule: indices (into :func:`load_hansards`' pairs, sorted) of the ``n_heldout`` test pairs held
    out, a seeded random choice among the ``"test"`` part's. ``load_alignment`` and ``structopt predict`` both
    select the held-out pairs with it."""
    test_idx = [i for i, p in enumerate(pairs) if p.part == "test"]
    if not 1 <= n_heldout < len(test_idx):
        raise InvalidInputError(f"n_heldout must be in [1, {len(test_idx) - 1}], got {n_heldout}")
    rng = np.random.default_rng(random_state)
    return np.sort(rng.choice(test_idx, size=n_heldout, replace=False))


def load_alignment(path: str | os.PathLike | None = None, n_heldout: int = 200,
                   random_state: int | None = 0) -> AlignmentTask:
    """Hansards alignment task: ``n_heldout`` of the 447 test pairs are held out (a seeded random
    choice), the rest plus the 37 trial pairs are for training.

    Parameters
    ----------
    path : path, optional
        Directory with the six Hansards files (see :func:`resolve_data_dir`).
    n_heldout : int
        Number of held-out test pairs (1..446).
    random_state : int, optional
        Seed of the held-out choice.
    """
    pairs = load_hansards(path)
    heldout = set(heldout_indices(pairs, n_heldout, random_state).tolist())
    featurizer = AlignmentFeaturizer(pairs)
    train = [p for i, p in enumerate(pairs) if i not in heldout]
    test = [p for i, p in enumerate(pairs) if i in heldout]
    X_train = [featurizer(p) for p in train]
    Y_train = [gold_matching(p, featurizer.dice(p)) for p in train]
    X_test = [featurizer(p) for p in test]
    return AlignmentTask(X_train, Y_train, X_test, train, test, featurizer)


def as_potentials(theta_edge: np.ndarray) -> MatchingPotentials:
    """Edge scores as partial-matching potentials with zero unmatched scores (helper for scripts)."""
    L, R = theta_edge.shape
    return MatchingPotentials(theta_edge, np.zeros(L), np.zeros(R))


# --------------------------------------------------------------------------- new text (structopt predict)
def read_parallel(prefix: str | os.PathLike) -> tuple[list[SentencePair], bool]:
    """Sentence pairs of ``PREFIX.en`` and ``PREFIX.fr`` (one tokenized sentence per line), with the gold
    links of ``PREFIX.naacl`` when that file exists (``PREFIX`` may also be given as the ``.en`` file).

    Returns
    -------
    pairs : list of SentencePair (``part`` is the prefix's name, ``number`` the 1-based line)
    has_gold : bool

    Raises
    ------
    DataNotFoundError, InvalidInputError
        A missing file, an empty sentence, files of different lengths, a bad ``.naacl`` line (naming file and line).
    """
    prefix = Path(prefix)
    if prefix.suffix == ".en":
        prefix = prefix.with_suffix("")
    en_path, fr_path, gold_path = (prefix.with_name(f"{prefix.name}.{ext}") for ext in ("en", "fr", "naacl"))
    en, fr = _sentences(en_path), _sentences(fr_path)
    if len(en) != len(fr):
        raise InvalidInputError(f"{en_path} has {len(en)} sentences but {fr_path} has {len(fr)}")
    has_gold = gold_path.is_file()
    sure, possible = _links(gold_path, en, fr) if has_gold else ([set() for _ in en], [set() for _ in en])
    return [SentencePair(e, f, sure[i], possible[i], prefix.name, i + 1)
            for i, (e, f) in enumerate(zip(en, fr, strict=True))], has_gold


def pair_digest(pair: SentencePair) -> str:
    """A digest of a pair's text (which held-out pairs a saved model remembers)."""
    import hashlib

    return hashlib.sha1(("\t".join([" ".join(pair.en), " ".join(pair.fr)])).encode("utf-8")).hexdigest()[:16]


def write_naacl(path: str | os.PathLike, pairs: list[SentencePair], predictions: list[np.ndarray]) -> None:
    """Predicted links in the NAACL format: ``sentence english french`` per line, 1-based (all sure links)."""
    lines = [f"{p.number} {j + 1} {k + 1}" for p, y in zip(pairs, predictions, strict=True)
             for j, k in sorted(links(y))]
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
