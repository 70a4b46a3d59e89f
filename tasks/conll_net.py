"""CoNLL-2002 Spanish NER with a BiLSTM over word and character embeddings and a linear chain on top.

The encoder (trained from scratch: no pretrained vectors) reads, for every token,

* its word, lowercased with digits mapped to ``0``, from the training vocabulary; training words seen once
  are replaced by ``<unk>`` with probability ``unk_rate`` at each use, so that the ``<unk>`` vector is
  learnt for the test set's unseen words;
* its characters (case kept), through a character BiLSTM whose two final states form the word's
  character vector (computed once per distinct word of a batch);
* optionally (``extra=True``) the inputs the linear task already computes per token: the word shape of
  :func:`structopt.tasks.conll.word_shape` (capitalisation, digits, punctuation) and the lowercase prefix
  and suffix of 3 characters, each with a small embedding;
* optionally (``pos=True``) the corpus's POS tag (the middle column of the CoNLL-2002 files, which the linear
  task's features use too), with a small embedding;

and a word BiLSTM over the concatenation gives the emissions ``(T, S)``. The chain's transition, start and end
scores are those of a :class:`structopt.torch.ChainCRF`. Its losses (:data:`LOSSES`):

* ``"crf"``: the chain's negative log-likelihood (:class:`~structopt.torch.ChainCRF`, batched kernels);
* ``"hinge"``: the structured hinge with Hamming loss (:func:`structopt.torch.structured_loss`, batched
  loss-augmented Viterbi);
* ``"sparsemap"``: the SparseMAP Fenchel–Young loss (:func:`structopt.torch.structured_loss`, active set per
  sentence);
* ``"torchcrf"``: the same encoder with pytorch-crf's ``CRF`` (its own transition scores) instead of ChainCRF,
  for comparison.

Whatever the loss, a tag sequence is decoded by Viterbi on the emissions and the chain's scores. An
example's input is one int64 array ``(T, 5 + max_chars)``: word, shape, prefix, suffix and POS ids, then the
character ids padded with 0 (words longer than ``max_chars`` keep their first and last characters), so that a
network model sees one array per sentence. Vocabularies are plain lists of strings (:class:`Vocabulary`,
JSON in a saved model).

Split: train on ``esp.train`` (8,323 sentences), choose the epoch on ``esp.testa`` (the development set; the
weights of the epoch with the best development F1 are kept), test on ``esp.testb`` (1,517 sentences), with
conlleval's entity F1 (:func:`structopt.tasks.conll.chunk_f1`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from structopt.errors import InvalidInputError
from structopt.net_checkpoint import NetCheckpoint, TrainingRun, length_batches
from structopt.progress import Progress, as_progress, count
from structopt.tasks.conll import Corpus, _data_file, chunk_f1, read_conll, resolve_data_dir, word_shape
from structopt.torch import ChainCRF, register_network

__all__ = [
    "LOSSES",
    "NETWORK",
    "SPLIT",
    "BiLSTMTagger",
    "NetOptions",
    "Vocabulary",
    "build_model",
    "encode",
    "encode_tags",
    "evaluate",
    "fit",
    "load_split",
    "normalise",
    "pad",
    "predict_tags",
    "subset",
    "train_tagger",
]

#: the declared network (:func:`structopt.torch.register_network`) a saved model names
NETWORK = "conll_bilstm"
#: the training losses: the chain's CRF, hinge and SparseMAP losses of structopt.torch, and pytorch-crf's CRF
LOSSES = ("crf", "hinge", "sparsemap", "torchcrf")
#: the split: train, development (epoch choice), test
SPLIT = {"train": "esp.train", "dev": "esp.testa", "test": "esp.testb"}
_PAD, _UNK = "<pad>", "<unk>"
#: columns of an example's array before its characters
N_TOKEN_COLUMNS = 5
_AFFIX = 3


# --------------------------------------------------------------------------- vocabularies and encoding
def normalise(word: str) -> str:
    """The word vocabulary's key: lowercase, every digit ``0`` (dates and amounts share one entry)."""
    return "".join("0" if ch.isdigit() else ch for ch in word.lower())


def _prefix(word: str) -> str:
    return word.lower()[:_AFFIX]


def _suffix(word: str) -> str:
    return word.lower()[-_AFFIX:]


_KEYS: dict[str, Callable[[str], str]] = {"words": normalise, "shapes": word_shape, "prefixes": _prefix,
                                          "suffixes": _suffix}


