"""OCR with a small CNN over the 16x8 letters and a linear chain, trained from scratch (issue 35).

The network (:class:`OCRNet`) scores every letter image with a small CNN (:class:`LetterCNN`: two 3x3
convolutions with max-pooling, a hidden layer with dropout, 26 outputs) and the letters of a word with a
linear chain: transition scores between consecutive letters and start / end scores, held by structopt's
:class:`~structopt.torch.ChainCRF` (or, for comparison, pytorch-crf's ``torchcrf.CRF``). For one word ``x``
(T, 128 pixels) ``net(x)`` is the chain's potentials ``ChainPotentials(unary (T, 26), pairwise (26, 26))``,
the start and end scores added to the first and last letter's unary scores, so a structopt
:class:`~structopt.structures.chain.Chain` decodes exactly what the CRF layer decodes.

Training (:func:`train`): Adam over minibatches of words with a cosine learning rate, the chain CRF's
negative log-likelihood (or the structured hinge with the Hamming loss, ``loss="hinge"``) per letter;
each letter of a training batch is shifted by up to ``shift`` pixels at random (data augmentation).
A batch pads its words to the longest one (the CRF layer takes padded (B, T, 26) emissions with lengths)
and runs the CNN on all its letters at once. Seeded: the initialisation, the order of the words, dropout
and the shifts all follow ``seed``; one torch thread by default, which makes runs repeat bit for bit.

Data: the words of :mod:`structopt.tasks.ocr` (``split`` ``bcfw`` trains on 6,251 words and tests on 626);
the metric is that module's :func:`~structopt.tasks.ocr.letter_error`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from structopt.errors import InvalidInputError
from structopt.net_checkpoint import NetCheckpoint, TrainingRun
from structopt.options import non_negative_int, one_of, positive, positive_int
from structopt.progress import Progress, as_progress
from structopt.structures.chain import ChainPotentials
from structopt.tasks.ocr import LETTERS, N_PIXELS, letter_error
from structopt.torch import register_network

HEIGHT, WIDTH = 16, 8
N_LETTERS = len(LETTERS)
#: the chain layers :class:`OCRNet` can hold: structopt's ChainCRF, or pytorch-crf's CRF (for comparison)
CRF_LAYERS = ("structopt", "pytorch-crf")
#: training losses: the chain CRF's negative log-likelihood, or the structured hinge (Hamming loss)
LOSSES = ("crf", "hinge")


class LetterCNN(nn.Module):
    """Scores (N, 26) of letter images (N, 1, 16, 8): conv 3x3 -> ReLU -> max-pool 2 (8x4), conv 3x3 ->
    ReLU -> max-pool 2 (4x2), then a hidden layer with ReLU and dropout, and a linear output layer."""

    def __init__(self, channels: Sequence[int] = (32, 64), hidden: int = 256, dropout: float = 0.3):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.classifier = nn.Sequential(nn.Linear(c2 * (HEIGHT // 4) * (WIDTH // 4), hidden), nn.ReLU(),
                                        nn.Dropout(dropout), nn.Linear(hidden, N_LETTERS))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def _check_args(channels: Any, hidden: Any, dropout: Any, crf: Any) -> None:
    if not isinstance(channels, (list, tuple)) or len(channels) != 2:
        raise InvalidInputError(f"ocr_cnn channels must be two integers >= 1 (one per convolution), got {channels!r}")
    for name, value in (("channels[0]", channels[0]), ("channels[1]", channels[1]), ("hidden", hidden)):
        positive_int(f"ocr_cnn {name}", value)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise InvalidInputError(f"ocr_cnn dropout must be a number in [0, 1), got {dropout!r}")
    one_of(*CRF_LAYERS)("ocr_cnn crf", crf)


class OCRNet(nn.Module):
    """A :class:`LetterCNN` for the letters' scores and a linear chain over the letters of a word.

    Parameters
    ----------
    channels : two ints
        Output channels of the two convolutions (default 32, 64).
    hidden : int
        Width of the hidden layer (default 256).
    dropout : float
        Dropout before the output layer, in training mode only (default 0.3).
    crf : {"structopt", "pytorch-crf"}
        The chain layer holding the transition, start and end scores: :class:`structopt.torch.ChainCRF`
        (default) or ``torchcrf.CRF`` (pytorch-crf, for comparison; same model, same initialisation).

    Notes
    -----
    ``net(x)`` for one word (T, 128) returns its chain potentials (see the module docstring); ``emissions``
    scores a padded batch of words for the CRF layer, ``nll`` and ``decode`` run it.
    """

    def __init__(self, channels: Sequence[int] = (32, 64), hidden: int = 256, dropout: float = 0.3,
                 crf: str = "structopt"):
        super().__init__()
        _check_args(channels, hidden, dropout, crf)
        self.kind = crf
        self.cnn = LetterCNN(channels, hidden, dropout)  # built first: its initialisation is the same for both layers
        if crf == "structopt":
            from structopt.torch import ChainCRF

            self.crf = ChainCRF(N_LETTERS)
        else:
            import torchcrf

            state = torch.random.get_rng_state()
            self.crf = torchcrf.CRF(N_LETTERS, batch_first=True)
            torch.random.set_rng_state(state)  # drawn again in ChainCRF's order: the same initial scores
            for p in self.chain_scores():
                nn.init.uniform_(p, -0.1, 0.1)

    # ------------------------------------------------------------------ chain scores
    def chain_scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(transitions (26, 26), start (26,), end (26,))`` of the chain layer."""
        if self.kind == "structopt":
            return self.crf.transitions, self.crf.start, self.crf.end
        return self.crf.transitions, self.crf.start_transitions, self.crf.end_transitions

    def forward(self, x: torch.Tensor) -> ChainPotentials:
        """The chain potentials of one word ``x`` (T, 128): the CNN's scores with the start score added at the
        first letter and the end score at the last, and the transition scores."""
        if x.dim() != 2 or x.shape[1] != N_PIXELS or x.shape[0] < 1:
            raise InvalidInputError(f"an OCR word must be (T, {N_PIXELS}) pixels with T >= 1, got {tuple(x.shape)}")
        transitions, start, end = self.chain_scores()
        scores = self.cnn(x.reshape(-1, 1, HEIGHT, WIDTH).to(transitions.dtype))
        pad = len(x) - 1  # start as the first row of a (T, 26) block, end as the last: no in-place writes
        boundary = nn.functional.pad(start[None], (0, 0, 0, pad)) + nn.functional.pad(end[None], (0, 0, pad, 0))
        return ChainPotentials(scores + boundary, transitions)

    def emissions(self, letters: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The CNN's scores (B, T, 26) of a padded batch: ``letters`` (N, 1, 16, 8) are the batch's letters in
        order, ``mask`` (B, T) is on at the first ``lengths[b]`` positions of each word (zeros elsewhere)."""
        scores = self.cnn(letters)
        out = scores.new_zeros((*mask.shape, N_LETTERS))
        out[mask] = scores
        return out

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor,
            mask: torch.Tensor) -> torch.Tensor:
        """The summed negative log-likelihood of the gold ``tags`` (B, T) of a padded batch."""
        if self.kind == "structopt":
            return self.crf(emissions, tags, lengths=lengths, reduction="sum")
        return -self.crf(emissions, tags, mask=mask, reduction="sum")

    def loss(self, kind: str, emissions: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
        """The summed training loss ``kind`` (one of :data:`LOSSES`) of a padded batch."""
        if kind == "crf":
            return self.nll(emissions, tags, lengths, mask)
        return self.structured(kind, emissions, tags, lengths)

    def structured(self, kind: str, emissions: torch.Tensor, tags: torch.Tensor,
                   lengths: torch.Tensor) -> torch.Tensor:
        """The summed structured hinge (Hamming loss, loss-augmented Viterbi) or SparseMAP loss of a padded
        batch, word by word on the chain potentials :meth:`forward` gives."""
        from structopt.structures.chain import Chain
        from structopt.torch import structured_loss

        transitions, start, end = self.chain_scores()
        chain = Chain(N_LETTERS)
        theta, gold = [], []
        for b, n in enumerate(lengths.tolist()):
            unary = emissions[b, :n].clone()
            unary[0] = unary[0] + start
            unary[n - 1] = unary[n - 1] + end
            theta.append(ChainPotentials(unary, transitions))
            gold.append(tags[b, :n].numpy())
        return structured_loss(chain, theta, gold, kind=kind).sum()

    def hinge(self, emissions: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The summed structured hinge (Hamming loss, loss-augmented Viterbi) of a padded batch."""
        return self.structured("hinge", emissions, tags, lengths)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor) -> list[np.ndarray]:
        """Viterbi labels of each word of a padded batch, as int64 arrays of each word's length."""
        if self.kind == "structopt":
            tags, _ = self.crf.decode(emissions, lengths=lengths)
            return [t[:n].numpy().astype(np.int64) for t, n in zip(tags, lengths.tolist(), strict=True)]
        return [np.asarray(t, dtype=np.int64) for t in self.crf.decode(emissions, mask=mask)]


