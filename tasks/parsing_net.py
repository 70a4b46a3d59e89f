"""Turkish dependency parsing with a BiLSTM arc scorer (Kiperwasser & Goldberg 2016, graph-based parser).

**Inputs.** Every word of a sentence is read as four ids (:func:`encode`; vocabularies of the training
split, :class:`Vocabulary`): its lower-cased form, its UPOS tag, its XPOS tag (the tags the linear model's
features read) and its last three characters lower-cased (a cheap stand-in for Turkish's suffixes). Id 0 is
padding, 1 unknown, 2 the root token. While training, a word is read as unknown with probability
``α / (α + count(word))`` (word dropout, ``α = options.word_dropout``; K&G's rule), so the unknown vector is
learnt for the test set's unseen words (about 20% of the test words here).

**Network** (:class:`BiLSTMArcScorer`, declared as :data:`NETWORK`). A root token is put before the words,
the embeddings of the four ids are concatenated and a two-layer BiLSTM reads the sentence: ``v_0 .. v_n``.

* arc scores: ``s(h, m) = wᵀ tanh(A v_h + B v_m + b)`` for every head h in 0..n and dependent m in 1..n,
  the (n + 1, n + 1) table of :class:`~structopt.structures.DependencyTree`'s potentials (``arcs[h, m]``,
  root = 0); column 0 and the diagonal are unused by the structure and set to 0;
* labels: a separate softmax head, ``softmax(U tanh(C v_h + D v_m + c))`` over the relations, trained with
  the cross-entropy of the gold relation on the gold arcs (K&G's label MLP), applied to the predicted arcs.

The network's potentials (what a :class:`~structopt.torch.TorchModel` predicts with) are the labelled
table ``arcs[h, m, l] = s(h, m) + u_l(h, m) − max_l' u_l'(h, m)`` of ``DependencyTree(n_labels=L)``: the best
label of each arc adds exactly 0, so the labelled structure's argmax is the single-root tree that
Chu–Liu/Edmonds finds on the arc scores alone, each arc then labelled by the classifier's argmax.

**Training** (:func:`fit`): Adam on minibatches; the loss of a sentence is a structured loss of its arc table
through structopt's oracles (:func:`arc_loss`: ``structopt.torch.structured_loss`` on the unlabelled
``DependencyTree()``), plus the label cross-entropy:

* ``"hinge"``: ``max_y [s(y) + Δ(y_gold, y)] − s(y_gold)``, Δ the Hamming loss over heads (loss-augmented
  Chu–Liu/Edmonds);
* ``"crf"``: ``log Z − s(y_gold)`` over single-root non-projective trees, log Z and its gradient (the arc
  marginals) by the matrix-tree theorem.

The epoch with the best development UAS (the package's development sentences, ``i % 10 == 8``) is kept.
Test: the package's test sentences, UAS/LAS without punctuation (:func:`structopt.tasks.parsing.attachment_scores`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from structopt.errors import InvalidInputError
from structopt.net_checkpoint import NetCheckpoint, TrainingRun, length_batches
from structopt.progress import Progress, as_progress, count
from structopt.structures.dependency import DependencyPotentials, DependencyTree
from structopt.tasks.parsing import Sentence, attachment_scores, load_parsing
from structopt.torch import register_network

__all__ = [
    "LOSSES",
    "NETWORK",
    "BiLSTMArcScorer",
    "NetOptions",
    "Vocabulary",
    "arc_loss",
    "build_model",
    "encode",
    "fit",
    "gold_outputs",
    "pad",
    "parse",
    "train_parser",
]

#: the declared network (:func:`structopt.torch.register_network`) a saved model names
NETWORK = "parsing_bilstm"
#: the structured losses of the arc scores
LOSSES = ("hinge", "crf")
_PAD, _UNK, _ROOT = "<pad>", "<unk>", "<root>"
#: the id columns of an encoded sentence, in order, and the vocabulary table of each
COLUMNS = ("words", "upos", "xpos", "suffixes")
UNK, ROOT = 1, 2
_SUFFIX = 3


# --------------------------------------------------------------------------- vocabularies and encoding
def _keys(s: Sentence) -> dict[str, list[str]]:
    """The strings of each column of a sentence's words."""
    forms = [f.lower() for f in s.forms]
    return {"words": forms, "upos": s.upos, "xpos": [s.rows[i][4] for i in s.words],
            "suffixes": [f[-_SUFFIX:] for f in forms]}