@dataclass
class Vocabulary:
    """Index ↔ string tables of the inputs and the tags; index 0 is padding, 1 unknown (tags: none).

    Attributes
    ----------
    words, shapes, prefixes, suffixes, chars, pos : list of str
        The training set's values (``words``: :func:`normalise`-d), after ``<pad>`` and ``<unk>``; ``pos`` holds
        only those two when the POS tags are not used.
    tags : list of str
        ``"O"`` first, then the other training tags sorted.
    singletons : list of int
        Word ids seen once in training (replaced by ``<unk>`` at the unk rate while training).
    max_chars : int
        Characters kept per word.
    """

    words: list[str]
    shapes: list[str]
    prefixes: list[str]
    suffixes: list[str]
    chars: list[str]
    pos: list[str]
    tags: list[str]
    singletons: list[int]
    max_chars: int = 20
    _index: dict[str, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, corpus: Corpus, max_chars: int = 20, use_pos: bool = False) -> Vocabulary:
        """The vocabularies of a training corpus (every value seen; singleton words listed); ``use_pos``: a table
        of its POS tags (the corpus must have them)."""
        if max_chars < 2:
            raise InvalidInputError(f"max_chars must be >= 2, got {max_chars}")
        if use_pos and corpus.pos is None:
            raise InvalidInputError(f"{corpus.source}: POS inputs requested but the file has no POS column")
        types, counts = np.unique(np.array(corpus.words, dtype=object), return_counts=True)
        tables: dict[str, list[str]] = {}
        for name, key in _KEYS.items():
            values = sorted({key(w) for w in types.tolist()})
            tables[name] = [_PAD, _UNK, *values]
        word_counts: dict[str, int] = {}
        for w, c in zip(types.tolist(), counts.tolist()):
            k = normalise(w)
            word_counts[k] = word_counts.get(k, 0) + c
        index = {w: i for i, w in enumerate(tables["words"])}
        singletons = sorted(index[w] for w, c in word_counts.items() if c == 1)
        chars = sorted({ch for w in types.tolist() for ch in w})
        seen = set(corpus.tags)
        tags = (["O"] if "O" in seen else []) + sorted(seen - {"O"})
        pos = sorted(set(corpus.pos)) if use_pos else []
        return cls(tables["words"], tables["shapes"], tables["prefixes"], tables["suffixes"], [_PAD, _UNK, *chars],
                   [_PAD, _UNK, *pos], tags, singletons, int(max_chars))

    @property
    def uses_pos(self) -> bool:
        """Whether the inputs include POS tags (a file to tag must then have a POS column)."""
        return len(self.pos) > 2

    def lookup(self, name: str) -> dict[str, int]:
        table = self._index.get(name)
        if table is None:
            table = self._index[name] = {v: i for i, v in enumerate(getattr(self, name))}
        return table

    def sizes(self) -> dict[str, int]:
        """Table sizes, the network's constructor arguments."""
        return {"n_words": len(self.words), "n_shapes": len(self.shapes), "n_prefixes": len(self.prefixes),
                "n_suffixes": len(self.suffixes), "n_chars": len(self.chars), "n_pos": len(self.pos),
                "n_tags": len(self.tags)}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (lists of strings and ints), read back by :meth:`from_json`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_json(cls, data: Any) -> Vocabulary:
        """Check and rebuild a vocabulary read from a file (untrusted): lists of strings, ints, sizes."""
        names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise InvalidInputError(f"vocabulary: expected the keys {sorted(names)}, got {got}")
        for name in ("words", "shapes", "prefixes", "suffixes", "chars", "pos", "tags"):
            table = data[name]
            if not isinstance(table, list) or not all(isinstance(v, str) for v in table):
                raise InvalidInputError(f"vocabulary: {name} must be a list of strings")
            if len(set(table)) != len(table):
                raise InvalidInputError(f"vocabulary: {name} has repeated entries")
            if name != "tags" and table[:2] != [_PAD, _UNK]:
                raise InvalidInputError(f"vocabulary: {name} must start with {_PAD!r}, {_UNK!r}")
        if not data["tags"]:
            raise InvalidInputError("vocabulary: no tags")
        single = data["singletons"]
        if not isinstance(single, list) or not all(type(i) is int and 2 <= i < len(data["words"]) for i in single):
            raise InvalidInputError("vocabulary: singletons must be word ids (ints) in the word table")
        if type(data["max_chars"]) is not int or data["max_chars"] < 2:
            raise InvalidInputError(f"vocabulary: max_chars must be an int >= 2, got {data['max_chars']!r}")
        return cls(**{name: data[name] for name in names})


