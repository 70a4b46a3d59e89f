"""Sequence labeling from a user's CoNLL-column files, with the CoNLL feature templates.

A file has one token per line, whitespace-separated columns, a blank line between sentences;
``-DOCSTART-`` lines are document markers (dropped, and a sentence boundary). The user names the
token column, the label column and optional feature columns (such as POS), 1-based, negative
numbers counting from the end (``-1`` = last). Every token line must have as many columns as the
file's first token line (a missing column would shift the label column silently).

Features are :mod:`structopt.tasks.conll`'s hashed templates: the first feature column plays the
role of CoNLL's POS column (its tag at every offset and the tag bigrams), so that reading a
CoNLL-2000 file with ``token_column=1, label_column=3, feature_columns=(2,)`` gives exactly
:func:`~structopt.tasks.conll.load_conll2000`'s inputs. Every further feature column gets the same
templates on its values prefixed by the column number (no collision with the first column's), and
the binary feature rows are united.

Labels of the test file absent from training are refused by default, naming the file and line of
the first one (``unseen_labels="error"``): a model cannot predict them, so the metric would be
silently capped. ``"extend"`` keeps them as extra labels the model never trained on (they count as
errors, the choice of :func:`~structopt.tasks.conll.load_conll2000`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError
from structopt.options import number_argument
from structopt.tasks._data import read_text_lines
from structopt.tasks.conll import Corpus, _encode_tags, _tag_set, chunk_f1, featurize, token_accuracy
from structopt.tasks.own_common import (
    BuiltTask,
    CommonOptions,
    column,
    columns,
    data_split,
    existing_file,
    first,
    holdout,
    holdout_rule,
    option,
    positive_int,
    resolve_lam,
)

_DOCSTART = "-DOCSTART-"
_CHUNK_TAG = re.compile(r"^(O|[BIE]-.+)$")


@dataclass
class ColumnFile:
    """The tokens of one column file.

    Attributes
    ----------
    corpus : Corpus
        Tokens, labels (``tags``), the first feature column (``pos``, None without one) and sentence
        lengths; ``source`` is the file path.
    extra : list of list of str
        Further feature columns, one list of per-token values each.
    lines : ndarray of int64
        1-based line number of every token (for messages).
    path : Path
    n_columns : int
        The number of columns of every token line.
    """

    corpus: Corpus
    extra: list[list[str]]
    lines: np.ndarray
    path: Path
    n_columns: int = 0


def _index(number: int, width: int, what: str, path: Path, line: int) -> int:
    """0-based index of the 1-based (or negative) column ``number`` in a line of ``width`` columns."""
    index = number - 1 if number > 0 else width + number
    if number == 0 or not 0 <= index < width:
        raise InvalidInputError(f"{path}:{line}: {what} {number} is out of range: the line has {width} columns "
                                "(columns are numbered from 1; -1 is the last)")
    return index


def read_columns(path: str | os.PathLike, token_column: int = 1, label_column: int | None = -1,
                 feature_columns: Sequence[int] = (), encoding: str = "utf-8") -> ColumnFile:
    """Read a CoNLL-column file (see the module docstring).

    Parameters
    ----------
    path : path-like
        The file (``.gz`` read transparently).
    token_column, label_column : int
        1-based column numbers (negative: from the end). ``label_column=None``: the file has no
        labels (input to label; ``corpus.tags`` is then empty).
    feature_columns : sequence of int
        Further columns to featurise (e.g. POS), in order.

    Raises
    ------
    DataNotFoundError
        The file does not exist.
    InvalidInputError
        ``FILE:LINE: problem``: undecodable bytes, an empty file, a column number out of range,
        one column used twice, a line with another number of columns than the first token line.
    """
    path = existing_file(path, "a column file")
    rows = [line.split() for line in read_text_lines(path, encoding)]
    width = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    doc = np.fromiter((bool(r) and r[0] == _DOCSTART for r in rows), dtype=bool, count=len(rows))
    is_token = (width > 0) & ~doc
    token_lines = np.flatnonzero(is_token)
    if token_lines.size == 0:
        raise InvalidInputError(f"{path}: empty file (no token lines)" if not width.any() else
                                f"{path}: no token lines (only blank and {_DOCSTART} lines)")
    line0 = int(token_lines[0]) + 1
    n_cols = int(width[token_lines[0]])
    ragged = token_lines[width[token_lines] != n_cols]
    if ragged.size:  # one column count per file: a missing column shifts the label column
        bad = int(ragged[0])
        raise InvalidInputError(f"{path}:{bad + 1}: expected {n_cols} columns (as line {line0}), found {width[bad]}")
    wanted = [("token column", token_column)] + ([("label column", label_column)] if label_column is not None else [])
    wanted += [("feature column", c) for c in feature_columns]
    index = [_index(int(number), n_cols, what, path, line0) for what, number in wanted]
    seen: dict[int, str] = {}
    for (what, _), i in zip(wanted, index):
        if i in seen:
            raise InvalidInputError(f"{path}:{line0}: the {what} is column {i + 1}, already the {seen[i]}")
        seen[i] = what
    cols = list(zip(*(rows[i] for i in token_lines)))
    # a sentence starts at a token line whose previous line is not a token line
    prev = np.concatenate([[False], is_token[:-1]])
    sentence_id = np.cumsum(is_token & ~prev)[is_token] - 1
    lengths = np.bincount(sentence_id).astype(np.int64)
    n_fixed = 1 if label_column is None else 2
    features = [list(cols[i]) for i in index[n_fixed:]]
    tags = [] if label_column is None else list(cols[index[1]])
    corpus = Corpus(list(cols[index[0]]), features[0] if features else None, tags, lengths, str(path))
    return ColumnFile(corpus, features[1:], token_lines.astype(np.int64) + 1, path, n_cols)


def _union(a: list[sp.csr_matrix], b: list[sp.csr_matrix]) -> list[sp.csr_matrix]:
    out = []
    for x, y in zip(a, b, strict=True):
        m = (x + y).tocsr()
        m.data[:] = 1.0  # binary features: a feature present in both is one 1
        m.sort_indices()
        out.append(m)
    return out


def token_rows(path: str | os.PathLike, encoding: str = "utf-8") -> list[list[str]]:
    """The columns of every token line of a column file (blank and ``-DOCSTART-`` lines left out), in order."""
    return [row for _, row in _numbered_token_rows(path, encoding)]


def _numbered_token_rows(path: str | os.PathLike, encoding: str = "utf-8") -> list[tuple[int, list[str]]]:
    rows = (line.split() for line in read_text_lines(existing_file(path, "a column file"), encoding))
    return [(number, row) for number, row in enumerate(rows, 1) if row and row[0] != _DOCSTART]


def check_width(path: str | os.PathLike, n_columns: int, label_column: int, labels: Sequence[str] = (),
                encoding: str = "utf-8") -> bool:
    """Whether a file to label has its gold labels, from its number of columns and the training file's
    ``n_columns``: all of them (with the labels) or, when the label column is the last, one fewer (without).

    A file of one column fewer whose columns (but the first) hold mostly the model's ``labels`` (``O``
    aside) is not a file without labels but one missing another column: refused too.

    Raises
    ------
    InvalidInputError
        ``FILE, line N: expected ... columns ..., found M``: another number of columns would shift the
        feature columns (a missing POS column read as labels, or labels read as features) silently.
    """
    rows = _numbered_token_rows(path, encoding)
    if not rows:
        raise InvalidInputError(f"{path}: no token lines")
    number, row = rows[0]
    last = label_column == -1 or label_column == n_columns
    expected = f"{n_columns} (with the labels) or {n_columns - 1} (without)" if last else f"{n_columns}"
    trained = f"as the model's training file had {n_columns}"
    if len(row) == n_columns:
        return True
    if not (last and len(row) == n_columns - 1):
        raise InvalidInputError(f"{path}, line {number}: expected {expected} columns, {trained}, found {len(row)}")
    known = set(labels) - {"O"}
    for k in range(1, len(row)):
        values = [r[k] for _, r in rows if len(r) > k]
        if known and 2 * sum(v in known for v in values) > len(values):
            raise InvalidInputError(f"{path}, line {number}: expected {expected} columns, {trained}, found "
                                    f"{len(row)} whose column {k + 1} holds the model's labels ({row[k]}, ...): "
                                    "another column is missing")
    return False


def featurize_columns(files: Sequence[ColumnFile], n_features: int = 2**16, window: int = 2,
                      affix_lengths: Sequence[int] = (1, 2, 3)) -> list[list[sp.csr_matrix]]:
    """Hashed binary features of every sentence of every file (one shared hashing; see the module docstring).

    Returns
    -------
    list (per file) of lists of CSR ``(T, n_features)``.
    """
    corpora = [f.corpus for f in files]
    n_extra = {len(f.extra) for f in files}
    if len(n_extra) != 1 or len({f.corpus.pos is None for f in files}) != 1:
        raise InvalidInputError("every file must have the same feature columns")
    out = featurize(corpora, n_features, window, affix_lengths, use_pos=corpora[0].pos is not None)
    for k in range(n_extra.pop()):
        tagged = [dataclasses.replace(f.corpus, pos=[f"{k + 2}\x1f{v}" for v in f.extra[k]]) for f in files]
        more = featurize(tagged, n_features, window, affix_lengths, use_pos=True)
        out = [_union(a, b) for a, b in zip(out, more, strict=True)]
    return out


def encode_labels(file: ColumnFile, labels: list[str], unseen: str) -> list[np.ndarray]:
    """Label indices per sentence; ``labels`` (index → label) grows with ``unseen="extend"``.

    Raises
    ------
    InvalidInputError
        With ``unseen="error"``, ``FILE:LINE: label 'X' does not occur in the training file``.
    """
    if unseen not in ("error", "extend"):
        raise InvalidInputError(f"unseen_labels must be 'error' or 'extend', got {unseen!r}")
    if unseen == "error":
        known = set(labels)
        new = sorted(set(file.corpus.tags) - known)
        if new:
            k = next(i for i, t in enumerate(file.corpus.tags) if t not in known)
            raise InvalidInputError(f"{file.path}:{file.lines[k]}: label {file.corpus.tags[k]!r} does not occur in the "
                                    f"training file ({len(new)} unseen label(s): {', '.join(new[:5])}); pass "
                                    "--unseen-labels extend to keep them as labels the model cannot predict")
    return _encode_tags(file.corpus, labels, "extend")


@dataclass(kw_only=True)
class SequenceOptions(CommonOptions):
    """Options of the ``sequence`` kind (see the module docstring)."""

    DEFAULT_LAM: ClassVar[float] = 0.01

    train: str | None = option("--train", "training file in CoNLL columns (required)", None, metavar="FILE")
    test: str | None = option("--test", "test file (default: hold out --test-fraction of the training sentences)",
                              None, metavar="FILE")
    token_column: int = option("--token-column", "column of the tokens, from 1 (default 1)", 1, type=column,
                               metavar="N")
    label_column: int = option("--label-column", "column of the labels, from 1; -1 is the last (default -1)", -1,
                               type=column, metavar="N")
    feature_columns: tuple[int, ...] = option("--feature-columns", "comma-separated further columns to use as "
                                              "features, e.g. 2 for POS (default none)", (), type=columns,
                                              metavar="N,...")
    unseen_labels: str = option("--unseen-labels", "test labels absent from training: error (default) or extend "
                                "(kept as labels the model never predicts)", "error", choices=("error", "extend"))
    n_features: int = option("--n-features", "hashing dimension (default 65536)", 2**16, type=positive_int)
    window: int = option("--window", "context offsets -W..W of the token templates, 0..100 (default 2)", 2,
                         type=number_argument(int, 0, 100), metavar="W")


def is_chunk_tagging(labels: Sequence[str]) -> bool:
    """Whether every label is ``O`` or ``B-``/``I-``/``E-`` + a type (chunk F1 applies)."""
    return all(_CHUNK_TAG.match(t) for t in labels)


def load_sequence(options: SequenceOptions) -> dict:
    """Read and featurise the files: ``{"train", "test": {"X", "y"}, "labels", "model", "info"}``.

    ``model`` is ``ChainModel(n_features, len(labels), start_end=False, bias=False)`` as for CoNLL (the
    features carry a bias and begin/end-of-sentence indicators).
    """
    from structopt.models import ChainModel

    cols = {"token_column": options.token_column, "label_column": options.label_column,
            "feature_columns": tuple(options.feature_columns)}
    window = options.window
    if isinstance(window, bool) or not isinstance(window, int | np.integer) or not 0 <= window <= 100:
        raise InvalidInputError(f"--window (window) must be an integer in 0..100, got {options.window!r}")
    train_file = read_columns(existing_file(options.train, "--train"), **cols)
    files = [train_file]
    if options.test is not None:
        files.append(read_columns(existing_file(options.test, "--test"), **cols))
    mats = featurize_columns(files, options.n_features, options.window, (1, 2, 3))
    labels = _tag_set(train_file.corpus)
    ys = [encode_labels(f, labels, options.unseen_labels) for f in files]
    if options.test is not None:
        train = {"X": mats[0], "y": ys[0]}
        test = {"X": mats[1], "y": ys[1]}
        split = {"rule": f"train on {train_file.path.name}, test on {files[1].path.name}",
                 "test": str(files[1].path.resolve())}
    else:
        n = train_file.corpus.n_sentences
        tr, te = holdout(n, options.test_fraction, options.seed, str(train_file.path))
        train = {"X": [mats[0][i] for i in tr], "y": [ys[0][i] for i in tr]}
        test = {"X": [mats[0][i] for i in te], "y": [ys[0][i] for i in te]}
        split = {"rule": holdout_rule(options.test_fraction, options.seed, n, "sentences"),
                 "test_fraction": float(options.test_fraction), "seed": int(options.seed)}
    return {"train": train, "test": test, "labels": labels,
            "model": ChainModel(options.n_features, len(labels), start_end=False, bias=False),
            "info": {"files": [str(f.path) for f in files], "columns": cols, "n_columns": train_file.n_columns,
                     "n_features": int(options.n_features),
                     "window": int(options.window), "affix_lengths": [1, 2, 3],
                     "use_pos": bool(options.feature_columns),
                     "sentences": {"train": len(train["y"]), "test": len(test["y"])}, "split": split}}


def build_sequence(options: SequenceOptions) -> BuiltTask:
    """The ``sequence`` task: a chain problem with the Hamming loss; test token accuracy (and chunk F1
    when every label is a chunk tag). Preprocessing: the labels (``tags``), the columns and the
    feature-hashing options."""
    from structopt.losses import Hamming
    from structopt.problem import SSVMProblem

    if options.train is None:
        raise InvalidInputError("sequence: --train FILE is required")
    data = load_sequence(options)
    X, Y = first(data["train"]["X"], options.n_train), first(data["train"]["y"], options.n_train)
    problem = SSVMProblem(data["model"], X, Y, Hamming(), resolve_lam(options.lam, len(X), options.DEFAULT_LAM))
    test, labels = data["test"], data["labels"]
    chunks = is_chunk_tagging(labels)

    def evaluate(w: np.ndarray) -> dict[str, float]:
        predicted = problem.predict(test["X"], w)
        scores = {"test_token_accuracy": token_accuracy(test["y"], predicted)}
        if chunks:
            scores["test_chunk_f1"] = chunk_f1(test["y"], predicted, labels)["f1"]
        return scores

    info = data["info"]
    preprocessing = {"tags": list(labels), **info["columns"],
                     **{key: info[key] for key in ("n_columns", "n_features", "window", "affix_lengths", "use_pos")},
                     "data_split": data_split(options.train, n_train=problem.n, n_test=len(test["y"]),
                                              **info["split"])}
    return BuiltTask(problem, evaluate, f"sequence labeling of {Path(options.train).name}", preprocessing)


__all__ = ["ColumnFile", "SequenceOptions", "build_sequence", "check_width", "encode_labels", "featurize_columns",
           "is_chunk_tagging", "load_sequence", "read_columns", "token_rows"]