@dataclass
class Vocabulary:
    """Index ↔ string tables of the inputs (each ``<pad>``, ``<unk>``, ``<root>`` then the training values, sorted)
    and the relation labels.

    Attributes
    ----------
    words, upos, xpos, suffixes : list of str
        Lower-cased forms, UPOS tags, XPOS tags and lower-cased 3-character suffixes of the training words.
    counts : list of int
        Training occurrences of each entry of ``words`` (0 for the three special entries): word dropout's rate.
    labels : list of str
        The relations (the parsing task's: those of the training sentences, sorted).
    """

    words: list[str]
    upos: list[str]
    xpos: list[str]
    suffixes: list[str]
    counts: list[int]
    labels: list[str]
    _index: dict[str, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, sentences: Sequence[Sentence], labels: Sequence[str]) -> Vocabulary:
        """The tables of the training ``sentences``; ``labels`` the relations."""
        if not sentences:
            raise InvalidInputError("a vocabulary needs at least one training sentence")
        values: dict[str, dict[str, int]] = {name: {} for name in COLUMNS}
        for s in sentences:
            for name, keys in _keys(s).items():
                table = values[name]
                for key in keys:
                    table[key] = table.get(key, 0) + 1
        tables = {name: [_PAD, _UNK, _ROOT, *sorted(values[name])] for name in COLUMNS}
        counts = [0, 0, 0] + [values["words"][w] for w in tables["words"][3:]]
        return cls(**tables, counts=counts, labels=list(labels))

    def lookup(self, name: str) -> dict[str, int]:
        table = self._index.get(name)
        if table is None:
            table = self._index[name] = {v: i for i, v in enumerate(getattr(self, name))}
        return table

    def sizes(self) -> dict[str, int]:
        """Table sizes, the network's constructor arguments."""
        return {"n_words": len(self.words), "n_upos": len(self.upos), "n_xpos": len(self.xpos),
                "n_suffixes": len(self.suffixes), "n_labels": len(self.labels)}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (lists of strings and ints), read back by :meth:`from_json`."""
        return {f.name: list(getattr(self, f.name)) for f in dataclasses.fields(self) if not f.name.startswith("_")}

    @classmethod
    def from_json(cls, data: Any) -> Vocabulary:
        """Check and rebuild a vocabulary read from a file (untrusted): lists of strings, counts, sizes."""
        names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise InvalidInputError(f"vocabulary: expected the keys {sorted(names)}, got {got}")
        for name in (*COLUMNS, "labels"):
            table = data[name]
            if not isinstance(table, list) or not all(isinstance(v, str) for v in table):
                raise InvalidInputError(f"vocabulary: {name} must be a list of strings")
            if len(set(table)) != len(table):
                raise InvalidInputError(f"vocabulary: {name} has repeated entries")
            if name != "labels" and table[:3] != [_PAD, _UNK, _ROOT]:
                raise InvalidInputError(f"vocabulary: {name} must start with {_PAD!r}, {_UNK!r}, {_ROOT!r}")
        if not data["labels"]:
            raise InvalidInputError("vocabulary: no relation labels")
        counts = data["counts"]
        if not isinstance(counts, list) or len(counts) != len(data["words"]) or not all(
                type(c) is int and c >= 0 for c in counts):
            raise InvalidInputError("vocabulary: counts must be one int >= 0 per word")
        return cls(**{name: data[name] for name in names})


def encode(sentences: Sequence[Sentence], vocab: Vocabulary) -> list[np.ndarray]:
    """Each sentence as an int64 array ``(n, 4)`` of :data:`COLUMNS` ids; a value not in the vocabulary is 1
    (unknown)."""
    tables = [vocab.lookup(name) for name in COLUMNS]
    out = []
    for s in sentences:
        keys = _keys(s)
        out.append(np.array([[table.get(k, UNK) for k in keys[name]] for name, table in zip(COLUMNS, tables)],
                            dtype=np.int64).T.copy())
    return out


def gold_outputs(sentences: Sequence[Sentence], vocab: Vocabulary) -> list[np.ndarray]:
    """The (2, n) gold outputs (heads, relation ids); a relation outside the vocabulary is refused naming the
    sentence (:func:`structopt.tasks.parsing.outputs`)."""
    from structopt.tasks.parsing import outputs

    return outputs(list(sentences), vocab.labels)


def pad(X: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch: ids (B, T, 4) int64 (0 past each length) and lengths (B,)."""
    if not len(X):
        raise InvalidInputError("an empty batch of sentences")
    arrays = [torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in X]
    for b, x in enumerate(arrays):
        if x.ndim != 2 or x.shape[1] != len(COLUMNS) or x.shape[0] < 1 or x.is_floating_point() or x.is_complex():
            raise InvalidInputError(f"sentence {b} of the batch must be an integer array (n >= 1, {len(COLUMNS)}) of "
                                    f"{', '.join(COLUMNS)} ids (encode's), got {x.dtype} {tuple(x.shape)}")
    lengths = torch.tensor([x.shape[0] for x in arrays], dtype=torch.int64)
    tokens = torch.zeros((len(arrays), int(lengths.max()), len(COLUMNS)), dtype=torch.int64)
    for b, x in enumerate(arrays):
        tokens[b, :x.shape[0]] = x.to(torch.int64)
    return tokens, lengths