def encode(corpus: Corpus, vocab: Vocabulary) -> list[np.ndarray]:
    """Each sentence as an int64 array ``(T, 5 + max_chars)``: word, shape, prefix, suffix and POS ids (1 when the
    vocabulary has no POS tags), then characters.

    Unknown values get id 1; the work is per distinct word (and POS tag), not per token.
    """
    if vocab.uses_pos and corpus.pos is None:
        raise InvalidInputError(f"{corpus.source}: the model reads POS tags, but the file has no POS column "
                                "(expected 'word POS [tag]' lines)")
    if corpus.n_tokens == 0:
        return []
    types, inverse = np.unique(np.array(corpus.words, dtype=object), return_inverse=True)
    C = vocab.max_chars
    rows = np.zeros((len(types), N_TOKEN_COLUMNS + C), dtype=np.int64)
    rows[:, 4] = 1
    tables = [(vocab.lookup(name), key) for name, key in _KEYS.items()]
    chars = vocab.lookup("chars")
    head = C // 2
    for r, w in enumerate(types.tolist()):
        rows[r, :4] = [table.get(key(w), 1) for table, key in tables]
        kept = w if len(w) <= C else w[:head] + w[len(w) - (C - head):]  # long words: first and last characters
        rows[r, N_TOKEN_COLUMNS:N_TOKEN_COLUMNS + len(kept)] = [chars.get(ch, 1) for ch in kept]
    tokens = rows[inverse.ravel()]
    if vocab.uses_pos:
        tags, which = np.unique(np.array(corpus.pos, dtype=object), return_inverse=True)
        table = vocab.lookup("pos")
        tokens[:, 4] = np.array([table.get(t, 1) for t in tags.tolist()], dtype=np.int64)[which.ravel()]
    return np.split(tokens, np.cumsum(corpus.lengths)[:-1])


def encode_tags(corpus: Corpus, vocab: Vocabulary) -> list[np.ndarray]:
    """Tag ids of each sentence; a tag absent from training is refused (naming the file)."""
    index = vocab.lookup("tags")
    unseen = sorted(set(corpus.tags) - set(index))
    if unseen:
        raise InvalidInputError(f"{corpus.source}: tags {unseen} do not occur in the training set")
    flat = np.fromiter((index[t] for t in corpus.tags), dtype=np.int64, count=corpus.n_tokens)
    return np.split(flat, np.cumsum(corpus.lengths)[:-1])


def load_split(path: str | os.PathLike | None = None, progress: bool | Progress = False) -> dict[str, Any]:
    """Read ``esp.train`` / ``esp.testa`` / ``esp.testb`` of CoNLL-2002 (:data:`SPLIT`).

    Returns
    -------
    dict
        ``corpora``: split → :class:`~structopt.tasks.conll.Corpus`; ``files``: split → path.
    """
    directory = resolve_data_dir("conll2002", path)
    files = {split: _data_file(directory, name, "conll2002") for split, name in SPLIT.items()}
    corpora = {split: read_conll(file) for split, file in files.items()}
    as_progress(progress).stage("read CoNLL-2002 Spanish " + ", ".join(
        f"{split} ({count(c.n_sentences, 'sentence')})" for split, c in corpora.items()))
    return {"corpora": corpora, "files": {s: str(f) for s, f in files.items()}}


