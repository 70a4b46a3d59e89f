"""Dependency parsing of CoNLL-U treebanks: reading, the split, features, UAS/LAS, writing predictions.

The data are the Turkish treebanks of the PyPI package ``turkish-treebanks`` (Apache-2.0; optional
extra ``parsing``): ``web.conllu`` (2,540 sentences) and ``wiki.conllu`` (2,309), installed
in the package's ``data`` folder, or a folder with those files given by ``--data``.

**Split** (the package's own rule, applied to each file): sentence i (from 0, in file order) is in the
test set when ``i % 10 == 9``, in the development set when ``i % 10 == 8`` (not used here), and in the
training set otherwise; the training and test sets of the two files are concatenated, web first.

**Reading CoNLL-U.** Ten tab-separated columns per token line, comment lines (``#``) and blank lines
between sentences (several blank lines in a row are one separator: no empty sentence is made). Multi-word
token lines (ids ``a-b``) and empty nodes (ids ``a.b``) are skipped (they are not syntactic words: heads
refer to word ids). Any other malformed line is one :class:`~structopt.errors.InvalidInputError` naming the
file and the line: a wrong column count, a non-integer id, ids not 1..n in order, a head outside 0..n, a
gold tree with a cycle or other than one root, a sentence without words (e.g. only multi-word token lines);
and, for the projective structure (``outputs(..., projective=True)``), a gold tree whose arcs cross. A file
without heads (HEAD ``_`` in every line) reads without gold.

**Evaluation.** UAS (correct heads) and LAS (correct heads and labels) over the words whose UPOS is not
``PUNCT`` (punctuation excluded, the usual convention), pooled over the test sentences.

**Model.** Non-projective, single-root labelled trees (:class:`~structopt.structures.DependencyTree`)
with :class:`~structopt.models.DependencyModel`: McDonald et al.'s first-order templates
(:func:`~structopt.models.dependency.arc_features`) on word forms (lower-cased) and UPOS+XPOS tags,
hashed (word and tag ids are CRC-32 hashes of the strings, so no vocabulary is kept), one weight vector
per label.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError

#: the treebank files, in the order their sentences are concatenated
FILES = ("web.conllu", "wiki.conllu")
#: the split rule, in words (recorded in saved models)
SPLIT_RULE = ("turkish-treebanks' rule per file: sentence i tests when i % 10 == 9, is development (unused) when "
              "i % 10 == 8, trains otherwise; web then wiki")
#: hashed feature columns
N_FEATURES = 2 ** 16


@dataclass
class Sentence:
    """One sentence: its token lines (all ten columns) and the parsed fields of its words."""

    rows: list[list[str]]  # every token line's columns, multi-word and empty-node lines included
    words: list[int]  # the indices in ``rows`` of the words (ids 1..n)
    heads: np.ndarray | None  # (n,) gold heads, None without gold
    labels: list[str] | None  # gold relations
    first_line: int
    comments: tuple[str, ...] = ()  # the comment lines before the sentence (written back as they are)
    path: str = ""  # the file it was read from (named in errors)

    @property
    def where(self) -> str:
        """``"FILE, line N"`` of the sentence's first line, for messages."""
        return f"{self.path}, line {self.first_line}" if self.path else f"sentence at line {self.first_line}"

    @property
    def forms(self) -> list[str]:
        return [self.rows[i][1] for i in self.words]

    @property
    def upos(self) -> list[str]:
        return [self.rows[i][3] for i in self.words]

    @property
    def tags(self) -> list[str]:
        return [self.rows[i][3] + "|" + self.rows[i][4] for i in self.words]