# --------------------------------------------------------------------------- the network
class BiLSTMArcScorer(nn.Module):
    """BiLSTM encoder with an arc MLP and a label MLP (see the module docstring).

    Parameters
    ----------
    n_words, n_upos, n_xpos, n_suffixes, n_labels : int
        Table sizes (:meth:`Vocabulary.sizes`).
    word_dim, tag_dim : int
        Word embedding size; size of each of the UPOS, XPOS and suffix embeddings.
    hidden, layers : int
        BiLSTM hidden size per direction and number of stacked layers.
    arc_hidden, label_hidden : int
        Hidden sizes of the arc and label MLPs.
    dropout : float
        On the embeddings and the BiLSTM's output (and between its layers).
    """

    def __init__(self, n_words: int, n_upos: int, n_xpos: int, n_suffixes: int, n_labels: int, word_dim: int = 100,
                 tag_dim: int = 25, hidden: int = 125, layers: int = 2, arc_hidden: int = 100,
                 label_hidden: int = 100, dropout: float = 0.33):
        super().__init__()
        sizes = {"n_words": n_words, "n_upos": n_upos, "n_xpos": n_xpos, "n_suffixes": n_suffixes,
                 "n_labels": n_labels, "word_dim": word_dim, "tag_dim": tag_dim, "hidden": hidden, "layers": layers,
                 "arc_hidden": arc_hidden, "label_hidden": label_hidden}
        for name, value in sizes.items():
            least = 1 if name in ("n_labels", "word_dim", "tag_dim", "hidden", "layers", "arc_hidden",
                                  "label_hidden") else 3
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidInputError(f"{NETWORK} {name} must be an integer >= {least}, got {value!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise InvalidInputError(f"{NETWORK} dropout must be in [0, 1), got {dropout!r}")
        self.n_labels = n_labels
        self.embeddings = nn.ModuleList([nn.Embedding(n_words, word_dim, padding_idx=0)] + [
            nn.Embedding(size, tag_dim, padding_idx=0) for size in (n_upos, n_xpos, n_suffixes)])
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(word_dim + 3 * tag_dim, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.arc_head = nn.Linear(2 * hidden, arc_hidden, bias=False)
        self.arc_dep = nn.Linear(2 * hidden, arc_hidden)
        self.arc_out = nn.Linear(arc_hidden, 1, bias=False)  # a constant per arc adds n to every tree: no bias
        self.label_head = nn.Linear(2 * hidden, label_hidden, bias=False)
        self.label_dep = nn.Linear(2 * hidden, label_hidden)
        self.label_out = nn.Linear(label_hidden, n_labels)

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Refuse ids outside the embedding tables (an input encoded with another vocabulary), naming the column."""
        for k, (name, table) in enumerate(zip(COLUMNS, self.embeddings)):
            ids = tokens[..., k]
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= table.num_embeddings):
                raise InvalidInputError(f"{name} ids must be in [0, {table.num_embeddings}), got "
                                        f"[{int(ids.min())}, {int(ids.max())}]: the input was not encoded with this "
                                        "network's vocabulary")

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """BiLSTM vectors (B, T + 1, 2 hidden) of a padded batch (B, T, 4) of ``lengths`` words, the root first."""
        B = tokens.shape[0]
        root = torch.full((B, 1, len(COLUMNS)), ROOT, dtype=torch.int64)
        ids = torch.cat([root, tokens], dim=1)
        x = self.drop(torch.cat([emb(ids[..., k]) for k, emb in enumerate(self.embeddings)], dim=-1))
        packed = nn.utils.rnn.pack_padded_sequence(x, (lengths + 1).cpu(), batch_first=True, enforce_sorted=False)
        v, _ = self.lstm(packed)
        v, _ = nn.utils.rnn.pad_packed_sequence(v, batch_first=True, total_length=ids.shape[1])
        return self.drop(v)

    @staticmethod
    def _arc_mask(lengths: torch.Tensor, N: int) -> torch.Tensor:
        """(B, N, N): the arcs h -> m of each sentence (m in 1..n, h in 0..n, h != m)."""
        position = torch.arange(N)
        inside = position[None, :] <= lengths[:, None]  # nodes 0..n
        h, m = position[:, None], position[None, :]
        return inside[:, :, None] & inside[:, None, :] & (m >= 1) & (h != m)

    def arc_scores(self, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``arcs[b, h, m] = s(h, m)`` (B, T + 1, T + 1); 0 in column 0, on the diagonal and past each sentence."""
        hidden = torch.tanh(self.arc_head(v)[:, :, None, :] + self.arc_dep(v)[:, None, :, :])
        scores = self.arc_out(hidden).squeeze(-1)
        return scores * self._arc_mask(lengths, v.shape[1]).to(scores.dtype)

    def label_scores(self, v: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Relation scores (B, T, L) of the arcs ``heads[b, m - 1] -> m`` (heads (B, T), 0 past each length)."""
        head_vectors = torch.gather(v, 1, heads[..., None].expand(-1, -1, v.shape[-1]))
        return self.label_out(torch.tanh(self.label_head(head_vectors) + self.label_dep(v[:, 1:])))

    def label_table(self, v: torch.Tensor) -> torch.Tensor:
        """Relation scores (B, T + 1, T + 1, L) of every arc h -> m."""
        return self.label_out(torch.tanh(self.label_head(v)[:, :, None, :] + self.label_dep(v)[:, None, :, :]))

    def forward(self, x: torch.Tensor) -> DependencyPotentials:
        """The labelled potentials (n + 1, n + 1, L) of one sentence ``x`` (n, 4) (see the module docstring)."""
        (theta,) = self.forward_batch([x])
        return theta

    def forward_batch(self, X: Sequence[Any], chunk: int = 64) -> list[DependencyPotentials]:
        """The labelled potentials of each sentence of ``X``, padded passes over chunks of similar lengths."""
        out: list[Any] = [None] * len(X)
        order = np.argsort([np.shape(x)[0] for x in X], kind="stable")
        for a in range(0, len(order), chunk):
            chosen = order[a:a + chunk]
            tokens, lengths = pad([X[i] for i in chosen])
            self.check_tokens(tokens)
            v = self.encode(tokens, lengths)
            arcs, labels = self.arc_scores(v, lengths), self.label_table(v)
            table = arcs[..., None] + labels - labels.max(dim=-1, keepdim=True).values
            for b, i in enumerate(chosen):
                n = int(lengths[b]) + 1
                out[i] = DependencyPotentials(table[b, :n, :n])
        return out


@register_network(NETWORK)
def parsing_bilstm(**kwargs: Any) -> BiLSTMArcScorer:
    """The declared constructor of :class:`BiLSTMArcScorer` (its keywords, JSON values)."""
    return BiLSTMArcScorer(**kwargs)


# --------------------------------------------------------------------------- options, model, loss
@dataclass(frozen=True)
class NetOptions:
    """Training options (defaults: the benchmark's run).

    Attributes
    ----------
    loss : str
        One of :data:`LOSSES`.
    epochs, batch_size : int
    lr : float
        Adam's step size.
    clip : float
        Gradient norm clipping.
    word_dropout : float
        α of the word dropout rate ``α / (α + count)`` (0: off).
    word_dim, tag_dim, hidden, layers, arc_hidden, label_hidden : int
        The network's sizes (:class:`BiLSTMArcScorer`).
    dropout : float
    seed : int
        The network's initialisation, the batches, word dropout and dropout.
    """

    loss: str = "hinge"
    epochs: int = 12
    batch_size: int = 32
    lr: float = 2e-3
    clip: float = 5.0
    word_dropout: float = 0.25
    word_dim: int = 100
    tag_dim: int = 25
    hidden: int = 125
    layers: int = 2
    arc_hidden: int = 100
    label_hidden: int = 100
    dropout: float = 0.33
    seed: int = 0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise InvalidInputError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        for name in ("epochs", "batch_size", "word_dim", "tag_dim", "hidden", "layers", "arc_hidden", "label_hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("lr", "clip"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.word_dropout >= 0:
            raise InvalidInputError(f"word_dropout must be >= 0, got {self.word_dropout!r}")
        if not 0 <= self.dropout < 1:
            raise InvalidInputError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InvalidInputError(f"seed must be an integer >= 0, got {self.seed!r}")

    def network_args(self, vocab: Vocabulary) -> dict[str, Any]:
        """The JSON constructor arguments of :class:`BiLSTMArcScorer`."""
        return {**vocab.sizes(), "word_dim": self.word_dim, "tag_dim": self.tag_dim, "hidden": self.hidden,
                "layers": self.layers, "arc_hidden": self.arc_hidden, "label_hidden": self.label_hidden,
                "dropout": self.dropout}


def build_model(vocab: Vocabulary, options: NetOptions, dtype: torch.dtype = torch.float32) -> Any:
    """A :class:`structopt.torch.TorchModel` of the network on labelled single-root non-projective trees, its
    module built with ``options.seed`` (train ``model.module`` with :func:`fit`)."""
    from structopt.torch import TorchModel

    return TorchModel(DependencyTree(n_labels=len(vocab.labels)), NETWORK, options.network_args(vocab), dtype=dtype,
                      seed=options.seed)


#: the unlabelled structure the arc scores are trained on (single root, non-projective)
ARCS = DependencyTree()


def arc_loss(tables: Sequence[torch.Tensor], heads: Sequence[np.ndarray], kind: str) -> torch.Tensor:
    """The structured loss (:data:`LOSSES`) of each sentence's arc table (n + 1, n + 1) against its gold heads (n,),
    through ``structopt.torch.structured_loss`` on ``DependencyTree()``: ``"hinge"`` with the Hamming loss over
    heads (loss-augmented Chu–Liu/Edmonds), ``"crf"`` by the matrix-tree theorem. A 1-d tensor."""
    from structopt.torch import structured_loss

    if kind not in LOSSES:
        raise InvalidInputError(f"loss must be one of {', '.join(LOSSES)}, got {kind!r}")
    return structured_loss(ARCS, [DependencyPotentials(t) for t in tables], list(heads), kind=kind)


# --------------------------------------------------------------------------- training
@dataclass
class _Clock:
    """Seconds of an epoch inside the structured loss (its forward and its backward to the arc tables)."""

    structured: float = 0.0


def _step(net: BiLSTMArcScorer, optimiser: torch.optim.Optimizer, X: Sequence[np.ndarray], Y: Sequence[np.ndarray],
          options: NetOptions, keep: torch.Tensor, generator: torch.Generator, clock: _Clock) -> float:
    tokens, lengths = pad(X)
    if options.word_dropout > 0:
        words = tokens[..., 0]
        drop = (torch.rand(words.shape, generator=generator) >= keep[words]) & (words > ROOT)
        tokens = tokens.clone()
        tokens[..., 0] = torch.where(drop, torch.full_like(words, UNK), words)
    T = tokens.shape[1]
    heads = torch.zeros((len(X), T), dtype=torch.int64)
    relations = torch.full((len(X), T), -100, dtype=torch.int64)  # -100: cross_entropy's ignored index
    for b, y in enumerate(Y):
        heads[b, :y.shape[1]] = torch.from_numpy(y[0])
        relations[b, :y.shape[1]] = torch.from_numpy(y[1])
    optimiser.zero_grad(set_to_none=True)
    v = net.encode(tokens, lengths)
    tables = net.arc_scores(v, lengths)
    labels = nn.functional.cross_entropy(net.label_scores(v, heads).reshape(-1, net.n_labels), relations.reshape(-1),
                                         reduction="sum")
    # the structured loss's share: its value and its backward to the arc tables, timed apart from the network's
    # backward (the same gradients as one backward call)
    leaf = tables.detach().requires_grad_(True)
    t0 = time.perf_counter()
    structured = arc_loss([leaf[b, :n + 1, :n + 1] for b, n in enumerate(lengths.tolist())], [y[0] for y in Y],
                          options.loss).sum()
    (grad,) = torch.autograd.grad(structured, leaf)
    clock.structured += time.perf_counter() - t0
    torch.autograd.backward([tables, labels], [grad / len(X), torch.tensor(1.0 / len(X), dtype=labels.dtype)])
    nn.utils.clip_grad_norm_(net.parameters(), options.clip)
    optimiser.step()
    return (float(structured.detach()) + float(labels.detach())) / len(X)


def parse(model: Any, X: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The (2, n) heads and relations of each sentence by the model's own prediction path
    (``model.predict_batch`` at its module's weights, evaluation mode; the module's mode is restored)."""
    net = model.module
    was = net.training
    net.eval()
    try:
        return model.predict_batch(list(X), model.get_weights())
    finally:
        net.train(was)


def fit(model: Any, vocab: Vocabulary, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], options: NetOptions,
        dev: tuple[Sequence[Sentence], Sequence[np.ndarray]] | None = None,
        progress: bool | Progress = False, checkpoint: NetCheckpoint | None = None) -> dict[str, Any]:
    """Train ``model.module`` in place with Adam; with ``dev`` (sentences, encoded), keep the weights of the epoch
    with the best development UAS.

    ``checkpoint`` is written at every epoch's end and on Ctrl-C (at the end of the current batch); with its
    ``resume``, the run continues from it (:class:`structopt.net_checkpoint.TrainingRun`: the same weights as
    the uninterrupted run, the best epoch's weights kept in the checkpoint too).

    Returns
    -------
    dict
        ``epochs``, ``seconds`` (training, development scoring excluded), ``seconds_per_epoch``, ``final_loss``
        (mean loss per sentence of the last epoch, structured + label), ``structured_share`` (the fraction of the
        training time inside the structured loss, forward and backward), ``losses``, ``epoch_seconds``,
        ``structured_seconds``, ``dev_uas`` and ``dev_las`` per epoch, ``best_epoch``, ``loss``, ``resumed``.
    """
    if len(X) != len(Y) or not len(X):
        raise InvalidInputError(f"fit needs as many gold trees as sentences (>= 1), got {len(X)} and {len(Y)}")
    for i, (x, y) in enumerate(zip(X, Y)):
        if np.shape(y) != (2, np.shape(x)[0]):
            raise InvalidInputError(f"sentence {i}: gold output of shape {np.shape(y)}, expected (2, {np.shape(x)[0]})")
    rep = as_progress(progress)
    net = model.module
    net.train()
    try:
        # dropout draws from torch's global generator: seeded here, the caller's state restored after
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(options.seed)
            run = _epochs(model, vocab, X, Y, options, dev, rep, checkpoint)
    finally:
        net.eval()  # a TorchModel's module is a deterministic function of its weights
    best_epoch = run.load_best()
    records = run.records
    info: dict[str, Any] = {"losses": [r["loss"] for r in records],
                            "dev_uas": [r["dev_uas"] for r in records if "dev_uas" in r],
                            "dev_las": [r["dev_las"] for r in records if "dev_las" in r],
                            "epoch_seconds": [r["seconds"] for r in records],
                            "structured_seconds": [r["structured_seconds"] for r in records]}
    seconds = float(np.sum(info["epoch_seconds"]))
    info.update(epochs=len(records), seconds=seconds, seconds_per_epoch=seconds / len(records),
                final_loss=info["losses"][-1], loss=options.loss,
                structured_share=float(np.sum(info["structured_seconds"])) / seconds,
                best_epoch=best_epoch, resumed=run.resumed)
    return info


def _epochs(model: Any, vocab: Vocabulary, X, Y, options: NetOptions, dev, rep: Progress,
            checkpoint: NetCheckpoint | None) -> TrainingRun:
    """The epochs of :func:`fit`, as a :class:`TrainingRun` whose ``extra`` holds the best development epoch
    (``best`` UAS, ``best_epoch``, ``best_state`` arrays)."""
    net = model.module
    rng = np.random.default_rng(options.seed)
    generator = torch.Generator().manual_seed(options.seed)
    optimiser = torch.optim.Adam(net.parameters(), lr=options.lr)
    counts = torch.tensor(vocab.counts, dtype=torch.float64)
    alpha = float(options.word_dropout)
    keep = counts / (counts + alpha) if alpha > 0 else torch.ones_like(counts)  # P(word kept) = 1 - α / (α + count)
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
        value = _step(net, optimiser, [X[i] for i in chosen], [Y[i] for i in chosen], options, keep, generator, clock)
        for key, add in (("loss", value * len(chosen)), ("seconds", time.perf_counter() - t0),
                         ("structured", clock.structured)):
            sums[key] = sums.get(key, 0) + add

    def end(epoch: int, sums: dict[str, Any]) -> dict[str, Any]:
        record = {"loss": sums["loss"] / len(X), "seconds": sums["seconds"], "structured_seconds": sums["structured"]}
        if dev is not None:
            found = attachment_scores(list(dev[0]), parse(model, dev[1]), vocab.labels)
            record.update(dev_uas=found["uas"], dev_las=found["las"])
            run.keep_best(found["uas"], epoch)
        return record

    def after(epoch: int, record: dict[str, Any]) -> None:
        line = (f"epoch {epoch}: loss {record['loss']:.4f}, {record['seconds']:.1f} s "
                f"({options.loss} loss {100 * record['structured_seconds'] / record['seconds']:.1f}%)")
        if "dev_uas" in record:
            line += f", dev UAS {record['dev_uas']:.4f} LAS {record['dev_las']:.4f}"
        rep.stage(line)

    run.run(plan, step, end, after, label=f" ({options.loss})")
    return run


def train_parser(options: NetOptions, data: str | os.PathLike | None = None, n_train: int | None = None,
                 progress: bool | Progress = False) -> dict[str, Any]:
    """Read the treebanks, build the vocabularies on the (first ``n_train``) training sentences, train, test.

    Returns
    -------
    dict
        ``model`` (the trained :class:`~structopt.torch.TorchModel`), ``vocab``, ``info`` (:func:`fit`'s, with
        ``test_uas`` and ``test_las``), ``data`` (:func:`~structopt.tasks.parsing.load_parsing`'s) and ``n_train``.
    """
    if n_train is not None and (isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1):
        raise InvalidInputError(f"n_train must be an integer >= 1, got {n_train!r}")
    rep = as_progress(progress)
    data_ = load_parsing(data)
    train = data_["train"][:n_train]
    vocab = Vocabulary.build(train, data_["labels"])
    X, Y = encode(train, vocab), gold_outputs(train, vocab)
    dev = (data_["dev"], encode(data_["dev"], vocab))
    model = build_model(vocab, options)
    rep.stage(f"training a BiLSTM arc scorer ({options.loss} loss) on {count(len(X), 'sentence')}, "
              f"{options.epochs} epochs")
    info = fit(model, vocab, X, Y, options, dev=dev, progress=rep)
    t0 = time.perf_counter()
    found = attachment_scores(data_["test"], parse(model, encode(data_["test"], vocab)), vocab.labels)
    info.update(test_uas=found["uas"], test_las=found["las"], test_seconds=time.perf_counter() - t0)
    return {"model": model, "vocab": vocab, "info": info, "data": data_, "n_train": len(X)}
