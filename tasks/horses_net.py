"""Weizmann horses with a small CNN: the binary grid's unaries from a network, trained through min-cut.

The grid is the grid task's (:mod:`structopt.tasks.horses`: longer side ``size`` = 48 pixels, the same gold
masks and the same split, :data:`~structopt.tasks.horses.SPLIT_RULE`). The network's input is the grey image
(the horses are grey: one channel) resized, anti-aliased, to **twice** the grid's resolution, with an
inside-the-image indicator and the row and column coordinates (in [-1, 1] of the image) as three more channels;
its first layers work there and a stride-2 convolution pools them onto the grid. The potentials of one image are a
:class:`~structopt.structures.grid.GridPotentials` of tensors:

- ``unary`` (H, W, 2): ``[0, f(x)]`` with ``f`` the CNN's foreground score per grid pixel;
- ``horizontal`` (H, W-1, 2, 2) and ``vertical`` (H-1, W, 2, 2): a contrast-sensitive Potts term, ``s_e``
  on the diagonal (equal labels) and 0 off it, ``s_e = softplus(a) exp(-beta (I_p - I_q)^2) + softplus(b)``
  with ``I`` the grid-resolution image, ``beta`` the inverse of twice the image's mean squared neighbour
  difference (Boykov and Jolly; the grid task's ``contrast`` edge feature) and ``a``, ``b`` two learned
  scalars. ``s_e >= 0``, so every edge is supermodular and MAP is one exact min cut.

Training (:func:`train`) is Adam on minibatches of images with random horizontal flips, of either

- ``"hinge"``: the structured hinge ``max_y [<θ, μ(y)> + Δ(y*, y)] − <θ, μ(y*)>`` with Δ the Hamming loss,
  divided by the image's number of pixels; its gradient ``μ(ŷ) − μ(y*)`` comes from one loss-augmented min
  cut per image (:func:`structopt.torch.structured_loss`); or
- ``"pixel"``: per-pixel logistic loss on the unaries alone (the pairwise scalars get no gradient); such a
  network is decoded pixel by pixel, or with the grid after :func:`choose_pairwise` picks the Potts weights
  on the training images.

Images of different sizes are padded onto one canvas (``canvas`` x ``canvas`` grid pixels) so that a minibatch
is one tensor; a single image is padded the same way, so one image's potentials do not depend on the batch.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from structopt.errors import InvalidInputError
from structopt.net_checkpoint import NetCheckpoint, TrainingRun
from structopt.progress import Progress, as_progress, count
from structopt.structures.grid import BinaryGrid, GridPotentials
from structopt.tasks._data import read_image
from structopt.tasks.horses import (
    DEFAULT_SIZE,
    _downscale,
    _grid_shape,
    held_out_images,
    paired_names,
    resolve_data_dir,
    segmentation_scores,
)
from structopt.torch import register_network

#: the network's input is the grey image at this many times the grid's resolution
INPUT_SCALE = 2
#: images per network call in :meth:`HorseCNN.forward_batch` and :func:`predict`
BATCH_CHUNK = 32
#: training objectives of :func:`train`
OBJECTIVES = ("hinge", "pixel")
#: the defaults of :func:`train` (``structopt train horses --net cnn`` and the benchmark use them)
DEFAULTS = {"epochs": 40, "batch_size": 8, "learning_rate": 3e-3, "weight_decay": 1e-4, "width": 16}


# --------------------------------------------------------------------------- data
def image_array(gray: np.ndarray, size: int = DEFAULT_SIZE) -> np.ndarray:
    """The network's input of a grey image in [0, 1]: (INPUT_SCALE H, INPUT_SCALE W) float32 on the grid
    task's (H, W) grid, resized with anti-aliasing."""
    H, W = _grid_shape(*gray.shape, size)
    return _downscale(gray, (INPUT_SCALE * H, INPUT_SCALE * W)).astype(np.float32)


def grid_of(x: np.ndarray | torch.Tensor) -> tuple[int, int]:
    """The (H, W) grid of an input image."""
    return x.shape[0] // INPUT_SCALE, x.shape[1] // INPUT_SCALE


def read_input(path: Path, size: int = DEFAULT_SIZE) -> tuple[np.ndarray, tuple[int, int]]:
    """The network input of the grey image file ``path`` and the image's own (height, width)."""
    gray = read_image(path, "L").astype(np.float64) / 255.0
    return image_array(gray, size), gray.shape