def read_conllu(path: str | Path) -> list[Sentence]:
    """The sentences of a CoNLL-U file (see the module docstring for what is refused and skipped)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: cannot read a CoNLL-U file: {exc}") from None
    sentences: list[Sentence] = []
    block: list[tuple[int, list[str]]] = []
    comments: list[str] = []
    for number, line in enumerate([*text.split("\n"), ""], start=1):
        line = line.rstrip("\r")
        if line.startswith("#"):
            comments.append(line)
            continue
        if line.strip():
            block.append((number, line.split("\t")))
            continue
        if block:
            sentences.append(_sentence(path, block, tuple(comments)))
            block = []
        comments = []
    if not sentences:
        raise InvalidInputError(f"{path}: no sentence (a CoNLL-U file has token lines of ten tab-separated columns)")
    return sentences


def _sentence(path: Path, block: list[tuple[int, list[str]]], comments: tuple[str, ...]) -> Sentence:
    words, heads, labels = [], [], []
    for position, (number, cols) in enumerate(block):
        where = f"{path}, line {number}"
        if len(cols) != 10:
            raise InvalidInputError(f"{where}: a CoNLL-U token line has 10 tab-separated columns, got {len(cols)}")
        token_id = cols[0]
        if "-" in token_id or "." in token_id:  # a multi-word token or an empty node: not a syntactic word
            lo, _, hi = token_id.replace(".", "-").partition("-")
            if not (lo.isdigit() and hi.isdigit()):
                raise InvalidInputError(f"{where}: id {token_id!r} is not an integer, a range a-b or a decimal a.b")
            continue
        if not token_id.isdigit():
            raise InvalidInputError(f"{where}: id {token_id!r} is not an integer")
        if int(token_id) != len(words) + 1:
            raise InvalidInputError(f"{where}: word id {token_id} out of order (expected {len(words) + 1})")
        words.append(position)
        heads.append(cols[6])
        labels.append(cols[7])
    first = block[0][0]
    if not words:
        raise InvalidInputError(f"{path}, line {first}: a sentence without words")
    n = len(words)
    if all(h == "_" for h in heads):
        return Sentence([cols for _, cols in block], words, None, None, first, comments, str(path))
    for h, position in zip(heads, words, strict=True):
        if not h.isdigit() or int(h) > n:
            raise InvalidInputError(f"{path}, line {block[position][0]}: head {h!r} is not a word id in 0..{n}")
    head_array = np.array([int(h) for h in heads], dtype=np.int64)
    from structopt.structures.dependency import tree_problem

    problem = tree_problem(head_array, projective=False, single_root=True)
    if problem:
        raise InvalidInputError(f"{path}, line {first}: the gold tree of the sentence starting here is not a "
                                f"single-root tree: {problem}")
    return Sentence([cols for _, cols in block], words, head_array, labels, first, comments, str(path))


def word_id(token: str) -> int:
    """A stable non-negative id of a string (CRC-32: no vocabulary to keep)."""
    return zlib.crc32(token.encode("utf-8"))


def featurize(sentences: list[Sentence], n_features: int = N_FEATURES) -> list[Any]:
    """The sparse arc features of each sentence (:func:`~structopt.models.dependency.arc_features`)."""
    from structopt.models.dependency import arc_features

    return [arc_features([word_id(f.lower()) for f in s.forms], [word_id(t) for t in s.tags], n_features)
            for s in sentences]


def outputs(sentences: list[Sentence], labels: list[str], projective: bool = False) -> list[np.ndarray]:
    """The gold (2, n) outputs (heads, label indices). A label outside ``labels`` is an error naming the file and
    line; with ``projective=True`` (gold for the projective structure) so is a gold tree whose arcs cross, which
    that structure cannot represent."""
    from structopt.structures.dependency import tree_problem

    index = {label: i for i, label in enumerate(labels)}
    out = []
    for s in sentences:
        unknown = [label for label in s.labels if label not in index]
        if unknown:
            raise InvalidInputError(f"{s.where}: relation {unknown[0]!r} is not one of the model's {len(labels)} "
                                    "relations")
        if projective and tree_problem(s.heads, projective=True, single_root=True):
            raise InvalidInputError(f"{s.where}: the gold tree of the sentence starting here is not projective (two "
                                    "arcs cross), so projective trees cannot represent it: train non-projective "
                                    "trees or leave the non-projective sentences out")
        out.append(np.stack([s.heads, np.array([index[label] for label in s.labels], dtype=np.int64)]))
    return out


def attachment_scores(sentences: list[Sentence], predictions: list[np.ndarray], labels: list[str]) -> dict[str, float]:
    """UAS and LAS over the non-punctuation words (UPOS != PUNCT), pooled."""
    right_heads = right_both = total = 0
    for s, y in zip(sentences, predictions, strict=True):
        keep = np.array([u != "PUNCT" for u in s.upos])
        heads_ok = (np.asarray(y[0]) == s.heads) & keep
        labels_ok = np.array([labels[int(p)] == g for p, g in zip(y[1], s.labels, strict=True)])
        right_heads += int(heads_ok.sum())
        right_both += int((heads_ok & labels_ok).sum())
        total += int(keep.sum())
    return {"uas": right_heads / max(total, 1), "las": right_both / max(total, 1)}


def write_conllu(path: str | Path, sentences: list[Sentence], predictions: list[np.ndarray],
                 labels: list[str]) -> None:
    """The sentences' lines with HEAD and DEPREL replaced by the predictions (other lines kept)."""
    lines = []
    for s, y in zip(sentences, predictions, strict=True):
        rows = [list(cols) for cols in s.rows]
        for k, position in enumerate(s.words):
            rows[position][6] = str(int(y[0][k]))
            rows[position][7] = labels[int(y[1][k])]
        lines += [*s.comments, *["\t".join(cols) for cols in rows], ""]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def data_folder(data: str | Path | None) -> Path:
    """``--data``, or the folder ``turkish-treebanks`` installs its files in."""
    if data is not None:
        folder = Path(data)
    else:
        try:
            import turkish_treebanks
        except ImportError:
            raise DataNotFoundError("the parsing task reads the treebanks of the package turkish-treebanks: "
                                    "pip install turkish-treebanks (or give --data DIR with web.conllu and "
                                    "wiki.conllu)") from None
        folder = Path(turkish_treebanks.__file__).resolve().parent.parent / "data"
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise DataNotFoundError(f"parsing data not found: {folder} lacks {', '.join(missing)}")
    return folder


def split(sentences: list[Sentence]) -> tuple[list[int], list[int]]:
    """Train and test indices of one file's sentences by the package's rule."""
    index = np.arange(len(sentences))
    return list(index[index % 10 < 8]), list(index[index % 10 == 9])


def load_parsing(data: str | Path | None = None) -> dict[str, Any]:
    """Train and test sentences of both treebanks, split by :data:`SPLIT_RULE`, the relation labels (those of
    the training sentences, sorted) and the development sentences (``"dev"``: i % 10 == 8, web then wiki; the
    linear model does not use them, the network of :mod:`structopt.tasks.parsing_net` chooses its epoch on them)."""
    folder = data_folder(data)
    train: list[Sentence] = []
    test: list[Sentence] = []
    dev: list[Sentence] = []
    for name in FILES:
        sentences = read_conllu(folder / name)
        if any(s.heads is None for s in sentences):
            raise InvalidInputError(f"{folder / name}: training data need gold heads")
        tr, te = split(sentences)
        train += [sentences[i] for i in tr]
        test += [sentences[i] for i in te]
        dev += sentences[8::10]
    labels = sorted({label for s in train for label in s.labels})
    return {"train": train, "test": test, "labels": labels, "folder": folder, "dev": dev}