# --------------------------------------------------------------------------- the network
class BiLSTMTagger(nn.Module):
    """Character BiLSTM + word BiLSTM encoder giving chain emissions, with the chain's scores (a ChainCRF).

    Parameters
    ----------
    n_words, n_shapes, n_prefixes, n_suffixes, n_chars, n_pos, n_tags : int
        Table sizes (:meth:`Vocabulary.sizes`).
    word_dim, char_dim, char_hidden, hidden, extra_dim : int
        Word and character embedding sizes, the character and word BiLSTMs' hidden sizes (per direction) and
        the size of each extra embedding (shape, prefix, suffix, POS).
    extra : bool
        Feed the shape, prefix and suffix embeddings to the word BiLSTM.
    pos : bool
        Feed the POS embedding to the word BiLSTM.
    dropout : float
        On the word BiLSTM's input and output.
    torchcrf : bool
        Score the chain with pytorch-crf's ``CRF`` instead of :class:`structopt.torch.ChainCRF` (comparison).
    """

    def __init__(self, n_words: int, n_shapes: int, n_prefixes: int, n_suffixes: int, n_chars: int, n_pos: int,
                 n_tags: int, word_dim: int = 100, char_dim: int = 25, char_hidden: int = 25, hidden: int = 100,
                 extra_dim: int = 16, extra: bool = True, pos: bool = True, dropout: float = 0.5,
                 torchcrf: bool = False):
        super().__init__()
        self.extra = bool(extra)
        self.use_pos = bool(pos)
        self.n_tags = int(n_tags)
        self.word = nn.Embedding(n_words, word_dim, padding_idx=0)
        self.char = nn.Embedding(n_chars, char_dim, padding_idx=0)
        self.char_lstm = nn.LSTM(char_dim, char_hidden, batch_first=True, bidirectional=True)
        size = word_dim + 2 * char_hidden
        if self.extra:
            self.shape = nn.Embedding(n_shapes, extra_dim, padding_idx=0)
            self.prefix = nn.Embedding(n_prefixes, extra_dim, padding_idx=0)
            self.suffix = nn.Embedding(n_suffixes, extra_dim, padding_idx=0)
            size += 3 * extra_dim
        if self.use_pos:
            self.pos = nn.Embedding(n_pos, extra_dim, padding_idx=0)
            size += extra_dim
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(size, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, n_tags)
        if torchcrf:
            from torchcrf import CRF

            self.crf = CRF(n_tags, batch_first=True)
        else:
            self.crf = ChainCRF(n_tags)

    @property
    def is_torchcrf(self) -> bool:
        return type(self.crf).__module__.startswith("torchcrf")

    def chain_scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(transitions (S, S), start (S,), end (S,))`` of the chain (ChainCRF's or pytorch-crf's)."""
        crf = self.crf
        if hasattr(crf, "start_transitions"):
            return crf.transitions, crf.start_transitions, crf.end_transitions
        return crf.transitions, crf.start, crf.end

    def _char_vectors(self, chars: torch.Tensor) -> torch.Tensor:
        """Character BiLSTM over the distinct words of ``chars`` (N, C): (N, 2 char_hidden)."""
        distinct, inverse = torch.unique(chars, dim=0, return_inverse=True)
        n_chars = (distinct > 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.char(distinct), n_chars, batch_first=True,
                                                   enforce_sorted=False)
        _, (h, _) = self.char_lstm(packed)
        return torch.cat([h[0], h[1]], dim=1)[inverse]

    def emissions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Emissions (B, T, S) of a padded batch ``tokens`` (B, T, 4 + max_chars) of ``lengths`` (B,)."""
        B, T, _ = tokens.shape
        flat = tokens.reshape(B * T, -1)
        parts = [self.word(tokens[..., 0]), self._char_vectors(flat[:, N_TOKEN_COLUMNS:]).reshape(B, T, -1)]
        if self.extra:
            parts += [self.shape(tokens[..., 1]), self.prefix(tokens[..., 2]), self.suffix(tokens[..., 3])]
        if self.use_pos:
            parts.append(self.pos(tokens[..., 4]))
        x = self.drop(torch.cat(parts, dim=-1))
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=T)
        return self.out(self.drop(h))

    def potentials(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[Any]:
        """The chain potentials of each example: ``ChainPotentials(unary (L, S), transitions)``, the start and end
        scores folded into the first and last unary rows (so that a plain Chain's score is the CRF's)."""
        from structopt.structures.chain import ChainPotentials

        transitions, start, end = self.chain_scores()
        T = emissions.shape[1]
        position = torch.arange(T)
        first = (position == 0).to(emissions.dtype)
        last = (position[None, :] == (lengths[:, None] - 1)).to(emissions.dtype)
        unary = emissions + first[None, :, None] * start + last[..., None] * end
        return [ChainPotentials(unary[b, :int(n)], transitions) for b, n in enumerate(lengths.tolist())]

    def forward(self, x: torch.Tensor) -> Any:
        """The chain potentials of one sentence ``x`` (T, 5 + max_chars): ``ChainPotentials(unary, transitions)``."""
        (theta,) = self.forward_batch([x])
        return theta

    def forward_batch(self, X: Sequence[Any]) -> list[Any]:
        """The chain potentials of each sentence of ``X`` (one padded pass)."""
        tokens, lengths = pad([np.asarray(x) for x in X])
        self.check_tokens(tokens)
        return self.potentials(self.emissions(tokens, lengths), lengths)

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Refuse ids outside the embedding tables (an input encoded with another vocabulary), naming the column."""
        tables = [("word", self.word), ("shape", getattr(self, "shape", None)),
                  ("prefix", getattr(self, "prefix", None)), ("suffix", getattr(self, "suffix", None)),
                  ("POS", getattr(self, "pos", None))]
        columns = [(name, tokens[..., k], table) for k, (name, table) in enumerate(tables) if table is not None]
        columns.append(("character", tokens[..., N_TOKEN_COLUMNS:], self.char))
        for name, ids, table in columns:
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= table.num_embeddings):
                raise InvalidInputError(f"{name} ids must be in [0, {table.num_embeddings}), got "
                                        f"[{int(ids.min())}, {int(ids.max())}]: the input was not encoded with this "
                                        "network's vocabulary")

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[np.ndarray]:
        """Viterbi tags of each example of a padded batch."""
        if self.is_torchcrf:
            mask = torch.arange(emissions.shape[1])[None, :] < lengths[:, None]
            return [np.asarray(t, dtype=np.int64) for t in self.crf.decode(emissions, mask=mask)]
        tags, _ = self.crf.decode(emissions, lengths=lengths)
        return [row[:int(n)] for row, n in zip(tags.numpy(), lengths.tolist())]


def pad(X: Sequence[np.ndarray], Y: Sequence[np.ndarray] | None = None):
    """A padded batch: tokens (B, T, K) int64 and lengths (B,), and tags (B, T) (0 past each length) if ``Y``."""
    if not X:
        raise InvalidInputError("an empty batch of sentences")
    K = X[0].shape[1] if X[0].ndim == 2 else -1
    for b, x in enumerate(X):
        if x.ndim != 2 or x.shape[1] != K or x.dtype.kind not in "iu" or K <= N_TOKEN_COLUMNS:
            raise InvalidInputError(f"sentence {b} of the batch must be an integer array (T, {N_TOKEN_COLUMNS} + "
                                    f"characters) like the others (encode's), got {x.dtype} {x.shape}")
    lengths = np.array([len(x) for x in X], dtype=np.int64)
    if lengths.min() < 1:
        raise InvalidInputError(f"sentence {int(np.argmin(lengths))} of the batch is empty")
    tokens = np.zeros((len(X), int(lengths.max()), K), dtype=np.int64)
    for b, x in enumerate(X):
        tokens[b, :len(x)] = x
    out = (torch.from_numpy(tokens), torch.from_numpy(lengths))
    if Y is None:
        return out
    tags = np.zeros(tokens.shape[:2], dtype=np.int64)
    for b, y in enumerate(Y):
        tags[b, :len(y)] = y
    return (*out, torch.from_numpy(tags))


@register_network(NETWORK)
def conll_bilstm(**kwargs: Any) -> BiLSTMTagger:
    """The declared constructor of :class:`BiLSTMTagger` (its keywords, JSON values)."""
    return BiLSTMTagger(**kwargs)


def build_model(vocab: Vocabulary, options: NetOptions) -> Any:
    """A :class:`structopt.torch.TorchModel` of the tagger on a chain of ``len(vocab.tags)`` states, its module built
    with ``options.seed`` (train ``model.module`` with :func:`fit`, read the weights with ``model.get_weights()``)."""
    from structopt.structures.chain import Chain
    from structopt.torch import TorchModel

    return TorchModel(Chain(len(vocab.tags)), NETWORK, options.network_args(vocab), seed=options.seed)


# --------------------------------------------------------------------------- training
@dataclass(frozen=True)
class NetOptions:
    """Training options (defaults: the benchmark's run).

    Attributes
    ----------
    loss : str
        One of :data:`LOSSES`.
    epochs : int
        Passes over the training set.
    batch_size : int
    lr : float
        Adam's step size.
    clip : float
        Gradient norm clipping.
    unk_rate : float
        Probability that a training singleton word is read as ``<unk>``.
    extra : bool
        Shape, prefix and suffix embeddings on (see the module docstring).
    pos : bool
        POS embedding on (the training file must have POS tags).
    hidden, word_dim : int
        Word BiLSTM hidden size per direction, word embedding size.
    dropout : float
    patience : int
        Stop after this many epochs without a better development F1 (0: never stop early).
    seed : int
    sparsemap_tol : float
        SparseMAP's active-set tolerance.
    sparsemap_max_iter : int
        SparseMAP's active-set iterations per sentence. Near-zero potentials (an untrained network) have a dense
        SparseMAP solution that takes hundreds of iterations; a sentence stopped here gets the approximate
        gradient of its last active set, and :func:`fit` counts them (``sparsemap_truncated``).
    """

    loss: str = "crf"
    epochs: int = 10
    batch_size: int = 32
    lr: float = 2e-3
    clip: float = 5.0
    unk_rate: float = 0.5
    extra: bool = True
    pos: bool = True
    hidden: int = 100
    word_dim: int = 100
    dropout: float = 0.5
    patience: int = 0
    seed: int = 0
    sparsemap_tol: float = 1e-6
    sparsemap_max_iter: int = 50

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise InvalidInputError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        for name in ("epochs", "batch_size", "hidden", "word_dim", "sparsemap_max_iter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("lr", "clip"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("unk_rate", "dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")

    def network_args(self, vocab: Vocabulary) -> dict[str, Any]:
        """The JSON constructor arguments of :class:`BiLSTMTagger`."""
        return {**vocab.sizes(), "word_dim": self.word_dim, "hidden": self.hidden, "extra": self.extra,
                "pos": vocab.uses_pos,
                "dropout": self.dropout, "torchcrf": self.loss == "torchcrf"}


def _structured_loss(net: BiLSTMTagger, emissions: torch.Tensor, lengths: torch.Tensor, tags: torch.Tensor,
                     Y: Sequence[np.ndarray], options: NetOptions, clock: _Clock | None = None) -> torch.Tensor:
    """The chain's loss of a batch, summed over its sentences."""
    if options.loss == "crf":
        return net.crf(emissions, tags, lengths=lengths, reduction="sum")
    if options.loss == "torchcrf":
        mask = torch.arange(emissions.shape[1])[None, :] < lengths[:, None]
        return -net.crf(emissions, tags, mask=mask, reduction="sum")
    from structopt.structures.chain import Chain
    from structopt.torch import structured_loss

    theta = net.potentials(emissions, lengths)
    if options.loss != "sparsemap":
        return structured_loss(Chain(net.n_tags), theta, list(Y), kind=options.loss).sum()
    with warnings.catch_warnings(record=True) as caught:  # counted (fit's sparsemap_truncated), not repeated
        warnings.filterwarnings("always", message="SparseMAP", category=RuntimeWarning)
        value = structured_loss(Chain(net.n_tags), theta, list(Y), kind="sparsemap", tol=options.sparsemap_tol,
                                max_iter=options.sparsemap_max_iter).sum()
    if clock is not None:
        clock.truncated += sum(1 for w in caught if "stopped at max_iter" in str(w.message))
    for w in caught:
        if "stopped at max_iter" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return value


@torch.no_grad()
def predict_tags(net: BiLSTMTagger, X: Sequence[np.ndarray], batch_size: int = 64) -> list[np.ndarray]:
    """Viterbi tag ids of every sentence (evaluation mode; the network's mode is restored)."""
    was = net.training
    net.eval()
    try:
        order = np.argsort([len(x) for x in X], kind="stable")
        out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(X)
        for a in range(0, len(order), batch_size):
            chosen = order[a:a + batch_size]
            tokens, lengths = pad([X[i] for i in chosen])
            for i, y in zip(chosen, net.decode(net.emissions(tokens, lengths), lengths)):
                out[i] = y
        return out
    finally:
        net.train(was)


def evaluate(net: BiLSTMTagger, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], tags: Sequence[str]) -> float:
    """conlleval entity F1 of the network's Viterbi tags."""
    return chunk_f1(list(Y), predict_tags(net, X), list(tags))["f1"]


@dataclass
class _Clock:
    """Seconds of the epoch inside the chain's loss (forward and backward) and in all."""

    structured: float = 0.0
    total: float = 0.0
    truncated: int = 0


def _step(net: BiLSTMTagger, optimiser: torch.optim.Optimizer, X, Y, options: NetOptions,
          singletons: torch.Tensor, generator: torch.Generator, clock: _Clock) -> float:
    tokens, lengths, tags = pad(X, Y)
    if options.unk_rate > 0 and singletons.numel():
        words = tokens[..., 0]
        drop = torch.isin(words, singletons) & (torch.rand(words.shape, generator=generator) < options.unk_rate)
        tokens = tokens.clone()
        tokens[..., 0] = torch.where(drop, torch.ones_like(words), words)
    optimiser.zero_grad(set_to_none=True)
    emissions = net.emissions(tokens, lengths)
    # the chain's share: its loss and the backward to the emissions and its own scores, timed apart from the
    # encoder's backward (the same gradients as one backward call)
    leaf = emissions.detach().requires_grad_(True)
    chain_params = [p for p in net.crf.parameters() if p.requires_grad]
    t0 = time.perf_counter()
    loss = _structured_loss(net, leaf, lengths, tags, Y, options, clock)
    # allow_unused: a batch of one-token sentences never reads pytorch-crf's transition matrix
    grads = torch.autograd.grad(loss, [leaf, *chain_params], allow_unused=True)
    clock.structured += time.perf_counter() - t0
    for p, g in zip(chain_params, grads[1:]):
        p.grad = torch.zeros_like(p) if g is None else g / len(X)
    emissions.backward(grads[0] / len(X))
    nn.utils.clip_grad_norm_(net.parameters(), options.clip)
    optimiser.step()
    return float(loss.detach()) / len(X)


def fit(net: BiLSTMTagger, vocab: Vocabulary, X: Sequence[np.ndarray], Y: Sequence[np.ndarray],
        options: NetOptions, dev: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
        progress: bool | Progress = False, checkpoint: NetCheckpoint | None = None) -> dict[str, Any]:
    """Train ``net`` in place with Adam; with ``dev``, keep the weights of the epoch with the best dev F1.

    ``checkpoint`` is written at every epoch's end and on Ctrl-C (at the end of the current batch); with its
    ``resume``, the run continues from it (:class:`structopt.net_checkpoint.TrainingRun`: the same weights as
    the uninterrupted run, the best epoch's weights kept in the checkpoint too).

    Returns
    -------
    dict
        ``epochs`` run, ``seconds`` (training, dev evaluation excluded), ``seconds_per_epoch``, ``final_loss`` (the
        mean loss of the last epoch),
        ``structured_share`` (the fraction of the training time inside the chain's loss, forward and backward),
        ``losses``, ``dev_f1`` and ``sparsemap_truncated`` (sentences whose SparseMAP stopped at its
        ``max_iter``) per epoch, ``best_epoch``, ``resumed``.
    """
    if len(X) != len(Y) or not X:
        raise InvalidInputError(f"fit needs as many tag sequences as sentences (>= 1), got {len(X)} and {len(Y)}")
    rep = as_progress(progress)
    net.train()
    # dropout draws from torch's global generator: seeded here, the caller's state restored after
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        run = _epochs(net, vocab, X, Y, options, dev, rep, checkpoint)
    records = run.records
    best_epoch = run.load_best()
    net.eval()  # a TorchModel's module is a deterministic function of its weights
    info: dict[str, Any] = {"losses": [r["loss"] for r in records],
                            "dev_f1": [r["dev_f1"] for r in records if "dev_f1" in r],
                            "epoch_seconds": [r["seconds"] for r in records],
                            "structured_seconds": [r["structured_seconds"] for r in records],
                            "sparsemap_truncated": [r["sparsemap_truncated"] for r in records]}
    seconds = float(np.sum(info["epoch_seconds"]))
    info.update(epochs=len(records), seconds=seconds, seconds_per_epoch=seconds / len(records),
                final_loss=info["losses"][-1], structured_share=float(np.sum(info["structured_seconds"])) / seconds,
                best_epoch=best_epoch, resumed=run.resumed)
    return info


def _epochs(net: BiLSTMTagger, vocab: Vocabulary, X, Y, options: NetOptions, dev, rep: Progress,
            checkpoint: NetCheckpoint | None) -> TrainingRun:
    """The epochs of :func:`fit`, as a :class:`TrainingRun` whose ``extra`` holds the best development epoch
    (``best`` F1, ``best_epoch``, ``best_state`` arrays)."""
    rng = np.random.default_rng(options.seed)
    generator = torch.Generator().manual_seed(options.seed)
    optimiser = torch.optim.Adam(net.parameters(), lr=options.lr, foreach=True)
    singletons = torch.tensor(vocab.singletons, dtype=torch.int64)
    lengths = np.array([len(x) for x in X])
    run = TrainingRun(net, optimiser, options.epochs, len(X), rngs=(rng,), generators=(generator,),
                      torch_global=True, checkpoint=checkpoint, progress=rep)
    if run.restore():
        rep.stage(f"resuming from {checkpoint.path}: {run.epoch} of {options.epochs} epochs done")

    def plan(epoch: int) -> dict[str, Any]:
        return {"batches": length_batches(lengths, options.batch_size, rng)}

    def step(chosen: np.ndarray, plan: dict[str, Any], sums: dict[str, Any]) -> None:
        clock = _Clock()
        t0 = time.perf_counter()
        value = _step(net, optimiser, [X[i] for i in chosen], [Y[i] for i in chosen], options, singletons,
                      generator, clock)
        for key, add in (("loss", value * len(chosen)), ("seconds", time.perf_counter() - t0),
                         ("structured", clock.structured), ("truncated", clock.truncated)):
            sums[key] = sums.get(key, 0) + add

    def end(epoch: int, sums: dict[str, Any]) -> dict[str, Any]:
        record = {"loss": sums["loss"] / len(X), "seconds": sums["seconds"], "structured_seconds": sums["structured"],
                  "sparsemap_truncated": int(sums["truncated"])}
        if dev is not None:
            record["dev_f1"] = evaluate(net, dev[0], dev[1], vocab.tags)
            run.keep_best(record["dev_f1"], epoch)
            if options.patience and epoch - run.extra["best_epoch"] >= options.patience:  # epochs since the best
                run.stop()
        return record

    def after(epoch: int, record: dict[str, Any]) -> None:
        line = (f"epoch {epoch}: loss {record['loss']:.4f}, {record['seconds']:.1f} s "
                f"(chain loss {100 * record['structured_seconds'] / record['seconds']:.1f}%)")
        if "dev_f1" in record:
            line += f", dev F1 {record['dev_f1']:.4f}"
        rep.stage(line)

    run.run(plan, step, end, after, label=f" ({options.loss})")
    return run


def train_tagger(options: NetOptions, data: str | os.PathLike | None = None, n_train: int | None = None,
                 progress: bool | Progress = False) -> dict[str, Any]:
    """Read the split, build the vocabularies on the (first ``n_train``) training sentences, train and test.

    Returns
    -------
    dict
        ``model`` (the trained :class:`~structopt.torch.TorchModel`), ``net`` (its module), ``vocab``, ``info``
        (:func:`fit`'s, with ``test_f1`` and ``dev_f1_best``), ``test`` (encoded sentences and tags) and ``files``.
    """
    split = load_split(data, progress)
    corpora = split["corpora"]
    train = corpora["train"]
    if n_train is not None:
        if isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1:
            raise InvalidInputError(f"n_train must be an integer >= 1, got {n_train!r}")
        train = subset(train, n_train)
    vocab = Vocabulary.build(train, use_pos=options.pos)
    X, Y = encode(train, vocab), encode_tags(train, vocab)
    dev = (encode(corpora["dev"], vocab), encode_tags(corpora["dev"], vocab))
    test = (encode(corpora["test"], vocab), encode_tags(corpora["test"], vocab))
    model = build_model(vocab, options)
    net = model.module
    as_progress(progress).stage(f"training a BiLSTM + chain ({options.loss} loss) on {count(len(X), 'sentence')}, "
                                f"{options.epochs} epochs")
    info = fit(net, vocab, X, Y, options, dev=dev, progress=progress)
    info["test_f1"] = evaluate(net, test[0], test[1], vocab.tags)
    info["dev_f1_best"] = max(info["dev_f1"]) if info["dev_f1"] else math.nan
    return {"model": model, "net": net, "vocab": vocab, "info": info, "test": test, "files": split["files"]}


def subset(corpus: Corpus, n: int) -> Corpus:
    """The first ``n`` sentences of a corpus."""
    n = min(int(n), corpus.n_sentences)
    m = int(np.sum(corpus.lengths[:n]))
    return Corpus(corpus.words[:m], None if corpus.pos is None else corpus.pos[:m], corpus.tags[:m],
                  corpus.lengths[:n].copy(), corpus.source)