@register_network("ocr_cnn")
def ocr_cnn(channels: Sequence[int] = (32, 64), hidden: int = 256, dropout: float = 0.3,
            crf: str = "structopt") -> OCRNet:
    """An :class:`OCRNet` (a word's pixels (T, 128) -> chain potentials over 26 letters)."""
    return OCRNet(list(channels), hidden, dropout, crf)


#: the network arguments of ``structopt train ocr --net cnn`` (the defaults, as JSON)
NETWORK_ARGS: dict[str, Any] = {"channels": [32, 64], "hidden": 256, "dropout": 0.3, "crf": "structopt"}


# --------------------------------------------------------------------------- data
class Words:
    """OCR words as tensors: every letter image in one (N, 1, 16, 8) float32 tensor, word by word, with each
    word's first letter and length, so a minibatch gathers its letters without a loop over letters."""

    def __init__(self, X: Sequence[np.ndarray], Y: Sequence[np.ndarray] | None = None):
        if len(X) == 0:
            raise InvalidInputError("no OCR words given")
        if Y is not None and len(Y) != len(X):
            raise InvalidInputError(f"{len(X)} words but {len(Y)} label arrays")
        for i, x in enumerate(X):
            shape = np.shape(x)
            if len(shape) != 2 or shape[1] != N_PIXELS or shape[0] < 1:
                raise InvalidInputError(f"OCR word {i} must be (T, {N_PIXELS}) pixels with T >= 1, got {shape}")
            if Y is not None and np.shape(Y[i]) != (shape[0],):
                raise InvalidInputError(f"OCR word {i} has {shape[0]} letters but labels of shape {np.shape(Y[i])}")
        pixels = np.concatenate([np.asarray(x, dtype=np.float32) for x in X])
        if not np.isfinite(pixels).all():
            raise InvalidInputError("OCR pixels must be finite")
        self.letters = torch.from_numpy(pixels).reshape(-1, 1, HEIGHT, WIDTH)
        self.lengths = np.array([len(x) for x in X], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.labels = None
        if Y is not None:
            labels = np.concatenate([np.asarray(y, dtype=np.int64) for y in Y])
            if labels.size and (labels.min() < 0 or labels.max() >= N_LETTERS):
                raise InvalidInputError(f"OCR labels must be in 0..{N_LETTERS - 1}")
            self.labels = torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Words ``index``: their letters (N, 1, 16, 8), the (B, T) mask of letters, the lengths (B,) and the
        padded (B, T) tags (zeros past each length; None without labels)."""
        lengths = self.lengths[index]
        T = int(lengths.max())
        offsets = np.arange(T)[None, :]
        mask = offsets < lengths[:, None]
        rows = (self.starts[index][:, None] + offsets)[mask]  # the batch's letters, word by word
        tags = None
        if self.labels is not None:
            tags = torch.zeros(mask.shape, dtype=torch.int64)
            tags[torch.from_numpy(mask)] = self.labels[rows]
        return self.letters[rows], torch.from_numpy(mask), torch.from_numpy(lengths), tags


def shift_letters(letters: torch.Tensor, shift: int, generator: torch.Generator) -> torch.Tensor:
    """Each image of ``letters`` (N, 1, 16, 8) moved by a random offset in -shift..shift pixels in each
    direction (uniform), the uncovered border blank: one gather for the whole batch."""
    if shift == 0:
        return letters
    n = len(letters)
    padded = nn.functional.pad(letters[:, 0], (shift, shift, shift, shift))
    dy = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * shift + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(HEIGHT)[None, :])[:, :, None]
    cols = (dx[:, None] + torch.arange(WIDTH)[None, :])[:, None, :]
    return padded[torch.arange(n)[:, None, None], rows, cols].unsqueeze(1)


# --------------------------------------------------------------------------- training
@dataclass(frozen=True)
class TrainOptions:
    """How :func:`train` trains.

    Attributes
    ----------
    epochs : int
        Passes over the training words (default 20).
    batch_size : int
        Words per minibatch (default 32).
    lr : float
        Adam's initial learning rate, decayed to 0 by a cosine over the run (default 2e-3).
    loss : {"crf", "hinge"}
        The chain CRF's negative log-likelihood, or the structured hinge with the Hamming loss (structopt's
        layer only); either summed over a batch and divided by its number of letters.
    shift : int
        Largest random shift of a training letter, in pixels (default 1; 0 turns augmentation off).
    seed : int
        Seeds torch (dropout) and the order of the words and the shifts.
    threads : int
        torch threads during training and evaluation (default 1: runs repeat bit for bit).
    """

    epochs: int = 20
    batch_size: int = 32
    lr: float = 2e-3
    loss: str = "crf"
    shift: int = 1
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        positive_int("epochs", self.epochs)
        positive_int("batch_size", self.batch_size)
        positive("lr", self.lr)
        one_of(*LOSSES)("loss", self.loss)
        non_negative_int("shift", self.shift)
        non_negative_int("seed", self.seed)
        positive_int("threads", self.threads)


class _Threads:
    """torch's intra-op threads set for a block and restored after it."""

    def __init__(self, n: int):
        self.n, self.before = n, torch.get_num_threads()

    def __enter__(self) -> None:
        torch.set_num_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.before)