def load(path: str | os.PathLike | None = None, size: int = DEFAULT_SIZE, max_images: int | None = None,
         progress: bool | Progress = False) -> dict[str, Any]:
    """The horses as network inputs and grid masks, split by the grid task's rule.

    Returns
    -------
    dict
        ``train`` / ``test``: ``{"X": list of (2H, 2W) float32 images, "y": list of (H, W) int64 masks,
        "names": file names}``; ``info``: ``root``, ``size``, ``n_images``, ``split``.
    """
    from structopt.tasks.horses import SPLIT_RULE, gold_mask

    if int(size) < 2:
        raise InvalidInputError(f"size must be >= 2 pixels, got {size}")
    root = resolve_data_dir(path)
    names = paired_names(root)
    if max_images is not None:
        names = names[: int(max_images)]
    report = as_progress(progress)
    report.stage(f"reading {count(len(names), 'image')} at twice the {size}-pixel grid")
    X, Y = [], []
    for name in report.items(names, len(names), "images", "images"):
        x, shape = read_input(root / "gray" / name, int(size))
        X.append(x)
        Y.append(gold_mask(root / "figure_ground" / name, grid_of(x), shape))
    is_test = held_out_images(len(names))

    def pick(mask: np.ndarray) -> dict[str, list]:
        index = np.flatnonzero(mask)
        return {"X": [X[i] for i in index], "y": [Y[i] for i in index], "names": [names[i] for i in index]}

    return {"train": pick(~is_test), "test": pick(is_test),
            "info": {"root": str(root), "size": int(size), "n_images": len(names), "split": SPLIT_RULE}}


# --------------------------------------------------------------------------- the network
def _block(c_in: int, c_out: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    groups = max(1, c_out // 8)
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=dilation, dilation=dilation),
                         nn.GroupNorm(groups, c_out), nn.ReLU(inplace=True))