def train(net: OCRNet, words: Words, options: TrainOptions = TrainOptions(),
          progress: bool | Progress = False,
          on_epoch: Callable[[int, dict[str, float]], None] | None = None,
          checkpoint: NetCheckpoint | None = None) -> dict[str, Any]:
    """Train ``net`` in place on labelled ``words``.

    Parameters
    ----------
    net : OCRNet
    words : Words
        With labels.
    options : TrainOptions
    progress : bool or Progress
        A stage line per epoch (mean loss, seconds) and a bar over its minibatches.
    on_epoch : callable, optional
        ``on_epoch(epoch, record)`` after each epoch (``record``: ``loss``, ``seconds``), e.g. to evaluate.
    checkpoint : NetCheckpoint, optional
        Written at every epoch's end and on Ctrl-C (at the end of the current batch); with ``resume``, the
        run continues from it, ending with the weights the uninterrupted run ends with
        (:class:`structopt.net_checkpoint.TrainingRun`).

    Returns
    -------
    dict
        ``epochs``, ``seconds`` (CPU seconds of training), ``final_loss`` (the last epoch's mean per letter),
        ``kind`` (the loss), ``history`` (one record per epoch: ``epoch``, ``loss``, ``seconds``), ``resumed``.

    Raises
    ------
    InvalidInputError
        Words without labels; the hinge or SparseMAP with pytorch-crf's layer; a checkpoint of another run.
    """
    if words.labels is None:
        raise InvalidInputError("train needs labelled OCR words")
    if options.loss != "crf" and net.kind != "structopt":
        raise InvalidInputError(f"loss={options.loss!r} runs on structopt's chain layer (OCRNet(crf='structopt'))")
    report = as_progress(progress)
    torch.manual_seed(options.seed)
    rng = np.random.default_rng(options.seed)
    shifts = torch.Generator().manual_seed(options.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=options.lr)
    n_batches = math.ceil(len(words) / options.batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, options.epochs * n_batches)
    run = TrainingRun(net, optimizer, options.epochs, len(words), scheduler=schedule, rngs=(rng,),
                      generators=(shifts,), torch_global=True, checkpoint=checkpoint, progress=report)
    if run.restore():
        report.stage(f"resuming from {checkpoint.path}: {run.epoch} of {options.epochs} epochs done")

    def plan(epoch: int) -> dict[str, Any]:
        order = rng.permutation(len(words))
        return {"batches": [order[i:i + options.batch_size] for i in range(0, len(words), options.batch_size)]}

    def step(index: np.ndarray, plan: dict[str, Any], sums: dict[str, Any]) -> None:
        start = time.process_time()
        images, mask, lengths, tags = words.batch(index)
        emissions = net.emissions(shift_letters(images, options.shift, shifts), mask)
        loss = net.loss(options.loss, emissions, tags, lengths, mask)
        optimizer.zero_grad()
        (loss / len(images)).backward()
        optimizer.step()
        schedule.step()
        sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
        sums["letters"] = sums.get("letters", 0) + len(images)
        sums["seconds"] = sums.get("seconds", 0.0) + time.process_time() - start

    def end(epoch: int, sums: dict[str, Any]) -> dict[str, Any]:
        return {"epoch": epoch, "loss": sums["loss"] / sums["letters"], "seconds": sums["seconds"]}

    def after(epoch: int, record: dict[str, Any]) -> None:
        report.stage(f"epoch {epoch}/{options.epochs}: loss {record['loss']:.4f} per letter, "
                     f"{record['seconds']:.1f} s CPU")
        if on_epoch is not None:
            net.eval()
            on_epoch(epoch, record)
            net.train()

    net.train()
    try:
        with _Threads(options.threads):
            run.run(plan, step, end, after)
    finally:
        net.eval()
    history = run.records
    return {"epochs": options.epochs, "seconds": sum(r["seconds"] for r in history),
            "final_loss": history[-1]["loss"], "kind": options.loss, "history": history, "resumed": run.resumed}


def predict(net: OCRNet, words: Words, batch_size: int = 256, threads: int = 1) -> list[np.ndarray]:
    """The Viterbi labels of every word (``net`` in eval mode), in batches of ``batch_size`` words."""
    was_training = net.training
    net.eval()
    out: list[np.ndarray] = []
    try:
        with _Threads(threads), torch.no_grad():
            for i in range(0, len(words), batch_size):
                images, mask, lengths, _ = words.batch(np.arange(i, min(i + batch_size, len(words))))
                out += net.decode(net.emissions(images, mask), lengths, mask)
    finally:
        net.train(was_training)
    return out


def evaluate(net: OCRNet, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], threads: int = 1) -> float:
    """The test letter error of ``net`` on words ``X`` with gold labels ``Y``."""
    return letter_error(list(Y), predict(net, Words(X), threads=threads))