def contrast_edges(grid_image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``exp(-beta (I_p - I_q)^2)`` on the horizontal (H, W-1) and vertical (H-1, W) edges of an (H, W) image,
    ``beta = 1 / (2 mean (I_p - I_q)^2)`` over the image's edges (0 for a flat image: every edge 1)."""
    dh = (grid_image[:, 1:] - grid_image[:, :-1]) ** 2
    dv = (grid_image[1:, :] - grid_image[:-1, :]) ** 2
    n = dh.numel() + dv.numel()
    mean = (dh.sum() + dv.sum()) / max(n, 1)
    beta = torch.where(mean > 0, 0.5 / torch.clamp(mean, min=1e-12), torch.zeros_like(mean))
    return torch.exp(-beta * dh), torch.exp(-beta * dv)


class HorseCNN(nn.Module):
    """A small encoder-decoder CNN giving a binary grid's potentials (see the module docstring).

    Parameters
    ----------
    canvas : int
        Grid pixels of the square canvas the images are padded onto (a multiple of 4, at least the grid's
        longer side).
    width : int
        Channels at the grid's resolution (the input level has ``width``, the coarser levels 2x and 4x).
    """

    def __init__(self, canvas: int = DEFAULT_SIZE, width: int = 16):
        super().__init__()
        if canvas < 4 or canvas % 4:
            raise InvalidInputError(f"HorseCNN: canvas must be a positive multiple of 4, got {canvas}")
        if width < 8 or width % 8:
            raise InvalidInputError(f"HorseCNN: width must be a positive multiple of 8, got {width}")
        self.canvas, self.width = int(canvas), int(width)
        c1, c2, c3 = width, 2 * width, 4 * width
        # channels in: intensity, inside-the-image indicator, row and column in [-1, 1] of the image
        self.stem = nn.Sequential(_block(4, c1), _block(c1, c1))                 # 2x grid resolution
        self.down1 = nn.Sequential(_block(c1, c1, stride=2), _block(c1, c1))     # grid
        self.down2 = nn.Sequential(_block(c1, c2, stride=2), _block(c2, c2))     # grid / 2
        self.down3 = nn.Sequential(_block(c2, c3, stride=2), _block(c3, c3, dilation=2),
                                   _block(c3, c3, dilation=4))                   # grid / 4
        self.up2 = _block(c3 + c2, c2)
        self.up1 = _block(c2 + c1, c1)
        self.head = nn.Conv2d(c1, 1, 1)
        # the Potts weights before softplus: contrast-sensitive and constant parts
        self.pairwise = nn.Parameter(torch.tensor([-0.5, -3.0]))

    def extra_repr(self) -> str:
        return f"canvas={self.canvas}, width={self.width}"

    def _canvas_input(self, X: Sequence[torch.Tensor]) -> torch.Tensor:
        side = INPUT_SCALE * self.canvas
        out = torch.zeros(len(X), 4, side, side, dtype=self.head.weight.dtype)
        for i, x in enumerate(X):
            h, w = x.shape
            if h > side or w > side:
                raise InvalidInputError(f"HorseCNN: image {i} is {w}x{h} input pixels, larger than the "
                                        f"{side}x{side} canvas")
            out[i, 0, :h, :w] = (x - 0.5) / 0.25
            out[i, 1, :h, :w] = 1.0
            out[i, 2, :h, :w] = torch.linspace(-1.0, 1.0, h, dtype=out.dtype)[:, None]
            out[i, 3, :h, :w] = torch.linspace(-1.0, 1.0, w, dtype=out.dtype)[None, :]
        return out

    def scores_batch(self, X: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The (H, W) foreground scores ``f(x)`` of each image."""
        X = [_as_tensor(x, self.head.weight.dtype, i) for i, x in enumerate(X)]
        a0 = self.stem(self._canvas_input(X))
        a1 = self.down1(a0)
        a2 = self.down2(a1)
        a3 = self.down3(a2)
        b2 = self.up2(torch.cat([F.interpolate(a3, size=a2.shape[-2:], mode="bilinear", align_corners=False),
                                 a2], dim=1))
        b1 = self.up1(torch.cat([F.interpolate(b2, size=a1.shape[-2:], mode="bilinear", align_corners=False),
                                 a1], dim=1))
        score = self.head(b1)[:, 0]
        return [score[i, : x.shape[0] // INPUT_SCALE, : x.shape[1] // INPUT_SCALE] for i, x in enumerate(X)]

    def potts_weights(self) -> torch.Tensor:
        """The non-negative (contrast, constant) Potts weights."""
        return F.softplus(self.pairwise)

    def potentials(self, x: torch.Tensor, score: torch.Tensor, weights: torch.Tensor | None = None) -> GridPotentials:
        """The grid potentials of image ``x`` with foreground scores ``score`` and Potts ``weights``
        (default: the learned ones)."""
        weights = self.potts_weights() if weights is None else weights
        H, W = score.shape
        grid_image = F.avg_pool2d(x[None, None].to(score.dtype), INPUT_SCALE)[0, 0, :H, :W]
        hor, ver = contrast_edges(grid_image)
        eye = torch.eye(2, dtype=score.dtype)
        unary = torch.stack([torch.zeros_like(score), score], dim=-1)
        return GridPotentials(unary, (weights[0] * hor + weights[1])[..., None, None] * eye,
                              (weights[0] * ver + weights[1])[..., None, None] * eye)

    def forward_batch(self, X: Sequence[Any]) -> list[GridPotentials]:
        """The potentials of each image of ``X`` (the same as :meth:`forward` image by image), computed
        ``BATCH_CHUNK`` images at a time (a whole test set at once would hold every activation canvas)."""
        X = [_as_tensor(x, self.head.weight.dtype, i) for i, x in enumerate(X)]
        out: list[GridPotentials] = []
        for start in range(0, len(X), BATCH_CHUNK):
            chunk = X[start: start + BATCH_CHUNK]
            out += [self.potentials(x, s) for x, s in zip(chunk, self.scores_batch(chunk))]
        return out

    def forward(self, x: Any) -> GridPotentials:
        """The :class:`GridPotentials` of tensors of one (2H, 2W) image."""
        return self.forward_batch([x])[0]


def _as_tensor(x: Any, dtype: torch.dtype, index: int) -> torch.Tensor:
    x = torch.as_tensor(x, dtype=dtype)
    if x.ndim != 2 or min(x.shape) < INPUT_SCALE * 2:
        raise InvalidInputError(f"HorseCNN: image {index} must be a 2-d grey image of at least "
                                f"{INPUT_SCALE * 2}x{INPUT_SCALE * 2} pixels, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise InvalidInputError(f"HorseCNN: image {index} has non-finite pixels")
    return x


def canvas_for(size: int) -> int:
    """The canvas (grid pixels) for grids whose longer side is ``size``: ``size`` rounded up to a multiple of 4."""
    return 4 * math.ceil(int(size) / 4)


# --------------------------------------------------------------------------- decoding and scores
def to_numpy(theta: GridPotentials) -> GridPotentials:
    return GridPotentials(*(t.detach().to(torch.float64).numpy() for t in theta))


@torch.no_grad()
def predict(net: HorseCNN, X: Sequence[np.ndarray], *, grid: bool = True, weights: Sequence[float] | None = None,
            batch_size: int = BATCH_CHUNK) -> list[np.ndarray]:
    """(H, W) int64 masks: the min-cut MAP of the potentials (``grid``), or each pixel's sign of its score.

    ``weights`` replaces the learned (contrast, constant) Potts weights (they must be >= 0).
    """
    structure = BinaryGrid()
    w = None if weights is None else torch.as_tensor(weights, dtype=net.head.weight.dtype)
    if w is not None and (w.shape != (2,) or (w < 0).any()):
        raise InvalidInputError(f"weights must be two non-negative numbers (contrast, constant), got {weights}")
    was_training = net.training
    net.eval()
    out = []
    for start in range(0, len(X), batch_size):
        chunk = [torch.as_tensor(x) for x in X[start: start + batch_size]]
        for x, s in zip(chunk, net.scores_batch(chunk)):
            if grid:
                out.append(np.asarray(structure.argmax(to_numpy(net.potentials(x, s, w))), dtype=np.int64))
            else:
                out.append((s.numpy() > 0).astype(np.int64))
    net.train(was_training)
    return out


def evaluate(net: HorseCNN, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], **options: Any) -> dict[str, float]:
    """The grid task's pixel accuracy, foreground IoU and mean per-image IoU of :func:`predict`'s masks."""
    return segmentation_scores(Y, predict(net, X, **options))


def choose_pairwise(net: HorseCNN, X: Sequence[np.ndarray], Y: Sequence[np.ndarray],
                    grid: Sequence[float] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)) -> tuple[float, dict[str, float]]:
    """The contrast-sensitive Potts weight (constant part 0) of ``grid`` with the best foreground IoU on the
    images ``X`` (the training images: the test images are never looked at), and that IoU's scores."""
    best: tuple[float, dict[str, float]] | None = None
    for weight in grid:
        scores = evaluate(net, X, Y, weights=(float(weight), 0.0))
        if best is None or scores["foreground_iou"] > best[1]["foreground_iou"]:
            best = (float(weight), scores)
    assert best is not None
    return best


# --------------------------------------------------------------------------- training
@dataclass
class TrainLog:
    """What :func:`train` measured: per-epoch mean loss, seconds, and the seconds spent in the oracle calls."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    oracle_seconds: float = 0.0
    epochs: int = 0
    resumed: bool = False

    @property
    def oracle_share(self) -> float:
        return self.oracle_seconds / self.seconds if self.seconds else 0.0


def _flip(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(x[:, ::-1]), np.ascontiguousarray(y[:, ::-1])


def _minibatch_loss(net: HorseCNN, xs: list[torch.Tensor], ys: list[np.ndarray], objective: str,
                    log: TrainLog) -> torch.Tensor:
    scores = net.scores_batch(xs)
    if objective == "pixel":
        return torch.stack([F.binary_cross_entropy_with_logits(s, torch.as_tensor(y, dtype=s.dtype))
                            for s, y in zip(scores, ys)]).mean()
    from structopt.losses import Hamming
    from structopt.torch import structured_loss

    thetas = [net.potentials(x, s) for x, s in zip(xs, scores)]
    start = time.perf_counter()
    values = structured_loss(BinaryGrid(), thetas, ys, kind="hinge", loss=Hamming())
    log.oracle_seconds += time.perf_counter() - start
    sizes = torch.tensor([float(y.size) for y in ys], dtype=values.dtype)
    return (values / sizes).mean()


def train(net: HorseCNN, X: Sequence[np.ndarray], Y: Sequence[np.ndarray], *, objective: str = "hinge",
          epochs: int = DEFAULTS["epochs"], batch_size: int = DEFAULTS["batch_size"],
          learning_rate: float = DEFAULTS["learning_rate"], weight_decay: float = DEFAULTS["weight_decay"],
          seed: int = 0, progress: bool | Progress = False,
          on_epoch: Callable[[int, float], None] | None = None, checkpoint: NetCheckpoint | None = None) -> TrainLog:
    """Train ``net`` in place with Adam (cosine-decayed learning rate) on minibatches of images.

    Parameters
    ----------
    objective : {"hinge", "pixel"}
        See the module docstring. (The SparseMAP loss is not offered: one SparseMAP loss of a 36 x 48 grid at
        the initial weights did not finish within about 5 minutes; the hinge's oracle takes about 3 ms an image.)
    seed : int
        Seeds the minibatch order and the flips (the network's initial weights are seeded by whoever built it).
    progress : bool or Progress
        A bar over the minibatches of each epoch, and one stage line per epoch (its mean loss).
    on_epoch : callable, optional
        Called with (epoch, mean loss) after every epoch.
    checkpoint : NetCheckpoint, optional
        Written at every epoch's end and on Ctrl-C (at the end of the current batch); with its ``resume``, the
        run continues from it (:class:`structopt.net_checkpoint.TrainingRun`: the same weights as the
        uninterrupted run).

    Returns
    -------
    TrainLog
    """
    if objective not in OBJECTIVES:
        raise InvalidInputError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if len(X) != len(Y) or not X:
        raise InvalidInputError(f"train: {len(X)} images and {len(Y)} masks (need as many, at least one)")
    for i, (x, y) in enumerate(zip(X, Y)):
        if grid_of(x) != np.shape(y):
            raise InvalidInputError(f"train: image {i} has grid {grid_of(x)} but its mask is {np.shape(y)}")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if int(value) != value or value < 1:
            raise InvalidInputError(f"train: {name} must be a positive integer, got {value}")
    report = as_progress(progress)
    rng = np.random.default_rng(seed)
    n_batches = math.ceil(len(X) / batch_size)
    optimiser = torch.optim.Adam(net.parameters(), lr=learning_rate, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=epochs * n_batches)
    run = TrainingRun(net, optimiser, int(epochs), len(X), scheduler=schedule, rngs=(rng,), torch_global=True,
                      checkpoint=checkpoint, progress=report)
    if run.restore():
        report.stage(f"resuming from {checkpoint.path}: {run.epoch} of {epochs} epochs done")
    log = TrainLog()

    def plan(epoch: int) -> dict[str, Any]:
        order = rng.permutation(len(X))
        flips = rng.random(len(X)) < 0.5
        return {"batches": [order[b * batch_size: (b + 1) * batch_size] for b in range(n_batches)], "flips": flips}

    def step(batch: np.ndarray, plan: dict[str, Any], sums: dict[str, Any]) -> None:
        start = time.perf_counter()
        pairs = [_flip(X[i], Y[i]) if plan["flips"][i] else (X[i], Y[i]) for i in batch]
        xs = [torch.as_tensor(x) for x, _ in pairs]
        oracle = log.oracle_seconds
        loss = _minibatch_loss(net, xs, [y for _, y in pairs], objective, log)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        for key, add in (("loss", float(loss.detach()) * len(batch)), ("seconds", time.perf_counter() - start),
                         ("oracle_seconds", log.oracle_seconds - oracle)):
            sums[key] = sums.get(key, 0.0) + add

    def end(epoch: int, sums: dict[str, Any]) -> dict[str, Any]:
        return {"loss": sums["loss"] / len(X), "seconds": sums["seconds"], "oracle_seconds": sums["oracle_seconds"]}

    def after(epoch: int, record: dict[str, Any]) -> None:
        seconds = sum(r["seconds"] for r in run.records)
        report.stage(f"epoch {epoch}/{epochs}: mean {objective} loss {record['loss']:.4f} ({seconds:.0f} s)")
        if on_epoch is not None:
            on_epoch(epoch - 1, record["loss"])

    net.train()
    try:
        run.run(plan, step, end, after, label=f" ({objective})")
    finally:
        net.eval()
    log.losses = [r["loss"] for r in run.records]
    log.seconds = float(sum(r["seconds"] for r in run.records))
    log.oracle_seconds = float(sum(r["oracle_seconds"] for r in run.records))
    log.epochs, log.resumed = len(run.records), run.resumed
    return log


#: the name :func:`horses_cnn` is declared under (``structopt train horses --net cnn`` builds it)
NETWORK = "horses_cnn"


@register_network(NETWORK)
def horses_cnn(canvas: int = DEFAULT_SIZE, width: int = DEFAULTS["width"]) -> HorseCNN:
    """The declared constructor of :class:`HorseCNN` (a :class:`~structopt.torch.TorchModel` rebuilds it by name)."""
    return HorseCNN(canvas=canvas, width=width)


def network_args(size: int = DEFAULT_SIZE, width: int = DEFAULTS["width"]) -> dict[str, int]:
    """The JSON arguments of :func:`horses_cnn` for grids of longer side ``size``."""
    return {"canvas": canvas_for(size), "width": int(width)}


def build(size: int = DEFAULT_SIZE, width: int = DEFAULTS["width"], seed: int = 0) -> HorseCNN:
    """A freshly initialised :class:`HorseCNN` for grids of longer side ``size`` (weights seeded by ``seed``, as
    ``TorchModel(BinaryGrid(), NETWORK, network_args(size, width), seed=seed).module`` is)."""
    torch.manual_seed(seed)
    return horses_cnn(**network_args(size, width))
